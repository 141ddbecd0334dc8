"""Every registered solver backend honours the capabilities it declares.

The same small programs go through the doors (:func:`solve_lp`, :func:`chain`, :func:`solve_qp`)
for every backend of :data:`BACKENDS` that is installed here.  Their optima are worked out by hand
in the comments and checked again by brute force over the vertices (LP) or from the KKT
conditions (QP); duals must come back exactly when the backend declares them, and then satisfy
complementary slackness and equal the objective's sensitivity, measured by re-solving with a
perturbed right-hand side.  A capability a backend does not declare is refused by the door.

Also: ``solver=`` of a design reaches the flow relaxation, the retention LP and the balancing
weights (a spy backend registered for the test sees each call).
"""

from __future__ import annotations

import itertools
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

from pramopt.optimize.backends import (
    BACKENDS,
    BackendInfo,
    Outcome,
    chain,
    installed,
    registry,
    solve_lp,
    solve_qp,
    supports,
)
from pramopt.optimize.program import LinearProgram

NAMES = sorted(BACKENDS)

# min -3x - y - 2z  s.t.  3x + 2y <= 5,  3x + 2y + 3z <= 4,  x - y + z = 1,  0 <= x, y, z <= 4.
# By hand: z = 0 (its cost per unit of the second row is the worst), then x - y = 1 and
# 3x + 2y = 4 give x = 6/5, y = 1/5, objective -19/5; the first row has slack 1.  Duals u of the
# second row and v of the equality from the x and y columns: 3u + v = -3, 2u - v = -1, so
# u = -4/5, v = -3/5; z's reduced cost -2 - 3u - v = 1 > 0 (it rests on its lower bound).
C = np.array([-3.0, -1.0, -2.0])
A_UB = np.array([[3.0, 2.0, 0.0], [3.0, 2.0, 3.0]])
B_UB = np.array([5.0, 4.0])
A_EQ = np.array([[1.0, -1.0, 1.0]])
B_EQ = np.array([1.0])
LO, HI = np.zeros(3), np.full(3, 4.0)
X_STAR = np.array([6 / 5, 1 / 5, 0.0])
OBJ_STAR = -19 / 5
U_STAR = np.array([0.0, -4 / 5])  # d objective / d b_ub
V_STAR = np.array([-3 / 5])  # d objective / d b_eq
REDUCED_STAR = np.array([0.0, 0.0, 1.0])

TOL = 1e-5  # the interior-point and first-order solvers stop this close


def _vertex_optimum(c, A_ub, b_ub, A_eq, b_eq, lo, hi):
    """The LP's optimum by brute force: every basic solution (n active rows), the best feasible."""
    n = c.size
    G = np.vstack([A_ub, A_eq, -A_eq, -np.eye(n), np.eye(n)])
    h = np.concatenate([b_ub, b_eq, -b_eq, -lo, hi])
    best = None
    for rows in itertools.combinations(range(G.shape[0]), n):
        M = G[list(rows)]
        if abs(np.linalg.det(M)) < 1e-12:
            continue
        x = np.linalg.solve(M, h[list(rows)])
        if np.all(G @ x <= h + 1e-9) and (best is None or c @ x < c @ best - 1e-12):
            best = x
    return best


def _program(A_ub, b_ub, A_eq, b_eq, lo, hi) -> LinearProgram:
    """The same rows as a loaded program: every column an ``x`` column, no other blocks."""
    n = A_ub.shape[1]
    m = A_ub.shape[0] + A_eq.shape[0]
    empty = slice(n, n)
    return LinearProgram(
        A=sp.csc_matrix(np.vstack([A_ub, A_eq])),
        row_lo=np.concatenate([np.full(A_ub.shape[0], -np.inf), b_eq]),
        row_hi=np.concatenate([b_ub, b_eq]),
        col_lo=lo.copy(),
        col_hi=hi.copy(),
        cost=np.zeros(n),
        n_x=n,
        cols={"t": empty, "s": empty},
        rows={"rows": slice(0, m)},
        support=None,
        scale_costs=False,
    )


def _skip_unless_installed(name):
    if not installed(name):  # raises when the registered module cannot be loaded: half wired
        pytest.skip(f"{name} is not installed here")


def test_the_hand_computed_optimum_is_the_best_vertex():
    x = _vertex_optimum(C, A_UB, B_UB, A_EQ, B_EQ, LO, HI)
    np.testing.assert_allclose(x, X_STAR, atol=1e-12)
    assert C @ x == pytest.approx(OBJ_STAR, abs=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_registered_backend_is_wired_for_what_it_declares(name):
    info = BACKENDS[name]
    assert info.name == name and name == name.upper()
    mod = registry.implementation(info)  # its module loads (its solver libraries need not)
    assert callable(mod.installed)
    for capability, needs in (("lp", ("load", "solve_lp")), ("qp", ("solve_qp",))):
        assert supports(name, capability) is getattr(info, capability)
        for fn in needs if getattr(info, capability) else ():
            assert callable(getattr(mod, fn, None)), f"{name} declares {capability} without {fn}"
    # what it does not declare, the doors refuse before calling it
    if not info.lp:
        with pytest.raises(ValueError, match="solves no linear programs"):
            solve_lp(C, A_UB, B_UB, solver=name)
        with pytest.raises(ValueError, match="solves no linear programs"):
            chain(_program(A_UB, B_UB, A_EQ, B_EQ, LO, HI), name).solve(C, LO, HI)
    if not info.qp:
        with pytest.raises(ValueError, match="must name a QP backend"):
            solve_qp(_program(A_UB, B_UB, A_EQ, B_EQ, LO, HI), C, np.ones(3), LO, HI, solver=name)


@pytest.mark.parametrize("name", [n for n in NAMES if BACKENDS[n].lp])
def test_one_shot_lp(name):
    _skip_unless_installed(name)
    info = BACKENDS[name]
    res = solve_lp(C, A_UB, B_UB, A_EQ, B_EQ, np.column_stack([LO, HI]), solver=name)
    assert res.outcome is Outcome.OPTIMAL, res.detail
    np.testing.assert_allclose(res.x, X_STAR, atol=TOL)
    assert res.objective == pytest.approx(OBJ_STAR, abs=TOL)
    if not info.duals:
        assert res.marginals is None
        return
    m = res.marginals
    assert m is not None
    np.testing.assert_allclose(m.ineqlin, U_STAR, atol=TOL)
    np.testing.assert_allclose(m.eqlin, V_STAR, atol=TOL)
    np.testing.assert_allclose(m.lower + m.upper, REDUCED_STAR, atol=TOL)
    # complementary slackness, and c = A_ub' u + A_eq' v + (bound multipliers)
    assert np.all(np.abs(m.ineqlin * (B_UB - A_UB @ res.x)) < TOL)
    assert np.all(np.abs(m.lower * (res.x - LO)) < TOL) and np.all(
        np.abs(m.upper * (HI - res.x)) < TOL
    )
    np.testing.assert_allclose(
        A_UB.T @ m.ineqlin + A_EQ.T @ m.eqlin + m.lower + m.upper, C, atol=TOL
    )
    # the objective's sensitivity: re-solve with each right-hand side moved by d
    d = 1e-3
    for i in range(B_UB.size):
        moved = solve_lp(
            C,
            A_UB,
            B_UB + d * np.eye(B_UB.size)[i],
            A_EQ,
            B_EQ,
            np.column_stack([LO, HI]),
            solver=name,
        )
        assert (moved.objective - res.objective) / d == pytest.approx(m.ineqlin[i], abs=1e-4)
    moved = solve_lp(C, A_UB, B_UB, A_EQ, B_EQ + d, np.column_stack([LO, HI]), solver=name)
    assert (moved.objective - res.objective) / d == pytest.approx(m.eqlin[0], abs=1e-4)


@pytest.mark.parametrize("name", [n for n in NAMES if BACKENDS[n].lp])
def test_one_shot_lp_infeasible_and_unbounded(name):
    _skip_unless_installed(name)
    # x + y <= 1 and x + y >= 3
    res = solve_lp([1.0, 1.0], [[1.0, 1.0], [-1.0, -1.0]], [1.0, -3.0], solver=name)
    assert res.outcome is Outcome.INFEASIBLE and res.x is None and res.marginals is None
    # min -x - y with x - y <= 1, x, y >= 0: y (and x with it) grows without bound
    res = solve_lp([-1.0, -1.0], [[1.0, -1.0]], [1.0], solver=name)
    assert res.outcome is Outcome.UNBOUNDED and res.x is None


@pytest.mark.parametrize("name", [n for n in NAMES if BACKENDS[n].lp])
def test_loaded_program_solves_and_resolves(name):
    _skip_unless_installed(name)
    info = BACKENDS[name]
    lp = chain(_program(A_UB, B_UB, A_EQ, B_EQ, LO, HI), name)
    out = lp.solve(C, LO, HI)
    assert out.outcome is Outcome.OPTIMAL, out.detail
    np.testing.assert_allclose(out.x, X_STAR, atol=TOL)
    assert out.objective == pytest.approx(OBJ_STAR, abs=TOL)
    duals = lp.duals()
    assert (duals is not None) is info.duals
    if (
        duals is not None
    ):  # row duals and reduced costs: c = A' y + reduced, slack rows price nothing
        np.testing.assert_allclose(duals.rows, np.concatenate([U_STAR, V_STAR]), atol=TOL)
        np.testing.assert_allclose(duals.cols, REDUCED_STAR, atol=TOL)
    # new costs and bounds on the same loaded program: x >= 1 and the brute-force optimum
    c2, lo2 = np.array([-1.0, -3.0, -2.0]), np.array([0.0, 0.0, 0.5])
    out = lp.solve(c2, lo2, HI)
    best = _vertex_optimum(c2, A_UB, B_UB, A_EQ, B_EQ, lo2, HI)
    assert out.outcome is Outcome.OPTIMAL
    assert out.objective == pytest.approx(c2 @ best, abs=TOL)
    # rows that no box can meet: 3x + 2y + 3z <= 4 with every entry >= 1
    out = lp.solve(C, np.ones(3), HI)
    assert out.outcome is Outcome.INFEASIBLE and out.x is None


@pytest.mark.parametrize("name", [n for n in NAMES if BACKENDS[n].qp])
def test_qp_closed_form(name):
    _skip_unless_installed(name)
    info = BACKENDS[name]
    # min c.x + 1/2 sum h_i x_i^2 with sum x = 1 and 0 <= x <= 1: x_i = (mu - c_i) / h_i inside the
    # box, mu from sum x = 1; mu is the row's dual (d objective / d right-hand side)
    c, h = np.array([0.0, 0.1, 0.2]), np.array([1.0, 2.0, 4.0])
    mu = (1.0 + np.sum(c / h)) / np.sum(1.0 / h)
    x = (mu - c) / h
    assert np.all((x > 0) & (x < 1))
    prog = LinearProgram(
        A=sp.csc_matrix(np.ones((1, 3))),
        row_lo=np.ones(1),
        row_hi=np.ones(1),
        col_lo=np.zeros(3),
        col_hi=np.ones(3),
        cost=np.zeros(3),
        n_x=3,
        cols={"t": slice(3, 3), "s": slice(3, 3)},
        rows={"rows": slice(0, 1)},
        support=None,
    )
    out = solve_qp(prog, c, h, np.zeros(3), np.ones(3), solver=name)
    assert out.outcome is Outcome.OPTIMAL, out.detail
    np.testing.assert_allclose(out.x, x, atol=TOL)
    assert out.objective == pytest.approx(c @ x + 0.5 * h @ x**2, abs=TOL)
    assert (out.duals is not None) is info.duals
    if out.duals is not None:
        np.testing.assert_allclose(out.duals.rows, [mu], atol=TOL)
        np.testing.assert_allclose(out.duals.cols, 0.0, atol=TOL)


def test_supports_answers_for_the_default_and_refuses_unknown_capabilities():
    assert supports(None, "duals") is BACKENDS["HIGHS"].duals  # the default chain starts with HiGHS
    assert supports("an_unregistered_cvxpy_solver", "lp") and not supports("osqp", "duals")
    with pytest.raises(ValueError, match="capability"):
        supports(None, "magic")


# -- solver= reaches every program -----------------------------------------------------------------


@pytest.fixture
def spy(monkeypatch):
    """A backend "SPY" that records the programs it is given and hands them to HiGHS."""
    from pramopt.optimize.backends import highs

    calls = []
    mod = types.ModuleType(f"{registry.__package__}.spy")
    mod.installed = lambda name: True

    def spy_solve_lp(*args, name, **kw):
        calls.append(name)
        return highs.solve_lp(*args, name="HIGHS", **kw)

    mod.solve_lp = spy_solve_lp
    mod.load = lambda program, name: calls.append(name) or highs.load(program)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(
        BACKENDS,
        "SPY",
        BackendInfo("SPY", lp=True, qp=False, duals=True, warm_start=True, module="spy"),
    )
    return calls


def _problem(solver, alpha=0.2):
    import pramopt
    from benchmarks._common import zipf_frame
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem
    from pramopt.params import DesignParams

    df = zipf_frame(1, 80, (2, 3, 3), 1.3)
    t = pramopt.frequency_table(df, list(df.columns))
    p = DesignParams.from_options("design", alpha=alpha, solver=solver)
    return DesignProblem.build(t, resolve_combinations(t.qi, 3, None, "x"), p)


def test_solver_reaches_the_flow_relaxation(spy):
    from pramopt.optimize.relaxation import flow_relaxation

    via_spy = flow_relaxation(_problem("spy"))
    assert spy and set(spy) == {"SPY"}
    assert via_spy.t == flow_relaxation(_problem(None)).t  # the spy hands it to HiGHS unchanged
    with pytest.raises(ImportError, match="NO_SUCH_SOLVER"):
        flow_relaxation(_problem("no_such_solver"))


def test_solver_reaches_the_retention_lp(spy):
    from pramopt.optimize.strategies.replacement_retentions import optimise_retentions

    pb = _problem("SPY")
    pools = np.zeros(pb.K, dtype=np.int64)
    w = pb.counts / pb.counts.sum()
    res = optimise_retentions(pb, np.zeros(pb.K), w, pools, 0.2, 1e-3, objective="changes")
    assert res is not None and spy and set(spy) == {"SPY"}


def test_solver_reaches_the_balancing_weights(spy):
    from pramopt.optimize.constraints.column_ratio import balancing_weights

    P = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]])
    s = balancing_weights(P, solver="SPY")
    assert spy == ["SPY"]
    np.testing.assert_array_equal(s, balancing_weights(P))
