"""A person part that depends on the household cell: one person matrix per household cell.

A record of cell ``(h, p)`` keeps the household draw of its household (``Ph[h, ·]``, once per
household) and draws its person cell from ``Pp^(h)[p, ·]``: the person matrix of its *original*
household cell, which every member of one household shares, so the draw is well defined.  Its
marginal law is ``Ph[h, h'] Pp^(h)[p, p']``.  The matrices are stored stacked: row ``h * Kp + p`` of
a ``(Kh * Kp, Kp)`` matrix is ``Pp^(h)[p, ·]`` (:func:`.model.person_index`).

With ``Ph`` fixed every row of C1 is linear in the ``Pp^(h)``.  For a combination π with household
part πh and person part πp, released value ``(a, b)`` and present record cell ``m = (h, p)``::

    M(m, a) Pp^(h)[p, B_b]  <=  alpha D(a, b),   D(a, b) = sum_l U0(l) M(l, a) Pp^(h_l)[p_l, B_b],

``M(m, a) = sum_{h': h'_πh = a} Ph[h, h']``.  Every diagonal entry is at least ``floor``, so
``D(a, b) >= floor * sum_{l: p_l in B_b} U0(l) M(l, a)``; a row whose ``M(m, a)`` is at most alpha
times that bound holds for every feasible point (``Pp[p, B_b] <= 1``) and is left out (the
paper's bound: frequent groups never bind).  The rows left out are checked anyway: the result's
record-level matrix goes through :mod:`pramopt.verify`.  Rows of ``Pp^(h)`` for person cells
absent from household cell h reach no record: they are the identity, which keeps every block
invertible (diagonal >= floor > 1/2 on the others).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..optimize.backends import Outcome, solve_lp
from .model import Layout, same_missing

__all__ = ["solve_person_by_household", "CONDITIONAL_MAX_ENTRIES"]

#: The loss of a conditional design is dense in (household cell, person cell, person cell):
#: refused above this many entries.
CONDITIONAL_MAX_ENTRIES = 20_000_000


def _projection(codes: np.ndarray, pos) -> np.ndarray:
    if not pos:
        return np.zeros(codes.shape[0], dtype=np.int64)
    _, inv = np.unique(codes[:, pos], axis=0, return_inverse=True)
    return np.asarray(inv).ravel()


#: Tangent points of the convex penalty on each diagonal entry (see
#: :func:`solve_person_by_household`).
_TANGENTS = (0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


#: A candidate row joins the LP once its left-hand side exceeds this share of its bound.
_NEAR = 0.8
#: Each block's present rows are strictly diagonally dominant over its present columns by this much.
DOMINANCE = 0.05


def _penalty(d):
    """``(1 + (1 - d)^2) / d^2 - 1``: the squared norm, less one, of a row of the inverse of a
    matrix whose row keeps ``d`` and sends ``1 - d`` to one cell that stays put; convex, 0 at
    d = 1."""
    d = np.asarray(d, dtype=float)
    return (1.0 + (1.0 - d) ** 2) / d**2 - 1.0


def _penalty_slope(d):
    d = np.asarray(d, dtype=float)
    return (-2.0 * (1.0 - d) * d - 2.0 * (1.0 + (1.0 - d) ** 2)) / d**3


class _Combination:
    """The candidate rows of C1 of one combination with person-level keys."""

    def __init__(self, lay: Layout, Ph, pi, hset, pset, alpha, floor, vm, vp, U0):
        tp, K = lay.person_table, lay.table.n_cells
        Kh = lay.household_table.n_cells
        ph = [hset[j] for j in pi if j in hset]
        pp = [pset[j] for j in pi if j in pset]
        self.pp = tuple(pp)
        b_of = _projection(tp.codes, pp)
        self.nb = nb = int(b_of.max()) + 1
        a_of = _projection(lay.household_table.codes, ph)
        self.nA = nA = int(a_of.max()) + 1
        self.Nh = Nh = (
            Ph @ sp.csr_array((np.ones(Kh), (np.arange(Kh), a_of)), shape=(Kh, nA))
        ).toarray()
        self.M = M = Nh[lay.h_of]  # K x nA
        self.vb = vb = b_of[vp]
        nx = vm.size
        # S[(m, b), var] = 1: the mass row m gives to B_b
        self.S = sp.csr_array((np.ones(nx), (vm * nb + vb, np.arange(nx))), shape=(K * nb, nx))
        reach = np.zeros((K, nb), dtype=bool)
        reach[vm, vb] = True
        own = b_of[lay.p_of]
        lo = np.zeros((nb, nA))
        np.add.at(lo, own, U0[:, None] * M)
        lo = floor * lo.T  # nA x nb: D(a, b) is at least this
        keep = reach[:, None, :] & (M[:, :, None] > alpha * lo[None, :, :] * (1 + 1e-9))
        mm, aa, bb = np.nonzero(keep)
        self.mm, self.aa, self.bb = mm, aa, bb
        self.active = bb == own[mm]  # first the rows of each record's own value
        self.WU = U0[:, None] * M

    def violated(self, x, alpha) -> np.ndarray:
        """The candidate rows to add: those near binding or violated at ``x``."""
        Y = (self.S @ x).reshape(-1, self.nb)  # K x nb
        D = self.WU.T @ Y  # nA x nb
        lhs = self.M[self.mm, self.aa] * Y[self.mm, self.bb]
        return (~self.active) & (lhs > _NEAR * alpha * D[self.aa, self.bb])


def solve_person_by_household(
    lay: Layout,
    Ph,
    combos,
    alpha: float,
    floor: float = 0.15,
    keep_missing: bool = True,
    max_rounds: int = 25,
    solver: str | None = None,
):
    """The stacked person matrices ``Pp^(h)`` meeting C1 with ``Ph`` fixed, by one LP with lazy
    rows.

    The objective is a convex stand-in for the loss: the records of each cell m times a
    piecewise-linear lower envelope (tangents at ``_TANGENTS``) of ``_penalty`` at its diagonal
    entry, which grows like the squared norm of the inverse's row as the diagonal shrinks.  The LP
    starts with the rows of each record's own released value and adds every violated candidate row
    after each solve (the rows left out by the bound never bind).  Diagonal entries are at least
    ``floor``.  Invertibility: a block ``Pp^(h)`` is block triangular (rows of person cells absent
    from h are the identity), so it is invertible when its present rows restricted to its present
    columns are; each present row keeps ``DOMINANCE`` more on its diagonal than it sends to the
    other person cells present in h (strict diagonal dominance there), and sends freely to the
    absent ones.

    Parameters are those of :func:`.person.solve_person`.  Returns a ``(Kh * Kp, Kp)`` ndarray, or
    None when the LP is infeasible or fails (or the design would be too large).
    """
    tp, t = lay.person_table, lay.table
    Kh, Kp, K = lay.household_table.n_cells, tp.n_cells, t.n_cells
    if Kh * Kp * Kp > CONDITIONAL_MAX_ENTRIES:
        return None
    Ph = sp.csr_array(Ph, dtype=float)
    U0 = t.counts.astype(float)
    # variables: row m (its person cell's row in Pp^(h_m)) to every person cell p'
    gm, gp = np.meshgrid(np.arange(K), np.arange(Kp), indexing="ij")
    vm, vp = gm.ravel(), gp.ravel()
    if keep_missing:
        ok = same_missing(tp, lay.p_of[vm], vp)
        vm, vp = vm[ok], vp[ok]
    nx = vm.size
    hset = {j: i for i, j in enumerate(lay.hpos)}
    pset = {j: i for i, j in enumerate(lay.ppos)}
    blocks = [
        _Combination(lay, Ph, pi, hset, pset, alpha, floor, vm, vp, U0)
        for pi in combos
        if any(j in pset for j in pi)
    ]
    fixed = _FixedRows.build(lay, vm, vp, floor, blocks, U0)
    x = None
    for _ in range(max_rounds):
        cost, A_ub, b_ub, A_eq, b_eq, bounds = fixed.program(blocks, alpha, U0, floor)
        res = solve_lp(
            cost,
            A_ub=A_ub,
            b_ub=b_ub,
            A_eq=A_eq,
            b_eq=b_eq,
            bounds=bounds,
            solver=solver,
            method="highs-ipm",
        )
        if res.outcome is not Outcome.OPTIMAL:
            return None
        assert res.x is not None  # set when optimal
        x = np.clip(res.x[:nx], 0.0, None)
        new = 0
        for c in blocks:
            v = c.violated(x, alpha)
            c.active |= v
            new += int(v.sum())
        if not new:
            break
    else:
        return None  # rows still violated after max_rounds: no design (the caller tries another)
    x[x < 1e-12] = 0.0  # solver dust
    out = np.zeros((Kh * Kp, Kp))
    out[np.arange(Kh * Kp), np.tile(np.arange(Kp), Kh)] = 1.0  # rows no record uses: the identity
    rows = lay.h_of * Kp + lay.p_of
    out[rows] = 0.0
    out[rows[vm], vp] = x
    return out / out.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class _FixedRows:
    """The rows of the LP that stay the same from round to round: the penalty's tangents and the
    dominance rows (``A_t x <= b_t`` over the entries and the penalties), the row sums ``A_sum``
    and the equalities ``(zr, zc, zv)`` that define the ``nz`` variables Z, with each block's
    offset among them (``z_off``); columns: the ``nx`` entries, K penalties, Z, then auxiliaries."""

    nx: int
    K: int
    diag: np.ndarray
    A_t: sp.csr_array
    b_t: np.ndarray
    A_sum: sp.csr_array
    z_off: dict
    zr: np.ndarray
    zc: np.ndarray
    zv: np.ndarray
    nz: int

    @classmethod
    def build(cls, lay: Layout, vm, vp, floor: float, blocks, U0) -> _FixedRows:
        Kh, Kp, K = lay.household_table.n_cells, lay.person_table.n_cells, lay.table.n_cells
        nx = vm.size
        diag = np.flatnonzero(vp == lay.p_of[vm])  # one per record cell, in order of m
        # t_m >= penalty(d0) + slope(d0) (d_m - d0) for every tangent point d0 >= floor
        d0 = np.array([d for d in _TANGENTS if d >= floor] or [1.0])
        slope, pen = _penalty_slope(d0), _penalty(d0)
        tr = np.repeat(np.arange(K), d0.size)
        A_t = sp.csr_array(
            (
                np.concatenate([np.tile(slope, K), -np.ones(tr.size)]),
                (np.concatenate([np.arange(tr.size)] * 2), np.concatenate([diag[tr], nx + tr])),
            ),
            shape=(tr.size, nx + K),
        )
        b_t = np.tile(slope * d0 - pen, K)
        A_sum = sp.csr_array((np.ones(nx), (vm, np.arange(nx))), shape=(K, nx + K))
        # dominance: sum of the other present columns - diagonal <= -DOMINANCE, one row per
        # record cell
        present = np.zeros((Kh, Kp), dtype=bool)
        present[lay.h_of, lay.p_of] = True
        other = present[lay.h_of[vm], vp] & (vp != lay.p_of[vm])
        dv = np.where(vp == lay.p_of[vm], -1.0, 1.0)
        dsel = np.flatnonzero(other | (vp == lay.p_of[vm]))
        A_dom = sp.csr_array((dv[dsel], (vm[dsel], dsel)), shape=(K, nx + K))
        A_t = sp.vstack([A_t, A_dom]).tocsr()
        b_t = np.concatenate([b_t, np.full(K, -DOMINANCE)])
        # Z[pp](h, b) = sum_{m: h_m = h} U0(m) Pp^(h)[p_m, B_b]: the records of household cell
        # h released with person value b, so that D(a, b) = sum_h Nh(h, a) Z(h, b) has at most
        # Kh terms
        z_off, z_eq, nz = {}, [], 0
        for c in blocks:
            if c.pp in z_off:
                continue
            z_off[c.pp] = nz
            zi = nz + lay.h_of[vm] * c.nb + c.vb
            z_eq.append((zi, np.arange(nx), U0[vm]))
            nz += Kh * c.nb
        zr = np.concatenate([np.arange(nz)] + [r for r, _, _ in z_eq])
        zc = np.concatenate([nx + K + np.arange(nz)] + [c_ for _, c_, _ in z_eq])
        zv = np.concatenate([-np.ones(nz)] + [v for _, _, v in z_eq])
        return cls(nx, K, diag, A_t, b_t, A_sum, z_off, zr, zc, zv, nz)

    def program(self, blocks, alpha: float, U0, floor: float):
        """The LP with the blocks' active rows: ``(cost, A_ub, b_ub, A_eq, b_eq, bounds)``."""
        nx, K, nz, z_off = self.nx, self.K, self.nz, self.z_off
        ub_rows, aux_eq = [], []
        n_aux = 0
        base = nx + K + nz
        for c in blocks:
            mm, aa, bb = c.mm[c.active], c.aa[c.active], c.bb[c.active]
            if not mm.size:
                continue
            pairs, which = np.unique(aa * c.nb + bb, return_inverse=True)
            which = np.asarray(which).ravel()
            # each (a, b) scaled by its largest M(m, a): a released value reached only through tiny
            # entries of Ph would otherwise sit below the solver's feasibility tolerance
            scale = np.zeros(pairs.size)
            np.maximum.at(scale, which, c.M[mm, aa])
            rows = sp.csr_array(sp.diags_array(c.M[mm, aa] / scale[which]) @ c.S[mm * c.nb + bb])
            ub_rows.append((rows, n_aux + which))
            # aux(a, b) - sum_h Nh(h, a) Z(h, b) / scale(a, b) = 0
            pa, pb = pairs // c.nb, pairs % c.nb
            ks, hs = np.nonzero(c.Nh[:, pa].T > 0)  # ks: which (a, b), hs: household cell
            aux_eq.append(
                (
                    n_aux + ks,
                    nx + K + z_off[c.pp] + hs * c.nb + pb[ks],
                    -c.Nh[hs, pa[ks]] / scale[ks],
                )
            )
            n_aux += pairs.size
        nv = base + n_aux
        A = sp.vstack([r for r, _ in ub_rows]).tocoo() if ub_rows else sp.coo_array((0, nx))
        ids = np.concatenate([i for _, i in ub_rows]) if ub_rows else np.zeros(0, dtype=np.int64)
        n_ub = ids.size
        A_c1 = sp.csr_array(
            (
                np.concatenate([A.data, np.full(n_ub, -alpha)]),
                (np.concatenate([A.row, np.arange(n_ub)]), np.concatenate([A.col, base + ids])),
            ),
            shape=(n_ub, nv),
        )
        A_rest = sp.hstack([self.A_t, sp.csr_array((self.A_t.shape[0], nz + n_aux))])
        A_ub = sp.vstack([A_c1, A_rest]).tocsr()
        b_ub = np.concatenate([np.zeros(n_ub), self.b_t])
        er = np.concatenate([np.arange(n_aux)] + [r for r, _, _ in aux_eq])
        ec = np.concatenate([base + np.arange(n_aux)] + [c_ for _, c_, _ in aux_eq])
        ev = np.concatenate([np.ones(n_aux)] + [v for _, _, v in aux_eq])
        A_eq = sp.vstack(
            [
                sp.csr_array((ev, (er, ec)), shape=(n_aux, nv)),
                sp.csr_array((self.zv, (self.zr, self.zc)), shape=(nz, nv)),
                sp.hstack([self.A_sum, sp.csr_array((K, nz + n_aux))]),
            ]
        ).tocsr()
        b_eq = np.concatenate([np.zeros(n_aux + nz), np.ones(K)])
        cost = np.zeros(nv)
        cost[nx : nx + K] = U0 / U0.sum()
        lo_b = np.zeros(nv)
        lo_b[self.diag] = floor
        up = np.concatenate([np.ones(nx), np.full(K + nz + n_aux, np.inf)])
        return cost, A_ub, b_ub, A_eq, b_eq, np.column_stack([lo_b, up])
