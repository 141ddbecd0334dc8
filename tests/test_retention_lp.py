"""The retentions of a replacement design optimised against the exact C1
(strategies/replacement_retentions.py).

Every optimum is compared with an independent computation: the dense linear program written from
C1's definition (tests/full_c1.py, loops over combinations, groups and rows) on the K x K entries
of ``P = diag(1 - o) + o w^T``, solved by scipy's linprog; the loss's gradient with central
differences; the loss itself with the covariance of the released counts (tests/reference.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from full_c1 import full_c1_rows
from reference import c1_max_risk_from_definition, l2_loss_from_covariance

import pramopt
from benchmarks._common import zipf_frame
from pramopt.frequency.combinations import resolve_combinations
from pramopt.optimize.problem import DesignProblem
from pramopt.optimize.strategies.replacement import replacement_loss, replacement_matrix
from pramopt.optimize.strategies.replacement_retentions import (
    optimise_retentions,
    replacement_loss_grad,
)
from pramopt.params import DesignParams
from pramopt.verify import c1_risk

FLOOR = 1e-3


def _data(seed, n, levels):
    return zipf_frame(seed, n, levels, 1.3)


def _problem(df, alpha, size=None, **kw):
    t = pramopt.frequency_table(df, list(df.columns))
    p = DesignParams.from_options("design", alpha=alpha, **kw)
    return DesignProblem.build(t, resolve_combinations(t.qi, size, None, "x"), p)


def _w(pb, pools, seed):
    """A replacement distribution per pool: the counts times random weights, nothing on a few
    frequent cells (so that some cells receive nothing)."""
    rng = np.random.default_rng(seed)
    w = pb.counts * rng.uniform(0.3, 1.5, pb.K)
    w[np.argsort(-pb.counts)[1:3]] = 0.0
    for p in np.unique(pools):
        cells = pools == p
        if w[cells].sum() == 0:
            w[cells] = pb.counts[cells]
        w[cells] /= w[cells].sum()
    return w


def _jacobian(w, pools):
    """J with vec(P) = vec(I) + J o for P = diag(1 - o) + o w^T within pools: column k is row k of P
    moving from e_k to w (restricted to k's pool), written entry by entry."""
    K = w.size
    J = np.zeros((K * K, K))
    for k in range(K):
        row = np.where(pools == pools[k], w, 0.0)
        row[k] -= 1.0
        J[k * K : (k + 1) * K, k] = row
    return J


def _dense(pb, w, pools, alpha, cost, kept=()):
    """min cost . o subject to the full C1 of diag(1 - o) + o w^T (pools), from the definition."""
    from scipy.optimize import linprog

    K = pb.K
    A = full_c1_rows(pb.table, alpha, combos=pb.combos)
    J = _jacobian(w, pools)
    hi = np.full(K, 1.0 - FLOOR)
    hi[list(kept)] = 0.0
    res = linprog(
        cost,
        A_ub=A @ J,
        b_ub=-(A @ np.eye(K).ravel()),
        bounds=np.column_stack([np.zeros(K), hi]),
        method="highs",
    )
    assert res.status == 0, res.message
    return res.fun


CASES = [  # seed, records, levels, alpha, combination size, pools (None: one, else by variable 0)
    (0, 60, (3, 2, 3), 0.2, 2, None),
    (1, 80, (2, 3, 3), 0.15, 3, None),
    (2, 120, (3, 3, 2), 0.12, 2, "v0"),
    (3, 50, (4, 2, 2), 0.25, 2, None),
    (4, 200, (3, 3, 2, 2), 0.1, 3, None),
]


@pytest.mark.parametrize("seed,n,levels,alpha,size,pool", CASES)
def test_changes_optimum_equals_the_dense_program_from_the_definition(
    seed, n, levels, alpha, size, pool
):
    df = _data(seed, n, levels)
    pb = _problem(df, alpha, size)
    assert 3 <= pb.K <= 40
    pools = (
        np.zeros(pb.K, dtype=np.int64) if pool is None else pb.table.codes[:, 0].astype(np.int64)
    )
    w = _w(pb, pools, seed)
    U = pb.counts
    cost = U * (1.0 - w)
    best = _dense(pb, w, pools, alpha, cost)
    res = optimise_retentions(pb, np.zeros(pb.K), w, pools, alpha, FLOOR, objective="changes")
    assert res is not None
    assert res.changes == pytest.approx(best, rel=1e-6, abs=1e-7)
    # the retentions meet the full C1 (at the solver's tolerance) and the floor
    P = replacement_matrix(res.o, w, pools)
    assert c1_risk(P, pb.table.codes, U, pb.combos).max_risk <= alpha * (1 + 1e-7)
    assert np.all(1.0 - res.o >= FLOOR - 1e-12)


def _several_pools(seed):
    """A small table with pools by its first variable, its alpha and replacement distributions."""
    df = _data(seed, 30 + 10 * (seed % 6), (2, 3, 2))
    alpha = (0.3, 0.2, 0.5)[seed % 3]
    pb = _problem(df, alpha, 2)
    pools = pb.table.codes[:, 0].astype(np.int64)
    return pb, alpha, pools, _w(pb, pools, seed)


@pytest.mark.parametrize("seed", [*range(6), 12, 13, 24, 25])
def test_any_cost_optimum_equals_the_dense_program_with_several_pools(seed):
    # Costs of either sign (some cells are rewarded for sending) and pools by the first variable:
    # the program imposes only the rows of rare cells inside their own groups, and the rows of
    # rare cells outside a group are implied (the module's argument); the dense program has them all.
    # From no imposed row, the first solutions violate inside rows and with them outside ones
    # (seeds 12 to 25): the lazy rounds must add the inside rows, not give up.
    from pramopt.optimize.strategies.replacement_retentions import RetentionProgram

    pb, alpha, pools, w = _several_pools(seed)
    cost = pb.counts * np.random.default_rng(seed).uniform(-1.0, 1.0, pb.K)
    best = _dense(pb, w, pools, alpha, cost)
    prog = RetentionProgram(pb, w, pools, alpha, FLOOR)
    o, _, status = prog.solve(cost, np.zeros(pb.K), prog.hi, np.zeros(prog.in_m.size, dtype=bool))
    assert status == "ok"
    assert cost @ o == pytest.approx(best, rel=1e-6, abs=1e-7)
    P = replacement_matrix(o, w, pools)
    assert c1_risk(P, pb.table.codes, pb.counts, pb.combos).max_risk <= alpha * (1 + 1e-7)


def test_costs_on_the_scale_of_the_loss_still_give_the_optimum():
    # The minimisation's costs are the loss's gradient, of the order of the loss (1e-8 on census
    # samples): below the simplex's dual tolerance, where an unscaled solve stopped at a vertex
    # that is not optimal on this table (-72.136 against -72.156).  The dense program is solved
    # at the costs' own scale.
    from pramopt.optimize.strategies.replacement_retentions import RetentionProgram

    pb = _problem(_data(1, 400, (5, 5, 4)), 0.2)
    pools = pb.table.codes[:, 0].astype(np.int64)
    w = _w(pb, pools, 1)
    cost = pb.counts * np.random.default_rng(1).uniform(-1.0, 1.0, pb.K)
    best = _dense(pb, w, pools, 0.2, cost)
    prog = RetentionProgram(pb, w, pools, 0.2, FLOOR)
    o, _, status = prog.solve(
        1e-9 * cost, np.zeros(pb.K), prog.hi, np.zeros(prog.in_m.size, dtype=bool)
    )
    assert status == "ok"
    assert cost @ o == pytest.approx(best, rel=1e-7)


@pytest.mark.parametrize("seed", [6, 18])
def test_an_infeasible_program_is_reported_infeasible(seed):
    # The dense program from the definition has no solution here (no retentions with these w meet
    # C1): the lazy program must end on the solver's infeasibility, after adding the inside rows
    from scipy.optimize import linprog

    from pramopt.optimize.strategies.replacement_retentions import RetentionProgram

    pb, alpha, pools, w = _several_pools(seed)
    K = pb.K
    A = full_c1_rows(pb.table, alpha, combos=pb.combos)
    J = _jacobian(w, pools)
    ref = linprog(
        np.zeros(K),
        A_ub=A @ J,
        b_ub=-(A @ np.eye(K).ravel()),
        bounds=[(0, 1 - FLOOR)] * K,
        method="highs",
    )
    assert ref.status == 2  # infeasible
    prog = RetentionProgram(pb, w, pools, alpha, FLOOR)
    cost = pb.counts * np.random.default_rng(seed).uniform(-1.0, 1.0, K)
    o, _, status = prog.solve(cost, np.zeros(K), prog.hi, np.zeros(prog.in_m.size, dtype=bool))
    assert o is None and status.startswith("infeasible")


def test_kept_cells_keep_their_records_and_the_optimum_follows():
    df = _data(0, 60, (3, 2, 3))
    pb0 = _problem(df, 0.2, 2)
    # keep the most frequent cell
    k = int(np.argmax(pb0.counts))
    cell = {q: pb0.table.categories[j][pb0.table.codes[k, j]] for j, q in enumerate(pb0.table.qi)}
    pb = _problem(df, 0.2, 2, keep_cells=[cell])
    pools = np.zeros(pb.K, dtype=np.int64)
    w = _w(pb, pools, 0)
    cost = pb.counts * (1.0 - w)
    best = _dense(pb, w, pools, 0.2, cost, kept=pb.keep_rows)
    res = optimise_retentions(pb, np.zeros(pb.K), w, pools, 0.2, FLOOR, objective="changes")
    assert res.changes == pytest.approx(best, rel=1e-6, abs=1e-7)
    assert np.all(res.o[pb.keep_rows] == 0.0)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_invariant_optimum_equals_the_dense_program(seed):
    # invariant: U0^T P = U0^T, written on the K x K entries from its definition (column k's
    # released count sum_l U0(l) P_lk equals U0(k)).  Invariance ties every retention to one scale
    # per pool (U0(k) o_k = w_k T), so w stays within 5% of the counts' shares to keep it feasible
    from scipy.optimize import linprog

    s, n, levels, alpha, size, _ = CASES[seed]
    df = _data(s, n, levels)
    pb = _problem(df, alpha, size, invariant=True)
    K, U = pb.K, pb.counts
    pools = np.zeros(K, dtype=np.int64)
    rng = np.random.default_rng(seed)
    w = U * rng.uniform(0.95, 1.05, K)
    w /= w.sum()
    J = _jacobian(w, pools)
    A = full_c1_rows(pb.table, alpha, combos=pb.combos)
    C = np.zeros((K, K * K))
    for k in range(K):
        C[k, np.arange(K) * K + k] = U
    cost = U * (1.0 - w)
    ref = linprog(
        cost,
        A_ub=A @ J,
        b_ub=-(A @ np.eye(K).ravel()),
        A_eq=C @ J,
        b_eq=U - C @ np.eye(K).ravel(),
        bounds=[(0, 1 - FLOOR)] * K,
        method="highs",
    )
    assert ref.status == 0, ref.message
    res = optimise_retentions(pb, np.zeros(K), w, pools, alpha, FLOOR, objective="changes")
    assert res.changes == pytest.approx(ref.fun, rel=1e-6, abs=1e-7)
    P = replacement_matrix(res.o, w, pools).toarray()
    np.testing.assert_allclose(U @ P, U, rtol=1e-7, atol=1e-7)


def test_loss_gradient_matches_central_differences():
    rng = np.random.default_rng(0)
    K = 14
    pools = np.array([0] * 6 + [1] * 8)
    o = rng.uniform(0.0, 0.8, K)
    w = rng.uniform(0.0, 1.0, K)
    w[[1, 9]] = 0.0
    for p in (0, 1):
        w[pools == p] /= w[pools == p].sum()
    U = rng.integers(1, 30, K).astype(float)
    f, g = replacement_loss_grad(o, w, pools, U)
    assert f == pytest.approx(replacement_loss(o, w, pools, U), rel=1e-12)
    h = 1e-6
    fd = [
        (replacement_loss(o + h * e, w, pools, U) - replacement_loss(o - h * e, w, pools, U))
        / (2 * h)
        for e in np.eye(K)
    ]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9 * np.abs(g).max())


@pytest.mark.parametrize("seed,n,levels,alpha,size,pool", CASES[:4])
def test_loss_optimum_beats_the_start_and_matches_a_dense_local_search(
    seed, n, levels, alpha, size, pool
):
    # The start is the relaxation's retentions (as in the designer); the result must meet the full
    # C1, lose less than the start and not be beaten by a dense local search (SLSQP on the exact
    # loss from the covariance of the released counts, over C1's rows written from the definition).
    from scipy.optimize import minimize

    from pramopt.optimize.relaxation import flow_relaxation
    from pramopt.optimize.strategies.replacement import _design_from

    df = _data(seed, n, levels)
    pb = _problem(df, alpha, size)
    pools = (
        np.zeros(pb.K, dtype=np.int64) if pool is None else pb.table.codes[:, 0].astype(np.int64)
    )
    U = pb.counts
    sol = None
    for margin in (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4):
        sol = flow_relaxation(pb, alpha=alpha * (1 - margin), pools=pools)
        o0, w = _design_from(sol, pools, U)
        if (
            c1_risk(replacement_matrix(o0, w, pools), pb.table.codes, U, pb.combos).max_risk
            <= alpha
        ):
            break
    f0 = replacement_loss(o0, w, pools, U)
    res = optimise_retentions(pb, o0, w, pools, alpha, FLOOR)
    P = replacement_matrix(res.o, w, pools)
    assert c1_risk(P, pb.table.codes, U, pb.combos).max_risk <= alpha * (1 + 1e-7)
    assert res.loss == pytest.approx(l2_loss_from_covariance(P, U), rel=1e-9)
    assert res.loss <= f0
    assert res.changes <= float(U @ (o0 * (1 - w))) * (1 + 1e-9)
    # dense local search from the same start
    K = pb.K
    A = full_c1_rows(pb.table, alpha, combos=pb.combos)
    J = _jacobian(w, pools)
    AJ, b = A @ J, -(A @ np.eye(K).ravel())
    free = np.array([w[pools == pools[k]].sum() > 0 for k in range(K)])

    def loss(o):
        return l2_loss_from_covariance(np.eye(K) + (J @ o).reshape(K, K), U)

    ref = minimize(
        loss,
        o0,
        method="SLSQP",
        bounds=[(0, 1 - FLOOR if f else 0) for f in free],
        constraints=[{"type": "ineq", "fun": lambda o: b - AJ @ o, "jac": lambda o: -AJ}],
        options={"maxiter": 500, "ftol": 1e-14},
    )
    assert np.max(AJ @ ref.x - b) <= 1e-8
    assert res.loss <= loss(ref.x) * (1 + 1e-4)


def test_the_loss_minimisation_stops_on_a_count_of_solves_and_repeats_exactly():
    # The budget is a number of linear programs, not seconds: the same data give the same
    # retentions on any machine, and a budget of k solves is never exceeded.
    from pramopt.optimize.relaxation import flow_relaxation
    from pramopt.optimize.strategies.replacement import _design_from

    seed, n, levels, alpha, size, _ = CASES[0]
    pb = _problem(_data(seed, n, levels), alpha, size)
    pools = np.zeros(pb.K, dtype=np.int64)
    sol = flow_relaxation(pb, alpha=alpha * 0.6, pools=pools)
    o0, w = _design_from(sol, pools, pb.counts)
    full = [optimise_retentions(pb, o0, w, pools, alpha, FLOOR) for _ in range(2)]
    assert np.array_equal(full[0].o, full[1].o) and full[0].loss == full[1].loss
    assert full[0].solves >= 3  # the budget below does cut it short
    for k in (1, 2, 3):
        cut = optimise_retentions(pb, o0, w, pools, alpha, FLOOR, max_solves=k)
        assert cut.solves <= k
        assert cut.loss <= replacement_loss(o0, w, pools, pb.counts)


@pytest.mark.slow  # a census-shaped design in auto mode (the benchmark's census study runs it too)
def test_auto_mode_on_census_like_data_reports_the_optimised_retentions():
    from benchmarks.census_data import census_data

    df = census_data(2000, 4, seed=0)
    qi = list(df.columns)
    res = pramopt.design(df, qi, alpha=0.1)
    assert res.success and res.reduction.structure in ("replacement", "blocks")
    assert "replacement" in res.details["tried"] or res.reduction.structure == "replacement"
    stages = [s for s in res.stages if s.name == "retentions"]
    assert stages and "->" in stages[0].detail
    # the optimised replacement design is no worse than the relaxation's (the same run, without it)
    base = pramopt.design(df, qi, alpha=0.1, structure="replacement", refine_loss=False)
    rep = pramopt.design(df, qi, alpha=0.1, structure="replacement")
    assert rep.success and base.success
    assert rep.loss < base.loss
    assert rep.max_risk <= 0.1  # the full check of pramopt.verify, run by the designer's finish


@pytest.mark.parametrize("margin", [1e-3, 0.05])
def test_retentions_are_optimised_at_the_requested_margin(margin):
    # margin is the level alpha (1 - margin) the solvers work at: the replacement design must not
    # go closer to alpha than that.  On the example the relaxation's design meets C1 at
    # 0.1 (1 - 1e-3) (0.09974), so the program runs there; at margin 0.05 the relaxation is solved
    # further inside alpha until its design meets 0.095, and the program runs there too.  C1
    # recomputed from the definition stays below that level (the solver's tolerance aside); at the
    # default margin it reaches 0.099999.
    from pramopt.example import EXAMPLE_QI, example_data

    df, qi = example_data(), list(EXAMPLE_QI)
    res = pramopt.design(df, qi, alpha=0.1, structure="replacement", margin=margin)
    assert res.success
    stages = [s.detail for s in res.stages if s.name == "retentions"]
    assert stages and stages[0].startswith(f"at alpha*(1-{margin:g})")
    worst = c1_max_risk_from_definition(
        res.to_dense(), res.counts, res.table.codes, pramopt.resolve_combinations(qi)
    )
    assert worst <= 0.1 * (1 - margin) * (1 + 1e-7)


def test_the_retention_budget_is_shared_by_every_margin(monkeypatch):
    # when the full check rejects a result, the next margin may only use the linear programs left
    # of the one budget (a verification that always fails makes every margin run)
    import pramopt.optimize.strategies.replacement as R
    from pramopt.optimize.problem import Trace

    calls = []
    real = R.optimise_retentions

    def spy(*a, max_solves, **kw):
        res = real(*a, max_solves=max_solves, **kw)
        calls.append((max_solves, None if res is None else res.solves))
        return res

    monkeypatch.setattr(R, "optimise_retentions", spy)
    monkeypatch.setattr(R, "RETENTION_MAX_SOLVES", 6)
    df = _data(3, 400, (4, 3, 5, 3))
    pb = _problem(df, 0.1)
    for m in R.REPLACEMENT_MARGINS:  # the first relaxation margin whose design meets 0.1 (1 - 1e-3)
        sol = R.flow_relaxation(pb, alpha=0.1 * (1 - m), pools=pb.strata, t_max=1.0)
        o, w = R._design_from(sol, pb.strata, pb.counts)
        P = R.replacement_matrix(o, w, pb.strata)
        rep = c1_risk(P, pb.table.codes, pb.counts, pb.combos)
        if rep.max_risk <= 0.1 * (1 - 1e-3):  # so that at least two margins start feasible
            break
    assert rep.max_risk <= 0.1 * (1 - 1e-3)

    class Failing:
        max_risk = np.inf

    f = R.replacement_loss(o, w, pb.strata, pb.counts)
    out = R._retentions(pb, Trace(None), lambda _P: Failing(), o, w, pb.strata, P, rep, f, FLOOR)
    assert out[0] is o  # nothing passed the (failing) check: the relaxation's design is kept
    assert calls and sum(s for _, s in calls) <= 6  # each margin would otherwise get 6 of its own
    left = 6
    for given, used in calls:
        assert given == left
        left -= used
