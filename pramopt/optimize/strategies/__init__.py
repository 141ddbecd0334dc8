"""How a design is found: each strategy turns a :class:`~pramopt.optimize.problem.DesignProblem`
into an :class:`Attempt` (a matrix, or why there is none), which the designer verifies.

The strategies (one module each, registered in :data:`STRATEGIES`):

* ``general`` (:mod:`.general`) -- any row-stochastic P with a diagonal floor above 1/2: phase one
  (:mod:`.phase_one`), then the linear stage with lazy rows and column generation and the
  refinement of the exact loss at the rungs of the floor's ladder;
* ``replacement`` (:mod:`.replacement`) -- a retention per cell and one replacement distribution
  per pool, from the flow relaxation;
* ``uniform`` (:mod:`.uniform`) -- one retention for every cell and the records' own distribution,
  the last resort;
* ``blocks`` (:mod:`.blocks`) -- block-diagonal retention-replacement designs for data where most
  cells are rare or unique;
* ``epsilon_k`` (:mod:`.dense_ratio`) -- dense designs under ε-DP and/or Pk-anonymity.

Shared pieces: :mod:`.refine` (the trust-region refinement), :mod:`.lazy` (C1's rows added as
they are found violated).

A strategy never verifies its final matrix for the designer: the designer checks every
Attempt it keeps.  A strategy whose own search must check matrices calls
:func:`.checks.check`, which caches the report by matrix on a :class:`.checks.CheckedTrace`, so
the designer's check of the same matrix costs nothing and adds no stage.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import scipy.sparse as sp

from ..._activity import activity
from ...result import Reduction

if TYPE_CHECKING:
    from ..problem import DesignProblem, Trace

__all__ = [
    "Attempt",
    "AttemptStatus",
    "Strategy",
    "StrategyEntry",
    "STRATEGIES",
    "STRUCTURES",
    "strategy",
    "beyond_distance",
]


class AttemptStatus(enum.Enum):
    """How a strategy ended."""

    OK = "ok"
    INFEASIBLE = "infeasible"
    #: no design found, none proven impossible (phase one's pricing rounds ran out)
    UNPROVEN = "unproven"
    SOLVER_ERROR = "solver_error"


@dataclass(frozen=True)
class Attempt:
    """A strategy's answer: the matrix (not yet verified by the designer) and how it was found.

    ``detail`` says why there is no matrix when the status is not OK (the message a failed design
    reports).  ``auto_reason``, on such an answer, is what auto mode says when it turns to the other
    structures (None: it does not turn).  The optional figures are those the strategy already
    has: the exact L2 loss and condition number (closed forms), the diagonal floor ``gamma``,
    ``describe`` (a sentence on the design for the result's message) and ``start`` (a feasible
    matrix it started from, which the dense epsilon/k design mixes with to repair the solver's
    tolerance).
    """

    status: AttemptStatus
    P: sp.csr_matrix | None = None
    reduction: Reduction | None = None
    solver: str | None = None
    detail: str = ""
    loss: float | None = None
    condition: float | None = None
    gamma: float | None = None
    describe: str = ""
    auto_reason: str | None = None
    start: object = None

    @property
    def ok(self) -> bool:
        return self.status is AttemptStatus.OK


class Strategy(Protocol):
    """One structure of design."""

    name: str

    def solve(self, problem: DesignProblem, level: float, trace: Trace) -> Attempt:
        """The design at the working level ``level`` (alpha * (1 - margin)), not yet verified."""


@dataclass(frozen=True)
class StrategyEntry:
    """A registered strategy: its module (imported when first solved) and how a design reaches it.

    ``label`` names the structure in messages.  ``structure``: a value of the ``structure``
    parameter asks for it alone; ``options``: the parameters that, when given, make the designer
    use it (the dense epsilon/k design); every other entry is reached through auto mode's policy
    (:mod:`pramopt.optimize.auto`).
    """

    name: str
    module: str
    summary: str
    label: str
    structure: bool = True
    options: tuple = ()

    def solve(self, problem: DesignProblem, level: float, trace: Trace) -> Attempt:
        """Its module's ``solve``, marked as the work in progress (the command line's heartbeat)."""
        solve = importlib.import_module(f"{__name__}.{self.module}").solve
        with activity(f"the {self.label.lower()} design"):
            return solve(problem, level, trace)


#: name -> strategy (auto mode's order is its policy's, :mod:`pramopt.optimize.auto`).
STRATEGIES = MappingProxyType(
    {
        e.name: e
        for e in (
            StrategyEntry(
                "general", "general", "any P with every diagonal entry above 1/2", "General"
            ),
            StrategyEntry(
                "blocks", "blocks", "block-diagonal retention-replacement blocks", "Block"
            ),
            StrategyEntry(
                "replacement",
                "replacement",
                "a retention per cell and one replacement distribution",
                "Replacement",
            ),
            StrategyEntry(
                "uniform",
                "uniform",
                "one retention and the records' own distribution",
                "Uniform",
                structure=False,
            ),
            StrategyEntry(
                "epsilon_k",
                "dense_ratio",
                "dense over the present cells, under epsilon and k",
                "Dense",
                structure=False,
                options=("epsilon", "k"),
            ),
        )
    }
)

#: The values of the ``structure`` parameter: auto mode, and every strategy one may ask for alone.
STRUCTURES = ("auto", *(n for n, e in STRATEGIES.items() if e.structure))


def strategy(name: str) -> StrategyEntry:
    """The registered strategy ``name``."""
    return STRATEGIES[name]


def beyond_distance(problem: DesignProblem, trace: Trace, name: str, pools) -> Attempt | None:
    """An INFEASIBLE attempt when ``max_changed_variables`` rules the structure out (pools of cells
    farther apart; ``pools`` None: always, where it restricts anything); the trace says so."""
    if pools is not None and problem.pools_within_distance(pools):
        return None
    if problem.max_changed is None:
        return None
    why = (
        f"skipped: its pools hold cells that differ in more than max_changed_variables = "
        f"{problem.params.max_changed_variables} variables"
    )
    trace.add(name, 0.0, 0, why)
    return Attempt(AttemptStatus.INFEASIBLE, detail=why)
