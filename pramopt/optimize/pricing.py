"""Column generation: the reduced cost of every transition outside the support.

When pricing finds no transition with a negative reduced cost, the solution of the restricted
program is optimal for the full K x K program too, so starting from a small support
(:mod:`pramopt.optimize.support`) costs nothing in the linear stage; in the refinement the same
pricing uses the gradient of the exact loss.

Pricing a candidate (m, k), m != k, in a program of :mod:`pramopt.optimize.program`
(reduced cost = c - A^T y): the column has coefficient 1 in row-sum row m, U0(m) in invariance
row k, and what C1's rows charge it (:func:`pramopt.optimize.constraints.c1.c1_prices`): every
constraint of the program gives its part (:meth:`pramopt.optimize.constraints.Constraint.prices`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .program import Duals
from .support import Support

__all__ = ["Pricer", "values_at_pairs"]


class Pricer:
    """Reduced costs of transitions outside the support, from the duals of one solve.

    Parameters
    ----------
    support, counts, constraints
        The program that was solved (its support and constraints, e.g. ``program.constraints``).
    duals : Duals
        Row duals of the last optimal solve (:meth:`pramopt.optimize.backends.Loaded.duals`).
    allowed : callable, optional
        ``allowed(rows, cols) -> bool array``: transitions the design permits at all (kept
        cells, strata of fixed variables).
    """

    def __init__(self, support: Support, counts, constraints, duals: Duals, allowed=None):
        self.support = support
        self.counts = np.asarray(counts, dtype=float)
        self.y_rows = duals.rows
        # per column k: the duals charged U0(m) (C1's denominators, invariance); per pair (m, k)
        sB, NT = None, None
        for c in constraints:
            pr = c.prices(duals)
            if pr is None:
                raise ValueError(
                    f"the {c.name!r} rows cannot price transitions outside the "
                    "support (they need a dense one)"
                )
            if pr.per_column is not None:
                sB = pr.per_column if sB is None else sB + pr.per_column
            if pr.per_pair is not None:
                NT = pr.per_pair if NT is None else NT + pr.per_pair
        K = support.K
        self.sB = np.zeros(K) if sB is None else sB
        self.NT = sp.csc_matrix((K, K)) if NT is None else sp.csc_matrix(NT)
        self.allowed = allowed
        # per row, the most negative reduced cost the last call found (0: none)
        self.rowmin = np.zeros(K)

    def reduced_costs(self, cols: np.ndarray, cost: np.ndarray | None = None) -> np.ndarray:
        """K x len(cols) reduced costs of P[:, cols] (``cost``: their objective coefficients)."""
        cols = np.asarray(cols, dtype=np.int64)
        d = -self.y_rows[:, None] - self.counts[:, None] * self.sB[cols][None, :]
        d -= self.NT[:, cols].toarray()
        if cost is not None:
            d += cost
        return d

    def among(
        self, rows, cols, cost=None, tol: float = 1e-9, max_add: int = 100_000
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """:meth:`candidates` over the listed transitions only (``rows[i]``, ``cols[i]``, each
        permitted, none on the diagonal), at a cost linear in their number: with
        ``max_changed_variables`` the permitted transitions are a small part of the K x K ones.

        ``cost``: the objective coefficient of each listed transition (None: zero).  The bound is
        over the listed transitions, which are all the program may use.
        """
        K = self.support.K
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        NT = self.NT.tocsr()
        d = (
            -self.y_rows[rows]
            - self.counts[rows] * self.sB[cols]
            - np.asarray(NT[rows, cols]).ravel()
        )
        if cost is not None:
            d = d + cost
        sup_key = self.support.rows * K + self.support.cols  # sorted (see Support)
        key = rows * K + cols
        pos = np.minimum(np.searchsorted(sup_key, key), sup_key.size - 1)
        neg = (d < -tol) & (sup_key[pos] != key)
        self.rowmin = np.zeros(K)
        if not neg.any():
            return np.empty(0, np.int64), np.empty(0, np.int64), 0.0
        np.minimum.at(self.rowmin, rows[neg], d[neg])
        idx = np.flatnonzero(neg)
        if idx.size > max_add:
            idx = idx[np.argpartition(d[idx], max_add)[:max_add]]
        return rows[idx], cols[idx], float(self.rowmin.sum())

    def candidates(
        self, cost_fn=None, tol: float = 1e-9, max_add: int = 100_000, chunk: int = 256
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Transitions outside the support with reduced cost below ``-tol``, most negative first.

        ``cost_fn(cols)`` gives the K x len(cols) objective coefficients (None: zero, as in
        the linear stage, where only diagonal entries have a cost).

        Returns
        -------
        rows, cols : ndarray
            At most ``max_add`` transitions to add.
        bound : float
            The Lagrangian bound (<= 0) on what the whole K x K program can still gain: each row
            of P sums to one, so no feasible point beats the current objective by more than
            the sum over rows of the row's most negative reduced cost (kept per row in
            ``rowmin`` for a tighter bound where rows can move less than all their mass).
        """
        K = self.support.K
        in_sup = self.support.to_matrix(np.ones(self.support.size)).tocsc()
        keep_r, keep_c, keep_d = [], [], []
        self.rowmin = rowmin = np.zeros(K)
        for start in range(0, K, chunk):
            cols = np.arange(start, min(K, start + chunk))
            d = self.reduced_costs(cols, None if cost_fn is None else cost_fn(cols))
            d[in_sup[:, cols].toarray() > 0] = np.inf  # already in the support (and the diagonal)
            r, c = np.nonzero(d < -tol)
            if r.size == 0:
                continue
            c = cols[c]
            if self.allowed is not None:
                ok = self.allowed(r, c)
                r, c = r[ok], c[ok]
            if r.size == 0:
                continue
            dv = d[r, c - start]
            np.minimum.at(rowmin, r, dv)
            if dv.size > max_add:
                top = np.argpartition(dv, max_add)[:max_add]
                r, c, dv = r[top], c[top], dv[top]
            keep_r.append(r)
            keep_c.append(c)
            keep_d.append(dv)
        if not keep_r:
            return np.empty(0, np.int64), np.empty(0, np.int64), 0.0
        bound = float(rowmin.sum())
        r, c, dv = np.concatenate(keep_r), np.concatenate(keep_c), np.concatenate(keep_d)
        if dv.size > max_add:
            top = np.argpartition(dv, max_add)[:max_add]
            r, c = r[top], c[top]
        return r, c, bound


def values_at_pairs(cost_fn, rows: np.ndarray, cols: np.ndarray, K: int) -> np.ndarray:
    """``cost_fn(cols)[rows, cols]`` pair by pair: by ``cost_fn.at(rows, cols)`` when the cost
    function has it (the entries alone, :class:`~.objectives.l2.Gradient`), else in blocks of
    whole columns (K x 256 at a time)."""
    at = getattr(cost_fn, "at", None)
    if at is not None:
        return np.asarray(at(rows, cols), dtype=float)
    out = np.empty(rows.size)
    order = np.argsort(cols, kind="stable")
    uc, start = np.unique(cols[order], return_index=True)
    bounds = np.append(start, order.size)
    step = max(1, (1 << 21) // max(K, 1))
    for a in range(0, uc.size, step):
        block = uc[a : a + step]
        vals = cost_fn(block)
        sel = order[bounds[a] : bounds[min(a + step, uc.size)]]
        out[sel] = vals[rows[sel], np.searchsorted(block, cols[sel])]
    return out
