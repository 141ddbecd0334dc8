"""The linear steps' search over the hull of admitted points (refine_span)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from pramopt.optimize.strategies import refine_span
from pramopt.optimize.strategies.refine_span import Span, simplex_min


def _slsqp_min(fun, q, rng, starts=40):
    """The smallest value SLSQP finds over the simplex from random starts (an independent
    minimiser, to its tolerance)."""
    best = np.inf, None
    cons = [{"type": "eq", "fun": lambda lam: lam.sum() - 1.0}]
    for _ in range(starts):
        r = minimize(
            fun, rng.dirichlet(np.ones(q)), method="SLSQP", bounds=[(0, 1)] * q, constraints=cons
        )
        if r.success and r.fun < best[0]:
            best = float(r.fun), r.x
    return best


@pytest.mark.parametrize("definite", [True, False])
def test_simplex_min_is_the_global_minimum_of_the_quadratic(definite):
    rng = np.random.default_rng(3)
    for _ in range(30):
        q = int(rng.integers(2, 7))
        A = rng.normal(size=(q, q))
        H = A @ A.T if definite else 0.5 * (A + A.T)
        c = rng.normal(size=q)
        lam, val = simplex_min(c, H)
        assert lam.min() >= 0 and abs(lam.sum() - 1) < 1e-12
        assert val == pytest.approx(float(c @ lam + 0.5 * lam @ H @ lam), abs=1e-12)
        ref, _ = _slsqp_min(lambda lam, c=c, H=H: c @ lam + 0.5 * lam @ H @ lam, q, rng)
        assert val <= ref + 1e-8


class _Quadratic:
    """``f(x) = 1/2 x'Ax + b.x``: the secants and the value at the vertex are exact for it."""

    def __init__(self, n, rng):
        G = rng.normal(size=(n, n))
        self.A = G @ G.T / n + np.eye(n)
        self.b = rng.normal(size=n) * 3

    def __call__(self, x):
        return 0.5 * x @ self.A @ x + self.b @ x

    def grad(self, x):
        return self.A @ x + self.b

    def value(self, x):
        return float(self(x))


def test_search_finds_the_loss_minimum_over_the_hull_of_admitted_points():
    """On a quadratic loss the model on the steps' span is exact, so the search's point is the
    minimum of the loss over the hull of the iterates and vertices (found independently)."""
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(20):
        n = 12
        f = _Quadratic(n, rng)
        x = rng.normal(size=n)
        span = Span()
        hull = [x]
        # three accepted linear steps, each to a point between the iterate and a new vertex
        for _ in range(3):
            v = x + rng.normal(size=n)
            xn = x + rng.uniform(0.2, 0.8) * (v - x)
            span = span.after(x, xn, v, f.grad(x), f.grad(xn))
            hull += [v, xn]
            x = xn
        vertex = x + rng.normal(size=n)
        hull.append(vertex)
        g = f.grad(x)
        lin = float(g @ (x - vertex))
        out = span.search(x, f(x), g, vertex, f(vertex), lin, f, lambda z: z)
        V = np.column_stack(hull)
        ref, _ = _slsqp_min(lambda w, f=f, V=V: f(V @ w), V.shape[1], rng)
        if out is None:
            # only when the hull's minimum is on the segment from x to the vertex, which the
            # search along the step finds: the segment's minimum in closed form
            d = vertex - x
            t = np.clip(lin / float(d @ f.A @ d), 0.0, 1.0)
            assert ref >= f(x + t * d) - 1e-6
            continue
        (xp, fp), pred = out
        found += 1
        assert fp == pytest.approx(f(xp))
        assert fp == pytest.approx(ref, rel=1e-6, abs=1e-8)
        assert pred == pytest.approx(f(x) - fp, rel=1e-6)  # the model is exact here
    assert found >= 10


def test_span_keeps_only_the_last_steps_and_forgets_a_step_without_upward_curvature(monkeypatch):
    monkeypatch.setattr(refine_span, "MEMORY_STEPS", 2)
    rng = np.random.default_rng(0)
    n = 5
    span = Span()
    x = np.zeros(n)
    for _ in range(4):
        xn = x + rng.normal(size=n)
        span = span.after(x, xn, xn, np.zeros(n), xn - x)  # y = s: curvature 1 along s
        x = xn
    assert len(span.steps) == len(span.secants) == 2 and len(span.points) == 4
    # a gradient that falls along the step: the secant says the loss curves downwards
    s = rng.normal(size=n)
    assert span.after(x, x + s, x + s, np.zeros(n), -s) == Span()


class _Counted(_Quadratic):
    def __init__(self, n, rng):
        super().__init__(n, rng)
        self.valued = 0

    def value(self, x):
        self.valued += 1
        return super().value(x)


def _descent(f, x, rng):
    """A vertex whose step from ``x`` goes downhill: ``(vertex, lin)``."""
    g = f.grad(x)
    d = -np.sign(g) * rng.uniform(5.0, 10.0, size=x.size)  # past the minimum along it
    return x + d, float(g @ (x - (x + d)))


def test_bend_measures_the_curvature_along_a_step_of_a_quadratic():
    from pramopt.optimize.strategies.refine import _Bend

    rng = np.random.default_rng(3)
    f = _Quadratic(9, rng)
    x = rng.normal(size=9)
    vertex, lin = _descent(f, x, rng)
    d = vertex - x
    for a in (1.0, 0.3):
        bend = _Bend()
        bend.measure(f(x), f(x + a * d), lin, a, d)
        assert bend.kappa == pytest.approx(float(d @ f.A @ d) / float(d @ d), rel=1e-9)
    bend.measure(f(x), f(x) - 2 * lin, lin, 1.0, d)  # a point below the slope: no curvature
    assert bend.kappa is None


@pytest.mark.parametrize("wrong", [1.0, 0.25, 4.0])
def test_predicted_point_is_the_minimum_along_the_step_of_a_quadratic(wrong):
    """With the curvature along the step known, one valuation at the minimum of the loss along
    it (closed form); with a curvature 4 times off, a second one there, from the curvature the
    first measured (exact on a quadratic); the box's vertex is never valued."""
    from pramopt.optimize.strategies.refine import _Bend, _predicted

    rng = np.random.default_rng(5)
    for _ in range(10):
        f = _Counted(9, rng)
        x = rng.normal(size=9)
        vertex, lin = _descent(f, x, rng)
        d = vertex - x
        dHd = float(d @ f.A @ d)
        t = np.clip(lin / dHd, 0.05, 1.0)
        bend = _Bend(wrong * dHd / float(d @ d))
        out = _predicted(x, f(x), f.grad(x), vertex, lin, Span(), f, lambda z: z, bend)
        assert out is not None
        (xp, fp), pred = out
        assert 0.05 < t < 1.0
        # a quarter of the curvature: the first point at 4 t (or the vertex), where the loss
        # has come back up; four times it: at t / 4, where the loss falls by 7/4 of the
        # prediction: both outside the range, so the second point is at the minimum
        assert f.valued == (1 if wrong == 1.0 else 2)
        np.testing.assert_allclose(xp, x + t * d, rtol=1e-9, atol=1e-12)
        assert fp == pytest.approx(f(x) - 0.5 * t * lin, rel=1e-9)
        assert pred == pytest.approx(f(x) - fp, rel=1e-9)
        assert bend.kappa == pytest.approx(dHd / float(d @ d), rel=1e-9)
