"""The support of P: which transitions (row, column) a design may use, and how it starts.

P is a sparse vector ``x`` over a support of (row, column) pairs of present cells, sorted by
(row, col), with the diagonal always included.  A general design starts from

* ``dense``: every pair of cells (up to ``DENSE_SUPPORT_MAX`` cells);
* ``targets``: every row into the cells of the (π, k0) groups that need protection -- the only
  columns whose inflow raises a C1 denominator;
* ``cover``: the diagonal plus transitions from the largest cells into a greedy cover of those
  groups (Cator et al., Section 4: a good P moves records from frequent cells into the few
  cells that cover the problem combinations), which column generation
  (:mod:`pramopt.optimize.pricing`) widens where the duals say a transition would help.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:  # pragma: no cover
    from .constraints.c1 import Groups
    from .problem import DesignProblem

__all__ = ["Support", "clean", "greedy_cover", "initial_support", "rows_into", "DENSE_SUPPORT_MAX",
           "COVER_BUDGET"]

#: Up to this many cells the support of P is dense (every pair of cells).
DENSE_SUPPORT_MAX = 300
#: Sources of the initial cover support: at most this many support entries from the largest
#: cells into the cover (column generation adds whatever else helps).
COVER_BUDGET = 200_000


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
    def from_pairs(rows, cols, K: int) -> "Support":
        rows = np.concatenate([np.asarray(rows, dtype=np.int64), np.arange(K)])
        cols = np.concatenate([np.asarray(cols, dtype=np.int64), np.arange(K)])
        key = np.unique(rows * K + cols)
        r, c = key // K, key % K
        diag = np.searchsorted(key, np.arange(K) * (K + 1))
        return Support(rows=r, cols=c, diag=diag, K=K)

    def union(self, rows, cols) -> "Support":
        return Support.from_pairs(np.concatenate([self.rows, rows]), np.concatenate([self.cols, cols]), self.K)

    def to_matrix(self, x) -> sp.csr_matrix:
        return sp.csr_matrix((np.asarray(x, dtype=float), (self.rows, self.cols)), shape=(self.K, self.K))

    def from_matrix(self, P) -> np.ndarray:
        if sp.issparse(P):
            return np.asarray(sp.csr_matrix(P)[self.rows, self.cols]).ravel()
        return np.asarray(P)[self.rows, self.cols]


def greedy_cover(groups: "Groups", problem: np.ndarray, counts, times: int = 1) -> np.ndarray:
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


def rows_into(problem: "DesignProblem", cols) -> Support:
    """Every row except the kept ones may move into ``cols`` (within the strata of ``fixed``)."""
    K = problem.K
    rr, cc = np.meshgrid(np.arange(K), np.asarray(cols, dtype=np.int64), indexing="ij")
    rr, cc = rr.ravel(), cc.ravel()
    ok = problem.allowed(rr, cc)
    return Support.from_pairs(rr[ok], cc[ok], K)


def problem_groups(problem: "DesignProblem", gamma: float) -> np.ndarray:
    """Groups that need protection at diagonal floor ``gamma``: U_π(k0) < 1/(gamma alpha)."""
    return problem.groups.size < 1.0 / (max(gamma, 1e-12) * problem.alpha)


def initial_support(problem: "DesignProblem", gamma: float, mode: str) -> Support:
    """The support a general design starts from (see the module docstring)."""
    if mode == "dense":
        return rows_into(problem, np.arange(problem.K))
    need = problem_groups(problem, gamma)
    if mode == "targets":
        return rows_into(problem, np.flatnonzero(need[problem.groups.member].any(axis=1)))
    cover = greedy_cover(problem.groups, need, problem.counts)
    n_src = int(min(problem.K, max(20, COVER_BUDGET // max(1, cover.size))))
    sources = np.argsort(-problem.counts, kind="stable")[:n_src]
    rr, cc = np.meshgrid(np.setdiff1d(sources, problem.keep_rows), cover, indexing="ij")
    rr, cc = rr.ravel(), cc.ravel()
    ok = problem.allowed(rr, cc)
    return Support.from_pairs(rr[ok], cc[ok], problem.K)
