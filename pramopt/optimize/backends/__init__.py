"""Linear-program solvers behind one interface.

A backend loads a :class:`~pramopt.optimize.program.LinearProgram` and returns a
:class:`Loaded` program whose :meth:`Loaded.solve` sets the costs and bounds of the ``x``
columns and solves, returning an :class:`LPSolution` with an :class:`Outcome`.  Backends:

* :mod:`.highs` -- HiGHS through ``highspy`` directly (the default): warm-started re-solves,
  duals for column generation, fast infeasibility proofs;
* :mod:`.cvx` -- any LP solver that cvxpy can call (CLARABEL, ECOS, SCS, ...), imported only
  when used.

:func:`chain` puts them in a fallback chain: a solve that ends in :attr:`Outcome.ERROR` is
repeated by the next backend.  A new backend is one file here with a ``load`` function, and
one entry in :func:`chain`.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..program import Duals, LinearProgram

__all__ = ["Outcome", "LPSolution", "Duals", "Loaded", "chain", "solver_names", "known_solvers", "gives_duals",
           "FALLBACK_SOLVERS"]

#: cvxpy solvers tried, in this order, when HiGHS fails (measured on C1-shaped LPs; README).
FALLBACK_SOLVERS = ("CLARABEL", "ECOS", "SCS")


class Outcome(enum.Enum):
    """How a solve ended."""

    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    ERROR = "error"


@dataclass(frozen=True)
class LPSolution:
    """The result of one solve.

    ``x`` holds the ``x`` columns (``None`` unless optimal); ``objective`` is on the scale of
    the costs passed in, fixed costs of the other columns included; ``t`` is phase one's floor
    and ``slack`` the elastic slacks (empty without them).
    """

    outcome: Outcome
    x: np.ndarray | None
    solver: str | None
    seconds: float
    detail: str = ""
    objective: float | None = None
    t: float | None = None
    slack: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale: float = 1.0
    duals: Duals | None = None  # row duals returned with the solution (the QP backend)

    @property
    def status(self) -> str:
        """A short word for messages: optimal, infeasible or ``solver_error (...)``."""
        if self.outcome is Outcome.ERROR:
            return f"solver_error ({self.detail})"
        return self.outcome.value


class Loaded(Protocol):
    """A program loaded into a backend."""

    program: LinearProgram

    def solve(self, c, lo, hi) -> LPSolution: ...

    def duals(self) -> Duals | None:
        """Duals of the last optimal solve, or None when the backend gives none."""


def known_solvers() -> list[str]:
    """Names ``solver=`` accepts: HIGHS and every solver cvxpy can load here."""
    import cvxpy as cp

    return sorted(set(["HIGHS"]) | set(cp.installed_solvers()))


def solver_names(solver: str | None) -> list[str]:
    """The chain of solver names for ``solver=``: the user's choice only, or the default chain."""
    if solver is None:
        return ["HIGHS", *FALLBACK_SOLVERS]
    return [solver.upper()]


def gives_duals(solver: str | None) -> bool:
    """Whether the chain for ``solver=`` starts with a backend that gives duals (HiGHS direct)."""
    return solver_names(solver)[0] == "HIGHS"


class _Chain:
    """Solve with the first backend; on an error, load the program into the next and retry."""

    def __init__(self, program: LinearProgram, names: list[str]):
        self.program = program
        self._names = list(names)
        self._active = None
        self._errors: list[str] = []

    def _load(self, name: str):
        if name == "HIGHS":
            from .highs import load
            return load(self.program)
        from .cvx import load
        return load(self.program, name)

    def solve(self, c, lo, hi) -> LPSolution:
        t0 = time.perf_counter()
        while True:
            if self._active is None:
                if not self._names:
                    detail = "; ".join(self._errors) or "no solver available"
                    return LPSolution(Outcome.ERROR, None, None, time.perf_counter() - t0, detail)
                name = self._names.pop(0)
                try:
                    self._active = self._load(name)
                except ImportError as e:  # a solver that is not installed here: next one
                    self._errors.append(f"{name}: {e}")
                    continue
            out = self._active.solve(c, lo, hi)
            if out.outcome is not Outcome.ERROR:
                return out
            self._errors.append(out.detail)
            self._active = None

    def duals(self) -> Duals | None:
        return None if self._active is None else self._active.duals()


def chain(program: LinearProgram, solver: str | None) -> Loaded:
    """Load ``program`` for the solver chain of ``solver=`` (see :func:`solver_names`)."""
    return _Chain(program, solver_names(solver))
