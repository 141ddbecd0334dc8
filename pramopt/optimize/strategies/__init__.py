"""How a design is found: each strategy turns a :class:`~pramopt.optimize.problem.DesignProblem`
into an :class:`Attempt` (a matrix, or why there is none), which the designer verifies.

* :mod:`.general` -- any row-stochastic P with a diagonal floor: the reduced linear stage with
  lazy rows and column generation, then the refinement of the exact loss;
* :mod:`.phase_one` -- the largest diagonal floor for which the reduced problem is feasible;
* :mod:`.blocks` -- block-diagonal retention-replacement designs for data where most cells are
  rare or unique;
* :mod:`.refine` -- the trust-region SLP shared by the general and block strategies.
* :mod:`.lazy` -- the linear stage and the refinement with C1's rows added as they are found
  violated (block and privacy strategies).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import scipy.sparse as sp

from ...result import Reduction

__all__ = ["Attempt", "AttemptStatus"]


class AttemptStatus(enum.Enum):
    """How a strategy ended."""

    OK = "ok"
    INFEASIBLE = "infeasible"
    SOLVER_ERROR = "solver_error"


@dataclass(frozen=True)
class Attempt:
    """A strategy's answer: the matrix (not yet verified) and how it was found.

    ``detail`` says why there is no matrix (the solver's message) when the status is not OK.
    """

    status: AttemptStatus
    P: sp.csr_matrix | None = None
    reduction: Reduction | None = None
    solver: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is AttemptStatus.OK
