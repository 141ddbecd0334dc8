"""What every solve through :mod:`pramopt.optimize.backends` returns.

:class:`Solution` is the shared base: how the solve ended (:class:`Outcome`), the point, the
objective, the solver's name, its time and its message.  :class:`LPResult` adds the marginals of
a one-shot linear program (:func:`pramopt.optimize.backends.solve_lp`); :class:`LPSolution` adds
what a loaded program's solve (:func:`pramopt.optimize.backends.chain`) and a QP
(:func:`pramopt.optimize.backends.solve_qp`) return: phase one's floor, the elastic slacks, the
cost scale and the row duals by block.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: the programs' module uses this door (no import cycle)
    from ..program import Duals

__all__ = ["Outcome", "Solution", "Marginals", "LPResult", "LPSolution"]


class Outcome(enum.Enum):
    """How a solve ended."""

    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    ERROR = "error"


@dataclass(frozen=True)
class Solution:
    """The result of one solve.

    ``x`` is ``None`` unless optimal; ``objective`` is on the scale of the costs passed in;
    ``detail`` is the solver's message (for an error, what went wrong).
    """

    outcome: Outcome
    x: np.ndarray | None
    solver: str | None
    seconds: float
    detail: str = ""
    objective: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the solve ended optimal."""
        return self.outcome is Outcome.OPTIMAL

    @property
    def status(self) -> str:
        """A short word for messages: optimal, infeasible, unbounded or ``solver_error (...)``."""
        if self.outcome is Outcome.ERROR:
            return f"solver_error ({self.detail})"
        return self.outcome.value


@dataclass(frozen=True)
class Marginals:
    """Sensitivities of a one-shot LP's optimal objective (``d objective / d right-hand side``).

    ``ineqlin`` per row of ``A_ub`` (<= 0: a larger bound can only help a minimisation),
    ``eqlin`` per row of ``A_eq``, ``lower`` and ``upper`` per variable bound.
    """

    ineqlin: np.ndarray
    eqlin: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@dataclass(frozen=True)
class LPResult(Solution):
    """A one-shot LP's result: ``x`` holds every variable; ``marginals`` is set when optimal on a
    backend that gives duals (:attr:`BackendInfo.duals`), ``None`` otherwise."""

    marginals: Marginals | None = None


@dataclass(frozen=True)
class LPSolution(Solution):
    """A loaded program's solve (or a QP's).

    ``x`` holds the ``x`` columns (``None`` unless optimal); ``objective`` includes the fixed
    costs of the other columns; ``t`` is phase one's floor and ``slack`` the elastic slacks
    (empty without them); ``duals`` are row duals returned with the solution (the QP backend).
    """

    t: float | None = None
    slack: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale: float = 1.0
    duals: Duals | None = None
