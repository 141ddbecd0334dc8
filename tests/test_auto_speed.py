"""Auto mode's general design refined from a verified design of another structure.

Where a replacement or block design clears a rung of the floor's ladder, auto mode refines the
general design from it (``pramopt.optimize.strategies.general_start``) instead of from phase one
and the linear stage.  Every figure is recomputed here from its definition: the loss from the
release's covariance, C1 from its groups by loops, the rung from the ladder as documented.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import c1_max_risk_from_definition, l2_loss_from_covariance

import pramopt
from pramopt.example import EXAMPLE_QI
from pramopt.optimize.strategies import general_start

QI = list(EXAMPLE_QI)
ALPHA = 0.1


@pytest.fixture
def from_start(example, monkeypatch):
    """Auto mode on the example with the start rule enabled at its size (47 cells)."""
    monkeypatch.setattr(general_start, "START_MIN_CELLS", 0)
    return pramopt.design(example, QI, alpha=ALPHA)


def test_rung_is_the_highest_ladder_floor_the_diagonal_clears():
    # the ladder from the requested gamma down, none below min_diagonal, written out by hand
    class P:
        def __init__(self, low):
            self.low = low

        def diagonal(self):
            return np.array([0.99, self.low, 0.97])

    class Params:
        gamma, min_diagonal = 0.95, None

    class Problem:
        params, K = Params(), 3

    ladder = (0.95, 0.9, 0.8, 0.7, 0.6, 0.51)
    for low in (0.3, 0.51, 0.6, 0.804, 0.9, 0.95, 0.99):
        want = next((g for g in ladder if g <= low), None)
        assert general_start.start_rung(Problem(), P(low)) == want, low
    Params.min_diagonal = 0.85  # no rung below the floor the user asked for
    assert general_start.start_rung(Problem(), P(0.804)) is None
    assert general_start.start_rung(Problem(), P(0.9)) == 0.9


def test_general_design_from_a_start_is_verified_and_never_worse(example, from_start):
    # the general design refined from the best structure that needs no floor: it passes C1 by
    # its definition, keeps the start's rung, and its loss (from the covariance) is at most that
    # of every other structure made, each recomputed from its own matrix
    res = from_start
    assert res.success
    table = res.details["candidates"]
    assert set(table) >= {"general", "replacement"}
    assert "refined from" in res.message  # the start path, not phase one, made it
    combos = pramopt.resolve_combinations(QI)
    structures = {}
    for name in table:
        alone = pramopt.design(example, QI, alpha=ALPHA, structure=name)
        if name != "general":
            structures[name] = l2_loss_from_covariance(alone.matrix, alone.counts)
            assert table[name]["loss"] == pytest.approx(structures[name], rel=1e-6), name
    assert table["general"]["loss"] <= min(structures.values()) * (1 + 1e-9)
    assert res.loss == pytest.approx(min(t["loss"] for t in table.values()), rel=1e-9)
    P = res.to_dense()
    assert c1_max_risk_from_definition(P, res.counts, res.table.codes, combos) <= ALPHA
    assert l2_loss_from_covariance(P, res.counts) == pytest.approx(res.loss, rel=1e-6)
    assert P.diagonal().min() >= 0.51


def test_every_candidate_is_reported_with_its_figures(from_start):
    # the summary still reports each candidate's loss, changes and variables per changed record;
    # the expected changes recomputed from each design made alone
    for name, fig in from_start.details["candidates"].items():
        for key in ("loss", "objective", "expected_changes", "changed_values"):
            assert np.isfinite(fig[key]), (name, key)
    assert "general" in from_start.details["tried"]


def test_refinement_from_a_start_never_ends_above_it(example):
    # refined from the block design (a start well above the best): the design returned passes
    # C1 by its definition, keeps the start's rung and has a loss (from the covariance) at most
    # the start's
    from pramopt.optimize.problem import DesignProblem
    from pramopt.optimize.strategies.checks import CheckedTrace
    from pramopt.params import DesignParams

    blocks = pramopt.design(example, QI, alpha=ALPHA, structure="blocks")
    assert blocks.success
    start = blocks.matrix.tocsr()
    params = DesignParams.from_options("design", alpha=ALPHA)
    combos = pramopt.resolve_combinations(QI)
    problem = DesignProblem.build(blocks.table, combos, params, "design")
    gamma = general_start.start_rung(problem, start)
    assert gamma is not None
    att = general_start.refine_from(
        problem, ALPHA * (1 - params.margin), CheckedTrace(None), start, gamma, "blocks"
    )
    P = att.P.toarray()
    before = l2_loss_from_covariance(start, blocks.counts)
    assert l2_loss_from_covariance(P, blocks.counts) <= before * (1 + 1e-12)
    assert l2_loss_from_covariance(P, blocks.counts) < before * (1 - 1e-3)  # it does descend
    assert P.diagonal().min() >= gamma - 1e-12
    assert c1_max_risk_from_definition(P, blocks.counts, blocks.table.codes, combos) <= ALPHA
