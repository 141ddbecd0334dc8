"""Designing one PRAM matrix per identifying variable under the full C1 over the product space.

1. A feasible start: ``M_v = (1 - t) I + t 1 q_v^T`` for every perturbed variable, ``q_v`` its
   marginal distribution (which such a matrix keeps, so the start is invariant), with the
   smallest t that meets C1 found by bisection on the design's own check (:mod:`.model`); as t
   tends to 1 every left-hand side tends to 1/n, so a start exists whenever n > 1/alpha and the
   floor allows t near 1.
2. Block-coordinate descent on the exact loss: one variable at a time, a trust-region LP on
   ``M_v`` (:mod:`.step`; C1's rows are linear in ``M_v`` when the other matrices are fixed),
   accepted only when the exact loss drops and C1 holds; sweeps until the loss improves by less
   than ``rtol`` (relative) in a sweep or ``max_iter`` sweeps.
3. The finished matrices are checked by :mod:`.check` (independent of 1 and 2), which alone
   decides ``success``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import InvalidParameterError
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, frequency_table
from ..params import DesignParams
from ..result import Stage, Status
from .model import GROUPS_MAX, Projection, loss_gradient, loss_value, max_risk, projections
from .result import PerVariableDesign, check_details, expected_figures, labelled
from .step import StepProblem, c1_rows, ratio_rows, solve_step

__all__ = ["design_per_variable", "Problem", "start_matrices", "improve", "finish"]

#: Parameters a per-variable design does not take (a value other than the default is refused).
_REFUSED = (
    "workers",
    "keep_cells",
    "max_changed_variables",
    "change_weights",
    "k",
    "household",
    "household_keys",
    "solver",
)


class Problem:
    """The data of one per-variable design: table, Π, projections, the working level."""

    def __init__(self, table: FrequencyTable, combos, perturbed: Sequence[int], params):
        self.table, self.combos, self.params = table, tuple(combos), params
        self.codes = np.asarray(table.codes, dtype=np.int64)
        self.counts = np.asarray(table.counts, dtype=float)
        self.n = float(self.counts.sum())
        self.levels = [len(c) for c in table.categories]
        self.perturbed = tuple(perturbed)
        # alpha None (epsilon alone): no C1 row, every level infinite
        self.alpha = None if params.alpha is None else float(params.alpha)
        a = math.inf if self.alpha is None else self.alpha
        # the LP works below the level the steps are accepted at, which is below alpha
        self.accept = a * (1.0 - params.margin)
        self.level = a * (1.0 - 2.0 * params.margin)
        self.eps_v = None if params.epsilon is None else epsilon_split(self, params.epsilon)
        self.floor = float(params.min_diagonal or 0.0)
        self.projs: list[Projection] = (
            []
            if self.alpha is None
            else projections(self.codes, self.counts, self.levels, self.combos, self.level)
        )
        self.marginals = [
            np.bincount(self.codes[:, v], weights=self.counts, minlength=L)
            for v, L in enumerate(self.levels)
        ]

    def holding(self, v: int) -> list[Projection]:
        return [p for p in self.projs if v in p.variables]

    def risk(self, projs, mats) -> float:
        """The largest left-hand side where it is above half the level (else below it)."""
        return max_risk(projs, mats, 0.5 * self.level)

    def loss(self, mats) -> float:
        return loss_value(self.codes, self.counts, mats)


def _target(pb: Problem, v: int, uniform: bool) -> np.ndarray:
    L = pb.levels[v]
    return np.full(L, 1.0 / L) if uniform else pb.marginals[v] / pb.n


def epsilon_split(pb: Problem, epsilon: float) -> dict[int, float]:
    """Each perturbed variable's share of epsilon (the product's is the sum): the split of
    per-attribute retention-replacement with one common retention (Ikarashi et al., Algorithm 2),
    so that the uniform start is that baseline; a relative 1e-6 inside, so that the solver's
    tolerance cannot take the sum above epsilon."""
    from ..baselines.retention import dp_epsilon_retention, rho_from_epsilon

    levels = [pb.levels[v] for v in pb.perturbed]
    rho = rho_from_epsilon(epsilon, levels)
    return {v: dp_epsilon_retention([pb.levels[v]], rho) * (1.0 - 1e-6) for v in pb.perturbed}


def start_matrices(
    pb: Problem, t: float | Sequence[float], uniform: bool = False
) -> list[np.ndarray]:
    """``(1 - t_v) I + t_v 1 s_v^T`` for the perturbed variables, the identity for the others;
    ``s_v`` the marginal distribution (kept: the start is invariant) or, with ``uniform``, the
    uniform one (more mass into rare categories under a diagonal floor)."""
    ts: list[float] = (
        [float(t)] * len(pb.levels) if isinstance(t, (int, float)) else [float(x) for x in t]
    )
    out: list[np.ndarray] = []
    for v, L in enumerate(pb.levels):
        if v not in pb.perturbed:
            out.append(np.eye(L))
            continue
        out.append(
            (1.0 - ts[v]) * np.eye(L) + ts[v] * np.outer(np.ones(L), _target(pb, v, uniform))
        )
    return out


def t_max(pb: Problem, uniform: bool = False) -> float:
    """The largest t of the start that keeps the floor and leaves the matrix invertible."""
    top = 0.999
    for v in pb.perturbed:
        s = _target(pb, v, uniform)
        # diagonal 1 - t (1 - s_i) >= floor
        top = min(top, (1.0 - pb.floor) / max(1e-12, 1.0 - float(s.min())))
    return top


def t_min(pb: Problem, uniform: bool = False) -> list[float]:
    """Per variable the smallest t of the start that meets its epsilon (0 without epsilon): the
    column ratio ``(1 - t + t s_j) / (t s_j) <= e^eps_v`` for every category j."""
    out = [0.0] * len(pb.levels)
    if pb.eps_v is None:
        return out
    for v in pb.perturbed:
        s = float(_target(pb, v, uniform).min())
        if pb.levels[v] > 1:
            out[v] = 1.0 / (1.0 + s * math.expm1(pb.eps_v[v])) if s > 0 else math.inf
    return out


def feasible_starts(pb: Problem) -> list[tuple[list[np.ndarray], float]]:
    """The starts with the smallest feasible t (bisection) towards the marginals and (when the
    design need not be invariant) towards the uniform distribution; empty when neither is
    feasible at its t_max."""
    if pb.eps_v is None and pb.risk(pb.projs, start_matrices(pb, 0.0)) <= pb.level:
        return [(start_matrices(pb, 0.0), 0.0)]
    out = []
    for uniform in (False, True) if not pb.params.invariant else (False,):
        floor, top = t_min(pb, uniform), t_max(pb, uniform)
        if max(floor) > top:
            continue

        def at(tau: float, floor=floor, uniform=uniform) -> list[np.ndarray]:
            # each variable's t is the common tau, raised to its epsilon's smallest t
            return start_matrices(pb, [max(f, tau) for f in floor], uniform)

        if pb.risk(pb.projs, at(top)) > pb.level:
            continue
        if pb.risk(pb.projs, at(0.0)) <= pb.level:
            out.append((at(0.0), max(floor)))
            continue
        hi = _smallest_feasible(pb, at, top, steps=30, rtol=1e-4)
        out.append((at(hi), hi))
    return out


def _smallest_feasible(pb: Problem, mats, hi: float, steps: int, rtol: float = 0.0) -> float:
    """Bisection on [0, hi] for the smallest parameter whose matrices ``mats(x)`` meet C1 at the
    working level (``hi`` meets it, 0 does not): at most ``steps`` halvings, fewer once the
    interval is below ``rtol`` of ``hi``."""
    lo = 0.0
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if pb.risk(pb.projs, mats(mid)) <= pb.level:
            hi = mid
        else:
            lo = mid
        if hi - lo < rtol * hi:
            break
    return hi


def random_start(pb: Problem, rng: np.random.Generator) -> list[np.ndarray] | None:
    """A random feasible start (not invariant): per perturbed variable a Dirichlet target ``s_v``
    and a share of t, the t's scaled by bisection to the smallest multiple meeting C1 (each kept
    at most the floor's t_max); None when the largest is not feasible."""
    targets = {v: rng.dirichlet(np.ones(pb.levels[v])) for v in pb.perturbed}
    share = {v: rng.uniform(0.3, 1.0) for v in pb.perturbed}
    cap = {
        v: min(0.999, (1.0 - pb.floor) / max(1e-12, 1.0 - float(targets[v].min())))
        for v in pb.perturbed
    }

    def mats(scale: float) -> list[np.ndarray]:
        out = []
        for v, L in enumerate(pb.levels):
            if v not in pb.perturbed:
                out.append(np.eye(L))
                continue
            t = min(cap[v], scale * share[v])
            out.append((1 - t) * np.eye(L) + t * np.outer(np.ones(L), targets[v]))
        return out

    hi = 1.0 / min(share.values())
    if pb.risk(pb.projs, mats(hi)) > pb.level:
        return None
    return mats(_smallest_feasible(pb, mats, hi, steps=25))


def _clean(M: np.ndarray) -> np.ndarray:
    M = np.clip(M, 0.0, 1.0)
    return M / M.sum(axis=1, keepdims=True)


def _step(pb: Problem, mats: list, v: int, radius: float, loss: float):
    """One accepted-or-rejected trust-region step on ``M_v``: (matrices, loss, new radius)."""
    grad = loss_gradient(pb.codes, pb.counts, mats, v)
    holding = pb.holding(v)
    A, b, _ = c1_rows(holding, mats, v, pb.level, keep=0.5)
    if pb.eps_v is not None:
        Ae, be = ratio_rows(mats[v], pb.eps_v[v])
        A, b = sp.vstack([A, Ae]).tocsr(), np.concatenate([b, be])
    inv = pb.marginals[v] if pb.params.invariant else None
    sp_ = StepProblem(mats[v], grad, radius, pb.floor + 1e-9 if pb.floor else 0.0, inv)
    for _ in range(4):
        D = solve_step(sp_, A, b)
        if D is None:
            return mats, loss, radius / 4
        pred = -float((grad * D).sum())
        if pred <= 1e-12 * max(abs(loss), 1e-300):
            return mats, loss, radius / 4
        new = list(mats)
        new[v] = _clean(mats[v] + D)
        if pb.risk(holding, new) > pb.accept:
            # rows outside the working set bind: add every violated one, in the change from M_v
            A2, b2, _ = c1_rows(holding, new, v, pb.level, keep=1.0)
            b2 = b2 + A2 @ (new[v] - mats[v]).ravel()
            A, b = sp.vstack([A, A2]).tocsr(), np.concatenate([b, b2])
            continue
        value = pb.loss(new)
        ratio = (loss - value) / pred if math.isfinite(value) else -1.0
        if ratio > 0.1:
            return new, value, min(0.5, radius * (2.0 if ratio > 0.75 else 1.0))
        return mats, loss, radius / 4
    return mats, loss, radius / 4


#: Seeded random starts tried besides the marginals' and the uniform one (not invariant) ...
EXTRA_STARTS = 4
#: ... while the design has taken less than this many seconds.
EXTRA_STARTS_SECONDS = 20.0
#: A sweep that improves the loss by less than this times ``rtol`` (relative) ends the descent.
SWEEP_RTOL_FACTOR = 10.0
#: Seconds after which the descent from one start stops (before its next step).
DESCENT_SECONDS = 45.0


def improve(
    pb: Problem, mats: list, progress=None, budget: float = DESCENT_SECONDS
) -> tuple[list, float, int, int]:
    """Block-coordinate trust-region descent: (matrices, loss, sweeps, accepted steps)."""
    t0 = time.perf_counter()
    loss = pb.loss(mats)
    radius = {v: 0.05 for v in pb.perturbed}
    sweeps = accepted = 0
    for sweeps in range(1, pb.params.max_iter + 1):
        before = loss
        for v in pb.perturbed:
            for _ in range(3):
                # the budget is checked before every step, not only after a sweep: a sweep over a
                # variable of many categories is many large LPs (every accepted state is verified
                # feasible, so stopping between steps is safe)
                if radius[v] < 1e-7 or time.perf_counter() - t0 > budget:
                    break
                new, value, radius[v] = _step(pb, mats, v, radius[v], loss)
                if value < loss:
                    mats, loss, accepted = new, value, accepted + 1
        if progress is not None:
            progress("per-variable descent", sweeps, loss, max(radius.values()))
        if (
            before - loss <= SWEEP_RTOL_FACTOR * pb.params.rtol * abs(before)
            or all(r < 1e-7 for r in radius.values())
            or time.perf_counter() - t0 > budget
        ):
            break
    return mats, loss, sweeps, accepted


def _resolve(data, qi, params: DesignParams, owner: str):
    """The table, Π and the indices of the perturbed variables (refusals before any work)."""
    for name in _REFUSED:
        default = DesignParams.__dataclass_fields__[name].default
        if getattr(params, name) != default:
            why = "it does not apply to one matrix per variable"
            raise InvalidParameterError(
                f"The '{name}' parameter of {owner} cannot be combined with "
                f"structure='per_variable' ({why}); got {name}={getattr(params, name)!r}."
            )
    if isinstance(data, FrequencyTable):
        table = data
    elif hasattr(data, "columns"):
        table = frequency_table(
            data, qi, domains=params.domains, max_categories=params.max_categories, owner=owner
        )
    else:
        raise InvalidParameterError(
            f"The 'data' parameter of {owner} must be a pandas DataFrame or a FrequencyTable; got "
            f"{type(data).__name__}."
        )
    combos = resolve_combinations(table.qi, params.combination_size, params.combinations, owner)
    names = list(table.qi)
    if params.perturb is None:
        perturbed = list(range(len(names)))
    else:
        unknown = [p for p in params.perturb if p not in names]
        if unknown or not params.perturb:
            raise InvalidParameterError(
                f"The 'perturb' parameter of {owner} must name identifying variables among "
                f"{names!r}; got {list(params.perturb)!r}."
            )
        perturbed = sorted({names.index(p) for p in params.perturb})
        if params.epsilon is not None and len(perturbed) < len(names):
            raise InvalidParameterError(
                f"The 'perturb' parameter of {owner} must list every identifying variable under "
                f"epsilon (a variable released unchanged has an infinite epsilon); got "
                f"{list(params.perturb)!r} of {names!r}."
            )
    levels = [len(c) for c in table.categories]
    for c in combos:
        size = math.prod(levels[v] for v in c)
        if size > GROUPS_MAX:
            raise InvalidParameterError(
                f"The combination {[names[v] for v in c]!r} of {owner} has {size:,} combinations "
                f"of categories (more than {GROUPS_MAX:,}); use smaller combinations or coarser "
                "variables."
            )
    return table, combos, perturbed


def design_per_variable(
    data, qi, params: DesignParams, design=None, *, progress=None, client=None, owner="design"
) -> PerVariableDesign:
    """One PRAM matrix per identifying variable, of locally least loss (structure "per_variable").

    Called by :func:`pramopt.design` (``design`` is that function; not needed here).
    """
    if client is not None:
        raise InvalidParameterError(
            f"The 'client' parameter of {owner} cannot be combined with structure='per_variable'."
        )
    t0 = time.perf_counter()
    table, combos, perturbed = _resolve(data, qi, params, owner)
    if params.fixed:
        from .strata import design_fixed

        return design_fixed(table, combos, perturbed, params, design_per_variable, progress, owner)
    pb = Problem(table, combos, perturbed, params)
    stages: list[Stage] = []
    if pb.alpha is not None and pb.n * pb.alpha <= 1.0:
        why = f"C1 cannot hold with {int(pb.n)} records at alpha {pb.alpha:g} (n <= 1/alpha)."
        return finish(pb, start_matrices(pb, 0.0), Status.INFEASIBLE_DATA, why, stages)
    fixed_rare = [p for p in pb.projs if p.rare.shape[0] and not set(p.variables) & set(perturbed)]
    if fixed_rare:
        names = [table.qi[v] for v in fixed_rare[0].variables]
        return finish(
            pb, start_matrices(pb, 0.0), Status.INFEASIBLE,
            f"The combination {names!r} has cells of fewer than 1/alpha records and none of its "
            "variables is perturbed (perturb): no per-variable design meets C1.", stages,
        )  # fmt: skip
    starts = feasible_starts(pb)
    stages.append(Stage("start", time.perf_counter() - t0, len(starts), "bisection on t"))
    if not starts:
        why = f" with min_diagonal {pb.floor:g}" if pb.floor else ""
        what = "the marginals" if params.invariant else "the marginals or the uniform distribution"
        why += f" and epsilon {params.epsilon:g}" if params.epsilon is not None else ""
        return finish(
            pb, start_matrices(pb, t_max(pb)), Status.INFEASIBLE,
            f"No mixture of the identity with {what} meets C1{why}, so the descent had no "
            "feasible start: no per-variable design was found (none is proven impossible).",
            stages,
        )  # fmt: skip
    labelled: list[tuple[list | None, float, str]] = [
        (m, t, ("marginals", "uniform")[k]) for k, (m, t) in enumerate(starts)
    ]
    if starts[0][1] > 0 and not params.invariant and params.epsilon is None:
        # a few seeded random starts too while the problem is small (the descent finds local
        # optima; the benchmark measures how far from the best of many)
        # made when reached (None here): at scale the time runs out before them
        labelled += [(None, math.nan, f"random start {k + 1}") for k in range(EXTRA_STARTS)]
    mats, details = _descend(pb, labelled, progress, t0, stages)
    if pb.eps_v is not None and len(pb.perturbed) > 1:
        mats, details = _even_split(pb, mats, details, progress, t0, stages)
    return finish(pb, mats, Status.SUCCESS, "", stages, details)


def _even_split(pb: Problem, mats, details, progress, t0: float, stages: list):
    """Under epsilon the split over the variables is not optimised (each block keeps its share):
    the even split is tried beside retention-replacement's, the smaller loss kept."""
    even = copy.copy(pb)
    share = pb.params.epsilon * (1.0 - 1e-6) / len(pb.perturbed)
    even.eps_v = {v: share for v in pb.perturbed}
    starts = [
        (m, t, ("marginals", "uniform")[k] + " (even epsilon split)")
        for k, (m, t) in enumerate(feasible_starts(even))
    ]
    if not starts:
        return mats, details
    other, more = _descend(even, starts, progress, t0, stages)
    return (other, more) if pb.loss(other) < pb.loss(mats) else (mats, details)


def _descend(pb: Problem, starts: list, progress, t0: float, stages: list) -> tuple[list, dict]:
    """The descent from each start (the random ones, None in ``starts``, made from a seeded
    generator only while the design has taken less than ``EXTRA_STARTS_SECONDS``); the matrices
    of smallest loss and how they were found."""
    best: tuple | None = None
    rng = np.random.default_rng(0)
    for mats, t, label in starts:
        if label.startswith("random"):
            if time.perf_counter() - t0 > EXTRA_STARTS_SECONDS:
                break
            mats = random_start(pb, rng)
            if mats is None:
                continue
        t1 = time.perf_counter()
        start_loss = pb.loss(mats)
        sweeps = accepted = 0
        if pb.params.refine_loss and t != 0:
            mats, _, sweeps, accepted = improve(pb, mats, progress)
        loss = pb.loss(mats)
        stages.append(
            Stage(f"descent from the {label}", time.perf_counter() - t1, sweeps,
                  f"t = {t:.4g}, loss {start_loss:.4g} -> {loss:.4g}, {accepted} steps accepted")
        )  # fmt: skip
        if best is None or loss < best[1]:
            details = {"start": label, "start_t": t, "start_loss": start_loss, "sweeps": sweeps,
                       "steps": accepted}  # fmt: skip
            best = (mats, loss, details)
    assert best is not None
    return best[0], best[2]


def finish(
    pb: Problem, mats: list, status: Status, message: str, stages: list, details=None
) -> PerVariableDesign:
    """The result, with success decided by the independent check (and the floor, checked here)."""
    from ..risk.dp_pk_anonymity import dp_epsilon_product
    from .check import check_product_c1

    t0 = time.perf_counter()
    # alpha None (epsilon alone) is kept as alpha 1, as the record-level designs keep it: C1 at
    # 1 holds for every matrix, and the releases check and print it alike
    alpha = 1.0 if pb.alpha is None else pb.alpha
    rep = check_product_c1(pb.codes, pb.counts, mats, pb.combos, alpha=alpha)
    c1_ok = rep.holds(alpha)
    risk = float(rep.max_risk)
    eps = dp_epsilon_product(mats) if pb.params.epsilon is not None else None
    eps_ok = eps is None or eps <= pb.params.epsilon
    stages = [*stages, Stage("independent check", time.perf_counter() - t0, 0, "")]
    floor_ok = all(
        float(np.diag(M).min()) >= pb.floor for v, M in enumerate(mats) if v in pb.perturbed
    )
    loss = pb.loss(mats)
    ok = status is Status.SUCCESS and c1_ok and eps_ok and floor_ok and math.isfinite(loss)
    if status is Status.SUCCESS and not ok:
        status = Status.UNVERIFIED
        message = (
            f"The matrices failed the independent check (max risk {risk:.6g} vs alpha "
            f"{alpha:g}, epsilon {eps} vs {pb.params.epsilon}, floor kept: {floor_ok}, loss "
            f"{loss:.6g}); not safe to release."
        )
    elif ok:
        parts = [f"C1 at alpha {pb.alpha:g} verified over the product space"] if pb.alpha else []
        if eps is not None:
            parts.append(f"epsilon {eps:.6g} (the sum of the variables') <= {pb.params.epsilon:g}")
        message = (
            f"One matrix for each of {len(pb.perturbed)} perturbed variable(s); "
            + "; ".join(parts)
            + "."
        )
    changes, per = expected_figures(pb.table, mats)
    names = [pb.table.qi[v] for v in pb.perturbed]
    return PerVariableDesign(
        table=pb.table,
        variable_matrices={q: labelled(pb.table, v, mats[v]) for v, q in enumerate(pb.table.qi)},
        perturbed=tuple(names),
        combinations=tuple(tuple(pb.table.qi[v] for v in c) for c in pb.combos),
        alpha=alpha,
        status=status,
        success=bool(ok),
        message=message,
        max_risk=risk,
        epsilon=eps,
        loss=float(loss),
        expected_changes=changes,
        changed_variables=per,
        params=pb.params.to_dict(),
        details={**(details or {}), **check_details(rep, mats)},
        stages=tuple(stages),
    )
