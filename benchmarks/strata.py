"""Study: designs per stratum of a fixed variable, one after the other and in 2 local processes.

Census-shaped data (benchmarks/census_data.py) with ``fixed=[...]``.  Every case is run in three
modes, each in a fresh process (``--point CASE --mode MODE``):

* ``joint``: ``pramopt.design(table, alpha, fixed=F)``, the default (one joint design whose support
  forbids transitions across strata; C1's denominators span the strata);
* ``sequential``: ``workers=1``, each stratum designed on its own (C1 within the stratum, every
  combination extended by F), one after the other in the same process;
* ``parallel``: ``workers=2``, the same designs in 2 local worker processes ('spawn').

The sequential and parallel matrices must be equal (checked: ``same_as_sequential``).  Reported:
wall time of ``design`` (excluding counting), speed-up sequential / parallel, the loss of the
per-stratum design against the joint one, the peak memory of the main process and of the largest
worker process.  Timings on a shared 2-core machine are noisy: the modes of one case run back to
back, ``--repeats`` times, and the median is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ._common import max_rss_mb, run_child, write_table
from .census_data import census_data

ALPHA = 0.1
#: name -> (keys, records, fixed variables, most repeats)
POINTS = {
    "census-4k-20000-sex": (4, 20_000, ("sex",), 2),
    "census-4k-20000-region": (4, 20_000, ("region",), 3),
    "census-5k-20000-sex": (5, 20_000, ("sex",), 1),
}
QUICK = {"census-4k-2000-sex": (4, 2_000, ("sex",), 1)}
MODES = {"joint": None, "sequential": 1, "parallel": 2}


def _cpu() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def point(name: str, mode: str, matrix_out: str | None = None) -> dict:
    import pramopt

    keys, n, fixed, _ = {**POINTS, **QUICK}[name]
    load = os.getloadavg()[0]
    df = census_data(n, keys, seed=0)
    table = pramopt.frequency_table(df, list(df.columns))
    rss0 = max_rss_mb()
    t0, c0 = time.perf_counter(), _cpu()
    res = pramopt.design(table, alpha=ALPHA, fixed=list(fixed), workers=MODES[mode])
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    if matrix_out:
        import scipy.sparse as sp

        sp.save_npz(matrix_out, sp.csr_matrix(res.matrix))
    strata = res.details.get("strata", ())
    structures = (
        sorted({s["structure"] for s in strata if s["structure"]})
        if strata
        else ([res.reduction.structure] if res.reduction is not None else [])
    )
    return dict(
        case=name,
        mode=mode,
        workers=MODES[mode],
        n=table.n,
        K=table.n_cells,
        strata=int(np.unique(table.codes[:, [table.qi.index(f) for f in fixed]], axis=0).shape[0]),
        design_s=seconds,
        cpu_s=cpu,
        status=res.status.value,
        structure="+".join(structures),
        loss=res.loss,
        expected_changes=res.expected_changes,
        max_risk=res.max_risk,
        min_diagonal=res.min_diagonal,
        strata_s=[s["seconds"] for s in strata],
        load_1min=load,
        rss_after_table_mb=rss0,
        peak_rss_mb=max_rss_mb(),
        worker_peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0,
    )


def _ideal(seconds: list[float], workers: int) -> float | None:
    """Sum of the strata's design times over the makespan of the largest-first schedule on
    ``workers`` free cores: the speed-up start-up and sharing aside."""
    if not seconds:
        return None
    load = [0.0] * workers
    for t in sorted(seconds, reverse=True):
        load[load.index(min(load))] += t
    return sum(seconds) / max(load)


def run(
    out: Path,
    quick: bool = False,
    points=None,
    repeats: int | None = None,
    timeout: float | None = None,
    log=print,
) -> pd.DataFrame:
    import tempfile

    import scipy.sparse as sp

    points = points or (tuple(QUICK) if quick else tuple(POINTS))
    repeats = repeats or (1 if quick else 3)
    timeout = timeout or (300.0 if quick else 1800.0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in points:
            runs: dict[str, list[dict]] = {m: [] for m in MODES}
            for rep in range(min(repeats, {**POINTS, **QUICK}[name][3])):
                for (
                    mode
                ) in MODES:  # back to back, so that the modes of one repeat see the same load
                    log(f"[strata] {name} {mode} (run {rep + 1})")
                    args = ["benchmarks.strata", "--point", name, "--mode", mode]
                    if mode != "joint":
                        args += ["--matrix", str(Path(tmp) / f"{mode}.npz")]
                    runs[mode].append(run_child(args, timeout))
            same = None
            if all(Path(tmp, f"{m}.npz").exists() for m in ("sequential", "parallel")):
                a, b = (sp.load_npz(Path(tmp, f"{m}.npz")) for m in ("sequential", "parallel"))
                same = bool(a.shape == b.shape and (a != b).nnz == 0)
            for m in MODES:
                r = dict(runs[m][-1])
                r.setdefault("case", name)
                r.setdefault("mode", m)
                times = [x["design_s"] for x in runs[m] if "design_s" in x]
                r["design_s"] = statistics.median(times) if times else None
                r["design_s_runs"] = " ".join(f"{t:.1f}" for t in times)
                r["load_1min"] = " ".join(
                    f"{x['load_1min']:.1f}" for x in runs[m] if "load_1min" in x
                )
                r.pop("strata_s", None)
                rows.append(r)
            med = {r["mode"]: r for r in rows[-3:]}
            ideal = [_ideal(x.get("strata_s") or [], 2) for x in runs["sequential"]]
            ideal = [x for x in ideal if x is not None]
            seq, jl = med["sequential"].get("design_s"), med["joint"].get("loss")
            for r in rows[-3:]:
                r["same_as_sequential"] = same if r["mode"] == "parallel" else None
                r["speedup_vs_sequential"] = (
                    (seq / r["design_s"]) if seq and r.get("design_s") else None
                )
                r["ideal_speedup_2"] = (
                    statistics.median(ideal) if ideal and r["mode"] == "parallel" else None
                )
                r["loss_vs_joint"] = (r["loss"] / jl) if jl and r.get("loss") is not None else None
            for p in Path(tmp).glob("*.npz"):
                p.unlink()
    df = pd.DataFrame(rows)
    cols = [
        "case",
        "mode",
        "workers",
        "n",
        "K",
        "strata",
        "status",
        "structure",
        "design_s",
        "design_s_runs",
        "cpu_s",
        "load_1min",
        "speedup_vs_sequential",
        "ideal_speedup_2",
        "same_as_sequential",
        "loss",
        "loss_vs_joint",
        "expected_changes",
        "max_risk",
        "min_diagonal",
        "peak_rss_mb",
        "worker_peak_rss_mb",
    ]
    df = df[[c for c in cols if c in df.columns] + [c for c in df.columns if c not in cols]]
    notes = [
        "Data: benchmarks/census_data.py, seed 0; census-Nk-n-F: the first N keys (age, sex, region, marital, "
        "education), n records, F fixed.",
        f"joint: pramopt.design(table, alpha={ALPHA}, fixed=[F]) (the default); sequential: workers=1 (one design "
        "per stratum, C1 within the stratum, in this process); parallel: workers=2 (the same in 2 local 'spawn' "
        "processes, process start-up included).  Every other parameter is the default.",
        f"design_s: median of the runs in design_s_runs (at most {repeats}; fewer for the slow cases), each mode in "
        "a fresh process, the three modes of a repeat back to back, on a shared 2-core machine; counting excluded.  "
        "speedup_vs_sequential = sequential design_s / this design_s.  cpu_s: CPU seconds of the design (all "
        "threads and worker processes; last run).  same_as_sequential: the parallel matrix equals the sequential "
        "one exactly.",
        "ideal_speedup_2: the sequential run's strata times summed, over the makespan of the largest-first "
        "schedule of those times on 2 free cores (what 2 workers could gain, start-up and a loaded machine aside).  "
        "load_1min: the machine's 1-minute load average when each run started (2 cores; other work ran beside).",
        "loss_vs_joint: exact L2 loss / the joint design's (the per-stratum condition is stronger, so > 1 is its "
        "cost).  peak_rss_mb: main process peak (VmHWM); worker_peak_rss_mb: the largest worker process's peak "
        "(0 when none ran).",
    ]
    write_table(
        df,
        out,
        "strata",
        "Designs per stratum of a fixed variable: sequential, 2 local processes, joint",
        notes=notes,
    )
    return df


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", required=True, choices=[*POINTS, *QUICK])
    ap.add_argument("--mode", required=True, choices=list(MODES))
    ap.add_argument("--matrix", default=None, help="write the design's matrix here (.npz)")
    a = ap.parse_args(argv)
    print(json.dumps(point(a.point, a.mode, a.matrix), default=float))


if __name__ == "__main__":
    main()
