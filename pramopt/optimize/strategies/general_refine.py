"""The refinement stage of the general design: trust-region steps on the exact loss.

From the linear stage's design on :class:`~.general.ColumnGeneration`'s support, curved (QP)
or linear (SLP) steps of :func:`.refine.refine` run in chunks; between chunks, unused
transitions are dropped and pricing with the exact loss's gradient widens the support.  The
tuning constants (``REFINE_*``) and the step function are read from :mod:`.general` at call
time: they are documented there, and that is where they are patched.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..objectives.l2 import SparseL2
from ..problem import Trace
from ..support import Support
from . import general as G

__all__ = ["refine_loss", "refine_pairs"]


def refine_loss(cg, x, trace: Trace, max_iter: int | None = None):
    """Trust-region steps on the exact loss from the linear stage's ``x`` (on ``cg.sup``).

    Curved (QP) steps with the L2 loss's Hessian diagonal; linear ones (SLP) for another
    objective or when a QP fails (see :func:`.refine.refine`).  ``cg`` is the
    :class:`~.general.ColumnGeneration` of the solve; ``max_iter``: the iterations left
    (default: the ``max_iter`` parameter); returns ``(x, iterations, info, stop)``.
    """
    problem = cg.problem
    p = problem.params
    budget = p.max_iter if max_iter is None else max_iter
    counts = cg.counts
    sup, x = _refine_support(cg, x)
    its = 0
    info = None
    lp = evaluate = None
    radius, hist, sigma, kappa = 0.05, (), 1.0, None
    # the last accepted steps: the curved model's curvature pairs, across pricing rounds
    steps = ()
    dropped = np.empty(0, dtype=np.int64)  # keys row * K + col dropped before
    idle = 0  # chunks in a row without an accepted step
    settled = False  # whether the last chunk ended with the model predicting < rtol
    curved = False  # whether a chunk has taken curved (QP) steps
    stop = None
    soft = False  # elastic programs, once a program without slacks has failed
    while its < budget:
        if lp is None:
            # large census-scale programs: each step's from scratch (REFINE_RESTART_MIN; below
            # 1/2 the rows outside their groups make the program many times its support)
            restart = sup.size > G.REFINE_RESTART_MIN or cg.below_half
            # every point the steps start from meets the imposed rows, so the steps' programs
            # need no slacks (at census scale most of their columns; a slack in a step's
            # solution would break an imposed row, and the steps' check looks only at the rows
            # the program lacks)
            lp = cg.load(sup, restart=cg.elastic and restart, elastic=soft)
        lo, hi = cg.bounds(sup)
        # the last support's evaluator: its last point is this support's first
        evaluate = problem.objective.on_support(
            sup, counts, sparse=cg.mode != "dense", previous=evaluate
        )
        # the curved model needs the objective's curvature (None: linear steps only)
        model = problem.objective.curvature_on_support(sup, counts, sparse=cg.mode != "dense")
        curvature = model if sup.size <= _qp_max(cg) else None
        chunk = _chunk_size(model, curvature)
        # in chunks, so that pricing can widen the support while the refinement runs
        x, info = G.refine(
            lp,
            x,
            lo,
            hi,
            evaluate,
            check=lambda z, s=sup: cg.pending(s, z),
            rtol=p.rtol,
            max_iter=min(chunk if cg.widen else budget, budget - its),
            progress=trace.progress,
            radius=radius,
            history=hist,
            want_duals=cg.widen,
            curvature=curvature,
            sigma=sigma,
            steps=steps,
            kappa=kappa,
        )
        its += info.iterations
        radius, hist, sigma, steps = info.radius, info.history, info.sigma, info.steps
        kappa = info.kappa
        _keep_last(evaluate, x)
        if info.stop_reason == "constraints":
            cg.ws.add(info.added_constraints)
            lp = None
            continue
        if info.stop_reason.startswith("subproblem"):
            if soft or not cg.elastic:
                break
            # (only by the solver's tolerances: the point meets the rows)
            soft, lp = True, None
            continue
        # priced columns that the trust region cannot turn into a decrease twice in a row
        # (REFINE_IDLE_STEPS one-step chunks): the model is exhausted there
        idle = idle + 1 if info.accepted == 0 else 0
        if idle >= (G.REFINE_IDLE_STEPS if chunk == 1 else 2):
            stop = "stalled (no accepted step after pricing)"
            break
        curved = curved or info.model == "quadratic"
        stop = _converged(info, its, curved, settled, p.rtol)
        if stop is None and cg.elastic and its > info.iterations:
            # census scale: a chunk costs a pricing round over every permitted transition
            gain = info.loss_start - info.loss_end
            if gain < G.REFINE_SCALE_GAIN * p.rtol * abs(info.loss_end):
                stop = f"converged (a chunk gained < {G.REFINE_SCALE_GAIN:g} rtol)"
        if stop is not None:
            break
        settled = info.stop_reason == "converged"
        r, cc, drop, keys = _reprice(cg, sup, x, lp, info, dropped, curvature is not None)
        # the chunk's pricing gradient (dense blocks at census scale) is not needed any more
        info.grad_columns = None
        if r.size or drop.sum() > sup.size // 10:
            sup, x, dropped = _widen(cg, sup, x, r, cc, drop, keys, dropped)
            lp = None
            hist = ()
            if chunk > 1:
                radius = max(radius, 0.0125)
        elif info.stop_reason != "max_iter":  # converged, or stalled with nothing to widen
            break
    cg.sup = sup
    return x, its, info, stop


def _keep_last(evaluate, x) -> None:
    """Of the designs ``evaluate`` holds (see ``on_support``'s ``previous``), only ``x``'s: the
    next support starts there, and each held design is a dense block at census scale."""
    keep = getattr(evaluate, "keep", None)
    if keep is not None:
        keep(x)


def _qp_max(cg) -> int:
    """The largest support on which the refinement's steps are curved: ``cg.qp_max`` when the
    solve sets one (a start of another structure, :mod:`.general_start`), else the module's."""
    own = getattr(cg, "qp_max", None)
    if own is not None:
        return int(own)
    return G.REFINE_QP_MAX_AT_SCALE if cg.elastic else G.REFINE_QP_MAX


def _chunk_size(model, curvature) -> int:
    """Iterations per chunk: one curved step, a few linear ones with a model, else more."""
    return (
        G.REFINE_QP_CHUNK
        if curvature is not None
        else G.REFINE_LINEAR_CHUNK
        if model is not None
        else G.REFINE_CHUNK
    )


def _converged(info, its: int, curved: bool, settled: bool, rtol: float) -> str | None:
    """The refinement's stop message when a chunk shows convergence, else None."""
    # once curved steps have run, a chunk after pricing (one curved step) that gains less
    # than REFINE_PRICING_GAIN * rtol ends the refinement: what pricing still finds is
    # worth less than the steps it costs
    if (
        curved
        and its > info.iterations
        and info.accepted
        and info.loss_start - info.loss_end < G.REFINE_PRICING_GAIN * rtol * abs(info.loss_end)
    ):
        return f"converged (a pricing round gained < {G.REFINE_PRICING_GAIN:g} rtol)"
    # a step whose model predicts less than rtol on a support that already holds what the
    # previous step's multipliers priced (that step's model predicted less than rtol too):
    # to the tolerance, neither the support nor its pricing round offers a decrease
    if info.stop_reason == "converged" and settled:
        return "converged (the model predicts < rtol on the priced support)"
    return None


def _widen(cg, sup: Support, x, r, cc, drop, keys, dropped):
    """The support after a pricing round (drops out, priced transitions in), ``x`` on it and
    the keys dropped so far."""
    base = sup
    if drop.any():
        dropped = np.union1d(dropped, keys[drop])
        base = Support.from_pairs(sup.rows[~drop], sup.cols[~drop], cg.problem.K)
    sup_new = base.union(r, cc) if r.size else base
    x = sup_new.from_matrix(sup.to_matrix(x))
    cg.added_cols += r.size
    return sup_new, x, dropped


def _refine_support(cg, x):
    """The refinement's support and the linear stage's ``x`` on it."""
    problem, K, sup = cg.problem, cg.problem.K, cg.sup
    if cg.widen:
        # Refine over every row x the cells that received records in the linear stage
        # (Section 4: a good P moves records into a few covering cells); pricing with the
        # exact loss's gradient adds whatever else would help.
        Px = sup.to_matrix(x).tocoo()
        off = (Px.row != Px.col) & (Px.data > 0)
        rr, cc = refine_pairs(Px, off, cg.counts, cg.allowed)
        small = Support.from_pairs(
            np.concatenate([rr, Px.row[off]]), np.concatenate([cc, Px.col[off]]), K
        )
        return small, small.from_matrix(sup.to_matrix(x))
    if cg.mode != "dense":
        # without pricing: every row x the receivers of the linear stage
        P_lin = sup.to_matrix(x).tolil()
        P_lin.setdiag(0)
        recv = np.flatnonzero(np.asarray(P_lin.tocsr().sum(axis=0)).ravel() > 0)
        new_sup = G.rows_into(problem, recv).union(*sup.to_matrix(x).nonzero())
        return new_sup, new_sup.from_matrix(sup.to_matrix(x))
    return sup, x


def _reprice(cg, sup: Support, x, lp, info, dropped, curved: bool):
    """After a chunk: the transitions to drop and those pricing adds.  Returns ``(rows, cols,
    drop, keys)`` (``keys``: row * K + col of the support, None without pricing)."""
    K, p = cg.problem.K, cg.problem.params
    r = np.empty(0)
    cc = keys = None
    drop = np.zeros(sup.size, dtype=bool)
    if cg.widen and info.duals is not None:
        tol = p.rtol * 1e-3 * info.grad_scale
        # drop unused transitions that the step's prices call unattractive, so that the
        # subproblems stay small (pricing brings them back if that changes).  Dropping
        # and pricing cannot cycle: a transition is dropped again only after a step that
        # lowered the loss, so no support recurs at the same point.
        keys = sup.rows * K + sup.cols
        drop = (
            (x <= 0.0)
            & (sup.rows != sup.cols)
            & (info.duals.cols > tol)
            & ((info.accepted > 0) | ~np.isin(keys, dropped))
        )
        # ... and price transitions outside the support with the exact loss's gradient,
        # after a curved step as many as keep the next one curved (linear steps on a
        # larger support price as many as before: their drops trim it)
        room = max(G.REFINE_MAX_ADD, 2 * K)
        if curved:
            room = min(room, _qp_max(cg) - (sup.size - int(drop.sum())))
        if room > 0:
            r, cc, _ = cg.price(lp, info.duals, cost_fn=info.grad_columns, tol=tol, max_add=room)
    return r, cc, drop, keys


def refine_pairs(Px: sp.coo_matrix, off: np.ndarray, counts: np.ndarray, allowed) -> tuple:
    """Candidate transitions for the refinement: movers x receivers of the linear stage.

    When every mover may go to every receiver within REFINE_SUPPORT_MAX entries, that is the
    support.  Otherwise (thousands of cells, almost all of them movers) each mover keeps the
    receivers where the exact loss's gradient G at the linear-stage design is smallest -- within
    a row, moving mass from the diagonal to column c changes the loss at rate G[m, c] - G[m, m] --
    and the pricing between refinement chunks adds whatever else would help.
    """
    K = Px.shape[0]
    recv = np.unique(Px.col[off])
    movers = np.unique(np.concatenate([Px.row[off], recv]))
    if movers.size * recv.size <= G.REFINE_SUPPORT_MAX:
        rr, cc = np.meshgrid(movers, recv, indexing="ij")
        rr, cc = rr.ravel(), cc.ravel()
        ok = allowed(rr, cc)
        return rr[ok], cc[ok]
    k = max(1, G.REFINE_SUPPORT_MAX // movers.size)
    s = SparseL2(sp.csr_matrix(Px), counts)
    if s.singular:  # cannot happen above the 0.51 floor; keep the linear stage's own pairs
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    step = max(1, 4_000_000 // K)  # gradient blocks of at most 4M entries (32 MB)
    best_val = np.full((movers.size, 0), np.inf)
    best_col = np.zeros((movers.size, 0), dtype=np.intp)
    for a in range(0, recv.size, step):
        cols = recv[a : a + step]
        grad = s.grad_columns(cols)[movers]
        rr, cc = np.meshgrid(movers, cols, indexing="ij")
        grad[~allowed(rr.ravel(), cc.ravel()).reshape(grad.shape)] = np.inf
        grad[rr == cc] = np.inf  # the diagonal is always in the support
        vals = np.concatenate([best_val, grad], axis=1)
        idx = np.concatenate([best_col, np.broadcast_to(cols, grad.shape)], axis=1)
        keep = np.argsort(vals, axis=1, kind="stable")[:, :k]
        best_val = np.take_along_axis(vals, keep, axis=1)
        best_col = np.take_along_axis(idx, keep, axis=1)
    ok = np.isfinite(best_val)
    out_r = np.broadcast_to(movers[:, None], best_val.shape)[ok]
    out_c = best_col[ok]
    return out_r, out_c
