"""Weighted diagonal dominance: rows that make P invertible by its form at any diagonal floor.

Not a risk constraint but a condition on the design: with positive weights ``w``, the rows
``w_m P_mm - sum_{k != m} w_k P_mk >= margin * w_m`` make ``W^-1 P W`` (``W = diag(w)``)
strictly diagonally dominant by rows, so ``P``, which is similar to it, is invertible.  With
``w = 1`` and rows summing to one this is the floor ``P_mm > 1/2``; weights that fall with a
cell's count let a rare cell keep less than half its records while it sends them to larger
cells, which is where C1 needs its records to go.  The general design below the 1/2 floor
solves one program with these rows for a start of finite loss
(:func:`pramopt.optimize.strategies.general.solve_general`); it is not priced (its rows charge
a transition ``w_k`` times its row's dual, a product no pricing term has), so it is used over a
fixed support only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..support import Support

__all__ = ["Dominance", "count_weights"]


def count_weights(counts, power: float) -> np.ndarray:
    """``w_k = U0(k)^-power`` (cells of one record weigh 1)."""
    return np.maximum(np.asarray(counts, dtype=float), 1.0) ** -power


@dataclass(frozen=True)
class Dominance:
    """``w_m P_mm - sum_{k != m} w_k P_mk >= margin * w_m``, one row ``dom`` per cell (a
    :class:`~..constraints.Constraint`)."""

    weights: np.ndarray
    margin: float
    name = "dominance"
    risk = False

    def matrix(self, support: Support) -> sp.csr_matrix:
        """The rows' coefficients over ``support``: ``w_m`` on P_mm, ``-w_k`` on P_mk."""
        w = np.asarray(self.weights, dtype=float)
        diag = support.rows == support.cols
        vals = np.where(diag, w[support.cols], -w[support.cols])
        return sp.csr_matrix(
            (vals, (support.rows, np.arange(support.size))), shape=(support.K, support.size)
        )

    def columns(self, support: Support, elastic: bool = False) -> dict:
        return {}

    def rows(self, support: Support, elastic: bool = False) -> list:
        from . import RowBlock

        w = np.asarray(self.weights, dtype=float)
        return [
            RowBlock("dom", {"x": self.matrix(support)}, self.margin * w, np.full(w.size, np.inf))
        ]

    def prices(self, duals):
        """None: a transition's charge is its row's dual times its column's weight."""
        return None

    def violated(self, P) -> np.ndarray:
        """The cells whose row misses the margin."""
        P = sp.csr_matrix(P)
        w = np.asarray(self.weights, dtype=float)
        d = P.diagonal()
        lhs = 2.0 * w * d - np.asarray(P @ w).ravel()  # w_m P_mm - sum_{k != m} w_k P_mk
        return np.flatnonzero(~(lhs >= self.margin * w))
