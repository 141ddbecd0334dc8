"""``pramopt estimate``: unbiased frequency estimates from released data (Cator et al., eq. (4))."""

from __future__ import annotations

import sys

from .._labels import formula_safe_frame
from ..io import load_design, read_table, write_table
from ..io.atomic import PARQUET_SUFFIXES
from ._common import (
    add_csv_options,
    add_force,
    add_quiet,
    check_output,
    csv_list,
    dialect_of,
    formatter,
    say,
    text_keys,
)

HELP = "unbiased frequency estimates from released data"


def add_parser(sub):
    p = sub.add_parser(
        "estimate",
        formatter_class=formatter,
        help=HELP,
        description="Estimate the original cell frequencies from "
        "released data (Cator et al., eq. (4)),\n"
        "optionally jointly with other categorical columns, with a standard error per estimate.\n"
        "The estimates are unbiased and may be negative for small cells; --nonnegative projects\n"
        "them onto counts >= 0 with the same total (no longer unbiased).",
        epilog="example:\n  pramopt estimate --design td4 --data released.csv --by hhcivil --out "
        "estimates.csv",
    )
    p.add_argument(
        "--design", required=True, metavar="DIR", help="design folder (or its design.json)"
    )
    p.add_argument("--data", required=True, metavar="FILE", help="released microdata")
    add_csv_options(p)
    p.add_argument(
        "--by",
        type=csv_list,
        default=None,
        metavar="A,B",
        help="non-identifying columns to cross with",
    )
    p.add_argument(
        "--nonnegative",
        action="store_true",
        help="project the estimates onto counts >= 0 with the same total",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        default=None,
        help=".csv (in the data's --sep, --encoding, --decimal), .parquet or .pq (default: CSV on "
        "stdout); in a CSV a label that starts with =, +, -, @, a tab or a carriage return is "
        "written after a single quote, so that a spreadsheet shows it as text",
    )
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..kinds import kind_of
    from ..publish.frame import estimate, refuse_kind

    res = load_design(args.design)
    kind = kind_of(res)
    if kind is None or kind.estimate is None:
        refuse_kind(res, "estimate", "pramopt estimate")  # before the data are read
    if args.out is not None:
        check_output(args, args.out, source=args.data)
    dialect = dialect_of(args)
    df = read_table(args.data, text=text_keys(res), dialect=dialect)
    est = estimate(df, res, by=args.by, nonnegative=args.nonnegative)
    if args.out is None or not args.out.lower().endswith(PARQUET_SUFFIXES):
        # a CSV is opened in spreadsheets: no label may start a formula (Parquet keeps them)
        est = formula_safe_frame(est)
    # a CSV in the data's dialect, so that it opens with the same settings as the data
    if args.out is None:
        sys.stdout.write(est.to_csv(index=False, sep=dialect.sep, decimal=dialect.decimal))
    else:
        write_table(est, args.out, dialect=dialect, overwrite=args.force)
        say(args, f"wrote {len(est)} estimates of {len(df)} released records to {args.out}.")
    return 0
