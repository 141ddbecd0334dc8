"""The full C1 check of a strategy's matrices, each matrix checked once per design.

A strategy whose search must check matrices (the replacement design's margins, the uniform
design's bisection, the block sizes) calls :func:`check`; on the designer's
:class:`CheckedTrace` the report is kept by matrix, so the designer's own check of the matrix
it is handed costs nothing and adds no stage.
"""

from __future__ import annotations

import weakref

from ...verified_result import verify_stage
from ..problem import DesignProblem, Trace

__all__ = ["CheckedTrace", "check", "once"]


class CheckedTrace(Trace):
    """A :class:`~..problem.Trace` that remembers the full C1 check of every matrix it saw."""

    def __init__(self, progress=None) -> None:
        super().__init__(progress)
        self.reports: dict = {}
        self.known: dict = {}


def check(problem: DesignProblem, trace: Trace, P, stage: str | None = "verify"):
    """The full, unreduced C1 check of ``P`` (:func:`pramopt.verify.c1_risk`).

    ``stage`` names the trace stage it adds (None: none, for checks inside a search).  On a
    :class:`CheckedTrace` the report is kept by matrix: checking the same matrix again returns
    it and adds no stage.
    """
    cache = trace.reports if isinstance(trace, CheckedTrace) else None
    hit = None if cache is None else cache.get(id(P))
    if hit is not None and hit[0]() is P:
        return hit[1]
    rep, st = verify_stage(P, problem.table, problem.combos, stage or "verify")
    if stage is not None:
        trace.add(st.name, st.seconds, st.iterations, f"max risk {rep.max_risk:.6g}")
    if cache is not None:
        # a weak reference: the matrices a search discards are freed (an id may then be reused,
        # and the reference then no longer returns the matrix checked)
        cache[id(P)] = (weakref.ref(P), rep)
    return rep


def once(trace: Trace, key: str, compute):
    """``compute()``, made once per design on a :class:`CheckedTrace` (a bound that every margin's
    attempt uses, and its stage, come once), every time on another trace."""
    if not isinstance(trace, CheckedTrace):
        return compute()
    if key not in trace.known:
        trace.known[key] = compute()
    return trace.known[key]
