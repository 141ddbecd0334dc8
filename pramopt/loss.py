"""Information loss of a PRAM matrix (Cator, Hensbergen & Rozenholc, Section 3).

The exact L2 loss of the unbiased estimator (4) is

    l2(P) = (1/n^2) * sum_l ||row_l(P^-1)||^2 * (U0^T P)_l  -  1/n,

which does not depend on the non-identifying variables.  Its first-order term at P = I is
``2/n^2`` times the expected number of changed records, the linear surrogate.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp


def _dense(P) -> np.ndarray:
    return P.toarray() if sp.issparse(P) else np.asarray(P, dtype=float)


def expected_changes(P, counts) -> float:
    """Expected number of records whose identifying values change: sum_m U0(m) (1 - P_mm)."""
    diag = P.diagonal() if sp.issparse(P) else np.diag(np.asarray(P, dtype=float))
    counts = np.asarray(counts, dtype=float)
    return float(counts @ (1.0 - diag))


def l2_loss(P, counts) -> float:
    """Exact expected squared L2 error of the unbiased estimator (end of Section 3).

    Returns ``inf`` for a singular (or numerically singular) matrix.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    Pd = _dense(P)
    try:
        lu = sla.lu_factor(Pd, check_finite=True)
    except (ValueError, np.linalg.LinAlgError):
        return float("inf")
    if np.any(np.abs(np.diag(lu[0])) < 1e-14 * max(1.0, np.abs(Pd).max())):
        return float("inf")
    Q = sla.lu_solve(lu, np.eye(Pd.shape[0]))
    w = counts @ Pd
    r = np.einsum("ij,ij->i", Q, Q)
    return float((r @ w) / n**2 - 1.0 / n)


def l2_loss_and_grad(P, counts) -> tuple[float, np.ndarray]:
    """Exact L2 loss and its gradient with respect to every entry of P.

    With Q = P^-1, w = U0^T P and r_l = ||row_l(Q)||^2:
    d l2 / d P = (1/n^2) * (U0 r^T - 2 Q^T diag(w) Q Q^T).
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    Pd = _dense(P)
    Q = np.linalg.inv(Pd)
    w = counts @ Pd
    r = np.einsum("ij,ij->i", Q, Q)
    f = (r @ w) / n**2 - 1.0 / n
    M = Q.T @ (w[:, None] * Q)
    grad = (np.outer(counts, r) - 2.0 * (M @ Q.T)) / n**2
    return float(f), grad


def condition_number(P) -> float:
    """2-norm condition number of P (inf when singular)."""
    try:
        return float(np.linalg.cond(_dense(P)))
    except np.linalg.LinAlgError:
        return float("inf")
