"""Study: data shaped like a census (benchmarks/census_data.py), 4 to 8 keys, most cells rare.

Every point runs ``pramopt.design(df, qi, alpha=0.1)`` with the defaults, as a new user would, in
a fresh process (``--point NAME``) with a time limit, and reports K, the rare cells, the time of
each stage, the peak memory, the loss, the expected changes and the structure chosen.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from ._common import max_rss_mb, run_child, write_table
from .census_data import census_data, register_data

ALPHA = 0.1
#: name -> (keys, records); "register" is register_data(4,000).  A "-d2" point passes
#: max_changed_variables=2 (the general design at census scale, keeping records plausible).
POINTS = {
    "census-4k-20000": (4, 20_000),
    "census-4k-20000-d2": (4, 20_000),
    "census-5k-20000": (5, 20_000),
    "census-5k-20000-d2": (5, 20_000),
    # twice the records: a general design (every diagonal entry >= 0.51) exists on 5 keys
    "census-5k-40000": (5, 40_000),
    "census-5k-40000-d2": (5, 40_000),
    "register-4000": (None, 4_000),
    "census-6k-100000": (6, 100_000),
    "census-6k-100000-d2": (6, 100_000),
    "census-7k-300000": (7, 300_000),
}
QUICK = {"census-4k-2000": (4, 2_000)}


def _data(name: str) -> pd.DataFrame:
    keys, n = {**POINTS, **QUICK}[name]
    return register_data(n, seed=0) if keys is None else census_data(n, keys, seed=0)


def _options(name: str) -> dict:
    return {"max_changed_variables": 2} if name.endswith("-d2") else {}


def _candidates(res) -> str:
    """Every candidate auto mode made: loss, expected changes, variables per changed record."""
    table = res.details.get("candidates") or {}
    return "; ".join(
        f"{k} {v['loss']:.4g} / {v['expected_changes']:.0f} / {v['variables_per_changed_record']:.2f}"
        for k, v in table.items()
    )


def _stages(stages) -> str:
    tot: dict[str, float] = {}
    for s in stages:
        key = s.name.split("@")[0].split("(")[0]
        tot[key] = tot.get(key, 0.0) + s.seconds
    return "; ".join(f"{k} {v:.1f}s" for k, v in tot.items())


def point(name: str) -> dict:
    import pramopt

    rss0 = max_rss_mb()
    df = _data(name)
    qi = list(df.columns)
    t0 = time.perf_counter()
    table = pramopt.frequency_table(df, qi)
    t_count = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = pramopt.design(table, alpha=ALPHA, **_options(name))
    t_design = time.perf_counter() - t0
    red = res.reduction.as_dict() if res.reduction is not None else {}
    rss_design = max_rss_mb()
    outputs = _outputs(res, df) if res.success else {}  # nothing to release without a design
    lb = res.details.get("expected_changes_lower_bound")
    at_floor = res.details.get("expected_changes_lower_bound_at_floor")
    floor_lb = red.get("floor_changes_bound")
    linear = red.get("linear_changes")
    return dict(
        case=name,
        keys=len(qi),
        n=table.n,
        K=table.n_cells,
        rare_cells=int((table.counts < 1 / ALPHA).sum()),
        unique_cells=int((table.counts == 1).sum()),
        count_s=t_count,
        design_s=t_design,
        status=res.status.value,
        structure=red.get("structure"),
        loss=res.loss,
        expected_changes=res.expected_changes,
        max_risk=res.max_risk,
        min_diagonal=res.min_diagonal,
        condition_number=res.condition_number,
        entries=int(res.matrix.nnz),
        changes_lower_bound=lb,
        bound_combinations=res.details.get("lower_bound_combinations"),
        changes_over_bound=(res.expected_changes / lb) if lb else None,
        bound_floor=res.details.get("bound_floor"),
        changes_bound_at_floor=at_floor,
        changes_over_floor_bound=(res.expected_changes / at_floor) if at_floor else None,
        variables_per_changed_record=res.details.get("changed_variables", {}).get("mean"),
        linear_changes=linear,
        floor_changes_bound=floor_lb,
        linear_over_floor_bound=(linear / floor_lb) if linear and floor_lb else None,
        candidates=_candidates(res),
        loss_lower_bound=res.details.get("loss_lower_bound"),
        loss_over_bound=(res.loss / res.details["loss_lower_bound"])
        if res.details.get("loss_lower_bound")
        else None,
        rss_after_import_mb=rss0,
        peak_rss_design_mb=rss_design,
        **outputs,
        peak_rss_mb=max_rss_mb(),
        stages=_stages(res.stages),
    )


def _outputs(res, df: pd.DataFrame) -> dict:
    """What follows the design, as ``pramopt design`` and ``pramopt release`` do it: the summary,
    the files (design.json, matrix.csv), the HTML and Markdown report, and the release of every
    record; timed one by one (nothing of it may cost K x K)."""
    import tempfile

    import pramopt
    from pramopt.io import write_text
    from pramopt.report import from_result, render_html, render_markdown

    t = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res.summary()
        t["summary_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        pramopt.save_design(res, tmp)
        t["save_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rd = from_result(res, "census")
        write_text(render_html(rd), Path(tmp) / "report.html")
        write_text(render_markdown(rd), Path(tmp) / "report.md")
        t["report_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        pramopt.release(df, res, seed=1)
        t["release_s"] = time.perf_counter() - t0
    return t


def run(
    out: Path,
    quick: bool = False,
    points=None,
    timeout: float | None = None,
    log=print,
    name: str = "census",
) -> pd.DataFrame:
    """Every point (or ``points``) in a fresh process; the table is saved as ``name``."""
    points = points or (tuple(QUICK) if quick else tuple(POINTS))
    timeout = timeout or (120.0 if quick else 1800.0)
    rows = []
    for case in points:
        log(f"[census] {case}")
        r = run_child(["benchmarks.census", "--point", case], timeout)
        r.setdefault("case", case)
        rows.append(r)
    df = pd.DataFrame(rows)
    notes = [
        "Data: benchmarks/census_data.py, seed 0.  census-Nk-n: the first N keys of age (18 bands), sex, region "
        "(40, Zipf-sized), marital status (5), education (8), employment (4), citizenship (3), household size (6), "
        "drawn with the dependencies of a real population; register-4000: occupation 182 x sex 2 x "
        "municipality 60 x contract 4 on 4,000 records.",
        f"pramopt.design(table, alpha={ALPHA}) with every default (all combinations of 3 keys), one run per case "
        f"in a fresh process with a {timeout:g} s limit; design_s excludes counting (count_s).",
        "stages: seconds per stage (summed over repeats of one kind): floor bound = the flow relaxation, "
        "phase1 = phase one of the general design, replacement / blocks / linear / refine = the structures tried.",
        "peak_rss_mb: the case's process peak resident memory (VmHWM), after the outputs; peak_rss_design_mb: "
        "the same right after the design; rss_after_import_mb: right after imports.",
        "summary_s, save_s (design.json and matrix.csv), report_s (HTML and Markdown), release_s (every record, "
        "in memory): what follows the design, timed one by one.",
        "changes_lower_bound: no design meeting C1 changes fewer records in expectation (the flow relaxation over "
        "the rows of bound_combinations of the combinations, see pramopt.optimize.relaxation); changes_over_bound: "
        "the design's expected changes over it (1 would be proven optimal in changes).",
        "bound_floor: the design's smallest diagonal entry, rounded down to 4 decimals; changes_bound_at_floor: "
        "no design meeting C1 with every diagonal entry >= bound_floor changes fewer records (the same "
        "relaxation with every out_k <= (1 - bound_floor) U0(k)); changes_over_floor_bound: the design's "
        "expected changes over it.",
        "-d2 points: max_changed_variables=2.  variables_per_changed_record: the identifying values a changed "
        "record has altered, in expectation.  linear_changes: the general design's expected changes at the end of "
        "its linear stage (fewest changes); floor_changes_bound: the proven lower bound on the expected changes of "
        "every design meeting C1 with every diagonal entry >= its floor (0.51) and the same permitted transitions "
        "(the best Lagrangian bound of the linear stage's rounds, shifted from the solve level to alpha); "
        "linear_over_floor_bound: their ratio.  candidates: every structure auto mode made, as loss / expected "
        "changes / variables per changed record.",
        "loss_lower_bound: changes_lower_bound / n^2, below the exact L2 loss of every general, replacement or "
        "block design meeting C1 (pramopt.optimize.relaxation.loss_bound); loss_over_bound: the design's loss over "
        "it (the design is at most this factor from the best of those designs).",
    ]
    write_table(df, out, name, "Designs on data shaped like a census", notes=notes)
    return df


def flows_point(keys: int, n: int, d: int, warm: bool = True, phase_one: bool = True) -> dict:
    """The edge-flow program alone (``pramopt.optimize.edge_flows``) at floor 0.51 on the problem
    the designer builds for ``census_data(n, keys)`` under ``max_changed_variables=d``: its
    rounds' solver seconds, optimum and bound, with one grown model (``warm``) or a program
    rebuilt every round, with or without phase one first."""
    import pramopt
    import pramopt.optimize.edge_flows as EF
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem
    from pramopt.params import DesignParams

    df = census_data(n, keys, seed=0)
    t = pramopt.frequency_table(df, list(df.columns))
    params = DesignParams(alpha=ALPHA, structure="general", max_changed_variables=d)
    pb = DesignProblem.build(t, resolve_combinations(t.qi, 3, None, "t"), params, "design")
    pairs = pb.allowed_pairs(30_000_000)
    assert pairs is not None  # 9.8 million on 6 keys
    EF.PHASE_ONE = phase_one
    t0 = time.perf_counter()
    f = EF.edge_flows(pb, 0.51, pairs, warm=warm)
    return dict(
        keys=keys, n=n, d=d, K=pb.K, pairs=int(pairs[0].size), warm=warm, phase_one=phase_one,
        status=f.status, changes=f.changes, bound=f.bound, no_solution=f.no_solution,
        rounds=f.rounds, seconds=time.perf_counter() - t0, rounds_s=[round(x, 1) for x in f.seconds],
    )  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", choices=[*POINTS, *QUICK])
    ap.add_argument("--flows", help="KEYS,N,D[,cold][,penalised]: the edge-flow program alone")
    a = ap.parse_args(argv)
    if a.flows:
        k, n, d, *opts = a.flows.split(",")
        out = flows_point(int(k), int(n), int(d), "cold" not in opts, "penalised" not in opts)
        print(json.dumps(out, default=float))
        return
    print(json.dumps(point(a.point), default=float))


if __name__ == "__main__":
    main()
