"""The frontier over choices (pramopt.choice_frontier, ``pramopt frontier --recode/--keys``).

Its rows are checked against figures computed here from the records and the matrices alone: the
cells of a recoding applied with a plain dict, the share of changed records, C1 by brute force,
and the identifying values a changed record has altered by a dense loop over every transition.
"""

from __future__ import annotations

import base64
import io
import re
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest
from random_cases import brute_force_risk

import pramopt
from pramopt.choices import CHOICE_COLUMNS, Choice, choice_frontier
from pramopt.cli import main
from pramopt.errors import InvalidParameterError

QI = ["age", "region", "sex"]
ALPHAS = (0.1, 0.2)
#: Ages in five-year bands, as the office writes them.
BANDS = {a: f"{a // 5 * 5}-{a // 5 * 5 + 4}" for a in range(20, 60)}
BANDED = pramopt.Recoding({"age": {str(a): b for a, b in BANDS.items()}}, "age in 5-year bands")
CHOICES = (Choice("age banded", BANDED), Choice("no region", qi=("age", "sex")))


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    """300 records over 40 ages, 8 regions and 2 sexes: most cells unique, so that the designs
    change many records at α = 0.1 and 0.2."""
    rng = np.random.default_rng(7)
    n = 300
    return pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "region": rng.choice(list("ABCDEFGH"), n),
            "sex": rng.choice(["f", "m"], n),
            "weight": rng.random(n),
        }
    )


#: The refinement's iterations: the general designs below 1/2 at α = 0.2 refine for up to
#: the 100 default iterations; every figure checked here is computed from the matrices.
MAX_ITER = 3


@pytest.fixture(scope="module")
def cf(data):
    return choice_frontier(data, QI, ALPHAS, CHOICES, max_iter=MAX_ITER)


def records_of(label: str, data: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """The records and identifying variables of a choice, made here without pramopt."""
    if label == "age banded":
        return data.assign(age=data["age"].map(BANDS)), QI
    if label == "no region":
        return data, ["age", "sex"]
    return data, QI


def counts_of(res, df: pd.DataFrame, qi: list) -> tuple[list, np.ndarray]:
    """The result's cells (as tuples, in matrix order) and U0 counted from the records."""
    cells = [tuple(r) for r in res.cells[qi].itertuples(index=False)]
    u0 = df.groupby(qi).size()
    return cells, np.array([u0[c] for c in cells], dtype=float)


def test_one_row_per_choice_and_alpha(cf):
    pts = cf.points
    assert tuple(pts.columns) == CHOICE_COLUMNS
    labels = ["as given", "age banded", "no region"]
    assert cf.labels == tuple(labels)
    assert list(zip(pts["choice"], pts["alpha"])) == [(c, a) for c in labels for a in ALPHAS]
    assert list(pts["qi"]) == ["age,region,sex"] * 4 + ["age,sex"] * 2
    assert cf.success and (pts["status"] == "success").all() and (pts["seconds"] > 0).all()


def test_changed_share_is_the_expected_changes_of_the_matrix_over_n(cf, data):
    for label in cf.labels:
        df, qi = records_of(label, data)
        for a in ALPHAS:
            res = cf.result(label, a)
            _, U0 = counts_of(res, df, qi)
            P = res.to_dense()
            share = float(U0 @ (1.0 - np.diag(P))) / len(data)
            row = cf.points[(cf.points["choice"] == label) & (cf.points["alpha"] == a)].iloc[0]
            assert row["changed_share"] == pytest.approx(share, rel=1e-9)
            assert share > 0.2  # the data call for changes: the check is not of zeros


def test_cells_of_each_choice_are_those_of_its_records(cf, data):
    for label in cf.labels:
        df, qi = records_of(label, data)
        groups = df.groupby(qi).size()  # the recoding applied with a plain dict
        for a in ALPHAS:
            res = cf.result(label, a)
            cells, _ = counts_of(res, df, qi)
            assert sorted(cells) == sorted(groups.index)
            assert dict(zip(cells, res.table.counts)) == groups.to_dict()
            row = cf.points[(cf.points["choice"] == label) & (cf.points["alpha"] == a)]
            assert row["cells"].iloc[0] == len(groups)
    assert len(data.assign(age=data["age"].map(BANDS)).groupby(QI)) < len(data.groupby(QI))


def test_proven_minimum_is_below_the_design_and_every_design_meets_c1(cf, data):
    pts = cf.points
    assert pts["min_changes"].notna().all()
    assert (pts["min_changes"] <= pts["expected_changes"] * (1 + 1e-9)).all()
    assert np.allclose(pts["min_share"], pts["min_changes"] / len(data))
    for label in cf.labels:
        df, qi = records_of(label, data)
        for a in ALPHAS:
            assert brute_force_risk(cf.result(label, a), df, qi, {}) <= a + 1e-9


def test_variables_per_changed_record_by_a_dense_loop(cf, data):
    for label in cf.labels:
        df, qi = records_of(label, data)
        for a in ALPHAS:
            res = cf.result(label, a)
            cells, U0 = counts_of(res, df, qi)
            P = res.to_dense()
            moved = 0.0
            for m in range(len(cells)):
                for k in range(len(cells)):
                    if m != k and P[m, k] != 0:
                        moved += U0[m] * P[m, k] * sum(x != y for x, y in zip(cells[m], cells[k]))
            expected = moved / float(U0 @ (1.0 - np.diag(P)))
            row = cf.points[(cf.points["choice"] == label) & (cf.points["alpha"] == a)].iloc[0]
            assert row["variables_per_changed_record"] == pytest.approx(expected, rel=1e-9)
            # the fallback made from P's non-zero entries gives the same
            fallback = pramopt.variables_per_changed_record(
                res.matrix, res.table.codes, res.table.counts
            )
            assert fallback == pytest.approx(expected, rel=1e-9)
            assert 1.0 <= expected <= len(qi)


def test_a_frequency_table_takes_key_sets_and_refuses_recodings(cf, data):
    table = pramopt.frequency_table(data, QI)
    f = choice_frontier(table, None, (0.2,), [CHOICES[1]], structure="replacement")
    groups = data.groupby(["age", "sex"]).size()
    res = f.result("no region", 0.2)
    cells = [tuple(r) for r in res.cells.itertuples(index=False)]
    assert dict(zip(cells, res.table.counts)) == groups.to_dict()
    with pytest.raises(InvalidParameterError, match="needs the records"):
        choice_frontier(table, None, (0.2,), [CHOICES[0]])


@pytest.mark.parametrize(
    "choices, kw, needle",
    [
        ([Choice("as given")], {}, "distinct labels"),
        ([Choice("x", qi=("age", "bogus"))], {}, "names \\['bogus'\\]"),
        ([Choice("x", pramopt.Recoding({"weight": {"1": "2"}}))], {}, "recodes \\['weight'\\]"),
        ([CHOICES[1]], {"combinations": [["region", "sex"]]}, "leaves no combination"),
        ([CHOICES[0]], {"domains": {"age": list(range(20, 60))}}, "'domains'"),
        ([CHOICES[1]], {"keep_cells": [{"age": 20, "region": "A", "sex": "f"}]}, "keep_cells"),
        ("no region", {}, "'choices'"),
    ],
)
def test_bad_choices_are_refused_before_any_design(data, choices, kw, needle, monkeypatch):
    import pramopt.choices as ch

    monkeypatch.setattr(ch, "design", lambda *a, **k: pytest.fail("designed before checking"))
    with pytest.raises(InvalidParameterError, match=needle):
        choice_frontier(data, QI, (0.1,), choices, **kw)


def test_labels_are_escaped_shortened_and_formula_safe(data):
    label = "=HYPERLINK(<b>" + "x" * 60
    f = choice_frontier(data, QI, (0.2,), [Choice(label, qi=("age", "sex"))], max_iter=2)
    page = f.to_html(png=b"png")
    assert "<b>" not in page and "&lt;b&gt;" in page
    assert label not in f.summary() and "=HYPERLINK(<b>xxx" in f.summary()
    table = pd.read_csv(io.StringIO(f.to_csv()))
    assert list(table["choice"]) == ["as given", "'" + label]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_command_writes_the_choices_and_refuses_bad_keys(tmp_path, data, cf, monkeypatch):
    src = tmp_path / "d.csv"
    data.to_csv(src, index=False)
    rec = pramopt.write_recoding(BANDED, tmp_path / "recode-1.json")
    out = tmp_path / "c"
    argv = ["frontier", "--data", str(src), "--qi", ",".join(QI), "--alphas", "0.2,0.1"]
    argv += ["--max-iter", str(MAX_ITER)]
    code, stdout, err = _run([*argv, "--recode", str(rec), "--keys", "age,sex", "--out", str(out)])
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["choices.csv", "choices.html", "choices.png"]
    t = pd.read_csv(out / "choices.csv")
    labels = ["as given", "age in 5-year bands", "keys age,sex"]
    assert list(zip(t["choice"], t["alpha"])) == [(c, a) for c in labels for a in ALPHAS]
    # the same cells and proven minimum as the library's on the frame (the file's keys are text)
    assert list(t["cells"]) == list(cf.points["cells"])
    assert np.allclose(t["min_share"], cf.points["min_share"], rtol=1e-4)
    png = (out / "choices.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "choices.html").read_text()
    assert base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", page).group(1)) == png
    assert "age in 5-year bands" in stdout and "proven min" in stdout
    assert len([line for line in err.splitlines() if "α = " in line and "loss" in line]) == 6

    import pramopt.choices as ch

    monkeypatch.setattr(ch, "design", lambda *a, **k: pytest.fail("designed before checking"))
    bad = tmp_path / "bad"
    code, _, err = _run([*argv, "--keys", "age,bogus", "--out", str(bad)])
    assert code == 2 and "--keys 'age,bogus'" in err and "Traceback" not in err
    assert not bad.exists()
