"""Many records: count and release CSV or Parquet files larger than memory, in record batches.

:func:`count_file` builds the :class:`~pramopt.FrequencyTable` of a file and
:func:`release_file` applies a design to it, both reading the file in record batches (pyarrow's
streaming CSV reader, :meth:`pyarrow.parquet.ParquetFile.iter_batches`), so that their memory
depends on the batch size and on the number of distinct values and cells, never on the number
of records.  The design step only ever sees the frequency table.

Same result as in memory
    ``count_file(path, qi)`` equals ``frequency_table(pd.read_csv(path), qi)`` (or
    ``pd.read_parquet``): the same categories, codes, counts and checksum.  The identifying
    columns are read as *raw* values -- text for CSV, typed Arrow values for Parquet -- and
    their distinct values are counted; only at the end are the distinct values converted the
    way pandas converts the whole file (``pd.read_csv`` on the distinct texts, Arrow's
    ``to_pandas`` on the distinct Parquet values).  A CSV column is thus typed by all of its
    values, as pandas types it, not batch by batch: a column of integers with a missing value
    anywhere is a float column with a missing category, as in pandas, even in the batches
    where no value is missing.  (pandas' own default ``low_memory`` reader may give a column
    that mixes numbers and strings -- with a ``DtypeWarning`` -- when its type changes after
    the first 2**18 rows; ``count_file`` then agrees with ``pd.read_csv(path, low_memory=False)``.)

Split-invariant release
    Record ``i`` of the file takes its uniform from block ``i // BLOCK`` of a random stream
    spawned from the seed (:class:`pramopt.release.UniformStream`), so a given seed gives the
    same released file whatever the batch size, and the same records as
    :func:`pramopt.release` on the whole frame and the Dask release.

What is written
    A CSV is written as CSV and a Parquet file as Parquet.  CSV: the non-identifying fields
    are copied as they were read (their text, re-quoted only where a field holds a comma, a
    quote or a line break); each identifying field is the released category written as
    ``pandas.DataFrame.to_csv`` writes it.  Parquet: the non-identifying columns are copied
    as Arrow arrays, the identifying ones keep their Arrow type, the schema (with pandas'
    metadata) and the compression codec are the source's, and the row groups have a fixed
    size (``ROW_GROUP_SIZE`` records), so that the output does not depend on the batch size.
    ``pd.read_csv(dst)`` (``pd.read_parquet``) then equals ``release(pd.read_csv(src), result,
    seed)``.  The output is written to a temporary file next to ``dst`` and renamed only once
    every record has been released and the counts of the source have been checked against
    the design; on any failure no ``dst`` is left.

Memory
    Counting holds one batch, the distinct values and the cell counts.  A release also holds
    one output row group (Parquet) and, for a CSV, the blocks pyarrow's reader keeps in flight
    (a few dozen blocks of about ``batch_size`` records).  None of it depends on the number of
    records (see ``benchmarks/results/records.md``).
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ._validation import InvalidParameterError, check_choice, check_int
from .data import (
    MAX_CATEGORIES, CellLookup, FrequencyTable, check_domains, check_qi_names, count_rows, encode_column,
)
from .io import atomic_write
from .release import DesignMismatchError, Sampler, UniformStream, check_releasable, seed_entropy

__all__ = ["count_file", "release_file", "FileRelease", "DEFAULT_BATCH_SIZE", "ROW_GROUP_SIZE"]

#: Records per batch unless told otherwise (a CSV is read in blocks of about this many records).
DEFAULT_BATCH_SIZE = 1 << 16
#: Records per row group of a released Parquet file (fixed, so that the file does not depend
#: on the batch size; the memory of a Parquet release grows with it).
ROW_GROUP_SIZE = 1 << 17

_PARQUET = (".parquet", ".pq")
_MiB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

def _arrow_to_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow to pandas exactly as ``pd.read_parquet`` converts (its own helper where it has one)."""
    try:
        from pandas.io._util import arrow_table_to_pandas
    except ImportError:  # pragma: no cover - other pandas versions
        return table.to_pandas()
    return arrow_table_to_pandas(table)


def _parse_csv_texts(texts: Sequence[str], as_str: bool = False) -> pd.Series:
    """Values of a CSV column holding exactly ``texts``, typed as ``pd.read_csv`` types a column.

    The texts are written, quoted, into a small CSV that pandas reads with its defaults (missing
    value markers, number and boolean inference over all the values at once); ``as_str`` keeps
    the texts as strings (missing value markers still become NaN).
    """
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(["v", "w"])
    w.writerows([t, "0"] for t in texts)
    buf.seek(0)
    kw = {"dtype": {"v": str}} if as_str else {}
    return pd.read_csv(buf, low_memory=False, **kw)["v"]


class _Source:
    """A CSV or Parquet file read in record batches of raw values.

    CSV: every requested column as text (no missing-value detection: pandas' rules are applied
    later, to the distinct texts).  Parquet: Arrow arrays as stored.
    """

    def __init__(self, path, fmt, owner: str, param: str = "path"):
        try:
            p = Path(path)
        except TypeError:
            raise InvalidParameterError(
                f"The {param!r} parameter of {owner} must be a path to a .csv, .parquet or .pq file; "
                f"got {path!r}.") from None
        if fmt is None:
            suffix = p.suffix.lower()
            if suffix == ".csv":
                fmt = "csv"
            elif suffix in _PARQUET:
                fmt = "parquet"
            else:
                raise InvalidParameterError(f"Cannot read {str(p)!r}: the file name must end in .csv, .parquet or .pq.")
        check_choice(fmt, "format", owner, ["csv", "parquet"])
        if not p.is_file():
            raise InvalidParameterError(f"Cannot read {str(p)!r}: no such file.")
        self.path, self.format, self.owner = p, fmt, owner
        try:
            if fmt == "parquet":
                # pre_buffer=False: the pre-buffered ranges would stay cached until the file is closed,
                # so memory would grow with the file
                self._pf = pq.ParquetFile(p, pre_buffer=False)
                self.schema = self._pf.schema_arrow
                md = self._pf.metadata
                codec = (md.row_group(0).column(0).compression.lower()
                         if md.num_row_groups and md.num_columns else "snappy")
                self.compression = "none" if codec == "uncompressed" else codec
            else:
                with pacsv.open_csv(p, read_options=pacsv.ReadOptions(block_size=_MiB),
                                    parse_options=self._parse_options()) as r:
                    self.schema = r.schema
        except (pa.ArrowException, OSError) as e:
            raise InvalidParameterError(f"Cannot read {str(p)!r}: {e}") from None
        self.names = list(self.schema.names)
        dup = sorted({n for n in self.names if self.names.count(n) > 1})
        if dup:
            raise InvalidParameterError(f"Cannot read {str(p)!r}: repeated column names {dup!r}.")

    @staticmethod
    def _parse_options():
        # pandas accepts quoted line breaks, so must we
        return pacsv.ParseOptions(newlines_in_values=True)

    def _block_size(self, batch_size: int) -> int:
        """CSV block (bytes) that holds about ``batch_size`` records, at least 1 MiB."""
        with open(self.path, "rb") as f:
            sample = f.read(256 * 1024)
        per_row = len(sample) / max(sample.count(b"\n"), 1)
        return int(min(max(batch_size * per_row * 1.2, _MiB), 1 << 30))

    def batches(self, columns: list[str] | None, batch_size: int) -> Iterator[pa.RecordBatch]:
        """Record batches of at most ``batch_size`` records (``columns=None``: every column)."""
        try:
            if self.format == "parquet":
                yield from self._pf.iter_batches(batch_size=batch_size, columns=columns, use_threads=True)
                return
            cols = self.names if columns is None else list(columns)
            co = pacsv.ConvertOptions(column_types={c: pa.string() for c in cols}, include_columns=cols,
                                      strings_can_be_null=False, quoted_strings_can_be_null=False,
                                      null_values=[])
            ro = pacsv.ReadOptions(block_size=self._block_size(batch_size), use_threads=True)
            with pacsv.open_csv(self.path, read_options=ro, parse_options=self._parse_options(),
                                convert_options=co) as reader:
                for batch in reader:
                    for s in range(0, batch.num_rows, batch_size):
                        yield batch.slice(s, batch_size)
        except (pa.ArrowInvalid, pa.ArrowIOError) as e:
            raise InvalidParameterError(f"Cannot read {str(self.path)!r}: {e}") from None

    def to_pandas(self, name: str, values: pa.Array, *, as_str: bool = False) -> pd.Series:
        """The distinct raw ``values`` of column ``name`` as pandas would have read them."""
        if self.format == "csv":
            return _parse_csv_texts(values.to_pylist(), as_str=as_str).reset_index(drop=True)
        field = self.schema.field(name)
        if pa.types.is_dictionary(field.type):
            idx = pa.array(np.arange(len(values), dtype=np.int32))
            values = pa.DictionaryArray.from_arrays(idx, values, ordered=field.type.ordered)
            field = pa.field(name, values.type, field.nullable)
        t = pa.Table.from_arrays([values], schema=pa.schema([field], metadata=self.schema.metadata))
        return _arrow_to_pandas(t)[name].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------

class _NaN:
    """Key of every float NaN (NaN != NaN would make each one a new dict key)."""


class _Distinct:
    """Distinct raw values of one column, numbered in order of first appearance.

    For a dictionary (categorical) column every dictionary entry is numbered, in dictionary
    order, as Arrow unifies the dictionaries of a file's row groups.
    """

    def __init__(self, name: str, owner: str):
        self.name, self.owner = name, owner
        self.ids: dict = {}
        self.pieces: list[pa.Array] = []
        self.size = 0
        self.null_id = -1

    def encode(self, arr) -> np.ndarray:
        """Global id (int64) of each value of ``arr``."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        enc = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
        dictionary, indices = enc.dictionary, enc.indices
        keys = dictionary.to_pylist()
        lut = np.empty(len(keys) + 1, dtype=np.int64)
        new = []
        for j, k in enumerate(keys):
            if isinstance(k, float) and k != k:
                k = _NaN
            try:
                i = self.ids.get(k)
            except TypeError:
                raise InvalidParameterError(
                    f"The identifying variable {self.name!r} has values of type {arr.type} that cannot "
                    "be categories.") from None
            if i is None:
                i = self.ids[k] = self.size
                self.size += 1
                new.append(j)
            lut[j] = i
        if new:
            self.pieces.append(dictionary.take(pa.array(new, type=pa.int64())))
        if indices.null_count:
            if self.null_id < 0:
                self.null_id = self.size
                self.size += 1
                self.pieces.append(pa.nulls(1, type=dictionary.type))
            lut[len(keys)] = self.null_id
            indices = indices.fill_null(len(keys))
        return lut[indices.to_numpy(zero_copy_only=False)]

    def values(self, start: int = 0) -> pa.Array:
        """The distinct values with ids ``start, start + 1, ...``, as one Arrow array."""
        if not self.pieces:
            return pa.array([], type=pa.string())
        out = pa.concat_arrays(self.pieces)
        return out.slice(start)


class _Cells:
    """Counts of the distinct rows of global ids seen so far (merged batch by batch)."""

    def __init__(self, d: int):
        self.d = d
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending = 0
        self.kept = 0

    def add(self, ids: list[np.ndarray], radix: list[int]) -> None:
        cells, counts = count_rows(np.column_stack(ids), radix)
        self.parts.append((cells, counts))
        self.pending += len(cells)
        if self.pending > max(1 << 16, 2 * self.kept):
            self.compact(radix)

    def compact(self, radix: list[int]) -> tuple[np.ndarray, np.ndarray]:
        if not self.parts:
            return np.empty((0, self.d), dtype=np.int64), np.empty(0, dtype=np.int64)
        if len(self.parts) > 1:
            cells = np.concatenate([c for c, _ in self.parts])
            counts = np.concatenate([w for _, w in self.parts])
            self.parts = [count_rows(cells, radix, counts)]
        self.pending = self.kept = len(self.parts[0][0])
        return self.parts[0]


class _Counter:
    """Everything :func:`count_file` accumulates: distinct values per column and cell counts."""

    def __init__(self, src: _Source, qi: tuple, owner: str):
        self.src, self.qi, self.owner = src, qi, owner
        self.cols = [_Distinct(q, owner) for q in qi]
        self.cells = _Cells(len(qi))
        self.n = 0

    def radix(self) -> list[int]:
        return [max(c.size, 1) for c in self.cols]

    def add(self, batch: pa.RecordBatch) -> list[np.ndarray]:
        ids = [c.encode(batch.column(q)) for c, q in zip(self.cols, self.qi)]
        self.cells.add(ids, self.radix())
        self.n += batch.num_rows
        return ids

    def observed(self, j: int) -> np.ndarray:
        rows, _ = self.cells.compact(self.radix())
        return np.unique(rows[:, j])

    def check_categories(self, j: int, max_categories: int) -> None:
        """Raise early (as encode_column would at the end) when column j has too many categories."""
        obs = self.observed(j)
        vals = self.src.to_pandas(self.qi[j], self.cols[j].values()).take(obs)
        k = vals.nunique(dropna=True) + int(vals.isna().any())
        if k > max_categories:
            encode_column(vals.reset_index(drop=True), self.qi[j], None, max_categories, self.owner)

    def table(self, domains: Mapping, max_categories, owner: str) -> tuple[FrequencyTable, list[np.ndarray]]:
        """The frequency table and, per column, the category code of every raw id (-1: unseen)."""
        rows, weights = self.cells.compact(self.radix())
        mapped = np.empty_like(rows)
        cats, luts = [], []
        for j, q in enumerate(self.qi):
            obs = np.unique(rows[:, j])
            vals = self.src.to_pandas(q, self.cols[j].values()).take(obs).reset_index(drop=True)
            mc = max_categories if not isinstance(max_categories, Sequence) else max_categories[j]
            codes, c = encode_column(vals, q, domains.get(q), mc, owner)
            lut = np.full(self.cols[j].size, -1, dtype=np.int64)
            lut[obs] = codes
            mapped[:, j] = lut[rows[:, j]]
            cats.append(c)
            luts.append(lut)
        cells, counts = count_rows(mapped, [len(c) for c in cats], weights)
        return FrequencyTable(qi=tuple(self.qi), categories=tuple(cats), codes=cells, counts=counts), luts


def _count_file(path, qi, domains, max_categories, batch_size, fmt, owner: str) -> FrequencyTable:
    batch_size = check_int(batch_size, "batch_size", owner, low=1)
    max_categories = check_int(max_categories, "max_categories", owner, low=1)
    src = _Source(path, fmt, owner)
    qi = check_qi_names(src.names, qi, owner)
    domains = check_domains(domains, qi, owner)
    counter = _Counter(src, qi, owner)
    limits = [max_categories] * len(qi)
    for batch in src.batches(list(qi), batch_size):
        counter.add(batch)
        for j, q in enumerate(qi):
            if q not in domains and counter.cols[j].size > limits[j]:
                counter.check_categories(j, max_categories)
                limits[j] = 2 * counter.cols[j].size  # many spellings of few categories: look again later
    if counter.n == 0:
        raise InvalidParameterError(
            f"The 'path' parameter of {owner} must be a file with at least one record; {str(src.path)!r} has none.")
    return counter.table(domains, max_categories, owner)[0]


def count_table(path, qi, *, owner: str = "count_file", **kw) -> FrequencyTable:
    """:func:`count_file` with another function's name in its error messages (for the CLI)."""
    return _count_file(path, qi, kw.get("domains"), kw.get("max_categories", MAX_CATEGORIES),
                       kw.get("batch_size", DEFAULT_BATCH_SIZE), kw.get("format"), owner)


def count_file(
    path,
    qi: Sequence[str],
    *,
    domains: Mapping[str, Sequence] | None = None,
    max_categories: int = MAX_CATEGORIES,
    batch_size: int = DEFAULT_BATCH_SIZE,
    format: str | None = None,
) -> FrequencyTable:
    """Frequency table of a CSV or Parquet file, read in record batches.

    Peak memory depends on ``batch_size`` (for Parquet also on the file's row-group size) and
    on the numbers of distinct values and cells, not on the number of records.

    Parameters
    ----------
    path : str or Path
        A ``.csv``, ``.parquet`` or ``.pq`` file.
    qi : list of str
        Identifying variables.
    domains : dict, optional
        Categories of some variables, when they should not be taken from the data.
    max_categories : int
        Refuse variables with more categories than this (bin them first).
    batch_size : int, default ``DEFAULT_BATCH_SIZE``
        Records per batch (a CSV is read in blocks of about this many records, cut to at most
        ``batch_size``).
    format : {"csv", "parquet"}, optional
        The file's format; by default from its extension.

    Returns
    -------
    FrequencyTable
        The same as :func:`pramopt.frequency_table` on ``pd.read_csv(path)`` (or
        ``pd.read_parquet(path)``): categories sorted as ``pd.factorize(sort=True)`` sorts
        them with the missing value last, cells, counts and checksum.

    Raises
    ------
    InvalidParameterError
        For a missing file, an unknown extension, a file that cannot be parsed, an unknown or
        repeated ``qi`` column, bad ``batch_size`` or ``max_categories``, a file without
        records, or a variable with too many categories.
    """
    return _count_file(path, qi, domains, max_categories, batch_size, format, "count_file")


# ---------------------------------------------------------------------------------------------
# Release
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileRelease:
    """What :func:`release_file` wrote.

    Attributes
    ----------
    path : Path
        The released file.
    n : int
        Records released.
    changed : int
        Records whose identifying values changed.
    batches : int
        Record batches processed.
    format : str
        ``"csv"`` or ``"parquet"``.
    """

    path: Path
    n: int
    changed: int
    batches: int
    format: str


def _lookup(values: pd.Series, cats: pd.Index) -> np.ndarray:
    """Code of each value among the design's categories (-1: not a category)."""
    try:
        codes = np.asarray(cats.get_indexer(values), dtype=np.int64)
    except (TypeError, ValueError):
        codes = np.asarray(pd.Index(list(cats), dtype=object).get_indexer(values.astype(object)), dtype=np.int64)
    na = values.isna().to_numpy()
    if na.any():
        nan_pos = np.flatnonzero(cats.isna())
        codes[na] = int(nan_pos[0]) if len(nan_pos) else -1
    return codes


def _all_strings(cats: pd.Index) -> bool:
    vals = [c for c in cats if not _isna(c)]
    return pd.api.types.is_string_dtype(cats.dtype) and all(isinstance(c, str) for c in vals)


def _isna(x) -> bool:
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _csv_text(x) -> str:
    """A category as ``DataFrame.to_csv`` writes it (before quoting)."""
    if _isna(x):
        return ""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    return str(x)


_NEEDS_QUOTES = r'[",\r\n]'


def _may_need_quotes(arr: pa.Array) -> bool:
    """False when no value can need quotes: a fast byte scan of the array's whole data buffer."""
    bufs = arr.buffers()
    if len(bufs) < 3 or bufs[2] is None:
        return False
    raw = bufs[2].to_pybytes()  # a copy, but searched at memchr speed
    return any(ch in raw for ch in (b'"', b",", b"\n", b"\r"))


def _quote(arr: pa.Array, quote_empty: bool = False) -> pa.Array:
    """Minimal CSV quoting (as Python's csv.QUOTE_MINIMAL): only fields with , " or line breaks."""
    if not quote_empty and not _may_need_quotes(arr):
        return arr
    need = pc.match_substring_regex(arr, _NEEDS_QUOTES)
    if quote_empty:  # a one-column file must not have empty lines
        need = pc.or_(need, pc.equal(pc.utf8_length(arr), 0))
    if not pc.any(need).as_py():
        return arr
    q, empty = pa.scalar('"', arr.type), pa.scalar("", arr.type)
    quoted = pc.binary_join_element_wise(q, pc.replace_substring(arr, '"', '""'), q, empty)
    return pc.if_else(need, quoted, arr)


def _csv_bytes(columns: list[pa.Array]) -> memoryview:
    """The CSV lines of already quoted text columns, as one buffer."""
    L = pa.large_string()
    columns = [c if c.type == L else c.cast(L) for c in columns]
    row = columns[0] if len(columns) == 1 else pc.binary_join_element_wise(*columns, pa.scalar(",", L))
    lines = pc.binary_join_element_wise(row, pa.scalar("", L), pa.scalar("\n", L))
    _, offsets, data = lines.buffers()
    off = np.frombuffer(offsets, dtype=np.int64)
    lo, hi = int(off[lines.offset]), int(off[lines.offset + len(lines)])
    return memoryview(data)[lo:hi]


class _CsvSink:
    def __init__(self, fh, names: list[str]):
        self.fh = fh
        header = _quote(pa.array(names, type=pa.large_string()), quote_empty=len(names) == 1)
        self.fh.write(_csv_bytes([header[i:i + 1] for i in range(len(names))]))

    def write(self, columns: list[pa.Array]) -> None:
        if len(columns[0]):
            self.fh.write(_csv_bytes(columns))

    def close(self) -> None:
        pass


class _ParquetSink:
    """Writes row groups of exactly ``ROW_GROUP_SIZE`` records, whatever the batches it is given.

    The row groups (and so the file's bytes) do not depend on the batch size; each one is made
    contiguous before it is written, so that the writer sees the same arrays however the
    records arrived.
    """

    def __init__(self, fh, schema: pa.Schema, compression: str, size: int):
        self.writer = pq.ParquetWriter(fh, schema, compression=compression)
        self.schema = schema
        self.size = size
        self.buf: list[pa.RecordBatch] = []
        self.rows = 0

    def _flush(self, size: int) -> None:
        t = pa.Table.from_batches(self.buf, schema=self.schema)
        self.writer.write_table(t.slice(0, size).combine_chunks(), row_group_size=max(size, 1))
        rest = t.slice(size)
        self.buf = rest.to_batches() if rest.num_rows else []
        self.rows -= size

    def write(self, batch: pa.RecordBatch) -> None:
        self.buf.append(batch)
        self.rows += batch.num_rows
        while self.rows >= self.size:
            self._flush(self.size)

    def close(self) -> None:
        if self.rows:
            self._flush(self.rows)
        self.writer.close()


def _arrow_labels(field: pa.Field, cats: pd.Index) -> pa.Array:
    """The design's categories as an Arrow array of the column's (value) type; NaN -> null."""
    typ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
    vals = [None if _isna(c) else c for c in cats]
    try:
        return pa.array(vals, type=typ)
    except (pa.ArrowException, TypeError, ValueError):
        return pa.array(vals).cast(typ)


def _as_dictionary(plain: pa.Array, like: pa.Array, typ: pa.DictionaryType) -> pa.Array:
    """Encode released values against the source batch's dictionary (keeps its category order)."""
    dictionary = like.dictionary
    pos = pc.index_in(plain, value_set=dictionary)
    missing = pc.and_(pc.is_null(pos), pc.is_valid(plain))
    if pc.any(missing).as_py():
        extra = pc.unique(plain.filter(missing))
        dictionary = pa.concat_arrays([dictionary, extra])
        pos = pc.index_in(plain, value_set=dictionary)
    return pa.DictionaryArray.from_arrays(pos.cast(typ.index_type), dictionary, ordered=typ.ordered)


class _Releaser:
    """Per-column mapping from raw values to the design's categories, and released labels."""

    def __init__(self, src: _Source, table: FrequencyTable, counter: _Counter):
        self.src, self.table, self.counter = src, table, counter
        self.luts = [np.empty(0, dtype=np.int64) for _ in table.qi]
        self.as_str = [src.format == "csv" and _all_strings(c) for c in table.categories]
        if src.format == "csv":
            self.labels = [_quote(pa.array([_csv_text(c) for c in cats], type=pa.large_string()),
                                  quote_empty=len(src.names) == 1)
                           for cats in table.categories]
        else:
            self.labels = [_arrow_labels(src.schema.field(q), cats) for q, cats in zip(table.qi, table.categories)]

    def _interpret(self, j: int, start: int) -> np.ndarray:
        """Design codes of the raw values with ids >= start of column j (-1: not a category)."""
        q, cats = self.table.qi[j], self.table.categories[j]
        raw = self.counter.cols[j].values(start)
        codes = _lookup(self.src.to_pandas(q, raw, as_str=self.as_str[j]), cats)
        if self.src.format == "csv" and not self.as_str[j] and (codes < 0).any():
            # typed one value at a time where typing them together failed (mixed-type categories)
            texts = raw.to_pylist()
            for i in np.flatnonzero(codes < 0)[:100]:
                codes[i] = _lookup(_parse_csv_texts([texts[i]]), cats)[0]
        return codes

    def codes(self, ids: list[np.ndarray]) -> np.ndarray:
        out = np.empty((len(ids[0]), len(ids)), dtype=np.int64)
        for j, col in enumerate(self.counter.cols):
            have = len(self.luts[j])
            if col.size > have:
                self.luts[j] = np.concatenate([self.luts[j], self._interpret(j, have)])
            out[:, j] = self.luts[j][ids[j]]
        return out


def _describe_bad(batch: pa.RecordBatch, qi, rows: np.ndarray) -> list[dict]:
    take = pa.array(rows[:3], type=pa.int64())
    return batch.select(list(qi)).take(take).to_pylist()


def release_file(
    src,
    dst,
    result,
    *,
    seed=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    format: str | None = None,
    allow_unverified: bool = False,
) -> FileRelease:
    """Release a CSV or Parquet file with a design, streaming it in record batches.

    Every record's identifying values are replaced by a draw from its cell's row of the
    design's matrix; every other column is copied untouched.  The source is checked against
    the design in the same pass (every record in one of the design's cells, and the cell
    counts equal to the design's), and the output is written to a temporary file next to
    ``dst`` that replaces ``dst`` only when every check has passed.

    Parameters
    ----------
    src : str or Path
        The microdata the design was made for: ``.csv``, ``.parquet`` or ``.pq``.
    dst : str or Path
        The released file, in the same format as ``src`` (``.csv``; ``.parquet`` or ``.pq``).
    result : DesignResult
        A design that passed verification.
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw; without it the entropy comes from ``secrets``.  The same
        seed gives the same file whatever ``batch_size``, and the same records as
        :func:`pramopt.release` of the whole frame.
    batch_size : int, default ``DEFAULT_BATCH_SIZE``
        Records per batch.
    format : {"csv", "parquet"}, optional
        The format of ``src`` (and so of ``dst``); by default from the extension of ``src``.
    allow_unverified : bool
        Release even with a design that failed verification (never do this for publication).

    Returns
    -------
    FileRelease
        The path written, the number of records and of records changed.

    Raises
    ------
    InvalidParameterError
        For bad parameters, a missing or unreadable ``src``, a ``dst`` in another format or
        folder that does not exist, or ``dst`` equal to ``src``.
    DesignMismatchError
        For a design that did not pass verification, or data it was not made for (a value or
        cell the design does not have, other counts).  Nothing is written then.
    """
    owner = "release_file"
    table = check_releasable(result, owner, allow_unverified)
    batch_size = check_int(batch_size, "batch_size", owner, low=1)
    entropy = seed_entropy(seed, owner)
    source = _Source(src, format, owner, param="src")
    out = _check_dst(dst, source, owner)
    qi = check_qi_names(source.names, table.qi, owner)
    counter = _Counter(source, qi, owner)
    releaser = _Releaser(source, table, counter)
    sampler = Sampler(result.matrix)
    lookup = CellLookup(table)
    uniforms = UniformStream(entropy)
    positions = [source.names.index(q) for q in qi]
    offset = changed = batches = 0
    with atomic_write(out) as fh:
        sink = (_CsvSink(fh, source.names) if source.format == "csv"
                else _ParquetSink(fh, source.schema, source.compression, ROW_GROUP_SIZE))
        for batch in source.batches(None, batch_size):
            m = batch.num_rows
            ids = counter.add(batch)
            codes = releaser.codes(ids)
            unknown = (codes < 0).any(axis=1)
            if unknown.any():
                raise DesignMismatchError(
                    f"The data do not match the design: {int(unknown.sum())} records of this batch have "
                    f"values the design does not know (for example {_describe_bad(batch, qi, np.flatnonzero(unknown))}).")
            cells = lookup(codes)
            if (cells < 0).any():
                raise DesignMismatchError(
                    f"{int((cells < 0).sum())} records of the data fall in cells the design does not have "
                    f"(for example {_describe_bad(batch, qi, np.flatnonzero(cells < 0))}); the design was made "
                    "for other data.")
            new = sampler.draw(cells, uniforms(offset, offset + m))
            changed += int((new != cells).sum())
            columns = list(batch.columns)
            for j, p in enumerate(positions):
                rel = releaser.labels[j].take(pa.array(table.codes[new, j]))
                if source.format == "parquet" and pa.types.is_dictionary(source.schema.field(qi[j]).type):
                    rel = _as_dictionary(rel, batch.column(p), source.schema.field(qi[j]).type)
                columns[p] = rel
            if source.format == "csv":
                for p in range(len(columns)):
                    if p not in positions:
                        columns[p] = _quote(columns[p].cast(pa.large_string()), quote_empty=len(columns) == 1)
                sink.write(columns)
            else:
                sink.write(pa.RecordBatch.from_arrays(columns, schema=source.schema))
            offset += m
            batches += 1
        _check_counts(counter, table, releaser, source, qi)
        sink.close()
    return FileRelease(path=out, n=offset, changed=changed, batches=batches, format=source.format)


def _check_dst(dst, source: _Source, owner: str) -> Path:
    from .io import _check_out

    out = _check_out(dst)
    fmt = "parquet" if out.suffix.lower() in _PARQUET else "csv"
    if fmt != source.format:
        raise InvalidParameterError(
            f"The 'dst' parameter of {owner} must be a {source.format} file like its source; got {str(out)!r} "
            f"(to change format, read the released file with pandas and write it again).")
    if out.exists() and os.path.samefile(out, source.path):
        raise InvalidParameterError(f"The 'dst' parameter of {owner} must not be the source file; got {str(out)!r}.")
    return out


def _check_counts(counter: _Counter, table: FrequencyTable, releaser: _Releaser, source: _Source, qi) -> None:
    """The source's table, coded with the design's categories, must be the design's table."""
    domains = {q: list(c) for q, c in zip(table.qi, table.categories)}
    limits = [max(len(c), 1) for c in table.categories]
    try:
        got, luts = counter.table(domains, limits, "release")
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
    if got.checksum() != table.checksum():
        raise DesignMismatchError(
            f"The design was made for other data: the cells or counts of {str(source.path)!r} over "
            f"{', '.join(map(str, qi))} differ (n = {got.n} vs {table.n}, {got.n_cells} vs {table.n_cells} cells).")
    for j, q in enumerate(qi):
        seen = luts[j] >= 0
        if not np.array_equal(luts[j][seen], releaser.luts[j][:len(luts[j])][seen]):
            raise DesignMismatchError(
                f"The values of {q!r} were typed differently batch by batch than over the whole file; "
                "release this file in memory (pramopt.release) instead.")
