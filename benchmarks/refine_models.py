"""Study: what sets the refinement's steps and its end, the curvature model or the support?

``python -m benchmarks.refine_models`` designs each case with ``structure="general"`` three
times, each in a fresh process, with three curvature models of the refinement's QP steps:

* ``diagonal``: the loss's Hessian diagonal alone (the curvature pairs off, ``MEMORY = 0``);
* ``column``: the exact Hessian within every column of P, made positive semidefinite column by
  column (:func:`l2_column_curvature_on_support`, below), without pairs;
* ``pairs``: the diagonal updated by BFGS with the loss's curvature along the last accepted steps
  (the refinement as it is).
Per refinement chunk it records the loss and the size of the support the chunk was taken on.
With the diagonal model it also measures, at the last subproblem, how well the diagonal predicts
the change of the gradient along one more curved step ``d``: ``H d`` by central differences of the
gradient against ``B d``, both on the entries in use with each row's mean removed (moving mass
within a row is what the row sums allow), as the ratio of their norms and their cosine, and
``d' H d / d' B d``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
CASES = ("example", "testdata4", "zipf340")
MODELS = ("diagonal", "column", "pairs")


def l2_column_curvature_on_support(support, counts):
    """``curvature(x, g) -> B``: the exact Hessian within every column of P on ``support``, made
    positive semidefinite column by column, as a sparse matrix (a dense inverse and one
    eigendecomposition per column: a few hundred cells).

    With ``A = Q^T W Q`` and ``T = A Q^T``, differentiating the gradient along ``E_aj`` gives, for
    two entries ``(i, j)`` and ``(a, j)`` of column ``j``::

        d2 loss / dP_ij dP_aj = 2 (r_j A_ia - r_j (U0_i Q_ja + U0_a Q_ji) + Q_ji T_aj + T_ij Q_ja) / n^2,

    so over the rows ``I`` of column ``j``: ``H_j = (2 / n^2) (r_j A_II + q t'^T + t' q^T)`` with
    ``q = Q[j, I]`` and ``t' = T[I, j] - r_j U0_I`` (its diagonal is
    :func:`pramopt.optimize.objectives.l2_curvature.l2_hessian_diagonal`).
    The entries of one column share the released count ``w_j`` and the row ``j`` of ``Q``, and
    most of the Hessian's weight off its diagonal lies there (48% of the sum of |H| over 400
    sampled columns on 340 rare-heavy cells; 22% on the diagonal).  Eigenvalues of a block below
    1e-3 of its median |diagonal| are raised to that, so that the model stays convex.
    """
    counts = np.asarray(counts, dtype=float)

    def curvature(x, g=None):
        R, C, V = [], [], []
        for idx, Hj in column_blocks(support, x, counts):
            ev, U = np.linalg.eigh(Hj)
            floor = 1e-3 * float(np.median(np.abs(np.diag(Hj)))) + 1e-300
            Hj = (U * np.maximum(ev, floor)) @ U.T
            ii, jj = np.meshgrid(idx, idx, indexing="ij")
            R.append(ii.ravel())
            C.append(jj.ravel())
            V.append(Hj.ravel())
        return sp.csr_matrix(
            (np.concatenate(V), (np.concatenate(R), np.concatenate(C))),
            shape=(support.size, support.size),
        )

    return curvature


def column_blocks(support, x, counts):
    """The exact Hessian of the L2 loss within each column of P (see
    :func:`l2_column_curvature_on_support`): yields ``(idx, H_j)``, ``idx`` the positions in ``x``
    of the support's entries in column ``j``."""
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    order = np.argsort(support.cols, kind="stable")
    starts = np.searchsorted(support.cols[order], np.arange(support.K + 1))
    P = support.to_matrix(x).toarray()
    Q = np.linalg.inv(P)  # every diagonal entry >= 0.51 in a general design
    w = counts @ P
    r = np.einsum("ij,ij->i", Q, Q)
    A = Q.T @ (w[:, None] * Q)
    T = A @ Q.T
    for j in range(support.K):
        idx = order[starts[j] : starts[j + 1]]
        rows_j = support.rows[idx]  # the rows ``I`` of column j
        q, t = Q[j, rows_j], T[rows_j, j] - r[j] * counts[rows_j]
        yield idx, 2.0 / n**2 * (r[j] * A[np.ix_(rows_j, rows_j)] + np.outer(q, t) + np.outer(t, q))


def _table(case: str):
    import pramopt

    sys.path.insert(0, str(REPO))
    from benchmarks.refine import _data

    df, qi = _data(case)
    return pramopt.frequency_table(df, qi)


def point(case: str, model: str) -> dict:
    import pramopt
    import pramopt.optimize.strategies.general as G
    import pramopt.optimize.strategies.refine as R
    from pramopt.optimize.objectives.l2 import L2Loss

    table = _table(case)
    if model == "column":
        L2Loss.curvature_on_support = lambda self, sup, counts, sparse: (
            l2_column_curvature_on_support(sup, counts)
        )
    if model != "pairs":
        R.MEMORY = 0
    steps = []
    last = {}
    real = G.refine

    def spy(lp, x0, lo, hi, evaluate, **kw):
        x, info = real(lp, x0, lo, hi, evaluate, **kw)
        steps.append(
            dict(
                support=int(lp.program.support.size),
                iterations=info.iterations,
                loss=float(info.loss_end),
                step=info.model,
            )
        )
        last.update(lp=lp, x=x, lo=lo, hi=hi, evaluate=evaluate, kw=kw, info=info)
        return x, info

    G.refine = spy
    t0 = time.perf_counter()
    res = pramopt.design(table, alpha=0.1, structure="general")
    secs = time.perf_counter() - t0
    ref = [s for s in res.stages if s.name == "refine"]
    out = dict(
        case=case,
        model=model,
        K=table.n_cells,
        loss=res.loss,
        success=bool(res.success),
        refine_iterations=sum(s.iterations for s in ref),
        refine_s=sum(s.seconds for s in ref),
        design_s=secs,
        refine_detail="; ".join(s.detail for s in ref),
        steps=steps,
    )
    if model == "diagonal" and last.get("kw", {}).get("curvature") is not None:
        out.update(diagonal_gap(last, real))
    return out


def diagonal_gap(last: dict, refine) -> dict:
    """How the diagonal model's ``B d`` compares with the loss's ``H d`` along one more curved
    step ``d`` from the last subproblem's point (see the module)."""
    lp, x, evaluate, kw = last["lp"], last["x"], last["evaluate"], dict(last["kw"])
    info = last["info"]
    kw.update(
        max_iter=1,
        want_duals=False,
        history=(),
        progress=None,
        check=None,
        rtol=0.0,
        radius=info.radius,
        sigma=info.sigma,
    )
    x1, _ = refine(lp, x, last["lo"], last["hi"], evaluate, **kw)
    d = x1 - x
    top = float(np.max(np.abs(d))) if d.size else 0.0
    if top <= 0:
        return {}
    f, g, _ = evaluate(x)
    B = np.asarray(kw["curvature"](x, g), dtype=float) * info.sigma
    eps = 1e-4 / top
    Hd = (evaluate(x + eps * d)[1] - evaluate(x - eps * d)[1]) / (2 * eps)
    Bd = B * d
    sup = lp.program.support
    use = x > 1e-7

    def centred(v):  # on the entries in use, each row's mean removed
        v = np.where(use, v, 0.0)
        tot = np.bincount(sup.rows, v, sup.K)
        cnt = np.bincount(sup.rows, use.astype(float), sup.K)
        return np.where(use, v - (tot / np.maximum(cnt, 1))[sup.rows], 0.0)

    h, b = centred(Hd), centred(Bd)
    return dict(
        gap_support=int(sup.size),
        gap_hd_over_bd=float(np.linalg.norm(h) / np.linalg.norm(b)),
        gap_cosine=float(h @ b / (np.linalg.norm(h) * np.linalg.norm(b))),
        gap_curvature_ratio=float((d @ Hd) / (d @ Bd)),
    )


def run(
    out: Path, quick: bool = False, cases=None, timeout: float = 1800.0, log=print
) -> pd.DataFrame:
    from ._common import run_child, write_table

    cases = list(cases or (("example",) if quick else CASES))
    if not (REPO.parent / "shared" / "data" / "testdata.csv").exists():
        cases = [c for c in cases if not c.startswith("testdata")]
    rows, trace = [], []
    for case in cases:
        for model in MODELS:
            log(f"[refine_models] {case} ({model})")
            r = run_child(["benchmarks.refine_models", "--case", case, "--model", model], timeout)
            for k, s in enumerate(r.pop("steps", []), 1):
                trace.append(dict(case=case, model=model, chunk=k, **s))
            rows.append({"case": case, "model": model, **r})
    df = pd.DataFrame(rows)
    notes = [
        "pramopt.design(table, alpha=0.1, structure='general'), defaults otherwise, each row in a fresh "
        "process; diagonal: the QP steps' model is the Hessian's diagonal alone; column: "
        "the exact Hessian within every column of P, positive semidefinite per column "
        "(benchmarks/refine_models.py); pairs: the diagonal updated by BFGS with the curvature along the "
        "last accepted steps (the refinement as it is).",
        "gap_*: at the diagonal model's last subproblem (gap_support entries), one more curved step d: "
        "|H d| / |B d| and their cosine on the entries in use with each row's mean removed (H d by central "
        "differences of the gradient), and d'H d / d'B d.",
        "Cases as in benchmarks/refine.py; seconds on a shared 2-CPU machine (rough), iterations and losses "
        "exact.",
    ]
    write_table(
        df,
        out,
        "refine_models",
        "Refinement: curvature models of the QP steps",
        notes=notes,
        floatfmt=".4g",
    )
    if trace:
        write_table(
            pd.DataFrame(trace),
            out,
            "refine_models_steps",
            "Refinement steps: the loss after each chunk and the support it was taken on",
            notes=notes[:1]
            + [
                "chunk: one call of the trust-region loop between pricing rounds (one "
                "curved step, or three linear ones on supports above REFINE_QP_MAX)."
            ],
            floatfmt=".6g",
        )
    return df


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--case", choices=CASES, help="run one case in this process and print its JSON line"
    )
    ap.add_argument("--model", choices=MODELS, default="diagonal")
    ap.add_argument("--cases", nargs="*", choices=CASES)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.case:
        import warnings

        warnings.simplefilter("ignore")
        print(json.dumps(point(a.case, a.model), default=float))
        return
    run(a.out, quick=a.quick, cases=a.cases)


if __name__ == "__main__":
    main()
