"""The result of a per-variable design: one labelled matrix per identifying variable."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError
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
    fixed : tuple of str
        With ``fixed``: the variables released unchanged whose strata (the records sharing one
        combination of their values) each have their own matrices.
    strata : dict of str to dict
        With ``fixed``: per stratum, labelled ``"sex=f, region=north"`` (the fixed values as
        written), its matrices as ``variable_matrices`` holds them (the fixed variables' the
        identity); a record is drawn with its stratum's.  ``variable_matrices`` is then empty:
        no one set of matrices describes the release.
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
    fixed: tuple = ()
    strata: Mapping = field(default_factory=dict)
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
        """The matrices in the table's codes (rows and columns in the order of its categories);
        a design with ``fixed`` has one set per stratum (:meth:`matrix_sets`)."""
        if self.strata:
            raise ValueError(
                "A design with fixed strata has one set of matrices per stratum: use "
                "matrix_sets() or strata."
            )
        return [self.variable_matrices[q].to_numpy(dtype=float, copy=True) for q in self.table.qi]

    def matrix_sets(self) -> list[list[np.ndarray]]:
        """One list of matrices per stratum, in the order of :meth:`cell_strata` (one set
        without ``fixed``)."""
        if not self.strata:
            return [self.matrices()]
        return [
            [m[q].to_numpy(dtype=float, copy=True) for q in self.table.qi]
            for m in self.strata.values()
        ]

    def cell_strata(self) -> np.ndarray:
        """Each present cell's stratum (an index into :meth:`matrix_sets`)."""
        return stratum_of(self.table, self.fixed)[1]

    def check(self) -> ProductCheck:
        """The full C1 checked again, independently, over the product space."""
        return check_product_c1(
            self.table.codes,
            self.table.counts,
            self.matrix_sets(),
            self.combination_indices,
            strata=self.cell_strata(),
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
        if self.strata:
            lines.append(f"  {len(self.strata)} strata of {', '.join(self.fixed)}, one set each")
        sets = self.matrix_sets()
        for q in self.perturbed:
            j = list(self.qi).index(q)
            d = np.concatenate([np.diag(m[j]) for m in sets])
            lines.append(f"  {q}: diagonal {d.min():.3f} to {d.max():.3f}")
        return "\n".join(line for line in lines if line)


def figures_of(result: PerVariableDesign) -> dict:
    """The design's figures by name (JSON-safe)."""
    sets = result.matrix_sets()
    diag = {q: min(float(np.diag(m[j]).min()) for m in sets) for j, q in enumerate(result.qi)}
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
        "strata": len(sets),
    }


def matrices_digest(mats) -> str:
    """A digest of the matrices' values (tells whether kept figures are of these matrices)."""
    h = hashlib.sha256()
    for M in mats:
        h.update(np.ascontiguousarray(M, dtype=np.float64).tobytes())
    return h.hexdigest()


def check_details(rep: ProductCheck, mats) -> dict:
    """What the report shows of the independent check ``rep`` of ``mats``, per combination,
    with the digest of the matrices it checked (JSON-safe)."""
    return {
        "check": {
            "matrices_sha256": matrices_digest(mats),
            "risk_by_combination": [float(x) for x in rep.risk_by_combination],
            "groups": list(rep.groups),
            "groups_over": list(rep.groups_over),
        }
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


def stratum_of(table: FrequencyTable, fixed) -> tuple[list[str], np.ndarray]:
    """The strata of the ``fixed`` variables present, in the order of their codes: each one's
    label (``"sex=f, region=north"``, the values as written) and each present cell's stratum."""
    qi = list(table.qi)
    idx = [qi.index(f) for f in fixed]
    codes = np.asarray(table.codes, dtype=np.int64)
    if not idx:
        return ["all"], np.zeros(len(codes), dtype=np.int64)
    keys, inv = np.unique(codes[:, idx], axis=0, return_inverse=True)
    labels = [
        ", ".join(f"{qi[j]}={table.categories[j][c]}" for j, c in zip(idx, key)) for key in keys
    ]
    if len(set(labels)) < len(labels):  # 1 and "1" in one column: strata must stay apart
        same = sorted({lab for lab in labels if labels.count(lab) > 1})
        raise InvalidParameterError(
            f"The strata of the 'fixed' variables {list(fixed)!r} are not told apart by their "
            f"values as written ({same[:3]!r} stand for more than one stratum); write each "
            "value of a fixed variable one way."
        )
    return labels, np.asarray(inv, dtype=np.int64).ravel()


def expected_figures(table: FrequencyTable, mats, strata=None) -> tuple[float, float]:
    """Expected changed records and identifying values changed per changed record (``mats``
    one set of matrices, or one per stratum with ``strata`` each cell's)."""
    U0 = np.asarray(table.counts, dtype=float)
    stay = np.ones(len(U0))
    values = np.zeros(len(U0))
    sets = [mats] if strata is None else mats
    at = np.zeros(len(U0), dtype=np.int64) if strata is None else np.asarray(strata)
    for v in range(len(table.qi)):
        diags = np.stack([np.diag(m[v]) for m in sets])  # (strata, categories)
        d = diags[at, table.codes[:, v]]
        stay *= d
        values += 1.0 - d
    changes = float(U0 @ (1.0 - stay))
    per = float(U0 @ values / changes) if changes > 0 else 0.0
    return changes, per
