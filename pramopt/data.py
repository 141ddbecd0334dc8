"""From microdata to frequency tables: the first step of the data flow.

Each identifying variable becomes a categorical code; a *cell* is one combination of codes that
is present in the data.  Missing values (NaN, None, pandas.NA) form a category of their own,
placed after the observed categories, so that a record with a missing identifying value is
protected like any other record and is released with a missing value only if PRAM keeps it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ._validation import InvalidParameterError, check_int

#: Default limit on the number of categories of one identifying variable.
MAX_CATEGORIES = 1000


@dataclass(frozen=True)
class FrequencyTable:
    """Cells present in the data and their frequencies U0.

    Attributes
    ----------
    qi : tuple of str
        Identifying variables, in order.
    categories : tuple of pandas.Index
        The categories of each identifying variable; code ``j`` of variable ``i`` means
        ``categories[i][j]``.  A missing value is represented by a NaN/None label.
    codes : ndarray of shape (K, d)
        Integer codes of the K present cells, sorted lexicographically.
    counts : ndarray of shape (K,)
        U0(m), the number of records in each cell.
    """

    qi: tuple[str, ...]
    categories: tuple[pd.Index, ...]
    codes: np.ndarray
    counts: np.ndarray
    _labels: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        """Number of records."""
        return int(self.counts.sum())

    @property
    def n_cells(self) -> int:
        """Number of present cells K."""
        return int(self.codes.shape[0])

    def cells(self) -> pd.DataFrame:
        """The K cells with their category labels, in matrix order."""
        return pd.DataFrame(
            {v: self.categories[i].take(self.codes[:, i]) for i, v in enumerate(self.qi)}
        )

    def checksum(self) -> str:
        """SHA-256 of the cells and counts, to tie a design to the data it was made for."""
        h = hashlib.sha256()
        h.update(repr(self.qi).encode())
        for cats in self.categories:
            h.update(repr([None if _isna(c) else str(c) for c in cats]).encode())
        h.update(np.ascontiguousarray(self.codes, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(self.counts, dtype=np.int64).tobytes())
        return h.hexdigest()


def _isna(x) -> bool:
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def check_qi(df: pd.DataFrame, qi, owner: str) -> tuple[str, ...]:
    """Validate the list of identifying variables against the frame's columns."""
    if not isinstance(df, pd.DataFrame):
        raise InvalidParameterError(
            f"The 'data' parameter of {owner} must be a pandas DataFrame; got {type(df).__name__}."
        )
    if isinstance(qi, str):
        qi = [qi]
    try:
        qi = tuple(qi)
    except TypeError:
        raise InvalidParameterError(
            f"The 'qi' parameter of {owner} must be a non-empty list of column names; got {qi!r}."
        ) from None
    if len(qi) == 0:
        raise InvalidParameterError(
            f"The 'qi' parameter of {owner} must be a non-empty list of column names; got []."
        )
    dup = sorted({q for q in qi if qi.count(q) > 1}, key=str)
    if dup:
        raise InvalidParameterError(
            f"The 'qi' parameter of {owner} must name each column once; {dup!r} repeated."
        )
    missing = [q for q in qi if q not in df.columns]
    if missing:
        raise InvalidParameterError(
            f"The 'qi' parameter of {owner} must name columns of the data; {missing!r} not among "
            f"{list(df.columns)!r}."
        )
    if len(df) == 0:
        raise InvalidParameterError(f"The 'data' parameter of {owner} must have at least one row; got an empty frame.")
    return qi


def encode_column(
    col: pd.Series,
    name: str,
    domain: Sequence | None = None,
    max_categories: int = MAX_CATEGORIES,
    owner: str = "design",
) -> tuple[np.ndarray, pd.Index]:
    """Integer codes and categories of one identifying variable (missing values last)."""
    if domain is not None:
        cats = pd.Index(list(domain))
        if cats.has_duplicates:
            raise InvalidParameterError(
                f"The 'domains' parameter of {owner} must list each category of {name!r} once."
            )
        codes = cats.get_indexer(col)
        has_nan_cat = cats.isna().any()
        bad = (codes < 0) & ~(col.isna().to_numpy() & has_nan_cat)
        if bad.any():
            extra = pd.unique(col[bad])[:5].tolist()
            raise InvalidParameterError(
                f"The 'domains' parameter of {owner} must contain every value of {name!r}; "
                f"values {extra!r} are not in {list(cats)!r}."
            )
        if has_nan_cat:
            codes = np.where(col.isna().to_numpy(), int(np.flatnonzero(cats.isna())[0]), codes)
    else:
        codes, uniques = pd.factorize(col, sort=True, use_na_sentinel=True)
        cats = pd.Index(uniques)
        if (codes < 0).any():
            # Missing values are a category of their own, after the observed ones.
            codes = np.where(codes < 0, len(cats), codes)
            cats = cats.append(pd.Index([np.nan]))
    if len(cats) > max_categories:
        raise InvalidParameterError(
            f"The identifying variable {name!r} has {len(cats)} categories, more than "
            f"max_categories={max_categories}; bin it into fewer categories or raise the limit."
        )
    return np.asarray(codes, dtype=np.int64), cats


def record_codes(
    df: pd.DataFrame,
    qi,
    domains: Mapping[str, Sequence] | None = None,
    max_categories: int = MAX_CATEGORIES,
    owner: str = "design",
) -> tuple[np.ndarray, tuple[pd.Index, ...]]:
    """Per-record code matrix (n, d) and the categories of each identifying variable."""
    qi = check_qi(df, qi, owner)
    max_categories = check_int(max_categories, "max_categories", owner, low=1)
    domains = dict(domains or {})
    unknown = [k for k in domains if k not in qi]
    if unknown:
        raise InvalidParameterError(
            f"The 'domains' parameter of {owner} must only name identifying variables {list(qi)!r}; got {unknown!r}."
        )
    cols, cats = [], []
    for q in qi:
        c, k = encode_column(df[q], q, domains.get(q), max_categories, owner)
        cols.append(c)
        cats.append(k)
    return np.column_stack(cols), tuple(cats)


def frequency_table(
    df: pd.DataFrame,
    qi,
    domains: Mapping[str, Sequence] | None = None,
    max_categories: int = MAX_CATEGORIES,
    owner: str = "design",
) -> FrequencyTable:
    """Count the present cells of ``df`` over the identifying variables ``qi``.

    Parameters
    ----------
    df : pandas.DataFrame
        Microdata, one row per record.
    qi : list of str
        Identifying variables.
    domains : dict, optional
        Categories of some variables, when they should not be taken from the data.
    max_categories : int
        Refuse variables with more categories than this (bin them first).

    Returns
    -------
    FrequencyTable
    """
    codes, cats = record_codes(df, qi, domains, max_categories, owner)
    cells, counts = np.unique(codes, axis=0, return_counts=True)
    return FrequencyTable(qi=tuple(check_qi(df, qi, owner)), categories=cats,
                          codes=cells.astype(np.int64), counts=counts.astype(np.int64))


def cell_index(table: FrequencyTable, codes: np.ndarray) -> np.ndarray:
    """Index of each row of ``codes`` among the table's cells, -1 where it is not a cell."""
    codes = np.asarray(codes, dtype=np.int64)
    radix = [len(c) for c in table.categories]
    if float(np.prod(np.array(radix, dtype=float))) >= 2.0**62:
        # mixed-radix keys would overflow int64: match whole rows instead
        lookup = pd.MultiIndex.from_arrays(table.codes.T)
        return np.asarray(lookup.get_indexer(pd.MultiIndex.from_arrays(codes.T)), dtype=np.int64)
    radix = np.array(radix, dtype=np.int64)
    mult = np.concatenate([np.cumprod(radix[::-1])[::-1][1:], [1]]).astype(np.int64)
    keys = table.codes @ mult  # cells are lexicographically sorted, so keys are increasing
    q = codes @ mult
    pos = np.searchsorted(keys, q)
    pos = np.clip(pos, 0, len(keys) - 1)
    return np.where(keys[pos] == q, pos, -1)
