"""One risk report for any matrix, checked against independent computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from pramopt.baselines.ifpr import ifpr_matrix
from pramopt.baselines.retention import retention_matrix
from pramopt.errors import InvalidParameterError
from pramopt.frequency.table import frequency_table
from pramopt.risk.assessment import Assessment, assess


@pytest.fixture(scope="module")
def data():
    # 3 variables, 20 records, a few rare combinations
    rows = (
        [(0, 0, 0)] * 6
        + [(0, 1, 0)] * 4
        + [(1, 0, 1)] * 5
        + [(1, 1, 1)] * 3
        + [(2, 0, 0)] * 1
        + [(2, 1, 1)] * 1
    )
    return pd.DataFrame(rows, columns=["x", "y", "z"])


def _c1_brute(P, row_cells, col_cells, U0, combos):
    """Left-hand side of C1 (Cator et al., eq. (1)) from its definition, by loops."""
    best = 0.0
    for pi in combos:
        for k0 in {tuple(c[i] for i in pi) for c in col_cells}:
            ks = [j for j, c in enumerate(col_cells) if tuple(c[i] for i in pi) == k0]
            den = sum(U0[h] * sum(P[h, k] for k in ks) for h in range(len(row_cells)))
            for m in range(len(row_cells)):
                num = sum(P[m, k] for k in ks)
                if num > 0:
                    best = max(best, num / den)
    return best


def _cells(df, qi):
    c = df.groupby(qi).size()
    return [tuple(i) for i in c.index], c.to_numpy().astype(float)


def test_assess_small_table(data):
    qi = ["x", "y", "z"]
    cells, U0 = _cells(data, qi)  # sorted lexicographically, as the frequency table
    K = len(cells)
    rng = np.random.default_rng(0)
    P = 0.7 * np.eye(K) + 0.3 * rng.dirichlet(np.ones(K), size=K)
    rep = assess(data, P, qi=qi, combinations=[["x", "y"], ["y", "z"], ["x", "z"]], alpha=0.3)
    combos = [(0, 1), (1, 2), (0, 2)]
    assert rep.max_risk == pytest.approx(_c1_brute(P, cells, cells, U0, combos), rel=1e-12)
    n = U0.sum()
    # ε and k by their definitions (Ikarashi et al., Theorems 1 and 3), as loops
    eps = math.log(max(P[u, w] / P[v, w] for u in range(K) for v in range(K) for w in range(K)))
    ar = min(
        P[u, vp] * P[v, up] / (P[u, up] * P[v, vp])
        for u, v, up, vp in itertools.product(range(K), repeat=4)
    )
    assert rep.epsilon == pytest.approx(eps, rel=1e-12)
    assert rep.k == pytest.approx(1 + (n - 1) * ar, rel=1e-10)
    assert rep.expected_changes == pytest.approx(sum(U0[m] * (1 - P[m, m]) for m in range(K)))
    # exact L2 loss, Cator et al. Section 3: (1/n^2) sum_l ||row_l(P^-1)||^2 (U0^T P)_l - 1/n
    Q = np.linalg.inv(P)
    w = U0 @ P
    assert rep.loss == pytest.approx(
        sum((Q[h] @ Q[h]) * w[h] for h in range(K)) / n**2 - 1 / n, rel=1e-9
    )
    assert rep.invariance_error == pytest.approx(np.abs(U0 @ P - U0).sum())
    assert rep.condition_number == pytest.approx(np.linalg.cond(P))
    assert rep.r1_max is None and rep.n_records == 20 and rep.n_cells == K == rep.n_present
    assert rep.meets_c1 == (rep.max_risk <= 0.3)
    d = rep.to_dict()
    for key in (
        "max_risk",
        "k",
        "epsilon",
        "expected_changes",
        "loss",
        "invariance_error",
        "meets_c1",
    ):
        assert key in d
    s = rep.summary()
    assert "C1 max risk" in s and "Pk-anonymity" in s and "epsilon" in s


def test_assess_identity_is_the_original_data(data):
    t = frequency_table(data, ["x", "y", "z"])
    rep = assess(t, np.eye(t.n_cells))
    # identity: C1 is 1 / U_pi(k0), maximal for the singleton cells
    assert rep.max_risk == 1.0 and rep.k == 1.0 and rep.epsilon == math.inf
    assert rep.expected_changes == 0 and rep.invariance_error == 0


def test_assess_on_the_full_product_space(data):
    qi = ["x", "y", "z"]
    full = pd.DataFrame(list(itertools.product([0, 1, 2], [0, 1], [0, 1])), columns=qi)
    P = np.kron(
        np.kron(retention_matrix(3, 0.5), retention_matrix(2, 0.6)), retention_matrix(2, 0.4)
    )
    rep = assess(data, P, qi=qi, cells=full, combination_size=2)
    present, U0 = _cells(data, qi)
    allc = [tuple(r) for r in full.itertuples(index=False)]
    rows = [allc.index(c) for c in present]
    U_full = np.zeros(len(allc))
    U_full[rows] = U0
    combos = list(itertools.combinations(range(3), 2))
    assert rep.max_risk == pytest.approx(_c1_brute(P[rows], present, allc, U0, combos), rel=1e-12)
    # Corollary 2 for the product: sum of ln((1 + (V-1)ρ)/(1-ρ))
    assert rep.epsilon == pytest.approx(
        math.log(2 / 0.5) + math.log(1.6 / 0.4) + math.log(1.4 / 0.6), rel=1e-12
    )
    assert rep.invariance_error == pytest.approx(np.abs(U_full @ P - U_full).sum())
    assert rep.n_cells == 12 and rep.n_present == len(present)


def test_assess_one_variable_reports_r1():
    # Ghatak & Roy Section 4 frequencies as microdata of one variable
    T = [2, 205, 431, 106, 230, 221, 611, 194]
    df = pd.DataFrame({"c": np.repeat(np.arange(1, 9), T)})
    P = ifpr_matrix(T, 0.1)
    rep = assess(df, P, qi=["c"])
    th = 4 * math.sqrt(2) - 4  # θ* of Section 4
    rest = np.array([205, 106, 230, 221, 194], dtype=float)
    r11 = (2 - th) / (2 * (2 - th) + th**2 * np.sum(rest / (5 * rest - th)))  # equation (11)
    assert rep.r1_max == pytest.approx(r11, rel=1e-9) and rep.r1_max <= 0.1
    assert rep.invariance_error < 1e-9
    assert isinstance(rep, Assessment)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda d: assess(d, np.eye(3), qi=["x", "y", "z"]), "'matrix'"),
        (lambda d: assess(d, np.eye(6)), "'qi'"),
        (lambda d: assess([1, 2], np.eye(6), qi=["x"]), "'data'"),
        (lambda d: assess(d, np.eye(6) * 2, qi=["x", "y", "z"]), "'matrix'"),
        (lambda d: assess(d, np.eye(6), qi=["x", "y", "z"], alpha=2), "'alpha'"),
        (
            lambda d: assess(
                d,
                np.eye(2),
                qi=["x", "y", "z"],
                cells=pd.DataFrame({"x": [0, 1], "y": [0, 0], "z": [0, 0]}),
            ),
            "'cells'",
        ),
    ],
)
def test_bad_input(data, call, name):
    with pytest.raises(InvalidParameterError, match=name):
        call(data)
