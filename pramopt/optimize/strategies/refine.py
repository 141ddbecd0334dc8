"""The refinement: sequential linear programming with a trust region on the exact loss.

The linear stage minimises the loss's first-order term (expected changes); the exact loss is
not convex, so the refinement improves that design locally, staying feasible.  Its programs
are those of the linear stage with other costs and a box around the current point.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..support import clean

__all__ = ["refine", "RefineInfo"]


@dataclass
class RefineInfo:
    iterations: int
    accepted: int
    loss_start: float
    loss_end: float
    stop_reason: str
    seconds: float
    added_constraints: list
    grad_columns: object = None  # callable: cols -> K x len(cols) gradient of the loss
    duals: object = None     # Duals of the final subproblem (want_duals), to price with
    grad_scale: float = 1.0  # largest |gradient| on the support, the scale for pricing tolerances
    radius: float = 0.05     # trust-region radius at the end, to continue from
    history: tuple = ()      # loss after each iteration, to continue the stopping rule from


def refine(lp, x0, lo_base, hi_base, evaluate, *, check=None, rtol: float = 1e-4, max_iter: int = 100,
           radius: float = 0.05, window: int = 10, progress=None, history=(), clean_fn=None,
           want_duals: bool = False) -> tuple[np.ndarray, RefineInfo]:
    """Sequential linear programming with a trust region on the exact L2 loss.

    Each iteration solves ``min grad . x`` over the feasible set intersected with the box
    ``|x - x_k| <= radius``, then takes the minimiser of the quadratic through the loss at both
    ends and its slope at the start when that lies inside the step (one more evaluation).  A step
    is accepted when the actual decrease is at least 10% of the predicted one; the radius doubles
    after a very good step at the boundary and shrinks
    fourfold after a rejected step.  Iterates stay feasible.  Stops (the documented tolerance)
    when the predicted decrease falls below ``rtol * loss``, when the loss improved by less than
    ``rtol`` (relative) over the last ``window`` iterations -- the linear model zig-zags
    slowly near a curved optimum -- when the radius drops below 1e-9, or after ``max_iter``
    iterations.

    ``lp`` is a loaded program (:mod:`pramopt.optimize.backends`) and ``evaluate`` the
    objective's evaluator on its columns.  ``check(x)`` may return newly violated C1 rows of
    the full problem; the step is then rejected and the caller must rebuild the LP with them
    (stop reason ``"constraints"``).  With ``want_duals`` one more subproblem is solved at the
    final point, whose duals price transitions outside the support.
    """
    sup = lp.program.support
    loss = evaluate
    t0 = time.perf_counter()
    if clean_fn is None:
        def clean_fn(z):
            return clean(sup, z)
    x = np.asarray(x0, dtype=float)
    f, g, gcols = loss(x)
    f_start = f
    reason = "max_iter"
    accepted = 0
    it = 0
    history = list(history[:-1]) + [f]  # a continued run's last entry is this same point
    for it in range(1, max_iter + 1):
        if len(history) > window and history[-window - 1] - f <= rtol * abs(f):
            reason = "converged"
            break
        lo = np.maximum(lo_base, x - radius)
        hi = np.minimum(hi_base, x + radius)
        out = lp.solve(g, lo, hi)
        if out.x is None:
            reason = f"subproblem {out.status}"
            break
        xn = clean_fn(out.x)
        pred = float(g @ (x - xn))
        if not np.isfinite(f) or pred <= rtol * abs(f):
            reason = "converged"
            break
        fn, gn, gcn = loss(xn)
        # Curvature along the step: the quadratic through f(0) = f, f'(0) = -pred and
        # f(1) = fn.  The LP's step goes to a vertex of the box and overshoots a curved valley
        # (SLP's zig-zag); one more evaluation at the quadratic's minimiser takes the better point.
        curv = fn - f + pred if np.isfinite(fn) else np.inf
        if np.isfinite(f) and curv > 0 and pred / (2 * curv) < 0.9:
            a = max(pred / (2 * curv), 0.05)
            xa = clean_fn(x + a * (xn - x))
            fa, ga, gca = loss(xa)
            if np.isfinite(fa) and (not np.isfinite(fn) or fa < fn):
                xn, fn, gn, gcn, pred = xa, fa, ga, gca, a * pred
        rho = (f - fn) / pred if np.isfinite(fn) else -np.inf
        if rho >= 0.1:
            if check is not None:
                new = check(xn)
                if new:
                    return x, RefineInfo(it, accepted, f_start, f, "constraints", time.perf_counter() - t0, new,
                                         radius=radius, history=tuple(history))
            at_edge = np.max(np.abs(xn - x)) >= 0.99 * radius
            x, f, g, gcols = xn, fn, gn, gcn
            accepted += 1
            if rho > 0.75 and at_edge:
                radius = min(2 * radius, 1.0)
        else:
            radius /= 4
            if radius < 1e-9:
                reason = "radius"
                break
        history.append(f)
        if progress is not None:
            progress("refine", it, f, radius)
    duals = None
    if want_duals and g is not None:
        # one more subproblem at the final point: its duals price transitions outside the
        # support (column generation on the exact loss's gradient)
        out = lp.solve(g, np.maximum(lo_base, x - radius), np.minimum(hi_base, x + radius))
        if out.x is not None:
            duals = lp.duals()
    gscale = float(np.max(np.abs(g))) if g is not None and g.size else 1.0
    return x, RefineInfo(it, accepted, f_start, f, reason, time.perf_counter() - t0, [], gcols, duals,
                         gscale or 1.0, radius, tuple(history))