"""The refinement's curved model: the L2 loss's Hessian diagonal, the QP step, the iteration count."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import pramopt
from pramopt.example import EXAMPLE_QI
from pramopt.loss import l2_loss
from pramopt.optimize.backends.clarabel_qp import solve_qp
from pramopt.optimize.objectives.l2_curvature import l2_hessian_diagonal
from pramopt.optimize.strategies import general
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


def test_hessian_diagonal_matches_second_differences():
    P, counts = _sparse_design()
    rows, cols = np.nonzero(P)
    h = l2_hessian_diagonal(P, counts, rows, cols)
    eps = 1e-5
    for a in range(0, rows.size, 5):
        E = np.zeros_like(P)
        E[rows[a], cols[a]] = eps
        fd = (l2_loss(P + E, counts) - 2 * l2_loss(P, counts) + l2_loss(P - E, counts)) / eps**2
        assert fd == pytest.approx(h[a], rel=1e-3)
    # the sparse (Woodbury) path gives the same numbers as the dense inverse
    hs = l2_hessian_diagonal(sp.csr_matrix(P), counts, rows, cols)
    np.testing.assert_allclose(hs, h, rtol=1e-10, atol=1e-12 * np.abs(h).max())


def test_qp_step_is_feasible_and_minimises_the_model(example):
    # one refinement subproblem of the example's general design, solved as a QP
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
    prog, x, lo, hi, evaluate = seen["args"]
    f, g, _ = evaluate(x)
    B = np.full(x.size, 10 * np.abs(g).max())
    lo_r, hi_r = np.maximum(lo, x - 0.05), np.minimum(hi, x + 0.05)
    sc = np.abs(g).max()  # on the scale the refinement passes (largest |cost| about 1)
    out = solve_qp(prog, (g - B * x) / sc, B / sc, lo_r, hi_r)
    y = out.x
    assert y is not None
    assert np.all(y >= lo_r - 1e-8) and np.all(y <= hi_r + 1e-8)
    # the program's rows hold at the QP's point (the auxiliary columns at their best values)
    np.testing.assert_allclose(np.bincount(prog.support.rows, weights=y, minlength=prog.support.K), 1.0, atol=1e-7)
    # the model's value there is no worse than at the current point and at the LP's vertex
    model = lambda z: g @ (z - x) + 0.5 * (z - x) @ (B * (z - x))  # noqa: E731
    from pramopt.optimize.backends import chain
    lp = chain(prog, None).solve(g, lo_r, hi_r).x
    assert model(y) <= min(model(x), model(lp)) + 1e-9 * abs(f)


def _refine_stage(res):
    return next(s for s in res.stages if s.name == "refine")


@pytest.mark.parametrize("support", ["dense", "cover"])
def test_curved_refinement_beats_long_slp_in_few_iterations(example, monkeypatch, support):
    # the same design with the curved model off (linear steps only) and 300 iterations allowed
    new = pramopt.design(example, QI, alpha=0.1, structure="general", support=support)
    with monkeypatch.context() as m:
        m.setattr(general, "l2_curvature_on_support", lambda *a, **k: None)
        old = pramopt.design(example, QI, alpha=0.1, structure="general", support=support, max_iter=300)
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
    d = Pricer(less, cg.problem.groups, cg.counts, cg.load(less).program.block, out.duals, cg.problem.allowed,
               cg.mem).reduced_costs(np.array([k]), gcols(np.array([k])))[m, 0]
    assert d < 0  # priced as attractive
    eps = 1e-4
    v1, _, _ = step(less.union([m], [k]), hi_j=eps)
    assert (v1 - v0) / eps == pytest.approx(d, rel=0.05)
