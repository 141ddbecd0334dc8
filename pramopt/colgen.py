"""Sparse candidate transitions: a cover of the problem groups, and column generation.

Cator et al. (Section 4) observe that a good P only moves records from frequent cells into the
few cells that cover the problem combinations.  The designer therefore starts from a small
support -- the diagonal plus transitions from the largest cells into a *cover* of the problem
(π, k0) groups -- and widens it only where the linear program's duals say that a transition
would help (column generation).  When pricing finds no transition with a negative reduced cost,
the solution of the restricted program is optimal for the full K x K program too, so the
restriction costs nothing in the linear stage; in the refinement the same pricing uses the
gradient of the exact loss.

Pricing a candidate (m, k), m != k, in the program of :class:`pramopt.solve.HighsLP`
(reduced cost = c - A^T y): the column has coefficient 1 in row-sum row m, U0(m) in the
denominator row of every used group of k, 1 in every C1 row (m, g) of the working set with
k in g, and U0(m) in invariance row k.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .model import C1Block, Groups, Support


def greedy_cover(groups: Groups, problem: np.ndarray, counts, times: int = 1) -> np.ndarray:
    """Cells that together hit every problem group ``times`` times (greedy hitting set).

    Each pick is the cell in the most not-yet-covered problem groups (ties: the larger cell),
    the classical ln(G)-approximation of a minimum cover.  A group with fewer member cells
    than ``times`` is covered by all of them.
    """
    member = groups.member
    counts = np.asarray(counts, dtype=float)
    need = np.where(problem, times, 0).astype(np.int64)
    chosen = np.zeros(member.shape[0], dtype=bool)
    # a cell's score: problem groups among its |Π| groups that still need a cover
    tie = counts / (counts.max() + 1.0)
    while True:
        score = (need[member] > 0).sum(axis=1).astype(float)
        score[chosen] = 0.0
        best = int(np.argmax(score + tie * (score > 0)))
        if score[best] <= 0:
            break
        chosen[best] = True
        need[member[best]] = np.maximum(need[member[best]] - 1, 0)
    return np.flatnonzero(chosen)


def membership(groups: Groups) -> sp.csr_matrix:
    """G x K indicator: cell k belongs to group g (k's projection on π(g) is k0(g))."""
    K, nP = groups.member.shape
    return sp.csr_matrix((np.ones(K * nP), (groups.member.ravel(), np.repeat(np.arange(K), nP))),
                         shape=(groups.n_groups, K))


class Pricer:
    """Reduced costs of transitions outside the support, from the duals of one solve.

    Parameters
    ----------
    support, groups, counts, block
        The program that was solved.
    duals : dict
        :meth:`pramopt.solve.HighsLP.duals` of the last optimal solve.
    allowed : callable, optional
        ``allowed(rows, cols) -> bool array``: transitions the design permits at all (kept
        cells, strata of fixed variables).
    """

    def __init__(self, support: Support, groups: Groups, counts, block: C1Block, duals: dict,
                 allowed=None, mem: sp.csr_matrix | None = None):
        self.support = support
        self.counts = np.asarray(counts, dtype=float)
        K = support.K
        self.y_rows = duals["rows"]
        yB = np.zeros(groups.n_groups)
        if block.m.size:
            yB[block.groups] = duals["B"]
        self.sB = yB[groups.member].sum(axis=1)                # per column k
        if duals.get("inv") is not None:
            self.sB = self.sB + duals["inv"]
        # C1 rows with a nonzero dual: sum of y_N over the rows (m, g) with k in g
        yN = duals["N"] if block.m.size else np.zeros(0)
        nz = np.flatnonzero(np.abs(yN) > 0)
        if nz.size:
            mem = membership(groups) if mem is None else mem
            rowsel = sp.csr_matrix((yN[nz], (block.m[nz], np.arange(nz.size))), shape=(K, nz.size))
            self.NT = (rowsel @ mem[block.g[nz]]).tocsc()
        else:
            self.NT = sp.csc_matrix((K, K))
        self.allowed = allowed

    def reduced_costs(self, cols: np.ndarray, cost: np.ndarray | None = None) -> np.ndarray:
        """K x len(cols) reduced costs of P[:, cols] (``cost``: their objective coefficients)."""
        cols = np.asarray(cols, dtype=np.int64)
        d = -self.y_rows[:, None] - self.counts[:, None] * self.sB[cols][None, :]
        d -= self.NT[:, cols].toarray()
        if cost is not None:
            d += cost
        return d

    def candidates(self, cost_fn=None, tol: float = 1e-9, max_add: int = 100_000,
                   chunk: int = 256) -> tuple[np.ndarray, np.ndarray, float]:
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
            the sum over rows of the row's most negative reduced cost.
        """
        K = self.support.K
        in_sup = self.support.to_matrix(np.ones(self.support.size)).tocsc()
        keep_r, keep_c, keep_d = [], [], []
        rowmin = np.zeros(K)
        for start in range(0, K, chunk):
            cols = np.arange(start, min(K, start + chunk))
            d = self.reduced_costs(cols, None if cost_fn is None else cost_fn(cols))
            d[in_sup[:, cols].toarray() > 0] = np.inf      # already in the support (and the diagonal)
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
