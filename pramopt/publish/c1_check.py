"""The full C1 check every release makes, from a design's form or its matrix.

Shared by the release's own check (:func:`pramopt.publish.frame.releasable_table`) and the
office's policy (:mod:`pramopt.publish.policy`), which checks a design again under its α and Π.
"""

from __future__ import annotations

from .._validation import ROW_SUM_TOL
from ..frequency.table import FrequencyTable
from ..verify import C1Report, c1_risk, c1_risk_form

__all__ = ["full_c1_check"]


def full_c1_check(result, table: FrequencyTable, combinations) -> C1Report:
    """The full C1 of the design checked again by the independent verifier: from its form when
    it has one (:func:`pramopt.verify.c1_risk_form`, O(K |Π|): the form is what a release draws
    from, and it rebuilds the matrix bit for bit), else from its matrix
    (:func:`pramopt.verify.c1_risk`).  Both fail closed (NaN max risk)."""
    form = getattr(result, "form", None)
    if form is None:
        return c1_risk(result.matrix, table.codes, table.counts, combinations)
    return c1_risk_form(
        form.retention,
        form.rate,
        form.weights,
        form.pools,
        table.codes,
        table.counts,
        combinations,
        row_tol=ROW_SUM_TOL,
    )
