"""The retentions of a replacement design optimised against the exact C1 (the "retention LP").

A replacement design is ``P = diag(1 - o) + o w^T`` within each pool of cells
(:mod:`.replacement`).  The flow relaxation chooses ``o`` to maximise the smallest retention; it
never looks at the loss.  With the replacement distribution ``w`` of every pool held fixed, every
entry of P is linear in ``o``, and so is every term of C1 (Cator, Hensbergen & Rozenholc, eq. (1)):
for a rare cell m (the rows of the others always hold, the paper's bound (2)) and a group
g = (π, k0),

    S[m, g] = (1 - o_m) [m in g] + o_m W[g, p(m)],
    D[g]    = U(g) - sum_{l in g} U0(l) o_l + sum_p W[g, p] T_p,     T_p = sum_{l in p} U0(l) o_l,

where ``W[g, p]`` is the share of pool p's replacement distribution that falls in g.  C1 is
``S[m, g] <= a D[g]``.  Its rows are of two kinds:

* **inside** (m in g): ``o_m (W[g, p(m)] - 1) - a D[g] <= -1``, one per rare m and combination;
* **outside** (m not in g): ``o_m W[g, p] <= a D[g]`` with p = p(m).  These always hold once the
  inside rows do, so the program leaves them out: ``W[g, p] > 0`` means some cell k of g in pool p
  receives.  If k is rare, its inside row ``(1 - o_k) + o_k W[g, p] <= a D[g]`` has the larger
  left-hand side (``(1 - o_k) + o_k W >= W >= o_m W``).  If k is frequent (``U0(k) >= 1/a``), every
  term of D[g] is >= 0 and ``T_p >= U0(k) o_k``, so
  ``a D[g] >= a U0(k) (1 - o_k) + a T_p W[g, p] >= (1 - o_k) + o_k W[g, p] >= o_m W[g, p]``.
  (:meth:`RetentionProgram.excess` still measures them; the program fails if one were violated.)

The program has K + (pools) + (groups of its rows) columns and is linear; its rows are imposed
lazily: those tight or violated at the start, then those the current point violates (computed
exactly from the formulas above, in O(K |Π|)), until none is violated.  On it the exact L2 loss (in
O(K) by Sherman and Morrison, :func:`.replacement.replacement_loss`, with the gradient of
:func:`replacement_loss_grad`) is minimised by sequential linear programs in a trust region, from
the relaxation's retentions (feasible), each step accepted only when the exact loss decreases.  With
``objective="changes"`` one program minimises the expected number of changed records,
``sum_k U0(k) o_k (1 - w_k)``, instead.  The retention of every cell stays at least ``floor``
(invertibility: det P > 0 for any retention > 0, see :mod:`.replacement`); kept cells and cells of
pools without receivers keep their records.

The designer's full C1 check (:mod:`pramopt.verify`) still decides: this module returns
retentions, never a verdict.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..backends import Outcome, solve_lp
from ..constraints.c1 import membership
from ..problem import DesignProblem
from .replacement_form import _pool_parts, replacement_loss

__all__ = ["RetentionProgram", "RetentionResult", "optimise_retentions", "replacement_loss_grad"]

#: Rows within this fraction of their bound at the start are imposed from the outset.
START_TIGHT = 0.1
#: Lazy rounds per program before giving up on it (each adds the violated rows).
LAZY_ROUNDS = 30
#: A row not yet imposed is added when its left-hand side exceeds its bound by more than this
#: (relative); imposed rows hold to the LP solver's own feasibility tolerance, which the margin
#: below alpha absorbs.
VIOLATION_TOL = 1e-9
#: HiGHS's method for the programs (with the default ``solver=``): the simplex, which ends on a
#: vertex, exact to HiGHS's tolerance (the interior point was no faster on the census samples).
LP_METHOD = "highs"
#: Trust-region steps of the loss minimisation, and the smallest radius tried.
MAX_STEPS = 40
MIN_RADIUS = 1e-4
#: The minimisation stops once a step gains less than this (relative) of the loss.
STEP_RTOL = 1e-5


def replacement_loss_grad(
    o: np.ndarray, w: np.ndarray, pools: np.ndarray, counts
) -> tuple[float, np.ndarray]:
    """The exact L2 loss of ``diag(1 - o) + o w^T`` (per pool) and its gradient in ``o`` (``w``
    fixed).

    With ``lam = 1 - o``, ``a = o / lam``, ``b = w / lam``, ``c = 1 + w . a`` and ``B = ||b||^2``
    per pool, row l of P^-1 has squared norm
    ``r_l = 1/lam_l^2 - 2 a_l b_l / (lam_l c) + a_l^2 B / c^2`` and the released count is
    ``M_l = U0(l) lam_l + w_l s`` with ``s = sum U0 o``; the loss is ``sum_l r_l M_l / n^2 - 1/n``
    (:func:`.replacement.replacement_loss`).  The gradient is the derivative of that expression term
    by term: o_j enters r_j through lam_j, a_j and b_j, every r_l of its pool through c and B, and M
    through ``-U0(j) e_j + U0(j) w``.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    lam, a, b, c = _pool_parts(o, w, pools)
    if np.any(lam <= 0) or np.any(c <= 0):
        return float("inf"), np.full(o.size, np.nan)
    nP = c.size
    B = np.bincount(pools, weights=b * b, minlength=nP)
    cp, Bp = c[pools], B[pools]
    s = np.bincount(pools, weights=counts * o, minlength=nP)
    M = counts * lam + w * s[pools]
    r = 1.0 / lam**2 - 2.0 * a * b / (lam * cp) + a**2 * Bp / cp**2
    loss = float(r @ M / n**2 - 1.0 / n)
    Q2 = np.bincount(pools, weights=M * a * b / lam, minlength=nP)[pools]
    Q3 = np.bincount(pools, weights=M * a**2, minlength=nP)[pools]
    RW = np.bincount(pools, weights=r * w, minlength=nP)[pools]
    dc = w / lam**2  # d c / d o_j
    dB = 2.0 * w**2 / lam**3  # d B / d o_j
    g = (
        2.0 * M / lam**3
        + 2.0 * Q2 * dc / cp**2
        - 2.0 * M * w * (1.0 + 2.0 * o) / (cp * lam**4)
        + dB * Q3 / cp**2
        - 2.0 * Bp * Q3 * dc / cp**3
        + 2.0 * Bp * M * a / (cp**2 * lam**2)
        - counts * r
        + counts * RW
    )
    return loss, g / n**2


@dataclass(frozen=True)
class RetentionResult:
    """The optimised retentions (``o``) and what the optimisation did."""

    o: np.ndarray
    loss: float
    changes: float
    steps: int
    solves: int
    rows: int
    detail: str


class RetentionProgram:
    """C1 as linear rows in the retentions ``o`` of a replacement design with fixed ``w``.

    Columns: ``o`` (K), ``T`` (pools), ``D`` (the groups of the imposed rows).  See the module
    docstring.
    """

    def __init__(
        self, problem: DesignProblem, w: np.ndarray, pools: np.ndarray, a: float, floor: float
    ):
        self.problem, self.a = problem, float(a)
        K = problem.K
        self.K = K
        self.w = np.asarray(w, dtype=float)
        self.pools = np.unique(np.asarray(pools), return_inverse=True)[1].ravel().astype(np.int64)
        nP = int(self.pools.max()) + 1 if K else 0
        self.nP = nP
        U = problem.counts
        self.U = U
        groups = problem.groups
        G = groups.n_groups
        nC = groups.member.shape[1]
        # which cells may send: not kept, in a pool with receivers
        recv = np.bincount(self.pools, weights=(self.w > 0).astype(float), minlength=nP)
        self.free = ~problem.kept & (recv[self.pools] > 0)
        self.hi = np.where(self.free, 1.0 - floor, 0.0)
        # Mem: G x K membership; W: G x pools, the share of each pool's w in each group
        cells = np.repeat(np.arange(K), nC)
        gm = groups.member.ravel()
        self.mem = membership(groups)
        self.W = sp.csr_matrix((self.w[cells], (gm, self.pools[cells])), shape=(G, nP))
        self.W.eliminate_zeros()
        self.Wd = self.W.tocoo()
        self.U_g = groups.size.astype(float)
        # inside rows: every rare cell m with each of its groups
        rare = np.flatnonzero(U < 1.0 / self.a)
        self.in_m = np.repeat(rare, nC)
        self.in_g = groups.member[rare].ravel()
        # W[g, p(m)] of each inside row, looked up among W's stored entries (sorted keys)
        key = self.Wd.row.astype(np.int64) * nP + self.Wd.col
        order = np.argsort(key)
        want = self.in_g * nP + self.pools[self.in_m]
        pos = np.clip(np.searchsorted(key[order], want), 0, max(key.size - 1, 0))
        hit = key[order][pos] == want if key.size else np.zeros(want.size, dtype=bool)
        self.in_w = np.where(hit, self.Wd.data[order][pos] if key.size else 0.0, 0.0)
        # outside rows, measured only: (g, p) with W[g, p] > 0 against the largest o_m of pool p
        self.out_g, self.out_p, self.out_w = self.Wd.row, self.Wd.col, self.Wd.data
        self.rare = rare
        self.nx = K  # the columns that the costs and bounds of a solve are about
        self.invariant = bool(problem.params.invariant)

    # -- exact values at a point ---------------------------------------------------------------
    def denominators(self, o: np.ndarray) -> np.ndarray:
        T = np.bincount(self.pools, weights=self.U * o, minlength=self.nP)
        return self.U_g - self.mem @ (self.U * o) + self.W @ T

    def excess(self, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``lhs / (a D) - 1`` of every inside row and every outside row (> 0: violated)."""
        D = self.denominators(o)
        aD = self.a * D
        lhs_in = 1.0 - o[self.in_m] + o[self.in_m] * self.in_w
        z = np.zeros(self.nP)
        np.maximum.at(z, self.pools[self.rare], o[self.rare])
        lhs_out = z[self.out_p] * self.out_w
        with np.errstate(divide="ignore", invalid="ignore"):
            e_in = np.where(aD[self.in_g] > 0, lhs_in / aD[self.in_g] - 1.0, np.inf)
            e_out = np.where(
                aD[self.out_g] > 0,
                lhs_out / aD[self.out_g] - 1.0,
                np.where(lhs_out > 0, np.inf, -1.0),
            )
        return e_in, e_out

    # -- the linear program ---------------------------------------------------------------------
    def program(self, act_in: np.ndarray):
        """The program with the imposed inside rows ``act_in``: ``(A_ub, b_ub, A_eq, b_eq, n_cols)``
        over the columns ``o`` (K), ``T`` (pools) and ``D`` of the groups those rows use only
        (the others' denominators play no part, and would only make each solve longer)."""
        K, nP = self.K, self.nP
        i = np.flatnonzero(act_in)
        used, gpos = np.unique(self.in_g[i], return_inverse=True)
        nU = used.size
        nv = K + nP + nU
        o_T, o_D = K, K + nP
        ar = np.arange(K)
        # T_p - sum_{l in p} U0(l) o_l = 0
        A_T = sp.csr_matrix(
            (
                np.concatenate([np.ones(nP), -self.U]),
                (
                    np.concatenate([np.arange(nP), self.pools]),
                    np.concatenate([o_T + np.arange(nP), ar]),
                ),
            ),
            shape=(nP, nv),
        )
        # D_g + sum_{l in g} U0(l) o_l - sum_p W[g, p] T_p = U(g), for the groups in use
        A_D = sp.hstack(
            [self.mem[used] @ sp.diags(self.U), -self.W[used], sp.identity(nU)], format="csr"
        )
        parts, rhs = [A_T, A_D], [np.zeros(nP), self.U_g[used]]
        if self.invariant:
            # each cell receives what it sends: U0(k) o_k = w_k T_p
            parts.append(
                sp.csr_matrix(
                    (
                        np.concatenate([self.U, -self.w]),
                        (np.concatenate([ar, ar]), np.concatenate([ar, o_T + self.pools])),
                    ),
                    shape=(K, nv),
                )
            )
            rhs.append(np.zeros(K))
        # the inside rows: o_m (W[g, p(m)] - 1) - a D_g <= -1
        A_in = sp.csr_matrix(
            (
                np.concatenate([self.in_w[i] - 1.0, np.full(i.size, -self.a)]),
                (np.tile(np.arange(i.size), 2), np.concatenate([self.in_m[i], o_D + gpos])),
            ),
            shape=(i.size, nv),
        )
        return A_in, -np.ones(i.size), sp.vstack(parts, format="csr"), np.concatenate(rhs), nv

    def solve(self, cost: np.ndarray, lo: np.ndarray, hi: np.ndarray, act_in, max_solves=None):
        """Minimise ``cost . o`` over ``lo <= o <= hi`` and C1, adding violated rows lazily.

        Returns ``(o, solves, status)``; ``o`` is None when the program failed.  ``act_in`` (the
        imposed inside rows) is grown in place.
        """
        return _lazy_solve(self, cost, lo, hi, act_in, max_solves)


def _lazy_solve(prog, cost, lo, hi, act_in, max_solves=None):
    """``min cost . x`` over the first ``prog.nx`` columns in ``[lo, hi]`` (``T`` >= 0, ``D`` free),
    the equalities and the imposed inside rows (``prog.program``); the rows the solution violates
    (``prog.excess``) are added and the program solved again.  After ``max_solves`` solves
    without an answer the solve fails."""
    nx = prog.nx
    solves = 0
    # Costs on the scale of a largest entry of 1: the loss's gradient is of the order of the
    # loss (1e-8 on census samples), below HiGHS's dual feasibility tolerance, where the
    # simplex stops at a vertex that is not optimal (benchmarks/README.md).
    top = float(np.max(np.abs(cost), initial=0.0))
    scaled = np.asarray(cost, dtype=float) / (top if top > 0 and np.isfinite(top) else 1.0)
    for _ in range(LAZY_ROUNDS):
        A_c, b_c, A_eq, b_eq, nv = prog.program(act_in)
        c = np.zeros(nv)
        c[:nx] = scaled
        bounds = np.column_stack([np.zeros(nv), np.full(nv, np.inf)])
        bounds[:nx, 0], bounds[:nx, 1] = lo, hi
        bounds[prog.K + prog.nP :, 0] = -np.inf  # D is defined by its equality row
        if max_solves is not None and solves >= max_solves:
            return None, solves, "out of LP solves"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imposed = bool(A_c.shape[0])
            res = solve_lp(
                c,
                A_ub=A_c if imposed else None,
                b_ub=b_c if imposed else None,
                A_eq=A_eq,
                b_eq=b_eq,
                bounds=bounds,
                solver=prog.problem.params.solver,
                method=LP_METHOD,
            )
        solves += 1
        if res.outcome is not Outcome.OPTIMAL:
            return None, solves, f"{res.outcome.value}: {res.detail}"
        x = np.clip(res.x[:nx], lo, hi)
        e_in, e_out = prog.excess(x)
        new = (e_in > VIOLATION_TOL) & ~act_in
        if new.any():
            # (an outside row may be violated too: it is implied only once the inside rows hold)
            act_in |= new
            continue
        if np.any(e_out > VIOLATION_TOL):  # impossible by the argument of the module docstring
            return None, solves, "an outside row is violated"
        return x, solves, "ok"
    return None, solves, f"rows still violated after {LAZY_ROUNDS} rounds"


def _slp(x, lo, hi, fgrad, solve, max_solves, radius=0.25):
    """Trust-region sequential linear programming on ``fgrad`` (value and gradient) from the
    feasible ``x``: each step minimises the gradient over the program
    (``solve(cost, lo, hi, solves_left)``) within ``x +- radius``, and is kept only when the exact
    value decreases (the radius doubles, up to 1, after good steps and shrinks after poor ones).
    Returns ``(x, f, accepted, steps, solves)``."""
    f, g = fgrad(x)
    steps = solves = accepted = 0
    while steps < MAX_STEPS and radius >= MIN_RADIUS and solves < max_solves:
        steps += 1
        y, s, _ = solve(
            g, np.maximum(lo, x - radius), np.minimum(hi, x + radius), max_solves - solves
        )
        solves += s
        if y is None:
            radius *= 0.25
            continue
        fy, gy = fgrad(y)
        pred, gain = float(g @ (x - y)), f - fy
        if not np.isfinite(fy) or gain <= 0:
            radius *= 0.25
            continue
        accepted += 1
        x, f, g = y, fy, gy
        if pred > 0 and gain > 0.75 * pred:
            radius = min(1.0, 2.0 * radius)
        elif pred > 0 and gain < 0.25 * pred:
            radius *= 0.5
        if gain < STEP_RTOL * f:
            break
    return x, f, accepted, steps, solves


def optimise_retentions(
    problem: DesignProblem,
    o0: np.ndarray,
    w: np.ndarray,
    pools: np.ndarray,
    a: float,
    floor: float,
    *,
    objective: str = "loss",
    max_solves: int = 40,
) -> RetentionResult | None:
    """Retentions of smaller exact loss than ``o0`` (or, with ``objective="changes"``, of fewest
    expected changes) under C1 at level ``a``, with the replacement distributions ``w`` fixed.

    For the loss, ``o0`` must meet C1 at level ``a`` (the relaxation's design, after its margin): it
    is the start, and every accepted step keeps C1 and lowers the exact loss, until a step gains
    less than :data:`STEP_RTOL` or ``max_solves`` linear programs have been solved (a count, not a
    clock, so that the same data and parameters give the same design on any machine).  Returns None
    when the program could not be solved; otherwise a result whose ``o`` meets C1 at level ``a`` to
    the LP solver's feasibility tolerance (rows not imposed are added when the point violates them
    by more than :data:`VIOLATION_TOL`; the imposed ones hold to HiGHS's own tolerance, about 1e-7
    of their bound): the margin below alpha absorbs it, and the caller verifies the matrix at alpha.
    """
    prog = RetentionProgram(problem, w, pools, a, floor)
    pl, U = prog.pools, problem.counts
    lo = np.zeros(problem.K)
    o = np.clip(np.asarray(o0, dtype=float), lo, prog.hi)
    act = prog.excess(o)[0] > -START_TIGHT

    def changes(x):
        return float(U @ (x * (1.0 - w)))

    if objective == "changes":
        x, solves, st = prog.solve(U * (1.0 - w), lo, prog.hi, act)
        if x is None:
            return None
        return RetentionResult(
            x,
            replacement_loss(x, w, pl, U),
            changes(x),
            1,
            solves,
            int(act.sum()),
            "expected changes minimised",
        )
    f0 = replacement_loss(o, w, pl, U)
    o, f, accepted, steps, solves = _slp(
        o,
        lo,
        prog.hi,
        lambda x: replacement_loss_grad(x, w, pl, U),
        lambda c, low, high, left: prog.solve(c, low, high, act, left),
        max_solves,
    )
    return RetentionResult(
        o,
        f,
        changes(o),
        accepted,
        solves,
        int(act.sum()),
        f"loss {f0:.4g} -> {f:.4g} in {accepted} of {steps} steps",
    )
