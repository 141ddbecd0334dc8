"""The general design refined from a verified design that already clears its floor.

A design of another structure whose every diagonal entry is at least a rung ``gamma`` of the
floor's ladder, and which meets C1, is itself a general design at that floor: it is what phase
one (a feasible floor) and the linear stage (a feasible start) are there to find.  From it the
general design needs only its refinement of the exact loss (:mod:`.general_refine`), which keeps
every iterate feasible and accepts only steps that lower the loss, so the design it returns is
never worse than its start.  The refinement ends by its own tests: a step whose model predicts
less than ``rtol`` of the loss on a support that holds what the previous step's multipliers
priced, and so on (:func:`.general_refine.refine_loss`).

Auto mode starts the general design so above ``START_MIN_CELLS`` cells where the replacement or
block design clears a rung (:func:`start_for`): on sdcMicro's testdata with 7 keys the refinement
from the linear stage's design ends above the replacement design after a dozen curved steps, and
from the replacement design below it after three (benchmarks/auto_testdata.py).
"""

from __future__ import annotations

import time

import numpy as np

from ..problem import PHASE_ONE_MAX_CELLS, DesignProblem, Trace
from ..support import Support
from . import Attempt, AttemptStatus
from .general import REFINE_MAX_ADD, ColumnGeneration, _reduction
from .phase_one import gamma_ladder

__all__ = ["refine_from", "start_for", "start_rung", "START_MIN_CELLS"]

#: Auto mode refines the general design from a verified design of another structure only above
#: this many cells: up to it the general design's support is dense (every pair of cells), its
#: linear stage is the full program and its refinement reaches the smaller loss from there.
START_MIN_CELLS = 300


class _FromStart(ColumnGeneration):
    """The general solve's state, with the largest support on which its refinement's steps stay
    curved (read by :func:`.general_refine.refine_loss`)."""

    qp_max: int | None = None


def start_rung(problem: DesignProblem, P) -> float | None:
    """The highest rung of the floor's ladder (from the requested ``gamma`` down, none below
    ``min_diagonal``) that every diagonal entry of ``P`` clears; None when none does."""
    p = problem.params
    floor = 0.0 if p.min_diagonal is None else p.min_diagonal
    low = float(np.min(P.diagonal())) if problem.K else 0.0
    rungs = [g for g in gamma_ladder(p.gamma, floor) if g <= low]
    return rungs[0] if rungs else None


def start_for(problem: DesignProblem, found: list, score) -> tuple:
    """The verified candidate of ``found`` (each a :class:`~..auto.Candidate`) to refine the
    general design from, and its rung: the one of smallest ``score`` among those whose diagonal
    clears a rung of the ladder; ``(None, None)`` when auto mode makes the general design as
    usual (at most ``START_MIN_CELLS`` or more than ``PHASE_ONE_MAX_CELLS`` cells, where the
    general design is made sparse over near transitions, ``max_changed_variables``, no such
    candidate)."""
    if (
        problem.K <= START_MIN_CELLS
        or problem.K > PHASE_ONE_MAX_CELLS
        or problem.max_changed is not None
    ):
        return None, None
    usable = [(c, start_rung(problem, c.P)) for c in found]
    usable = [(c, g) for c, g in usable if g is not None]
    if not usable:
        return None, None
    return min(usable, key=lambda cg: score(cg[0]))


def refine_from(
    problem: DesignProblem, level: float, trace: Trace, P0, gamma: float, name: str
) -> Attempt:
    """The general design at floor ``gamma``, refined from ``P0`` (a verified design of the
    structure ``name`` with every diagonal entry >= ``gamma``) at the working level ``level``.

    The support is ``P0``'s transitions; pricing with the loss's gradient widens it between
    steps, and the curved (QP) steps are kept on it whatever its size, so that the first step
    is priced by the multipliers of the model around ``P0`` itself.
    """
    p = problem.params
    floor = max(gamma, 0.0 if p.min_diagonal is None else p.min_diagonal)
    t0 = time.perf_counter()
    Pc = P0.tocoo()
    start = Support.from_pairs(Pc.row, Pc.col, problem.K)
    cg = _FromStart(problem, gamma, floor, level, init=start, mode="diagonal")
    x = cg.sup.from_matrix(P0)
    # rows the full check finds violated at the working level join the working set first
    new = cg.pending(cg.sup, x)
    if new:
        cg.ws.add(new)
    # room for a few pricing rounds above the start's own transitions
    cg.qp_max = cg.sup.size + 2 * max(REFINE_MAX_ADD, 2 * problem.K)
    trace.add(
        f"reduce@{gamma:g}",
        time.perf_counter() - t0,
        0,
        f"{cg.red.m.size} rows, start: the {name} design ({cg.sup.size} transitions)",
    )
    t_ref = time.perf_counter()
    loss_start = problem.objective.value(P0, problem.counts)
    x, its, info, stop = cg.refine(x, trace)
    loss_end = info.loss_end if info is not None else loss_start
    trace.add(
        "refine",
        time.perf_counter() - t_ref,
        its,
        f"from the {name} design, support {cg.sup.size}, stop: "
        f"{stop or (info.stop_reason if info is not None else 'no iteration')}, "
        f"objective {loss_start:.6g} -> {loss_end:.6g}",
    )
    return Attempt(
        AttemptStatus.OK,
        P=cg.sup.to_matrix(x),
        reduction=_reduction(cg, final=True),
        solver="CLARABEL(qp)" if info is not None and info.model == "quadratic" else "HIGHS",
        gamma=gamma,
        describe=(
            f"Diagonal floor gamma = {gamma:g}: the {name} design keeps every diagonal entry "
            f"above it, so the general design was refined from it (never to a larger objective)."
        ),
    )
