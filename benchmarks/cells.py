"""Study: many cells.  Each case runs in a fresh process (``--case NAME``) so that its
peak resident memory is its own.

* ``testdata7``: sdcMicro's testdata, 7 key variables, alpha = 0.1 (target: verified < 60 s).
* ``zipf5000``: synthetic Zipf register with more than 5,000 present cells (target: < 10 min, < 8 GiB).
* ``hard``: 182 x 2 x 60 x 4 categories drawn uniformly on 4,000 records, almost all unique.
* ``gap-*``: the restricted (cover + column generation) design against the dense-support design
  on cases where both can be solved: loss and expected changes of both, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from ._common import REPO, max_rss_mb, reduction_of, run_child, write_table

ALPHA = 0.1
TESTDATA = REPO.parent / "shared" / "data" / "testdata.csv"
TD7 = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]


def _data(case: str):
    from pramopt.example import EXAMPLE_QI, example_data
    from pramopt.spec import zipf_data

    if case in ("testdata7", "gap-testdata4", "gap-testdata7"):
        df = pd.read_csv(TESTDATA)
        return df, (TD7 if case != "gap-testdata4" else ["urbrur", "roof", "walls", "water"])
    if case == "zipf5000":
        return zipf_data(n=40000, seed=11, levels=[16, 12, 8, 6], exponent=1.1), [
            "z1",
            "z2",
            "z3",
            "z4",
        ]
    if case == "hard":
        return zipf_data(n=4000, seed=1, levels=[182, 2, 60, 4], exponent=0.0), [
            "z1",
            "z2",
            "z3",
            "z4",
        ]
    if case == "gap-example":
        return example_data(), list(EXAMPLE_QI[:5])
    if case == "gap-zipf":
        return zipf_data(n=3000, seed=7, levels=[6, 5, 4, 3], exponent=1.2), [
            "z1",
            "z2",
            "z3",
            "z4",
        ]
    if case == "quick":
        return zipf_data(n=800, seed=3, levels=[30, 2, 12, 3], exponent=0.0), [
            "z1",
            "z2",
            "z3",
            "z4",
        ]
    raise ValueError(case)


def _summary(res) -> dict:
    return dict(
        status=res.status.value,
        success=bool(res.success),
        loss=res.loss,
        expected_changes=res.expected_changes,
        max_risk=res.max_risk,
        min_diagonal=res.min_diagonal,
        gamma=res.gamma,
        condition_number=res.condition_number,
        structure=reduction_of(res).get("structure", "general"),
        support=reduction_of(res).get("support"),
        priced=reduction_of(res).get("priced_transitions"),
        stages="; ".join(f"{s.name} {s.seconds:.1f}s" for s in res.stages),
    )


def point(case: str) -> dict:
    import pramopt

    rss0 = max_rss_mb()
    df, qi = _data(case)
    table = pramopt.frequency_table(df, qi)
    out = dict(case=case, K=table.n_cells, n=table.n, unique_cells=int((table.counts == 1).sum()))
    if case.startswith("gap-"):
        for sup in ("dense", "cover"):
            t0 = time.perf_counter()
            res = pramopt.design(table, alpha=ALPHA, support=sup)
            out[f"{sup}_s"] = time.perf_counter() - t0
            out[f"{sup}_loss"] = res.loss
            out[f"{sup}_changes"] = res.expected_changes
            out[f"{sup}_success"] = bool(res.success)
            out[f"{sup}_support"] = reduction_of(res).get("support")
        out["loss_ratio_cover_over_dense"] = out["cover_loss"] / out["dense_loss"]
    else:
        t0 = time.perf_counter()
        res = pramopt.design(table, alpha=ALPHA)
        out["design_s"] = time.perf_counter() - t0
        out.update(_summary(res))
    out["rss_after_import_mb"] = rss0
    out["peak_rss_mb"] = max_rss_mb()
    return out


CASES = (
    "testdata7",
    "zipf5000",
    "hard",
    "gap-example",
    "gap-zipf",
    "gap-testdata4",
    "gap-testdata7",
)


def run(out: Path, quick: bool = False, log=print):
    rows = []
    for case in ("quick",) if quick else CASES:
        if case.startswith("gap-testdata") or case == "testdata7":
            if not TESTDATA.exists():
                log(f"cells: {case} skipped ({TESTDATA} missing)")
                continue
        log(f"cells: {case}")
        r = run_child(["benchmarks.cells", "--case", case], timeout=60 if quick else 1800)
        r.setdefault("case", case)
        rows.append(r)
        log(f"cells: {case} -> {r.get('design_s', r.get('cover_s'))} s, {r.get('status', '')}")
    df = pd.DataFrame(rows)
    notes = [
        f"alpha = {ALPHA}, combinations of 3 variables, defaults otherwise; each case in a fresh process.",
        "peak_rss_mb: VmHWM of the case's process (import alone: rss_after_import_mb).",
    ]
    gap = df["case"].str.startswith("gap-") if "case" in df else pd.Series(False, index=df.index)
    design_cols = [
        "case",
        "K",
        "n",
        "unique_cells",
        "design_s",
        "status",
        "loss",
        "expected_changes",
        "max_risk",
        "min_diagonal",
        "gamma",
        "condition_number",
        "structure",
        "support",
        "priced",
        "peak_rss_mb",
        "rss_after_import_mb",
        "stages",
    ]
    write_table(
        df.loc[~gap, [c for c in design_cols if c in df]],
        out,
        "cells_quick" if quick else "cells",
        "Many cells",
        notes=notes
        + [
            "design_s: pramopt.design on the frequency table (wall clock, one run); stages: where it went."
        ],
    )
    if gap.any():
        gap_cols = ["case", "K", "n"] + [
            f"{s}_{f}"
            for s in ("dense", "cover")
            for f in ("s", "loss", "changes", "success", "support")
        ]
        write_table(
            df.loc[
                gap,
                [c for c in gap_cols + ["loss_ratio_cover_over_dense", "peak_rss_mb"] if c in df],
            ],
            out,
            "cells_gap",
            "Restricted (cover) against full (dense) support",
            notes=notes
            + [
                "support='dense': every pair of cells; support='cover': the diagonal plus the greedy cover "
                "of the problem groups, widened by column generation on the LP duals and on the exact "
                "loss's gradient. *_s: wall clock of each design, one run."
            ],
        )
    return df


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    a = ap.parse_args(argv)
    print(json.dumps(point(a.case), default=float))


if __name__ == "__main__":
    main()
