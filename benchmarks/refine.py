"""Study: the refinement of the exact L2 loss, curved (QP) steps against linear ones (SLP).

``python -m benchmarks.refine --base DIR`` designs each case with ``structure="general"`` twice,
each in a fresh process: with this tree's pramopt and with the one in ``DIR`` (a checkout of
the code before the curved model, e.g. ``git worktree add /tmp/base <commit>``), and reports
the refinement's iterations and seconds and the final loss (``result.loss``).  Without
``--base`` only this tree's code runs.

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
    t0 = time.perf_counter()
    res = pramopt.design(table, alpha=ALPHA, structure="general")
    secs = time.perf_counter() - t0
    ref = [s for s in res.stages if s.name == "refine"]
    return dict(case=case, K=table.n_cells, success=bool(res.success), loss=res.loss, design_s=secs,
                refine_iterations=sum(s.iterations for s in ref), refine_s=sum(s.seconds for s in ref),
                refine_detail="; ".join(s.detail for s in ref), pramopt=str(Path(pramopt.__file__).parents[1]))


def _child(case: str, root: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--case", case], cwd=root,
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(case=case, status=f"timeout > {timeout:g} s")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return dict(case=case, status="error: " + ((p.stderr.strip().splitlines() or ["?"])[-1])[:200])
    out = json.loads(lines[-1])
    out["wall_s"] = time.perf_counter() - t0
    return out


def run(out: Path, quick: bool = False, base: Path | None = None, cases=None, timeout: float = 1800.0,
        log=print, new: Path = REPO) -> pd.DataFrame:
    from ._common import write_table

    cases = list(cases or (("example",) if quick else CASES))
    if not TESTDATA.exists():
        cases = [c for c in cases if not c.startswith("testdata")]
    rows = []
    for case in cases:
        for code, root in (("old", base), ("new", new)):
            if root is None:
                continue
            log(f"[refine] {case} ({code})")
            r = _child(case, Path(root), timeout)
            r["code"] = code
            rows.append(r)
    df = pd.DataFrame(rows)
    cols = ["case", "K", "code", "refine_iterations", "refine_s", "design_s", "loss", "success", "refine_detail"]
    df = df[[c for c in cols if c in df.columns] + [c for c in df.columns if c not in cols and c != "pramopt"]]
    from pramopt.optimize.strategies.general import REFINE_MAX_ADD, REFINE_QP_MAX

    notes = ["pramopt.design(table, alpha=0.1, structure='general'), defaults otherwise, one run per row, each "
             "in a fresh process; refine_iterations / refine_s: the result's 'refine' stage; loss: result.loss.",
             "old: the code before the curved model (linear steps, SLP); new: this tree (QP steps with the L2 "
             f"loss's Hessian diagonal on supports up to REFINE_QP_MAX = {REFINE_QP_MAX:,} entries, linear steps on larger "
             f"ones; after every QP step its multipliers price transitions outside the support, up to max({REFINE_MAX_ADD:,}, 2K) "
             "join it and unused ones with a positive reduced cost leave; the refinement ends when a step after "
             "pricing gains < 2 rtol, or two steps in a row predict < rtol).",
             "zipf340: benchmarks._common.zipf_cells(340, n_vars=5, seed=2), 10 combinations of 3 variables."]
    if {"old", "new"} <= set(df.get("code", [])) and "loss" in df:
        o = df[df.code == "old"].set_index("case")
        n = df[df.code == "new"].set_index("case")
        both = o.index.intersection(n.index)
        cmp = pd.DataFrame({"case": both, "old_iterations": o.loc[both, "refine_iterations"].values,
                            "new_iterations": n.loc[both, "refine_iterations"].values,
                            "old_refine_s": o.loc[both, "refine_s"].values,
                            "new_refine_s": n.loc[both, "refine_s"].values,
                            "old_loss": o.loc[both, "loss"].values, "new_loss": n.loc[both, "loss"].values})
        cmp["loss_change"] = cmp.new_loss / cmp.old_loss - 1.0
        write_table(cmp, out, "refine_compare", "Refinement: curved (new) against linear (old) steps", notes=notes,
                    floatfmt=".4g")
    write_table(df, out, "refine", "Refinement of the exact loss: iterations, seconds, loss", notes=notes)
    return df


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", help="run one case in this process and print its JSON line")
    ap.add_argument("--base", type=Path, help="a checkout of the old code to compare with")
    ap.add_argument("--new", type=Path, default=REPO, help="the tree of the new code (default: this one)")
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
    run(a.out, quick=a.quick, base=a.base, cases=a.cases, new=a.new,
        log=lambda m: print(f"{time.strftime('%H:%M:%S')} {m}", flush=True))


if __name__ == "__main__":
    main()
