"""The report of a per-variable design, at any scale: every figure from the matrices and the
projected tables, nothing of the size of the product space.

A record of cell m is released as k with probability ``prod_v M_v[m_v, k_v]``, so each figure
factorises over the variables:

* the risk per combination is the independent check's (:func:`.check.check_product_c1`) largest
  left-hand side and groups above α per combination, over π's released groups; before, P = I,
  it is one over the smallest projected count, and the groups above α are the projected cells
  with fewer than 1/α records;
* a cell keeps its records with probability ``prod_v M_v[m_v, m_v]`` (the changes against
  frequency);
* variable v changes a record of category a with probability ``1 - M_v[a, a]`` whatever the
  other variables do, and its categories after are its margin times ``M_v``; its transition
  table over the data is ``M_v`` itself;
* the expected changes and values per changed record are the product formula's
  (:func:`.result.expected_figures`).

The cost is O(present cells x variables + sum of categories squared) besides the check.  The
tables of flows between cells and of variables changed together are left out: they range over
the product space.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._labels import short_labels
from ..report import ReportData
from ..report.data import change_points, variable_labels
from .check import ProductCheck, check_product_c1
from .result import PerVariableDesign, expected_figures, matrices_digest

__all__ = ["from_per_variable", "risk_table", "variable_tables"]


def risk_table(result: PerVariableDesign) -> pd.DataFrame:
    """C1 risk before (P = I) and after, per combination, worst (after) first: the columns of
    :func:`pramopt.report.risk_by_combination` over the product space as released."""
    table, alpha = result.table, result.alpha
    codes = np.asarray(table.codes, dtype=np.int64)
    counts = np.asarray(table.counts, dtype=float)
    rep = check_for_report(result)
    rows = []
    for ci, pi in enumerate(result.combination_indices):
        levels = [len(table.categories[i]) for i in pi]
        flat = np.ravel_multi_index(tuple(codes[:, list(pi)].T), levels)
        projected = np.bincount(flat, weights=counts)
        projected = projected[projected > 0]  # the present projected cells
        row = {
            "combination": ", ".join(str(table.qi[i]) for i in pi),
            "groups": rep.groups[ci] if rep.groups else np.nan,
            "risk_before": float(1.0 / projected.min()),
            "risk_after": rep.risk_by_combination[ci] if rep.risk_by_combination else np.nan,
        }
        if alpha is not None:
            row["over_before"] = int((projected * alpha < 1.0).sum())
            row["over_after"] = rep.groups_over[ci] if rep.groups_over else np.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values(["risk_after", "risk_before"], ascending=False, ignore_index=True)


def check_for_report(result: PerVariableDesign) -> ProductCheck:
    """The independent check with the groups above α counted: the design's own run of it when
    it kept its figures per combination for these matrices, else run again."""
    kept = result.details.get("check") or {}
    n = len(result.combinations)
    sets = result.matrix_sets()
    same = kept.get("matrices_sha256") == matrices_digest([M for m in sets for M in m])
    if same and all(
        len(kept.get(k, ())) == n for k in ("risk_by_combination", "groups", "groups_over")
    ):
        return ProductCheck(
            result.max_risk,
            (),
            tuple(float("nan") if x is None else x for x in kept["risk_by_combination"]),
            tuple(kept["groups"]),
            tuple(kept["groups_over"]),
        )
    t = result.table
    return check_product_c1(
        t.codes,
        t.counts,
        sets,
        result.combination_indices,
        alpha=result.alpha,
        strata=result.cell_strata(),
    )


def variable_tables(result: PerVariableDesign, names, labels) -> tuple:
    """Per variable its change rate, its categories before and after and its matrix labelled,
    as :func:`pramopt.report.variable_changes`, :func:`~pramopt.report.variable_margins` and
    :func:`~pramopt.report.variable_transitions` compute them over the product space.

    ``names`` are the variables' names and ``labels`` each one's category labels as shown."""
    table = result.table
    codes = np.asarray(table.codes, dtype=np.int64)
    u = np.asarray(table.counts, dtype=float)
    n = float(u.sum())
    sets, strata = result.matrix_sets(), result.cell_strata()
    changes, margins, transitions = [], [], {}
    for j, q in enumerate(names):
        L = sets[0][j].shape[0]
        # per stratum its margin, released with its matrix; summed over the strata
        S = len(sets)
        by = np.bincount(strata * L + codes[:, j], weights=u, minlength=S * L).reshape(S, L)
        before = by.sum(axis=0)
        moved = np.einsum("sa,sab->ab", by, np.stack([m[j] for m in sets]))  # records a -> b
        after = moved.sum(axis=0)
        e = float(before.sum() - np.trace(moved))
        changes.append(
            {
                "variable": q,
                "categories": L,
                "expected records changed": e,
                "share of records": e / n if n else float("nan"),
            }
        )
        for a in range(L):
            margins.append(
                {
                    "variable": q,
                    "category": labels[j][a],
                    "before": float(before[a]),
                    "after (expected)": float(after[a]),
                    "difference": float(after[a] - before[a]),
                }
            )
        # a category without records has no transitions over the data (as over P)
        with np.errstate(invalid="ignore", divide="ignore"):
            T = np.where(before[:, None] > 0, moved / before[:, None], np.nan)
        transitions[q] = pd.DataFrame(
            T,
            index=pd.Index(labels[j], name=f"original {q}"),
            columns=pd.Index(labels[j], name=f"released {q}"),
        )
    return pd.DataFrame(changes), pd.DataFrame(margins), transitions


def from_per_variable(
    result: PerVariableDesign, title: str = "pramopt per-variable design"
) -> ReportData:
    """Report data of a :class:`PerVariableDesign`: risk per combination, the transition tables
    (each variable's matrix, labelled) and the figures, over the product space as released,
    computed without it."""
    from ..report.data import negligible_as_zero

    table = result.table
    size = int(np.prod([len(c) for c in table.categories], dtype=float))
    sets, strata = result.matrix_sets(), result.cell_strata()
    # the product formula, from the matrices
    changed, per_changed = expected_figures(table, sets, strata)
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
        "expected changes": changed,
        "changed values per changed record": per_changed,
    }
    if result.epsilon is not None:
        figures["ε (the sum of the matrices' ε)"] = result.epsilon
    if result.fixed:
        figures["fixed (released unchanged; one set of matrices per stratum)"] = ", ".join(
            short_labels(map(str, result.fixed))
        )
        figures["strata"] = len(sets)
        within = [p.get("max_risk") for p in result.details.get("strata", {}).values()]
        if within and all(isinstance(x, float) for x in within):
            # the condition each stratum was designed under: π with the fixed variables
            figures["max C1 risk within a stratum"] = max(within)
    for q in result.perturbed:
        j = list(result.qi).index(q)
        figures[f"min diagonal of {q}"] = min(float(np.diag(m[j]).min()) for m in sets)
    # the names and labels as the report shows them (shortened, as for every other design)
    names = list(short_labels(map(str, table.qi)))
    labels = [short_labels(lab) for lab in variable_labels(table)]
    changes, margins, transitions = variable_tables(result, names, labels)
    stay = np.ones(len(table.counts))
    for v in range(len(table.qi)):
        diags = np.stack([np.diag(m[v]) for m in sets])  # (strata, categories)
        stay *= diags[strata, np.asarray(table.codes)[:, v]]
    computed = {
        "risk": risk_table(result),
        "change_vs_frequency": change_points(stay, table),
        "change_rates": changes,
        "margins": negligible_as_zero(margins),
        "transitions": negligible_as_zero(transitions),
    }
    return ReportData(
        title=title,
        # never made: every figure of the matrix is in ``computed``
        matrix=sp.csr_array((len(table.counts), 0)),
        table=table,
        combinations=list(result.combination_indices),
        alpha=result.alpha,
        figures=figures,
        status=result.status.value,
        message=result.message,
        stages=tuple(result.stages),
        diag=stay,
        computed=computed,
    )
