"""Convex QPs over a loaded program's constraints, by Clarabel's interior-point method.

The refinement's curved model ``min g . d + 1/2 d' B d`` (``B`` diagonal, positive) lives on
the same rows and box as its linear programs.  Clarabel's interior-point method solves it
directly (HiGHS's active-set QP solver works on a reduced Hessian that grows with the entries
strictly inside their bounds, and failed on these QPs).  Its point lies strictly inside the box,
so entries below :data:`ZERO` are set to zero (the caller renormalises the rows).  Given the
centre, rows slack there are left out at first and added where the solution violates them
(:mod:`.qp_rows`): the same solution, several times faster on C1's rows.

Registered as ``CLARABEL_QP`` (:mod:`.registry`), reached through
:func:`pramopt.optimize.backends.solve_qp`.

The model may carry curvature pairs ``(s_i, y_i)`` (``y_i`` the loss's Hessian times ``s_i``): its
matrix is then the BFGS update ``B_m`` of ``H`` by them, applied oldest first.  ``B_m`` is dense,
but each update is a projection plus a rank-one term, ``v' B_i v = min_t (v - t s_i)' B_(i-1)
(v - t s_i) + (y_i' v)^2 / (y_i' s_i)``, so that with one scalar ``t_i`` and one ``w_i = y_i' z``
per pair the QP stays convex and sparse (``m`` dense rows and columns)::

    1/2 d' B_m d = min over t of  1/2 z_1' H z_1 + sum_i 1/2 w_i^2 / (y_i' s_i),
    z_(i+1) = d - sum_(j > i) t_j s_j,   w_i = y_i' z_(i+1).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from ..program import Duals, LinearProgram
from .qp_rows import ROUNDS, Rows, first_rows, violated
from .results import LPSolution, Outcome

__all__ = ["solve_qp", "installed", "NAME", "ZERO"]

NAME = "CLARABEL(qp)"
#: Entries of the interior-point solution below this are zeros (Clarabel stops 1e-8 short of
#: its bounds); a transition of 1e-9 changes no loss and no risk in any reported digit.
ZERO = 1e-9
#: Clarabel's factorisation of the KKT system.  Its default (``"auto"``) picks faer, which on
#: the refinement's QPs (one dense block of the rows' sums and C1's denominators) takes twice
#: as long as QDLDL on 2 cores (benchmarks/README.md, "Auto mode on testdata").
KKT_METHOD = "qdldl"


def solve_qp(
    program: LinearProgram,
    cost,
    hdiag,
    lo,
    hi,
    *,
    tol: float = 1e-8,
    scale: float = 1.0,
    pairs=(),
    center=None,
) -> LPSolution:
    """Minimise ``cost . x + 1/2 x' H x`` over ``program`` with ``lo <= x <= hi``.

    Parameters
    ----------
    program : LinearProgram
        Rows and the bounds of its other columns; fixed costs of those columns are kept.
    cost, lo, hi : ndarray, shape (program.n_x,)
        Linear costs and the box of the ``x`` columns.
    hdiag : ndarray of shape (program.n_x,), or sparse matrix of shape (n_x, n_x)
        ``H``: its diagonal (non-negative), or a symmetric positive semidefinite matrix.
    tol : float
        Clarabel's feasibility and gap tolerances.
    scale : float
        The factor ``cost`` and ``hdiag`` were divided by: the duals are returned multiplied by
        it, on the scale of the caller's objective.
    pairs : sequence of (s, y), optional
        Curvature pairs on the ``x`` columns, oldest first, each with ``y . s > 0`` and ``y`` on
        the caller's scale (not divided by ``scale``): the Hessian becomes ``H``'s BFGS update
        by them (see the module), for a diagonal ``hdiag`` only.
    center : ndarray, shape (program.n_x,)
        The point ``x_k`` the model is centred on (``d = x - x_k``); needed with ``pairs``.

    Returns
    -------
    LPSolution
        ``OPTIMAL`` with the ``x`` columns and ``duals`` (row duals, reduced cost
        ``cost + H x - A^T y`` of the ``x`` columns at the solution), or ``ERROR`` (any
        other end, Clarabel missing).
    """
    t0 = time.perf_counter()
    try:
        import clarabel
    except ImportError as e:  # pragma: no cover - a dependency
        return LPSolution(Outcome.ERROR, None, None, 0.0, f"clarabel: {e}")
    P = program
    nx = P.n_x
    c = P.cost.astype(float).copy()
    c[:nx] = cost
    col_lo = P.col_lo.astype(float).copy()
    col_hi = P.col_hi.astype(float).copy()
    col_lo[:nx], col_hi[:nx] = lo, hi
    A = sp.csr_matrix(P.A)
    # the rows the first QP imposes; the others are checked at its solution (see qp_rows)
    kept = first_rows(P, center, A)
    whole = Rows(np.ones_like(kept.rows), np.ones_like(kept.cols), kept.defining, nx)
    for rounds in range(ROUNDS + 1):
        if rounds == ROUNDS:
            kept = whole
        out = _solve_kept(clarabel, P, A, c, col_lo, col_hi, hdiag, kept, tol, scale, pairs, center)
        if kept.whole:
            break
        more = whole if out.x is None else violated(P, kept, out.x, A)  # failed: the whole
        if more is None:
            break
        kept = more
    return replace(out, seconds=time.perf_counter() - t0)


def _solve_kept(clarabel, P, A, c, col_lo, col_hi, hdiag, kept, tol, scale, pairs, center):
    """The QP over the rows and columns ``kept`` imposes (the x columns are always there)."""
    t0 = time.perf_counter()
    nx = P.n_x
    rows = np.flatnonzero(kept.rows)
    A = A[rows][:, kept.cols]
    c, col_lo, col_hi = c[kept.cols], col_lo[kept.cols], col_hi[kept.cols]
    row_lo, row_hi = P.row_lo[rows], P.row_hi[rows]
    n = A.shape[1]
    H = _hessian(hdiag, n, nx)
    if pairs:
        H, c, A, row_lo, row_hi, col_lo, col_hi = _lift_pairs(
            H,
            c,
            A,
            row_lo,
            row_hi,
            col_lo,
            col_hi,
            nx,
            np.asarray(hdiag, dtype=float),
            pairs,
            np.asarray(center, dtype=float),
            scale,
        )
        n = H.shape[0]
    M, b, cones, (eq, fix, up, dn) = _cone_form(clarabel, A, row_lo, row_hi, col_lo, col_hi, n)
    s = clarabel.DefaultSettings()
    s.verbose = False
    s.tol_feas = s.tol_gap_abs = s.tol_gap_rel = tol
    s.direct_solve_method = KKT_METHOD
    try:
        sol = clarabel.DefaultSolver(H, c, M, b, cones, s).solve()
    except Exception as e:  # a solver panic is an error like any other
        return LPSolution(Outcome.ERROR, None, None, time.perf_counter() - t0, f"clarabel: {e}")
    secs = time.perf_counter() - t0
    status = str(sol.status)
    if status != "Solved":
        return LPSolution(Outcome.ERROR, None, None, secs, f"clarabel: {status}")
    y_all = np.asarray(sol.x, dtype=float)
    x = y_all[:nx].copy()
    x[x < ZERO] = 0.0
    duals = _duals(sol, P, A, c, H, y_all, (eq, fix, up, dn), nx, scale, rows)
    return LPSolution(Outcome.OPTIMAL, x, NAME, secs, objective=float(sol.obj_val), duals=duals)


def _hessian(hdiag, n: int, nx: int) -> sp.csc_matrix:
    """``H`` over all ``n`` columns (zero outside the ``nx`` x columns)."""
    if sp.issparse(hdiag):  # a symmetric matrix on the x columns; Clarabel reads its upper triangle
        Hx = sp.triu(sp.coo_matrix(hdiag)).tocoo()
        return sp.csc_matrix((Hx.data, (Hx.row, Hx.col)), shape=(n, n))
    return sp.diags(
        np.concatenate([np.asarray(hdiag, dtype=float), np.zeros(n - nx)]), format="csc"
    )


def _cone_form(clarabel, A, row_lo, row_hi, col_lo, col_hi, n: int) -> tuple:
    """Clarabel's ``M``, ``b`` and cones, and the masks of the rows that went where."""
    eye = sp.identity(n, format="csr")
    # Clarabel's form A y + s = b, s in a cone: equalities in the zero cone, every finite
    # bound of a row or a column as one non-negative slack
    eq = row_lo == row_hi
    fix = col_lo == col_hi
    up, dn = ~eq & np.isfinite(row_hi), ~eq & np.isfinite(row_lo)
    cu, cl = ~fix & np.isfinite(col_hi), ~fix & np.isfinite(col_lo)
    M = sp.vstack([A[eq], eye[fix], A[up], -A[dn], eye[cu], -eye[cl]], format="csc")
    b = np.concatenate([row_lo[eq], col_lo[fix], row_hi[up], -row_lo[dn], col_hi[cu], -col_lo[cl]])
    cones = [
        clarabel.ZeroConeT(int(eq.sum() + fix.sum())),
        clarabel.NonnegativeConeT(int(up.sum() + dn.sum() + cu.sum() + cl.sum())),
    ]
    return M, b, cones, (eq, fix, up, dn)


def _duals(sol, P: LinearProgram, A, c, H, y_all, masks, nx: int, scale: float, rows) -> Duals:
    """The row duals and reduced costs of the ``x`` columns at Clarabel's solution; ``A``'s first
    rows are ``P``'s ``rows`` (the others' duals are zero: they are slack at the solution)."""
    eq, fix, up, dn = masks
    # Clarabel's stationarity is H y + c + M^T z = 0; in the LP convention (reduced cost
    # c - A^T u) the row duals are u = -z on equalities, -z_up + z_dn on inequalities
    z = np.asarray(sol.z, dtype=float)
    n_eq, n_fix, n_up = int(eq.sum()), int(fix.sum()), int(up.sum())
    u = np.zeros(A.shape[0])
    u[eq] = -z[:n_eq]
    u[up] -= z[n_eq + n_fix : n_eq + n_fix + n_up]
    u[dn] += z[n_eq + n_fix + n_up : n_eq + n_fix + n_up + int(dn.sum())]
    red = (c + (H @ y_all + H.T @ y_all - H.diagonal() * y_all) - A.T @ u)[
        :nx
    ] * scale  # H y, H symmetric
    full = np.zeros(P.A.shape[0])
    full[rows] = u[: rows.size] * scale  # the pairs' rows price nothing outside the support
    u = full
    r = P.rows
    empty = np.zeros(0)
    return Duals(
        rows=u[r["rows"]],
        B=u[r["B"]] if "B" in r else empty,
        N=u[r["N"]] if "N" in r else empty,
        inv=u[r["inv"]] if "inv" in r else None,
        cols=red,
    )


def installed(name: str = "CLARABEL_QP") -> bool:
    """Whether Clarabel loads here."""
    try:
        import clarabel  # noqa: F401
    except ImportError:  # pragma: no cover - a dependency
        return False
    return True


def _lift_pairs(H, c, A, row_lo, row_hi, col_lo, col_hi, nx, hdiag, pairs, center, scale):
    """The QP with the BFGS update of the diagonal ``hdiag`` by ``pairs``: columns ``t`` and ``w``
    appended after the program's (see the module)."""
    n, m = H.shape[0], len(pairs)
    S = np.column_stack([np.asarray(p[0], dtype=float) for p in pairs])
    Y = np.column_stack([np.asarray(p[1], dtype=float) for p in pairs])
    ys = np.einsum("ij,ij->j", Y, S)
    if not np.all(np.isfinite(ys) & (ys > 0)):
        raise ValueError("every curvature pair needs y . s > 0")
    HS = hdiag[:, None] * S
    # 1/2 z_1' H z_1 with z_1 = (x - center) - S t: x-t block -H S, t-t block S' H S, and
    # linear costs S' H center on t; the w_i on the diagonal with 1 / (y_i' s_i) (scaled)
    Hc = sp.coo_matrix(H)
    tr, tc = np.triu_indices(m)
    StHS = S.T @ HS
    xr, xt = np.nonzero(HS)
    Hl = sp.csc_matrix(
        (
            np.concatenate([Hc.data, -HS[xr, xt], StHS[tr, tc], 1.0 / (ys * scale)]),
            (
                np.concatenate([Hc.row, xr, n + tr, n + m + np.arange(m)]),
                np.concatenate([Hc.col, n + xt, n + tc, n + m + np.arange(m)]),
            ),
        ),
        shape=(n + 2 * m,) * 2,
    )
    c = np.concatenate([c, HS.T @ center, np.zeros(m)])
    # w_i = y_i' (x - center - sum_(j > i) t_j s_j):
    #   y_i' x - sum_(j > i) (y_i' s_j) t_j - w_i = y_i' center
    E = sp.hstack(
        [
            sp.csr_matrix(Y.T),
            sp.csr_matrix((m, n - nx)),
            sp.csr_matrix(-np.triu(Y.T @ S, 1)),
            -sp.identity(m, format="csr"),
        ],
        format="csr",
    )
    A = sp.vstack([sp.hstack([A, sp.csr_matrix((A.shape[0], 2 * m))]), E], format="csr")
    yc = Y.T @ center
    free = np.full(2 * m, np.inf)
    return (
        Hl,
        c,
        A,
        np.concatenate([row_lo, yc]),
        np.concatenate([row_hi, yc]),
        np.concatenate([col_lo, -free]),
        np.concatenate([col_hi, free]),
    )
