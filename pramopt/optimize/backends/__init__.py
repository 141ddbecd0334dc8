"""The LP and QP solvers behind one door.

Three ways in, each honouring ``solver=`` (a :class:`~pramopt.DesignParams` parameter):

* :func:`chain` loads a :class:`~pramopt.optimize.program.LinearProgram` and returns a
  :class:`Loaded` program whose :meth:`Loaded.solve` sets the costs and bounds of the ``x``
  columns and solves, returning an :class:`LPSolution`.  With ``solver=None`` it is a fallback
  chain: a solve that ends in :attr:`Outcome.ERROR` is repeated by the next backend.
* :func:`solve_lp` solves one LP given as matrices (scipy's ``linprog`` form) and returns an
  :class:`LPResult`.
* :func:`solve_qp` solves a convex QP over a loaded program's rows (an :class:`LPSolution`).

Which backend does what is data (:mod:`.registry`): :data:`BACKENDS` maps each name to a
:class:`BackendInfo`, and :func:`supports` answers for a ``solver=``.  Backends:

* :mod:`.highs` -- HiGHS (the default): highspy directly for loaded programs (warm-started
  re-solves, duals for column generation, fast infeasibility proofs), scipy's ``linprog`` for
  one-shot LPs;
* :mod:`.cvx` -- any LP solver that cvxpy can call (CLARABEL, ECOS, SCS, ...), imported only
  when used;
* :mod:`.clarabel_qp` -- Clarabel directly, for the refinement's QPs.

A new backend is one module here and one :func:`register` call in :mod:`.registry`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from .registry import (
    BACKENDS,
    CAPABILITIES,
    DEFAULT_QP,
    BackendInfo,
    backend,
    implementation,
    installed,
    register,
    supports,
)
from .results import LPResult, LPSolution, Marginals, Outcome, Solution

if TYPE_CHECKING:  # annotations only: the programs' module uses this door (no import cycle)
    from ..program import Duals, LinearProgram

__all__ = [
    "Outcome",
    "Solution",
    "LPSolution",
    "LPResult",
    "Marginals",
    "Loaded",
    "BackendInfo",
    "BACKENDS",
    "CAPABILITIES",
    "register",
    "backend",
    "supports",
    "installed",
    "chain",
    "solve_lp",
    "solve_qp",
    "solver_names",
    "known_solvers",
    "FALLBACK_SOLVERS",
]

#: cvxpy solvers tried, in this order, when HiGHS fails (measured on C1-shaped LPs; README).
FALLBACK_SOLVERS = ("CLARABEL", "ECOS", "SCS")


class Loaded(Protocol):
    """A program loaded into a backend."""

    program: LinearProgram

    def solve(self, c, lo, hi) -> LPSolution: ...

    def duals(self) -> Duals | None:
        """Duals of the last optimal solve, or None when the backend gives none."""


def known_solvers() -> list[str]:
    """Names ``solver=`` accepts: every registered LP backend installed here and every solver
    cvxpy can load here."""
    import cvxpy as cp

    mine = {name for name, info in BACKENDS.items() if info.lp and installed(name)}
    return sorted(mine | set(cp.installed_solvers()))


def solver_names(solver: str | None) -> list[str]:
    """The chain of solver names for ``solver=``: the user's choice only, or the default chain."""
    if solver is None:
        return ["HIGHS", *FALLBACK_SOLVERS]
    return [solver.upper()]


def _lp_backend(name: str) -> BackendInfo:
    info = backend(name)
    if not info.lp:
        lp = ", ".join(n for n, b in BACKENDS.items() if b.lp)
        raise ValueError(
            f"The solver {name!r} solves no linear programs; LP solvers: {lp} or a cvxpy solver."
        )
    return info


class _Chain:
    """Solve with the first backend; on an error, load the program into the next and retry."""

    def __init__(self, program: LinearProgram, names: list[str]):
        self.program = program
        self._names = list(names)
        self._active: Loaded | None = None
        self._errors: list[str] = []

    def _load(self, name: str):
        info = _lp_backend(name)
        return implementation(info).load(self.program, info.name)

    def solve(self, c, lo, hi) -> LPSolution:
        t0 = time.perf_counter()
        while True:
            if self._active is None:
                if not self._names:
                    detail = "; ".join(self._errors) or "no solver available"
                    secs = time.perf_counter() - t0
                    return LPSolution(Outcome.ERROR, None, None, secs, detail)
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


def solve_lp(
    c,
    A_ub=None,
    b_ub=None,
    A_eq=None,
    b_eq=None,
    bounds=None,
    *,
    solver: str | None = None,
    method: str = "highs",
    options: dict | None = None,
) -> LPResult:
    """Minimise ``c . x`` subject to ``A_ub x <= b_ub``, ``A_eq x = b_eq`` and ``bounds``.

    Parameters
    ----------
    c, A_ub, b_ub, A_eq, b_eq, bounds
        As for :func:`scipy.optimize.linprog` (dense or sparse matrices; ``bounds`` ``None``
        means ``x >= 0``).
    solver : str, optional
        ``solver=`` of the design: ``None`` or ``"HIGHS"`` is HiGHS through scipy's ``linprog``,
        another name a registered backend or a cvxpy solver.  No fallback: the named solver's
        outcome is the answer.
    method : str
        HiGHS's algorithm, as ``linprog``'s ``method`` (``"highs"``, ``"highs-ds"``,
        ``"highs-ipm"``); other backends choose their own.
    options : dict, optional
        Passed to HiGHS (``linprog``'s ``options``); other backends use their own settings.

    Returns
    -------
    LPResult
        ``marginals`` are set when optimal on a backend that gives duals
        (``supports(solver, "duals")``).
    """
    info = _lp_backend("HIGHS" if solver is None else solver)
    return implementation(info).solve_lp(
        c, A_ub, b_ub, A_eq, b_eq, bounds, name=info.name, method=method, options=options
    )


def solve_qp(
    program: LinearProgram, cost, hdiag, lo, hi, *, solver: str | None = None, **options
) -> LPSolution:
    """Minimise ``cost . x + 1/2 x' H x`` over ``program``'s rows with ``lo <= x <= hi`` on the
    backend ``solver`` names (``None``: :data:`~.registry.DEFAULT_QP`); ``options`` are the
    backend's (see :func:`.clarabel_qp.solve_qp`)."""
    info = backend(solver, default=DEFAULT_QP)
    if not info.qp:
        qp = ", ".join(n for n, b in BACKENDS.items() if b.qp)
        raise ValueError(
            f"The 'solver' parameter of solve_qp must name a QP backend ({qp}); got {solver!r}."
        )
    return implementation(info).solve_qp(program, cost, hdiag, lo, hi, **options)
