"""The general design at one diagonal floor: linear stage, then refinement of the exact loss.

At a floor ``gamma`` the reducer (:func:`~pramopt.optimize.constraints.c1.reduce_constraints`)
leaves a small working set of C1 rows.  The linear stage minimises the expected number of
changed records (the loss's first-order term) over a support of transitions, adding every C1
row the full check finds violated (lazy rows) and every transition the duals price below zero
(column generation), until neither is left.  The refinement then improves the exact loss by
trust-region steps on a convex QP model of it (:mod:`.refine`), pricing transitions with the
loss's gradient between chunks of iterations.  Phase one (:mod:`.phase_one`) runs the same
loop with another objective.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from typing import Any

import numpy as np

from ...loss import condition_number, expected_changes
from ...params import (
    BELOW_HALF_MAX_CONDITION,
    DENSE_SUPPORT_MAX,
    GAMMA_LADDER,
    DesignParams,
)
from ...result import Reduction
from ..backends import chain, supports
from ..constraints.c1 import WorkingSet, membership, protected_groups, reduce_constraints
from ..constraints.invariance import Invariance
from ..diagnosis import (
    ADVICE,
    floor_ruled_out,
    floors_below_half,
    invariant_hint,
)
from ..pricing import Pricer, values_at_pairs
from ..problem import DesignProblem, Trace
from ..program import build_program
from ..support import Support, clean, greedy_cover
from . import Attempt, AttemptStatus
from .checks import once
from .lazy import solve_lazy
from .refine import refine  # noqa: F401 (.general_refine calls it through this module)

__all__ = [
    "solve",
    "solve_general",
    "ColumnGeneration",
    "initial_support",
    "MAX_PRICING_ROUNDS",
    "LP_GAP_RTOL",
    "REFINE_CHUNK",
    "REFINE_SUPPORT_MAX",
    "REFINE_QP_MAX",
    "REFINE_QP_MAX_AT_SCALE",
    "DENSE_SUPPORT_MAX",
    "COVER_BUDGET",
]

#: Below the 1/2 floor the linear stage is only the refinement's start, and its rounds grew to
#: minutes on the 5-key census sample (benchmarks/README.md): it stops pricing at the first round
#: whose program leaves no elastic slack (a design over its support), or after this many rounds.
LINEAR_ROUNDS_BELOW_HALF = 6

#: Sources of the initial cover support: at most this many support entries from the largest
#: cells into the cover (column generation adds whatever else helps).
COVER_BUDGET = 200_000

#: Rounds of column generation in one stage before giving up widening (the result stays
#: verified; only optimality over the full support is then not proven).
MAX_PRICING_ROUNDS = 60
#: Column generation stops once the Lagrangian bound puts the restricted linear stage within
#: this relative distance of the full K x K program's optimum.
LP_GAP_RTOL = 1e-4
#: The refinement prices new transitions after every this many iterations.
REFINE_CHUNK = 10
#: Largest support on which the refinement's steps are QPs (curved model): Clarabel's time per
#: QP grows quickly with the support, where the warm-started LP stays cheap.  Larger supports take
#: REFINE_LINEAR_CHUNK linear steps, after which pricing drops the unused transitions; pricing adds
#: no more than keeps the support within this.
REFINE_QP_MAX = 25_000
#: The same limit on the census-scale path (:mod:`.general_scale`): there the warm-started linear
#: steps reach a smaller loss sooner than curved ones at any support size (benchmarks/README.md).
REFINE_QP_MAX_AT_SCALE = 0
#: On the census-scale path a chunk of linear steps that gains less than this many ``rtol``
#: (relative) ends the refinement.
REFINE_SCALE_GAIN = 30
#: Linear (SLP) steps on a support too large for QPs before pricing trims it.
REFINE_LINEAR_CHUNK = 3
#: Curved steps between pricing rounds: one, since the QP's own multipliers price transitions
#: outside the support at no extra solve (longer chunks, priced by one more LP each, need more
#: iterations to the same loss).
REFINE_QP_CHUNK = 1
#: One-step chunks in a row without an accepted step that end the refinement (the trust region
#: has shrunk 4**this-fold: the model no longer predicts the loss there).
REFINE_IDLE_STEPS = 4
#: A chunk of curved steps after pricing that gains less than this many ``rtol`` (relative) in
#: all ends the refinement (on testdata with 7 keys pricing rounds gain about 1e-3 each, down to
#: the loss of 100 linear iterations).
REFINE_PRICING_GAIN = 2
#: Transitions priced into a support per round at most, or 2 K if more (the linear stage's rounds
#: and the refinement's): in the refinement 10,000 filled the support of 340 rare-heavy cells with
#: transitions the QP's interior point gives a little mass each, and the loss after 14 steps was
#: 0.7% higher than with 2,000.
REFINE_MAX_ADD = 2000
#: On the census-scale path, supports of more than this many transitions solve each step's
#: program from scratch (:attr:`~..program.LinearProgram.restart`): on the 6-key sample
#: (programs of 150,000 columns and more) a warm start from the last vertex took 2-3 times longer
#: by step 14; on the 4-key sample (supports of 33,000) it was the faster one, by about 10% a
#: step (benchmarks/README.md).  Below the 1/2 floor every step's program is solved from scratch:
#: the rows outside their groups (:meth:`~..constraints.c1.WorkingSet.outside`) made programs of
#: 400,000 rows over supports below 50,000 on the 5-key sample, where a warm start took 3-5 times
#: longer (benchmarks/README.md).
REFINE_RESTART_MIN = 50_000
#: Largest initial refinement support beyond the linear stage's transitions (see
#: :func:`.general_refine.refine_pairs`).
REFINE_SUPPORT_MAX = 100_000


def rows_into(problem: DesignProblem, cols) -> Support:
    """Every row except the kept ones may move into ``cols`` (within the strata of ``fixed``)."""
    K = problem.K
    gr, gc = np.meshgrid(np.arange(K), np.asarray(cols, dtype=np.int64), indexing="ij")
    rr, cc = gr.ravel(), gc.ravel()
    ok = problem.allowed(rr, cc)
    return Support.from_pairs(rr[ok], cc[ok], K)


def initial_support(problem: DesignProblem, gamma: float, mode: str) -> Support:
    """The support a general design starts from.

    * ``dense``: every pair of cells (up to ``DENSE_SUPPORT_MAX`` cells);
    * ``targets``: every row into the cells of the (π, k0) groups that need protection -- the
      only columns whose inflow raises a C1 denominator;
    * ``cover``: the diagonal plus transitions from the largest cells into a greedy cover of
      those groups (Cator et al., Section 4: a good P moves records from frequent cells into the
      few cells that cover the problem combinations), which column generation widens where the
      duals say a transition would help.
    """
    if mode == "dense":
        return rows_into(problem, np.arange(problem.K))
    if mode == "diagonal":  # the caller brings the rest (the census-scale path's seeds)
        return Support.from_pairs(np.empty(0), np.empty(0), problem.K)
    need = protected_groups(problem.groups, problem.alpha, gamma)
    if mode == "targets":
        return rows_into(problem, np.flatnonzero(need[problem.groups.member].any(axis=1)))
    cover = greedy_cover(problem.groups, need, problem.counts)
    n_src = int(min(problem.K, max(20, COVER_BUDGET // max(1, cover.size))))
    sources = np.argsort(-problem.counts, kind="stable")[:n_src]
    rr, cc = np.meshgrid(np.setdiff1d(sources, problem.keep_rows), cover, indexing="ij")
    rr, cc = rr.ravel(), cc.ravel()
    ok = problem.allowed(rr, cc)
    return Support.from_pairs(rr[ok], cc[ok], problem.K)


class ColumnGeneration:
    """The state of one general solve at floor ``gamma``: support, working set, pricing.

    Parameters
    ----------
    problem : DesignProblem
    gamma : float
        The floor the reduction relies on.
    floor : float
        The floor imposed on every diagonal entry (``max(gamma, min_diagonal)``).
    a_solve : float
        The level alpha * (1 - margin) the solver works at.
    phase_one : bool
        Maximise a common floor t instead of minimising expected changes (elastic C1 rows).
    init : Support, optional
        Transitions to start from besides the initial support (phase one's).
    elastic : bool
        Give C1's rows a penalised slack (as phase one does), so that a restricted support is
        never infeasible: the census-scale path starts from a small support without phase one.
    pairs : tuple of ndarray, optional
        Every permitted transition (rows, cols): pricing then looks at these only, instead of
        scanning K x K candidates.
    mode : str, optional
        The initial support (default: the ``support`` parameter's choice).
    floor_bound : float, optional
        A proven lower bound on the linear stage's optimum known beforehand.
    own_bounds : bool
        Raise ``floor_bound`` by each round's Lagrangian bound (False where the design must
        be judged against a wider class than its permitted transitions).
    wide_pairs : tuple of ndarray, optional
        Every permitted transition, where ``pairs`` (the linear stage's) are only those within
        ``near`` changed variables: the refinement then runs within ``near`` first, and from its
        end over every permitted transition.
    near : int, optional
        With ``wide_pairs`` or ``wide_scan``: the changed variables the linear stage and the
        first refinement stay within.
    wide_scan : bool
        Like ``wide_pairs``, where the permitted transitions are too many to list: the second
        refinement's pricing scans every candidate.
    """

    def __init__(
        self,
        problem: DesignProblem,
        gamma: float,
        floor: float,
        a_solve: float,
        phase_one: bool = False,
        init: Support | None = None,
        *,
        elastic: bool = False,
        pairs: tuple | None = None,
        mode: str | None = None,
        floor_bound: float | None = None,
        own_bounds: bool = True,
        wide_pairs: tuple | None = None,
        near: int | None = None,
        wide_scan: bool = False,
    ):
        p = problem.params
        self.elastic, self.pairs = elastic, pairs
        self.wide_pairs = wide_pairs
        self.near = near if (wide_pairs is not None or wide_scan) else None
        self.problem, self.gamma, self.floor, self.a_solve, self.phase_one = (
            problem,
            gamma,
            floor,
            a_solve,
            phase_one,
        )
        self.counts = problem.counts
        K = problem.K
        duals = supports(p.solver, "duals")  # column generation needs them
        mode = mode or (
            p.support
            if p.support != "auto"
            else ("dense" if K <= DENSE_SUPPORT_MAX else ("cover" if duals else "targets"))
        )
        if mode == "cover" and not duals:  # a cover needs pricing to be widened
            mode = "targets"
        self.mode = mode
        self.widen = duals and mode != "dense"
        t0 = time.perf_counter()
        self.red = reduce_constraints(
            problem.table, problem.groups, problem.alpha, gamma, lazy_outside=True
        )
        sup = initial_support(problem, gamma, mode)
        if init is not None:
            sup = sup.union(init.rows, init.cols)
        self.sup = sup
        self.reduce_seconds = time.perf_counter() - t0
        self.ws = WorkingSet(
            self.red.m, self.red.g, problem.table, problem.groups, problem.combos, a_solve
        )
        self.mem = membership(problem.groups)
        self.added_cols = 0
        # certified relative bound on what the full K x K linear stage could still gain: 0 on a
        # dense support, computed by pricing otherwise, unknown (None) without duals
        self.lp_gap = 0.0 if mode == "dense" else None
        # phase one: an upper bound on the full program's floor, from the last pricing round
        # (None until one is known; on a dense support the restricted program is the full one)
        self.floor_proof: float | None = None
        # the linear stage's expected changes and the proven bound at its floor (once solved)
        # (a bound known beforehand, from the flow relaxation, is kept unless a round's is higher)
        self.linear_changes: float | None = None
        self.floor_bound = floor_bound
        self.own_bounds = own_bounds
        self._caps: np.ndarray | None = None
        # an upper bound on every transition (None: none), for the linear stage below 1/2
        self.cap: float | None = None

    # -- shared pieces ------------------------------------------------------------------------
    @property
    def below_half(self) -> bool:
        """Whether the floor is below 1/2 (P not invertible by diagonal dominance)."""
        return self.gamma < 0.5

    def pending(self, sup: Support, x) -> list:
        """Rows of the full C1 violated at the solve level and missing from the working set."""
        return self.ws.missing(sup.to_matrix(x))

    def bounds(self, sup: Support) -> tuple[np.ndarray, np.ndarray]:
        diag = sup.rows == sup.cols
        kept = self.problem.kept
        lo = np.where(diag, np.where(kept[sup.rows], 1.0, self.floor), 0.0)
        if self.cap is None:
            return lo, np.ones(sup.size)
        return lo, np.where(diag, 1.0, self.cap)

    def load(
        self,
        sup: Support,
        *,
        phase_one: bool = False,
        presolve: bool = True,
        restart: bool = False,
        elastic: bool | None = None,
    ):
        """The program over ``sup``; ``elastic`` (default: the solve's) gives C1's rows their
        slacks.  A program around a design that meets every imposed row needs none."""
        if elastic is None:
            elastic = phase_one or self.elastic
        if self.below_half:
            # below 1/2 the rows outside their groups bind: found lazily, a few dozen per
            # round, each round a new program (docs/method.md); imposed with the transitions
            # that can fill them instead
            self.ws.add(self.ws.outside(sup, self.problem.alpha, self.gamma), lazy=False)
        inv = [Invariance(self.counts)] if self.problem.params.invariant else []
        prog = build_program(
            sup,
            [self.ws.rows(sup, self.mem), *inv],
            max_floor=phase_one,
            elastic=PHASE1_ELASTIC if elastic else None,
            presolve=presolve,
            restart=restart,
        )
        return chain(prog, self.problem.params.solver)

    def allowed(self, r, c) -> np.ndarray:
        """The transitions this stage may use: the problem's, within ``near`` changed
        variables while the solve stays there."""
        ok = self.problem.allowed(r, c)
        if self.near is not None:
            ok &= self.problem.within(r, c, self.near)
        return ok

    def widen_to_every_permitted(self) -> bool:
        """Leave ``near`` for every permitted transition; False when already there."""
        if self.near is None:
            return False
        self.pairs, self.near = self.wide_pairs, None
        return True

    def pricer(self, lp, duals) -> Pricer:
        """The reduced costs of one solve (``lp`` and its ``duals``)."""
        return Pricer(lp.program.support, self.counts, lp.program.constraints, duals, self.allowed)

    def price(
        self, lp, duals, cost_fn=None, tol: float = 1e-7, max_add: int | None = None, pricer=None
    ):
        """Transitions to add and the Lagrangian bound (:meth:`Pricer.candidates`), over the
        permitted transitions when they are listed; ``pricer`` (default: a new one) keeps the
        per-row minima."""
        pricer = pricer or self.pricer(lp, duals)
        max_add = max_add or max(REFINE_MAX_ADD, 2 * self.problem.K)
        if self.pairs is not None:
            r, c = self.pairs
            cost = None
            if cost_fn == self._change_costs:
                lin = self.problem.objective.linear_cost(r, c)
                cost = None if lin is None else self.counts[r] * lin
            elif cost_fn is not None:
                cost = values_at_pairs(cost_fn, r, c, self.problem.K)
            return pricer.among(r, c, cost=cost, tol=tol, max_add=max_add)
        return pricer.candidates(cost_fn=cost_fn, tol=tol, max_add=max_add)

    # -- the restricted linear programs ---------------------------------------------------------
    def linear(self, trace: Trace):
        """Solve the restricted program until no C1 row is missing and pricing adds nothing.

        Returns ``(status, solution, x, lp, rounds)``; ``status`` is ``"ok"``, ``"infeasible"``
        (phase one: no floor of at least ``gamma``) or the solver's status.
        """
        K = self.problem.K
        counts = self.counts
        phase_one = self.phase_one
        rounds = 0
        lp = None
        prev_E = np.inf
        while True:
            rounds += 1
            if lp is None:
                # (census scale: each round's program is solved once, without presolve)
                lp = self.load(self.sup, phase_one=phase_one, presolve=not self.elastic)
            sup = self.sup
            c, lo, hi = self._vectors(sup)
            out = lp.solve(c, lo, hi)
            if out.x is None:
                return out.status, out, None, lp, rounds
            x = clean(sup, out.x)
            # Elastic rows (census scale) that keep a slack leave their groups' denominators
            # short, which makes rows violated that C1's imposed rows imply once no slack is left
            # (at a floor >= 1/2 the row (m', g) of any member m' gives alpha D_g >= 1/2 >= the
            # share any other cell sends into g): price first, check the full C1 after.
            slack_left = self.elastic and not phase_one and _unmet(out)
            new = [] if slack_left else self.pending(sup, x)
            trace.progress(
                "phase1" if phase_one else "linear",
                rounds,
                expected_changes(sup.to_matrix(x), counts),
                len(new),
            )
            if new and phase_one:
                # An upper bound on every feasible floor, before imposing the rest of the rows (on
                # rare-heavy data dozens of rounds of ~1,000 rows each): more rows only lower t, and
                # transitions outside the support can raise the objective by at most the Lagrangian
                # bound (each row sums to one; priced below -tol, so K * tol more).  The objective
                # is -t - tie-break + slack cost, so -objective - bound >= t for every feasible P.
                r = np.empty(0, dtype=np.int64)
                bound = 0.0
                duals = lp.duals() if self.widen else None
                if duals is not None:
                    tol = 1e-7
                    r, cc, bound = self.price(lp, duals, tol=tol)
                    bound -= K * tol
                self.floor_proof = -out.objective - bound
                if self.floor_proof < self.gamma - 1e-9:
                    return "infeasible", out, x, lp, rounds
                if r.size:
                    self.sup = self.sup.union(r, cc)
                    self.added_cols += r.size
            if new:
                self.ws.add(new)
                lp = None
                continue
            cap = PHASE1_MAX_ROUNDS if phase_one else MAX_PRICING_ROUNDS
            if self.below_half and not phase_one:
                # (a round without slack holds a design: the refinement goes on from it)
                cap = rounds if not slack_left else min(cap, LINEAR_ROUNDS_BELOW_HALF)
            duals = lp.duals() if (self.widen and rounds < cap) else None
            if duals is not None:
                pricer = self.pricer(lp, duals)
                r, cc, bound = self.price(
                    lp,
                    duals,
                    cost_fn=None if phase_one else self._change_costs,
                    tol=1e-7 * out.scale,
                    pricer=pricer,
                )
                # stop when the Lagrangian bound certifies the restricted optimum to be within
                # LP_GAP_RTOL of the full program's (degenerate tails add columns for nothing)
                E = expected_changes(sup.to_matrix(x), counts)
                obj = float(c @ out.x)
                self.lp_gap = -bound / max(abs(obj) if phase_one else E, 1e-12)
                if not phase_one and not self.problem.params.change_weights:
                    if self.floor_bound is not None and not slack_left:
                        # a bound known beforehand (the flow relaxation's) is below the full
                        # program's optimum too, which is solved at a_solve < alpha
                        gap = max(0.0, E - self.floor_bound) / max(E, 1e-12)
                        self.lp_gap = min(self.lp_gap, gap)
                    # the proven bound: each row moves at most 1 - its floor off the diagonal
                    # (the same reduced costs: without change_weights no transition has a cost)
                    room = 1.0 - self.bounds(sup)[0][sup.diag]
                    tight = float(pricer.rowmin @ room)
                    self._note_bound(out, tight - K * 1e-7 * out.scale, duals, lp.program)
                if phase_one:  # the full program's floor is at most this (see above)
                    self.floor_proof = -out.objective - bound
                # ... or when a round gained less than that (the bound sums a worst case over every
                # row and can stay loose while the objective has stalled; it is reported as is)
                # (while elastic rows keep a slack the objective, penalty included, is what falls)
                now = out.objective if slack_left else E
                stalled = not phase_one and abs(prev_E - now) <= LP_GAP_RTOL * max(abs(now), 1e-12)
                prev_E = np.inf if slack_left else E
                if self.lp_gap <= LP_GAP_RTOL or stalled:
                    r = r[:0]
                # Phase one only has to bound the floor from below: once the restricted program is
                # feasible (no slack) after a few rounds, a floor from the ladder below its t is
                # safe, and the linear stage prices to optimality at that floor anyway.
                # (only at a floor the ladder can use: a lower one proves nothing about the
                # full program, whose floor pricing may still raise)
                settled = (
                    phase_one
                    and rounds >= PHASE1_PRICING_ROUNDS
                    and float(out.slack.max(initial=0.0)) <= 1e-9
                    and float(np.min(x[sup.diag])) >= self.gamma
                )
                if r.size and not settled:
                    # a rebuilt model is solved with presolve, which beats HiGHS's warm start from
                    # the old basis once thousands of columns are added
                    self.sup = self.sup.union(r, cc)
                    lp = None
                    self.added_cols += r.size
                    continue
            if self.mode == "dense" and not phase_one:  # the full program: no pricing bound
                d = lp.duals()
                if d is not None:
                    self._note_bound(out, 0.0, d, lp.program)
            return "ok", out, x, lp, rounds

    def _note_bound(self, out, bound: float, duals, program) -> None:
        """Keep the best proven lower bound on the expected changes of every design meeting C1 at
        alpha with all P_mm >= floor and the permitted transitions, from one round's solve.

        Weak duality: with the round's row duals y, the Lagrangian over every permitted P (each
        row sums to one) is the round's objective plus the pricing ``bound``.  The rows were
        built at a_solve < alpha: at alpha each C1 row ``N x - a D_g`` loses ``(alpha - a) D_g``,
        so the Lagrangian drops by at most ``(alpha - a) sum |y_N| cap_g`` with ``cap_g`` a bound
        on D_g over every permitted P (:meth:`_denominator_caps`).  Rows still
        missing, and an elastic slack (its cost bounds its dual), only make the program a
        relaxation.  ``BOUND_RTOL`` n more is taken off for the solver's tolerances.
        """
        p = self.problem.params
        if p.change_weights or out.objective is None or not self.own_bounds or self.cap is not None:
            # the objective is not the expected changes, or the bound must hold for designs
            # beyond this program's permitted transitions, or beyond its cap (transitions at
            # the cap keep a negative reduced cost that pricing, which looks outside the
            # support, does not count)
            return
        n = float(self.counts.sum())
        y_n = np.abs(np.asarray(duals.N, dtype=float))
        rows = next(c for c in program.constraints if c.name == "c1")
        d_max = self._denominator_caps()[rows.block.g]
        shift = (self.problem.alpha - self.a_solve) * float(y_n @ d_max)
        lb = n + float(out.objective) + bound - shift - BOUND_RTOL * n
        if lb > (self.floor_bound or 0.0):
            self.floor_bound = lb

    def _denominator_caps(self) -> np.ndarray:
        """An upper bound on every group's C1 denominator D_g over all permitted P: the records
        that can be released into it (:meth:`DesignProblem.group_reach`; n without a list)."""
        if self._caps is None:
            G, n = self.problem.groups.n_groups, float(self.counts.sum())
            self._caps = (
                np.full(G, n) if self.pairs is None else self.problem.group_reach(self.pairs)
            )
        return self._caps

    def _vectors(self, sup: Support):
        """Cost and bounds of the x columns (support order)."""
        diag = sup.rows == sup.cols
        counts = self.counts
        if self.phase_one:
            # a tie-break towards keeping records: t alone leaves the LP free to move records
            # anywhere, and every needless move violates C1 rows that are only checked lazily
            # (on 400 rare-heavy cells, ~900 rows per round for 10+ rounds); it costs t at most
            # PHASE1_TIEBREAK, since sum_m U0(m) P_mm / n <= 1
            cost = np.where(diag, -PHASE1_TIEBREAK * counts[sup.rows] / counts.sum(), 0.0)
        else:
            cost = np.where(diag, -counts[sup.rows], 0.0)  # minimise sum U0 (1 - P_mm)
            lin = self.problem.objective.linear_cost(sup.rows, sup.cols)
            if lin is not None:
                # ... plus U0(m) h_w(m, k) per moved record: the objective's linear part
                cost = cost + counts[sup.rows] * lin
        lo, hi = self.bounds(sup)
        return cost, lo, hi

    def _change_costs(self, cols):
        """The linear stage's costs of P[:, cols] outside the diagonal: 0, or U0(m) h_w(m, k) with
        ``change_weights`` (None when there are none, as pricing expects)."""
        cols = np.asarray(cols)
        lin = self.problem.objective.linear_cost(np.arange(self.problem.K)[:, None], cols[None, :])
        return None if lin is None else self.counts[:, None] * lin

    # -- the refinement (:mod:`.general_refine`) ----------------------------------------------
    def refine(self, x, trace: Trace, max_iter: int | None = None):
        """Trust-region steps on the exact loss from the linear stage's ``x`` (on ``self.sup``).

        Curved (QP) steps with the L2 loss's Hessian diagonal; linear ones (SLP) for another
        objective or when a QP fails (see :func:`.refine.refine`); at most ``max_iter`` of
        them (default: the ``max_iter`` parameter).
        """
        from .general_refine import refine_loss  # it reads this module's REFINE_* constants

        return refine_loss(self, x, trace, max_iter)


#: Pricing rounds of phase one once its restricted program is feasible (see ColumnGeneration).
PHASE1_PRICING_ROUNDS = 5
#: Rounds of phase one before it gives up looking for a floor on the lowest rung (it then says
#: so, unproven: the designer turns to the structures that need no floor).
PHASE1_MAX_ROUNDS = 20
#: Weight of the expected-changes tie-break in phase one (relative to the floor t).
PHASE1_TIEBREAK = 1e-4
#: Cost per unit of the elastic slack of phase one's C1 rows.
PHASE1_ELASTIC = 1e3
#: The proven bound on the changes of floor-respecting designs is lowered by this fraction of the
#: records, for the solver's feasibility and optimality tolerances (1e-7).
BOUND_RTOL = 1e-6
#: A slack of an elastic C1 row above this after the linear stage means the row is unmet.
ELASTIC_SLACK_TOL = 1e-9


def _unmet(out) -> bool:
    """Whether a solve left an elastic C1 row with a slack."""
    return float(out.slack.max(initial=0.0)) > ELASTIC_SLACK_TOL


def solve(problem: DesignProblem, level: float, trace: Trace) -> Attempt:
    """The general design at the working level ``level``: the flow relaxation's bound on every
    diagonal floor (once per design), phase one, then the rungs of the floor's ladder that phase
    one allows, from the requested gamma down, until one is feasible."""
    # phase one is built on this module's ColumnGeneration
    from .general_scale import PHASE_ONE_MAX_CELLS
    from .phase_one import floor_bound_stage

    p = problem.params
    floor = 0.0 if p.min_diagonal is None else p.min_diagonal
    g_low = max(GAMMA_LADDER[-1], floor)
    at_scale = problem.K > PHASE_ONE_MAX_CELLS
    # (at census scale without a flow per permitted transition: with them, minutes; the sparse
    # path prices the flows, and this weaker bound takes seconds)
    flows = not (at_scale and problem.max_changed is not None)
    relax = once(trace, "floor bound", lambda: floor_bound_stage(problem, trace, flows=flows))
    why = floor_ruled_out(relax, g_low)
    if why is not None:
        low = floors_below_half(relax, floor)
        if low:
            return _below_half(problem, level, trace, floor, low, why, relax)
        return Attempt(
            AttemptStatus.INFEASIBLE,
            gamma=g_low,
            auto_reason=why,
            detail=f"{why}{invariant_hint(p)} {ADVICE}",
        )
    return _at_floor(problem, level, trace, floor, g_low, relax)


def _at_floor(
    problem: DesignProblem,
    level: float,
    trace: Trace,
    floor: float,
    g_low: float,
    relax: float | None,
) -> Attempt:
    """The general design with every diagonal entry at least ``g_low``: sparse throughout at
    census scale, else phase one and the ladder's rungs (``relax``: the flow relaxation's bound
    on every floor, for the message)."""
    from .general_scale import PHASE_ONE_MAX_CELLS, solve_at_scale
    from .phase_one import largest_floor

    p = problem.params
    if problem.K > PHASE_ONE_MAX_CELLS:
        return solve_at_scale(problem, level, trace, floor, g_low)
    ph = largest_floor(problem, g_low, floor, level, trace)
    if ph.status == "unproven":
        trace.add(
            "phase1", ph.seconds, 0, f"no floor >= {g_low:g} found on its support (not proven)"
        )
        allows = "" if relax is None else f" (the flow relaxation allows floors up to {relax:.4g})"
        why = (
            f"Phase one found no design with every diagonal entry >= {g_low:g} within its "
            f"pricing rounds; one may exist{allows}."
        )
        return Attempt(
            AttemptStatus.UNPROVEN, gamma=g_low, auto_reason=why, detail=f"{why} {ADVICE}"
        )
    if ph.status == "infeasible" or (
        ph.status == "ok" and ph.t is not None and ph.t < g_low - 1e-9
    ):
        trace.add("phase1", ph.seconds, 0, "infeasible")
        return Attempt(
            AttemptStatus.INFEASIBLE,
            gamma=g_low,
            auto_reason=f"No design with every diagonal entry >= {g_low:g} satisfies "
            "C1 (phase one).",
            detail=f"No design satisfies C1 with every diagonal entry >= {g_low:g}"
            f"{' (needed to keep P invertible)' if g_low > 0.5 else ''}.{invariant_hint(p)} "
            f"{ADVICE}",
        )
    if ph.status != "ok":
        trace.add("phase1", ph.seconds, 0, ph.status)
        return Attempt(
            AttemptStatus.SOLVER_ERROR, gamma=g_low, detail=f"Solver failed: {ph.status}."
        )
    trace.add("phase1", ph.seconds, 0, f"largest feasible floor {ph.t:.4g}")
    return _ladder(problem, level, trace, ph, floor, g_low)


def _below_half(
    problem: DesignProblem,
    level: float,
    trace: Trace,
    floor: float,
    low: tuple,
    why: str,
    relax: float | None,
) -> Attempt:
    """The general design at the first floor of ``low`` (each below 1/2) that gives one, where
    ``why`` says that no design keeps every diagonal entry >= 0.51.  Without
    ``max_changed_variables``, at every size over the transitions that change at most
    ``NEAR_CHANGED`` variables (:func:`.general_scale.solve_at_scale`).

    Below 1/2 P is not invertible by diagonal dominance, so the design is returned only where
    its condition number (:func:`pramopt.loss.condition_number`, computed from P alone) is
    finite and at most :data:`~pramopt.params.BELOW_HALF_MAX_CONDITION`; the loss bound, which
    needs every diagonal entry of P^-1 >= 1, is then not claimed (:mod:`..diagnosis`).
    """
    from .general_scale import NEAR_CHANGED, PHASE_ONE_MAX_CELLS, solve_at_scale

    att = None
    for g in low:
        if problem.params.max_changed_variables is None:
            # phase one below 1/2 over every transition does not end in minutes on a few
            # hundred rare cells, the sparse path does (benchmarks/README.md, section 7)
            att = solve_at_scale(problem, level, trace, floor, g)
        else:
            att = _at_floor(problem, level, trace, floor, g, relax)
        if att.status in (AttemptStatus.INFEASIBLE, AttemptStatus.UNPROVEN):
            continue
        if not att.ok:
            return att
        with trace.stage("invertibility") as info:
            cond = condition_number(att.P)
            info["detail"] = f"condition number {cond:.4g}"
        if not (np.isfinite(cond) and cond <= BELOW_HALF_MAX_CONDITION):
            return Attempt(
                AttemptStatus.UNPROVEN,
                gamma=g,
                auto_reason=f"{why} The general design found at the floor {g:g} below 1/2 is "
                f"numerically singular (condition number {cond:.4g}).",
                detail=f"{why} The design found at the floor {g:g} below 1/2 is numerically "
                f"singular (condition number {cond:.4g}, above {BELOW_HALF_MAX_CONDITION:g}): "
                f"no design is returned. {ADVICE}",
            )
        said = (
            f"{why} This design keeps every diagonal entry >= {g:g} (below 1/2, so P is not "
            f"invertible by its form: its condition number, computed from P, is {cond:.4g}; no "
            "lower bound on the loss is claimed). "
        )
        return dataclasses.replace(att, gamma=g, condition=cond, describe=said + att.describe)
    assert att is not None  # ``low`` is never empty (the caller's condition)
    floors = ", ".join(f"{g:g}" for g in low)
    tried = f"{why} No general design was found at the floors below 1/2 tried ({floors})"
    if problem.params.max_changed_variables is None:
        tried += f" over the transitions that change at most {NEAR_CHANGED} identifying variables"
        if problem.K <= PHASE_ONE_MAX_CELLS:
            tried += (
                " (structure='general' with max_changed_variables searches every transition it "
                "allows, by phase one, which may take minutes)"
            )
    return Attempt(
        att.status,
        gamma=low[-1],
        auto_reason=f"{tried}.",
        detail=f"{tried}: {att.detail}",
    )


def _ladder(
    problem: DesignProblem, level: float, trace: Trace, ph, floor: float, g_low: float
) -> Attempt:
    """The rungs of the floor's ladder at most phase one's floor, from the requested gamma down."""
    from .phase_one import gamma_ladder

    p = problem.params
    # t may sit up to PHASE1_TIEBREAK below the largest floor; a rung just above the
    # true largest floor is found infeasible by the linear stage and the next one is tried
    ladder = [g for g in gamma_ladder(p.gamma, floor) if g <= ph.t + PHASE1_TIEBREAK] or [g_low]
    tried = []
    for gam in ladder:
        init = ph.support if supports(p.solver, "duals") else None  # a priced support
        att = solve_general(problem, gam, max(gam, floor), level, trace, init=init)
        tried.append(gam)
        if att.status is AttemptStatus.INFEASIBLE:
            continue
        if not att.ok:
            return dataclasses.replace(att, gamma=gam, detail=f"Solver failed: {att.detail}.")
        why = f"Diagonal floor gamma = {gam:g}"
        if gam < p.gamma:
            why += (
                f": the reduced problem is infeasible at gamma = {p.gamma:g} (the largest "
                f"feasible floor is {ph.t:.4g}), so gamma was lowered"
                + (" as the paper suggests." if gam > 0.5 else " below 1/2 (see above).")
            )
        else:  # the parameters hold every value, defaults too: say which this one is
            default = DesignParams.__dataclass_fields__["gamma"].default
            why += " (the default)." if p.gamma == default else " (as requested)."
        return dataclasses.replace(att, gamma=gam, describe=why)
    return Attempt(
        AttemptStatus.INFEASIBLE,
        gamma=tried[-1] if tried else None,
        detail="No design satisfies C1 with a diagonal floor in "
        f"{', '.join(f'{g:g}' for g in tried)}. {ADVICE}",
    )


def solve_general(
    problem: DesignProblem,
    gamma: float,
    floor: float,
    a_solve: float,
    trace: Trace,
    init: Support | None = None,
    **options,
) -> Attempt:
    """Reduce at floor ``gamma``, solve the linear stage with lazy rows and column generation,
    then refine the exact loss (unless ``refine_loss`` is off).  ``options`` go to
    :class:`ColumnGeneration` (``elastic``, ``pairs``, ``mode``, ``floor_bound``)."""
    p = problem.params
    cg = ColumnGeneration(problem, gamma, floor, a_solve, init=init, **options)
    trace.add(
        f"reduce@{gamma:g}",
        cg.reduce_seconds,
        0,
        f"{cg.red.m.size} rows, support {cg.sup.size} ({cg.mode})",
    )
    if cg.below_half:
        # below 1/2 the fewest changes put as much on a transition as on the diagonal: two rare
        # cells that send their records to each other alike then have equal rows
        cg.cap = floor * CAP_BELOW_HALF
    t_lin = time.perf_counter()
    status, out, x, lp, rounds = cg.linear(trace)
    if status != "ok":
        trace.add(f"linear@{gamma:g}", time.perf_counter() - t_lin, rounds, status)
        kind = AttemptStatus.INFEASIBLE if status == "infeasible" else AttemptStatus.SOLVER_ERROR
        return Attempt(kind, reduction=_reduction(cg), detail=status)
    if cg.elastic and _unmet(out):
        # pricing and the lazy rows are done, yet a C1 row keeps a slack: the penalty is not
        # proven exact, so this says no design was found, not that none exists
        trace.add(f"linear@{gamma:g}", time.perf_counter() - t_lin, rounds, "C1 rows left slack")
        return Attempt(
            AttemptStatus.UNPROVEN,
            reduction=_reduction(cg),
            detail=f"the linear stage at floor {floor:g} left C1 rows unmet "
            f"(largest slack {float(out.slack.max()):.3g})",
        )
    solver_used = out.solver
    trace.add(
        f"linear@{gamma:g}",
        time.perf_counter() - t_lin,
        rounds,
        f"{solver_used}, support {cg.sup.size} (+{cg.added_cols} priced, gap to full <= "
        f"{'unknown' if cg.lp_gap is None else format(cg.lp_gap, '.1e')}), "
        f"expected changes {expected_changes(cg.sup.to_matrix(x), cg.counts):.4g}",
    )
    cg.linear_changes = expected_changes(cg.sup.to_matrix(x), cg.counts)
    if cg.below_half:
        x = _invertible_start(cg, x, trace)
        cg.cap = None
        if x is None:
            return Attempt(
                AttemptStatus.UNPROVEN,
                reduction=_reduction(cg),
                detail=f"the linear stage at floor {floor:g} ended at a singular matrix, and "
                "no point between it and the vertices of perturbed costs is invertible",
            )
    if cg.floor_bound is not None:
        trace.add(
            f"changes bound@{gamma:g}",
            0.0,
            0,
            f"every design with all P_mm >= {floor:g} changes >= {cg.floor_bound:.5g}",
        )
    if p.refine_loss and p.max_iter > 0:
        t_ref = time.perf_counter()
        near = cg.near
        x, its, info, stop = cg.refine(x, trace)
        if its < p.max_iter and cg.widen_to_every_permitted():
            # from the design within ``near`` variables, so that allowing more never ends worse
            trace.add(
                f"refine within {near}",
                time.perf_counter() - t_ref,
                its,
                f"support {cg.sup.size}, stop: {stop or info.stop_reason}, "
                f"loss {info.loss_end:.4g}",
            )
            t_ref = time.perf_counter()
            # (the max_iter parameter bounds both refinements together)
            x, its, info, stop = cg.refine(x, trace, p.max_iter - its)
        trace.add(
            "refine",
            time.perf_counter() - t_ref,
            its,
            f"support {cg.sup.size}, stop: {stop or info.stop_reason}, loss {info.loss_end:.4g}",
        )
    return Attempt(
        AttemptStatus.OK,
        P=cg.sup.to_matrix(x),
        reduction=_reduction(cg, final=True),
        solver=solver_used,
    )


#: Below the 1/2 floor the linear stage keeps every transition below this fraction of the
#: floor, so that no two rows can be equal (a row's diagonal entry would have to equal another
#: row's entry in that column).
CAP_BELOW_HALF = 0.8
#: A linear-stage vertex below the 1/2 floor is refined from as it is when its condition
#: number is at most this; otherwise from the start :func:`_invertible_start` makes.
START_MAX_CONDITION = 1e3
#: Vertices of perturbed costs tried for the start.
START_VERTICES = 3
#: Their costs on the transitions: up to this fraction of a record per transition.
START_PERTURBATION = 0.1
#: The points tried on the segment from the linear stage's vertex to the second one.
START_STEPS = (0.1, 0.25, 0.5, 0.75, 1.0)


def _invertible_start(cg: ColumnGeneration, x, trace: Trace):
    """Below the 1/2 floor, a start of finite loss for the refinement (None: none found).

    The linear stage's vertex may then be singular or nearly so (the cap on its transitions
    keeps rows apart, not every combination of them): its loss is infinite or huge, and the
    refinement, which accepts only steps that lower the loss, cannot leave it, or crawls.  A
    vertex of the same program over the same support under small random (seeded) costs on the
    transitions is found (several, until one helps).  Every point between two matrices that
    meet C1 meets it (C1 is linear in P), and where the second vertex is invertible
    ``det((1 - t) P0 + t P1)`` is a polynomial in t that is not zero at t = 1, so all but
    finitely many points of the segment are invertible.  The point of smallest exact loss among
    :data:`START_STEPS` is taken (the vertex itself where its loss is smaller).
    """
    from ..objectives.l2 import SparseL2

    sup, counts = cg.sup, cg.counts
    P0 = sup.to_matrix(x)
    f0 = SparseL2(P0, counts).loss
    if np.isfinite(f0) and condition_number(P0) <= START_MAX_CONDITION:
        return x
    t0 = time.perf_counter()
    c, lo, hi = cg._vectors(sup)
    off = sup.rows != sup.cols
    rng = np.random.default_rng(0)
    best, best_loss = (x, f0) if np.isfinite(f0) else (None, np.inf)
    tried = 0
    while tried < START_VERTICES:
        tried += 1
        noise = START_PERTURBATION * counts[sup.rows] * rng.random(sup.size)
        x1 = _second_matrix(cg, sup, c + np.where(off, noise, 0.0), lo, hi)
        for t in START_STEPS if x1 is not None else ():
            xt = (1.0 - t) * x + t * x1
            f = SparseL2(sup.to_matrix(xt), counts).loss
            if f < best_loss:
                best, best_loss = xt, f
        if best is not None and best_loss < f0:
            break
    trace.add(
        "invertible start",
        time.perf_counter() - t0,
        tried,
        ("none found" if best is None else f"loss {best_loss:.4g}")
        + f" (the linear stage's vertex: {f0:.4g})",
    )
    return best


def _second_matrix(cg: ColumnGeneration, sup: Support, cost, lo, hi):
    """The solution of the linear stage's program over ``sup`` under the costs ``cost``, with
    every C1 row it violates imposed in turn (None: no solution).

    The linear stage's design meets every row the program imposes, so the program needs no
    slacks, and the simplex method solves it several times faster than the elastic one
    (benchmarks/README.md); the elastic program (the linear stage's) is the fallback for a
    solver that finds the rows infeasible by its tolerances."""
    for soft in (False, True):

        def load(soft=soft):
            return cg.load(sup, presolve=not (soft and cg.elastic), elastic=None if soft else False)

        out, x1, _, _ = solve_lazy(
            load, cost, lo, hi, partial(clean, sup), partial(cg.pending, sup), cg.ws.add
        )
        if x1 is not None:
            return None if _unmet(out) else x1
    return None


def _reduction(cg: ColumnGeneration, final: bool = False) -> Reduction:
    extra: dict[str, Any] = {}
    if final:
        extra = dict(
            final_working_set=int(cg.ws.m.size),
            lazy_added=int(cg.ws.added),
            support_rows=int(cg.ws.with_support),
            support=int(cg.sup.size),
            support_mode=cg.mode,
            priced_transitions=int(cg.added_cols),
            linear_gap_bound=None if cg.lp_gap is None else float(cg.lp_gap),
            linear_changes=cg.linear_changes,
            floor_changes_bound=cg.floor_bound,
        )
    return Reduction(structure="general", **cg.red.counts(), **extra)
