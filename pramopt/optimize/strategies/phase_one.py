"""Phase one: the largest diagonal floor for which the reduced problem is feasible.

One linear program maximises a common lower bound t on every diagonal entry (with a small
tie-break towards keeping records), which tells the largest feasible floor in one solve rather
than by trying floors one after another.  Its C1 rows are elastic -- each has a penalised
slack -- so that a restricted support is never infeasible and can be priced; a positive slack
after pricing means the floor is infeasible for the full K x K program.  It stops as soon as
minus its objective plus the Lagrangian bound of the transitions it has not priced proves
every floor below the lowest rung, since the rows still to be imposed only lower it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..problem import DesignProblem, Trace
from ..support import Support
from .general import PHASE1_TIEBREAK, ColumnGeneration

__all__ = ["PhaseOne", "largest_floor", "PHASE1_TIEBREAK"]


@dataclass(frozen=True)
class PhaseOne:
    """Phase one's answer.

    ``status`` is ``"ok"`` (``t`` is a floor the reduced problem allows, up to
    ``PHASE1_TIEBREAK`` below the largest), ``"infeasible"`` (no floor of at least the lowest
    rung) or the solver's error.  ``support`` holds the transitions it used, for the
    linear stage to start from.
    """

    status: str
    t: float | None = None
    support: Support | None = None
    seconds: float = 0.0


def largest_floor(problem: DesignProblem, lowest: float, floor: float, a_solve: float, trace: Trace) -> PhaseOne:
    """Run phase one with the reduction at ``lowest`` (the lowest rung of the ladder)."""
    t0 = time.perf_counter()
    cg = ColumnGeneration(problem, lowest, floor, a_solve, phase_one=True)
    status, out, x, lp, _ = cg.linear(trace)
    secs = time.perf_counter() - t0
    if status != "ok":
        return PhaseOne(status, support=cg.sup, seconds=secs)
    if float(out.slack.max(initial=0.0)) > 1e-9:
        return PhaseOne("infeasible", support=cg.sup, seconds=secs)
    return PhaseOne("ok", t=float(np.min(x[cg.sup.diag])), support=cg.sup, seconds=secs)
