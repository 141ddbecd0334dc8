"""Random design cases and checks written from the paper's definitions, for the property tests.

Each case is a small random data set (2-5 identifying variables, 20-600 records, skewed
categories) with a random alpha, set of combinations and options (``min_diagonal``, ``fixed``,
``keep_cells``, ``invariant``, ``structure``).  The checks use nothing of pramopt's but the
result's matrix and the order of its cells:

* :func:`brute_force_risk` -- the largest left-hand side of C1 (Cator, Hensbergen & Rozenholc,
  eq. (1)) over every present cell m, every combination and every k0, with U0 counted here from
  the records;
* :func:`option_violations` -- every option the result must honour (floor, strata, kept cells,
  invariance);
* :func:`witness` -- a design that shows C1 *can* hold with the case's fixed variables, kept cells
  and invariance: per stratum ``P = lam I + (1 - lam) 1 w^T`` over the cells that may move, with
  ``w`` proportional to their counts.  It is invertible (det = lam^(k-1) per stratum), invariant,
  and its risk tends to at most 1 / (records of the stratum) as lam -> 0.

Run as a script for a campaign: ``python tests/random_cases.py 1000``.
"""

from __future__ import annotations

import itertools
import sys
import time

import numpy as np
import pandas as pd

OPTION_NAMES = ("min_diagonal", "fixed", "keep_cells", "invariant", "structure")


def make_case(seed: int) -> dict:
    """A random data set and the arguments of one design."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 6))
    n = int(rng.integers(20, 601))
    cols = {}
    for j in range(d):
        c = int(rng.integers(2, 6))
        p = rng.dirichlet(np.full(c, 0.7))
        cols[f"q{j}"] = rng.choice(c, n, p=p)
    df = pd.DataFrame(cols)
    df["w"] = rng.random(n)
    qi = [f"q{j}" for j in range(d)]
    alpha = float(np.round(rng.uniform(0.05, 0.34), 3))
    opts: dict = {}
    if rng.random() < 0.25 and d >= 2:
        size = int(rng.integers(1, min(3, d) + 1))
        combos = [list(c) for c in itertools.combinations(qi, size)]
        pick = rng.choice(len(combos), size=int(rng.integers(1, len(combos) + 1)), replace=False)
        opts["combinations"] = [combos[i] for i in sorted(pick)]
    else:
        opts["combination_size"] = int(rng.integers(1, 4))
    u = rng.random(5)
    if u[0] < 0.3:
        opts["min_diagonal"] = float(rng.choice([0.0, 0.3, 0.5, 0.7, 0.9]))
    if u[1] < 0.2:
        opts["fixed"] = [qi[int(rng.integers(d))]]
    if u[2] < 0.15:
        cell = df[qi].iloc[int(rng.integers(n))]
        opts["keep_cells"] = [{q: int(cell[q]) for q in qi}]
    if u[3] < 0.25:
        opts["invariant"] = True
    if u[4] < 0.35:
        opts["structure"] = str(rng.choice(["general", "blocks", "replacement"]))
    opts["max_iter"] = 5  # the refinement's length does not change what is checked, only the time
    return {"seed": seed, "df": df, "qi": qi, "alpha": alpha, "options": opts}


def _combos(qi, options) -> list[tuple[int, ...]]:
    if options.get("combinations"):
        return [tuple(qi.index(v) for v in c) for c in options["combinations"]]
    size = min(options.get("combination_size", 3), len(qi))
    return list(itertools.combinations(range(len(qi)), size))


def _cells_and_counts(res, df, qi):
    cells = [tuple(r) for r in res.cells[qi].itertuples(index=False)]
    index = {c: i for i, c in enumerate(cells)}
    U0 = np.zeros(len(cells))
    for r in df[qi].itertuples(index=False):
        U0[index[tuple(r)]] += 1  # a KeyError here: a record outside the matrix's cells
    return cells, U0


def brute_force_risk(res, df: pd.DataFrame, qi, options) -> float:
    """Largest left-hand side of C1 over every present m, every combination and every k0."""
    P = res.to_dense()
    if not np.all(np.isfinite(P)) or np.any(P < 0):
        return float("nan")
    cells, U0 = _cells_and_counts(res, df, qi)
    return _max_risk(P, cells, U0, _combos(qi, options))


def _max_risk(P, cells, U0, combos) -> float:
    """max over π, k0 and m of S[m, g] / sum_l U0(l) S[l, g], S[m, g] = sum_{k in g} P[m, k] (eq. (1))."""
    worst = 0.0
    for pi in combos:
        proj = [tuple(c[i] for i in pi) for c in cells]
        for k0 in set(proj):
            cols = [j for j, c in enumerate(proj) if c == k0]
            S = P[:, cols].sum(axis=1)
            worst = max(worst, float(S.max() / (U0 @ S)))
    return worst


def option_violations(res, df, qi, options) -> list[str]:
    """Every promise of the options that the result's matrix breaks (empty: all honoured)."""
    P = res.to_dense()
    cells, U0 = _cells_and_counts(res, df, qi)
    bad = []
    if not np.allclose(P.sum(axis=1), 1.0, atol=1e-9) or P.min() < 0:
        bad.append("not row-stochastic")
    md = options.get("min_diagonal")
    if md is not None and np.diag(P).min() < md - 1e-12:
        bad.append(f"smallest diagonal {np.diag(P).min():.4g} < min_diagonal {md}")
    for f in options.get("fixed") or ():
        j = qi.index(f)
        rows, cols = np.nonzero(P > 0)
        if any(cells[r][j] != cells[c][j] for r, c in zip(rows, cols)):
            bad.append(f"a transition changes fixed variable {f}")
    for kc in options.get("keep_cells") or ():
        k = cells.index(tuple(kc[q] for q in qi))
        if P[k, k] != 1.0:
            bad.append(f"kept cell {k} has P_kk = {P[k, k]}")
    if options.get("invariant"):
        if not np.allclose(U0 @ P, U0, rtol=1e-7, atol=1e-7 * U0.sum()):
            bad.append(f"not invariant (largest |U0 P - U0| = {np.abs(U0 @ P - U0).max():.3g})")
    return bad


def witness(df, qi, alpha, options, lam: float = 1e-3) -> float:
    """The C1 risk of ``lam I + (1 - lam) 1 w^T`` per stratum over the cells that may move.

    The matrix respects ``fixed``, ``keep_cells`` and ``invariant`` (and any explicit or default
    combinations); when its risk is <= alpha, a design meeting those options exists.
    """
    counts = df.groupby(qi, sort=True).size()
    cells = list(counts.index)
    cells = [c if isinstance(c, tuple) else (c,) for c in cells]
    U0 = counts.to_numpy(dtype=float)
    K = len(cells)
    kept = {tuple(kc[q] for q in qi) for kc in options.get("keep_cells") or ()}
    movable = np.array([c not in kept for c in cells])
    fixed = [qi.index(f) for f in options.get("fixed") or ()]
    strata = [tuple(c[j] for j in fixed) for c in cells]
    P = np.eye(K)
    for s in set(strata):
        idx = np.flatnonzero([(st == s) and mv for st, mv in zip(strata, movable)])
        if idx.size == 0:
            continue
        w = U0[idx] / U0[idx].sum()
        P[np.ix_(idx, idx)] = lam * np.eye(idx.size) + (1 - lam) * np.outer(np.ones(idx.size), w)
    return _max_risk(P, cells, U0, _combos(qi, options))


def weaker(options: dict) -> list[tuple[str, dict]]:
    """Options that permit every design the given ones permit (and maybe more)."""
    out = []
    for name in ("min_diagonal", "fixed", "keep_cells", "invariant"):
        if options.get(name) not in (None, False):
            o = dict(options)
            o.pop(name)
            out.append((f"without {name}", o))
    if options.get("min_diagonal"):
        out.append(("min_diagonal=0.0", {**options, "min_diagonal": 0.0}))
    if options.get("structure"):
        o = dict(options)
        o.pop("structure")
        out.append(("structure auto", o))
    return out


def release_problems(res, df: pd.DataFrame, seed: int) -> list[str]:
    """Save and load the design, release the data written as CSV, and compare the two files'
    texts: the file's alpha and combinations are in (0, 1) and non-empty, every record the
    release did not change is written as it was read, and the release reports exactly the
    records whose text it changed (never fewer)."""
    import csv
    import tempfile
    from pathlib import Path

    import pramopt

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "design").mkdir()
        pramopt.save_design(res, d / "design")
        loaded = pramopt.load_design(d / "design")
        if not (0 < loaded.alpha < 1) or not loaded.combinations or not all(loaded.combinations):
            out.append(f"design file: alpha {loaded.alpha}, combinations {loaded.combinations}")
        df.to_csv(d / "data.csv", index=False)
        rel = pramopt.release_file(d / "data.csv", d / "rel.csv", loaded, seed=seed)
        with open(d / "data.csv", newline="") as a, open(d / "rel.csv", newline="") as b:
            src, dst = list(csv.reader(a)), list(csv.reader(b))
    if src[0] != dst[0] or len(src) != len(dst):
        return out + ["release: header or number of lines differ"]
    qi = set(res.qi)
    keep = [j for j, name in enumerate(src[0]) if name not in qi]
    if any([r[j] for j in keep] != [s[j] for j in keep] for r, s in zip(src[1:], dst[1:])):
        out.append("release: a non-identifying field was rewritten")
    differ = sum(r != s for r, s in zip(src[1:], dst[1:]))
    if rel.changed != differ:
        out.append(f"release: reported {rel.changed} changed, {differ} records written otherwise")
    return out


def campaign(seeds, log=None) -> dict:
    """Run pramopt.design on every case and count what the property tests assert."""
    import pramopt

    figures = {
        "cases": 0,
        "successes": 0,
        "unsafe": 0,
        "options broken": 0,
        "infeasible": 0,
        "false infeasible": 0,
        "weaker option failed": 0,
        "other status": 0,
        "release problems": 0,
        "seconds": 0.0,
    }
    problems = []
    t0 = time.perf_counter()
    for seed in seeds:
        case = make_case(seed)
        df, qi, alpha, opts = case["df"], case["qi"], case["alpha"], case["options"]
        res = pramopt.design(df, qi, alpha, **opts)
        figures["cases"] += 1
        if res.success:
            figures["successes"] += 1
            risk = brute_force_risk(res, df, qi, opts)
            if not risk <= alpha:
                figures["unsafe"] += 1
                problems.append((seed, f"unsafe: risk {risk} > {alpha}"))
            for p in release_problems(res, df, seed):
                figures["release problems"] += 1
                problems.append((seed, p))
            broken = option_violations(res, df, qi, opts)
            if broken:
                figures["options broken"] += 1
                problems.append((seed, f"options broken: {broken}"))
            for name, o in weaker(opts):
                r2 = pramopt.design(df, qi, alpha, **o)
                if not r2.success:
                    figures["weaker option failed"] += 1
                    problems.append((seed, f"{name}: {r2.status.value}: {r2.message}"))
        elif res.status.value == "infeasible":
            figures["infeasible"] += 1
            forbids = (opts.get("min_diagonal") or 0) > 0 or "structure" in opts
            if len(df) * alpha > 1 and not forbids and witness(df, qi, alpha, opts) <= alpha:
                figures["false infeasible"] += 1
                problems.append((seed, f"false infeasible: {res.message}"))
        else:
            figures["other status"] += 1
            problems.append((seed, f"{res.status.value}: {res.message}"))
        if log is not None and problems and problems[-1][0] == seed:
            print(seed, opts, alpha, len(df), problems[-1][1][:400], file=log, flush=True)
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    figures["problems"] = problems
    return figures


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    out = campaign(range(start, start + n), log=sys.stderr)
    out.pop("problems")
    print(out)
