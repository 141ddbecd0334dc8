"""Transition matrices made elsewhere (sdcMicro, mu-ARGUS, by hand): long or square files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .._csv import missing_markers
from .._labels import formula_unescaped
from ..errors import InvalidParameterError
from .atomic import DESIGN_FILE
from .design_file import load_design
from .tables import read_table

__all__ = ["read_matrix", "read_design", "is_design"]


def _coerce(col: pd.Series, like: pd.Series) -> pd.Series:
    """Give labels read from a matrix file the data column's dtype where that is lossless."""
    try:
        out = col.astype(like.dtype)
    except (TypeError, ValueError):
        return col
    return out if (out.astype(str) == col.astype(str)).all() else col


#: Separators accepted between the values of a cell in a square matrix's column headers ("1_2").
LABEL_SEPARATORS = ("_", ":", "|", ",", ";", ".", "/", "-", " ")


def _row_texts(p: Path, qi, K: int, renamed: dict) -> list[list[str]]:
    """Each row's cell as the texts written in the file (so that '03' and 3.0 stay as written)."""
    if p.suffix.lower() == ".csv":
        raw = pd.read_csv(p, dtype=str, keep_default_na=False).rename(columns=renamed)[list(qi)]
    else:
        raw = read_table(p).rename(columns=renamed)[list(qi)].astype(str)
    return [list(r) for r in raw.itertuples(index=False)][:K]


def _column_order(p: Path, headers: list[str], rows: list[list[str]]) -> np.ndarray:
    """The column of each row's cell, matched by label; positional headers (c0..c{K-1}, V1..VK)
    keep the rows' order.  A square matrix whose headers are neither is refused: reading its
    columns in file order would pair probabilities with the wrong cells."""
    K = len(headers)
    for sep in LABEL_SEPARATORS:
        labels = [sep.join(r) for r in rows]
        pos = {h: j for j, h in enumerate(headers)}
        if len(pos) == K and len(set(labels)) == K and all(lab in pos for lab in labels):
            return np.array([pos[lab] for lab in labels], dtype=np.int64)
        if len(rows[0]) == 1:
            break  # one variable: the separator plays no part
    stems = {h.rstrip("0123456789") for h in headers}
    nums = [h[len(h.rstrip("0123456789")) :] for h in headers]
    if len(stems) == 1 and all(nums):
        idx = [int(x) for x in nums]
        if idx in (list(range(K)), list(range(1, K + 1))):
            return np.arange(K)
    unmatched = [h for h in headers if h not in {"_".join(r) for r in rows}][:5]
    raise InvalidParameterError(
        f"Cannot read the matrix {str(p)!r}: the probability columns of a square matrix must be "
        "labelled with the "
        f"cells of its rows (one value, or the values joined by '_', e.g. {'_'.join(rows[0])!r}), "
        "or be numbered "
        f"in the rows' order (c0, c1, ...); headers {unmatched!r} match no row."
    )


def _r_missing(df: pd.DataFrame, cols: list, values: pd.Series) -> None:
    """Labels of a variable the data hold as text: R writes a missing value as NA (pandas'
    markers), which is the data's missing value where the data have one and no such text."""
    markers = missing_markers([np.nan if pd.isna(v) else str(v) for v in pd.unique(values)])
    if not markers:
        return
    for c in cols:
        if c in df.columns:
            df[c] = df[c].where(~df[c].isin(markers), np.nan)


def is_design(path) -> bool:
    """Whether ``path`` names a design folder (or its ``design.json``) rather than a matrix."""
    p = Path(path)
    return p.is_dir() or p.name == DESIGN_FILE


def read_design(path, qi):
    """The record-level design of the folder ``path``, checked on load, for the identifying
    variables ``qi``: ``assess`` takes it whole, so that a design kept as parameters is assessed
    from them (no K x K matrix)."""
    from ..publish.frame import refuse_kind

    res = load_design(Path(path))
    refuse_kind(res, "assess", "pramopt assess --matrix")
    if list(res.qi) != list(qi):
        raise InvalidParameterError(
            f"The design {str(path)!r} is for identifying variables {list(res.qi)!r}, not "
            f"{list(qi)!r}."
        )
    return res


def read_matrix(path, qi, data: pd.DataFrame | None = None) -> tuple[np.ndarray, pd.DataFrame]:
    """Read a transition matrix and its cell labels.

    Accepted forms:

    * a design folder or ``design.json`` written by pramopt;
    * a **long** CSV/Parquet with ``from_<var>`` and ``to_<var>`` columns for every identifying
      variable and a ``probability`` column (missing pairs are 0);
    * a **square** CSV/Parquet whose first columns are the identifying variables (the row
      cell) and whose other K columns are the probabilities of moving into the K cells.  Each
      column is matched to a row by its header: the cell's value (or values joined by ``_``,
      ``:``, ``|``, ...), as written in the file; headers that only number the columns (``c0``
      ... or ``V1`` ...) keep the rows' order; any other header is refused.

    Parameters
    ----------
    path : str or Path
    qi : list of str
        Identifying variables.
    data : pandas.DataFrame, optional
        The microdata; labels are converted to its columns' dtypes where that is lossless.

    Returns
    -------
    (ndarray of shape (K, K), DataFrame of the K cells)
    """
    qi = list(qi)
    p = Path(path)
    if is_design(p):
        res = read_design(p, qi)
        return res.to_dense(), res.cells
    # labels of variables the data hold as text are read as the text written ('03' stays '03')
    text = [
        q
        for q in qi
        if data is not None
        and q in data.columns
        and data[q].dropna().map(type).eq(str).all()
        and data[q].notna().any()
    ]
    # (with one variable, R's write.csv puts the row labels under an empty header, 'Unnamed: 0')
    df = read_table(
        p,
        text=[c for q in text for c in (q, f"from_{q}", f"to_{q}")]
        + (["Unnamed: 0"] if len(qi) == 1 and text else []),
    )
    for q in text:
        _r_missing(df, [q, f"from_{q}", f"to_{q}", "Unnamed: 0"], data[q])  # type: ignore[index]
    fcols, tcols = [f"from_{q}" for q in qi], [f"to_{q}" for q in qi]
    for c in df.columns:  # labels a spreadsheet would read as formulas are written escaped
        if not pd.api.types.is_numeric_dtype(df[c].dtype):
            df[c] = df[c].map(formula_unescaped)
    df.columns = [formula_unescaped(c) for c in df.columns]
    if all(c in df.columns for c in fcols + tcols) and "probability" in df.columns:
        return _read_long(df, qi, fcols, tcols, data)
    renamed = {}
    if (
        len(qi) == 1
        and qi[0] not in df.columns
        and len(df.columns)
        and str(df.columns[0]).startswith("Unnamed: 0")
    ):
        # R's write.csv of a matrix with dimnames: an empty first header over the row names
        renamed = {df.columns[0]: qi[0]}
        df = df.rename(columns=renamed)
    missing = [q for q in qi if q not in df.columns]
    if missing:
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: expected from_/to_ columns and 'probability' "
            "(long form) "
            f"or the identifying variables {qi!r} followed by K probability columns (square form); "
            f"{missing!r} missing."
        )
    cells = df[qi].reset_index(drop=True)
    probs = df.drop(columns=qi)
    if probs.shape[1] != len(df):
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: a square matrix needs as many probability "
            "columns as rows; "
            f"got {probs.shape[1]} columns for {len(df)} rows."
        )
    order = _column_order(p, [str(c) for c in probs.columns], _row_texts(p, qi, len(df), renamed))
    try:
        P = probs.to_numpy(dtype=float)[:, order]
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: non-numeric probabilities."
        ) from None
    if data is not None:
        for q in qi:
            cells[q] = _coerce(cells[q], data[q])
    return P, cells


def _read_long(df: pd.DataFrame, qi: list, fcols: list, tcols: list, data) -> tuple:
    """The matrix and its cells from the long form (``from_``/``to_`` columns, ``probability``)."""
    frm = df[fcols].set_axis(qi, axis=1)
    to = df[tcols].set_axis(qi, axis=1)
    if data is not None:
        for q in qi:
            frm[q], to[q] = _coerce(frm[q], data[q]), _coerce(to[q], data[q])
    both = pd.concat([frm, to], ignore_index=True)
    key = pd.MultiIndex.from_frame(both.astype(object))
    cells_idx = key.unique()
    pos = cells_idx.get_indexer(key)
    n = len(df)
    K = len(cells_idx)
    P = np.zeros((K, K))
    np.add.at(P, (pos[:n], pos[n:]), df["probability"].to_numpy(dtype=float))
    cells = both.drop_duplicates().reset_index(drop=True)
    cells = cells.iloc[
        pd.MultiIndex.from_frame(cells.astype(object)).get_indexer(cells_idx)
    ].reset_index(drop=True)
    return P, cells
