"""The report's words: a title and sentences per figure id, and the summary figures explained.

:data:`WORDS` holds, for every figure id of :data:`.data.FIGURES`, its section title and the
sentences the templates show with it; :data:`PAGE` the words of the page around the figures.
The templates look words up by figure id (``words.risk.title``), never by a heading's text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .flows import NEGLIGIBLE, TIE_DIGITS

#: The threshold of solver round-off as the captions write it, as a share and in records.
_SHARE = f"{100 * NEGLIGIBLE:g}%"
_RECORDS = f"{NEGLIGIBLE:.12f}".rstrip("0")

__all__ = [
    "FigureWords",
    "WORDS",
    "PAGE",
    "REDUCTION_LABELS",
    "reduction_table",
    "explanations",
    "fmt",
]


def fmt(v) -> str:
    """A value as the report writes it: None "–", NaN "n/a", a float to 6 significant digits."""
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


@dataclass(frozen=True)
class FigureWords:
    """The words of one figure.  Fields in braces are filled in by :meth:`say`.

    Attributes
    ----------
    title : str
        Its section's heading (in the HTML report the summary of its fold-out table, for a table
        shown under another figure's heading).
    text : str
        The paragraph under the heading (HTML report).
    alt, caption : str
        The drawing's alternative text and caption (HTML report).
    note : str
        A sentence added to the caption when it applies.
    table_title : str
        The summary of each fold-out table of the figure (HTML report).
    md_title, md_text : str
        The Markdown report's heading when it differs from ``title``, and its sentence.
    """

    title: str
    text: str = ""
    alt: str = ""
    caption: str = ""
    note: str = ""
    table_title: str = ""
    md_title: str = ""
    md_text: str = ""

    def say(self, name: str, **values) -> str:
        """Field ``name`` with ``values`` filled in."""
        return getattr(self, name).format(**values)


#: Figure id -> its words (every id of :data:`.data.FIGURES` has an entry).
WORDS: dict[str, FigureWords] = {
    "summary": FigureWords(title="Summary"),
    "recoding": FigureWords(
        title="Recoding before PRAM",
        text="The data were recoded before the design: the categories below are those the design "
        "perturbs, and a release and an estimate recode the data the same way first.",
        caption="The recoding: {description}",
        table_title="{variable}: values and their new categories ({shown} of {recoded})",
        note="… and {more} more, in the design's recoding (design.json).",
    ),
    "risk": FigureWords(
        title="Risk before and after, per combination (worst first)",
        text="C1 (Cator et al., eq. (1)) requires every risk to be at most α = {alpha:g}; 'over' "
        "counts the k0 above it.",
    ),
    "change_vs_frequency": FigureWords(
        title="Changes against frequency",
        alt="expected changes and probability of change against frequency",
        caption="One point per present cell m. Left, as Figure 1 of Cator et al. (almost linear): "
        "the expected number of changed records of the cell, U0(m)(1 − P_mm). Right: the "
        "probability that one of its records changes, 1 − P_mm, nearly the same for the "
        "cells that send records, which is why the left panel is a line.",
        note=" The dashed line is 1 − γ = {one_minus_gamma:.3g}: the diagonal floor γ = "
        "{gamma:.3g} keeps every record with probability at least γ, so no cell lies above "
        "it.",
    ),
    "change_rates": FigureWords(
        title="Expected change rate per variable",
        text="The share of records whose value of each variable is expected to change, and each "
        "variable's categories before and after (expected: U0ᵀP summed per category). A "
        "record whose cell changes counts for every variable that changes with it.",
        alt="change rate and categories before and after, per variable",
        caption="First panel: expected % of records whose value of the variable changes. Then, per "
        "variable, the records in each category before (light) and expected after (dark).",
    ),
    "margins": FigureWords(
        title="Categories before and after, as a table",
        text=f"Expected records below {_RECORDS} (solver round-off) are shown as 0.",
        md_title="Categories before and after (expected)",
    ),
    "transitions": FigureWords(
        title="Transitions per variable",
        text="For each variable, the share of the records with a category (row) released with "
        "another (column), summed over the cells: colour for the changes (log scale, empty: "
        "none), grey on the diagonal for the records kept.",
        alt="transition matrix per variable",
        caption="Row a, column b: expected share of the records with category a released as b. "
        "Axes are labelled with the categories as the data write them (with many categories, "
        f"every few). Shares below {_SHARE} (solver round-off) are left blank.",
        table_title="{variable}: transitions as a table (%)",
        md_title="Transitions per variable (% of the row's records)",
        md_text="{categories} categories: in report.html.",
        note=f"Shares below {_SHARE} (solver round-off) are left blank.",
    ),
    "flows": FigureWords(
        title="Largest expected flows (cells as {qi})",
        text="A flow is the expected number of records of one cell released as another. Flows of "
        f"the same size (to {TIE_DIGITS} significant digits) are one line, which shows one of "
        "them and counts them ('flows of this size'). Flows below "
        f"{_RECORDS} records (solver round-off) are left out.",
    ),
    "changed_together": FigureWords(
        title="Variables changed together",
        text="The expected records whose identifying values change, by the set of variables that "
        "change together (a record counts once, for the set it changes), and the number of "
        f"flows (nonzero entries of P) that do so. Flows below {_RECORDS} records are left out.",
    ),
    "reduction": FigureWords(title="Reduction of the C1 constraints"),
    "stages": FigureWords(title="Solver stages"),
}


@dataclass(frozen=True)
class PageWords:
    """The words of the page around the figures."""

    not_safe: str = "NOT SAFE TO RELEASE"
    heavy: str = "Heavy perturbation"
    solver: str = "Solver: {solver}"
    md_figures: str = (
        "The figures (changes against frequency, change rates and categories per "
        "variable, transitions per variable) are in report.html."
    )

    def say(self, name: str, **values) -> str:
        """Field ``name`` with ``values`` filled in."""
        return getattr(self, name).format(**values)


PAGE = PageWords()


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
    "support_rows": "rows of cells outside their group, added with the pairs that can fill them",
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
    labels = [REDUCTION_LABELS.get(k, k.replace("_", " ")) for k in reduction]
    return pd.DataFrame({"figure": labels, "value": list(reduction.values())})


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
            out.append(
                "max C1 risk: over every record and every combination of identifying "
                "variables an intruder may know, the largest chance that a released record "
                "with those values is that person (C1, Cator et al., eq. (1)); a design is "
                "safe when it is at most α."
            )
        elif key in ("exact L2 loss",):
            out.append(
                "exact L2 loss: the mean squared error of the corrected (unbiased) "
                "estimates of the cells' shares of records; smaller keeps more "
                "information. Compare it between designs of the same data (pramopt assess, "
                "pramopt baseline)."
            )
        elif key == "lower bound on the loss":
            out.append(
                "lower bound on the loss: no general, replacement or block design that "
                "meets C1 with the same options has a smaller exact L2 loss (the lower "
                "bound on the expected changes over n², docs/method.md): the best of those "
                "designs is within a factor of (the design's loss ÷ this bound) of the "
                "design."
            )
        elif key == "lower bound on the expected changes":
            out.append(
                "lower bound on the expected changes: no design that meets C1 with the "
                "same options changes fewer records in expectation (the flow relaxation of "
                "C1)."
            )
        elif key.startswith("lower bound on the expected changes, all P_mm"):
            out.append(
                f"{key}: no design that meets C1 with the same options and keeps every "
                "record in its cell with probability at least this design's smallest changes "
                "fewer records in expectation (the flow relaxation of C1 at that floor): the "
                "design is within a factor of (its expected changes ÷ this bound) of the "
                "fewest changes at its own retention, and only a lower retention somewhere "
                "can change fewer records than this bound."
            )
        elif key.startswith("lower bound on the loss, all P_mm"):
            out.append(
                f"{key}: the same for the exact L2 loss of the general, replacement and block "
                "designs that keep every cell at that floor (the bound on their expected "
                "changes over n²)."
            )
        elif key == "diagonal floor γ" and v is not None:
            out.append(
                f"diagonal floor γ = {fmt(v)}: every cell keeps each of its records with "
                "probability at least γ (min diagonal is the smallest such probability), "
                f"so no record changes with probability above 1 − γ = {fmt(1 - float(v))}: "
                "the dashed line of the probability-of-change plot."
            )
        elif key.startswith("binding"):
            out.append(
                "binding (π, k0), the binding rows: the groups of records (a combination π "
                "of identifying variables and its values k0) whose C1 risk is at α (within "
                "1e-4). They are what stops the design from changing fewer records; every "
                "other group is safer than required."
            )
        elif key == "condition number":
            out.append(
                "condition number: how much correcting the released counts for PRAM "
                "(multiplying by P⁻¹) can amplify their random noise; 1 for P = I. Close "
                "to 1 the corrected estimates are nearly as precise as the released "
                "counts; above about 100 they become unstable."
            )
        elif key.startswith(("ε", "max R1")) or (
            key.startswith("Pk-anonymity k") and "target" not in key
        ):
            sentence = _privacy_sentence(key, v)
            if sentence is not None:
                out.append(sentence)
        elif key == "invariance error":
            out.append(
                "invariance error ||U0ᵀP − U0ᵀ||₁: records moved out of balance in "
                "expectation; 0 for invariant PRAM, whose released counts need no "
                "correction to be unbiased."
            )
        elif key.startswith("released as absent"):
            out.append(
                f"{key}: the share of records expected to be released as a combination of "
                "categories that no record has; per-variable tools release those, and C1 "
                "above counts them."
            )
    return out


def _privacy_sentence(key: str, v) -> str | None:
    """The sentence for an ε, Pk-anonymity k or max R1 figure (None when there is none)."""
    if key.startswith("ε"):
        if _is(v, math.inf):
            return (
                "ε = ∞: no finite ε-differential-privacy guarantee (Ikarashi et al., "
                "Theorem 1). Some column of P has a zero next to a positive entry: "
                "some released cell can come from one original cell but never from "
                "another, and seeing it rules the other out. A design made for C1 only "
                "is usually so; design with --epsilon for a finite ε."
            )
        elif v is not None:
            return (
                f"{key}: ε-differential privacy (Ikarashi et al., Theorem 1), the "
                "largest log-ratio of the probabilities that two original cells are "
                "released as the same cell; smaller is more private."
            )
    elif key.startswith("Pk-anonymity k") and "target" not in key:
        if _is(v, 1.0):
            return (
                "Pk-anonymity k = 1: the smallest value, no Pk-anonymity guarantee "
                "(Ikarashi et al., Theorem 3). P has zeros that let an intruder with "
                "enough background knowledge tell a record apart from every other; "
                "design with --k for a guarantee."
            )
        elif v is not None and not (isinstance(v, float) and math.isnan(v)):
            return (
                f"{key}: no intruder, whatever they know, can tell which person a "
                "released record came from with probability above 1/k (Ikarashi et "
                "al., Theorem 3)."
            )
        else:
            return f"{key} n/a: not computed for a matrix this large (it takes O(K³) operations)."
    elif key.startswith("max R1"):
        if v is None:
            return (
                "max R1(1, T) –: the correct-match risk of Nayak et al. is defined for "
                "a matrix that acts on one variable; this one acts on several jointly, "
                "so it is not computed (C1 is the risk for several variables)."
            )
        else:
            return (
                "max R1(1, T): the largest chance (Nayak et al.) that a released "
                "record with the target's category is the target, over every category "
                "as the target."
            )
    return None
