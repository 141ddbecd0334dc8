"""Microdata files in and out: CSV and Parquet, chosen by the file's extension."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .._csv import CSV_SUFFIXES, DEFAULT_DIALECT, CsvDialect, csv_dialect
from ..errors import InvalidParameterError
from .atomic import PARQUET_SUFFIXES, atomic_write, check_out_file

__all__ = ["read_table", "write_table"]


def read_table(
    path,
    param: str | None = None,
    owner: str | None = None,
    text=(),
    dialect: CsvDialect | None = None,
) -> pd.DataFrame:
    """Read microdata from ``.csv`` (``.tsv``, ``.txt``) or ``.parquet``/``.pq`` (by extension).

    ``text`` names CSV columns read as the text written (``03`` stays ``03``, ``NA`` stays ``NA``;
    only an empty field and the dialect's ``na_values`` are missing), as the command line reads
    identifying variables; ``dialect`` gives a CSV's separator, encoding, decimal mark and
    missing-value markers (by default a comma, or a tab for a ``.tsv``).

    Raises
    ------
    InvalidParameterError
        For a missing file, an unknown extension or a file pandas cannot parse.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in CSV_SUFFIXES + PARQUET_SUFFIXES:
        raise InvalidParameterError(
            f"Cannot read {str(p)!r}: the file name must end in .csv, .tsv, .txt, .parquet or .pq."
        )
    if dialect is None:
        dialect = csv_dialect(path=p)
    if not p.is_file():
        raise InvalidParameterError(f"Cannot read {str(p)!r}: no such file.")
    try:
        if suffix in PARQUET_SUFFIXES:
            return pd.read_parquet(p)
        df = pd.read_csv(
            p,
            dtype={str(c): str for c in text} or None,
            sep=dialect.sep,
            encoding=dialect.encoding,
            decimal=dialect.decimal,
        )
        cols = [str(c) for c in text if str(c) in df.columns]
        if cols:
            # text columns again, where only an empty field (and the dialect's markers) is missing
            as_text = pd.read_csv(
                p,
                usecols=cols,
                dtype=str,
                keep_default_na=False,
                na_values=["", *dialect.na_values],
                sep=dialect.sep,
                encoding=dialect.encoding,
            )
            for c in as_text.columns:
                df[c] = as_text[c]
        return df
    except (OSError, ValueError, ImportError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InvalidParameterError(f"Cannot read {str(p)!r}: {first}") from None


def write_table(
    df: pd.DataFrame, path, dialect: CsvDialect = DEFAULT_DIALECT, *, overwrite: bool = False
) -> Path:
    """Write ``df`` as CSV (in ``dialect``: separator, encoding, decimal mark) or Parquet (by
    extension), atomically; a file already at ``path`` is replaced only with ``overwrite=True``
    (else :class:`~pramopt.errors.InvalidParameterError`)."""
    p = check_out_file(path, force=overwrite, writer="write_table")
    with atomic_write(p) as fh:
        if p.suffix.lower() in PARQUET_SUFFIXES:
            df.to_parquet(fh, index=False)
        else:
            fh.write(
                df.to_csv(index=False, sep=dialect.sep, decimal=dialect.decimal).encode(
                    dialect.encoding
                )
            )
    return p
