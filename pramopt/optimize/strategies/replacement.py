"""Replacement designs built from the flow relaxation: seconds where the general design takes
minutes.

Within each pool of cells (the whole table, a stratum of the fixed variables, or a block),

    P = diag(1 - o) + o w^T,

every record of cell k is kept with probability 1 - o_k and otherwise replaced by a draw from
one replacement distribution w of the pool: Ikarashi et al.'s retention-replacement with a
retention probability per cell and a replacement distribution chosen for the data.  The flow
relaxation (:mod:`pramopt.optimize.relaxation`) chooses ``out_k = U0(k) o_k`` and
``in_k = w_k sum_l U0(l) o_l`` to maximise the smallest retention; this P reproduces those flows
exactly and misses C1 only by the terms o_m w(g) the relaxation leaves out, so it is solved at a
level below alpha that drops until the full C1 check passes.  The relaxation maximises the
smallest retention and never sees the loss: with ``w`` fixed, the retentions are then
re-optimised on the exact loss under the exact C1 (:mod:`.replacement_retentions`), and the result
replaces the relaxation's only when it passes the full check with a smaller loss.

The left-out terms are of the order of alpha itself where most records are alone in their cell
and n alpha is small (34 records in 32 cells at alpha = 0.05: o_m w(g) is about 1/n = 0.03), and
then no margin absorbs them.  When no margin gives a design, the strategy falls back on the
empirical replacement design, one retention theta for every movable record and each pool's own
distribution of records as w, whose C1 is linear in theta and rises with it: its largest theta
meeting C1 is a closed form (:func:`.replacement_form.empirical_retention`), and a theta below the
floor proves that no design of that form meets C1 there.

P is invertible whatever its retentions: by the matrix determinant lemma
det P = prod(1 - o) (1 + w^T diag(1 - o)^-1 o) > 0, and Sherman and Morrison's formula gives P^-1,
hence the exact L2 loss and the condition number, in O(K) (:func:`replacement_loss`).  The number
of stored entries is (senders x receivers) per pool; above ``REPLACEMENT_MAX_ENTRIES`` the cells
are split into blocks of neighbouring cells (:func:`~.blocks.make_blocks`) that are pools of their
own, and the relaxation is solved again with records conserved per block.
"""

from __future__ import annotations

import time

import numpy as np

from ...result import Reduction
from ...structured import ReplacementForm, form_or_none
from ..constraints.c1 import build_groups
from ..problem import DesignProblem, Trace
from ..relaxation import FlowSolution, flow_relaxation
from . import Attempt, AttemptStatus, beyond_distance
from .blocks import LAMBDA_MIN, make_blocks
from .checks import check
from .replacement_form import (
    empirical_distribution,
    empirical_retention,
    replacement_condition,
    replacement_loss,
    replacement_matrix,
)
from .replacement_retentions import optimise_retentions

__all__ = [
    "solve",
    "solve_replacement",
    "replacement_matrix",
    "replacement_loss",
    "replacement_condition",
    "REPLACEMENT_MAX_ENTRIES",
    "REPLACEMENT_MARGINS",
]

#: Largest number of stored entries (senders x receivers) of a replacement design before the cells
#: are split into blocks (about 300 MB as a sparse matrix).
REPLACEMENT_MAX_ENTRIES = 25_000_000
#: Above this many cells the relaxation is solved block by block (:func:`_local_relaxation`): the
#: whole program is then too large to solve in one piece.
LOCAL_RELAXATION_ABOVE = 12_000
#: Relative margins below alpha tried in turn for the relaxation (the left-out terms o_m w(g)).
REPLACEMENT_MARGINS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)


def _block_pools(problem: DesignProblem, cells: float) -> tuple[np.ndarray, float]:
    """Blocks of neighbouring cells of about ``cells`` cells each (within strata), as pools."""
    K, n = problem.K, problem.n
    target = max(2.0 / problem.alpha, cells * n / K)
    blocks = make_blocks(problem.table, target, keep_rows=problem.keep_rows, strata=problem.strata)
    out = np.empty(K, dtype=np.int64)
    for i, b in enumerate(blocks):
        out[b] = i
    return out, target


def _design_from(sol, pools, counts):
    """o and w of the replacement design that reproduces the relaxation's flows."""
    o = np.where(counts > 0, sol.out / counts, 0.0)
    o = np.clip(o, 0.0, 1.0 - sol.t)
    o[sol.out <= 1e-12 * counts] = 0.0
    w = np.where(sol.inflow > 1e-12 * max(1.0, sol.inflow.max(initial=0.0)), sol.inflow, 0.0)
    tot = np.bincount(pools, weights=w)[pools]
    o[tot <= 0] = 0.0  # a pool without receivers keeps its records
    w = np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 0.0)
    return o, w


def _entries(o, w, pools) -> int:
    s = np.bincount(pools, weights=(o > 0).astype(float))
    r = np.bincount(pools, weights=(w > 0).astype(float), minlength=s.size)
    return int(s @ r) + o.size


def _local_relaxation(problem: DesignProblem, alpha: float, pools: np.ndarray) -> FlowSolution:
    """The flow relaxation block by block: each pool with only its own records in C1's
    denominators.  Every released count is >= 0, so a denominator over one block is at most the
    whole one, and rows that hold block by block hold for the whole table (a stronger condition,
    so the design it gives is feasible for the whole relaxation; the full C1 check still decides).
    """
    K = problem.K
    out, inflow, t = np.zeros(K), np.zeros(K), 1.0
    table = problem.table
    for b in np.unique(pools):
        cells = np.flatnonzero(pools == b)
        sub = table.subset(cells)
        part = DesignProblem(
            table=sub,
            combos=problem.combos,
            params=problem.params,
            groups=build_groups(sub, problem.combos),
            fixed_idx=problem.fixed_idx,
            keep_rows=np.flatnonzero(problem.kept[cells]),
        )
        sol = flow_relaxation(part, alpha=alpha, pools=np.zeros(cells.size, dtype=np.int64))
        if sol.status != "ok":
            return sol
        assert sol.t is not None  # set with status "ok"
        out[cells], inflow[cells], t = sol.out, sol.inflow, min(t, sol.t)
    return FlowSolution("ok", t=t, out=out, inflow=inflow)


def solve(problem: DesignProblem, level: float, trace: Trace) -> Attempt:
    """The replacement design whose matrix met C1 at the working level ``level`` (failing that,
    at alpha), its retentions optimised on the loss; INFEASIBLE when there is none."""
    skipped = beyond_distance(problem, trace, "replacement", problem.strata)
    if skipped is not None:
        return skipped
    found = solve_replacement(problem, level, trace, lambda P: check(problem, trace, P))
    if found is not None:
        return found
    floor = max(LAMBDA_MIN, problem.params.min_diagonal or 0.0)
    return Attempt(
        AttemptStatus.INFEASIBLE,
        detail="No replacement design satisfied C1 (the flow "
        f"relaxation leaves no retention of at least {floor:g} at any margin tried, and the "
        "empirical replacement design meets C1 at no retention of at least that).",
    )


def solve_replacement(problem: DesignProblem, level: float, trace: Trace, verify) -> Attempt | None:
    """The replacement design, or None.

    ``verify(P)`` is the full C1 check the search keeps or drops its matrices by.
    """
    alpha = problem.alpha
    counts = problem.counts
    # every diagonal entry is at least the smallest retention: min_diagonal is honoured by it
    floor = max(LAMBDA_MIN, problem.params.min_diagonal or 0.0)
    pools, target = problem.strata, None
    local = problem.K > LOCAL_RELAXATION_ABOVE
    if local:
        pools, target = _block_pools(problem, max(1.0, REPLACEMENT_MAX_ENTRIES / problem.K))
    # the level the solvers work at (``margin``): the first relaxation margin whose design meets C1
    # there is taken; failing that, the first whose design meets C1 at alpha itself
    safe = None
    for margin in REPLACEMENT_MARGINS:
        while True:
            t0 = time.perf_counter()
            if local:
                sol = _local_relaxation(problem, alpha * (1.0 - margin), pools)
            else:
                sol = flow_relaxation(problem, alpha=alpha * (1.0 - margin), pools=pools, t_max=1.0)
            if sol.status != "ok" or sol.t is None or sol.t < floor:
                trace.add(
                    "replacement",
                    time.perf_counter() - t0,
                    0,
                    sol.status
                    if sol.status != "ok"
                    else f"largest retention {sol.t:.3g}: below {floor:g}",
                )
                break
            o, w = _design_from(sol, pools, counts)
            size = _entries(o, w, pools)
            if size <= REPLACEMENT_MAX_ENTRIES or target is not None:
                break
            # too many senders x receivers for one pool per stratum: blocks of neighbouring
            # cells, each its own pool, small enough for the cap
            trace.add(
                "replacement",
                time.perf_counter() - t0,
                0,
                f"{size} entries with one pool per stratum: too many, split into blocks",
            )
            pools, target = _block_pools(problem, max(1.0, REPLACEMENT_MAX_ENTRIES / problem.K))
        if sol.status != "ok" or sol.t is None or sol.t < floor:
            break  # a larger margin only lowers the relaxation's retention
        P = replacement_matrix(o, w, pools)
        trace.add(
            "replacement",
            time.perf_counter() - t0,
            0,
            f"solved at alpha*(1-{margin:g}){' block by block' if local else ''}; smallest "
            "retention "
            f"{sol.t:.4g}, {int(np.unique(pools).size)} pool(s), {P.nnz} entries",
        )
        rep = verify(P)
        if rep.max_risk <= level:
            return _finish(problem, trace, verify, floor, o, w, pools, P, rep, target)
        if rep.max_risk <= alpha and safe is None:
            safe = (o, w, pools, P, rep, target)
    if safe is not None:  # C1 holds, though not at the requested working level
        trace.add(
            "replacement",
            0.0,
            0,
            f"no relaxation margin met alpha*(1-{problem.params.margin:g}): kept the "
            "first design that meets alpha",
        )
        return _finish(problem, trace, verify, floor, *safe)
    # The relaxation leaves out C1's terms o_m w(g); where they are of the order of alpha itself
    # (few records, most alone in their cell) no margin absorbs them, yet a design may exist
    return _empirical(problem, level, trace, verify, floor)


def _empirical(
    problem: DesignProblem, level: float, trace: Trace, verify, floor: float
) -> Attempt | None:
    """The empirical replacement design (:func:`.replacement_form.empirical_retention`) at its
    largest retention meeting C1 at ``level``, as an Attempt; None when its retention falls below
    ``floor`` (then none of that design meets C1 at the floor) or its matrix fails ``verify``."""
    t0 = time.perf_counter()
    movable = ~problem.kept
    pools, target = problem.strata, None
    w = empirical_distribution(problem.counts, movable, pools)
    if problem.K > LOCAL_RELAXATION_ABOVE or _entries(movable * 1.0, w, pools) > (
        REPLACEMENT_MAX_ENTRIES
    ):
        pools, target = _block_pools(problem, max(1.0, REPLACEMENT_MAX_ENTRIES / problem.K))
        w = empirical_distribution(problem.counts, movable, pools)
    g = problem.groups
    # the closed form meets the level up to rounding: a hair inside it where the check says so
    for a in (level, level * (1.0 - 1e-9)):
        theta = empirical_retention(g.member, g.size, problem.counts, movable, pools, a)
        if theta is None or theta < floor:
            trace.add(
                "replacement",
                time.perf_counter() - t0,
                0,
                "empirical replacement: "
                + (
                    "no retention meets C1"
                    if theta is None
                    else f"largest retention meeting C1 {theta:.3g}, below {floor:g}"
                ),
            )
            return None
        # a pool whose movable records all lie in one cell keeps them: w = 1 there
        o = np.where(movable & (w < 1.0), 1.0 - theta, 0.0)
        P = replacement_matrix(o, w, pools)
        trace.add(
            "replacement",
            time.perf_counter() - t0,
            0,
            f"empirical replacement: retention {theta:.4g}, {int(np.unique(pools).size)} "
            f"pool(s), {P.nnz} entries",
        )
        rep = verify(P)
        if rep.max_risk <= problem.alpha:
            return _finish(problem, trace, verify, floor, o, w, pools, P, rep, target)
    return None


def _finish(problem, trace, verify, floor, o, w, pools, P, rep, target):
    """The design with its retentions optimised (``refine_loss``), as an Attempt."""
    f = replacement_loss(o, w, pools, problem.counts)
    if problem.params.refine_loss:
        o, P, rep, f = _retentions(problem, trace, verify, o, w, pools, P, rep, f, floor)
    cond = replacement_condition(o, w, pools)
    red = Reduction(
        structure="replacement",
        blocks=int(np.unique(pools).size),
        block_target_records=target,
        min_lambda=float(np.min(1.0 - o, initial=1.0)),
        support=int(P.nnz),
        # the design's parameters: saved, released and inverted instead of its K^2 entries
        form=form_or_none(ReplacementForm.from_replacement, o, w, pools),
    )
    describe = (
        f"A replacement design was made (each cell keeps its records with probability >= "
        f"{red.min_lambda:.3g} and otherwise draws from one replacement distribution per "
        f"{'stratum' if target is None else 'block'}; invertible for any retention)."
    )
    return Attempt(
        AttemptStatus.OK,
        P=P,
        reduction=red,
        solver="HIGHS(scipy, flow relaxation)",
        loss=f,
        condition=cond,
        describe=describe,
    )


#: Relative margins below alpha at which the retentions are optimised, in turn, until the full
#: check passes: from the requested ``margin`` on, never below it, and each only where the
#: relaxation's design already meets C1 at that level (so that the optimisation starts feasible).
RETENTION_MARGINS = (1e-5, 1e-4, 1e-3, 1e-2)
#: Linear programs the optimisation of the retentions may solve, over every margin tried (it keeps
#: its best point so far): a count rather than seconds, so that a design does not depend on the
#: machine's speed or load.  Small tables stop earlier, when a step gains less than STEP_RTOL.
RETENTION_MAX_SOLVES = 24


def _retentions(problem: DesignProblem, trace: Trace, verify, o, w, pools, P, rep, f, floor):
    """The retentions re-optimised against the exact C1 with ``w`` fixed (:mod:`.retention`), kept
    only when the matrix passes the full check ``verify`` and its objective is smaller; else the
    inputs.  Returns ``(o, P, report, loss)``."""
    alpha, counts = problem.alpha, problem.counts
    obj = problem.objective

    def score(P_, f_):  # the designer ranks by the whole objective
        return obj.value(P_, counts, loss=f_)

    base = score(P, f)
    # the requested margin first (the solver's working level, as for the other structures), then
    # the larger ones of RETENTION_MARGINS
    first = max(problem.params.margin, RETENTION_MARGINS[0])
    left = RETENTION_MAX_SOLVES  # one budget for every margin tried
    for m in [first, *(m for m in RETENTION_MARGINS if m > first)]:
        a = alpha * (1.0 - m)
        if rep.max_risk > a:
            continue  # the start does not meet C1 there
        if left <= 0:
            trace.add(
                "retentions",
                0.0,
                0,
                f"no linear programs left of {RETENTION_MAX_SOLVES}: kept the relaxation's",
            )
            break
        t0 = time.perf_counter()
        res = optimise_retentions(problem, o, w, pools, a, floor, max_solves=left)
        if res is None:
            trace.add(
                "retentions",
                time.perf_counter() - t0,
                0,
                "the retention program failed: kept the relaxation's",
            )
            break
        if (
            _entries(res.o, w, pools) > REPLACEMENT_MAX_ENTRIES
        ):  # cells that sent nothing may send now
            trace.add(
                "retentions",
                time.perf_counter() - t0,
                res.steps,
                "too many entries: kept the relaxation's",
            )
            break
        left -= res.solves
        Pn = replacement_matrix(res.o, w, pools)
        before = float(counts @ (o * (1.0 - w)))
        trace.add(
            "retentions",
            time.perf_counter() - t0,
            res.steps,
            f"at alpha*(1-{m:g}): {res.detail}; expected changes {before:.5g} -> "
            f"{res.changes:.5g}; "
            f"{res.solves} LP solves, {res.rows} of C1's rows imposed",
        )
        rn = verify(Pn)
        if rn.max_risk <= alpha:
            fn = replacement_loss(res.o, w, pools, counts)
            if score(Pn, fn) < base:
                return res.o, Pn, rn, fn
            break
    return o, P, rep, f
