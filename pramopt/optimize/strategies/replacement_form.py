"""The closed forms of a replacement design ``P = diag(1 - o) + o w^T`` within each pool.

Its matrix, its exact L2 loss and its condition number in O(K) (the matrix determinant lemma and
Sherman and Morrison's formula): shared by the replacement strategy (:mod:`.replacement`) and the
optimisation of its retentions (:mod:`.retention`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["replacement_matrix", "replacement_loss", "replacement_condition"]


def replacement_matrix(o: np.ndarray, w: np.ndarray, pools: np.ndarray) -> sp.csr_matrix:
    """``diag(1 - o) + o w^T`` within each pool (``w`` sums to one over each pool's receivers)."""
    K = o.size
    rows, cols, vals = [np.arange(K)], [np.arange(K)], [1.0 - o]
    send = o > 0
    recv = w > 0
    for p in np.unique(pools[send]):
        s = np.flatnonzero(send & (pools == p))
        r = np.flatnonzero(recv & (pools == p))
        rr, cc = np.meshgrid(s, r, indexing="ij")
        rows.append(rr.ravel())
        cols.append(cc.ravel())
        vals.append((o[s][:, None] * w[r][None, :]).ravel())
    P = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(K, K)
    )
    P.sum_duplicates()
    return P


def _pool_parts(o, w, pools):
    lam = 1.0 - o
    a, b = o / lam, w / lam
    c = 1.0 + np.bincount(pools, weights=w * a)  # 1 + w^T diag(lam)^-1 o, per pool
    return lam, a, b, c


def replacement_loss(o: np.ndarray, w: np.ndarray, pools: np.ndarray, counts) -> float:
    """Exact L2 loss of :func:`replacement_matrix` in O(K), by Sherman and Morrison's formula.

    Row l of P^-1 is ``e_l / lam_l - a_l b^T / c`` with ``lam = 1 - o``, ``a = o / lam``,
    ``b = w / lam`` and ``c = 1 + w . a`` (per pool), so
    ``||row_l||^2 = 1/lam_l^2 - 2 a_l b_l / (lam_l c) + a_l^2 ||b||^2 / c^2``, and
    ``(U0^T P)_l = U0(l) lam_l + w_l sum_{m in pool} U0(m) o_m``.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    lam, a, b, c = _pool_parts(o, w, pools)
    if np.any(lam <= 0) or np.any(c <= 0):
        return float("inf")
    bb = np.bincount(pools, weights=b * b, minlength=c.size)
    cp = c[pools]
    row2 = 1.0 / lam**2 - 2.0 * a * b / (lam * cp) + a**2 * bb[pools] / cp**2
    sent = np.bincount(pools, weights=counts * o, minlength=c.size)
    mass = counts * lam + w * sent[pools]
    return float(row2 @ mass / n**2 - 1.0 / n)


def replacement_condition(o: np.ndarray, w: np.ndarray, pools: np.ndarray) -> float:
    """The 1-norm condition number of :func:`replacement_matrix`, estimated with
    ``scipy.sparse.linalg.onenormest`` on P and on P^-1 applied in O(K) each."""
    import scipy.sparse.linalg as spla

    K = o.size
    lam, a, b, c = _pool_parts(o, w, pools)

    def per_pool(weights, x):
        return np.bincount(pools, weights=weights * x, minlength=c.size)[pools]

    def vec(f):  # LinearOperator hands in column vectors
        return lambda x: f(np.asarray(x, dtype=float).ravel())

    P_op = spla.LinearOperator(
        (K, K),
        dtype=float,
        matvec=vec(lambda x: lam * x + o * per_pool(w, x)),
        rmatvec=vec(lambda y: lam * y + w * per_pool(o, y)),
    )
    # P^-1 x = x / lam - a (b . x) / c, and its transpose
    inv = vec(lambda x: x / lam - a * per_pool(b, x) / c[pools])
    inv_t = vec(lambda y: y / lam - b * per_pool(a, y) / c[pools])
    Inv = spla.LinearOperator((K, K), dtype=float, matvec=inv, rmatvec=inv_t)
    return float(spla.onenormest(P_op) * spla.onenormest(Inv))
