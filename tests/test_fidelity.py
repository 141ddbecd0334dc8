"""Data fidelity: matrices matched by their labels, values written back as read, missing keys kept.

Each test reproduces a silent wrong answer seen by a new user; the expected figures are computed
here from the definitions (expected changes = sum_m U0(m) (1 - P_mm)).
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.cli import main


def run_main(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def roof(tmp_path):
    """One key with five values and a square matrix on them (rows in sorted order)."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"roof": rng.choice([2, 4, 5, 6, 9], 500, p=[0.4, 0.3, 0.15, 0.1, 0.05])})
    df.to_csv(tmp_path / "d.csv", index=False)
    vals = [2, 4, 5, 6, 9]
    P = np.full((5, 5), 0.02) + np.diag(np.linspace(0.9, 0.5, 5))
    P /= P.sum(axis=1, keepdims=True)
    U0 = df["roof"].value_counts().reindex(vals).to_numpy(dtype=float)
    return {
        "df": df,
        "vals": vals,
        "P": P,
        "changes": float(U0 @ (1 - np.diag(P))),
        "tmp": tmp_path,
    }


def _square(path, vals, P, order, first="roof"):
    out = pd.DataFrame(P[:, order], columns=[str(vals[j]) for j in order])
    out.insert(0, first, vals)
    out.to_csv(path, index=False)


def _changes(tmp, matrix):
    code, out, err = run_main(
        "assess", "--matrix", matrix, "--data", tmp / "d.csv", "--qi", "roof", "--json"
    )
    assert code in (0, 1), err
    import json

    return json.loads(out)["expected_changes"], json.loads(out)


def test_square_matrix_columns_are_matched_by_label(roof):
    tmp, vals, P = roof["tmp"], roof["vals"], roof["P"]
    _square(tmp / "in_order.csv", vals, P, [0, 1, 2, 3, 4])
    _square(tmp / "reversed.csv", vals, P, [4, 3, 2, 1, 0])  # columns 9,6,5,4,2 over rows 2,4,5,6,9
    a, _ = _changes(tmp, tmp / "in_order.csv")
    b, _ = _changes(tmp, tmp / "reversed.csv")
    assert a == pytest.approx(roof["changes"]) and b == pytest.approx(roof["changes"])


def test_square_matrix_with_unknown_labels_is_refused(roof):
    tmp, vals, P = roof["tmp"], roof["vals"], roof["P"]
    out = pd.DataFrame(P, columns=["2", "4", "5", "6", "7"])
    out.insert(0, "roof", vals)
    out.to_csv(tmp / "bad.csv", index=False)
    code, _, err = run_main(
        "assess", "--matrix", tmp / "bad.csv", "--data", tmp / "d.csv", "--qi", "roof"
    )
    assert code == 2 and "['7'] match no row" in err


def test_square_matrix_from_r_write_csv(roof):
    # R: write.csv(P) with dimnames writes an empty first header over the row names
    tmp, vals, P = roof["tmp"], roof["vals"], roof["P"]
    order = [4, 3, 2, 1, 0]
    lines = ['"",' + ",".join(f'"{vals[j]}"' for j in order)]
    for i, v in enumerate(vals):
        lines.append(f'"{v}",' + ",".join(repr(float(x)) for x in P[i, order]))
    (tmp / "r.csv").write_text("\n".join(lines) + "\n")
    c, _ = _changes(tmp, tmp / "r.csv")
    assert c == pytest.approx(roof["changes"])


def test_assess_without_alpha_judges_at_the_default(roof):
    tmp, vals, P = roof["tmp"], roof["vals"], roof["P"]
    _square(tmp / "m.csv", vals, P, [0, 1, 2, 3, 4])
    _, d = _changes(tmp, tmp / "m.csv")
    assert d["alpha"] == pramopt.DesignParams.alpha and d["meets_c1"] in (True, False)


@pytest.fixture
def zeros(tmp_path):
    """A CSV with leading-zero codes, a float-written key and missing keys."""
    rng = np.random.default_rng(1)
    n = 400
    df = pd.DataFrame(
        {
            "region": rng.choice(["01", "02", "03", "10"], n, p=[0.4, 0.3, 0.2, 0.1]),
            "sex": rng.choice(["1", "2"], n),
            "age": rng.choice(["a", "b", "c"], n),
            "w": [f"{x:.3f}" for x in rng.random(n)],
        }
    )
    df.loc[:5, "sex"] = ""  # six records with a missing sex
    df.to_csv(tmp_path / "d.csv", index=False)
    return tmp_path


def _texts(path):
    import csv

    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_release_writes_every_value_back_as_written(zeros):
    tmp = zeros
    code, _, err = run_main(
        "design",
        "--data",
        tmp / "d.csv",
        "--qi",
        "region,sex,age",
        "--alpha",
        "0.2",
        "--out",
        tmp / "des",
        "-q",
    )
    assert code == 0, err
    code, _, err = run_main(
        "release",
        "--design",
        tmp / "des",
        "--data",
        tmp / "d.csv",
        "--out",
        tmp / "r.csv",
        "--seed",
        "1",
        "-q",
    )
    assert code == 0, err
    src, out = _texts(tmp / "d.csv"), _texts(tmp / "r.csv")
    assert src[0] == out[0] and len(src) == len(out)
    assert {r[0] for r in out[1:]} <= {"01", "02", "03", "10"}  # '02' never becomes '2'
    assert all(a[3] == b[3] for a, b in zip(src[1:], out[1:]))  # '0.010' stays '0.010'
    # missing values stay missing and no value becomes missing (missing="keep", the default)
    assert [a[1] == "" for a in src[1:]] == [b[1] == "" for b in out[1:]]
    # records whose cell did not change are identical, text for text
    changed = sum(a != b for a, b in zip(src[1:], out[1:]))
    assert 0 < changed < 100


def test_missing_keys_are_counted_and_can_rule_a_design_out(zeros):
    df = pd.read_csv(zeros / "d.csv", dtype=str)
    res = pramopt.design(df, ["region", "sex", "age"], alpha=0.2, max_iter=3)
    assert res.success and "records with a missing identifying value = 6" in res.summary()
    # six records whose sex stays missing cannot hide among fewer than 1/alpha = 10
    bad = pramopt.design(df, ["region", "sex", "age"], alpha=0.1, max_iter=3)
    assert bad.status is pramopt.Status.INFEASIBLE and "missing = 'keep'" in bad.message
    assert "the 6 records with sex missing" in bad.message
    cat = pramopt.design(df, ["region", "sex", "age"], alpha=0.1, max_iter=3, missing="category")
    assert cat.success


def test_design_on_typed_values_is_refused_on_data_written_otherwise(zeros):
    # a design made in Python on numbers (3) meets a file that writes '03': refused, not rewritten
    df = pd.read_csv(zeros / "d.csv")  # pandas reads '03' as 3
    res = pramopt.design(df, ["region", "age"], alpha=0.2, max_iter=3)
    assert res.success
    with pytest.raises(
        pramopt.DesignMismatchError, match="'region' is written '0[123]'.*category is '[123]'"
    ):
        pramopt.release_file(zeros / "d.csv", zeros / "r.csv", res, seed=1)
    assert not (zeros / "r.csv").exists()


def test_truncated_design_file_gets_a_sentence(tmp_path):
    res = pramopt.design(pramopt.example_data(), ["v1", "v2", "v3"], alpha=0.2, max_iter=3)
    pramopt.save_design(res, tmp_path)
    text = (tmp_path / "design.json").read_text()
    (tmp_path / "design.json").write_text(text[: len(text) // 2])
    with pytest.raises(
        pramopt.DesignFileError, match="not a complete design file .cut short or edited by hand"
    ):
        pramopt.load_design(tmp_path)


def test_spec_data_path_is_relative_to_the_spec_file(tmp_path):
    sub = tmp_path / "specs" / "deeper"
    sub.mkdir(parents=True)
    pramopt.example_data().to_csv(tmp_path / "specs" / "ex.csv", index=False)
    (sub / "s.toml").write_text(
        'name = "s"\n[data]\npath = "../ex.csv"\nqi = ["v1", "v2"]\n[design]\nalpha = 0.2\n'
    )
    spec = pramopt.load_spec(sub / "s.toml")
    assert spec.data_path == (tmp_path / "specs" / "ex.csv").resolve()
    assert len(spec.load_data()) == 2500


def test_missing_keys_exactly_one_over_alpha_records_need_a_singular_matrix():
    # five records with age missing and reg present, alpha = 0.2: every cell of theirs is its own
    # group of the one triple, so C1's mean argument (1/5 = alpha) holds only with equal rows
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "sex": rng.choice(["m", "f"], n),
            "reg": pd.Categorical(rng.choice(["N", "S", "E", None], n, p=[0.5, 0.3, 0.17, 0.03])),
            "age": rng.choice([1.0, 2.0, np.nan], n, p=[0.6, 0.38, 0.02]),
        }
    )
    assert int((df["age"].isna() & df["reg"].notna()).sum()) == 5
    res = pramopt.design(df, ["sex", "reg", "age"], alpha=0.2)
    assert res.status is pramopt.Status.INFEASIBLE
    assert (
        "any invertible matrix with missing = 'keep'" in res.message
        and "1/5 = alpha" in res.message
    )


def test_cli_messages_name_the_users_flags_and_plain_numbers(zeros):
    tmp = zeros
    code, _, err = run_main(
        "design",
        "--data",
        tmp / "d.csv",
        "--qi",
        "region,sex",
        "--min-diagonal",
        "2",
        "--out",
        tmp / "x",
    )
    assert code == 2 and "--min-diagonal must be a real number in [0, 1); got 2.0." in err
    assert (
        run_main(
            "design",
            "--data",
            tmp / "d.csv",
            "--qi",
            "region,sex,age",
            "--alpha",
            "0.2",
            "--out",
            tmp / "des",
            "-q",
        )[0]
        == 0
    )
    code, _, err = run_main(
        "release", "--design", tmp / "des", "--data", tmp / "d.csv", "--out", tmp / "d.csv"
    )
    assert code == 2 and "--out must not be the source file" in err and "dst" not in err
    with pytest.raises(
        pramopt.InvalidParameterError, match=r"'gamma' parameter of design .*; got 0\.0\.$"
    ):
        pramopt.DesignParams.from_options("design", alpha=np.float64(0.9), gamma=np.float64(0.0))


def test_estimate_standard_errors_match_monte_carlo():
    # a small design; the spread of the estimate over 1,500 releases (drawn here with numpy, not
    # pramopt's release) against the standard errors estimate() reports: the plug-in SE averaged
    # over the draws is within 10% of the empirical standard deviation in every cell with T >= 20
    # (the standard deviation of 1,500 draws is itself within about 2% of the truth)
    rng = np.random.default_rng(7)
    df = pd.DataFrame(
        {"a": rng.choice(3, 600, p=[0.5, 0.3, 0.2]), "b": rng.choice(2, 600, p=[0.7, 0.3])}
    )
    res = pramopt.design(
        df, ["a", "b"], alpha=0.3, combination_size=1, max_iter=5, structure="replacement"
    )
    P = res.to_dense()
    T = res.counts.astype(float)
    cells = res.cells
    draws, ses = [], []
    for _ in range(1500):
        U = sum(rng.multinomial(int(t), P[m]) for m, t in enumerate(T))
        rel = cells.loc[cells.index.repeat(U)].reset_index(drop=True)
        e = pramopt.estimate(rel, res)
        draws.append(e["estimate"].to_numpy())
        ses.append(e["se"].to_numpy())
    draws, ses = np.array(draws), np.array(ses)
    np.testing.assert_allclose(
        draws.mean(axis=0), T, atol=4 * draws.std(axis=0).max() / np.sqrt(1500)
    )
    exact = np.sqrt(
        np.maximum((np.linalg.inv(P) ** 2).T @ (P.T @ T) - T, 0)
    )  # the formula at the truth
    np.testing.assert_allclose(draws.std(axis=0), exact, rtol=0.1)
    big = T >= 20
    np.testing.assert_allclose(ses.mean(axis=0)[big], draws.std(axis=0)[big], rtol=0.1)


def test_estimate_can_be_projected_onto_nonnegative_counts():
    df = pramopt.example_data()
    res = pramopt.design(df, ["v1", "v2", "v3", "v4", "v5"], alpha=0.1, max_iter=3)
    rel = pramopt.release(df, res, seed=4)
    raw = pramopt.estimate(rel, res)
    pos = pramopt.estimate(rel, res, nonnegative=True)
    assert (pos["estimate"] >= 0).all() and pos["estimate"].sum() == pytest.approx(len(df))
    # the projection onto {x >= 0, sum x = n}: x - tau clipped, tau from the active set
    x = raw["estimate"].to_numpy()
    keep = pos["estimate"].to_numpy() > 0
    tau = (x[keep].sum() - len(df)) / keep.sum()
    np.testing.assert_allclose(pos["estimate"].to_numpy(), np.maximum(x - tau, 0), atol=1e-9)
    assert (x[~keep] - tau <= 1e-9).all()
    np.testing.assert_array_equal(pos["se"], raw["se"])


def test_semicolon_latin1_decimal_comma_file_round_trips(tmp_path):
    # a file as a European office exports it: ';' between fields, Latin-1 text, decimal commas,
    # leading zeros and missing keys; released in the same dialect, every other field byte for byte
    rng = np.random.default_rng(1)
    lines = ["region;sex;age;income"]
    for i in range(400):
        sex = "" if i < 6 else rng.choice(["1", "2"])
        lines.append(
            f"{rng.choice(['01', '02', '03', '10'], p=[0.4, 0.3, 0.2, 0.1])};{sex};"
            f"{rng.choice(['a', 'b', 'ä'])};{rng.random() * 100:.2f}".replace(".", ",")
        )
    (tmp_path / "d.csv").write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    dialect = ["--sep", ";", "--encoding", "latin-1", "--decimal", ","]
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        "region,sex,age",
        "--alpha",
        "0.2",
        "--out",
        tmp_path / "des",
        "-q",
        *dialect,
    )
    assert code == 0, err
    t = pramopt.load_design(tmp_path / "des").table
    assert list(t.categories[2]) == ["a", "b", "ä"] and list(t.categories[0]) == [
        "01",
        "02",
        "03",
        "10",
    ]
    code, _, err = run_main(
        "release",
        "--design",
        tmp_path / "des",
        "--data",
        tmp_path / "d.csv",
        "--out",
        tmp_path / "r.csv",
        "--seed",
        "1",
        "-q",
        *dialect,
    )
    assert code == 0, err
    src = (tmp_path / "d.csv").read_bytes().decode("latin-1").splitlines()
    out = (tmp_path / "r.csv").read_bytes().decode("latin-1").splitlines()
    assert src[0] == out[0] and len(src) == len(out)
    a = [r.split(";") for r in src[1:]]
    b = [r.split(";") for r in out[1:]]
    assert all(len(r) == 4 for r in b)
    assert [r[3] for r in a] == [r[3] for r in b]  # '14,42' stays '14,42'
    assert [r[1] == "" for r in a] == [r[1] == "" for r in b]
    assert {r[0] for r in b} <= {"01", "02", "03", "10"} and {r[2] for r in b} <= {"a", "b", "ä"}
    # the same table as pandas reads the file as text
    df = pd.read_csv(tmp_path / "d.csv", sep=";", encoding="latin-1", dtype=str)
    assert sorted(t.counts.tolist()) == sorted(
        df.groupby(["region", "sex", "age"], dropna=False).size().tolist()
    )
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        "region",
        "--out",
        tmp_path / "x",
        "--sep",
        ";",
        "--decimal",
        ";",
    )
    assert code == 2 and "--decimal" in err


def test_rounded_matrix_is_refused_or_renormalised_on_request(roof):
    tmp, vals, P = roof["tmp"], roof["vals"], roof["P"]
    _square(tmp / "rounded.csv", vals, np.round(P, 3), [0, 1, 2, 3, 4])
    code, _, err = run_main(
        "assess", "--matrix", tmp / "rounded.csv", "--data", tmp / "d.csv", "--qi", "roof"
    )
    assert code == 2 and "--renormalize TOL" in err
    with pytest.warns(UserWarning, match="rows of 'matrix' summed to between"):
        code, out, err = run_main(
            "assess",
            "--matrix",
            tmp / "rounded.csv",
            "--data",
            tmp / "d.csv",
            "--qi",
            "roof",
            "--renormalize",
            "0.01",
            "--json",
        )
    import json

    R = np.round(P, 3)
    R /= R.sum(axis=1, keepdims=True)
    U0 = roof["df"]["roof"].value_counts().reindex(vals).to_numpy(dtype=float)
    assert json.loads(out)["expected_changes"] == pytest.approx(float(U0 @ (1 - np.diag(R))))
    code, _, err = run_main(
        "assess",
        "--matrix",
        tmp / "rounded.csv",
        "--data",
        tmp / "d.csv",
        "--qi",
        "roof",
        "--renormalize",
        "1e-6",
    )
    assert code == 2 and "rows summing to 1" in err


# --- a file as an office exports it, through every command ----------------------------------


def _office_file(path, households: bool = False):
    """';' between fields, Latin-1, CRLF line ends, decimal commas, leading zeros, quoted fields,
    empty fields in non-key columns; household-level region (two rare ones), person-level sex."""
    rng = np.random.default_rng(5)
    lines = ["hid;region;sex;revenu;numero;enfants;note"]
    for h in range(400):
        reg = rng.choice(["01", "02", "03", "10"], p=[0.5, 0.3, 0.195, 0.005])
        reg = "" if households and h % 16 == 0 else reg  # missing for whole households
        for p in range(int(rng.integers(1, 4))):
            note = rng.choice(["", "né à Zürich", '"dit ""non"""', '"a; b"'])
            kids = "" if rng.random() < 0.1 else str(rng.integers(0, 5))
            lines.append(
                f"H{h:04d};{reg};{rng.choice(['F', 'M'])};{rng.random() * 1000:.2f};{p + 1:03d};{kids};"
                f"{note}".replace(".", ",")
            )
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("latin-1"))
    return ["--sep", ";", "--encoding", "latin-1", "--decimal", ","]


def _fields_after_keys(path, nkeys_end=3):
    """Per line: the raw text of the first field and of everything after the key fields."""
    lines = path.read_bytes().decode("latin-1").split("\r\n")
    return [(ln.split(";", nkeys_end)[0], ln.split(";", nkeys_end)[nkeys_end:]) for ln in lines]


def test_household_release_keeps_every_other_field_as_written(tmp_path):
    # a household design released from the command line: the non-identifying fields byte for byte
    # ('001' stays '001', '12,50' stays '12,50', an empty count stays empty), in the source's
    # separator, encoding and line ends; household members identical on the household key
    dialect = _office_file(tmp_path / "d.csv", households=True)
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        "region,sex",
        "--household",
        "hid",
        "--alpha",
        "0.3",
        "--out",
        tmp_path / "des",
        "-q",
        *dialect,
    )
    assert code == 0, err
    code, said, err = run_main(
        "release",
        "--design",
        tmp_path / "des",
        "--data",
        tmp_path / "d.csv",
        "--out",
        tmp_path / "r.csv",
        "--seed",
        "2",
        *dialect,
    )
    assert code == 0, err
    src, out = (tmp_path / "d.csv").read_bytes(), (tmp_path / "r.csv").read_bytes()
    lines = [a != b for a, b in zip(src.split(b"\r\n"), out.split(b"\r\n"))]
    assert f": {sum(lines)} changed" in said  # a missing region that stays missing is no change
    assert [r.split(b";")[1] == b"" for r in src.split(b"\r\n")[1:-1]] == [
        r.split(b";")[1] == b"" for r in out.split(b"\r\n")[1:-1]
    ]
    assert out.count(b"\r\n") == src.count(b"\r\n") == src.count(b"\n")
    assert _fields_after_keys(tmp_path / "d.csv") == _fields_after_keys(tmp_path / "r.csv")
    rows = [ln.split(";") for ln in out.decode("latin-1").split("\r\n")[1:-1]]
    assert {r[1] for r in rows} <= {"01", "02", "03", "10", ""} and {r[2] for r in rows} == {
        "F",
        "M",
    }
    by_hh = (
        pd.DataFrame([r[:2] for r in rows], columns=["hid", "region"])
        .groupby("hid")["region"]
        .nunique()
    )
    assert (by_hh == 1).all()


def test_release_keeps_the_sources_line_ends(zeros):
    df = pd.read_csv(zeros / "d.csv", dtype=str, keep_default_na=False)
    df.to_csv(zeros / "crlf.csv", index=False, lineterminator="\r\n")
    code, _, err = run_main(
        "design",
        "--data",
        zeros / "crlf.csv",
        "--qi",
        "region,sex,age",
        "--alpha",
        "0.2",
        "--out",
        zeros / "des",
        "-q",
    )
    assert code == 0, err
    rel = pramopt.release_file(
        zeros / "crlf.csv", zeros / "r.csv", pramopt.load_design(zeros / "des"), seed=1
    )
    assert rel.changed > 0
    src, out = (zeros / "crlf.csv").read_bytes(), (zeros / "r.csv").read_bytes()
    assert out.count(b"\r\n") == out.count(b"\n") == src.count(b"\r\n")
    same = [a == b for a, b in zip(src.split(b"\r\n"), out.split(b"\r\n"))]
    assert len(same) - sum(same) == rel.changed  # every other line byte for byte


def test_unwritable_out_is_refused_before_any_work_naming_the_flag(zeros, tmp_path):
    # a folder that exists but where no file can be created, even by root: /proc
    import os

    if not os.path.isdir("/proc") or os.access("/proc", os.W_OK) is False:
        pytest.skip("needs Linux's /proc (a folder nobody can create files in)")
    d = zeros / "d.csv"
    code, out, err = run_main(
        "design",
        "--data",
        d,
        "--qi",
        "region,sex,age",
        "--alpha",
        "0.2",
        "--out",
        "/proc/pramopt-test",
    )
    assert code == 2 and "--out" in err and "does not accept new files" in err, err
    assert "Errno" not in err, err
    assert out == ""  # refused before the design, so no summary
    assert (
        run_main(
            "design",
            "--data",
            d,
            "--qi",
            "region,sex,age",
            "--alpha",
            "0.2",
            "--out",
            tmp_path / "des",
            "-q",
        )[0]
        == 0
    )
    for cmd in (
        ["release", "--design", tmp_path / "des", "--data", d, "--out", "/proc/r.csv"],
        ["estimate", "--design", tmp_path / "des", "--data", d, "--out", "/proc/e.csv"],
        [
            "assess",
            "--matrix",
            tmp_path / "des",
            "--data",
            d,
            "--qi",
            "region,sex,age",
            "--out",
            "/proc/a",
        ],
    ):
        code, _, err = run_main(*cmd)
        assert code == 2 and "--out" in err and "does not accept new files" in err, (cmd[0], err)


def test_estimate_is_written_in_the_data_dialect(tmp_path):
    # estimates of a ';'/Latin-1/decimal-comma file open in the same spreadsheet settings as the file
    dialect = _office_file(tmp_path / "d.csv")
    assert (
        run_main(
            "design",
            "--data",
            tmp_path / "d.csv",
            "--qi",
            "region,sex",
            "--alpha",
            "0.3",
            "--out",
            tmp_path / "des",
            "-q",
            *dialect,
        )[0]
        == 0
    )
    code, _, err = run_main(
        "estimate",
        "--design",
        tmp_path / "des",
        "--data",
        tmp_path / "d.csv",
        "--out",
        tmp_path / "e.csv",
        *dialect,
    )
    assert code == 0, err
    est = pd.read_csv(
        tmp_path / "e.csv", sep=";", decimal=",", encoding="latin-1", dtype={"region": str}
    )
    assert list(est.columns) == ["region", "sex", "observed", "estimate", "se"]
    src = pd.read_csv(tmp_path / "d.csv", sep=";", encoding="latin-1", dtype=str)
    counts = src.groupby(["region", "sex"]).size()
    got = est.set_index(["region", "sex"])["observed"]
    assert got.to_dict() == pytest.approx(counts.astype(float).to_dict())
    assert b"," in (tmp_path / "e.csv").read_bytes().split(b"\n")[1]  # decimal commas


def test_wrong_separator_or_encoding_is_named_with_the_flag(tmp_path):
    _office_file(tmp_path / "d.csv")
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        "region,sex",
        "--encoding",
        "latin-1",
        "--out",
        tmp_path / "x",
    )
    assert code == 2 and "--sep ';'" in err, err
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        "region,sex",
        "--sep",
        "\\t",
        "--encoding",
        "latin-1",
        "--out",
        tmp_path / "x",
    )
    assert code == 2 and "--sep ';'" in err, err
    code, _, err = run_main(
        "design",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        "region,note",
        "--sep",
        ";",
        "--out",
        tmp_path / "x",
    )
    assert code == 2 and "--encoding latin-1" in err and "not valid utf-8" in err, err
    assert (
        run_main(
            "design",
            "--data",
            tmp_path / "d.csv",
            "--qi",
            "region,sex",
            "--sep",
            ";",
            "--encoding",
            "latin-1",
            "--alpha",
            "0.3",
            "--out",
            tmp_path / "x",
            "-q",
        )[0]
        == 0
    )
    code, _, err = run_main(
        "release",
        "--design",
        tmp_path / "x",
        "--data",
        tmp_path / "d.csv",
        "--sep",
        ";",
        "--out",
        tmp_path / "r.csv",
    )  # the accents are in a column the design never read
    assert code == 2 and "--encoding latin-1" in err, err
    assert not (tmp_path / "r.csv").exists()


def test_household_release_refuses_a_file_a_typed_design_would_rewrite(tmp_path):
    # a household design made in Python on numbers (3) meets a file that writes '03': refused,
    # as for a person-level design, instead of written back as '3'
    rng = np.random.default_rng(5)
    rows = [
        {"hid": h, "region": reg, "sex": rng.choice(["F", "M"])}
        for h in range(400)
        for reg in [rng.choice(["01", "02", "03", "10"], p=[0.5, 0.3, 0.195, 0.005])]
        for _ in range(int(rng.integers(1, 4)))
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "d.csv", index=False)
    typed = pd.read_csv(tmp_path / "d.csv")
    res = pramopt.design(
        typed, ["region", "sex"], household="hid", alpha=0.1
    )  # about 23 records change
    assert res.success
    with pytest.raises(
        pramopt.DesignMismatchError, match="'region' is written '0[123]'.*category is '[123]'"
    ):
        pramopt.release_file(tmp_path / "d.csv", tmp_path / "r.csv", res, seed=1)
    assert not (tmp_path / "r.csv").exists()
    typed.to_csv(
        tmp_path / "typed.csv", index=False
    )  # written as the design's categories: released
    rel = pramopt.release_file(tmp_path / "typed.csv", tmp_path / "r.csv", res, seed=1)
    src, out = (
        (tmp_path / "typed.csv").read_text().splitlines(),
        (tmp_path / "r.csv").read_text().splitlines(),
    )
    assert rel.changed == sum(a != b for a, b in zip(src, out)) > 0


def test_matrix_csv_written_in_pieces_is_the_long_form_byte_for_byte(tmp_path, monkeypatch):
    # matrix.csv is written a few rows at a time (a census design has millions of entries); the
    # file must be exactly the long form written in one piece, header once, rows in order
    import pramopt.io.design_file as DF
    from pramopt.result import matrix_long

    df = pramopt.example_data(n=600, seed=1)
    qi = list(df.columns[:4])
    res = pramopt.design(df, qi, alpha=0.2)
    assert res.success and res.matrix.nnz > res.table.n_cells  # rows with several entries
    whole = matrix_long(res.matrix, res.table).to_csv(index=False).encode("utf-8")
    monkeypatch.setattr(DF, "MATRIX_CHUNK", 7)
    pramopt.save_design(res, tmp_path)
    assert (tmp_path / "matrix.csv").read_bytes() == whole
    back = pramopt.load_design(tmp_path)
    assert abs(back.matrix - res.matrix).max() == 0


def test_a_large_matrix_is_kept_beside_design_json_checked_and_required(tmp_path, monkeypatch):
    # millions of entries go to matrix.npz beside design.json (inline JSON lists took gigabytes);
    # it is read back exactly, and an edited or missing matrix.npz is refused
    import json

    import pramopt.io.design_file as DF

    df = pramopt.example_data(n=600, seed=1)
    qi = list(df.columns[:4])
    res = pramopt.design(df, qi, alpha=0.2, structure="general")
    monkeypatch.setattr(DF, "INLINE_MAX", 0)
    pramopt.save_design(res, tmp_path)
    rec = json.loads((tmp_path / "design.json").read_text())
    assert (
        rec["matrix"] == {"shape": list(res.matrix.shape), "file": "matrix.npz"}
        and "matrix.npz" in rec["files"]
    )
    back = pramopt.load_design(tmp_path)
    assert abs(back.matrix - res.matrix).max() == 0 and back.success
    assert pramopt.release(df, back, seed=3).equals(pramopt.release(df, res, seed=3))
    z = dict(np.load(tmp_path / "matrix.npz"))
    z["values"] = z["values"].copy()
    z["values"][0] -= 0.01
    np.savez(tmp_path / "matrix.npz", **z)
    with pytest.raises(pramopt.DesignFileError, match="matrix.npz does not match its checksum"):
        pramopt.load_design(tmp_path)
    (tmp_path / "matrix.npz").unlink()
    with pytest.raises(
        pramopt.DesignFileError, match="keeps its matrix in matrix.npz, which is missing"
    ):
        pramopt.load_design(tmp_path)
