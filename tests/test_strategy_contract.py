"""The strategy contract, over every registered strategy (pramopt.optimize.strategies.STRATEGIES).

Each one must be a module with ``solve(problem, level, trace) -> Attempt``, be reachable from
``design()`` (as a value of ``structure``, through auto mode's policy or through the options
that select it: each is reached here end to end, by a spy on its module's ``solve``), and its
matrix, when it says OK on a small case, must be row-stochastic and meet C1 by the independent
verifier (pramopt.verify).  A strategy registered but missing from the parameter's choices, the
policy or its module fails here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import numpy as np
import pytest
import scipy.sparse as sp

import pramopt
from pramopt.frequency.combinations import resolve_combinations
from pramopt.optimize.auto import AUTO
from pramopt.optimize.problem import DesignProblem
from pramopt.optimize.strategies import STRATEGIES, STRUCTURES, Attempt, AttemptStatus
from pramopt.optimize.strategies.checks import CheckedTrace, check
from pramopt.params import DesignParams
from pramopt.verify import c1_risk

NAMES = sorted(STRATEGIES)
ALPHA = 0.1


def _module(name):
    return importlib.import_module(f"pramopt.optimize.strategies.{STRATEGIES[name].module}")


def _structure_field():
    return next(f for f in dataclasses.fields(DesignParams) if f.name == "structure")


@pytest.fixture(scope="module")
def small():
    ex = pramopt.example_data()
    return ex, ["v1", "v2", "v3", "v4", "v5"]


def _options(name) -> dict:
    """Options that make design() use strategy ``name`` (its own options, or its structure)."""
    entry = STRATEGIES[name]
    if entry.options:
        return {o: 3.0 for o in entry.options}
    return {"structure": name} if entry.structure else {}


@pytest.mark.parametrize("name", NAMES)
def test_the_module_exposes_solve(name):
    solve = getattr(_module(name), "solve", None)
    assert callable(solve), f"strategy {name!r}: module {STRATEGIES[name].module!r} has no solve()"
    assert list(inspect.signature(solve).parameters) == ["problem", "level", "trace"]
    assert STRATEGIES[name].name == name


@pytest.mark.parametrize("name", NAMES)
def test_it_is_a_choice_of_structure_exactly_when_registered_as_one(name):
    entry = STRATEGIES[name]
    f = _structure_field()
    assert (name in f.metadata["cli"]["choices"]) == entry.structure
    assert (f'"{name}"' in f.metadata["kind"]) == entry.structure
    if entry.structure:
        assert DesignParams.from_options("test", structure=name).structure == name
    else:
        with pytest.raises(pramopt.InvalidParameterError, match="structure"):
            DesignParams.from_options("test", structure=name)


@pytest.mark.parametrize("name", NAMES)
def test_it_is_reached_by_auto_mode_or_by_its_options(name):
    entry = STRATEGIES[name]
    fields = {f.name for f in dataclasses.fields(DesignParams)}
    if entry.options:
        assert set(entry.options) <= fields
    else:  # every record-level structure is one auto mode may make
        assert name in AUTO.structures(), f"strategy {name!r} is missing from auto mode's policy"


def test_every_choice_and_policy_entry_is_registered():
    choices = _structure_field().metadata["cli"]["choices"]
    from pramopt import kinds
    from pramopt.params import STRUCTURE_CHOICES, DesignParams

    assert list(choices) == list(STRUCTURE_CHOICES) and choices[0] == "auto"
    assert list(STRUCTURE_CHOICES[: len(STRUCTURES)]) == list(STRUCTURES)
    assert set(STRUCTURES) - {"auto"} <= set(STRATEGIES)
    for c in set(choices) - set(STRUCTURES):  # kinds of design (pramopt.kinds)
        assert kinds.kind_for(DesignParams(structure=c)) is not None
    assert AUTO.structures() <= set(STRATEGIES)


@pytest.mark.parametrize("name", NAMES)
def test_design_reaches_it(name, small, monkeypatch):
    # a spy on the module's solve; in auto mode the structures before it in the policy find nothing
    mod = _module(name)
    calls = []
    real = mod.solve

    def spy(problem, level, trace):
        calls.append(level)
        return real(problem, level, trace)

    monkeypatch.setattr(mod, "solve", spy)
    options = _options(name)
    if not options:
        for other in AUTO.structures() - {name}:
            monkeypatch.setattr(
                _module(other),
                "solve",
                lambda *a: Attempt(AttemptStatus.INFEASIBLE, detail="none", auto_reason="none"),
            )
        options = {"structure": "auto"}
    ex, qi = small
    res = pramopt.design(ex, qi, alpha=ALPHA, max_iter=5, **options)
    assert calls, f"design({options}) never called strategy {name!r}: {res.message}"
    assert all(0 < level <= ALPHA for level in calls)
    assert res.success, res.message


@pytest.mark.parametrize("name", NAMES)
def test_an_ok_attempt_meets_c1_by_the_independent_verifier(name, small):
    ex, qi = small
    table = pramopt.frequency_table(ex, qi)
    combos = resolve_combinations(table.qi, None, None, "test")
    options = {o: 3.0 for o in STRATEGIES[name].options}
    params = DesignParams.from_options("test", alpha=ALPHA, max_iter=5, **options)
    problem = DesignProblem.build(table, combos, params)
    att = STRATEGIES[name].solve(problem, ALPHA * (1 - 1e-4), CheckedTrace())
    assert isinstance(att, Attempt) and isinstance(att.status, AttemptStatus)
    assert att.ok, f"{name}: {att.status} {att.detail}"
    P = att.P.toarray() if hasattr(att.P, "toarray") else np.asarray(att.P)
    assert P.shape == (table.n_cells, table.n_cells)
    assert np.all(P >= -1e-12) and np.allclose(P.sum(axis=1), 1.0)
    rep = c1_risk(P, table.codes, table.counts.astype(float), combos)
    assert rep.max_risk <= ALPHA
    if att.loss is not None:  # a closed form the designer reports: the loss from its definition
        assert att.loss == pytest.approx(pramopt.loss.l2_loss(P, table.counts), rel=1e-8)


def test_a_matrix_checked_during_a_search_is_not_checked_again(small):
    # the check hook keeps reports by matrix: the designer's check of the matrix a strategy
    # already checked adds no stage and returns the same report; another matrix is checked anew
    ex, qi = small
    table = pramopt.frequency_table(ex, qi)
    combos = resolve_combinations(table.qi, None, None, "test")
    problem = DesignProblem.build(table, combos, DesignParams.from_options("test", alpha=ALPHA))
    trace = CheckedTrace()
    P = sp.identity(table.n_cells, format="csr")
    first = check(problem, trace, P, stage=None)
    assert trace.stages == [] and check(problem, trace, P) is first and trace.stages == []
    Q = P.copy()
    rep = check(problem, trace, Q)
    assert [s.name for s in trace.stages] == ["verify"]
    expected = c1_risk(Q.toarray(), table.codes, table.counts.astype(float), combos).max_risk
    assert rep.max_risk == pytest.approx(expected)
