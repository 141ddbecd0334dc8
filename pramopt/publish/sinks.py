"""Writers of released records: CSV lines in the source's dialect, Parquet row groups of a fixed
size.

:func:`pramopt.release_file` and the in-memory release of other kinds of design write through
these, so that every released file is written alike: CSV fields re-quoted only where they hold
the separator, a quote or a line break (as Python's ``csv.QUOTE_MINIMAL``), in the source's
separator, encoding, line ends and byte order mark; Parquet in row groups that do not depend on
the batch size.
"""

from __future__ import annotations

import codecs
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._csv import DEFAULT_DIALECT, CsvDialect
from ..frequency.table import is_missing


def _csv_text(x) -> str:
    """A category as ``DataFrame.to_csv`` writes it (before quoting)."""
    if is_missing(x):
        return ""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    return str(x)


def _may_need_quotes(arr: pa.Array, sep: str = ",") -> bool:
    """False when no value can need quotes: a fast byte scan of the array's whole data buffer."""
    bufs = arr.buffers()
    if len(bufs) < 3 or bufs[2] is None:
        return False
    raw = bufs[2].to_pybytes()  # a copy, but searched at memchr speed
    return any(ch in raw for ch in (b'"', sep.encode(), b"\n", b"\r"))


def _quote(arr: pa.Array, quote_empty: bool = False, sep: str = ",") -> pa.Array:
    """Minimal CSV quoting (as Python's csv.QUOTE_MINIMAL): only fields with the separator, " or
    line breaks."""
    if not quote_empty and not _may_need_quotes(arr, sep):
        return arr
    need = pc.match_substring_regex(arr, '["\r\n' + re.escape(sep) + "]")
    if quote_empty:  # a one-column file must not have empty lines
        need = pc.or_(need, pc.equal(pc.utf8_length(arr), 0))
    if not pc.any(need).as_py():
        return arr
    q, empty = pa.scalar('"', arr.type), pa.scalar("", arr.type)
    quoted = pc.binary_join_element_wise(q, pc.replace_substring(arr, '"', '""'), q, empty)
    return pc.if_else(need, quoted, arr)


def _csv_bytes(columns: list[pa.Array], sep: str = ",", newline: str = "\n") -> memoryview:
    """The CSV lines of already quoted text columns, as one (UTF-8) buffer."""
    L = pa.large_string()
    columns = [c if c.type == L else c.cast(L) for c in columns]
    row = (
        columns[0]
        if len(columns) == 1
        else pc.binary_join_element_wise(*columns, pa.scalar(sep, L))
    )
    lines = pc.binary_join_element_wise(row, pa.scalar("", L), pa.scalar(newline, L))
    _, offsets, data = lines.buffers()
    off = np.frombuffer(offsets, dtype=np.int64)
    lo, hi = int(off[lines.offset]), int(off[lines.offset + len(lines)])
    return memoryview(data)[lo:hi]


class _CsvSink:
    """CSV lines in the source's dialect: its separator, its encoding (Arrow's text is UTF-8) and
    its line ends."""

    def __init__(
        self,
        fh,
        names: list[str],
        dialect: CsvDialect = DEFAULT_DIALECT,
        newline: str = "\n",
        bom: bool = False,
    ):
        self.fh, self.sep, self.newline = fh, dialect.sep, newline
        # utf-8-sig would write a mark before every block: the mark is written once, below
        self.encoding = None if dialect.encoding in ("utf-8", "utf-8-sig") else dialect.encoding
        if bom and dialect.encoding in ("utf-8", "utf-8-sig"):
            fh.write(codecs.BOM_UTF8)
        header = _quote(
            pa.array(names, type=pa.large_string()), quote_empty=len(names) == 1, sep=self.sep
        )
        self._put(_csv_bytes([header[i : i + 1] for i in range(len(names))], self.sep, newline))

    def _put(self, data: memoryview) -> None:
        if self.encoding is None:
            self.fh.write(data)
        else:
            self.fh.write(bytes(data).decode("utf-8").encode(self.encoding))

    def write(self, columns: list[pa.Array]) -> None:
        if len(columns[0]):
            self._put(_csv_bytes(columns, self.sep, self.newline))

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
