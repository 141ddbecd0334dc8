"""Study 2: every LP solver on the same reduced design LP.

The problem is the designer's linear stage: minimum expected number of changed records at a fixed
diagonal floor gamma, over the support the designer uses (dense up to 300 cells, else the
"targets" support), with the C1 rows of the reduced working set (pramopt.optimize.constraints.c1, bound (5) rows
left out as the designer does before its lazy rounds).  It is built once per data set and solved
by each solver in a fresh process (a hard time limit, and no solver state shared):

* every LP-capable solver cvxpy has here (HIGHS, CLARABEL, ECOS, SCS, OSQP, SCIPY), through
  the cvxpy backend (``pramopt.optimize.backends.cvx``) with the options the library passes;
* ``scipy.optimize.linprog(method="highs")`` on the same matrices;
* ``highspy`` directly (``pramopt.optimize.backends.highs``, the model the refinement keeps warm).

Reported: build time (Python objects), compile time (cvxpy's canonicalisation, cached for the
re-solves), solve time (median of up to 3 solves), objective (expected changes), the largest
violation of the raw solution (row sums, C1 rows N x - alpha' B x, bounds) before cleaning, and
whether the cleaned matrix passes the full C1 check ``c1_risk <= alpha``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

import pramopt
from pramopt.optimize.backends.cvx import CvxpyProgram
from pramopt.optimize.backends.cvx import _options as _solver_options
from pramopt.optimize.backends.highs import load as load_highs
from pramopt.optimize.constraints.c1 import C1Rows, c1_block, reduce_constraints
from pramopt.optimize.problem import DesignProblem
from pramopt.optimize.program import build_program, row_sum_matrix
from pramopt.optimize.strategies.general import initial_support
from pramopt.optimize.support import clean
from pramopt.params import DENSE_SUPPORT_MAX, GAMMA_LADDER, DesignParams
from pramopt.verify import c1_risk

from ._common import datasets, run_child, write_table

LP_SOLVERS = ("HIGHS", "CLARABEL", "ECOS", "SCS", "OSQP", "SCIPY")
DIRECT = ("scipy.linprog(highs)", "highspy (direct)")
MARGIN = 1e-5


def build_problem(table, alpha, gamma):
    combos = pramopt.resolve_combinations(table.qi)
    counts = table.counts.astype(float)
    problem = DesignProblem.build(table, combos, DesignParams(alpha=alpha))
    groups = problem.groups
    red = reduce_constraints(table, groups, alpha, gamma, lazy_outside=True)
    mode = "dense" if table.n_cells <= DENSE_SUPPORT_MAX else "targets"
    sup = initial_support(problem, gamma, mode)
    blk = c1_block(sup, groups, counts, red.m, red.g)
    c = np.zeros(sup.size)
    c[sup.diag] = -counts
    lo = np.zeros(sup.size)
    lo[sup.diag] = gamma
    hi = np.ones(sup.size)
    return dict(
        table=table,
        combos=combos,
        counts=counts,
        sup=sup,
        blk=blk,
        c=c,
        lo=lo,
        hi=hi,
        mode=mode,
        a_solve=alpha * (1 - MARGIN),
        alpha=alpha,
        gamma=gamma,
    )


def find_gamma(table, alpha):
    """First floor of the designer's ladder at which the reduced LP is feasible (HiGHS)."""
    for g in GAMMA_LADDER:
        pr = build_problem(table, alpha, g)
        out = load_highs(build_program(pr["sup"], [C1Rows(pr["blk"], pr["a_solve"])])).solve(
            pr["c"], pr["lo"], pr["hi"]
        )
        if out.x is not None:
            return g
    return None


def raw_violation(pr, x):
    sup, blk = pr["sup"], pr["blk"]
    rows = float(np.max(np.abs(row_sum_matrix(sup) @ x - 1.0)))
    c1 = 0.0
    if blk.m.size:
        D = blk.B @ x
        c1 = float(max(0.0, np.max(blk.N @ x - pr["a_solve"] * D[blk.gpos])))
    bnd = float(max(0.0, np.max(pr["lo"] - x), np.max(x - pr["hi"])))
    return rows, c1, bnd


def one(dname, alpha, gamma, solver, repeats, quick) -> dict:
    df, qi, _ = datasets(quick)[dname]
    table = pramopt.frequency_table(df, qi)
    t0 = time.perf_counter()
    pr = build_problem(table, alpha, gamma)
    t_model = time.perf_counter() - t0
    sup, blk, counts = pr["sup"], pr["blk"], pr["counts"]
    out = dict(
        dataset=dname,
        K=table.n_cells,
        alpha=alpha,
        gamma=gamma,
        solver=solver,
        support=sup.size,
        support_mode=pr["mode"],
        c1_rows=int(blk.m.size),
        model_s=t_model,
    )
    scale = float(np.max(np.abs(pr["c"])))
    times, x, status = [], None, "?"
    if solver in LP_SOLVERS:
        t0 = time.perf_counter()
        lp = CvxpyProgram(build_program(sup, [C1Rows(blk, pr["a_solve"])]), solver)
        lp.c.value, lp.lo.value, lp.hi.value = pr["c"] / scale, pr["lo"], pr["hi"]
        out["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            lp.problem.get_problem_data(solver)
        except Exception as exc:
            out.update(status=f"error: {type(exc).__name__}: {str(exc)[:80]}")
            return out
        out["compile_s"] = time.perf_counter() - t0
        opts = _solver_options(solver)
        for _ in range(repeats):
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lp.problem.solve(solver=solver, **opts)
                status = lp.problem.status
            except Exception as exc:
                status = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
            times.append(time.perf_counter() - t0)
            if sum(times) > 20:
                break
        x = None if lp.y.value is None else np.asarray(lp.y.value).ravel()[: sup.size]
        out["options"] = json.dumps(opts) if opts else "defaults"
    elif solver == "scipy.linprog(highs)":
        from scipy.optimize import linprog

        t0 = time.perf_counter()
        nG = blk.groups.size if blk.m.size else 0
        R = row_sum_matrix(sup)
        if nG:
            sel = sp.csr_matrix(
                (np.full(blk.m.size, pr["a_solve"]), (np.arange(blk.m.size), blk.gpos)),
                shape=(blk.m.size, nG),
            )
            A_eq = sp.bmat([[R, None], [blk.B, -sp.identity(nG)]], format="csr")
            A_ub = sp.hstack([blk.N, -sel], format="csr")
            b_ub = np.zeros(blk.m.size)
        else:
            A_eq, A_ub, b_ub = R, None, None
        b_eq = np.concatenate([np.ones(sup.K), np.zeros(nG)])
        bounds = np.column_stack(
            [
                np.concatenate([pr["lo"], np.zeros(nG)]),
                np.concatenate([pr["hi"], np.full(nG, np.inf)]),
            ]
        )
        cc = np.concatenate([pr["c"] / scale, np.zeros(nG)])
        out["build_s"] = time.perf_counter() - t0
        out["compile_s"] = 0.0
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = linprog(
                cc,
                A_ub=A_ub,
                b_ub=b_ub,
                A_eq=A_eq,
                b_eq=b_eq,
                bounds=bounds,
                method="highs",
                options={"time_limit": 120.0},
            )
            times.append(time.perf_counter() - t0)
            status = "optimal" if r.status == 0 else f"status {r.status}: {r.message[:60]}"
            if sum(times) > 20:
                break
        x = r.x[: sup.size] if r.x is not None else None
        out["options"] = "defaults"
    elif solver == "highspy (direct)":
        t0 = time.perf_counter()
        lp = load_highs(build_program(sup, [C1Rows(blk, pr["a_solve"])]))
        out["build_s"] = time.perf_counter() - t0
        out["compile_s"] = 0.0
        for _ in range(repeats):
            # a fresh model each time, so the median is not a warm re-solve
            if times:
                lp = load_highs(build_program(sup, [C1Rows(blk, pr["a_solve"])]))
            t0 = time.perf_counter()
            o = lp.solve(pr["c"], pr["lo"], pr["hi"])
            times.append(time.perf_counter() - t0)
            status = o.status
            if sum(times) > 20:
                break
        x = o.x
        out["options"] = "defaults (simplex)"
    else:
        raise ValueError(solver)
    out["solve_s"] = statistics.median(times) if times else np.nan
    out["solves"] = len(times)
    out["status"] = str(status)
    if x is None:
        return out
    out["objective"] = float(np.sum(counts * (1.0 - x[sup.diag])))
    out["viol_rows"], out["viol_c1"], out["viol_bounds"] = raw_violation(pr, x)
    P = sup.to_matrix(clean(sup, x)).toarray()
    rep = c1_risk(P, table.codes, table.counts, pr["combos"])
    out["max_risk_clean"] = float(rep.max_risk)
    out["verified"] = bool(rep.max_risk <= alpha)
    return out


def solvers_here() -> list[str]:
    import cvxpy as cp

    inst = set(cp.installed_solvers())
    return [s for s in LP_SOLVERS if s in inst] + list(DIRECT)


def run(
    out: Path,
    quick: bool = False,
    alpha: float = 0.1,
    timeout: float | None = None,
    log=print,
    solvers=None,
    only=None,
) -> pd.DataFrame:
    timeout = timeout or 60.0
    rows = []
    names = [s for s in solvers_here() if solvers is None or s in solvers]
    for dname, (df, qi, _) in datasets(quick).items():
        if only is not None and dname not in only:
            continue
        table = pramopt.frequency_table(df, qi)
        gamma = find_gamma(table, alpha)
        if gamma is None:
            log(f"[solvers] {dname}: reduced LP infeasible on the whole ladder; skipped")
            continue
        for s in names:
            log(f"[solvers] {dname} (K={table.n_cells}) gamma={gamma} {s}")
            args = ["benchmarks.solvers", "--one", dname, str(alpha), str(gamma), s, "3"] + (
                ["--quick"] if quick else []
            )
            r = run_child(args, timeout)
            r.setdefault("dataset", dname)
            r.setdefault("K", table.n_cells)
            r.setdefault("solver", s)
            r.setdefault("alpha", alpha)
            r.setdefault("gamma", gamma)
            rows.append(r)
    res = pd.DataFrame(rows)
    cols = [
        "dataset",
        "K",
        "alpha",
        "gamma",
        "support",
        "support_mode",
        "c1_rows",
        "solver",
        "status",
        "build_s",
        "compile_s",
        "solve_s",
        "solves",
        "objective",
        "obj_rel_diff",
        "viol_rows",
        "viol_c1",
        "viol_bounds",
        "max_risk_clean",
        "verified",
        "options",
    ]
    if "objective" in res:
        ref = res[res.solver == "HIGHS"].set_index("dataset")["objective"]
        res["obj_rel_diff"] = [
            (o - ref.get(d, np.nan)) / max(abs(ref.get(d, np.nan)), 1e-12)
            for d, o in zip(res.dataset, res.objective)
        ]
    for c in cols:
        if c not in res:
            res[c] = np.nan
    res = res[cols]
    write_table(
        res,
        out,
        "solvers",
        f"Solver comparison on the reduced design LP (alpha = {alpha})",
        notes=[
            "Same LP for every solver: minimum expected changes at the diagonal floor gamma (the first floor of the "
            "designer's ladder at which the reduced LP is feasible), reduced C1 rows, the designer's support.",
            "build_s: Python objects (cvxpy Problem / sparse matrices / HiGHS model); compile_s: cvxpy "
            "canonicalisation for that solver (cached for re-solves); solve_s: median of `solves` solves (cvxpy's "
            "solve() call, including its data transfer).",
            "objective: expected number of changed records of the raw solution; obj_rel_diff relative to HIGHS.",
            "viol_*: largest violation of the raw solution before clipping/renormalising: |row sum - 1|, "
            "max(N x - alpha' B x) over the C1 rows, bounds.",
            "verified: the cleaned matrix passes the full C1 check (c1_risk <= alpha). Without the designer's lazy "
            "rounds a correct solution can still fail on rows outside the reduced set; compare with HIGHS.",
            f"Each solver runs in its own process with a {timeout:g} s limit (status 'timeout').",
        ],
    )
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=5, metavar=("DATASET", "ALPHA", "GAMMA", "SOLVER", "REPEATS"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    d, al, g, s, rep = a.one
    r = one(d, float(al), float(g), s, int(rep), a.quick)
    print(json.dumps(r, default=float))


if __name__ == "__main__":
    main()
