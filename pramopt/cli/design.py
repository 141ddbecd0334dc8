"""``pramopt design``: an optimal PRAM matrix and its report, written to a folder."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from ..errors import InvalidParameterError
from ..io.atomic import DESIGN_FILE
from ..io.parameters import MATRIX_CSV_MAX_ENTRIES
from ..kinds import kind_for
from ..params import DesignParams
from ._common import (
    PROG,
    Progress,
    add_csv_options,
    add_force,
    add_parameter_flags,
    add_quiet,
    check_output,
    csv_list,
    dialect_of,
    formatter,
    parameters_given,
    say,
    stage_log,
    write_outputs,
)

HELP = "design an optimal PRAM matrix"


def add_parser(sub):
    p = sub.add_parser(
        "design",
        formatter_class=formatter,
        help=HELP,
        description="Design a PRAM matrix of minimal exact L2 loss under C1 and write it, with a "
        "report, to a folder.\nWith no arguments it designs the built-in example (Section 4 of "
        "Cator et al.).  Every parameter of pramopt.design has a flag, which overrides the\n"
        "spec's value of that parameter.",
        epilog="examples:\n"
        "  pramopt design --out example-design\n"
        "  pramopt design models/testdata4.toml --out td4\n"
        "  pramopt design --data survey.csv --qi "
        "region,sex,age5 --alpha 0.1 --fixed region --out d\n\n"
        "The folder gets design.json (read back by release, assess and estimate), matrix.csv\n"
        "(from_*, to_*, probability), report.html and report.md.  A replacement or block design\n"
        "is kept as its parameters (parameters.npz, and parameters.csv to read: per cell its\n"
        "pool, keep and redraw probabilities and its share of the redraws); its matrix.csv, up\n"
        "to K^2 rows, is written only with --matrix-csv or when it has at most "
        f"{MATRIX_CSV_MAX_ENTRIES:,} rows.",
    )
    p.add_argument("spec", nargs="?", metavar="SPEC.toml", help="a design spec (see models/)")
    p.add_argument("--data", metavar="FILE", help="microdata: .csv (.tsv, .txt), .parquet or .pq")
    add_csv_options(p)
    p.add_argument(
        "--qi", type=csv_list, metavar="A,B,C", help="identifying variables, comma-separated"
    )
    add_parameter_flags(p)
    p.add_argument(
        "--recode",
        metavar="FILE",
        default=None,
        help="a recoding (JSON, as pramopt advise writes it): merged categories of some "
        "identifying variables, applied before counting and kept with the design (release and "
        "estimate apply it again)",
    )
    p.add_argument(
        "--out", metavar="DIR", default=None, help="output folder (default: design-NAME)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with a spec: exit 1 if the spec's expected figures are missed",
    )
    p.add_argument(
        "--matrix-csv",
        action="store_true",
        help="write matrix.csv (every transition) also for a replacement or block design, "
        f"whose folder otherwise keeps its parameters alone beyond {MATRIX_CSV_MAX_ENTRIES:,} "
        "transitions",
    )
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..example import EXAMPLE_QI, example_data
    from ..frequency.file_counting import count_table
    from ..optimize.designer import design
    from ..spec import check_expected, design_kwargs, load_spec

    spec = None
    given = parameters_given(args)
    if args.spec is not None:
        if args.data is not None:
            raise InvalidParameterError("Give either a spec or --data, not both.")
        spec = load_spec(args.spec)
        # the recoding is applied below (--recode overrides the spec's)
        data, qi, kw, name = (
            spec.load_data(recoded=False),
            list(spec.qi),
            design_kwargs(spec),
            spec.name,
        )
        if args.qi is not None:
            qi = args.qi
    elif args.data is not None:
        if args.qi is None:
            raise InvalidParameterError("--data needs --qi (the identifying variables).")
        kw, name, qi = {}, Path(args.data).stem, args.qi
        data = None  # counted below, once the output folder is known to be writable
    else:
        if args.qi is not None:
            raise InvalidParameterError("--qi needs --data (or a spec).")
        data, qi, kw, name = example_data(), list(EXAMPLE_QI), {"alpha": 0.1}, "example"
    if (
        "combinations" in given or "combination_size" in given
    ):  # Π on the command line replaces the spec's
        kw.pop("combinations", None)
        kw.pop("combination_size", None)
    kw.update(given)
    params = DesignParams.from_options("design", **kw)  # every parameter checked before any work
    recoding = _recoding(args, spec, qi)
    out = Path(args.out if args.out is not None else f"design-{name}")
    check_output(args, out, folder=DESIGN_FILE, default=args.out is None)
    kind = kind_for(params)
    if kind is not None:
        return _kind_design(args, params, spec, data, qi, name, out, kind, recoding)
    before: dict = {}
    if data is None:
        # the design only needs the frequency table: count the file in record batches
        # identifying values as the text written, so that a release writes them back exactly
        data = count_table(
            args.data,
            qi,
            owner="design",
            domains=params.domains,
            max_categories=params.max_categories,
            keys_as_text=True,
            dialect=dialect_of(args),
            recode=recoding,
            categories_before=before,
        )
    elif recoding is not None:
        data, before = _recoded(data, recoding)
    progress = None if args.quiet else Progress()
    with stage_log(args.quiet):
        result = _with_recoding(
            design(data, qi, progress=progress, **params.to_dict()), recoding, before
        )
    title = f"pramopt design: {name}" + (
        f" ({spec.paper})" if spec is not None and spec.paper else ""
    )
    extra = (
        {"spec": str(spec.path), "name": spec.name, "paper": spec.paper}
        if spec is not None
        else {"name": name}
    )
    write_outputs(
        out, result, title, extra=extra, force=args.force, matrix_csv=args.matrix_csv or None
    )
    files = ", ".join(
        f
        for f in ("design.json", "matrix.csv", "matrix.npz", "parameters.npz", "parameters.csv")
        if (out / f).is_file()
    )
    say(args, result.summary(), f"written to {out}/ ({files}, report.html, report.md)")
    code = 0 if result.success else 1
    if spec is not None and spec.expected:
        misses = check_expected(spec, result.figures(), result.status.value)
        if misses:
            print(
                f"{PROG}: expected figures of {spec.path} missed: " + "; ".join(misses),
                file=sys.stderr,
            )
            if args.check:
                code = 1
        elif not args.quiet:
            print(f"expected figures of {spec.path.name}: all met")
    return code


def _kind_design(args, params, spec, data, qi, name, out, kind, recoding=None) -> int:
    """A design of another kind (e.g. ``--household``): it needs the records, not only their
    frequency table."""
    from ..io import read_table
    from ..optimize.designer import design

    if (
        data is None
    ):  # identifying values as the text written, so that a release writes them back exactly
        data = read_table(args.data, text=qi, dialect=dialect_of(args))
    before: dict = {}
    if recoding is not None:
        data, before = _recoded(data, recoding)
    progress = None if args.quiet else Progress()
    with stage_log(args.quiet):
        result = _with_recoding(
            design(data, qi, progress=progress, **params.to_dict()), recoding, before
        )
    title = f"pramopt {kind.name} design: {name}"
    extra = {"spec": str(spec.path), "name": spec.name} if spec is not None else {"name": name}

    def report():
        rd = kind.report(result, title)
        # the report's recoding section reads it from the report data (the kind's own report
        # does not know of recodings)
        return dataclasses.replace(rd, recoding=result.details.get("recode"))

    # save_design hands the result to its kind's save
    write_outputs(out, result, title, extra=extra, report=report, force=args.force)
    say(
        args,
        result.summary(),
        f"written to {out}/ ({', '.join(kind.files)}, report.html, report.md)",
    )
    return 0 if result.success else 1


def _recoding(args, spec, qi):
    """The recoding of ``--recode`` (else the spec's), checked against the identifying variables
    before any data are read; None without one."""
    from ..recode import read_recoding

    if args.recode is not None:
        rec, flag = read_recoding(args.recode, flag="--recode"), f"--recode {args.recode!r}"
    elif spec is not None and spec.recode_path is not None:
        rec, flag = spec.recoding(), f"[data] recode of {str(spec.path)!r}"
    else:
        return None
    other = [q for q in rec.variables if q not in qi]
    if other:
        which = "is not an identifying variable" if len(other) == 1 else "are not identifying"
        raise InvalidParameterError(
            f"{flag} recodes {', '.join(map(repr, other))}, which {which} (the identifying "
            f"variables, --qi: {', '.join(map(str, qi))})."
        )
    return rec if rec else None


def _recoded(data, recoding):
    """Records recoded, and each recoded variable's number of categories before (missing counted
    as one, as the table counts it)."""
    from ..recode import _text

    before = {}
    for q in recoding.variables:
        if q in data.columns:
            na = data[q].isna()
            texts = data[q][~na].map(lambda v: v if isinstance(v, str) else _text(v))
            before[q] = int(texts.nunique() + int(na.any()))
    return recoding.apply(data), before


def _with_recoding(result, recoding, before: dict):
    """The result with its recoding in ``details["recode"]`` (guarded by the design file's
    checksum), and the categories of each recoded variable before and after."""
    if recoding is None:
        return result
    qi = list(result.table.qi)
    counts = {
        q: [before.get(q), len(result.table.categories[qi.index(q)])]
        for q in recoding.variables
        if q in qi
    }
    rec = {**recoding.to_dict(), "categories": counts}
    return dataclasses.replace(result, details={**result.details, "recode": rec})
