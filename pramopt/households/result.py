"""The result of a household design, its record-level check and its loss."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..frequency.table import FrequencyTable
from ..price import Price, design_price, summary_lines
from ..result import DesignResult, Status, frozen_matrix, frozen_value
from ..verify import C1Report, c1_risk
from .model import Layout, record_matrix, released_codes, split

__all__ = ["HouseholdDesign", "record_check", "household_loss", "inverse_row_norms", "member_pairs"]


def record_check(lay: Layout, Ph, Pp, combos) -> tuple[C1Report, sp.csr_array, np.ndarray]:
    """The full C1 of the record-level matrix, by the independent verifier.

    Every present record cell m, every π of Π and every released value k0 of π over the released
    pairs ``(h', p')`` (present or not) is checked: the left-hand side of C1 is the same formula as
    for a person-level design (:func:`pramopt.verify.c1_risk`), applied to the marginal law of each
    record.  Returns the report, the matrix and its column codes.
    """
    R, pairs = record_matrix(Ph, Pp, lay.h_of, lay.p_of)
    cols = released_codes(lay, pairs)
    return c1_risk(R, lay.table.codes, lay.table.counts, combos, col_codes=cols), R, cols


def inverse_row_norms(P) -> np.ndarray:
    """Squared 2-norm of every row of ``P^-1`` (dense: the household and person parts are small)."""
    return np.sum(np.linalg.inv(sp.csr_array(P).toarray()) ** 2, axis=1)


def member_pairs(
    hh: np.ndarray, h_rec: np.ndarray, p_rec: np.ndarray, Kh: int, Kp: int
) -> sp.csr_array:
    """Ordered pairs of distinct members of one household: entry ``(h, p Kp + q)`` counts the pairs
    (i, j), i != j, of members of households of cell h with person cells p and q."""
    if not hh.size:
        return sp.csr_array((Kh, Kp * Kp))
    hh = np.asarray(hh, dtype=np.int64)
    c = (
        pd.Series(1, index=pd.MultiIndex.from_arrays([hh, p_rec], names=["g", "p"]))
        .groupby(level=[0, 1])
        .sum()
    )
    c = c.rename("n").reset_index()
    both = c.merge(c, on="g", suffixes=("", "2"))
    n = both["n"].to_numpy() * (
        both["n2"].to_numpy() - (both["p"].to_numpy() == both["p2"].to_numpy())
    )
    first = np.full(int(hh.max()) + 1, -1, dtype=np.int64)
    first[hh[::-1]] = np.asarray(h_rec)[::-1]
    h = first[both["g"].to_numpy()]
    return sp.csr_array(
        (n.astype(float), (h, both["p"].to_numpy() * Kp + both["p2"].to_numpy())),
        shape=(Kh, Kp * Kp),
    )


def same_cell_pairs(pairs: sp.csr_array, Kp: int) -> np.ndarray:
    """Per household cell: the ordered pairs of distinct members with the same person cell."""
    d = np.arange(Kp) * (Kp + 1)
    return np.asarray(sp.csr_array(pairs)[:, d].sum(axis=1)).ravel()


def household_loss(lay: Layout, Ph, Pp, pairs) -> tuple[float, float]:
    """Exact L2 loss of the unbiased estimator over the released pairs, with and without the
    correlation inside households.

    ``pairs`` is :func:`member_pairs`.  A person part shared by every household cell takes the
    closed form of :func:`shared_loss`; one person matrix per household cell that of
    :func:`conditional_loss`.  Returns ``(loss, loss_if_independent)``.
    """
    Kp = Pp.shape[1]
    if Pp.shape[0] == Kp:
        return shared_loss(lay, Ph, Pp, same_cell_pairs(pairs, Kp))
    return conditional_loss(lay, Ph, Pp, pairs)


def conditional_loss(lay: Layout, Ph, Pp, pairs) -> tuple[float, float]:
    """The loss of :func:`household_loss` for one person matrix per household cell.

    The estimator lives on the pairs ``(h, p)`` of a household cell and a person cell (every pair,
    present in the data or not), where the matrix ``P[(h, p), (h', p')] = Ph[h, h'] Pp^(h)[p, p']``
    is square and equals ``blockdiag_h(Pp^(h)) (Ph ⊗ I)``: its inverse is
    ``(Ph^-1 ⊗ I) blockdiag_h(Qh)``, ``Qh = (Pp^(h))^-1``, with entry
    ``P^-1[(h', p'), (h, p)] = Ph^-1[h', h] Qh[p', p]``.  Row ``(h', p')`` has squared norm
    ``N(h', p') = sum_h Ph^-1[h', h]^2 ||row_p'(Qh)||^2``, and independent records give Cator et
    al.'s ``(1/n^2) sum_k N_k (U0^T P)_k - 1/n``.  Two members i != j of a household of cell h share
    h'; ``E<row_{k_i}, row_{k_j}> = (Pp^(h) Mbar_h Pp^(h)^T)[p_i, p_j]`` with
    ``Mbar_h = sum_h2 (Ph (Ph^-1)^2)[h, h2] Q_h2 Q_h2^T`` where independence gives ``[p_i = p_j]``.
    With every ``Pp^(h)`` equal this is :func:`shared_loss`.
    """
    t = lay.table
    Kh, Kp = lay.household_table.n_cells, Pp.shape[1]
    Phd = sp.csr_array(Ph).toarray()
    Phi2 = np.linalg.inv(Phd) ** 2
    B = sp.csr_array(Pp).toarray().reshape(Kh, Kp, Kp)
    Q = np.linalg.inv(B)
    N = Phi2 @ np.sum(Q**2, axis=2)  # Kh x Kp
    R, rel = record_matrix(Ph, Pp, lay.h_of, lay.p_of)
    n = float(t.n)
    released = t.counts.astype(float) @ R
    indep = float(released @ N[rel[:, 0], rel[:, 1]] / n**2 - 1.0 / n)
    S = sp.csr_array(pairs)
    hs = np.flatnonzero(np.diff(S.indptr))
    if not hs.size:
        return indep, indep
    A = Phd[hs] @ Phi2  # rows h with pairs
    MM = np.einsum("hij,hkj->hik", Q, Q).reshape(Kh, Kp * Kp)
    Mbar = (A @ MM).reshape(hs.size, Kp, Kp)
    G = np.einsum("hij,hjk,hlk->hil", B[hs], Mbar, B[hs])
    Sd = S[hs].toarray().reshape(hs.size, Kp, Kp)
    extra = float(np.sum(Sd * G) - np.trace(Sd, axis1=1, axis2=2).sum()) / n**2
    return indep + extra, indep


def shared_loss(lay: Layout, Ph, Pp, same_pairs: np.ndarray) -> tuple[float, float]:
    """Exact L2 loss of the unbiased estimator over the released pairs, with and without the
    correlation inside households.

    Over the pairs ``(h, p)`` the record-level matrix is ``Ph ⊗ Pp``, whose inverse is
    ``Ph^-1 ⊗ Pp^-1``: row ``(h', p')`` has squared norm ``nh(h') np(p')``.  With records released
    independently the loss is Cator et al.'s ``(1/n^2) sum_k ||row_k(P^-1)||^2 (U0^T P)_k - 1/n``.
    Members of one household share their household draw: for two members i != j of a household of
    cell h, ``E<row_{k_i}(P^-1), row_{k_j}(P^-1)> = (Ph nh)(h) [p_i = p_j]`` where independence
    gives ``[p_i = p_j]``; so the loss grows by ``(1/n^2) sum_h same_pairs[h] ((Ph nh)(h) - 1)``,
    ``same_pairs[h]`` being the ordered pairs of distinct members of one household of cell h with
    the same person cell.  Returns ``(loss, loss_if_independent)``.
    """
    t = lay.table
    nh, npp = inverse_row_norms(Ph), inverse_row_norms(Pp)
    R, pairs = record_matrix(Ph, Pp, lay.h_of, lay.p_of)
    n = float(t.n)
    released = t.counts.astype(float) @ R
    indep = float(released @ (nh[pairs[:, 0]] * npp[pairs[:, 1]]) / n**2 - 1.0 / n)
    extra = float(np.asarray(same_pairs, dtype=float) @ (sp.csr_array(Ph) @ nh - 1.0)) / n**2
    return indep + extra, indep


@dataclass(frozen=True)
class HouseholdDesign:
    """A design that releases household-level keys once per household (:func:`pramopt.design`
    with ``household=``).

    Attributes
    ----------
    household_design : DesignResult
        ``Ph`` on the household-level cells (records counted), designed at ``alpha_household`` over
        the household part of each combination of Π.
    person_matrix : scipy.sparse.csr_array of shape (Kp, Kp) or (Kh * Kp, Kp), read-only
        ``Pp`` on the person-level cells, drawn per person: one matrix for every household cell, or
        one per household cell stacked (row ``h * Kp + p`` is ``Pp^(h)[p, ·]``, used for the members
        of households whose original household cell is h; :func:`.model.person_index`).
    layout : Layout
        The record, household and person tables and how the record cells split into them.
    household : str
        The column of household identifiers.
    status : Status
        SUCCESS only when the record-level matrix ``Ph[h, h'] Pp^(h)[p, p']`` meets the full C1 with
        ``max_risk <= alpha`` (checked by :mod:`pramopt.verify` over every released pair) and the
        household design succeeded.
    max_risk : float
        The record-level check's largest left-hand side of C1.
    loss : float
        Exact L2 loss of the unbiased estimator over the released pairs, counting the correlation
        of the members of one household (:func:`household_loss`); ``details["loss_independent"]``
        is the same without it.
    expected_changes : float
        Expected number of records with some identifying value changed.
    """

    household_design: DesignResult
    person_matrix: sp.csr_array
    layout: Layout = field(repr=False)
    household: str
    status: Status
    message: str
    alpha: float
    combinations: tuple
    max_risk: float
    loss: float
    expected_changes: float
    alpha_household: float
    stages: tuple = ()
    params: Mapping = field(default_factory=lambda: MappingProxyType({}))
    details: Mapping = field(default_factory=lambda: MappingProxyType({}))
    method: str = "optimal-households"

    def __post_init__(self):
        object.__setattr__(self, "person_matrix", frozen_matrix(self.person_matrix))
        object.__setattr__(self, "params", frozen_value(dict(self.params)))
        object.__setattr__(self, "details", frozen_value(dict(self.details)))
        object.__setattr__(self, "stages", tuple(self.stages))

    @property
    def success(self) -> bool:
        return self.status is Status.SUCCESS

    @property
    def table(self) -> FrequencyTable:
        return self.layout.table

    @property
    def qi(self) -> tuple:
        return tuple(self.layout.table.qi)

    @property
    def n(self) -> int:
        return self.layout.table.n

    @property
    def household_keys(self) -> tuple:
        return self.layout.household_keys

    @property
    def person_keys(self) -> tuple:
        return self.layout.person_keys

    @property
    def household_matrix(self):
        return self.household_design.matrix

    @property
    def combination_indices(self) -> tuple:
        qi = list(self.qi)
        return tuple(tuple(qi.index(v) for v in c) for c in self.combinations)

    def record_matrix(self) -> tuple[sp.csr_array, np.ndarray]:
        """The record-level matrix (present cells x released cells) and the released cells'
        codes."""
        R, pairs = record_matrix(
            self.household_matrix, self.person_matrix, self.layout.h_of, self.layout.p_of
        )
        return R, released_codes(self.layout, pairs)

    def check(self) -> C1Report:
        """The full C1 of the record-level matrix, computed again."""
        return record_check(
            self.layout, self.household_matrix, self.person_matrix, self.combination_indices
        )[0]

    def price(self) -> Price:
        """The share of records (persons) the record-level matrix changes; the fewest any design
        could change is not known for household designs (:class:`pramopt.price.Price`)."""
        return self._price

    @cached_property
    def _price(self) -> Price:
        # a cached_property writes the instance's __dict__, which a frozen dataclass allows
        R, cols = self.record_matrix()
        return design_price(
            R,
            self.table,
            self.combination_indices,
            self.alpha,
            changes=self.expected_changes,
            col_codes=cols,
        )

    def figures(self) -> dict[str, Any]:
        return {
            "max_risk": self.max_risk,
            "loss": self.loss,
            "expected_changes": self.expected_changes,
            "n": self.n,
            "cells": self.table.n_cells,
            "changed_share": self.price().share,
            "changed_share_lower_bound": self.price().minimum_share,
            "heavy_perturbation": self.price().heavy,
        }

    def summary(self) -> str:
        lay = self.layout
        lines = [
            f"pramopt household design: {self.status.value}"
            + ("" if self.success else " (NOT SAFE TO RELEASE)"),
            *summary_lines(self.price()),
            f"  {self.message}",
            f"  records n = {self.n}, households = {self.details.get('households')}, cells K = "
            f"{self.table.n_cells}",
            f"  household-level keys (once per household of {self.household!r}) = "
            f"{', '.join(map(str, lay.household_keys))}"
            f" ({lay.household_table.n_cells} cells)",
            f"  person-level keys = {', '.join(map(str, lay.person_keys)) or '-'} "
            f"({lay.person_table.n_cells} cells; "
            + (
                "one person matrix per household cell)"
                if self.person_matrix.shape[0] != self.person_matrix.shape[1]
                else "one person matrix for every household)"
            ),
            f"  combinations |Pi| = {len(self.combinations)}, alpha = {self.alpha:g} (household "
            "part designed at "
            f"{self.alpha_household:.4g})",
            f"  max C1 risk      = {self.max_risk:.6g}  (bound {self.alpha:g}, record level: all "
            "m, pi, k0 over "
            f"{self.details.get('released_cells')} released cells checked)",
            f"  exact L2 loss    = {self.loss:.6g}  "
            f"({self.details.get('loss_independent', float('nan')):.6g} "
            "if records were released independently)",
            f"  expected changes = {self.expected_changes:.4g} of {self.n} records",
        ]
        for s in self.stages:
            lines.append(
                f"  stage {s.name:<10} {s.seconds:8.2f} s  {s.iterations:4d} it  {s.detail}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.summary()


def rebuild_layout(
    table: FrequencyTable, household_table: FrequencyTable, person_table: FrequencyTable, hkeys
) -> Layout:
    """The layout of a design read back from a file."""
    return split(table, hkeys, household_table, person_table)
