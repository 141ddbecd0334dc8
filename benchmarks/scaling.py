"""Study 3: design time and peak memory against the number of cells K; counting and release
time against the number of records n.  Every point runs in a fresh process (``--cells K`` or
``--records n``) so that its peak resident memory (``ru_maxrss``) is its own; the process's
memory right after the imports is reported as well, and the slope is fitted to the difference.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ._common import (
    max_rss_mb,
    records_data,
    reduction_of,
    run_child,
    timed,
    write_table,
    zipf_cells,
)

CELLS = (50, 100, 200, 400, 800, 1600, 3200, 5000)
RECORDS = (10_000, 100_000, 1_000_000, 10_000_000)
#: The rare-heavy range of the K series (almost every cell rare, 20 combinations), with a slope of its own.
RARE_RANGE = (800, 3200)
ALPHA = 0.1


def _stage_groups(stages) -> dict:
    out = {
        "model_s": 0.0,
        "phase1_s": 0.0,
        "reduce_s": 0.0,
        "linear_s": 0.0,
        "refine_s": 0.0,
        "verify_s": 0.0,
    }
    for s in stages:
        key = s.name.split("@")[0] + "_s"
        if key in out:
            out[key] += s.seconds
    return out


def cells_point(K: int, repeats: int = 3, budget: float = 30.0) -> dict:
    import pramopt

    rss0 = max_rss_mb()
    df = zipf_cells(K, n_vars=6, levels=6, seed=2)
    qi = list(df.columns)
    table, t_count, _ = timed(lambda: pramopt.frequency_table(df, qi), repeats=3, budget=5)
    res, t_design, runs = timed(
        lambda: pramopt.design(table, alpha=ALPHA), repeats=repeats, budget=budget
    )
    out = dict(
        K=table.n_cells,
        n=table.n,
        n_vars=len(qi),
        rare_cells=int((table.counts < 1 / ALPHA).sum()),
        count_s=t_count,
        design_s=t_design,
        runs=runs,
        success=bool(res.success),
        status=res.status.value,
        gamma=res.gamma,
        structure=reduction_of(res).get("structure"),
        solver=res.solver,
        support=reduction_of(res).get("support"),
        support_mode=reduction_of(res).get("support_mode"),
        working_set=reduction_of(res).get("final_working_set"),
        loss=res.loss,
        rss_after_import_mb=rss0,
        peak_rss_mb=max_rss_mb(),
    )
    out.update(_stage_groups(res.stages))
    return out


def records_point(n: int) -> dict:
    import pramopt

    rss0 = max_rss_mb()
    df = records_data(n, seed=0)
    qi = list(df.columns)
    rss_data = max_rss_mb()
    reps = 3 if n <= 1_000_000 else 1
    table, t_count, runs = timed(lambda: pramopt.frequency_table(df, qi), repeats=reps, budget=60)
    t0 = time.perf_counter()
    res = pramopt.design(table, alpha=ALPHA)
    t_design = time.perf_counter() - t0
    _, t_release, runs_r = timed(lambda: pramopt.release(df, res, seed=1), repeats=reps, budget=60)
    return dict(
        n=n,
        K=table.n_cells,
        count_s=t_count,
        count_runs=runs,
        design_s=t_design,
        success=bool(res.success),
        release_s=t_release,
        release_runs=runs_r,
        rss_after_import_mb=rss0,
        rss_with_data_mb=rss_data,
        peak_rss_mb=max_rss_mb(),
    )


def slope(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def run(
    out: Path,
    quick: bool = False,
    cells=None,
    records=None,
    timeout: float | None = None,
    log=print,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    cells = cells or ((30, 60, 120) if quick else CELLS)
    records = records or ((1_000, 10_000, 100_000) if quick else RECORDS)
    timeout = timeout or (60.0 if quick else 600.0)  # a 10-minute target per design
    rows, stopped = [], None
    for K in cells:
        log(f"[scaling] K={K}")
        r = run_child(["benchmarks.scaling", "--cells", str(K)], timeout)
        r.setdefault("K", K)
        rows.append(r)
        if "design_s" not in r:
            stopped = f"K = {K}: {r.get('status')}"
            log(f"[scaling] stop: {stopped}")
            break
    kdf = pd.DataFrame(rows)
    nrows = []
    for n in records:
        log(f"[scaling] n={n}")
        r = run_child(["benchmarks.scaling", "--records", str(n)], timeout)
        r.setdefault("n", n)
        nrows.append(r)
    ndf = pd.DataFrame(nrows)
    ok = (
        kdf[kdf.get("design_s", pd.Series(dtype=float)).notna()]
        if "design_s" in kdf
        else kdf.iloc[:0]
    )
    big = ok[ok.K >= 100] if (ok.K >= 100).sum() >= 2 else ok
    mem = (big.peak_rss_mb - big.rss_after_import_mb) if len(big) else pd.Series(dtype=float)
    slopes = {
        "design time vs K": slope(big.K, big.design_s) if len(big) else np.nan,
        "linear stage vs K": slope(big.K, big.linear_s) if len(big) else np.nan,
        "refine vs K": slope(big.K, big.refine_s) if len(big) else np.nan,
        "peak memory above imports vs K": slope(big.K, mem) if len(big) else np.nan,
    }
    # the rare-heavy part of the series, where no general design exists (the structure changes below it)
    rare = ok[(ok.K >= RARE_RANGE[0]) & (ok.K <= RARE_RANGE[1])]
    if len(rare) >= 2:
        slopes[f"design time vs K, {RARE_RANGE[0]:,} <= K <= {RARE_RANGE[1]:,}"] = slope(
            rare.K, rare.design_s
        )
        slopes[f"peak memory above imports vs K, {RARE_RANGE[0]:,} <= K <= {RARE_RANGE[1]:,}"] = (
            slope(rare.K, rare.peak_rss_mb - rare.rss_after_import_mb)
        )
    if "count_s" in ndf:
        nn = ndf[ndf.n >= 100_000] if (ndf.n >= 100_000).sum() >= 2 else ndf
        slopes["counting vs n"] = slope(nn.n, nn.count_s)
        slopes["release vs n"] = slope(nn.n, nn.release_s)
        slopes["peak memory vs n"] = slope(nn.n, nn.peak_rss_mb - nn.rss_after_import_mb)
    notes = [
        "Fitted log-log slopes (K >= 100 unless a range is named, n >= 100,000): "
        + "; ".join(f"{k}: {v:.2f}" for k, v in slopes.items())
        + ".",
        "Synthetic data (benchmarks/_common.py): zipf_cells(K, seed=2) -- exactly K present cells of 6 "
        "variables with 6 categories each (the same product space for every K), Zipf-like counts max(1, round(500 / rank^1.1)); alpha = 0.1, every 3-variable combination.",
        "design_s: median of `runs` runs of pramopt.design (up to 3, fewer once 30 s are spent); the *_s stage "
        "columns are from the last run (model, phase one, reduce, linear stage incl. lazy rounds, refinement, "
        "final verification); count_s: frequency_table.",
        "peak_rss_mb: the point's process peak resident memory (VmHWM); rss_after_import_mb: the same right "
        "after importing pramopt, cvxpy, numpy, pandas.",
        f"Each point runs in its own process with a {timeout:g} s limit; the K series stops at the first point that "
        "does not finish"
        + (f" (stopped at {stopped})." if stopped else " (every point finished)."),
    ]
    write_table(
        kdf,
        out,
        "scaling_cells",
        "Design time and memory against the number of cells K",
        notes=notes,
    )
    write_table(
        ndf,
        out,
        "scaling_records",
        "Counting, design and release time against the number of records n",
        notes=[
            notes[0],
            "Synthetic data: records_data(n, seed=0) -- 4 variables with 3, 3, 4, 6 categories, Zipf-like "
            "marginals, 6 planted records in 3 rare cells so that C1 binds at every n.",
            "count_s: frequency_table; release_s: pramopt.release of the whole frame; medians of 3 runs "
            "up to n = 1,000,000, one run at 10,000,000.",
            "peak_rss_mb includes the generated DataFrame (rss_with_data_mb) and release's copy of it.",
        ],
    )
    sl = pd.DataFrame([{"quantity": k, "slope": v} for k, v in slopes.items()])
    write_table(
        sl,
        out,
        "scaling_slopes",
        "Fitted log-log slopes",
        notes=notes[:1] + [notes[-1]],
        floatfmt=".3f",
    )
    return kdf, ndf


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int)
    ap.add_argument("--records", type=int)
    a = ap.parse_args(argv)
    r = cells_point(a.cells) if a.cells else records_point(a.records)
    print(json.dumps(r, default=float))


if __name__ == "__main__":
    main()
