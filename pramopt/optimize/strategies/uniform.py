"""The uniform replacement design, the last resort: ``P = lam I + (1 - lam) 1 w^T`` per stratum.

Every cell that may move keeps its records with one probability ``lam`` and otherwise draws a
record of its stratum at random (``w`` proportional to the counts), so it honours every option
and is invertible for any retention (det = lam^(k-1) per stratum); the largest ``lam`` that
passes the full C1 check is found by bisection.
"""

from __future__ import annotations

import time

import numpy as np

from ...result import Reduction
from ...structured import ReplacementForm, form_or_none
from ..problem import DesignProblem, Trace
from . import Attempt, AttemptStatus, beyond_distance
from .blocks import LAMBDA_MIN
from .checks import check
from .replacement import REPLACEMENT_MAX_ENTRIES
from .replacement_form import replacement_condition, replacement_loss, replacement_matrix

__all__ = ["solve", "solve_uniform", "UNIFORM_STEPS"]


def solve(problem: DesignProblem, level: float, trace: Trace) -> Attempt:
    """The uniform design of largest retention that meets C1 at alpha itself (its bisection runs on
    the full check, so ``level`` is not used); INFEASIBLE when none does."""
    skipped = beyond_distance(problem, trace, "uniform", problem.strata)
    if skipped is not None:
        return skipped

    def verify(P):  # the bisection's checks are not stages of their own
        return check(problem, trace, P, stage=None)

    found = solve_uniform(problem, trace, verify)
    if found is None:
        return Attempt(
            AttemptStatus.INFEASIBLE, detail="No uniform replacement design satisfied C1."
        )
    return found


#: Bisection steps of the uniform design's retention (the largest verified one to 1/4096).
UNIFORM_STEPS = 12


def solve_uniform(problem: DesignProblem, trace: Trace, verify) -> Attempt | None:
    """The last resort: ``P = lam I + (1 - lam) 1 w^T`` per stratum over the cells that may move,
    with ``w`` proportional to their counts.

    It honours every option: transitions stay within strata and out of kept cells; it is
    invariant (each cell receives exactly what it sends, ``(1 - lam) U0(k)``); every diagonal
    entry is at least ``lam >= min_diagonal``; and it is invertible (det = lam^(k-1) per stratum).
    C1's left-hand sides grow with lam (a cell's share of its own groups is
    ``lam + (1 - lam) w(g)`` over a fixed denominator U(g)), so the largest lam that passes the full
    check is found by bisection; as lam -> 0 every risk tends to at most 1 / (records of the
    stratum).  ``verify(P)`` is that check.  Returns the design or None.
    """
    alpha, counts = problem.alpha, problem.counts
    pools = problem.strata
    move = ~problem.kept
    per_pool = np.bincount(pools, weights=move.astype(float))
    if float(per_pool @ per_pool) > REPLACEMENT_MAX_ENTRIES:
        return None
    tot = np.bincount(pools, weights=counts * move)[pools]
    w = np.where(move & (tot > 0), counts / np.where(tot > 0, tot, 1.0), 0.0)
    floor = max(LAMBDA_MIN, problem.params.min_diagonal or 0.0)

    def at(lam):
        o = np.where(move, 1.0 - lam, 0.0)
        return o, replacement_matrix(o, w, pools)

    t0 = time.perf_counter()
    o, P = at(floor)
    rep = verify(P)
    if not rep.max_risk <= alpha:
        trace.add("uniform", time.perf_counter() - t0, 0, f"fails C1 even at retention {floor:g}")
        return None
    lo, hi, best = floor, 1.0, (floor, o, P, rep)
    for _ in range(UNIFORM_STEPS):
        mid = 0.5 * (lo + hi)
        o, P = at(mid)
        r = verify(P)
        if r.max_risk <= alpha:
            lo, best = mid, (mid, o, P, r)
        else:
            hi = mid
    lam, o, P, rep = best
    trace.add("uniform", time.perf_counter() - t0, UNIFORM_STEPS, f"retention {lam:.4g}")
    red = Reduction(
        structure="replacement",
        blocks=int(np.unique(pools).size),
        min_lambda=float(lam),
        support=int(P.nnz),
        form=form_or_none(ReplacementForm.from_replacement, o, w, pools),
    )
    return Attempt(
        AttemptStatus.OK,
        P=P,
        reduction=red,
        solver=None,
        loss=replacement_loss(o, w, pools, counts),
        condition=replacement_condition(o, w, pools),
        describe=f"A uniform replacement design was made (each cell keeps its records with "
        f"probability {lam:.3g} and otherwise draws a record of its stratum at random; "
        "invertible for any retention).",
    )
