"""The report's recoding section: the categories a design's data were recoded to before PRAM.

A design made on recoded data (``pramopt design --recode``) keeps its recoding in
``details["recode"]``; the report shows, per variable, its categories before and after and
a few of its mappings (at most :data:`EXAMPLES` per variable: a recoding of thousands of values
is summarised, never written out in full), with the recoding's description.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from .._labels import short_label

__all__ = ["RecodingFigure", "recoding_figure", "EXAMPLES"]

#: The most mappings the report shows per recoded variable.
EXAMPLES = 20

#: The longest description the report shows (characters).
DESCRIPTION_LIMIT = 500


@dataclass(frozen=True)
class RecodingFigure:
    """What the report shows of a recoding.

    Attributes
    ----------
    description : str
        The recoding in words (shortened to ``DESCRIPTION_LIMIT`` characters).
    variables : pandas.DataFrame
        One row per recoded variable: its categories before and after, and how many of its
        values the recoding changes.
    examples : dict of str to pandas.DataFrame
        Per variable, at most ``EXAMPLES`` mappings (value, new category).
    more : dict of str to int
        Per variable, the mappings not shown.
    """

    description: str
    variables: pd.DataFrame
    examples: dict
    more: dict


def recoding_figure(rec: Mapping | None, limit: int = EXAMPLES) -> RecodingFigure | None:
    """The recoding section of a report from a design's ``details["recode"]`` (None: no
    recoding, no section).

    Parameters
    ----------
    rec : mapping or None
        A recoding as :meth:`pramopt.recode.Recoding.to_dict` writes it, with ``categories``
        (per variable, its number of categories before and after) when the design counted them.
    limit : int
        The most mappings shown per variable.

    Returns
    -------
    RecodingFigure or None
    """
    if not rec or not rec.get("variables"):
        return None
    counts = rec.get("categories") or {}
    rows, examples, more = [], {}, {}
    for q, m in rec["variables"].items():
        changed = [(k, v) for k, v in m.items() if k != v]
        before, after = (list(counts.get(q) or []) + [None, None])[:2]
        name = short_label(str(q))
        rows.append(
            {
                "variable": name,
                "categories before": before,
                "categories after": after,
                "values recoded": len(changed),
            }
        )
        shown = changed[:limit]  # in the recoding's own order
        examples[name] = pd.DataFrame(
            {
                "value": [short_label(str(k)) for k, _ in shown],
                "new category": [short_label(str(v)) for _, v in shown],
            }
        )
        more[name] = len(changed) - len(shown)
    return RecodingFigure(
        description=short_label(str(rec.get("description") or ""), DESCRIPTION_LIMIT),
        variables=pd.DataFrame(rows),
        examples=examples,
        more=more,
    )
