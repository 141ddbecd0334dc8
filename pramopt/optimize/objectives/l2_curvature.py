"""Curvature of the exact L2 loss: the diagonal of its Hessian on the entries of a support.

The refinement (:mod:`pramopt.optimize.strategies.refine`) models the loss by
``g . d + 1/2 d' B d`` with ``B`` this diagonal (clipped to be positive).  With ``Q = P^-1``,
``w = U0^T P``, ``r_l = ||row_l(Q)||^2``, ``c_i = sum_l w_l Q_li^2`` and
``T = Q^T W Q Q^T`` (the matrix of the gradient, ``grad = (U0 r^T - 2 T) / n^2``), moving one
entry ``P_ij`` by ``t`` changes ``Q`` by ``-t Q e_i e_j^T Q + t^2 Q_ji Q e_i e_j^T Q + ...`` and
``w_j`` by ``t U0_i``, so that::

    d2 loss / d P_ij^2 = (2 r_j c_i - 4 U0_i Q_ji r_j + 4 Q_ji T_ij) / n^2.
"""

from __future__ import annotations

import numpy as np

from .l2 import SparseL2

__all__ = ["l2_hessian_diagonal", "l2_curvature_on_support"]


def l2_hessian_diagonal(P, counts, rows, cols, grad=None) -> np.ndarray:
    """Second derivatives ``d2 loss / d P[rows[i], cols[i]]^2`` of the exact L2 loss.

    Parameters
    ----------
    P : ndarray or scipy.sparse matrix, shape (K, K)
        A non-singular matrix; a dense array is inverted, a sparse one factorised as in
        :class:`~pramopt.optimize.objectives.l2.SparseL2` (a diagonal plus a few receiver
        columns).
    counts : array_like, shape (K,)
        ``U0``, the records per cell.
    rows, cols : array_like of int
        The entries asked for.
    grad : array_like, optional
        The loss's gradient at the same entries, when the caller has it (saves recomputing
        ``T`` on a sparse matrix).

    Returns
    -------
    ndarray of float
        Same length as ``rows``; ``inf`` everywhere when ``P`` is singular.
    """
    counts = np.asarray(counts, dtype=float)
    rows = np.asarray(rows, dtype=np.intp)
    cols = np.asarray(cols, dtype=np.intp)
    n = counts.sum()
    if isinstance(P, np.ndarray):
        try:
            Q = np.linalg.inv(P)
        except np.linalg.LinAlgError:
            return np.full(rows.size, np.inf)
        w = counts @ P
        r = np.einsum("ij,ij->i", Q, Q)
        c = np.einsum("li,l,li->i", Q, w, Q)
        T = (Q.T @ (w[:, None] * Q)) @ Q.T
        qji = Q[cols, rows]
        tij = T[rows, cols]
    else:
        s = SparseL2(P, counts)
        if s.singular:
            return np.full(rows.size, np.inf)
        # Q = Dn + QR S^T (see SparseL2): Q_ji = Dn_j [i = j] + QR[j, pos(i)] for a receiver i,
        # and c_i = w_i Dn_i^2 off the receivers, (QR^T W QR)_ii on them.
        R = s.receivers
        pos = np.full(s.K, -1, dtype=np.intp)
        pos[R] = np.arange(R.size)
        r, w, Dn = s._r, s._w, s._Dn
        c = w * Dn**2
        c[R] = s.h_diagonal()
        qji = np.where(rows == cols, Dn[cols], 0.0)
        inr = pos[rows] >= 0
        qji[inr] += np.asarray(s._QRx[s._idx[cols[inr]], pos[rows[inr]]]).ravel()
        g = s.grad_at(rows, cols) if grad is None else np.asarray(grad, dtype=float)
        tij = (counts[rows] * r[cols] - n**2 * g) / 2.0
    h = 2.0 * r[cols] * c[rows] - 4.0 * counts[rows] * qji * r[cols] + 4.0 * qji * tij
    return h / n**2


def l2_curvature_on_support(support, counts, sparse: bool):
    """``curvature(x, g) -> B``: the Hessian's diagonal on ``support`` at ``x``, as a model.

    Negative or zero second derivatives (the loss is not convex) are raised to a small
    positive floor, 1e-3 of the median positive one, so that the model stays convex.
    """
    counts = np.asarray(counts, dtype=float)

    def curvature(x, g=None):
        P = support.to_matrix(x)
        P = P.toarray() if not sparse else P
        h = l2_hessian_diagonal(P, counts, support.rows, support.cols, grad=g if sparse else None)
        pos = h[np.isfinite(h) & (h > 0)]
        floor = 1e-3 * float(np.median(pos)) if pos.size else 1.0
        return np.where(np.isfinite(h) & (h > floor), h, floor)

    return curvature
