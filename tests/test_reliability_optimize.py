"""Reliability of the designer's structures: no false INFEASIBLE, floors that hold exactly.

The design-level tests reproduce failures seen in a randomized campaign (a replacement design
reported INFEASIBLE where one exists; a diagonal entry a hair below ``min_diagonal``).  Every
check of C1 here is the brute force of ``random_cases`` (written from the paper's definition,
eq. (1)), and the design that shows a case feasible (``random_cases.witness``) is built and
checked there, not by pramopt.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from random_cases import brute_force_risk, option_violations, witness

import pramopt
from pramopt.frequency.combinations import resolve_combinations
from pramopt.optimize.problem import DesignProblem
from pramopt.optimize.strategies.replacement_form import empirical_retention
from pramopt.optimize.support import hold_floor
from pramopt.params import DesignParams

QI3 = ["a", "b", "c"]


def _sparse_cells(n_cells: int, extra: int) -> pd.DataFrame:
    """``n_cells`` distinct cells over three keys of four values, one record each, and ``extra``
    more records in the first cells: a table of mostly single records."""
    cells = list(itertools.product(range(4), repeat=3))[:n_cells]
    rows = cells + cells[:extra]
    return pd.DataFrame(rows, columns=QI3)


def _assert_verified(res, df, qi, alpha, opts):
    assert res.success, res.message
    assert "Full C1 verified" in res.message
    assert brute_force_risk(res, df, qi, opts) <= alpha
    assert option_violations(res, df, qi, opts) == []


# -- the replacement structure finds the empirical replacement design -------------------------


def test_replacement_finds_the_empirical_design_on_a_table_of_single_records():
    # 34 records in 32 cells: P = 0.02 I + 0.98 * 1 (U0/n)^T keeps C1 at 0.05, yet the
    # replacement structure once answered INFEASIBLE
    df = _sparse_cells(32, 2)
    n, alpha, theta = len(df), 0.05, 0.02
    opts = {"combination_size": 3, "structure": "replacement"}
    # a single record's own group: (theta + (1 - theta) / n) / 1, the largest left-hand side
    exact = theta + (1.0 - theta) / n
    assert witness(df, QI3, alpha, opts, lam=theta) == pytest.approx(exact, rel=1e-12)
    assert exact <= alpha
    res = pramopt.design(df, QI3, alpha=alpha, **opts)
    _assert_verified(res, df, QI3, alpha, opts)
    P = res.to_dense()
    assert abs(np.linalg.det(P)) > 0


def _random_sparse_case(seed: int) -> tuple[pd.DataFrame, float, dict]:
    """25-60 records over 64 possible cells, alpha between 1.2 and 3 over the records of the
    smallest stratum (the empirical design's risk tends to 1 / those records as its retention
    falls), some with strata, invariance or a floor."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(25, 60))
    df = pd.DataFrame({q: rng.integers(0, 4, n) for q in QI3})
    opts: dict = {"combination_size": int(rng.integers(2, 4)), "structure": "replacement"}
    if rng.random() < 0.3:
        opts["invariant"] = True
    if rng.random() < 0.3:
        opts["min_diagonal"] = float(rng.choice([0.005, 0.01]))
    smallest = n
    if rng.random() < 0.3:
        opts["fixed"] = ["a"]
        smallest = int(df["a"].value_counts().min())
    alpha = float(np.round(rng.uniform(1.2, 3.0) / smallest, 4))
    return df, alpha, opts


def _largest_retention(df, alpha, opts):
    t = pramopt.frequency_table(df, QI3)
    combos = resolve_combinations(t.qi, opts.get("combination_size"), None, "test")
    params = DesignParams.from_options("design", alpha=alpha, fixed=opts.get("fixed"))
    pb = DesignProblem.build(t, combos, params)
    movable = ~pb.kept
    return empirical_retention(
        pb.groups.member, pb.groups.size, pb.counts, movable, pb.strata, alpha
    )


def test_empirical_retention_is_where_the_brute_force_risk_reaches_alpha():
    # one record per cell but two: the largest left-hand side is theta + (1 - theta) / n, which
    # reaches alpha at theta = (alpha - 1/n) / (1 - 1/n)
    df = _sparse_cells(32, 2)
    n, alpha = len(df), 0.05
    opts = {"combination_size": 3}
    theta = _largest_retention(df, alpha, opts)
    assert theta == pytest.approx((alpha - 1.0 / n) / (1.0 - 1.0 / n), rel=1e-12)
    # with strata: the brute force of that design is alpha at theta, above it just beyond
    df, _, _ = _random_sparse_case(1)
    opts = {"combination_size": 3, "fixed": ["a"]}
    theta = _largest_retention(df, 0.3, opts)
    assert 0.0 < theta < 1.0
    assert witness(df, QI3, 0.3, opts, lam=theta) == pytest.approx(0.3, rel=1e-12)
    assert witness(df, QI3, 0.3, opts, lam=theta + 1e-6) > 0.3


@pytest.mark.parametrize("seed", range(16))
def test_replacement_succeeds_whenever_the_empirical_design_meets_c1(seed):
    # the empirical replacement design at the smallest retention the structure allows (its floor;
    # its risk only falls with the retention): when that meets C1 (brute force), the replacement
    # structure must return a verified design
    df, alpha, opts = _random_sparse_case(seed)
    lam = max(1e-3, opts.get("min_diagonal") or 0.0)
    res = pramopt.design(df, QI3, alpha=alpha, **opts)
    if witness(df, QI3, alpha, opts, lam=lam) <= alpha:
        _assert_verified(res, df, QI3, alpha, opts)
    elif res.success:  # a success is always a verified one
        _assert_verified(res, df, QI3, alpha, opts)


# -- min_diagonal holds exactly ---------------------------------------------------------------


def _skewed_case(seed: int, levels=(5, 5, 6)) -> tuple[pd.DataFrame, list, float]:
    """200-700 records over three keys of skewed categories (50-110 cells), alpha in [0.1, 0.3]."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 700))
    df = pd.DataFrame(
        {f"q{j}": rng.choice(c, n, p=rng.dirichlet(np.full(c, 0.8))) for j, c in enumerate(levels)}
    )
    return df, list(df.columns), float(np.round(rng.uniform(0.1, 0.3), 3))


def _assert_floor_exact(res, df, qi, alpha, opts):
    _assert_verified(res, df, qi, alpha, opts)
    P = res.to_dense()
    floor = opts["min_diagonal"]
    assert P.diagonal().min() >= floor  # a hard floor: no tolerance
    assert P.min() >= 0.0
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)


# the linear stage leaves many diagonal entries at the floor, where renormalising their rows once
# took some an ulp below it (the refinement, left on, once left two 4.7e-10 below)
@pytest.mark.parametrize("seed", [4, 17, 18, 29, 33, 39])
def test_general_design_holds_min_diagonal_exactly(seed):
    df, qi, alpha = _skewed_case(seed)
    opts = {
        "structure": "general",
        "min_diagonal": 0.52,
        "gamma": 0.52,
        "refine_loss": False,
    }
    res = pramopt.design(df, qi, alpha=alpha, **opts)
    _assert_floor_exact(res, df, qi, alpha, opts)


@pytest.mark.parametrize("seed", [1, 21])
def test_refined_general_design_holds_min_diagonal_exactly(seed):
    df, qi, alpha = _skewed_case(seed)
    opts = {"structure": "general", "min_diagonal": 0.52, "gamma": 0.52}
    res = pramopt.design(df, qi, alpha=alpha, **opts)
    _assert_floor_exact(res, df, qi, alpha, opts)


@pytest.mark.parametrize("structure", ["replacement", "blocks", "auto"])
@pytest.mark.parametrize("seed", [4, 17])
def test_other_structures_hold_min_diagonal_exactly(structure, seed):
    df, qi, alpha = _skewed_case(seed)
    opts = {"structure": structure, "min_diagonal": 0.3}
    res = pramopt.design(df, qi, alpha=alpha, **opts)
    if res.success:
        _assert_floor_exact(res, df, qi, alpha, opts)
    else:
        assert res.status is pramopt.Status.INFEASIBLE


def _row_stochastic_below_floor(floor: float) -> np.ndarray:
    # rows 0 and 2 hold their diagonal 5e-10 below the floor, the mass on their largest
    # off-diagonal entry; row 1 holds it; row 3 is a kept cell
    gap = 5e-10
    return np.array(
        [
            [floor - gap, 0.30 + gap, 0.18, 0.0],
            [0.10, 0.60, 0.30, 0.0],
            [0.05, 0.25 + gap, floor - gap, 0.18],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


@pytest.mark.parametrize("as_sparse", [False, True])
def test_hold_floor_lifts_entries_a_hair_below_the_floor(as_sparse):
    floor = 0.52
    A = _row_stochastic_below_floor(floor)
    P = sp.csr_matrix(A) if as_sparse else A
    H = hold_floor(P, floor)
    H = H.toarray() if as_sparse else np.asarray(H)
    # the floor exactly; the 5e-10 taken from the largest off-diagonal entry of its row
    expected = np.array(
        [
            [floor, 0.30, 0.18, 0.0],
            [0.10, 0.60, 0.30, 0.0],
            [0.05, 0.25, floor, 0.18],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
    assert H.diagonal().min() >= floor
    assert np.all(H.diagonal()[[0, 2]] == floor)
    assert H.min() >= 0.0
    np.testing.assert_allclose(H, expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(H.sum(axis=1), A.sum(axis=1), rtol=0, atol=1e-15)
    assert not np.any((H != 0) & (A == 0))  # no transition added


def test_hold_floor_takes_from_several_entries_and_leaves_held_matrices_alone():
    # 0.3 short of the floor on a row whose largest off-diagonal entry has 0.2: it gives all of
    # it, the next largest the other 0.1
    A = np.array([[0.3, 0.2, 0.15, 0.15, 0.2], *np.eye(5)[1:]])
    H = hold_floor(A, 0.6)
    np.testing.assert_allclose(H[0], [0.6, 0.0, 0.15, 0.15, 0.1], rtol=0, atol=1e-15)
    assert H[0, 0] == 0.6 and H.min() >= 0.0
    np.testing.assert_array_equal(H[1:], A[1:])
    P = sp.csr_matrix(np.eye(3))
    assert hold_floor(P, 0.5) is P
    assert hold_floor(A, None) is A
