"""``pramopt frontier``: the optimal design and every calibrated baseline at several α, as a
table, a figure and an HTML page in one folder; with ``--recode``/``--keys``, the optimal design
of each recoding and key set at several α instead (:func:`pramopt.choices.choice_frontier`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..baselines.registry import ALIASES, BASELINES, old_name_note
from ..errors import InvalidParameterError
from ..io.atomic import atomic_dir, atomic_write, write_text
from ..params import DesignParams
from ._common import (
    PROG,
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
)

if TYPE_CHECKING:
    from ..choices import ChoiceFrontier
    from ..tradeoff import Frontier

HELP = "loss against α for the optimal design and the calibrated baselines"

#: The files of a frontier folder; the first marks the folder as one that may be replaced.
FILES = ("frontier.csv", "frontier.png", "frontier.html")
#: The files of a frontier folder over choices (``--recode``/``--keys``), likewise.
CHOICE_FILES = ("choices.csv", "choices.png", "choices.html")


def add_parser(sub):
    p = sub.add_parser(
        "frontier",
        formatter_class=formatter,
        help=HELP,
        description="The risk–utility frontier: for each α, "
        "the optimal design and every closed-form\n"
        "baseline calibrated to the same α, all verified by the same full C1 check; their\n"
        "exact L2 loss, expected changes, max risk and time side by side.  With no data, the\n"
        "built-in example.",
        epilog="examples:\n"
        "  pramopt frontier --out f\n"
        "  pramopt frontier --data testdata.csv --qi "
        "urbrur,roof,walls,water --alphas 0.05,0.1,0.2 --out f\n"
        "  pramopt frontier models/example_frontier.toml --out f\n"
        "  pramopt frontier --data register.csv --qi region,sex,age --recode adv/recode-1.json \\\n"
        "                   --keys region,age --alphas 0.05,0.1 --out c\n\n"
        "The folder gets frontier.csv (one row per α "
        "and design), frontier.png (loss and expected\n"
        "changes against α, log scales) and frontier.html (both, with the ratios to the optimum).\n"
        "With --recode or --keys it gets choices.csv (one row per choice and α), choices.png\n"
        "(share of records changed, its proven minimum, and loss against α) and choices.html.",
    )
    p.add_argument(
        "spec", nargs="?", metavar="SPEC.toml", help="a spec; its [frontier] alphas are the default"
    )
    p.add_argument("--data", metavar="FILE", help="microdata: .csv (.tsv, .txt), .parquet or .pq")
    add_csv_options(p)
    p.add_argument(
        "--qi", type=csv_list, metavar="A,B,C", help="identifying variables, comma-separated"
    )
    p.add_argument(
        "--alphas",
        metavar="A,B,C",
        default=None,
        help="C1 levels in (0, 1), comma-separated (default: the spec's, else 0.05,0.1,0.2)",
    )
    p.add_argument(
        "--baselines",
        metavar="NAMES",
        default=None,
        help="auto (default: all up to 2000 cells), all, none, or comma-separated names from "
        + ", ".join(BASELINES)
        + " (the old names "
        + ", ".join(f"{old} for {name}" for old, name in ALIASES.items())
        + " still run, with a note)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the sdcmicro baseline's diagonals (default 0)"
    )
    g = p.add_argument_group(
        "choices (the optimal design of the data as given and of each, no baselines)"
    )
    g.add_argument(
        "--recode",
        action="append",
        default=None,
        metavar="FILE",
        help="a recoding file (pramopt advise's recode-<rank>.json): one choice, named by its "
        "description (repeat the flag for more)",
    )
    g.add_argument(
        "--keys",
        type=csv_list,
        action="append",
        default=None,
        metavar="A,B",
        help="another set of identifying variables, a subset of --qi: one choice (repeat the "
        "flag for more)",
    )
    add_parameter_flags(
        p, names=[f.name for f in dataclasses.fields(DesignParams) if f.name != "alpha"]
    )
    p.add_argument(
        "--out", metavar="DIR", default=None, help="output folder (default: frontier-NAME)"
    )
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def parse_alphas(text: str) -> list[float]:
    """``--alphas`` as numbers (their range, order and repeats are checked by
    :func:`pramopt.frontier`)."""
    parts = [x.strip() for x in text.split(",")]
    try:
        return [float(x) for x in parts]
    except ValueError:
        raise InvalidParameterError(
            f"--alphas must be a comma-separated list of distinct numbers in (0, 1); got {text!r}."
        ) from None


def _baselines(text):
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    return names[0] if len(names) == 1 and names[0] in ("auto", "all", "none") else names


def _registered(baselines):
    """``baselines`` (of --baselines or a spec) with each old spelling replaced by the name it
    stands for, said in a note on stderr (other names are checked by :func:`pramopt.frontier`)."""
    many = not isinstance(baselines, str)
    given = list(baselines) if many else [baselines]
    for old in dict.fromkeys(b for b in given if isinstance(b, str) and b in ALIASES):
        print(f"{PROG} frontier: note: {old_name_note(old)}", file=sys.stderr)
    names = [ALIASES.get(b, b) if isinstance(b, str) else b for b in given]
    return names if many else names[0]


def _inputs(args) -> tuple:
    """(data, qi, design options, name, α, baselines) from the spec, --data or the example;
    data is None for --data (counted or read once the output folder is checked)."""
    from ..example import EXAMPLE_QI, example_data
    from ..spec import design_kwargs, load_spec
    from ..tradeoff import DEFAULT_ALPHAS, check_alphas

    alphas: Sequence[float]
    alphas, baselines = DEFAULT_ALPHAS, "auto"
    if args.spec is not None:
        if args.data is not None:
            raise InvalidParameterError("Give either a spec or --data, not both.")
        spec = load_spec(args.spec)
        data, qi, kw, name = spec.load_data(), list(spec.qi), design_kwargs(spec), spec.name
        kw.pop("alpha", None)  # the spec's single α; the frontier's are [frontier] alphas
        alphas = spec.frontier.get("alphas", alphas)
        baselines = spec.frontier.get("baselines", baselines)
        if args.qi is not None:
            qi = args.qi
    elif args.data is not None:
        if args.qi is None:
            raise InvalidParameterError("--data needs --qi (the identifying variables).")
        kw, name, qi, data = {}, Path(args.data).stem, args.qi, None
    else:
        if args.qi is not None:
            raise InvalidParameterError("--qi needs --data (or a spec).")
        data, qi, kw, name = example_data(), list(EXAMPLE_QI), {}, "example"
    if args.alphas is not None:
        alphas = parse_alphas(args.alphas)
    alphas = check_alphas(
        alphas, "frontier"
    )  # errors name --alphas (cli._in_flags), before any work
    if args.baselines is not None:
        baselines = _baselines(args.baselines)
    if isinstance(baselines, (str, list, tuple)):
        baselines = _registered(baselines)
    given = parameters_given(args)
    if "combinations" in given or "combination_size" in given:
        kw.pop("combinations", None)
        kw.pop("combination_size", None)
    kw.update(given)
    return data, qi, kw, name, alphas, baselines


def _choices(args, qi) -> list:
    """The choices of --recode and --keys, each checked against --qi before any work."""
    from ..choices import AS_GIVEN, Choice
    from ..recode import read_recoding

    out: list = []
    for path in args.recode or ():
        rec = read_recoding(path, flag="--recode")
        other = [q for q in rec.variables if q not in qi]
        if other:
            raise InvalidParameterError(
                f"--recode {path!r} recodes {', '.join(map(repr, other))}, not among the "
                f"identifying variables (--qi: {', '.join(map(str, qi))})."
            )
        label = rec.description.strip() or Path(path).name
        if label in {c.label for c in out} | {AS_GIVEN}:
            label = f"{label} ({Path(path).name})"  # two recodings described alike
        if label in {c.label for c in out}:
            raise InvalidParameterError(f"--recode {path!r} is given twice.")
        out.append(Choice(label, recoding=rec))
    for keys in args.keys or ():
        other = [q for q in keys if q not in qi]
        if other or len(set(keys)) != len(keys):
            why = f"names {other!r}, not among" if other else "repeats a variable of"
            raise InvalidParameterError(
                f"--keys {','.join(keys)!r} {why} the identifying variables (--qi: "
                f"{', '.join(map(str, qi))}); each --keys is a subset of them."
            )
        label = "keys " + ",".join(keys)
        if label in {c.label for c in out}:
            raise InvalidParameterError(f"--keys {','.join(keys)!r} is given twice.")
        out.append(Choice(label, qi=tuple(keys)))
    return out


def _progress(args):
    """The progress callback of both frontiers: one stderr line per point, unless quiet."""
    from .._labels import short_label

    t0 = time.monotonic()

    def progress(alpha, design, result):
        if args.quiet:
            return
        shown = short_label(design, 24)
        at = f"{PROG}: [{time.monotonic() - t0:7.1f} s] α = {alpha:<6g} {shown:<24}"
        if result is None:
            if design == "optimal" or args.recode or args.keys:
                print(f"{at} designing", file=sys.stderr, flush=True)
            return
        print(
            f"{at} {result.status.value:<10} loss {result.loss:<11.4g} changes "
            f"{result.expected_changes:<9.4g} max risk {result.max_risk:.4g}",
            file=sys.stderr,
            flush=True,
        )

    return progress


def _write(out: Path, files: tuple, f, csv: str, title: str, force: bool) -> None:
    """A frontier's table, figure and page, built aside and renamed (``files[0]`` marks it; one
    that exists is replaced only with ``force``)."""
    png = f.png()
    with atomic_dir(out, marker=files[0], force=force) as tmp:
        write_text(csv, tmp / files[0])
        with atomic_write(tmp / files[1]) as fh:
            fh.write(png)
        write_text(f.to_html(title, png=png), tmp / files[2])


def run(args) -> int:
    from ..frequency.file_counting import count_table
    from ..io import read_table

    data, qi, kw, name, alphas, baselines = _inputs(args)
    params = DesignParams.from_options(
        "frontier", alpha=alphas[0], **kw
    )  # every option checked first
    choices = _choices(args, qi) if args.recode or args.keys else None
    if choices is not None and args.baselines is not None:
        raise InvalidParameterError(
            "--baselines does not apply with --recode or --keys (the optimal design of each "
            "choice is made, no baselines)."
        )
    files, kind = (CHOICE_FILES, "choices") if choices is not None else (FILES, "frontier")
    out = Path(args.out if args.out is not None else f"{kind}-{name}")
    # the folder, before any counting or solving
    check_output(args, out, folder=files[0], default=args.out is None)
    if data is None and choices is not None:
        # a recoding maps the records' values: the records themselves, keys as text
        data = read_table(args.data, text=qi, dialect=dialect_of(args))
    elif data is None:
        data = count_table(
            args.data,
            qi,
            owner="frontier",
            domains=params.domains,
            max_categories=params.max_categories,
            keys_as_text=True,
            dialect=dialect_of(args),
        )
    opts = {k: v for k, v in params.to_dict().items() if k != "alpha"}
    f: Frontier | ChoiceFrontier
    with stage_log(args.quiet):  # the stages of a long design, as 'pramopt design' shows them
        if choices is not None:
            from ..choices import choice_frontier

            f = choice_frontier(data, qi, alphas, choices, progress=_progress(args), **opts)
            csv = f.to_csv()
        else:
            from ..tradeoff import frontier

            f = frontier(
                data,
                qi,
                alphas,
                baselines=baselines,
                seed=args.seed,
                progress=_progress(args),
                **opts,
            )
            csv = f.points.to_csv(index=False)
    _write(out, files, f, csv, f"pramopt {kind}: {name}", args.force)
    say(
        args,
        f.summary(),
        *[f"note: {n}" for n in f.notes],
        f"written to {out}/ ({', '.join(files)})",
    )
    return 0 if f.success else 1
