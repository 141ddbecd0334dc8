"""HiGHS: through ``highspy`` for loaded programs, through scipy's ``linprog`` for one-shot LPs.

A loaded program is one model, re-solved with a warm start.

The refinement changes only costs and bounds between its linear programs; keeping the model
(and its simplex basis) alive makes each re-solve a few pivots instead of a fresh solve.  Going
to HiGHS directly also gives the duals that column generation prices candidate transitions
with, and proves infeasibility far faster than through cvxpy.

``highspy.Highs()`` prints HiGHS's banner to the process's standard output before its options
can be set; the C++ object ``highspy._core._Highs`` takes the same calls without it, so it is
used where it exists, and the banner is kept off stdout otherwise.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from ..program import Duals, LinearProgram
from .results import LPResult, LPSolution, Marginals, Outcome

__all__ = ["load", "solve_lp", "installed", "ColumnProgram"]

NAME = "HIGHS(highspy)"


def _new_highs():
    import highspy

    cls = getattr(getattr(highspy, "_core", None), "_Highs", None)
    if cls is not None:
        h = cls()
    else:  # pragma: no cover - another highspy layout: keep its banner off stdout
        with _stdout_to_stderr():
            h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


@contextlib.contextmanager
def _stdout_to_stderr():  # pragma: no cover - only for highspy versions without _core._Highs
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class HighsProgram:
    """A :class:`LinearProgram` held in one HiGHS model."""

    def __init__(self, program: LinearProgram):
        import highspy

        self._hs = highspy
        self.program = program
        A = program.A
        lp = highspy.HighsLp()
        lp.num_col_ = A.shape[1]
        lp.num_row_ = A.shape[0]
        lp.col_cost_ = program.cost
        lp.col_lower_ = program.col_lo
        lp.col_upper_ = program.col_hi
        lp.row_lower_ = program.row_lo
        lp.row_upper_ = program.row_hi
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = A.indices.astype(np.int32)
        lp.a_matrix_.value_ = A.data.astype(float)
        self.h = _new_highs()
        if program.interior:
            self.h.setOptionValue("solver", "ipm")
        if program.restart:
            # the refinement's step programs: HiGHS's dual simplex took 10-20% fewer seconds on
            # them unscaled (benchmarks/README.md)
            self.h.setOptionValue("simplex_scale_strategy", 0)
        self.h.passModel(lp)
        self._idx = np.arange(program.n_x, dtype=np.int32)
        self.scale = 1.0
        self._solved = False

    def solve(self, c, lo, hi) -> LPSolution:
        P = self.program
        # costs scaled to a largest entry of 1, unless fixed costs of other columns set the scale
        scale = (float(np.max(np.abs(c))) or 1.0) if P.scale_costs else 1.0
        self.scale = scale
        t0 = time.perf_counter()
        if P.restart and self._solved:
            self.h.clearSolver()  # no basis: presolve and a crash basis, as for a new model
        self._solved = True
        self.h.changeColsCost(P.n_x, self._idx, np.asarray(c, dtype=float) / scale)
        self.h.changeColsBounds(
            P.n_x, self._idx, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        )
        self.h.run()
        st = self.h.getModelStatus()
        secs = time.perf_counter() - t0
        if st == self._hs.HighsModelStatus.kOptimal:
            sol = np.asarray(self.h.getSolution().col_value)
            t = float(sol[P.cols["t"]][0]) if P.cols["t"].stop > P.cols["t"].start else None
            return LPSolution(
                Outcome.OPTIMAL,
                sol[: P.n_x].copy(),
                NAME,
                secs,
                objective=float(self.h.getInfo().objective_function_value) * scale,
                t=t,
                slack=sol[P.cols["s"]].copy(),
                scale=scale,
            )
        if st == self._hs.HighsModelStatus.kInfeasible:
            return LPSolution(Outcome.INFEASIBLE, None, NAME, secs)
        return LPSolution(
            Outcome.ERROR, None, None, secs, f"highspy: {self.h.modelStatusToString(st)}"
        )

    def duals(self) -> Duals:
        sol = self.h.getSolution()
        y = np.asarray(sol.row_dual) * self.scale
        r = self.program.rows
        empty = np.zeros(0)
        return Duals(
            rows=y[r["rows"]],
            B=y[r["B"]] if "B" in r else empty,
            N=y[r["N"]] if "N" in r else empty,
            inv=y[r["inv"]] if "inv" in r else None,
            cols=np.asarray(sol.col_dual)[: self.program.n_x] * self.scale,
        )


class ColumnProgram:
    """An LP ``min c x, row_lo <= A x <= row_hi, lo <= x <= hi`` held in one HiGHS model that
    grows by columns (column generation): :meth:`add_cols` keeps the rows and the last basis, so
    that the next :meth:`run` starts from the previous optimum (the new columns nonbasic at
    their lower bound: still primal feasible, a few primal simplex pivots away)."""

    def __init__(self, c, A, row_lo, row_hi, lo, hi):
        import highspy

        self._hs = highspy
        A = A.tocsc()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = (np.asarray(v, float) for v in (c, lo, hi))
        lp.row_lower_, lp.row_upper_ = np.asarray(row_lo, float), np.asarray(row_hi, float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = A.indices.astype(np.int32)
        lp.a_matrix_.value_ = A.data.astype(float)
        self.h = _new_highs()
        self.h.passModel(lp)

    def add_cols(self, c, lo, hi, A) -> None:
        """Append the columns of ``A`` (sparse, the model's rows) with costs and bounds."""
        A = A.tocsc()
        self.h.addCols(
            A.shape[1],
            np.asarray(c, float),
            np.asarray(lo, float),
            np.asarray(hi, float),
            A.nnz,
            A.indptr[:-1].astype(np.int32),
            A.indices.astype(np.int32),
            A.data.astype(float),
        )

    def set_costs(self, c) -> None:
        """Set the cost of every column (the basis is kept: still primal feasible)."""
        c = np.asarray(c, float)
        self.h.changeColsCost(c.size, np.arange(c.size, dtype=np.int32), c)

    def run(self, solver: str = "simplex") -> LPResult:
        """Solve with HiGHS's ``solver`` option (``"simplex"``: the primal simplex from the kept
        basis; ``"ipm"``: the interior point with crossover, a vertex); the primal values,
        objective and row duals (``marginals.eqlin``: one per row, the objective's derivative by
        the row's bound) when optimal."""
        self.h.setOptionValue("solver", "simplex" if solver == "dual" else solver)
        # primal: new columns keep the basis feasible; "dual": HiGHS's dual simplex from it
        self.h.setOptionValue("simplex_strategy", 1 if solver == "dual" else 4)
        t0 = time.perf_counter()
        self.h.run()
        st = self.h.getModelStatus()
        secs = time.perf_counter() - t0
        name = f"HIGHS(highspy {solver})"
        if st != self._hs.HighsModelStatus.kOptimal:
            outcome = (
                Outcome.INFEASIBLE if st == self._hs.HighsModelStatus.kInfeasible else Outcome.ERROR
            )
            return LPResult(outcome, None, name, secs, self.h.modelStatusToString(st))
        sol = self.h.getSolution()
        info = self.h.getInfo()
        empty = np.zeros(0)
        return LPResult(
            Outcome.OPTIMAL,
            np.asarray(sol.col_value),
            name,
            secs,
            f"optimal: {self.h.getNumCol()} columns, {info.simplex_iteration_count} simplex, "
            f"{info.ipm_iteration_count} ipm, {info.crossover_iteration_count} crossover "
            "iterations",
            objective=float(info.objective_function_value),
            marginals=Marginals(empty, np.asarray(sol.row_dual), empty, empty),
        )


def load(program: LinearProgram, name: str = "HIGHS") -> HighsProgram:
    return HighsProgram(program)


def installed(name: str = "HIGHS") -> bool:
    """Whether highspy (loaded programs) and scipy's HiGHS (one-shot LPs) load here."""
    try:
        import highspy  # noqa: F401
        from scipy.optimize import linprog  # noqa: F401
    except ImportError:
        return False
    return True


#: scipy's ``linprog`` status codes (0 optimal, 1 iteration limit, 2 infeasible, 3 unbounded,
#: 4 numerical difficulties).
_LINPROG_OUTCOMES = {0: Outcome.OPTIMAL, 2: Outcome.INFEASIBLE, 3: Outcome.UNBOUNDED}


def solve_lp(
    c,
    A_ub,
    b_ub,
    A_eq,
    b_eq,
    bounds,
    *,
    name: str = "HIGHS",
    method: str = "highs",
    options: dict | None = None,
) -> LPResult:
    """One LP by scipy's ``linprog`` with the HiGHS ``method`` (its marginals when optimal)."""
    from scipy.optimize import linprog

    t0 = time.perf_counter()
    kw = {} if options is None else {"options": options}
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method=method, **kw)
    secs = time.perf_counter() - t0
    outcome = _LINPROG_OUTCOMES.get(int(res.status), Outcome.ERROR)
    if outcome is not Outcome.OPTIMAL or res.x is None:
        outcome = Outcome.ERROR if outcome is Outcome.OPTIMAL else outcome
        return LPResult(outcome, None, f"HIGHS({method})", secs, str(res.message))
    marg = Marginals(
        *(
            np.asarray(res[k].marginals, dtype=float) if res.get(k) is not None else np.zeros(0)
            for k in ("ineqlin", "eqlin", "lower", "upper")
        )
    )
    return LPResult(
        Outcome.OPTIMAL,
        np.asarray(res.x),
        f"HIGHS({method})",
        secs,
        str(res.message),
        objective=float(res.fun),
        marginals=marg,
    )
