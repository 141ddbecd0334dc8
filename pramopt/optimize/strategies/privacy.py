"""Designs under ε-DP and/or Pk-anonymity (Ikarashi et al.), alone or with C1.

Both notions need every entry of a column of P positive together, so the support is dense over
the present cells and the program has K^2 entries of P, one auxiliary column per cell and bound,
and 2 K^2 ratio rows per bound (:mod:`..constraints.privacy`), plus C1's rows when alpha applies
(the rare rows of each cell's own groups first, rows outside them lazily, as the block designs do).

The steps:

1. the start: retention-replacement on the present cells with the largest ρ meeting every
   requirement (:func:`pramopt.baselines.privacy.retention_meeting`) -- feasible, so the design is
   never worse than it;
2. the linear stage (minimum expected number of changed records);
3. the trust-region refinement of the exact L2 loss (:func:`.refine.refine`) from the better of the two;
4. with k: the row weights of the k rows are re-chosen at the current P
   (:func:`..constraints.privacy.balancing_weights`), which keeps P feasible and enlarges the
   linear set around it, and the refinement continues, until a round gains less than ``rtol``.

The caller checks the result exactly (C1, ε, k) and repairs the solver's tolerance by mixing with
the start (the feasible set is convex in P for ε and C1; k is checked again).
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from ...loss import expected_changes
from ..backends import chain
from ..constraints.c1 import WorkingSet
from ..constraints.privacy import RatioBound, balancing_weights, dense_support, pk_ratio_target
from ..problem import DesignProblem, Trace
from ..program import build_program
from ..support import clean
from . import Attempt, AttemptStatus
from .refine import refine

__all__ = ["solve_privacy", "K_ROUNDS"]

#: Most rounds of re-chosen row weights for k.
K_ROUNDS = 6


def solve_privacy(problem: DesignProblem, starts_given, eps_solve: float | None,
                  k_solve: float | None, a_solve: float | None, trace: Trace) -> Attempt:
    """Minimal-loss P with ε <= eps_solve, k >= k_solve and C1 at a_solve (None: not required).

    ``starts_given`` lists ``(name, matrix)`` of feasible matrices (may be empty: the linear stage
    then gives the start); the returned matrix is not verified.
    """
    p = problem.params
    K, counts = problem.K, problem.counts
    sup = dense_support(K)
    n = problem.n
    t0 = time.perf_counter()
    if a_solve is not None:
        rare = np.flatnonzero(counts < 1.0 / problem.alpha)
        nP = problem.groups.member.shape[1]
        ws = WorkingSet(np.repeat(rare, nP), problem.groups.member[rare].ravel(), problem.table, problem.groups,
                        problem.combos, a_solve)
    else:
        ws = WorkingSet(np.zeros(0, np.int64), np.zeros(0, np.int64), problem.table, problem.groups,
                        problem.combos, 1.0)
    r_k = None
    if k_solve is not None:
        a = pk_ratio_target(k_solve, n)
        r_k = math.inf if a <= 0 else 1.0 / math.sqrt(a)
    scale = np.ones(K)

    def bounds():
        out = []
        if eps_solve is not None:
            out.append(RatioBound(math.exp(eps_solve), None, "eps"))
        if r_k is not None and math.isfinite(r_k):
            out.append(RatioBound(r_k, scale.copy(), "pk"))
        return tuple(out)

    def load():
        return chain(build_program(sup, counts, ws.block(sup), ws.a_solve, ratios=bounds()), p.solver)

    def pending(x):
        return ws.missing(sup.to_matrix(x)) if a_solve is not None else []

    lo = np.zeros(sup.size)
    if p.min_diagonal is not None:
        lo[sup.diag] = p.min_diagonal
    hi = np.ones(sup.size)
    cost = np.zeros(sup.size)
    cost[sup.diag] = -counts
    trace.add("privacy(model)", time.perf_counter() - t0, 0,
              f"dense support {sup.size}, {len(bounds())} ratio bounds, {ws.m.size} C1 rows")
    # the linear stage (fewest expected changes, lazy C1 rows) only without a feasible start: its
    # vertex usually has equal rows or a zero column (a singular P, no unbiased estimator)
    t_lin = time.perf_counter()
    rounds = 0
    x_lin = None
    solver = "closed form"
    out = None
    while not starts_given:
        rounds += 1
        lp = load()
        out = lp.solve(cost, lo, hi)
        if out.x is None:
            break
        x = clean(sup, out.x)
        new = pending(x)
        if not new:
            x_lin = x
            break
        ws.add(new)
    if out is not None:
        solver = out.solver
    exact = problem.objective.on_support(sup, counts, sparse=False)

    def evaluate(x):  # a singular P (a zero column, or rows made equal) has no unbiased estimator
        try:
            return exact(x)
        except np.linalg.LinAlgError:
            return math.inf, None, None
    starts = []
    if x_lin is not None:
        f_lin = evaluate(x_lin)[0]
        starts.append(("linear stage", x_lin, f_lin))
        trace.add("privacy(linear)", time.perf_counter() - t_lin, rounds,
                  f"expected changes {expected_changes(sup.to_matrix(x_lin), counts):.4g}, loss {f_lin:.4g}")
    elif out is not None:
        trace.add("privacy(linear)", time.perf_counter() - t_lin, rounds, out.status)
    for name, S in starts_given:
        xs = sup.from_matrix(S)
        starts.append((name, xs, evaluate(xs)[0]))
    starts = [s for s in starts if np.isfinite(s[2])]
    if not starts:
        if out is not None and out.x is None:
            kind = AttemptStatus.INFEASIBLE if out.status == "infeasible" else AttemptStatus.SOLVER_ERROR
            return Attempt(kind, detail=out.status)
        return Attempt(AttemptStatus.SOLVER_ERROR, detail="no start with a finite loss (singular P)")
    starts.sort(key=lambda s: s[2])
    if not (p.refine_loss and p.max_iter > 0):
        name, x, f = starts[0]
        trace.add("privacy(start)", 0.0, 0, f"the {name} (loss {f:.4g})")
        return Attempt(AttemptStatus.OK, P=sup.to_matrix(x), solver=solver)
    solver = f"trust-region SLP ({p.solver or 'HiGHS'})"
    best = None
    # the loss is not convex: a symmetric start (K-ary randomized response) is often a stationary
    # point of the refinement, while the product form leads elsewhere; each start is refined
    for name, x, f in starts:
        t_ref = time.perf_counter()
        scale[:] = 1.0
        its, k_round = 0, 0
        f_prev = f
        lp = load()
        while its < p.max_iter:
            x, info = refine(lp, x, lo, hi, evaluate, check=pending, rtol=p.rtol, max_iter=p.max_iter - its,
                             progress=trace.progress)
            its += info.iterations
            if info.stop_reason == "constraints":
                ws.add(info.added_constraints)
                lp = load()
                continue
            if r_k is None or not math.isfinite(r_k) or k_round >= K_ROUNDS or its >= p.max_iter:
                break
            if k_round and f_prev - info.loss_end <= p.rtol * abs(info.loss_end):
                break
            # re-choose the k rows' weights at the current P: it stays feasible, the linear set grows
            k_round += 1
            f_prev = info.loss_end
            scale[:] = balancing_weights(sup.to_matrix(x).toarray())
            lp = load()
        trace.add(f"privacy(refine {name})", time.perf_counter() - t_ref, its,
                  f"loss {f:.4g} -> {info.loss_end:.4g}, stop: {info.stop_reason}"
                  + (f", {k_round} re-weightings" if k_round else ""))
        if best is None or info.loss_end < best[1]:
            best = (x, info.loss_end)
    x = best[0]
    return Attempt(AttemptStatus.OK, P=sup.to_matrix(x), solver=solver)
