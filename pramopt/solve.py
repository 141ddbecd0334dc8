"""Solvers: the convex (linear) stage through cvxpy and the local refinement of the exact loss.

Both stages solve linear programs of the same shape over the support of P:

    minimise  c . x
    subject to  R x = 1                     (rows of P sum to one)
                B x = D                     (C1 denominators, one per (π, k0))
                N x <= alpha' D[gpos]       (C1 rows of the working set)
                C x = U0                    (only for an invariant design)
                lo <= x <= hi               (floor, fixed cells, trust region)

``c``, ``lo`` and ``hi`` are cvxpy Parameters, so the problem is compiled once per working set
and re-solved cheaply by the refinement.  ``alpha'`` sits slightly inside alpha so that the
solver's feasibility tolerance can never turn into a violation of C1 (the result is verified
independently afterwards anyway).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from .loss import SparseL2, l2_loss_and_grad
from .model import C1Block, Support, column_mass_matrix, row_sum_matrix

#: Fallback chain, fastest first (measured on C1-shaped LPs; see README and benchmarks/).
DEFAULT_SOLVERS = ("HIGHS", "CLARABEL", "ECOS", "SCS")

_OK = {cp.OPTIMAL, cp.OPTIMAL_INACCURATE}
_INFEASIBLE = {cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE}


def available_solvers() -> list[str]:
    """Solvers from the fallback chain (and any other LP-capable one) that cvxpy can load here."""
    inst = set(cp.installed_solvers())
    chain = [s for s in DEFAULT_SOLVERS if s in inst]
    extra = [s for s in ("OSQP", "GLOP", "PDLP", "SCIPY") if s in inst and s not in chain]
    return chain + extra


def solver_chain(solver: str | None) -> list[str]:
    """The chain of solvers to try: the user's choice only, or the default chain."""
    if solver is None:
        return [s for s in DEFAULT_SOLVERS if s in set(cp.installed_solvers())]
    return [solver.upper()]


@dataclass
class LPOutcome:
    x: np.ndarray | None
    status: str
    solver: str | None
    seconds: float


class DesignLP:
    """The parametrised linear program over a support and a C1 working set.

    With ``max_floor=True`` it is the phase-one problem instead: maximise a common lower bound
    t on every diagonal entry (``lo`` still bounds x), which tells the largest feasible floor in
    one solve rather than by trying floors one after another.
    """

    def __init__(self, support: Support, counts, block: C1Block, alpha_solve: float,
                 invariant: bool = False, max_floor: bool = False):
        self.support = support
        S = support.size
        counts = np.asarray(counts, dtype=float)
        self.x = cp.Variable(S)
        self.c = cp.Parameter(S)
        self.lo = cp.Parameter(S)
        self.hi = cp.Parameter(S)
        cons = [row_sum_matrix(support) @ self.x == 1, self.x >= self.lo, self.x <= self.hi]
        self.t = cp.Variable() if max_floor else None
        if max_floor:
            cons.append(self.x[support.diag] >= self.t)
        if block.m.size:
            D = cp.Variable(block.groups.size)
            cons.append(block.B @ self.x == D)
            sel = sp.csr_matrix((np.full(block.m.size, alpha_solve), (np.arange(block.m.size), block.gpos)),
                                shape=(block.m.size, block.groups.size))
            cons.append(block.N @ self.x <= sel @ D)
        if invariant:
            cons.append(column_mass_matrix(support, counts) @ self.x == counts)
        obj = cp.Minimize(self.c @ self.x - (1e3 * self.t if max_floor else 0))
        self.problem = cp.Problem(obj, cons)

    def solve(self, c, lo, hi, solvers) -> LPOutcome:
        scale = float(np.max(np.abs(c))) or 1.0
        self.c.value = np.asarray(c, dtype=float) / scale  # well-scaled costs for every solver
        self.lo.value = np.asarray(lo, dtype=float)
        self.hi.value = np.asarray(hi, dtype=float)
        t0 = time.perf_counter()
        last = "no solver available"
        for name in solvers:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.problem.solve(solver=name, **_solver_options(name))
            except (cp.error.SolverError, ValueError, ArithmeticError) as exc:  # next in the chain
                last = f"{name}: {exc}".splitlines()[0]
                continue
            st = self.problem.status
            if st in _OK and self.x.value is not None:
                return LPOutcome(np.asarray(self.x.value).ravel(), st, name, time.perf_counter() - t0)
            if st in _INFEASIBLE:
                return LPOutcome(None, "infeasible", name, time.perf_counter() - t0)
            last = f"{name}: {st}"
        return LPOutcome(None, f"solver_error ({last})", None, time.perf_counter() - t0)


class HighsLP:
    """The same linear program held in one HiGHS model (highspy), re-solved with a warm start.

    The refinement changes only costs and bounds between its linear programs; keeping the
    model (and its simplex basis) alive makes each re-solve a few pivots instead of a fresh
    solve, which cvxpy cannot do because it rebuilds the solver's model on every call.  Going
    to HiGHS directly also gives the duals that column generation prices candidate transitions
    with, and proves infeasibility far faster than through cvxpy.

    Columns are ``[x (support), D (denominators), t (max_floor only), s (elastic only)]``.

    Parameters
    ----------
    max_floor : bool
        Phase one: maximise a common lower bound t on the diagonal (cost -1 on t; ``c`` should
        be zero).
    elastic : float, optional
        Add a slack s_w >= 0 to every C1 row with this cost per unit, so the program is always
        feasible on a restricted support and column generation can price what it lacks.
    """

    def __init__(self, support: Support, counts, block: C1Block, alpha_solve: float,
                 invariant: bool = False, max_floor: bool = False, elastic: float | None = None,
                 param: sp.spmatrix | None = None):
        import highspy

        self._hs = highspy
        self.support = support
        self.block = block
        self.invariant = invariant
        self.max_floor = max_floor
        K = support.K
        # with ``param`` the columns are parameters z and the support entries are x = T z
        T = None if param is None else sp.csr_matrix(param)
        S = support.size if T is None else T.shape[1]
        counts = np.asarray(counts, dtype=float)
        nG = block.groups.size if block.m.size else 0
        W = block.m.size if nG else 0
        nt = 1 if max_floor else 0
        ns = W if (elastic is not None and W) else 0
        ncol = S + nG + nt + ns
        self.layout = dict(S=S, nG=nG, W=W, nt=nt, ns=ns, K=K)
        row_blocks, lower, upper = [], [], []

        def add(mat, lo, hi):
            row_blocks.append(mat)
            lower.append(lo)
            upper.append(hi)

        widths = (S, nG, nt, ns)

        def cols(nrow, *mats):
            # one row block: a matrix (or None) for each column block x, D, t, s
            mats = mats + (None,) * (4 - len(mats))
            if T is not None and mats[0] is not None:
                mats = (sp.csr_matrix(mats[0]) @ T,) + mats[1:]
            parts = [sp.csr_matrix(m) if m is not None else sp.csr_matrix((nrow, w))
                     for m, w in zip(mats, widths) if w]
            return sp.hstack(parts, format="csr")

        add(cols(K, row_sum_matrix(support)), np.ones(K), np.ones(K))
        if nG:
            # B x - D = 0 and N x - alpha' D[gpos] (- s) <= 0
            sel = sp.csr_matrix((np.full(W, alpha_solve), (np.arange(W), block.gpos)), shape=(W, nG))
            add(cols(nG, block.B, -sp.identity(nG, format="csr")), np.zeros(nG), np.zeros(nG))
            add(cols(W, block.N, -sel, None, -sp.identity(W, format="csr") if ns else None),
                np.full(W, -np.inf), np.zeros(W))
        if max_floor:
            # x_mm - t >= 0 for every m
            dsel = sp.csr_matrix((np.ones(K), (np.arange(K), support.diag)), shape=(K, S))
            add(cols(K, dsel, None, -np.ones((K, 1))), np.zeros(K), np.full(K, np.inf))
        if invariant:
            add(cols(K, column_mass_matrix(support, counts)), counts, counts)
        A = sp.vstack(row_blocks, format="csc")
        self.row_offsets = np.cumsum([0] + [b.shape[0] for b in row_blocks])
        lp = highspy.HighsLp()
        lp.num_col_ = ncol
        lp.num_row_ = A.shape[0]
        cost = np.zeros(ncol)
        if nt:
            cost[S + nG] = -1.0
        if ns:
            cost[S + nG + nt:] = float(elastic)
        self._base_cost = cost
        lp.col_cost_ = cost
        lp.col_lower_ = np.concatenate([np.zeros(S), np.zeros(nG), np.full(nt, -np.inf), np.zeros(ns)])
        lp.col_upper_ = np.concatenate([np.ones(S), np.full(nG, np.inf), np.full(nt, 1.0), np.full(ns, np.inf)])
        lp.row_lower_ = np.concatenate(lower)
        lp.row_upper_ = np.concatenate(upper)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = A.indices.astype(np.int32)
        lp.a_matrix_.value_ = A.data.astype(float)
        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        self.h.passModel(lp)
        self._idx = np.arange(S, dtype=np.int32)
        self._param = T
        # the support entries in the LP's column order
        self.rows_lp = support.rows.copy()
        self.cols_lp = support.cols.copy()
        self.scale = 1.0
        self.t = None
        self.objective = None  # of the last optimal solve, on the scale of the costs passed in
        self.slack = None

    def solve(self, c, lo, hi, solvers=None) -> LPOutcome:
        S = self.layout["S"]
        # phase one keeps its costs as they are: t's cost -1 in the base model sets their scale
        scale = 1.0 if self.max_floor else (float(np.max(np.abs(c))) or 1.0)
        self.scale = scale
        t0 = time.perf_counter()
        self.h.changeColsCost(S, self._idx, np.asarray(c, dtype=float) / scale)
        self.h.changeColsBounds(S, self._idx, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float))
        self.h.run()
        st = self.h.getModelStatus()
        if st == self._hs.HighsModelStatus.kOptimal:
            sol = np.asarray(self.h.getSolution().col_value)
            L = self.layout
            off = (self.support.size if self._param is None else S) + L["nG"]
            self.t = float(sol[off]) if L["nt"] else None
            self.objective = float(self.h.getInfo().objective_function_value) * scale
            self.slack = sol[off + L["nt"]: off + L["nt"] + L["ns"]] if L["ns"] else np.zeros(0)
            return LPOutcome(sol[self._idx].copy(), cp.OPTIMAL, "HIGHS(highspy)", time.perf_counter() - t0)
        if st == self._hs.HighsModelStatus.kInfeasible:
            return LPOutcome(None, "infeasible", "HIGHS(highspy)", time.perf_counter() - t0)
        return LPOutcome(None, f"solver_error (highspy: {self.h.modelStatusToString(st)})", None,
                         time.perf_counter() - t0)

    def col_duals(self) -> np.ndarray:
        """Reduced costs of the support columns in the last optimal solve (LP column order)."""
        return np.asarray(self.h.getSolution().col_dual)[: self.layout["S"]] * self.scale

    def duals(self) -> dict:
        """Row duals of the last optimal solve, by block (HiGHS: reduced cost = c - A^T y).

        ``rows`` (row sums), ``B`` (denominators), ``N`` (C1 rows), ``inv`` (invariance) on the
        scale of the costs passed to :meth:`solve` (the internal cost scaling is undone).
        """
        y = np.asarray(self.h.getSolution().row_dual) * self.scale
        o = self.row_offsets
        L = self.layout
        out = {"rows": y[o[0]:o[1]]}
        i = 1
        if L["nG"]:
            out["B"], out["N"] = y[o[1]:o[2]], y[o[2]:o[3]]
            i = 3
        else:
            out["B"], out["N"] = np.zeros(0), np.zeros(0)
        if self.max_floor:
            i += 1
        out["inv"] = y[o[i]:o[i + 1]] if self.invariant else None
        return out


def _solver_options(name: str) -> dict:
    if name == "SCS":
        return {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 200000}
    if name == "CLARABEL":
        return {"tol_feas": 1e-10, "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10}
    if name == "ECOS":
        return {"abstol": 1e-10, "reltol": 1e-10, "feastol": 1e-10}
    return {}


def clean(support: Support, x) -> np.ndarray:
    """Clip the solver's tiny negative entries and renormalise every row to sum to one."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, None)
    rs = np.bincount(support.rows, weights=x, minlength=support.K)
    return x / rs[support.rows]


@dataclass
class RefineInfo:
    iterations: int
    accepted: int
    loss_start: float
    loss_end: float
    stop_reason: str
    seconds: float
    added_constraints: list
    grad_columns: object = None  # callable: cols -> K x len(cols) gradient of the loss
    duals: dict | None = None
    grad_scale: float = 1.0  # largest |gradient| on the support, the scale for pricing tolerances
    radius: float = 0.05     # trust-region radius at the end, to continue from
    history: tuple = ()      # loss after each iteration, to continue the stopping rule from


def _dense_loss(sup, counts):
    def fn(x):
        f, G = l2_loss_and_grad(sup.to_matrix(x).toarray(), counts)
        return f, G[sup.rows, sup.cols], (lambda cols: G[:, cols])
    return fn


def _sparse_loss(sup, counts):
    # Woodbury / block-triangular form: no dense K x K inverse (see loss.SparseL2)
    def fn(x):
        s = SparseL2(sup.to_matrix(x), counts)
        if s.singular:
            return float("inf"), None, None
        return s.loss, s.grad_at(sup.rows, sup.cols), s.grad_columns
    return fn


def refine(lp, x0, counts, lo_base, hi_base, solvers, *, check=None,
           rtol: float = 1e-4, max_iter: int = 100, radius: float = 0.05, window: int = 10,
           progress=None, sparse: bool = False, history=(), loss=None,
           clean_fn=None) -> tuple[np.ndarray, RefineInfo]:
    """Sequential linear programming with a trust region on the exact L2 loss.

    Each iteration solves ``min grad . x`` over the feasible set intersected with the box
    ``|x - x_k| <= radius``.  A step is accepted when the actual decrease is at least 10% of
    the predicted one; the radius doubles after a very good step at the boundary and shrinks
    fourfold after a rejected step.  Iterates stay feasible.  Stops (the documented tolerance)
    when the predicted decrease falls below ``rtol * loss``, when the loss improved by less than
    ``rtol`` (relative) over the last ``window`` iterations -- the linear model zig-zags
    slowly near a curved optimum -- when the radius drops below 1e-9, or after ``max_iter``
    iterations.

    ``check(x)`` may return newly violated C1 rows of the full problem; the step is then
    rejected and the caller must rebuild the LP with them (stop reason ``"constraints"``).
    """
    sup = lp.support
    t0 = time.perf_counter()
    if loss is None:  # x is P on the support; a parametrised caller brings its own loss and clean
        loss = (_sparse_loss if sparse else _dense_loss)(sup, counts)
    if clean_fn is None:
        def clean_fn(z):
            return clean(sup, z)
    x = np.asarray(x0, dtype=float)
    f, g, gcols = loss(x)
    f_start = f
    reason = "max_iter"
    accepted = 0
    it = 0
    history = list(history[:-1]) + [f]  # a continued run's last entry is this same point
    for it in range(1, max_iter + 1):
        if len(history) > window and history[-window - 1] - f <= rtol * abs(f):
            reason = "converged"
            break
        lo = np.maximum(lo_base, x - radius)
        hi = np.minimum(hi_base, x + radius)
        out = lp.solve(g, lo, hi, solvers)
        if out.x is None:
            reason = f"subproblem {out.status}"
            break
        xn = clean_fn(out.x)
        pred = float(g @ (x - xn))
        if not np.isfinite(f) or pred <= rtol * abs(f):
            reason = "converged"
            break
        fn, gn, gcn = loss(xn)
        rho = (f - fn) / pred if np.isfinite(fn) else -np.inf
        if rho >= 0.1:
            if check is not None:
                new = check(xn)
                if new:
                    return x, RefineInfo(it, accepted, f_start, f, "constraints", time.perf_counter() - t0, new,
                                         radius=radius, history=tuple(history))
            at_edge = np.max(np.abs(xn - x)) >= 0.99 * radius
            x, f, g, gcols = xn, fn, gn, gcn
            accepted += 1
            if rho > 0.75 and at_edge:
                radius = min(2 * radius, 1.0)
        else:
            radius /= 4
            if radius < 1e-9:
                reason = "radius"
                break
        history.append(f)
        if progress is not None:
            progress("refine", it, f, radius)
    duals = None
    if hasattr(lp, "duals") and g is not None:
        # one more subproblem at the final point: its duals price transitions outside the
        # support (column generation on the exact loss's gradient)
        out = lp.solve(g, np.maximum(lo_base, x - radius), np.minimum(hi_base, x + radius), solvers)
        if out.x is not None:
            duals = lp.duals()
    gscale = float(np.max(np.abs(g))) if g is not None and g.size else 1.0
    return x, RefineInfo(it, accepted, f_start, f, reason, time.perf_counter() - t0, [], gcols, duals,
                         gscale or 1.0, radius, tuple(history))