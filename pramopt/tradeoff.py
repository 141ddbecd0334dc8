"""The risk–utility frontier: the optimal design and every calibrated baseline across several α.

For each security level α of a list, :func:`frontier` makes the optimal design
(:func:`pramopt.design`) and every closed-form baseline calibrated to the same α
(:data:`pramopt.baselines.BASELINES`), all on one frequency table counted once, and puts
their exact L2 loss, expected number of changed records, verified largest C1 risk, time and
status side by side.  Plotted against α (:meth:`Frontier.figure`), this is the picture an
office uses to choose α: how much utility each step of security costs, and how much the
optimal design saves over the closed forms at the same verified risk.

Every point is a :class:`~pramopt.DesignResult` finished through the same independent C1 check
(:mod:`pramopt.verify`); a baseline that cannot meet C1 at some α keeps its row, with its
status and risk, and is drawn as a cross.

The baselines are calibrated to C1 at α alone: options that restrict the optimal design
(``fixed``, ``keep_cells``, ``invariant``, ``epsilon``, ``k``, ...) do not apply to them.  They
are dense K x K closed forms, so by default (``baselines="auto"``) they are computed up to
:data:`BASELINE_MAX_CELLS` cells and left out, with a note, beyond.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

from ._validation import InvalidParameterError, check_int, check_real, fail
from .baselines.registry import BASELINES, canonical_name
from .errors import CallbackError
from .frequency.table import FrequencyTable
from .optimize.designer import design, table_and_combinations
from .params import DesignParams
from .result import DesignResult

__all__ = [
    "frontier",
    "Frontier",
    "check_alphas",
    "DEFAULT_ALPHAS",
    "BASELINE_MAX_CELLS",
    "OPTIMAL",
]

#: The α of a frontier when none are given.
DEFAULT_ALPHAS = (0.05, 0.1, 0.2)
#: ``baselines="auto"`` computes the (dense K x K) calibrated baselines up to this many cells.
BASELINE_MAX_CELLS = 2000
#: Name of the optimal design's rows.
OPTIMAL = "optimal"

#: Columns of :attr:`Frontier.points`, in order.
COLUMNS = (
    "alpha",
    "design",
    "kind",
    "status",
    "meets_c1",
    "loss",
    "expected_changes",
    "max_risk",
    "seconds",
    "parameters",
)


def alpha_axes(axes, alphas) -> None:
    """The α axis of a frontier's panels: the α given as ticks, a log scale over a wide range."""
    from matplotlib.ticker import NullLocator

    log_alpha = max(alphas) / min(alphas) >= 4
    for ax in axes:
        if log_alpha:
            ax.set_xscale("log")
        ax.set_xticks(list(alphas), [f"{a:g}" for a in alphas])
        ax.xaxis.set_minor_locator(NullLocator())  # the α given, not the log scale's own ticks
        ax.set_xlabel("α (C1 security level; smaller is safer)")
        ax.grid(alpha=0.3)


def legend_below(fig, handles, labels, hidden, bottom: float, ncol: int) -> None:
    """The legend below the panels, where it hides no point (``bottom``: the share of the figure
    kept for it), and the points a log scale cannot draw said under it."""
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.legend(
        handles,
        labels,
        fontsize=8,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.01),
        ncol=min(len(labels), ncol),
        frameon=False,
    )
    if hidden:
        words = "Not drawn on the log scale: " + "; ".join(hidden)
        fig.text(0.5, 0.0, words, fontsize=8, ha="center", va="top")


def check_alphas(alphas, owner: str = "frontier") -> tuple[float, ...]:
    """The α of a frontier, checked and sorted: a non-empty list of distinct numbers in (0, 1).

    Raises
    ------
    InvalidParameterError
        Naming ``alphas`` for a string, an empty list, a non-number, a value outside (0, 1) or a
        value given twice.
    """
    allowed = "a non-empty list of distinct numbers in (0, 1)"
    if isinstance(alphas, (str, bytes)) or not isinstance(alphas, (Sequence, np.ndarray)):
        fail("alphas", owner, allowed, alphas)
    if len(alphas) == 0:
        fail("alphas", owner, allowed, list(alphas))
    out = []
    for a in alphas:
        try:
            out.append(check_real(a, "alphas", owner, low=0.0, high=1.0))
        except InvalidParameterError:
            fail("alphas", owner, f"{allowed} ({a!r} is not)", list(alphas))
    twice = sorted({a for a in out if out.count(a) > 1})
    if twice:
        fail(
            "alphas",
            owner,
            f"{allowed} ({', '.join(f'{a:g}' for a in twice)} given twice)",
            list(alphas),
        )
    return tuple(sorted(out))


def _check_baselines(baselines, n_cells: int, owner: str) -> tuple[tuple[str, ...], str | None]:
    """The baseline names to compute, and a note when "auto" left them out."""
    names = tuple(BASELINES)
    allowed = f'"auto", "all", "none" or a list of {list(names)!r}'
    if baselines is None or (isinstance(baselines, str) and baselines == "none"):
        return (), None
    if isinstance(baselines, str):
        if baselines == "all":
            chosen = names
        elif baselines == "auto":
            if n_cells > BASELINE_MAX_CELLS:
                return (), (
                    f"The calibrated baselines are left out: {n_cells} cells is more than "
                    f"{BASELINE_MAX_CELLS} (they are dense K x K closed forms; baselines='all' "
                    "computes them anyway)."
                )
            chosen = names
        else:
            chosen = (_registered(baselines, owner, allowed),)
    else:
        try:
            given = tuple(baselines)
        except TypeError:
            fail("baselines", owner, allowed, baselines)
        chosen = tuple(_registered(b, owner, allowed, given) for b in given)
        if len(set(chosen)) != len(chosen):
            fail("baselines", owner, allowed, list(given))
    return tuple(n for n in names if n in chosen), None


def _registered(name, owner: str, allowed: str, given=None) -> str:
    """The registered name of one of ``baselines`` (an old spelling with an OldNameWarning)."""
    try:
        return canonical_name(name, owner, "baselines")
    except InvalidParameterError:
        fail("baselines", owner, allowed, name if given is None else list(given))
        raise  # fail raised; for the type checker


@dataclass(frozen=True)
class Frontier:
    """The optimal design and the calibrated baselines at each α of a list.

    Attributes
    ----------
    points : pandas.DataFrame
        One row per α and design: ``alpha``, ``design`` (``"optimal"`` or the baseline's name),
        ``kind`` (``"optimal"``/``"baseline"``), ``status``, ``meets_c1`` (the verified C1 holds:
        ``max_risk <= alpha``), ``loss`` (exact L2), ``expected_changes``, ``max_risk`` (from the
        independent check), ``seconds`` (wall time of that design) and ``parameters`` (γ and
        structure of the optimal design, the tuned parameters of a baseline).
    alphas : tuple of float
        In increasing order.
    designs : mapping
        α -> the optimal :class:`~pramopt.DesignResult`.
    baselines : mapping
        α -> {baseline name -> its :class:`~pramopt.DesignResult`}.
    table : FrequencyTable
        The cells and counts, counted once for every point.
    combinations : tuple of tuples of str
        Π.
    params : mapping
        The design options (every parameter of :func:`pramopt.design` but ``alpha``).
    notes : tuple of str
        What the points do not show (baselines left out, options that do not apply to them).
    """

    points: pd.DataFrame
    alphas: tuple
    designs: Mapping = field(repr=False)
    baselines: Mapping = field(repr=False)
    table: FrequencyTable = field(repr=False)
    combinations: tuple = ()
    params: Mapping = field(default_factory=lambda: MappingProxyType({}), repr=False)
    notes: tuple = ()

    @property
    def names(self) -> tuple:
        """The designs shown: ``"optimal"`` and the baselines computed, in order."""
        return tuple(dict.fromkeys(self.points["design"]))

    def result(self, alpha: float, name: str = OPTIMAL) -> DesignResult:
        """The :class:`~pramopt.DesignResult` of one point."""
        a = _match(alpha, self.alphas)
        return self.designs[a] if name == OPTIMAL else self.baselines[a][name]

    @property
    def success(self) -> bool:
        """True when the optimal design meets C1 at every α (baselines may fail: they are shown
        so)."""
        return all(r.success for r in self.designs.values())

    def summary(self) -> str:
        """The points as a plain-text table."""
        cols = ["alpha", "design", "status", "loss", "expected_changes", "max_risk", "seconds"]
        return self.points[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")

    def figure(self):
        """Loss (log scale) and expected changes against α, one line per design.

        Points that fail C1 at their α are crosses, off the line; a loss of 0 (nothing to
        change) or inf (a singular matrix) cannot be drawn on a log scale and is said under the
        figure.  Returns a :class:`matplotlib.figure.Figure` (pyplot is not used).
        """
        from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

        fig = Figure(figsize=(12, 4.6))
        left, right = fig.subplots(1, 2)
        pts = self.points
        colors = {n: f"C{i}" for i, n in enumerate(self.names)}
        markers = dict(zip(self.names, "oosD^v<>p"))
        hidden = []
        for name in self.names:
            g = pts[pts["design"] == name].sort_values("alpha")
            ok = g["meets_c1"].to_numpy(bool)
            lw, z = (2.4, 3) if name == OPTIMAL else (1.4, 2)
            x = g["alpha"].to_numpy(float)
            for ax, col in ((left, "loss"), (right, "expected_changes")):
                y = g[col].to_numpy(float)
                # a log scale shows neither 0 (nothing to change) nor inf (a singular matrix)
                shown = np.isfinite(y) & ((y > 0) if col == "loss" else (y >= 0))
                ax.plot(
                    x[ok & shown],
                    y[ok & shown],
                    marker=markers[name],
                    color=colors[name],
                    lw=lw,
                    zorder=z,
                    label=name,
                )
                if (~ok & shown).any():
                    ax.scatter(
                        x[~ok & shown],
                        y[~ok & shown],
                        marker="x",
                        s=60,
                        color=colors[name],
                        zorder=z,
                    )
                if col == "loss":
                    hidden += [
                        f"{name} at α = {a:g} (loss {v:g})" for a, v in zip(x[~shown], y[~shown])
                    ]
        alpha_axes((left, right), self.alphas)
        if (pts["loss"].replace([np.inf], np.nan) > 0).any():
            left.set_yscale("log")
        left.set_ylabel("exact L2 loss (log scale)")
        left.set_title("Loss against α")
        right.set_yscale("symlog", linthresh=1.0)
        right.set_ylim(bottom=0)
        right.set_ylabel("expected changed records (symlog scale)")
        right.set_title(f"Expected changes against α (of {self.table.n} records)")
        handles, labels = left.get_legend_handles_labels()
        if not pts["meets_c1"].all():
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], marker="x", ls="", color="0.3"))
            labels.append("fails C1 at that α")
        legend_below(fig, handles, labels, hidden, bottom=0.08, ncol=6)
        return fig

    def png(self) -> bytes:
        """:meth:`figure` as PNG bytes."""
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=110, bbox_inches="tight")
        return buf.getvalue()

    def to_html(self, title: str = "pramopt frontier", png: bytes | None = None) -> str:
        """A self-contained HTML page in the style of the design report (figure embedded)."""
        from .report import _CSS, _html_table

        png = self.png() if png is None else png
        t = self.table
        summary = {
            "records n": t.n,
            "present cells K": t.n_cells,
            "identifying variables": ", ".join(map(str, t.qi)),
            "combinations |Π|": len(self.combinations),
            "α": ", ".join(f"{a:g}" for a in self.alphas),
            "designs": ", ".join(self.names),
        }
        defaults = {f.name: f.default for f in dataclasses.fields(DesignParams)}
        options = {k: v for k, v in self.params.items() if defaults.get(k) != v}
        if options:
            summary["design options"] = ", ".join(f"{k}={v}" for k, v in options.items())
        ok = self.success
        status = "success" if ok else "an optimal design failed"
        pts = self.points.drop(columns=["kind"])
        parts = [
            "<!DOCTYPE html><html lang='en'><head><meta "
            f"charset='utf-8'><title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p><span class='status {'ok' if ok else 'bad'}'>{html.escape(status)}</span></p>",
            "<p>For each α the optimal design (pramopt.design) and every closed-form baseline "
            "calibrated to the same α, each checked by the same independent C1 verification: a "
            "point on a line meets C1 at its α, a cross does not.</p>",
            f"<h2>Summary</h2>{_html_table(summary)}",
            "<h2>Loss and expected changes against α</h2><figure><img alt='loss and expected "
            "changes against alpha' "
            f"src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'>"
            "<figcaption>Left: the exact L2 loss of the unbiased estimator (log scale). Right: the "
            "expected number of records whose identifying values change. A smaller α is safer and "
            "costs more; the gap between the optimal line and a baseline's is what optimising "
            "saves at the same verified risk.</figcaption></figure>",
            f"<h2>Points</h2>{_html_table(pts)}",
            "<h2>Ratio of each baseline's loss to the optimal "
            f"loss</h2>{_html_table(self.ratios())}",
        ]
        if self.notes:
            parts.append(
                "<h2>Notes</h2><ul>"
                + "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
                + "</ul>"
            )
        parts.append("</body></html>")
        return "\n".join(parts)

    def ratios(self) -> pd.DataFrame:
        """α -> loss of each baseline that meets C1 divided by the optimal loss (> 1: the optimal
        design loses less); empty cells where a baseline fails C1 or the optimal loss is 0."""
        rows = []
        for a in self.alphas:
            opt = self.designs[a]
            row = {"alpha": a, "optimal loss": opt.loss}
            for name, b in self.baselines[a].items():
                row[name] = (
                    b.loss / opt.loss if b.success and opt.success and opt.loss > 0 else math.nan
                )
            rows.append(row)
        return pd.DataFrame(rows)


def _match(alpha, alphas) -> float:
    for a in alphas:
        if math.isclose(a, float(alpha), rel_tol=1e-12, abs_tol=0.0):
            return a
    raise KeyError(f"alpha {alpha!r} is not one of {list(alphas)!r}")


def _row(alpha: float, name: str, r: DesignResult, seconds: float) -> dict:
    if name == OPTIMAL:
        structure = r.reduction.structure if r.reduction is not None else "none needed"
        params = f"structure={structure}" + (f", gamma={r.gamma:g}" if r.gamma else "")
    else:
        # sdcMicro's own "alpha" (its mixing weight) is not C1's α
        keep = {
            {"alpha": "pram_alpha"}.get(k, k): r.details[k]
            for k in BASELINES[name].tuned
            if k in r.details
        }
        params = ", ".join(f"{k}={_short(v)}" for k, v in keep.items())
    return {
        "alpha": alpha,
        "design": name,
        "kind": "optimal" if name == OPTIMAL else "baseline",
        "status": r.status.value,
        "meets_c1": bool(r.success),
        "loss": float(r.loss),
        "expected_changes": float(r.expected_changes),
        "max_risk": float(r.max_risk),
        "seconds": seconds,
        "parameters": params,
    }


def _short(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(f"{x:.3g}" for x in v) + "]"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def frontier(
    data,
    qi=None,
    alphas=DEFAULT_ALPHAS,
    *,
    baselines="auto",
    seed: int = 0,
    progress: Callable | None = None,
    **design_options,
) -> Frontier:
    """The risk–utility frontier: the optimal design and every calibrated baseline at each α.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        Microdata (then ``qi`` is required) or its frequency table; counted once for every point.
    qi : list of str, optional
        Identifying variables.
    alphas : sequence of float
        The C1 levels, distinct, each in (0, 1) (sorted in the result).
    baselines : {"auto", "all", "none"} or list of str
        The calibrated baselines (names of :data:`pramopt.baselines.BASELINES`: retention,
        retention-per-attribute, ifpr, sdcmicro) computed beside the optimal design.  ``"auto"``
        (default): all of them up to :data:`BASELINE_MAX_CELLS` cells, none beyond (with a note).
        The old spellings ``"rr"`` and ``"invariant"`` run ``"retention"`` and ``"sdcmicro"``,
        with an :class:`~pramopt.baselines.registry.OldNameWarning`; the points name the family
        as registered.
    seed : int
        Seed of the sdcmicro baseline's random diagonals.
    progress : callable, optional
        ``progress(alpha, name, result)``: called with ``result=None`` when a point starts and with
        its :class:`~pramopt.DesignResult` when it is done.
    **design_options
        Any parameter of :func:`pramopt.design` but ``alpha`` (``combination_size``, ``gamma``,
        ``fixed``, ...), the same at every α.  Π and the table are shared with the baselines;
        the other options restrict the optimal design only.

    Returns
    -------
    Frontier
        Its ``points`` table, the results per α, and notes.

    Raises
    ------
    InvalidParameterError
        For bad ``alphas``, ``baselines`` or design options, before any design is made.
    """
    owner = "frontier"
    if "alpha" in design_options:
        raise InvalidParameterError(
            f"The 'alpha' parameter is not one of {owner}'s: give the levels as alphas=[...]; "
            f"got alpha={design_options['alpha']!r}."
        )
    alphas = check_alphas(alphas, owner)
    params = DesignParams.from_options(
        owner, alpha=alphas[0], **design_options
    )  # every option checked first
    if params.household is not None:
        # a household design is two matrices over other tables than the baselines' one
        raise InvalidParameterError(
            f"The 'household' parameter of design is not supported by {owner}; got "
            f"household={params.household!r}. Design each alpha with pramopt.design(..., "
            "household=...) instead."
        )
    if progress is not None and not callable(progress):
        fail("progress", owner, "a callable or None", progress)
    seed = check_int(seed, "seed", owner, low=0)
    table, combos = table_and_combinations(data, qi, params, owner)
    names, skipped = _check_baselines(baselines, table.n_cells, owner)
    opts = params.to_dict()
    opts.pop("alpha")

    def tell(alpha, name, result):
        if progress is not None:
            try:
                progress(alpha, name, result)
            except Exception as e:
                raise CallbackError(
                    f"The progress callback raised {type(e).__name__}: {e} (at alpha {alpha:g}, "
                    f"{name}); the frontier was stopped."
                ) from e

    rows, designs, base = _points(table, combos, alphas, names, opts, seed, tell)
    notes = _notes(skipped, names, opts)
    qi_names = list(table.qi)
    return Frontier(
        points=pd.DataFrame(rows, columns=list(COLUMNS)),
        alphas=alphas,
        designs=MappingProxyType(designs),
        baselines=MappingProxyType(base),
        table=table,
        combinations=tuple(tuple(qi_names[i] for i in c) for c in combos),
        params=MappingProxyType(opts),
        notes=tuple(notes),
    )


def _points(table, combos, alphas, names, opts: dict, seed: int, tell) -> tuple:
    """The frontier's rows, the optimal designs and the baselines at each α, in that order."""
    rows: list = []
    designs: dict[float, DesignResult] = {}
    base: dict[float, Mapping[str, DesignResult]] = {}
    for a in alphas:
        tell(a, OPTIMAL, None)
        t0 = time.perf_counter()
        r = design(table, alpha=a, **opts)
        rows.append(_row(a, OPTIMAL, r, time.perf_counter() - t0))
        designs[a] = r
        tell(a, OPTIMAL, r)
        fams: dict[str, DesignResult] = {}
        for name in names:
            tell(a, name, None)
            t0 = time.perf_counter()
            b = BASELINES[name].run(table, combos, a, seed=seed)
            rows.append(_row(a, name, b, time.perf_counter() - t0))
            fams[name] = b
            tell(a, name, b)
        base[a] = MappingProxyType(fams)
    return rows, designs, base


def _notes(skipped, names, opts: dict) -> list[str]:
    """The frontier's notes: baselines skipped, options that restrict the optimal design only."""
    notes = [skipped] if skipped else []
    restricting = [
        k
        for k in (
            "fixed",
            "keep_cells",
            "invariant",
            "epsilon",
            "k",
            "min_diagonal",
            "max_changed_variables",
        )
        if opts.get(k) not in (None, False, [], ())
    ]
    if names and restricting:
        notes.append(
            f"The options {', '.join(restricting)} restrict the optimal design only; "
            "the baselines are calibrated to C1 at α alone."
        )
    if opts.get("change_weights"):
        # the points compare the exact L2 loss, which the optimal design no longer minimises alone
        notes.append(
            "With change_weights the optimal design minimises the L2 loss plus the weighted "
            "changes (details['weighted_objective']), not the L2 loss the points show."
        )
    return notes
