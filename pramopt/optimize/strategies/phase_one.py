"""Phase one: the largest diagonal floor for which the reduced problem is feasible.

The designer runs it only after :func:`pramopt.optimize.relaxation.flow_relaxation` has bounded
that floor from above in seconds.

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

from ...params import GAMMA_LADDER
from ..problem import DesignProblem, Trace
from ..relaxation import floor_bound
from ..support import Support
from .general import PHASE1_TIEBREAK, ColumnGeneration

__all__ = ["PhaseOne", "largest_floor", "gamma_ladder", "floor_bound_stage", "PHASE1_TIEBREAK"]


@dataclass(frozen=True)
class PhaseOne:
    """Phase one's answer.

    ``status`` is ``"ok"`` (``t`` is a floor the reduced problem allows, up to
    ``PHASE1_TIEBREAK`` below the largest), ``"infeasible"`` (proven: no floor of at least the
    lowest rung), ``"unproven"`` (the restricted program found no such floor within its pricing
    rounds, but the full one may have one) or the solver's error.  ``support`` holds the
    transitions it used, for the
    linear stage to start from.
    """

    status: str
    t: float | None = None
    support: Support | None = None
    seconds: float = 0.0


def largest_floor(
    problem: DesignProblem, lowest: float, floor: float, a_solve: float, trace: Trace
) -> PhaseOne:
    """Run phase one with the reduction at ``lowest`` (the lowest rung of the ladder)."""
    t0 = time.perf_counter()
    cg = ColumnGeneration(problem, lowest, floor, a_solve, phase_one=True)
    status, out, x, lp, _ = cg.linear(trace)
    secs = time.perf_counter() - t0
    if status != "ok":
        return PhaseOne(status, support=cg.sup, seconds=secs)
    t = float(np.min(x[cg.sup.diag]))
    if float(out.slack.max(initial=0.0)) > 1e-9 or t < lowest:
        # the restricted program misses the lowest rung; that proves it for the full program
        # only on a dense support or when the Lagrangian bound of its last pricing says so
        proven = not cg.widen or (cg.floor_proof is not None and cg.floor_proof < lowest - 1e-9)
        return PhaseOne("infeasible" if proven else "unproven", t=t, support=cg.sup, seconds=secs)
    return PhaseOne("ok", t=t, support=cg.sup, seconds=secs)


def gamma_ladder(gamma: float, floor: float) -> list[float]:
    """The floors tried in turn: ``gamma``, then the rungs of GAMMA_LADDER below it, none below
    ``floor``."""
    ladder = [gamma] + [g for g in GAMMA_LADDER if g < gamma]
    return [g for g in ladder if g >= floor] or [max(gamma, floor)]


def floor_bound_stage(problem: DesignProblem, trace: Trace, flows: bool = True) -> float | None:
    """The flow relaxation's bound on every diagonal floor (None: its solver failed), a stage;
    without ``flows``, without a flow per permitted transition (a weaker bound, still valid)."""
    with trace.stage("floor bound") as info:
        # seconds, where phase one on rare-heavy data takes minutes to reach the same conclusion
        relax = floor_bound(problem, edge_limit=None if flows else 0)
        info["detail"] = "solver failed" if relax is None else f"every floor <= {relax:.4g}"
    return relax
