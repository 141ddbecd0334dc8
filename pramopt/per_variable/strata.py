"""Per-variable designs per stratum of the ``fixed`` variables.

With ``fixed=[...]`` the fixed variables are released unchanged and every stratum (the records
sharing one combination of their values) has its own matrices for the other variables, so that a
record never leaves its stratum.  As for the record-level designs
(:mod:`pramopt.optimize.strata`), each stratum is designed on its own records under C1 *within
the stratum*: every combination π extended by the fixed variables, which on the stratum's table
are constant, so the stratum's design takes Π as it is.  That implies the full C1 over the whole
data (a record's released mass into a group lies in its own stratum, whose records alone are
already in the denominator), and it is the risk an intruder who sees the fixed values faces.

The merged design is checked once over the whole data by :func:`.check.check_product_c1` with
each cell's stratum (every denominator summing over all strata), which alone decides
``success``; the exact L2 loss of the block-diagonal mechanism is ``sum_s (n_s / n)^2 loss_s``.
sdcMicro's ``pram()`` with ``strata_variables`` keeps only the last stratum's matrix in its
output; here every stratum's is kept, labelled by its fixed values.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from ..errors import InvalidParameterError
from ..frequency.table import FrequencyTable
from ..result import Stage, Status
from .check import check_product_c1
from .model import loss_value
from .result import PerVariableDesign, check_details, expected_figures, labelled, stratum_of

__all__ = ["design_fixed", "fixed_indices"]


def fixed_indices(table: FrequencyTable, params, perturbed, owner: str) -> list[int]:
    """The fixed variables' indices, refused (naming the parameter) before any work when one is
    not an identifying variable, under ``epsilon`` (a variable released unchanged has an
    infinite ε) or when every perturbed variable is fixed."""
    names = list(table.qi)
    fixed = list(params.fixed)
    bad = [f for f in fixed if f not in names]
    if bad or not fixed:
        raise InvalidParameterError(
            f"The 'fixed' parameter of {owner} must name identifying variables among {names!r}; "
            f"got {fixed!r}."
        )
    if params.epsilon is not None:
        raise InvalidParameterError(
            f"The 'fixed' parameter of {owner} cannot be combined with epsilon in a per-variable "
            f"design (a variable released unchanged has an infinite epsilon); got fixed={fixed!r}."
        )
    idx = sorted({names.index(f) for f in fixed})
    if not set(perturbed) - set(idx):
        raise InvalidParameterError(
            f"The 'fixed' parameter of {owner} leaves no variable to perturb: fixed={fixed!r}, "
            f"perturbed {[names[v] for v in perturbed]!r}."
        )
    return idx


def design_fixed(
    table: FrequencyTable, combos, perturbed, params, design, progress, owner: str
) -> PerVariableDesign:
    """One per-variable design per stratum (``design`` the unstratified designer), merged and
    checked over the whole data."""
    t0 = time.perf_counter()
    idx = fixed_indices(table, params, perturbed, owner)
    names = list(table.qi)
    free = [v for v in perturbed if v not in idx]
    labels, strata = stratum_of(table, [names[v] for v in idx])
    # each stratum: the same Π on its own table (the fixed values constant there)
    sub_params = dataclasses.replace(params, fixed=None, perturb=tuple(names[v] for v in free))
    sets, stages, parts = [], [], {}
    statuses = []
    for s, label in enumerate(labels):
        sub = table.subset(np.flatnonzero(strata == s))
        t1 = time.perf_counter()
        res = design(sub, names, sub_params, progress=progress, owner=owner)
        sets.append(res.matrix_sets()[0])
        statuses.append(res.status)
        parts[label] = {
            "records": sub.n,
            "status": res.status.value,
            "max_risk": res.max_risk,
            "loss": res.loss,
            "message": res.message,
        }
        stages.append(
            Stage(f"stratum {label}", time.perf_counter() - t1, len(res.stages),
                  f"{res.status.value}, loss {res.loss:.4g}, max risk {res.max_risk:.4g}")
        )  # fmt: skip
    return finish_fixed(table, combos, params, idx, free, labels, sets, statuses, stages, parts, t0)


def finish_fixed(
    table, combos, params, idx, free, labels, sets, statuses, stages, parts, t0
) -> PerVariableDesign:
    """The merged result: success only when every stratum succeeded and the independent check
    over the whole data holds (and every floor is kept)."""
    t1 = time.perf_counter()
    names = list(table.qi)
    alpha = 1.0 if params.alpha is None else float(params.alpha)
    strata = stratum_of(table, [names[v] for v in idx])[1]
    rep = check_product_c1(table.codes, table.counts, sets, combos, alpha=alpha, strata=strata)
    stages = [*stages, Stage("independent check", time.perf_counter() - t1, 0, "whole data")]
    floor = float(params.min_diagonal or 0.0)
    floor_ok = all(float(np.diag(m[v]).min()) >= floor for m in sets for v in free)
    n = float(table.n)
    loss = 0.0
    for s, mats in enumerate(sets):  # block diagonal: sum_s (n_s / n)^2 loss_s
        sub = table.subset(np.flatnonzero(strata == s))
        loss += (sub.n / n) ** 2 * loss_value(np.asarray(sub.codes), np.asarray(sub.counts), mats)
    failed = [lab for lab, st in zip(labels, statuses) if st is not Status.SUCCESS]
    ok = not failed and rep.holds(alpha) and floor_ok and math.isfinite(loss)
    what = f"{len(labels)} strata of {', '.join(names[v] for v in idx)}"
    if ok:
        status = Status.SUCCESS
        message = (
            f"One set of matrices for each of {what} ({len(free)} perturbed variable(s), the "
            f"fixed ones released unchanged); C1 at alpha {alpha:g} verified over the product "
            "space on the whole data."
        )
    elif failed:
        status = statuses[labels.index(failed[0])]
        message = (
            f"{len(failed)} of {what} found no design (first: {failed[0]}: "
            f"{parts[failed[0]]['message']}); not safe to release."
        )
    else:
        status = Status.UNVERIFIED
        message = (
            f"The matrices of {what} failed the independent check over the whole data (max risk "
            f"{rep.max_risk:.6g} vs alpha {alpha:g}, floor kept: {floor_ok}, loss {loss:.6g}); "
            "not safe to release."
        )
    changes, per = expected_figures(table, sets, strata)
    return PerVariableDesign(
        table=table,
        variable_matrices={},
        perturbed=tuple(names[v] for v in free),
        combinations=tuple(tuple(names[v] for v in c) for c in combos),
        alpha=alpha,
        status=status,
        success=bool(ok),
        message=message,
        max_risk=float(rep.max_risk),
        loss=float(loss),
        expected_changes=changes,
        changed_variables=per,
        fixed=tuple(names[v] for v in idx),
        strata={
            lab: {q: labelled(table, v, mats[v]) for v, q in enumerate(names)}
            for lab, mats in zip(labels, sets)
        },
        params=params.to_dict(),
        details={"strata": parts, **check_details(rep, [M for m in sets for M in m])},
        stages=tuple(stages),
    )
