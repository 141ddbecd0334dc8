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
from typing import Any

import numpy as np
import scipy.sparse as sp

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
    """A :class:`LinearProgram` held in one HiGHS model.

    A program marked ``restart`` is solved from scratch each time, so each solve gets a new
    model holding only the rows that some point within that solve's column bounds can make
    bind (:func:`binding_rows`), unscaled: on the refinement's step programs at census scale
    the box leaves over 90% of the rows unable to bind, and HiGHS's dual simplex took fewer
    seconds both without them (its presolve finds them, at a cost) and without its scaling
    (benchmarks/README.md).  The dropped rows' duals are zero.
    """

    def __init__(self, program: LinearProgram):
        import highspy

        self._hs = highspy
        self.program = program
        self._idx = np.arange(program.n_x, dtype=np.int32)
        self.scale = 1.0
        self._kept: np.ndarray | None = None  # the rows of the last model (restart programs)
        # (a restart program's model is made by each solve)
        self._rows = _RowBounds(program.A) if program.restart else None
        self.h: Any = None
        if self._rows is None:
            self.h = self._model(program.A, program.row_lo, program.row_hi)

    def _model(self, A, row_lo, row_hi) -> Any:
        P = self.program
        lp = self._hs.HighsLp()
        lp.num_col_ = A.shape[1]
        lp.num_row_ = A.shape[0]
        lp.col_cost_ = P.cost
        lp.col_lower_ = P.col_lo
        lp.col_upper_ = P.col_hi
        lp.row_lower_ = row_lo
        lp.row_upper_ = row_hi
        lp.a_matrix_.format_ = self._hs.MatrixFormat.kColwise
        lp.a_matrix_.start_ = A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = A.indices.astype(np.int32)
        lp.a_matrix_.value_ = A.data.astype(float)
        h = _new_highs()
        if not P.presolve:
            h.setOptionValue("presolve", "off")
        if P.restart:
            h.setOptionValue("simplex_scale_strategy", 0)
        h.passModel(lp)
        return h

    def solve(self, c, lo, hi) -> LPSolution:
        P = self.program
        # costs scaled to a largest entry of 1, unless fixed costs of other columns set the scale
        scale = (float(np.max(np.abs(c))) or 1.0) if P.scale_costs else 1.0
        self.scale = scale
        t0 = time.perf_counter()
        lo = np.asarray(lo, dtype=float)
        hi = np.asarray(hi, dtype=float)
        if self._rows is not None:
            col_lo, col_hi = P.col_lo.copy(), P.col_hi.copy()
            col_lo[: P.n_x], col_hi[: P.n_x] = lo, hi
            self._kept = np.flatnonzero(
                binding_rows(self._rows, P.row_lo, P.row_hi, col_lo, col_hi)
            )
            A = self._rows.csr[self._kept].tocsc()
            self.h = self._model(A, P.row_lo[self._kept], P.row_hi[self._kept])
        self.h.changeColsCost(P.n_x, self._idx, np.asarray(c, dtype=float) / scale)
        self.h.changeColsBounds(P.n_x, self._idx, lo, hi)
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
        if self._kept is not None:  # the rows that could not bind: zero
            full = np.zeros(self.program.A.shape[0])
            full[self._kept] = y
            y = full
        r = self.program.rows
        empty = np.zeros(0)
        return Duals(
            rows=y[r["rows"]],
            B=y[r["B"]] if "B" in r else empty,
            N=y[r["N"]] if "N" in r else empty,
            inv=y[r["inv"]] if "inv" in r else None,
            cols=np.asarray(sol.col_dual)[: self.program.n_x] * self.scale,
        )


class _RowBounds:
    """A program's matrix kept for :func:`binding_rows`: by rows, and its entries' magnitudes."""

    def __init__(self, A):
        self.csr = sp.csr_matrix(A)
        self.abs = abs(self.csr)
        self._free: tuple = (None, None)  # (the columns without finite bounds, their block)

    def free_block(self, free: np.ndarray) -> sp.csr_matrix:
        """``A[:, free]`` (kept: the same columns lack finite bounds every solve)."""
        key, F = self._free
        if key is None or not np.array_equal(key, free):
            F = self.csr[:, np.flatnonzero(free)].tocsr()
            self._free = (free.copy(), F)
        return F

    def ranges(self, lo, hi) -> tuple[np.ndarray, np.ndarray]:
        """The least and largest activity of every row over the box ``[lo, hi]``."""
        lo_inf, hi_inf = ~np.isfinite(lo), ~np.isfinite(hi)
        if not (lo_inf.any() or hi_inf.any()):
            mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
            a, b = self.csr @ mid, self.abs @ half
            return a - b, a + b
        A = self.csr
        pos = sp.csr_matrix((np.maximum(A.data, 0.0), A.indices, A.indptr), A.shape)
        neg = sp.csr_matrix((np.minimum(A.data, 0.0), A.indices, A.indptr), A.shape)
        lo0, hi0 = np.where(lo_inf, 0.0, lo), np.where(hi_inf, 0.0, hi)
        pos_pat = sp.csr_matrix(((A.data > 0).astype(float), A.indices, A.indptr), A.shape)
        neg_pat = sp.csr_matrix(((A.data < 0).astype(float), A.indices, A.indptr), A.shape)
        act_max = pos @ hi0 + neg @ lo0
        act_max[(pos_pat @ hi_inf + neg_pat @ lo_inf) > 0] = np.inf
        act_min = pos @ lo0 + neg @ hi0
        act_min[(pos_pat @ lo_inf + neg_pat @ hi_inf) > 0] = -np.inf
        return act_min, act_max


def binding_rows(A, row_lo, row_hi, col_lo, col_hi) -> np.ndarray:
    """Which rows some point within the column bounds can make bind or violate (a mask).

    A row is left out when its activity over the bounds' box lies within its own bounds; a
    column without finite bounds (the program's auxiliary columns) first takes the bounds its
    defining equality implies (a row ``a x = b`` in which it is the one such column).  Every
    equality is kept, so a solution of the kept rows within the column bounds meets every row.
    ``A`` is the matrix or its :class:`_RowBounds`.
    """
    R = A if isinstance(A, _RowBounds) else _RowBounds(A)
    lo = np.asarray(col_lo, dtype=float).copy()
    hi = np.asarray(col_hi, dtype=float).copy()
    row_lo = np.asarray(row_lo, dtype=float)
    row_hi = np.asarray(row_hi, dtype=float)
    eq = row_lo == row_hi
    free = ~(np.isfinite(lo) & np.isfinite(hi))
    if free.any():
        # equalities with exactly one such column j: a_j x_j = b - (the rest), within the box
        F = R.free_block(free)
        one = eq & (np.diff(F.indptr) == 1)
        one[one] = F.data[F.indptr[:-1][one]] != 0.0
        if one.any():
            j = np.flatnonzero(free)[F.indices[F.indptr[:-1][one]]]
            a = F.data[F.indptr[:-1][one]]
            rest_min, rest_max = R.ranges(np.where(free, 0.0, lo), np.where(free, 0.0, hi))
            b = row_lo[one]
            v1, v2 = (b - rest_max[one]) / a, (b - rest_min[one]) / a
            np.maximum.at(lo, j, np.minimum(v1, v2))
            np.minimum.at(hi, j, np.maximum(v1, v2))
    act_min, act_max = R.ranges(lo, hi)
    inside = (act_max <= row_hi) & (act_min >= row_lo)
    return eq | ~inside


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
