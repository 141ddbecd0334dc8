"""The report of a per-variable design: the released rows over the product space, whose
per-variable transition tables are each variable's own labelled matrix."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._labels import short_labels
from ..errors import InvalidParameterError
from ..report import ReportData
from .result import PerVariableDesign

__all__ = ["from_per_variable", "REPORT_MAX_ENTRIES"]

#: The report's matrix (present cells x product space) is made up to this many entries.
REPORT_MAX_ENTRIES = 20_000_000


def _released_rows(codes: np.ndarray, mats: list, cols: np.ndarray) -> np.ndarray:
    R = np.ones((codes.shape[0], cols.shape[0]))
    for v, M in enumerate(mats):
        R *= M[np.ix_(codes[:, v], cols[:, v])]
    return R


def from_per_variable(
    result: PerVariableDesign, title: str = "pramopt per-variable design"
) -> ReportData:
    """Report data of a :class:`PerVariableDesign`: risk per combination, the transition tables
    (each variable's matrix, labelled) and the figures, over the product space as released."""
    table = result.table
    levels = [len(c) for c in table.categories]
    size = math.prod(levels)
    if size * len(table.counts) > REPORT_MAX_ENTRIES:
        raise InvalidParameterError(
            f"The report of a per-variable design shows the released rows over the product space "
            f"({len(table.counts):,} cells x {size:,} combinations, more than "
            f"{REPORT_MAX_ENTRIES:,} entries); the design and its matrix_<variable>.csv files "
            "are complete without it."
        )
    cols = np.array(np.unravel_index(np.arange(size), levels)).T.astype(np.int64)
    mats = result.matrices()
    R = _released_rows(np.asarray(table.codes), mats, cols)
    present = np.ravel_multi_index(tuple(np.asarray(table.codes).T), levels)
    col_cells = pd.DataFrame(
        {
            q: np.array(list(table.categories[j]), dtype=object)[cols[:, j]]
            for j, q in enumerate(table.qi)
        }
    )
    figures = {
        "status": result.status.value,
        "records n": result.n,
        "present cells K": len(table.counts),
        "released combinations (product space)": size,
        "identifying variables": ", ".join(short_labels(map(str, result.qi))),
        "perturbed (one matrix each, drawn independently)": ", ".join(
            short_labels(map(str, result.perturbed))
        ),
        "combinations |Π|": len(result.combinations),
        "α": result.alpha,
        "max C1 risk (product space)": result.max_risk,
        "exact L2 loss (product space)": result.loss,
        "expected changes": result.expected_changes,
        "changed values per changed record": result.changed_variables,
    }
    if result.epsilon is not None:
        figures["ε (the sum of the matrices' ε)"] = result.epsilon
    for q in result.perturbed:
        figures[f"min diagonal of {q}"] = float(np.diag(result.variable_matrices[q]).min())
    return ReportData(
        title=title,
        matrix=sp.csr_array(R),
        table=table,
        combinations=list(result.combination_indices),
        alpha=result.alpha,
        figures=figures,
        status=result.status.value,
        message=result.message,
        stages=tuple(result.stages),
        col_codes=cols,
        diag=R[np.arange(len(present)), present],
        col_cells=col_cells,
    )
