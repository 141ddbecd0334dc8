"""Self-contained HTML and Markdown reports of a PRAM matrix on one data set.

The HTML has inline CSS and its figures embedded as base64 PNGs, so it can be mailed or archived
as one file.  Figures are drawn on :class:`matplotlib.figure.Figure` objects directly, never
through pyplot, so that writing a report leaves the caller's matplotlib backend and figures as
they were.  The matrix may be sparse: nothing here makes a dense K x K array of a large design.  The Markdown has the same tables, for terminals and
merge requests, and refers to the HTML for the figures.

Contents: the summary figures; the C1 risk before (P = I) and after, per combination of
identifying variables, worst first; the paper's Figure 1 (expected changed records
U0(m)(1 - P_mm) against the frequency U0(m), Cator et al., Section 4) beside the probability of
change 1 - P_mm; a heat map of the off-diagonal transitions; the largest expected flows; the reduction and solver statistics.
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

from .frequency.table import FrequencyTable
from .verify import c1_risk

__all__ = ["ReportData", "risk_by_combination", "render_html", "render_markdown", "from_result"]


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
    col_labels: Sequence | None = None

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
                      stages=tuple(result.stages), solver=result.solver)


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


def top_flows(P, table: FrequencyTable, n: int = 15, diag_cols=None, col_labels=None) -> pd.DataFrame:
    """The off-diagonal transitions moving the most records in expectation (U0(m) P_mk).

    ``diag_cols[m]`` is the column of row m's own cell (default: m).
    """
    M = sp.coo_array(P)
    r, c, p = M.row, M.col, M.data.astype(float)
    dc = np.arange(M.shape[0]) if diag_cols is None else np.asarray(diag_cols)
    off = (c != dc[r]) & (p > 0)
    r, c, p = r[off], c[off], p[off]
    flow = table.counts[r] * p
    order = np.argsort(-flow, kind="stable")[:n]
    cells = table.cells()
    lab = [", ".join(map(str, row)) for row in cells.itertuples(index=False)]
    clab = lab if col_labels is None else list(col_labels)
    return pd.DataFrame({"from": [lab[i] for i in r[order]], "to": [clab[j] for j in c[order]],
                         "U0(from)": table.counts[r[order]], "probability": p[order],
                         "expected records": flow[order]})


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


#: Up to this many cells the heat map is an image of the matrix; beyond, one mark per entry.
HEATMAP_IMAGE_MAX = 300


def figure_change_vs_frequency(diag, table: FrequencyTable) -> str:
    """Cator et al., Figure 1, as two panels against U0(m) (base64 PNG).

    Left, the paper's almost linear curve: the expected number of changed records of each cell,
    U0(m) (1 - P_mm).  Right, the probability of change of one record, 1 - P_mm: at the optimum
    it is nearly the same for the cells that send records, so it is flat where the left panel
    is linear.
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
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return _png(fig)


def figure_heatmap(P, table: FrequencyTable, diag_cols=None) -> str:
    """Heat map of the off-diagonal entries of P, rows and columns in cell order (base64 PNG).

    Up to ``HEATMAP_IMAGE_MAX`` cells it is an image of the matrix; beyond, one mark per
    off-diagonal entry (the matrix is never made dense).
    """
    from matplotlib.colors import LogNorm

    M = sp.coo_array(P)
    K, Kc = M.shape
    dc = np.arange(K) if diag_cols is None else np.asarray(diag_cols)
    keep = (M.col != dc[M.row]) & (M.data > 0)
    rows, cols, vals = M.row[keep], M.col[keep], M.data[keep].astype(float)
    size = min(9.0, 3.5 + K / 40)
    fig, ax = _figure((size + 1.2, size))
    if vals.size:
        norm = LogNorm(vmin=max(vals.min(), 1e-12), vmax=vals.max())
        if max(K, Kc) <= HEATMAP_IMAGE_MAX:
            off = np.full((K, Kc), np.nan)
            off[rows, cols] = vals
            im = ax.imshow(off, cmap="viridis", interpolation="nearest", norm=norm)
        else:
            im = ax.scatter(cols, rows, c=vals, cmap="viridis", norm=norm, s=max(0.5, 2000.0 / K), marker="s",
                            linewidths=0)
            ax.set_xlim(-0.5, Kc - 0.5)
            ax.set_ylim(K - 0.5, -0.5)
        fig.colorbar(im, ax=ax, label="P_mk (off the diagonal, log scale)")
    else:
        ax.imshow(np.zeros((min(K, 2), min(Kc, 2))), cmap="Greys", vmin=0, vmax=1)
        ax.text(0.5, 0.5, "no off-diagonal transitions", ha="center", va="center", transform=ax.transAxes)
    if K <= 40 and Kc == K:
        lab = [",".join(map(str, r)) for r in table.cells().itertuples(index=False)]
        ax.set_xticks(range(K), lab, rotation=90, fontsize=6)
        ax.set_yticks(range(K), lab, fontsize=6)
    ax.set_xlabel("released cell k")
    ax.set_ylabel("original cell m")
    ax.set_title("Transitions off the diagonal")
    return _png(fig)


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


def _sections(d: ReportData):
    """Shared content: (heading, DataFrame or dict) in display order."""
    risk = risk_by_combination(d.matrix, d.table, d.combinations, d.alpha, d.col_codes)
    out = [("Summary", d.figures),
           ("Risk before and after, per combination (worst first)", risk),
           ("Largest expected flows", top_flows(d.matrix, d.table, diag_cols=_diag_cols(d),
                                                col_labels=d.col_labels))]
    if d.reduction:
        out.append(("Reduction of the C1 constraints", dict(d.reduction)))
    if d.stages:
        out.append(("Solver stages", pd.DataFrame(
            [{"stage": s.name, "seconds": s.seconds, "iterations": s.iterations, "detail": s.detail}
             for s in d.stages])))
    return out


def _diag_cols(d: ReportData):
    """Column of each present cell's own cell in the matrix."""
    if d.col_codes is None:
        return None
    lookup = {tuple(r): i for i, r in enumerate(np.asarray(d.col_codes).tolist())}
    return np.array([lookup[tuple(r)] for r in d.table.codes.tolist()], dtype=np.int64)


def _html_table(obj) -> str:
    if isinstance(obj, dict):
        rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
                       for k, v in obj.items())
        return f'<table class="kv">{rows}</table>'
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in obj.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in obj.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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
"""


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
    secs = _sections(d)
    for i, (head, obj) in enumerate(secs):
        parts.append(f"<h2>{html.escape(head)}</h2>{_html_table(obj)}")
        if i == 1:
            if d.alpha is not None:
                parts.append(f"<p>C1 (Cator et al., eq. (1)) requires every risk to be at most α = "
                             f"{d.alpha:g}; 'over' counts the k0 above it.</p>")
            parts.append("<h2>Changes against frequency</h2><figure>"
                         "<img alt='expected changes and probability of change against frequency' "
                         "src='data:image/png;base64,"
                         f"{figure_change_vs_frequency(d.diagonal(), d.table)}'><figcaption>One point per present "
                         "cell m. Left, as Figure 1 of Cator et al. (almost linear): the expected number "
                         "of changed records of the cell, U0(m)(1 − P_mm). Right: the probability that "
                         "one of its records changes, 1 − P_mm, nearly the same for the cells that send "
                         "records, which is why the left panel is a line."
                         "</figcaption></figure>")
            parts.append("<h2>Transitions off the diagonal</h2><figure>"
                         f"<img alt='heat map of off-diagonal transitions' src='data:image/png;base64,"
                         f"{figure_heatmap(d.matrix, d.table, _diag_cols(d))}'><figcaption>Empty entries are zero."
                         "</figcaption></figure>")
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
    for head, obj in _sections(d):
        out += [f"## {head}", "", _md_table(obj), ""]
    if d.solver:
        out += [f"Solver: {d.solver}", ""]
    out += ["The figures (expected changes and probability of change against frequency, heat map of "
            "the transitions) are in report.html.", ""]
    return "\n".join(out)
