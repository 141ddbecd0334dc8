"""Utility measures of a PRAM matrix: the exact L2 loss (Cator, Hensbergen & Rozenholc, Section 3),
the expected number of changed records, the condition number.

The exact L2 loss of the unbiased estimator (4) is

    l2(P) = (1/n^2) * sum_l ||row_l(P^-1)||^2 * (U0^T P)_l  -  1/n,

which does not depend on the non-identifying variables.  Its first-order term at P = I is
``2/n^2`` times the expected number of changed records, the linear surrogate.  These are the
figures every result reports; the optimiser's differentiable forms of the same loss (its
gradient, the Woodbury form for large sparse designs, the closed form of block designs) are in
:mod:`pramopt.optimize.objectives.l2`.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

__all__ = ["l2_loss", "expected_changes", "condition_number", "DENSE_MAX"]


def as_dense(P) -> np.ndarray:
    """P as a dense float array (a sparse P is made dense: for small matrices only)."""
    return P.toarray() if sp.issparse(P) else np.asarray(P, dtype=float)


def expected_changes(P, counts) -> float:
    """Expected number of records whose identifying values change: sum_m U0(m) (1 - P_mm)."""
    diag = P.diagonal() if sp.issparse(P) else np.diag(np.asarray(P, dtype=float))
    counts = np.asarray(counts, dtype=float)
    return float(counts @ (1.0 - diag))


#: Above this many cells a sparse P is handled by a sparse LU instead of dense algebra.
DENSE_MAX = 1500


def _sparse_lu(P):
    import scipy.sparse.linalg as spla

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return spla.splu(sp.csc_matrix(P, dtype=float))
        except RuntimeError:  # "Factor is exactly singular"
            return None


def _l2_loss_splu(P, counts) -> float:
    """The loss of a large sparse P from a sparse LU: rows of P^-1 come in pieces from
    solves with P^T, so neither a dense inverse nor a dense K x K LU is formed."""
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    K = P.shape[0]
    lu = _sparse_lu(P)
    if lu is None:
        return float("inf")
    w = np.asarray(sp.csr_matrix(P).T @ counts).ravel()
    r = np.empty(K)
    step = 512
    for s in range(0, K, step):
        e = np.zeros((K, min(step, K - s)))
        e[np.arange(s, s + e.shape[1]), np.arange(e.shape[1])] = 1.0
        Y = lu.solve(e, trans="T")  # columns of Y = rows of P^-1
        r[s:s + e.shape[1]] = np.einsum("ij,ij->j", Y, Y)
    if not np.all(np.isfinite(r)):
        return float("inf")
    return float((r @ w) / n**2 - 1.0 / n)


def l2_loss(P, counts) -> float:
    """Exact expected squared L2 error of the unbiased estimator (end of Section 3).

    Returns ``inf`` for a singular (or numerically singular) matrix.  A sparse P with more
    than ``DENSE_MAX`` cells goes through a sparse LU.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    if sp.issparse(P) and P.shape[0] > DENSE_MAX:
        return _l2_loss_splu(P, counts)
    Pd = as_dense(P)
    try:
        with warnings.catch_warnings():  # an exactly singular P is reported as inf, not warned
            warnings.simplefilter("ignore", sla.LinAlgWarning)
            lu = sla.lu_factor(Pd, check_finite=True)
    except (ValueError, np.linalg.LinAlgError):
        return float("inf")
    if np.any(np.abs(np.diag(lu[0])) < 1e-14 * max(1.0, np.abs(Pd).max())):
        return float("inf")
    Q = sla.lu_solve(lu, np.eye(Pd.shape[0]))
    w = counts @ Pd
    r = np.einsum("ij,ij->i", Q, Q)
    return float((r @ w) / n**2 - 1.0 / n)




def condition_number(P) -> float:
    """2-norm condition number of P (inf when singular).

    For a sparse P with more than ``DENSE_MAX`` cells: the 1-norm condition number estimated
    with ``scipy.sparse.linalg.onenormest`` (Higham and Tisseur's block estimator) on P and
    on P^-1 applied through a sparse LU.
    """
    if sp.issparse(P) and P.shape[0] > DENSE_MAX:
        import scipy.sparse.linalg as spla

        lu = _sparse_lu(P)
        if lu is None:
            return float("inf")
        K = P.shape[0]
        inv = spla.LinearOperator((K, K), matvec=lu.solve, rmatvec=lambda y: lu.solve(y, trans="T"),
                                  dtype=float)
        return float(spla.onenormest(sp.csr_matrix(P)) * spla.onenormest(inv))
    try:
        return float(np.linalg.cond(as_dense(P)))
    except np.linalg.LinAlgError:
        return float("inf")
