"""The full, unreduced C1 as dense linear-program rows, built here from the definition.

Cator, Hensbergen & Rozenholc, constraint C1: for every present cell m, every triple π and every
k0, ``sum_{k in g} P_mk <= alpha * sum_l U0(l) sum_{k in g} P_lk``.  The variables are the K x K
entries of P (row-major).  Shared by the tests that compare pramopt's bounds with the exact
optimum of small cases; it uses nothing of pramopt but the frequency table's codes and counts.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp


def full_c1_rows(t, alpha: float, size: int = 3, combos=None) -> sp.csr_matrix:
    """Rows ``A`` with ``A @ vec(P) <= 0`` exactly when P meets the full C1 (over ``combos``,
    tuples of column indices, or every combination of ``size`` variables)."""
    K, U, codes = t.n_cells, t.counts.astype(float), t.codes
    rows = []
    for pi in combos if combos is not None else itertools.combinations(range(codes.shape[1]), size):
        keys = [tuple(r) for r in codes[:, list(pi)]]
        for k0 in set(keys):
            ing = np.array([k == k0 for k in keys])
            for m in range(K):
                row = np.zeros((K, K))
                row[:, ing] = -alpha * U[:, None]
                row[m, ing] += 1.0
                rows.append(row.ravel())
    return sp.csr_matrix(np.array(rows))


def row_sums(K: int) -> np.ndarray:
    """Rows ``A_eq`` with ``A_eq @ vec(P) = 1``: every row of P sums to one."""
    return np.kron(np.eye(K), np.ones(K))


def _dense_lp(t, alpha: float, cost, combos=None, lo=None, hi=None):
    """scipy's HiGHS on ``min cost . vec(P)`` over every P meeting the full C1 (over ``combos``,
    or every triple) with rows summing to one; ``lo`` and ``hi`` (K * K, row-major) bound the
    entries of P (default 0 and 1)."""
    from scipy.optimize import linprog

    K = t.n_cells
    A = full_c1_rows(t, alpha, combos=combos)
    return linprog(
        cost,
        A_ub=A,
        b_ub=np.zeros(A.shape[0]),
        A_eq=row_sums(K),
        b_eq=np.ones(K),
        bounds=(0, 1)
        if lo is None and hi is None
        else np.column_stack(
            [np.zeros(K * K) if lo is None else lo, np.ones(K * K) if hi is None else hi]
        ),
        method="highs",
    )


def min_changes(t, alpha: float, combos=None, lo=None, hi=None) -> float:
    """The smallest expected number of changed records, sum U0(m) (1 - P_mm), of any P meeting the
    full C1 (over ``combos``, or every triple), by one dense LP over these rows; ``lo`` and ``hi``
    (K * K, row-major) bound the entries of P (default 0 and 1)."""
    U = t.counts.astype(float)
    res = _dense_lp(t, alpha, -np.diag(U).ravel(), combos, lo, hi)
    assert res.status == 0
    return float(U.sum() + res.fun)


def feasible(t, alpha: float, combos=None, lo=None, hi=None) -> bool:
    """Whether any P meets the full C1 within the bounds (as :func:`min_changes`)."""
    res = _dense_lp(t, alpha, np.zeros(t.n_cells**2), combos, lo, hi)
    assert res.status in (0, 2)  # solved, or proven infeasible
    return res.status == 0
