"""The report of a per-variable design, computed without the product space.

Every figure is checked against the same figure computed densely, by loops over the Kronecker
product of the matrices over the whole product space (every combination of categories a released
cell), which shares no code with the report; and a census-shaped design, whose released rows
over the product space would hold about 10^9 entries, writes its report from the command line.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.cli import main
from pramopt.per_variable.kind import example_per_variable
from pramopt.per_variable.report import from_per_variable
from pramopt.report import render_markdown, sections


@pytest.fixture(scope="module")
def small():
    df, qi, opts = example_per_variable()
    return df, qi, opts, pramopt.design(df, qi, combination_size=2, **opts)


def dense_figures(df, qi, mats, combos, alpha):
    """Every figure of the report from the dense Kronecker product over the product space."""
    labels = [list(mats[q].index) for q in qi]
    keys = list(itertools.product(*labels))
    K = np.array(keys, dtype=object)
    P = np.ones((1, 1))
    for q in qi:
        P = np.kron(P, mats[q].to_numpy())
    rows = pd.Series([tuple(r) for r in df[qi].itertuples(index=False)]).value_counts()
    U0 = np.array([rows.get(k, 0) for k in keys], dtype=float)
    present = U0 > 0
    out: dict = {"risk": {}}
    for pi in combos:
        proj = [tuple(k[i] for i in pi) for k in keys]
        groups = sorted(set(proj), key=str)
        G = np.array([[p == g for g in groups] for p in proj], dtype=float)  # cell -> its group

        def worst(Q, G=G):
            into = Q @ G  # (cells, groups): mass of each cell into each released group
            with np.errstate(divide="ignore", invalid="ignore"):
                lhs = np.where(into > 0, into / (U0 @ into), 0.0)[present]
            return lhs.max(axis=0)

        after, before = worst(P), worst(np.eye(len(keys)))
        name = ", ".join(qi[i] for i in pi)
        out["risk"][name] = (len(after), before.max(), after.max(),
                             int((before > alpha).sum()), int((after > alpha).sum()))  # fmt: skip
    flow = U0[:, None] * P
    differs = K[:, None, :] != K[None, :, :]  # (from, to, variable)
    out["stay"] = {keys[m]: P[m, m] for m in np.flatnonzero(present)}
    out["changed"] = {q: float((flow * differs[:, :, j]).sum()) for j, q in enumerate(qi)}
    out["after"] = {
        (q, a): float(flow[:, K[:, j] == a].sum()) for j, q in enumerate(qi) for a in labels[j]
    }
    out["transitions"] = {
        (q, a, b): flow[np.ix_(K[:, j] == a, K[:, j] == b)].sum() / U0[K[:, j] == a].sum()
        for j, q in enumerate(qi)
        for a in labels[j]
        for b in labels[j]
    }
    changes = float(U0 @ (1 - np.diag(P)))
    out["expected changes"] = changes
    out["per changed"] = float((flow * differs.sum(axis=2)).sum()) / changes
    out["n"] = U0.sum()
    return out


def _unsafe(res):
    """The design with region's and tenure's matrices moved towards the identity (fails C1)."""
    mats = dict(res.variable_matrices)
    for q in ("region", "tenure"):
        M = mats[q].to_numpy()
        mats[q] = pd.DataFrame(0.2 * M + 0.8 * np.eye(len(M)), index=mats[q].index,
                               columns=mats[q].columns)  # fmt: skip
    return mats


@pytest.mark.parametrize("case", ["designed", "unsafe", "unsafe, every combination"])
def test_every_figure_equals_the_dense_product_space_one(small, case):
    df, qi, opts, res = small
    if case != "designed":
        # the design's kept check figures are of other matrices: the report must not show them
        res = dataclasses.replace(res, variable_matrices=_unsafe(res))
    if case.endswith("every combination"):
        combos = [c for r in (1, 2, 3) for c in itertools.combinations(qi, r)]
        res = dataclasses.replace(res, combinations=tuple(combos))
    alpha = opts["alpha"]
    combos = res.combination_indices
    want = dense_figures(df, list(qi), res.variable_matrices, combos, alpha)
    d = from_per_variable(res)
    got = {s.id: s.data for s in sections(d)}
    risk = got["risk"].set_index("combination")
    assert set(risk.index) == set(want["risk"])
    for name, (groups, before, after, over_b, over_a) in want["risk"].items():
        row = risk.loc[name]
        assert row["groups"] == groups
        assert row["risk_before"] == pytest.approx(before, rel=1e-12)
        assert row["risk_after"] == pytest.approx(after, rel=1e-9)
        assert (row["over_before"], row["over_after"]) == (over_b, over_a)
    if case != "designed":  # the unsafe matrices have groups over alpha for the test to count
        assert risk["over_after"].sum() > 0
    assert list(risk["risk_after"]) == sorted(risk["risk_after"], reverse=True)
    # changes against frequency: P_mm of each present cell, with its records
    t = res.table
    cells = [tuple(t.categories[j][c] for j, c in enumerate(row)) for row in t.codes]
    pts = got["change_vs_frequency"]
    np.testing.assert_allclose(1 - pts.change, [want["stay"][c] for c in cells], rtol=1e-12)
    np.testing.assert_array_equal(pts.frequency, t.counts)
    rates = got["change_rates"].set_index("variable")
    for q in qi:
        e = want["changed"][q]
        assert rates.loc[q, "expected records changed"] == pytest.approx(e, abs=1e-9)
        assert rates.loc[q, "share of records"] == pytest.approx(e / want["n"], abs=1e-12)
    margins = got["margins"]
    for (q, a), e in want["after"].items():
        row = margins[(margins["variable"] == q) & (margins["category"] == str(a))]
        assert row["after (expected)"].item() == pytest.approx(e, abs=1e-6)
        assert row["before"].item() == float((df[q] == a).sum())
    for (q, a, b), e in want["transitions"].items():
        assert got["transitions"][q].loc[str(a), str(b)] == pytest.approx(e, abs=1e-6)
    assert d.figures["expected changes"] == pytest.approx(want["expected changes"], rel=1e-12)
    per = d.figures["changed values per changed record"]
    assert per == pytest.approx(want["per changed"], rel=1e-9)
    assert "released tenure" in render_markdown(d)


@pytest.mark.slow
def test_census_shaped_cli_design_writes_its_report(tmp_path):
    import sys

    sys.path.insert(0, ".")
    from benchmarks.census_data import census_data

    src = tmp_path / "census.csv"
    census_data(200_000, keys=5).to_csv(src, index=False)
    out = tmp_path / "design"
    qi = "age,sex,region,marital,education"
    argv = ["design", "--data", str(src), "--qi", qi, "--alpha", "0.1", "--combinations", "3",
            "--structure", "per_variable", "--out", str(out), "-q"]  # fmt: skip
    assert main(argv) == 0
    res = pramopt.load_design(out)
    # the released rows over the product space would hold present cells x 57,600 entries
    assert len(res.table.counts) * 18 * 2 * 40 * 5 * 8 > 20_000_000
    md = (out / "report.md").read_text()
    assert "## Risk before and after" in md and "released marital" in md
    assert (out / "report.html").stat().st_size > 0
