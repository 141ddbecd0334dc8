"""Sensitivity rules for magnitude tables (Domingo-Ferrer & Torra): another domain than PRAM.

* :mod:`.rules` -- the (n, k)-dominance, p%, pq and entropy rules, the coalition bound, and
  :func:`assess_cells` for many cells at once.
* :mod:`.constructions` -- the paper's counterexample cells (Lemma 1, equation (11),
  Constructions 1-4).

The ``pramopt sensitivity`` command is :mod:`pramopt.cli.sensitivity`.
"""

from .constructions import (
    CounterexampleCell,
    construction_1,
    construction_2,
    construction_3,
    construction_4,
    dominance_ratio,
    p_percent_ratio,
)
from .rules import (
    DEFAULT_TOL,
    CoalitionBound,
    assess_cells,
    coalition_bound,
    dominance,
    entropy,
    entropy_rule,
    p_percent,
    pq_rule,
)

__all__ = [
    "dominance",
    "p_percent",
    "pq_rule",
    "entropy",
    "entropy_rule",
    "coalition_bound",
    "CoalitionBound",
    "assess_cells",
    "CounterexampleCell",
    "dominance_ratio",
    "p_percent_ratio",
    "construction_1",
    "construction_2",
    "construction_3",
    "construction_4",
    "DEFAULT_TOL",
]
