"""Study: the refinement of the exact L2 loss, curved (QP) steps against linear ones (SLP).

``python -m benchmarks.refine --base DIR`` designs each case with ``structure="general"`` twice,
each in a fresh process: with this tree's pramopt and with the one in ``DIR`` (a checkout of
the code before the curved model, e.g. ``git worktree add /tmp/base <commit>``), and reports
the refinement's iterations and seconds and the final loss (``result.loss``).  Without
``--base`` only this tree's code runs.  ``--base`` may be given several times as ``LABEL=DIR``
(e.g. ``slp=/tmp/slp diagonal=/tmp/diag``); each is compared with this tree, also by the loss
after every refinement iteration (the progress callback): the iterations this tree needs to reach
the base's final loss, and its loss after 20 iterations.

Cases: the package example (5 keys), sdcMicro's testdata with 4 and 7 keys (read from
``../shared/data``, never copied) and 340 rare-heavy Zipf cells over 5 variables (10
combinations of 3), alpha = 0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TESTDATA = REPO.parent / "shared" / "data" / "testdata.csv"
KEYS7 = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]
CASES = ("example", "testdata4", "testdata7", "zipf340")
ALPHA = 0.1


def _data(case: str):
    import pramopt

    if case == "example":
        return pramopt.example_data(), ["v1", "v2", "v3", "v4", "v5"]
    if case in ("testdata4", "testdata7"):
        return pd.read_csv(TESTDATA), KEYS7[: int(case[-1])]
    if case.startswith("zipf"):
        sys.path.append(str(REPO))  # the generator of this tree, whichever pramopt runs
        from benchmarks._common import zipf_cells

        df = zipf_cells(int(case[4:]), n_vars=5, seed=2)
        return df, list(df.columns)
    raise ValueError(case)


def point(case: str) -> dict:
    """One design (in this process, with whichever pramopt is first on the path)."""
    import pramopt

    df, qi = _data(case)
    table = pramopt.frequency_table(df, qi)
    losses = []  # the loss after every refinement iteration, in order

    def progress(stage, it, loss, _):
        if stage == "refine":
            losses.append(float(loss))

    t0 = time.perf_counter()
    res = pramopt.design(table, alpha=ALPHA, structure="general", progress=progress)
    secs = time.perf_counter() - t0
    ref = [s for s in res.stages if s.name == "refine"]
    return dict(
        case=case,
        K=table.n_cells,
        success=bool(res.success),
        loss=res.loss,
        design_s=secs,
        refine_iterations=sum(s.iterations for s in ref),
        refine_s=sum(s.seconds for s in ref),
        refine_detail="; ".join(s.detail for s in ref),
        pramopt=str(Path(pramopt.__file__).parents[1]),
        losses=losses,
    )


def _child(case: str, root: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--case", case],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return dict(case=case, status=f"timeout > {timeout:g} s")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return dict(
            case=case, status="error: " + ((p.stderr.strip().splitlines() or ["?"])[-1])[:200]
        )
    out = json.loads(lines[-1])
    out["wall_s"] = time.perf_counter() - t0
    return out


def _bases(base) -> list[tuple[str, Path]]:
    """``--base`` values: a directory (labelled "old") or ``LABEL=DIR``, one or several."""
    if base is None:
        return []
    out = []
    for b in base if isinstance(base, (list, tuple)) else [base]:
        label, sep, d = str(b).partition("=")
        out.append((label, Path(d)) if sep else ("old", Path(b)))
    return out


def to_reach(losses, target: float, rtol: float = 1e-6):
    """Iterations until the loss is at most ``target`` (None: never)."""
    for i, f in enumerate(losses or [], start=1):
        if f <= target * (1 + rtol):
            return i
    return None


def _at(losses, i: int):
    """The loss after ``i`` iterations (or the last one, if fewer ran); None without a history."""
    return losses[min(i, len(losses)) - 1] if losses else None


def run(
    out: Path,
    quick: bool = False,
    base=None,
    cases=None,
    timeout: float = 1800.0,
    log=print,
    new: Path = REPO,
) -> pd.DataFrame:
    from ._common import write_table

    cases = list(cases or (("example",) if quick else CASES))
    if not TESTDATA.exists():
        cases = [c for c in cases if not c.startswith("testdata")]
    bases = _bases(base)
    rows = []
    for case in cases:
        for code, root in bases + [("new", new)]:
            log(f"[refine] {case} ({code})")
            r = _child(case, Path(root), timeout)
            r["code"] = code
            rows.append(r)
    df = pd.DataFrame(rows)
    hist = {(r["case"], r["code"]): r.get("losses") for r in rows}
    if "losses" in df:
        df = df.drop(columns="losses")
    cols = [
        "case",
        "K",
        "code",
        "refine_iterations",
        "refine_s",
        "design_s",
        "loss",
        "success",
        "refine_detail",
    ]
    df = df[
        [c for c in cols if c in df.columns]
        + [c for c in df.columns if c not in cols and c != "pramopt"]
    ]
    from pramopt.optimize.strategies.general import REFINE_MAX_ADD, REFINE_QP_MAX
    from pramopt.optimize.strategies.refine import MEMORY

    notes = [
        "pramopt.design(table, alpha=0.1, structure='general'), defaults otherwise, one run per row, each "
        "in a fresh process; refine_iterations / refine_s: the result's 'refine' stage; loss: result.loss.",
        "new: this tree (QP steps with the L2 loss's Hessian diagonal, updated by BFGS with the loss's "
        f"curvature along the last {MEMORY} accepted steps, on supports up to REFINE_QP_MAX = {REFINE_QP_MAX:,} entries, "
        "linear steps on larger "
        f"ones; after every QP step its multipliers price transitions outside the support, up to max({REFINE_MAX_ADD:,}, 2K) "
        "join it and unused ones with a positive reduced cost leave; the refinement ends when a step after "
        "pricing gains < 2 rtol, or two steps in a row predict < rtol).",
        "zipf340: benchmarks._common.zipf_cells(340, n_vars=5, seed=2), 10 combinations of 3 variables.",
    ]
    if bases and "loss" in df:
        n = df[df.code == "new"].set_index("case")
        parts = []
        for label, _ in bases:
            o = df[df.code == label].set_index("case")
            both = o.index.intersection(n.index)
            cmp = pd.DataFrame(
                {
                    "case": both,
                    "base": label,
                    "base_iterations": o.loc[both, "refine_iterations"].values,
                    "new_iterations": n.loc[both, "refine_iterations"].values,
                    "base_refine_s": o.loc[both, "refine_s"].values,
                    "new_refine_s": n.loc[both, "refine_s"].values,
                    "base_loss": o.loc[both, "loss"].values,
                    "new_loss": n.loc[both, "loss"].values,
                }
            )
            cmp["loss_change"] = cmp.new_loss / cmp.base_loss - 1.0
            cmp["new_iterations_to_base_loss"] = [
                to_reach(hist.get((c, "new")), bl) for c, bl in zip(cmp.case, cmp.base_loss)
            ]
            cmp["new_loss_at_20"] = [_at(hist.get((c, "new")), 20) for c in cmp.case]
            parts.append(cmp)
        notes.append(
            "base: "
            + ", ".join(f"{lb} = {d}" for lb, d in bases)
            + "; new_iterations_to_base_loss: "
            "the refinement iterations this tree needs to reach the base's final loss (counted "
            "by the progress callback, one call per iteration that evaluated a step; None: never); new_loss_at_20: its loss after 20 iterations (or at its end, if sooner)."
        )
        write_table(
            pd.concat(parts, ignore_index=True),
            out,
            "refine_compare",
            "Refinement: this tree (new) against earlier code (base)",
            notes=notes,
            floatfmt=".4g",
        )
    write_table(
        df, out, "refine", "Refinement of the exact loss: iterations, seconds, loss", notes=notes
    )
    return df


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--case", help="run one case in this process and print its JSON line")
    ap.add_argument(
        "--base",
        action="append",
        help="a checkout of earlier code to compare with: DIR or LABEL=DIR (may be repeated)",
    )
    ap.add_argument(
        "--new", type=Path, default=REPO, help="the tree of the new code (default: this one)"
    )
    ap.add_argument("--cases", nargs="*", choices=CASES)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.case:
        import warnings

        warnings.simplefilter("ignore")
        print(json.dumps(point(a.case), default=float))
        return
    sys.path.insert(0, str(REPO))
    run(
        a.out,
        quick=a.quick,
        base=a.base,
        cases=a.cases,
        new=a.new,
        log=lambda m: print(f"{time.strftime('%H:%M:%S')} {m}", flush=True),
    )


if __name__ == "__main__":
    main()
