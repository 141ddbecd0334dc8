"""The report as text: Jinja2 templates (``templates/``) filled with the figures' data and words.

The HTML is self-contained: inline CSS, its drawings embedded as base64 PNGs, so it can be mailed
or archived as one file.  The Markdown has the same tables, for terminals and merge requests, and
refers to the HTML for the drawings.  The page templates (``report.html.j2``, ``report.md.j2``)
include one template per figure, ``<figure id>.html.j2`` and ``<figure id>.md.j2``, in the order
of :func:`.data.sections`.
"""

from __future__ import annotations

import html
import re
from functools import cache
from importlib.resources import files

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from .._labels import formula_safe
from . import plots
from .data import ReportData, sections, shown
from .words import PAGE, WORDS, explanations, fmt, reduction_table

__all__ = ["render_html", "render_markdown", "environment", "TEMPLATES", "TABLE_CATEGORIES"]

#: Above this many categories a variable's transition table is left to the CSV-like Markdown.
TABLE_CATEGORIES = 20

#: The templates that are not a figure's (the pages, their style and the table macros).
TEMPLATES = ("report.html.j2", "report.md.j2", "style.css.j2", "tables.html.j2", "tables.md.j2")

#: The style of the HTML report (also used by other pramopt pages, e.g. the frontier's).
_CSS = files(__package__).joinpath("templates", "style.css.j2").read_text(encoding="utf-8")


def _escape(value):
    """Every value printed in the HTML, escaped by :func:`html.escape` (``'`` as ``&#x27;``, the
    entities the reports have always had); template output (Markup) as it is."""
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape(str(value)))


def _code_html(text) -> Markup:
    """Running text with its `quoted commands` as HTML code, everything else escaped."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(str(text))))


def _cell(value) -> str:
    """A table cell: text (labels come from the data) safe to paste into a spreadsheet, a number
    as :func:`.words.fmt` writes it (-0.5 stays a number)."""
    return formula_safe(value) if isinstance(value, str) else fmt(value)


def _percent_table(T: pd.DataFrame) -> pd.DataFrame:
    """A transition matrix in percent, its row labels as the first column."""
    out = (100 * T).map(lambda v: "" if np.isnan(v) or v == 0 else f"{v:.3g}%")
    out.insert(0, f"{T.index.name} \\ {T.columns.name}", list(T.index))
    return out


def _as_frame(obj) -> pd.DataFrame:
    """A table for Markdown: a dict as the columns ``figure`` and ``value``."""
    if isinstance(obj, dict):
        return pd.DataFrame({"figure": list(obj), "value": list(obj.values())})
    return obj


@cache
def environment(kind: str) -> jinja2.Environment:
    """The Jinja2 environment of the ``"html"`` (autoescaped) or ``"md"`` templates."""
    html_kind = kind == "html"
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pramopt.report", "templates"),
        autoescape=html_kind,
        finalize=_escape if html_kind else None,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fmt"] = fmt
    env.filters["cell"] = _cell
    # Markdown shows `quoted commands` as code by itself
    env.filters["code"] = _code_html if html_kind else str
    env.globals.update(
        words=WORDS,
        page=PAGE,
        explanations=explanations,
        reduction_table=reduction_table,
        percent_table=_percent_table,
        as_frame=_as_frame,
        table_categories=TABLE_CATEGORIES,
    )
    return env


def _context(d: ReportData) -> dict:
    parts = sections(d)
    return {
        "d": d,
        "sections": parts,
        "data": {s.id: s.data for s in parts},
        "qi": ", ".join(map(str, shown(d).table.qi)),
    }


def render_html(d: ReportData) -> str:
    """A self-contained HTML report (inline CSS, figures as base64 PNG)."""
    ctx = _context(d)
    # drawn here rather than in the template: the Markdown report needs none of them
    ctx["images"] = {
        key: plots.png(draw(ctx["data"])) for key, draw in plots.PLOTS.items() if key in ctx["data"]
    }
    return environment("html").get_template("report.html.j2").render(ctx)


def render_markdown(d: ReportData) -> str:
    """The report's tables in Markdown (the figures are in the HTML report)."""
    return environment("md").get_template("report.md.j2").render(_context(d))


def _html_table(obj) -> str:
    """A dict (figure -> value) or a DataFrame as an HTML table, in the report's style."""
    module = environment("html").get_template("tables.html.j2").module
    return str(module.table(obj))  # type: ignore[attr-defined]  # a macro of the template
