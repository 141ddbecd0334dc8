"""The peers as they really behave: the recorded runs of the real packages (pymasq 0.6.5 and
pram 0.2.0 under pandas < 3, benchmarks/peers_real.py) against the formulas of benchmarks/peers.py,
and the rows of benchmarks/results/peers.csv against computations written here."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from test_design import brute_force_max_risk

import pramopt
from benchmarks import peers as B
from benchmarks._common import RESULTS, TESTDATA_KEYS7

REAL = RESULTS / "peers_real"


def _record(name):
    path = REAL / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no recorded run {path}")
    return json.loads(path.read_text())


def _data(name, shared_data=None):
    if name == "example":
        return pramopt.example_data(), list(pramopt.example.EXAMPLE_QI)
    if name == "testdata-7":
        return pd.read_csv(shared_data / "testdata.csv"), TESTDATA_KEYS7
    raise KeyError(name)


def test_records_name_the_packages_and_a_pandas_they_support():
    rec = _record("example")
    v = rec["versions"]
    assert v["pymasq"] == "0.6.5" and v["pram"] == "0.2.0"
    assert int(v["pandas"].split(".")[0]) == 2
    assert rec["pymasq"]["ok"] and rec["pram"]["ok"]


def test_under_pandas_3_neither_package_runs():
    rec = _record("pandas3/example")
    assert rec["versions"]["pandas"].startswith("3.")
    assert rec["pymasq"]["error"] == "KeyError: 0"
    assert rec["pram"]["error"].startswith("AttributeError") and "applymap" in rec["pram"]["error"]


@pytest.mark.parametrize("name", ["example", "testdata-7"])
def test_pram_formula_equals_the_packages_own_function(name, request):
    rec = _record(name)
    df, qi = _data(name, request.getfixturevalue("shared_data") if name != "example" else None)
    t = pramopt.frequency_table(df, qi)
    for real, formula in zip(B.real_pram_matrices(t, rec), B.pram_formula_matrices(t)):
        np.testing.assert_allclose(real, formula, rtol=0, atol=1e-15)


def test_pram_formula_equals_the_live_package():
    # where pram imports and pandas < 3 (its own function fails under pandas 3's copy-on-write)
    pram = pytest.importorskip("pram")
    if int(pd.__version__.split(".")[0]) >= 3:
        pytest.skip("pram 0.2.0 needs pandas < 3")
    df, qi = _data("example")
    t = pramopt.frequency_table(df, qi)
    for v, formula in enumerate(B.pram_formula_matrices(t)):
        vals = df[qi[v]].astype(str).to_numpy()
        tm = pram.Pram.__get_weighted_transition_matrix__(vals, 0.8, 0.5)
        order = [str(c) for c in t.categories[v]]
        np.testing.assert_allclose(tm.loc[order, order].to_numpy().T, formula, rtol=0, atol=1e-15)


def test_pymasq_real_matrices_use_count_sorted_frequencies(shared_data):
    # testdata, 7 keys, string labels: the package pairs the sorted categories with the counts
    # sorted largest first; pymasq_as_computed reproduces that to rounding, the idealised
    # formula (each category's own share) is invariant, the package's matrices are not
    rec = _record("testdata-7")
    df, qi = _data("testdata-7", shared_data)
    t = pramopt.frequency_table(df, qi)
    real = B.real_pymasq_matrices(t, rec)
    diag = B.pymasq_diagonals(t, rec)
    for a, b in zip(real, B.pymasq_as_computed(t, diag)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    ideal = B.pymasq_idealised_matrices(t, diag)
    for v, (M, ideal_v) in enumerate(zip(real, ideal)):
        f = np.bincount(t.codes[:, v], weights=t.counts)
        np.testing.assert_allclose(f @ ideal_v, f, rtol=1e-12)  # idealised: invariant
        np.testing.assert_allclose(M.sum(axis=1), 1, atol=1e-12)
    assert B.invariance_error(t, real) > 1
    assert max(float(np.abs(a - b).max()) for a, b in zip(real, ideal)) == pytest.approx(
        0.298, abs=0.001
    )
    # the same call with the values read as numbers (no category 0) raises KeyError: 0
    assert rec["pymasq_numeric_values"]["error"] == "KeyError: 0"


def _restricted_by_loops(t, mats):
    K = t.n_cells
    P = np.empty((K, K))
    for m, k in itertools.product(range(K), range(K)):
        P[m, k] = np.prod([mats[v][t.codes[m, v], t.codes[k, v]] for v in range(t.codes.shape[1])])
    return P / P.sum(axis=1, keepdims=True)


def test_peer_table_rows_name_what_ran_and_match_the_records():
    path = RESULTS / "peers.csv"
    if not path.exists():
        pytest.skip("peers study not run")
    tab = pd.read_csv(path, comment="#")
    rec = _record("example")
    names = set(tab.peer)
    assert {
        "pymasq 0.6.5 (real package)",
        "idealised formula after pymasq 0.6.5",
        "pram 0.2.0 (real package)",
        "sdcMicro 5.8.1 pram() formula, as released",
    } <= names
    for row in tab.itertuples(index=False):
        if row.peer.endswith("(real package)"):
            pkg = row.peer.split()[0]
            assert f"{pkg} {rec['versions'][pkg]} pram() run" in row.what_was_run
            assert f"pandas {rec['versions']['pandas']}" in row.what_was_run
        elif row.peer.startswith("idealised"):
            assert row.what_was_run.startswith("NOT the package")
    # the example's numbers, recomputed: restricted C1 by loops over records, released share
    df, qi = _data("example")
    t = pramopt.frequency_table(df, qi)
    ex = tab[tab.dataset == "example"].set_index("peer")
    combos = list(itertools.combinations(range(len(qi)), 3))
    for name, mats in (
        ("pymasq 0.6.5 (real package)", B.real_pymasq_matrices(t, rec)),
        ("pram 0.2.0 (real package)", B.real_pram_matrices(t, rec)),
    ):
        P = _restricted_by_loops(t, mats)
        assert ex.loc[name, "max_risk_restricted"] == pytest.approx(
            brute_force_max_risk(P, df, qi, combos), rel=1e-3
        )
        every = itertools.product(*[range(len(c)) for c in t.categories])
        present = {tuple(c) for c in t.codes}
        inside = np.zeros(t.n_cells)
        for k in every:
            if tuple(k) in present:
                inside += np.prod([mats[v][t.codes[:, v], k[v]] for v in range(len(qi))], axis=0)
        assert ex.loc[name, "mean_leaving"] == pytest.approx(
            t.counts @ (1 - inside) / t.n, rel=1e-3, abs=1e-9
        )
