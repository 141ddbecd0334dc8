"""Result objects of the designer and the baselines (frozen, in the spirit of scipy's
OptimizeResult).

The matrix of a result is a read-only ``scipy.sparse.csr_array``: designs on thousands of cells
are sparse, and nothing between the solver and the files written densifies them.  A dense
array is made only on request (:meth:`DesignResult.to_dense`, :meth:`DesignResult.to_frame`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ._labels import short_labels
from .frequency.table import FrequencyTable
from .price import Price, bound_options, design_price, summary_lines
from .structured import ReplacementForm

__all__ = [
    "Status",
    "Stage",
    "Reduction",
    "DesignResult",
    "ReadOnlyCSR",
    "frozen_matrix",
    "frozen_array",
    "matrix_long",
    "entries",
]


class Status(enum.Enum):
    """Outcome of :func:`pramopt.design` or a baseline."""

    SUCCESS = "success"  #: full C1 verified with max_risk <= alpha
    INFEASIBLE = "infeasible"  #: no design with the required structure exists
    INFEASIBLE_DATA = "infeasible_data"  #: C1 cannot hold for any P (n < 1/alpha)
    UNVERIFIED = "unverified"  #: the solver's answer failed the independent check
    SOLVER_ERROR = "solver_error"  #: every solver of the chain failed


@dataclass(frozen=True)
class Stage:
    """Time and iterations spent in one stage of the design."""

    name: str
    seconds: float
    iterations: int = 0
    detail: str = ""


@dataclass(frozen=True)
class Reduction:
    """What happened to C1's rows and to the support of P (every figure None when not used).

    Attributes
    ----------
    structure : str
        ``"general"``, ``"blocks"`` or ``"replacement"``.
    gamma : float or None
        Diagonal floor the reduction relied on (0: none).
    full, after_row_bound, after_group_bound, after_member_rule : int or None
        C1 rows before any reduction (every present m times every (π, k0)), after bound (2),
        after dropping groups with U_π(k0) >= 1/(gamma alpha), and after bound (5).
    outside_rows : int or None
        Rows m outside their group that bound (5) does not clear.
    working_set, final_working_set, lazy_added : int or None
        Rows imposed at the start, at the end, and added lazily from the full check.
    support_rows : int or None
        Rows imposed with the transitions that can fill them: below a floor of 1/2, the rows of
        cells outside their groups (so that ``final_working_set = working_set + lazy_added +
        support_rows``).
    support, support_mode : int, str or None
        Transitions P may use at the end, and how the support started.
    priced_transitions : int or None
        Transitions added by column generation.
    linear_gap_bound : float or None
        Certified relative bound on what the full K x K linear stage could still gain.
    linear_changes, floor_changes_bound : float or None
        The general design: expected changes at the end of its linear stage (fewest changes),
        and the proven lower bound on the expected changes of every design meeting C1 with every
        diagonal entry >= gamma and the same permitted transitions.
    blocks, block_target_records, min_lambda : int, float or None
        Block designs: number of blocks, their size in records, smallest lambda_b.  Replacement
        designs: number of pools, their size in records (None: one per stratum), smallest retention.
    form : ReplacementForm or None
        The parameters of the matrix a replacement or block strategy built, handed to the
        designer's result (:func:`pramopt.verified_result.finish` moves it to
        :attr:`DesignResult.form` when it describes the final matrix exactly); not a figure.
    """

    structure: str = "general"
    gamma: float | None = None
    full: int | None = None
    after_row_bound: int | None = None
    after_group_bound: int | None = None
    after_member_rule: int | None = None
    outside_rows: int | None = None
    working_set: int | None = None
    final_working_set: int | None = None
    lazy_added: int | None = None
    support_rows: int | None = None
    support: int | None = None
    support_mode: str | None = None
    priced_transitions: int | None = None
    linear_gap_bound: float | None = None
    linear_changes: float | None = None
    floor_changes_bound: float | None = None
    blocks: int | None = None
    block_target_records: float | None = None
    min_lambda: float | None = None
    form: ReplacementForm | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict:
        """The figures that are set, by name (the form is not a figure)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "form" and getattr(self, f.name) is not None
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Reduction:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(d or {}).items() if k in names})


def frozen_array(a, dtype=None) -> np.ndarray:
    """A read-only copy of ``a``."""
    out = np.array(a, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


class ReadOnlyCSR(sp.csr_array):
    """A CSR array whose entries, structure and shape cannot change once it is frozen.

    Its arrays are read-only, and assigning ``data``, ``indices``, ``indptr`` or the shape, or
    resizing it, raises; every operation that makes a new array (``copy``, ``toarray``,
    arithmetic, slicing) works as usual and returns an ordinary, writable result.
    """

    _frozen = False
    _GUARDED = frozenset({"data", "indices", "indptr", "_shape"})

    def __setattr__(self, name, value):
        if self._frozen and name in self._GUARDED:
            raise AttributeError(
                "a design's matrix is read-only; use .copy() or to_dense() for one to change"
            )
        super().__setattr__(name, value)

    def resize(self, *shape):
        if self._frozen:
            raise AttributeError("a design's matrix is read-only; use .copy() for one to resize")
        return super().resize(*shape)

    def copy(self):
        return sp.csr_array(
            (self.data.copy(), self.indices.copy(), self.indptr.copy()), shape=self.shape
        )


def frozen_matrix(P) -> ReadOnlyCSR:
    """A read-only CSR copy of ``P`` (sparse or dense), explicit zeros removed."""
    M = sp.csr_array(P, dtype=float, copy=True)
    M.eliminate_zeros()
    M.sort_indices()
    for a in (M.data, M.indices, M.indptr):
        a.setflags(write=False)
    out = ReadOnlyCSR((M.data, M.indices, M.indptr), shape=M.shape)
    out.has_sorted_indices = True
    out._frozen = True
    return out


def frozen_value(x):
    """``x`` with every list made a tuple and every mapping a read-only mapping, recursively."""
    if isinstance(x, Mapping):
        return MappingProxyType({k: frozen_value(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(frozen_value(v) for v in x)
    if isinstance(x, np.ndarray):
        return frozen_array(x)
    return x


def frozen_table(table: FrequencyTable) -> FrequencyTable:
    """A copy of ``table`` whose codes and counts are read-only."""
    if not table.codes.flags.writeable and not table.counts.flags.writeable:
        return table
    return dataclasses.replace(
        table, codes=frozen_array(table.codes), counts=frozen_array(table.counts)
    )


@dataclass(frozen=True)
class DesignResult:
    """A PRAM design and everything needed to trust, apply and reproduce it.

    Attributes
    ----------
    matrix : scipy.sparse.csr_array of shape (K, K), read-only
        P on the present cells (row: original cell, column: released cell); its entries,
        structure and shape cannot be changed (:class:`ReadOnlyCSR`).
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
    reduction : Reduction or None
        Constraint counts before and after each reduction, the support, lazily added rows.
    solver : str or None
    stages : tuple of Stage
    condition_number : float
        The 2-norm condition number of P, exact when no connected component of P's transition
        graph has more than ``pramopt.loss.DENSE_MAX`` cells, else a 1-norm estimate
        (:func:`pramopt.condition_number`); for replacement designs always the 1-norm estimate,
        from their closed-form inverse.
    message : str
        Why the status is what it is (which γ was used and why, or why it failed).
    alpha : float
    qi : tuple of str
    combinations : tuple of tuples of str
    method : str
        ``"optimal"`` for :func:`pramopt.design`, else the baseline's family.
    params : mapping
        The inputs that reproduce the result: ``pramopt.design(table, **result.params)``
        (or the baseline's function) makes it again.
    details : mapping
        Method-specific figures: a baseline's tuned parameters and its number of evaluations; for
        :func:`pramopt.design`, ``expected_changes_lower_bound`` (no design meeting C1 with the
        same options changes fewer records in expectation: the flow relaxation's optimum, see
        :mod:`pramopt.optimize.relaxation`), ``lower_bound_combinations`` (how many combinations'
        rows that bound kept: fewer than all on large tables, a weaker bound), ``loss_lower_bound``
        (no general, replacement or block design meeting C1 with the same options has a smaller
        exact L2 loss: ``expected_changes_lower_bound / n**2``, see
        :func:`pramopt.optimize.relaxation.loss_bound`), the same two bounds over the designs
        that keep every diagonal entry at least ``bound_floor`` (this design's smallest, rounded
        down; present where it is above ``min_diagonal``):
        ``expected_changes_lower_bound_at_floor`` and ``loss_lower_bound_at_floor``, and
        ``tried`` (the loss of every structure made: the spread of the designer's starts).
    table : FrequencyTable
        The cells and counts the design was made for (a read-only copy).
    form : ReplacementForm or None
        For a replacement or block design, the parameters the matrix is made of
        (``diag(retention) + rate weights^T`` within each pool): saved instead of the matrix's
        entries, drawn from at release and inverted in closed form by the estimator.  It
        describes ``matrix`` exactly (checked when the result is made: a form that does not is
        dropped); None for any other matrix.
    """

    matrix: sp.csr_array
    status: Status
    loss: float
    expected_changes: float
    max_risk: float
    min_diagonal: float
    gamma: float | None
    binding_rows: tuple
    reduction: Reduction | None
    solver: str | None
    stages: tuple
    condition_number: float
    message: str
    alpha: float
    qi: tuple
    combinations: tuple
    table: FrequencyTable = field(repr=False)
    method: str = "optimal"
    params: Mapping = field(default_factory=lambda: MappingProxyType({}))
    details: Mapping = field(default_factory=lambda: MappingProxyType({}))
    form: ReplacementForm | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.matrix, ReadOnlyCSR):
            object.__setattr__(self, "matrix", frozen_matrix(self.matrix))
        # what is saved, released and inverted is the form: only when it is this very matrix (a
        # matrix replaced after, e.g. by dataclasses.replace, is a matrix without a form)
        if self.form is not None and not self.form.describes(self.matrix):
            object.__setattr__(self, "form", None)
        object.__setattr__(self, "table", frozen_table(self.table))
        object.__setattr__(self, "params", frozen_value(dict(self.params)))
        object.__setattr__(self, "details", frozen_value(dict(self.details)))
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "binding_rows", tuple(tuple(r) for r in self.binding_rows))

    @property
    def success(self) -> bool:
        return self.status is Status.SUCCESS

    @property
    def counts(self) -> np.ndarray:
        """U0, the frequency of each cell (read-only)."""
        return self.table.counts

    @property
    def cells(self) -> pd.DataFrame:
        """The K cells' values, in the matrix's order (a new frame on every access)."""
        return self.table.cells()

    @property
    def n(self) -> int:
        return self.table.n

    @property
    def combination_indices(self) -> tuple:
        """Π as tuples of indices into ``qi``."""
        qi = list(self.qi)
        return tuple(tuple(qi.index(v) for v in c) for c in self.combinations)

    @property
    def binding(self) -> pd.DataFrame:
        """The binding (π, k0): ``combination``, ``k0`` (tuple of values), ``risk``; worst first."""
        return pd.DataFrame(list(self.binding_rows), columns=["combination", "k0", "risk"])

    def price(self) -> Price:
        """The share of records the design changes against the fewest any design meeting C1
        could change, and, for a heavy perturbation, why (:class:`pramopt.price.Price`).

        Computed once, from the matrix's nonzero entries, the table and the lower bound in
        ``details``.
        """
        return self._price

    @cached_property
    def _price(self) -> Price:
        # a cached_property writes the instance's __dict__, which a frozen dataclass allows
        d = self.details
        return design_price(
            self.matrix,
            self.table,
            self.combination_indices,
            self.alpha,
            changes=self.expected_changes,
            minimum=d.get("expected_changes_lower_bound"),
            bound_combinations=d.get("lower_bound_combinations"),
            options=bound_options(self.params, self.table),
        )

    def to_dense(self) -> np.ndarray:
        """The matrix as a dense K x K array (a new, writable copy)."""
        return self.matrix.toarray()

    def to_frame(self) -> pd.DataFrame:
        """The matrix as a K x K DataFrame labelled by the cells (a MultiIndex when d > 1)."""
        cells = self.cells
        idx = pd.MultiIndex.from_frame(cells) if cells.shape[1] > 1 else pd.Index(cells.iloc[:, 0])
        return pd.DataFrame(self.to_dense(), index=idx, columns=idx.copy())

    def to_long(self, tol: float = 0.0) -> pd.DataFrame:
        """Long form: one row per transition above ``tol``, with the from- and to-cells' values."""
        return matrix_long(self.matrix, self.table, tol)

    def figures(self) -> dict[str, Any]:
        """The summary figures by name (the keys a spec's ``[expected]`` may bound)."""
        out = {
            "max_risk": self.max_risk,
            "loss": self.loss,
            "expected_changes": self.expected_changes,
            "min_diagonal": self.min_diagonal,
            "condition_number": self.condition_number,
            "n": self.n,
            "cells": self.table.n_cells,
            # the price (:meth:`price`), as scalars like every figure here
            "changed_share": self.price().share,
            "changed_share_lower_bound": self.price().minimum_share,
            "heavy_perturbation": self.price().heavy,
        }
        for name in ("epsilon", "k"):  # measured, for designs under ε-DP or Pk-anonymity
            if self.details.get(name) is not None:
                out[name] = self.details[name]
        return out

    def _bound_rows(self) -> str:
        used = self.details.get("lower_bound_combinations")
        if used is None or used >= len(self.combinations):
            return ""
        return f", from the rows of {used} of {len(self.combinations)} combinations"

    def _at_floor_line(self, key: str, kind: str) -> list[str]:
        """The bound over the designs that keep at least this design's smallest diagonal entry
        (``details[key]``, ``details["bound_floor"]``), on a line of its own."""
        value, floor = self.details.get(key), self.details.get("bound_floor")
        if value is None or floor is None:
            return []
        return [
            f"{'':21}(every {kind}design meeting C1 with all P_mm >= {floor:g}, as this one: "
            f">= {value:.4g}{self._bound_rows()})"
        ]

    def _floor_bound_line(self) -> list[str]:
        red = self.reduction
        if red is None or red.floor_changes_bound is None or red.linear_changes is None:
            return []
        return [
            f"  fewest changes   = {red.linear_changes:.5g} at floor {red.gamma or 0:g} (linear "
            f"stage; every design with all P_mm >= {red.gamma or 0:g} meeting C1 with these "
            f"options: >= {red.floor_changes_bound:.5g})"
        ]

    def _tried_line(self) -> list[str]:
        table = self.details.get("candidates") or {}
        if len(table) > 1:
            lines = ["  candidates (loss, expected changed records, variables per changed record):"]
            for name, f in sorted(table.items(), key=lambda kv: kv[1]["objective"]):
                lines.append(
                    f"    {name:<12} {f['loss']:.4g}  {f['expected_changes']:.5g}  "
                    f"{f['variables_per_changed_record']:.2f}"
                )
            return lines
        tried = self.details.get("tried") or {}
        if len(tried) < 2:
            return []
        return [
            "  structures tried = "
            + ", ".join(f"{k} {v:.4g}" for k, v in sorted(tried.items(), key=lambda kv: kv[1]))
            + "  (exact L2 loss of each)"
        ]

    def summary(self) -> str:
        """Human-readable summary: status, loss, risk, changes, reduction and solver figures."""
        lines = [
            f"pramopt {'design' if self.method == 'optimal' else 'baseline ' + self.method}: "
            f"{self.status.value}" + ("" if self.success else " (NOT SAFE TO RELEASE)"),
            *summary_lines(self.price()),
            f"  {self.message}",
            f"  records n = {self.n}, cells K = {self.table.n_cells}, identifying variables = "
            f"{', '.join(short_labels(map(str, self.qi)))}",
            f"  combinations |Pi| = {len(self.combinations)}, alpha = {self.alpha:g}"
            + (" (None: C1 not required)" if self.params.get("alpha", 0) is None else ""),
            *self._missing_line(),
            f"  max C1 risk      = {self.max_risk:.6g}  (bound {self.alpha:g}, all m, pi, k0 "
            "checked)",
            f"  exact L2 loss    = {self.loss:.6g}"
            + (
                "  (every general, replacement or block design meeting C1: >= "
                f"{self.details['loss_lower_bound']:.4g}" + self._bound_rows() + ")"
                if self.details.get("loss_lower_bound") is not None
                else ""
            ),
            *self._at_floor_line("loss_lower_bound_at_floor", "general, replacement or block "),
            f"  expected changes = {self.expected_changes:.4g} of {self.n} records"
            + (
                f"  (every design meeting C1: >= {self.details['expected_changes_lower_bound']:.4g}"
                + self._bound_rows()
                + ")"
                if self.details.get("expected_changes_lower_bound") is not None
                else ""
            ),
            *self._at_floor_line("expected_changes_lower_bound_at_floor", ""),
            *self._floor_bound_line(),
            *self._tried_line(),
            f"  min diagonal     = {self.min_diagonal:.6g}"
            + (f"  (floor gamma = {self.gamma:g})" if self.gamma else ""),
            f"  condition number = {self.condition_number:.4g}",
            f"  binding C1 rows  = {len(self.binding_rows)}",
        ]
        d = self.details
        if d.get("epsilon_target") is not None or d.get("k_target") is not None:

            def t(v):
                return "-" if v is None else f"{v:g}"

            lines.append(
                f"  epsilon (Thm 1)  = {d['epsilon']:.6g}  (target {t(d.get('epsilon_target'))}); "
                f"Pk-anonymity k = {d['k']:.6g}  (target {t(d.get('k_target'))}); C1 alpha "
                f"{t(d.get('alpha_target'))}; binding: {d.get('binding')}"
            )
        r = self.reduction
        if r is not None and r.full is not None:

            def f(v):
                return "-" if v is None else v

            lines.append(
                f"  constraints: full {f(r.full)}, after bound (2) {f(r.after_row_bound)}, after "
                f"U_pi(k0) bound {f(r.after_group_bound)}, reduced {f(r.after_member_rule)}, "
                f"solved with {f(r.final_working_set)} ({f(r.lazy_added)} added lazily"
                + (f", {r.support_rows} with the transitions" if r.support_rows else "")
                + ")"
            )
        if self.solver:
            lines.append(f"  solver: {self.solver}")
        for s in self.stages:
            lines.append(
                f"  stage {s.name:<10} {s.seconds:8.2f} s  {s.iterations:4d} it  {s.detail}"
            )
        return "\n".join(lines)

    def _missing_line(self) -> list[str]:
        t = self.table
        miss = t.missing().any(axis=1)
        if not miss.any():
            return []
        how = {
            "keep": "they stay missing and no value becomes missing",
            "category": "missing is a category PRAM may change",
        }.get(self.params.get("missing", ""), "")
        return [
            f"  records with a missing identifying value = {int(t.counts[miss].sum())}"
            + (f" ({how})" if how else "")
        ]

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.summary()

    @property
    def recoding(self):
        """The :class:`~pramopt.recode.Recoding` applied to the data before the design
        (``details["recode"]``), re-applied at release and estimate; None without one."""
        rec = self.details.get("recode")
        if rec is None:
            return None
        from .recode import Recoding

        # details are frozen (read-only mappings): the recoding accepts any mapping inside
        return Recoding.from_dict(dict(rec), "the design's recoding")


def entries(P) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and value of every nonzero entry, in row-major order (never densified)."""
    M = sp.csr_array(P, dtype=float)
    # a design's frozen matrix is already canonical: only other matrices are copied and cleaned
    if not (M.has_canonical_format and np.all(M.data != 0.0)):
        M = sp.csr_array(P, dtype=float, copy=True)
        M.eliminate_zeros()
        M.sort_indices()
    rows = np.repeat(np.arange(M.shape[0], dtype=np.int64), np.diff(M.indptr))
    return rows, M.indices.astype(np.int64), M.data.copy()


def matrix_long(P, table: FrequencyTable, tol: float = 0.0, row_offset: int = 0) -> pd.DataFrame:
    """Long form of ``P``: ``from_<var>``, ``to_<var>``, ``probability`` per entry above ``tol``
    (``P``'s row i is the table's cell ``row_offset + i``: a slice of rows is one piece of it)."""
    r, c, v = entries(P)
    r = r + row_offset
    keep = v > tol
    r, c, v = r[keep], c[keep], v[keep]
    cells = table.cells()
    left = cells.iloc[r].reset_index(drop=True).add_prefix("from_")
    right = cells.iloc[c].reset_index(drop=True).add_prefix("to_")
    return pd.concat([left, right, pd.Series(v, name="probability")], axis=1)
