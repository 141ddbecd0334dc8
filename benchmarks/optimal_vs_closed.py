"""Study 1: the optimal design against closed-form designs calibrated to the same C1 level.

For each data set and alpha: pramopt.design and every calibrated baseline (retention with one rho,
retention per attribute, IFPR, sdcMicro's per-variable PRAM restricted to the present cells), each checked by the same verifier
``pramopt.verify.c1_risk``; exact L2 loss, expected changes, max C1 risk, Pk's k, epsilon, time.
The peers with their defaults (not calibrated): the risk and loss their matrices imply, each row
naming what was run (the real package and its version, or a formula; see benchmarks/peers.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

import pramopt
from pramopt.verify import c1_risk

from ._common import datasets, timed, write_table

ALPHAS = (0.05, 0.1, 0.2)
BASELINES = {
    "retention": lambda t, c, a: pramopt.calibrate_retention(t, c, a),
    "retention-per-attribute": lambda t, c, a: pramopt.calibrate_retention(
        t, c, a, per_attribute=True
    ),
    "ifpr": lambda t, c, a: pramopt.calibrate_ifpr(t, c, a),
    "sdcmicro-restricted": lambda t, c, a: pramopt.calibrate_sdcmicro(t, c, a, seed=0),
}


def _measures(P, table, combos, alpha):
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P, dtype=float)
    risk = c1_risk(P, table.codes, table.counts, combos).max_risk
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = pramopt.l2_loss(P, table.counts)
    return {
        "loss": loss,
        "expected_changes": pramopt.expected_changes(P, table.counts),
        "max_risk": risk,
        "meets_c1": bool(risk <= alpha),
        "pk_k": pramopt.pk_anonymity(P, table.n) if P.shape[0] <= 1500 else np.nan,
        "epsilon": pramopt.dp_epsilon(P),
    }


def run(out: Path, quick: bool = False, alphas=ALPHAS, log=print) -> pd.DataFrame:
    rows = []
    data = datasets(quick)
    for dname, (df, qi, _note) in data.items():
        table = pramopt.frequency_table(df, qi)
        combos = pramopt.resolve_combinations(table.qi)
        slow = table.n_cells > 300
        reps = 1 if slow else 3
        for alpha in alphas:
            log(f"[optimal_vs_closed] {dname} (K={table.n_cells}) alpha={alpha}")
            res, sec, nrun = timed(
                lambda table=table, alpha=alpha: pramopt.design(table, alpha=alpha),
                repeats=reps,
                budget=20,
            )
            row = dict(
                dataset=dname,
                K=table.n_cells,
                n=table.n,
                alpha=alpha,
                design="optimal (pramopt)",
                calibrated=True,
                seconds=sec,
                runs=nrun,
                parameters=f"gamma={res.gamma}, solver={res.solver}",
                status=res.status.value,
            )
            row.update(_measures(res.matrix, table, combos, alpha))
            rows.append(row)
            for bname, fn in BASELINES.items():
                t0 = time.perf_counter()
                b = fn(table, combos, alpha)
                sec = time.perf_counter() - t0
                row = dict(
                    dataset=dname,
                    K=table.n_cells,
                    n=table.n,
                    alpha=alpha,
                    design=bname,
                    calibrated=True,
                    seconds=sec,
                    runs=1,
                    parameters=_params(b.details),
                    status="success" if b.success else "fails C1",
                )
                row.update(_measures(b.matrix, table, combos, alpha))
                rows.append(row)
        # peers: defaults do not depend on alpha; report them against each alpha
        try:
            from .peers import peers

            pe = peers(table, dname)
        except Exception as exc:  # pragma: no cover - optional
            log(f"peers skipped: {exc}")
            pe = {}
        for pname, (P, full, cols, how) in pe.items():
            t_risk = (
                c1_risk(full, table.codes, table.counts, combos, col_codes=cols).max_risk
                if full is not None
                else np.nan
            )
            for alpha in alphas:
                row = dict(
                    dataset=dname,
                    K=table.n_cells,
                    n=table.n,
                    alpha=alpha,
                    design=pname,
                    calibrated=False,
                    seconds=np.nan,
                    runs=0,
                    parameters=how,
                    status="",
                )
                row.update(_measures(P, table, combos, alpha))
                row["status"] = "meets C1" if row["meets_c1"] else "fails C1"
                row["max_risk_product_space"] = t_risk
                rows.append(row)
    res = pd.DataFrame(rows)
    if "max_risk_product_space" not in res:
        res["max_risk_product_space"] = np.nan
    write_table(
        res,
        out,
        "optimal_vs_closed",
        "Optimal vs calibrated closed-form designs at equal C1 security",
        notes=_notes(data),
    )
    head = headline(res)
    write_table(
        head,
        out,
        "headline",
        "Headline: loss of the best calibrated baseline / loss of the optimal design",
        notes=[
            "Only calibrated baselines that pass the full C1 check (c1_risk <= alpha) compete.",
            "ratio = loss(best baseline) / loss(optimal); > 1 means the optimal design loses less.",
        ],
    )
    return res


def _params(p) -> str:
    d = dict(p)
    keep = {k: d[k] for k in ("rho", "xi", "pd", "alpha") if k in d}

    def f(v):
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(f"{x:.3g}" for x in v) + "]"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return "; ".join(f"{k}={f(v)}" for k, v in keep.items())


def headline(res: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (dname, alpha), g in res.groupby(["dataset", "alpha"], sort=False):
        opt = g[g.design == "optimal (pramopt)"].iloc[0]
        base = g[
            g.calibrated & (g.design != "optimal (pramopt)") & g.meets_c1 & np.isfinite(g.loss)
        ]
        if base.empty:
            best, bl = "none passes C1", np.nan
        else:
            b = base.loc[base.loss.idxmin()]
            best, bl = b.design, b.loss
        rows.append(
            dict(
                dataset=dname,
                K=int(opt.K),
                alpha=alpha,
                optimal_loss=opt.loss,
                optimal_meets_c1=bool(opt.meets_c1),
                best_baseline=best,
                best_baseline_loss=bl,
                ratio=(bl / opt.loss if opt.loss > 0 else (1.0 if bl == 0 else np.inf)),
                optimal_changes=opt.expected_changes,
                baseline_changes=(
                    base.loc[base.loss.idxmin()].expected_changes if not base.empty else np.nan
                ),
                optimal_seconds=opt.seconds,
            )
        )
    return pd.DataFrame(rows)


def _notes(data) -> list[str]:
    return [
        "Data sets: " + "; ".join(f"{k}: {v[2]}" for k, v in data.items()) + ".",
        "Every matrix (optimal, baselines, peers) is checked by the same verifier pramopt.verify.c1_risk "
        "over every present cell and every 3-variable combination; meets_c1 means max_risk <= alpha.",
        "loss is the exact L2 loss (inf for a singular matrix), expected_changes the expected number of "
        "records whose identifying values change, pk_k Pk-anonymity's k, epsilon the eps-DP level "
        "(inf when a column has a zero next to a positive entry).",
        "seconds: median of `runs` runs of pramopt.design (1 run for data sets with K > 300); one run "
        "of each calibration search.",
        "sdcmicro-restricted: sdcMicro's per-variable PRAM restricted to the present cells with rows "
        "renormalised (what calibrate_sdcmicro tunes); sdcMicro itself releases over the product space "
        "(see peers.md).",
        "Peers run with their defaults (pram: m=0.8, alpha=0.5; pymasq: probs=0.8, alpha=0.5; sdcMicro: "
        "pd=0.8, alpha=0.5), not calibrated; their rows repeat for each alpha.  `parameters` says what was "
        "run: the real package (matrices recorded from pymasq 0.6.5 / pram 0.2.0 under pandas 2.3.3, "
        "results/peers_real/) or a formula (the idealised pymasq formula is not the package).  Their loss "
        "and risk are those of the per-variable product matrix restricted to the present cells; "
        "max_risk_product_space is C1 on the full product space they actually release into (peers.md has "
        "the mass leaving the present cells and the loss over the product space).",
    ]
