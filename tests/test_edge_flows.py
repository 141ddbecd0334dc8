"""The flow relaxation over the permitted transitions by column generation (one HiGHS model
grown by columns), checked against the relaxation written out densely here from its definition
and against a fresh program per round."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog
from test_census_scale import _assert_verified_within, _hamming, _problem, _table

import pramopt.optimize.edge_flows as EF
from pramopt.frequency.table import frequency_table


def _dense_relaxation(t, alpha: float, d: int, floor: float | None):
    """The flow relaxation of C1 with a flow per transition at most ``d`` variables apart, built
    from the codes and counts alone: flows f_kl >= 0, ``out_k = sum_l f_kl <= (1 - t) U0(k)``,
    and for every rare cell m and triple pi, with g the cells agreeing with m on pi,
    ``alpha sum_{k in g} (U0(k) - out_k + in_k) + out_m / U0(m) >= 1``.  With a ``floor``: the
    fewest records sent out at t = floor (None when infeasible); without: the largest t."""
    K, U, codes = t.n_cells, t.counts.astype(float), t.codes
    near = (_hamming(codes) <= d) & ~np.eye(K, dtype=bool)
    r, c = np.nonzero(near)
    E = r.size
    out = np.zeros((K, E + 1))  # out_k as a row over the flows (and t, last)
    out[r, np.arange(E)] = 1.0
    inn = np.zeros((K, E + 1))
    inn[c, np.arange(E)] = 1.0
    rows, rhs = [], []
    for pi in itertools.combinations(range(codes.shape[1]), 3):
        for m in np.flatnonzero(U < 1.0 / alpha):
            g = (codes[:, list(pi)] == codes[m, list(pi)]).all(axis=1)
            # -(alpha (U_g - out_g + in_g) + out_m / U_m) <= -1
            rows.append(-(alpha * (inn[g].sum(0) - out[g].sum(0)) + out[m] / U[m]))
            rhs.append(alpha * U[g].sum() - 1.0)
    # out_k + U_k t <= U_k
    cap = out.copy()
    cap[:, -1] = U
    A = np.vstack([np.array(rows), cap])
    b = np.concatenate([rhs, U])
    if floor is None:
        cost = np.zeros(E + 1)
        cost[-1] = -1.0
        bounds = [(0, None)] * E + [(0, 1)]
    else:
        cost = np.concatenate([np.ones(E), [0.0]])
        bounds = [(0, None)] * E + [(floor, floor)]
    res = linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs")
    assert res.status in (0, 2)
    if res.status == 2:
        return None
    return -res.fun if floor is None else res.fun


def _case(seed: int, d: int):
    """The test table of ``seed`` under d: its table, problem, permitted transitions and the
    dense relaxation's fewest changes at the floor 0.51."""
    df, qi = _table(seed)
    t = frequency_table(df, qi)
    problem = _problem(t, 0.1, d)
    best = _dense_relaxation(t, 0.1, d, 0.51)
    assert best is not None
    return t, problem, problem.allowed_pairs(10**9), best


@pytest.mark.parametrize("phase_one", [True, False])
@pytest.mark.parametrize("seed,d", [(2, 1), (4, 2), (5, 3)])
def test_column_generation_reaches_the_dense_relaxations_optimum(seed, d, phase_one, monkeypatch):
    # From three seeds, pricing must end at the optimum of the relaxation with every permitted
    # flow at once (written out densely here), with a bound below it and equal to it at the
    # end; the grown model and a fresh program per round must agree, with or without phase one.
    monkeypatch.setattr(EF, "PHASE_ONE", phase_one)
    t, problem, pairs, best = _case(seed, d)
    seeds = np.arange(min(3, pairs[0].size))
    warm = EF.edge_flows(problem, 0.51, pairs, seeds=seeds)
    cold = EF.edge_flows(problem, 0.51, pairs, seeds=seeds, warm=False)
    for f in (warm, cold):
        assert f.status == "ok" and f.rounds < EF.EDGE_ROUNDS and not f.no_solution
        assert f.slack == 0.0
        assert f.changes == pytest.approx(best, rel=1e-7, abs=1e-7)
        assert f.bound <= best * (1 + 1e-9) and f.bound == pytest.approx(best, rel=1e-5)
        assert f.flows.sum() == pytest.approx(best, rel=1e-6)
        assert (_hamming(t.codes)[f.rows, f.cols] <= d).all()


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_a_bound_from_pricing_cut_short_stays_below_the_optimum(rounds, monkeypatch):
    # Whatever round pricing stops at (phase one included, which sets no bound), any bound given
    # must lie below the dense relaxation's optimum.
    monkeypatch.setattr(EF, "EDGE_ROUNDS", rounds)
    df, qi = _table(4)
    t = frequency_table(df, qi)
    problem = _problem(t, 0.1, 2)
    pairs = problem.allowed_pairs(10**9)
    best = _dense_relaxation(t, 0.1, 2, 0.51)
    f = EF.edge_flows(problem, 0.51, pairs, seeds=np.arange(3))
    assert f.status == "ok" and not f.no_solution
    assert f.bound is None or f.bound <= best * (1 + 1e-9)


@pytest.mark.parametrize("seed,d", [(2, 1), (4, 2)])
def test_allows_floor_agrees_with_the_dense_relaxations_largest_floor(seed, d):
    # Phase one answers whether the relaxation allows a floor: yes just below the largest floor
    # of the dense relaxation, no (proven, with a bound on the least slack above 0) just above.
    df, qi = _table(seed)
    t = frequency_table(df, qi)
    problem = _problem(t, 0.1, d)
    pairs = problem.allowed_pairs(10**9)
    top = _dense_relaxation(t, 0.1, d, None)
    assert 0.51 < top < 0.98
    ok, _ = EF.allows_floor(problem, top - 0.01, pairs)
    assert ok is True
    ok, f = EF.allows_floor(problem, top + 0.01, pairs)
    assert ok is False and f.no_solution and f.bound > 0
    assert _dense_relaxation(t, 0.1, d, top + 0.01) is None


def test_the_diagnosis_answers_each_d_as_the_dense_relaxation_does():
    # The diagnosis asks phase one whether d allows the floor; on a hand case where one changed
    # variable reaches too few records for a rare cell's group and two reach enough, its
    # answers must be those of the dense relaxation (written out here) at every d.
    import pandas as pd

    from pramopt.optimize.diagnosis import _within, distance_rules_out

    rows = []
    for cell in itertools.product([0, 1], repeat=3):
        rows += [cell] * (1 if sum(cell) <= 1 else 50)
    df = pd.DataFrame(rows, columns=["a", "b", "c"])
    t = frequency_table(df, ["a", "b", "c"])
    for d in (1, 2, 3):
        dense = _dense_relaxation(t, 0.1, d, 0.51) is not None
        ok, figure = _within(_problem(t, 0.1, d), 0.51)
        assert ok is dense, (d, figure)
    assert [_dense_relaxation(t, 0.1, d, 0.51) is not None for d in (1, 2)] == [False, True]
    why, smallest = distance_rules_out(_problem(t, 0.1, 1), 0.51)
    assert smallest == 2, why


@pytest.mark.parametrize("seed,d", [(4, 2), (5, 3), (2, 1)])
def test_routed_flows_are_permitted_and_their_bound_is_below_the_dense_optimum(seed, d):
    # The relaxation without flows, routed by a maximum flow: every routed transition is within
    # d variables (from the codes), each cell sends at most its share, and the bound lies below
    # the dense relaxation with a flow per permitted transition; where every record is routed
    # the flows are an optimum of that program (their total equals it).
    t, problem, pairs, best = _case(seed, d)
    f = EF.routed_flows(problem, 0.51, pairs)
    assert f is not None and f.status == "ok"
    assert (_hamming(t.codes)[f.rows, f.cols] <= d).all() and (f.flows > 0).all()
    sent = np.bincount(f.rows, weights=f.flows, minlength=t.n_cells)
    assert (sent <= (1 - 0.51) * t.counts + 1e-6).all()
    assert f.bound <= best * (1 + 1e-9)
    assert f.flows.sum() <= f.changes * (1 + 1e-6)
    if f.routed >= 1 - EF.ROUTE_SLACK:
        assert f.flows.sum() == pytest.approx(best, rel=1e-5)
        assert f.bound == pytest.approx(best, rel=1e-5)


@pytest.mark.parametrize("edge_program", [True, False])
def test_flows_not_all_routed_fall_back_or_seed_the_linear_stage(edge_program, monkeypatch):
    # Where the maximum flow routes only part of the relaxation's records (forced here), the
    # design runs the program with a flow per permitted transition (its bound: the dense
    # optimum), or, above EDGE_FLOWS_MAX_PAIRS transitions, starts the linear stage from the
    # routed part with the relaxation's own bound (below the dense optimum); either way the
    # design passes the full C1 check and keeps every transition within d (from the codes).
    import dataclasses

    from test_census_scale import _min_changes_within

    import pramopt
    import pramopt.optimize.strategies.general_scale as GS

    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    monkeypatch.setattr(GS, "EDGE_FLOWS_FIRST", 0)
    real = GS.routed_flows
    monkeypatch.setattr(GS, "routed_flows", lambda *a: dataclasses.replace(real(*a), routed=0.5))
    if not edge_program:
        monkeypatch.setattr(GS, "EDGE_FLOWS_MAX_PAIRS", 0)
    df, qi = _table(4)
    t = frequency_table(df, qi)
    res = pramopt.design(
        t, alpha=0.1, structure="general", max_changed_variables=2, refine_loss=False
    )
    assert res.success, res.message
    detail = next(s.detail for s in res.stages if s.name.startswith("flows@"))
    assert ("pricing rounds" in detail) is edge_program
    assert ("50.00% of the relaxation's records routed" in detail) is not edge_program
    best = _dense_relaxation(t, 0.1, 2, 0.51)
    lb = res.reduction.floor_changes_bound
    assert lb <= _min_changes_within(t, 0.1, 2, 0.51) * (1 + 1e-9)
    assert lb >= best * (1 - 1e-5)  # the linear stage's own bound at least the relaxation's
    _assert_verified_within(res, df, qi, t, 2)


@pytest.mark.parametrize("seed", [2, 4])
def test_floor_bound_by_bisection_brackets_the_dense_relaxations_largest_floor(seed, monkeypatch):
    # Above BISECT_ABOVE cells the floor bound comes from programs with t fixed: it must lie at
    # most BISECT_TOL above the largest floor of the relaxation written out densely (every
    # transition permitted), and never below it.
    import pramopt.optimize.relaxation as R

    df, qi = _table(seed)
    t = frequency_table(df, qi)
    problem = _problem(t, 0.1, 4)
    top = _dense_relaxation(t, 0.1, 4, None)
    monkeypatch.setattr(R, "BISECT_ABOVE", 0)
    got = R.floor_bound(problem, edge_limit=0)
    assert top - 1e-7 <= got <= top + R.BISECT_TOL
