"""The optimal PRAM designer: validate, choose a structure, retry, finish.

data -> frequency table -> :class:`~.problem.DesignProblem` -> a strategy
(:mod:`.strategies`) -> the independent check (:mod:`pramopt.verify`) -> a
:class:`~pramopt.DesignResult` (:func:`pramopt.outcome.finish`).

Retries: the solver works at alpha * (1 - margin) so that its feasibility tolerance never
turns into a violation; if the verifier still found one, the margin grows tenfold (twice at
most) and the design is solved again.  The diagonal floor gamma goes down a ladder when the
reduced problem is infeasible at the requested one, guided by phase one.

Structure (auto mode): the counting bound and the flow relaxation (:mod:`.relaxation`) say in
seconds whether a general design (every diagonal entry >= 0.51) can exist; it is made only then,
and only up to ``GENERAL_AUTO_MAX_CELLS`` cells.  The replacement design is always made, the block
design up to ``BLOCKS_AUTO_MAX_CELLS`` cells where no general design is; every candidate is
verified, and the smallest exact loss wins.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import scipy.sparse as sp

from .._validation import check_choice
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, frequency_table
from ..outcome import finish, verify_stage
from ..params import GAMMA_LADDER, DesignParams, parameters_doc, signature
from ..loss import l2_loss
from ..result import DesignResult, Status
from .backends import gives_duals
from .constraints.c1 import floor_upper_bound
from .problem import DesignProblem, ProgressFn, Trace
from .strategies import AttemptStatus
from .strategies.blocks import solve_blocks
from .strategies.replacement import LOCAL_RELAXATION_ABOVE, solve_replacement
from .strategies.general import solve_general
from .relaxation import changes_bound, floor_bound
from .strategies.phase_one import PHASE1_TIEBREAK, largest_floor

__all__ = ["design", "GAMMA_LADDER"]


#: Above this many cells auto mode tries only the replacement and block designs: on the 5,577-cell
#: Zipf register the replacement design (9 s) has a smaller loss than the general one (177 s); on
#: the 2,610-cell census sample phase one alone takes minutes, and on the rare-heavy scaling
#: series it does not finish in 300 s from 800 cells on.
GENERAL_AUTO_MAX_CELLS = 600

#: Above this many cells auto mode makes a block design only when no replacement design is found:
#: on the 6,505-cell census sample the block design takes 500 s and loses to the replacement design
#: (loss 1.55e-4, 16 s), as it does on every rare-heavy data set of the benchmarks.
BLOCKS_AUTO_MAX_CELLS = 4000

#: The flow relaxation proves a floor impossible only when its bound is below the floor by
#: more than this (its solver's feasibility tolerance is 1e-7).
RELAXATION_TOL = 1e-6

_ADVICE = "Coarsen the identifying variables, use fewer combinations or a larger alpha."


def _gamma_ladder(gamma: float, floor: float) -> list[float]:
    ladder = [gamma] + [g for g in GAMMA_LADDER if g < gamma]
    return [g for g in ladder if g >= floor] or [max(gamma, floor)]


def design(data, qi=None, alpha: float = DesignParams.alpha, *, progress: ProgressFn | None = None,
           client=None, **options) -> DesignResult:
    """Design a PRAM matrix of minimal exact L2 loss under the C1 security constraint.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        Microdata (one row per record), or its frequency table.
    qi : list of str
        Identifying variables (ignored when ``data`` is a FrequencyTable).
{parameters}
    progress : callable, optional
        ``progress(stage, iteration, loss, radius_or_violations)``, called during long work.
    client : distributed.Client, optional
        Design the strata of ``fixed`` on this Dask cluster (as ``workers`` does in local
        processes; the result's ``params`` then say ``workers=1``, which repeats it locally).

    Returns
    -------
    DesignResult
        ``success`` is True only when the full, unreduced C1 holds with ``max_risk <= alpha``.
        ``params`` holds every parameter, so ``design(result.table, **result.params)`` makes
        the same design again.
    """
    owner = "design"
    params = DesignParams.from_options(owner, alpha=alpha, **options)
    if params.solver is not None and params.solver != "HIGHS":
        from .backends import known_solvers  # imports cvxpy: only when a cvxpy solver is named
        check_choice(params.solver, "solver", owner, known_solvers())
    if isinstance(data, FrequencyTable):
        table = data
    else:
        table = frequency_table(data, qi, domains=params.domains, max_categories=params.max_categories,
                                owner=owner)
    combos = resolve_combinations(table.qi, params.combination_size, params.combinations, owner)
    if params.workers is not None or client is not None:
        from .strata import check_client, design_strata  # independent designs per stratum of `fixed`
        res = design_strata(table, combos, params, client=check_client(client, owner), progress=progress,
                            owner=owner)
        if res is not None:
            return res
    trace = Trace(progress)
    with trace.stage("model") as info:
        problem = DesignProblem.build(table, combos, params, owner)
        info["detail"] = f"{problem.groups.n_groups} (pi, k0) groups"
    return _Designer(problem, trace).run()


design.__doc__ = design.__doc__.replace("{parameters}", parameters_doc())
design.__signature__ = signature(
    design, before=[inspect.Parameter("data", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                    inspect.Parameter("qi", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
                    inspect.Parameter("alpha", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DesignParams.alpha)],
    after=[inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=None),
           inspect.Parameter("client", inspect.Parameter.KEYWORD_ONLY, default=None)])


@dataclass(frozen=True)
class _Candidate:
    """A verified design of one structure, before the designer picks among them."""

    name: str
    P: sp.csr_matrix
    report: object
    loss: float
    condition: float | None
    reduction: object
    solver: str | None
    gamma: float | None
    describe: str


class _Designer:
    """One run of :func:`design` on a problem: the structure, the retries and the result."""

    def __init__(self, problem: DesignProblem, trace: Trace):
        self.problem, self.trace = problem, trace
        self.p = problem.params
        self.relax = None  # the flow relaxation's bound on every diagonal floor, once known

    def verify(self, P, name: str = "verify"):
        rep, st = verify_stage(P, self.problem.table, self.problem.combos, name)
        self.trace.add(st.name, st.seconds, st.iterations, f"max risk {rep.max_risk:.6g}")
        return rep

    def finish(self, P, status: Status, message: str, gamma=None, reduction=None, solver=None, report=None,
               loss=None, condition=None, details=None):
        pb = self.problem
        return finish(P, pb.table, pb.combos, pb.alpha, status, message, stages=self.trace.stages, gamma=gamma,
                      reduction=reduction, solver=solver, report=report, params=self.p.to_dict(), loss=loss,
                      condition=condition, details=details)

    def identity(self, status: Status, message: str, gamma=None, reduction=None):
        return self.finish(sp.identity(self.problem.K, format="csr"), status, message, gamma, reduction)

    def run(self) -> DesignResult:
        pb, p = self.problem, self.p
        alpha = pb.alpha
        # C1 can hold for no P at all when n < 1/alpha: the U0-weighted mean of the left-hand
        # sides over m is 1/n for every (π, k0), so the largest is at least 1/n.
        if pb.n * alpha < 1:
            return self.identity(Status.INFEASIBLE_DATA,
                                 f"C1 cannot hold for any matrix: n = {pb.n} < 1/alpha = {1 / alpha:g}.")
        # Nothing to do when the original data already satisfy C1 (P = I).
        eye = sp.identity(pb.K, format="csr")
        rep = self.verify(eye, "check P=I")
        if rep.max_risk <= alpha:
            return self.finish(eye, Status.SUCCESS, "The data already satisfy C1: P = I.", report=rep)
        floor = 0.0 if p.min_diagonal is None else p.min_diagonal
        g_low = max(GAMMA_LADDER[-1], floor)
        auto_blocks = p.structure == "auto" and not p.invariant and p.min_diagonal is None
        if p.structure == "blocks":
            return self.blocks("Block structure requested.")
        if p.structure == "replacement":
            return self.replacement("Replacement structure requested.")
        bound = floor_upper_bound(pb.table, pb.groups, alpha)
        if bound < g_low and auto_blocks:
            return self.rare(f"No design with a diagonal floor >= {g_low:g} exists: C1 caps every floor at "
                               f"alpha * n / (largest number of groups of one combination) = {bound:.4g}.")
        if auto_blocks and pb.K > GENERAL_AUTO_MAX_CELLS:
            return self.rare(f"With {pb.K} cells (more than {GENERAL_AUTO_MAX_CELLS}), auto mode makes the structures "
                             "found in seconds and skips the general design, which takes many minutes at this size "
                             "(structure='general' asks for it).")
        # the flow relaxation: seconds, where phase one on rare-heavy data takes minutes to
        # reach the same conclusion
        with self.trace.stage("floor bound") as info:
            self.relax = relax = floor_bound(pb)
            info["detail"] = "solver failed" if relax is None else f"every floor <= {relax:.4g}"
        if relax is not None and relax < g_low - RELAXATION_TOL:
            why = (f"No design with every diagonal entry >= {g_low:g} satisfies C1: the flow relaxation of C1 "
                   f"bounds every diagonal floor by {relax:.4g}.")
            if auto_blocks:
                return self.rare(why)
            return self.identity(Status.INFEASIBLE, f"{why}{self._invariant_hint()} {_ADVICE}", g_low)
        return self.general(floor, g_low, auto_blocks)

    def _invariant_hint(self) -> str:
        if not self.p.invariant:
            return ""
        return (" An invariant design fixes every C1 denominator at U_pi(k0), so it needs U_pi(k0) >= 1/(2 alpha) "
                "for every combination present.")

    def blocks(self, reason: str) -> DesignResult:
        """The block structure alone (``structure="blocks"``)."""
        c = self._blocks()
        if c is None:
            return self.identity(Status.INFEASIBLE, reason + " No block design satisfied C1.")
        return self._finish(c, reason)

    def replacement(self, reason: str) -> DesignResult:
        """The replacement structure alone (``structure="replacement"``)."""
        c = self._replacement()
        if c is None:
            floor = max(0.001, self.p.min_diagonal or 0.0)
            return self.identity(Status.INFEASIBLE, reason + " No replacement design satisfied C1 (the flow "
                                 f"relaxation leaves no retention of at least {floor:g} at any margin tried).")
        return self._finish(c, reason)

    def rare(self, reason: str) -> DesignResult:
        """No general design exists (or none was found): the better of blocks and replacement
        (blocks only up to ``BLOCKS_AUTO_MAX_CELLS`` cells, or when there is no replacement design)."""
        found = [c for c in (self._replacement(),) if c is not None]
        if not found or self.problem.K <= BLOCKS_AUTO_MAX_CELLS:
            found += [c for c in (self._blocks(),) if c is not None]
        if not found:
            return self.identity(Status.INFEASIBLE, reason + " No block or replacement design satisfied C1 either.")
        return self._finish(min(found, key=lambda c: c.loss), reason, others=found)

    def _finish(self, c: "_Candidate", reason: str, others=()) -> DesignResult:
        also = "; ".join(f"{o.name} loss {o.loss:.4g}" for o in others if o is not c)
        with self.trace.stage("changes bound") as info:
            # evidence of optimality: no design meeting C1 changes fewer records in expectation
            # (one program over the whole table: not attempted where even the floor's is too large)
            lb = None
            if self.problem.K <= LOCAL_RELAXATION_ABOVE:
                lb = changes_bound(self.problem, self.p.min_diagonal or 0.0)
            info["detail"] = ("unknown" if lb is None else
                              f"every design changes >= {lb:.4g} records in expectation")
        details = {"expected_changes_lower_bound": lb, "tried": {o.name: o.loss for o in others}}
        return self.finish(c.P, Status.SUCCESS, f"{reason} {c.describe}".strip() + (f" (also tried: {also})." if also else
                           "") + " Full C1 verified.", c.gamma, c.reduction, c.solver, c.report, c.loss, c.condition,
                           details)

    def _blocks(self) -> "_Candidate | None":
        best = solve_blocks(self.problem, self.problem.alpha * (1.0 - self.p.margin), self.trace, self.verify)
        if best is None:
            return None
        att, rep, f = best
        r = att.reduction
        return _Candidate("blocks", att.P, rep, f, None, r, att.solver, None,
                          f"A block-diagonal retention-replacement design was made ({r.blocks} blocks of at least "
                          f"{r.block_target_records:g} records; P_b = lambda I + 1 v^T is invertible for any lambda > 0).")

    def _replacement(self) -> "_Candidate | None":
        found = solve_replacement(self.problem, self.trace, self.verify)
        if found is None:
            return None
        att, rep, f, cond = found
        r = att.reduction
        return _Candidate("replacement", att.P, rep, f, cond, r, att.solver, None,
                          f"A replacement design was made (each cell keeps its records with probability >= "
                          f"{r.min_lambda:.3g} and otherwise draws from one replacement distribution per "
                          f"{'stratum' if r.block_target_records is None else 'block'}; invertible for any "
                          "retention).")

    def general(self, floor: float, g_low: float, auto_blocks: bool) -> DesignResult:
        """Phase one, then the gamma ladder; the margin grows if verification ever fails."""
        pb, p, trace = self.problem, self.p, self.trace
        alpha, margin = pb.alpha, p.margin
        last_msg = ""
        for _ in range(3):
            a_solve = alpha * (1.0 - margin)
            ph = largest_floor(pb, g_low, floor, a_solve, trace)
            if ph.status == "unproven":
                trace.add("phase1", ph.seconds, 0, f"no floor >= {g_low:g} found on its support (not proven)")
                allows = "" if self.relax is None else f" (the flow relaxation allows floors up to {self.relax:.4g})"
                why = (f"Phase one found no design with every diagonal entry >= {g_low:g} within its pricing rounds; "
                       f"one may exist{allows}.")
                if auto_blocks:
                    return self.rare(why)
                return self.identity(Status.INFEASIBLE, f"{why} {_ADVICE}", g_low)
            infeasible = ph.status == "infeasible" or (ph.status == "ok" and ph.t < g_low - 1e-9)
            if infeasible:
                trace.add("phase1", ph.seconds, 0, "infeasible")
                if auto_blocks:
                    return self.rare(f"No design with every diagonal entry >= {g_low:g} satisfies C1 (phase one).")
                return self.identity(Status.INFEASIBLE,
                                     f"No design satisfies C1 with every diagonal entry >= {g_low:g} (needed to keep "
                                     f"P invertible).{self._invariant_hint()} {_ADVICE}", g_low)
            if ph.status != "ok":
                trace.add("phase1", ph.seconds, 0, ph.status)
                return self.identity(Status.SOLVER_ERROR, f"Solver failed: {ph.status}.", g_low)
            trace.add("phase1", ph.seconds, 0, f"largest feasible floor {ph.t:.4g}")
            # t may sit up to PHASE1_TIEBREAK below the largest floor; a rung just above the
            # true largest floor is found infeasible by the linear stage and the next one is tried
            ladder = [g for g in _gamma_ladder(p.gamma, floor) if g <= ph.t + PHASE1_TIEBREAK] or [g_low]
            tried = []
            for gam in ladder:
                init = ph.support if gives_duals(p.solver) else None  # a priced support
                att = solve_general(pb, gam, max(gam, floor), a_solve, trace, init=init)
                tried.append(gam)
                if att.status is AttemptStatus.INFEASIBLE:
                    continue
                if not att.ok:
                    return self.identity(Status.SOLVER_ERROR, f"Solver failed: {att.detail}.", gam, att.reduction)
                why = f"Diagonal floor gamma = {gam:g}"
                if gam < p.gamma:
                    why += (f": the reduced problem is infeasible at gamma = {p.gamma:g} (the largest feasible "
                            f"floor is {ph.t:.4g}), so gamma was lowered as the paper suggests.")
                else:
                    why += " (as requested)."
                rep = self.verify(att.P)
                if rep.max_risk <= alpha:
                    general = _Candidate("general", att.P, rep, l2_loss(att.P, pb.counts), None, att.reduction,
                                         att.solver, gam, why + f" Solved at alpha*(1-{margin:g}).")
                    # (by loss: without the refinement the general design minimises changes instead)
                    other = self._replacement() if auto_blocks and p.refine_loss else None
                    if other is not None and other.loss < general.loss:
                        return self._finish(other, "The replacement design has a smaller loss than the general "
                                            "design.", others=[general, other])
                    return self._finish(general, "", others=[general] + ([other] if other else []))
                last_msg = f"verification failed (max risk {rep.max_risk:.8g} > {alpha:g}) at margin {margin:g}"
                break
            else:
                return self.identity(Status.INFEASIBLE,
                                     f"No design satisfies C1 with a diagonal floor in {', '.join(f'{g:g}' for g in tried)}. "
                                     f"{_ADVICE}", tried[-1] if tried else None)
            margin = min(margin * 10, 0.1)
        return self.finish(att.P, Status.UNVERIFIED, last_msg, tried[-1], att.reduction, att.solver, rep)
