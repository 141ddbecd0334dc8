"""Study: optimal designs under ε-DP and Pk-anonymity against retention-replacement (Ikarashi et al.).

For each data set (the built-in example, sdcMicro's testdata with 4 keys, a census-shaped sample
small enough for a dense support):

* **ε** -- ``pramopt.design(alpha=None, epsilon=ε)`` against retention-replacement with one ρ from
  Algorithm 2 (Corollary 2's ε on the product space, then restricted to the present cells, which
  changes its ε), one ρ calibrated so that the restricted matrix meets ε exactly, ρ per attribute
  (Corollary 2's ε budget split to minimise the loss, calibrated the same way), and the present
  cells as one attribute (K-ary randomized response);
* **k** -- ``design(alpha=None, k=k)`` (the linear sufficient condition, then, up to 30 cells, the
  refinement over Theorem 3's exact set in log space), the linear condition alone, and the plain
  column-ratio bound alone, against Algorithm 1's ρ and ρ calibrated on the cells; ``(k, ε)``
  together against Algorithm 3;
* **C1 + ε** -- the loss of adding ε to C1 at α = 0.1.

Every figure is measured exactly on the released matrix: the exact L2 loss, ε by Theorem 1, k by
Theorem 3, C1 by ``pramopt.verify.c1_risk``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

import pramopt
from pramopt.baselines.calibrate import retention_on_cells
from pramopt.baselines.retention import retention_rho, rho_from_epsilon, rho_from_k
from pramopt.baselines.retention_meeting import retention_meeting
from pramopt.frequency.combinations import resolve_combinations
from pramopt.optimize.strategies import dense_ratio as privacy_strategy
from pramopt.verify import c1_risk

from ._common import TESTDATA, TESTDATA_KEYS4, write_table
from .census_data import census_data

OPT = "optimal (pramopt)"


def datasets(quick: bool = False) -> dict:
    if quick:
        from ._common import zipf_cells

        z = zipf_cells(15, n_vars=3, top=200, seed=1)
        return {"zipf-15": (z, list(z.columns), "synthetic Zipf s=1.1, 15 cells, seed 1")}
    out = {
        "example": (
            pramopt.example_data(),
            list(pramopt.example.EXAMPLE_QI),
            "built-in, seed 3, n 2500",
        )
    }
    if TESTDATA.exists():
        out["testdata-4"] = (pd.read_csv(TESTDATA), TESTDATA_KEYS4, "sdcMicro testdata, 4 keys")
    c = census_data(2000, keys=4, seed=0)
    out["census-3"] = (
        c,
        ["age", "sex", "marital"],
        "census-shaped sample, n 2000, seed 0: age x sex x marital",
    )
    return out


def _measure(P, table, combos) -> dict:
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P, dtype=float)
    with np.errstate(all="ignore"):
        loss = pramopt.l2_loss(P, table.counts)
    return {
        "loss": loss,
        "epsilon": pramopt.dp_epsilon(P),
        "k": pramopt.pk_anonymity(P, table.n),
        "max_risk": c1_risk(P, table.codes, table.counts, combos).max_risk,
    }


def _opt_row(res, secs, table, combos) -> dict:
    row = _measure(res.matrix, table, combos)
    row.update(seconds=secs, status=res.status.value, binding=res.details.get("binding", ""))
    return row


def _design(table, combos, **kw):
    t0 = time.perf_counter()
    res = pramopt.design(table, **kw)
    return _opt_row(res, time.perf_counter() - t0, table, combos)


def run(out: Path, quick: bool = False, log=print, epsilons=None, ks=None) -> dict:
    data = datasets(quick)
    eps_rows, k_rows, c1_rows = [], [], []
    for dname, (df, qi, _note) in data.items():
        table = pramopt.frequency_table(df, qi)
        combos = resolve_combinations(table.qi)
        levels = [len(c) for c in table.categories]
        big = table.n_cells > 100
        E = epsilons or ((2.0,) if quick else ((1.0, 4.0) if big else (0.5, 1.0, 2.0, 4.0)))
        Ks = ks or ((20.0,) if quick else ((50.0,) if big else (5.0, 50.0, 500.0)))
        base = dict(dataset=dname, K=table.n_cells, n=table.n)
        # --- epsilon --------------------------------------------------------------------------
        for eps in E:
            log(f"[privacy_design] {dname} (K={table.n_cells}) epsilon={eps}")
            rows = [
                dict(
                    base,
                    epsilon_target=eps,
                    design=OPT,
                    **_design(table, combos, alpha=None, epsilon=eps),
                )
            ]
            rho = rho_from_epsilon(eps, levels)
            P = retention_on_cells(table, rho)
            rows.append(
                dict(
                    base,
                    epsilon_target=eps,
                    design="RR one rho, Algorithm 2 (product space)",
                    parameters=f"rho={rho:.4g}",
                    **_measure(P, table, combos),
                )
            )
            for name, kw in (
                ("RR one rho, calibrated on the cells", {}),
                ("RR rho per attribute, calibrated on the cells", {"per_attribute": True}),
                ("RR on the cells as one attribute (K-ary RR)", {"joint": True}),
            ):
                t0 = time.perf_counter()
                r = retention_meeting(table, epsilon=eps, **kw)
                rows.append(
                    dict(
                        base,
                        epsilon_target=eps,
                        design=name,
                        seconds=time.perf_counter() - t0,
                        parameters="rho=" + ",".join(f"{x:.3g}" for x in r.rho),
                        **_measure(r.P, table, combos),
                    )
                )
            opt = rows[0]["loss"]
            for r in rows:
                r["meets_epsilon"] = bool(r["epsilon"] <= eps)
                r["loss_vs_optimal"] = r["loss"] / opt
            eps_rows += rows
        # --- k (Algorithms 1 and 3) ------------------------------------------------------------
        for k in Ks:
            log(f"[privacy_design] {dname} k={k}")
            rows = [
                dict(
                    base,
                    k_target=k,
                    epsilon_target=np.nan,
                    design=OPT,
                    **_design(table, combos, alpha=None, k=k),
                )
            ]
            saved = privacy_strategy.K_ROUNDS, privacy_strategy.EXACT_K_MAX_CELLS
            try:
                if table.n_cells <= privacy_strategy.EXACT_K_MAX_CELLS:
                    privacy_strategy.EXACT_K_MAX_CELLS = 0
                    rows.append(
                        dict(
                            base,
                            k_target=k,
                            epsilon_target=np.nan,
                            design="linear condition only (row-scaled, re-weighted; no exact-k polish)",
                            **_design(table, combos, alpha=None, k=k),
                        )
                    )
                privacy_strategy.EXACT_K_MAX_CELLS = 0
                privacy_strategy.K_ROUNDS = 0
                rows.append(
                    dict(
                        base,
                        k_target=k,
                        epsilon_target=np.nan,
                        design="plain column-ratio bound only (no re-weighting, no exact-k polish)",
                        **_design(table, combos, alpha=None, k=k),
                    )
                )
            finally:
                privacy_strategy.K_ROUNDS, privacy_strategy.EXACT_K_MAX_CELLS = saved
            rho = rho_from_k(k, table.n, levels)
            rows.append(
                dict(
                    base,
                    k_target=k,
                    epsilon_target=np.nan,
                    design="RR one rho, Algorithm 1 (product space)",
                    parameters=f"rho={rho:.4g}",
                    **_measure(retention_on_cells(table, rho), table, combos),
                )
            )
            r = retention_meeting(table, k=k)
            rows.append(
                dict(
                    base,
                    k_target=k,
                    epsilon_target=np.nan,
                    design="RR one rho, calibrated on the cells",
                    parameters=f"rho={r.rho[0]:.4g}",
                    **_measure(r.P, table, combos),
                )
            )
            r = retention_meeting(table, k=k, joint=True)
            rows.append(
                dict(
                    base,
                    k_target=k,
                    epsilon_target=np.nan,
                    design="RR on the cells as one attribute (K-ary RR)",
                    parameters=f"rho={r.rho[0]:.4g}",
                    **_measure(r.P, table, combos),
                )
            )
            k_rows += _finish_k(rows, k, None)
        # Algorithm 3: both
        k3, e3 = Ks[-1], E[-1]
        log(f"[privacy_design] {dname} k={k3}, epsilon={e3}")
        rows = [
            dict(
                base,
                k_target=k3,
                epsilon_target=e3,
                design=OPT,
                **_design(table, combos, alpha=None, k=k3, epsilon=e3),
            )
        ]
        rho = retention_rho(table.n, levels, k=k3, epsilon=e3)
        rows.append(
            dict(
                base,
                k_target=k3,
                epsilon_target=e3,
                design="RR one rho, Algorithm 3 (product space)",
                parameters=f"rho={rho:.4g}",
                **_measure(retention_on_cells(table, rho), table, combos),
            )
        )
        r = retention_meeting(table, k=k3, epsilon=e3)
        rows.append(
            dict(
                base,
                k_target=k3,
                epsilon_target=e3,
                design="RR one rho, calibrated on the cells",
                parameters=f"rho={r.rho[0]:.4g}",
                **_measure(r.P, table, combos),
            )
        )
        k_rows += _finish_k(rows, k3, e3)
        # --- C1 + epsilon ------------------------------------------------------------------------
        log(f"[privacy_design] {dname} C1 alone")
        c1 = _design(table, combos, alpha=0.1)
        c1_rows.append(dict(base, alpha=0.1, epsilon_target=np.nan, design="C1 alone", **c1))
        for eps in (2.0,) if quick else ((4.0,) if big else (1.0, 2.0, 4.0, 8.0)):
            log(f"[privacy_design] {dname} C1 + epsilon={eps}")
            both = _design(table, combos, alpha=0.1, epsilon=eps)
            alone = [
                r
                for r in eps_rows
                if r["dataset"] == dname and r["epsilon_target"] == eps and r["design"] == OPT
            ]
            c1_rows.append(
                dict(
                    base,
                    alpha=0.1,
                    epsilon_target=eps,
                    design="C1 + epsilon",
                    **both,
                    loss_vs_c1_alone=both["loss"] / c1["loss"] if c1["loss"] > 0 else np.inf,
                    loss_vs_epsilon_alone=both["loss"] / alone[0]["loss"] if alone else np.nan,
                )
            )
            if not alone:  # epsilon alone at this level, for the comparison
                a = _design(table, combos, alpha=None, epsilon=eps)
                c1_rows.append(
                    dict(base, alpha=np.nan, epsilon_target=eps, design="epsilon alone", **a)
                )
                c1_rows[-2]["loss_vs_epsilon_alone"] = both["loss"] / a["loss"]
    res = {
        "epsilon": pd.DataFrame(eps_rows),
        "k": pd.DataFrame(k_rows),
        "c1": pd.DataFrame(c1_rows),
    }
    _write(res, out, data)
    return res


def _finish_k(rows, k, eps):
    opt = rows[0]["loss"]
    for r in rows:
        r["meets_k"] = bool(r["k"] >= k)
        r["meets_epsilon"] = True if eps is None else bool(r["epsilon"] <= eps)
        r["k_over_target"] = r["k"] / k
        r["loss_vs_optimal"] = r["loss"] / opt
    return rows


EPS_COLS = [
    "dataset",
    "K",
    "n",
    "epsilon_target",
    "design",
    "loss",
    "loss_vs_optimal",
    "epsilon",
    "meets_epsilon",
    "k",
    "max_risk",
    "seconds",
    "parameters",
]
K_COLS = [
    "dataset",
    "K",
    "n",
    "k_target",
    "epsilon_target",
    "design",
    "loss",
    "loss_vs_optimal",
    "k",
    "k_over_target",
    "meets_k",
    "epsilon",
    "meets_epsilon",
    "seconds",
    "parameters",
]
C1_COLS = [
    "dataset",
    "K",
    "n",
    "alpha",
    "epsilon_target",
    "design",
    "loss",
    "loss_vs_c1_alone",
    "loss_vs_epsilon_alone",
    "epsilon",
    "k",
    "max_risk",
    "binding",
    "seconds",
]


def _cols(df, cols):
    return df.reindex(columns=cols)


def _write(res, out, data):
    notes = [
        "Data sets: " + "; ".join(f"{k}: {v[2]}" for k, v in data.items()) + ".",
        "Every figure is measured on the matrix over the present cells: loss = exact L2 loss, epsilon = "
        "Theorem 1 (pramopt.dp_epsilon), k = Theorem 3 (pramopt.pk_anonymity), max_risk = C1 "
        "(pramopt.verify.c1_risk, every 3-variable combination).",
        "loss_vs_optimal = loss / loss of the optimal design at the same requirement (> 1: the optimum "
        "loses less).  A baseline that misses the requirement (meets_* = no) is not at equal protection.",
        "Algorithms 1-3 choose rho on the product space; restricted to the present cells (rows "
        "renormalised) the matrix's epsilon and k change, so it may miss the requirement there.",
        "seconds: one run, 2-CPU shared machine (noisy).",
    ]
    write_table(
        _cols(res["epsilon"], EPS_COLS),
        out,
        "privacy_design",
        "Optimal designs under epsilon-DP against retention-replacement at the same epsilon",
        notes=notes,
    )
    write_table(
        _cols(res["k"], K_COLS),
        out,
        "privacy_design_k",
        "Optimal designs under Pk-anonymity (and k with epsilon) against Algorithms 1-3",
        notes=notes
        + [
            "'plain column-ratio bound': max_m P_mj / min_m P_mj <= sqrt((n-1)/(k-1)) on every column; "
            "'linear condition' also re-chooses row weights s (L_j <= s_m P_mj <= r L_j) at the current "
            "design; the default then refines over Theorem 3's exact set, linear in ln P (up to 30 cells).",
            "k_over_target: k of the design / target (1 = the design meets k with equality); how "
            "conservative the linear condition is shows in the loss of the variants, not in k.",
        ],
    )
    write_table(
        _cols(res["c1"], C1_COLS),
        out,
        "privacy_design_c1",
        "The cost of adding epsilon-DP to C1 (alpha = 0.1)",
        notes=notes
        + [
            "C1 alone: the default design (its epsilon is infinite: P has zeros).",
            "loss_vs_c1_alone = loss(C1 + epsilon) / loss(C1 alone); loss_vs_epsilon_alone = "
            "loss(C1 + epsilon) / loss(epsilon alone).",
        ],
    )


def main(argv=None):  # pragma: no cover
    import argparse

    from ._common import RESULTS

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    run(a.out, quick=a.quick)


if __name__ == "__main__":  # pragma: no cover
    main()
