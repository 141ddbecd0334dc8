"""What a design minimises, behind one small protocol, and the registry of objectives.

An objective gives its value on a whole matrix (the figure the designer ranks candidates by),
the cost per transition of its linear part (the linear stage's first-order model), and, for the
refinement, evaluators of value and gradient on a support or on the parameters of a block
design, with an optional curvature model.  Registered today: the exact L2 loss of the unbiased
estimator (``"l2"``, :mod:`.l2`, Cator et al., Section 3) and the L2 loss plus a cost per changed
identifying value (``"l2+changes"``, :mod:`.changes`).  A new loss is one module here
implementing :class:`Objective`, registered in :data:`OBJECTIVES` (and chosen in
:func:`objective_for`); ``tests/test_objective_contract.py`` checks every registered entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

__all__ = ["Objective", "Evaluator", "OBJECTIVES", "objective_for", "default_objective"]

#: ``evaluate(x) -> (value, gradient on the support entries, grad_columns)``; ``grad_columns``
#: (or None) maps column indices to the K x len(cols) gradient there, for pricing.  An evaluator
#: may also carry ``evaluate.value(x)``, the value alone (the refinement values trial points with
#: it and asks for the gradient only at the ones it accepts).  ``grad_columns`` may carry
#: ``grad_columns.at(rows, cols)``, the entries at pairs alone, which pricing over a list of
#: transitions then uses instead of whole columns.  An evaluator that keeps what it valued may
#: carry ``evaluate.keep(x)``: keep only ``x``'s, for the next support's evaluator
#: (``on_support``'s ``previous``).
Evaluator = Callable[[np.ndarray], tuple]


class Objective(Protocol):
    """A loss of a PRAM matrix."""

    name: str

    def value(self, P, counts, loss: float | None = None) -> float:
        """The objective of a whole matrix (``inf`` when it cannot be evaluated, e.g. singular).

        ``loss`` is P's exact L2 loss when the caller already has it: objectives built on the L2
        loss reuse it instead of recomputing it.
        """

    def linear_cost(self, rows, cols) -> np.ndarray | None:
        """Cost per moved record of the transitions ``(rows, cols)`` (any shape) in the linear
        part of the objective, in units of the L2 loss's first-order charge ``2/n^2`` per changed
        record: the linear part is ``(2/n^2) sum_m U0(m) sum_k P_mk linear_cost(m, k)``.  None
        when there is none (the L2 loss).  An objective with a linear part is the L2 loss plus
        that part: the linear stage models it by the L2 loss's first-order charge plus these."""

    def on_support(self, support, counts, sparse: bool, previous=None) -> Evaluator:
        """Value and gradient of x -> objective(P(x)) for P on ``support``.  ``previous``: an
        evaluator this objective made on another support of the same solve (the refinement's
        support changes between pricing rounds), whose valued matrices it may reuse."""

    def curvature_on_support(self, support, counts, sparse: bool) -> Callable | None:
        """``curvature(x, g) -> B``: a positive diagonal model of the Hessian on ``support``
        (curved refinement steps); None when there is no curvature model (linear steps)."""

    def on_blocks(self, model, counts) -> Evaluator:
        """Value and gradient in the parameters z of a block design (:mod:`..strategies.blocks`)."""


def _l2(params, table) -> Objective:
    return default_objective()


def _l2_changes(params, table) -> Objective:
    from .changes import WeightedChangesL2

    weights = params.change_weights
    return WeightedChangesL2(table.codes, np.array([float(weights.get(v, 0.0)) for v in table.qi]))


#: Every objective, by name: ``factory(params, table) -> Objective``.
OBJECTIVES: dict[str, Callable] = {"l2": _l2, "l2+changes": _l2_changes}


def objective_for(params, table) -> Objective:
    """The objective a :class:`~pramopt.params.DesignParams` asks for on ``table``: the exact L2
    loss, plus the weighted changes when ``change_weights`` is given (its names already checked)."""
    return OBJECTIVES["l2+changes" if params.change_weights else "l2"](params, table)


def default_objective() -> Objective:
    """The exact L2 loss."""
    from .l2 import L2

    return L2
