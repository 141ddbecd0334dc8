"""``pramopt assess``: every risk notion and the utility of any PRAM matrix on a data set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from .._plain import plain
from ..errors import InvalidParameterError
from ..io import atomic_dir, read_matrix, read_table, write_text
from ..io.matrices import is_design, read_design
from ..report import ReportData, render_html, render_markdown
from ._common import (
    add_data_options,
    add_force,
    add_quiet,
    check_output,
    combos_kw,
    dialect_of,
    formatter,
    say,
)

HELP = "risk report of any PRAM matrix on a data set"

#: The file that marks an assessment folder (one that --force may replace; a design folder is not).
ASSESSMENT_FILE = "assessment.json"


def add_parser(sub):
    p = sub.add_parser(
        "assess",
        formatter_class=formatter,
        help=HELP,
        description="Side-by-side risk and utility of a matrix: "
        "C1 risk, Pk-anonymity k, ε-DP, R1,\n"
        "expected changes, exact L2 loss.  The matrix may be a pramopt design folder, a long\n"
        "CSV/Parquet (from_<var>, to_<var>, probability) or a square one (the identifying\n"
        "variables, then one probability column per cell, matched by label), e.g. from sdcMicro.\n"
        "One matrix per variable (sdcMicro's pram(), mu-ARGUS): --matrix VAR=FILE for each;\n"
        "they are combined over every combination of categories, as those tools release, and\n"
        "the variables of --qi without a matrix are released unchanged.",
        epilog="examples:\n"
        "  pramopt assess --matrix td4 --data testdata.csv "
        "--qi urbrur,roof,walls,water --alpha 0.1\n"
        "  pramopt assess --matrix sdcmicro.csv --data "
        "testdata.csv --qi urbrur,roof --out report-dir\n"
        "  pramopt assess --matrix roof=Mroof.csv "
        "--matrix walls=Mwalls.csv --data testdata.csv \\\n"
        "                 --qi urbrur,roof,walls",
    )
    p.add_argument(
        "--matrix",
        required=True,
        action="append",
        metavar="FILE|VAR=FILE",
        help="design folder, long or square matrix file; or VAR=FILE, repeated, one square matrix "
        "per variable (rows and columns labelled by its categories)",
    )
    add_data_options(p, required=True)
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="write report.html, report.md and assessment.json to this folder",
    )
    p.add_argument("--json", action="store_true", help="print the assessment as JSON")
    p.add_argument(
        "--renormalize",
        type=float,
        default=None,
        metavar="TOL",
        help="accept rows summing to within TOL of 1 (a rounded matrix) and renormalise them",
    )
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..frequency.combinations import resolve_combinations
    from ..frequency.table import frequency_table
    from ..risk.assessment import _cell_codes, assess

    if args.out is not None:
        check_output(args, args.out, folder=ASSESSMENT_FILE)
    per_variable = _per_variable_files(args)
    df = read_table(
        args.data, text=args.qi, dialect=dialect_of(args)
    )  # identifying values as written
    if per_variable is not None:
        return _run_per_variable(args, df, per_variable)
    design = read_design(args.matrix[0], args.qi) if is_design(args.matrix[0]) else None
    if design is not None:  # a design made on recoded data: the data recoded as for it
        from ..publish.recoded import recoded_frame

        df = recoded_frame(df, design)
    if design is not None and design.form is not None and args.renormalize is None:
        # kept as parameters: assessed from them, and reported from its sparse matrix
        P, cells = design, design.cells
    elif design is not None:
        P, cells = design.to_dense(), design.cells
    else:
        P, cells = read_matrix(args.matrix[0], args.qi, data=df)
    if args.renormalize is not None:  # once, so that the report shows the matrix assessed
        from .._validation import as_transition_matrix, check_real

        tol = check_real(
            args.renormalize, "renormalize", "assess", low=0.0, high=0.1, high_open=False
        )
        P = as_transition_matrix(P, "matrix", "assess", renormalize=tol)
    ckw = combos_kw(args)
    a = assess(
        df,
        P,
        qi=args.qi,
        cells=cells,
        combinations=ckw.get("combinations"),
        combination_size=ckw.get("combination_size", 3),
        alpha=args.alpha,
        renormalize=args.renormalize,
    )
    if args.json:
        print(json.dumps(plain(a.to_dict()), indent=1))
    else:
        say(args, a.summary())
    if args.out is not None:
        table = frequency_table(df, args.qi, owner="assess")
        combos = resolve_combinations(
            table.qi, ckw.get("combination_size", 3), ckw.get("combinations"), "assess"
        )
        col_codes = _cell_codes(table, cells, "assess")
        lookup = {tuple(r): i for i, r in enumerate(col_codes.tolist())}
        rows = np.array([lookup[tuple(r)] for r in table.codes.tolist()], dtype=np.int64)
        d = a.to_dict()
        figures = _figures(a, d)
        sparse = design is not None and P is design
        # a design's sparse matrix, never made dense
        M = design.matrix if design is not None and sparse else P
        rd = ReportData(
            title=f"pramopt assessment: {Path(args.matrix[0]).name}",
            matrix=M[rows],
            table=table,
            combinations=combos,
            alpha=a.alpha,
            figures=figures,
            col_codes=col_codes,
            diag=M.diagonal()[rows] if sparse else P[rows, rows],
            col_cells=cells,
        )
        _write(args, d, rd)
    return 0 if (a.meets_c1 is None or a.meets_c1) else 1


def _figures(a, d) -> dict:
    return {
        "records n": a.n_records,
        "present cells": a.n_present,
        "matrix size": a.n_cells,
        "combinations |Π|": a.n_combinations,
        "α": a.alpha,
        "max C1 risk": a.max_risk,
        "meets C1": d["meets_c1"],
        "Pk-anonymity k": a.k,
        "ε-DP": a.epsilon,
        "max R1(1, T)": a.r1_max,
        "expected changes": a.expected_changes,
        "exact L2 loss": a.loss,
        "invariance error": a.invariance_error,
        "condition number": a.condition_number,
    }


def _write(args, d: dict, rd: ReportData) -> None:
    out = Path(args.out)
    with atomic_dir(out, ASSESSMENT_FILE, force=args.force) as tmp:
        write_text(json.dumps(plain(d), indent=1), tmp / ASSESSMENT_FILE)
        write_text(render_html(rd), tmp / "report.html")
        write_text(render_markdown(rd), tmp / "report.md")
    if not args.quiet:  # on stderr, so that --json output stays parseable
        print(
            f"report written to {out}/ (report.html, report.md, assessment.json)", file=sys.stderr
        )


def _per_variable_files(args) -> dict | None:
    """``{variable: file}`` when every --matrix is VAR=FILE, None for one matrix file (refused:
    a mix, a variable twice, a variable not in --qi)."""

    def split(v):
        name, sep, path = v.partition("=")
        return (
            (name.strip(), path)
            if sep and name.strip() in args.qi and not Path(v).exists()
            else None
        )

    parts = [split(v) for v in args.matrix]
    if all(p is None for p in parts):
        if len(args.matrix) > 1:
            raise InvalidParameterError(
                f"--matrix is given {len(args.matrix)} times: give one matrix file, or one "
                f"VAR=FILE per variable (VAR among --qi {args.qi!r}); got {args.matrix!r}."
            )
        return None
    bad = [v for v, p in zip(args.matrix, parts) if p is None]
    if bad:
        raise InvalidParameterError(
            f"--matrix must be VAR=FILE for every matrix when one is (VAR among --qi {args.qi!r}); "
            f"got {bad!r}."
        )
    names = [p[0] for p in parts]
    twice = sorted({q for q in names if names.count(q) > 1})
    if twice:
        raise InvalidParameterError(f"--matrix names each variable once; {twice!r} given twice.")
    return dict(parts)


def _run_per_variable(args, df, files: dict) -> int:
    """One matrix per variable, combined over the product space of the categories."""
    import pandas as pd
    import scipy.sparse as sp

    from ..baselines.product_space import (
        assess_per_variable,
        per_variable_matrices,
        product_space_codes,
        released_rows,
    )
    from ..frequency.combinations import resolve_combinations
    from ..frequency.table import frequency_table

    tol = None
    if args.renormalize is not None:
        from .._validation import check_real

        tol = check_real(
            args.renormalize, "renormalize", "assess", low=0.0, high=0.1, high_open=False
        )
    matrices = {}
    for q, f in files.items():
        M, cells = read_matrix(f, [q], data=df)  # labels matched to the data's categories
        if tol is not None:  # once, so that the report shows the matrices assessed
            from .._validation import as_transition_matrix

            M = as_transition_matrix(M, f"matrix of {q}", "assess", renormalize=tol)
        lab = pd.Index(cells[q].tolist(), dtype=object)
        matrices[q] = pd.DataFrame(M, index=lab, columns=lab)
    ckw = combos_kw(args)
    table = frequency_table(df, args.qi, owner="assess")
    a = assess_per_variable(
        table,
        matrices,
        combinations=ckw.get("combinations"),
        combination_size=ckw.get("combination_size", 3),
        alpha=args.alpha,
    )
    if args.json:
        print(json.dumps(plain(a.to_dict()), indent=1))
    else:
        say(args, a.summary())
    if args.out is not None:
        mats, extras = per_variable_matrices(table, matrices, "assess")
        levels = [M.shape[0] for M in mats]
        cols = product_space_codes(levels)
        R = released_rows(table.codes, mats, cols)
        present = np.ravel_multi_index(tuple(table.codes.T), levels)
        labels = [list(c) + e for c, e in zip(table.categories, extras)]
        col_cells = pd.DataFrame(
            {q: np.array(labels[j], dtype=object)[cols[:, j]] for j, q in enumerate(table.qi)}
        )
        combos = resolve_combinations(
            table.qi, ckw.get("combination_size", 3), ckw.get("combinations"), "assess"
        )
        d = a.to_dict()
        figures = _figures(a, d)
        figures["released as absent combinations"] = a.released_absent
        title = "pramopt assessment: " + ", ".join(f"{q}={Path(f).name}" for q, f in files.items())
        rd = ReportData(
            title=title,
            matrix=sp.csr_array(R),
            table=table,
            combinations=combos,
            alpha=a.alpha,
            figures=figures,
            col_codes=cols,
            diag=R[np.arange(len(present)), present],
            col_cells=col_cells,
        )
        _write(args, d, rd)
    return 0 if (a.meets_c1 is None or a.meets_c1) else 1
