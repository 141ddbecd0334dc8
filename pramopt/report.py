"""Self-contained HTML and Markdown reports of a PRAM matrix on one data set.

The HTML has inline CSS and its figures embedded as base64 PNGs, so it can be mailed or archived
as one file.  Figures are drawn on :class:`matplotlib.figure.Figure` objects directly, never
through pyplot, so that writing a report leaves the caller's matplotlib backend and figures as
they were.  The matrix may be sparse: nothing here makes a dense K x K array of a large design.
The Markdown has the same tables, for terminals and merge requests, and refers to the HTML for
the figures.

Contents: the summary figures, with a sentence for each one a newcomer cannot read (ε = ∞,
k = 1, R1 "–", binding rows, condition number); the C1 risk before (P = I) and after, per
combination of identifying variables, worst first; the paper's Figure 1 (expected changed records
U0(m)(1 - P_mm) against the frequency U0(m), Cator et al., Section 4) beside the probability of
change 1 - P_mm with a line at 1 - γ; the utility per variable: the share of records whose value
changes, the categories before and expected after, and the variable's transition matrix over the
data (categories x categories, labelled); the largest expected flows with the values that change;
the reduction (in words) and the solver stages.  Everything per variable is summed from P's
nonzero entries, so a design on 50,000 cells makes nothing of size K x K.
"""
from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .frequency.table import FrequencyTable, is_missing
from .verify import c1_risk

__all__ = ["ReportData", "risk_by_combination", "render_html", "render_markdown", "from_result",
           "variable_changes", "variable_margins", "variable_transitions", "top_flows", "explanations"]


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
    matrix: object
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
    #: the cells of the matrix's columns (one column per identifying variable) when ``col_codes`` is set
    col_cells: pd.DataFrame | None = None

    def diagonal(self) -> np.ndarray:
        if self.diag is not None:
            return np.asarray(self.diag)
        return self.matrix.diagonal() if sp.issparse(self.matrix) else np.diag(np.asarray(self.matrix))


def from_result(result, title: str = "pramopt design") -> ReportData:
    """Report data of a :class:`~pramopt.DesignResult`."""
    qi = list(result.qi)
    combos = [tuple(qi.index(v) for v in c) for c in result.combinations]
    figures = {
        "status": result.status.value,
        "records n": result.n,
        "present cells K": len(result.counts),
        "identifying variables": ", ".join(map(str, qi)),
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
    figures.update(changed_variables_figures(result))
    if d.get("epsilon_target") is not None or d.get("k_target") is not None:
        # a design under ε-DP and/or Pk-anonymity (Ikarashi et al.): the exact measures and the targets
        figures["α"] = d.get("alpha_target")  # None: no C1 requested
        figures["ε (Theorem 1), target"] = d.get("epsilon_target")
        figures["ε (Theorem 1), measured"] = d.get("epsilon")
        figures["Pk-anonymity k, target"] = d.get("k_target")
        figures["Pk-anonymity k, measured"] = d.get("k")
        figures["binding requirement"] = d.get("binding")
    return ReportData(title=title, matrix=result.matrix, table=result.table,
                      combinations=combos, alpha=result.alpha, figures=figures,
                      status=result.status.value, message=result.message,
                      reduction=result.reduction.as_dict() if result.reduction is not None else {},
                      stages=tuple(result.stages), solver=result.solver, gamma=result.gamma)


def changed_variables_figures(result) -> dict:
    """The report's lines on changed identifying variables (see :func:`pramopt.loss.changed_variables`)."""
    out = {}
    params, d = result.params or {}, result.details
    if params.get("max_changed_variables") is not None:
        out["max changed variables"] = params["max_changed_variables"]
    cv = d.get("changed_variables")
    if cv:
        out["mean variables changed per changed record"] = cv["mean"]
        out["variables changed (share of changed records)"] = ", ".join(
            f"{j}: {100 * s:.1f}%" for j, s in cv["distribution"].items()) or "none"
    if params.get("change_weights"):
        out["change weights"] = ", ".join(f"{k}={v:g}" for k, v in params["change_weights"].items())
        out["weighted objective"] = d.get("weighted_objective")
    return out


def risk_by_combination(P, table: FrequencyTable, combinations, alpha=None, col_codes=None) -> pd.DataFrame:
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
        row = {"combination": ", ".join(str(table.qi[i]) for i in c), "groups": int(len(ra)),
               "risk_before": float(rb.max()), "risk_after": float(ra.max())}
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

#: Entries of P handled at a time when summing flows: the codes of both ends of each entry are
#: (entries x variables) arrays, 1.4 GB at once for the 18 million entries of a 5-key census design.
FLOW_CHUNK = 1 << 20


def _flows(P, table: FrequencyTable, col_codes=None):
    """Per piece of at most about ``FLOW_CHUNK`` nonzero entries of P: original codes and released
    codes (each (entries, d)), the expected records U0(m) P_mk of each entry, and its row m."""
    M = sp.csr_array(P)
    indptr, indices, data = M.indptr, M.indices, M.data
    codes = np.asarray(table.codes)
    cc = codes if col_codes is None else np.asarray(col_codes)
    counts = np.asarray(table.counts, dtype=float)
    K = M.shape[0]
    a = 0
    while a < K:
        # rows a..b-1 hold at most FLOW_CHUNK entries (at least one row)
        b = max(a + 1, int(np.searchsorted(indptr, indptr[a] + FLOW_CHUNK, side="right")) - 1)
        b = min(b, K)
        lo, hi = indptr[a], indptr[b]
        r = np.repeat(np.arange(a, b), np.diff(indptr[a:b + 1]))
        c, v = indices[lo:hi], data[lo:hi].astype(float)
        keep = v != 0
        r, c = r[keep], c[keep]
        yield codes[r], cc[c], counts[r] * v[keep], r
        a = b


def _label(x) -> str:
    return "missing" if is_missing(x) else str(x)


def variable_labels(table: FrequencyTable, col_codes=None, col_cells=None) -> list[list[str]]:
    """Per identifying variable, the label of each code (a missing value reads 'missing').

    Codes beyond the table's categories (released categories absent from the data, in a matrix
    made elsewhere) take their labels from ``col_cells``, the cells of the matrix's columns.
    """
    cc = None if col_codes is None else np.asarray(col_codes)
    out = []
    for j, (q, cats) in enumerate(zip(table.qi, table.categories)):
        lab = [_label(x) for x in cats]
        if cc is not None and cc.shape[0] and int(cc[:, j].max()) >= len(lab):
            extra = [f"#{k}" for k in range(len(lab), int(cc[:, j].max()) + 1)]
            if col_cells is not None:
                for code, value in zip(cc[:, j].tolist(), col_cells[q].tolist()):
                    if code >= len(lab):
                        extra[code - len(lab)] = _label(value)
            lab += extra
        out.append(lab)
    return out


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
        rows.append({"variable": str(q), "categories": len(table.categories[j]),
                     "expected records changed": e, "share of records": e / n if n else float("nan")})
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
            rows.append({"variable": str(q), "category": labels[j][a], "before": float(before[a]),
                         "after (expected)": float(after[j][a]), "difference": float(after[j][a] - before[a])})
    return pd.DataFrame(rows)


def variable_transitions(P, table: FrequencyTable, col_codes=None, labels=None) -> dict[str, pd.DataFrame]:
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
        out[str(q)] = pd.DataFrame(T, index=pd.Index(labels[j][:Lr], name=f"original {q}"),
                                   columns=pd.Index(labels[j], name=f"released {q}"))
    return out


def top_flows(P, table: FrequencyTable, n: int = 15, col_codes=None, labels=None) -> pd.DataFrame:
    """The changes moving the most records in expectation (U0(m) P_mk over k != m).

    ``from`` and ``to`` are the cells' values in the order of ``table.qi``; ``changes`` names
    each variable whose value changes, e.g. ``roof: 4→2, walls: 3→2``.
    """
    labels = labels if labels is not None else variable_labels(table, col_codes)
    parts = []
    for frm, to, flow, r in _flows(P, table, col_codes):
        moved = (frm != to).any(axis=1) & (flow > 0)
        frm, to, flow, r = frm[moved], to[moved], flow[moved], r[moved]
        top = np.argsort(-flow, kind="stable")[:n]  # the n largest of the whole are among the pieces' n largest
        parts.append((frm[top], to[top], flow[top], r[top]))
    d = len(table.qi)
    empty = (np.empty((0, d), np.int64), np.empty((0, d), np.int64), np.empty(0), np.empty(0, np.int64))
    frm, to, flow, r = (np.concatenate([p[i] for p in parts]) if parts else empty[i] for i in range(4))
    order = np.argsort(-flow, kind="stable")[:n]

    def cell(code):
        return ", ".join(labels[j][code[j]] for j in range(d))

    def changes(a, b):
        return ", ".join(f"{table.qi[j]}: {labels[j][a[j]]}→{labels[j][b[j]]}" for j in range(d) if a[j] != b[j])

    u = np.asarray(table.counts)[r[order]]
    return pd.DataFrame({"from": [cell(frm[i]) for i in order], "to": [cell(to[i]) for i in order],
                         "changes": [changes(frm[i], to[i]) for i in order], "records in cell": u,
                         "probability": flow[order] / u, "expected records": flow[order]})


# ---------------------------------------------------------------------------------------------
# Words for the figures a newcomer cannot read
# ---------------------------------------------------------------------------------------------

#: The reduction's figures in words (``Reduction`` field -> label).
REDUCTION_LABELS = {
    "structure": "structure of the design",
    "gamma": "diagonal floor γ the reduction relied on",
    "full": "C1 rows before any reduction (present cells × groups)",
    "after_row_bound": "rows left after dropping cells with at least 1/α records (bound (2))",
    "after_group_bound": "rows left after dropping groups with at least 1/(γα) records",
    "after_member_rule": "rows left after bound (5): those imposed at the start",
    "outside_rows": "rows of cells outside their group that bound (5) does not clear",
    "working_set": "rows in the first solve",
    "final_working_set": "rows in the last solve",
    "lazy_added": "rows added because the full check found them violated",
    "support": "pairs of cells P may move records between, at the end",
    "support_mode": "how those pairs were first chosen",
    "priced_transitions": "pairs added by column generation",
    "linear_gap_bound": "certified bound on what every pair of cells could still gain (relative)",
    "blocks": "blocks (block design) or pools (replacement design)",
    "block_target_records": "records per block or pool",
    "min_lambda": "smallest retention λ of a block or pool",
}


def reduction_table(reduction: dict) -> pd.DataFrame:
    """The reduction's figures, each with its label in words."""
    return pd.DataFrame({"figure": [REDUCTION_LABELS.get(k, k.replace("_", " ")) for k in reduction],
                         "value": list(reduction.values())})


def _is(v, x) -> bool:
    try:
        return v is not None and float(v) == x
    except (TypeError, ValueError):
        return False


def explanations(figures: dict) -> list[str]:
    """A sentence for each summary figure a newcomer cannot read, in the order shown."""
    out = []
    for key, v in figures.items():
        if key == "max C1 risk":
            out.append("max C1 risk: over every record and every combination of identifying variables an "
                       "intruder may know, the largest chance that a released record with those values is that "
                       "person (C1, Cator et al., eq. (1)); a design is safe when it is at most α.")
        elif key in ("exact L2 loss",):
            out.append("exact L2 loss: the mean squared error of the corrected (unbiased) estimates of the cells' "
                       "shares of records; smaller keeps more information. Compare it between designs of the same "
                       "data (pramopt assess, pramopt baseline).")
        elif key == "lower bound on the loss":
            out.append("lower bound on the loss: no general, replacement or block design that meets C1 with the same "
                       "options has a smaller exact L2 loss (the lower bound on the expected changes over n², "
                       "docs/method.md): the best of those designs is within a factor of (the design's loss ÷ this "
                       "bound) of the design.")
        elif key == "lower bound on the expected changes":
            out.append("lower bound on the expected changes: no design that meets C1 with the same options changes "
                       "fewer records in expectation (the flow relaxation of C1).")
        elif key == "diagonal floor γ" and v is not None:
            out.append(f"diagonal floor γ = {_fmt(v)}: every cell keeps each of its records with probability at "
                       f"least γ (min diagonal is the smallest such probability), so no record changes with "
                       f"probability above 1 − γ = {_fmt(1 - float(v))}: the dashed line of the probability-of-change "
                       f"plot.")
        elif key.startswith("binding"):
            out.append("binding (π, k0), the binding rows: the groups of records (a combination π of identifying "
                       "variables and its values k0) whose C1 risk is at α (within 1e-4). They are what stops the "
                       "design from changing fewer records; every other group is safer than required.")
        elif key == "condition number":
            out.append("condition number: how much correcting the released counts for PRAM (multiplying by P⁻¹) "
                       "can amplify their random noise; 1 for P = I. Close to 1 the corrected estimates are "
                       "nearly as precise as the released counts; above about 100 they become unstable.")
        elif key.startswith("ε"):
            if _is(v, math.inf):
                out.append("ε = ∞: no finite ε-differential-privacy guarantee (Ikarashi et al., Theorem 1). Some "
                           "column of P has a zero next to a positive entry: some released cell can come from one "
                           "original cell but never from another, and seeing it rules the other out. A design made "
                           "for C1 only is usually so; design with --epsilon for a finite ε.")
            elif v is not None:
                out.append(f"{key}: ε-differential privacy (Ikarashi et al., Theorem 1), the largest log-ratio of "
                           "the probabilities that two original cells are released as the same cell; smaller is "
                           "more private.")
        elif key.startswith("Pk-anonymity k") and "target" not in key:
            if _is(v, 1.0):
                out.append("Pk-anonymity k = 1: the smallest value, no Pk-anonymity guarantee (Ikarashi et al., "
                           "Theorem 3). P has zeros that let an intruder with enough background knowledge tell a "
                           "record apart from every other; design with --k for a guarantee.")
            elif v is not None and not (isinstance(v, float) and math.isnan(v)):
                out.append(f"{key}: no intruder, whatever they know, can tell which person a released record came "
                           "from with probability above 1/k (Ikarashi et al., Theorem 3).")
            else:
                out.append(f"{key} n/a: not computed for a matrix this large (it takes O(K³) operations).")
        elif key.startswith("max R1"):
            if v is None:
                out.append("max R1(1, T) –: the correct-match risk of Nayak et al. is defined for a matrix that acts "
                           "on one variable; this one acts on several jointly, so it is not computed (C1 is the "
                           "risk for several variables).")
            else:
                out.append("max R1(1, T): the largest chance (Nayak et al.) that a released record with the "
                           "target's category is the target, over every category as the target.")
        elif key == "invariance error":
            out.append("invariance error ||U0ᵀP − U0ᵀ||₁: records moved out of balance in expectation; 0 for "
                       "invariant PRAM, whose released counts need no correction to be unbiased.")
        elif key.startswith("released as absent"):
            out.append(f"{key}: the share of records expected to be released as a combination of categories that "
                       "no record has; per-variable tools release those, and C1 above counts them.")
    return out


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _figure(figsize):
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")



def change_vs_frequency_figure(diag, table: FrequencyTable, gamma=None):
    """Cator et al., Figure 1, as two panels against U0(m) (a matplotlib Figure).

    Left, the paper's almost linear curve: the expected number of changed records of each cell,
    U0(m) (1 - P_mm).  Right, the probability of change of one record, 1 - P_mm: at the optimum
    it is nearly the same for the cells that send records, so it is flat where the left panel
    is linear.  With ``gamma``, a dashed line at 1 - γ (labelled ``"floor"``): no cell changes
    with a higher probability.
    """
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    fig = Figure(figsize=(11, 4))
    left, right = fig.subplots(1, 2)
    u = np.asarray(table.counts, dtype=float)
    change = 1.0 - np.asarray(diag)
    left.scatter(u, u * change, s=18, color="#1f5fa8", alpha=0.8)
    left.set_xlabel("frequency U0(m) of the cell")
    left.set_ylabel("expected changed records U0(m)(1 − P_mm)")
    left.set_title("Expected changes against frequency (the paper's Figure 1)")
    right.scatter(u, change, s=18, color="#1f5fa8", alpha=0.8)
    right.set_xscale("log")
    right.set_xlabel("frequency U0(m) of the cell (log scale)")
    right.set_ylabel("probability of change 1 − P_mm")
    right.set_title("Probability of change of one record")
    if gamma is not None and gamma > 0:
        right.axhline(1.0 - gamma, color="#b03a2e", linestyle="--", linewidth=1.2, gid="floor",
                      label=f"1 − γ = {1 - gamma:.3g}: no cell changes more often (diagonal floor γ = {gamma:.3g})")
        right.set_ylim(0, max(1.3 * (1.0 - gamma), 1.05 * float(change.max(initial=0))))
        right.legend(loc="upper center", fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig


def figure_change_vs_frequency(diag, table: FrequencyTable, gamma=None) -> str:
    """:func:`change_vs_frequency_figure` as a base64 PNG."""
    return _png(change_vs_frequency_figure(diag, table, gamma))


#: At most this many categories are drawn in one variable's panel (the largest before).
PANEL_CATEGORIES = 30


def variables_figure(changes: pd.DataFrame, margins: pd.DataFrame):
    """Small multiples: the share of records whose value of each variable changes, then per
    variable its categories' records before and expected after (a matplotlib Figure)."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    names = list(changes["variable"])
    panels = 1 + len(names)
    ncol = min(3, panels)
    nrow = math.ceil(panels / ncol)
    fig = Figure(figsize=(4.0 * ncol, 3.0 * nrow), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrow, ncol)).ravel()
    ax = axes[0]
    share = 100 * changes["share of records"].to_numpy(dtype=float)
    ax.barh(range(len(names)), share, color="#b03a2e")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("% of records whose value changes")
    ax.set_title("Expected change rate per variable", fontsize=10)
    for i, s in enumerate(share):
        ax.text(s, i, f" {s:.2g}%", va="center", fontsize=8)
    ax.set_xlim(0, max(share.max(initial=0) * 1.35, 1e-3))
    for ax, q in zip(axes[1:], names):
        m = margins[margins["variable"] == q]
        m = m[(m["before"] > 0) | (m["after (expected)"] > 0)]
        title = q
        if len(m) > PANEL_CATEGORIES:
            m = m.nlargest(PANEL_CATEGORIES, "before")
            title += f" ({PANEL_CATEGORIES} largest categories)"
        x = np.arange(len(m))
        ax.bar(x - 0.2, m["before"], width=0.4, color="#9db4d3", label="before")
        ax.bar(x + 0.2, m["after (expected)"], width=0.4, color="#1f5fa8", label="after (expected)")
        ax.set_xticks(x, list(m["category"]), rotation=90 if len(m) > 8 else 0, fontsize=8)
        ax.set_title(f"{title}: largest difference {m['difference'].abs().max():.3g} records", fontsize=10)
        pos = m[["before", "after (expected)"]].to_numpy(dtype=float)
        pos = pos[pos > 0]
        if pos.size and pos.max() > 50 * pos.min():  # small categories stay visible
            ax.set_yscale("log")
            ax.set_ylabel("records (log scale)")
        else:
            ax.set_ylabel("records")
        ax.legend(fontsize=7)
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig


def transitions_figure(transitions: dict):
    """Per variable, its transition matrix as a small heat map (a matplotlib Figure): colour for
    the changes (off the diagonal, log scale), the share kept written on the diagonal."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is
    from matplotlib.patches import Rectangle

    names = list(transitions)
    ncol = min(3, len(names))
    nrow = math.ceil(len(names) / ncol)
    fig = Figure(figsize=(3.6 * ncol, 3.2 * nrow), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrow, ncol)).ravel()
    offs = []
    for T in transitions.values():
        off = T.to_numpy(dtype=float).copy()
        k = min(off.shape)
        off[np.arange(k), np.arange(k)] = np.nan
        offs.append(off)
    pos = np.concatenate([o[np.isfinite(o) & (o > 0)] for o in offs]) if offs else np.array([])
    norm = LogNorm(vmin=max(pos.min(), 1e-6), vmax=max(pos.max(), 1.01 * max(pos.min(), 1e-6))) if pos.size else None
    im = None
    for ax, (q, T), off in zip(axes, transitions.items(), offs):
        shown = np.where(off > 0, off, np.nan)
        im = ax.imshow(shown, cmap="viridis", norm=norm, interpolation="nearest", aspect="auto")
        L0, L1 = T.shape
        k = min(L0, L1)
        for a in range(k):
            ax.add_patch(Rectangle((a - 0.5, a - 0.5), 1, 1, color="#e6e6e6"))
        if L1 <= 8:  # few categories: every share written in its square
            for a in range(L0):
                for b in range(L1):
                    v = T.iat[a, b]
                    if np.isfinite(v) and (v > 0 or a == b):
                        dark = a != b and norm is not None and norm(v) < 0.6
                        ax.text(b, a, f"{100 * v:.3g}%" if a == b else f"{100 * v:.2g}%", ha="center",
                                va="center", fontsize=7, color="white" if dark else "black")
        if max(L0, L1) <= 40:
            long = max(len(str(c)) for c in T.columns) > 3
            ax.set_xticks(range(L1), list(T.columns), rotation=90 if long else 0, fontsize=7)
            ax.set_yticks(range(L0), list(T.index), fontsize=7)
        ax.set_xlabel(f"released {q}")
        ax.set_ylabel(f"original {q}")
        ax.set_title(q, fontsize=10)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    if im is not None and norm is not None:
        from matplotlib.ticker import FuncFormatter
        pct = FuncFormatter(lambda v, _: f"{100 * v:.2g}%")
        cb = fig.colorbar(im, ax=list(axes[:len(names)]), label="share of the row's records changed into the column",
                          shrink=0.8, format=pct)
        cb.ax.yaxis.set_minor_formatter(pct)
    return fig


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return "n/a"
        if math.isinf(v):
            return "inf"
        return f"{v:.6g}"
    return str(v)


@dataclass
class _Utility:
    """The per-variable tables of one report, computed once for HTML and Markdown."""

    changes: pd.DataFrame
    margins: pd.DataFrame
    transitions: dict
    flows: pd.DataFrame


def _utility(d: ReportData) -> _Utility:
    labels = variable_labels(d.table, d.col_codes, d.col_cells)
    return _Utility(changes=variable_changes(d.matrix, d.table, d.col_codes),
                    margins=variable_margins(d.matrix, d.table, d.col_codes, labels),
                    transitions=variable_transitions(d.matrix, d.table, d.col_codes, labels),
                    flows=top_flows(d.matrix, d.table, col_codes=d.col_codes, labels=labels))


def _sections(d: ReportData, u: _Utility | None = None):
    """Shared content: (heading, DataFrame or dict) in display order."""
    u = u if u is not None else _utility(d)
    risk = risk_by_combination(d.matrix, d.table, d.combinations, d.alpha, d.col_codes)
    out = [("Summary", d.figures),
           ("Risk before and after, per combination (worst first)", risk),
           ("Expected change rate per variable", u.changes),
           ("Largest expected flows (cells as " + ", ".join(map(str, d.table.qi)) + ")", u.flows)]
    if d.reduction:
        out.append(("Reduction of the C1 constraints", reduction_table(d.reduction)))
    if d.stages:
        out.append(("Solver stages", pd.DataFrame(
            [{"stage": s.name, "seconds": s.seconds, "iterations": s.iterations, "detail": s.detail}
             for s in d.stages])))
    return out



def _html_table(obj) -> str:
    if isinstance(obj, dict):
        rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
                       for k, v in obj.items())
        return f'<table class="kv">{rows}</table>'
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in obj.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in obj.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _percent_table(T: pd.DataFrame) -> pd.DataFrame:
    """A transition matrix in percent, its row labels as the first column."""
    out = (100 * T).map(lambda v: "" if np.isnan(v) or v == 0 else f"{v:.3g}%")
    out.insert(0, f"{T.index.name} \\ {T.columns.name}", list(T.index))
    return out


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;
color:#1d2330;line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #dde}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #d5d9e0;padding:.25em .6em;text-align:left}
thead th{background:#eef1f6}table.kv th{background:#f6f7fa;font-weight:600}
.status{display:inline-block;padding:.15em .6em;border-radius:.3em;font-weight:700}
.ok{background:#d8f0dc;color:#1b5e20}.bad{background:#fbdada;color:#8e1b1b}
img{max-width:100%;border:1px solid #e2e5ea}figure{margin:1em 0}figcaption{font-size:.85em;color:#555}
ul.explain{font-size:.9em;color:#333}summary{cursor:pointer;color:#1f5fa8}
"""


def _img(alt: str, png: str, caption: str) -> str:
    return (f"<figure><img alt='{html.escape(alt)}' src='data:image/png;base64,{png}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


#: Above this many categories a variable's transition table is left to the CSV-like Markdown.
TABLE_CATEGORIES = 20


def render_html(d: ReportData) -> str:
    """A self-contained HTML report (inline CSS, figures as base64 PNG)."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>{html.escape(d.title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(d.title)}</h1>"]
    if d.status is not None:
        ok = d.status == "success"
        parts.append(f"<p><span class='status {'ok' if ok else 'bad'}'>{html.escape(d.status)}"
                     f"{'' if ok else ' — NOT SAFE TO RELEASE'}</span></p>")
    if d.message:
        parts.append(f"<p>{html.escape(d.message)}</p>")
    u = _utility(d)
    for head, obj in _sections(d, u):
        parts.append(f"<h2>{html.escape(head)}</h2>{_html_table(obj)}")
        if head == "Summary":
            words = explanations(d.figures)
            if words:
                parts.append("<ul class='explain'>" + "".join(f"<li>{html.escape(w)}</li>" for w in words)
                             + "</ul>")
        elif head.startswith("Risk before"):
            if d.alpha is not None:
                parts.append(f"<p>C1 (Cator et al., eq. (1)) requires every risk to be at most α = "
                             f"{d.alpha:g}; 'over' counts the k0 above it.</p>")
            floor = ("" if d.gamma is None or not d.gamma > 0 else
                     f" The dashed line is 1 − γ = {1 - d.gamma:.3g}: the diagonal floor γ = {d.gamma:.3g} keeps "
                     "every record with probability at least γ, so no cell lies above it.")
            parts.append("<h2>Changes against frequency</h2>" + _img(
                "expected changes and probability of change against frequency",
                figure_change_vs_frequency(d.diagonal(), d.table, d.gamma),
                "One point per present cell m. Left, as Figure 1 of Cator et al. (almost linear): the expected "
                "number of changed records of the cell, U0(m)(1 − P_mm). Right: the probability that one of its "
                "records changes, 1 − P_mm, nearly the same for the cells that send records, which is why the "
                "left panel is a line." + floor))
        elif head.startswith("Expected change rate"):
            parts.append("<p>The share of records whose value of each variable is expected to change, and each "
                         "variable's categories before and after (expected: U0ᵀP summed per category). A record "
                         "whose cell changes counts for every variable that changes with it.</p>")
            parts.append(_img("change rate and categories before and after, per variable",
                              _png(variables_figure(u.changes, u.margins)),
                              "First panel: expected % of records whose value of the variable changes. Then, "
                              "per variable, the records in each category before (light) and expected after "
                              "(dark)."))
            parts.append("<details><summary>Categories before and after, as a table</summary>"
                         + _html_table(u.margins) + "</details>")
            parts.append("<h2>Transitions per variable</h2><p>For each variable, the share of the records "
                         "with a category (row) released with another (column), summed over the cells: colour "
                         "for the changes (log scale, empty: none), grey on the diagonal for the records "
                         "kept.</p>")
            parts.append(_img("transition matrix per variable", _png(transitions_figure(u.transitions)),
                              "Row a, column b: expected share of the records with category a released as b."))
            for q, T in u.transitions.items():
                if T.shape[1] <= TABLE_CATEGORIES:
                    parts.append(f"<details><summary>{html.escape(q)}: transitions as a table (%)</summary>"
                                 + _html_table(_percent_table(T)) + "</details>")
    if d.solver:
        parts.append(f"<p>Solver: {html.escape(str(d.solver))}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _md_table(obj) -> str:
    if isinstance(obj, dict):
        obj = pd.DataFrame({"figure": list(obj), "value": list(obj.values())})
    cols = [str(c) for c in obj.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in obj.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def render_markdown(d: ReportData) -> str:
    """The report's tables in Markdown (the figures are in the HTML report)."""
    out = [f"# {d.title}", ""]
    if d.status is not None:
        out += [f"**Status: {d.status}**" + ("" if d.status == "success" else " — NOT SAFE TO RELEASE"), ""]
    if d.message:
        out += [d.message, ""]
    u = _utility(d)
    for head, obj in _sections(d, u):
        out += [f"## {head}", "", _md_table(obj), ""]
        if head == "Summary":
            out += [f"* {w}" for w in explanations(d.figures)] + [""]
        elif head.startswith("Expected change rate"):
            out += ["## Categories before and after (expected)", "", _md_table(u.margins), ""]
            out += ["## Transitions per variable (% of the row's records)", ""]
            for q, T in u.transitions.items():
                if T.shape[1] <= TABLE_CATEGORIES:
                    out += [f"### {q}", "", _md_table(_percent_table(T)), ""]
                else:
                    out += [f"### {q}", "", f"{T.shape[1]} categories: in report.html.", ""]
    if d.solver:
        out += [f"Solver: {d.solver}", ""]
    out += ["The figures (changes against frequency, change rates and categories per variable, transitions "
            "per variable) are in report.html.", ""]
    return "\n".join(out)
