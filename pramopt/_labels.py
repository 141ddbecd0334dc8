"""Labels as pramopt shows them to people: shortened, and safe to open in a spreadsheet.

A label is any text that comes from the data (a category, a variable name).  Reports, summaries
and messages show it shortened to :data:`LABEL_LIMIT` characters: a value of a million
characters would otherwise be drawn as a tick label of a million characters.  Every file pramopt
writes for people to open (an estimate CSV, a report's tables), but not a release (which keeps
the source's bytes) nor ``design.json`` (which keeps labels exactly), writes a text field through
:func:`formula_safe`.  Imports nothing of pramopt, so that every layer may use it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pandas as pd

__all__ = [
    "LABEL_LIMIT",
    "FORMULA_START",
    "short_label",
    "short_labels",
    "short_repr",
    "formula_safe",
    "formula_safe_frame",
    "formula_unescaped",
]

#: The longest label a report, a summary or a message shows (characters).
LABEL_LIMIT = 40

#: First characters of a field that a spreadsheet reads as a formula (OWASP, CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def short_label(text: str, limit: int = LABEL_LIMIT) -> str:
    """``text`` itself when it has at most ``limit`` characters, else its start and an ellipsis
    (``limit`` characters in all)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_labels(labels: Iterable[str], limit: int = LABEL_LIMIT) -> list[str]:
    """The labels of one variable (or the variables' names) shortened, still distinct.

    A label within ``limit`` is shown whole.  Labels that shorten to the same text, or to a
    label shown whole, are numbered (``yyyy…(2)``), still within ``limit`` characters.

    Parameters
    ----------
    labels : iterable of str
    limit : int

    Returns
    -------
    list of str
        In the order of ``labels``.
    """
    labels = list(labels)
    cut = [short_label(s, limit) for s in labels]
    taken = {s for s, c in zip(labels, cut) if s == c}
    clash = Counter(c for s, c in zip(labels, cut) if s != c)
    out = []
    for s, c in zip(labels, cut):
        if s != c and (clash[c] > 1 or c in taken):
            k = 1
            while True:
                tag = f"…({k})"
                c = s[: limit - len(tag)] + tag
                if c not in taken and c not in clash:
                    break
                k += 1
        taken.add(c)
        out.append(c)
    return out


def short_repr(value, limit: int = LABEL_LIMIT) -> str:
    """``repr(value)`` for a message, a long text shortened first."""
    return repr(short_label(value, limit) if isinstance(value, str) else value)


def formula_safe(value):
    """A text field that a spreadsheet shows as text: one that begins with ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return gets a leading single quote (OWASP's rule for CSV
    injection); anything that is not text (a number, a missing value) is returned as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def formula_safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` to be written as CSV: column names and the fields of text columns through
    :func:`formula_safe`; numeric columns untouched (-0.5 is a number, not a formula)."""
    out = df.copy()
    for j in range(out.shape[1]):
        col = out.iloc[:, j]
        if not (
            pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_datetime64_any_dtype(col)
        ):
            out.isetitem(j, col.astype(object).map(formula_safe))
    out.columns = [formula_safe(c) for c in out.columns]
    return out


def formula_unescaped(value):
    """The field that :func:`formula_safe` escaped (a matrix file pramopt wrote, read back)."""
    if isinstance(value, str) and value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value
