"""Households: today's person-level design against the household design on sdcMicro's testdata.

Seven keys (household-level urbrur, roof, walls, water, electcon; person-level relat, sex), alpha = 0.1,
every triple.  Designs: person-level (no households), the household design with one person matrix
shared by every household cell (the designer's other person part switched off), and the household
design as ``pramopt.design`` makes it (one person matrix per household cell among the candidates).
For each: loss, expected changes, time, and after release (mean over seeds) the households whose
members disagree on urbrur / roof and the households with a number of heads (relat == 1) other than
one.  ``--quick``: synthetic households instead of testdata.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

import pramopt

from ._common import TESTDATA, TESTDATA_KEYS7, write_table

SEEDS = 10


def _synthetic(n_households=150, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_households):
        urbrur, roof = rng.choice([1, 2], p=[0.6, 0.4]), rng.choice([2, 4, 5], p=[0.6, 0.3, 0.1])
        for i in range(int(rng.integers(1, 6))):
            rows.append(
                dict(
                    ori_hid=g + 1,
                    urbrur=urbrur,
                    roof=roof,
                    relat=1 if i == 0 else rng.choice([2, 3]),
                    sex=rng.choice([1, 2]),
                )
            )
    return pd.DataFrame(rows)


def _after_release(df, res, hid="ori_hid"):
    out = []
    for s in range(SEEDS):
        rel = pramopt.release(df, res, seed=s)
        g = rel.groupby(hid)
        out.append(
            (
                (g["urbrur"].nunique() > 1).sum(),
                (g["roof"].nunique() > 1).sum(),
                (g["relat"].apply(lambda x: int((x == 1).sum())) != 1).sum(),
            )
        )
    return np.mean(out, axis=0)


def run(out, quick=False, log=print):
    if quick:
        df, qi = _synthetic(), ["urbrur", "roof", "relat", "sex"]
    else:
        df, qi = pd.read_csv(TESTDATA), TESTDATA_KEYS7
    from pramopt.households import designer

    rows = []
    for name, kw in (
        ("person-level", {}),
        ("households, one person matrix", {"household": "ori_hid"}),
        ("households, person matrix per household cell", {"household": "ori_hid"}),
    ):
        t0 = time.perf_counter()
        if name == "households, one person matrix":
            keep, designer.solve_person_by_household = (
                designer.solve_person_by_household,
                lambda *a, **k: None,
            )
            try:
                res = pramopt.design(df, qi, alpha=0.1, **kw)
            finally:
                designer.solve_person_by_household = keep
        else:
            res = pramopt.design(df, qi, alpha=0.1, **kw)
        sec = time.perf_counter() - t0
        log(
            f"{name}: {res.status.value}, loss {res.loss:.4g}, changes {res.expected_changes:.4g}, {sec:.1f} s"
        )
        urb, roof, heads = _after_release(df, res)
        rows.append(
            {
                "design": name,
                "status": res.status.value,
                "person_part": res.details.get("person_structure", "-") if kw else "-",
                "alpha_household": getattr(res, "alpha_household", float("nan")),
                "max_risk": res.max_risk,
                "loss": res.loss,
                "expected_changes": res.expected_changes,
                "seconds": sec,
                "households_disagree_urbrur": urb,
                "households_disagree_roof": roof,
                "households_heads_not_1": heads,
            }
        )
    t = pd.DataFrame(rows)
    name = "households_quick" if quick else "households"
    before = df.groupby("ori_hid")["relat"].apply(lambda x: int((x == 1).sum())).ne(1).sum()
    write_table(
        t,
        out,
        name,
        f"Households vs person-level design ({'synthetic' if quick else 'testdata, 7 keys'}, "
        f"alpha 0.1, every triple; release figures: mean over {SEEDS} seeds, {df.ori_hid.nunique()} households)",
        notes=[
            f"households with a number of heads other than one before release: {before}",
            "loss of the household design counts the shared household draw (members correlated)",
        ],
    )
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2))
    axes = fig.subplots(1, 3)
    for ax, col, lab in zip(
        axes, ["loss", "expected_changes", None], ["exact L2 loss", "expected changes", None]
    ):
        if col is None:
            x = np.arange(3)
            for i, r in t.iterrows():
                ax.bar(
                    x + 0.27 * i,
                    [
                        r.households_disagree_urbrur,
                        r.households_disagree_roof,
                        r.households_heads_not_1,
                    ],
                    0.27,
                    label=r.design,
                )
            ax.set_xticks(x + 0.27, ["disagree\nurbrur", "disagree\nroof", "heads != 1"])
            ax.set_title("households after release")
            ax.legend(fontsize=7)
        else:
            ax.bar(["person", "hh, one Pp", "hh, Pp per h"], t[col], color=["C0", "C1", "C2"])
            ax.set_title(lab)
            ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)
    return t
