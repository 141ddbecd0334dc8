"""Constraints of a design as linear rows over the support of P, behind one protocol.

A constraint gives its rows for a linear program (:func:`pramopt.optimize.program.build_program`
assembles them, in the order given), what those rows charge a transition outside the support
(column generation, :class:`pramopt.optimize.pricing.Pricer`), and the rows a whole matrix
violates (lazy row generation and the contract test).  Registered in :data:`CONSTRAINTS`:

* ``"c1"``: C1 of Cator et al. (:class:`.c1.C1Rows`);
* ``"epsilon"`` and ``"pk"``: the column-ratio rows of ε-DP and Pk-anonymity
  (:class:`.column_ratio.RatioBound`);
* ``"invariance"``: ``U0^T P = U0^T`` (:class:`.invariance.Invariance`).

A new risk constraint is one module here implementing :class:`Constraint`, registered in
:data:`CONSTRAINTS`; ``tests/test_objective_contract.py`` checks every registered entry against
an independent checker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.sparse as sp

__all__ = ["AUX_BLOCKS", "CONSTRAINTS", "Constraint", "Prices", "RowBlock"]

#: The auxiliary column blocks a constraint may add after the ``x`` columns, in program order
#: (``t``, phase one's floor, sits between ``L`` and ``s``): ``D`` quantities the rows define
#: (C1's denominators), ``L`` one level per cell and bound (column ratios), ``s`` elastic slacks.
AUX_BLOCKS = ("D", "L", "s")


@dataclass(frozen=True)
class RowBlock:
    """Rows ``lo <= sum_b mats[b] y_b <= hi`` of a program; ``mats`` maps a column block (``"x"``
    or one of :data:`AUX_BLOCKS`, the latter in the constraint's own columns) to its matrix."""

    name: str
    mats: dict
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class Prices:
    """What a constraint's rows charge a transition (m, k) outside the support, given the row
    duals ``y`` (reduced cost = c - A^T y): ``-U0(m) * per_column[k] - per_pair[m, k]`` (a None
    part charges nothing)."""

    per_column: np.ndarray | None = None
    per_pair: sp.spmatrix | None = None


class Constraint(Protocol):
    """Linear rows over the support of P."""

    name: str
    #: Risk rows come right after the row sums; other conditions on the design (invariance)
    #: after phase one's floor rows.
    risk: bool

    def columns(self, support, elastic: bool) -> dict:
        """Widths of the auxiliary column blocks it adds over ``support``, by name
        (:data:`AUX_BLOCKS`)."""

    def rows(self, support, elastic: bool) -> list:
        """Its :class:`RowBlock` list over ``support`` (``elastic``: with slacks, where it has
        any)."""

    def prices(self, duals) -> Prices | None:
        """Its pricing terms from the row duals of a solve
        (:meth:`pramopt.optimize.program.Duals.of` its row blocks' names); None when it cannot
        price a transition outside the support (it needs a dense support)."""

    def violated(self, P) -> np.ndarray:
        """Keys of its rows (over every pair of cells) that the whole matrix ``P`` violates."""


def _c1(*args, **kw):
    from .c1 import C1Rows

    return C1Rows(*args, **kw)


def _epsilon(epsilon: float):
    from .column_ratio import epsilon_bound

    return epsilon_bound(epsilon)


def _pk(r: float, scale=None):
    from .column_ratio import RatioBound

    return RatioBound(r, scale, "pk")


def _invariance(counts):
    from .invariance import Invariance

    return Invariance(counts)


#: Every constraint, by name: its factory.
CONSTRAINTS: dict[str, Callable] = {
    "c1": _c1,
    "epsilon": _epsilon,
    "pk": _pk,
    "invariance": _invariance,
}
