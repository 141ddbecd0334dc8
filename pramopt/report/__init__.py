"""Self-contained HTML and Markdown reports of a PRAM matrix on one data set.

Three parts: :mod:`.data` computes each figure's data from the design (keyed by figure id; the
matrix may be sparse and nothing K x K is made), :mod:`.words` holds the title and sentences of
each figure id and explains the summary figures a newcomer cannot read (ε = ∞, k = 1, R1 "–",
binding rows, condition number), and :mod:`.render` fills the Jinja2 templates of ``templates/``
(one per figure id and format) with both, with the drawings of :mod:`.plots` in the HTML.
"""

from __future__ import annotations

from .data import (
    FIGURES,
    ReportData,
    Section,
    changed_together,
    changed_variables_figures,
    from_result,
    risk_by_combination,
    sections,
    top_flows,
    variable_changes,
    variable_labels,
    variable_margins,
    variable_transitions,
)
from .plots import (
    PLOTS,
    change_vs_frequency_figure,
    figure_change_vs_frequency,
    transitions_figure,
    variables_figure,
)
from .render import _CSS as _CSS  # the frontier page's style
from .render import _html_table as _html_table
from .render import render_html, render_markdown
from .words import REDUCTION_LABELS, WORDS, explanations, reduction_table

__all__ = [
    "ReportData",
    "risk_by_combination",
    "render_html",
    "render_markdown",
    "from_result",
    "variable_changes",
    "variable_margins",
    "variable_transitions",
    "top_flows",
    "changed_together",
    "explanations",
    "change_vs_frequency_figure",
    "figure_change_vs_frequency",
    "variables_figure",
    "transitions_figure",
    "variable_labels",
    "changed_variables_figures",
    "reduction_table",
    "REDUCTION_LABELS",
    "FIGURES",
    "Section",
    "sections",
    "WORDS",
    "PLOTS",
]
