"""What the designer says beyond the design: why none exists, and how far from optimal one can be.

The lower bounds of a successful design (:func:`optimality_bounds`): no design meeting C1
changes fewer records in expectation, and, where P^-1 has a diagonal >= 1, none has a smaller
loss (:mod:`.relaxation`).

The arguments given when no design exists, each independent of the solver that failed: the
counting argument within the strata of ``fixed`` (:func:`small_stratum`), the flow relaxation of
C1 with and without each option (:func:`forbidden`), and, under ``max_changed_variables``, the
records within reach of a group and the smallest restriction the relaxation allows
(:func:`distance_rules_out`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._labels import short_label, short_repr
from .._plain import plain
from ..errors import InvalidParameterError
from ..params import BELOW_HALF_FLOORS, GAMMA_LADDER, DesignParams
from ..result import DesignResult
from .edge_flows import allows_floor
from .problem import PHASE_ONE_MAX_CELLS, DesignProblem, Trace
from .relaxation import bound_combinations, changes_bound, flow_relaxation, loss_bound

__all__ = [
    "check_structure",
    "ADVICE",
    "RELAXATION_TOL",
    "floor_ruled_out",
    "floors_below_half",
    "below_half_hint",
    "invariant_hint",
    "small_stratum",
    "forbidden",
    "distance_rules_out",
    "DIAGNOSIS_PAIRS_LIMIT",
    "reach_argument",
    "explain_max_changed",
    "optimality_bounds",
    "CHANGES_BOUND_MAX_ROWS",
    "own_floor",
    "FLOOR_DECIMALS",
]

#: What every infeasible design is told to try.
ADVICE = "Coarsen the identifying variables, use fewer combinations or a larger alpha."

#: The flow relaxation proves a floor impossible only when its bound is below the floor by
#: more than this (its solver's feasibility tolerance is 1e-7).
RELAXATION_TOL = 1e-6


def floor_ruled_out(relax: float | None, floor: float) -> str | None:
    """The sentence that says no design has every diagonal entry >= ``floor`` when the flow
    relaxation's bound on every floor, ``relax``, lies below it (None: it does not, or unknown)."""
    if relax is None or relax >= floor - RELAXATION_TOL:
        return None
    return (
        f"No design with every diagonal entry >= {floor:g} satisfies C1: the flow "
        f"relaxation of C1 bounds every diagonal floor by {relax:.4g}."
    )


def floors_below_half(relax: float | None, floor: float) -> tuple:
    """The floors below 1/2 (:data:`~pramopt.params.BELOW_HALF_FLOORS`) at or above ``floor``
    (the user's ``min_diagonal``) that the flow relaxation's bound on every floor, ``relax``,
    does not rule out; none without a bound."""
    if relax is None:
        return ()
    return tuple(g for g in BELOW_HALF_FLOORS if floor <= g <= relax - RELAXATION_TOL)


def below_half_hint(relax: float | None, floor: float) -> str:
    """Where the flow relaxation rules out every floor >= 0.51 but not some below 1/2, the
    sentence (with a leading space) that says a general design may exist there; "" where it
    rules those out too."""
    below = floors_below_half(relax, floor)
    if not below:
        return ""
    return (
        f" A general design with a floor below 1/2 (down to {below[-1]:g}) may exist "
        "(invertible only as checked from P)."
    )


#: The expected-changes bound keeps the rows of the reduced C1 of as many combinations as fit in
#: this many rows (all of them when they fit): a weaker bound, still valid, where all rows would
#: cost more than the design.
CHANGES_BOUND_MAX_ROWS = 100_000


def optimality_bounds(problem: DesignProblem, trace: Trace, c) -> dict:
    """The lower bounds on the expected changes and the loss of every design, for the result's
    details of the candidate ``c`` (a stage)."""
    with trace.stage("changes bound") as info:
        # evidence of optimality: no design meeting C1 changes fewer records in expectation
        # (one program over the whole table: not attempted where even the floor's is too large)
        used = bound_combinations(problem, CHANGES_BOUND_MAX_ROWS)
        lb = (
            changes_bound(problem, problem.params.min_diagonal or 0.0, combinations=used)
            if used
            else None
        )
        of = (
            ""
            if len(used) == len(problem.combos)
            else f" (rows of {len(used)} of {len(problem.combos)} combinations)"
        )
        info["detail"] = (
            "unknown"
            if lb is None
            else f"every design changes >= {lb:.4g} records in expectation{of}"
        )
    # the loss bound holds where P^-1 has a diagonal >= 1 (see loss_bound): the replacement
    # structures by their form, a general design by strict diagonal dominance
    inverse_ok = c.name != "general" or c.P.diagonal().min() > 0.5
    out = {
        "expected_changes_lower_bound": lb,
        "lower_bound_combinations": len(used),
        "loss_lower_bound": loss_bound(lb, problem.counts) if inverse_ok else None,
    }
    floor = own_floor(c.P)
    if lb is not None and floor > (problem.params.min_diagonal or 0.0):
        with trace.stage("changes bound at floor") as info:
            # the same relaxation with every out_k <= (1 - floor) U0(k): its minimum bounds the
            # changes of every design keeping at least this design's smallest diagonal entry
            at = changes_bound(problem, floor, combinations=used)
            info["detail"] = (
                "unknown"
                if at is None
                else f"every design with all P_mm >= {floor:g} changes >= {at:.4g} records{of}"
            )
        if at is not None:
            out["bound_floor"] = floor
            out["expected_changes_lower_bound_at_floor"] = max(at, lb)
            out["loss_lower_bound_at_floor"] = (
                loss_bound(max(at, lb), problem.counts) if inverse_ok else None
            )
    return out


#: :func:`own_floor` rounds a design's smallest diagonal entry down to this many decimals.
FLOOR_DECIMALS = 4


def own_floor(P) -> float:
    """The design's smallest diagonal entry rounded down to :data:`FLOOR_DECIMALS` decimals: the
    floor of the class the design belongs to (every P_mm at least this), stated as written."""
    low = float(np.min(P.diagonal())) if P.shape[0] else 0.0
    if not np.isfinite(low) or low <= 0.0:
        return 0.0
    scale = 10.0**FLOOR_DECIMALS
    return float(np.floor(low * scale * (1.0 - 1e-12)) / scale)


def check_structure(problem: DesignProblem) -> None:
    """Refuse a structure that ``max_changed_variables`` rules out (its pools mix cells farther
    apart)."""
    p = problem.params
    if (
        problem.max_changed is not None
        and p.structure in ("blocks", "replacement")
        and not (p.structure == "replacement" and problem.pools_within_distance(problem.strata))
    ):
        raise InvalidParameterError(
            f"The 'max_changed_variables' parameter of design ({p.max_changed_variables}) cannot "
            f"be combined with structure={p.structure!r}: that design moves records between "
            f"every pair of cells of a {'block' if p.structure == 'blocks' else 'stratum'}, "
            "which differ in more variables.  Use structure='general' or 'auto'."
        )


def invariant_hint(params: DesignParams) -> str:
    """What an invariant design needs of the data (empty without ``invariant``)."""
    if not params.invariant:
        return ""
    return (
        " An invariant design fixes every C1 denominator at U_pi(k0), so it needs U_pi(k0) >= "
        "1/(2 alpha) "
        "for every combination present."
    )


def explain_max_changed(problem: DesignProblem, trace: Trace, res: DesignResult) -> DesignResult:
    """An INFEASIBLE result under ``max_changed_variables`` with what the restriction costs: the
    smallest number of changed variables the flow relaxation of C1 allows (never a silent fallback
    to an unrestricted design)."""
    floor = max(GAMMA_LADDER[-1], problem.params.min_diagonal or 0.0)
    # at census scale under d the designer's floor bound is the relaxation without d's flows

    known = getattr(trace, "known", {}).get("floor bound")
    with trace.stage("max changed variables") as info:
        why, smallest = distance_rules_out(
            problem, floor, known if problem.K > PHASE_ONE_MAX_CELLS else None
        )
        info["detail"] = f"smallest allowed by the flow relaxation: {smallest}"
    return dataclasses.replace(
        res,
        message=f"{res.message} {why}".strip(),
        stages=tuple(trace.stages),
        details={**res.details, "smallest_max_changed_variables": smallest},
    )


def small_stratum(problem: DesignProblem) -> str:
    """Why ``fixed`` (or ``missing="keep"``) forbids every design, when it does: the argument for
    n < 1/alpha, within strata.

    For a combination π, the records that agree on the fixed variables in π (and on which of
    π's values are missing, when missing values are kept) can only move among themselves, and
    every group of π lies within one such set; so the U0-weighted mean over its cells of their
    left-hand sides of C1 is 1 / (its records), and C1 needs at least 1/alpha records in every
    such set.
    """
    pb, t = problem, problem.table
    fixed = set(pb.fixed_idx)
    keep_missing = pb.params.missing == "keep"
    miss_any = np.any(pb.missing_pattern, axis=0)
    for pi in pb.combos:
        shared = [j for j in pi if j in fixed]
        miss = [j for j in pi if keep_missing and miss_any[j] and j not in fixed]
        if not shared and not miss:
            continue
        key = np.column_stack([t.codes[:, shared], pb.missing_pattern[:, miss].astype(np.int64)])
        keys, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.ravel()
        sizes = np.bincount(inv, weights=pb.counts)
        i = int(np.argmin(sizes))
        if sizes[i] * pb.alpha > 1 + 1e-12:
            continue
        cells = np.flatnonzero(inv == i)
        singular = len(np.unique(t.codes[np.ix_(cells, list(pi))], axis=0)) == cells.size
        if sizes[i] * pb.alpha > 1 - 1e-12 and not singular:
            continue  # 1/alpha records exactly: C1 can hold, with every record released alike
        where = [
            f"{short_label(str(t.qi[j]))} = {short_repr(plain(t.categories[j][keys[i][a]]))}"
            for a, j in enumerate(shared)
        ]
        where += [
            f"{short_label(str(t.qi[j]))} "
            + ("missing" if keys[i][len(shared) + a] else "not missing")
            for a, j in enumerate(miss)
        ]
        culprit = []
        if shared:
            culprit.append(f"fixed = {list(pb.params.fixed or ())}")
        if miss:
            culprit.append("missing = 'keep'")
        way = (
            "Merge that stratum with another or fix fewer variables"
            if shared
            else "Impute or recode the missing values, or let PRAM change them (missing='category')"
        )
        strict = sizes[i] * pb.alpha < 1 - 1e-12
        return (
            f"C1 cannot hold for any {'' if strict else 'invertible '}matrix with "
            f"{' and '.join(culprit)}: the {int(sizes[i])} records with "
            f"{', '.join(where)} can only move among themselves, and combination "
            f"{[short_label(str(t.qi[j])) for j in pi]} keeps them apart from the others, so some "
            f"left-hand side of C1 is at least 1/{int(sizes[i])}"
            + (
                f" > alpha = {pb.alpha:g}"
                if strict
                else f" = alpha = {pb.alpha:g}, reached only if all their cells are released "
                "alike (P singular)"
            )
            + f". {way}."
        )
    return ""


def forbidden(problem: DesignProblem) -> str:
    """Which option rules out every design, by the flow relaxation of C1 (a relaxation: when it
    has no solution, or caps the diagonal floor below ``min_diagonal``, no design exists)."""
    pb, p = problem, problem.params
    floor = p.min_diagonal or 0.0
    sol = flow_relaxation(pb)
    if sol.status == "ok" and sol.t is not None and sol.t >= floor - RELAXATION_TOL:
        return (
            "The flow relaxation of C1 does not rule a design out (it allows diagonal floors "
            f"up to {sol.t:.4g}); {ADVICE[0].lower()}{ADVICE[1:]}"
        )
    if sol.status not in ("ok", "infeasible"):
        return ADVICE
    if sol.status == "ok":  # feasible, but below the floor asked for
        return (
            f"min_diagonal = {floor:g} rules out every design: the flow relaxation of C1 bounds "
            f"every diagonal floor by {sol.t:.4g}."
        )
    named = []
    off: Any  # the option's value when not asked for
    for name, off in (("keep_cells", None), ("fixed", None), ("invariant", False)):
        if getattr(p, name) in (None, False, ()):
            continue
        other = DesignProblem.build(
            pb.table, pb.combos, dataclasses.replace(p, **{name: off}), "design"
        )
        alt = flow_relaxation(other)
        if alt.status == "ok" and alt.t is not None and alt.t >= floor - RELAXATION_TOL:
            named.append(name)
    if not named:
        return (
            "The options together rule out every design (the flow relaxation of C1 has no "
            f"solution). {ADVICE}"
        )
    extra = ""
    if "fixed" in named:
        sizes = np.bincount(pb.strata, weights=pb.counts)
        extra = (
            f" Its smallest stratum holds {int(sizes.min())} records (C1 needs the records a cell "
            f"can be confused with to number at least 1/alpha = {1 / pb.alpha:g})."
        )
    if len(named) == 1:
        return (
            f"{named[0]} rules out every design: the flow relaxation of C1 has no solution with "
            f"it, and has one without it.{extra}"
        )
    return (
        f"{' and '.join(named)} together rule out every design: the flow relaxation of C1 has no "
        f"solution with them, and has one without any one of them.{extra}"
    )


#: The diagnosis under ``max_changed_variables`` asks the flow relaxation over the permitted
#: transitions (by column generation) when there are at most this many of them; beyond, the
#: floor relaxation with its own limit on flows (a weaker relaxation, still a bound).
DIAGNOSIS_PAIRS_LIMIT = 10_000_000


def _within(problem: DesignProblem, floor: float) -> tuple[bool | None, str]:
    """Whether the flow relaxation of C1 with ``problem``'s permitted transitions allows every
    diagonal entry >= ``floor`` (None: not shown either way), and the figure that says so.

    First the changes program over the permitted transitions by column generation
    (:func:`.edge_flows.allows_floor`: flows meeting every C1 row prove it allowed, a least
    total slack of its C1 rows proven above 0 proves it not); where that shows neither, or the
    transitions are too many to list, the floor relaxation's largest floor decides."""
    pairs = problem.allowed_pairs(DIAGNOSIS_PAIRS_LIMIT)
    if pairs is not None:
        ok, flows = allows_floor(problem, floor, pairs)
        over = f"over the {pairs[0].size:,} permitted transitions"
        if ok:
            return True, f"{over} meets every C1 row with every diagonal entry >= {floor:g}"
        if ok is False:
            assert flows.bound is not None  # set when the answer is False
            return False, (
                f"{over} has no solution with every diagonal entry >= {floor:g} (its C1 rows "
                f"need a total slack of at least {flows.bound:.4g})"
            )
    sol = flow_relaxation(problem)
    if sol.status == "infeasible":
        return False, "has no solution"
    if sol.status != "ok":
        return None, f"says {sol.status}"
    assert sol.t is not None  # set with status "ok"
    ok = sol.t >= floor - RELAXATION_TOL
    return ok, f"bounds every diagonal floor by {sol.t:.4g}" + ("" if ok else f" (< {floor:g})")


def distance_rules_out(
    problem: DesignProblem, floor: float, unrestricted: float | None = None
) -> tuple[str, int | None]:
    """Why ``max_changed_variables`` leaves no design, and the smallest value the flow relaxation
    of C1 allows a floor >= ``floor`` with (None: none does; d itself when the relaxation does not
    rule d out, and the words then say that no design was found, not that none exists).

    Two arguments, both independent of the solver that failed: the counting one, C1's
    ``P_mm <= alpha D_g`` with ``D_g`` at most the records within distance d of group g (every
    record released into g comes from a cell at most d variables from one of g's cells); and the
    flow relaxation with only the permitted transitions (:func:`_within`).  First the relaxation
    without any restriction (``unrestricted``: its floor bound when already known): when it
    rules the floor out, no d can help, and no d is tried.
    """
    pb, p = problem, problem.params
    d = p.max_changed_variables
    assert d is not None  # explained only under max_changed_variables
    parts = []
    count = reach_argument(problem, floor)
    if count:
        parts.append(count)
    if unrestricted is None:
        q = dataclasses.replace(p, max_changed_variables=None)
        base = flow_relaxation(DesignProblem.build(pb.table, pb.combos, q, "design"))
        unrestricted = (
            base.t if base.status == "ok" else (0.0 if base.status == "infeasible" else None)
        )
    if unrestricted is not None and unrestricted < floor - RELAXATION_TOL:
        parts.append(
            f"No max_changed_variables allows a floor >= {floor:g} (the flow relaxation without "
            f"it bounds every diagonal floor by {unrestricted:.4g}); without it the replacement "
            "and block designs, which need no floor, apply."
        )
        return " ".join(parts), None
    ok, figure = _within(pb, floor)
    parts.append(f"With max_changed_variables = {d} the flow relaxation of C1 {figure}.")
    if ok and not count:
        # the relaxation does not rule d out: no figure here proves anything about d
        parts.append(
            f"That does not rule max_changed_variables = {d} out: no design was found, but "
            "one may exist (a larger max_changed_variables or min_diagonal closer to 0.5 "
            "gives the search more room)."
        )
        return " ".join(parts), d
    free = d + 1
    while True:
        q = dataclasses.replace(p, max_changed_variables=free)
        other = DesignProblem.build(pb.table, pb.combos, q, "design")
        if other.max_changed is None:  # no restriction left: the floor relaxation alone
            alt = flow_relaxation(other)
            ok = alt.status == "ok" and alt.t is not None and alt.t >= floor - RELAXATION_TOL
            figure = f"floor up to {alt.t:.4g}" if alt.status == "ok" else alt.status
        else:
            ok, figure = _within(other, floor)
        if ok:
            vacuous = other.max_changed is None
            parts.append(
                "The smallest max_changed_variables the flow relaxation allows a floor >= "
                f"{floor:g} with is {free}" + (" (no restriction)" if vacuous else "") + "."
            )
            return " ".join(parts), free
        if other.max_changed is None:
            break
        free += 1
    parts.append(
        f"No max_changed_variables allows a floor >= {floor:g} (the flow relaxation without it: "
        f"{figure}); without it the replacement and block designs, which need no floor, apply."
    )
    return " ".join(parts), None


def reach_argument(problem: DesignProblem, floor: float) -> str:
    """The counting argument: a group whose records within distance d cannot reach floor/alpha."""
    pb = problem
    pairs = pb.allowed_pairs(10_000_000)
    if pairs is None:
        return ""
    reach = pb.group_reach(pairs)  # records that can end in each group
    rare = pb.counts < 1.0 / pb.alpha
    has_rare = np.zeros(pb.groups.n_groups, dtype=bool)
    has_rare[pb.groups.member[rare].ravel()] = True
    short = np.flatnonzero(has_rare & (reach * pb.alpha < floor - 1e-12))
    if short.size == 0:
        return ""
    g = int(short[np.argmin(reach[short])])
    ci = int(np.flatnonzero((pb.groups.member == g).any(axis=0))[0])
    m = int(np.flatnonzero(pb.groups.member[:, ci] == g)[0])
    t = pb.table
    vals = ", ".join(
        f"{short_label(str(t.qi[j]))} = {short_repr(plain(t.categories[j][t.codes[m, j]]))}"
        for j in pb.combos[ci]
    )
    return (
        f"Only {reach[g]:g} records lie within {pb.params.max_changed_variables} changed "
        f"variable(s) of the group {vals}, which holds a rare cell: C1 needs P_mm <= alpha * "
        f"(records released into the group), so P_mm <= {pb.alpha:g} * {reach[g]:g} = "
        f"{pb.alpha * reach[g]:.4g} < {floor:g} for that cell ({short.size} such group(s))."
    )
