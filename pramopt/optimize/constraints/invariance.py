"""Invariance: the design keeps the expected released counts, ``U0^T P = U0^T``.

Not a risk constraint but a condition on the design (``invariant=True``): ``K`` equality rows
``C x = U0`` with ``(C x)_k = (U0^T P)_k``, after phase one's floor rows in the program.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..support import Support

__all__ = ["Invariance", "column_mass_matrix"]

#: Relative tolerance of :meth:`Invariance.violated` on the released counts.
INVARIANCE_RTOL = 1e-9


def column_mass_matrix(support: Support, counts) -> sp.csr_matrix:
    """C with (C x)_k = (U0^T P)_k, for the invariance constraint U0^T P = U0^T."""
    counts = np.asarray(counts, dtype=float)
    return sp.csr_matrix(
        (counts[support.rows], (support.cols, np.arange(support.size))),
        shape=(support.K, support.size),
    )


@dataclass(frozen=True)
class Invariance:
    """``U0^T P = U0^T``, one row ``inv`` per cell (a :class:`~..constraints.Constraint`)."""

    counts: np.ndarray
    name = "invariance"
    risk = False

    def columns(self, support: Support, elastic: bool = False) -> dict:
        return {}

    def rows(self, support: Support, elastic: bool = False) -> list:
        from . import RowBlock

        counts = np.asarray(self.counts, dtype=float)
        return [RowBlock("inv", {"x": column_mass_matrix(support, counts)}, counts, counts)]

    def prices(self, duals):
        """The column of P[m, k] has U0(m) in row ``inv`` k: the dual of that row per column."""
        from . import Prices

        return Prices(per_column=duals.of("inv"))

    def violated(self, P) -> np.ndarray:
        """The cells k whose expected released count differs from U0(k)."""
        counts = np.asarray(self.counts, dtype=float)
        mass = np.asarray(sp.csr_matrix(P).T @ counts).ravel()
        return np.flatnonzero(np.abs(mass - counts) > INVARIANCE_RTOL * np.maximum(counts, 1.0))
