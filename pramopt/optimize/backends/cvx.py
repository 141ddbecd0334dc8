"""Any LP solver that cvxpy can call (CLARABEL, ECOS, SCS, ...), imported only when used.

The program is compiled once with the ``x`` costs and bounds as cvxpy Parameters and re-solved
by the refinement.  This backend gives no duals, so column generation does not run on it (the
designer then starts from a support that needs none).
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from ..program import LinearProgram
from . import LPSolution, Outcome

__all__ = ["load"]


def _options(name: str) -> dict:
    if name == "SCS":
        return {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 200000}
    if name == "CLARABEL":
        return {"tol_feas": 1e-10, "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10}
    if name == "ECOS":
        return {"abstol": 1e-10, "reltol": 1e-10, "feastol": 1e-10}
    return {}


class CvxpyProgram:
    """A :class:`LinearProgram` compiled by cvxpy for one named solver."""

    def __init__(self, program: LinearProgram, solver: str):
        import cvxpy as cp

        if solver not in cp.installed_solvers():
            raise ImportError(f"cvxpy cannot load the solver {solver!r} here")
        self._cp = cp
        self.program = program
        self.solver = solver
        P = program
        S = P.n_x
        self.y = cp.Variable(P.n_cols)
        self.c = cp.Parameter(S)
        self.lo = cp.Parameter(S)
        self.hi = cp.Parameter(S)
        A = P.A.tocsr()
        eq = np.isfinite(P.row_lo) & (P.row_lo == P.row_hi)
        up = ~eq & np.isfinite(P.row_hi)
        dn = ~eq & np.isfinite(P.row_lo)
        cons = [self.y[:S] >= self.lo, self.y[:S] <= self.hi]
        if eq.any():
            cons.append(A[eq] @ self.y == P.row_lo[eq])
        if up.any():
            cons.append(A[up] @ self.y <= P.row_hi[up])
        if dn.any():
            cons.append(A[dn] @ self.y >= P.row_lo[dn])
        rest = np.arange(S, P.n_cols)
        lo_f, hi_f = np.isfinite(P.col_lo[rest]), np.isfinite(P.col_hi[rest])
        if lo_f.any():
            cons.append(self.y[rest[lo_f]] >= P.col_lo[rest[lo_f]])
        if hi_f.any():
            cons.append(self.y[rest[hi_f]] <= P.col_hi[rest[hi_f]])
        obj = self.c @ self.y[:S]
        if rest.size and np.any(P.cost[rest]):
            obj = obj + P.cost[rest] @ self.y[rest]
        self.problem = cp.Problem(cp.Minimize(obj), cons)

    def solve(self, c, lo, hi) -> LPSolution:
        cp = self._cp
        P = self.program
        scale = (float(np.max(np.abs(c))) or 1.0) if P.scale_costs else 1.0
        self.c.value = np.asarray(c, dtype=float) / scale  # well-scaled costs for every solver
        self.lo.value = np.asarray(lo, dtype=float)
        self.hi.value = np.asarray(hi, dtype=float)
        t0 = time.perf_counter()
        name = self.solver
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.problem.solve(solver=self.solver, **_options(self.solver))
        except (cp.error.SolverError, ValueError, ArithmeticError) as exc:
            return LPSolution(Outcome.ERROR, None, None, time.perf_counter() - t0,
                              f"{self.solver}: {exc}".splitlines()[0])
        st = self.problem.status
        secs = time.perf_counter() - t0
        if st in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and self.y.value is not None:
            y = np.asarray(self.y.value).ravel()
            t = float(y[P.cols["t"]][0]) if P.cols["t"].stop > P.cols["t"].start else None
            return LPSolution(Outcome.OPTIMAL, y[: P.n_x].copy(), name, secs,
                              objective=float(self.problem.value) * scale, t=t, slack=y[P.cols["s"]].copy(),
                              scale=scale)
        if st in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            return LPSolution(Outcome.INFEASIBLE, None, name, secs)
        return LPSolution(Outcome.ERROR, None, None, secs, f"{self.solver}: {st}")

    def duals(self):
        return None


def load(program: LinearProgram, solver: str) -> CvxpyProgram:
    return CvxpyProgram(program, solver)
