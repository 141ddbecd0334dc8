"""Count CSV or Parquet files larger than memory, in record batches.

:func:`count_file` builds the :class:`~pramopt.FrequencyTable` of a file reading it in record
batches (pyarrow's streaming CSV reader, :meth:`pyarrow.parquet.ParquetFile.iter_batches`), so
that its memory depends on the batch size and on the number of distinct values and cells, never
on the number of records.  The design step only ever sees the frequency table.

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

Memory
    Counting holds one batch, the distinct values and the cell counts (see
    ``benchmarks/results/records.md``).  :mod:`pramopt.publish.file_release` reuses the source and
    the counter to check a file against a design while it releases it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .._csv import CSV_SUFFIXES, DEFAULT_DIALECT, CsvDialect, csv_dialect, parse_error
from .._validation import InvalidParameterError, check_choice, check_int
from .table import (
    MAX_CATEGORIES,
    FrequencyTable,
    check_domains,
    check_qi_names,
    count_rows,
    encode_column,
)

__all__ = ["count_file", "DEFAULT_BATCH_SIZE"]

#: Records per batch unless told otherwise (a CSV is read in blocks of about this many records).
DEFAULT_BATCH_SIZE = 1 << 16

PARQUET_SUFFIXES = (".parquet", ".pq")
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


def _parse_csv_texts(
    texts: Sequence[str], as_str: bool = False, decimal: str = ".", na_values: Sequence[str] = ()
) -> pd.Series:
    """Values of a CSV column holding exactly ``texts``, typed as ``pd.read_csv`` types a column.

    The texts are written, quoted, into a small CSV that pandas reads with its defaults (missing
    value markers, number and boolean inference over all the values at once; ``decimal`` the
    decimal mark); ``as_str`` keeps the texts as strings, and then only the empty text and
    ``na_values`` are missing (``NA`` may be Namibia; ``None`` may be an answer).
    """
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n", delimiter="\t")
    w.writerow(["v", "w"])
    w.writerows([t, "0"] for t in texts)
    buf.seek(0)
    kw: dict = (
        {"dtype": {"v": str}, "keep_default_na": False, "na_values": {"v": ["", *na_values]}}
        if as_str
        else {"na_values": {"v": list(na_values)}}
    )
    return pd.read_csv(buf, low_memory=False, sep="\t", decimal=decimal, **kw)["v"]


class _Source:
    """A CSV or Parquet file read in record batches of raw values.

    CSV: every requested column as text (no missing-value detection: pandas' rules are applied
    later, to the distinct texts).  Parquet: Arrow arrays as stored.
    """

    def __init__(
        self, path, fmt, owner: str, param: str = "path", dialect: CsvDialect = DEFAULT_DIALECT
    ):
        self.dialect = dialect
        try:
            p = Path(path)
        except TypeError:
            raise InvalidParameterError(
                f"The {param!r} parameter of {owner} must be a path to a .csv (.tsv, .txt), "
                f".parquet or .pq file; got {path!r}."
            ) from None
        if fmt is None:
            suffix = p.suffix.lower()
            if suffix in CSV_SUFFIXES:
                fmt = "csv"
            elif suffix in PARQUET_SUFFIXES:
                fmt = "parquet"
            else:
                raise InvalidParameterError(
                    f"Cannot read {str(p)!r}: the file name must end in .csv, .tsv, .txt, "
                    ".parquet or .pq."
                )
        check_choice(fmt, "format", owner, ["csv", "parquet"])
        if not p.is_file():
            raise InvalidParameterError(f"Cannot read {str(p)!r}: no such file.")
        self.path, self.format, self.owner = p, fmt, owner
        try:
            if fmt == "parquet":
                # pre_buffer=False: the pre-buffered ranges would stay cached until the file is
                # closed, so memory would grow with the file
                self._pf = pq.ParquetFile(p, pre_buffer=False)
                self.schema = self._pf.schema_arrow
                md = self._pf.metadata
                codec = (
                    md.row_group(0).column(0).compression.lower()
                    if md.num_row_groups and md.num_columns
                    else "snappy"
                )
                self.compression = "none" if codec == "uncompressed" else codec
            else:
                with pacsv.open_csv(
                    p,
                    read_options=pacsv.ReadOptions(block_size=_MiB, encoding=dialect.encoding),
                    parse_options=self._parse_options(),
                ) as r:
                    self.schema = r.schema
        except (pa.ArrowException, OSError) as e:
            raise InvalidParameterError(
                parse_error(p, dialect, e) if fmt == "csv" else f"Cannot read {str(p)!r}: {e}"
            ) from None
        self.names = list(self.schema.names)
        dup = sorted({n for n in self.names if self.names.count(n) > 1})
        if dup:
            raise InvalidParameterError(f"Cannot read {str(p)!r}: repeated column names {dup!r}.")

    def _parse_options(self):
        # pandas accepts quoted line breaks, so must we
        return pacsv.ParseOptions(newlines_in_values=True, delimiter=self.dialect.sep)

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
                yield from self._pf.iter_batches(
                    batch_size=batch_size, columns=columns, use_threads=True
                )
                return
            cols = self.names if columns is None else list(columns)
            co = pacsv.ConvertOptions(
                column_types={c: pa.string() for c in cols},
                include_columns=cols,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            )
            ro = pacsv.ReadOptions(
                block_size=self._block_size(batch_size),
                use_threads=True,
                encoding=self.dialect.encoding,
            )
            with pacsv.open_csv(
                self.path, read_options=ro, parse_options=self._parse_options(), convert_options=co
            ) as reader:
                for batch in reader:
                    for s in range(0, batch.num_rows, batch_size):
                        yield batch.slice(s, batch_size)
        except (pa.ArrowInvalid, pa.ArrowIOError) as e:
            raise InvalidParameterError(
                parse_error(self.path, self.dialect, e)
                if self.format == "csv"
                else f"Cannot read {str(self.path)!r}: {e}"
            ) from None

    def to_pandas(
        self, name: str, values: pa.Array, *, as_str: bool = False, na_values=None
    ) -> pd.Series:
        """The distinct raw ``values`` of column ``name`` as pandas would have read them
        (``na_values``: the column's missing-value texts, if not the dialect's)."""
        if self.format == "csv":
            return _parse_csv_texts(
                values.to_pylist(),
                as_str=as_str,
                decimal=self.dialect.decimal,
                na_values=self.dialect.na_values if na_values is None else na_values,
            ).reset_index(drop=True)
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
                    f"The identifying variable {self.name!r} has values of type {arr.type} that "
                    "cannot "
                    "be categories."
                ) from None
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
    """Everything :func:`count_file` accumulates: distinct values per column and cell counts.

    With ``recode`` (a :class:`~pramopt.recode.Recoding`) the distinct values of each recoded
    column are read as text and recoded when they are converted, so that the cells are the
    recoded data's while each batch is still read raw.
    """

    def __init__(
        self, src: _Source, qi: tuple, owner: str, as_text=False, na_values=None, recode=None
    ):
        self.src, self.qi, self.owner = src, qi, owner
        self.recode = recode
        # keys kept as the text written ('03' stays '03'): one flag, or one per column
        flags = as_text if isinstance(as_text, (list, tuple)) else [as_text] * len(qi)
        # a recoding maps texts, so a recoded column is read as text whatever the flag says
        self.recoded = [recode is not None and bool(recode.variables.get(q)) for q in qi]
        flags = [f or r for f, r in zip(flags, self.recoded)]
        self.as_text = [bool(f) and src.format == "csv" for f in flags]
        # each column's missing-value texts (None: the dialect's)
        self.na = list(na_values) if na_values is not None else [None] * len(qi)
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

    def values(self, j: int, start: int = 0, recoded: bool = True) -> pd.Series:
        """The distinct raw values of column j with ids >= ``start``, as pandas reads them, then
        recoded (when ``recoded`` and the column is recoded)."""
        q = self.qi[j]
        vals = self.src.to_pandas(
            q, self.cols[j].values(start), as_str=self.as_text[j], na_values=self.na[j]
        )
        if recoded and self.recoded[j]:
            vals = self.recode.series(q, vals).reset_index(drop=True)
        return vals

    def categories_before(self) -> dict[str, int]:
        """Per recoded column, its number of categories before the recoding (missing counted as
        one, as the table counts it)."""
        out = {}
        for j, q in enumerate(self.qi):
            if self.recoded[j]:
                vals = self.values(j, recoded=False).take(self.observed(j))
                out[q] = int(vals.nunique(dropna=True) + int(vals.isna().any()))
        return out

    def check_categories(self, j: int, max_categories: int) -> None:
        """Raise early (as encode_column would at the end) when column j has too many categories."""
        obs = self.observed(j)
        vals = self.values(j).take(obs)
        k = vals.nunique(dropna=True) + int(vals.isna().any())
        if k > max_categories:
            # counted part way through the file: a floor, not the column's number of categories
            raise InvalidParameterError(
                f"The identifying variable {self.qi[j]!r} has more than "
                f"max_categories={max_categories} categories ({k} already in the first {self.n} "
                "records); bin it into fewer categories or raise the limit."
            )

    def table(
        self, domains: Mapping, max_categories, owner: str
    ) -> tuple[FrequencyTable, list[np.ndarray]]:
        """The frequency table and, per column, the category code of every raw id (-1: unseen)."""
        rows, weights = self.cells.compact(self.radix())
        mapped = np.empty_like(rows)
        cats, luts = [], []
        for j, q in enumerate(self.qi):
            obs = np.unique(rows[:, j])
            vals = self.values(j).take(obs).reset_index(drop=True)
            mc = max_categories if not isinstance(max_categories, Sequence) else max_categories[j]
            codes, c = encode_column(vals, q, domains.get(q), mc, owner)
            if (self.as_text[j] or self.recoded[j]) and q not in domains:
                codes, c = _numeric_order(codes, c, self.src.dialect.decimal)
            lut = np.full(self.cols[j].size, -1, dtype=np.int64)
            lut[obs] = codes
            mapped[:, j] = lut[rows[:, j]]
            cats.append(c)
            luts.append(lut)
        cells, counts = count_rows(mapped, [len(c) for c in cats], weights)
        return FrequencyTable(
            qi=tuple(self.qi), categories=tuple(cats), codes=cells, counts=counts
        ), luts


def _numeric_order(
    codes: np.ndarray, cats: pd.Index, decimal: str = "."
) -> tuple[np.ndarray, pd.Index]:
    """Text categories in the order of the numbers they write, when they all write numbers
    ('2' < '10', '03' next to '3'), so that a design on text keys has the cells, hence the
    design, of the same data read as numbers; other text keeps its order; missing stays last."""
    present = [i for i, c in enumerate(cats) if isinstance(c, str)]
    texts = [cats[i] if decimal == "." else cats[i].replace(decimal, ".") for i in present]
    nums = pd.to_numeric(pd.Series(texts, dtype=object), errors="coerce")
    if nums.isna().any() or not present:
        return codes, cats
    order = sorted(range(len(present)), key=lambda a: (float(nums.iloc[a]), cats[present[a]]))
    text = set(present)
    perm = [present[a] for a in order] + [i for i in range(len(cats)) if i not in text]
    new_code = np.empty(len(cats), dtype=np.int64)
    new_code[perm] = np.arange(len(cats))
    return new_code[codes], pd.Index([cats[i] for i in perm], dtype=object)


def _count_file(
    path,
    qi,
    domains,
    max_categories,
    batch_size,
    fmt,
    owner: str,
    keys_as_text: bool = False,
    dialect: CsvDialect = DEFAULT_DIALECT,
    recode=None,
    categories_before: dict | None = None,
) -> FrequencyTable:
    batch_size = check_int(batch_size, "batch_size", owner, low=1)
    max_categories = check_int(max_categories, "max_categories", owner, low=1)
    src = _Source(path, fmt, owner, dialect=dialect)
    qi = check_qi_names(src.names, qi, owner)
    domains = check_domains(domains, qi, owner)
    _check_recode(recode, qi, owner)
    counter = _Counter(src, qi, owner, as_text=keys_as_text, recode=recode)
    limits = [max_categories] * len(qi)
    for batch in src.batches(list(qi), batch_size):
        counter.add(batch)
        for j, q in enumerate(qi):
            if q not in domains and counter.cols[j].size > limits[j]:
                counter.check_categories(j, max_categories)
                limits[j] = (
                    2 * counter.cols[j].size
                )  # many spellings of few categories: look again later
    if counter.n == 0:
        raise InvalidParameterError(
            f"The 'path' parameter of {owner} must be a file with at least one record; "
            f"{str(src.path)!r} has none."
        )
    table = counter.table(domains, max_categories, owner)[0]
    if categories_before is not None:
        categories_before.update(counter.categories_before())
    return table


def _check_recode(recode, qi, owner: str) -> None:
    """Refuse a recoding that is not one, or that names a variable outside ``qi``."""
    if recode is None:
        return
    from ..recode import Recoding

    if not isinstance(recode, Recoding):
        raise InvalidParameterError(
            f"The 'recode' parameter of {owner} must be a pramopt.recode.Recoding or None; got "
            f"{type(recode).__name__}."
        )
    other = [q for q in recode.variables if q not in qi]
    if other:
        raise InvalidParameterError(
            f"The 'recode' parameter of {owner} recodes {other!r}, which are not identifying "
            f"variables (qi: {list(qi)!r})."
        )


def count_table(path, qi, *, owner: str = "count_file", **kw) -> FrequencyTable:
    """:func:`count_file` with another function's name in its error messages (for the CLI).

    Besides :func:`count_file`'s keywords it takes ``dialect`` (a checked CSV dialect) and
    ``categories_before``, a dict filled with the number of categories of each recoded
    variable before its recoding.
    """
    return _count_file(
        path,
        qi,
        kw.get("domains"),
        kw.get("max_categories", MAX_CATEGORIES),
        kw.get("batch_size", DEFAULT_BATCH_SIZE),
        kw.get("format"),
        owner,
        kw.get("keys_as_text", False),
        kw.get("dialect", DEFAULT_DIALECT),
        kw.get("recode"),
        kw.get("categories_before"),
    )


def count_file(
    path,
    qi: Sequence[str],
    *,
    domains: Mapping[str, Sequence] | None = None,
    max_categories: int = MAX_CATEGORIES,
    batch_size: int = DEFAULT_BATCH_SIZE,
    format: str | None = None,
    keys_as_text: bool = False,
    sep: str | None = None,
    encoding: str = "utf-8",
    decimal: str = ".",
    na_values: Sequence[str] = (),
    recode=None,
) -> FrequencyTable:
    """Frequency table of a CSV or Parquet file, read in record batches.

    Peak memory depends on ``batch_size`` (for Parquet also on the file's row-group size) and
    on the numbers of distinct values and cells, not on the number of records.

    Parameters
    ----------
    path : str or Path
        A ``.csv`` (``.tsv``, ``.txt``), ``.parquet`` or ``.pq`` file.
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
    keys_as_text : bool, default False
        CSV only: keep each identifying value as the text written in the file (``03`` stays
        ``03``, ``1.0`` stays ``1.0``, ``NA`` stays ``NA``; only an empty field and ``na_values``
        are missing), so that a release writes it back exactly; text that writes numbers is
        ordered by the numbers.  The command line does this.
    sep, encoding, decimal : str
        CSV only: the field separator (by default a comma, or a tab for a ``.tsv``), the text
        encoding and the decimal mark of the file.
    na_values : list of str, optional
        CSV only: texts that mean a missing value, besides the empty field for keys read as text
        (besides pandas' markers otherwise).  Release the file with the same ``na_values``.
    recode : Recoding, optional
        New categories of some identifying variables (:class:`pramopt.recode.Recoding`), applied
        to each distinct value before the records are counted; a recoded variable's categories
        are text (a CSV column is then read as the text written, whatever ``keys_as_text``
        says; a missing value stays missing).

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
        repeated ``qi`` column, bad ``batch_size`` or ``max_categories``, a ``recode`` that names
        a variable outside ``qi``, a file without records, or a variable with too many
        categories.
    """
    return _count_file(
        path,
        qi,
        domains,
        max_categories,
        batch_size,
        format,
        "count_file",
        keys_as_text,
        csv_dialect(sep, encoding, decimal, "count_file", na_values, path=path),
        recode,
    )
