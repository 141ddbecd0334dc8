"""The CSV dialect of a data file: field separator, text encoding and decimal mark.

Real files are not always comma-separated UTF-8 with decimal points (a semicolon and a decimal
comma are common in Europe, Latin-1 in older exports).  Every reader and writer of data files
takes one :class:`CsvDialect`, so that a file is read and released in its own dialect.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from .errors import InvalidParameterError

__all__ = [
    "CSV_SUFFIXES",
    "CsvDialect",
    "missing_markers",
    "DEFAULT_DIALECT",
    "bad_line",
    "csv_dialect",
    "has_bom",
    "missing_markers",
    "line_end",
    "parse_error",
]

#: Extensions of text data files read and written as CSV in their dialect (``.tsv``: a tab by
#: default; ``.txt``: whatever ``sep`` says).
CSV_SUFFIXES = (".csv", ".tsv", ".txt")


@dataclass(frozen=True)
class CsvDialect:
    """``sep``: one character between fields; ``encoding``: a Python codec name; ``decimal``: the
    decimal mark of numbers ('.' or ','); ``na_values``: texts of an identifying value read as
    text that mean "missing" besides the empty field (``NA`` is Namibia unless listed)."""

    sep: str = ","
    encoding: str = "utf-8"
    decimal: str = "."
    na_values: tuple[str, ...] = ()

    @property
    def is_default(self) -> bool:
        return self == DEFAULT_DIALECT


DEFAULT_DIALECT = CsvDialect()


def csv_dialect(
    sep: str | None = None,
    encoding: str | None = None,
    decimal: str | None = None,
    owner: str = "read",
    na_values=None,
    path=None,
) -> CsvDialect:
    """A checked dialect (None: the default of that part; ``path``: the file it reads, whose
    ``.tsv`` extension makes a tab the default separator)."""
    d = DEFAULT_DIALECT
    if sep is None:
        sep = "\t" if path is not None and str(path).lower().endswith(".tsv") else d.sep
    encoding = d.encoding if encoding is None else encoding
    decimal = d.decimal if decimal is None else decimal
    if sep == "\\t":
        sep = "\t"
    if not isinstance(sep, str) or len(sep) != 1 or sep in '"\r\n':
        raise InvalidParameterError(
            f"The 'sep' parameter of {owner} must be one character other than a quote or a line "
            f"break; got {sep!r}."
        )
    if decimal not in (".", ","):
        raise InvalidParameterError(
            f"The 'decimal' parameter of {owner} must be '.' or ','; got {decimal!r}."
        )
    if decimal == sep:
        raise InvalidParameterError(
            f"The 'decimal' parameter of {owner} must differ from the separator {sep!r}; got "
            f"{decimal!r}."
        )
    try:
        encoding = codecs.lookup(encoding).name
    except (LookupError, TypeError):
        raise InvalidParameterError(
            f"The 'encoding' parameter of {owner} must name a text encoding (utf-8, latin-1, "
            f"cp1252, ...); got {encoding!r}."
        ) from None
    if na_values is None:
        na_values = ()
    elif isinstance(na_values, str):
        na_values = (na_values,)
    try:
        na = tuple(na_values)
    except TypeError:
        na = (na_values,)
    if not all(isinstance(v, str) for v in na):
        raise InvalidParameterError(
            f"The 'na_values' parameter of {owner} must be a list of texts that mean a missing "
            f"value; got {na_values!r}."
        )
    return CsvDialect(sep=sep, encoding=encoding, decimal=decimal, na_values=tuple(sorted(set(na))))


def missing_markers(values) -> tuple[str, ...]:
    """pandas' missing-value markers ('NA', 'null', ...) that stand for a missing value among
    ``values``: all but those written as values, when ``values`` hold a missing one; none
    otherwise.  A column with a missing value and no 'NA' was read by pandas' rules (or written
    by R, which writes NA), so its 'NA' means missing; a column that has 'NA' as a value keeps
    it."""
    import pandas as pd
    from pandas._libs.parsers import STR_NA_VALUES  # pandas' own list, as pd.read_csv uses it

    vals = list(values)
    if not any(pd.isna(v) for v in vals):
        return ()
    have = {v for v in vals if isinstance(v, str)}
    return tuple(sorted(m for m in STR_NA_VALUES if m not in have))


def has_bom(path) -> bool:
    """Whether a file starts with the UTF-8 byte order mark (a release keeps it)."""
    with open(path, "rb") as fh:
        return fh.read(3) == codecs.BOM_UTF8


def line_end(path) -> str:
    """The line end of a CSV file, ``"\\r\\n"`` or ``"\\n"``, as its first line ends (a release is
    written with the source's line ends, so that its unchanged lines compare equal to the
    source's)."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
    i = head.find(b"\n")
    return "\r\n" if i > 0 and head[i - 1 : i] == b"\r" else "\n"


#: Characters of a file read at most to find the line of a malformed row (about a second).
BAD_LINE_SCAN = 1 << 26


def bad_line(path, dialect: CsvDialect, limit: int = BAD_LINE_SCAN) -> int | None:
    """The line number of the first row of a CSV file whose number of fields is not the header's,
    found by reading the file again with the csv module (None: none in its first ``limit``
    characters, or the file cannot be read so).

    pyarrow's streaming reader names a malformed row by its text only; the line lets a user open
    the file there.  A row that spans lines (a quoted line break) is named by its last line.
    """
    import csv

    def lines(fh):
        read = 0
        for line in fh:
            read += len(line)
            if read > limit:
                return
            yield line

    try:
        with open(path, newline="", encoding=dialect.encoding) as fh:
            rows = csv.reader(lines(fh), delimiter=dialect.sep)
            width = len(next(rows, []))
            for row in rows:
                if row and len(row) != width:  # an empty line is skipped, as pyarrow skips it
                    return rows.line_num
    except (OSError, UnicodeError, csv.Error):
        return None
    return None


def parse_error(path, dialect: CsvDialect, error: Exception) -> str:
    """The message of a CSV file the reader cannot parse, naming the line of a row with the wrong
    number of fields when the reader's own message does not."""
    said = f"Cannot read {str(path)!r}: {error}"
    if "Expected" not in str(error) or "Row #" in str(error):
        return said
    line = bad_line(path, dialect)
    return said if line is None else f"Cannot read {str(path)!r} (line {line}): {error}"
