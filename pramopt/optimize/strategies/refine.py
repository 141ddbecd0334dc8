"""The refinement: a trust region on the exact loss, with a curved (QP) or a linear model.

The linear stage minimises the loss's first-order term (expected changes); the exact loss is
not convex, so the refinement improves that design locally, staying feasible.  Its programs
are those of the linear stage with other costs and a box around the current point.

With a ``curvature`` (the diagonal of the loss's Hessian, see
:mod:`pramopt.optimize.objectives.l2_curvature`) each step minimises the convex model
``g . d + 1/2 d' B d`` over that set (a QP, :mod:`pramopt.optimize.backends.clarabel_qp`);
without one, or once a QP fails, the step minimises ``g . d`` alone (sequential linear
programming).  The linear model moves to a vertex of the box and zig-zags across the curved
valleys of the loss (100 iterations on 340 rare-heavy cells); the curved model lands inside
the box where the loss's curvature says, and converges in a few steps (benchmarks/refine.py).

The diagonal misses most of the Hessian: where the diagonal model ends on 340 rare-heavy cells,
the change of the gradient along one more step is 12 times what the diagonal says and nearly
orthogonal to it (cosine 0.08), though both give the step about the same curvature
(benchmarks/refine_models.py), so its steps zig-zag.  The model therefore also carries the
curvature the loss shows along the last :data:`MEMORY` accepted curved steps (Hessian times step,
by a difference of gradients): the diagonal's BFGS update by those pairs, which the QP holds
exactly (:mod:`pramopt.optimize.backends.clarabel_qp`).

One iteration of :func:`refine` minimises a model of the loss over the feasible set intersected
with the box ``|x - x_k| <= radius``: ``g . d + 1/2 d' (sigma B) d`` with ``B = curvature(x_k, g)``
(a diagonal as a vector, or a symmetric positive semidefinite sparse matrix; a convex QP), or
``g . d`` alone (an LP) without a curvature or once a QP has failed.  A diagonal ``B`` is
updated (BFGS) by the loss's curvature along the last :data:`MEMORY` accepted curved steps,
this call's and the previous calls' (``steps``: sparse K x K matrices, or None to keep no
steps, as for a parametrised program; the result's ``steps`` continue them on another
support).
A linear step first searches the hull of the points its program has admitted since it was
loaded (iterates and LP vertices: :class:`.refine_span.Span`), on which a quadratic model
follows from the secants of the last steps, so that successive steps no longer undo each
other.  Otherwise, when the loss along the step curves more than the model said (one more
evaluation), the minimiser of the quadratic through the loss at both ends and its slope at the
start is taken if better, and ``sigma`` follows the ratio of the curvature met along the step
to the model's (the Hessian's diagonal leaves out the coupling of entries in one column).  Once the
loss's curvature along one linear step is known (per unit of the step's squared length), the
next linear step first tries the points that curvature predicts -- the hull's search, then the
quadratic's minimiser along the step -- and values its vertex only when neither decreases the
loss within :data:`PREDICTED_RHO` of the prediction, so that most steps value one point
(``kappa``: that curvature from an earlier call, as ``sigma`` continues the scale).  A step is
accepted when the actual decrease is at least 10% of the predicted one; the radius doubles
after a very good step at the boundary and shrinks fourfold after a rejected step.  Iterates
stay feasible.  Stops (the documented tolerance) when the predicted decrease falls below
``rtol * loss``, when the loss improved by less than ``rtol`` (relative) over the last
``window`` iterations, when the radius drops below 1e-9, or after ``max_iter`` iterations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import scipy.sparse as sp

from ..backends import solve_qp
from ..support import clean
from .refine_span import Span

__all__ = ["refine", "RefineInfo"]

#: Linear steps value their box's vertex only where the curvature measured along the last
#: step does not predict an accepted point (:func:`_predicted`).
PREDICT = True
#: Bounds of the factor the curvature model is scaled by (see :func:`refine`).
SIGMA_RANGE = (0.1, 1e4)
#: Accepted steps whose curvature the QP model carries (BFGS pairs, see the module).
MEMORY = 3
#: Length of the difference of gradients that gives the Hessian times a step: the step scaled to
#: move no entry by more than this.
PAIR_STEP = 1e-3


@dataclass
class RefineInfo:
    iterations: int
    accepted: int
    loss_start: float
    loss_end: float
    stop_reason: str
    seconds: float
    added_constraints: list
    grad_columns: object = (
        None  # callable: cols -> K x len(cols) gradient of the loss (at the duals' point)
    )
    duals: object = None  # Duals of the last subproblem (want_duals), to price with
    grad_scale: float = 1.0  # largest |gradient| on the support, the scale for pricing tolerances
    radius: float = 0.05  # trust-region radius at the end, to continue from
    history: tuple = ()  # loss after each iteration, to continue the stopping rule from
    sigma: float = 1.0  # scale of the curvature model at the end, to continue from
    model: str = "linear"  # the model of the last step: "quadratic" or "linear"
    # the last accepted steps (sparse K x K), to continue the curvature pairs from
    steps: tuple = ()
    # the curvature along the last measured linear step, per unit of its squared length
    kappa: float | None = None


def refine(
    lp,
    x0,
    lo_base,
    hi_base,
    evaluate,
    *,
    check=None,
    rtol: float = 1e-4,
    max_iter: int = 100,
    radius: float = 0.05,
    window: int = 10,
    progress=None,
    history=(),
    clean_fn=None,
    want_duals: bool = False,
    curvature=None,
    sigma: float = 1.0,
    steps=None,
    kappa: float | None = None,
) -> tuple[np.ndarray, RefineInfo]:
    """Trust-region steps on the exact L2 loss, with a curved model when ``curvature`` is given.

    The iteration is described in the module's docstring.

    ``lp`` is a loaded program (:mod:`pramopt.optimize.backends`) and ``evaluate`` the
    objective's evaluator on its columns.  ``check(x)`` may return newly violated C1 rows of
    the full problem; the step is then rejected and the caller must rebuild the LP with them
    (stop reason ``"constraints"``).  With ``want_duals`` the result carries duals that price
    transitions outside the support, with the gradient they go with (``grad_columns``): the
    multipliers of the last QP and the gradient at the point it was solved from, or, when the
    steps were linear, those of one more linear subproblem at the final point.
    """
    sup = lp.program.support
    loss = _Remembered(evaluate)
    t0 = time.perf_counter()
    if clean_fn is None:
        clean_fn = partial(clean, sup)
    x = np.asarray(x0, dtype=float)
    f, g, gcols = loss(x)
    f_start = f
    reason = "max_iter"
    accepted = it = 0
    B = None  # curvature at x, computed when a step needs it
    model = "linear"
    step_duals = step_gcols = None  # of the last QP step
    lp_gcols = None  # the gradient the last subproblem's LP was solved with, if it was an LP
    history = list(history[:-1]) + [f]  # a continued run's last entry is this same point
    keep = steps is not None and MEMORY > 0  # remember accepted steps (x on the support, not z)
    steps = list(steps)[-MEMORY:] if keep else []
    pairs: list = []
    span = Span()  # the last accepted linear steps, to search their admitted points' hull
    bend = _Bend(kappa) if PREDICT else None  # the curvature along the last linear step

    def info(reason, new=(), gc=None, duals=None, gscale=1.0):
        # RefineInfo's fields, in order
        run = (it, accepted, f_start, f, reason, time.perf_counter() - t0, list(new), gc, duals)
        k = None if bend is None else bend.kappa
        return RefineInfo(*run, gscale, radius, tuple(history), sigma, model, tuple(steps), k)

    for it in range(1, max_iter + 1):
        if len(history) > window and history[-window - 1] - f <= rtol * abs(f):
            reason = "converged"
            break
        lo = np.maximum(lo_base, x - radius)
        hi = np.minimum(hi_base, x + radius)
        out, Bs, B, pairs, curvature = _subproblem(
            lp, x, f, g, lo, hi, curvature, B, pairs, sigma, sup, steps, loss
        )
        # the step's multipliers, with the gradient they go with (see want_duals)
        if Bs is not None:
            step_duals, step_gcols = out.duals, gcols
        lp_gcols = gcols if Bs is None and out.x is not None else None
        if out.x is None:
            reason = f"subproblem {out.status}"
            break
        model = "linear" if Bs is None else "quadratic"
        trial = _trial(x, f, g, out.x, Bs, pairs, rtol, sigma, loss, clean_fn, span, bend)
        if trial is None:
            reason = "converged"
            break
        (xn, fn), d, rho, sigma, vertex = trial
        if rho >= 0.1:
            if check is not None:
                new = check(xn)
                if new:
                    return x, info("constraints", new)
            steps, radius = _remember(steps, d, sup, keep and Bs is not None, rho, radius)
            accepted += 1
            B = None
            if it == max_iter and (lp_gcols is not None or step_duals is not None):
                # the last step: the caller starts again from the point, and prices with the last
                # subproblem's multipliers and gradient, so the point's own gradient is not needed
                x, f = xn, fn
            else:
                # the gradient only where a step is accepted (the evaluator keeps the point's
                # design); the last point's gradient block is let go first (memory: each holds
                # dense r x a blocks at census scale), the next subproblem's gradient replaces it
                gcols = lp_gcols = None
                fn, gn, gcn = loss(xn)
                span = span.after(x, xn, vertex, g, gn) if Bs is None else Span()
                x, f, g, gcols = xn, fn, gn, gcn
        else:
            radius /= 4
            if radius < 1e-9:
                reason = "radius"
                break
        history.append(f)
        if progress is not None:
            progress("refine", it, f, radius)
    duals, gcols = (
        _final_duals(lp, x, g, gcols, step_duals, step_gcols, lo_base, hi_base, radius, lp_gcols)
        if want_duals
        else (None, gcols)
    )
    gscale = float(np.max(np.abs(g))) if g is not None and g.size else 1.0
    return x, info(reason, gc=gcols, duals=duals, gscale=gscale or 1.0)


def _remember(steps, d, sup, curved: bool, rho: float, radius: float):
    """After an accepted step ``d``: the steps kept for the curvature pairs, and the radius
    (doubled when the step went to its edge and the model predicted it well)."""
    at_edge = np.max(np.abs(d)) >= 0.99 * radius
    if curved:  # the curved steps (the linear ones go to a vertex of the box)
        steps = (steps + [sup.to_matrix(d)])[-MEMORY:]
    if rho > 0.75 and at_edge:
        radius = min(2 * radius, 1.0)
    return steps, radius


def _subproblem(lp, x, f, g, lo, hi, curvature, B, pairs, sigma, sup, steps, loss):
    """The step's subproblem: the QP of the curved model while there is one, else the LP.

    Returns ``(out, Bs, B, pairs, curvature)``: ``Bs`` (the scaled curvature) is None unless
    the QP solved; a failed QP drops the curved model for the rest of the run.
    """
    out, Bs = None, None
    if curvature is not None and np.isfinite(f):
        if B is None:
            B, pairs = _curvature_at(curvature, sup, steps, x, g, loss)
        Bs = sigma * B
        out = _qp_step(lp, x, g, Bs, lo, hi, pairs)
        if out.x is None:  # the linear model from here on (the QP is only an accelerator)
            curvature, Bs, pairs = None, None, []
    if out is None or out.x is None:
        out = lp.solve(g, lo, hi)
    return out, Bs, B, pairs, curvature


def _trial(x, f, g, x_sub, Bs, pairs, rtol, sigma, loss, clean_fn, span=None, bend=None):
    """The trial point from the subproblem's ``x_sub``: ``((xn, fn), d, rho, sigma, vertex)``
    (``vertex``: the subproblem's point, cleaned), or None when the model predicts a decrease
    of at most ``rtol`` (converged).  A linear step searches ``span`` first (:class:`Span`);
    with a ``bend`` that knows the loss's curvature it first tries the points that curvature
    predicts (:func:`_predicted`), valuing the vertex only when they fail."""
    xn = clean_fn(x_sub)
    d = xn - x
    lin = float(g @ (x - xn))  # first-order decrease
    quad = 0.0 if Bs is None else 0.5 * float(d @ _bfgs_times(Bs, pairs, d))
    pred = lin - quad
    if not np.isfinite(f) or pred <= rtol * abs(f):
        return None
    if Bs is None and bend is not None and bend.kappa is not None:
        got = _predicted(x, f, g, xn, lin, span, loss, clean_fn, bend)
        if got is not None:
            (xp, fp), pr = got
            return (xp, fp), xp - x, (f - fp) / pr, sigma, xn
    fn = loss.value(xn)
    if bend is not None:
        bend.measure(f, fn, lin, 1.0, d)
    if Bs is None and span is not None:
        found = span.search(x, f, g, xn, fn, lin, loss, clean_fn)
        if found is not None:
            (xp, fp), pred = found
            return (xp, fp), xp - x, (f - fp) / pred, sigma, xn
    vertex = xn
    (xn, fn), pred, sigma = _along_step(
        x, f, xn, fn, lin, quad, Bs is not None, sigma, loss, clean_fn
    )
    d = xn - x
    rho = (f - fn) / pred if np.isfinite(fn) else -np.inf
    return (xn, fn), d, rho, sigma, vertex


class _Bend:
    """The loss's curvature along the last linear step it was measured on, per unit of the
    step's squared length (``kappa``; None: not known yet)."""

    def __init__(self, kappa: float | None = None):
        self.kappa = kappa

    def measure(self, f, fa, lin, a, d) -> None:
        """From the loss ``fa`` at ``x + a d`` (``f`` at ``x``, ``lin`` its decrease to first
        order along ``d``): the quadratic's curvature through the two, if positive."""
        dd = float(d @ d)
        if np.isfinite(fa) and np.isfinite(f) and dd > 0:
            c = 2.0 * (fa - f + a * lin) / (a * a * dd)
            self.kappa = c if c > 0 else None


#: A point along the step that the curvature predicts is taken when its decrease is within this
#: range of the prediction's (at least 75% of the decrease the true curvature allows); the
#: hull's point when it is at least the range's lower end.
PREDICTED_RHO = (0.5, 1.5)


def _predicted(x, f, g, vertex, lin, span, loss, clean_fn, bend):
    """Points from the loss's curvature along the last measured step, without valuing the box's
    vertex: the search of ``span`` with that curvature along the new step, then the quadratic's
    minimiser along it.  Returns ``((x, f), predicted decrease)``, or None when neither point
    decreases the loss as predicted (the caller then values the vertex)."""
    d = vertex - x
    dd = float(d @ d)
    dHd = bend.kappa * dd
    if not (np.isfinite(dHd) and dHd > 0):
        return None
    lo, hi = PREDICTED_RHO
    if span is not None:
        fv = f - lin + 0.5 * dHd  # the model's loss at the vertex
        found = span.search(x, f, g, vertex, fv, lin, loss, clean_fn)
        if found is not None:
            (xp, fp), pr = found
            if pr > 0 and (f - fp) >= lo * pr:
                return (xp, fp), pr

    def length(curv) -> float:  # the quadratic's minimiser along the step, within the box
        return float(np.clip(lin / curv, 0.05, 1.0))

    def drop(t, curv) -> float:  # the quadratic's decrease at x + t d
        return t * lin - 0.5 * t * t * curv

    a = length(dHd)
    xa = clean_fn(x + a * d)
    fa = loss.value(xa)
    pr = drop(a, dHd)
    bend.measure(f, fa, lin, a, d)
    if not (np.isfinite(fa) and pr > 0):
        return None
    rho = (f - fa) / pr
    if lo <= rho <= hi:
        return (xa, fa), pr
    if bend.kappa is None:
        return None
    # the curvature just measured along this step: its quadratic's minimiser, if better
    c = bend.kappa * dd
    b = length(c)
    if abs(b - a) <= 1e-3 * a:
        return ((xa, fa), pr) if fa < f else None
    xb = clean_fn(x + b * d)
    fb = loss.value(xb)
    best = min(((fa, xa, drop(a, c)), (fb, xb, drop(b, c))), key=lambda t: t[0])
    if not (np.isfinite(best[0]) and best[0] < f and best[2] > 0):
        return None
    return (best[1], best[0]), best[2]


def _curvature_at(curvature, sup, steps, x, g, loss):
    """The curvature model at ``x``: ``B`` and the curvature pairs along the remembered steps
    (none for a sparse ``B``)."""
    B = curvature(x, g)
    B = B if sp.issparse(B) else np.asarray(B, dtype=float)
    return B, ([] if sp.issparse(B) else _pairs(sup, steps, x, g, loss))


def _qp_step(lp, x, g, Bs, lo, hi, pairs):
    """The curved model's step: the QP of ``g . d + 1/2 d' Bs d`` (BFGS-updated by ``pairs``)."""
    # costs on the scale of a largest |gradient| of 1, as the LP backends scale them
    sc = float(np.max(np.abs(g))) or 1.0
    return solve_qp(
        lp.program, (g - _times(Bs, x)) / sc, Bs / sc, lo, hi, scale=sc, pairs=pairs, center=x
    )


def _along_step(x, f, xn, fn, lin, quad, curved: bool, sigma: float, loss, clean_fn):
    """The point taken along the step from ``x`` to ``xn`` (where the loss is ``fn``), the
    decrease its model predicts and the curvature model's new scale.  Returns
    ``((x, f), predicted, sigma)``."""
    d = xn - x
    pred = lin - quad
    # Curvature along the step: the quadratic through f(0) = f, f'(0) = -lin and f(1) = fn.
    # Where the loss curves more than the model (the LP's step to a vertex of the box, or a
    # diagonal Hessian that misses couplings), one more evaluation at the quadratic's
    # minimiser takes the better point.
    curv = fn - f + lin if np.isfinite(fn) else np.inf
    if curved and quad > 0 and np.isfinite(curv) and curv > 0:
        sigma = float(np.clip(sigma * curv / quad, *SIGMA_RANGE))
    elif curved and not np.isfinite(curv):
        sigma = min(4 * sigma, SIGMA_RANGE[1])
    if np.isfinite(f) and curv > 0 and lin / (2 * curv) < 0.9:
        a = max(lin / (2 * curv), 0.05)
        xa = clean_fn(x + a * d)
        fa = loss.value(xa)
        if np.isfinite(fa) and (not np.isfinite(fn) or fa < fn):
            return (xa, fa), a * lin - a * a * quad, sigma
    return (xn, fn), pred, sigma


class _Remembered:
    """An evaluator ``x -> (loss, gradient, grad_columns)`` with ``value(x)``, the loss alone.

    Trial points are valued first and the gradient is asked for only at an accepted one.  An
    evaluator with its own ``value`` (the sparse L2 loss, which keeps the design it last valued,
    so the gradient then costs only its own part) is used as it is; for any other, the last
    whole evaluation is kept, so that the accepted point is not evaluated twice.
    """

    def __init__(self, evaluate):
        self._evaluate = evaluate
        self._own = getattr(evaluate, "value", None)
        self._last: tuple | None = None

    def __call__(self, x):
        if self._own is not None:
            return self._evaluate(x)
        last = self._last
        if last is not None and last[0].shape == np.shape(x) and np.array_equal(last[0], x):
            return last[1]
        out = self._evaluate(x)
        self._last = (np.array(x, dtype=float, copy=True), out)
        return out

    def value(self, x) -> float:
        return float(self._own(x)) if self._own is not None else float(self(x)[0])


def _final_duals(lp, x, g, gcols, step_duals, step_gcols, lo_base, hi_base, radius, lp_gcols):
    """Duals that price transitions outside the support, with the gradient they go with."""
    if step_duals is not None:
        # the last QP step's multipliers and the gradient at the point it was taken from: a
        # transition outside the support with a negative reduced cost would have made that
        # step's model decrease more (column generation for the curved subproblem, no extra solve)
        return step_duals, step_gcols
    if lp_gcols is not None:
        # likewise the last linear step's LP, still loaded, and the gradient it was solved with
        return lp.duals(), lp_gcols
    if g is not None:
        # one more linear subproblem at the final point: its duals price transitions outside
        # the support (column generation on the exact loss's gradient)
        out = lp.solve(g, np.maximum(lo_base, x - radius), np.minimum(hi_base, x + radius))
        if out.x is not None:
            return lp.duals(), gcols
    return None, gcols


def _pairs(sup, steps, x, g, loss) -> list:
    """Curvature pairs ``(s, H s)`` at ``x`` along the remembered steps, on the support ``sup``.

    A step is taken on this support (entries outside it dropped) and ``H s`` is the difference
    of the loss's gradient over a short move along it; a pair along which the loss does not
    curve upwards (``s . H s <= 0``, or not finite) is left out, since the BFGS update needs
    ``y . s > 0``.
    """
    out = []
    for S in steps:
        s = sup.from_matrix(S)
        top = float(np.max(np.abs(s))) if s.size else 0.0
        if top <= 0.0:
            continue
        eps = PAIR_STEP / top
        y = (loss(x + eps * s)[1] - g) / eps
        ys = float(y @ s)
        if np.all(np.isfinite(y)) and ys > 1e-12 * float(np.linalg.norm(y) * np.linalg.norm(s)):
            out.append((s, y))
    return out


def _bfgs_times(B0, pairs, v):
    """``B_m v`` for the BFGS update ``B_m`` of the diagonal ``B0`` by ``pairs``, oldest first."""
    if not pairs:
        return _times(B0, v)
    Bs = []  # B_(k-1) s_k
    for k, (s, _) in enumerate(pairs):
        Bs.append(_bfgs_apply(B0, pairs[:k], Bs, s))
    return _bfgs_apply(B0, pairs, Bs, v)


def _bfgs_apply(B0, pairs, Bs, v):
    out = _times(B0, v)
    for (s, y), b in zip(pairs, Bs):
        out = out - b * (b @ v) / (s @ b) + y * (y @ v) / (y @ s)
    return out


def _times(B, v):
    """``B v`` for a curvature given as its diagonal (a vector) or as a symmetric sparse matrix."""
    return B @ v if sp.issparse(B) else B * v
