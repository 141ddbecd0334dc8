"""Result objects of the designer (frozen, in the spirit of scipy's OptimizeResult)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .data import FrequencyTable


class Status(enum.Enum):
    """Outcome of :func:`pramopt.design`."""

    SUCCESS = "success"                  #: full C1 verified with max_risk <= alpha
    INFEASIBLE = "infeasible"            #: no design with the required diagonal floor exists
    INFEASIBLE_DATA = "infeasible_data"  #: C1 cannot hold for any P (n < 1/alpha)
    UNVERIFIED = "unverified"            #: the solver's answer failed the independent check
    SOLVER_ERROR = "solver_error"        #: every solver of the chain failed


@dataclass(frozen=True)
class Stage:
    """Time and iterations spent in one stage of the design."""

    name: str
    seconds: float
    iterations: int = 0
    detail: str = ""


@dataclass(frozen=True)
class DesignResult:
    """A PRAM design and everything needed to trust, apply and reproduce it.

    Attributes
    ----------
    matrix : ndarray of shape (K, K)
        P on the present cells (row: original cell, column: released cell).
    cells : pandas.DataFrame
        The K cells' values, in the matrix's order.
    counts : ndarray of shape (K,)
        U0, the frequency of each cell.
    status : Status
    success : bool
        True only when the full, unreduced C1 holds with ``max_risk <= alpha``, checked by
        :mod:`pramopt.verify` after cleaning.
    loss : float
        Exact L2 loss of the unbiased estimator (Cator et al., Section 3).
    expected_changes : float
        Expected number of records whose identifying values change.
    max_risk : float
        Largest left-hand side of (1) over all present m, all π, all k0.
    min_diagonal : float
    gamma : float or None
        Diagonal floor the final reduction relied on (None if no solve was needed).
    binding : pandas.DataFrame
        The (π, k0) whose worst left-hand side is within 1e-4 relative of the bound.
    reduction : dict
        Constraint counts before and after each reduction, and lazily added rows.
    solver : str or None
    stages : tuple of Stage
    condition_number : float
    message : str
        Why the status is what it is (which γ was used and why, or why it failed).
    """

    matrix: np.ndarray
    cells: pd.DataFrame
    counts: np.ndarray
    status: Status
    loss: float
    expected_changes: float
    max_risk: float
    min_diagonal: float
    gamma: float | None
    binding: pd.DataFrame
    reduction: dict
    solver: str | None
    stages: tuple
    condition_number: float
    message: str
    alpha: float
    qi: tuple
    combinations: tuple
    params: dict = field(default_factory=dict)
    table: FrequencyTable | None = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        return self.status is Status.SUCCESS

    @property
    def n(self) -> int:
        return int(np.sum(self.counts))

    def to_frame(self) -> pd.DataFrame:
        """The matrix as a K x K DataFrame labelled by the cells (a MultiIndex when d > 1)."""
        idx = pd.MultiIndex.from_frame(self.cells) if self.cells.shape[1] > 1 else pd.Index(self.cells.iloc[:, 0])
        return pd.DataFrame(self.matrix, index=idx, columns=idx.copy())

    def to_long(self, tol: float = 0.0) -> pd.DataFrame:
        """Long form: one row per nonzero transition, with the from- and to-cells' values."""
        r, c = np.nonzero(self.matrix > tol)
        left = self.cells.iloc[r].reset_index(drop=True).add_prefix("from_")
        right = self.cells.iloc[c].reset_index(drop=True).add_prefix("to_")
        return pd.concat([left, right, pd.Series(self.matrix[r, c], name="probability")], axis=1)

    def summary(self) -> str:
        """Human-readable summary: status, loss, risk, changes, reduction and solver figures."""
        lines = [
            f"pramopt design: {self.status.value}" + ("" if self.success else " (NOT SAFE TO RELEASE)"),
            f"  {self.message}",
            f"  records n = {self.n}, cells K = {len(self.counts)}, identifying variables = {', '.join(map(str, self.qi))}",
            f"  combinations |Pi| = {len(self.combinations)}, alpha = {self.alpha:g}",
            f"  max C1 risk      = {self.max_risk:.6g}  (bound {self.alpha:g}, all m, pi, k0 checked)",
            f"  exact L2 loss    = {self.loss:.6g}",
            f"  expected changes = {self.expected_changes:.4g} of {self.n} records",
            f"  min diagonal     = {self.min_diagonal:.6g}" + (f"  (floor gamma = {self.gamma:g})" if self.gamma else ""),
            f"  condition number = {self.condition_number:.4g}",
            f"  binding C1 rows  = {len(self.binding)}",
        ]
        if self.reduction:
            r = self.reduction
            lines.append(
                "  constraints: full {full}, after bound (2) {after_row_bound}, after U_pi(k0) bound "
                "{after_group_bound}, reduced {after_member_rule}, solved with {final_working_set} "
                "({lazy_added} added lazily)".format(**{k: r.get(k, "-") for k in
                    ("full", "after_row_bound", "after_group_bound", "after_member_rule",
                     "final_working_set", "lazy_added")})
            )
        if self.solver:
            lines.append(f"  solver: {self.solver}")
        for s in self.stages:
            lines.append(f"  stage {s.name:<10} {s.seconds:8.2f} s  {s.iterations:4d} it  {s.detail}")
        return "\n".join(lines)

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.summary()
