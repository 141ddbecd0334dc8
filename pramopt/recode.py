"""Recodings of identifying variables: merged categories, applied before perturbing.

An office that finds the price of a design too high first recodes (sdcMicro's ``globalRecode``):
groups regions, bands ages.  A :class:`Recoding` maps, per variable, the text of a value to the
text of its new category; a value it does not list keeps its text.  A recoded variable is text
throughout (``5`` and ``5.0`` are the texts ``"5"`` and ``"5.0"``), as the command line reads
identifying values, so that a design, its release and its estimates see the same categories
whether the data came from a file or a frame (an integer-valued float of a frame is the text of
the integer: a column of integers with a blank is read as floats).  A recoding is idempotent (a
new category is never itself recoded), so that released data, which hold the new categories,
can be recoded again harmlessly.

A recoding file is JSON (``{"format": "pramopt-recode/1", "variables": {"AGE": {"21": "20-24",
...}}, "description": "..."}``), written by ``pramopt advise`` and read by ``pramopt design
--recode``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InvalidParameterError

__all__ = ["Recoding", "read_recoding", "write_recoding", "FORMAT"]

FORMAT = "pramopt-recode/1"


def _text(v) -> str:
    """A value of a frame as the text a file holds for it: an integer-valued float as the
    integer (pandas reads a column of integers with a blank as floats: 21 becomes 21.0)."""
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return str(int(f)) if f.is_integer() else repr(f)
    return str(v)


@dataclass(frozen=True)
class Recoding:
    """New categories of some identifying variables.

    Attributes
    ----------
    variables : dict of str to dict of str to str
        Per variable, the text of a value and the text of the category it joins.
    description : str
        What the recoding does, in words (for tables and reports).
    """

    variables: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self):
        checked = {}
        for name, m in dict(self.variables).items():
            if not isinstance(name, str) or not isinstance(m, Mapping):
                raise InvalidParameterError(
                    "A recoding maps variable names to {value: new category} mappings; got "
                    f"{name!r}: {m!r}."
                )
            bad = [(k, v) for k, v in m.items() if not isinstance(k, str) or not isinstance(v, str)]
            if bad:
                raise InvalidParameterError(
                    f"A recoding of {name!r} maps texts to texts; got {bad[:3]!r}."
                )
            # idempotent: a new category that is also a recoded value must map to itself
            loops = [v for v in set(m.values()) if v in m and m[v] != v]
            if loops:
                raise InvalidParameterError(
                    f"A recoding of {name!r} must not recode its own new categories; "
                    f"{sorted(loops)[:3]!r} are both."
                )
            checked[name] = dict(m)
        object.__setattr__(self, "variables", checked)

    def __bool__(self) -> bool:
        return any(self.variables.values())

    def then(self, other: Recoding) -> Recoding:
        """This recoding followed by ``other`` (one mapping per variable)."""
        out = {k: dict(v) for k, v in self.variables.items()}
        for name, m in other.variables.items():
            first = out.get(name, {})
            merged = {k: m.get(v, v) for k, v in first.items()}
            for k, v in m.items():
                merged.setdefault(k, v)
            out[name] = merged
        words = "; ".join(d for d in (self.description, other.description) if d)
        return Recoding(out, words)

    def without(self, name: str) -> Recoding:
        """This recoding less its mapping of variable ``name``."""
        if name not in self.variables:
            return self
        rest = {q: m for q, m in self.variables.items() if q != name}
        words = "; ".join(d for d in self.description.split("; ") if not d.startswith(name))
        return Recoding(rest, words)

    def series(self, name: str, values: pd.Series) -> pd.Series:
        """``values`` of variable ``name`` recoded: text, missing values kept missing."""
        m = self.variables.get(name)
        if not m:
            return values
        na = values.isna()
        texts = values.map(lambda v: v if isinstance(v, str) else _text(v))
        out = texts.map(lambda t: m.get(t, t)).astype(object)
        out[na.to_numpy()] = np.nan
        return out

    def apply(self, df: pd.DataFrame) -> pd.DataFrame:
        """A copy of ``df`` with the recoded variables' values replaced (others untouched)."""
        missing = [q for q in self.variables if q not in df.columns]
        if missing:
            raise InvalidParameterError(
                f"The recoding names variables the data do not have: {missing!r} (columns "
                f"{list(df.columns)[:10]!r})."
            )
        out = df.copy()
        for q in self.variables:
            out[q] = self.series(q, df[q])
        return out

    def texts(self, name: str, texts: list) -> list:
        """Raw texts of a file recoded (None, a missing field, stays None)."""
        m = self.variables.get(name)
        if not m:
            return texts
        return [t if t is None else m.get(t, t) for t in texts]

    def categories_lost(self, categories: Mapping[str, list] | None = None) -> dict[str, int]:
        """Per variable, how many categories the recoding merges away: of ``categories`` (the
        data's, per variable) when given, else of the values it lists."""
        out = {}
        for q, m in self.variables.items():
            before = [_text(c) for c in (categories or {}).get(q, m.keys()) if not pd.isna(c)]
            out[q] = len(set(before)) - len({m.get(t, t) for t in before})
        return out

    def to_dict(self) -> dict:
        return {"format": FORMAT, "description": self.description, "variables": self.variables}

    @classmethod
    def from_dict(cls, rec, where: str = "the recoding") -> Recoding:
        if not isinstance(rec, dict) or rec.get("format") != FORMAT:
            raise InvalidParameterError(
                f'{where} is not a pramopt recoding (JSON with "format": {FORMAT!r} and '
                '"variables").'
            )
        return cls(rec.get("variables") or {}, str(rec.get("description") or ""))


def read_recoding(path, flag: str = "--recode") -> Recoding:
    """A recoding file (JSON, as :func:`write_recoding` writes it)."""
    p = Path(path)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidParameterError(f"Cannot read {flag} {str(p)!r}: {e}") from None
    return Recoding.from_dict(rec, f"{flag} {str(p)!r}")


def write_recoding(recoding: Recoding, path, *, overwrite: bool = False) -> Path:
    """Write a recoding file atomically (JSON); a file already at ``path`` is replaced only with
    ``overwrite=True``."""
    from .io.atomic import check_out_file, write_text

    p = check_out_file(path, kinds=(".json",), force=overwrite, writer="write_recoding")
    write_text(json.dumps(recoding.to_dict(), indent=1, ensure_ascii=False), p)
    return p
