"""``python -m benchmarks [study ...] [--quick] [--out DIR]``

Studies: optimal_vs_closed, peers, solvers, scaling, records, figures, cells, census, refine, refine_models, strata,
privacy_design, changed_variables, frontier, households, optimality, reliability, advise, per_variable,
per_variable_compare, auto_testdata (default: all, in that order).
``--quick`` runs tiny cases (what the smoke test uses); results go to benchmarks/results/ by default.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from ._common import RESULTS

STUDIES = (
    "optimal_vs_closed",
    "peers",
    "solvers",
    "scaling",
    "records",
    "figures",
    "cells",
    "census",
    "structures",
    "refine",
    "refine_models",
    "strata",
    "privacy_design",
    "changed_variables",
    "frontier",
    "households",
    "optimality",
    "reliability",
    "advise",
    "per_variable",
    "per_variable_compare",
    "auto_testdata",
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "studies",
        nargs="*",
        choices=[*STUDIES, []],
        metavar="study",
        help=f"any of {', '.join(STUDIES)} (default: all)",
    )
    ap.add_argument("--quick", action="store_true", help="tiny cases only")
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default benchmarks/results)"
    )
    a = ap.parse_args(argv)
    out = a.out or RESULTS
    out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")

    def log(msg):
        print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    for name in a.studies or STUDIES:
        t0 = time.perf_counter()
        mod = __import__(f"benchmarks.{name}", fromlist=["run"])
        mod.run(out, quick=a.quick, log=log)
        log(f"== {name} done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
