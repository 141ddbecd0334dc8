"""The general design's census-scale path (no phase one, sparse from the first LP, pricing only
the permitted transitions), checked on small tables against independent computations."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from test_design import brute_force_max_risk

import pramopt
import pramopt.optimize.strategies.general_scale as GS
from pramopt.frequency.table import frequency_table
from pramopt.spec import zipf_data


def _hamming(codes: np.ndarray) -> np.ndarray:
    return (codes[:, None, :] != codes[None, :, :]).sum(axis=2)


def _min_changes_within(t, alpha: float, d: int, floor: float) -> float:
    """Fewest expected changes of any P meeting the full C1 over every triple, with every
    transition at most ``d`` variables apart and every P_mm >= ``floor``: one dense LP whose rows
    are built here from the definition (tests/full_c1.py)."""
    from full_c1 import min_changes

    K = t.n_cells
    far = (_hamming(t.codes) > d).ravel()
    lo = np.where(np.eye(K, dtype=bool).ravel(), floor, 0.0)
    return min_changes(t, alpha, lo=lo, hi=np.where(far, 0.0, 1.0))


def _dense_feasible(t, alpha: float, d: int, floor: float) -> bool:
    """Whether any P meets the full C1 over every triple with every transition at most ``d``
    variables apart and every P_mm >= ``floor``: one dense LP (rows from tests/full_c1.py)."""
    from full_c1 import feasible

    K = t.n_cells
    far = (_hamming(t.codes) > d).ravel()
    lo = np.where(np.eye(K, dtype=bool).ravel(), floor, 0.0)
    return feasible(t, alpha, lo=lo, hi=np.where(far, 0.0, 1.0))


def _assert_verified_within(res, df, qi, t, d: int) -> None:
    """The design passes the full C1 over every triple (brute force over the records) and every
    stored transition between two cells changes at most ``d`` variables (from the codes)."""
    P = sp.csr_matrix(res.matrix)
    assert (
        brute_force_max_risk(P.toarray(), df, qi, list(itertools.combinations(range(4), 3))) <= 0.1
    )
    coo = P.tocoo()
    off = coo.row != coo.col
    assert (_hamming(t.codes)[coo.row[off], coo.col[off]] <= d).all()


def _table(seed: int):
    df = zipf_data(n=300, seed=seed, levels=[3, 3, 3, 2], exponent=1.0)
    return df, ["z1", "z2", "z3", "z4"]


@pytest.mark.parametrize("seed,d", [(2, 1), (4, 2)])
def test_sparse_path_reaches_the_minimum_changes_within_d(seed, d, monkeypatch):
    # Forced onto the census-scale path (no phase one, elastic rows, pricing over the listed
    # permitted transitions), the linear stage must reach the exact optimum of the full program
    # restricted to transitions within d, pass the full C1 check and keep every transition
    # within d variables (both computed here from the codes).
    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    df, qi = _table(seed)
    t = frequency_table(df, qi)
    res = pramopt.design(
        t, alpha=0.1, structure="general", max_changed_variables=d, refine_loss=False
    )
    assert res.success, res.message
    assert any(s.name == "permitted transitions" for s in res.stages)
    assert not any(s.name.startswith("phase1") for s in res.stages)
    _assert_verified_within(res, df, qi, t, d)
    best = _min_changes_within(t, 0.1, d, res.gamma)
    assert res.expected_changes >= best * (1 - 1e-6)
    assert res.expected_changes <= best * (1 + 2e-3)
    # the proven bound on every design with that floor and d: below the exact optimum, and tight
    lb = res.reduction.floor_changes_bound
    assert lb <= best * (1 + 1e-9)
    assert lb >= best * (1 - 2e-3)
    assert "with all P_mm >= 0.51 changes >=" in " ".join(s.detail for s in res.stages)
    assert f">= {lb:.5g})" in res.summary()  # reported with the design


def test_pricing_among_listed_pairs_matches_the_dense_reduced_costs(example):
    # Pricer.among over a list of transitions must give the same reduced costs as the dense
    # K x len(cols) computation at those transitions, and the same candidates below -tol.
    from pramopt.example import EXAMPLE_QI
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.backends.highs import load as load_highs
    from pramopt.optimize.constraints.c1 import C1Rows, build_groups, c1_block, reduce_constraints
    from pramopt.optimize.pricing import Pricer
    from pramopt.optimize.program import build_program
    from pramopt.optimize.support import Support

    t = frequency_table(example, list(EXAMPLE_QI[:5]))
    combos = resolve_combinations(t.qi, 3, None, "test")
    G = build_groups(t, combos)
    counts = t.counts.astype(float)
    K = t.n_cells
    red = reduce_constraints(t, G, 0.1, 0.95)
    rng = np.random.default_rng(0)
    keep = rng.random(K * K) < 0.3
    sup = Support.from_pairs(np.repeat(np.arange(K), K)[keep], np.tile(np.arange(K), K)[keep], K)
    blk = c1_block(sup, G, counts, red.m, red.g)
    lp = load_highs(build_program(sup, [C1Rows(blk, 0.1 * (1 - 1e-5))], elastic=1e3))
    c = np.zeros(sup.size)
    c[sup.diag] = -counts
    lo = np.zeros(sup.size)
    lo[sup.diag] = 0.95
    assert lp.solve(c, lo, np.ones(sup.size)).x is not None
    pricer = Pricer(sup, counts, [C1Rows(blk, 0.1, G)], lp.duals())
    dense = pricer.reduced_costs(np.arange(K))
    r, cc = np.nonzero(~np.eye(K, dtype=bool))
    pick = rng.random(r.size) < 0.5
    r, cc = r[pick], cc[pick]
    got_r, got_c, bound = pricer.among(r, cc, tol=1e-9, max_add=10**9)
    in_sup = sup.to_matrix(np.ones(sup.size)).toarray() > 0
    want = (dense[r, cc] < -1e-9) & ~in_sup[r, cc]
    assert set(zip(got_r.tolist(), got_c.tolist(), strict=True)) == set(
        zip(r[want].tolist(), cc[want].tolist(), strict=True)
    )
    rowmin = np.zeros(K)
    np.minimum.at(rowmin, r[want], dense[r[want], cc[want]])
    assert bound == pytest.approx(rowmin.sum(), rel=1e-9, abs=1e-12)


def test_seeds_are_each_cells_largest_permitted_neighbours():
    # The first support: for every column its largest senders, for every rare row its largest
    # receivers, among the permitted transitions only (checked by brute force here).
    df, qi = _table(3)
    t = frequency_table(df, qi)
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem
    from pramopt.params import DesignParams

    params = DesignParams(alpha=0.1, max_changed_variables=1)
    prob = DesignProblem.build(t, resolve_combinations(t.qi, 3, None, "t"), params)
    pairs = prob.allowed_pairs(10**7)
    sup = GS.seeds(prob, pairs, per_cell=2)
    H = _hamming(t.codes)
    got = set(zip(sup.rows.tolist(), sup.cols.tolist(), strict=True))
    U = t.counts
    for k in range(t.n_cells):
        assert (k, k) in got
        senders = [m for m in range(t.n_cells) if m != k and H[m, k] <= 1]
        top = sorted(senders, key=lambda m: -U[m])[:2]
        for m in top:  # ties may pick another of the same size
            assert (m, k) in got or any((o, k) in got for o in senders if U[o] == U[m])
    assert all(H[a, b] <= 1 for a, b in got)
    # nothing else: a pair is a sender seed of its column or a receiver seed of a rare row
    for a, b in got:
        if a == b:
            continue
        senders = sorted(
            (m for m in range(t.n_cells) if m != b and H[m, b] <= 1), key=lambda m: -U[m]
        )
        recv = sorted((k for k in range(t.n_cells) if k != a and H[a, k] <= 1), key=lambda k: -U[k])
        assert U[a] >= U[senders[min(1, len(senders) - 1)]] or (
            U[a] < 10 and U[b] >= U[recv[min(1, len(recv) - 1)]]
        )


@pytest.mark.parametrize("d", [1, 2])
def test_group_reach_counts_each_record_that_can_reach_a_group_once(d):
    # The cap on a C1 denominator behind the floor bound: per group, the records of every cell
    # that is in it or has a permitted transition into one of its cells (by brute force here).
    df, qi = _table(3)
    t = frequency_table(df, qi)
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem
    from pramopt.params import DesignParams

    params = DesignParams(alpha=0.1, max_changed_variables=d)
    prob = DesignProblem.build(t, resolve_combinations(t.qi, 2, None, "t"), params)
    pairs = prob.allowed_pairs(10**7)
    H = _hamming(t.codes)
    member = prob.groups.member
    want = np.zeros(prob.groups.n_groups)
    for g in range(prob.groups.n_groups):
        cells = {c for c in range(t.n_cells) if g in member[c]}
        want[g] = sum(t.counts[k] for k in range(t.n_cells) if any(H[k, c] <= d for c in cells))
    np.testing.assert_array_equal(prob.group_reach(pairs), want)


def test_auto_rule_prefers_fewer_changed_values_at_a_comparable_objective():
    # The rule stated in auto.py, on hand-made figures: the smallest objective wins unless
    # another candidate is within 10% of it and changes at most 2/3 as many values.
    from pramopt.optimize.auto import pick

    def f(obj, values, per=2.0):
        return dict(
            loss=obj,
            objective=obj,
            expected_changes=values / per,
            changed_values=values,
            variables_per_changed_record=per,
        )

    table = {
        "replacement": f(1.00, 3000, 3.9),
        "general": f(1.08, 1900, 1.9),
        "blocks": f(1.3, 100),
    }
    name, why = pick(list(table), table)
    assert name == "general" and "general design is chosen over the replacement" in why
    table["general"] = f(1.12, 1900)  # objective beyond 10%: the smallest objective wins
    assert pick(list(table), table) == ("replacement", "")
    table["general"] = f(1.05, 2100)  # 0.7 of the values: not enough fewer
    assert pick(list(table), table) == ("replacement", "")
    table["other"] = f(1.09, 1000)  # of the plausible ones, the fewest changed values
    table["general"] = f(1.02, 1500)
    assert pick(list(table), table)[0] == "other"


def test_an_unproven_search_under_d_never_contradicts_the_relaxation(monkeypatch):
    # When the general design's search finds nothing but the flow relaxation allows the floor
    # with d, the message must say that d is not ruled out, and never name a larger smallest d.
    import pramopt.optimize.strategies.general as G
    from pramopt.optimize.strategies import Attempt, AttemptStatus

    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    monkeypatch.setattr(
        GS,
        "solve_at_scale",
        lambda *a, **k: Attempt(AttemptStatus.UNPROVEN, gamma=0.51, detail="x"),
    )
    _ = G
    df, qi = _table(4)
    res = pramopt.design(df, qi, alpha=0.1, structure="general", max_changed_variables=2)
    assert not res.success
    assert "does not rule max_changed_variables = 2 out" in res.message
    assert "The smallest max_changed_variables" not in res.message
    assert res.details["smallest_max_changed_variables"] == 2


def test_auto_mode_makes_the_general_design_under_d_at_any_size(monkeypatch):
    # Under max_changed_variables the structures that need no floor cannot honour d across a
    # pool, so auto mode makes the general design whatever the table's size (here above a size
    # limit lowered to 10 cells), and the result reports every candidate's figures.
    import pramopt.optimize.auto as A

    monkeypatch.setattr(
        A,
        "AUTO",
        A.AutoPolicy(
            general=A.Rule("general", max_cells=10),
            beside=A.AUTO.beside,
            without=A.AUTO.without,
            last_resort=A.AUTO.last_resort,
        ),
    )
    import pramopt.optimize.designer as D

    monkeypatch.setattr(D, "AUTO", A.AUTO)
    df, qi = _table(4)
    t = frequency_table(df, qi)
    assert t.n_cells > 10
    res = pramopt.design(t, alpha=0.1, max_changed_variables=2)
    assert res.success, res.message
    assert res.reduction.structure == "general"
    assert any(s.name.startswith("linear@") for s in res.stages)
    cv = res.details["changed_variables"]
    assert cv["max"] <= 2
    # without d, the size limit holds: no general design is made
    res = pramopt.design(t, alpha=0.1)
    assert res.success
    assert not any(s.name.startswith("linear@") for s in res.stages)
    assert "skips the general design" in res.message


def test_summary_lists_every_candidate_with_its_figures(example):
    # Auto mode on the example makes the general, replacement and block designs: the summary
    # and details give each one's loss, expected changes and variables per changed record, and
    # each figure is recomputed here from the candidate's definition where the result has it.
    from pramopt.example import EXAMPLE_QI

    res = pramopt.design(example, list(EXAMPLE_QI), alpha=0.1)
    table = res.details["candidates"]
    assert len(table) >= 2 and res.reduction.structure in table
    chosen = table[res.reduction.structure]
    assert chosen["loss"] == pytest.approx(res.loss, rel=1e-9)
    assert chosen["expected_changes"] == pytest.approx(res.expected_changes, rel=1e-9)
    per = res.details["changed_variables"]["mean"]
    assert chosen["variables_per_changed_record"] == pytest.approx(per, rel=1e-9)
    assert chosen["changed_values"] == pytest.approx(per * res.expected_changes, rel=1e-9)
    text = res.summary()
    assert "candidates (loss, expected changed records, variables per changed record)" in text
    for name in table:
        assert f"    {name}" in text


@pytest.mark.parametrize("priced", [1, 2])
def test_floor_bound_from_an_unfinished_column_generation_is_still_below_the_optimum(
    priced, monkeypatch
):
    # Cut column generation short after its first priced rounds: the bound then comes from a
    # round whose support lacks transitions the optimum uses (the Lagrangian part does the
    # work), and must stay below the exact minimum of the dense program (and above the flow
    # relaxation's weaker bound is not required: only validity is).
    import pramopt.optimize.strategies.general as G
    from pramopt.optimize.edge_flows import EdgeFlows

    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    # without the flow relaxation's seeds and bound, which would otherwise give the bound
    monkeypatch.setattr(GS, "_relaxed_flows", lambda *a: EdgeFlows("skipped"))
    found = []
    price = G.ColumnGeneration.price

    def cut(self, *a, **kw):
        r, c, bound = price(self, *a, **kw)
        found.append(r.size)
        return (r[:0], c[:0], bound) if len(found) >= priced else (r, c, bound)

    monkeypatch.setattr(G.ColumnGeneration, "price", cut)
    df, qi = _table(4)
    t = frequency_table(df, qi)
    res = pramopt.design(
        t, alpha=0.1, structure="general", max_changed_variables=2, refine_loss=False
    )
    assert len(found) == priced and found[-1] > 0  # pricing still had transitions to add
    lb = res.reduction.floor_changes_bound
    best = _min_changes_within(t, 0.1, 2, 0.51)
    assert lb is not None and 0 < lb <= best * (1 + 1e-9)


def _problem(t, alpha: float, d: int):
    """The design problem the designer builds for ``t`` (general structure, at most ``d``)."""
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem
    from pramopt.params import DesignParams

    params = DesignParams(alpha=alpha, structure="general", max_changed_variables=d)
    return DesignProblem.build(t, resolve_combinations(t.qi, 3, None, "t"), params)


@pytest.mark.parametrize("seed,d,rounds", [(2, 1, 40), (4, 2, 40), (4, 2, 2)])
def test_flow_relaxation_over_permitted_transitions_bounds_the_fewest_changes(
    seed, d, rounds, monkeypatch
):
    # The flow relaxation's fewest changes over the permitted transitions, by column generation
    # from a few seeds: its bound must lie below the exact fewest changes of the dense program
    # (rows built here from the definition), also when pricing is cut short after two rounds;
    # run to the end it is the optimum of the relaxation with every permitted flow at once.
    import pramopt.optimize.edge_flows as EF
    import pramopt.optimize.relaxation as R

    monkeypatch.setattr(EF, "EDGE_ROUNDS", rounds)
    df, qi = _table(seed)
    t = frequency_table(df, qi)
    problem = _problem(t, 0.1, d)
    pairs = problem.allowed_pairs(10**9)
    flows = EF.edge_flows(problem, 0.51, pairs, seeds=np.arange(min(3, pairs[0].size)))
    best = _min_changes_within(t, 0.1, d, 0.51)
    assert flows.status == "ok"
    assert flows.bound is None or 0 < flows.bound <= best * (1 + 1e-9)
    if flows.rounds < rounds:  # pricing ended by itself: nothing left to add
        full = R.flow_relaxation(problem, objective="changes", t_min=0.51, edge_limit=10**9)
        assert flows.slack == 0.0
        assert flows.changes == pytest.approx(float(full.out.sum()), rel=1e-6)
        assert flows.bound == pytest.approx(flows.changes, rel=1e-5)
        # the flows carry exactly the records sent out, along permitted transitions only
        assert flows.flows.sum() == pytest.approx(flows.changes, rel=1e-6)
        assert (_hamming(t.codes)[flows.rows, flows.cols] <= d).all()


def test_flow_relaxation_proves_no_design_within_d(monkeypatch):
    # A single record whose nearest other cell is three variables away: within one changed
    # variable nothing can be released into its triples' groups, so no design meets C1.  The
    # dense program over every transition within d (built here) must be infeasible too, and the
    # design must say INFEASIBLE with the flow relaxation as its proof, not UNPROVEN.
    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    rows = [(1, 1, 1, 1)] * 40 + [(1, 1, 1, 0)] * 20 + [(1, 1, 0, 1)] * 20 + [(0, 1, 1, 1)] * 20
    rows += [(1, 0, 1, 1)] * 20 + [(0, 0, 0, 0)]
    df = pd.DataFrame(rows, columns=["a", "b", "c", "d"])
    t = frequency_table(df, ["a", "b", "c", "d"])
    assert not _dense_feasible(t, 0.1, 1, 0.51)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=1)
    assert not res.success
    assert res.status is pramopt.Status.INFEASIBLE, res.message
    assert "flow relaxation of C1 over the 8 permitted transitions has no solution" in res.message


def test_floor_bound_proves_no_general_design_before_any_search(monkeypatch):
    # Thirty records in thirty cells, every triple of keys unique: each C1 group needs about
    # 1/alpha records released into it, more than a floor of 0.51 leaves to go round.  The
    # dense program over every K x K transition (built here) is infeasible at that floor, and the
    # census-scale path under d must say so from the flow relaxation's floor bound (without the
    # transitions' flows), before its search.
    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    rng = np.random.default_rng(3)
    codes = rng.permutation(np.array(list(itertools.product(range(4), repeat=4))))[:30]
    df = pd.DataFrame(codes, columns=["a", "b", "c", "d"])
    t = frequency_table(df, ["a", "b", "c", "d"])
    assert not _dense_feasible(t, 0.1, 4, 0.51)  # any transition
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=2)
    assert res.status is pramopt.Status.INFEASIBLE, res.message
    assert "the flow relaxation of C1 bounds every diagonal floor by" in res.message
    assert not any(s.name.startswith(("linear", "flows@")) for s in res.stages)


def _near_one_table(monkeypatch):
    """The 50-cell table of seed 0 on the census-scale path, with NEAR_CHANGED = 1."""
    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    monkeypatch.setattr(GS, "NEAR_CHANGED", 1)
    df, qi = _table(0)
    return df, qi, frequency_table(df, qi)


def _priced(monkeypatch) -> list:
    """The number of permitted transitions each pricing round looks at (None: it scans every
    candidate), filled in as the design runs."""
    import pramopt.optimize.strategies.general as G

    priced: list = []
    price = G.ColumnGeneration.price

    def spy(self, *a, **k):
        priced.append(None if self.pairs is None else self.pairs[0].size)
        return price(self, *a, **k)

    monkeypatch.setattr(G.ColumnGeneration, "price", spy)
    return priced


def test_without_d_the_sparse_path_keeps_near_transitions_and_bounds_the_whole_class(
    monkeypatch,
):
    # Without max_changed_variables the census-scale path makes the general design over the
    # transitions within NEAR_CHANGED variables (here 1, where the fewest changes of that class,
    # 47.11, lie above those of every design, 40.98, both by dense LPs): the design must pass the
    # full C1 check, keep every transition within one variable (from the codes), reach the fewest
    # changes of its class, and report the bound of the whole class, which the restricted class's
    # own bound (above the whole optimum) would not be.
    df, qi, t = _near_one_table(monkeypatch)
    res = pramopt.design(t, alpha=0.1, structure="general", refine_loss=False)
    assert res.success, res.message
    _assert_verified_within(res, df, qi, t, 1)
    near = _min_changes_within(t, 0.1, 1, 0.51)
    every = _min_changes_within(t, 0.1, 4, 0.51)
    assert every < near - 1.0
    assert near * (1 - 1e-6) <= res.expected_changes <= near * (1 + 2e-3)
    lb = res.reduction.floor_changes_bound
    assert every * (1 - 2e-3) <= lb <= every * (1 + 1e-9)
    assert "change at most 1 identifying variables" in res.message


def test_above_near_d_the_linear_stage_starts_near_and_the_refinement_prices_every_permitted(
    monkeypatch,
):
    # With d = 3 above NEAR_CHANGED (here 1), the linear stage runs over the transitions within
    # one variable, so it ends at that class's fewest changes (47.11 by a dense LP, above 40.98
    # within three), a first refinement stays there, and the second prices every transition
    # within three.  The design must pass the full C1 check with every transition within three
    # variables (from the codes), and the bound reported must be d = 3's (below its dense
    # optimum), not the near class's.
    df, qi, t = _near_one_table(monkeypatch)
    priced = _priced(monkeypatch)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=3)
    assert res.success, res.message
    _assert_verified_within(res, df, qi, t, 3)
    H = _hamming(t.codes)
    assert priced[0] == int(((H >= 1) & (H <= 1)).sum())
    assert priced[-1] == int(((H >= 1) & (H <= 3)).sum())
    near = _min_changes_within(t, 0.1, 1, 0.51)
    within = _min_changes_within(t, 0.1, 3, 0.51)
    assert within < near - 1.0
    assert res.reduction.linear_changes >= near * (1 - 1e-6)
    assert res.reduction.floor_changes_bound <= within * (1 + 1e-9)
    assert "prices every transition within 3" in res.message
    assert any(s.name == "refine within 1" for s in res.stages)
    # the refinement goes on from the design within one variable: allowing three ends no worse
    within_one = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=1)
    assert within_one.success
    assert res.loss <= within_one.loss * (1 + 1e-12)
    # max_iter bounds the two refinements together
    for cap in (9, 30):  # (uncapped: 21 within one variable, then 15)
        short = pramopt.design(
            t, alpha=0.1, structure="general", max_changed_variables=3, max_iter=cap
        )
        assert short.success
        assert sum(s.iterations for s in short.stages if s.name.startswith("refine")) <= cap


def test_above_near_d_with_too_many_transitions_to_list_the_refinement_scans_them(monkeypatch):
    # Where the transitions within d are more than PAIRS_LIMIT (here set between the counts
    # within one and within three variables), those within NEAR_CHANGED are listed on their
    # own for the linear stage and the first refinement, and the second refinement prices every
    # candidate by scanning (no list): the design must pass the full C1 check with every
    # transition within three variables (from the codes), and the bound reported must hold for
    # d = 3 (below its dense optimum).
    df, qi, t = _near_one_table(monkeypatch)
    H = _hamming(t.codes)
    within_one, within_three = int((H == 1).sum()), int(((H >= 1) & (H <= 3)).sum())
    assert within_one < within_three
    monkeypatch.setattr(GS, "PAIRS_LIMIT", within_one)
    priced = _priced(monkeypatch)
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=3)
    assert res.success, res.message
    _assert_verified_within(res, df, qi, t, 3)
    assert priced[0] == within_one and priced[-1] is None
    within = _min_changes_within(t, 0.1, 3, 0.51)
    assert res.reduction.floor_changes_bound <= within * (1 + 1e-9)
    assert "prices every transition within 3" in res.message
    assert any(s.name == "refine within 1" for s in res.stages)


def test_without_d_auto_mode_turns_to_other_structures_when_near_transitions_allow_none(
    monkeypatch,
):
    # Where no design within NEAR_CHANGED variables meets C1 at the floor (a dense LP says so
    # here for one variable) but designs that change more do, the census-scale general design
    # proves nothing about the whole class: auto mode says so and returns a verified design of
    # another structure.
    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    monkeypatch.setattr(GS, "NEAR_CHANGED", 1)
    import pramopt.optimize.strategies.general_start as S

    monkeypatch.setattr(S, "PHASE_ONE_MAX_CELLS", 0)
    df, qi = _table(4)
    t = frequency_table(df, qi)
    assert not _dense_feasible(t, 0.1, 1, 0.51) and _dense_feasible(t, 0.1, 4, 0.51)
    res = pramopt.design(t, alpha=0.1)
    assert res.success and res.reduction.structure != "general"
    assert "none was found there" in res.message
    assert "may exist" in res.message
    P = res.to_dense()
    assert brute_force_max_risk(P, df, qi, list(itertools.combinations(range(4), 3))) <= 0.1


@pytest.mark.parametrize("seed,exists", [(3, False), (0, True)])
def test_auto_mode_above_its_size_says_whether_a_general_design_can_exist(
    seed, exists, monkeypatch
):
    # Above the size up to which auto mode makes the general design, it asks the flow
    # relaxation first: where no design with every P_mm >= 0.51 meets C1 (a dense LP over all
    # K x K entries says so here for seed 3) the summary says so, and where one exists (seed 0)
    # it says that one may; either way a verified design of another structure is returned.
    import pramopt.optimize.auto as A
    import pramopt.optimize.designer as D

    monkeypatch.setattr(A, "GENERAL_AUTO_MAX_CELLS", 10)
    monkeypatch.setattr(D, "AUTO", dataclasses.replace(A.AUTO, general=A.Rule("general", 20)))
    df = zipf_data(n=150, seed=seed, levels=[3, 3, 3, 2], exponent=1.0)
    qi = ["z1", "z2", "z3", "z4"]
    t = frequency_table(df, qi)
    assert t.n_cells > 20
    assert _dense_feasible(t, 0.1, 4, 0.51) is exists
    res = pramopt.design(t, alpha=0.1)
    assert res.success and res.reduction.structure != "general"
    assert any(s.name == "floor bound" for s in res.stages)
    if exists:
        assert "one may exist: the flow relaxation allows floors up to" in res.message
    else:
        assert "the flow relaxation of C1 bounds every diagonal floor by" in res.message
    P = res.to_dense()
    assert brute_force_max_risk(P, df, qi, list(itertools.combinations(range(4), 3))) <= 0.1


@pytest.mark.parametrize("option", ["fixed", "keep_cells", "min_diagonal", "change_weights"])
def test_options_that_keep_records_plausible_hold_on_the_census_scale_path(option, monkeypatch):
    # Each option, with d = 2 on the census-scale path, checked from the codes and the matrix:
    # fixed (no transition changes z4), keep_cells (the largest cell's row is e_k), min_diagonal
    # (every P_mm at least 0.78: without it the smallest is 0.769; the flow relaxation allows
    # 0.7895), change_weights (the reported objective is the dense L2 loss of
    # tests/reference.py plus 2/n^2 times the weighted changes counted here); always the full C1
    # by brute force and every transition within d.
    from reference import l2_loss_from_covariance

    monkeypatch.setattr(GS, "PHASE_ONE_MAX_CELLS", 0)
    df, qi = _table(0)
    t = frequency_table(df, qi)
    big = int(np.argmax(t.counts))
    kw = {
        "fixed": {"fixed": ["z4"]},
        "keep_cells": {"keep_cells": [t.cells().iloc[big].to_dict()]},
        "min_diagonal": {"min_diagonal": 0.78},
        "change_weights": {"change_weights": {"z1": 5.0}},
    }[option]
    res = pramopt.design(t, alpha=0.1, structure="general", max_changed_variables=2, **kw)
    assert res.success, res.message
    _assert_verified_within(res, df, qi, t, 2)
    P = sp.csr_matrix(res.matrix)
    coo = P.tocoo()
    codes = t.codes
    if option == "fixed":
        j = qi.index("z4")
        assert (codes[coo.row, j] == codes[coo.col, j]).all()
    elif option == "keep_cells":
        row = P[big].toarray().ravel()
        assert row[big] == 1.0 and np.count_nonzero(row) == 1
    elif option == "min_diagonal":
        assert P.diagonal().min() >= 0.78
    else:
        U = t.counts.astype(float)
        j = qi.index("z1")
        moved = float(
            (U[coo.row] * coo.data * 5.0 * (codes[coo.row, j] != codes[coo.col, j])).sum()
        )
        want = l2_loss_from_covariance(P.toarray(), U) + 2.0 / U.sum() ** 2 * moved
        assert res.details["weighted_objective"] == pytest.approx(want, rel=1e-8)
