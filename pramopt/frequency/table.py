"""From microdata to frequency tables: the first step of the data flow.

Each identifying variable becomes a categorical code; a *cell* is one combination of codes that
is present in the data.  Missing values (NaN, None, pandas.NA) form a category of their own,
placed after the observed categories, so that a record with a missing identifying value is
protected like any other record and is released with a missing value only if PRAM keeps it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._validation import InvalidParameterError, check_int

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

    def subset(self, cells: np.ndarray) -> FrequencyTable:
        """The table of some of the cells (same variables and categories, so codes stay
        comparable)."""
        return FrequencyTable(
            qi=self.qi,
            categories=self.categories,
            codes=self.codes[cells],
            counts=self.counts[cells],
        )

    def missing(self) -> np.ndarray:
        """(K, d) booleans: which identifying values of each cell are missing."""
        out = np.zeros(self.codes.shape, dtype=bool)
        for j, cats in enumerate(self.categories):
            na = np.flatnonzero(pd.isna(cats))
            if na.size:
                out[:, j] = self.codes[:, j] == na[0]
        return out

    def checksum(self) -> str:
        """SHA-256 of the cells and counts, to tie a design to the data it was made for."""
        h = hashlib.sha256()
        h.update(repr(self.qi).encode())
        for cats in self.categories:
            h.update(repr([None if is_missing(c) else str(c) for c in cats]).encode())
        h.update(np.ascontiguousarray(self.codes, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(self.counts, dtype=np.int64).tobytes())
        return h.hexdigest()


def table_from_record(qi, rec) -> FrequencyTable:
    """The table a design file keeps: ``rec``'s ``categories`` (None for the missing value),
    ``codes`` and ``counts`` for the identifying variables ``qi`` (its checksum is the caller's
    to check: each format keeps it under its own key)."""
    qi = tuple(qi)
    return FrequencyTable(
        qi=qi,
        categories=tuple(
            pd.Index([np.nan if v is None else v for v in c]) for c in rec["categories"]
        ),
        codes=np.asarray(rec["codes"], dtype=np.int64).reshape(-1, len(qi)),
        counts=np.asarray(rec["counts"], dtype=np.int64),
    )


def is_missing(x) -> bool:
    """Whether one value is missing (NaN, None, pandas.NA); False for values pandas cannot judge."""
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def text_categories(cats: pd.Index) -> bool:
    """Whether a variable's categories are text (as the command line reads a file), missing
    aside."""
    vals = [c for c in cats if not is_missing(c)]
    return pd.api.types.is_string_dtype(cats.dtype) and all(isinstance(c, str) for c in vals)


def refuse_string_qi(qi, owner: str) -> None:
    """Refuse a bare string for ``qi``: a list of names is meant, and a string, being a sequence
    of characters, would be taken for one column or for its letters."""
    if isinstance(qi, str):
        raise InvalidParameterError(
            f"The 'qi' parameter of {owner} must be a list of column names; got the string "
            f"{qi!r} (write [{qi!r}])."
        )


def check_qi_names(columns, qi, owner: str) -> tuple[str, ...]:
    """Validate the list of identifying variables against a list of column names."""
    refuse_string_qi(qi, owner)
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
    columns = list(columns)
    missing = [q for q in qi if q not in columns]
    if missing:
        raise InvalidParameterError(
            f"The 'qi' parameter of {owner} must name columns of the data; {missing!r} not among "
            f"{columns!r}."
        )
    return qi


def check_qi(df: pd.DataFrame, qi, owner: str) -> tuple[str, ...]:
    """Validate the list of identifying variables against the frame's columns."""
    if not isinstance(df, pd.DataFrame):
        raise InvalidParameterError(
            f"The 'data' parameter of {owner} must be a pandas DataFrame; got {type(df).__name__}."
        )
    qi = check_qi_names(df.columns, qi, owner)
    if len(df) == 0:
        raise InvalidParameterError(
            f"The 'data' parameter of {owner} must have at least one row; got an empty frame."
        )
    return qi


def check_domains(domains, qi, owner: str) -> dict:
    """Validate ``domains`` (a mapping from identifying variables to their categories)."""
    domains = dict(domains or {})
    unknown = [k for k in domains if k not in qi]
    if unknown:
        raise InvalidParameterError(
            f"The 'domains' parameter of {owner} must only name identifying variables "
            f"{list(qi)!r}; got {unknown!r}."
        )
    return domains


def _unsortable(col: pd.Series, name: str) -> str:
    """Why a column's values cannot be categories: unhashable (a list) or of mixed types."""
    for i, v in enumerate(col.to_numpy(dtype=object)):
        try:
            hash(v)
        except TypeError:
            return (
                f"The identifying variable {name!r} must hold numbers or strings; record {i} "
                "holds a "
                f"{type(v).__name__}: {v!r:.60}."
            )
    kinds = sorted({type(v).__name__ for v in col.dropna().to_numpy(dtype=object)})
    return (
        f"The identifying variable {name!r} mixes values of types {', '.join(kinds)}, which "
        "cannot be "
        "ordered as categories; convert the column to one type (for example with .astype(str))."
    )


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
        try:
            codes, uniques = pd.factorize(col, sort=True, use_na_sentinel=True)
        except TypeError:
            raise InvalidParameterError(_unsortable(col, name)) from None
        cats = pd.Index(uniques)
        if col.dtype == object:
            _refuse_merged(col, cats, name, owner)
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


def _kind(v) -> str:
    """The kind of a value as a reader would write it (numpy's scalars as Python's)."""
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    return type(v).__name__


def _refuse_merged(col: pd.Series, cats: pd.Index, name: str, owner: str) -> None:
    """Refuse an object column whose values of different types compare equal (1, 1.0, True):
    pandas would merge them into one category, and a release would rewrite them."""
    pairs = {(_kind(v), v) for v in col.dropna()}
    if len(pairs) <= len(cats):
        return
    seen: dict = {}
    for t, v in pairs:
        seen.setdefault(v, []).append(f"{v!r} ({t})")
    merged = next(sorted(x) for x in seen.values() if len(x) > 1)
    raise InvalidParameterError(
        f"The identifying variable {name!r} of {owner} holds values of different types that "
        f"compare equal ({', '.join(merged)}), which would be merged into "
        f"one category. Convert the column to one type first, e.g. df[{name!r}].astype(str) to "
        "keep them apart as the command line does."
    )


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
    domains = check_domains(domains, qi, owner)
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
    cells, counts = count_rows(codes, [len(c) for c in cats])
    return FrequencyTable(
        qi=tuple(check_qi(df, qi, owner)), categories=cats, codes=cells, counts=counts
    )


def _radix_fits(radix) -> bool:
    """True when mixed-radix keys over ``radix`` fit in int64 (with room to spare)."""
    return float(np.prod(np.asarray(radix, dtype=float))) < 2.0**62


def count_rows(
    codes: np.ndarray, radix, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of an integer code matrix, sorted lexicographically, and their counts.

    Each row ``(c_1, ..., c_d)`` with ``0 <= c_j < radix[j]`` becomes one int64 key
    ``sum_j c_j * prod_{i>j} radix[i]`` (mixed radix, first column most significant), so that
    sorting keys sorts rows lexicographically, as ``np.unique(codes, axis=0)`` does.  Keys are
    counted with ``np.bincount`` when the key space is small (at most 4 keys per row, or 2**16),
    else with a 1-d ``np.unique``.  When the key space would overflow int64 the rows are
    matched whole (``np.unique(axis=0)``), which is slower but exact.

    Parameters
    ----------
    codes : ndarray of shape (n, d)
        Non-negative integer codes.
    radix : sequence of int
        Number of possible codes of each column.
    weights : ndarray of shape (n,), optional
        Integer weight of each row (its count); every row counts once by default.

    Returns
    -------
    cells : ndarray of shape (K, d), int64
    counts : ndarray of shape (K,), int64
    """
    codes = np.asarray(codes, dtype=np.int64)
    n, d = codes.shape
    if weights is not None:
        weights = np.asarray(weights, dtype=np.int64)
    if n == 0:
        return np.empty((0, d), dtype=np.int64), np.empty(0, dtype=np.int64)
    if not _radix_fits(radix):
        cells, inv = np.unique(codes, axis=0, return_inverse=True)
        inv = inv.ravel()
        counts = (
            np.bincount(inv, minlength=len(cells))
            if weights is None
            else _weighted(inv, weights, len(cells))
        )
        return cells.astype(np.int64), counts.astype(np.int64)
    radix = np.asarray(radix, dtype=np.int64)
    key = _keys(codes, radix)
    space = int(np.prod(radix))
    if space <= max(4 * n, 1 << 16):
        full = (
            np.bincount(key, minlength=space) if weights is None else _weighted(key, weights, space)
        )
        ukeys = np.flatnonzero(full)
        counts = full[ukeys]
    elif weights is None:
        ukeys, counts = np.unique(key, return_counts=True)
    else:
        ukeys, inv = np.unique(key, return_inverse=True)
        counts = _weighted(inv, weights, len(ukeys))
    cells = np.empty((len(ukeys), d), dtype=np.int64)
    rest = ukeys.astype(np.int64)
    for j in range(d - 1, -1, -1):
        rest, cells[:, j] = np.divmod(rest, radix[j])
    return cells, np.asarray(counts, dtype=np.int64)


def _weighted(index: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Integer sums of ``weights`` by ``index`` (exact, unlike a float ``bincount``)."""
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, index, weights)
    return out


class CellLookup:
    """Index of rows of codes among a table's cells (-1 where a row is not a cell), built once.

    Rows become mixed-radix int64 keys; a key is looked up in a table of the whole key space
    when that is small (``lut_max`` keys at most), else by binary search in the sorted keys of
    the cells.  When keys would overflow int64, whole rows are matched (pandas MultiIndex).
    """

    def __init__(self, table: FrequencyTable, lut_max: int = 1 << 22):
        radix = [len(c) for c in table.categories]
        self.K = table.n_cells
        self.fits = _radix_fits(radix)
        self.lut = None
        if not self.fits:
            self.multi = pd.MultiIndex.from_arrays(table.codes.T)
            return
        self.radix = np.asarray(radix, dtype=np.int64)
        self.keys = _keys(table.codes, self.radix)  # cells are sorted, so keys increase
        space = int(np.prod(self.radix))
        if space <= lut_max:
            self.lut = np.full(space, -1, dtype=np.int64)
            self.lut[self.keys] = np.arange(self.K)

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        codes = np.asarray(codes, dtype=np.int64)
        if codes.shape[0] == 0:
            return np.empty(0, dtype=np.int64)
        if not self.fits:
            return np.asarray(
                self.multi.get_indexer(pd.MultiIndex.from_arrays(codes.T)), dtype=np.int64
            )
        inside = np.all((codes >= 0) & (codes < self.radix), axis=1)
        q = _keys(np.where(inside[:, None], codes, 0), self.radix)
        if self.lut is not None:
            out = self.lut[q]
        else:
            pos = np.clip(np.searchsorted(self.keys, q), 0, max(self.K - 1, 0))
            out = np.where(self.keys[pos] == q, pos, -1) if self.K else np.full(len(q), -1)
        return np.where(inside, out, -1)


def _keys(codes: np.ndarray, radix: np.ndarray) -> np.ndarray:
    """Mixed-radix int64 key of each row (first column most significant)."""
    key = codes[:, 0].astype(np.int64, copy=True)
    for j in range(1, codes.shape[1]):
        key *= radix[j]
        key += codes[:, j]
    return key


def category_codes(values, categories: pd.Index) -> np.ndarray:
    """Code of each value among ``categories`` (-1 where it is none of them).

    A missing value (NaN, None, pandas.NA) gets the code of the missing category when the
    categories have one, else -1.  Values of another type than the categories (an ``int``
    looked up among strings) are compared as objects rather than raising.
    """
    values = pd.Series(values) if not isinstance(values, (pd.Series, pd.Index)) else values
    try:
        codes = np.asarray(categories.get_indexer(values), dtype=np.int64)
    except (TypeError, ValueError):
        obj = pd.Index(list(categories), dtype=object)
        codes = np.asarray(obj.get_indexer(pd.Index(values, dtype=object)), dtype=np.int64)
    na = np.asarray(pd.isna(values), dtype=bool)
    if na.any():
        nan_pos = np.flatnonzero(categories.isna())
        codes[na] = int(nan_pos[0]) if len(nan_pos) else -1
    return codes


def cells_of(frame: pd.DataFrame, table: FrequencyTable) -> np.ndarray:
    """Index among the table's cells of each row of ``frame`` (-1 where it is not a cell).

    ``frame`` has a column per identifying variable; its values are matched against the
    table's categories (:func:`category_codes`).
    """
    codes = np.column_stack(
        [category_codes(frame[q], table.categories[j]) for j, q in enumerate(table.qi)]
    )
    idx = np.full(len(frame), -1, dtype=np.int64)
    ok = (codes >= 0).all(axis=1)
    idx[ok] = cell_index(table, codes[ok])
    return idx


def cell_index(table: FrequencyTable, codes: np.ndarray) -> np.ndarray:
    """Index of each row of ``codes`` among the table's cells, -1 where it is not a cell."""
    codes = np.asarray(codes, dtype=np.int64)
    return CellLookup(table, lut_max=min(1 << 22, 4 * len(codes)))(codes)
