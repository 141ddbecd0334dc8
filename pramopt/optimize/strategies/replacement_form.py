"""The closed forms of a replacement design ``P = diag(1 - o) + o w^T`` within each pool.

Its matrix, its exact L2 loss and its condition number in O(K) (the matrix determinant lemma and
Sherman and Morrison's formula): shared by the replacement strategy (:mod:`.replacement`) and the
optimisation of its retentions (:mod:`.retention`).  Also the largest common retention of the
empirical replacement design, whose C1 is linear in that retention (:func:`empirical_retention`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "replacement_matrix",
    "replacement_loss",
    "replacement_condition",
    "empirical_distribution",
    "empirical_retention",
]


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


def empirical_distribution(
    counts: np.ndarray, movable: np.ndarray, pools: np.ndarray
) -> np.ndarray:
    """``w`` of the empirical replacement design: each pool's movable records' own distribution,
    ``U0(k) / (movable records of k's pool)`` on movable cells, 0 elsewhere."""
    mass = np.where(movable, np.asarray(counts, dtype=float), 0.0)
    tot = np.bincount(pools, weights=mass)[pools]
    return np.where(tot > 0, mass / np.where(tot > 0, tot, 1.0), 0.0)


def empirical_retention(
    member: np.ndarray,
    sizes: np.ndarray,
    counts: np.ndarray,
    movable: np.ndarray,
    pools: np.ndarray,
    level: float,
) -> float | None:
    """The largest common retention theta of the empirical replacement design at which C1 holds at
    ``level``, or None when none in [0, 1] does.

    The design keeps every movable record with probability theta and otherwise draws it from its
    pool's :func:`empirical_distribution` q; kept cells keep their records.  It is invariant
    (``U0^T P = U0``), so C1's denominator of a group g is U0(g), and the left-hand side of a
    movable cell m of pool s in g is ``(theta + (1 - theta) Q) / U0(g)`` with Q = q(g within s),
    rising in theta; a movable cell outside g has ``(1 - theta) Q / U0(g)``, never more, and a
    kept cell of g has ``1 / U0(g)``.  The largest left-hand side is therefore non-decreasing in
    theta: when the returned theta is below a floor, no retention at or above that floor meets C1.

    Parameters
    ----------
    member : ndarray of shape (K, |Π|)
        Group id of every cell on every combination (:class:`~..constraints.c1.Groups`).
    sizes : ndarray of shape (G,)
        U0(g) of every group.
    counts, movable, pools : ndarray of shape (K,)
        U0, whether a cell's records may change, and the pool of every cell.
    level : float
        The level C1 is met at.

    Returns
    -------
    float or None
    """
    counts = np.asarray(counts, dtype=float)
    if np.any(sizes[np.unique(member[~movable])] * level < 1.0):
        return None  # a kept cell alone in too small a group: no retention helps
    q = empirical_distribution(counts, movable, pools)
    n_pools = int(pools.max(initial=0)) + 1
    theta = 1.0
    for ci in range(member.shape[1]):
        # Q for every (group, pool) that holds movable cells
        key = member[movable, ci] * n_pools + pools[movable]
        pairs, inv = np.unique(key, return_inverse=True)
        Q = np.bincount(np.asarray(inv).ravel(), weights=q[movable])
        bound = level * sizes[pairs // n_pools]
        if np.any(bound < np.minimum(Q, 1.0)):  # not even at theta = 0 (or Q = 1: at none)
            return None
        # (theta (1 - Q) + Q) <= bound, where Q < 1 (else the row is 1 / U0(g) for every theta)
        part = Q < 1.0
        if part.any():
            theta = min(theta, float(np.min((bound[part] - Q[part]) / (1.0 - Q[part]))))
    return theta
