"""What a design minimises, behind one small protocol.

An objective gives its value on a whole matrix (the figure reported in the result) and, for
the refinement, an evaluator of value and gradient on a support or on the parameters of a
block design.  The only objective today is the exact L2 loss of the unbiased estimator
(:mod:`.l2`, Cator et al., Section 3).  A new loss (for example the paper's KL) is one file
here implementing :class:`Objective`, passed as ``DesignProblem.objective``.
"""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

#: ``evaluate(x) -> (value, gradient on the support entries, grad_columns)``; ``grad_columns``
#: (or None) maps column indices to the K x len(cols) gradient there, for pricing.
Evaluator = Callable[[np.ndarray], tuple]


class Objective(Protocol):
    """A loss of a PRAM matrix."""

    name: str

    def value(self, P, counts) -> float:
        """The loss of a whole matrix (``inf`` when it cannot be evaluated, e.g. singular)."""

    def on_support(self, support, counts, sparse: bool) -> Evaluator:
        """Value and gradient of x -> loss(P(x)) for P on ``support``."""

    def on_blocks(self, model, counts) -> Evaluator:
        """Value and gradient in the parameters z of a block design (:mod:`..strategies.blocks`)."""


def default_objective() -> Objective:
    from .l2 import L2

    return L2
