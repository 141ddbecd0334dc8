"""The CSV dialect of a data file: field separator, text encoding and decimal mark.

Real files are not always comma-separated UTF-8 with decimal points (a semicolon and a decimal
comma are common in Europe, Latin-1 in older exports).  Every reader and writer of data files
takes one :class:`CsvDialect`, so that a file is read and released in its own dialect.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from .errors import InvalidParameterError

__all__ = ["CsvDialect", "DEFAULT_DIALECT", "csv_dialect", "has_bom", "line_end"]


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
) -> CsvDialect:
    """A checked dialect (None: the default of that part)."""
    d = DEFAULT_DIALECT
    sep = d.sep if sep is None else sep
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
