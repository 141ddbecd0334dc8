"""``pramopt advise``: recodings that lower the price of C1, ranked by the fewest changes they
allow."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidParameterError
from ..io import read_table
from ._common import (
    add_combination_flags,
    add_csv_options,
    add_force,
    add_quiet,
    check_output,
    csv_list,
    dialect_of,
    formatter,
    say,
)

HELP = "recodings that lower the share of records a design must change"


def add_parser(sub):
    p = sub.add_parser(
        "advise",
        formatter_class=formatter,
        help=HELP,
        description="When most records must change to meet C1, recode first. Tries banding\n"
        "ordered variables, merging rare categories, a hierarchy you give and leaving a variable\n"
        "out of the identifying ones; ranks them by the proven minimum share of changed records\n"
        "of any design meeting C1 on the recoded data (seconds each), steps greedily until that\n"
        "share is below --target, and makes the designs of the best few.",
        epilog="example:\n  pramopt advise --data register.csv --qi region,sex,age,marstat "
        "--ordered age --out adv\n  pramopt design --data register.csv --qi region,sex,age,marstat "
        "--recode adv/recode-1.json --out d\n\n"
        "The folder gets advice.csv, advice.md, advice.png and recode-<rank>.json for the\n"
        "options that recode.",
    )
    p.add_argument(
        "--data",
        required=True,
        metavar="FILE",
        help="microdata: .csv (.tsv, .txt), .parquet or .pq",
    )
    add_csv_options(p)
    p.add_argument(
        "--qi", type=csv_list, required=True, metavar="A,B,C", help="identifying variables"
    )
    p.add_argument("--alpha", type=float, default=0.1, metavar="A", help="risk bound (default 0.1)")
    p.add_argument(
        "--ordered",
        type=csv_list,
        default=None,
        metavar="A,B",
        help="variables whose adjacent categories may be banded (default: those whose "
        "categories all write numbers)",
    )
    p.add_argument(
        "--hierarchy",
        action="append",
        default=None,
        metavar="VAR=FILE",
        help="a CSV of two columns, value and group (region -> province); repeat per variable",
    )
    p.add_argument(
        "--target",
        type=float,
        default=0.25,
        metavar="SHARE",
        help="step on until the proven minimum share of changed records is below this "
        "(default 0.25)",
    )
    p.add_argument("--steps", type=int, default=3, help="most moves combined (default 3)")
    p.add_argument(
        "--designs", type=int, default=3, help="designs made of the best options (default 3)"
    )
    p.add_argument(
        "--structure",
        default="replacement",
        choices=["replacement", "auto", "blocks", "general"],
        help="structure of the designs made (default replacement: seconds; auto: what "
        "pramopt design makes)",
    )
    add_combination_flags(
        p, "every subset of SIZE identifying variables is a combination (default 3)"
    )
    p.add_argument("--out", default=None, metavar="DIR", help="folder (default advice-<data>)")
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def _hierarchies(values, qi) -> dict:
    """``{variable: {value: group}}`` from VAR=FILE flags (the CSV's first two columns)."""
    import pandas as pd

    out: dict = {}
    for v in values or ():
        name, sep, path = v.partition("=")
        if not sep or name not in qi:
            raise InvalidParameterError(
                f"--hierarchy must be VAR=FILE with VAR among --qi {qi!r}; got {v!r}."
            )
        try:
            t = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as e:
            raise InvalidParameterError(f"Cannot read --hierarchy {path!r}: {e}") from None
        if t.shape[1] < 2:
            raise InvalidParameterError(
                f"--hierarchy {path!r} needs two columns, a value and its group; got "
                f"{list(t.columns)!r}."
            )
        out[name] = dict(zip(t.iloc[:, 0], t.iloc[:, 1]))
    return out


def run(args) -> int:
    from ..advise import ADVICE_FILES, advise, check_options, write_advice

    out = Path(args.out if args.out is not None else f"advice-{Path(args.data).stem}")
    check_output(args, out, folder=ADVICE_FILES[0], default=args.out is None)
    hier = _hierarchies(args.hierarchy, args.qi)
    check_options(
        args.qi, args.alpha, args.target, args.steps, args.designs, args.ordered, hier,
        args.combination_size, args.combinations,
    )  # fmt: skip
    df = read_table(args.data, text=args.qi, dialect=dialect_of(args))
    a = advise(
        df,
        args.qi,
        args.alpha,
        ordered=args.ordered,
        hierarchies=hier or None,
        target=args.target,
        steps=args.steps,
        designs=args.designs,
        combination_size=args.combination_size,
        combinations=args.combinations,
        structure=args.structure,
        progress=None if args.quiet else (lambda s: say(args, "  " + s)),
    )
    table = write_advice(a, out, overwrite=args.force)
    best = table.iloc[0] if len(table) else None
    how = ""
    if best is not None:
        how = (
            f"; rank 1: pramopt design --recode {out / best['recode_file']}"
            if best["recode_file"]
            else f"; rank 1: pramopt design --qi {best['qi']}"
        )
        if best["qi"] != ",".join(args.qi) and best["recode_file"]:
            how += f" --qi {best['qi']}"
    say(args, a.summary(), f"wrote {out} in {a.seconds:.0f} s{how}")
    return 0
