"""Small defects a new user meets on the first day: tab-separated files, a closed pipe, messages in
the command line's words, examples in refusals, the line of a malformed row, honest summaries,
counts shown as counts and a bare string where a list of columns is expected."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt._csv import csv_dialect
from pramopt.cli import main
from pramopt.errors import InvalidParameterError
from pramopt.example import EXAMPLE_QI

ROOT = Path(__file__).resolve().parents[1]
QI = list(EXAMPLE_QI)
QI_FLAG = ",".join(QI)


def run_main(*argv):
    """main(argv) with stdout and stderr captured: (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The example as .csv, .tsv and .txt (tab-separated), and its design from the .csv."""
    tmp = tmp_path_factory.mktemp("everyday")
    data = pramopt.example_data()
    data.to_csv(tmp / "data.csv", index=False)
    data.to_csv(tmp / "data.tsv", index=False, sep="\t")
    data.to_csv(tmp / "data.txt", index=False, sep="\t")
    code, _, err = run_main(
        "design", "--data", tmp / "data.csv", "--qi", QI_FLAG, "--out", tmp / "d", "-q"
    )
    assert code == 0, err
    return dict(tmp=tmp, data=data, design=tmp / "d")


# --- tab-separated files --------------------------------------------------------------------


def test_tsv_reads_with_a_tab_by_default_and_is_released_and_estimated_as_tsv(files):
    tmp = files["tmp"]
    # the same table from the .tsv without --sep as from the .csv
    tsv = pramopt.count_file(tmp / "data.tsv", QI, keys_as_text=True)
    csv = pramopt.count_file(tmp / "data.csv", QI, keys_as_text=True)
    assert tsv.checksum() == csv.checksum()
    code, _, err = run_main(
        "release", "--design", files["design"], "--data", tmp / "data.tsv", "--out",
        tmp / "rel.tsv", "--seed", 1, "-q",
    )  # fmt: skip
    assert code == 0, err
    rel = pd.read_csv(tmp / "rel.tsv", sep="\t")
    assert list(rel.columns) == list(files["data"].columns) and len(rel) == len(files["data"])
    code, _, err = run_main(
        "estimate", "--design", files["design"], "--data", tmp / "rel.tsv", "--out",
        tmp / "est.tsv", "-q",
    )  # fmt: skip
    assert code == 0, err
    est = pd.read_csv(tmp / "est.tsv", sep="\t")
    assert est["observed"].sum() == len(files["data"])


def test_txt_is_a_csv_family_file_with_sep(files):
    tmp = files["tmp"]
    code, out, err = run_main(
        "estimate", "--design", files["design"], "--data", tmp / "data.txt", "--sep", "\\t"
    )
    assert code == 0, err
    assert out.splitlines()[0].split("\t")[:2] == QI[:2]
    # a release of a .txt is a .txt in the same dialect (streamed, every other field as read)
    code, _, err = run_main(
        "release", "--design", files["design"], "--data", tmp / "data.txt", "--sep", "\\t",
        "--out", tmp / "rel.txt", "--seed", 2, "-q",
    )  # fmt: skip
    assert code == 0, err
    assert (tmp / "rel.txt").read_text().splitlines()[0] == "\t".join(files["data"].columns)
    df = pramopt.io.read_table(tmp / "data.txt", dialect=csv_dialect(sep="\t"))
    pd.testing.assert_frame_equal(df, files["data"])


def test_sensitivity_reads_and_writes_tsv(tmp_path):
    (tmp_path / "in.tsv").write_text("cell\tcontribution\nns\t59\nns\t40\nns\t1\ns\t61\ns\t39\n")
    code, _, err = run_main(
        "sensitivity", tmp_path / "in.tsv", "--n", 1, "--k", 0.6, "--p", 0.1, "--t", 0.5,
        "--out", tmp_path / "out.tsv",
    )  # fmt: skip
    assert code == 0, err
    res = pd.read_csv(tmp_path / "out.tsv", sep="\t").set_index("cell")
    assert res.loc["ns", "coalition_bound"] == 60


# --- a closed pipe --------------------------------------------------------------------------


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader has gone (``| head -1``): every write raises BrokenPipeError."""

    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_closed_pipe_is_not_bad_input(files, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    monkeypatch.setattr(sys, "stderr", err)
    code = main(
        ["estimate", "--design", str(files["design"]), "--data", str(files["tmp"] / "data.csv")]
    )
    assert code == 141
    assert err.getvalue() == ""


def test_closed_pipe_in_a_subprocess_exits_quietly(files):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["estimate", "--design", files["design"], "--data", files["tmp"] / "data.csv"]
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first write, as `head -1` goes after one line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pramopt", *map(str, args)],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write)
    err = proc.stderr.decode()
    # nothing said, not even by the interpreter flushing standard output at exit
    assert proc.returncode == 141 and err == "", (proc.returncode, err)


# --- messages in the command line's words ---------------------------------------------------


def test_too_many_categories_names_the_flag(files):
    tmp = files["tmp"]
    many = pd.DataFrame({"a": [f"x{i}" for i in range(150)], "b": [0, 1] * 75})
    many["h"], many["c"] = np.arange(150) // 2, (np.arange(150) // 2) % 3
    many.to_csv(tmp / "many.csv", index=False)
    common = ["--alpha", 0.1, "--max-categories", 100, "-q"]
    # counted from the file in batches (check_categories) ...
    code, _, err = run_main(
        "design", "--data", tmp / "many.csv", "--qi", "a,b", "--out", tmp / "dm", *common
    )
    assert code == 2 and "--max-categories 100" in err and "max_categories" not in err, err
    # ... and in memory (encode_column), as a household design reads its records
    code, _, err = run_main(
        "design", "--data", tmp / "many.csv", "--qi", "a,b,c", "--household", "h",
        "--household-keys", "c", "--out", tmp / "dh", *common,
    )  # fmt: skip
    assert code == 2 and "--max-categories 100" in err and "max_categories" not in err, err


def test_in_flags_rewrites_parameter_names_and_values():
    from pramopt.cli import _in_flags, build_parser

    parser = build_parser()
    args = parser.parse_args(["design", "--data", "x.csv", "--qi", "a"])
    said = _in_flags("raise the 'max_categories' parameter, now max_categories=100", parser, args)
    assert said == "raise --max-categories, now --max-categories 100"
    # a value that is not the flag's (None) and a name that is no flag stay as they are
    kept = "got alpha=None; fewer than max_iterations=3"
    assert _in_flags(kept, parser, args) == kept


# --- an unwritable folder -------------------------------------------------------------------


def test_unwritable_folder_says_plainly_why(files):
    if not os.path.isdir("/proc") or not os.access("/proc", os.W_OK):
        pytest.skip("needs Linux's /proc as root (a folder that refuses new files)")
    code, out, err = run_main(
        "estimate", "--design", files["design"], "--data", files["tmp"] / "data.csv", "--out",
        "/proc/x.csv",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert "the folder '/proc' does not accept new files" in err, err
    assert "is not writable (No such file" not in err


# --- examples in a refusal ------------------------------------------------------------------


def test_refusal_shows_distinct_examples_and_how_many(files):
    tmp = files["tmp"]
    bad = files["data"].astype({q: str for q in QI})
    bad.loc[:4, QI] = ["N/A", "0", "0", "0", "0"]  # five records with the same unknown values
    bad.to_csv(tmp / "bad.csv", index=False)
    # streamed from the file
    code, _, err = run_main(
        "release", "--design", files["design"], "--data", tmp / "bad.csv", "--out",
        tmp / "r.csv", "--seed", 1, "-q",
    )  # fmt: skip
    assert code == 2 and "5 records of this batch" in err, err
    assert err.count("'v1': 'N/A'") == 1, err
    assert "{'v1': 'N/A', 'v2': '0', 'v3': '0', 'v4': '0', 'v5': '0'} (5 records)" in err, err
    assert not (tmp / "r.csv").exists()
    # in memory: the first three distinct records, each with its count, and how many others
    bad.loc[5:6, QI] = ["N/A", "1", "1", "1", "1"]
    bad.loc[7, QI] = ["N/A", "0", "1", "0", "0"]
    with pytest.raises(pramopt.DesignMismatchError) as e:
        pramopt.estimate(bad, pramopt.load_design(files["design"]))
    said = str(e.value)
    assert said.startswith("8 records of the data fall in cells the design does not have"), said
    assert said.count("'v1': 'N/A'") == 3 and "and 1 other combination of values" not in said
    assert "'v5': '0'} (5 records), {'v1': 'N/A', 'v2': '1', 'v3': '1'" in said, said
    assert "'v5': '1'} (2 records), {'v1': 'N/A', 'v2': '0', 'v3': '1'" in said, said
    bad.loc[8, QI] = ["N/A", "1", "0", "0", "0"]
    with pytest.raises(pramopt.DesignMismatchError, match="and 1 other combination of values"):
        pramopt.estimate(bad, pramopt.load_design(files["design"]))


# --- the line of a malformed row ------------------------------------------------------------


def test_malformed_row_names_its_line(files):
    tmp = files["tmp"]
    lines = (tmp / "data.csv").read_text().splitlines(keepends=True)
    lines[1499] = lines[1499].rstrip("\n") + ",9\n"  # line 1500: one field too many
    (tmp / "ragged.csv").write_text("".join(lines))
    code, _, err = run_main(
        "design", "--data", tmp / "ragged.csv", "--qi", QI_FLAG, "--out", tmp / "dr", "-q"
    )
    assert code == 2 and "line 1500" in err, err
    code, _, err = run_main(
        "release", "--design", files["design"], "--data", tmp / "ragged.csv", "--out",
        tmp / "rr.csv", "-q",
    )  # fmt: skip
    assert code == 2 and "line 1500" in err, err
    with pytest.raises(InvalidParameterError, match="line 1500"):
        pramopt.count_file(tmp / "ragged.csv", QI, batch_size=100)


# --- the summary says what was asked --------------------------------------------------------


def test_default_gamma_is_not_said_to_be_requested(files):
    res = pramopt.design(files["data"], QI, 0.1)
    assert "gamma = 0.95 (the default)" in res.summary()
    assert "as requested" not in res.summary()
    asked = pramopt.design(files["data"], QI, 0.1, gamma=0.9, structure="general")
    assert "gamma = 0.9 (as requested)" in asked.summary()


# --- counts are whole numbers ---------------------------------------------------------------


def test_observed_counts_print_as_integers(files):
    code, out, err = run_main(
        "estimate", "--design", files["design"], "--data", files["tmp"] / "data.csv"
    )
    assert code == 0, err
    est = pd.read_csv(io.StringIO(out))
    assert pd.api.types.is_integer_dtype(est["observed"])
    assert ",452," in out and "452.0" not in out
    res = pramopt.load_design(files["design"])
    lib = pramopt.estimate(files["data"].astype({q: str for q in QI}), res)
    assert pd.api.types.is_integer_dtype(lib["observed"])


# --- a bare string for qi -------------------------------------------------------------------


def test_qi_as_a_bare_string_is_refused(files, tmp_path):
    df = files["data"].assign(roof=files["data"]["v1"], h=np.arange(len(files["data"])) // 2)
    want = "must be a list of column names; got the string 'roof' (write ['roof'])"
    with pytest.raises(InvalidParameterError, match=r"The 'qi' parameter of design " + want[:20]):
        pramopt.design(df, "roof", 0.1)
    with pytest.raises(InvalidParameterError, match=r"\(write \['roof'\]\)"):
        pramopt.design(df, "roof", 0.1, household="h")
    with pytest.raises(InvalidParameterError, match=r"\(write \['v1'\]\)"):
        pramopt.frequency_table(df, "v1")
    with pytest.raises(InvalidParameterError, match=r"\(write \['v1'\]\)"):
        pramopt.count_file(files["tmp"] / "data.csv", "v1")
    # a list of one name is the way to say it
    assert pramopt.frequency_table(df, ["roof"]).qi == ("roof",)


def test_estimate_and_assess_refuse_a_household_design_in_one_sentence(tmp_path):
    """A household design's release reaches value combinations no record has: estimate and
    assess, which take a person-level design, refuse it before reading data, in one sentence,
    instead of a mismatch after reading or a traceback."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import pramopt
    from pramopt.cli import main
    from pramopt.households.kind import example_households

    df, qi, opts = example_households()
    src = tmp_path / "hh.csv"
    df.to_csv(src, index=False)
    argv = ["--qi", ",".join(qi), "--household", opts["household"], "--alpha", opts["alpha"]]

    def run(*a):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(x) for x in a])
        return code, err.getvalue()

    code, err = run("design", "--data", src, *argv, "--out", tmp_path / "d", "-q")
    assert code == 0, err
    code, err = run("release", "--design", tmp_path / "d", "--data", src, "--out",
                    tmp_path / "r.csv", "--seed", 7, "-q")  # fmt: skip
    assert code == 0, err
    for cmd in (
        ["estimate", "--design", tmp_path / "d", "--data", tmp_path / "r.csv"],
        ["assess", "--matrix", tmp_path / "d", "--data", src, "--qi", ",".join(qi)],
    ):
        code, err = run(*cmd)
        assert code == 2 and "household design" in err and "Traceback" not in err, err
        assert len([ln for ln in err.splitlines() if ln.strip()]) == 1
    res = pramopt.load_design(tmp_path / "d")
    with pytest.raises(pramopt.InvalidParameterError, match="household design"):
        pramopt.estimate(df, res)
