"""Study: how many identifying values a changed record has altered, and what limiting it costs.

On sdcMicro's testdata (7 keys, alpha = 0.1) and on the built-in example, for
``max_changed_variables`` = unrestricted, 3, 2 and 1, and with ``change_weights`` (sex = 5 on
testdata, v5 = 5 on the example): the status, the exact L2 loss, the expected number of changed
records, the mean number of identifying variables changed per changed record (expected, from P and
U0), the expected number of records whose weighted variable changes, and the time.  Infeasible
points give the smallest max_changed_variables the flow relaxation allows.  Saves
``changed_variables.csv/.md`` and ``changed_variables.png`` (loss and mean changed variables
against d).  ``run_census`` does the same on the 4-key census sample (``census_data(20000, 4)``)
with the general design forced at every d (``changed_variables_census.csv/.md``), beside auto
mode's replacement design.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from ._common import TESTDATA, TESTDATA_KEYS7, write_table

ALPHA = 0.1
LIMITS = (None, 3, 2, 1)


def _cases(quick: bool):
    from pramopt.example import EXAMPLE_QI, example_data

    yield "example", example_data(), list(EXAMPLE_QI), "v5"
    if not quick and TESTDATA.exists():
        yield "testdata (7 keys)", pd.read_csv(TESTDATA), list(TESTDATA_KEYS7), "sex"


def run(out: Path, quick: bool = False, log=print, limits=LIMITS) -> pd.DataFrame:
    import pramopt

    rows = []
    for name, df, qi, heavy in _cases(quick):
        table = pramopt.frequency_table(df, qi)
        points: list = [(d, None) for d in limits] + [(None, {heavy: 5.0})]
        if not quick:
            points.append((2, {heavy: 5.0}))
        for d, weights in points:
            t0 = time.perf_counter()
            res = pramopt.design(
                table, alpha=ALPHA, max_changed_variables=d, change_weights=weights
            )
            secs = time.perf_counter() - t0
            cv = res.details["changed_variables"]
            ok = res.success
            rows.append(
                {
                    "data": name,
                    "max_changed_variables": "none" if d is None else d,
                    "change_weights": ""
                    if not weights
                    else ",".join(f"{k}={v:g}" for k, v in weights.items()),
                    "status": res.status.value,
                    "loss": res.loss if ok else np.nan,
                    "expected_changes": res.expected_changes if ok else np.nan,
                    "mean_vars_changed": cv["mean"] if ok else np.nan,
                    "largest_vars_changed": cv["max"] if ok else np.nan,
                    "changes_of_weighted_var": cv["per_variable"][heavy] if ok else np.nan,
                    "weighted_var": heavy,
                    "share_1_var": cv["distribution"].get(1, 0.0) if ok else np.nan,
                    "smallest_feasible_d": res.details.get("smallest_max_changed_variables"),
                    "time_s": secs,
                    "structure": res.reduction.structure if res.reduction else "",
                }
            )
            log(
                f"{name} d={d} weights={weights}: {res.status.value}, loss {res.loss:.4g}, "
                f"changes {res.expected_changes:.4g}, mean vars {cv['mean']:.3g}, {secs:.1f} s"
            )
    table = pd.DataFrame(rows)
    write_table(
        table,
        out,
        "changed_variables",
        f"Changed variables per changed record: max_changed_variables and change_weights (alpha = {ALPHA})",
        notes=[
            "mean_vars_changed: sum_k U0_k sum_{l!=k} P_kl ham(k,l) / sum_k U0_k (1 - P_kk), expected.",
            "changes_of_weighted_var: expected records whose value of weighted_var changes.",
            "smallest_feasible_d: for an infeasible point, the smallest max_changed_variables the flow "
            "relaxation of C1 allows a diagonal floor >= 0.51 with.",
            "Times on a shared 2-CPU machine.",
        ],
    )
    _figure(table, out)
    return table


def _figure(table: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = table[table.change_weights.fillna("") == ""].copy()
    order = ["1", "2", "3", "none"]  # the same x for a limit in every data set
    t["x"] = [order.index(str(v)) for v in t.max_changed_variables]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, g in t.groupby("data", sort=False):
        base = g[g.x == order.index("none")].loss.iloc[0]
        g = g[g.status == "success"].sort_values("x")
        axes[0].plot(g.x, g.loss / base, "o-", label=name)
        axes[1].plot(g.x, g.mean_vars_changed, "o-", label=name)
    for a in axes:
        a.set_xticks(range(len(order)), order)
    axes[0].set_xlabel("max_changed_variables")
    axes[0].set_ylabel("L2 loss / unrestricted loss")
    axes[1].set_xlabel("max_changed_variables")
    axes[1].set_ylabel("mean variables changed per changed record")
    for a in axes:
        a.legend()
        a.grid(alpha=0.3)
    fig.suptitle(f"Limiting the changed variables (alpha = {ALPHA}; infeasible points left out)")
    fig.tight_layout()
    fig.savefig(out / "changed_variables.png", dpi=120)
    plt.close(fig)


#: The census sample's points: (max_changed_variables, change_weights, structure).
CENSUS_POINTS = (
    (None, None, "auto"),
    (2, None, "general"),
    (2, {"sex": 5.0}, "general"),
    (1, None, "general"),
    (3, None, "general"),
    (4, None, "general"),
)


def census_points(keys: int) -> tuple:
    """:data:`CENSUS_POINTS` for ``keys`` keys: d from 1 to all of them."""
    extra = tuple((d, None, "general") for d in range(5, keys + 1))
    return CENSUS_POINTS + extra


def census_point(keys: int, n: int, d, weights, structure: str) -> dict:
    """One point of the frontier on the census sample: the design and its figures."""
    import pramopt

    from ._common import max_rss_mb
    from .census_data import census_data

    df = census_data(n, keys, seed=0)
    table = pramopt.frequency_table(df, list(df.columns))
    t0 = time.perf_counter()
    res = pramopt.design(
        table, alpha=ALPHA, structure=structure, max_changed_variables=d, change_weights=weights
    )
    secs = time.perf_counter() - t0
    ok = res.success
    cv = res.details["changed_variables"] if ok else {}
    red = res.reduction
    return {
        "data": f"census {keys} keys ({n:,} records, K = {table.n_cells:,})",
        "max_changed_variables": "none" if d is None else d,
        "change_weights": "" if not weights else ",".join(f"{k}={v:g}" for k, v in weights.items()),
        "structure": red.structure if red else structure,
        "status": res.status.value,
        "loss": res.loss if ok else np.nan,
        "expected_changes": res.expected_changes if ok else np.nan,
        "mean_vars_changed": cv.get("mean", np.nan),
        "changes_of_sex": cv.get("per_variable", {}).get("sex", np.nan),
        "linear_changes": getattr(red, "linear_changes", None),
        "floor_changes_bound": getattr(red, "floor_changes_bound", None),
        "changes_lower_bound": res.details.get("expected_changes_lower_bound"),
        "changes_bound_at_floor": res.details.get("expected_changes_lower_bound_at_floor"),
        "loss_lower_bound": res.details.get("loss_lower_bound"),
        "smallest_feasible_d": res.details.get("smallest_max_changed_variables"),
        "time_s": secs,
        "peak_rss_mb": max_rss_mb(),
        "stages": "; ".join(f"{s.name} {s.seconds:.0f}s" for s in res.stages),
        "message": "" if ok else res.message[:300],
    }


def run_census(
    out: Path,
    keys: int = 4,
    n: int = 20_000,
    log=print,
    points=None,
    timeout: float = 1200.0,
):
    """The frontier over d on data shaped like a census: one design per point, each in a fresh
    process with a time limit; the table (``changed_variables_census``, with the number of keys
    after it beyond 4) is saved after every point."""
    import json

    from ._common import run_child

    rows = []
    frame = pd.DataFrame()
    for d, weights, structure in points or census_points(keys):
        arg = json.dumps([keys, n, d, weights, structure])
        r = run_child(["benchmarks.changed_variables", "--census-point", arg], timeout)
        r.setdefault("max_changed_variables", "none" if d is None else d)
        r.setdefault("change_weights", "" if not weights else json.dumps(weights))
        r.setdefault("structure", structure)
        rows.append(r)
        log(f"census {keys} keys d={d} weights={weights}: {r.get('status')}")
        frame = _census_table(rows, out, keys, n)  # after every point: the slow ones come last
    return frame


def main(argv=None):
    import argparse
    import json

    ap = argparse.ArgumentParser()
    ap.add_argument("--census-point", required=True, help="JSON [keys, n, d, weights, structure]")
    a = ap.parse_args(argv)
    print(json.dumps(census_point(*json.loads(a.census_point)), default=float))


def _census_table(rows, out: Path, keys: int = 4, n: int = 20_000) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    write_table(
        frame,
        out,
        "changed_variables_census"
        + ("" if keys == 4 else str(keys))
        + ("" if n == 20_000 else f"_{n}"),
        f"Changed variables per changed record on the census sample (alpha = {ALPHA})",
        notes=[
            "Data: benchmarks/census_data.py, seed 0, the first keys of age, sex, region, marital "
            "(, education).",
            "max_changed_variables none: auto mode (up to 5,000 cells the general design, made "
            "over the transitions within 2 changed variables, beside the replacement and block "
            "designs); 1 to the number of keys: the general design, census-scale path (d = the "
            "number of keys: any transition allowed, the design made within 2 variables and "
            "judged against the bound with every transition).",
            "mean_vars_changed: expected identifying values altered per changed record.",
            "linear_changes: expected changes at the end of the general design's linear stage "
            "(fewest changes at its floor); floor_changes_bound: proven lower bound on the "
            "expected changes of every design meeting C1 with every P_mm >= 0.51 and the same d; "
            "changes_bound_at_floor: the same for every P_mm >= the design's smallest diagonal "
            "entry, any transition; "
            "changes_lower_bound: the design's reported bound (every design meeting C1, any "
            "floor, rows of bound_combinations); loss_lower_bound: changes_lower_bound / n^2.",
            "smallest_feasible_d: for an infeasible point, the smallest max_changed_variables the "
            "flow relaxation of C1 allows a floor >= 0.51 with.",
            "One run per point in a fresh process (status 'timeout > T s' past its limit) on a "
            "shared 2-CPU machine: times are upper bounds.",
        ],
    )
    return frame


if __name__ == "__main__":
    main()
