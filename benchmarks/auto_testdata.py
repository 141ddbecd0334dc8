"""Study: auto mode's time and loss on sdcMicro's testdata, with the general design refined from a
verified design of another structure (``start``) against the general design from phase one and
the linear stage (``phase-one``), in the same run.

``python -m benchmarks.auto_testdata [--repeats N] [--out DIR]`` (about 6 minutes on a shared
2-core machine).  Each point runs in a fresh
process (``--point CASE RULE``); the rules alternate case by case so that all see the same
load.  ``phase-one`` is auto mode with the start rule switched off
(``general_start.START_MIN_CELLS`` above the table's cells), which is auto mode as it was;
``start-faer`` is ``start`` with the refinement's QPs factorised by Clarabel's default choice (faer)
instead of QDLDL, ``start-whole`` is ``start`` with every row of those QPs imposed from the start
(``qp_rows.SLACK`` infinite).

* ``testdata7``: testdata, 7 keys (412 cells), alpha = 0.1: the case the rule is for.
* ``testdata4``: testdata, 4 keys (30 cells): below ``START_MIN_CELLS``, unchanged.
* ``zipf302``: the 302-cell Zipf table of ``benchmarks.cells`` (``gap-zipf``): just above it.

Recorded per point: wall and CPU seconds (CPU time is the steadier figure on a shared machine),
status, loss and structure returned, the full C1 check's largest risk, and every candidate's
loss and changed identifying values (``details["candidates"]``), with the stages' seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from ._common import RESULTS, TESTDATA, max_rss_mb, run_child, write_table

ALPHA = 0.1
KEYS7 = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]
KEYS4 = ["urbrur", "roof", "walls", "sex"]
CASES = ("testdata7", "testdata4", "zipf302")
RULES = ("phase-one", "start-faer", "start-whole", "start")


def _data(case: str):
    if case == "zipf302":
        from pramopt.spec import zipf_data

        return zipf_data(n=3000, seed=7, levels=[6, 5, 4, 3], exponent=1.2), [
            "z1",
            "z2",
            "z3",
            "z4",
        ]
    df = pd.read_csv(TESTDATA)
    return df, (KEYS7 if case == "testdata7" else KEYS4)


def point(case: str, rule: str) -> dict:
    """One auto-mode design of ``case`` under ``rule``, timed in this process."""
    import pramopt
    from pramopt.optimize.strategies import general_start

    if rule == "phase-one":
        general_start.START_MIN_CELLS = 10**9
    if rule == "start-faer":
        from pramopt.optimize.backends import clarabel_qp

        clarabel_qp.KKT_METHOD = "auto"  # Clarabel's own choice: faer
    if rule == "start-whole":
        from pramopt.optimize.backends import qp_rows

        qp_rows.SLACK = float("inf")  # every row of every QP from the start
    df, qi = _data(case)
    table = pramopt.frequency_table(df, qi)
    c0, t0 = time.process_time(), time.perf_counter()
    res = pramopt.design(table, alpha=ALPHA)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = dict(case=case, rule=rule, K=table.n_cells, wall_s=wall, cpu_s=cpu)
    out.update(status=res.status.value, loss=res.loss, max_risk=res.max_risk)
    out["structure"] = res.reduction.structure if res.reduction is not None else None
    for name, fig in (res.details.get("candidates") or {}).items():
        out[f"{name}_loss"] = fig["loss"]
        out[f"{name}_changed_values"] = fig["changed_values"]
    secs: dict[str, float] = {}
    for s in res.stages:
        # the block design's own stages under one name, the general design's under theirs
        name = "blocks" if "blocks" in s.name else s.name.split("@")[0]
        if name in ("phase1", "linear", "reduce", "refine", "replacement", "retentions", "blocks"):
            secs[name] = secs.get(name, 0.0) + s.seconds
    out["stages"] = "; ".join(f"{k} {v:.1f}s" for k, v in secs.items())
    out["peak_rss_mb"] = max_rss_mb()
    return out


def run(out: Path = RESULTS, quick: bool = False, log=print, repeats: int = 1) -> pd.DataFrame:
    """Every case under every rule (``quick``: the 30-cell case only, into its own table)."""
    rows = []
    for case in ("testdata4",) if quick else CASES:
        if case.startswith("testdata") and not TESTDATA.exists():
            log(f"auto_testdata: {case} skipped ({TESTDATA} missing)")
            continue
        for i in range(repeats):
            for rule in RULES if i % 2 == 0 else RULES[::-1]:
                r = run_child(["benchmarks.auto_testdata", "--point", case, rule], timeout=1800)
                r.setdefault("case", case)
                r.setdefault("rule", rule)
                r.pop("wall", None)  # the child's whole process; wall_s is the design's
                rows.append(r)
                log(f"auto_testdata: {case} {rule} -> {r.get('cpu_s')} s CPU, loss {r.get('loss')}")
    df = pd.DataFrame(rows)
    write_table(
        df,
        out,
        "auto_testdata_quick" if quick else "auto_testdata",
        "Auto mode: the general design from a verified start against phase one",
        notes=[
            f"alpha = {ALPHA}, combinations of 3 variables, defaults otherwise; each point in a "
            "fresh process, the rules alternating.",
            "rule phase-one: the general design from phase one and the linear stage (auto mode "
            "before the start rule); start: refined from the best verified structure that needs "
            "no floor when its diagonal clears a rung of the floor's ladder (above 300 cells); "
            "start-faer: the same with the refinement's QPs factorised by Clarabel's default "
            "(faer) instead of QDLDL; start-whole: the same with every row of those QPs "
            "imposed from the start.",
            "cpu_s: the process's CPU seconds of pramopt.design (every thread); wall_s: wall "
            "clock on a shared 2-core machine; stages: seconds per stage of the design.",
            "*_loss, *_changed_values: each candidate's figures as the result reports them.",
        ],
        floatfmt=".6g",
    )
    return df


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", nargs=2, metavar=("CASE", "RULE"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    if a.point:
        print(json.dumps(point(*a.point), default=float))
    else:
        run(a.out, repeats=a.repeats)


if __name__ == "__main__":
    main()
