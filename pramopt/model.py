"""The design model: (π, k0) groups, the support of P and the C1 constraints as sparse algebra.

C1 (Cator, Hensbergen & Rozenholc, eq. (1)) for a present cell m and a group g = (π, k0) reads

    S[m, g] <= alpha * D[g],   S[m, g] = sum_{k: k_pi = k0} P[m, k],
                               D[g]    = sum_l U0(l) S[l, g],

which is linear in P.  P is a sparse vector ``x`` over a support of (row, column) pairs of
present cells.  D is built **once per group** (matrix ``B``) and shared by all rows of that
group; each constraint row of ``N`` only touches the support entries of its own row m.
Everything is assembled with vectorised sparse algebra: there is no Python loop over (m, π, k0).

P lives on the present cells, rows and columns: a record can only be changed into a combination
that exists in the data.  Every group g reachable this way has U_π(k0) >= 1, which the paper's
bound (5) silently assumes; a transition into an empty combination would create groups with
U_π(k0) = 0 whose C1 rows the paper never lists.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .data import FrequencyTable


@dataclass(frozen=True)
class Groups:
    """The (π, k0) combinations reachable from present cells.

    Attributes
    ----------
    member : ndarray of shape (K, |Π|)
        Global group id of each cell's projection on each combination.
    combination : ndarray of shape (G,)
        Index of π for each group.
    size : ndarray of shape (G,)
        U_π(k0), the number of records in the group.
    rep : ndarray of shape (G,)
        A representative (the first) cell of each group.
    """

    member: np.ndarray
    combination: np.ndarray
    size: np.ndarray
    rep: np.ndarray

    @property
    def n_groups(self) -> int:
        return int(self.size.shape[0])


def build_groups(table: FrequencyTable, combinations) -> Groups:
    """Group the present cells by their projection on each combination π."""
    K = table.n_cells
    member = np.empty((K, len(combinations)), dtype=np.int64)
    combo, size, rep = [], [], []
    offset = 0
    for ci, pi in enumerate(combinations):
        _, first, inv = np.unique(table.codes[:, list(pi)], axis=0, return_index=True, return_inverse=True)
        inv = np.asarray(inv).ravel()
        G = first.shape[0]
        member[:, ci] = inv + offset
        combo.append(np.full(G, ci))
        size.append(np.bincount(inv, weights=table.counts, minlength=G))
        rep.append(first)
        offset += G
    return Groups(member=member, combination=np.concatenate(combo),
                  size=np.concatenate(size), rep=np.concatenate(rep))


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

    def contains(self, rows, cols) -> np.ndarray:
        key = self.rows * self.K + self.cols
        q = np.asarray(rows) * self.K + np.asarray(cols)
        pos = np.clip(np.searchsorted(key, q), 0, len(key) - 1)
        return key[pos] == q

    def to_matrix(self, x) -> sp.csr_matrix:
        return sp.csr_matrix((np.asarray(x, dtype=float), (self.rows, self.cols)), shape=(self.K, self.K))

    def from_matrix(self, P) -> np.ndarray:
        if sp.issparse(P):
            return np.asarray(sp.csr_matrix(P)[self.rows, self.cols]).ravel()
        return np.asarray(P)[self.rows, self.cols]


def row_sum_matrix(support: Support) -> sp.csr_matrix:
    """R with (R x)_m = sum_k P[m, k]."""
    return sp.csr_matrix((np.ones(support.size), (support.rows, np.arange(support.size))),
                         shape=(support.K, support.size))


def column_mass_matrix(support: Support, counts) -> sp.csr_matrix:
    """C with (C x)_k = (U0^T P)_k, for the invariance constraint U0^T P = U0^T."""
    counts = np.asarray(counts, dtype=float)
    return sp.csr_matrix((counts[support.rows], (support.cols, np.arange(support.size))),
                         shape=(support.K, support.size))


@dataclass(frozen=True)
class C1Block:
    """Sparse C1 rows for a working set of (m, g) pairs.

    The constraints are ``N x <= alpha * D[gpos]`` with ``D = B x``; ``groups`` lists the group
    ids whose denominators appear (the rows of ``B``), ``gpos[w]`` is the position of the group
    of constraint w among them.
    """

    m: np.ndarray
    g: np.ndarray
    N: sp.csr_matrix
    B: sp.csr_matrix
    groups: np.ndarray
    gpos: np.ndarray


def c1_block(support: Support, groups: Groups, counts, m, g) -> C1Block:
    """Assemble the C1 rows for the pairs ``(m[w], g[w])`` over the given support."""
    m = np.asarray(m, dtype=np.int64)
    g = np.asarray(g, dtype=np.int64)
    counts = np.asarray(counts, dtype=float)
    G = groups.n_groups
    used, gpos = np.unique(g, return_inverse=True)
    gpos = np.asarray(gpos).ravel()
    nP = groups.member.shape[1]
    S = support.size
    # every support entry s contributes to the |Π| groups of its column
    sg = groups.member[support.cols].ravel()            # (S * |Π|,)
    ss = np.repeat(np.arange(S), nP)
    # B: denominators, only for the groups in use
    upos = np.full(G, -1, dtype=np.int64)
    upos[used] = np.arange(used.size)
    keep = upos[sg] >= 0
    B = sp.csr_matrix((counts[support.rows[ss[keep]]], (upos[sg[keep]], ss[keep])),
                      shape=(used.size, S))
    # N: constraint w touches entry s when row(s) == m[w] and col(s) lies in g[w]
    wkey = m * G + g
    order = np.argsort(wkey, kind="stable")
    skey = wkey[order]
    q = support.rows[ss] * G + sg
    pos = np.clip(np.searchsorted(skey, q), 0, max(len(skey) - 1, 0))
    hit = (skey[pos] == q) if len(skey) else np.zeros(q.shape, bool)
    N = sp.csr_matrix((np.ones(int(hit.sum())), (order[pos[hit]], ss[hit])), shape=(m.size, S))
    return C1Block(m=m, g=g, N=N, B=B, groups=used, gpos=gpos)


def full_constraint_count(table: FrequencyTable, groups: Groups) -> int:
    """Number of C1 rows before any reduction: every present m times every (π, k0)."""
    return table.n_cells * groups.n_groups
