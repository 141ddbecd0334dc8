"""The C1 constraint of Cator, Hensbergen & Rozenholc, eq. (1): everything the solver knows of it.

C1 for a present cell m and a group g = (π, k0) reads

    S[m, g] <= alpha * D[g],   S[m, g] = sum_{k: k_pi = k0} P[m, k],
                               D[g]    = sum_l U0(l) S[l, g],

which is linear in P.  P is a sparse vector ``x`` over a support of (row, column) pairs of
present cells.  D is built **once per group** (matrix ``B``) and shared by all rows of that
group; each constraint row of ``N`` only touches the support entries of its own row m.
Everything is assembled with vectorised sparse algebra: there is no Python loop over (m, π, k0).

This module holds C1's whole row layout, in one place:

* :class:`Groups` -- the (π, k0) groups reachable from present cells;
* :func:`reduce_constraints` -- the paper's reductions (Section 4, bounds (2) and (5));
* :class:`WorkingSet` -- the rows imposed on the solver, grown lazily from the full check;
* :func:`c1_block` and :func:`c1_rows` -- the rows over a support, as linear-program blocks;
* :func:`c1_prices` -- what a transition outside the support would add to those rows, for
  column generation;
* :class:`C1Rows` -- the three together as a program constraint
  (:class:`pramopt.optimize.constraints.Constraint`);
* :func:`floor_upper_bound` -- the counting bound on any diagonal floor.

The independent check of a finished design is :mod:`pramopt.verify`, which shares none of this.

P lives on the present cells, rows and columns: a record can only be changed into a combination
that exists in the data.  Every group g reachable this way has U_π(k0) >= 1, which the paper's
bound (5) silently assumes; a transition into an empty combination would create groups with
U_π(k0) = 0 whose C1 rows the paper never lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ... import verify as _verify
from ...frequency.table import FrequencyTable
from ..support import Support

__all__ = [
    "Groups",
    "build_groups",
    "membership",
    "C1Block",
    "C1Rows",
    "c1_block",
    "c1_rows",
    "c1_prices",
    "RowReduction",
    "protected_groups",
    "reduce_constraints",
    "WorkingSet",
    "floor_upper_bound",
]


# ---------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------


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
        _, first, inv = np.unique(
            table.codes[:, list(pi)], axis=0, return_index=True, return_inverse=True
        )
        inv = np.asarray(inv).ravel()
        G = first.shape[0]
        member[:, ci] = inv + offset
        combo.append(np.full(G, ci))
        size.append(np.bincount(inv, weights=table.counts, minlength=G))
        rep.append(first)
        offset += G
    return Groups(
        member=member,
        combination=np.concatenate(combo),
        size=np.concatenate(size),
        rep=np.concatenate(rep),
    )


def membership(groups: Groups) -> sp.csr_matrix:
    """G x K indicator: cell k belongs to group g (k's projection on π(g) is k0(g))."""
    K, nP = groups.member.shape
    return sp.csr_matrix(
        (np.ones(K * nP), (groups.member.ravel(), np.repeat(np.arange(K), nP))),
        shape=(groups.n_groups, K),
    )


def floor_upper_bound(table: FrequencyTable, groups: Groups, alpha: float) -> float:
    """An upper bound on any diagonal floor that C1 allows: alpha * n / max_π |groups of π|.

    Every (π, k0) group holds a present cell m with P(m, g) >= P_mm >= t, so C1 forces
    D_g >= t / alpha; the denominators of one π add up to n (each record's released cell
    lies in exactly one group of π).  Hence n >= |groups of π| * t / alpha for every π.
    When this is below 1/2 no strictly diagonally dominant design exists, which the designer
    learns here without solving anything.
    """
    per_combo = np.bincount(groups.combination)
    return float(alpha * table.n / per_combo.max())


# ---------------------------------------------------------------------------------------------
# The reducer (Section 4, bounds (2) and (5))
# ---------------------------------------------------------------------------------------------
# * Bound (2): rows m with U0(m) >= 1/alpha always satisfy C1.
# * With every diagonal entry P_kk >= gamma: a group g = (π, k0) with U_π(k0) >= 1/(gamma alpha)
#   always satisfies C1.
# * Bound (5): for m outside g (m_π != k0) the left-hand side is at most
#   (1 - gamma)/(gamma U_π(k0)), so such rows need checking only where
#   U_π(k0) < (1 - gamma)/(gamma alpha).  With (1 - gamma)/gamma < alpha this never happens,
#   which is the paper's third rule.
# The reduction is exact given the floor, so the solver enforces P_kk >= gamma whenever it is used.


@dataclass(frozen=True)
class RowReduction:
    """Constraint counts before and after each reduction, and the working set it leaves.

    Attributes
    ----------
    gamma : float
        Diagonal floor the reduction relies on (0 means none).
    full : int
        Every present m times every (π, k0).
    after_row_bound : int
        After dropping rows with U0(m) >= 1/alpha (bound (2)).
    after_group_bound : int
        After dropping groups with U_π(k0) >= 1/(gamma alpha).
    after_member_rule : int
        After dropping rows outside their group that bound (5) clears: the reduced problem.
    outside_rows : int
        Rows m outside g that bound (5) does not clear (part of ``after_member_rule``).
    m, g : ndarray
        The reduced working set of (m, g) pairs.  If ``lazy_outside`` was requested, the rows
        outside their group are left out and only added once a full check finds them violated.
    """

    gamma: float
    full: int
    after_row_bound: int
    after_group_bound: int
    after_member_rule: int
    outside_rows: int
    m: np.ndarray
    g: np.ndarray

    def counts(self) -> dict:
        """The constraint counts (everything but the working set's rows)."""
        return {
            "gamma": self.gamma,
            "full": self.full,
            "after_row_bound": self.after_row_bound,
            "after_group_bound": self.after_group_bound,
            "after_member_rule": self.after_member_rule,
            "outside_rows": self.outside_rows,
            "working_set": int(self.m.size),
        }


def protected_groups(groups: Groups, alpha: float, gamma: float) -> np.ndarray:
    """Mask of the groups whose C1 rows a diagonal floor ``gamma`` does not settle by itself.

    With every P_kk >= gamma, a group with U_π(k0) >= 1/(gamma alpha) always satisfies C1; the
    others (every group when ``gamma`` is 0) need rows, and inflow into their cells.
    """
    if gamma > 0:
        return groups.size < 1.0 / (gamma * alpha)
    return np.ones(groups.n_groups, dtype=bool)


def reduce_constraints(
    table: FrequencyTable,
    groups: Groups,
    alpha: float,
    gamma: float,
    *,
    lazy_outside: bool = True,
) -> RowReduction:
    """Apply the paper's reductions for a diagonal floor ``gamma`` (0 for none)."""
    counts = np.asarray(table.counts, dtype=float)
    K, G = table.n_cells, groups.n_groups
    rare = np.flatnonzero(counts < 1.0 / alpha)
    problem = np.flatnonzero(protected_groups(groups, alpha, gamma))
    outside = groups.size < (1.0 - gamma) / (gamma * alpha) if gamma > 0 else np.ones(G, dtype=bool)
    # rows inside their own group: every rare member of each problem group
    ci = groups.combination[problem]
    mem_m, mem_g = [], []
    for c in np.unique(ci):
        gs = problem[ci == c]
        col = groups.member[rare, c]
        hit = np.isin(col, gs)
        mem_m.append(rare[hit])
        mem_g.append(col[hit])
    m_in = np.concatenate(mem_m) if mem_m else np.empty(0, np.int64)
    g_in = np.concatenate(mem_g) if mem_g else np.empty(0, np.int64)
    out_groups = problem[outside[problem]]
    n_out = int(out_groups.size * rare.size - np.isin(g_in, out_groups).sum())
    if lazy_outside or out_groups.size == 0:
        m_w, g_w = m_in, g_in
    else:
        mm, gg = np.meshgrid(rare, out_groups, indexing="ij")
        mm, gg = mm.ravel(), gg.ravel()
        inside = groups.member[mm, groups.combination[gg]] == gg
        m_w = np.concatenate([m_in, mm[~inside]])
        g_w = np.concatenate([g_in, gg[~inside]])
    return RowReduction(
        gamma=float(gamma),
        full=int(K * G),
        after_row_bound=int(rare.size * G),
        after_group_bound=int(rare.size * problem.size),
        after_member_rule=int(m_in.size + n_out),
        outside_rows=n_out,
        m=m_w.astype(np.int64),
        g=g_w.astype(np.int64),
    )


# ---------------------------------------------------------------------------------------------
# Rows over a support, for the linear programs
# ---------------------------------------------------------------------------------------------


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
    sg = groups.member[support.cols].ravel()  # (S * |Π|,)
    ss = np.repeat(np.arange(S), nP)
    # B: denominators, only for the groups in use
    upos = np.full(G, -1, dtype=np.int64)
    upos[used] = np.arange(used.size)
    keep = upos[sg] >= 0
    B = sp.csr_matrix(
        (counts[support.rows[ss[keep]]], (upos[sg[keep]], ss[keep])), shape=(used.size, S)
    )
    # N: constraint w touches entry s when row(s) == m[w] and col(s) lies in g[w]
    wkey = m * G + g
    order = np.argsort(wkey, kind="stable")
    skey = wkey[order]
    q = support.rows[ss] * G + sg
    pos = np.clip(np.searchsorted(skey, q), 0, max(len(skey) - 1, 0))
    hit = (skey[pos] == q) if len(skey) else np.zeros(q.shape, bool)
    N = sp.csr_matrix((np.ones(int(hit.sum())), (order[pos[hit]], ss[hit])), shape=(m.size, S))
    return C1Block(m=m, g=g, N=N, B=B, groups=used, gpos=gpos)


class WorkingSet:
    """The C1 rows (m, g) imposed on the solver, grown lazily from the full check.

    ``missing(P)`` runs the independent full C1 check at the solve level and returns the
    violated rows (as keys m * G + g) that are not imposed yet; ``add`` imposes them.
    """

    def __init__(self, m, g, table: FrequencyTable, groups: Groups, combos, a_solve: float):
        self.m, self.g = np.asarray(m, dtype=np.int64), np.asarray(g, dtype=np.int64)
        self.table, self.groups, self.combos, self.a_solve = table, groups, combos, a_solve
        self.counts = table.counts.astype(float)
        self.added = 0  # rows the full check found (lazy)
        self.with_support = 0  # rows imposed with a support (``outside``)

    def violated(self, P) -> np.ndarray:
        """Keys m * G + g of every row of the full C1 that ``P`` violates at the solve level."""
        v = _verify.violated_rows(P, self.table.codes, self.counts, self.combos, self.a_solve)
        if not v:
            return np.empty(0, dtype=np.int64)
        a = np.asarray(v)
        G = self.groups.n_groups
        return np.unique(a[:, 0] * G + self.groups.member[a[:, 2], a[:, 1]])

    def missing(self, P) -> list:
        key = self.violated(P)
        if not key.size:
            return []
        G = self.groups.n_groups
        return key[~np.isin(key, self.m * G + self.g)].tolist()

    def outside(self, support: Support, alpha: float, gamma: float) -> np.ndarray:
        """Keys of the rows outside their group that ``support`` lets fill and the working set
        lacks: (m, g) for a rare m with an entry into a cell of g, m not in g, and g small
        enough for bound (5) to leave the row (U_π(k0) < (1 - gamma)/(gamma alpha)).

        With the rows inside protected groups (the reduction's), these are every C1 row a
        matrix over ``support`` can violate at the floor ``gamma``."""
        G = self.groups.n_groups
        small = self.groups.size < (1.0 - gamma) / (gamma * alpha)
        rare = self.counts < 1.0 / alpha
        off = (support.rows != support.cols) & rare[support.rows]
        r, c = support.rows[off], support.cols[off]
        gc = self.groups.member[c]
        hit = (gc != self.groups.member[r]) & small[gc]
        keys = np.unique((r[:, None].astype(np.int64) * G + gc)[hit])
        return keys[~np.isin(keys, self.m * G + self.g)]

    def add(self, keys, lazy: bool = True) -> None:
        """Impose the rows ``keys``: found violated by the full check (``lazy``, counted in
        ``added``), or imposed with a support (the rows outside their groups, ``outside``;
        counted in ``with_support``)."""
        keys = np.asarray(keys, dtype=np.int64)
        G = self.groups.n_groups
        self.m = np.concatenate([self.m, keys // G])
        self.g = np.concatenate([self.g, keys % G])
        if lazy:
            self.added += keys.size
        else:
            self.with_support += keys.size

    def block(self, support: Support) -> C1Block:
        return c1_block(support, self.groups, self.counts, self.m, self.g)

    def rows(self, support: Support, mem: sp.csr_matrix | None = None) -> C1Rows:
        """The imposed rows over ``support`` as a program constraint (``mem``: the groups'
        membership, :func:`membership`, when the caller keeps one for pricing)."""
        return C1Rows(self.block(support), self.a_solve, self.groups, mem, self)


def c1_rows(block: C1Block, a_solve: float, elastic: bool):
    """C1's rows in a linear program whose columns are ``[x, D, s]``.

    ``B x - D = 0`` defines the denominators of the groups in use, and
    ``N x - a_solve * D[gpos] - s <= 0`` are the imposed rows, ``s >= 0`` an elastic slack per
    row when ``elastic`` (else no ``s`` columns).  Returns ``(rows, n_aux)`` where ``rows`` is a
    list of ``(name, {column block: matrix}, lower, upper)`` and ``n_aux`` the widths of the
    auxiliary column blocks ``D`` and ``s``.
    """
    nG = block.groups.size if block.m.size else 0
    W = block.m.size if nG else 0
    if not nG:
        return [], {"D": 0, "s": 0}
    sel = sp.csr_matrix((np.full(W, a_solve), (np.arange(W), block.gpos)), shape=(W, nG))
    rows = [
        ("B", {"x": block.B, "D": -sp.identity(nG, format="csr")}, np.zeros(nG), np.zeros(nG)),
        (
            "N",
            {"x": block.N, "D": -sel, **({"s": -sp.identity(W, format="csr")} if elastic else {})},
            np.full(W, -np.inf),
            np.zeros(W),
        ),
    ]
    return rows, {"D": nG, "s": W if elastic else 0}


def c1_prices(groups: Groups, block: C1Block, duals_B, duals_N, mem: sp.csr_matrix | None = None):
    """What C1's rows charge a candidate transition (m, k) outside the support.

    The column of P[m, k] has U0(m) in the denominator row of every used group of k and 1 in
    every imposed row (m, g) with k in g.  With the row duals ``y`` (reduced cost = c - A^T y)
    its C1 part is ``-U0(m) * per_column[k] - per_pair[m, k]``.

    Returns
    -------
    per_column : ndarray of shape (K,)
        Sum of the denominator duals over the groups of each column k.
    per_pair : scipy.sparse.csc_matrix of shape (K, K)
        Sum of the row duals over the imposed rows (m, g) with k in g.
    """
    K = groups.member.shape[0]
    yB = np.zeros(groups.n_groups)
    if block.m.size:
        yB[block.groups] = duals_B
    per_column = yB[groups.member].sum(axis=1)
    yN = duals_N if block.m.size else np.zeros(0)
    nz = np.flatnonzero(np.abs(yN) > 0)
    if nz.size:
        mem = membership(groups) if mem is None else mem
        rowsel = sp.csr_matrix((yN[nz], (block.m[nz], np.arange(nz.size))), shape=(K, nz.size))
        per_pair = (rowsel @ mem[block.g[nz]]).tocsc()
    else:
        per_pair = sp.csc_matrix((K, K))
    return per_column, per_pair


@dataclass(frozen=True)
class C1Rows:
    """C1's rows over one support as a :class:`~pramopt.optimize.constraints.Constraint`.

    ``block`` holds the imposed rows at level ``a_solve``; ``groups`` (and their ``mem``bership,
    built when missing) price transitions outside the support; ``working``, the working set the
    block came from, finds the rows of the full C1 a matrix violates.
    """

    block: C1Block
    a_solve: float
    groups: Groups | None = None
    mem: sp.csr_matrix | None = None
    working: WorkingSet | None = None
    name = "c1"
    risk = True

    def columns(self, support: Support, elastic: bool = False) -> dict:
        return c1_rows(self.block, self.a_solve, elastic)[1]

    def rows(self, support: Support, elastic: bool = False) -> list:
        """``B x - D = 0`` (rows ``B``) and ``N x - a_solve D[gpos] (- s) <= 0`` (rows ``N``)."""
        from . import RowBlock

        return [RowBlock(*r) for r in c1_rows(self.block, self.a_solve, elastic)[0]]

    def prices(self, duals):
        from . import Prices

        if self.groups is None:
            raise ValueError("C1Rows.prices needs the groups: build the rows with WorkingSet.rows")
        per_column, per_pair = c1_prices(
            self.groups, self.block, duals.of("B"), duals.of("N"), self.mem
        )
        return Prices(per_column=per_column, per_pair=per_pair)

    def violated(self, P) -> np.ndarray:
        if self.working is None:
            raise ValueError(
                "C1Rows.violated needs the working set: build the rows with WorkingSet.rows"
            )
        return self.working.violated(P)
