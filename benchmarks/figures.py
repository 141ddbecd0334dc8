"""Study 4: figures (PNG) from the saved tables, plus the paper's Figure 1 for the example."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import pramopt  # noqa: E402

from ._common import read_table  # noqa: E402
from .scaling import slope  # noqa: E402


def figure1(out: Path, alpha: float = 0.1) -> Path:
    """Cator et al.'s Figure 1 for the optimal design of the example data, in two panels.

    Left (the paper's figure, almost linear): the expected number of changed records of each cell,
    U0(m)(1 - P_mm), against U0(m).  Right: the probability that one record changes, 1 - P_mm,
    nearly the same for the cells that send records at the optimum, hence the line on the left.
    """
    df = pramopt.example_data()
    res = pramopt.design(df, list(pramopt.example.EXAMPLE_QI), alpha)
    u = res.counts
    change = 1.0 - res.matrix.diagonal()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.scatter(u, u * change, s=18, color="C0")
    left.set_xlabel("cell frequency $U_0(m)$")
    left.set_ylabel("expected changed records $U_0(m)(1 - P_{mm})$")
    left.set_title("expected changes per cell (the paper's Figure 1)", fontsize=9)
    right.scatter(u, change, s=18, color="C0")
    right.set_xscale("log")
    right.set_xlabel("cell frequency $U_0(m)$ (log scale)")
    right.set_ylabel("probability of change $1 - P_{mm}$")
    right.axvline(1 / alpha, color="grey", ls=":", lw=1)
    right.text(1 / alpha, right.get_ylim()[1] * 0.95, r" $1/\alpha$", color="grey", va="top")
    right.set_title(
        "probability that one record changes: nearly the same for the senders", fontsize=9
    )
    fig.suptitle(
        f"Optimal design, built-in example (K={res.table.n_cells}, n={res.n}, α={alpha}): "
        f"verified max C1 risk {res.max_risk:.4f}, expected changes {res.expected_changes:.2f}",
        fontsize=9,
    )
    fig.tight_layout()
    p = out / "figure1_change_vs_frequency.png"
    fig.savefig(p, dpi=130)
    plt.close(fig)
    return p


def loss_vs_alpha(out: Path) -> Path | None:
    src = out / "optimal_vs_closed.csv"
    if not src.exists():
        return None
    r = read_table(src)
    r = r[r.calibrated.astype(str).str.lower().isin(["true", "1"])]
    names = list(dict.fromkeys(r.dataset))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    for ax, d in zip(axes[0], names):
        g = r[r.dataset == d]
        for i, des in enumerate(dict.fromkeys(g.design)):
            h = g[g.design == des].sort_values("alpha")
            ok = (
                h.meets_c1.astype(str).str.lower().isin(["true", "1"])
                & np.isfinite(h.loss)
                & (h.loss > 0)
            )
            style = dict(marker="o", lw=2.2 if des.startswith("optimal") else 1.2, color=f"C{i}")
            ax.plot(h.alpha[ok], h.loss[ok], label=des, **style)
        ax.set_yscale("log")
        ax.set_xlabel("α (C1 level)")
        ax.set_title(f"{d} (K={int(g.K.iloc[0])})", fontsize=10)
        ax.set_xticks(sorted(set(g.alpha)))
    axes[0][0].set_ylabel("exact L2 loss (log)")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(
        "Loss against α of every design, each calibrated to just meet C1 (points failing C1, singular, "
        "or with zero loss because P = I are left out)",
        fontsize=9,
    )
    fig.tight_layout()
    p = out / "loss_vs_alpha.png"
    fig.savefig(p, dpi=130)
    plt.close(fig)
    return p


def scaling_curves(out: Path) -> Path | None:
    kc, nr = out / "scaling_cells.csv", out / "scaling_records.csv"
    if not kc.exists():
        return None
    k = read_table(kc)
    k = k[k["design_s"].notna()] if "design_s" in k else k.iloc[:0]
    n = read_table(nr) if nr.exists() else None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ax = axes[0]
    if len(k):
        ax.loglog(
            k.K,
            k.design_s,
            "o-",
            label=f"design (slope {slope(k.K[k.K >= 100], k.design_s[k.K >= 100]):.2f})",
        )
        for col, lab in (
            ("linear_s", "linear stage"),
            ("refine_s", "refinement"),
            ("phase1_s", "phase one"),
            ("verify_s", "verification"),
            ("count_s", "counting"),
        ):
            if col in k and (k[col] > 0).any():
                ax.loglog(k.K, k[col].where(k[col] > 0), ".--", lw=1, label=lab)
    ax.set_xlabel("present cells K")
    ax.set_ylabel("seconds")
    ax.set_title("design time vs K", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[1]
    if len(k):
        mem = k.peak_rss_mb - k.rss_after_import_mb
        ax.loglog(
            k.K,
            mem.where(mem > 0),
            "o-",
            color="C3",
            label=f"peak RSS above imports (slope {slope(k.K[k.K >= 100], mem[k.K >= 100]):.2f})",
        )
    ax.set_xlabel("present cells K")
    ax.set_ylabel("MiB")
    ax.set_title("peak memory vs K", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[2]
    if n is not None and "count_s" in n:
        n = n[n.count_s.notna()]
        big = n.n >= 100_000
        ax.loglog(
            n.n, n.count_s, "o-", label=f"counting (slope {slope(n.n[big], n.count_s[big]):.2f})"
        )
        ax.loglog(
            n.n, n.release_s, "s-", label=f"release (slope {slope(n.n[big], n.release_s[big]):.2f})"
        )
        ax.loglog(n.n, n.design_s, "^--", lw=1, label="design (from the table)")
    ax.set_xlabel("records n")
    ax.set_ylabel("seconds")
    ax.set_title("time vs n", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "scaling.png"
    fig.savefig(p, dpi=130)
    plt.close(fig)
    return p


def run(out: Path, quick: bool = False, log=print) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [figure1(out)]
    for f in (loss_vs_alpha, scaling_curves):
        p = f(out)
        if p is None:
            log(f"[figures] {f.__name__}: no table yet (run its study first)")
        else:
            paths.append(p)
    for p in paths:
        log(f"[figures] wrote {p}")
    return paths
