"""The optimal per-variable design against sdcMicro's ``pram()`` calibrated to the same alpha.

Both are measured as released, over the product space of the categories (C1 with every
combination a released cell, by the independent check of :mod:`pramopt.per_variable.check`; the
exact L2 loss over the product space).  sdcMicro's matrices are its own algorithm
(:func:`pramopt.baselines.product_space.sdcmicro_matrices`), its two knobs (pd, alpha_pram)
calibrated by bisection to the smallest perturbation meeting C1 at each pd, the smallest loss kept
(:func:`pramopt.per_variable.compare.calibrate_sdcmicro_product`).

Studies:

* ``testdata``: sdcMicro's testdata with 4 keys (roof, walls, water, sex; and urbrur, roof, walls,
  sex) and 7 keys, alpha 0.1, every triple: loss, ratio to sdcMicro's, expected changes, values
  changed per changed record, time; the joint design (``pramopt.design``, auto) beside them on the
  4-key sets (a different mechanism: records move only among present cells).
* ``multistart``: on the 4-key problems, the design's loss (its two deterministic starts and four
  seeded random ones) against the best of 16 other random feasible starts (a random target
  distribution and t per variable, scaled by bisection to meet C1), each followed by the same
  descent.
* ``epsilon``: at equal epsilon (no C1), the per-variable design against per-attribute
  retention-replacement with one common retention (Ikarashi et al., Algorithm 2).
* ``census``: census-shaped data, 8 keys, 1,000,000 records (``--quick``: 5 keys, 20,000), in a
  fresh process: wall time and peak memory of the verified design.

``python -m benchmarks per_variable`` runs all four; ``python -m benchmarks.per_variable census
1000000`` runs the census case alone and prints its JSON.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pandas as pd

import pramopt
from pramopt.params import DesignParams
from pramopt.per_variable.compare import calibrate_sdcmicro_product
from pramopt.per_variable.designer import Problem, improve, random_start

from ._common import TESTDATA, TESTDATA_KEYS4, TESTDATA_KEYS7, max_rss_mb, run_child, write_table

ALPHA = 0.1
KEY_SETS = {
    "testdata 4 (roof, walls, water, sex)": ["roof", "walls", "water", "sex"],
    "testdata 4 (urbrur, roof, walls, sex)": TESTDATA_KEYS4,
    "testdata 7": TESTDATA_KEYS7,
}


def _testdata(quick: bool, log) -> pd.DataFrame:
    df = pd.read_csv(TESTDATA)
    rows = []
    for name, qi in KEY_SETS.items():
        if quick and len(qi) > 4:
            continue
        t0 = time.perf_counter()
        res = pramopt.design(df, qi, alpha=ALPHA, structure="per_variable")
        t_pv = time.perf_counter() - t0
        t0 = time.perf_counter()
        sdc = calibrate_sdcmicro_product(res.table, res.combination_indices, ALPHA)
        t_sdc = time.perf_counter() - t0
        row = {
            "data": name,
            "records": res.n,
            "present cells": len(res.table.counts),
            "product space": int(np.prod([len(c) for c in res.table.categories])),
            "per-variable success": res.success,
            "per-variable max risk": res.max_risk,
            "per-variable loss": res.loss,
            "per-variable changes": res.expected_changes,
            "per-variable values per changed record": res.changed_variables,
            "per-variable seconds": t_pv,
            "sdcMicro pd": sdc.pd if sdc else None,
            "sdcMicro alpha_pram": sdc.alpha_pram if sdc else None,
            "sdcMicro max risk": sdc.max_risk if sdc else None,
            "sdcMicro loss": sdc.loss if sdc else None,
            "sdcMicro changes": sdc.expected_changes if sdc else None,
            "sdcMicro seconds": t_sdc,
            "loss ratio (per-variable / sdcMicro)": res.loss / sdc.loss if sdc else None,
        }
        if len(qi) <= 4 and not quick:
            t0 = time.perf_counter()
            joint = pramopt.design(df, qi, alpha=ALPHA)
            row["joint loss (present cells)"] = joint.loss
            row["joint changes"] = joint.expected_changes
            row["joint seconds"] = time.perf_counter() - t0
        rows.append(row)
        log(f"per_variable {name}: loss {res.loss:.4g} vs sdcMicro {row['sdcMicro loss']}")
    return pd.DataFrame(rows)


def _multistart(quick: bool, log, starts: int = 16) -> pd.DataFrame:
    df = pd.read_csv(TESTDATA)
    rows = []
    sets = {k: v for k, v in KEY_SETS.items() if len(v) <= 4}
    for name, qi in sets.items():
        res = pramopt.design(df, qi, alpha=ALPHA, structure="per_variable")
        params = DesignParams.from_options("design", alpha=ALPHA, structure="per_variable")
        pb = Problem(res.table, res.combination_indices, range(len(qi)), params)
        rng = np.random.default_rng(12345)  # not the designer's own seed
        losses = []
        for _ in range(2 if quick else starts):
            start = random_start(pb, rng)
            if start is not None:
                losses.append(improve(pb, start)[1])
        best = min(losses) if losses else np.nan
        rows.append(
            {
                "data": name,
                "design loss": res.loss,
                "random starts": len(losses),
                "best of random starts": best,
                "median of random starts": float(np.median(losses)) if losses else np.nan,
                "design / best": res.loss / best,
            }
        )
        log(f"per_variable multistart {name}: {res.loss:.4g} vs best {best:.4g}")
    return pd.DataFrame(rows)


def _epsilon(quick: bool, log) -> pd.DataFrame:
    """At equal epsilon (no C1): the per-variable design against per-attribute retention-
    replacement with one common retention rho (Ikarashi et al., Algorithm 2)."""
    from pramopt.baselines.retention import retention_matrix, rho_from_epsilon
    from pramopt.per_variable.model import loss_value
    from pramopt.risk.dp_pk_anonymity import dp_epsilon_product

    df = pd.read_csv(TESTDATA)
    rows = []
    for name, qi in KEY_SETS.items():
        if len(qi) > 4 and quick:
            continue
        for eps in (2.0, 4.0) if not quick else (4.0,):
            t0 = time.perf_counter()
            res = pramopt.design(df, qi, alpha=None, epsilon=eps, structure="per_variable")
            secs = time.perf_counter() - t0
            levels = [len(c) for c in res.table.categories]
            rho = rho_from_epsilon(eps, levels)
            rr = [retention_matrix(L, rho) for L in levels]
            rr_loss = loss_value(res.table.codes, np.asarray(res.table.counts, float), rr)
            rows.append(
                {
                    "data": name,
                    "epsilon": eps,
                    "per-variable success": res.success,
                    "per-variable epsilon": res.epsilon,
                    "per-variable loss": res.loss,
                    "per-variable seconds": secs,
                    "retention rho": rho,
                    "retention epsilon": dp_epsilon_product(rr),
                    "retention loss": rr_loss,
                    "loss ratio (per-variable / retention)": res.loss / rr_loss,
                }
            )
            log(f"per_variable epsilon {name} {eps}: {res.loss:.4g} vs retention {rr_loss:.4g}")
    return pd.DataFrame(rows)


def census_case(n: int, keys: int = 8) -> dict:
    """One census-shaped design in this process: time, peak memory and figures."""
    from .census_data import census_data

    df = census_data(n, keys=keys)
    qi = list(df.columns[:keys])
    t0 = time.perf_counter()
    res = pramopt.design(df, qi, alpha=ALPHA, structure="per_variable")
    wall = time.perf_counter() - t0
    return {
        "status": res.status.value,
        "records": n,
        "keys": keys,
        "present cells": len(res.table.counts),
        "product space": int(np.prod([len(c) for c in res.table.categories])),
        "seconds (design + verification)": wall,
        "verification seconds": next(
            (s.seconds for s in res.stages if s.name == "independent check"), None
        ),
        "peak memory MiB": max_rss_mb(),
        "max risk": res.max_risk,
        "loss": res.loss,
        "expected changes": res.expected_changes,
        "values per changed record": res.changed_variables,
    }


def run(out, quick=False, log=print):
    notes = [
        f"alpha {ALPHA}, every triple of the keys; both mechanisms as released over the product "
        "space, C1 by the independent check, exact L2 loss over the product space.",
        "joint: pramopt.design (auto) on the present cells, a different mechanism, for reference.",
    ]
    td = _testdata(quick, log)
    write_table(td, out, "per_variable", "Optimal per-variable PRAM vs calibrated sdcMicro", notes)
    ms = _multistart(quick, log)
    write_table(
        ms, out, "per_variable_multistart", "Per-variable design vs the best of random starts"
    )
    ep = _epsilon(quick, log)
    write_table(
        ep,
        out,
        "per_variable_epsilon",
        "Per-variable design under epsilon vs retention-replacement at equal epsilon",
        ["alpha None (epsilon only); both as released over the product space."],
    )
    n, keys = (20_000, 5) if quick else (1_000_000, 8)
    r = run_child(["benchmarks.per_variable", "census", str(n), str(keys)], timeout=900)
    log(f"per_variable census {n}: {r}")
    write_table(
        pd.DataFrame([r]), out, "per_variable_census", "Per-variable design on census-shaped data"
    )


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "census":
        print(json.dumps(census_case(int(sys.argv[2]), *(int(x) for x in sys.argv[3:]))))
