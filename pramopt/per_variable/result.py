"""The result of a per-variable design: one labelled matrix per identifying variable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..frequency.table import FrequencyTable
from ..result import Status
from .check import ProductCheck, check_product_c1

__all__ = ["PerVariableDesign", "figures_of"]


@dataclass(frozen=True)
class PerVariableDesign:
    """One row-stochastic, invertible matrix per identifying variable, applied independently.

    A record of cell m is released as the combination k with probability ``prod_v
    M_v[m_v, k_v]`` over the whole product space of the categories (combinations absent from the
    data included); the variables not perturbed keep the identity.

    Attributes
    ----------
    table : FrequencyTable
        The data's present cells and counts.
    variable_matrices : dict of str to pandas.DataFrame
        Per identifying variable, the square matrix whose rows (original) and columns (released)
        are its categories as written in the data.
    perturbed : tuple of str
        The variables whose matrix may differ from the identity.
    combinations : tuple of tuples of str
        Π.
    alpha : float
    status : Status
    success : bool
        True only when the independent check (:func:`.check.check_product_c1`) of the full C1
        over the product space gives ``max_risk <= alpha``.
    message : str
    max_risk : float
        The independent check's largest left-hand side.
    loss : float
        The exact L2 loss of the unbiased estimator over the product space.
    expected_changes : float
        ``sum_m U0(m) (1 - prod_v M_v[m_v, m_v])``: records expected to change.
    changed_variables : float
        Identifying values changed per changed record, in expectation.
    epsilon : float or None
        Under ``epsilon``: the ε of the product, the sum of the matrices' ε (Ikarashi et al.,
        Corollary 1), measured.
    params : dict
        Every parameter of :func:`pramopt.design` that made it.
    details : dict
    stages : tuple of Stage
    """

    table: FrequencyTable
    variable_matrices: Mapping
    perturbed: tuple
    combinations: tuple
    alpha: float | None
    status: Status
    success: bool
    message: str
    max_risk: float
    loss: float
    expected_changes: float
    changed_variables: float
    epsilon: float | None = None
    params: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    stages: tuple = ()
    method: str = "per-variable"

    @property
    def qi(self) -> tuple:
        return tuple(self.table.qi)

    @property
    def n(self) -> int:
        return int(np.asarray(self.table.counts).sum())

    @property
    def combination_indices(self) -> tuple:
        qi = list(self.qi)
        return tuple(tuple(qi.index(v) for v in c) for c in self.combinations)

    def matrices(self) -> list[np.ndarray]:
        """The matrices in the table's codes (rows and columns in the order of its categories)."""
        return [self.variable_matrices[q].to_numpy(dtype=float, copy=True) for q in self.table.qi]

    def check(self) -> ProductCheck:
        """The full C1 checked again, independently, over the product space."""
        return check_product_c1(
            self.table.codes, self.table.counts, self.matrices(), self.combination_indices
        )

    def figures(self) -> dict:
        return figures_of(self)

    def summary(self) -> str:
        """One paragraph: status, risk, loss, changes and the matrices' diagonals."""
        lines = [
            f"per-variable design {self.status.value}: max risk {self.max_risk:.4g} "
            f"(alpha {self.alpha}){'' if self.epsilon is None else f', epsilon {self.epsilon:.4g}'}"
            f", exact L2 loss {self.loss:.4g}, expected changes "
            f"{self.expected_changes:.1f} of {self.n} records "
            f"({self.changed_variables:.2f} values per changed record).",
            self.message,
        ]
        for q in self.perturbed:
            d = np.diag(self.variable_matrices[q].to_numpy())
            lines.append(f"  {q}: diagonal {d.min():.3f} to {d.max():.3f}")
        return "\n".join(line for line in lines if line)


def figures_of(result: PerVariableDesign) -> dict:
    """The design's figures by name (JSON-safe)."""
    diag = {q: float(np.diag(result.variable_matrices[q].to_numpy()).min()) for q in result.qi}
    return {
        "status": result.status.value,
        "max_risk": float(result.max_risk),
        "epsilon": result.epsilon,
        "loss": float(result.loss),
        "expected_changes": float(result.expected_changes),
        "changed_variables_per_changed_record": float(result.changed_variables),
        "min_diagonal": min(diag.values()) if diag else 1.0,
        "n_records": result.n,
        "n_cells": int(len(result.table.counts)),
        "product_space": int(np.prod([len(c) for c in result.table.categories])),
    }


def labelled(table: FrequencyTable, v: int, M: np.ndarray) -> pd.DataFrame:
    """``M`` labelled by variable v's categories as written (rows original, columns released)."""
    cats = pd.Index(list(table.categories[v]), dtype=object)
    q = table.qi[v]
    return pd.DataFrame(
        np.asarray(M, dtype=float),
        index=pd.Index(cats, name=f"original {q}"),
        columns=pd.Index(cats, name=f"released {q}"),
    )


def expected_figures(table: FrequencyTable, mats) -> tuple[float, float]:
    """Expected changed records and identifying values changed per changed record."""
    U0 = np.asarray(table.counts, dtype=float)
    stay = np.ones(len(U0))
    values = np.zeros(len(U0))
    for v, M in enumerate(mats):
        d = np.diag(M)[table.codes[:, v]]
        stay *= d
        values += 1.0 - d
    changes = float(U0 @ (1.0 - stay))
    per = float(U0 @ values / changes) if changes > 0 else 0.0
    return changes, per
