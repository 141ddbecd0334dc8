"""Release CSV or Parquet files larger than memory, in record batches.

:func:`release_file` applies a design to a file read in record batches, so that its memory
depends on the batch size and on the number of distinct values and cells, never on the number
of records.

Split-invariant release
    Record ``i`` of the file takes its uniform from block ``i // BLOCK`` of a random stream
    spawned from the seed (:class:`pramopt.publish.sampling.UniformStream`), so a given seed
    gives the same released file whatever the batch size, and the same records as
    :func:`pramopt.release` on the whole frame and the Dask release.

What is written
    A CSV is written as CSV and a Parquet file as Parquet.  CSV: in the source's separator,
    encoding and line ends (those of its first line); the non-identifying fields are copied as
    they were read (their text, re-quoted only where a field holds the separator, a quote or a
    line break); each identifying field is the released category written as
    ``pandas.DataFrame.to_csv`` writes it.  A household design is released in memory, its
    fields written the same way.  Parquet: the non-identifying columns are copied
    as Arrow arrays, the identifying ones keep their Arrow type, the schema (with pandas'
    metadata) and the compression codec are the source's, and the row groups have a fixed
    size (``ROW_GROUP_SIZE`` records), so that the output does not depend on the batch size.
    ``pd.read_csv(dst)`` (``pd.read_parquet``) then equals ``release(pd.read_csv(src), result,
    seed)``.  A design made on recoded data (:mod:`.recoded`) has the source recoded before it
    is matched to the design, and its recoded variables written as their new categories (text,
    in Parquet too); a value the recoding does not list is written as read.  The output is
    written to a temporary file next to ``dst`` and renamed only once every record has been
    released and the counts of the source have been checked against the design; on any
    failure no ``dst`` is left.

Memory
    A release holds one batch, one output row group (Parquet) and, for a CSV, the blocks
    pyarrow's reader keeps in flight (a few dozen blocks of about ``batch_size`` records).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .._csv import CsvDialect, csv_dialect, has_bom, line_end, missing_markers
from .._validation import InvalidParameterError, check_int
from ..errors import DesignMismatchError
from ..frequency.file_counting import (
    DEFAULT_BATCH_SIZE,
    PARQUET_SUFFIXES,
    _Counter,
    _parse_csv_texts,
    _Source,
)
from ..frequency.table import (
    CellLookup,
    FrequencyTable,
    category_codes,
    check_qi_names,
    is_missing,
    text_categories,
)
from ..io.atomic import atomic_write, check_out_file, refuse_overwrite
from ..kinds import kind_of
from .frame import check_same_table, distinct_examples, releasable_table
from .policy import enforce_policy
from .recoded import recoded_frame, recoded_texts, recoding_of, text_schema
from .sampling import AnySampler, UniformStream, sampler_for, seed_entropy
from .sinks import _csv_text, _CsvSink, _ParquetSink, _quote

__all__ = ["release_file", "FileRelease", "ROW_GROUP_SIZE", "release_in_memory"]

#: Records per row group of a released Parquet file (fixed, so that the file does not depend
#: on the batch size; the memory of a Parquet release grows with it).
ROW_GROUP_SIZE = 1 << 17


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


def _arrow_labels(field: pa.Field, cats: pd.Index) -> pa.Array:
    """The design's categories as an Arrow array of the column's (value) type; NaN -> null."""
    typ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
    vals = [None if is_missing(c) else c for c in cats]
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
    """Per-column mapping from raw values to the design's categories, and released labels.

    ``schema`` is the released Parquet file's (a recoded column is text there); ``recoded`` the
    texts of each column that its recoding changes, which a CSV release writes as their new
    category rather than as read.
    """

    def __init__(
        self,
        src: _Source,
        table: FrequencyTable,
        counter: _Counter,
        schema: pa.Schema | None = None,
        recoded: list | None = None,
    ):
        self.src, self.table, self.counter = src, table, counter
        self.luts = [np.empty(0, dtype=np.int64) for _ in table.qi]
        self.as_str = list(counter.as_text)
        self.schema = src.schema if schema is None else schema
        self.recoded = [
            pa.array(t, type=pa.string()) if t else None for t in (recoded or [[]] * len(table.qi))
        ]
        if src.format == "csv":
            self.labels = [
                _quote(
                    pa.array([_csv_text(c) for c in cats], type=pa.large_string()),
                    quote_empty=len(src.names) == 1,
                    sep=src.dialect.sep,
                )
                for cats in table.categories
            ]
        else:
            self.labels = [
                _arrow_labels(self.schema.field(q), cats)
                for q, cats in zip(table.qi, table.categories)
            ]

    def _interpret(self, j: int, start: int) -> np.ndarray:
        """Design codes of the raw values with ids >= start of column j (-1: not a category)."""
        q, cats = self.table.qi[j], self.table.categories[j]
        raw = self.counter.cols[j].values(start)
        # as the counter reads them (recoded, for a recoded column), so that they match its table
        codes = category_codes(self.counter.values(j, start), cats)
        if self.src.format == "csv" and not self.as_str[j] and (codes < 0).any():
            # typed one value at a time where typing them together failed (mixed-type categories)
            texts = raw.to_pylist()
            for i in np.flatnonzero(codes < 0)[:100]:
                codes[i] = category_codes(
                    _parse_csv_texts(
                        [texts[i]],
                        decimal=self.src.dialect.decimal,
                        na_values=self.counter.na[j] or (),
                    ),
                    cats,
                )[0]
        if self.src.format == "csv" and not self.as_str[j]:
            # a design on typed values (1, 1.0) writes its categories back as typed: refuse a file
            # that writes them otherwise ('01', '1'), rather than rewrite values the user did not
            # ask to change
            texts = raw.to_pylist()
            for i in np.flatnonzero(codes >= 0):
                want = _csv_text(cats[codes[i]])
                if texts[i] != want and not (texts[i] is None or is_missing(cats[codes[i]])):
                    raise DesignMismatchError(
                        f"The data do not match the design: {q!r} is written {texts[i]!r} in "
                        f"{str(self.src.path)!r} where the design's category is {want!r}, and a "
                        f"release would write it back as {want!r}. Make the design from this file "
                        "(the command line reads identifying values as the text written; in "
                        "Python, count_file(..., keys_as_text=True))."
                    )
        return codes

    def codes(self, ids: list[np.ndarray]) -> np.ndarray:
        out = np.empty((len(ids[0]), len(ids)), dtype=np.int64)
        for j, col in enumerate(self.counter.cols):
            have = len(self.luts[j])
            if col.size > have:
                self.luts[j] = np.concatenate([self.luts[j], self._interpret(j, have)])
            out[:, j] = self.luts[j][ids[j]]
        return out


def _describe_bad(batch: pa.RecordBatch, qi, rows: np.ndarray) -> str:
    take = pa.array(rows, type=pa.int64())
    return distinct_examples(batch.select(list(qi)).take(take).to_pandas())


def release_file(
    src,
    dst,
    result,
    *,
    seed=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    format: str | None = None,
    allow_unverified: bool = False,
    sep: str | None = None,
    encoding: str = "utf-8",
    decimal: str = ".",
    na_values: Sequence[str] = (),
    policy=None,
    overwrite: bool = False,
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
        The microdata the design was made for: ``.csv`` (``.tsv``, ``.txt``), ``.parquet`` or
        ``.pq`` (before its recoding, if the design has one: it is applied here).
    dst : str or Path
        The released file, in the same format as ``src`` (``.csv``, ``.tsv``, ``.txt``;
        ``.parquet`` or ``.pq``).
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
    sep, encoding, decimal : str
        CSV only: the source's field separator (by default a comma, or a tab for a ``.tsv``),
        text encoding and decimal mark; the released file is written in the same (and with the
        source's byte order mark, if it has one).
    na_values : list of str, optional
        CSV only: texts that mean a missing value, as given to :func:`pramopt.count_file` for
        the design.  Every value a record keeps is written back as the text it was read as.
    policy : ReleasePolicy, optional
        The office's α and Π (:func:`pramopt.release_policy`): a design weaker than it is
        refused before any record is read.
    overwrite : bool
        Replace a file already at ``dst``; without it one is refused before any record is read,
        so that a release that may have been published is never replaced unasked.

    Returns
    -------
    FileRelease
        The path written, the number of records and of records changed.

    Raises
    ------
    InvalidParameterError
        For bad parameters, a missing or unreadable ``src``, a ``dst`` in another format or
        folder that does not exist, ``dst`` equal to ``src``, or a ``dst`` that exists without
        ``overwrite``.
    DesignMismatchError
        For a design that did not pass verification, or data it was not made for (a value or
        cell the design does not have, other counts).  Nothing is written then.
    """
    owner = "release_file"
    if not overwrite:  # before any other kind's path: every kind's release honours it
        _refuse_existing(src, dst, owner)
    kind = kind_of(result)
    if kind is not None:
        # e.g. households: household-level values once per household, in memory, verified only
        _refuse_streaming(kind, owner, batch_size, format, allow_unverified)
        enforce_policy(result, policy, owner)
        dialect = csv_dialect(sep, encoding, decimal, owner, na_values, path=src)
        return kind.release_file(src, dst, result, seed, dialect, owner)
    table = releasable_table(result, owner, allow_unverified, policy)
    batch_size = check_int(batch_size, "batch_size", owner, low=1)
    entropy = seed_entropy(seed, owner)
    source = _Source(
        src,
        format,
        owner,
        param="src",
        dialect=csv_dialect(sep, encoding, decimal, owner, na_values, path=src),
    )
    out = _check_dst(dst, source, owner)
    qi = check_qi_names(source.names, table.qi, owner)
    counter, releaser = _reading(source, table, result, qi, owner)
    n, changed, batches = _write(
        out, source, table, sampler_for(result), counter, releaser, entropy, batch_size
    )
    return FileRelease(path=out, n=n, changed=changed, batches=batches, format=source.format)


def _write(
    out: Path,
    source: _Source,
    table: FrequencyTable,
    sampler: AnySampler,
    counter: _Counter,
    releaser: _Releaser,
    entropy: int,
    batch_size: int,
) -> tuple[int, int, int]:
    """Release the source batch by batch into ``out``, kept only once the source's counts are
    checked against the design: the records, the records changed and the batches."""
    qi = counter.qi
    lookup = CellLookup(table)
    uniforms = UniformStream(entropy)
    positions = [source.names.index(q) for q in qi]
    offset = changed = batches = 0
    with atomic_write(out) as fh:
        sink = (
            _CsvSink(fh, source.names, source.dialect, line_end(source.path), has_bom(source.path))
            if source.format == "csv"
            else _ParquetSink(fh, releaser.schema, source.compression, ROW_GROUP_SIZE)
        )
        for batch in source.batches(None, batch_size):
            m = batch.num_rows
            cells = _batch_cells(batch, releaser.codes(counter.add(batch)), lookup, qi)
            new = sampler.draw(cells, uniforms(offset, offset + m))
            changed += int((new != cells).sum())
            sink.write(_released(batch, cells, new, source, table, releaser, positions))
            offset += m
            batches += 1
        _check_counts(counter, table, releaser, source, qi)
        sink.close()
    return offset, changed, batches


def _reading(
    source: _Source, table: FrequencyTable, result, qi, owner: str
) -> tuple[_Counter, _Releaser]:
    """The counter and the releaser of a source: the identifying values of a design made on
    text keys read as the text written; a design made on recoded data matched, and released,
    recoded (a recoded variable is text in a released Parquet file, whatever the source's type).
    """
    recoding = recoding_of(result)
    as_text = [text_categories(c) for c in table.categories]
    na = [_missing_texts(c, a, source.dialect) for c, a in zip(table.categories, as_text)]
    # a missing value stays missing, as it did for the design, and is written as read
    changes = [[t for t in recoded_texts(recoding, q) if t not in m] for q, m in zip(qi, na)]
    counter = _Counter(source, qi, owner, as_text=as_text, na_values=na, recode=recoding)
    schema = text_schema(source.schema, recoding.variables if recoding else ())
    return counter, _Releaser(source, table, counter, schema, changes)


def _missing_texts(cats: pd.Index, as_text: bool, dialect: CsvDialect) -> tuple[str, ...]:
    """The texts read as missing in a column of text categories: the dialect's and, when the
    design has a missing category and no category of that text, pandas' markers (a design
    made from ``pd.read_csv`` or ``count_file`` without ``keys_as_text``, where 'NA' is missing;
    a design on text keys that keeps 'NA' as a value has it as a category)."""
    if not as_text:
        return dialect.na_values
    return tuple(dialect.na_values) + missing_markers(cats)


def _refuse_streaming(kind, owner: str, batch_size, format, allow_unverified) -> None:
    """Refuse the streaming parameters for a registered kind's design (released in memory)."""
    for name, value, default in (
        ("batch_size", batch_size, DEFAULT_BATCH_SIZE),
        ("format", format, None),
        ("allow_unverified", allow_unverified, False),
    ):
        if value != default:
            raise InvalidParameterError(
                f"The {name!r} parameter of {owner} is not supported with a {kind.name} design "
                f"(released in memory, verified designs only); got {value!r}."
            )


def records_changed(df: pd.DataFrame, out: pd.DataFrame, qi) -> int:
    """Records whose identifying values differ between ``df`` and its release ``out`` (a missing
    value that stays missing is unchanged, whatever missing marker each frame holds)."""
    a, b = df[list(qi)], out[list(qi)]
    same = (a == b).fillna(False) | (a.isna() & b.isna())
    return int((~same.to_numpy(dtype=bool)).any(axis=1).sum())


def release_in_memory(
    src, dst, result, seed, dialect: CsvDialect, owner: str, *, check, release
) -> FileRelease:
    """Release a file in memory with ``release(df, result, seed)``, after ``check(result)``: for a
    kind of design whose release needs every record at once (a household needs all its members).

    A CSV is read twice: typed as :func:`pramopt.io.read_table` reads it (identifying values as
    the design's categories, recoded with the design's recoding), and every field as the text
    written, so that every non-identifying field is written back byte for byte, in the source's
    dialect and line ends, as :func:`release_file` writes a person-level release.
    """
    from ..io.tables import read_table, write_table

    check(result)  # before reading any data
    source = _Source(src, None, owner, param="src", dialect=dialect)
    out_path = _check_dst(dst, source, owner)
    qi = list(result.table.qi)
    text = [q for q, c in zip(qi, result.table.categories) if text_categories(c)]
    # a design made on recoded data: matched, and released, recoded
    df = recoded_frame(read_table(source.path, text=text, dialect=dialect), result)
    recoding = recoding_of(result)
    out = release(df, result, seed)
    changed = records_changed(df, out, qi)
    if source.format == "parquet":
        write_table(out, out_path, overwrite=True)  # release_file checked dst
        return FileRelease(out_path, len(out), changed, 1, "parquet")
    raw = pd.read_csv(
        source.path,
        dtype=str,
        keep_default_na=False,
        na_filter=False,
        sep=dialect.sep,
        encoding=dialect.encoding,
    )
    if (
        len(raw) != len(out) or list(raw.columns) != source.names
    ):  # pragma: no cover - one parser, two reads
        raise InvalidParameterError(
            f"Cannot read {str(source.path)!r} twice alike; release it in memory instead."
        )
    columns = []
    for name in source.names:
        if name in qi:
            if name not in text:  # typed categories: refuse text they would not write back as read
                want = np.array([_csv_text(x) for x in df[name]], dtype=object)
                bad = np.flatnonzero(
                    (want != raw[name].to_numpy(dtype=object)) & df[name].notna().to_numpy()
                )
                if bad.size:
                    i = int(bad[0])
                    raise DesignMismatchError(
                        f"The data do not match the design: {name!r} is written "
                        f"{raw[name].iloc[i]!r} in {str(source.path)!r} where the design's "
                        f"category is {want[i]!r}, and a release would write it back as "
                        f"{want[i]!r}. Make the design from this file (the command line reads "
                        "identifying values as the text written; in Python, count_file(..., "
                        "keys_as_text=True))."
                    )
            a, b = df[name], out[name]
            # a text the recoding changes is written as its new category (a missing marker it
            # lists stays missing, as for the design, and is written as read)
            recoded = raw[name].isin(recoded_texts(recoding, name)) & a.notna()
            kept = (((a == b).fillna(False) | (a.isna() & b.isna())) & ~recoded).to_numpy(
                dtype=bool
            )
            col = pa.array(
                np.where(kept, raw[name].to_numpy(dtype=object), [_csv_text(x) for x in b]),
                type=pa.large_string(),
            )
        else:
            col = pa.array(raw[name].tolist(), type=pa.large_string())
        columns.append(_quote(col, quote_empty=len(source.names) == 1, sep=dialect.sep))
    with atomic_write(out_path) as fh:
        sink = _CsvSink(fh, source.names, dialect, line_end(source.path), has_bom(source.path))
        sink.write(columns)
        sink.close()
    return FileRelease(out_path, len(out), changed, 1, "csv")


def _batch_cells(batch: pa.RecordBatch, codes: np.ndarray, lookup: CellLookup, qi) -> np.ndarray:
    """The design's cell of every record of a batch; refuse values or cells the design lacks."""
    unknown = (codes < 0).any(axis=1)
    if unknown.any():
        raise DesignMismatchError(
            f"The data do not match the design: {int(unknown.sum())} records of this batch have "
            "values the design does not know (for example "
            f"{_describe_bad(batch, qi, np.flatnonzero(unknown))}). If some of these texts "
            "mean a missing value, give the same na_values (--na-values) as the design."
        )
    cells = lookup(codes)
    if (cells < 0).any():
        raise DesignMismatchError(
            f"{int((cells < 0).sum())} records of the data fall in cells the design does not have "
            f"(for example {_describe_bad(batch, qi, np.flatnonzero(cells < 0))}); the design was "
            "made for other data."
        )
    return cells


def _released(
    batch: pa.RecordBatch,
    cells: np.ndarray,
    new: np.ndarray,
    source: _Source,
    table: FrequencyTable,
    releaser: _Releaser,
    positions: list[int],
):
    """The batch with its identifying columns replaced by the released cells' labels (a CSV
    value that keeps its category keeps the text it was written as: '01', 'N/A'; unless its
    recoding changes that text: then its new category)."""
    qi, schema = table.qi, releaser.schema
    columns = list(batch.columns)
    for j, p in enumerate(positions):
        rel = releaser.labels[j].take(pa.array(table.codes[new, j]))
        if source.format == "parquet" and pa.types.is_dictionary(schema.field(qi[j]).type):
            rel = _as_dictionary(rel, batch.column(p), schema.field(qi[j]).type)
        if source.format == "csv":
            kept = pa.array(table.codes[new, j] == table.codes[cells, j])
            if releaser.recoded[j] is not None:
                recoded = pc.is_in(batch.column(p), value_set=releaser.recoded[j])
                kept = pc.and_(kept, pc.invert(recoded))
            written = _quote(
                batch.column(p).cast(pa.large_string()),
                quote_empty=len(columns) == 1,
                sep=source.dialect.sep,
            )
            rel = pc.if_else(kept, written, rel)
        columns[p] = rel
    if source.format == "parquet":
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    for p in range(len(columns)):
        if p not in positions:
            columns[p] = _quote(
                columns[p].cast(pa.large_string()),
                quote_empty=len(columns) == 1,
                sep=source.dialect.sep,
            )
    return columns


def _refuse_existing(src, dst, owner: str) -> None:
    """Refuse a ``dst`` that exists (before any record is read); a folder, or the source itself,
    is refused by :func:`_check_dst` with its own reason."""
    p = Path(dst)
    try:
        if p.is_dir() or (p.exists() and os.path.samefile(p, src)):
            return
    except OSError:  # no src to compare with: refused below for that
        return
    refuse_overwrite(
        p,
        name=f"{str(p)!r} (the 'dst' parameter of {owner})",
        remedy=f"Give overwrite=True to {owner} to replace it, or another dst",
    )


def _check_dst(dst, source: _Source, owner: str) -> Path:
    # release_file refused an existing dst unless asked (a same-named src is refused below)
    out = check_out_file(dst, force=True)
    fmt = "parquet" if out.suffix.lower() in PARQUET_SUFFIXES else "csv"
    if fmt != source.format:
        raise InvalidParameterError(
            f"The 'dst' parameter of {owner} must be a {source.format} file like its source; got "
            f"{str(out)!r} (to change format, read the released file with pandas and write it "
            "again)."
        )
    if out.exists() and os.path.samefile(out, source.path):
        raise InvalidParameterError(
            f"The 'dst' parameter of {owner} must not be the source file; got {str(out)!r}."
        )
    return out


def _check_counts(
    counter: _Counter, table: FrequencyTable, releaser: _Releaser, source: _Source, qi
) -> None:
    """The source's table, coded with the design's categories, must be the design's table."""
    domains = {q: list(c) for q, c in zip(table.qi, table.categories)}
    limits = [max(len(c), 1) for c in table.categories]
    try:
        got, luts = counter.table(domains, limits, "release")
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
    check_same_table(got, table, repr(str(source.path)))
    for j, q in enumerate(qi):
        seen = luts[j] >= 0
        if not np.array_equal(luts[j][seen], releaser.luts[j][: len(luts[j])][seen]):
            raise DesignMismatchError(
                f"The values of {q!r} were typed differently batch by batch than over the whole "
                "file; release this file in memory (pramopt.release) instead."
            )
