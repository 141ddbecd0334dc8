"""The report of a household design: the record-level matrix in the usual report, with a line on
households."""

from __future__ import annotations

from .._labels import short_labels
from ..report import ReportData
from .model import person_diagonal
from .result import HouseholdDesign

__all__ = ["from_household"]


def from_household(result: HouseholdDesign, title: str = "pramopt household design") -> ReportData:
    """Report data of a :class:`HouseholdDesign`: risk per combination over the record-level matrix
    (released cells: every pair of a household cell and a person cell), the household structure,
    and the household part's reduction."""
    lay = result.layout
    R, cols = result.record_matrix()
    diag = result.household_matrix.diagonal()[lay.h_of] * person_diagonal(
        result.person_matrix, lay.h_of, lay.p_of
    )
    rh = result.household_design
    figures = {
        "status": result.status.value,
        "records n": result.n,
        "households": (
            f"{result.details.get('households')} (column {result.household!r}); household-level "
            "keys "
            f"{', '.join(short_labels(map(str, lay.household_keys)))} drawn once per household "
            "and copied to every member; person-level keys "
            f"{', '.join(short_labels(map(str, lay.person_keys))) or '-'} per person, from "
            + (
                "the person matrix of the household's original household cell"
                if result.person_matrix.shape[0] != result.person_matrix.shape[1]
                else "one person matrix for every household"
            )
        ),
        "present cells K": result.table.n_cells,
        "released cells (household cell x person cell)": R.shape[1],
        "identifying variables": ", ".join(short_labels(map(str, result.qi))),
        "combinations |Π|": len(result.combinations),
        "α": result.alpha,
        "α of the household part": result.alpha_household,
        "max C1 risk (record level)": result.max_risk,
        "exact L2 loss (members correlated)": result.loss,
        "L2 loss if records were independent": result.details.get("loss_independent"),
        "expected changes": result.expected_changes,
        "min diagonal": float(diag.min()),
    }
    return ReportData(
        title=title,
        matrix=R,
        table=result.table,
        combinations=list(result.combination_indices),
        alpha=result.alpha,
        figures=figures,
        status=result.status.value,
        message=result.message,
        reduction=rh.reduction.as_dict() if rh.reduction is not None else {},
        stages=tuple(result.stages),
        solver=rh.solver,
        col_codes=cols,
        diag=diag,
        price=result.price(),
    )
