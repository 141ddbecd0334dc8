"""The independent check of C1 for one matrix per variable, over the product space as released.

It shares no code with the design (:mod:`.model`, :mod:`.step`): from the raw cell codes, the
counts and the matrices it recomputes, for every combination π, every present projected cell m
(all of them, not only the rare ones the design restricts itself to) and every released group g of
π's product space, the left-hand side of C1 (Cator et al., eq. (1)),

    prod_{w in π} M_w[m_w, g_w] / sum_l U0(l) prod_{w in π} M_w[l_w, g_w],

the variables outside π summing to 1 in every row.  It is what :func:`pramopt.verify.c1_risk`
computes on the released rows over the product space (``col_codes`` every combination), without
forming them; the tests compare both on small cases.  With ``fixed`` strata each cell's records
are drawn with its stratum's matrices: the projected cells are keyed by stratum and every
denominator sums over all the strata (the whole data).  It fails closed: a matrix that is not
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
    groups : tuple of int
        The released groups of each combination (its product space).
    groups_over : tuple of int
        With ``alpha``: per combination, the released groups some row of which is above it.
    """

    max_risk: float
    worst: tuple
    risk_by_combination: tuple
    groups: tuple = ()
    groups_over: tuple = ()

    def holds(self, alpha: float) -> bool:
        """Whether C1 holds at ``alpha`` (False for NaN)."""
        return bool(self.max_risk <= alpha)


def _valid(mats: Sequence[np.ndarray], levels: Sequence[int]) -> bool:
    if len(mats) != len(levels):
        return False
    for M, L in zip(mats, levels):
        M = np.asarray(M)
        if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < L:
            return False
        if not np.all(np.isfinite(M)) or (M < 0).any():
            return False
        if np.abs(M.sum(axis=1) - 1.0).max() > ROW_TOL:
            return False
    return True


def _rows(stacks: list, strata: np.ndarray, cells: np.ndarray) -> list[np.ndarray]:
    """Per variable j, row ``cells[c, j]`` of the matrix of cell c's stratum, (C, L_j) each."""
    return [S[strata, cells[:, j]] for j, S in enumerate(stacks)]


def _released_mass(rows: list, weights: np.ndarray) -> np.ndarray:
    """``sum_c weights[c] prod_j rows[j][c, g_j]`` for every group g, by one einsum."""
    letters = string.ascii_letters
    q = len(rows)
    spec = ",".join(f"z{letters[j]}" for j in range(q)) + ",z->" + letters[:q]
    return np.einsum(spec, *rows, weights, optimize=True)


def _own_mass(rows: list) -> np.ndarray:
    """``prod_j rows[j][c, g_j]`` for each cell c and group g (no sum over the cells)."""
    letters = string.ascii_letters
    q = len(rows)
    spec = ",".join(f"z{letters[j]}" for j in range(q)) + "->z" + letters[:q]
    return np.einsum(spec, *rows)


def _stacks(sets: list, codes: np.ndarray, counts: np.ndarray, at: np.ndarray):
    """Per variable the strata's matrices stacked, (S, L, L); None when anything is invalid
    (shapes, a stratum index, a NaN, infinite or negative entry, a row not summing to 1)."""
    try:
        sets = [[np.asarray(M, dtype=float) for M in m] for m in sets]
    except (TypeError, ValueError):
        return None
    if codes.ndim != 2 or codes.shape[0] != counts.shape[0] or at.shape != counts.shape:
        return None
    d = codes.shape[1]
    if not sets or any(len(m) != d for m in sets) or not np.all(np.isfinite(counts)):
        return None
    if at.size and (at.min() < 0 or at.max() >= len(sets)):
        return None
    levels = [int(codes[:, v].max()) + 1 if codes.size else 0 for v in range(d)]
    if not all(_valid(m, levels) for m in sets):
        return None
    if any(len({m[v].shape for m in sets}) != 1 for v in range(d)):
        return None
    return [np.stack([m[v] for m in sets]) for v in range(d)]


def check_product_c1(
    codes: np.ndarray,
    counts: np.ndarray,
    matrices: Sequence,
    combinations: Sequence[Sequence[int]],
    alpha: float | None = None,
    strata: np.ndarray | None = None,
) -> ProductCheck:
    """Check C1 of the per-variable ``matrices`` (rows: original category codes of ``codes``).

    Parameters
    ----------
    codes : ndarray of shape (K, d)
        The present cells.
    counts : ndarray of shape (K,)
    matrices : sequence of d square arrays, or with ``strata`` a sequence of such sequences
        ``matrices[v][a, b]``: the probability that category a of variable v is released as b
        (a matrix may have more categories than ``codes`` uses); with ``strata``,
        ``matrices[s][v]`` is stratum s's.
    combinations : sequence of tuples of int
        Π.
    alpha : float, optional
        Count, per combination, the released groups with a left-hand side above it.
    strata : ndarray of shape (K,), optional
        Each cell's stratum: its records are drawn with that stratum's matrices, and every
        denominator sums over all the strata.
    """
    codes = np.asarray(codes, dtype=np.int64)
    counts = np.asarray(counts, dtype=float)
    at = np.zeros(len(codes), dtype=np.int64) if strata is None else np.asarray(strata)
    stacks = _stacks([matrices] if strata is None else list(matrices), codes, counts, at)
    if stacks is None or not combinations:
        return ProductCheck(float("nan"), (), ())
    best, per, sizes, over = -np.inf, [], [], []
    worst: tuple = ()
    for ci, pi in enumerate(combinations):
        pi = list(pi)
        # a projected cell per stratum: its records are drawn with their stratum's matrices
        # (one integer per cell: np.unique over rows is many times slower at census scale)
        shape = (len(stacks[0]), *(stacks[v].shape[1] for v in pi))
        flat = np.ravel_multi_index((at, *codes[:, pi].T), shape)
        keys, inverse = np.unique(flat, return_inverse=True)
        units = np.stack(np.unravel_index(keys, shape), axis=1).astype(np.int64)
        weights = np.bincount(np.asarray(inverse).ravel(), weights=counts)
        # a cell of c records has every left-hand side <= 1/c (its records are in the
        # denominator): fewest records first, stopping once 1/c cannot beat the maximum found
        by_count = np.argsort(weights, kind="stable")
        units, weights = units[by_count], weights[by_count]
        unit_strata, cells = units[:, 0], units[:, 1:]
        sub = [stacks[v] for v in pi]
        den = _released_mass(_rows(sub, unit_strata, cells), weights)  # every released group
        top = 0.0
        hit = np.zeros(den.shape, dtype=bool)  # groups with a row above alpha
        step = max(1, _BLOCK // max(den.size, 1))
        for s in range(0, cells.shape[0], step):
            # with alpha, rows go on until none left can exceed it either
            bound = top if alpha is None else min(top, alpha)
            if weights[s] > 0 and 1.0 / weights[s] <= bound:
                break
            block = cells[s : s + step]
            mass = _own_mass(_rows(sub, unit_strata[s : s + step], block))
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(mass > 0, mass / den[None], 0.0)
            r = np.where((mass > 0) & ~(den[None] > 0), np.inf, r)
            if alpha is not None:
                hit |= (r > alpha).any(axis=0)
            k = int(np.argmax(r))
            if r.flat[k] > top:
                top = float(r.flat[k])
            if r.flat[k] > best:
                best = float(r.flat[k])
                at_k = np.unravel_index(k, r.shape)
                worst = (ci, tuple(block[at_k[0]].tolist()), tuple(int(x) for x in at_k[1:]))
        per.append(top)
        sizes.append(int(den.size))
        over.append(int(hit.sum()))
    return ProductCheck(
        float(best), worst, tuple(per), tuple(sizes), tuple(over) if alpha is not None else ()
    )
