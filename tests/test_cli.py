"""The command line: outputs re-read independently, refusals, exit codes, atomic writes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.cli import main
from pramopt.cli._common import Progress
from pramopt.example import EXAMPLE_QI

ROOT = Path(__file__).resolve().parents[1]
QI = list(EXAMPLE_QI)


def run_main(*argv):
    """main(argv) with stdout and stderr captured: (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def run_cli(*argv, cwd=None):
    """``python -m pramopt ...`` in a subprocess, with this checkout first on the path."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "pramopt", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def matrix_from_long(path, cells: pd.DataFrame) -> np.ndarray:
    """Rebuild P from a long CSV with pandas only, in the order of ``cells``."""
    long = pd.read_csv(path)
    key = {tuple(r): i for i, r in enumerate(cells.itertuples(index=False))}
    P = np.zeros((len(cells), len(cells)))
    for row in long.itertuples(index=False):
        d = row._asdict()
        i = key[tuple(d[f"from_{q}"] for q in cells.columns)]
        j = key[tuple(d[f"to_{q}"] for q in cells.columns)]
        P[i, j] += d["probability"]
    return P


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example designed by the library directly and by ``pramopt design`` into a folder."""
    tmp = tmp_path_factory.mktemp("cli")
    data = pramopt.example_data()
    data.to_csv(tmp / "data.csv", index=False)
    ref = pramopt.design(data, QI, 0.1)
    code, out, err = run_main(
        "design",
        "--data",
        tmp / "data.csv",
        "--qi",
        ",".join(QI),
        "--alpha",
        0.1,
        "--out",
        tmp / "d",
    )
    return dict(tmp=tmp, data=data, ref=ref, code=code, out=out, err=err, dir=tmp / "d")


def test_design_writes_matrix_equal_to_library_result(example):
    assert example["code"] == 0, example["err"]
    d = example["dir"]
    assert {p.name for p in d.iterdir()} == {
        "design.json",
        "matrix.csv",
        "report.html",
        "report.md",
    }
    ref = example["ref"]
    P = matrix_from_long(d / "matrix.csv", ref.cells)
    np.testing.assert_allclose(P, ref.to_dense(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
    # no temporary files left next to the output
    assert sorted(p.name for p in example["tmp"].iterdir()) == ["d", "data.csv"]


def test_design_json_counts_and_checksum_match_the_data(example):
    rec = json.loads((example["dir"] / "design.json").read_text())
    # the command line keeps identifying values as the text written in the file
    data = pd.read_csv(example["tmp"] / "data.csv", dtype=str)
    # counts recomputed with pandas, independent of pramopt's frequency table
    grouped = data.groupby(QI).size()
    cells = pd.DataFrame(rec["codes"], columns=QI)
    for j, q in enumerate(QI):
        cells[q] = [rec["categories"][j][c] for c in cells[q]]
    assert [grouped[tuple(r)] for r in cells.itertuples(index=False)] == rec["counts"]
    assert rec["table_checksum"] == pramopt.frequency_table(data, QI).checksum()
    assert rec["status"] == "success" and rec["qi"] == QI
    loaded = pramopt.io.load_design(example["dir"])
    np.testing.assert_array_equal(loaded.to_dense(), example["ref"].to_dense())
    assert loaded.success and loaded.alpha == 0.1


def test_release_subprocess_reproducible_and_keeps_other_columns(example):
    tmp = example["tmp"]
    r1 = run_cli(
        "release",
        "--design",
        example["dir"],
        "--data",
        tmp / "data.csv",
        "--out",
        tmp / "r1.csv",
        "--seed",
        5,
    )
    assert r1.returncode == 0, r1.stderr
    r2 = run_cli(
        "release",
        "--design",
        example["dir"],
        "--data",
        tmp / "data.csv",
        "--out",
        tmp / "r2.parquet",
        "--seed",
        5,
        "-q",
    )
    assert r2.returncode == 0, r2.stderr
    # identifying values are text as written in the CSV, in both outputs
    a, b = (
        pd.read_csv(tmp / "r1.csv", dtype={q: str for q in QI}),
        pd.read_parquet(tmp / "r2.parquet"),
    )
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    orig = example["data"]
    assert len(a) == len(orig)
    np.testing.assert_allclose(a["income"], orig["income"])
    changed = int((a[QI].to_numpy() != orig[QI].astype(str).to_numpy()).any(axis=1).sum())
    # expected changes are 7.5; a draw with more than 40 changes is out of any reasonable range
    assert changed <= 40


def test_estimate_sums_to_n_and_by_column(example):
    tmp = example["tmp"]
    assert (
        main(
            [
                "release",
                "--design",
                str(example["dir"]),
                "--data",
                str(tmp / "data.csv"),
                "--out",
                str(tmp / "rel.csv"),
                "--seed",
                "1",
                "-q",
            ]
        )
        == 0
    )
    code, out, err = run_main("estimate", "--design", example["dir"], "--data", tmp / "rel.csv")
    assert code == 0, err
    est = pd.read_csv(io.StringIO(out))
    # P 1 = 1 implies 1' P^-1 = ... sum of the estimates = number of records
    assert est["estimate"].sum() == pytest.approx(len(example["data"]), rel=1e-9)
    assert est["observed"].sum() == len(example["data"])
    rel = pd.read_csv(tmp / "rel.csv")
    rel["band"] = np.where(rel["income"] > rel["income"].median(), "high", "low")
    rel.to_csv(tmp / "rel_band.csv", index=False)
    code, _, err = run_main(
        "estimate",
        "--design",
        example["dir"],
        "--data",
        tmp / "rel_band.csv",
        "--by",
        "band",
        "--out",
        tmp / "est.parquet",
    )
    assert code == 0, err
    e = pd.read_parquet(tmp / "est.parquet")
    assert e.groupby("band")["estimate"].sum().to_dict() == pytest.approx(
        rel["band"].value_counts().to_dict(), rel=1e-9
    )


def _tampered(src: Path, dst: Path, edit) -> Path:
    import shutil

    shutil.copytree(src, dst)
    rec = json.loads((dst / "design.json").read_text())
    edit(rec)
    (dst / "design.json").write_text(json.dumps(rec))
    return dst


def test_release_refuses_tampered_design(example):
    tmp = example["tmp"]

    def bump(rec):
        rec["matrix"]["values"][0] = 1.0

    d = _tampered(example["dir"], tmp / "t1", bump)
    code, _, err = run_main(
        "release", "--design", d, "--data", tmp / "data.csv", "--out", tmp / "x.csv"
    )
    assert code == 2 and "modified" in err and "Traceback" not in err
    assert not (tmp / "x.csv").exists()

    def identity(rec):
        # a forger who also recomputes the matrix checksum: the re-verification of C1 catches it
        K = len(rec["counts"])
        rec["matrix"] = {
            "shape": [K, K],
            "rows": list(range(K)),
            "cols": list(range(K)),
            "values": [1.0] * K,
        }
        # the checksum of the file format: shape, then rows, columns (int64) and values (float64)
        h = hashlib.sha256(repr((K, K)).encode())
        for a in (np.arange(K, dtype="<i8"), np.arange(K, dtype="<i8"), np.ones(K, dtype="<f8")):
            h.update(a.tobytes())
        rec["matrix_sha256"] = h.hexdigest()
        guarded = (
            "format",
            "method",
            "table_checksum",
            "matrix_sha256",
            "status",
            "alpha",
            "combinations",
            "files",
        )
        text = json.dumps({k: rec.get(k) for k in guarded}, sort_keys=True, separators=(",", ":"))
        rec["record_sha256"] = hashlib.sha256(text.encode()).hexdigest()

    d = _tampered(example["dir"], tmp / "t2", identity)
    code, _, err = run_main(
        "release", "--design", d, "--data", tmp / "data.csv", "--out", tmp / "x.csv"
    )
    assert code == 2 and "fails C1" in err
    assert not (tmp / "x.csv").exists()


def test_release_refuses_edited_status_alpha_or_combinations(example):
    # the fields that decide whether a release is safe are checksummed like the matrix
    tmp = example["tmp"]
    edits = {
        "status": lambda rec: rec.update(status="unverified"),
        "alpha": lambda rec: rec.update(alpha=0.99),
        "combinations": lambda rec: rec.update(combinations=[]),
    }
    for name, edit in edits.items():
        d = _tampered(example["dir"], tmp / f"e-{name}", edit)
        code, _, err = run_main(
            "release", "--design", d, "--data", tmp / "data.csv", "--out", tmp / "x.csv"
        )
        assert code == 2 and "modified" in err, (name, err)
        assert not (tmp / "x.csv").exists()


def test_release_refuses_other_data(example):
    tmp = example["tmp"]
    other = example["data"].iloc[1:]
    other.to_csv(tmp / "other.csv", index=False)
    code, _, err = run_main(
        "release", "--design", example["dir"], "--data", tmp / "other.csv", "--out", tmp / "x.csv"
    )
    assert code == 2 and "other data" in err
    swapped = example["data"].copy()
    swapped.loc[0, "v5"] = 7  # a value the design has never seen
    swapped.to_csv(tmp / "swapped.csv", index=False)
    code, _, err = run_main(
        "release", "--design", example["dir"], "--data", tmp / "swapped.csv", "--out", tmp / "x.csv"
    )
    assert code == 2 and "do not match" in err
    assert not (tmp / "x.csv").exists()


def test_failed_design_exits_1_and_cannot_be_released(tmp_path):
    # n = 5 < 1/alpha = 10: C1 cannot hold for any matrix
    df = pd.DataFrame({"a": [0, 0, 1, 1, 1], "b": [0, 1, 0, 1, 1]})
    df.to_csv(tmp_path / "tiny.csv", index=False)
    code, out, err = run_main(
        "design",
        "--data",
        tmp_path / "tiny.csv",
        "--qi",
        "a,b",
        "--alpha",
        0.1,
        "--out",
        tmp_path / "d",
        "-q",
    )
    assert code == 1
    assert json.loads((tmp_path / "d" / "design.json").read_text())["status"] == "infeasible_data"
    code, _, err = run_main(
        "release",
        "--design",
        tmp_path / "d",
        "--data",
        tmp_path / "tiny.csv",
        "--out",
        tmp_path / "r.csv",
    )
    assert code == 2 and "infeasible_data" in err
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["design", "--data", "{d}", "--qi", "v1,nope"], "nope"),
        (["design", "--data", "{d}", "--qi", "v1,v2", "--alpha", "1.5"], "alpha"),
        (["design", "--data", "{tmp}/missing.csv", "--qi", "v1"], "no such file"),
        (["design", "--data", "{tmp}/data.xlsx", "--qi", "v1"], ".csv"),
        (["assess", "--matrix", "{tmp}/missing.csv", "--data", "{d}", "--qi", "v1"], "missing.csv"),
    ],
)
def test_bad_input_exits_2_without_traceback(example, argv, needle):
    tmp = example["tmp"]
    argv = [a.format(d=tmp / "data.csv", tmp=tmp) for a in argv] + ["--out", str(tmp / "bad")]
    code, _, err = run_main(*argv)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert not (tmp / "bad").exists()


def test_usage_error_exit_2_in_subprocess(tmp_path):
    r = run_cli("design", "--alpha", "not-a-number", cwd=tmp_path)
    assert r.returncode == 2 and "invalid float" in r.stderr
    r = run_cli("release", "--design", "x", cwd=tmp_path)  # missing required options
    assert r.returncode == 2
    assert list(tmp_path.iterdir()) == []


def test_no_arguments_designs_the_example(tmp_path):
    r = run_cli("design", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "design-example" / "design.json").read_text())
    assert rec["qi"] == QI and rec["status"] == "success"
    assert rec["table_checksum"] == pramopt.frequency_table(pramopt.example_data(), QI).checksum()


@pytest.mark.parametrize("cmd", ["design", "release", "assess", "baseline", "estimate"])
def test_help_has_an_example(cmd):
    code, out, _ = run_main(cmd, "--help")
    assert code == 0 and "example" in out and f"pramopt {cmd}" in out


def test_sensitivity_is_wired():
    code, out, _ = run_main("sensitivity", "--help")
    assert code == 0 and "dominance" in out


def test_interrupt_exits_130_and_writes_nothing(example, tmp_path, monkeypatch):
    import pramopt.cli._common as cli
    import pramopt.optimize.designer as designer

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(designer, "design", boom)
    code, _, err = run_main("design", "--out", tmp_path / "d")
    assert code == 130 and "interrupted" in err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()

    # interrupted while writing the reports: the new design was saved first, whole (a report
    # cannot lose it), and the message says so; no report and no temporary file is left
    import shutil

    shutil.copytree(example["dir"], tmp_path / "d")
    monkeypatch.setattr(cli, "render_markdown", boom)
    code, _, err = run_main("design", "--out", tmp_path / "d", "--alpha", 0.2, "--force")
    assert code == 130
    assert f"the design was saved at {tmp_path / 'd'}" in err
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["design.json", "matrix.csv"]
    assert pramopt.load_design(tmp_path / "d").alpha == 0.2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_refuses_to_replace_a_folder_that_is_not_a_design(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("mine")
    code, _, err = run_main("design", "--out", tmp_path / "d", "-q")
    assert code == 2 and "not a design folder" in err
    assert (tmp_path / "d" / "keep.txt").read_text() == "mine"


def test_parquet_in_and_out(example, tmp_path):
    example["data"].to_parquet(tmp_path / "data.parquet", index=False)
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "data.parquet",
        "--qi",
        ",".join(QI),
        "--out",
        tmp_path / "d",
        "-q",
    )
    assert code == 0, err
    code, _, err = run_main(
        "release",
        "--design",
        tmp_path / "d",
        "--data",
        tmp_path / "data.parquet",
        "--out",
        tmp_path / "r.pq",
        "--seed",
        3,
        "-q",
    )
    assert code == 0, err
    r = pd.read_parquet(tmp_path / "r.pq")
    assert list(r.columns) == list(example["data"].columns) and len(r) == len(example["data"])
    # every released cell is one of the design's cells
    assert set(map(tuple, r[QI].to_numpy())) <= set(map(tuple, example["data"][QI].to_numpy()))


def test_assess_long_square_and_folder_agree_with_the_design(example, tmp_path):
    ref = example["ref"]
    tmp = example["tmp"]
    # a square labelled CSV, as another tool would write it
    square = ref.cells.copy()
    for j in range(len(ref.cells)):
        square[f"c{j}"] = ref.to_dense()[:, j]
    square.to_csv(tmp_path / "square.csv", index=False)
    for m in (example["dir"], example["dir"] / "matrix.csv", tmp_path / "square.csv"):
        code, out, err = run_main(
            "assess",
            "--matrix",
            m,
            "--data",
            tmp / "data.csv",
            "--qi",
            ",".join(QI),
            "--alpha",
            0.1,
            "--json",
        )
        assert code == 0, err
        a = json.loads(out)
        assert a["max_risk"] == pytest.approx(ref.max_risk, rel=1e-9)
        assert a["expected_changes"] == pytest.approx(ref.expected_changes, rel=1e-9)
        assert a["meets_c1"] is True


def test_assess_of_identity_reports_the_raw_risk_and_fails(example, tmp_path):
    data = example["data"]
    cells = data[QI].drop_duplicates().reset_index(drop=True)
    long = pd.concat([cells.add_prefix("from_"), cells.add_prefix("to_")], axis=1).assign(
        probability=1.0
    )
    long.to_csv(tmp_path / "id.csv", index=False)
    code, out, err = run_main(
        "assess",
        "--matrix",
        tmp_path / "id.csv",
        "--data",
        example["tmp"] / "data.csv",
        "--qi",
        ",".join(QI),
        "--alpha",
        0.1,
        "--json",
        "--out",
        tmp_path / "rep",
    )
    assert code == 1, err
    from itertools import combinations

    worst = max(1.0 / data.groupby(list(c)).size().min() for c in combinations(QI, 3))
    assert json.loads(out)["max_risk"] == pytest.approx(worst)
    assert {p.name for p in (tmp_path / "rep").iterdir()} == {
        "report.html",
        "report.md",
        "assessment.json",
    }
    assert "data:image/png;base64," in (tmp_path / "rep" / "report.html").read_text()


def test_baseline_outputs_like_design(example, tmp_path):
    code, out, err = run_main(
        "baseline",
        "retention",
        "--data",
        example["tmp"] / "data.csv",
        "--qi",
        ",".join(QI),
        "--alpha",
        0.1,
        "--out",
        tmp_path / "rr",
        "-q",
    )
    rec = json.loads((tmp_path / "rr" / "design.json").read_text())
    P = matrix_from_long(tmp_path / "rr" / "matrix.csv", example["ref"].cells)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
    risk = pramopt.assess(example["data"], P, qi=QI).max_risk
    assert code == (0 if risk <= 0.1 else 1)
    assert rec["status"] == ("success" if risk <= 0.1 else "infeasible")
    # equal security: the optimal design loses no more than the calibrated closed form
    assert example["ref"].loss <= pramopt.assess(example["data"], P, qi=QI).loss * (1 + 1e-9)


def test_progress_prints_only_after_a_second():
    t = [0.0]
    buf = io.StringIO()
    p = Progress(stream=buf, after=1.0, every=0.5, clock=lambda: t[0])
    p("linear", 1, 1e-3, 4)
    t[0] = 0.9
    p("refine", 2, 1e-4, 0.1)
    assert buf.getvalue() == ""
    t[0] = 1.1
    p("refine", 3, 2e-5, 0.05)
    t[0] = 1.2
    p("refine", 4, 1e-5, 0.05)  # within 0.5 s of the last line: throttled
    t[0] = 1.7
    p("refine", 5, 9e-6, 0.01)
    lines = buf.getvalue().splitlines()
    assert (
        len(lines) == 2
        and "refine" in lines[0]
        and "iteration    3" in lines[0]
        and "2e-05" in lines[0]
    )


def test_design_stages_are_shown_on_stderr_and_the_library_prints_none(example, tmp_path, capsys):
    # the CLI's stage log shows every finished stage with the elapsed time (the "pramopt.design"
    # logger); the same design from the API alone prints nothing
    from pramopt.cli._common import stage_log

    df, qi = pramopt.example_data(), list(pramopt.example.EXAMPLE_QI)
    buf = io.StringIO()
    with stage_log(False, stream=buf, after=0.0):
        pramopt.design(df, qi, alpha=0.1)
    names = [
        ln.split("] ", 1)[1].split(":")[0]
        for ln in buf.getvalue().splitlines()
        if ln.startswith("pramopt: [")
    ]
    assert {"model", "check P=I", "floor bound", "verify"} <= set(names)
    capsys.readouterr()
    pramopt.design(df, qi, alpha=0.1)
    assert capsys.readouterr() == ("", "")


def test_quiet_prints_nothing(example, tmp_path):
    code, out, err = run_main("design", "--out", tmp_path / "d", "-q")
    assert code == 0 and out == "" and err == ""


def test_assess_matrix_on_the_whole_product_space(example, tmp_path):
    # a matrix made elsewhere on all 48 cells (one absent from the data): 2% spread uniformly
    import itertools

    cells = pd.DataFrame(
        list(itertools.product([0, 1], [0, 1], [0, 1], [0, 1], [0, 1, 2])), columns=QI
    )
    K = len(cells)
    P = np.full((K, K), 0.02 / (K - 1))
    np.fill_diagonal(P, 0.98)
    long = pd.concat(
        [
            cells.iloc[np.repeat(np.arange(K), K)].reset_index(drop=True).add_prefix("from_"),
            cells.iloc[np.tile(np.arange(K), K)].reset_index(drop=True).add_prefix("to_"),
        ],
        axis=1,
    )
    long["probability"] = P.ravel()
    long.to_csv(tmp_path / "full.csv", index=False)
    code, out, err = run_main(
        "assess",
        "--matrix",
        tmp_path / "full.csv",
        "--data",
        example["tmp"] / "data.csv",
        "--qi",
        ",".join(QI),
        "--json",
        "--out",
        tmp_path / "rep",
    )
    a = json.loads(out)
    assert code == (0 if a["meets_c1"] else 1), err  # C1 judged at the default alpha
    assert a["n_cells"] == K and a["n_present"] == len(example["ref"].counts)
    # every record leaves its cell with probability 0.02
    assert a["expected_changes"] == pytest.approx(0.02 * len(example["data"]))
    assert (tmp_path / "rep" / "report.html").stat().st_size > 10000
