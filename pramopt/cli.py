"""The ``pramopt`` command line: design, release, assess, baseline, estimate, sensitivity.

Exit codes: 0 on success, 1 for a design that failed (its status is not ``success``, or a
spec's expected figures were missed under ``--check``), 2 for bad input (the reason on stderr,
no traceback), 130 when interrupted (Ctrl-C); nothing partial is ever written, because every
file is written to a temporary name and renamed (a design folder is built next to its target).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from . import io as pio
from ._validation import InvalidParameterError, PramoptError
from .report import ReportData, from_result, render_html, render_markdown

PROG = "pramopt"


# ---------------------------------------------------------------------------------------------
# Progress on stderr
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Shared options
# ---------------------------------------------------------------------------------------------

def _csv_list(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError("expected a comma-separated list of column names")
    return out


def _add_data_options(p, *, required: bool, combos: bool = True):
    p.add_argument("--data", required=required, metavar="FILE", help="microdata: .csv, .parquet or .pq")
    p.add_argument("--qi", type=_csv_list, required=required, metavar="A,B,C",
                   help="identifying variables, comma-separated")
    p.add_argument("--alpha", type=float, default=None, help="C1 security level α in (0, 1) (default 0.1)")
    if combos:
        p.add_argument("--combinations", type=int, default=None, metavar="SIZE",
                       help="Π = every subset of SIZE identifying variables (default 3)")
        p.add_argument("--combination", type=_csv_list, action="append", default=None, metavar="A,B",
                       help="one explicit combination of Π (repeat the option for more)")


def _add_quiet(p):
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or summary output")


def _formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pramopt`` command."""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_formatter,
        description="Optimal PRAM matrices under the C1 disclosure-risk bound of Cator, Hensbergen & Rozenholc.",
        epilog="Run 'pramopt COMMAND --help' for the options and an example of each command.\n"
               "Exit codes: 0 success, 1 failed design, 2 bad input, 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "design", formatter_class=_formatter, help="design an optimal PRAM matrix",
        description="Design a PRAM matrix of minimal exact L2 loss under C1 and write it, with a report, "
                    "to a folder.\nWith no arguments it designs the built-in example (Section 4 of "
                    "Cator et al.).",
        epilog="examples:\n"
               "  pramopt design --out example-design\n"
               "  pramopt design models/testdata4.toml --out td4\n"
               "  pramopt design --data survey.csv --qi region,sex,age5 --alpha 0.1 --fixed region --out d\n\n"
               "The folder gets design.json (read back by release, assess and estimate), matrix.csv\n"
               "(from_*, to_*, probability), report.html and report.md.")
    p.add_argument("spec", nargs="?", metavar="SPEC.toml", help="a design spec (see models/)")
    _add_data_options(p, required=False)
    p.add_argument("--gamma", type=float, default=None, help="diagonal floor the reduction relies on (default 0.95)")
    p.add_argument("--min-diagonal", type=float, default=None, help="hard floor on every P_mm, never lowered")
    p.add_argument("--fixed", type=_csv_list, default=None, metavar="A,B",
                   help="identifying variables that must never change (PRAM within strata)")
    p.add_argument("--invariant", action="store_true", default=None, help="require U0ᵀP = U0ᵀ")
    p.add_argument("--solver", default=None, help="a cvxpy solver name (default: HIGHS, then fall-backs)")
    p.add_argument("--support", choices=["auto", "dense", "targets"], default=None, help="allowed transitions")
    p.add_argument("--max-iter", type=int, default=None, help="most refinement iterations (default 100)")
    p.add_argument("--out", metavar="DIR", default=None, help="output folder (default: design-NAME)")
    p.add_argument("--check", action="store_true",
                   help="with a spec: exit 1 if the spec's expected figures are missed")
    _add_quiet(p)
    p.set_defaults(func=cmd_design)

    p = sub.add_parser(
        "release", formatter_class=_formatter, help="perturb the identifying columns with a design",
        description="Draw every record's released identifying values from its cell's row of the design.\n"
                    "Refuses a design that failed verification, was edited, or was made for other data\n"
                    "(other cells or counts).",
        epilog="example:\n  pramopt release --design td4 --data testdata.csv --out released.parquet --seed 1")
    p.add_argument("--design", required=True, metavar="DIR", help="design folder (or its design.json)")
    p.add_argument("--data", required=True, metavar="FILE", help="the microdata the design was made for")
    p.add_argument("--out", required=True, metavar="FILE", help="released microdata: .csv, .parquet or .pq")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for a reproducible draw (default: from the OS's secure source)")
    _add_quiet(p)
    p.set_defaults(func=cmd_release)

    p = sub.add_parser(
        "assess", formatter_class=_formatter, help="risk report of any PRAM matrix on a data set",
        description="Side-by-side risk and utility of a matrix: C1 risk, Pk-anonymity k, ε-DP, R1,\n"
                    "expected changes, exact L2 loss.  The matrix may be a pramopt design folder, a long\n"
                    "CSV/Parquet (from_<var>, to_<var>, probability) or a square one (the identifying\n"
                    "variables, then one probability column per cell in the rows' order), e.g. from sdcMicro.",
        epilog="examples:\n"
               "  pramopt assess --matrix td4 --data testdata.csv --qi urbrur,roof,walls,water --alpha 0.1\n"
               "  pramopt assess --matrix sdcmicro.csv --data testdata.csv --qi urbrur,roof --out report-dir")
    p.add_argument("--matrix", required=True, metavar="FILE", help="design folder, long or square matrix file")
    _add_data_options(p, required=True)
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write report.html, report.md and assessment.json to this folder")
    p.add_argument("--json", action="store_true", help="print the assessment as JSON")
    _add_quiet(p)
    p.set_defaults(func=cmd_assess)

    p = sub.add_parser(
        "baseline", formatter_class=_formatter, help="closed-form designs calibrated to meet C1",
        description="A closed-form PRAM family tuned to just meet C1 at α on the data, with the same\n"
                    "outputs as 'design':\n"
                    "  rr         retention-replacement (one ρ, or one per variable with --per-attribute)\n"
                    "  ifpr       IFPR of Ghatak & Roy on the present cells\n"
                    "  invariant  sdcMicro-style invariant PRAM (re-implemented)",
        epilog="example:\n  pramopt baseline rr --data testdata.csv --qi urbrur,roof,walls,water --alpha 0.1 --out rr")
    p.add_argument("family", choices=["rr", "ifpr", "invariant"], help="the closed-form family")
    _add_data_options(p, required=True)
    p.add_argument("--per-attribute", action="store_true", help="rr: one retention probability per variable")
    p.add_argument("--seed", type=int, default=0, help="invariant: seed of the random diagonals (default 0)")
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    _add_quiet(p)
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser(
        "estimate", formatter_class=_formatter, help="unbiased frequency estimates from released data",
        description="Estimate the original cell frequencies from released data (Cator et al., eq. (4)),\n"
                    "optionally jointly with other categorical columns.",
        epilog="example:\n  pramopt estimate --design td4 --data released.csv --by hhcivil --out estimates.csv")
    p.add_argument("--design", required=True, metavar="DIR", help="design folder (or its design.json)")
    p.add_argument("--data", required=True, metavar="FILE", help="released microdata")
    p.add_argument("--by", type=_csv_list, default=None, metavar="A,B", help="non-identifying columns to cross with")
    p.add_argument("--out", metavar="FILE", default=None, help=".csv, .parquet or .pq (default: CSV on stdout)")
    p.set_defaults(func=cmd_estimate)

    from .tables import add_sensitivity_parser
    add_sensitivity_parser(sub)
    return parser


def _version() -> str:
    from . import __version__
    return __version__


def _say(args, *lines):
    if not getattr(args, "quiet", False):
        for line in lines:
            print(line)


# ---------------------------------------------------------------------------------------------
# design and baseline
# ---------------------------------------------------------------------------------------------

def _combos_kw(args) -> dict:
    kw = {}
    if getattr(args, "combination", None):
        kw["combinations"] = args.combination
    if getattr(args, "combinations", None) is not None:
        kw["combination_size"] = args.combinations
    return kw


def _write_outputs(out, result, title: str, kind: str = "design", extra: dict | None = None,
                   report: ReportData | None = None) -> Path:
    """design.json, matrix.csv and the reports, built in a temporary folder then renamed."""
    rd = report if report is not None else from_result(result, title)
    with pio.atomic_dir(out) as tmp:
        pio.save_design(result, tmp, kind=kind, extra=extra)
        pio.write_text(render_html(rd), tmp / "report.html")
        pio.write_text(render_markdown(rd), tmp / "report.md")
    return Path(out)


def cmd_design(args) -> int:
    from .design import design
    from .example import EXAMPLE_QI, example_data
    from .spec import check_expected, design_kwargs, load_spec

    spec = None
    if args.spec is not None:
        if args.data is not None:
            raise InvalidParameterError("Give either a spec or --data, not both.")
        spec = load_spec(args.spec)
        df, qi, kw, name = spec.load_data(), list(spec.qi), design_kwargs(spec), spec.name
        if args.qi is not None:
            qi = args.qi
    elif args.data is not None:
        if args.qi is None:
            raise InvalidParameterError("--data needs --qi (the identifying variables).")
        # the design only needs the frequency table: count the file in record batches
        from .stream import count_table
        df, qi, kw, name = count_table(args.data, args.qi, owner="design"), args.qi, {}, Path(args.data).stem
    else:
        if args.qi is not None:
            raise InvalidParameterError("--qi needs --data (or a spec).")
        df, qi, kw, name = example_data(), list(EXAMPLE_QI), {"alpha": 0.1}, "example"
    # options given on the command line override the spec's
    for key, val in (("alpha", args.alpha), ("gamma", args.gamma), ("min_diagonal", args.min_diagonal),
                     ("fixed", args.fixed), ("invariant", args.invariant), ("solver", args.solver),
                     ("support", args.support), ("max_iter", args.max_iter)):
        if val is not None:
            kw[key] = val
    ckw = _combos_kw(args)
    if ckw:
        kw.pop("combinations", None)
        kw.pop("combination_size", None)
        kw.update(ckw)
    out = Path(args.out if args.out is not None else f"design-{name}")
    _check_out_dir(out)
    progress = None if args.quiet else Progress()
    result = design(df, qi, progress=progress, **kw)
    title = f"pramopt design: {name}" + (f" ({spec.paper})" if spec is not None and spec.paper else "")
    extra = {"spec": str(spec.path), "name": spec.name, "paper": spec.paper} if spec is not None else {"name": name}
    _write_outputs(out, result, title, extra=extra)
    _say(args, result.summary(), f"written to {out}/ (design.json, matrix.csv, report.html, report.md)")
    code = 0 if result.success else 1
    if spec is not None and spec.expected:
        fig = {"max_risk": result.max_risk, "loss": result.loss, "expected_changes": result.expected_changes,
               "min_diagonal": result.min_diagonal, "condition_number": result.condition_number,
               "n": result.n, "cells": len(result.counts)}
        misses = check_expected(spec, fig, result.status.value)
        if misses:
            print(f"{PROG}: expected figures of {spec.path} missed: " + "; ".join(misses), file=sys.stderr)
            if args.check:
                code = 1
        elif not args.quiet:
            print(f"expected figures of {spec.path.name}: all met")
    return code


def _check_out_dir(out: Path):
    """Fail early (before a long solve) on an output folder that cannot be written."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidParameterError(f"Cannot write {str(out)!r}: the folder {str(parent)!r} does not exist.")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / pio.DESIGN_FILE).is_file())):
        raise InvalidParameterError(f"Refusing to replace {str(out)!r}: it is not a design folder.")


def _binding(rep, table, combos, alpha) -> pd.DataFrame:
    rows = []
    for ci, (risk, k0s) in enumerate(zip(rep.risk_by_group, rep.groups_by_combination)):
        for g in np.flatnonzero(risk >= alpha * (1 - 1e-4)):
            rows.append({"combination": ",".join(table.qi[i] for i in combos[ci]),
                         "k0": tuple(table.categories[i][k0s[g, j]] for j, i in enumerate(combos[ci])),
                         "risk": float(risk[g])})
    return pd.DataFrame(rows, columns=["combination", "k0", "risk"]).sort_values(
        "risk", ascending=False, ignore_index=True)


def cmd_baseline(args) -> int:
    from .closed_form.baselines import calibrate_ifpr, calibrate_retention, calibrate_sdcmicro
    from .combinations import resolve_combinations
    from .data import frequency_table
    from .loss import condition_number
    from .result import DesignResult, Stage, Status
    from .verify import c1_risk

    df = pio.read_table(args.data)
    table = frequency_table(df, args.qi, owner="baseline")
    alpha = 0.1 if args.alpha is None else args.alpha
    ckw = _combos_kw(args)
    combos = resolve_combinations(table.qi, ckw.get("combination_size", 3), ckw.get("combinations"), "baseline")
    _check_out_dir(Path(args.out))
    t0 = time.perf_counter()
    if args.family == "rr":
        cb = calibrate_retention(table, combos, alpha, per_attribute=args.per_attribute)
    elif args.family == "ifpr":
        cb = calibrate_ifpr(table, combos, alpha)
    else:
        cb = calibrate_sdcmicro(table, combos, alpha, seed=args.seed)
    secs = time.perf_counter() - t0
    P = np.asarray(cb.matrix, dtype=float)
    rep = c1_risk(P, table.codes, table.counts, combos)  # independent check, as for design
    status = Status.SUCCESS if rep.max_risk <= alpha else Status.INFEASIBLE
    msg = (f"Closed-form {cb.family} calibrated to meet C1 at alpha = {alpha:g}; parameters "
           f"{json.dumps(pio._plain(dict(cb.parameters)))[:300]}.")
    if status is not Status.SUCCESS:
        msg += f" No member of the family meets C1 on these data (best max risk {rep.max_risk:.6g})."
    result = DesignResult(
        matrix=P, cells=table.cells(), counts=table.counts.copy(), status=status, loss=cb.loss,
        expected_changes=cb.expected_changes, max_risk=float(rep.max_risk),
        min_diagonal=float(np.min(np.diag(P))), gamma=None, binding=_binding(rep, table, combos, alpha),
        reduction={}, solver=f"closed form ({cb.family})",
        stages=(Stage("calibrate", secs, cb.evaluations, f"{cb.evaluations} C1 evaluations"),),
        condition_number=condition_number(P), message=msg, alpha=alpha, qi=table.qi,
        combinations=tuple(tuple(table.qi[i] for i in c) for c in combos),
        params={"family": cb.family, **pio._plain(dict(cb.parameters))}, table=table)
    _write_outputs(args.out, result, f"pramopt baseline: {cb.family}", kind=f"baseline-{cb.family}")
    _say(args, result.summary(), f"written to {args.out}/")
    return 0 if result.success else 1


# ---------------------------------------------------------------------------------------------
# release and estimate
# ---------------------------------------------------------------------------------------------

def load_checked_design(path):
    """Load a design and re-verify C1 on its own cells and counts (refuse anything unsafe)."""
    from .release import DesignMismatchError
    from .verify import c1_risk

    res = pio.load_design(path)
    if not res.success:
        raise DesignMismatchError(
            f"The design {str(path)!r} has status {res.status.value!r}: it did not pass the C1 verification, "
            "so it is not safe to release with.")
    qi = list(res.qi)
    combos = [tuple(qi.index(v) for v in c) for c in res.combinations]
    rep = c1_risk(res.matrix, res.table.codes, res.table.counts, combos)
    if not rep.max_risk <= res.alpha:
        raise DesignMismatchError(
            f"The design {str(path)!r} fails C1 when checked again (max risk {rep.max_risk:.6g} > "
            f"alpha {res.alpha:g}); refusing it.")
    return res


def cmd_release(args) -> int:
    from .release import DesignMismatchError, release

    res = load_checked_design(args.design)
    pio._check_out(args.out)
    if _same_format(args.data, args.out):
        # stream the file in record batches: checked against the design in the same pass
        from .stream import release_file
        rel = release_file(args.data, args.out, res, seed=args.seed)
        _say(args, f"released {rel.n} records to {args.out}: {rel.changed} changed "
                   f"(expected {res.expected_changes:.4g}).")
        return 0
    # CSV to Parquet or back: in memory, with pandas' types
    df = pio.read_table(args.data)
    table = pio.table_for_design(df, res)
    if table.checksum() != res.table.checksum():
        raise DesignMismatchError(
            f"The design {args.design!r} was made for other data: the cells or counts of {args.data!r} "
            f"over {', '.join(res.qi)} differ (n = {table.n} vs {res.n}, {table.n_cells} vs "
            f"{res.table.n_cells} cells).")
    out = release(df, res, seed=args.seed)
    pio.write_table(out, args.out)
    changed = int((out[list(res.qi)].astype(str) != df[list(res.qi)].astype(str)).any(axis=1).sum())
    _say(args, f"released {len(out)} records to {args.out}: {changed} changed "
               f"(expected {res.expected_changes:.4g}).")
    return 0


def _same_format(src, dst) -> bool:
    """True when both files are CSV or both Parquet (by extension)."""
    kind = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
    a, b = kind.get(Path(src).suffix.lower()), kind.get(Path(dst).suffix.lower())
    return a is not None and a == b


def cmd_estimate(args) -> int:
    from .release import estimate

    res = pio.load_design(args.design)
    df = pio.read_table(args.data)
    est = estimate(df, res, by=args.by)
    if args.out is None:
        sys.stdout.write(est.to_csv(index=False))
    else:
        pio.write_table(est, args.out)
    return 0


# ---------------------------------------------------------------------------------------------
# assess
# ---------------------------------------------------------------------------------------------

def cmd_assess(args) -> int:
    from .assess import _cell_codes, assess
    from .combinations import resolve_combinations
    from .data import frequency_table

    df = pio.read_table(args.data)
    P, cells = pio.read_matrix(args.matrix, args.qi, data=df)
    ckw = _combos_kw(args)
    a = assess(df, P, qi=args.qi, cells=cells, combinations=ckw.get("combinations"),
               combination_size=ckw.get("combination_size", 3), alpha=args.alpha)
    if args.json:
        print(json.dumps(pio._plain(a.to_dict()), indent=1))
    else:
        _say(args, a.summary())
    if args.out is not None:
        table = frequency_table(df, args.qi, owner="assess")
        combos = resolve_combinations(table.qi, ckw.get("combination_size", 3), ckw.get("combinations"), "assess")
        col_codes = _cell_codes(table, cells, "assess")
        lookup = {tuple(r): i for i, r in enumerate(col_codes.tolist())}
        rows = np.array([lookup[tuple(r)] for r in table.codes.tolist()], dtype=np.int64)
        d = a.to_dict()
        figures = {"records n": a.n_records, "present cells": a.n_present, "matrix size": a.n_cells,
                   "combinations |Π|": a.n_combinations, "α": a.alpha, "max C1 risk": a.max_risk,
                   "meets C1": d["meets_c1"], "Pk-anonymity k": a.k, "ε-DP": a.epsilon,
                   "max R1(1, T)": a.r1_max, "expected changes": a.expected_changes,
                   "exact L2 loss": a.loss, "invariance error": a.invariance_error,
                   "condition number": a.condition_number}
        lab = [", ".join(map(str, r)) for r in cells.itertuples(index=False)]
        rd = ReportData(title=f"pramopt assessment: {Path(args.matrix).name}", matrix=P[rows],
                        table=table, combinations=combos, alpha=a.alpha, figures=figures,
                        col_codes=col_codes, diag=P[rows, rows], col_labels=lab)
        out = Path(args.out)
        with pio.atomic_dir(out) as tmp:
            pio.write_text(json.dumps(pio._plain(d), indent=1), tmp / "assessment.json")
            pio.write_text(render_html(rd), tmp / "report.html")
            pio.write_text(render_markdown(rd), tmp / "report.md")
        if not args.quiet:  # on stderr, so that --json output stays parseable
            print(f"report written to {out}/ (report.html, report.md, assessment.json)", file=sys.stderr)
    return 0 if (a.meets_c1 is None or a.meets_c1) else 1


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    """Entry point of the ``pramopt`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing was written.", file=sys.stderr)
        return 130
    except PramoptError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
