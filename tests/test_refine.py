"""The refinement's curved model: the L2 loss's Hessian diagonal, the QP step, the iteration count."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import pramopt
from benchmarks.refine_models import column_blocks, l2_column_curvature_on_support
from pramopt.example import EXAMPLE_QI
from pramopt.loss import l2_loss
from pramopt.optimize.backends import chain
from pramopt.optimize.backends.clarabel_qp import solve_qp
from pramopt.optimize.objectives.l2 import l2_loss_and_grad
from pramopt.optimize.objectives.l2_curvature import l2_hessian_diagonal
from pramopt.optimize.strategies import general
from pramopt.optimize.support import Support
from pramopt.verify import c1_risk

QI = list(EXAMPLE_QI)


def _sparse_design(K=30, seed=1):
    """A diagonal-dominant matrix whose off-diagonal entries lie in three receiver columns."""
    rng = np.random.default_rng(seed)
    P = np.eye(K) * 0.9
    for i in range(K):
        for j in (3, 7, 11):
            if i != j and rng.random() < 0.5:
                P[i, j] = 0.05 * rng.random()
    P /= P.sum(axis=1, keepdims=True)
    return P, rng.integers(1, 50, K).astype(float)


def test_hessian_diagonal_matches_second_differences(monkeypatch):
    P, counts = _sparse_design()
    rows, cols = np.nonzero(P)
    h = l2_hessian_diagonal(P, counts, rows, cols)
    eps = 1e-5
    for a in range(0, rows.size, 5):
        E = np.zeros_like(P)
        E[rows[a], cols[a]] = eps
        fd = (l2_loss(P + E, counts) - 2 * l2_loss(P, counts) + l2_loss(P - E, counts)) / eps**2
        assert fd == pytest.approx(h[a], rel=1e-3)
    # the sparse (Woodbury) path gives the same numbers as the dense inverse, with the receivers'
    # block dense or sparse
    import pramopt.optimize.objectives.l2_sparse as L2S

    hs = l2_hessian_diagonal(sp.csr_matrix(P), counts, rows, cols)
    np.testing.assert_allclose(hs, h, rtol=1e-10, atol=1e-12 * np.abs(h).max())
    monkeypatch.setattr(L2S, "SPARSE_RECEIVERS", -1)
    monkeypatch.setattr(L2S, "SPARSE_DENSITY", np.inf)
    hs = l2_hessian_diagonal(sp.csr_matrix(P), counts, rows, cols)
    np.testing.assert_allclose(hs, h, rtol=1e-10, atol=1e-12 * np.abs(h).max())


def test_column_blocks_match_central_differences_of_the_gradient():
    # the study's column model (benchmarks/refine_models.py), every pair of entries in one column
    # of P: the block against central differences of the analytic gradient (itself checked against
    # the loss elsewhere), and its diagonal against l2_hessian_diagonal
    P, counts = _sparse_design()
    rows, cols = np.nonzero(P)
    sup = Support.from_pairs(rows, cols, P.shape[0])
    x = sup.from_matrix(P)
    h = 1e-6
    seen = 0
    for idx, Hj in column_blocks(sup, x, counts):
        for a in range(idx.size):
            E = np.zeros_like(P)
            E[sup.rows[idx[a]], sup.cols[idx[a]]] = h
            dg = (l2_loss_and_grad(P + E, counts)[1] - l2_loss_and_grad(P - E, counts)[1]) / (2 * h)
            fd = dg[sup.rows[idx], sup.cols[idx]]
            np.testing.assert_allclose(Hj[:, a], fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())
            seen += 1
        np.testing.assert_allclose(
            np.diag(Hj), l2_hessian_diagonal(P, counts, sup.rows[idx], sup.cols[idx]), rtol=1e-9
        )
    assert seen == sup.size
    # the model: symmetric, positive semidefinite, zero between columns, and the exact block
    # wherever that block is already positive definite above the floor
    B = l2_column_curvature_on_support(sup, counts)(x).toarray()
    np.testing.assert_allclose(B, B.T, atol=1e-12 * np.abs(B).max())
    assert np.linalg.eigvalsh(B).min() >= -1e-12 * np.abs(B).max()
    assert not B[sup.cols[:, None] != sup.cols[None, :]].any()
    exact = 0
    for idx, Hj in column_blocks(sup, x, counts):
        if np.linalg.eigvalsh(Hj).min() > 1e-3 * np.median(np.abs(np.diag(Hj))):
            np.testing.assert_allclose(
                B[np.ix_(idx, idx)], Hj, rtol=1e-8, atol=1e-12 * np.abs(Hj).max()
            )
            exact += 1
    assert exact > 0


def _first_subproblem(example):
    """The program, point, bounds and evaluator of the first refinement subproblem of the example's
    general design."""
    seen = {}
    real = general.refine

    def spy(lp, x0, lo, hi, evaluate, **kw):
        seen.setdefault("args", (lp.program, np.array(x0), lo, hi, evaluate))
        return real(lp, x0, lo, hi, evaluate, **kw)

    general.refine = spy
    try:
        pramopt.design(example, QI, alpha=0.1, structure="general")
    finally:
        general.refine = real
    return seen["args"]


def test_qp_step_is_feasible_and_minimises_the_model(example):
    # one refinement subproblem of the example's general design, solved as a QP
    prog, x, lo, hi, evaluate = _first_subproblem(example)
    f, g, _ = evaluate(x)
    B = np.full(x.size, 10 * np.abs(g).max())
    lo_r, hi_r = np.maximum(lo, x - 0.05), np.minimum(hi, x + 0.05)
    sc = np.abs(g).max()  # on the scale the refinement passes (largest |cost| about 1)
    out = solve_qp(prog, (g - B * x) / sc, B / sc, lo_r, hi_r)
    y = out.x
    assert y is not None
    assert np.all(y >= lo_r - 1e-8) and np.all(y <= hi_r + 1e-8)
    # the program's rows hold at the QP's point (the auxiliary columns at their best values)
    np.testing.assert_allclose(
        np.bincount(prog.support.rows, weights=y, minlength=prog.support.K), 1.0, atol=1e-7
    )
    # the model's value there is no worse than at the current point and at the LP's vertex
    model = lambda z: g @ (z - x) + 0.5 * (z - x) @ (B * (z - x))  # noqa: E731
    from pramopt.optimize.backends import chain

    lp = chain(prog, None).solve(g, lo_r, hi_r).x
    assert model(y) <= min(model(x), model(lp)) + 1e-9 * abs(f)


def test_qp_with_a_coupled_hessian_matches_cvxpy_and_its_kkt_conditions(example):
    # the curved model may couple entries (a symmetric sparse matrix instead of a diagonal): the
    # step must be the QP's optimum as cvxpy finds it from the program written out here (the
    # model is strictly convex in x, H >= 2 max|g| I, so its x is unique), and its reduced costs must
    # vanish strictly inside the box
    cp = pytest.importorskip("cvxpy")
    prog, x, lo, hi, evaluate = _first_subproblem(example)
    f, g, _ = evaluate(x)
    sc = np.abs(g).max()
    nx, n = prog.n_x, prog.n_cols
    rng = np.random.default_rng(0)
    # couplings between entries of one column of P: H = diag(b) + M' diag(a) M, positive semidefinite
    sup = prog.support
    e = np.flatnonzero(sup.rows != sup.cols)
    f_ = np.array([rng.choice(np.flatnonzero(sup.cols == sup.cols[i])) for i in e])
    ok = f_ != e
    e, f_ = e[ok], f_[ok]
    M = sp.csr_matrix(
        (
            np.concatenate([np.ones(e.size), -np.ones(e.size)]),
            (np.tile(np.arange(e.size), 2), np.concatenate([e, f_])),
        ),
        shape=(e.size, nx),
    )
    # (on the scale of the gradient, so that the model is well conditioned and its optimum sharp)
    H = (sc * (sp.diags(np.full(nx, 2.0)) + M.T @ sp.diags(rng.uniform(1, 20, e.size)) @ M)).tocsr()
    lo_r, hi_r = np.maximum(lo, x - 0.05), np.minimum(hi, x + 0.05)
    cost = (g - H @ x) / sc  # on the scale the refinement passes (largest |cost| about 1)
    out = solve_qp(prog, cost, H / sc, lo_r, hi_r)
    assert out.x is not None
    y = cp.Variable(n)
    c = prog.cost.astype(float).copy()
    c[:nx] = cost
    col_lo, col_hi = prog.col_lo.astype(float).copy(), prog.col_hi.astype(float).copy()
    col_lo[:nx], col_hi[:nx] = lo_r, hi_r
    A = sp.csr_matrix(prog.A)
    cons = [
        y >= np.where(np.isfinite(col_lo), col_lo, -1e9),
        y <= np.where(np.isfinite(col_hi), col_hi, 1e9),
    ]
    fin_lo, fin_hi = np.isfinite(prog.row_lo), np.isfinite(prog.row_hi)
    cons += [A[fin_lo] @ y >= prog.row_lo[fin_lo], A[fin_hi] @ y <= prog.row_hi[fin_hi]]
    ref = cp.Problem(cp.Minimize(c @ y + 0.5 * cp.quad_form(y[:nx], H / sc, assume_PSD=True)), cons)
    ref.solve(solver="CLARABEL")
    assert ref.status == "optimal"
    z, zr = out.x, y.value[:nx]

    def model(v):  # the auxiliary columns cost nothing in the refinement's programs
        return cost @ v + 0.5 * v @ (H @ v) / sc

    assert model(z) == pytest.approx(model(zr), rel=1e-7)
    # both solvers stop at a relative gap of 1e-8, which leaves the unique x up to about 1e-5
    np.testing.assert_allclose(z, zr, atol=1e-4)
    # reduced costs cost + H x - A'u on the scale of the call: zero strictly inside the box
    red = out.duals.cols
    # (an interior point's multiplier of a bound at distance s is about its gap / s: well inside)
    inside = (z > lo_r + 1e-3) & (z < hi_r - 1e-3)
    assert inside.any()
    np.testing.assert_allclose(red[inside], 0.0, atol=1e-6 * np.abs(red).max())


def _refine_stage(res):
    return next(s for s in res.stages if s.name == "refine")


@pytest.mark.parametrize("support", ["dense", "cover"])
def test_curved_refinement_beats_long_slp_in_few_iterations(example, monkeypatch, support):
    # the same design with the curved model off (linear steps only) and 300 iterations allowed
    new = pramopt.design(example, QI, alpha=0.1, structure="general", support=support)
    with monkeypatch.context() as m:
        m.setattr(general, "REFINE_QP_MAX", -1)  # no support is small enough for curved steps
        old = pramopt.design(
            example, QI, alpha=0.1, structure="general", support=support, max_iter=300
        )
    assert old.success and new.success
    assert _refine_stage(new).iterations <= 20
    assert new.loss <= old.loss * (1 + 1e-3)
    # the refined design is feasible: C1 recomputed by the independent verifier
    P = new.to_dense()
    assert c1_risk(P, new.table.codes, new.counts, pramopt.resolve_combinations(QI)).max_risk <= 0.1


def test_qp_multipliers_price_a_transition_as_the_derivative_of_the_step(example, monkeypatch):
    # The refinement prices transitions outside its support with the multipliers of its QP
    # step.  Independent check: re-solve the step's QP with the priced transition added,
    # bounded by 0 <= x_j <= eps; the optimal model value must change at the rate its reduced
    # cost says (first-order sensitivity of the optimal value).  The transition: one that the
    # step on the full support starts using, left out of the support first.
    from pramopt.optimize.pricing import Pricer
    from pramopt.optimize.support import Support

    seen = {}
    real_refine, real_load = general.refine, general.ColumnGeneration.load

    def spy(lp, x0, lo, hi, evaluate, **kw):
        seen.setdefault("args", (lp.program, np.array(x0), lo, hi, evaluate))
        return real_refine(lp, x0, lo, hi, evaluate, **kw)

    def load(self, sup, **kw):
        seen["cg"] = self
        return real_load(self, sup, **kw)

    monkeypatch.setattr(general, "refine", spy)
    monkeypatch.setattr(general.ColumnGeneration, "load", load)
    pramopt.design(example, QI, alpha=0.1, structure="general", support="cover")
    prog, x, lo, hi, evaluate = seen["args"]
    cg = seen["cg"]
    sup, K = prog.support, prog.support.K
    f, g, gcols = evaluate(x)
    sc = np.abs(g).max()

    def step(s, hi_j=None):
        """The QP step on support s from x (box 0.05, Hessian max|g|): (value, solution, x)."""
        xs = s.from_matrix(sup.to_matrix(x))
        gs = s.from_matrix(sup.to_matrix(g))
        Bs = np.full(s.size, sc)
        lo_s, hi_s = cg.bounds(s)
        lo_s, hi_s = np.maximum(lo_s, xs - 0.05), np.minimum(hi_s, xs + 0.05)
        if hi_j is not None:
            hi_s[(s.rows == m) & (s.cols == k)] = hi_j
        out = solve_qp(cg.load(s).program, (gs - Bs * xs) / sc, Bs / sc, lo_s, hi_s, scale=sc)
        assert out.x is not None and out.duals is not None
        d = out.x - xs
        return gs @ d + 0.5 * d @ (Bs * d), out, xs

    _, full, xs = step(sup)
    used = np.flatnonzero((xs == 0) & (full.x > 1e-4) & (sup.rows != sup.cols))
    assert used.size  # the step moves records into a transition not used before
    j = used[np.argmax(full.x[used])]
    m, k = int(sup.rows[j]), int(sup.cols[j])
    assert gcols(np.array([k]))[m, 0] == pytest.approx(g[j], rel=1e-9)  # the gradient pricing uses
    less = Support.from_pairs(np.delete(sup.rows, j), np.delete(sup.cols, j), K)
    v0, out, _ = step(less)
    d = Pricer(
        less, cg.counts, cg.load(less).program.constraints, out.duals, cg.problem.allowed
    ).reduced_costs(np.array([k]), gcols(np.array([k])))[m, 0]
    assert d < 0  # priced as attractive
    eps = 1e-4
    v1, _, _ = step(less.union([m], [k]), hi_j=eps)
    assert (v1 - v0) / eps == pytest.approx(d, rel=0.05)


def _dense_bfgs(B0, pairs):
    """The BFGS update of diag(B0) by ``pairs`` (oldest first), as a dense matrix (textbook form)."""
    B = np.diag(B0)
    for s, y in pairs:
        Bs = B @ s
        B = B - np.outer(Bs, Bs) / (s @ Bs) + np.outer(y, y) / (y @ s)
    return B


@pytest.mark.slow  # about 65 s: the explicit reference QP has a dense Hessian over every entry
def test_qp_with_curvature_pairs_solves_the_bfgs_model(example):
    # The curved model's curvature pairs are held in the QP by auxiliary columns (a projection and
    # a rank-one term per pair).  Independent check: the same QP with the dense BFGS matrix,
    # built by the textbook update, given as an explicit coupled Hessian (a path checked against
    # cvxpy above); the two optima and their model values must agree.
    from pramopt.optimize.strategies.refine import _bfgs_times

    prog, x, lo, hi, evaluate = _first_subproblem(example)
    f, g, _ = evaluate(x)
    sc = np.abs(g).max()
    nx = prog.n_x
    rng = np.random.default_rng(3)
    B0 = sc * rng.uniform(1.0, 3.0, nx)
    # pairs from a positive definite "true" Hessian that couples entries: y = Htrue s
    M = sp.random(nx, nx, density=2.0 / nx, random_state=4)
    Htrue = (sc * (sp.diags(rng.uniform(1.0, 2.0, nx)) + 5 * M.T @ M)).tocsr()
    pairs = [(s, Htrue @ s) for s in rng.standard_normal((3, nx)) * 0.01]
    Bm = _dense_bfgs(B0, pairs)
    # _bfgs_times (the model's curvature in the refinement's predicted decrease) is that matrix
    v = rng.standard_normal(nx)
    np.testing.assert_allclose(
        _bfgs_times(B0, pairs, v), Bm @ v, rtol=1e-9, atol=1e-9 * np.abs(Bm @ v).max()
    )
    np.testing.assert_allclose(
        Bm @ pairs[-1][0], pairs[-1][1], rtol=1e-8, atol=1e-10 * sc
    )  # secant
    lo_r, hi_r = np.maximum(lo, x - 0.05), np.minimum(hi, x + 0.05)
    lifted = solve_qp(prog, (g - B0 * x) / sc, B0 / sc, lo_r, hi_r, scale=sc, pairs=pairs, center=x)
    explicit = solve_qp(prog, (g - Bm @ x) / sc, sp.csr_matrix(Bm / sc), lo_r, hi_r, scale=sc)
    assert lifted.x is not None and explicit.x is not None

    def model(z):
        d = z - x
        return g @ d + 0.5 * d @ (Bm @ d)

    assert model(lifted.x) == pytest.approx(model(explicit.x), rel=1e-5)
    assert model(lifted.x) < model(x)
    np.testing.assert_allclose(lifted.x, explicit.x, atol=1e-4)
    # the multipliers price as the explicit model's: reduced costs agree
    np.testing.assert_allclose(
        lifted.duals.cols, explicit.duals.cols, atol=1e-5 * np.abs(explicit.duals.cols).max()
    )


def test_curvature_pairs_are_the_hessian_times_the_step():
    # _pairs takes the loss's Hessian times a step by a difference of gradients: against the exact
    # Hessian within one column of P (benchmarks/refine_models.column_blocks, itself checked against
    # central differences above), for a step inside one column
    from pramopt.optimize.objectives.l2 import L2Loss
    from pramopt.optimize.strategies.refine import _pairs

    P, counts = _sparse_design()
    rows, cols = np.nonzero(P)
    sup = Support.from_pairs(rows, cols, P.shape[0])
    x = sup.from_matrix(P)
    loss = L2Loss().on_support(sup, counts, sparse=False)
    f, g, _ = loss(x)
    rng = np.random.default_rng(5)
    checked = 0
    for idx, Hj in column_blocks(sup, x, counts):
        if idx.size < 3:
            continue
        s = np.zeros(sup.size)
        s[idx] = rng.standard_normal(idx.size) * 0.01
        out = _pairs(sup, [sup.to_matrix(s)], x, g, loss)
        if float(s[idx] @ Hj @ s[idx]) <= 0:
            continue
        assert len(out) == 1
        sp_, y = out[0]
        np.testing.assert_allclose(sp_, s)
        np.testing.assert_allclose(
            y[idx], Hj @ s[idx], rtol=2e-3, atol=2e-3 * np.abs(Hj @ s[idx]).max()
        )
        checked += 1
    assert checked >= 2


def test_trial_points_are_valued_without_their_gradient(example):
    """The refinement values trial points with ``evaluate.value`` where the evaluator has it and
    asks for the gradient only at accepted points; its iterates are those of the evaluator alone."""
    prog, x0, lo, hi, evaluate = _first_subproblem(example)
    real = general.refine
    calls = {"whole": 0, "value": 0}

    def whole(x):
        calls["whole"] += 1
        return evaluate(x)

    def plain(x):
        return evaluate(x)

    def value(x):
        calls["value"] += 1
        return evaluate(x)[0]

    whole.value = value
    # linear steps: each step values the vertex of the box, often a point along it too; each run
    # on a freshly loaded program (a loaded one keeps its last basis)
    xa, ia = real(chain(prog, None), x0, lo, hi, plain, max_iter=12)
    xb, ib = real(chain(prog, None), x0, lo, hi, whole, max_iter=12)
    np.testing.assert_array_equal(xa, xb)
    assert (ia.iterations, ia.accepted, ia.loss_end) == (ib.iterations, ib.accepted, ib.loss_end)
    assert ib.accepted > 0
    # the start and every accepted point but one taken at the last iteration (the caller starts
    # again from there, and prices with the last subproblem's duals and gradient), nothing else
    last_taken = ib.iterations == 12 and ib.history[-1] < ib.history[-2]
    assert calls["whole"] == 1 + ib.accepted - last_taken
    assert calls["value"] > ib.accepted  # points valued and not taken


def test_qp_with_rows_left_out_at_first_is_the_whole_qp(example, monkeypatch):
    """Rows slack at the centre are left out of the first QP and added where its solution
    violates them: the solution is the QP's with every row (solved whole, independently)."""
    from pramopt.optimize.backends import clarabel_qp, qp_rows

    prog, x, lo, hi, _ = _first_subproblem(example)
    real = qp_rows.violated
    rounds: list = []

    def spy(program, kept, z, A):
        out = real(program, kept, z, A)
        rounds.append(out is not None)
        return out

    monkeypatch.setattr(clarabel_qp, "violated", spy)
    # a flat model with random costs and a wide box: steps that go far, through rows left out
    rng = np.random.default_rng(0)
    box = (np.maximum(lo, x - 0.5), np.minimum(hi, x + 0.5))
    flat = np.full(x.size, 1e-3)
    tried = 0
    while not (rounds and rounds[0]):
        assert tried < 20, "no cost whose first solution violates a row left out"
        tried += 1
        cost = rng.normal(size=x.size)
        rounds.clear()
        monkeypatch.setattr(qp_rows, "SLACK", 1e-9)  # every row with any slack left out at first
        first = qp_rows.first_rows(prog, x, sp.csr_matrix(prog.A))
        assert not first.whole and not first.cols.all()  # denominators left out with their rows
        lazy = solve_qp(prog, cost, flat, *box, center=x)
    assert len(rounds) >= 2 and not rounds[-1]  # rows added, then none violated
    monkeypatch.setattr(qp_rows, "SLACK", np.inf)  # every row from the start
    assert qp_rows.first_rows(prog, x, sp.csr_matrix(prog.A)).whole
    whole = solve_qp(prog, cost, flat, *box, center=x)
    assert lazy.objective == pytest.approx(whole.objective, rel=1e-7, abs=1e-9)
    np.testing.assert_allclose(lazy.x, whole.x, atol=1e-5)
    # the rows left out price nothing (slack at the solution), and with them at zero the
    # multipliers still make every entry strictly inside its box stationary: a KKT point of the
    # whole QP (its multipliers need not be the whole solve's, which may differ on a degenerate face)
    red, z = lazy.duals.cols, lazy.x
    inside = (z > box[0] + 1e-3) & (z < box[1] - 1e-3)
    assert inside.any()
    np.testing.assert_allclose(red[inside], 0.0, atol=1e-6 * np.abs(red).max())


def test_linear_steps_value_one_point_where_the_curvature_predicts_it(example, monkeypatch):
    """Linear steps try the point the curvature along the last step predicts before valuing
    their box's vertex: fewer valuations a step, and a loss as low as with the vertex valued
    every step (the design checked by the independent verifier)."""
    from pramopt.optimize.objectives import l2
    from pramopt.optimize.strategies import refine

    made = {"n": 0}

    class Counted(l2.SparseL2):
        def __init__(self, *a, **k):
            made["n"] += 1
            super().__init__(*a, **k)

    monkeypatch.setattr(l2, "SparseL2", Counted)
    monkeypatch.setattr(general, "REFINE_QP_MAX", -1)  # linear steps only
    runs = {}
    for predict in (False, True):
        monkeypatch.setattr(refine, "PREDICT", predict)
        made["n"] = 0
        res = pramopt.design(
            example, QI, alpha=0.1, structure="general", support="cover", max_iter=300
        )
        assert res.success, res.message
        runs[predict] = (res, made["n"], _refine_stage(res).iterations)
    (old, n_old, it_old), (new, n_new, it_new) = runs[False], runs[True]
    # (the counts include the designer's own valuations of the final design)
    assert n_old >= 1.8 * it_old  # the vertex and a point along the step or over the span
    assert n_new <= 1.65 * it_new
    assert n_new <= n_old
    assert new.loss <= old.loss * (1 + 1e-3)
    P = new.to_dense()
    assert c1_risk(P, new.table.codes, new.counts, pramopt.resolve_combinations(QI)).max_risk <= 0.1
