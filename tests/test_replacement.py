"""The flow relaxation of C1 and the replacement designs built from it.

Every figure is checked against an independent computation: dense inverses for the loss and the
condition number, the definition of the flows, designs verified by the full C1 check for the bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from full_c1 import min_changes

import pramopt
from benchmarks._common import zipf_frame
from pramopt.frequency.combinations import resolve_combinations
from pramopt.optimize.problem import DesignProblem
from pramopt.optimize.relaxation import changes_bound, floor_bound, flow_relaxation
from pramopt.optimize.strategies.replacement import (
    replacement_condition,
    replacement_loss,
    replacement_matrix,
)
from pramopt.params import DesignParams
from pramopt.verify import c1_risk


def _problem(df, qi, **kw):
    t = pramopt.frequency_table(df, qi)
    p = DesignParams.from_options("design", **{"alpha": 0.1, **kw})
    return DesignProblem.build(t, resolve_combinations(t.qi, None, None, "x"), p)


def _random_data(seed, n=400, levels=(3, 4, 2, 5)):
    return zipf_frame(seed, n, levels, 1.5)


@pytest.mark.parametrize(
    "seed", [0, 1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)]
)
def test_flow_bound_is_above_the_floor_of_every_verified_design(seed):
    # Any P that satisfies C1 has min diag(P) <= the relaxation's bound.  The designs here come
    # from the general strategy on a dense support and from retention-replacement baselines;
    # each is verified by the full C1 check before it is used.
    df = _random_data(seed)
    qi = list(df.columns)
    pb = _problem(df, qi)
    bound = floor_bound(pb)
    assert bound is not None and 0.0 <= bound <= 1.0
    designs = [
        pramopt.design(df, qi, alpha=0.1, structure="general", support="dense"),
        pramopt.baseline(df, qi, "retention", 0.1),
        pramopt.baseline(df, qi, "retention", 0.1, per_attribute=True),
    ]
    used = 0
    for res in designs:
        if not res.success:
            continue
        rep = c1_risk(res.matrix, pb.table.codes, pb.counts, pb.combos)
        assert rep.max_risk <= 0.1
        assert res.matrix.diagonal().min() <= bound + 1e-7
        used += 1
    assert used >= 1


def test_flow_bound_equals_the_floor_phase_one_proves_on_the_example():
    # On the built-in example the relaxation is tight: a general design exists at its bound
    # (min_diagonal slightly below it is feasible and verified), and none above it.
    df = pramopt.example_data()
    qi = list(pramopt.example.EXAMPLE_QI)
    bound = floor_bound(_problem(df, qi))
    ok = pramopt.design(df, qi, alpha=0.1, min_diagonal=round(bound - 0.01, 4))
    assert ok.success and ok.min_diagonal >= bound - 0.01 - 1e-12
    no = pramopt.design(df, qi, alpha=0.1, min_diagonal=min(1.0, round(bound + 0.002, 4)))
    assert not no.success


def test_replacement_matrix_reproduces_the_relaxation_flows_and_is_stochastic():
    df = _random_data(5)
    pb = _problem(df, list(df.columns))
    sol = flow_relaxation(pb, alpha=0.09)
    assert sol.status == "ok"
    U = pb.counts
    o = sol.out / U
    w = sol.inflow / sol.inflow.sum()
    pools = np.zeros(pb.K, dtype=np.int64)
    P = replacement_matrix(o, w, pools).toarray()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert P.min() >= 0
    # out_k = U0(k) (1 - P_kk) and in_k = sum_{l != k} U0(l) P_lk, from their definitions; the
    # diagonal's share o_k w_k of the replacement counts as kept in both
    off = P - np.diag(np.diag(P))
    np.testing.assert_allclose(U * (1 - np.diag(P)), sol.out - U * o * w, atol=1e-9)
    np.testing.assert_allclose(U @ off, sol.inflow - U * o * w, atol=1e-9)
    assert np.diag(P).min() >= sol.t - 1e-9


@pytest.mark.parametrize("seed", [0, 1])
def test_replacement_loss_and_condition_equal_dense_computations(seed):
    rng = np.random.default_rng(seed)
    K = 40
    pools = rng.integers(0, 3, K)
    o = rng.uniform(0, 0.9, K) * (rng.random(K) < 0.8)
    w = rng.random(K) * (rng.random(K) < 0.6)
    for p in range(3):  # one distribution per pool
        m = pools == p
        if w[m].sum() == 0:
            w[np.flatnonzero(m)[0]] = 1.0
        w[m] /= w[m].sum()
    counts = rng.integers(1, 20, K).astype(float)
    P = replacement_matrix(o, w, pools).toarray()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    Q = np.linalg.inv(P)
    n = counts.sum()
    dense = float(np.sum(Q**2, axis=1) @ (counts @ P)) / n**2 - 1.0 / n
    assert replacement_loss(o, w, pools, counts) == pytest.approx(dense, rel=1e-10)
    exact = np.linalg.cond(P, 1)
    est = replacement_condition(o, w, pools)
    assert exact / 3 <= est <= exact * (1 + 1e-9)


def test_replacement_design_is_verified_and_has_the_replacement_form():
    df = _random_data(7, n=600)
    qi = list(df.columns)
    res = pramopt.design(df, qi, alpha=0.1, structure="replacement")
    assert res.success and res.reduction.structure == "replacement"
    P = res.to_dense()
    t = pramopt.frequency_table(df, qi)
    rep = c1_risk(P, t.codes, t.counts.astype(float), resolve_combinations(t.qi, None, None, "x"))
    assert rep.max_risk <= 0.1
    # off the diagonal, every sending row is proportional to one replacement distribution w:
    # P[m, k] = o_m w_k for k != m, so any two sending rows agree up to a factor on the columns
    # other than their own two
    off = P - np.diag(np.diag(P))
    send = np.flatnonzero(off.sum(axis=1) > 0)
    assert send.size >= 2
    m0 = send[0]
    for m in send[1:]:
        C = np.setdiff1d(np.arange(P.shape[0]), [m0, m])
        np.testing.assert_allclose(
            off[m, C] * off[m0, C].sum(), off[m0, C] * off[m, C].sum(), atol=1e-12
        )
    assert res.loss == pytest.approx(pramopt.l2_loss(P, t.counts), rel=1e-9)


@pytest.mark.parametrize("seed", [0, 2])
def test_changes_bound_is_below_the_full_c1_optimum_and_every_design(seed):
    df = _random_data(seed, n=250, levels=(3, 3, 2, 3))
    qi = list(df.columns)
    pb = _problem(df, qi)
    lb = changes_bound(pb)
    best = min_changes(pb.table, 0.1)
    assert lb <= best + 1e-6
    assert lb >= best * (1 - 1e-4)  # and equal to it on these cases
    res = pramopt.design(df, qi, alpha=0.1)
    assert res.success and res.details["expected_changes_lower_bound"] == pytest.approx(lb)
    assert res.expected_changes >= lb


@pytest.mark.parametrize("seed", [0, 2])
def test_changes_bound_at_the_designs_own_floor_is_below_the_full_c1_optimum_at_that_floor(seed):
    # The bound reported for the designs that keep every diagonal entry at least as high as the
    # design's own smallest must lie below the dense full-C1 minimum with every P_mm >= that floor
    # (one LP over all K x K entries), above the bound for any floor, and below the design.
    df = _random_data(seed, n=250, levels=(3, 3, 2, 3))
    qi = list(df.columns)
    pb = _problem(df, qi)
    res = pramopt.design(df, qi, alpha=0.1)
    assert res.success
    t = res.details["bound_floor"]
    assert t <= res.min_diagonal < t + 1e-4  # the design's smallest diagonal, rounded down
    K = pb.K
    lo = np.zeros(K * K)
    lo[np.arange(K) * (K + 1)] = t
    best = min_changes(pb.table, 0.1, lo=lo)
    at = res.details["expected_changes_lower_bound_at_floor"]
    lb = res.details["expected_changes_lower_bound"]
    assert at <= best + 1e-6 and at <= res.expected_changes + 1e-6
    assert at > lb + 1.0  # the floor makes it tighter on these cases
    assert res.details["loss_lower_bound_at_floor"] == pytest.approx(at / pb.n**2)
    assert f"all P_mm >= {t:g}, as this one: >= {at:.4g}" in res.summary()
    from pramopt.report import from_result, render_markdown

    md = render_markdown(from_result(res, "t"))
    assert f"* lower bound on the expected changes, all P_mm ≥ {t:g}: no design" in md


def test_changes_bound_over_some_combinations_is_their_own_optimum_and_below_the_full_one(
    monkeypatch,
):
    # Keeping the rows of fewer combinations lowers the minimum: the bound over a subset must
    # equal the exact minimum over that subset's full C1 (built from the definition) and stay
    # below the exact minimum over every combination.
    import pramopt.optimize.diagnosis as D
    from pramopt.optimize.relaxation import bound_combinations

    df = _random_data(0, n=250, levels=(3, 3, 2, 3))
    qi = list(df.columns)
    pb = _problem(df, qi)
    rare = int((pb.counts < 10).sum())
    used = bound_combinations(pb, 2 * rare)
    assert (
        len(used) == 2
        and bound_combinations(pb, 4 * rare) == (0, 1, 2, 3)
        and bound_combinations(pb, rare - 1) == ()
    )
    lb = changes_bound(pb, combinations=used)
    sub = min_changes(pb.table, 0.1, combos=[pb.combos[i] for i in used])
    best = min_changes(pb.table, 0.1)
    assert lb == pytest.approx(sub, rel=1e-4) and lb <= best + 1e-6
    # the designer keeps within its row budget and says how many combinations it kept
    monkeypatch.setattr(D, "CHANGES_BOUND_MAX_ROWS", 2 * rare)
    res = pramopt.design(df, qi, alpha=0.1)
    assert res.success and res.details["lower_bound_combinations"] == 2
    assert res.details["expected_changes_lower_bound"] == pytest.approx(sub, rel=1e-4)
    assert "from the rows of 2 of 4 combinations" in res.summary()


def test_block_by_block_relaxation_gives_a_design_meeting_the_full_c1(monkeypatch):
    # Above LOCAL_RELAXATION_ABOVE cells each block's relaxation sees only its own records;
    # the design must still meet the full C1 over the whole table (checked here by the
    # independent verifier on the dense matrix) and be block diagonal over several pools.
    import pramopt.optimize.strategies.replacement as R

    monkeypatch.setattr(R, "LOCAL_RELAXATION_ABOVE", 10)
    monkeypatch.setattr(R, "REPLACEMENT_MAX_ENTRIES", 20_000)  # blocks of about 75 cells
    df = _random_data(9, n=3000, levels=(6, 5, 4, 3))
    qi = list(df.columns)
    res = pramopt.design(df, qi, alpha=0.1, structure="replacement")
    assert res.success and res.reduction.blocks > 1
    t = pramopt.frequency_table(df, qi)
    P = res.to_dense()
    rep = c1_risk(P, t.codes, t.counts.astype(float), resolve_combinations(t.qi, None, None, "x"))
    assert rep.max_risk <= 0.1
    assert "block by block" in " ".join(s.detail for s in res.stages)


def test_replacement_design_honours_min_diagonal():
    # the floor is kept (every diagonal entry >= min_diagonal) or the design is refused, never lowered
    df = _random_data(7, n=600)
    qi = list(df.columns)
    free = pramopt.design(df, qi, alpha=0.1, structure="replacement")
    assert free.success
    ok = pramopt.design(
        df, qi, alpha=0.1, structure="replacement", min_diagonal=round(free.min_diagonal - 0.05, 3)
    )
    assert ok.success and ok.matrix.diagonal().min() >= round(free.min_diagonal - 0.05, 3)
    no = pramopt.design(df, qi, alpha=0.1, structure="replacement", min_diagonal=0.999)
    assert not no.success and "0.999" in no.message


@pytest.mark.parametrize("seed", [0, 3])
def test_lazy_rows_give_the_full_relaxation_optimum(monkeypatch, seed):
    # With lazy rows (every C1 row of the relaxation imposed only once violated) the largest floor
    # equals the program with every row imposed from the start.
    import pramopt.optimize.relaxation as R

    df = _random_data(seed, n=500)
    pb = _problem(df, list(df.columns))
    full = flow_relaxation(pb)
    monkeypatch.setattr(R, "LAZY_ROWS_ABOVE", 0)
    monkeypatch.setattr(R, "LAZY_GROUP_RECORDS", 0.5)  # start with almost no rows
    lazy = R.flow_relaxation(pb)
    assert full.status == lazy.status == "ok"
    assert lazy.t == pytest.approx(full.t, abs=1e-6)
