"""The general design at census scale: sparse from the first linear program, no phase one.

Phase one (:mod:`.phase_one`) looks for the largest diagonal floor over a support it widens by
scanning every K x K candidate; on thousands of rare cells its rounds take minutes and it may
stop without an answer.  Above ``PHASE_ONE_MAX_CELLS`` cells the general design skips it: the
linear stage (fewest expected changes) runs at the lowest floor the user allows, with C1's rows
elastic (a penalised slack per row) so that the restricted program is feasible from its first
solve, starting from the diagonal and a few seeds among each cell's permitted transitions and,
under ``max_changed_variables``, the flows of the flow relaxation's fewest changes over the
permitted transitions (:func:`~pramopt.optimize.edge_flows.edge_flows`: its bound is the floor
bound reported with the design, and its phase one proves it when no design exists).  Lazy
rows add every C1 row the full check finds violated; column generation prices, under
``max_changed_variables``, only the permitted transitions (listed once, never K x K of anything);
the refinement of the exact loss then runs as at any size.

Without ``max_changed_variables`` the permitted transitions are all K x K, too many to price
at this size: the design is then made over those that change at most :data:`NEAR_CHANGED`
variables (a design of the unrestricted class, and one an office can publish), and its linear
stage is judged against the flow relaxation's bound with every transition allowed.

If a row keeps a slack when nothing is left to add, no design was found on this path (the
attempt is UNPROVEN: the penalty is not proven exact); whether one can exist is the diagnosis's
to say (:func:`pramopt.optimize.diagnosis.distance_rules_out`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..edge_flows import ROUTE_SLACK, EdgeFlows, edge_flows, routed_flows, smallest_per_key
from ..problem import PHASE_ONE_MAX_CELLS, DesignProblem, Trace
from ..support import Support
from . import Attempt, AttemptStatus

__all__ = [
    "solve_at_scale",
    "seeds",
    "PHASE_ONE_MAX_CELLS",
    "PAIRS_LIMIT",
    "SEEDS_PER_CELL",
    "NEAR_CHANGED",
    "EDGE_FLOWS_MAX_PAIRS",
    "EDGE_FLOWS_FIRST",
]

#: Permitted transitions listed for pricing at most (beyond, pricing scans K x K candidates).
PAIRS_LIMIT = 30_000_000
#: Without ``max_changed_variables`` the general design at census scale uses the transitions that
#: change at most this many identifying variables: pricing every K x K candidate took longer than
#: 25 minutes on the 4-key census sample, and the flow relaxation's fewest changes at the floor
#: 0.51 there is the same with every transition allowed as with these (benchmarks/README.md).
NEAR_CHANGED = 2
#: Up to this many permitted transitions the program with a flow per transition is solved
#: at once (14-29 s on the 4-key census sample's 1.28 million with d = 2, where the design
#: refined from its optimum ended at a loss 1.3% below the one refined from the routed flows:
#: benchmarks/README.md); above, the routed flows come first.
EDGE_FLOWS_FIRST = 2_000_000
#: Above this many permitted transitions, where the flow relaxation's optimum does not travel
#: along them alone, the program with a flow per transition is left out (its rounds took
#: longer than 28 minutes over the 9.8 million of the 6-key census sample with d = 2).
EDGE_FLOWS_MAX_PAIRS = 5_000_000
#: Seeds of the first support: each cell's largest permitted senders and, for a rare cell, its
#: largest permitted receivers.
SEEDS_PER_CELL = 4


def seeds(problem: DesignProblem, pairs, per_cell: int = SEEDS_PER_CELL) -> Support:
    """The first support: the diagonal, each cell's ``per_cell`` largest senders among its
    permitted transitions (inflow raises C1's denominators) and each rare cell's ``per_cell``
    largest receivers (outflow lowers its own share of its groups)."""
    K = problem.K
    r, c = pairs
    counts = problem.counts
    pick_in = smallest_per_key(c, -counts[r], per_cell)  # senders into each cell, largest first
    rare = np.flatnonzero(counts[r] < 1.0 / problem.alpha)
    pick_out = rare[smallest_per_key(r[rare], -counts[c[rare]], per_cell)]
    pick = np.concatenate([pick_in, pick_out])
    return Support.from_pairs(r[pick], c[pick], K)


def _relaxed_flows(
    problem: DesignProblem, floor: float, pairs, trace: Trace, name: str = "flows"
) -> EdgeFlows:
    """The flow relaxation's fewest changes over the permitted transitions (its flows seed the
    support: they already meet every C1 denominator, and the exact rows differ from them only
    by each rare cell's own transitions within its groups).

    Above :data:`EDGE_FLOWS_FIRST` transitions, first the relaxation without the transitions'
    flows, routed by a maximum flow
    (:func:`~pramopt.optimize.edge_flows.routed_flows`, seconds); where its optimum does not
    travel along permitted transitions alone, the program with a flow per permitted transition
    by column generation (:func:`~pramopt.optimize.edge_flows.edge_flows`, minutes), from the
    routed flows, up to :data:`EDGE_FLOWS_MAX_PAIRS` transitions; beyond, the routed part seeds
    the linear stage and the bound is the relaxation's without flows (still a bound).
    """
    with trace.stage(f"{name}@{floor:g}") as info:
        # (up to EDGE_FLOWS_FIRST transitions the column generation takes seconds, and its
        # optimum led to the smaller loss on the one sample measured)
        routed = None if pairs[0].size <= EDGE_FLOWS_FIRST else routed_flows(problem, floor, pairs)
        if routed is not None and routed.routed >= 1.0 - ROUTE_SLACK:
            info["detail"] = (
                f"the relaxation's optimum routed along the permitted transitions (maximum "
                f"flow): {routed.rows.size:,} transitions carry records, changes >= "
                f"{routed.bound:.5g}"
            )
            return routed
        if routed is not None and pairs[0].size > EDGE_FLOWS_MAX_PAIRS:
            info["detail"] = (
                f"{routed.routed:.2%} of the relaxation's records routed along the permitted "
                f"transitions: {routed.rows.size:,} transitions carry records, changes >= "
                f"{routed.bound:.5g} (no program with a flow per transition above "
                f"{EDGE_FLOWS_MAX_PAIRS:,} of them)"
            )
            return routed
        start = None if routed is None else _pair_index(problem, pairs, routed.rows, routed.cols)
        flows = edge_flows(problem, floor, pairs, seeds=start)
        if flows.status != "ok":
            info["detail"] = flows.status
        elif flows.no_solution:
            info["detail"] = f"no solution: a C1 row keeps a slack of {flows.slack:.3g}"
        else:
            low = "unknown" if flows.bound is None else f"{flows.bound:.5g}"
            info["detail"] = (
                f"{flows.rows.size:,} transitions carry records, changes >= {low} "
                f"({flows.rounds} pricing rounds)"
            )
    return flows


def _pair_index(problem: DesignProblem, pairs, rows, cols) -> np.ndarray:
    """Positions in ``pairs`` (ordered by row then column) of the transitions ``rows, cols``
    (each one of them), with each cell's largest permitted senders and receivers."""
    from ..edge_flows import EDGE_SEEDS, edge_seeds

    pr, pc = (np.asarray(a, dtype=np.int64) for a in pairs)
    key = pr * problem.K + pc
    pos = np.searchsorted(key, np.asarray(rows, dtype=np.int64) * problem.K + cols)
    return np.union1d(pos, edge_seeds(problem.counts, pr, pc, EDGE_SEEDS))


def _no_flows(problem: DesignProblem, gamma: float, floor: float, pairs, flows) -> Attempt:
    """INFEASIBLE, proven by the flow relaxation: no flows over the permitted transitions meet
    every C1 row at this floor (phase one's bound on the least total slack is above 0, or, from
    the penalised program, the bound on its optimum above n), so no design does (every such
    design is a point of the relaxation with no slack and at most n changes)."""
    d = problem.max_changed
    return Attempt(
        AttemptStatus.INFEASIBLE,
        gamma=gamma,
        detail=f"No design that changes at most {d} variables per record and keeps every "
        f"diagonal entry >= {floor:g} satisfies C1: the flow relaxation of C1 over the "
        f"{pairs[0].size:,} permitted transitions has no solution (a C1 row keeps a slack of "
        f"{flows.slack:.3g} at its optimum). Allow more changed variables or a lower "
        "min_diagonal, or coarsen the keys.",
    )


def solve_at_scale(
    problem: DesignProblem, level: float, trace: Trace, floor: float, g_low: float
) -> Attempt:
    """The general design at floor ``g_low`` (the lowest the user allows), sparse throughout;
    without ``max_changed_variables``, over the transitions that change at most
    :data:`NEAR_CHANGED` variables (:func:`_near`)."""
    if problem.max_changed is None:
        near = _near_problem(problem)
        if near.max_changed is not None:
            return _near(problem, near, level, trace, floor, g_low)
    return _at_scale(problem, level, trace, floor, g_low)


def _near_problem(problem: DesignProblem) -> DesignProblem:
    """``problem`` with at most :data:`NEAR_CHANGED` changed variables; its permitted transitions
    are cached with ``problem``'s own, so that every floor tried lists them once."""
    return dataclasses.replace(
        problem,
        params=dataclasses.replace(problem.params, max_changed_variables=NEAR_CHANGED),
        _pairs=problem._pairs.setdefault(f"within {NEAR_CHANGED}", {}),
    )


def _near(
    problem: DesignProblem,
    near: DesignProblem,
    level: float,
    trace: Trace,
    floor: float,
    g_low: float,
) -> Attempt:
    """The general design of ``problem`` (no ``max_changed_variables``) made over the
    transitions of ``near`` (the same problem with at most :data:`NEAR_CHANGED` changed
    variables): a design of the whole class, whose linear stage is judged against the bound of
    the whole class (the flow relaxation at the floor, every transition allowed); the bounds of
    the restricted class do not hold for designs that change more variables."""
    low = max(g_low, floor)
    whole = None
    if not problem.params.change_weights:  # (otherwise the linear stage's cost is not changes)
        whole = _whole_bound(problem, low, trace, "any transition")
    att = _at_scale(near, level, trace, floor, g_low, whole=(whole,))
    if att.status in (AttemptStatus.INFEASIBLE, AttemptStatus.UNPROVEN):
        # proven at most for the restricted class: not a proof for the whole one
        why = (
            "At this size the general design uses the transitions that change at most "
            f"{NEAR_CHANGED} identifying variables, and none was found there: {att.detail} "
            "A general design that changes more variables may exist (structure='general' with "
            "max_changed_variables tries another number)."
        )
        return Attempt(AttemptStatus.UNPROVEN, gamma=g_low, auto_reason=why, detail=why)
    if not att.ok:
        return att
    why = (
        f"Diagonal floor gamma = {g_low:g}: {_why_sparse(problem, g_low)} the general design "
        "starts sparse at the lowest floor allowed (no search for the largest floor), over the "
        f"transitions that change at most {NEAR_CHANGED} identifying variables "
        "(max_changed_variables sets another number)."
    )
    return dataclasses.replace(att, describe=why)


def _at_scale(
    problem: DesignProblem,
    level: float,
    trace: Trace,
    floor: float,
    g_low: float,
    whole: tuple | None = None,
) -> Attempt:
    """The general design at floor ``g_low`` over the permitted transitions; ``whole``: the
    design stands for a wider class (:func:`_near`), whose bound ``whole[0]`` replaces the
    restricted class's (the flows' and the linear stage's own)."""
    from .general import solve_general

    pairs = None
    init = None
    mode = None
    if problem.max_changed is not None:
        with trace.stage("permitted transitions") as info:
            pairs = problem.allowed_pairs(PAIRS_LIMIT)
            info["detail"] = (
                f"more than {PAIRS_LIMIT:,}: pricing scans every candidate"
                if pairs is None
                else f"{pairs[0].size:,} that change at most {problem.max_changed} variables"
            )
    low = max(g_low, floor)
    bound = None
    near = None
    # with d above NEAR_CHANGED the design within NEAR_CHANGED comes first (_near_start)
    above_near = problem.max_changed is not None and problem.max_changed > NEAR_CHANGED
    if pairs is not None:
        mode = "diagonal"
        flows = _relaxed_flows(problem, low, pairs, trace)
        solved = flows.status == "ok"
        if solved and flows.no_solution:
            return _no_flows(problem, g_low, low, pairs, flows)
        if solved:
            # (with change_weights the linear stage minimises another cost: no fewest changes
            # to set a bound beside)
            bound = None if problem.params.change_weights else flows.bound
            if above_near:
                near = _near_start(problem, _within(problem, pairs, NEAR_CHANGED), low, trace)
        if near is None:  # (else the linear stage starts from the near start's support)
            init = seeds(problem, pairs)
            if solved:
                init = init.union(flows.rows, flows.cols)
    elif above_near:
        near = _near_listed(problem, low, trace)
        if near is not None:
            mode = "diagonal"
            if not problem.params.change_weights:
                bound = _whole_bound(problem, low, trace, f"within {problem.max_changed}")
    if whole is not None:
        bound = whole[0]
    att = solve_general(
        problem,
        g_low,
        low,
        level,
        trace,
        init=init if near is None else near[1],
        elastic=True,
        pairs=pairs if near is None else near[0],
        mode=mode,
        floor_bound=bound,
        # the linear stage's own bound holds for its transitions only
        own_bounds=whole is None and near is None,
        wide_pairs=None if near is None else pairs,
        near=NEAR_CHANGED,
        wide_scan=near is not None and pairs is None,
    )
    if att.status is AttemptStatus.OK:
        why = (
            f"Diagonal floor gamma = {g_low:g}: {_why_sparse(problem, g_low)} the general design "
            "starts sparse at the lowest floor allowed (no search for the largest floor)."
        )
        if near is not None:
            why += (
                f" Its linear stage and first refinement used the transitions that change at "
                f"most {NEAR_CHANGED} variables; a second refinement from that design prices "
                f"every transition within {problem.max_changed} (max_iter iterations in all)."
            )
        return dataclasses.replace(att, gamma=g_low, describe=why)
    return dataclasses.replace(att, gamma=g_low)


def _why_sparse(problem: DesignProblem, floor: float) -> str:
    """Why the design starts sparse: its size, or (without ``max_changed_variables``) a floor
    below 1/2."""
    if floor < 0.5 and problem.K <= PHASE_ONE_MAX_CELLS:
        return "below 1/2"
    return f"with {problem.K} cells"


def _near_listed(problem: DesignProblem, floor: float, trace: Trace):
    """:func:`_near_start` where the permitted transitions are too many to list (more than
    :data:`PAIRS_LIMIT`): those within :data:`NEAR_CHANGED` variables are listed on their own
    (None where they too are too many), and the second refinement prices every permitted
    transition by scanning the candidates."""
    near = _near_problem(problem)
    with trace.stage(f"transitions within {NEAR_CHANGED}") as info:
        pairs = near.allowed_pairs(PAIRS_LIMIT)
        info["detail"] = "too many" if pairs is None else f"{pairs[0].size:,}"
    return None if pairs is None else _near_start(problem, pairs, floor, trace)


def _whole_bound(problem: DesignProblem, floor: float, trace: Trace, what: str) -> float | None:
    """The flow relaxation's fewest changes at ``floor`` (a bound for every design of the
    problem's class: :func:`pramopt.optimize.relaxation.changes_bound`), traced as the changes
    bound over ``what``."""
    from ..relaxation import changes_bound

    with trace.stage(f"changes bound, {what}@{floor:g}") as info:
        bound = changes_bound(problem, floor)
        info["detail"] = (
            "unknown"
            if bound is None
            else f"every design with all P_mm >= {floor:g} changes >= {bound:.5g}"
        )
    return bound


def _near_start(problem: DesignProblem, near, floor: float, trace: Trace):
    """With ``max_changed_variables`` above :data:`NEAR_CHANGED`: the transitions ``near``
    within :data:`NEAR_CHANGED` variables and the first support over them (seeds and the flow
    relaxation's flows), which the linear stage starts from; None when the flow relaxation over
    them has no solution at the floor.

    The linear stage over every permitted transition ends at a vertex with fewer changes that
    move more variables, from which the refinement (a local method) ended above the design
    within :data:`NEAR_CHANGED` on both census samples (benchmarks/README.md).  So the linear
    stage and a first refinement stay within :data:`NEAR_CHANGED`, and a second refinement goes
    on from that design over every permitted transition (:func:`.general.solve_general`).
    """
    flows = _relaxed_flows(problem, floor, near, trace, name=f"flows within {NEAR_CHANGED}")
    if flows.status != "ok" or flows.no_solution:
        return None
    return near, seeds(problem, near).union(flows.rows, flows.cols)


def _within(problem: DesignProblem, pairs, d: int) -> tuple:
    """The transitions of ``pairs`` that change at most ``d`` variables."""
    r, c = pairs
    keep = np.zeros(r.size, dtype=bool)
    step = 1 << 20  # (tens of millions of pairs: their codes a piece at a time)
    for lo in range(0, r.size, step):
        keep[lo : lo + step] = problem.within(r[lo : lo + step], c[lo : lo + step], d)
    return r[keep], c[keep]
