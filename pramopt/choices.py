"""The frontier over choices: what each recoding or set of identifying variables buys, across α.

:func:`pramopt.frontier` plots the price of C1 against α for one set of identifying variables.
An office that hesitates between recodings (ages banded, regions grouped) and key sets (a
variable no longer treated as identifying) needs the same picture for each option side by side.
:func:`choice_frontier` makes the optimal design (:func:`pramopt.design`) of the data as given
and of every :class:`Choice`, at every α, each verified by the same independent C1 check, and
puts together the share of records each design changes, the proven least share any design
meeting C1 on that choice's data could change (the flow relaxation,
``details["expected_changes_lower_bound"]``), the exact L2 loss and the identifying values a
changed record has altered.

Options that name variables follow each choice's key set: combinations of Π naming a variable
left out are dropped (refused when none is left), as are its ``fixed``, ``change_weights`` and
``domains`` entries.  Kept cells name values of every identifying variable as given, so
``keep_cells`` is refused with choices; so is ``domains`` of a recoded variable (its categories
are the recoding's).
"""

from __future__ import annotations

import base64
import html
import io
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

from ._labels import formula_safe_frame, short_label, short_labels
from ._validation import InvalidParameterError, fail
from .errors import CallbackError
from .frequency.table import FrequencyTable, check_qi, check_qi_names
from .loss import changed_variables
from .optimize.designer import design, table_and_combinations
from .params import DesignParams
from .recode import Recoding
from .result import DesignResult
from .tradeoff import alpha_axes, check_alphas, legend_below

__all__ = [
    "Choice",
    "ChoiceFrontier",
    "choice_frontier",
    "variables_per_changed_record",
    "AS_GIVEN",
    "CHOICE_COLUMNS",
]

#: Label of the data as given, always the first choice.
AS_GIVEN = "as given"

#: Columns of :attr:`ChoiceFrontier.points`, in order.
CHOICE_COLUMNS = (
    "choice",
    "alpha",
    "qi",
    "cells",
    "status",
    "loss",
    "expected_changes",
    "changed_share",
    "min_changes",
    "min_share",
    "variables_per_changed_record",
    "seconds",
)

OWNER = "choice_frontier"


@dataclass(frozen=True)
class Choice:
    """One option of an office: a recoding, another set of identifying variables, or both.

    Attributes
    ----------
    label : str
        How tables and figures name it (distinct among the choices of one frontier).
    recoding : Recoding or None
        Applied to the records before counting (None: the values as given).
    qi : tuple of str or None
        The identifying variables, a subset of the frontier's (None: the frontier's own).
    """

    label: str
    recoding: Recoding | None = None
    qi: tuple[str, ...] | None = None

    def __post_init__(self):
        if not isinstance(self.label, str) or not self.label.strip():
            fail("label", "Choice", "a non-empty text", self.label)
        if self.recoding is not None and not isinstance(self.recoding, Recoding):
            fail("recoding", "Choice", "a pramopt.Recoding or None", self.recoding)
        if self.qi is not None:
            qi = (self.qi,) if isinstance(self.qi, str) else self.qi
            # a list is accepted and kept as a tuple, so that a choice stays hashable and frozen
            object.__setattr__(self, "qi", check_qi_names(qi, qi, "Choice"))


def variables_per_changed_record(P, codes, counts) -> float:
    """Identifying values a changed record has altered, in expectation.

    ``sum_m U0(m) sum_{k != m} P[m, k] h(m, k) / sum_m U0(m) (1 - P_mm)``, with ``h`` the number
    of identifying variables cells m and k differ in, summed over P's non-zero entries only
    (no K x K array); NaN when no record changes.
    """
    return float(changed_variables(P, codes, counts)["mean"])


@dataclass(frozen=True)
class ChoiceFrontier:
    """The optimal design of the data as given and of each choice, at each α.

    Attributes
    ----------
    points : pandas.DataFrame
        One row per choice and α (columns :data:`CHOICE_COLUMNS`): ``choice`` (its label),
        ``alpha``, ``qi`` (comma-joined), ``cells`` (present cells), ``status``, ``loss`` (exact
        L2), ``expected_changes``, ``changed_share`` (of the records), ``min_changes`` and
        ``min_share`` (proven: no design meeting C1 on that choice's data changes fewer; NaN
        where no bound was computed), ``variables_per_changed_record`` and ``seconds``.
    alphas : tuple of float
        In increasing order.
    choices : tuple of Choice
        The data as given (label :data:`AS_GIVEN`) first, then the choices in the order given.
    results : mapping
        (label, α) -> :class:`~pramopt.DesignResult`.
    tables : mapping
        label -> the :class:`~pramopt.FrequencyTable` its designs were made for.
    params : mapping
        The design options shared by every point (``alpha`` aside).
    notes : tuple of str
        What the points do not show.
    """

    points: pd.DataFrame
    alphas: tuple
    choices: tuple
    results: Mapping = field(repr=False)
    tables: Mapping = field(repr=False)
    params: Mapping = field(default_factory=lambda: MappingProxyType({}), repr=False)
    notes: tuple = ()

    @property
    def labels(self) -> tuple:
        """The choices' labels, :data:`AS_GIVEN` first."""
        return tuple(c.label for c in self.choices)

    @property
    def success(self) -> bool:
        """True when every design meets C1 at its α."""
        return all(r.success for r in self.results.values())

    def result(self, label: str, alpha: float) -> DesignResult:
        """The :class:`~pramopt.DesignResult` of one choice at one α."""
        for a in self.alphas:
            if math.isclose(a, float(alpha), rel_tol=1e-12, abs_tol=0.0):
                return self.results[(label, a)]
        raise KeyError(f"alpha {alpha!r} is not one of {list(self.alphas)!r}")

    def summary(self) -> str:
        """Per choice and α: status, share of records changed, proven minimum share, loss."""
        names = dict(zip(self.labels, short_labels(self.labels)))
        width = max(len("choice"), *(len(v) for v in names.values()))
        lines = [
            f"{'choice':<{width}}  {'α':<6} {'status':<11} {'changed':>8} {'proven min':>10} "
            f"{'loss':>10} {'vars/changed':>12}"
        ]
        for _, r in self.points.iterrows():
            lines.append(
                f"{names[r['choice']]:<{width}}  {r['alpha']:<6g} {r['status']:<11} "
                f"{_share(r['changed_share']):>8} {_share(r['min_share']):>10} "
                f"{r['loss']:>10.4g} {_number(r['variables_per_changed_record']):>12}"
            )
        return "\n".join(lines)

    def to_csv(self) -> str:
        """The points as CSV, text fields safe to open in a spreadsheet."""
        return formula_safe_frame(self.points).to_csv(index=False)

    def figure(self):
        """Share of records changed and exact L2 loss against α, one line per choice.

        The share is drawn solid, the proven minimum share of the same choice dotted; the loss
        on a log scale.  A point whose design fails C1 is a cross; a loss of 0 or inf cannot be
        drawn on a log scale and is said under the figure.  Returns a
        :class:`matplotlib.figure.Figure` (pyplot is not used).
        """
        from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is
        from matplotlib.lines import Line2D
        from matplotlib.ticker import PercentFormatter

        fig = Figure(figsize=(12, 4.6))
        left, right = fig.subplots(1, 2)
        names = short_labels(self.labels)
        hidden = []
        for i, (label, name) in enumerate(zip(self.labels, names)):
            g = self.points[self.points["choice"] == label].sort_values("alpha")
            hidden += _draw_choice(left, right, g, name, f"C{i}", 2.4 if i == 0 else 1.6)
        alpha_axes((left, right), self.alphas)
        left.set_ylim(bottom=0)
        left.yaxis.set_major_formatter(PercentFormatter(1.0))
        left.set_ylabel("share of records changed")
        left.set_title("Records changed against α (dotted: the proven minimum)")
        loss = self.points["loss"].to_numpy(float)
        if (np.isfinite(loss) & (loss > 0)).any():
            right.set_yscale("log")
        right.set_ylabel("exact L2 loss (log scale)")
        right.set_title("Loss against α")
        handles, labels = left.get_legend_handles_labels()
        handles.append(Line2D([], [], ls=":", color="0.3"))
        labels.append("proven minimum share")
        if not self.points["status"].eq("success").all():
            handles.append(Line2D([], [], marker="x", ls="", color="0.3"))
            labels.append("fails C1 at that α")
        legend_below(fig, handles, labels, hidden, bottom=0.1, ncol=4)
        return fig

    def png(self) -> bytes:
        """:meth:`figure` as PNG bytes."""
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=110, bbox_inches="tight")
        return buf.getvalue()

    def to_html(self, title: str = "pramopt choices", png: bytes | None = None) -> str:
        """A self-contained HTML page: the choices, the figure (embedded) and the points."""
        from .report import _CSS, _html_table

        png = self.png() if png is None else png
        first = self.tables[AS_GIVEN]
        names = dict(zip(self.labels, short_labels(self.labels)))
        summary = {
            "records n": first.n,
            "identifying variables as given": ", ".join(map(str, first.qi)),
            "α": ", ".join(f"{a:g}" for a in self.alphas),
            "choices": len(self.choices),
        }
        choices = pd.DataFrame(
            {
                "choice": [names[c.label] for c in self.choices],
                "identifying variables": [", ".join(self.tables[c.label].qi) for c in self.choices],
                "recoded": [_recoded(c.recoding) for c in self.choices],
                "cells": [self.tables[c.label].n_cells for c in self.choices],
            }
        )
        pts = self.points.assign(choice=[names[c] for c in self.points["choice"]])
        ok = self.success
        status = "success" if ok else "a design failed C1"
        picture = base64.b64encode(png).decode("ascii")
        parts = [
            "<!DOCTYPE html><html lang='en'><head><meta "
            f"charset='utf-8'><title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p><span class='status {'ok' if ok else 'bad'}'>{html.escape(status)}</span></p>",
            "<p>For each choice (the data as given, each recoding, each set of identifying "
            "variables) and each α, the optimal design (pramopt.design), checked by the same "
            "independent C1 verification: the share of records it changes, the least share any "
            "design meeting C1 on that choice's data could change (proven), and its loss.</p>",
            f"<h2>Summary</h2>{_html_table(summary)}",
            f"<h2>Choices</h2>{_html_table(choices)}",
            "<h2>Records changed and loss against α</h2><figure><img alt='share of records "
            f"changed and loss against alpha per choice' src='data:image/png;base64,{picture}'>"
            "<figcaption>Left: the share of records whose identifying values change (solid) and "
            "the proven minimum for that choice (dotted). Right: the exact L2 loss of the "
            "unbiased estimator (log scale). A choice below another buys fewer changes at the "
            "same verified risk.</figcaption></figure>",
            f"<h2>Points</h2>{_html_table(pts)}",
        ]
        if self.notes:
            items = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
            parts.append(f"<h2>Notes</h2><ul>{items}</ul>")
        parts.append("</body></html>")
        return "\n".join(parts)


def _share(v) -> str:
    return "-" if pd.isna(v) else f"{v:.1%}"


def _number(v) -> str:
    return "-" if pd.isna(v) else f"{v:.2f}"


def _recoded(rec: Recoding | None) -> str:
    if not rec:
        return ""
    what = ", ".join(rec.variables)
    return f"{what}: {rec.description}" if rec.description else what


def _draw_choice(left, right, g: pd.DataFrame, name: str, color: str, lw: float) -> list[str]:
    """One choice's lines on both panels; the losses a log scale cannot show, in words."""
    x = g["alpha"].to_numpy(float)
    ok = g["status"].eq("success").to_numpy(bool)
    share = g["changed_share"].to_numpy(float)
    left.plot(x[ok], share[ok], marker="o", color=color, lw=lw, label=name)
    if (~ok).any():
        left.scatter(x[~ok], share[~ok], marker="x", s=60, color=color)
    low = g["min_share"].to_numpy(float)
    if np.isfinite(low).any():
        left.plot(x, low, ls=":", color=color, lw=1.2)
    loss = g["loss"].to_numpy(float)
    # a log scale shows neither 0 (nothing to change) nor inf (a singular matrix)
    shown = np.isfinite(loss) & (loss > 0)
    right.plot(x[ok & shown], loss[ok & shown], marker="o", color=color, lw=lw)
    if (~ok & shown).any():
        right.scatter(x[~ok & shown], loss[~ok & shown], marker="x", s=60, color=color)
    return [f"{name} at α = {a:g} (loss {v:g})" for a, v in zip(x[~shown], loss[~shown])]


def _key_table(table: FrequencyTable, qi: tuple) -> FrequencyTable:
    """The table's records counted over the variables ``qi`` (same categories)."""
    if tuple(qi) == tuple(table.qi):
        return table
    pos = [list(table.qi).index(q) for q in qi]
    codes, inv = np.unique(table.codes[:, pos], axis=0, return_inverse=True)
    counts = np.bincount(np.asarray(inv).ravel(), weights=table.counts, minlength=len(codes))
    return FrequencyTable(
        qi=tuple(qi),
        categories=tuple(table.categories[j] for j in pos),
        codes=codes.astype(np.int64),
        counts=np.rint(counts).astype(np.int64),
    )


def _check_choices(choices, data, qi: tuple) -> tuple[Choice, ...]:
    """The choices, checked against the data and the frontier's identifying variables."""
    allowed = "a list of pramopt.Choice"
    if isinstance(choices, (str, bytes, Choice)) or not isinstance(choices, Sequence):
        fail("choices", OWNER, allowed, choices)
    out = [Choice(AS_GIVEN)]
    for c in choices:
        if not isinstance(c, Choice):
            fail("choices", OWNER, f"{allowed} ({short_label(repr(c))} is not one)", c)
        if c.label in {o.label for o in out}:
            fail("choices", OWNER, f"{allowed} with distinct labels, none {AS_GIVEN!r}", c.label)
        other = [q for q in (c.qi or ()) if q not in qi]
        if other:
            fail(
                "choices",
                OWNER,
                f"{allowed} whose qi are among {list(qi)!r} ({c.label!r} names {other!r})",
                list(c.qi or ()),
            )
        if c.recoding:
            if isinstance(data, FrequencyTable):
                raise InvalidParameterError(
                    f"The 'choices' parameter of {OWNER}: {c.label!r} recodes, which needs the "
                    "records (a pandas DataFrame), not a FrequencyTable (whose cells are already "
                    "counted); give the microdata."
                )
            gone = [q for q in c.recoding.variables if q not in qi]
            if gone:
                fail(
                    "choices",
                    OWNER,
                    f"{allowed} that recode identifying variables among {list(qi)!r} "
                    f"({c.label!r} recodes {gone!r})",
                    c.label,
                )
        out.append(c)
    return tuple(out)


def _options_for(opts: dict, choice: Choice, qi: tuple) -> dict:
    """The design options of one choice: those naming variables follow its key set."""
    out = dict(opts)
    if out.get("combinations") is not None:
        kept = [c for c in out["combinations"] if all(v in qi for v in c)]
        if not kept:
            raise InvalidParameterError(
                f"The 'combinations' parameter of {OWNER} leaves no combination to the choice "
                f"{choice.label!r}, whose identifying variables are {list(qi)!r}; got "
                f"{out['combinations']!r}. Give combinations within every choice's variables."
            )
        out["combinations"] = kept
    if out.get("fixed"):
        out["fixed"] = [v for v in out["fixed"] if v in qi] or None
    if out.get("change_weights"):
        out["change_weights"] = {k: w for k, w in out["change_weights"].items() if k in qi} or None
    if out.get("domains"):
        recoded = [q for q in out["domains"] if choice.recoding and q in choice.recoding.variables]
        if recoded:
            raise InvalidParameterError(
                f"The 'domains' parameter of {OWNER} names the categories of {recoded!r} as "
                f"given, which the choice {choice.label!r} recodes; leave them out."
            )
        out["domains"] = {k: v for k, v in out["domains"].items() if k in qi} or None
    return out


def _plan(data, qi: tuple, choices: tuple, opts: dict) -> list[tuple]:
    """(choice, its table, its options) of every choice: every choice's options checked, then
    every table counted, before any design is made."""
    checked = []
    for c in choices:
        cqi = tuple(c.qi) if c.qi is not None else qi
        copts = _options_for(opts, c, cqi)
        # any α: the options are the same at every level, only their names are checked here
        params = DesignParams.from_options(OWNER, alpha=0.5, **copts)
        checked.append((c, cqi, copts, params))
    plan = []
    for c, cqi, copts, params in checked:
        if isinstance(data, FrequencyTable):
            table = _key_table(data, cqi)
        else:
            cdata = c.recoding.apply(data) if c.recoding else data
            table, _ = table_and_combinations(cdata, list(cqi), params, OWNER)
        plan.append((c, table, copts))
    return plan


def choice_frontier(
    data,
    qi=None,
    alphas=(0.05, 0.1, 0.2),
    choices: Sequence[Choice] = (),
    *,
    progress: Callable | None = None,
    **design_options,
) -> ChoiceFrontier:
    """The optimal design of the data as given and of every choice, at every α.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        The microdata (a recoding needs them), or their frequency table (then choices may only
        change the key set: the table is counted again over each choice's variables).
    qi : list of str, optional
        The identifying variables as given (a table's own when ``data`` is one).
    alphas : sequence of float
        The C1 levels, distinct, each in (0, 1) (sorted in the result).
    choices : list of Choice
        The options beside the data as given (which is always the first row, labelled
        :data:`AS_GIVEN`); each recodes some identifying variables, keeps a subset of them, or
        both.  Their labels are distinct.
    progress : callable, optional
        ``progress(alpha, label, result)``: called with ``result=None`` when a design starts and
        with its :class:`~pramopt.DesignResult` when it is done.
    **design_options
        Any parameter of :func:`pramopt.design` but ``alpha`` and ``household``, the same for
        every point; ``keep_cells`` only without choices.  Combinations of Π, ``fixed``,
        ``change_weights`` and ``domains`` entries naming a variable a choice leaves out are
        dropped for that choice.

    Returns
    -------
    ChoiceFrontier

    Raises
    ------
    InvalidParameterError
        For bad ``alphas``, choices or design options, before any design is made.
    """
    if "alpha" in design_options:
        raise InvalidParameterError(
            f"The 'alpha' parameter is not one of {OWNER}'s: give the levels as alphas=[...]; "
            f"got alpha={design_options['alpha']!r}."
        )
    alphas = check_alphas(alphas, OWNER)
    params = DesignParams.from_options(OWNER, alpha=alphas[0], **design_options)
    if params.household is not None:
        raise InvalidParameterError(
            f"The 'household' parameter of design is not supported by {OWNER}; got "
            f"household={params.household!r}."
        )
    if progress is not None and not callable(progress):
        fail("progress", OWNER, "a callable or None", progress)
    if isinstance(data, FrequencyTable):
        if qi is not None and tuple(qi) != tuple(data.qi):
            fail("qi", OWNER, f"None or the table's own {list(data.qi)!r}", qi)
        qi = tuple(data.qi)
    else:
        qi = check_qi(data, qi, OWNER)
    all_choices = _check_choices(choices, data, qi)
    if params.keep_cells is not None and len(all_choices) > 1:
        raise InvalidParameterError(
            f"The 'keep_cells' parameter of design is not supported by {OWNER} with choices: "
            "kept cells name values of every identifying variable as given, which a recoding "
            "or another key set changes."
        )
    opts = params.to_dict()
    opts.pop("alpha")
    plan = _plan(data, qi, all_choices, opts)
    rows, results = _points(plan, alphas, progress)
    return ChoiceFrontier(
        points=pd.DataFrame(rows, columns=list(CHOICE_COLUMNS)),
        alphas=alphas,
        choices=all_choices,
        results=MappingProxyType(results),
        tables=MappingProxyType({c.label: t for c, t, _ in plan}),
        params=MappingProxyType(opts),
        notes=tuple(_notes(plan, opts)),
    )


def _points(plan: list, alphas: tuple, progress) -> tuple[list, dict]:
    """One row and one design per choice and α, choice by choice."""

    def tell(alpha, label, result):
        if progress is None:
            return
        try:
            progress(alpha, label, result)
        except Exception as e:
            raise CallbackError(
                f"The progress callback raised {type(e).__name__}: {e} (at alpha {alpha:g}, "
                f"{label}); the frontier was stopped."
            ) from e

    rows, results = [], {}
    for c, table, copts in plan:
        for a in alphas:
            tell(a, c.label, None)
            t0 = time.perf_counter()
            r = design(table, alpha=a, **copts)
            rows.append(_row(c.label, a, table, r, time.perf_counter() - t0))
            results[(c.label, a)] = r
            tell(a, c.label, r)
    return rows, results


def _row(label: str, alpha: float, table: FrequencyTable, r: DesignResult, seconds: float):
    n = table.n
    low = r.details.get("expected_changes_lower_bound")
    if low is None and r.success and r.expected_changes == 0:
        low = 0.0  # a design that changes nothing meets C1: no design can change fewer
    low = math.nan if low is None else float(low)
    cv = r.details.get("changed_variables")
    per = (
        float(cv["mean"])
        if cv
        else variables_per_changed_record(r.matrix, table.codes, table.counts)
    )
    return {
        "choice": label,
        "alpha": alpha,
        "qi": ",".join(map(str, table.qi)),
        "cells": table.n_cells,
        "status": r.status.value,
        "loss": float(r.loss),
        "expected_changes": float(r.expected_changes),
        "changed_share": float(r.expected_changes) / n,
        "min_changes": low,
        "min_share": low / n,
        "variables_per_changed_record": per,
        "seconds": seconds,
    }


def _notes(plan: list, opts: dict) -> list[str]:
    """What the points do not show: options changed for a choice's key set."""
    notes = []
    for c, table, copts in plan:
        dropped = [
            k
            for k in ("combinations", "fixed", "change_weights", "domains")
            if opts.get(k) and copts.get(k) != opts.get(k)
        ]
        if dropped:
            notes.append(
                f"{short_label(c.label)}: the entries of {', '.join(dropped)} naming a variable "
                f"outside its identifying variables ({', '.join(table.qi)}) are left out."
            )
    if opts.get("change_weights"):
        notes.append(
            "With change_weights each design minimises the L2 loss plus the weighted changes "
            "(details['weighted_objective']), not the L2 loss the points show."
        )
    return notes
