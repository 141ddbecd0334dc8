"""``pramopt baseline``: a closed-form family calibrated to meet C1, written like a design."""
from __future__ import annotations

from pathlib import Path

from ..io import read_table
from ..io.atomic import check_out_dir
from ._common import add_data_options, add_quiet, combos_kw, dialect_of, formatter, say, write_outputs

HELP = "closed-form designs calibrated to meet C1"

#: The command's family names -> :func:`pramopt.baseline`'s.
FAMILY = {"rr": "rr", "ifpr": "ifpr", "invariant": "sdcmicro"}


def add_parser(sub):
    p = sub.add_parser(
        "baseline", formatter_class=formatter, help=HELP,
        description="A closed-form PRAM family tuned to just meet C1 at α on the data, with the same\n"
                    "outputs as 'design':\n"
                    "  rr         retention-replacement (one ρ, or one per variable with --per-attribute)\n"
                    "  ifpr       IFPR of Ghatak & Roy on the present cells\n"
                    "  invariant  sdcMicro's PRAM per variable, restricted to the present cells (rows\n"
                    "             renormalised: not sdcMicro's release, and no longer invariant)",
        epilog="example:\n  pramopt baseline rr --data testdata.csv --qi urbrur,roof,walls,water --alpha 0.1 --out rr")
    p.add_argument("family", choices=list(FAMILY), help="the closed-form family")
    add_data_options(p, required=True)
    p.add_argument("--per-attribute", action="store_true", help="rr: one retention probability per variable")
    p.add_argument("--seed", type=int, default=0, help="invariant: seed of the random diagonals (default 0)")
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..baselines import baseline

    check_out_dir(Path(args.out), flag="--out")
    df = read_table(args.data, text=args.qi, dialect=dialect_of(args))  # identifying values as written
    family = FAMILY[args.family]
    options = {"per_attribute": args.per_attribute} if family == "rr" else (
        {"seed": args.seed} if family == "sdcmicro" else {})
    alpha = {} if args.alpha is None else {"alpha": args.alpha}
    result = baseline(df, args.qi, family, **alpha, **combos_kw(args), **options)
    write_outputs(args.out, result, f"pramopt baseline: {result.method}", kind=f"baseline-{result.method}")
    say(args, result.summary(), f"written to {args.out}/")
    return 0 if result.success else 1
