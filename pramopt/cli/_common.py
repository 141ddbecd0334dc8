"""What the commands share: progress on stderr, common options, writing a design folder."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .._activity import Heartbeat
from ..errors import InvalidParameterError, PramoptError
from ..io import atomic_dir, save_design, write_text
from ..io.atomic import DESIGN_FILE, check_out_dir, check_out_file, refuse_overwrite
from ..params import DesignParams
from ..report import ReportData, from_result, render_html, render_markdown

PROG = "pramopt"

#: Exit code of a command whose design folder was written but whose report failed.
REPORT_FAILED = 3


class ReportFailedError(PramoptError):
    """The design folder was written, then its report failed (exit code :data:`REPORT_FAILED`;
    the cause is chained as ``__cause__``)."""


class Progress:
    """``progress`` callback of :func:`pramopt.design` that prints to stderr.

    Nothing is printed during the first ``after`` seconds (a fast solve stays quiet); then at
    most one line every ``every`` seconds: stage, iteration, current loss, worst violation (the
    number of violated C1 rows in the linear stage, the trust radius in the refinement).
    """

    def __init__(self, stream=None, after: float = 1.0, every: float = 0.5, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.after, self.every, self.clock = after, every, clock
        self.t0 = clock()
        self.last = -float("inf")
        self.lines = 0

    def __call__(self, stage, iteration, loss, worst) -> None:
        now = self.clock()
        if now - self.t0 < self.after or now - self.last < self.every:
            return
        self.last = now
        self.lines += 1
        print(
            f"{PROG}: [{now - self.t0:7.1f} s] {stage:<7} iteration {iteration:4d}  loss "
            f"{loss:.6g}  worst violation/radius {worst:.4g}",
            file=self.stream,
            flush=True,
        )


@contextlib.contextmanager
def stage_log(quiet: bool, stream=None, after: float = 1.0, heartbeat: float = 30.0):
    """Show every finished design stage on stderr (the ``pramopt.design`` logger) unless quiet;
    like :class:`Progress`, nothing during the first ``after`` seconds (a fast design stays
    quiet) but an announcement; after ``heartbeat`` seconds without a line, what is running
    (:class:`pramopt._activity.Heartbeat`)."""
    if quiet:
        yield
        return
    t0 = time.monotonic()
    log = logging.getLogger("pramopt.design")

    class _Elapsed(logging.Formatter):
        def format(self, record):
            return f"{PROG}: [{time.monotonic() - t0:7.1f} s] {record.getMessage()}"

    h = logging.StreamHandler(stream if stream is not None else sys.stderr)
    h.setFormatter(_Elapsed())
    # An announcement (work estimated to take long) is shown at once; stages after ``after`` s.
    h.addFilter(lambda record: getattr(record, "announce", False) or time.monotonic() - t0 >= after)
    old = log.level
    log.addHandler(h)
    log.setLevel(logging.INFO)
    try:
        with Heartbeat(every=heartbeat):
            yield
    finally:
        log.removeHandler(h)
        log.setLevel(old)


def csv_list(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError("expected a comma-separated list of column names")
    return out


def formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)


def add_csv_options(p):
    """--sep, --encoding and --decimal: the dialect of a CSV data file (released in the same)."""
    g = p.add_argument_group("CSV data files")
    g.add_argument(
        "--sep",
        default=None,
        metavar="C",
        help="field separator (default ',', or a tab for a .tsv; '\\t' for a tab)",
    )
    g.add_argument(
        "--encoding",
        default=None,
        metavar="NAME",
        help="text encoding (default utf-8; e.g. latin-1)",
    )
    g.add_argument(
        "--decimal", default=None, choices=[".", ","], help="decimal mark of numbers (default '.')"
    )
    g.add_argument(
        "--na-values",
        type=csv_list,
        default=None,
        metavar="A,B",
        help="texts of an identifying value that mean 'missing' (default: only an empty field; "
        "NA, None and NaN are values). Give the same list to every command on the same data",
    )


def add_combination_flags(p, size_help: str) -> None:
    """--combination-size (alias --combinations) and repeated --combination A,B: Π for commands
    other than design (which declares them from DesignParams); both default to None."""
    p.add_argument(
        "--combination-size",
        "--combinations",
        dest="combination_size",
        type=int,
        default=None,
        metavar="SIZE",
        help=size_help,
    )
    p.add_argument(
        "--combination",
        dest="combinations",
        type=csv_list,
        action="append",
        default=None,
        metavar="A,B",
        help="one combination (repeat the flag for more)",
    )


def dialect_of(args):
    """The checked CSV dialect of the command line's data file (errors name the flags; a
    ``.tsv`` is tab-separated unless --sep says otherwise)."""
    from .._csv import csv_dialect

    return csv_dialect(
        args.sep,
        args.encoding,
        args.decimal,
        owner=args.command,
        na_values=args.na_values,
        path=getattr(args, "data", None),
    )


def add_data_options(p, *, required: bool, combos: bool = True, alpha: bool = True):
    p.add_argument(
        "--data",
        required=required,
        metavar="FILE",
        help="microdata: .csv (.tsv, .txt), .parquet or .pq",
    )
    add_csv_options(p)
    p.add_argument(
        "--qi",
        type=csv_list,
        required=required,
        metavar="A,B,C",
        help="identifying variables, comma-separated",
    )
    if alpha:
        p.add_argument(
            "--alpha",
            type=float,
            default=DesignParams.alpha,
            help=f"C1 security level α in (0, 1) (default {DesignParams.alpha:g})",
        )
    if combos:
        add_parameter_flags(p, names=("combinations", "combination_size"))


def add_quiet(p):
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or summary output")


#: The help of every command's --force.
FORCE_HELP = (
    "replace an output that exists (without it an existing file or folder is never "
    "overwritten; a folder that is not pramopt's is never replaced)"
)


def add_force(p) -> None:
    """--force: allow a command to replace an output that exists."""
    p.add_argument("--force", action="store_true", help=FORCE_HELP)


def check_output(
    args, path, *, folder: str | None = None, default: bool = False, source=None, **kw
) -> Path:
    """Check an output before any long work: writable, not the file the command reads, and not
    there already unless ``--force`` (an output that may have been published is never overwritten
    unasked).

    Parameters
    ----------
    args : argparse.Namespace
        The command line (its ``force``).
    path : str or Path
    folder : str, optional
        For an output folder, the file that marks it as pramopt's (``design.json``,
        ``frontier.csv``, ...); None for an output file.
    default : bool
        True when ``path`` is the command's default name (--out not given), for the message.
    source : str or Path, optional
        The data file the command reads, which even --force may not replace.
    **kw
        More arguments of :func:`pramopt.io.atomic.check_out_file`.

    Returns
    -------
    Path

    Raises
    ------
    InvalidParameterError
        When it cannot be written, or exists and --force was not given.
    """
    flag = None if default else "--out"
    if folder is None:
        p = check_out_file(path, flag=flag, force=True, **kw)
    else:
        p = check_out_dir(path, folder, flag=flag, force=True)
    if source is not None and p.is_file() and Path(source).is_file() and p.samefile(source):
        raise InvalidParameterError(f"--out must not be the source file; got {str(p)!r}.")
    if not args.force:
        if default:
            name = f"{str(p)!r} (the default output, --out not given)"
            remedy = "Give --force to replace it, or --out another name"
        else:
            name, remedy = f"--out {str(p)!r}", "Give --force to replace it, or another --out"
        refuse_overwrite(p, folder, name=name, remedy=remedy)
    return p


def say(args, *lines):
    if not getattr(args, "quiet", False):
        for line in lines:
            print(line)


def combos_kw(args) -> dict:
    """Π from the command line: ``combinations`` and/or ``combination_size`` when given."""
    kw = {}
    if getattr(args, "combinations", None):
        kw["combinations"] = args.combinations
    if getattr(args, "combination_size", None) is not None:
        kw["combination_size"] = args.combination_size
    return kw


def write_outputs(
    out,
    result,
    title: str,
    kind: str = "design",
    extra: dict | None = None,
    report: ReportData | Callable[[], ReportData] | None = None,
    force: bool = False,
    matrix_csv: bool | None = None,
) -> Path:
    """Write the design folder, then its report.

    ``design.json`` and the files beside it (``matrix.csv``, or a replacement or block design's
    parameters) are built in a temporary folder then renamed; the reports are written into the
    folder after, so that no failure of a report (a drawing out of memory) can lose a design.

    Parameters
    ----------
    out : str or Path
    result : DesignResult or a result of another kind
    title : str
    kind : str
        The ``kind`` written in ``design.json``.
    extra : dict, optional
        More fields of ``design.json``.
    report : ReportData or callable, optional
        The report's data, or a function that makes it (called once the design is saved);
        default :func:`pramopt.report.from_result`.
    force : bool
        Replace an existing design folder.
    matrix_csv : bool, optional
        Passed to :func:`pramopt.io.save_design` (a structured design's ``matrix.csv``).

    Raises
    ------
    ReportFailedError
        When the report failed after the design was saved.
    """
    out = Path(out)
    with atomic_dir(out, DESIGN_FILE, force=force) as tmp:
        save_design(result, tmp, kind=kind, extra=extra, matrix_csv=matrix_csv)
    missing = ["report.md", "report.html"]
    try:
        if report is None:
            rd = from_result(result, title)
        else:
            rd = report() if callable(report) else report
        # the Markdown first: it needs no drawing, so it is there even when a drawing fails
        write_text(render_markdown(rd), out / "report.md")
        missing.remove("report.md")
        write_text(render_html(rd), out / "report.html")
    except KeyboardInterrupt as e:
        e.add_note(f"the design was saved at {out}; {' and '.join(missing)} not written")
        raise
    except Exception as e:  # MemoryError included: the design is saved whatever the report does
        cause = (str(e).splitlines() or [""])[0][:200]
        raise ReportFailedError(
            f"the design was saved at {out}, but its report failed "
            f"({type(e).__name__}{': ' + cause if cause else ''}): {' and '.join(missing)} not "
            "written. The design itself is complete: release, assess and estimate read it."
        ) from e
    return out


def _cells_file(s: str):
    from ..io.tables import read_table

    try:
        return read_table(s).to_dict("records")
    except InvalidParameterError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _json_mapping(s: str):
    try:
        v = json.loads(s)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected JSON: {e}") from None
    if not isinstance(v, dict):
        raise argparse.ArgumentTypeError('expected a JSON object such as {"sex": [1, 2]}')
    return v


def _alpha(s: str):
    if s.strip().lower() == "none":
        return "none"  # no C1 (allowed with --epsilon or --k); DesignParams turns it into None
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid float value: {s!r} (a number in (0, 1), or 'none' for no C1 "
            "with --epsilon or --k)"
        ) from None


def _weights(s: str):
    """``sex=5,region=2`` -> {"sex": 5.0, "region": 2.0}."""
    out = {}
    for part in s.split(","):
        name, eq, w = part.partition("=")
        try:
            if not eq or not name.strip():
                raise ValueError
            out[name.strip()] = float(w)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected NAME=WEIGHT pairs separated by commas, such as sex=5,region=2; got {s!r}"
            ) from None
    return out


#: Converters named by the ``"type"`` of a parameter's ``cli`` metadata.
CONVERTERS = {
    "alpha": _alpha,
    "names": csv_list,
    "cells_file": _cells_file,
    "json": _json_mapping,
    "weights": _weights,
}


def add_parameter_flags(parser: argparse.ArgumentParser, names=None) -> None:
    """One flag per parameter of :class:`~pramopt.params.DesignParams` that has ``cli`` metadata
    (only those in ``names`` when given).

    Defaults are None, so that a flag given overrides a spec's value and one left out does not.
    """
    for f in dataclasses.fields(DesignParams):
        cli = f.metadata["cli"]
        if cli is None or (names is not None and f.name not in names):
            continue
        opts = dict(cli)
        if isinstance(opts.get("type"), str):
            opts["type"] = CONVERTERS[opts["type"]]
        opts.setdefault("help", _help(f))
        opts.setdefault("dest", f.name)
        opts["default"] = None
        flags = list(f.metadata["flags"])
        if f.metadata["own_flag"]:
            flags.insert(0, "--" + f.name.replace("_", "-"))
        parser.add_argument(*flags, **opts)


def _help(f) -> str:
    text = f.metadata["doc"].split(". ")[0].rstrip(".")
    if f.default is not None and f.default is not False:
        text += f" (default {f.default})"
    return text.replace("%", "%%")


def parameters_given(args: argparse.Namespace) -> dict:
    """The design parameters given on the command line (flags left out are not in the dict)."""
    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(DesignParams)
        if f.metadata["cli"] is not None and getattr(args, f.name, None) is not None
    }


def text_keys(result) -> list:
    """The identifying variables whose design categories are text (as the command line reads a
    file), to read from a data file as the text written."""
    from ..frequency.table import text_categories

    return [q for q, cats in zip(result.table.qi, result.table.categories) if text_categories(cats)]
