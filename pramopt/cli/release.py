"""``pramopt release``: perturb the identifying columns of a file with a design."""

from __future__ import annotations

from pathlib import Path

from .._csv import CSV_SUFFIXES
from ..errors import InvalidParameterError
from ..io import load_design, read_table, table_for_design, write_table
from ..kinds import kind_of
from ._common import (
    add_combination_flags,
    add_csv_options,
    add_force,
    add_quiet,
    check_output,
    dialect_of,
    formatter,
    say,
    text_keys,
)

HELP = "perturb the identifying columns with a design"


def add_parser(sub):
    p = sub.add_parser(
        "release",
        formatter_class=formatter,
        help=HELP,
        description="Draw every record's released identifying "
        "values from its cell's row of the design.\n"
        "Refuses a design that failed verification or fails C1 when checked again, was edited,\n"
        "or was made for other data (other cells or counts).",
        epilog="example:\n  pramopt release --design td4 --data testdata.csv --out "
        "released.parquet --seed 1",
    )
    p.add_argument(
        "--design", required=True, metavar="DIR", help="design folder (or its design.json)"
    )
    p.add_argument(
        "--data", required=True, metavar="FILE", help="the microdata the design was made for"
    )
    add_csv_options(p)
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="released microdata: .csv (.tsv, .txt), .parquet or .pq",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed for a reproducible draw (default: from the OS's secure source)",
    )
    g = p.add_argument_group(
        "the office's policy",
        "refuse a design weaker than these (--alpha is required; the combinations default to "
        "every subset of 3 variables). Every release prints the alpha and combinations it "
        "checked",
    )
    g.add_argument("--alpha", type=float, default=None, metavar="A", help="largest risk allowed")
    add_combination_flags(g, "every subset of SIZE identifying variables is a combination")
    g.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help='a JSON policy file, e.g. {"alpha": 0.1, "combination_size": 3}',
    )
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def _policy(args):
    """The policy of the flags or the file (not both), checked before any data is read."""
    from ..publish.policy import read_policy, release_policy

    flags = (args.alpha, args.combination_size, args.combinations)
    if args.policy is not None:
        if any(f is not None for f in flags):
            raise InvalidParameterError(
                "Give the policy either as --policy FILE or as --alpha, --combination-size and "
                "--combination, not both."
            )
        return read_policy(args.policy, owner="--policy")
    return release_policy(*flags, owner="release")


def _checked(args, res, policy) -> None:
    """Refuse a design weaker than the policy; print what was checked (and the recoding the
    release applies, for a design made on recoded data)."""
    from ..publish.policy import describe_checked, enforce_policy
    from ..publish.recoded import describe_recoding

    verdict = enforce_policy(res, policy)
    say(args, describe_checked(res) + (f"; {verdict}" if verdict else "") + ".")
    recoded = describe_recoding(res)
    if recoded:
        say(args, f"{recoded} before release.")


def _same_format(src, dst) -> bool:
    """True when both files are CSV (.csv, .tsv, .txt) or both Parquet (by extension)."""
    kind = {**dict.fromkeys(CSV_SUFFIXES, "csv"), ".parquet": "parquet", ".pq": "parquet"}
    a, b = kind.get(Path(src).suffix.lower()), kind.get(Path(dst).suffix.lower())
    return a is not None and a == b


def run(args) -> int:
    from ..publish.file_release import records_changed
    from ..publish.frame import check_same_table, releasable_table, release
    from ..publish.recoded import recoded_frame

    policy = _policy(args)
    res = load_design(args.design)
    kind = kind_of(res)
    if kind is not None:
        return _kind_release(args, res, kind, policy)
    releasable_table(res, "release")  # refuse an unsafe design before reading any data
    _checked(args, res, policy)
    check_output(args, args.out, source=args.data)
    if _same_format(args.data, args.out):
        # stream the file in record batches: checked against the design in the same pass
        from ..publish.file_release import release_file

        d = dialect_of(args)
        rel = release_file(
            args.data,
            args.out,
            res,
            seed=args.seed,
            sep=d.sep,
            encoding=d.encoding,
            decimal=d.decimal,
            na_values=d.na_values,
            overwrite=args.force,
        )
        say(
            args,
            f"released {rel.n} records to {args.out}: {rel.changed} changed "
            f"(expected {res.expected_changes:.4g}).",
        )
        return 0
    # CSV to Parquet or back: in memory, with pandas' types (recoded as for the design)
    df = recoded_frame(read_table(args.data, text=text_keys(res), dialect=dialect_of(args)), res)
    check_same_table(table_for_design(df, res), res.table, repr(args.data))
    out = release(df, res, seed=args.seed)
    write_table(out, args.out, overwrite=args.force)
    changed = records_changed(df, out, res.qi)
    say(
        args,
        f"released {len(out)} records to {args.out}: {changed} changed "
        f"(expected {res.expected_changes:.4g}).",
    )
    return 0


def _kind_release(args, res, kind, policy) -> int:
    """A design of another kind (households: household-level values once per household), in
    memory."""
    from ..publish.file_release import records_changed, release_file
    from ..publish.recoded import recoded_frame

    kind.check_releasable(res)  # refuse an unsafe design before reading any data
    _checked(args, res, policy)
    check_output(args, args.out, source=args.data)
    d = dialect_of(args)
    if _same_format(args.data, args.out):  # every non-identifying field written back as read
        rel = release_file(
            args.data,
            args.out,
            res,
            seed=args.seed,
            sep=d.sep,
            encoding=d.encoding,
            decimal=d.decimal,
            na_values=d.na_values,
            overwrite=args.force,
        )
        n, changed = rel.n, rel.changed
    else:  # CSV to Parquet or back: with pandas' types (recoded as for the design)
        df = recoded_frame(read_table(args.data, text=text_keys(res), dialect=d), res)
        out = kind.release(df, res, args.seed)
        write_table(out, args.out, overwrite=args.force)
        n, changed = len(out), records_changed(df, out, res.qi)
    say(
        args,
        f"released {n} records to {args.out}: {changed} changed "
        f"(expected {res.expected_changes:.4g}){kind.release_note(res)}.",
    )
    return 0
