"""Convex QPs over a loaded program's constraints, by Clarabel's interior-point method.

The refinement's curved model ``min g . d + 1/2 d' B d`` (``B`` diagonal, positive) lives on
the same rows and box as its linear programs.  HiGHS's active-set QP solver was tried first:
its reduced Hessian grows with the number of entries strictly inside their bounds (774 of
2,209 on sdcMicro's testdata with 4 keys, 3 s per solve) and it ended in a solve error there;
Clarabel (a dependency already) solves the same QP in about 25 interior-point iterations and
0.06 s.  Its point lies strictly inside the box, so entries below :data:`ZERO` are set to zero
(the caller renormalises the rows).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ..program import Duals, LinearProgram
from . import LPSolution, Outcome

__all__ = ["solve_qp", "NAME", "ZERO"]

NAME = "CLARABEL(qp)"
#: Entries of the interior-point solution below this are zeros (Clarabel stops 1e-8 short of
#: its bounds); a transition of 1e-9 changes no loss and no risk in any reported digit.
ZERO = 1e-9


def solve_qp(program: LinearProgram, cost, hdiag, lo, hi, *, tol: float = 1e-8, scale: float = 1.0) -> LPSolution:
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
    n, nx = P.n_cols, P.n_x
    c = P.cost.astype(float).copy()
    c[:nx] = cost
    col_lo = P.col_lo.astype(float).copy()
    col_hi = P.col_hi.astype(float).copy()
    col_lo[:nx], col_hi[:nx] = lo, hi
    if sp.issparse(hdiag):  # a symmetric matrix on the x columns; Clarabel reads its upper triangle
        Hx = sp.triu(sp.coo_matrix(hdiag)).tocoo()
        H = sp.csc_matrix((Hx.data, (Hx.row, Hx.col)), shape=(n, n))
    else:
        H = sp.diags(np.concatenate([np.asarray(hdiag, dtype=float), np.zeros(n - nx)]), format="csc")
    A = sp.csr_matrix(P.A)
    I = sp.identity(n, format="csr")
    # Clarabel's form A y + s = b, s in a cone: equalities in the zero cone, every finite
    # bound of a row or a column as one non-negative slack
    eq = P.row_lo == P.row_hi
    fix = col_lo == col_hi
    up, dn = ~eq & np.isfinite(P.row_hi), ~eq & np.isfinite(P.row_lo)
    cu, cl = ~fix & np.isfinite(col_hi), ~fix & np.isfinite(col_lo)
    M = sp.vstack([A[eq], I[fix], A[up], -A[dn], I[cu], -I[cl]], format="csc")
    b = np.concatenate([P.row_lo[eq], col_lo[fix], P.row_hi[up], -P.row_lo[dn], col_hi[cu], -col_lo[cl]])
    cones = [clarabel.ZeroConeT(int(eq.sum() + fix.sum())),
             clarabel.NonnegativeConeT(int(up.sum() + dn.sum() + cu.sum() + cl.sum()))]
    s = clarabel.DefaultSettings()
    s.verbose = False
    s.tol_feas = s.tol_gap_abs = s.tol_gap_rel = tol
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
    # Clarabel's stationarity is H y + c + M^T z = 0; in the LP convention (reduced cost
    # c - A^T u) the row duals are u = -z on equalities, -z_up + z_dn on inequalities
    z = np.asarray(sol.z, dtype=float)
    n_eq, n_fix, n_up = int(eq.sum()), int(fix.sum()), int(up.sum())
    u = np.zeros(A.shape[0])
    u[eq] = -z[:n_eq]
    u[up] -= z[n_eq + n_fix:n_eq + n_fix + n_up]
    u[dn] += z[n_eq + n_fix + n_up:n_eq + n_fix + n_up + int(dn.sum())]
    red = (c + (H @ y_all + H.T @ y_all - H.diagonal() * y_all) - A.T @ u)[:nx] * scale  # H y, H symmetric
    u *= scale
    r = P.rows
    empty = np.zeros(0)
    duals = Duals(rows=u[r["rows"]], B=u[r["B"]] if "B" in r else empty, N=u[r["N"]] if "N" in r else empty,
                  inv=u[r["inv"]] if "inv" in r else None, cols=red)
    return LPSolution(Outcome.OPTIMAL, x, NAME, secs, objective=float(sol.obj_val), duals=duals)
