"""The support of P: which transitions (row, column) a design may use.

P is a sparse vector ``x`` over a support of (row, column) pairs of present cells, sorted by
(row, col), with the diagonal always included.  Which support a design starts from is the
strategy's choice (:func:`pramopt.optimize.strategies.general.initial_support`); the greedy
cover of the problem groups it may start from is here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Support", "clean", "greedy_cover", "hold_floor"]


@dataclass(frozen=True)
class Support:
    """Allowed transitions: P[rows[s], cols[s]] = x[s]; the diagonal is always included.

    Pairs are sorted by (row, col); ``diag[m]`` is the index of P[m, m] in ``x``.
    """

    rows: np.ndarray
    cols: np.ndarray
    diag: np.ndarray
    K: int

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])

    @staticmethod
    def from_pairs(rows, cols, K: int) -> Support:
        rows = np.concatenate([np.asarray(rows, dtype=np.int64), np.arange(K)])
        cols = np.concatenate([np.asarray(cols, dtype=np.int64), np.arange(K)])
        key = np.unique(rows * K + cols)
        r, c = key // K, key % K
        diag = np.searchsorted(key, np.arange(K) * (K + 1))
        return Support(rows=r, cols=c, diag=diag, K=K)

    def union(self, rows, cols) -> Support:
        return Support.from_pairs(
            np.concatenate([self.rows, rows]), np.concatenate([self.cols, cols]), self.K
        )

    def to_matrix(self, x) -> sp.csr_matrix:
        return sp.csr_matrix(
            (np.asarray(x, dtype=float), (self.rows, self.cols)), shape=(self.K, self.K)
        )

    def from_matrix(self, P) -> np.ndarray:
        if sp.issparse(P):
            return np.asarray(sp.csr_matrix(P)[self.rows, self.cols]).ravel()
        return np.asarray(P)[self.rows, self.cols]


def greedy_cover(groups, problem: np.ndarray, counts, times: int = 1) -> np.ndarray:
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


def clean(support: Support, x) -> np.ndarray:
    """Clip the solver's tiny negative entries and renormalise every row to sum to one."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, None)
    rs = np.bincount(support.rows, weights=x, minlength=support.K)
    return x / rs[support.rows]


def hold_floor(P, floor: float | None):
    """``P`` with every diagonal entry at least ``floor``, exactly.

    A solver meets the floor, a bound on the diagonal, only to its tolerance, and renormalising
    a row whose sum is 1 + 1e-9 takes an entry at the bound below it.  Each diagonal entry below
    ``floor`` is set to ``floor`` and the difference is taken from its row's off-diagonal
    entries, the largest first: the row's sum is unchanged (to rounding), every entry stays
    >= 0 and no transition is added.  C1 is not re-checked here: the designer's full check runs
    on the matrix returned.

    Parameters
    ----------
    P : ndarray or sparse matrix of shape (K, K)
        A row-stochastic matrix.
    floor : float or None
        The floor (None or <= 0: none).

    Returns
    -------
    ndarray or scipy.sparse.csr_matrix
        ``P`` itself when every diagonal entry holds the floor already, else a new matrix (dense
        when ``P`` is).
    """
    if floor is None or floor <= 0:
        return P
    diag = np.asarray(P.diagonal(), dtype=float)
    low = np.flatnonzero(diag < floor)
    if low.size == 0:
        return P
    if not sp.issparse(P):
        out = np.array(P, dtype=float)
        for m in low:
            nz = np.flatnonzero(out[m])
            nz = nz[nz != m]
            out[m, nz] = _take(out[m, nz], floor - diag[m])
            out[m, m] = floor
        return out
    Pm = sp.csr_matrix(P, dtype=float)
    rows, cols, vals = [], [], []
    keep = np.ones(Pm.shape[0], dtype=bool)
    keep[low] = False
    coo = Pm.tocoo()
    mask = keep[coo.row]
    rows.append(coo.row[mask])
    cols.append(coo.col[mask])
    vals.append(coo.data[mask])
    for m in low:
        c = Pm.indices[Pm.indptr[m] : Pm.indptr[m + 1]]
        v = Pm.data[Pm.indptr[m] : Pm.indptr[m + 1]]
        off = c != m
        rows.append(np.full(int(off.sum()) + 1, m))
        cols.append(np.append(c[off], m))
        vals.append(np.append(_take(v[off], floor - diag[m]), floor))
    held = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=Pm.shape
    )
    held.eliminate_zeros()
    return held


def _take(values: np.ndarray, amount: float) -> np.ndarray:
    """``values`` less ``amount`` in all, taken from the largest first, none below zero."""
    out = np.array(values, dtype=float)
    for i in np.argsort(-out, kind="stable"):
        if amount <= 0:
            break
        step = min(out[i], amount)
        out[i] -= step
        amount -= step
    return out
