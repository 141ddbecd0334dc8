"""From a matrix to a verified :class:`~pramopt.DesignResult`: the last step of every design.

:func:`finish` is shared by :func:`pramopt.design` and every baseline: the independent check
(:func:`pramopt.verify.c1_risk`) decides success, whatever the producer of the matrix claims,
and the summary figures (loss, expected changes, condition number, binding rows) are computed
the same way for every method, from the sparse matrix one connected component at a time
(:mod:`pramopt.loss`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp

from .frequency.table import FrequencyTable
from .loss import changed_variables, condition_number, expected_changes, l2_loss
from .result import DesignResult, Reduction, Stage, Status
from .verify import C1Report, c1_risk, changed_variables_violations

__all__ = ["finish", "binding_rows", "verify_stage"]


def verify_stage(P, table: FrequencyTable, combos, name: str = "verify") -> tuple[C1Report, Stage]:
    """The full, unreduced C1 check of ``P``, timed."""
    t0 = time.perf_counter()
    rep = c1_risk(P, table.codes, table.counts, combos)
    return rep, Stage(name, time.perf_counter() - t0)


def binding_rows(rep: C1Report, table: FrequencyTable, combos, alpha: float) -> list[tuple]:
    """C1 groups whose worst row is within 1e-4 (relative) of alpha, worst first."""
    rows = []
    for ci, (risk, k0s) in enumerate(zip(rep.risk_by_group, rep.groups_by_combination)):
        for g in np.flatnonzero(risk >= alpha * (1 - 1e-4)):
            names = ",".join(str(table.qi[i]) for i in combos[ci])
            vals = tuple(table.categories[i][k0s[g, j]] for j, i in enumerate(combos[ci]))
            rows.append((names, vals, float(risk[g])))
    rows.sort(key=lambda r: -r[2])
    return rows


def finish(
    P,
    table: FrequencyTable,
    combos,
    alpha: float,
    status: Status,
    message: str,
    *,
    stages=(),
    gamma: float | None = None,
    reduction: Reduction | None = None,
    solver: str | None = None,
    report: C1Report | None = None,
    method: str = "optimal",
    params: Mapping | None = None,
    details: Mapping | None = None,
    loss: float | None = None,
    condition: float | None = None,
) -> DesignResult:
    """Verify ``P`` against the full C1 and build the result.

    A ``SUCCESS`` claimed by the caller becomes ``UNVERIFIED`` unless the independent check
    gives ``max_risk <= alpha`` (a NaN risk never passes).  ``report`` is a check already made
    of this very ``P`` (it is not made twice); ``loss`` and ``condition``, when the caller has
    them in closed form, save the summary's computations.
    """
    stages = list(stages)
    K = table.n_cells
    # a strategy's parameters travel with its reduction; the result keeps them only where they
    # describe this very matrix (DesignResult checks), e.g. not after a diagonal was raised
    form = None
    if reduction is not None and reduction.form is not None:
        form = reduction.form
        reduction = dataclasses.replace(reduction, form=None)
    P = sp.csr_array(P, dtype=float)
    if report is None:
        report, st = verify_stage(P, table, combos)
        stages.append(st)
    if status is Status.SUCCESS and not report.max_risk <= alpha:
        status = Status.UNVERIFIED
    t0 = time.perf_counter()
    # summarised from the sparse matrix, one connected component at a time (no K x K array)
    Ps = sp.csr_matrix(P)
    f = l2_loss(Ps, table.counts) if loss is None else float(loss)
    cond = condition_number(Ps) if condition is None else float(condition)
    details = dict(details or {})
    details["changed_variables"] = changed_variables(P, table.codes, table.counts, table.qi)
    status, message = _changed_check(P, table, params or {}, status, message, details, f)
    stages.append(Stage("summary", time.perf_counter() - t0, 0, "loss and condition number"))
    qi = tuple(table.qi)
    return DesignResult(
        matrix=P,
        status=status,
        loss=f,
        expected_changes=expected_changes(P, table.counts),
        max_risk=float(report.max_risk),
        min_diagonal=float(np.min(P.diagonal())) if K else float("nan"),
        gamma=gamma,
        binding_rows=tuple(binding_rows(report, table, combos, alpha)),
        reduction=reduction,
        solver=solver,
        stages=tuple(stages),
        condition_number=cond,
        message=message,
        alpha=float(alpha),
        qi=qi,
        combinations=tuple(tuple(qi[i] for i in c) for c in combos),
        table=table,
        method=method,
        params=dict(params or {}),
        details=details,
        form=form,
    )


def _changed_check(
    P,
    table: FrequencyTable,
    params: Mapping,
    status: Status,
    message: str,
    details: dict,
    loss: float,
) -> tuple[Status, str]:
    """``max_changed_variables``, checked from the cells' codes (:mod:`pramopt.verify`),
    whatever built ``P``: a success with a transition between cells farther apart becomes
    UNVERIFIED; and the objective of ``change_weights`` beside the exact loss."""
    d = params.get("max_changed_variables")
    if d is not None:
        bad, worst = changed_variables_violations(P, table.codes, int(d))
        details["max_changed_variables_check"] = {
            "limit": int(d),
            "violations": bad,
            "largest": worst,
        }
        if bad and status is Status.SUCCESS:
            status = Status.UNVERIFIED
            message = (
                f"{message} But {bad} transitions change more than max_changed_variables = {d} "
                f"identifying variables (up to {worst}): the design does not meet it."
            ).strip()
    weights = params.get("change_weights")
    if weights:
        w = np.array([float(weights.get(v, 0.0)) for v in table.qi])
        Pm = sp.coo_matrix(P)
        counts = np.asarray(table.counts, dtype=float)
        h = (np.asarray(table.codes)[Pm.row] != np.asarray(table.codes)[Pm.col]) @ w
        details["weighted_objective"] = float(
            loss + 2.0 / counts.sum() ** 2 * np.sum(counts[Pm.row] * Pm.data * h)
        )
    return status, message
