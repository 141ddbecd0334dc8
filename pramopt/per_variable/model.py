"""The design side of a per-variable PRAM: projected tables, the exact loss and C1's rows.

One row-stochastic matrix ``M_v`` per identifying variable, applied independently, releases a
record of cell m as the combination k with probability ``prod_v M_v[m_v, k_v]`` (the Kronecker
product ``P = kron(M_1, ..., M_d)`` over the whole product space).  Everything the designer needs
factorises over the variables, so nothing of the size of the product space (nor K x K) is made:

* the exact L2 loss of the unbiased estimator, ``(1/n^2) sum_m U0(m) prod_v a_v[m_v] - 1/n`` with
  ``a_v = M_v r_v`` and ``r_v`` the squared row norms of ``M_v^-1`` (:func:`loss_value`,
  :func:`loss_gradient`);
* every row of C1 for a combination π lives on the table projected onto π: the mass of the
  projected cell m into the released group g is ``prod_{w in π} M_w[m_w, g_w]`` and the
  denominator is the projected table contracted with every ``M_w`` (:class:`Projection`);
* a row whose projected cell holds ``c`` records has left-hand side at most ``1/c`` (its own
  records are in the denominator), so only the projected cells with fewer than ``1/alpha``
  records can violate C1 (:attr:`Projection.rare`).

The independent check of a finished design is :mod:`.check`, which shares no code with this
module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Projection",
    "projections",
    "loss_value",
    "loss_gradient",
    "max_risk",
    "GROUPS_MAX",
]

#: A combination whose projected product space has more groups than this is refused.
GROUPS_MAX = 2_000_000
#: Rows of C1 evaluated at once (rare projected cells x groups), to bound memory.
_CHUNK = 4_000_000


def inverse_row_norms(M: np.ndarray) -> np.ndarray:
    """Squared row norms of ``M^-1``; raises ``numpy.linalg.LinAlgError`` when M is singular."""
    N = np.linalg.inv(M)
    if not np.all(np.isfinite(N)):
        raise np.linalg.LinAlgError("singular")
    return np.sum(N * N, axis=1)


def _factors(mats: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """``a_v = M_v r_v`` per variable; None when a matrix is singular."""
    try:
        return [M @ inverse_row_norms(M) for M in mats]
    except np.linalg.LinAlgError:
        return None


def loss_value(codes: np.ndarray, counts: np.ndarray, mats: Sequence[np.ndarray]) -> float:
    """The exact L2 loss over the product space, ``inf`` when a matrix is singular.

    ``sum_l r_l (U0^T P)_l = sum_m U0(m) prod_v (M_v r_v)[m_v]`` because ``r_l = prod_v
    r_v[l_v]`` (the inverse of a Kronecker product is the product of the inverses).
    """
    a = _factors(mats)
    if a is None:
        return math.inf
    n = float(counts.sum())
    prod = np.asarray(counts, dtype=float).copy()
    for v, av in enumerate(a):
        prod *= av[codes[:, v]]
    value = float(prod.sum() / n**2 - 1.0 / n)
    return value if math.isfinite(value) else math.inf


def loss_gradient(
    codes: np.ndarray, counts: np.ndarray, mats: Sequence[np.ndarray], v: int
) -> np.ndarray:
    """The gradient of :func:`loss_value` with respect to the entries of ``M_v``.

    With ``c_i = sum_{m: m_v = i} U0(m) prod_{w != v} a_w[m_w]`` the loss is
    ``(1/n^2) c^T M r(M) - 1/n``; ``d(c^T M r) = c r^T : dM + (M^T c)^T dr`` and, with
    ``N = M^-1``, ``dr_j = 2 sum_k N_jk dN_jk``, ``dN = -N dM N``, so the gradient is
    ``c r^T - 2 N^T diag(M^T c) N N^T``, over ``n^2``.
    """
    a = _factors(mats)
    if a is None:
        raise np.linalg.LinAlgError("singular")
    w = np.asarray(counts, dtype=float).copy()
    for u, au in enumerate(a):
        if u != v:
            w *= au[codes[:, u]]
    M = mats[v]
    c = np.bincount(codes[:, v], weights=w, minlength=M.shape[0])
    N = np.linalg.inv(M)
    r = np.sum(N * N, axis=1)
    G = np.outer(c, r) - 2.0 * N.T @ ((M.T @ c)[:, None] * N) @ N.T
    n = float(counts.sum())
    return G / n**2


@dataclass(frozen=True)
class Projection:
    """The table projected onto one combination π, and what C1's rows over it need.

    Attributes
    ----------
    variables : tuple of int
        π, indices into the identifying variables.
    levels : tuple of int
        Categories of each variable of π; the released groups are every combination of them.
    tensor : ndarray
        The projected counts as a dense array of shape ``levels``.
    rare : ndarray of shape (R, |π|)
        The projected cells with fewer than ``1/alpha`` records (only their rows can bind).
    rare_counts : ndarray of shape (R,)
    """

    variables: tuple
    levels: tuple
    tensor: np.ndarray
    rare: np.ndarray
    rare_counts: np.ndarray

    @property
    def n_groups(self) -> int:
        return int(np.prod(self.levels))


def projections(
    codes: np.ndarray, counts: np.ndarray, levels: Sequence[int], combos, alpha: float
) -> list[Projection]:
    """One :class:`Projection` per combination (``alpha`` says which projected cells are rare)."""
    out = []
    for pi in combos:
        pi = tuple(int(x) for x in pi)
        lv = tuple(int(levels[x]) for x in pi)
        flat = np.ravel_multi_index(tuple(codes[:, list(pi)].T), lv)
        T = np.bincount(flat, weights=np.asarray(counts, dtype=float), minlength=int(np.prod(lv)))
        present = np.flatnonzero(T > 0)
        rare = present[T[present] * alpha < 1.0]
        out.append(
            Projection(
                variables=pi,
                levels=lv,
                tensor=T.reshape(lv),
                rare=np.stack(np.unravel_index(rare, lv), axis=1).astype(np.int64),
                rare_counts=T[rare],
            )
        )
    return out


def contract(T: np.ndarray, mats: Sequence[np.ndarray], skip: int | None = None) -> np.ndarray:
    """``T`` with axis j multiplied by ``mats[j]`` (``sum_l T[l] M[l, g]``), but axis ``skip``."""
    for j, M in enumerate(mats):
        if j != skip:
            T = np.moveaxis(np.tensordot(T, M, axes=([j], [0])), -1, j)
    return T


def candidate_groups(proj: Projection, sub: Sequence[np.ndarray], den: np.ndarray, thr: float):
    """The groups where some rare row may reach ``thr``: ``S(m, g) <= prod_j max_{a in rare_j}
    M_j[a, g_j]`` (the largest entry of each column over the categories rare cells hold), so a
    group whose bound over ``den(g)`` is below ``thr`` has every rare row below it."""
    ub = np.ones(1)
    for j, M in enumerate(sub):
        col = M[np.unique(proj.rare[:, j])].max(axis=0)
        ub = np.multiply.outer(ub, col).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.flatnonzero(~(ub <= thr * den))


def gathered_numerators(rows: np.ndarray, sub: Sequence[np.ndarray], groups: np.ndarray, levels):
    """``prod_j M_j[rows[:, j], g_j]`` for the flat groups ``groups`` only, shape (R, groups)."""
    g = np.unravel_index(groups, levels)
    out = np.ones((rows.shape[0], groups.size))
    for j, M in enumerate(sub):
        out *= M[np.ix_(rows[:, j], g[j])]
    return out


def risk_rows(proj: Projection, mats: Sequence[np.ndarray], thr: float = 0.0):
    """Per chunk of rare cells: (first rare index, groups, left-hand sides (chunk, groups)) over
    the groups where a row may reach ``thr`` (:func:`candidate_groups`)."""
    sub = [mats[x] for x in proj.variables]
    den = contract(proj.tensor, sub).ravel()
    R = proj.rare.shape[0]
    if R == 0:
        return
    groups = candidate_groups(proj, sub, den, thr)
    step = max(1, _CHUNK // max(groups.size, 1))
    for s in range(0, R, step):
        S = gathered_numerators(proj.rare[s : s + step], sub, groups, proj.levels)
        with np.errstate(divide="ignore", invalid="ignore"):
            yield s, groups, np.where(S > 0, S / den[groups], 0.0)


def max_risk(projs: Sequence[Projection], mats: Sequence[np.ndarray], thr: float = 0.0) -> float:
    """The largest left-hand side of C1 over the rows that can bind (the design's own check);
    exact when it is at least ``thr``, else only known to be below ``thr``."""
    best = 0.0
    for p in projs:
        for _, _, r in risk_rows(p, mats, thr):
            if r.size:
                best = max(best, float(np.nanmax(r)) if np.isfinite(r).all() else math.inf)
    return best
