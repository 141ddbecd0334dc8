"""Transition matrices made elsewhere (sdcMicro, mu-ARGUS, by hand): long or square files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError
from .atomic import DESIGN_FILE
from .design_file import load_design
from .tables import read_table

__all__ = ["read_matrix"]


def _coerce(col: pd.Series, like: pd.Series) -> pd.Series:
    """Give labels read from a matrix file the data column's dtype where that is lossless."""
    try:
        out = col.astype(like.dtype)
    except (TypeError, ValueError):
        return col
    return out if (out.astype(str) == col.astype(str)).all() else col


def read_matrix(path, qi, data: pd.DataFrame | None = None) -> tuple[np.ndarray, pd.DataFrame]:
    """Read a transition matrix and its cell labels.

    Accepted forms:

    * a design folder or ``design.json`` written by pramopt;
    * a **long** CSV/Parquet with ``from_<var>`` and ``to_<var>`` columns for every identifying
      variable and a ``probability`` column (missing pairs are 0);
    * a **square** CSV/Parquet whose first columns are the identifying variables (the row
      cell) and whose other K columns are the probabilities of moving into the K cells, in the
      same order as the rows (their headers are not used).

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
    if p.is_dir() or p.name == DESIGN_FILE:
        res = load_design(p)
        if list(res.qi) != qi:
            raise InvalidParameterError(
                f"The design {str(path)!r} is for identifying variables {list(res.qi)!r}, not {qi!r}.")
        return res.to_dense(), res.cells
    df = read_table(p)
    fcols, tcols = [f"from_{q}" for q in qi], [f"to_{q}" for q in qi]
    if all(c in df.columns for c in fcols + tcols) and "probability" in df.columns:
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
        cells = cells.iloc[pd.MultiIndex.from_frame(cells.astype(object)).get_indexer(cells_idx)].reset_index(drop=True)
        return P, cells
    missing = [q for q in qi if q not in df.columns]
    if missing:
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: expected from_/to_ columns and 'probability' (long form) "
            f"or the identifying variables {qi!r} followed by K probability columns (square form); "
            f"{missing!r} missing.")
    cells = df[qi].reset_index(drop=True)
    probs = df.drop(columns=qi)
    if probs.shape[1] != len(df):
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: a square matrix needs as many probability columns as rows; "
            f"got {probs.shape[1]} columns for {len(df)} rows.")
    try:
        P = probs.to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"Cannot read the matrix {str(p)!r}: non-numeric probabilities.") from None
    if data is not None:
        for q in qi:
            cells[q] = _coerce(cells[q], data[q])
    return P, cells
