"""The general design below the 1/2 floor where no design keeps every diagonal entry >= 0.51
(under max_changed_variables, with structure="general" and in auto mode): checked against a
dense program, a brute-force C1 check and numpy's inverse."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from full_c1 import feasible
from random_cases import brute_force_risk
from test_design import brute_force_max_risk

import pramopt
import pramopt.optimize.strategies.general as G
import pramopt.optimize.strategies.general_scale as GS
from pramopt.frequency.table import frequency_table

QI = ["a", "b"]


def _data() -> pd.DataFrame:
    # Two cells of 22 records and six single records on a 4 x 2 grid: every rare cell needs
    # about 1/alpha records released into it, and the records that can go round are too few
    # for every diagonal entry to stay above 1/2.
    big = [(0, 0)] * 22 + [(1, 1)] * 22
    rare = [(a, b) for a in range(4) for b in range(2) if (a, b) not in ((0, 0), (1, 1))]
    return pd.DataFrame(big + rare, columns=QI)


def _feasible(t, d: int, floor: float) -> bool:
    """Whether any P meets the full C1 (every record's combination of both keys) with every
    transition at most ``d`` variables apart and every P_mm >= ``floor``: one dense LP whose
    rows are built from the definition (tests/full_c1.py)."""
    K = t.n_cells
    far = ((t.codes[:, None, :] != t.codes[None, :, :]).sum(axis=2) > d).ravel()
    lo = np.where(np.eye(K, dtype=bool).ravel(), floor, 0.0)
    return feasible(t, 0.1, combos=[(0, 1)], lo=lo, hi=np.where(far, 0.0, 1.0))


def _loss_from_definition(P: np.ndarray, counts: np.ndarray) -> float:
    """n^2 L = sum_k U0(k) (sum_j P_kj ||q_j||^2 - 1), q_j the rows of P^-1 (numpy's)."""
    Q = np.linalg.inv(P)
    n = counts.sum()
    return float(counts @ (P @ (Q**2).sum(axis=1) - 1.0)) / n**2


@pytest.mark.parametrize("census_path", [False, True])
def test_below_half_design_is_verified_invertible_and_within_d(census_path, monkeypatch):
    if census_path:  # no phase one, elastic rows, pricing over the listed transitions
        monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    df = _data()
    t = frequency_table(df, QI)
    assert not _feasible(t, 1, 0.51)  # no design keeps every P_mm >= 0.51 within d = 1
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=1)
    assert res.success, res.message
    P = sp.csr_matrix(res.matrix).toarray()
    assert 0.0 < res.gamma < 0.5
    assert P.diagonal().min() >= res.gamma - 1e-9
    assert P.diagonal().min() < 0.51
    assert brute_force_max_risk(P, df, QI, [(0, 1)]) <= 0.1
    coo = sp.coo_matrix(P)
    off = coo.row != coo.col
    assert ((t.codes[coo.row[off]] != t.codes[coo.col[off]]).sum(axis=1) <= 1).all()
    # invertible, its loss that of the definition, its condition number numpy's
    counts = t.counts.astype(float)
    assert res.loss == pytest.approx(_loss_from_definition(P, counts), rel=1e-8)
    assert res.condition_number == pytest.approx(np.linalg.cond(P), rel=1e-6)
    assert "below 1/2" in res.message
    # the proven bound on the changes of every design with that floor within d (none from the
    # capped program's own duals, only the flow relaxation's): below the exact optimum of the
    # dense program without the linear stage's cap (built here)
    from full_c1 import min_changes

    far = (t.codes[:, None, :] != t.codes[None, :, :]).sum(axis=2) > 1
    lo = np.where(np.eye(t.n_cells, dtype=bool), res.gamma, 0.0).ravel()
    best = min_changes(t, 0.1, lo=lo, hi=np.where(far, 0.0, 1.0).ravel(), combos=[(0, 1)])
    lb = res.reduction.floor_changes_bound
    assert (lb is None) if not census_path else (lb <= best * (1 + 1e-9))
    # the loss bound needs diag(P^-1) >= 1, which no form guarantees here
    assert res.details.get("loss_lower_bound") is None


def test_a_singular_vertex_gets_an_invertible_start(monkeypatch):
    # Without the cap on transitions, with every transition allowed (d = 2 of 2 keys), the
    # fewest changes at the floor 0.45 end at a singular vertex (two rare cells that send
    # their records to each other alike); without the start between it and a second matrix the
    # design has no finite loss and is refused.
    df = _data()
    t = frequency_table(df, QI)
    assert not _feasible(t, 2, 0.51)
    monkeypatch.setattr(G, "CAP_BELOW_HALF", 10.0)  # a cap above 1: none
    monkeypatch.setattr(G, "_invertible_start", lambda cg, x, trace: x)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=2)
    assert not res.success
    assert "numerically singular" in res.message
    monkeypatch.undo()
    monkeypatch.setattr(G, "CAP_BELOW_HALF", 10.0)
    res = pramopt.design(
        t, alpha=0.1, structure="general", max_changed_variables=2, refine_loss=False
    )
    assert res.success, res.message
    P = sp.csr_matrix(res.matrix).toarray()
    assert np.isfinite(np.linalg.cond(P)) and np.linalg.cond(P) < 1e6
    assert brute_force_max_risk(P, df, QI, [(0, 1)]) <= 0.1
    start = [s.detail for s in res.stages if s.name == "invertible start"]
    assert start and "(the linear stage's vertex: inf)" in start[0]


def test_the_cap_keeps_the_linear_stage_vertex_invertible():
    # With the cap (every transition below 0.8 of the floor) no two rows can be equal, and the
    # same program's vertex is invertible: no start is needed.
    df = _data()
    t = frequency_table(df, QI)
    res = pramopt.design(
        t, alpha=0.1, structure="general", max_changed_variables=2, refine_loss=False
    )
    assert res.success, res.message
    P = sp.csr_matrix(res.matrix).toarray()
    off = P[~np.eye(P.shape[0], dtype=bool)]
    assert off.max() <= 0.8 * res.gamma + 1e-9
    assert np.linalg.cond(P) < 1e3
    assert not any(s.name == "invertible start" for s in res.stages)
    assert brute_force_max_risk(P, df, QI, [(0, 1)]) <= 0.1


def test_an_ill_conditioned_design_below_half_is_refused(monkeypatch):
    monkeypatch.setattr(G, "BELOW_HALF_MAX_CONDITION", 1.0)  # every matrix has cond >= 1
    t = frequency_table(_data(), QI)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=1)
    assert not res.success
    assert "numerically singular" in res.message


def test_a_floor_the_user_sets_at_or_above_half_is_kept():
    t = frequency_table(_data(), QI)
    res = pramopt.design(
        t, alpha=0.1, structure="general", max_changed_variables=1, min_diagonal=0.51
    )
    assert res.status is pramopt.Status.INFEASIBLE, res.message
    assert "bounds every diagonal floor by" in res.message


def test_rows_outside_groups_that_a_support_can_fill_cover_every_violation():
    # Below 1/2 the linear stage imposes, with the reducer's rows, the rows outside their group
    # that its support can fill.  For random matrices over a random support with every diagonal
    # entry >= 0.3, every C1 row violated (computed here from the definition, record by group)
    # must be among them (C1: P(m -> g) <= alpha D_g, D_g the records released into g).
    import itertools

    from pramopt.optimize.constraints.c1 import WorkingSet, build_groups, reduce_constraints
    from pramopt.optimize.support import Support
    from pramopt.spec import zipf_data

    df = zipf_data(n=120, seed=5, levels=[3, 3, 3, 2], exponent=1.0)
    qi = ["z1", "z2", "z3", "z4"]
    t = frequency_table(df, qi)
    combos = list(itertools.combinations(range(4), 3))
    groups = build_groups(t, combos)
    alpha, gamma, K = 0.1, 0.3, t.n_cells
    U = t.counts.astype(float)
    rng = np.random.default_rng(0)
    outside_hits = 0
    for _ in range(30):
        mask = (rng.random((K, K)) < 0.15) | np.eye(K, dtype=bool)
        r, c = np.nonzero(mask)
        sup = Support.from_pairs(r, c, K)
        red = reduce_constraints(t, groups, alpha, gamma)
        ws = WorkingSet(red.m, red.g, t, groups, combos, alpha)
        imposed = set(zip(red.m.tolist(), red.g.tolist()))
        G = groups.n_groups
        imposed |= {(int(k // G), int(k % G)) for k in ws.outside(sup, alpha, gamma)}
        P = np.where(mask, rng.random((K, K)) ** 3, 0.0)
        np.fill_diagonal(P, 0.0)
        P *= (1.0 - gamma * 1.01) / np.maximum(P.sum(axis=1, keepdims=True), 1e-300)
        np.fill_diagonal(P, 1.0 - P.sum(axis=1))
        for ci, pi in enumerate(combos):
            keys = [tuple(row) for row in t.codes[:, list(pi)]]
            for k0 in set(keys):
                ing = np.array([k == k0 for k in keys])
                g = int(groups.member[np.flatnonzero(ing)[0], ci])
                den = float(U @ P[:, ing].sum(axis=1))
                for m in range(K):
                    if P[m, ing].sum() > alpha * den * (1 + 1e-12):
                        assert (m, g) in imposed
                        outside_hits += not ing[m]
    assert outside_hits > 0  # rows outside their groups were violated, and all were imposed


def _census_loads(monkeypatch, refuse_tight: bool = False) -> list:
    """Every program the census path loads, as (the elastic argument, the slack columns); with
    ``refuse_tight`` a program without slacks is reported infeasible, as a solver's tolerances
    might."""
    from pramopt.optimize.backends.results import LPSolution, Outcome

    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    loads = []
    orig = G.ColumnGeneration.load

    def load(self, sup, **kw):
        lp = orig(self, sup, **kw)
        s = lp.program.cols["s"]
        loads.append((kw.get("elastic"), s.stop - s.start))
        if refuse_tight and s.stop == s.start:
            lp.solve = lambda c, lo, hi: LPSolution(Outcome.INFEASIBLE, None, "HIGHS", 0.0)
        return lp

    monkeypatch.setattr(G.ColumnGeneration, "load", load)
    return loads


def _check_design(res, t, df, d: int) -> None:
    assert res.success, res.message
    P = sp.csr_matrix(res.matrix).toarray()
    assert brute_force_max_risk(P, df, QI, [(0, 1)]) <= 0.1
    coo = sp.coo_matrix(P)
    off = coo.row != coo.col
    assert ((t.codes[coo.row[off]] != t.codes[coo.col[off]]).sum(axis=1) <= d).all()
    assert res.loss == pytest.approx(_loss_from_definition(P, t.counts.astype(float)), rel=1e-8)


def test_census_refinement_and_start_programs_carry_no_slacks(monkeypatch):
    # On the census path the linear stage's programs give every C1 row a penalised slack (a
    # restricted support may not meet them); the refinement's steps and the start's second
    # matrix start from designs that meet every imposed row, so their programs have none: a
    # slack there would leave an imposed row broken, which the steps' check (rows missing from
    # the program) does not look at.
    df = _data()
    t = frequency_table(df, QI)
    loads = _census_loads(monkeypatch)
    monkeypatch.setattr(G, "CAP_BELOW_HALF", 10.0)  # a singular vertex: the start is needed
    monkeypatch.setattr(G, "START_MAX_CONDITION", 1.0)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=2)
    _check_design(res, t, df, 2)
    assert any(e is None and s > 0 for e, s in loads)  # the linear stage: elastic
    tight = [s for e, s in loads if e is False]
    assert len(tight) >= 2 and not any(tight)  # the start and the refinement: no slacks
    assert any(s.name == "invertible start" for s in res.stages)


def test_census_programs_without_slacks_fall_back_to_elastic_ones(monkeypatch):
    df = _data()
    t = frequency_table(df, QI)
    loads = _census_loads(monkeypatch, refuse_tight=True)
    monkeypatch.setattr(G, "CAP_BELOW_HALF", 10.0)
    monkeypatch.setattr(G, "START_MAX_CONDITION", 1.0)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=2)
    _check_design(res, t, df, 2)
    # each refused program without slacks followed by an elastic one
    kinds = [e for e, _ in loads]
    assert False in kinds
    assert all(kinds[i + 1] is not False for i, e in enumerate(kinds) if e is False)
    start = [s.detail for s in res.stages if s.name == "invertible start"]
    assert start and "none found" not in start[0]


def test_rows_outside_their_groups_are_not_counted_as_added_lazily(monkeypatch):
    # Below 1/2 each support brings the rows outside their groups that it lets fill; the rows
    # "added lazily" are only those the full check found violated.
    from pramopt.optimize.constraints.c1 import WorkingSet

    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    outside = {"n": 0}
    orig = WorkingSet.outside

    def counted(self, *a, **k):
        keys = orig(self, *a, **k)
        outside["n"] += keys.size
        return keys

    monkeypatch.setattr(WorkingSet, "outside", counted)
    df = _data()
    t = frequency_table(df, QI)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=1)
    assert res.success, res.message
    r = res.reduction
    assert outside["n"] > 0
    assert r.final_working_set == r.working_set + outside["n"] + r.lazy_added
    assert r.support_rows == outside["n"]
    assert f"{r.lazy_added} added lazily, {outside['n']} with the transitions)" in res.summary()


@pytest.mark.parametrize("census_path", [False, True])
def test_without_max_changed_variables_the_general_design_goes_below_half(census_path, monkeypatch):
    # No design keeps every P_mm >= 0.51 (a dense LP over every transition), one keeps 0.45:
    # auto mode makes the general design below 1/2 beside the replacement and block designs and
    # keeps the smaller loss, each loss computed here from its matrix by the definition.
    df = _data()
    t = frequency_table(df, QI)
    assert not _feasible(t, 2, 0.51) and _feasible(t, 2, 0.45)
    if census_path:  # the flow relaxation asked first; no phase one, elastic rows
        import pramopt.optimize.auto as A

        monkeypatch.setattr(A, "GENERAL_AUTO_MAX_CELLS", 0)
        monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    counts = t.counts.astype(float)
    auto = pramopt.design(t, alpha=0.1)
    assert auto.success, auto.message
    table = auto.details["candidates"]
    assert {"general", "replacement"} <= set(table)
    rep = pramopt.design(t, alpha=0.1, structure="replacement")
    rep_loss = _loss_from_definition(sp.csr_matrix(rep.matrix).toarray(), counts)
    assert table["replacement"]["loss"] == pytest.approx(rep_loss, rel=1e-9)
    P = sp.csr_matrix(auto.matrix).toarray()
    assert 0.0 < auto.gamma < 0.5 and P.diagonal().min() >= auto.gamma - 1e-9
    assert brute_force_max_risk(P, df, QI, [(0, 1)]) <= 0.1
    loss = _loss_from_definition(P, counts)
    assert auto.loss == pytest.approx(loss, rel=1e-9)
    assert loss < rep_loss  # so the general design is the one returned
    assert "below 1/2" in auto.message
    general = pramopt.design(t, alpha=0.1, structure="general")
    assert general.success and 0.0 < general.gamma < 0.5, general.message
    G2 = sp.csr_matrix(general.matrix).toarray()
    assert brute_force_max_risk(G2, df, QI, [(0, 1)]) <= 0.1


def test_above_its_size_auto_mode_says_where_a_design_below_half_may_exist(monkeypatch):
    import dataclasses

    import pramopt.optimize.auto as A
    import pramopt.optimize.designer as D

    monkeypatch.setattr(A, "GENERAL_AUTO_MAX_CELLS", 0)  # the flow relaxation asked first
    small = dataclasses.replace(A.AUTO, general=A.Rule("general", max_cells=5))
    monkeypatch.setattr(D, "AUTO", small)
    t = frequency_table(_data(), QI)
    auto = pramopt.design(t, alpha=0.1)
    assert auto.success, auto.message
    assert "general" not in auto.details.get("tried", {})
    assert "A general design with a floor below 1/2 (down to 0.2) may exist" in auto.message
    assert "structure='general' asks for it" in auto.message


def test_the_floors_below_half_named_are_those_the_relaxation_leaves():
    from pramopt.optimize.diagnosis import below_half_hint, floors_below_half

    assert floors_below_half(0.4808, 0.0) == (0.45, 0.4, 0.3, 0.2)
    assert floors_below_half(0.4808, 0.3) == (0.45, 0.4, 0.3)
    assert floors_below_half(0.35, 0.0) == (0.3, 0.2)
    assert floors_below_half(0.19, 0.0) == ()
    assert floors_below_half(None, 0.0) == ()
    assert "(down to 0.3)" in below_half_hint(0.4808, 0.3)
    assert below_half_hint(0.19, 0.0) == ""


def test_nothing_within_two_variables_below_half_names_the_wider_search():
    # 250 cells of 3 keys at alpha = 0.2: the flow relaxation leaves only the floor 0.2, and the
    # general design within two variables is not found there; the message says so and names
    # the search over every transition (max_changed_variables), and the design returned is one
    # of the structures that need no floor, checked by brute force.
    rng = np.random.default_rng(7)
    df = pd.DataFrame(
        {
            "age": rng.integers(20, 60, 300),
            "region": rng.choice(list("ABCDEFGH"), 300),
            "sex": rng.choice(["f", "m"], 300),
        }
    )
    qi = ["age", "region", "sex"]
    res = pramopt.design(df, qi, alpha=0.2)
    assert res.success and res.reduction.structure in ("replacement", "blocks")
    assert (
        "No general design was found at the floors below 1/2 tried (0.2) over the " in res.message
    )
    assert "structure='general' with max_changed_variables searches every transition" in res.message
    assert brute_force_risk(res, df, qi, {}) <= 0.2 + 1e-9
