"""The exact L2 loss plus a cost per changed identifying value (``change_weights``).

Near the identity, with ``P = I + E`` (rows of E sum to zero), ``Q = P^-1 = I - E + O(E^2)``,
``||row_l(Q)||^2 = 1 - 2 E_ll + O(E^2)`` and ``(U0^T P)_l = U0(l) + (U0^T E)_l``, so

    L2(P) = (1/n^2) sum_l ||row_l(Q)||^2 (U0^T P)_l - 1/n = (2/n^2) sum_m U0(m) (1 - P_mm) + O(E^2):

the L2 loss charges 2/n^2 for each record changed in expectation.  With weights ``w_j >= 0`` the
designer minimises

    L2(P) + (2/n^2) sum_m U0(m) sum_{k != m} P_mk h_w(m, k),   h_w(m, k) = sum_j w_j [m_j != k_j],

that is, the exact loss plus 2/n^2 times the expected weighted number of changed values: a change
of a variable of weight 1 costs what the L2 loss charges for a whole changed record, one of weight
5 five times that.  The term is linear in P, so the Hessian (:mod:`.l2_curvature`) is the L2
loss's, and the linear stage minimises ``sum_m U0(m) sum_{k != m} P_mk (1 + h_w(m, k))``, the
same first-order model.  The result's ``loss`` stays the exact L2 loss.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .l2 import L2Loss

__all__ = ["WeightedChangesL2", "change_cost"]


def change_cost(codes: np.ndarray, weights: np.ndarray, rows, cols) -> np.ndarray:
    """``h_w(rows[i], cols[i]) = sum_j w_j [codes[rows[i], j] != codes[cols[i], j]]`` (any
    shape)."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    return (codes[rows] != codes[cols]) @ weights


class WeightedChangesL2(L2Loss):
    """The exact L2 loss plus ``(2/n^2)`` times the expected weighted number of changed values.

    Parameters
    ----------
    codes : ndarray, shape (K, d)
        The cells' codes.
    weights : ndarray, shape (d,)
        ``w_j >= 0`` per identifying variable.
    """

    name = "l2+changes"

    def __init__(self, codes: np.ndarray, weights: np.ndarray):
        self.codes = np.asarray(codes)
        self.weights = np.asarray(weights, dtype=float)

    def linear_cost(self, rows, cols) -> np.ndarray:
        """``h_w(rows, cols)``: the weighted number of values a transition changes."""
        return change_cost(self.codes, self.weights, rows, cols)

    def term(self, P, counts) -> float:
        """The added term ``(2/n^2) sum_m U0(m) sum_k P_mk h_w(m, k)`` of a whole matrix."""
        counts = np.asarray(counts, dtype=float)
        Pm = sp.coo_matrix(P)
        return float(
            2.0
            / counts.sum() ** 2
            * np.sum(counts[Pm.row] * Pm.data * self.linear_cost(Pm.row, Pm.col))
        )

    def value(self, P, counts, loss: float | None = None) -> float:
        return super().value(P, counts, loss) + self.term(P, counts)

    def on_support(self, support, counts, sparse: bool, previous=None):
        counts = np.asarray(counts, dtype=float)
        base = super().on_support(support, counts, sparse, previous)
        scale = 2.0 / counts.sum() ** 2
        lin = scale * counts[support.rows] * self.linear_cost(support.rows, support.cols)
        all_rows = np.arange(self.codes.shape[0])

        def evaluate(x):
            f, g, gcols = base(x)
            if g is None:
                return f, g, gcols

            def columns(cols):
                cols = np.asarray(cols)
                h = self.linear_cost(all_rows[:, None], cols[None, :])
                return gcols(cols) + scale * counts[:, None] * h

            base_at = getattr(gcols, "at", None)
            if base_at is not None:  # the entries at pairs alone, as the L2 loss gives them

                def at(rows, cols):
                    rows, cols = np.asarray(rows), np.asarray(cols)
                    return base_at(rows, cols) + scale * counts[rows] * self.linear_cost(rows, cols)

                columns.at = at
            return f + float(lin @ x), g + lin, (None if gcols is None else columns)

        for kept in ("designs", "keep"):  # the L2 loss's valued designs, for the next support
            if hasattr(base, kept):
                setattr(evaluate, kept, getattr(base, kept))
        base_value = getattr(base, "value", None)
        if base_value is not None:
            evaluate.value = lambda x: base_value(x) + float(lin @ x)  # type: ignore[attr-defined]
        return evaluate

    def curvature_on_support(self, support, counts, sparse: bool):
        """The L2 loss's (the added term is linear), at the L2 loss's part of the gradient."""
        counts = np.asarray(counts, dtype=float)
        base = super().curvature_on_support(support, counts, sparse)
        h = self.linear_cost(support.rows, support.cols)
        lin = 2.0 / counts.sum() ** 2 * counts[support.rows] * h

        def curvature(x, g=None):
            return base(x, None if g is None else g - lin)

        return curvature
