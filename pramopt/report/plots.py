"""The report's drawings: matplotlib figures of the figures' data, as base64 PNG for the HTML.

Figures are drawn on :class:`matplotlib.figure.Figure` objects directly, never through pyplot,
so that writing a report leaves the caller's matplotlib backend and figures as they were.
:data:`PLOTS` names the figure ids that have a drawing: id -> a function of the report's figure
data (figure id -> data) that returns the Figure.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from .._labels import short_labels
from ..frequency.table import FrequencyTable
from .data import ChangePoints, change_points
from .flows import NEGLIGIBLE

__all__ = [
    "change_vs_frequency_figure",
    "figure_change_vs_frequency",
    "variables_figure",
    "transitions_figure",
    "thinned_ticks",
    "colorbar_ticks",
    "PLOTS",
    "png",
]


def png(fig) -> str:
    """A matplotlib Figure as a base64 PNG (100 dpi)."""
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
    return change_points_figure(change_points(diag, table, gamma))


def change_points_figure(points: ChangePoints):
    """:func:`change_vs_frequency_figure` of Figure 1's points."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    u, change, gamma = points.frequency, points.change, points.gamma
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
        right.axhline(
            1.0 - gamma,
            color="#b03a2e",
            linestyle="--",
            linewidth=1.2,
            gid="floor",
            label=f"1 − γ = {1 - gamma:.3g}: no cell changes more often "
            f"(diagonal floor γ = {gamma:.3g})",
        )
        right.set_ylim(0, max(1.3 * (1.0 - gamma), 1.05 * float(change.max(initial=0))))
        # below the panel, off the points and the ticks
        right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, frameon=False)
    right.xaxis.set_major_formatter(_plain)
    right.xaxis.set_minor_formatter(_plain_minor(u))
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig


def _plain(v, _=None) -> str:
    """A tick of a log axis as a plain number (``3``, ``100``, ``0.001``), not ``3×10⁰``."""
    return f"{v:g}"


def _plain_minor(values):
    """The minor ticks' labels of a log axis over ``values``: 2, 3 and 5 times a power of ten as
    plain numbers when the axis spans less than a decade (then its only labels; 8 and 9 would
    run into each other), else none (they would crowd the decades')."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    pos = np.asarray(values, dtype=float)
    pos = pos[pos > 0]
    if not (pos.size and pos.max() < 10 * pos.min()):
        return NullFormatter()

    def label(v, _=None) -> str:
        lead = round(v / 10 ** math.floor(math.log10(v))) if v > 0 else 0
        return _plain(v) if lead in (2, 3, 5) else ""

    return FuncFormatter(label)


def figure_change_vs_frequency(diag, table: FrequencyTable, gamma=None) -> str:
    """:func:`change_vs_frequency_figure` as a base64 PNG."""
    return png(change_vs_frequency_figure(diag, table, gamma))


#: At most this many categories are drawn in one variable's panel (the largest before).
PANEL_CATEGORIES = 20

#: The longest label on a drawing's axes (characters): the tables show up to
#: :data:`pramopt._labels.LABEL_LIMIT`, a small panel has room for fewer.
TICK_LIMIT = 16


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
        ticks = short_labels(map(str, m["category"]), TICK_LIMIT)
        turn = len(m) > 8 or max(map(len, ticks), default=0) > 8  # long labels would overlap
        ax.set_xticks(x, ticks, rotation=90 if turn else 0, fontsize=8)
        ax.set_title(
            # two lines: one would run into the next panel's title
            f"{title}\nlargest difference {m['difference'].abs().max():.3g} records",
            fontsize=10,
        )
        pos = m[["before", "after (expected)"]].to_numpy(dtype=float)
        pos = pos[pos > 0]
        if pos.size and pos.max() > 50 * pos.min():  # small categories stay visible
            ax.set_yscale("log")
            ax.set_ylabel("records (log scale)")
        else:
            ax.set_ylabel("records")
    for ax in axes[panels:]:
        ax.set_visible(False)
    if panels > 1:
        # one legend for every panel, above them: a legend inside a panel covers its bars
        fig.legend(*axes[1].get_legend_handles_labels(), loc="outside upper center", ncols=2)
    return fig


#: Up to this many categories every one is named on a heat map's axis; beyond, every few.
HEAT_TICKS = 15


def thinned_ticks(n: int, most: int = HEAT_TICKS) -> list[int]:
    """Positions of the ticks of an axis of ``n`` categories: every one up to ``most``, else
    every ``ceil(n / most)``-th from the first, so that no two labels overprint."""
    step = max(1, math.ceil(n / most))
    return list(range(0, n, step))


def _share(v, _=None) -> str:
    return f"{100 * v:.2g}%"


def colorbar_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Ticks of a log colour scale from ``lo`` to ``hi``: 1, 2 and 5 times a power of ten, or
    fewer of them (only 1 and 3, only powers of ten, every other power) until at most ``most``
    remain; ``lo`` and ``hi`` themselves when the scale holds fewer than two."""
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks: list[float] = []
    for mults, every in (((1, 2, 5), 1), ((1, 3), 1), ((1,), 1), ((1,), 2), ((1,), 4)):
        ticks = [
            m * 10.0**k
            for k in range(k0, k1 + 1)
            if (k - k0) % every == 0
            for m in mults
            if lo <= m * 10.0**k <= hi * (1 + 1e-12)
        ]
        if len(ticks) <= most:
            break
    return ticks if len(ticks) >= 2 else [lo, hi] if hi > lo else [lo]


def transitions_figure(transitions: dict):
    """Per variable, its transition matrix as a small heat map (a matplotlib Figure): colour for
    the changes (off the diagonal, log scale), the share kept written on the diagonal.

    Axes are labelled with the categories as the matrices' labels write them (every few when
    there are many: :func:`thinned_ticks`); shares below :data:`.flows.NEGLIGIBLE` are solver
    round-off, left blank and out of the colour scale.
    """
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
        off[off < NEGLIGIBLE] = np.nan
        k = min(off.shape)
        off[np.arange(k), np.arange(k)] = np.nan
        offs.append(off)
    pos = np.concatenate([o[np.isfinite(o)].ravel() for o in offs]) if offs else np.array([])
    norm, lo, hi = None, 0.0, 0.0
    if pos.size:
        lo, hi = float(pos.min()), float(max(pos.max(), 1.01 * pos.min()))
        norm = LogNorm(vmin=lo, vmax=hi)
    im = None
    for ax, (q, T), off in zip(axes, transitions.items(), offs):
        im = ax.imshow(off, cmap="viridis", norm=norm, interpolation="nearest", aspect="auto")
        L0, L1 = T.shape
        for a in range(min(L0, L1)):
            ax.add_patch(Rectangle((a - 0.5, a - 0.5), 1, 1, color="#e6e6e6"))
        if L1 <= 8:  # few categories: every share written in its square
            _write_shares(ax, T, off, norm)
        cols = short_labels(map(str, T.columns), TICK_LIMIT)
        rows = short_labels(map(str, T.index), TICK_LIMIT)
        xt, yt = thinned_ticks(L1), thinned_ticks(L0)
        # turned upright when side by side they would not fit
        turn = len(xt) > 8 or max((len(cols[i]) for i in xt), default=0) > 3
        ax.set_xticks(xt, [cols[i] for i in xt], rotation=90 if turn else 0, fontsize=7)
        ax.set_yticks(yt, [rows[i] for i in yt], fontsize=7)
        ax.set_xlabel(f"released {q}" + ("" if len(xt) == L1 else f" ({L1} categories)"))
        ax.set_ylabel(f"original {q}" + ("" if len(yt) == L0 else f" ({L0} categories)"))
        ax.set_title(q, fontsize=10)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    if im is not None and norm is not None:
        from matplotlib.ticker import FuncFormatter, NullFormatter

        cb = fig.colorbar(
            im,
            ax=list(axes[: len(names)]),
            shrink=0.8,
            label="share of the row's records changed into the column",
        )
        # named ticks only: the log scale's own minor labels overprint each other
        cb.set_ticks(colorbar_ticks(lo, hi))
        cb.ax.yaxis.set_major_formatter(FuncFormatter(_share))
        cb.ax.yaxis.set_minor_formatter(NullFormatter())
    return fig


def _write_shares(ax, T: pd.DataFrame, off: np.ndarray, norm) -> None:
    """Each share of a small transition matrix written in its square (a blank for none)."""
    for a in range(T.shape[0]):
        for b in range(T.shape[1]):
            v = T.iat[a, b]
            if a != b and not np.isfinite(off[a, b]):
                continue  # no change, or round-off
            if not np.isfinite(v):
                continue
            dark = a != b and norm is not None and norm(v) < 0.6
            ax.text(
                b,
                a,
                f"{100 * v:.3g}%" if a == b else f"{100 * v:.2g}%",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
            )


#: Figure id -> its drawing, from the report's figure data (id -> data); the HTML report embeds
#: each as a PNG.  Looked up when called, so that a test may put a stand-in in its place.
PLOTS: dict[str, Callable[[dict], object]] = {
    "change_vs_frequency": lambda f: change_points_figure(f["change_vs_frequency"]),
    "change_rates": lambda f: variables_figure(f["change_rates"], f["margins"]),
    "transitions": lambda f: transitions_figure(f["transitions"]),
}
