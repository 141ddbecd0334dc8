"""The general design at census scale: sparse from the first linear program, no phase one.

Phase one (:mod:`.phase_one`) looks for the largest diagonal floor over a support it widens by
scanning every K x K candidate; on thousands of rare cells its rounds take minutes and it may
stop without an answer.  Above ``PHASE_ONE_MAX_CELLS`` cells the general design skips it: the
linear stage (fewest expected changes) runs at the lowest floor the user allows, with C1's rows
elastic (a penalised slack per row) so that the restricted program is feasible from its first
solve, starting from the diagonal and a few seeds among each cell's permitted transitions.  Lazy
rows add every C1 row the full check finds violated; column generation prices, under
``max_changed_variables``, only the permitted transitions (listed once, never K x K of anything);
the refinement of the exact loss then runs as at any size.

If a row keeps a slack when nothing is left to add, no design was found on this path (the
attempt is UNPROVEN: the penalty is not proven exact); whether one can exist is the diagnosis's
to say (:func:`pramopt.optimize.diagnosis.distance_rules_out`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..backends import chain
from ..constraints.c1 import C1Rows
from ..constraints.invariance import Invariance
from ..problem import DesignProblem, Trace
from ..program import build_program
from ..support import Support
from . import Attempt, AttemptStatus

__all__ = [
    "solve_at_scale",
    "seeds",
    "floor_changes_bound",
    "BOUND_RTOL",
    "PHASE_ONE_MAX_CELLS",
    "PAIRS_LIMIT",
    "SEEDS_PER_CELL",
]

#: Above this many cells the general design skips phase one and starts sparse.
PHASE_ONE_MAX_CELLS = 600
#: Permitted transitions listed for pricing at most (beyond, pricing scans K x K candidates).
PAIRS_LIMIT = 30_000_000
#: The proven bound on the changes of floor-respecting designs is lowered by this fraction of the
#: records, for the solver's feasibility and optimality tolerances (1e-7).
BOUND_RTOL = 1e-6
#: Rounds of pricing the bound's own program may take (see :func:`floor_changes_bound`).
BOUND_ROUNDS = 5
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
    # senders into each column, largest first
    into = np.lexsort((-counts[r], c))
    rank_in = _rank_within(c[into])
    pick_in = into[rank_in < per_cell]
    rare = counts[r] < 1.0 / problem.alpha
    out_ = np.lexsort((-counts[c], r))
    out_ = out_[rare[out_]]
    rank_out = _rank_within(r[out_])
    pick_out = out_[rank_out < per_cell]
    pick = np.concatenate([pick_in, pick_out])
    return Support.from_pairs(r[pick], c[pick], K)


def _rank_within(sorted_keys: np.ndarray) -> np.ndarray:
    """Position of each entry within its run of equal keys (keys sorted)."""
    if sorted_keys.size == 0:
        return np.empty(0, dtype=np.int64)
    start = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    runs = np.diff(np.r_[start, sorted_keys.size])
    return np.arange(sorted_keys.size) - np.repeat(start, runs)


def solve_at_scale(
    problem: DesignProblem, level: float, trace: Trace, floor: float, g_low: float
) -> Attempt:
    """The general design at floor ``g_low`` (the lowest the user allows), sparse throughout."""
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
                else f"{pairs[0].size:,} within max_changed_variables = {problem.max_changed}"
            )
        if pairs is not None:
            init, mode = seeds(problem, pairs), "diagonal"
    att = solve_general(
        problem,
        g_low,
        max(g_low, floor),
        level,
        trace,
        init=init,
        elastic=True,
        pairs=pairs,
        mode=mode,
    )
    if att.status is AttemptStatus.OK:
        why = (
            f"Diagonal floor gamma = {g_low:g}: with {problem.K} cells the general design starts "
            "sparse at the lowest floor allowed (no search for the largest floor)."
        )
        return dataclasses.replace(att, gamma=g_low, describe=why)
    return dataclasses.replace(att, gamma=g_low)


def floor_changes_bound(cg) -> float | None:
    """A proven lower bound on the expected changes of every design meeting C1 at alpha with
    every diagonal entry >= ``cg.floor`` and only the transitions the solve ``cg`` (a
    :class:`~.general.ColumnGeneration` after its linear stage) permits.

    The restricted program at alpha itself (no margin) over the final support and working
    set is a relaxation of that problem's rows; the Lagrangian bound of every transition
    outside the support (pricing: each row of P sums to one) covers its columns; the
    solver's tolerance is allowed for by ``BOUND_RTOL`` of n.  None when there is no such
    bound here (no pricing, or ``change_weights``: the objective is not the changes).
    """
    pb = cg.problem
    if cg.phase_one or pb.params.change_weights or not (cg.widen or cg.mode == "dense"):
        return None
    inv = [Invariance(cg.counts)] if pb.params.invariant else []
    n = float(cg.counts.sum())
    sup = cg.sup
    best = 0.0
    # the duals of a degenerate optimum may price transitions the stage's own duals did not:
    # those join the support and the program is solved again (the bound only grows)
    for _ in range(BOUND_ROUNDS):
        rows = C1Rows(cg.ws.block(sup), pb.alpha, pb.groups, cg.mem, cg.ws)
        lp = chain(build_program(sup, [rows, *inv]), pb.params.solver)
        c, lo, hi = cg._vectors(sup)
        out = lp.solve(c, lo, hi)
        if out.x is None or out.objective is None:
            break
        bound, r = 0.0, np.empty(0)
        if cg.mode != "dense":
            duals = lp.duals()
            if duals is None:
                break
            tol = 1e-9 * out.scale
            r, cc, bound = cg.price(lp, duals, tol=tol)
            bound -= cg.problem.K * tol
        best = max(best, n + float(out.objective) + bound - BOUND_RTOL * n)
        if not r.size or -bound <= BOUND_RTOL * n:
            break
        sup = sup.union(r, cc)
    return best if best > 0 else None
