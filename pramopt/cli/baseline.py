"""``pramopt baseline``: a closed-form family calibrated to meet C1, written like a design."""

from __future__ import annotations

import sys

from ..baselines.registry import ALIASES, BASELINES, old_name_note
from ..io import read_table
from ..io.atomic import DESIGN_FILE
from ._common import (
    add_data_options,
    add_force,
    add_quiet,
    check_output,
    combos_kw,
    dialect_of,
    formatter,
    say,
    write_outputs,
)

HELP = "closed-form designs calibrated to meet C1"


def _family(text: str) -> str:
    """The registered name; an old spelling is read as its name, with a note on stderr (any
    other text is left to argparse's choices, which name the registered names)."""
    if text not in ALIASES:
        return text
    print(f"pramopt baseline: note: {old_name_note(text)}", file=sys.stderr)
    return ALIASES[text]


def add_parser(sub):
    width = max(map(len, BASELINES))
    families = "\n".join(f"  {name:<{width}}  {fam.description}" for name, fam in BASELINES.items())
    p = sub.add_parser(
        "baseline",
        formatter_class=formatter,
        help=HELP,
        description="A closed-form PRAM family tuned to just meet C1 at α on the data, with the\n"
        "same outputs as 'design':\n" + families,
        epilog="example:\n  pramopt baseline retention --data testdata.csv "
        "--qi urbrur,roof,walls,water --alpha 0.1 --out retention",
    )
    p.add_argument(
        "family",
        type=_family,
        choices=list(BASELINES),
        help="the closed-form family (the old names "
        + ", ".join(f"{old} for {name}" for old, name in ALIASES.items())
        + " still run, with a note)",
    )
    add_data_options(p, required=True)
    p.add_argument(
        "--per-attribute",
        action="store_true",
        help="retention: one retention probability per variable (retention-per-attribute)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="sdcmicro: seed of the random diagonals (default 0)"
    )
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..baselines import baseline

    check_output(args, args.out, folder=DESIGN_FILE)
    # identifying values as written
    df = read_table(args.data, text=args.qi, dialect=dialect_of(args))
    takes = BASELINES[args.family].options
    options = {
        k: v
        for k, v in (("per_attribute", args.per_attribute), ("seed", args.seed))
        if k in takes and (k != "per_attribute" or v)
    }
    alpha = {} if args.alpha is None else {"alpha": args.alpha}
    result = baseline(df, args.qi, args.family, **alpha, **combos_kw(args), **options)
    write_outputs(
        args.out,
        result,
        f"pramopt baseline: {result.method}",
        kind=f"baseline-{result.method}",
        force=args.force,
    )
    say(args, result.summary(), f"written to {args.out}/")
    return 0 if result.success else 1
