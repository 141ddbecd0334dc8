"""What the commands share: progress on stderr, common options, writing a design folder."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..io import atomic_dir, save_design, write_text
from ..report import ReportData, from_result, render_html, render_markdown

PROG = "pramopt"


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
        print(f"{PROG}: [{now - self.t0:7.1f} s] {stage:<7} iteration {iteration:4d}  loss {loss:.6g}  "
              f"worst violation/radius {worst:.4g}", file=self.stream, flush=True)


def csv_list(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError("expected a comma-separated list of column names")
    return out


def formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)


def add_data_options(p, *, required: bool, combos: bool = True, alpha: bool = True):
    p.add_argument("--data", required=required, metavar="FILE", help="microdata: .csv, .parquet or .pq")
    p.add_argument("--qi", type=csv_list, required=required, metavar="A,B,C",
                   help="identifying variables, comma-separated")
    if alpha:
        p.add_argument("--alpha", type=float, default=None, help="C1 security level α in (0, 1) (default 0.1)")
    if combos:
        p.add_argument("--combination-size", "--combinations", dest="combination_size", type=int, default=None,
                       metavar="SIZE", help="Π = every subset of SIZE identifying variables (default 3)")
        p.add_argument("--combination", dest="combinations", type=csv_list, action="append", default=None,
                       metavar="A,B", help="one explicit combination of Π (repeat the option for more)")


def add_quiet(p):
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or summary output")


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


def write_outputs(out, result, title: str, kind: str = "design", extra: dict | None = None,
                  report: ReportData | None = None) -> Path:
    """design.json, matrix.csv and the reports, built in a temporary folder then renamed."""
    rd = report if report is not None else from_result(result, title)
    with atomic_dir(out) as tmp:
        save_design(result, tmp, kind=kind, extra=extra)
        write_text(render_html(rd), tmp / "report.html")
        write_text(render_markdown(rd), tmp / "report.md")
    return Path(out)
