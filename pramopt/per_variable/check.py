"""The independent check of C1 for one matrix per variable, over the product space as released.

It shares no code with the design (:mod:`.model`, :mod:`.step`): from the raw cell codes, the
counts and the matrices it recomputes, for every combination π, every present projected cell m
(all of them, not only the rare ones the design restricts itself to) and every released group g of
π's product space, the left-hand side of C1 (Cator et al., eq. (1)),

    prod_{w in π} M_w[m_w, g_w] / sum_l U0(l) prod_{w in π} M_w[l_w, g_w],

the variables outside π summing to 1 in every row.  It is what :func:`pramopt.verify.c1_risk`
computes on the released rows over the product space (``col_codes`` every combination), without
forming them; the tests compare both on small cases.  It fails closed: a matrix that is not
square, has a NaN, infinite or negative entry or a row not summing to 1 gives NaN.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ProductCheck", "check_product_c1", "ROW_TOL"]

#: Rows of a matrix must sum to 1 within this.
ROW_TOL = 1e-9
#: Left-hand sides computed at once (projected cells x groups).
_BLOCK = 2_000_000


@dataclass(frozen=True)
class ProductCheck:
    """The full C1 check of per-variable matrices.

    Attributes
    ----------
    max_risk : float
        The largest left-hand side over every combination, present projected cell and released
        group; NaN when the matrices are invalid (fails every ``<= alpha`` test).
    worst : tuple
        ``(combination index, projected cell codes, group codes)`` where it is attained.
    risk_by_combination : tuple of float
        The largest left-hand side per combination.
    """

    max_risk: float
    worst: tuple
    risk_by_combination: tuple

    def holds(self, alpha: float) -> bool:
        """Whether C1 holds at ``alpha`` (False for NaN)."""
        return bool(self.max_risk <= alpha)


def _valid(mats: Sequence[np.ndarray], levels: Sequence[int]) -> bool:
    for M, L in zip(mats, levels):
        M = np.asarray(M)
        if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < L:
            return False
        if not np.all(np.isfinite(M)) or (M < 0).any():
            return False
        if np.abs(M.sum(axis=1) - 1.0).max() > ROW_TOL:
            return False
    return True


def _released_mass(cells: np.ndarray, weights: np.ndarray, mats: list) -> np.ndarray:
    """``sum_c weights[c] prod_j mats[j][cells[c, j], g_j]`` for every group g, by one einsum."""
    letters = string.ascii_letters
    q = len(mats)
    rows = [M[cells[:, j]] for j, M in enumerate(mats)]  # each (C, L_j)
    spec = ",".join(f"z{letters[j]}" for j in range(q)) + ",z->" + letters[:q]
    return np.einsum(spec, *rows, weights, optimize=True)


def _own_mass(cells: np.ndarray, mats: list) -> np.ndarray:
    """``prod_j mats[j][cells[c, j], g_j]`` for each cell c and group g (no sum over the cells)."""
    letters = string.ascii_letters
    q = len(mats)
    rows = [M[cells[:, j]] for j, M in enumerate(mats)]
    spec = ",".join(f"z{letters[j]}" for j in range(q)) + "->z" + letters[:q]
    return np.einsum(spec, *rows)


def check_product_c1(
    codes: np.ndarray,
    counts: np.ndarray,
    matrices: Sequence[np.ndarray],
    combinations: Sequence[Sequence[int]],
) -> ProductCheck:
    """Check C1 of the per-variable ``matrices`` (rows: original category codes of ``codes``).

    Parameters
    ----------
    codes : ndarray of shape (K, d)
        The present cells.
    counts : ndarray of shape (K,)
    matrices : sequence of d square arrays
        ``matrices[v][a, b]``: the probability that category a of variable v is released as b
        (a matrix may have more categories than ``codes`` uses).
    combinations : sequence of tuples of int
        Π.
    """
    codes = np.asarray(codes, dtype=np.int64)
    counts = np.asarray(counts, dtype=float)
    mats = [np.asarray(M, dtype=float) for M in matrices]
    nan = ProductCheck(float("nan"), (), ())
    if codes.ndim != 2 or codes.shape[1] != len(mats) or codes.shape[0] != counts.shape[0]:
        return nan
    levels = [int(codes[:, v].max()) + 1 if codes.size else 0 for v in range(len(mats))]
    if not combinations or not _valid(mats, levels) or not np.all(np.isfinite(counts)):
        return nan
    best, per = -np.inf, []
    worst: tuple = ()
    for ci, pi in enumerate(combinations):
        pi = list(pi)
        cells, inverse = np.unique(codes[:, pi], axis=0, return_inverse=True)
        weights = np.bincount(np.asarray(inverse).ravel(), weights=counts)
        # a cell of c records has every left-hand side <= 1/c (its records are in the
        # denominator): fewest records first, stopping once 1/c cannot beat the maximum found
        by_count = np.argsort(weights, kind="stable")
        cells, weights = cells[by_count], weights[by_count]
        sub = [mats[v] for v in pi]
        den = _released_mass(cells, weights, sub)  # every released group of π
        top = 0.0
        step = max(1, _BLOCK // max(den.size, 1))
        for s in range(0, cells.shape[0], step):
            if weights[s] > 0 and 1.0 / weights[s] <= top:
                break
            block = cells[s : s + step]
            mass = _own_mass(block, sub)  # (cells of the block, groups...)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(mass > 0, mass / den[None], 0.0)
            r = np.where((mass > 0) & ~(den[None] > 0), np.inf, r)
            k = int(np.argmax(r))
            if r.flat[k] > top:
                top = float(r.flat[k])
            if r.flat[k] > best:
                best = float(r.flat[k])
                at = np.unravel_index(k, r.shape)
                worst = (ci, tuple(block[at[0]].tolist()), tuple(int(x) for x in at[1:]))
        per.append(top)
    return ProductCheck(float(best), worst, tuple(per))
