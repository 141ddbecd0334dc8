"""What a report shows, computed from a design: its figures' data, keyed by figure id.

Contents: the summary figures; the C1 risk before (P = I) and after, per combination of
identifying variables, worst first; the points of the paper's Figure 1 (expected changed records
U0(m)(1 - P_mm) against the frequency U0(m), Cator et al., Section 4, beside the probability of
change 1 - P_mm); the utility per variable: the share of records whose value changes, the
categories before and expected after, the variable's transition matrix over the data (categories
x categories, labelled), the largest expected flows with the values that change (flows of one
size on one line) and the records per set of variables changed together; the reduction and the
solver stages.  Shares and records below :data:`NEGLIGIBLE` are solver round-off and shown as 0.
Everything per variable is summed from P's nonzero entries, a piece at a time (:mod:`.flows`,
which also makes the two tables of flows), so a design on 50,000 cells makes nothing of size
K x K.

:data:`FIGURES` says which figures a report has, in display order: figure id -> the function that
computes its data from a :class:`ReportData` (None: the report leaves that figure out).  The words
for each id are in :mod:`.words`, its drawing (HTML only) in :mod:`.plots` and its templates in
``templates/<id>.html.j2`` and ``templates/<id>.md.j2``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._labels import short_label, short_labels
from ..frequency.table import FrequencyTable
from ..price import Price
from ..verify import c1_risk
from .flows import (
    NEGLIGIBLE,
    TIE_DIGITS,
    _flows,
    changed_together,
    top_flows,
    variable_labels,
)
from .recoding import recoding_figure

__all__ = [
    "ReportData",
    "from_result",
    "changed_variables_figures",
    "risk_by_combination",
    "variable_labels",
    "variable_changes",
    "variable_margins",
    "variable_transitions",
    "top_flows",
    "changed_together",
    "negligible_as_zero",
    "NEGLIGIBLE",
    "TIE_DIGITS",
    "ChangePoints",
    "change_points",
    "stages_table",
    "Utility",
    "utility",
    "Section",
    "FIGURES",
    "sections",
    "shown",
]


@dataclass
class ReportData:
    """Everything a report shows.

    Attributes
    ----------
    title : str
    matrix : ndarray or scipy.sparse matrix of shape (K, K')
        Rows: the present cells of ``table``, in its order.
    table : FrequencyTable
    combinations : sequence of tuples of int
        Π as indices into ``table.qi``.
    alpha : float or None
    figures : dict
        Name -> value of the summary figures, in display order.
    status : str or None
    message : str
    reduction : dict
    stages : sequence of Stage
    """

    title: str
    matrix: np.ndarray | sp.csr_array
    table: FrequencyTable
    combinations: Sequence
    alpha: float | None = None
    figures: dict = field(default_factory=dict)
    status: str | None = None
    message: str = ""
    reduction: dict = field(default_factory=dict)
    stages: Sequence = ()
    solver: str | None = None
    #: codes of the matrix's columns when they are not the present cells (a matrix made elsewhere)
    col_codes: np.ndarray | None = None
    #: P_mm of each present cell m when the columns are not the present cells
    diag: np.ndarray | None = None
    #: the diagonal floor the design relied on (drawn on the probability-of-change plot)
    gamma: float | None = None
    #: the cells of the matrix's columns (one column per identifying variable) when ``col_codes``
    #: is set
    col_cells: pd.DataFrame | None = None
    #: the design's recoding (``details["recode"]``): the categories before and after
    recoding: dict | None = None
    #: the share of records the design changes and the least any design could (said at the top)
    price: Price | None = None
    #: figure id -> its data, computed without ``matrix`` (a design of one matrix per variable,
    #: whose matrix over the product space is never made); the figures that need ``matrix`` and
    #: are not here are left out
    computed: dict | None = None

    def diagonal(self) -> np.ndarray:
        if self.diag is not None:
            return np.asarray(self.diag)
        if sp.issparse(self.matrix):
            return self.matrix.diagonal()
        return np.diag(np.asarray(self.matrix))


def from_result(result, title: str = "pramopt design") -> ReportData:
    """Report data of a :class:`~pramopt.DesignResult`."""
    qi = list(result.qi)
    combos = [tuple(qi.index(v) for v in c) for c in result.combinations]
    figures = {
        "status": result.status.value,
        "records n": result.n,
        "present cells K": len(result.counts),
        "identifying variables": ", ".join(short_labels(map(str, qi))),
        "combinations |Π|": len(combos),
        "α": result.alpha,
        "max C1 risk": result.max_risk,
        "exact L2 loss": result.loss,
        "expected changes": result.expected_changes,
        "min diagonal": result.min_diagonal,
        "diagonal floor γ": result.gamma,
        "condition number": result.condition_number,
        "binding (π, k0)": len(result.binding),
    }
    d = result.details
    if d.get("loss_lower_bound") is not None:  # how far the design can be from the best (design())
        figures["lower bound on the loss"] = d["loss_lower_bound"]
    if d.get("expected_changes_lower_bound") is not None:
        figures["lower bound on the expected changes"] = d["expected_changes_lower_bound"]
    if d.get("expected_changes_lower_bound_at_floor") is not None:
        # over the designs that keep every diagonal entry at least as high as this one's
        at = f"all P_mm ≥ {d['bound_floor']:g}"
        figures[f"lower bound on the expected changes, {at}"] = d[
            "expected_changes_lower_bound_at_floor"
        ]
        if d.get("loss_lower_bound_at_floor") is not None:
            figures[f"lower bound on the loss, {at}"] = d["loss_lower_bound_at_floor"]
    figures.update(changed_variables_figures(result))
    if d.get("epsilon_target") is not None or d.get("k_target") is not None:
        # a design under ε-DP and/or Pk-anonymity (Ikarashi et al.): the exact measures and the
        # targets
        figures["α"] = d.get("alpha_target")  # None: no C1 requested
        figures["ε (Theorem 1), target"] = d.get("epsilon_target")
        figures["ε (Theorem 1), measured"] = d.get("epsilon")
        figures["Pk-anonymity k, target"] = d.get("k_target")
        figures["Pk-anonymity k, measured"] = d.get("k")
        figures["binding requirement"] = d.get("binding")
    return ReportData(
        title=title,
        recoding=d.get("recode"),  # the categories the data were recoded to before the design
        matrix=result.matrix,
        table=result.table,
        combinations=combos,
        alpha=result.alpha,
        figures=figures,
        status=result.status.value,
        message=result.message,
        reduction=result.reduction.as_dict() if result.reduction is not None else {},
        stages=tuple(result.stages),
        solver=result.solver,
        gamma=result.gamma,
        price=result.price(),
    )


def changed_variables_figures(result) -> dict:
    """The report's lines on changed identifying variables (see
    :func:`pramopt.loss.changed_variables`)."""
    out = {}
    params, d = result.params or {}, result.details
    if params.get("max_changed_variables") is not None:
        out["max changed variables"] = params["max_changed_variables"]
    cv = d.get("changed_variables")
    if cv:
        out["mean variables changed per changed record"] = cv["mean"]
        out["variables changed (share of changed records)"] = (
            ", ".join(f"{j}: {100 * s:.1f}%" for j, s in cv["distribution"].items()) or "none"
        )
    if params.get("change_weights"):
        out["change weights"] = ", ".join(
            f"{short_label(str(k))}={v:g}" for k, v in params["change_weights"].items()
        )
        out["weighted objective"] = d.get("weighted_objective")
    return out


def risk_by_combination(
    P, table: FrequencyTable, combinations, alpha=None, col_codes=None
) -> pd.DataFrame:
    """C1 risk before (P = I) and after, per combination, worst (after) first.

    Returns
    -------
    DataFrame
        ``combination``, ``groups`` (number of k0), ``risk_before``, ``risk_after`` (largest
        left-hand side of C1 over m and k0) and, with ``alpha``, ``over_before`` /
        ``over_after`` (number of k0 whose risk exceeds alpha).
    """
    K = table.n_cells
    before = c1_risk(sp.identity(K, format="csr"), table.codes, table.counts, combinations)
    after = c1_risk(P, table.codes, table.counts, combinations, col_codes=col_codes)
    rows = []
    for ci, c in enumerate(combinations):
        rb, ra = before.risk_by_group[ci], after.risk_by_group[ci]
        row = {
            "combination": ", ".join(str(table.qi[i]) for i in c),
            "groups": int(len(ra)),
            "risk_before": float(rb.max()),
            "risk_after": float(ra.max()),
        }
        if alpha is not None:
            row["over_before"] = int((rb > alpha).sum())
            row["over_after"] = int((ra > alpha).sum())
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values(["risk_after", "risk_before"], ascending=False, ignore_index=True)


# ---------------------------------------------------------------------------------------------
# Utility per variable: computed from P's nonzero entries only (nothing K x K is made; the
# per-variable matrices are categories x categories)
# ---------------------------------------------------------------------------------------------


def variable_changes(P, table: FrequencyTable, col_codes=None) -> pd.DataFrame:
    """Per identifying variable, the records expected to have that variable's value changed.

    ``expected records`` is ``sum_m U0(m) sum_l P_ml [m_j != l_j]`` and ``share`` that divided
    by n.  A record whose cell changes counts for every variable that changes with it.
    """
    n = float(table.n)
    changed = np.zeros(len(table.qi))
    for frm, to, flow, _ in _flows(P, table, col_codes):
        changed += [flow[frm[:, j] != to[:, j]].sum() for j in range(len(table.qi))]
    rows = []
    for j, q in enumerate(table.qi):
        e = float(changed[j])
        rows.append(
            {
                "variable": str(q),
                "categories": len(table.categories[j]),
                "expected records changed": e,
                "share of records": e / n if n else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def variable_margins(P, table: FrequencyTable, col_codes=None, labels=None) -> pd.DataFrame:
    """Per identifying variable and category: the records before and the records expected after
    (``U0ᵀP`` summed over the released cells with that category), and the difference."""
    labels = labels if labels is not None else variable_labels(table, col_codes)
    u = np.asarray(table.counts, dtype=float)
    after = [np.zeros(len(lab)) for lab in labels]
    for _, to, flow, _ in _flows(P, table, col_codes):
        for j, lab in enumerate(labels):
            after[j] += np.bincount(to[:, j], weights=flow, minlength=len(lab))
    rows = []
    for j, q in enumerate(table.qi):
        L = len(labels[j])
        before = np.bincount(np.asarray(table.codes)[:, j], weights=u, minlength=L)
        for a in range(L):
            rows.append(
                {
                    "variable": str(q),
                    "category": labels[j][a],
                    "before": float(before[a]),
                    "after (expected)": float(after[j][a]),
                    "difference": float(after[j][a] - before[a]),
                }
            )
    return pd.DataFrame(rows)


def variable_transitions(
    P, table: FrequencyTable, col_codes=None, labels=None
) -> dict[str, pd.DataFrame]:
    """Per identifying variable, its transition matrix over the data.

    Entry (a, b) is the expected share of the records with category a whose value of the
    variable is released as b: ``sum_{m: m_j = a} U0(m) sum_{l: l_j = b} P_ml`` divided by the
    records with category a.  Rows sum to 1; index and columns are the categories' labels.
    For a product (per-variable) mechanism it is that variable's own matrix.
    """
    labels = labels if labels is not None else variable_labels(table, col_codes)
    sums = [np.zeros((len(table.categories[j]), len(labels[j]))) for j in range(len(table.qi))]
    for frm, to, flow, _ in _flows(P, table, col_codes):
        for j, T in enumerate(sums):
            np.add.at(T, (frm[:, j], to[:, j]), flow)
    out = {}
    for j, q in enumerate(table.qi):
        Lr = len(table.categories[j])
        T = sums[j]
        with np.errstate(invalid="ignore", divide="ignore"):
            T = T / T.sum(axis=1, keepdims=True)
        out[str(q)] = pd.DataFrame(
            T,
            index=pd.Index(labels[j][:Lr], name=f"original {q}"),
            columns=pd.Index(labels[j], name=f"released {q}"),
        )
    return out


# ---------------------------------------------------------------------------------------------
# The figures of a report, by id
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangePoints:
    """The points of the paper's Figure 1: one per present cell m.

    Attributes
    ----------
    frequency : ndarray
        U0(m), the records of the cell.
    change : ndarray
        1 - P_mm, the probability that one of its records changes (times ``frequency``: the
        expected changed records of the cell).
    gamma : float or None
        The diagonal floor the design relied on: no cell changes with probability above 1 - γ.
    """

    frequency: np.ndarray
    change: np.ndarray
    gamma: float | None = None


def change_points(diag, table: FrequencyTable, gamma=None) -> ChangePoints:
    """Figure 1's points from P's diagonal (P_mm per present cell m) and the table's counts."""
    return ChangePoints(
        frequency=np.asarray(table.counts, dtype=float), change=1.0 - np.asarray(diag), gamma=gamma
    )


def stages_table(stages) -> pd.DataFrame:
    """The solver's stages, one row each."""
    return pd.DataFrame(
        [
            {"stage": s.name, "seconds": s.seconds, "iterations": s.iterations, "detail": s.detail}
            for s in stages
        ]
    )


@dataclass(frozen=True)
class Utility:
    """The per-variable tables of one report (each one pass over P's nonzero entries)."""

    changes: pd.DataFrame
    margins: pd.DataFrame
    transitions: dict
    flows: pd.DataFrame
    together: pd.DataFrame


def utility(d: ReportData) -> Utility:
    """The per-variable tables of ``d``, with the labels of the matrix's columns, shortened
    (:func:`pramopt._labels.short_labels`)."""
    labels = [short_labels(lab) for lab in variable_labels(d.table, d.col_codes, d.col_cells)]
    return Utility(
        changes=variable_changes(d.matrix, d.table, d.col_codes),
        margins=variable_margins(d.matrix, d.table, d.col_codes, labels),
        transitions=variable_transitions(d.matrix, d.table, d.col_codes, labels),
        flows=top_flows(d.matrix, d.table, col_codes=d.col_codes, labels=labels),
        together=changed_together(d.matrix, d.table, col_codes=d.col_codes),
    )


def negligible_as_zero(obj):
    """A table (or a dict of tables) as the report shows it: numbers below :data:`NEGLIGIBLE`
    in size are 0, so that solver round-off (``3e-09``) is neither printed nor coloured."""
    if isinstance(obj, dict):
        return {k: negligible_as_zero(v) for k, v in obj.items()}
    out = obj.copy()
    cols = [c for c, t in out.dtypes.items() if pd.api.types.is_float_dtype(t)]
    out[cols] = out[cols].mask(out[cols].abs() < NEGLIGIBLE, 0.0)
    return out


@dataclass(frozen=True)
class Section:
    """One figure of a report: its id (which names its words and templates) and its data."""

    id: str
    data: object


#: The figures of a report in display order: id -> data from the report data and its per-variable
#: tables, or None where the report has no such figure.
FIGURES: dict[str, Callable[[ReportData, Utility], object]] = {
    "summary": lambda d, u: d.figures,
    "recoding": lambda d, u: recoding_figure(d.recoding),
    "risk": lambda d, u: risk_by_combination(
        d.matrix, d.table, d.combinations, d.alpha, d.col_codes
    ),
    "change_vs_frequency": lambda d, u: change_points(d.diagonal(), d.table, d.gamma),
    "change_rates": lambda d, u: u.changes,
    "margins": lambda d, u: negligible_as_zero(u.margins),
    "transitions": lambda d, u: negligible_as_zero(u.transitions),
    "flows": lambda d, u: u.flows,
    "changed_together": lambda d, u: u.together if len(u.together) else None,
    "reduction": lambda d, u: d.reduction or None,
    "stages": lambda d, u: stages_table(d.stages) if d.stages else None,
}


#: The figures computed from the matrix (the others from the summary, recoding and stages).
_OF_MATRIX = frozenset(
    ("risk", "change_vs_frequency", "change_rates", "margins", "transitions", "flows",
     "changed_together")
)  # fmt: skip


def shown(d: ReportData) -> ReportData:
    """``d`` with its variables' names shortened for display (the table's cells unchanged)."""
    t = d.table
    names = tuple(short_labels(map(str, t.qi)))
    if names == tuple(t.qi):
        return d
    table = FrequencyTable(qi=names, categories=t.categories, codes=t.codes, counts=t.counts)
    return replace(d, table=table)


def sections(d: ReportData) -> list[Section]:
    """The figures ``d`` has, in display order, each with its data; labels and names shortened
    (:func:`shown`, :func:`utility`), so that a long value cannot make a table or a drawing
    huge."""
    d = shown(d)
    if d.computed is not None:
        given = d.computed
        none: Any = None  # the figures not of the matrix need no Utility
        out = [
            Section(key, given[key] if key in given else build(d, none))
            for key, build in FIGURES.items()
            if key in given or key not in _OF_MATRIX
        ]
        return [s for s in out if s.data is not None]
    u = utility(d)
    out = [Section(key, build(d, u)) for key, build in FIGURES.items()]
    return [s for s in out if s.data is not None]
