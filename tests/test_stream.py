"""Streaming count and release of CSV and Parquet files (pramopt.stream).

The reference for counting is pandas: ``frequency_table`` on the frame pandas reads, and
``groupby(...).size()`` computed here without pramopt.  The reference for the release is the
in-memory ``pramopt.release`` of the frame pandas reads, with the same seed (the same records
however the input is split), and P itself for the distribution of the draws.
"""

from __future__ import annotations

import csv
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pramopt
from pramopt import InvalidParameterError, count_file, release_file
from pramopt.errors import DesignMismatchError
from pramopt.publish.sampling import BLOCK
from pramopt.result import DesignResult, Status

TD_KEYS = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]
SYN_KEYS = ["a", "b", "c", "d", "e"]
ROOT = Path(__file__).resolve().parents[1]


def fake_design(table, P=None, stay=0.7, seed=1) -> DesignResult:
    """A design result around ``table`` with a given (or random) P, marked as verified.

    Only the release machinery is under test here; the safety of P is not.
    """
    K = table.n_cells
    if P is None:
        rng = np.random.default_rng(seed)
        Q = rng.random((K, K)) * (rng.random((K, K)) < 0.3)
        Q[np.arange(K), (np.arange(K) + 1) % K] += 0.1  # every row moves somewhere
        P = (1 - stay) * Q / Q.sum(axis=1, keepdims=True) + stay * np.eye(K)
    # alpha = 1: every matrix meets C1 at 1 (each left-hand side is at most 1/U0(m)), so the
    # release's own re-check of C1 lets any P through
    return DesignResult(
        matrix=P,
        status=Status.SUCCESS,
        loss=0.0,
        expected_changes=0.0,
        max_risk=0.0,
        min_diagonal=float(np.min(np.diag(P))),
        gamma=None,
        binding_rows=(),
        reduction=None,
        solver=None,
        stages=(),
        condition_number=1.0,
        message="",
        alpha=1.0,
        qi=table.qi,
        combinations=(table.qi,),
        table=table,
    )


def assert_same_table(a, b):
    assert a.qi == b.qi
    for x, y in zip(a.categories, b.categories):
        assert x.equals(y) and x.dtype == y.dtype, (x, y)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.counts, b.counts)
    assert a.checksum() == b.checksum()


def assert_counts_match_pandas(table, df, qi):
    """Counts of every cell equal pandas' groupby sizes (missing values grouped together)."""
    sizes = df.groupby(qi, dropna=False).size()
    assert table.n == len(df) and table.n_cells == len(sizes)
    cells = table.cells()
    lookup = {
        tuple("<NA>" if pd.isna(v) else v for v in (k if isinstance(k, tuple) else (k,))): int(c)
        for k, c in sizes.items()
    }
    for row, count in zip(cells.itertuples(index=False), table.counts):
        assert lookup[tuple("<NA>" if pd.isna(v) else v for v in row)] == count


def md5(path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def synthetic(n=3000, seed=0) -> pd.DataFrame:
    """Key columns with missing values, quoting hazards and a type that changes at the very end."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "a": rng.choice([1, 2, 3], n).astype(float),
            "b": rng.choice(["x", "y", "z,w", 'q"r', "line\nbreak", None], n),
            "c": rng.choice([1.5, 2.0, np.nan], n, p=[0.5, 0.49, 0.01]),
            "d": rng.choice([True, False], n),
            "e": rng.choice(["01", "1", "NA", "a"], n),
            "income": np.round(rng.lognormal(10, 0.5, n), 2),
            "note": rng.choice(["", "ok", 'say "hi"', "a,b"], n),
        }
    )
    df.loc[n - 1, "a"] = np.nan  # integers until the last record: pandas reads the column as float
    return df


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stream")
    df = synthetic()
    df.to_csv(tmp / "syn.csv", index=False)
    df.to_parquet(tmp / "syn.parquet", index=False, row_group_size=700)
    return tmp


# ---------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 7, 1000, 10**7])
def test_count_testdata_equals_in_memory(shared_data, batch_size):
    path = shared_data / "testdata.csv"
    df = pd.read_csv(path)
    ref = pramopt.frequency_table(df, TD_KEYS)
    got = count_file(path, TD_KEYS, batch_size=batch_size)
    assert_same_table(got, ref)
    assert_counts_match_pandas(got, df, TD_KEYS)


@pytest.mark.parametrize("name", ["syn.csv", "syn.parquet"])
@pytest.mark.parametrize("batch_size", [1, 7, 1000, 10**7])
def test_count_synthetic_with_missing_values(files, name, batch_size):
    path = files / name
    df = pd.read_csv(path) if name.endswith(".csv") else pd.read_parquet(path)
    # pandas types the integer column by all its values: float, with one missing value at the end
    assert df["a"].dtype == np.float64 and df["a"].isna().sum() == 1
    got = count_file(path, SYN_KEYS, batch_size=batch_size)
    assert_same_table(got, pramopt.frequency_table(df, SYN_KEYS))
    assert_counts_match_pandas(got, df, SYN_KEYS)
    # missing values are one category, the last one
    for q, cats in zip(SYN_KEYS, got.categories):
        assert cats.isna().sum() == int(df[q].isna().any())
        assert not cats[:-1].isna().any()


def test_count_late_integer_type_change_in_csv(tmp_path):
    # 5,000 integers then a missing value: pandas reads floats, so 1 is the category 1.0
    n = 5000
    pd.DataFrame({"k": list(np.arange(n) % 3) + [None]}).to_csv(tmp_path / "late.csv", index=False)
    got = count_file(tmp_path / "late.csv", ["k"], batch_size=100)
    assert got.categories[0].dtype == np.float64
    assert [str(c) for c in got.categories[0]] == ["0.0", "1.0", "2.0", "nan"]
    np.testing.assert_array_equal(got.counts, [1667, 1667, 1666, 1])


def test_count_parquet_categorical_and_arrow_nulls(tmp_path):
    rng = np.random.default_rng(2)
    n = 2000
    df = pd.DataFrame(
        {
            "cat": pd.Categorical(rng.choice(["u", "v", "w"], n), categories=["w", "u", "v", "z"]),
            "s": rng.choice(["p", "q"], n),
        }
    )
    df.to_parquet(tmp_path / "cat.parquet", row_group_size=300)
    assert_same_table(
        count_file(tmp_path / "cat.parquet", ["cat", "s"], batch_size=64),
        pramopt.frequency_table(pd.read_parquet(tmp_path / "cat.parquet"), ["cat", "s"]),
    )
    # int64 with nulls written by Arrow (no pandas metadata): pandas reads float64
    pq.write_table(
        pa.table({"x": pa.array([1, None, 3, 1] * 50), "y": pa.array(["a", None, "b", "a"] * 50)}),
        tmp_path / "nulls.parquet",
        row_group_size=37,
    )
    got = count_file(tmp_path / "nulls.parquet", ["x", "y"], batch_size=16)
    ref_df = pd.read_parquet(tmp_path / "nulls.parquet")
    assert_same_table(got, pramopt.frequency_table(ref_df, ["x", "y"]))
    assert_counts_match_pandas(got, ref_df, ["x", "y"])


def test_count_domains_and_max_categories(files):
    df = pd.read_csv(files / "syn.csv")
    dom = {"d": [False, True, "never"]}
    assert_same_table(
        count_file(files / "syn.csv", ["d", "e"], domains=dom),
        pramopt.frequency_table(df, ["d", "e"], domains=dom),
    )
    with pytest.raises(
        InvalidParameterError, match="'e' has more than max_categories=3 categories"
    ):
        count_file(files / "syn.csv", ["d", "e"], max_categories=3, batch_size=50)
    with pytest.raises(InvalidParameterError, match="must contain every value of 'd'"):
        count_file(files / "syn.csv", ["d"], domains={"d": [True]})


def test_count_errors(files, tmp_path):
    csv_path = files / "syn.csv"
    with pytest.raises(
        InvalidParameterError,
        match=r"The 'batch_size' parameter of count_file must be an integer >= 1; got 0\.",
    ):
        count_file(csv_path, SYN_KEYS, batch_size=0)
    with pytest.raises(InvalidParameterError, match="batch_size"):
        count_file(csv_path, SYN_KEYS, batch_size=2.5)
    with pytest.raises(InvalidParameterError, match="no such file"):
        count_file(tmp_path / "missing.csv", SYN_KEYS)
    (tmp_path / "data.dat").write_text("a\n1\n")
    with pytest.raises(InvalidParameterError, match=r"must end in \.csv, \.tsv, \.txt, \.parquet"):
        count_file(tmp_path / "data.dat", ["a"])
    assert count_file(tmp_path / "data.dat", ["a"], format="csv").n == 1
    with pytest.raises(
        InvalidParameterError, match=r"The 'format' parameter of count_file must be one of"
    ):
        count_file(tmp_path / "data.dat", ["a"], format="xls")
    with pytest.raises(InvalidParameterError, match=r"\['nope'\] not among"):
        count_file(csv_path, ["a", "nope"])
    with pytest.raises(InvalidParameterError, match="repeated"):
        count_file(csv_path, ["a", "a"])
    (tmp_path / "empty.csv").write_text("a,b\n")
    with pytest.raises(InvalidParameterError, match="at least one record"):
        count_file(tmp_path / "empty.csv", ["a"])
    (tmp_path / "ragged.csv").write_text("a,b\n1,2\n1,2,3\n")
    with pytest.raises(InvalidParameterError, match="Cannot read"):
        count_file(tmp_path / "ragged.csv", ["a"])
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InvalidParameterError, match="Cannot read"):
        count_file(tmp_path / "bad.parquet", ["a"])


# ---------------------------------------------------------------------------------------------
# Release
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["syn.csv", "syn.parquet"])
def test_release_identical_across_batch_sizes_and_to_in_memory(files, tmp_path, name):
    src = files / name
    read = pd.read_csv if name.endswith(".csv") else pd.read_parquet
    df = read(src)
    res = fake_design(pramopt.frequency_table(df, SYN_KEYS))
    expected = pramopt.release(df, res, seed=42)
    digests = set()
    for bs in (1, 7, 1000, 10**7):
        dst = tmp_path / f"out{bs}{src.suffix}"
        rel = release_file(src, dst, res, seed=42, batch_size=bs)
        assert rel.n == len(df) and rel.path == dst
        digests.add(md5(dst))
        pd.testing.assert_frame_equal(read(dst), expected)
    assert len(digests) == 1  # byte for byte the same file
    # records whose cell changed, counted with pandas
    a, b = expected[SYN_KEYS], df[SYN_KEYS]
    changed = (~((a == b) | (a.isna() & b.isna()))).any(axis=1).sum()
    assert rel.changed == changed > 0


def test_release_csv_copies_other_fields_verbatim(shared_data, tmp_path):
    src = shared_data / "testdata.csv"
    df = pd.read_csv(src)
    res = fake_design(pramopt.frequency_table(df, TD_KEYS))
    release_file(src, tmp_path / "r.csv", res, seed=7, batch_size=999)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "r.csv"), pramopt.release(df, res, seed=7))
    # the text of every non-identifying field is the source's (read with the csv module)
    with open(src, newline="") as f1, open(tmp_path / "r.csv", newline="") as f2:
        a, b = list(csv.reader(f1)), list(csv.reader(f2))
    assert a[0] == b[0] and len(a) == len(b)
    keep = [i for i, h in enumerate(a[0]) if h not in TD_KEYS]
    assert all([r[i] for i in keep] == [s[i] for i in keep] for r, s in zip(a[1:], b[1:]))


def test_release_real_design_on_example(example, result, tmp_path):
    # the optimal design of the built-in example, released from CSV and from Parquet
    qi = list(pramopt.example.EXAMPLE_QI)
    example.to_csv(tmp_path / "ex.csv", index=False)
    example.to_parquet(tmp_path / "ex.parquet", index=False)
    for ext, read in ((".csv", pd.read_csv), (".parquet", pd.read_parquet)):
        rel = release_file(
            tmp_path / f"ex{ext}", tmp_path / f"r{ext}", result, seed=3, batch_size=300
        )
        out = read(tmp_path / f"r{ext}")
        pd.testing.assert_frame_equal(
            out, pramopt.release(read(tmp_path / f"ex{ext}"), result, seed=3)
        )
        assert rel.changed == int((out[qi].to_numpy() != example[qi].to_numpy()).any(axis=1).sum())


def test_release_draws_follow_rows_of_P(tmp_path):
    # Monte Carlo over more than one random block (n > BLOCK): the empirical transition
    # frequencies of each cell lie within 5 binomial standard errors of its row of P.
    R = 25_000
    df = pd.DataFrame({"k": np.repeat(["a", "b", "c"], R), "v": np.arange(3 * R)})
    df = df.sample(frac=1.0, random_state=0).reset_index(drop=True)
    assert len(df) > BLOCK
    df.to_parquet(tmp_path / "mc.parquet", index=False)
    table = pramopt.frequency_table(df, ["k"])
    P = np.array([[0.7, 0.2, 0.1], [0.05, 0.9, 0.05], [1 / 3, 1 / 3, 1 / 3]])
    release_file(
        tmp_path / "mc.parquet",
        tmp_path / "out.parquet",
        fake_design(table, P),
        seed=11,
        batch_size=4093,
    )
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert (out["v"] == df["v"]).all()
    freq = (
        pd.crosstab(df["k"], out["k"])
        .reindex(index=["a", "b", "c"], columns=["a", "b", "c"])
        .to_numpy()
        / R
    )
    se = np.sqrt(P * (1 - P) / R)
    assert np.all(np.abs(freq - P) <= 5 * se)


def test_release_without_seed_differs(files, tmp_path):
    df = pd.read_parquet(files / "syn.parquet")
    res = fake_design(pramopt.frequency_table(df, SYN_KEYS))
    release_file(files / "syn.parquet", tmp_path / "a.parquet", res)
    release_file(files / "syn.parquet", tmp_path / "b.parquet", res)
    # about 900 records change in each release; two independent releases coincide with
    # probability far below 1e-100
    assert not pd.read_parquet(tmp_path / "a.parquet").equals(
        pd.read_parquet(tmp_path / "b.parquet")
    )


def test_release_refusals_leave_nothing(files, tmp_path):
    src = files / "syn.csv"
    df = pd.read_csv(src)
    res = fake_design(pramopt.frequency_table(df, SYN_KEYS))
    (tmp_path / "keep.csv").write_text("old\n")  # replaced only once every check has passed

    def nothing_new():
        assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.csv"]
        assert (tmp_path / "keep.csv").read_text() == "old\n"

    # other counts (one record less): found at the end of the pass, the output is discarded
    df.iloc[1:].to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(DesignMismatchError, match="made for other data"):
        release_file(
            tmp_path / "other.csv",
            tmp_path / "keep.csv",
            res,
            overwrite=True,
            seed=1,
            batch_size=100,
        )
    (tmp_path / "other.csv").unlink()
    nothing_new()
    # a value the design never saw (that also turns a boolean column into strings for pandas)
    bad = df.astype({"d": object})
    bad.loc[2000, "d"] = "maybe"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DesignMismatchError, match="do not match the design"):
        release_file(
            tmp_path / "bad.csv", tmp_path / "keep.csv", res, overwrite=True, seed=1, batch_size=100
        )
    (tmp_path / "bad.csv").unlink()
    nothing_new()
    # known values in a combination that is not a cell of the design
    sub = df[~((df.a == 1) & (df.e == "a"))]
    table = pramopt.frequency_table(sub, SYN_KEYS)
    with pytest.raises(DesignMismatchError, match="cells the design does not have"):
        release_file(
            src, tmp_path / "keep.csv", fake_design(table), overwrite=True, seed=1, batch_size=100
        )
    nothing_new()
    # a design that failed verification
    failed = fake_design(pramopt.frequency_table(df, SYN_KEYS))
    failed = DesignResult(**{**failed.__dict__, "status": Status.INFEASIBLE})
    with pytest.raises(DesignMismatchError, match="infeasible"):
        release_file(src, tmp_path / "keep.csv", failed, overwrite=True, seed=1)
    nothing_new()


def test_release_parameter_errors(files, tmp_path):
    src = files / "syn.csv"
    res = fake_design(pramopt.frequency_table(pd.read_csv(src), SYN_KEYS))
    with pytest.raises(
        InvalidParameterError,
        match=r"The 'batch_size' parameter of release_file must be an integer >= 1; got -1\.",
    ):
        release_file(src, tmp_path / "r.csv", res, batch_size=-1)
    with pytest.raises(
        InvalidParameterError, match=r"The 'seed' parameter of release_file must be an integer >= 0"
    ):
        release_file(src, tmp_path / "r.csv", res, seed=-5)
    with pytest.raises(InvalidParameterError, match="no such file"):
        release_file(tmp_path / "missing.csv", tmp_path / "r.csv", res)
    with pytest.raises(InvalidParameterError, match="must be a csv file like its source"):
        release_file(src, tmp_path / "r.parquet", res)
    with pytest.raises(InvalidParameterError, match="must end in"):
        release_file(src, tmp_path / "r.dat", res)
    with pytest.raises(InvalidParameterError, match="does not exist"):
        release_file(src, tmp_path / "nowhere" / "r.csv", res)
    with pytest.raises(InvalidParameterError, match="must not be the source"):
        release_file(src, src, res)
    renamed = pd.read_csv(src).rename(columns={"e": "E"})
    renamed.to_csv(tmp_path / "renamed.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"\['e'\] not among"):
        release_file(tmp_path / "renamed.csv", tmp_path / "r.csv", res)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["renamed.csv"]


def test_cli_streams_csv_and_matches_library(example, result, tmp_path):
    from pramopt.cli import main

    qi = list(pramopt.example.EXAMPLE_QI)
    example.to_csv(tmp_path / "ex.csv", index=False)
    assert (
        main(
            [
                "design",
                "--data",
                str(tmp_path / "ex.csv"),
                "--qi",
                ",".join(qi),
                "--out",
                str(tmp_path / "d"),
                "-q",
            ]
        )
        == 0
    )
    loaded = pramopt.load_design(tmp_path / "d")
    # the command line reads identifying values as text, ordered as the numbers they write: the
    # library's cells and counts, with the file's text as labels
    assert (
        loaded.table.checksum()
        == pramopt.count_file(tmp_path / "ex.csv", qi, keys_as_text=True).checksum()
    )
    np.testing.assert_array_equal(loaded.table.codes, result.table.codes)
    np.testing.assert_array_equal(loaded.table.counts, result.table.counts)
    assert [list(c) for c in loaded.table.categories] == [
        [str(v) for v in c] for c in result.table.categories
    ]
    assert (
        main(
            [
                "release",
                "--design",
                str(tmp_path / "d"),
                "--data",
                str(tmp_path / "ex.csv"),
                "--out",
                str(tmp_path / "r.csv"),
                "--seed",
                "9",
                "-q",
            ]
        )
        == 0
    )
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "r.csv", dtype=str),
        pramopt.release(pd.read_csv(tmp_path / "ex.csv", dtype=str), loaded, seed=9),
    )


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_n(tmp_path):
    # count_file and release_file in fresh processes on 200,000 and 2,000,000 records with the
    # same batch size: the peak resident memory (VmHWM) may not grow by more than 60 MiB while
    # the data grow tenfold (the whole larger file is about 60 MiB as Parquet columns in memory).
    script = r"""
import json, sys
import numpy as np, pandas as pd
from pramopt import count_file, release_file
from pramopt.publish.sampling import BLOCK
from tests.test_stream import fake_design
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
path, out = sys.argv[1], sys.argv[2]
table = count_file(path, ['a', 'b'], batch_size=20000)
release_file(path, out, fake_design(table), seed=1, batch_size=20000)
print(json.dumps({'peak': hwm()}))
"""
    peaks = {}
    for n in (200_000, 2_000_000):
        rng = np.random.default_rng(0)
        pd.DataFrame(
            {"a": rng.integers(0, 20, n), "b": rng.choice(["x", "y", "z"], n), "v": rng.random(n)}
        ).to_parquet(tmp_path / f"{n}.parquet", row_group_size=50_000)
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                script,
                str(tmp_path / f"{n}.parquet"),
                str(tmp_path / f"o{n}.parquet"),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        assert r.returncode == 0, r.stderr
        peaks[n] = float(r.stdout.strip().splitlines()[-1].split(":")[1].strip(" }"))
    assert peaks[2_000_000] - peaks[200_000] < 60, peaks
