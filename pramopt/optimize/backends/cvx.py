"""Any LP solver that cvxpy can call (CLARABEL, ECOS, SCS, ...), imported only when used.

A loaded program is compiled once with the ``x`` costs and bounds as cvxpy Parameters and re-solved
by the refinement.  This backend gives no duals, so column generation does not run on it (the
designer then starts from a support that needs none); a one-shot LP (:func:`solve_lp`) is
compiled for its one solve.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse as sp

from ..program import LinearProgram
from .results import LPResult, LPSolution, Outcome

__all__ = ["load", "solve_lp", "installed"]


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
            return LPSolution(
                Outcome.ERROR,
                None,
                None,
                time.perf_counter() - t0,
                f"{self.solver}: {exc}".splitlines()[0],
            )
        st = self.problem.status
        secs = time.perf_counter() - t0
        if st in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and self.y.value is not None:
            y = np.asarray(self.y.value).ravel()
            t = float(y[P.cols["t"]][0]) if P.cols["t"].stop > P.cols["t"].start else None
            return LPSolution(
                Outcome.OPTIMAL,
                y[: P.n_x].copy(),
                name,
                secs,
                objective=float(self.problem.value) * scale,
                t=t,
                slack=y[P.cols["s"]].copy(),
                scale=scale,
            )
        if st in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            return LPSolution(Outcome.INFEASIBLE, None, name, secs)
        return LPSolution(Outcome.ERROR, None, None, secs, f"{self.solver}: {st}")

    def duals(self):
        return None


def load(program: LinearProgram, solver: str) -> CvxpyProgram:
    return CvxpyProgram(program, solver)


def installed(name: str) -> bool:
    """Whether cvxpy loads here and can call the solver ``name``."""
    try:
        import cvxpy as cp
    except ImportError:
        return False
    return name in cp.installed_solvers()


def _bounds(bounds, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``linprog``'s ``bounds`` as two arrays (``None`` entries: no bound)."""
    if bounds is None:
        return np.zeros(n), np.full(n, np.inf)
    b = np.array(bounds, dtype=float)  # None -> nan
    if b.ndim == 1:  # one (lo, hi) pair for every variable
        b = np.broadcast_to(b, (n, 2))
    lo, hi = b[:, 0].copy(), b[:, 1].copy()
    lo[np.isnan(lo)], hi[np.isnan(hi)] = -np.inf, np.inf
    return lo, hi


def solve_lp(
    c, A_ub, b_ub, A_eq, b_eq, bounds, *, name: str, method: str = "", options: dict | None = None
) -> LPResult:
    """One LP (``linprog``'s form) by the cvxpy solver ``name``; no marginals (``method`` and
    ``options`` are HiGHS's and not used)."""
    import cvxpy as cp

    if name not in cp.installed_solvers():
        raise ImportError(f"cvxpy cannot load the solver {name!r} here")
    c = np.asarray(c, dtype=float)
    x = cp.Variable(c.size)
    lo, hi = _bounds(bounds, c.size)
    cons = []
    for A, b, eq in ((A_ub, b_ub, False), (A_eq, b_eq, True)):
        if A is not None and np.shape(A)[0]:
            Ax = sp.csr_matrix(A) @ x
            b = np.asarray(b, dtype=float)
            cons.append(Ax == b if eq else Ax <= b)
    for idx, con in (
        (np.flatnonzero(np.isfinite(lo)), lambda i: x[i] >= lo[i]),
        (np.flatnonzero(np.isfinite(hi)), lambda i: x[i] <= hi[i]),
    ):
        if idx.size:
            cons.append(con(idx))
    problem = cp.Problem(cp.Minimize(c @ x), cons)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem.solve(solver=name, **_options(name))
    except (cp.error.SolverError, ValueError, ArithmeticError) as exc:
        detail = f"{name}: {exc}".splitlines()[0]
        return LPResult(Outcome.ERROR, None, name, time.perf_counter() - t0, detail)
    secs = time.perf_counter() - t0
    st = problem.status
    if st in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and x.value is not None:
        return LPResult(
            Outcome.OPTIMAL,
            np.asarray(x.value).ravel(),
            name,
            secs,
            f"{name}: {st}",
            objective=float(problem.value),
        )
    ends = {
        cp.INFEASIBLE: Outcome.INFEASIBLE,
        cp.INFEASIBLE_INACCURATE: Outcome.INFEASIBLE,
        cp.UNBOUNDED: Outcome.UNBOUNDED,
        cp.UNBOUNDED_INACCURATE: Outcome.UNBOUNDED,
    }
    return LPResult(ends.get(st, Outcome.ERROR), None, name, secs, f"{name}: {st}")
