"""The linear programs of a design, as data that any backend can solve.

Every stage solves linear programs of one shape over the support of P::

    minimise  c . x  (+ fixed costs of the auxiliary columns)
    subject to  R x = 1                     (rows of P sum to one)
                risk constraints' rows      (C1, column ratios: :mod:`.constraints`)
                x_mm - t >= 0               (phase one only: t is the common diagonal floor)
                other constraints' rows     (C x = U0 for an invariant design)
                lo <= x <= hi               (floor, kept cells, trust region)

Only ``c``, ``lo`` and ``hi`` of the ``x`` columns change between the solves of one stage, so
a backend loads the program once and re-solves it cheaply.  With ``param`` the ``x`` columns
are parameters ``z`` and the support entries are ``x = T z`` (the block designs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .constraints import AUX_BLOCKS, Constraint
from .constraints.column_ratio import dense_support
from .constraints.invariance import column_mass_matrix
from .support import Support

__all__ = [
    "LinearProgram",
    "Duals",
    "build_program",
    "row_sum_matrix",
    "column_mass_matrix",
    "pk_log_program",
]


def row_sum_matrix(support: Support) -> sp.csr_matrix:
    """R with (R x)_m = sum_k P[m, k]."""
    return sp.csr_matrix(
        (np.ones(support.size), (support.rows, np.arange(support.size))),
        shape=(support.K, support.size),
    )


@dataclass(frozen=True)
class LinearProgram:
    """A program ``min cost . y  s.t.  row_lo <= A y <= row_hi, col_lo <= y <= col_hi``.

    The first ``n_x`` columns are the ``x`` (or ``z``) columns whose costs and bounds each
    solve sets; ``cols`` and ``rows`` name the slices of the other column and row blocks
    (``D``, ``L``, ``t``, ``s``; ``rows``, ``B``, ``N``, ``floor``, ``inv``, ...); ``constraints``
    are the constraints whose rows it holds, in order.  ``scale_costs`` says
    whether a backend may rescale the ``x`` costs (not when fixed costs of other columns set
    the scale, as in phase one).  ``presolve`` False asks a backend for a solve without its
    presolve: the census-scale linear stage's programs are built for one solve each (a new one
    after every pricing round), and HiGHS's dual simplex solved them fastest without it (with
    it, the basis after postsolve took minutes to repair on one; the interior point took two to
    three times as long; benchmarks/README.md).
    ``restart`` asks a backend that warm-starts for a solve from scratch each time (presolve
    and a crash basis): the refinement's steps change every cost and bound, and on large census
    samples the previous vertex made a worse start than none (benchmarks/README.md).  HiGHS
    then solves each time only the rows that can bind within the solve's bounds, unscaled
    (:class:`~.backends.highs.HighsProgram`).
    """

    A: sp.csc_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    cost: np.ndarray
    n_x: int
    cols: dict
    rows: dict
    support: Support
    constraints: tuple = ()
    scale_costs: bool = True
    presolve: bool = True
    restart: bool = False

    @property
    def n_cols(self) -> int:
        return int(self.A.shape[1])


def build_program(
    support: Support,
    constraints=(),
    *,
    max_floor: bool = False,
    elastic: float | None = None,
    param: sp.spmatrix | None = None,
    presolve: bool = True,
    restart: bool = False,
) -> LinearProgram:
    """Assemble the program over ``support`` with the rows of ``constraints``.

    Parameters
    ----------
    constraints : sequence of Constraint
        Their rows, in this order: the risk constraints' right after the row sums, the others
        after the floor rows; their auxiliary columns by block (:data:`~.constraints.AUX_BLOCKS`).
    max_floor : bool
        Phase one: maximise a common lower bound t on the diagonal (cost -1 on t).
    elastic : float, optional
        Give every row that has one (C1's) a slack s >= 0 with this cost per unit, so that a
        restricted support is never infeasible and column generation can price what it lacks.
    param : sparse matrix, optional
        ``x = param @ z``: the columns are the parameters ``z`` (not with column ratios).
    presolve : bool
        False: ask for a solve without presolve (:class:`LinearProgram`).
    restart : bool
        Ask for every solve from scratch, not from the last one's basis (:class:`LinearProgram`).
    """
    K = support.K
    T = None if param is None else sp.csr_matrix(param)
    n_x = support.size if T is None else T.shape[1]
    constraints = tuple(constraints)
    soft = elastic is not None
    aux = [_aux_widths(c, support, soft) for c in constraints]
    widths = {"x": n_x, "t": 1 if max_floor else 0}
    widths.update({k: sum(a.get(k, 0) for a in aux) for k in AUX_BLOCKS})
    order = ("x", "D", "L", "t", "s")
    starts = np.cumsum([0] + [widths[k] for k in order])
    cols = {k: slice(int(starts[i]), int(starts[i + 1])) for i, k in enumerate(order)}
    # where each constraint's own auxiliary columns start within each block
    offsets = np.cumsum(
        [[0] * len(AUX_BLOCKS)] + [[a.get(k, 0) for k in AUX_BLOCKS] for a in aux], axis=0
    )

    lower, upper, rows = [], [], {}
    blocks: list[sp.csr_matrix] = []

    def add(name, mats, lo, hi, at=None):
        nrow = len(lo)
        parts = []
        for k in order:
            if not widths[k]:
                continue
            m = mats.get(k)
            if m is None:
                parts.append(sp.csr_matrix((nrow, widths[k])))
            elif k == "x":
                m = sp.csr_matrix(m)
                parts.append(m @ T if T is not None else m)
            elif k == "t":
                parts.append(sp.csr_matrix(m))
            else:  # the constraint's own columns within the block
                off = int(offsets[at][AUX_BLOCKS.index(k)])
                m = sp.csr_matrix(m)
                pad = (
                    sp.csr_matrix((nrow, off)),
                    m,
                    sp.csr_matrix((nrow, widths[k] - off - m.shape[1])),
                )
                parts.extend(p for p in pad if p.shape[1])
        start = sum(b.shape[0] for b in blocks)
        blocks.append(sp.hstack(parts, format="csr"))
        rows[name] = slice(start, start + nrow)
        lower.append(np.asarray(lo, dtype=float))
        upper.append(np.asarray(hi, dtype=float))

    add("rows", {"x": row_sum_matrix(support)}, np.ones(K), np.ones(K))
    for i in (i for i, c in enumerate(constraints) if c.risk):
        for blk in constraints[i].rows(support, soft):
            add(blk.name, blk.mats, blk.lo, blk.hi, i)
    if max_floor:
        dsel = sp.csr_matrix((np.ones(K), (np.arange(K), support.diag)), shape=(K, support.size))
        add("floor", {"x": dsel, "t": -np.ones((K, 1))}, np.zeros(K), np.full(K, np.inf))
    for i in (i for i, c in enumerate(constraints) if not c.risk):
        for blk in constraints[i].rows(support, soft):
            add(blk.name, blk.mats, blk.lo, blk.hi, i)
    A = sp.vstack(blocks, format="csc")
    cost, col_lo, col_hi = _column_costs(A.shape[1], cols, max_floor, elastic)
    return LinearProgram(
        A=A,
        row_lo=np.concatenate(lower),
        row_hi=np.concatenate(upper),
        col_lo=col_lo,
        col_hi=col_hi,
        cost=cost,
        n_x=n_x,
        cols=cols,
        rows=rows,
        support=support,
        constraints=constraints,
        scale_costs=not max_floor,
        presolve=presolve,
        restart=restart,
    )


def _column_costs(n: int, cols: dict, max_floor: bool, elastic: float | None) -> tuple:
    """Cost and bounds of the program's ``n`` columns, laid out as ``cols``."""
    cost = np.zeros(n)
    col_lo = np.zeros(n)
    col_hi = np.ones(n)
    for k in AUX_BLOCKS:
        col_hi[cols[k]] = np.inf
    col_lo[cols["t"]], col_hi[cols["t"]] = -np.inf, 1.0
    if max_floor:
        cost[cols["t"]] = -1.0
    if elastic is not None:
        cost[cols["s"]] = float(elastic)
    return cost, col_lo, col_hi


def _aux_widths(constraint: Constraint, support: Support, elastic: bool) -> dict:
    widths = constraint.columns(support, elastic)
    bad = [k for k in widths if k not in AUX_BLOCKS]
    if bad:
        raise ValueError(
            f"constraint {constraint.name!r} asks for column blocks {bad!r}; "
            f"allowed: {AUX_BLOCKS!r}"
        )
    return widths


@dataclass(frozen=True)
class Duals:
    """Row duals (reduced cost = c - A^T y) by row block, and the reduced costs of the x columns.

    All on the scale of the costs passed to a backend's ``solve``.  ``named`` holds the duals of
    any row block by name where the backend gives them (a constraint's own rows, for its
    :meth:`~pramopt.optimize.constraints.Constraint.prices`).
    """

    rows: np.ndarray
    B: np.ndarray
    N: np.ndarray
    inv: np.ndarray | None
    cols: np.ndarray
    named: dict | None = None

    def of(self, name: str) -> np.ndarray:
        """The duals of the row block ``name``."""
        if self.named is not None and name in self.named:
            return self.named[name]
        if name in ("rows", "B", "N", "inv") and getattr(self, name) is not None:
            return getattr(self, name)
        raise KeyError(
            f"no duals of the row block {name!r}: the solver gave those of rows, B, N, inv"
            f"{'' if not self.named else ', ' + ', '.join(self.named)}"
        )


def pk_log_program(K: int, log_a: float):
    """Theorem 3 exactly, as a linear program in ``y = ln P`` (every entry positive).

    ``k >= k*`` is ``M[u,v] M[v,u] >= a`` for every pair, ``M[u,v] = min_j P[u,j]/P[v,j]``.  In
    log space, with one auxiliary ``m_uv <= y_uj - y_vj`` for every (u, v, j) (K^2 (K-1) rows) and
    ``m_uv + m_vu >= ln a`` for every pair, the set is exactly Theorem 3's, and linear.  It does
    not change when a row of y is shifted (a row of P scaled), so the rows of P can be normalised
    (``P = softmax(y)`` row by row) without leaving it: every iterate is feasible.

    Columns: ``y`` (K^2, row-major) then ``m`` (K^2); the ``y`` columns are the program's ``x``.
    """
    u, v, j = np.meshgrid(np.arange(K), np.arange(K), np.arange(K), indexing="ij")
    off = u != v
    u, v, j = u[off], v[off], j[off]
    R = u.size
    r = np.arange(R)
    KK = K * K
    A1 = sp.csr_matrix(
        (
            np.concatenate([np.ones(R), -np.ones(R), np.ones(R)]),
            (np.concatenate([r, r, r]), np.concatenate([KK + u * K + v, u * K + j, v * K + j])),
        ),
        shape=(R, 2 * KK),
    )
    uu, vv = np.triu_indices(K, 1)
    npair = uu.size
    r2 = np.arange(npair)
    A2 = sp.csr_matrix(
        (
            np.ones(2 * npair),
            (np.concatenate([r2, r2]), np.concatenate([KK + uu * K + vv, KK + vv * K + uu])),
        ),
        shape=(npair, 2 * KK),
    )
    A = sp.vstack([A1, A2], format="csc")
    n = 2 * KK
    cols = {"x": slice(0, KK), "m": slice(KK, n), "t": slice(n, n), "s": slice(n, n)}
    return LinearProgram(
        A=A,
        row_lo=np.concatenate([np.full(R, -np.inf), np.full(npair, float(log_a))]),
        row_hi=np.concatenate([np.zeros(R), np.full(npair, np.inf)]),
        col_lo=np.full(n, -np.inf),
        col_hi=np.full(n, np.inf),
        cost=np.zeros(n),
        n_x=KK,
        cols=cols,
        rows={"rows": slice(0, 0)},
        support=dense_support(K),
    )
