"""Shared helpers: data sets, environment header, tables (CSV + Markdown), timing."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
#: sdcMicro's testdata, shared next to the repository (never copied into it).
TESTDATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "testdata.csv"
TESTDATA_KEYS7 = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]
TESTDATA_KEYS4 = ["urbrur", "roof", "walls", "sex"]

_PACKAGES = (
    "pramopt",
    "numpy",
    "scipy",
    "pandas",
    "cvxpy",
    "highspy",
    "clarabel",
    "scs",
    "ecos",
    "osqp",
    "matplotlib",
)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in _PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            if p == "pramopt":
                import pramopt

                out[p] = getattr(pramopt, "__version__", "?") + " (source tree)"
            else:
                out[p] = "not installed"
    return out


def git_commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or "?"
        )
    except Exception:  # pragma: no cover
        return "?"


def header_lines() -> list[str]:
    v = versions()
    return [
        f"Date: {_dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"Commit: {git_commit()}",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
    ]


def write_table(
    df: pd.DataFrame,
    out: Path,
    name: str,
    title: str,
    notes: list[str] | None = None,
    floatfmt: str = ".4g",
) -> None:
    """Write ``name.csv`` (with a '#' header) and ``name.md``."""
    out.mkdir(parents=True, exist_ok=True)
    head = header_lines()
    with open(out / f"{name}.csv", "w") as f:
        for line in [title] + head:
            f.write(f"# {line}\n")
        df.to_csv(f, index=False)
    md = [f"# {title}", ""] + [f"- {h}" for h in head] + [""]
    md += [_markdown(df, floatfmt), ""]
    for n in notes or []:
        md.append(f"- {n}")
    (out / f"{name}.md").write_text("\n".join(md).rstrip() + "\n")


def read_table(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, comment="#")


def _fmt(x, floatfmt):
    if x is None:
        return ""
    if isinstance(x, (float, np.floating)):
        if np.isnan(x):
            return ""
        if np.isinf(x):
            return "inf"
        return format(float(x), floatfmt)
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    return str(x)


def _markdown(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append(
            "| " + " | ".join(_fmt(row[c], floatfmt).replace("|", "/") for c in cols) + " |"
        )
    return "\n".join(lines)


def timed(fn, repeats: int = 3, budget: float = 30.0):
    """Run ``fn`` up to ``repeats`` times (fewer once ``budget`` seconds are spent).

    Returns (last result, median seconds, number of runs).
    """
    times, res = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
        if sum(times) > budget:
            break
    return res, statistics.median(times), len(times)


def run_child(args: list[str], timeout: float) -> dict:
    """Run ``python -m benchmarks.<args>`` in a fresh process; parse the JSON on its last stdout line."""
    cmd = [sys.executable, "-m"] + args
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout > {timeout:g} s", "wall": time.perf_counter() - t0}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"error: {err[:200]}", "wall": time.perf_counter() - t0}
    out = json.loads(lines[-1])
    out.setdefault("wall", time.perf_counter() - t0)
    return out


def max_rss_mb() -> float:
    """Peak resident memory of this process in MiB.

    Linux: VmHWM of /proc/self/status (per address space, so a child started by a big parent
    does not inherit the parent's peak, as ``ru_maxrss`` does across fork + exec).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024.0 if sys.platform != "darwin" else r / 2**20


# ---------------------------------------------------------------------------------------------
# Data sets
# ---------------------------------------------------------------------------------------------


def zipf_cells(
    n_cells: int,
    *,
    n_vars: int = 6,
    levels: int | None = None,
    s: float = 1.1,
    top: int = 500,
    seed: int = 0,
) -> pd.DataFrame:
    """Seeded microdata with exactly ``n_cells`` present cells and Zipf-like cell counts.

    ``n_cells`` distinct cells are drawn from a product space of ``n_vars`` variables (each with
    ``levels`` categories, by default just enough for 4x more cells than asked); cell of rank r
    gets ``max(1, round(top / r**s))`` records, so the tail is full of rare cells.
    """
    rng = np.random.default_rng(seed)
    if levels is None:
        levels = max(2, int(np.ceil((4 * n_cells) ** (1.0 / n_vars))))
    space = levels**n_vars
    if space < n_cells:
        raise ValueError("product space smaller than the number of cells asked for")
    keys = rng.choice(space, size=n_cells, replace=False)
    codes = np.array(np.unravel_index(keys, (levels,) * n_vars)).T
    counts = np.maximum(1, np.round(top / np.arange(1, n_cells + 1) ** s)).astype(np.int64)
    rows = np.repeat(codes, counts, axis=0)
    rows = rows[rng.permutation(rows.shape[0])]
    return pd.DataFrame(rows, columns=[f"x{i + 1}" for i in range(n_vars)])


def zipf_frame(seed: int, n: int, levels, exponent: float) -> pd.DataFrame:
    """``n`` seeded records over independent variables v0, v1, ... with ``levels`` categories, category
    c of each drawn with probability proportional to 1 / (c + 1)**exponent."""
    rng = np.random.default_rng(seed)
    cols = {}
    for i, L in enumerate(levels):
        p = 1.0 / np.arange(1, L + 1) ** exponent
        cols[f"v{i}"] = rng.choice(L, n, p=p / p.sum())
    return pd.DataFrame(cols)


def records_data(n: int, *, seed: int = 0) -> pd.DataFrame:
    """``n`` records over 4 variables (3, 3, 4, 6 categories) with a few rare cells planted.

    The bulk follows fixed skewed marginals; 6 records in 3 fixed cells of an otherwise empty
    corner keep C1 binding at every n, so the design is never the identity.
    """
    rng = np.random.default_rng(seed)
    lv = (3, 3, 4, 6)
    cols = []
    for L in lv:
        p = 1.0 / np.arange(1, L + 1)
        cols.append(rng.choice(L, size=n, p=p / p.sum()).astype(np.int8))
    X = np.column_stack(cols)
    k = min(6, n)
    X[:k] = np.array(
        [[2, 2, 3, 5], [2, 2, 3, 5], [2, 2, 3, 4], [2, 2, 3, 4], [2, 2, 2, 5], [2, 2, 2, 5]],
        dtype=np.int8,
    )[:k]
    # no other record in that corner (x1 = 2 and x2 = 2 and x3 >= 2)
    bad = (X[k:, 0] == 2) & (X[k:, 1] == 2) & (X[k:, 2] >= 2)
    X[k:][bad, 1] = 0
    return pd.DataFrame(X, columns=["a", "b", "c", "d"])


def datasets(quick: bool = False) -> dict:
    """name -> (DataFrame, qi, note)."""
    import pramopt

    out = {
        "example": (
            pramopt.example_data(),
            list(pramopt.example.EXAMPLE_QI),
            "built-in, seed 3, n 2500",
        )
    }
    if quick:
        z = zipf_cells(30, n_vars=4, top=300, seed=1)
        out["zipf-30"] = (z, list(z.columns), "synthetic Zipf s=1.1, seed 1")
        return out
    if TESTDATA.exists():
        td = pd.read_csv(TESTDATA)
        out["testdata-7"] = (td, TESTDATA_KEYS7, "sdcMicro testdata, 7 keys")
        out["testdata-4"] = (td, TESTDATA_KEYS4, "sdcMicro testdata, 4 keys")
    z = zipf_cells(150, n_vars=5, top=1500, seed=1)
    out["zipf-150"] = (z, list(z.columns), "synthetic Zipf s=1.1, 150 cells, seed 1")
    return out


def reduction_of(res) -> dict:
    """A result's reduction figures as a dict (empty when no solve was needed)."""
    return res.reduction.as_dict() if res.reduction is not None else {}
