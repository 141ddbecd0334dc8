"""A design's recoding at release and estimate: the data recoded as they were for the design.

A design made on recoded data (``pramopt design --recode``) keeps its
:class:`~pramopt.recode.Recoding` in ``details["recode"]`` (guarded by the design file's
checksum).  Every release and estimate applies it to the data before matching them to the
design, so that the check of the data's counts against the design's runs on recoded data; a
recoding is idempotent, so released data, which hold the new categories, are recoded
harmlessly.  A release writes the recoded values: the user asked for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd
import pyarrow as pa

from ..recode import Recoding

__all__ = ["recoding_of", "recoded_frame", "recoded_texts", "text_schema", "describe_recoding"]


def recoding_of(result) -> Recoding | None:
    """The recoding a design was made on (``details["recode"]``), or None.

    Parameters
    ----------
    result : DesignResult or a result of another kind

    Returns
    -------
    Recoding or None
    """
    rec = (getattr(result, "details", None) or {}).get("recode")
    if rec is None:
        return None
    # details are frozen (read-only mappings): the recoding accepts any mapping inside
    return Recoding.from_dict(dict(rec), "the design's recoding")


def recoded_frame(df: pd.DataFrame, result) -> pd.DataFrame:
    """``df`` recoded with the design's recoding (``df`` itself without one).

    A frame that lacks a recoded column is returned as it is: the release's own check of the
    identifying variables then names the column.
    """
    rec = recoding_of(result)
    if not rec or any(q not in df.columns for q in rec.variables):
        return df
    return rec.apply(df)


def recoded_texts(rec: Recoding | None, name: str) -> list[str]:
    """The texts of variable ``name`` that the recoding changes (a value mapped to itself is not
    changed): where a release writes the new category rather than the text as read."""
    if rec is None:
        return []
    return [k for k, v in rec.variables.get(name, {}).items() if k != v]


def text_schema(schema: pa.Schema, names: Iterable[str]) -> pa.Schema:
    """``schema`` with the columns ``names`` as text (a recoded variable's categories), its
    pandas metadata saying so too, so that ``pd.read_parquet`` reads them as strings."""
    names = [q for q in names if q in schema.names]
    if not names:
        return schema
    for q in names:
        i = schema.get_field_index(q)
        schema = schema.set(i, pa.field(q, pa.string(), True, schema.field(i).metadata))
    meta = dict(schema.metadata or {})
    if b"pandas" in meta:
        pandas_meta = json.loads(meta[b"pandas"])
        for c in pandas_meta.get("columns", []):
            if c.get("field_name", c.get("name")) in names:
                c.update(pandas_type="unicode", numpy_type="object", metadata=None)
        meta[b"pandas"] = json.dumps(pandas_meta).encode("utf-8")
        schema = schema.with_metadata(meta)
    return schema


def describe_recoding(result) -> str:
    """The recoding in one line, e.g. ``recoded AGE (60 → 12 categories), REGION (182 → 20)``
    (empty without a recoding): the categories before, as counted for the design, and after."""
    rec = recoding_of(result)
    if not rec:
        return ""
    counts = dict((getattr(result, "details", None) or {}).get("recode") or {}).get("categories")
    counts = dict(counts or {})
    table = result.table
    parts: list[str] = []
    for q in rec.variables:
        after = len(table.categories[list(table.qi).index(q)]) if q in table.qi else None
        before = (counts.get(q) or [None])[0]
        parts.append(
            f"{q} ({'?' if before is None else before} → {'?' if after is None else after}"
            + (" categories)" if not parts else ")")
        )
    return "recoded " + ", ".join(parts)
