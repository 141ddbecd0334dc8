"""Contract of every registered objective (:data:`OBJECTIVES`) and constraint (:data:`CONSTRAINTS`).

Objectives: every method of the protocol is there and agrees with the others: the gradients of
``on_support`` (dense and sparse) and ``on_blocks`` against central differences of their own
values, the curvature against differences of the gradient, ``value(P, loss=l2)`` against
``value(P)``, and ``linear_cost`` against what ``value`` adds to the exact L2 loss
(:func:`pramopt.loss.l2_loss`).

Constraints: the rows a program gets (:func:`build_program`) hold at a matrix exactly when an
independent checker says so (C1: :func:`pramopt.verify.violated_rows`; ε-DP:
:func:`pramopt.risk.dp_epsilon` and Theorem 1's definition by brute force; Pk: the column ratios
by brute force, and Theorem 3 via :func:`pramopt.risk.pk_anonymity` where the rows hold; invariance:
``U0^T P``), ``violated`` finds exactly the rows the checker finds, and the pricing terms equal
``A^T y`` over the columns the rows give a transition outside the support.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

import pramopt
from pramopt.frequency.combinations import resolve_combinations
from pramopt.loss import l2_loss
from pramopt.optimize.constraints import CONSTRAINTS, Constraint, Prices
from pramopt.optimize.constraints.c1 import WorkingSet
from pramopt.optimize.objectives import OBJECTIVES, Objective
from pramopt.optimize.pricing import values_at_pairs
from pramopt.optimize.problem import DesignProblem
from pramopt.optimize.program import Duals, build_program
from pramopt.optimize.strategies.blocks import BlockModel
from pramopt.optimize.support import Support
from pramopt.params import DesignParams
from pramopt.risk import dp_epsilon, pk_anonymity
from pramopt.verify import violated_rows

ALPHA = 0.2
EPS = 1.5
K_STAR = 3.0


@pytest.fixture(scope="module")
def problem() -> DesignProblem:
    """About 12 cells of 40 records, several of them rare at alpha 0.2."""
    rng = np.random.default_rng(7)
    df = pd.DataFrame(
        {
            "a": rng.choice(2, 40, p=[0.7, 0.3]),
            "b": rng.choice(3, 40, p=[0.5, 0.3, 0.2]),
            "c": rng.choice(2, 40, p=[0.8, 0.2]),
        }
    )
    t = pramopt.frequency_table(df, ["a", "b", "c"])
    p = DesignParams.from_options("design", alpha=ALPHA, change_weights={"a": 1.0, "b": 2.5})
    return DesignProblem.build(t, resolve_combinations(t.qi, None, None, "test"), p)


def _stochastic(rng, K, keep: float) -> np.ndarray:
    """``keep I + (1 - keep) R`` with R a random row-stochastic matrix (every entry positive)."""
    R = rng.uniform(0.05, 1.0, (K, K))
    return keep * np.eye(K) + (1.0 - keep) * R / R.sum(axis=1, keepdims=True)


def _dense(K: int) -> Support:
    idx = np.arange(K)
    return Support.from_pairs(np.repeat(idx, K), np.tile(idx, K), K)


def _receivers(K: int, recv) -> Support:
    """The diagonal plus every row into the receiver columns ``recv`` (a sparse design)."""
    return Support.from_pairs(np.repeat(np.arange(K), len(recv)), np.tile(recv, K), K)


# ------------------------------------------------------------------------------------------
# Objectives
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=sorted(OBJECTIVES))
def objective(request, problem) -> Objective:
    obj = OBJECTIVES[request.param](problem.params, problem.table)
    assert obj.name == request.param
    return obj


def test_value_with_known_loss(objective, problem):
    P = _stochastic(np.random.default_rng(1), problem.K, 0.7)
    counts = problem.counts
    loss = l2_loss(P, counts)
    whole = objective.value(P, counts)
    assert objective.value(P, counts, loss=loss) == pytest.approx(whole, rel=1e-12)
    assert objective.value(sp.csr_matrix(P), counts) == pytest.approx(whole, rel=1e-12)


def test_linear_cost_is_what_value_adds_to_the_loss(objective, problem):
    """An objective with a linear part is the L2 loss plus that part (the linear stage's model)."""
    rng = np.random.default_rng(2)
    K, counts = problem.K, problem.counts
    rows, cols = np.meshgrid(np.arange(K), np.arange(K), indexing="ij")
    lin = objective.linear_cost(rows, cols)
    if lin is None:
        assert objective.linear_cost(rows[2], cols[2]) is None
        return
    assert lin.shape == (K, K) and np.all(lin >= 0) and np.all(np.diag(lin) == 0)
    assert np.array_equal(objective.linear_cost(rows[2], cols[2]), lin[2])  # any shape
    for keep in (0.9, 0.5):
        P = _stochastic(rng, K, keep)
        added = objective.value(P, counts) - l2_loss(P, counts)
        want = 2.0 / counts.sum() ** 2 * float(np.sum(counts[:, None] * P * lin))
        assert added == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_and_curvature_on_support(objective, problem, sparse):
    rng = np.random.default_rng(3)
    K, counts = problem.K, problem.counts
    sup = _receivers(K, [0, 3]) if sparse else _dense(K)
    mask = sup.to_matrix(np.ones(sup.size)).toarray()
    P = mask * rng.uniform(0.05, 1.0, (K, K)) + 3.0 * np.eye(K)
    P /= P.sum(axis=1, keepdims=True)
    x = sup.from_matrix(P)
    evaluate = objective.on_support(sup, counts, sparse)
    f, g, gcols = evaluate(x)
    assert f == pytest.approx(objective.value(P, counts), rel=1e-10)
    cols = np.unique(sup.cols)
    at = gcols(cols)[sup.rows, np.searchsorted(cols, sup.cols)]
    assert np.allclose(at, g, rtol=1e-9, atol=1e-15)
    h = 1e-6
    picks = rng.choice(sup.size, min(12, sup.size), replace=False)
    fd, fd2 = np.empty(picks.size), np.empty(picks.size)
    for i, s in enumerate(picks):
        up, dn = x.copy(), x.copy()
        up[s] += h
        dn[s] -= h
        (fu, gu, _), (fn, gn, _) = evaluate(up), evaluate(dn)
        fd[i] = (fu - fn) / (2 * h)
        fd2[i] = (gu[s] - gn[s]) / (2 * h)
    assert np.allclose(g[picks], fd, rtol=1e-5, atol=1e-9 * np.abs(g).max())
    curvature = objective.curvature_on_support(sup, counts, sparse)
    if curvature is None:  # linear steps only
        return
    B = curvature(x, g)
    assert B.shape == (sup.size,) and np.all(B > 0)
    exact = B[picks] > B.min()  # above the floor that keeps the model convex
    assert exact.any() and np.allclose(B[picks][exact], fd2[exact], rtol=1e-4)


def test_pricing_values_at_pairs_are_the_dense_gradient(objective, problem):
    """Pricing over a list of transitions reads the gradient at pairs (``grad_columns.at``
    where an evaluator has it): the same values as the dense evaluator's whole gradient, at
    pairs on and off the support."""
    rng = np.random.default_rng(4)
    K, counts = problem.K, problem.counts
    sup = _receivers(K, [0, 3])
    mask = sup.to_matrix(np.ones(sup.size)).toarray()
    P = mask * rng.uniform(0.05, 1.0, (K, K)) + 3.0 * np.eye(K)
    P /= P.sum(axis=1, keepdims=True)
    _, _, gcols = objective.on_support(sup, counts, True)(sup.from_matrix(P))
    dense = _dense(K)
    _, _, dense_cols = objective.on_support(dense, counts, False)(dense.from_matrix(P))
    G = dense_cols(np.arange(K))
    rows, cols = rng.integers(0, K, 400), rng.integers(0, K, 400)
    got = values_at_pairs(gcols, rows, cols, K)
    assert np.allclose(got, G[rows, cols], rtol=1e-9, atol=1e-12 * np.abs(G).max())


def test_value_alone_on_support(objective, problem):
    """Where an evaluator gives the value alone (``evaluate.value``), it is the objective of the
    design asked for, whatever was evaluated before (it keeps the last design it valued)."""
    rng = np.random.default_rng(4)
    K, counts = problem.K, problem.counts
    sup = _receivers(K, [0, 3])
    evaluate = objective.on_support(sup, counts, True)
    value = getattr(evaluate, "value", None)
    if value is None:
        pytest.skip("this evaluator gives no value alone")
    mask = sup.to_matrix(np.ones(sup.size)).toarray()
    designs = []
    for _ in range(2):
        P = mask * rng.uniform(0.05, 1.0, (K, K)) + 3.0 * np.eye(K)
        designs.append(P / P.sum(axis=1, keepdims=True))
    a, b = (sup.from_matrix(P) for P in designs)
    want_a, want_b = (objective.value(P, counts) for P in designs)
    assert value(a) == pytest.approx(want_a, rel=1e-10)
    assert evaluate(b)[0] == pytest.approx(want_b, rel=1e-10)
    assert value(a) == pytest.approx(want_a, rel=1e-10)
    f, g, _ = evaluate(a)  # the gradient of the design last valued
    assert f == pytest.approx(want_a, rel=1e-10)
    h = 1e-6
    up, dn = a.copy(), a.copy()
    up[1] += h
    dn[1] -= h
    fd = (
        objective.value(sup.to_matrix(up).toarray(), counts)
        - objective.value(sup.to_matrix(dn).toarray(), counts)
    ) / (2 * h)
    assert g[1] == pytest.approx(fd, rel=1e-5)


def test_gradient_on_blocks(objective, problem):
    rng = np.random.default_rng(4)
    K, counts = problem.K, problem.counts
    cells = rng.permutation(K)
    bm = BlockModel([cells[: K // 2], cells[K // 2 :]], K)
    z = bm.clean(np.concatenate([rng.uniform(0.5, 0.8, bm.B), rng.uniform(0.1, 1.0, K)]))
    f, g, _ = objective.on_blocks(bm, counts)(z)
    if objective.linear_cost(np.zeros(1, int), np.ones(1, int)) is None:
        assert f == pytest.approx(objective.value(bm.matrix(z), counts), rel=1e-10)
    else:  # the block refinement models the loss without the linear part
        assert f == pytest.approx(l2_loss(bm.matrix(z), counts), rel=1e-10)
    h = 1e-7
    evaluate = objective.on_blocks(bm, counts)
    fd = np.empty(z.size)
    for i in range(z.size):
        up, dn = z.copy(), z.copy()
        up[i] += h
        dn[i] -= h
        fd[i] = (evaluate(up)[0] - evaluate(dn)[0]) / (2 * h)
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-9 * np.abs(g).max())


# ------------------------------------------------------------------------------------------
# Constraints: how each is built on a support, and its independent checker
# ------------------------------------------------------------------------------------------


def _full_working_set(pb: DesignProblem) -> WorkingSet:
    """Every row (m, g) of C1 at level alpha."""
    G = pb.groups.n_groups
    return WorkingSet(
        np.repeat(np.arange(pb.K), G),
        np.tile(np.arange(G), pb.K),
        pb.table,
        pb.groups,
        pb.combos,
        ALPHA,
    )


def _c1(pb):
    ws = _full_working_set(pb)

    def build(sup):
        return CONSTRAINTS["c1"](ws.block(sup), ws.a_solve, pb.groups, None, ws)

    def check(P):  # C1's violated rows as (m, group) keys, from pramopt.verify
        G = pb.groups.n_groups
        v = violated_rows(P, pb.table.codes, pb.counts, pb.combos, ALPHA)
        return {m * G + int(pb.groups.member[rep, ci]) for m, ci, rep in v}

    return build, check, None


def _epsilon(pb):
    def check(P):  # Theorem 1 by definition, column by column
        return {
            j
            for j in range(P.shape[1])
            for m in range(P.shape[0])
            for mm in range(P.shape[0])
            if P[m, j] > math.exp(EPS) * P[mm, j]
        }

    def whole(P, holds):
        assert (dp_epsilon(P) <= EPS) is holds

    return (lambda sup: CONSTRAINTS["epsilon"](EPS)), check, whole


def _pk(pb):
    r = 1.0 / math.sqrt((K_STAR - 1.0) / (pb.n - 1.0))
    s = np.random.default_rng(5).uniform(0.8, 1.25, pb.K)

    def check(P):  # the row-scaled column ratios by brute force
        Q = P * s[:, None]
        return {j for j in range(P.shape[1]) if Q[:, j].max() > r * Q[:, j].min()}

    def whole(P, holds):
        if holds:  # the rows are sufficient for Theorem 3 (not necessary)
            assert pk_anonymity(P, pb.n) >= K_STAR * (1 - 1e-12)

    return (lambda sup: CONSTRAINTS["pk"](r, s)), check, whole


def _invariance(pb):
    def check(P):
        released = pb.counts @ P
        return {
            k
            for k in range(pb.K)
            if abs(released[k] - pb.counts[k]) > 1e-9 * max(pb.counts[k], 1.0)
        }

    return (lambda sup: CONSTRAINTS["invariance"](pb.counts)), check, None


#: name -> (build(support) -> Constraint, violated keys by an independent check, whole-matrix check)
CHECKERS = {"c1": _c1, "epsilon": _epsilon, "pk": _pk, "invariance": _invariance}


def test_every_constraint_has_a_checker():
    assert set(CONSTRAINTS) == set(CHECKERS)


def _matrices(pb):
    """Matrices on both sides of every constraint: random mixes, the identity, the uniform one."""
    rng = np.random.default_rng(6)
    K = pb.K
    out = [_stochastic(rng, K, keep) for keep in (0.95, 0.8, 0.5, 0.2, 0.02)]
    out += [np.eye(K), np.full((K, K), 1.0 / K)]
    mix = _stochastic(rng, K, 0.3)
    mix[:, 1] = 0.0  # a column never released
    return out + [mix / mix.sum(axis=1, keepdims=True)]


def _rows_hold(prog, x) -> bool:
    """Whether some auxiliary columns satisfy the program's rows at ``x`` (scipy's HiGHS)."""
    lo, hi = prog.col_lo.copy(), prog.col_hi.copy()
    lo[: prog.n_x] = hi[: prog.n_x] = x
    A = prog.A.tocsr()
    fin_hi, fin_lo = np.isfinite(prog.row_hi), np.isfinite(prog.row_lo)
    res = linprog(
        np.zeros(A.shape[1]),
        A_ub=sp.vstack([A[fin_hi], -A[fin_lo]]),
        b_ub=np.concatenate([prog.row_hi[fin_hi], -prog.row_lo[fin_lo]]),
        bounds=list(zip(lo, np.where(np.isfinite(hi), hi, None))),
        method="highs",
    )
    return res.status == 0


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_rows_and_violated_agree_with_the_checker(name, problem):
    build, check, whole = CHECKERS[name](problem)
    sup = _dense(problem.K)
    c: Constraint = build(sup)
    assert c.name and isinstance(c.risk, bool)
    prog = build_program(sup, [c])
    assert prog.constraints == (c,)
    holds_seen = set()
    for P in _matrices(problem):
        want = check(P)
        got = c.violated(P)
        assert set(np.asarray(got).tolist()) == want
        holds = _rows_hold(prog, sup.from_matrix(P))
        assert holds is (not want)
        holds_seen.add(holds)
        if whole is not None:
            whole(P, holds)
    assert holds_seen == {True, False}  # the matrices tried lie on both sides


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_pricing_terms_are_the_rows_of_a_new_transition(name, problem):
    """``-U0(m) per_column[k] - per_pair[m, k]`` is ``-A[:, (m, k)] . y`` over the constraint's rows
    in the program with (m, k) in its support; None only for rows that need a dense support."""
    build, _, _ = CHECKERS[name](problem)
    K, counts = problem.K, problem.counts
    small, full = _receivers(K, [2]), _dense(K)
    c_small, c_full = build(small), build(full)
    prog_s, prog_f = build_program(small, [c_small]), build_program(full, [c_full])
    rng = np.random.default_rng(8)
    y = rng.normal(size=prog_s.A.shape[0])
    r = prog_s.rows
    duals = Duals(
        rows=y[r["rows"]],
        B=y[r["B"]] if "B" in r else np.zeros(0),
        N=y[r["N"]] if "N" in r else np.zeros(0),
        inv=y[r["inv"]] if "inv" in r else None,
        cols=np.zeros(prog_s.n_x),
        named={name: y[sl] for name, sl in r.items()},
    )
    prices = c_small.prices(duals)
    if prices is None:  # an entry outside the support brings rows of its own
        assert prog_f.A.shape[0] > prog_s.A.shape[0]
        return
    assert isinstance(prices, Prices)
    assert prog_f.rows == prog_s.rows  # the same rows, over more columns
    out = np.ones((K, K), dtype=bool)
    out[small.rows, small.cols] = False
    m, k = np.nonzero(out)
    cols = np.searchsorted(full.rows * K + full.cols, m * K + k)
    own = np.zeros(prog_f.A.shape[0])
    own[r["rows"].stop :] = y[
        r["rows"].stop :
    ]  # the row sums are the pricer's, not the constraint's
    want = -(prog_f.A[:, cols].T @ own)
    got = np.zeros(m.size)
    if prices.per_column is not None:
        got -= counts[m] * np.asarray(prices.per_column)[k]
    if prices.per_pair is not None:
        got -= np.asarray(sp.csr_matrix(prices.per_pair)[m, k]).ravel()
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
