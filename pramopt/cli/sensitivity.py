"""``pramopt sensitivity``: the magnitude-table rules of :mod:`pramopt.magnitude`, cell by cell."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from .._labels import formula_safe_frame
from ..io.atomic import PARQUET_SUFFIXES, atomic_write
from ..magnitude.rules import (
    DEFAULT_CELL,
    DEFAULT_TOL,
    DEFAULT_VALUE,
    _check_params,
    _compute,
    _raise,
)
from ._common import add_force, check_output

HELP = "verdicts of the dominance, p%% and pq and entropy rules and coalition bounds per cell"

_EPILOG = """\
example:
  contributions.csv holds one row per respondent and cell:

      cell,contribution
      A,59
      A,40
      A,1
      B,61
      B,20
      B,19

  pramopt sensitivity contributions.csv --n 1 --k 0.6 --p 0.1 --t 0.5 --c 1 --out verdicts.csv

  writes one row per cell with the verdict of every rule (True = sensitive) and the bound the
  c largest other contributors get on the largest contribution (Example 1 of Domingo-Ferrer
  & Torra: cell A is not dominance-sensitive yet its bound, 60, is closer than B's, 80).
  k, p, q and t are proportions (60% is 0.6).  Parquet is read and written for .parquet/.pq.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``sensitivity`` sub-command to an ``argparse`` sub-parsers object."""
    p = subparsers.add_parser(
        "sensitivity",
        help="verdicts of the dominance, p%%, pq and entropy rules and coalition bounds per cell",
        description=(
            "Assess the cells of a magnitude table: (n, k)-dominance, p%-rule (10), pq-rule,\n"
            "entropy rule (Algorithm 1) and the upper bound a coalition of the c largest other\n"
            "contributors gets on the largest contribution (Domingo-Ferrer & Torra)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="CSV (or .parquet/.pq) file, one row per contribution")
    p.add_argument("--cell", default=DEFAULT_CELL, help="cell id column (default: %(default)s)")
    p.add_argument(
        "--value", default=DEFAULT_VALUE, help="contribution column (default: %(default)s)"
    )
    p.add_argument("--n", type=int, required=True, help="dominance: number of largest contributors")
    p.add_argument(
        "--k", type=float, required=True, help="dominance: fraction of the total in (0, 1]"
    )
    p.add_argument("--p", type=float, required=True, help="p%%- and pq-rule: proportion in (0, 1)")
    p.add_argument(
        "--q",
        type=float,
        default=1.0,
        help="pq-rule: prior precision in (p, 1] (default 1: the p%%-rule)",
    )
    p.add_argument("--t", type=float, required=True, help="entropy rule threshold in [0, 1]")
    p.add_argument("--c", type=int, default=1, help="coalition size (default: %(default)s)")
    p.add_argument(
        "--tol",
        type=float,
        default=DEFAULT_TOL,
        help="tolerance of the boundary comparisons (default: %(default)s)",
    )
    p.add_argument(
        "--out", required=True, help="output file: .csv (.tsv: tab-separated), or .parquet/.pq"
    )
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Read the contributions, compute every verdict, write one row per cell to ``args.out``.

    The output is written through a temporary file in the same folder that is renamed at the
    end, so a partial file is never left behind.

    Raises
    ------
    InvalidParameterError
        For bad parameters, an unreadable or malformed input, or an unwritable output.
    """
    owner = "sensitivity"
    out = check_output(args, args.out, source=args.input, param="out", owner=owner)
    # the parameters are checked before any reading
    params = _check_params(
        owner, n=args.n, k=args.k, p=args.p, q=args.q, t=args.t, c=args.c, tol=args.tol
    )
    if args.cell == args.value:
        _raise("value", owner, "a column other than the cell column", repr(args.value))
    df = _read_input(args.input, args.cell, owner)
    result = _compute(df, cell=args.cell, value=args.value, owner=owner, **params)
    if args.cell in result.columns:
        _raise(
            "cell",
            owner,
            f"a name other than the output columns ({', '.join(result.columns)})",
            repr(args.cell),
        )
    _write(result.reset_index(), out, owner)
    return 0


def _read_input(path: str, cell: str, owner: str) -> pd.DataFrame:
    src = Path(path)
    if not src.is_file():
        _raise("input", owner, "an existing CSV or Parquet file", repr(str(path)))
    try:
        if src.suffix.lower() in PARQUET_SUFFIXES:
            return pd.read_parquet(src)
        # cell ids stay text ("007" is not 7); a .tsv is tab-separated, as every data file
        return pd.read_csv(
            src, dtype={cell: str}, sep="\t" if src.suffix.lower() == ".tsv" else ","
        )
    except (
        ValueError,
        OSError,
        ImportError,
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
    ) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        _raise(
            "input",
            owner,
            "a readable CSV or Parquet file",
            f"{str(path)!r} ({type(exc).__name__}: {first})",
        )
    except Exception as exc:  # pyarrow raises its own error types on corrupt files
        _raise(
            "input",
            owner,
            "a readable CSV or Parquet file",
            f"{str(path)!r} ({type(exc).__name__})",
        )


def _write(df: pd.DataFrame, out: Path, owner: str) -> None:
    try:
        with atomic_write(out) as fh:
            if out.suffix.lower() in PARQUET_SUFFIXES:
                df.to_parquet(fh, index=False)
            else:  # cell ids are the data's text: none may start a spreadsheet formula
                sep = "\t" if out.suffix.lower() == ".tsv" else ","
                fh.write(formula_safe_frame(df).to_csv(index=False, sep=sep).encode())
    except (OSError, ValueError, ImportError) as exc:
        _raise("out", owner, "a writable file", f"{str(out)!r} ({type(exc).__name__})")
