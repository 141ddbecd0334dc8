"""The optimal PRAM designer: validate, choose a structure, retry, finish.

data -> frequency table -> :class:`~.problem.DesignProblem` -> a strategy
(:mod:`.strategies`) -> the independent check (:mod:`pramopt.verify`) -> a
:class:`~pramopt.DesignResult` (:func:`pramopt.outcome.finish`).

Retries: the solver works at alpha * (1 - margin) so that its feasibility tolerance never
turns into a violation; if the verifier still found one, the margin grows tenfold (twice at
most, from ``MARGIN_FLOOR`` at least) and the design is solved again; a design that fails at every
margin is reported UNVERIFIED, never INFEASIBLE.  The diagonal floor gamma goes down a ladder when the
reduced problem is infeasible at the requested one, guided by phase one.

Structure (auto mode): the counting bound and the flow relaxation (:mod:`.relaxation`) say in
seconds whether a general design (every diagonal entry >= 0.51) can exist; it is made only then,
and only up to ``GENERAL_AUTO_MAX_CELLS`` cells.  The replacement design is always made, the block
design up to ``BLOCKS_AUTO_MAX_CELLS`` cells (beside the general design too: on the package example,
testdata and rare-heavy tables the better of them comes within 1.3% of its loss in a fraction of its
time; on the example the replacement design is 0.2% above it, the block design 10%); every
candidate is verified, and the smallest exact loss wins.
"""
from __future__ import annotations

import dataclasses
import inspect
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._plain import plain
from .._validation import check_choice
from ..errors import InvalidParameterError, LargeProblemWarning
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, frequency_table
from ..outcome import finish, verify_stage
from ..params import GAMMA_LADDER, PRIVACY_MAX_CELLS, DesignParams, parameters_doc, signature
from ..loss import l2_loss
from ..result import DesignResult, Status
from .backends import supports
from .constraints.c1 import floor_upper_bound
from .problem import DesignProblem, ProgressFn, Trace
from .strategies import AttemptStatus
from .strategies.blocks import solve_blocks
from .strategies.replacement import solve_replacement, solve_uniform
from .strategies.general import solve_general
from .strategies.privacy import solve_privacy
from .relaxation import bound_combinations, changes_bound, floor_bound, flow_relaxation, loss_bound
from .strategies.phase_one import PHASE1_TIEBREAK, largest_floor

__all__ = ["design", "GAMMA_LADDER"]


#: Above this many cells auto mode tries only the replacement and block designs: on the 5,577-cell
#: Zipf register the replacement design (9 s) has a smaller loss than the general one (177 s); on
#: the 2,610-cell census sample phase one alone takes minutes, and on the rare-heavy scaling
#: series it does not finish in 300 s from 800 cells on.
GENERAL_AUTO_MAX_CELLS = 600

#: Above this many cells auto mode makes a block design only when no replacement design is found:
#: on the 6,505-cell census sample the block design takes 500 s and loses to the replacement design
#: (loss 1.55e-4, 16 s), as it does on every rare-heavy data set of the benchmarks.
BLOCKS_AUTO_MAX_CELLS = 4000

#: ... and only up to this many rows of the reduced C1 (rare cells x combinations): with 12
#: identifying variables (220 triples) and 2,000 records the replacement design takes 6 s and each
#: block size minutes (440,000 rows).
BLOCKS_AUTO_MAX_ROWS = 100_000

#: The expected-changes bound keeps the rows of the reduced C1 of as many combinations as fit in
#: this many rows (all of them when they fit): a weaker bound, still valid, where all rows would
#: cost more than the design.  Measured on the census samples (2 loaded CPUs): 6,505 cells, all 10
#: combinations (61,440 rows) 13 s, bound 3,659; 22,670 cells, 4 of 20 combinations 22 s, bound
#: 4,226 (all 20: 79-131 s, 4,388); 47,526 cells, 2 of 35 combinations 27 s.
CHANGES_BOUND_MAX_ROWS = 100_000

#: Above this many rows of the reduced C1 the designer warns before it starts (see LargeProblemWarning).
LARGE_PROBLEM_ROWS = 1_000_000

#: The flow relaxation proves a floor impossible only when its bound is below the floor by
#: more than this (its solver's feasibility tolerance is 1e-7).
RELAXATION_TOL = 1e-6

#: The margin grows from at least this when the verification fails (a margin of 0 would stay 0).
MARGIN_FLOOR = 1e-5


def _margins(margin: float) -> list[float]:
    """The margins tried in turn: the requested one, then tenfold twice (from MARGIN_FLOOR at least)."""
    out = [margin]
    for _ in range(2):
        nxt = min(max(10 * out[-1], MARGIN_FLOOR), 0.1)
        if nxt > out[-1]:
            out.append(nxt)
    return out


_ADVICE = "Coarsen the identifying variables, use fewer combinations or a larger alpha."


def _gamma_ladder(gamma: float, floor: float) -> list[float]:
    ladder = [gamma] + [g for g in GAMMA_LADDER if g < gamma]
    return [g for g in ladder if g >= floor] or [max(gamma, floor)]


def design(data, qi=None, alpha: float = DesignParams.alpha, *, progress: ProgressFn | None = None,
           client=None, **options) -> DesignResult:
    """Design a PRAM matrix of minimal exact L2 loss under the C1 security constraint, and under
    ε-DP (``epsilon``) and Pk-anonymity (``k``) of Ikarashi et al. when they are given.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        Microdata (one row per record), or its frequency table.
    qi : list of str
        Identifying variables (ignored when ``data`` is a FrequencyTable).
{parameters}
    progress : callable, optional
        ``progress(stage, iteration, loss, radius_or_violations)``, called during long work.
    client : distributed.Client, optional
        Design the strata of ``fixed`` on this Dask cluster (as ``workers`` does in local
        processes; the result's ``params`` then say ``workers=1``, which repeats it locally).

    Returns
    -------
    DesignResult
        ``success`` is True only when the full, unreduced C1 holds with ``max_risk <= alpha``
        (and, when given, ε and k, measured exactly: ``details["epsilon"]``, ``details["k"]``,
        ``details["binding"]``).
        ``params`` holds every parameter, so ``design(result.table, **result.params)`` makes
        the same design again.
    """
    owner = "design"
    params = DesignParams.from_options(owner, alpha=alpha, **options)
    if progress is not None and not callable(progress):
        raise InvalidParameterError(f"The 'progress' parameter of {owner} must be a callable or None; got {progress!r}.")
    if params.solver is not None and params.solver != "HIGHS":
        from .backends import known_solvers  # imports cvxpy: only when a cvxpy solver is named
        check_choice(params.solver, "solver", owner, known_solvers())
    if params.household is not None:
        # household-level keys once per household, person-level keys per person (pramopt.households)
        from ..households.designer import design_households
        return design_households(data, qi, params, design, progress=progress, client=client, owner=owner)
    table, combos = table_and_combinations(data, qi, params, owner)
    if params.epsilon is not None or params.k is not None:
        _check_privacy(params, table, owner)
    if (params.workers is not None or client is not None) and not params.fixed:
        given = f"workers={params.workers}" if params.workers is not None else "a client"
        raise InvalidParameterError(f"The 'workers' and 'client' parameters of {owner} design the strata of 'fixed' "
                                    f"apart; got {given} without fixed variables.")
    if params.workers is not None or client is not None:
        from .strata import check_client, design_strata  # independent designs per stratum of `fixed`
        res = design_strata(design, table, combos, params, client=check_client(client, owner), progress=progress,
                            owner=owner)
        if res is not None:
            return res
    trace = Trace(progress)
    with trace.stage("model") as info:
        problem = DesignProblem.build(table, combos, params, owner)
        info["detail"] = f"{problem.groups.n_groups} (pi, k0) groups, {problem.rare_rows} rows of C1 for rare cells"
    if problem.rare_rows > LARGE_PROBLEM_ROWS:
        # before minutes of work: say what makes it large and how to make it smaller
        rare = problem.rare_rows // len(combos)
        warnings.warn(LargeProblemWarning(
            f"{len(combos)} combinations of {len(table.qi)} identifying variables and {rare} rare cells give "
            f"{problem.rare_rows:,} rows of C1 (more than {LARGE_PROBLEM_ROWS:,}): the design may take many minutes "
            "and gigabytes. A smaller combination_size, an explicit list of combinations or coarser variables "
            "make it smaller."), stacklevel=2)
    return _Designer(problem, trace).run()


design.__doc__ = design.__doc__.replace("{parameters}", parameters_doc())
design.__signature__ = signature(
    design, before=[inspect.Parameter("data", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                    inspect.Parameter("qi", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
                    inspect.Parameter("alpha", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DesignParams.alpha)],
    after=[inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=None),
           inspect.Parameter("client", inspect.Parameter.KEYWORD_ONLY, default=None)])


def table_and_combinations(data, qi, params: DesignParams, owner: str):
    """The frequency table of ``data`` (as given, when it is one) and the combinations Π that
    ``params`` ask for: what every design over the same data and options starts from."""
    if isinstance(data, FrequencyTable):
        table = data
    else:
        table = frequency_table(data, qi, domains=params.domains, max_categories=params.max_categories,
                                owner=owner)
    return table, resolve_combinations(table.qi, params.combination_size, params.combinations, owner)


def _check_privacy(p: DesignParams, table: FrequencyTable, owner: str) -> None:
    """Designs under epsilon or k: dense over the present cells, so a bounded K and no option that
    forces zeros into a column (fixed strata, kept cells)."""
    what = " and ".join(f"{n}={v:g}" for n, v in (("epsilon", p.epsilon), ("k", p.k)) if v is not None)
    if table.n_cells > PRIVACY_MAX_CELLS:
        raise InvalidParameterError(
            f"The 'epsilon' and 'k' parameters of {owner} need a dense matrix over the present cells (every "
            f"entry of a column positive together); with {table.n_cells} cells (more than {PRIVACY_MAX_CELLS}) "
            f"that is too large to design ({what} given). Coarsen the identifying variables or use fewer.")
    free = int(np.count_nonzero((table.codes != table.codes[:1]).any(axis=0))) if table.n_cells else 0
    if p.max_changed_variables is not None and p.max_changed_variables < free:
        raise InvalidParameterError(
            f"The 'max_changed_variables' parameter of {owner} cannot be combined with {what}: it forces zeros next "
            "to positive entries in a column of P, which makes epsilon infinite and k = 1.")
    for name in ("fixed", "keep_cells"):
        if getattr(p, name):
            raise InvalidParameterError(
                f"The {name!r} parameter of {owner} cannot be combined with {what}: it forces zeros next to "
                "positive entries in a column of P, which makes epsilon infinite and k = 1.")
    if p.missing == "keep" and table.missing().any():
        raise InvalidParameterError(
            f"The 'missing' parameter of {owner} must be 'category' with {what} on data with missing identifying "
            "values: 'keep' forces zeros next to positive entries in a column of P (records move only among cells "
            "with their missing pattern), which makes epsilon infinite and k = 1.")
    if p.invariant:
        raise InvalidParameterError(f"The 'invariant' parameter of {owner} is not supported with {what}.")
    if p.structure not in ("auto", "general"):
        raise InvalidParameterError(
            f"The 'structure' parameter of {owner} must be 'auto' or 'general' with {what} (a dense design over "
            f"the present cells); got {p.structure!r}.")
    if p.k is not None and p.k > table.n:
        raise InvalidParameterError(
            f"The 'k' parameter of {owner} must be at most the number of records ({table.n}); got {p.k:g}.")


@dataclass(frozen=True)
class _Candidate:
    """A verified design of one structure, before the designer picks among them."""

    name: str
    P: sp.csr_matrix
    report: object
    loss: float
    condition: float | None
    reduction: object
    solver: str | None
    gamma: float | None
    describe: str


class _Designer:
    """One run of :func:`design` on a problem: the structure, the retries and the result."""

    def __init__(self, problem: DesignProblem, trace: Trace):
        self.problem, self.trace = problem, trace
        self.p = problem.params
        self.relax = None  # the flow relaxation's bound on every diagonal floor, once known
        self._unverified = None  # (P, report, margin) of a block design that failed the check

    def verify(self, P, name: str = "verify"):
        rep, st = verify_stage(P, self.problem.table, self.problem.combos, name)
        self.trace.add(st.name, st.seconds, st.iterations, f"max risk {rep.max_risk:.6g}")
        return rep

    def finish(self, P, status: Status, message: str, gamma=None, reduction=None, solver=None, report=None,
               loss=None, condition=None, details=None):
        pb = self.problem
        return finish(P, pb.table, pb.combos, pb.alpha, status, message, stages=self.trace.stages, gamma=gamma,
                      reduction=reduction, solver=solver, report=report, params=self.p.to_dict(), loss=loss,
                      condition=condition, details=details)

    def identity(self, status: Status, message: str, gamma=None, reduction=None):
        return self.finish(sp.identity(self.problem.K, format="csr"), status, message, gamma, reduction)

    def run(self) -> DesignResult:
        res = self._run()
        if res.status is Status.INFEASIBLE and self.problem.max_changed is not None:
            # say what the restriction costs: the smallest number of changed variables the flow
            # relaxation of C1 allows (never a silent fallback to an unrestricted design)
            floor = max(GAMMA_LADDER[-1], self.p.min_diagonal or 0.0)
            with self.trace.stage("max changed variables") as info:
                why, smallest = self._distance_rules_out(floor)
                info["detail"] = f"smallest allowed by the flow relaxation: {smallest}"
            res = dataclasses.replace(res, message=f"{res.message} {why}".strip(), stages=tuple(self.trace.stages),
                                      details={**res.details, "smallest_max_changed_variables": smallest})
        return res

    def _run(self) -> DesignResult:
        pb, p = self.problem, self.p
        alpha = pb.alpha
        if pb.max_changed is not None and p.structure in ("blocks", "replacement") and not (
                p.structure == "replacement" and pb.pools_within_distance(pb.strata)):
            raise InvalidParameterError(
                f"The 'max_changed_variables' parameter of design ({p.max_changed_variables}) cannot be combined with "
                f"structure={p.structure!r}: that design moves records between every pair of cells of a "
                f"{'block' if p.structure == 'blocks' else 'stratum'}, which differ in more variables.  Use "
                "structure='general' or 'auto'.")
        # C1 can hold for no P at all when n < 1/alpha: the U0-weighted mean of the left-hand
        # sides over m is 1/n for every (π, k0), so the largest is at least 1/n.
        if pb.n * alpha < 1:
            return self.identity(Status.INFEASIBLE_DATA,
                                 f"C1 cannot hold for any matrix: n = {pb.n} < 1/alpha = {1 / alpha:g}.")
        small = self._small_stratum()
        if small:
            return self.identity(Status.INFEASIBLE, small)
        if p.epsilon is not None or p.k is not None:
            return self.privacy()
        # Nothing to do when the original data already satisfy C1 (P = I).
        eye = sp.identity(pb.K, format="csr")
        rep = self.verify(eye, "check P=I")
        if rep.max_risk <= alpha:
            return self.finish(eye, Status.SUCCESS, "The data already satisfy C1: P = I.", report=rep)
        floor = 0.0 if p.min_diagonal is None else p.min_diagonal
        g_low = max(GAMMA_LADDER[-1], floor)
        # every structure honours every option (the floor, strata, kept cells, invariance), so
        # auto mode may always turn to the structures that need no floor above 1/2
        auto_blocks = p.structure == "auto"
        if p.structure == "blocks":
            return self.blocks("Block structure requested.")
        if p.structure == "replacement":
            return self.replacement("Replacement structure requested.")
        bound = floor_upper_bound(pb.table, pb.groups, alpha)
        if bound < g_low and auto_blocks:
            return self.rare(f"No design with a diagonal floor >= {g_low:g} exists: C1 caps every floor at "
                               f"alpha * n / (largest number of groups of one combination) = {bound:.4g}.")
        if auto_blocks and pb.K > GENERAL_AUTO_MAX_CELLS:
            return self.rare(f"With {pb.K} cells (more than {GENERAL_AUTO_MAX_CELLS}), auto mode makes the structures "
                             "found in seconds and skips the general design, which takes many minutes at this size "
                             "(structure='general' asks for it).")
        # the flow relaxation: seconds, where phase one on rare-heavy data takes minutes to
        # reach the same conclusion
        with self.trace.stage("floor bound") as info:
            self.relax = relax = floor_bound(pb)
            info["detail"] = "solver failed" if relax is None else f"every floor <= {relax:.4g}"
        if relax is not None and relax < g_low - RELAXATION_TOL:
            why = (f"No design with every diagonal entry >= {g_low:g} satisfies C1: the flow relaxation of C1 "
                   f"bounds every diagonal floor by {relax:.4g}.")
            if auto_blocks:
                return self.rare(why)
            return self.identity(Status.INFEASIBLE, f"{why}{self._invariant_hint()} {_ADVICE}", g_low)
        return self.general(floor, g_low, auto_blocks)

    def privacy(self) -> DesignResult:
        """A dense design under epsilon and/or k (and C1 unless alpha is None); see
        :mod:`.strategies.privacy`.  Success only when every requirement holds exactly."""
        from ..baselines.privacy import retention_meeting

        pb, p = self.problem, self.p
        c1 = p.alpha is not None
        m = p.margin if p.margin > 0 else MARGIN_FLOOR
        eps_s = None if p.epsilon is None else p.epsilon * (1.0 - m)
        k_s = None if p.k is None else min(float(pb.n), 1.0 + (p.k - 1.0) * (1.0 + m))
        a_s = pb.alpha * (1.0 - m) if c1 else None
        with self.trace.stage("retention start") as info:
            # retention-replacement over the attributes (Ikarashi et al.) and over the cells as one
            # attribute (K-ary randomized response), each calibrated inside the margins: feasible
            # starts, the better one refined
            starts = [(n, s) for n, s in (
                ("K-ary randomized response", retention_meeting(pb.table, pb.combos, epsilon=eps_s, k=k_s, alpha=a_s,
                                                                joint=True)),
                ("retention-replacement", retention_meeting(pb.table, pb.combos, epsilon=eps_s, k=k_s, alpha=a_s)))
                if s.ok]
            start = min((s for _, s in starts), key=lambda s: s.loss) if starts else None
            info["detail"] = ("; ".join(f"{n}: rho {s.rho[0]:.4g}, loss {s.loss:.4g}" for n, s in starts) if starts
                              else "no retention-replacement matrix meets the requirements")
        R = None if start is None else start.P
        # the fallbacks: both calibrated at the requirements themselves (checked exactly), so that
        # the design is never worse than either at the same epsilon and k (the solver works inside
        # the margins, and where K-ary randomized response is optimal it would lose by the margin)
        fall = retention_meeting(pb.table, pb.combos, epsilon=p.epsilon, k=p.k, alpha=p.alpha)
        fall_joint = retention_meeting(pb.table, pb.combos, epsilon=p.epsilon, k=p.k, alpha=p.alpha, joint=True)
        att = solve_privacy(pb, [(n, s.P) for n, s in starts], eps_s, k_s, a_s, self.trace)
        cands = []
        if att.ok:
            P = att.P.toarray()
            meas = self._privacy_measure(P)
            if not meas["ok"] and R is not None:
                # the solver's tolerance: mix with the start (feasible, strictly inside the margin)
                for t in (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5):
                    Pt = (1.0 - t) * P + t * R
                    mt = self._privacy_measure(Pt)
                    if mt["ok"]:
                        P, meas = Pt, dict(mt, mixed=t)
                        break
            if meas["ok"]:
                cands.append(("optimal", P, meas, l2_loss(sp.csr_matrix(P), pb.counts)))
        for name, f in (("retention-replacement", fall), ("K-ary randomized response", fall_joint)):
            if f.ok:
                cands.append((name, f.P, self._privacy_measure(f.P), f.loss))
        # a singular P meets epsilon and k (equal rows are perfectly private) but has no unbiased
        # estimator: it is never a design
        ok = [c for c in cands if c[2]["ok"] and np.isfinite(c[3])]
        want = ", ".join(f"{n} {v}" for n, v in (("alpha", p.alpha), ("epsilon", p.epsilon), ("k", p.k),
                                                ("min_diagonal", p.min_diagonal)) if v is not None)
        if not ok:
            if att.ok:
                P = att.P.toarray()
                meas = self._privacy_measure(P)
                return self.finish(P, Status.UNVERIFIED, f"The design fails the exact checks of {want}: "
                                   + self._privacy_says(meas) + ".", details=self._privacy_details(meas, fall))
            status = Status.SOLVER_ERROR if att.status is AttemptStatus.SOLVER_ERROR else Status.INFEASIBLE
            return self.identity(status, f"No invertible matrix over the present cells was found that meets {want} "
                                 f"({att.detail or 'no feasible start with a finite loss'}). Relax epsilon, k or "
                                 "alpha.")
        name, P, meas, loss = min(ok, key=lambda c: self._objective(c[1], c[3]))  # change_weights too
        det = self._privacy_details(meas, fall)
        det["tried"] = {c[0]: c[3] for c in cands if c[2]["ok"]}
        why = ("The optimal dense design under " if name == "optimal" else
               f"The {name} matrix (no better design found) under ") + want + ". "
        msg = why + self._privacy_says(meas) + f"; binding: {det['binding']}. All requirements verified exactly."
        return self.finish(P, Status.SUCCESS, msg, solver=att.solver if name == "optimal" else "closed form",
                           loss=loss, details=det)

    def _privacy_measure(self, P) -> dict:
        """The independent checks: C1 (pramopt.verify), Theorem 1's epsilon and Theorem 3's k."""
        from ..risk.privacy import dp_epsilon, pk_ratio

        pb, p = self.problem, self.p
        rep = self.verify(P, "verify")
        eps = dp_epsilon(P)
        ar = pk_ratio(P)
        k = 1.0 + (pb.n - 1) * ar
        ok = rep.max_risk <= pb.alpha
        if p.epsilon is not None:
            ok = ok and eps <= p.epsilon
        if p.k is not None:
            ok = ok and k >= p.k
        if p.min_diagonal is not None:
            ok = ok and float(np.min(np.diag(P))) >= p.min_diagonal
        return {"ok": bool(ok), "max_risk": float(rep.max_risk), "epsilon": float(eps), "k": float(k),
                "pk_ratio": float(ar), "min_diagonal": float(np.min(np.diag(P)))}

    def _privacy_says(self, meas: dict) -> str:
        return (f"measured epsilon {meas['epsilon']:.6g}, k {meas['k']:.6g}, C1 max risk {meas['max_risk']:.6g}, "
                f"smallest diagonal {meas['min_diagonal']:.6g}")

    def _privacy_details(self, meas: dict, start) -> dict:
        p = self.p
        slack = {}
        if p.alpha is not None:
            slack["alpha"] = 1.0 - meas["max_risk"] / p.alpha
        if p.epsilon is not None:
            slack["epsilon"] = 1.0 - meas["epsilon"] / p.epsilon
        if p.k is not None:
            slack["k"] = 1.0 - p.k / meas["k"]
        tight = [n for n, v in slack.items() if v <= 1e-3]
        binding = " and ".join(tight) if tight else f"none (closest: {min(slack, key=slack.get)})"
        return {"epsilon": meas["epsilon"], "k": meas["k"], "pk_ratio": meas["pk_ratio"],
                "c1_max_risk": meas["max_risk"], "epsilon_target": p.epsilon, "k_target": p.k,
                "alpha_target": p.alpha, "slack": slack, "binding": binding, "mixed_with_start": meas.get("mixed", 0.0),
                "retention_replacement": {"rho": [float(r) for r in start.rho], "loss": start.loss,
                                    "epsilon": start.epsilon, "k": start.k, "ok": start.ok}}
    def _small_stratum(self) -> str:
        """Why ``fixed`` (or ``missing="keep"``) forbids every design, when it does: the argument for
        n < 1/alpha, within strata.

        For a combination π, the records that agree on the fixed variables in π (and on which of
        π's values are missing, when missing values are kept) can only move among themselves, and
        every group of π lies within one such set; so the U0-weighted mean over its cells of their
        left-hand sides of C1 is 1 / (its records), and C1 needs at least 1/alpha records in every
        such set.
        """
        pb, t = self.problem, self.problem.table
        fixed = set(pb.fixed_idx)
        keep_missing = self.p.missing == "keep"
        miss_any = pb.missing_pattern.any(axis=0)
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
            where = [f"{t.qi[j]} = {plain(t.categories[j][keys[i][a]])!r}" for a, j in enumerate(shared)]
            where += [f"{t.qi[j]} {'missing' if keys[i][len(shared) + a] else 'not missing'}"
                      for a, j in enumerate(miss)]
            culprit = []
            if shared:
                culprit.append(f"fixed = {list(self.p.fixed)}")
            if miss:
                culprit.append("missing = 'keep'")
            way = ("Merge that stratum with another or fix fewer variables" if shared else
                   "Impute or recode the missing values, or let PRAM change them (missing='category')")
            strict = sizes[i] * pb.alpha < 1 - 1e-12
            return (f"C1 cannot hold for any {'' if strict else 'invertible '}matrix with {' and '.join(culprit)}: the {int(sizes[i])} records with "
                    f"{', '.join(where)} can only move among themselves, and combination {[t.qi[j] for j in pi]} "
                    f"keeps them apart from the others, so some left-hand side of C1 is at least 1/{int(sizes[i])}"
                    + (f" > alpha = {pb.alpha:g}" if strict else
                       f" = alpha = {pb.alpha:g}, reached only if all their cells are released alike (P singular)")
                    + f". {way}.")
        return ""

    def _invariant_hint(self) -> str:
        if not self.p.invariant:
            return ""
        return (" An invariant design fixes every C1 denominator at U_pi(k0), so it needs U_pi(k0) >= 1/(2 alpha) "
                "for every combination present.")

    def blocks(self, reason: str) -> DesignResult:
        """The block structure alone (``structure="blocks"``)."""
        c = self._blocks()
        if c is None:
            return self.unverified(reason) or self.identity(
                Status.INFEASIBLE, f"{reason} No block design satisfied C1. {self._forbidden()}")
        return self._finish(c, reason)

    def unverified(self, reason: str) -> DesignResult | None:
        """UNVERIFIED, when a design was made but failed the full check at every margin."""
        if self._unverified is None:
            return None
        P, rep, margin = self._unverified
        return self.finish(P, Status.UNVERIFIED, f"{reason} The block design failed the full C1 check at every margin "
                           f"tried, up to {margin:g} (max risk {rep.max_risk:.8g} > alpha = {self.problem.alpha:g}).",
                           report=rep)

    def replacement(self, reason: str) -> DesignResult:
        """The replacement structure alone (``structure="replacement"``)."""
        c = self._replacement()
        if c is None:
            floor = max(0.001, self.p.min_diagonal or 0.0)
            return self.identity(Status.INFEASIBLE, reason + " No replacement design satisfied C1 (the flow "
                                 f"relaxation leaves no retention of at least {floor:g} at any margin tried).")
        return self._finish(c, reason)

    def rare(self, reason: str) -> DesignResult:
        """No general design exists (or none was found): the better of blocks and replacement
        (blocks only up to ``BLOCKS_AUTO_MAX_CELLS`` cells and ``BLOCKS_AUTO_MAX_ROWS`` rows, or when there
        is no replacement design)."""
        found = [c for c in (self._replacement(),) if c is not None]
        if not found or self._blocks_affordable():
            found += [c for c in (self._blocks(),) if c is not None]
        if not found:
            found = [c for c in (self._uniform(),) if c is not None]
        if not found and self.problem.max_changed is not None:
            return self.unverified(reason) or self.identity(
                Status.INFEASIBLE, f"{reason} The replacement and block designs, which need no floor, move records "
                f"between cells that differ in more than max_changed_variables = {self.p.max_changed_variables} "
                "variables.")
        if not found:
            return self.unverified(reason) or self.identity(
                Status.INFEASIBLE, f"{reason} No block or replacement design satisfied C1 either. {self._forbidden()}")
        return self._finish(min(found, key=self._score), reason, others=found)

    def _blocks_affordable(self) -> bool:
        """Whether auto mode also makes the block design (seconds below these sizes, minutes above)."""
        return self.problem.K <= BLOCKS_AUTO_MAX_CELLS and self.problem.rare_rows <= BLOCKS_AUTO_MAX_ROWS

    def _finish(self, c: "_Candidate", reason: str, others=()) -> DesignResult:
        also = "; ".join(f"{o.name} loss {o.loss:.4g}" for o in others if o is not c)
        with self.trace.stage("changes bound") as info:
            # evidence of optimality: no design meeting C1 changes fewer records in expectation
            # (one program over the whole table: not attempted where even the floor's is too large)
            used = bound_combinations(self.problem, CHANGES_BOUND_MAX_ROWS)
            lb = changes_bound(self.problem, self.p.min_diagonal or 0.0, combinations=used) if used else None
            of = "" if len(used) == len(self.problem.combos) else f" (rows of {len(used)} of {len(self.problem.combos)} combinations)"
            info["detail"] = ("unknown" if lb is None else
                              f"every design changes >= {lb:.4g} records in expectation{of}")
        details = {"expected_changes_lower_bound": lb, "lower_bound_combinations": len(used),
                   # the bound holds where P^-1 has a diagonal >= 1 (see loss_bound): the replacement
                   # structures by their form, a general design by strict diagonal dominance
                   "loss_lower_bound": (loss_bound(lb, self.problem.counts)
                                        if c.name != "general" or c.P.diagonal().min() > 0.5 else None),
                   "tried": {o.name: o.loss for o in others}}
        return self.finish(c.P, Status.SUCCESS, f"{reason} {c.describe}".strip() + (f" (also tried: {also})." if also else
                           "") + " Full C1 verified.", c.gamma, c.reduction, c.solver, c.report, c.loss, c.condition,
                           details)

    def _score(self, c: "_Candidate") -> float:
        """What auto mode compares: the exact loss, plus the change_weights term when given."""
        return self._objective(c.P, c.loss)

    def _objective(self, P, loss: float) -> float:
        """The objective of a matrix of exact loss ``loss``: the loss, plus the change_weights term."""
        obj = self.problem.objective
        return loss + obj.term(P, self.problem.counts) if hasattr(obj, "term") else loss

    def _beyond_distance(self, name: str, pools) -> bool:
        """Whether ``max_changed_variables`` rules this structure out (pools of cells farther apart);
        the trace says so."""
        if pools is not None and self.problem.pools_within_distance(pools):
            return False
        if self.problem.max_changed is None:
            return False
        self.trace.add(name, 0.0, 0, f"skipped: its pools hold cells that differ in more than "
                                     f"max_changed_variables = {self.p.max_changed_variables} variables")
        return True

    def _blocks(self) -> "_Candidate | None":
        if self._beyond_distance("blocks", None):
            return None
        for margin in _margins(self.p.margin):
            best, failed = solve_blocks(self.problem, self.problem.alpha * (1.0 - margin), self.trace, self.verify)
            if best is not None or failed is None:
                break
            self._unverified = (*failed, margin)  # the solver's tolerance: a larger margin may mend it
        if best is None:
            return None
        att, rep, f = best
        obj = self.problem.objective
        if hasattr(obj, "term"):  # solve_blocks ranks by the whole objective; a candidate carries the exact loss
            f -= obj.term(att.P, self.problem.counts)
        r = att.reduction
        return _Candidate("blocks", att.P, rep, f, None, r, att.solver, None,
                          f"A block-diagonal retention-replacement design was made ({r.blocks} blocks of at least "
                          f"{r.block_target_records:g} records; P_b = lambda I + 1 v^T is invertible for any lambda > 0).")

    def _replacement(self) -> "_Candidate | None":
        if self._beyond_distance("replacement", self.problem.strata):
            return None
        found = solve_replacement(self.problem, self.trace, self.verify)
        if found is None:
            return None
        att, rep, f, cond = found
        r = att.reduction
        return _Candidate("replacement", att.P, rep, f, cond, r, att.solver, None,
                          f"A replacement design was made (each cell keeps its records with probability >= "
                          f"{r.min_lambda:.3g} and otherwise draws from one replacement distribution per "
                          f"{'stratum' if r.block_target_records is None else 'block'}; invertible for any "
                          "retention).")

    def _uniform(self) -> "_Candidate | None":
        if self._beyond_distance("uniform", self.problem.strata):
            return None
        def check(P):  # the bisection's checks are not stages of their own
            return verify_stage(P, self.problem.table, self.problem.combos, "verify")[0]
        found = solve_uniform(self.problem, self.trace, check)
        if found is None:
            return None
        att, rep, f, cond = found
        return _Candidate("uniform", att.P, rep, f, cond, att.reduction, None, None,
                          f"A uniform replacement design was made (each cell keeps its records with probability "
                          f"{att.reduction.min_lambda:.3g} and otherwise draws a record of its stratum at random; "
                          "invertible for any retention).")

    def _forbidden(self) -> str:
        """Which option rules out every design, by the flow relaxation of C1 (a relaxation: when it
        has no solution, or caps the diagonal floor below ``min_diagonal``, no design exists)."""
        pb, p = self.problem, self.p
        floor = p.min_diagonal or 0.0
        sol = flow_relaxation(pb)
        if sol.status == "ok" and sol.t >= floor - RELAXATION_TOL:
            return (f"The flow relaxation of C1 does not rule a design out (it allows diagonal floors up to "
                    f"{sol.t:.4g}); {_ADVICE[0].lower()}{_ADVICE[1:]}")
        if sol.status not in ("ok", "infeasible"):
            return _ADVICE
        if sol.status == "ok":  # feasible, but below the floor asked for
            return (f"min_diagonal = {floor:g} rules out every design: the flow relaxation of C1 bounds every "
                    f"diagonal floor by {sol.t:.4g}.")
        named = []
        for name, off in (("keep_cells", None), ("fixed", None), ("invariant", False)):
            if getattr(p, name) in (None, False, ()):
                continue
            other = DesignProblem.build(pb.table, pb.combos, dataclasses.replace(p, **{name: off}), "design")
            alt = flow_relaxation(other)
            if alt.status == "ok" and alt.t >= floor - RELAXATION_TOL:
                named.append(name)
        if not named:
            return f"The options together rule out every design (the flow relaxation of C1 has no solution). {_ADVICE}"
        extra = ""
        if "fixed" in named:
            sizes = np.bincount(pb.strata, weights=pb.counts)
            extra = (f" Its smallest stratum holds {int(sizes.min())} records (C1 needs the records a cell can be "
                     f"confused with to number at least 1/alpha = {1 / pb.alpha:g}).")
        if len(named) == 1:
            return (f"{named[0]} rules out every design: the flow relaxation of C1 has no solution with it, and has "
                    f"one without it.{extra}")
        return (f"{' and '.join(named)} together rule out every design: the flow relaxation of C1 has no solution with "
                f"them, and has one without any one of them.{extra}")

    def _distance_rules_out(self, floor: float) -> tuple[str, int | None]:
        """Why ``max_changed_variables`` leaves no design, and the smallest value the flow relaxation
        of C1 allows a floor >= ``floor`` with (None: none does).

        Two arguments, both independent of the solver that failed: the counting one, C1's
        ``P_mm <= alpha D_g`` with ``D_g`` at most the records within distance d of group g (every
        record released into g comes from a cell at most d variables from one of g's cells); and the
        flow relaxation with only the permitted transitions (:func:`.relaxation.flow_relaxation`), a
        bound on every diagonal floor.
        """
        pb, p = self.problem, self.p
        d = p.max_changed_variables
        parts = []
        count = self._reach_argument(floor)
        if count:
            parts.append(count)
        sol = flow_relaxation(pb)
        if sol.status == "ok":
            parts.append(f"With max_changed_variables = {d} the flow relaxation of C1 bounds every diagonal floor by "
                         f"{sol.t:.4g}" + (f" (< {floor:g})" if sol.t < floor - RELAXATION_TOL else "") + ".")
        elif sol.status == "infeasible":
            parts.append(f"With max_changed_variables = {d} the flow relaxation of C1 has no solution.")
        free = d + 1
        while True:
            q = dataclasses.replace(p, max_changed_variables=free)
            other = DesignProblem.build(pb.table, pb.combos, q, "design")
            alt = flow_relaxation(other)
            if alt.status == "ok" and alt.t >= floor - RELAXATION_TOL:
                vacuous = other.max_changed is None
                parts.append(f"The smallest max_changed_variables the flow relaxation allows a floor >= {floor:g} with "
                             f"is {free}" + (" (no restriction)" if vacuous else f" (floor up to {alt.t:.4g})") + ".")
                return " ".join(parts), free
            if other.max_changed is None:
                break
            free += 1
        unrestricted = f"bounds it by {alt.t:.4g}" if alt.status == "ok" else f"says {alt.status}"
        parts.append(f"No max_changed_variables allows a floor >= {floor:g} (the flow relaxation without it "
                     f"{unrestricted}); without it the replacement and block designs, which need no floor, apply.")
        return " ".join(parts), None

    def _reach_argument(self, floor: float) -> str:
        """The counting argument: a group whose records within distance d cannot reach floor/alpha."""
        pb = self.problem
        pairs = pb.allowed_pairs(10_000_000)
        if pairs is None:
            return ""
        K, G = pb.K, pb.groups.n_groups
        A = sp.csr_matrix((np.ones(pairs[0].size + K), (np.concatenate([pairs[0], np.arange(K)]),
                                                       np.concatenate([pairs[1], np.arange(K)]))), shape=(K, K))
        nP = pb.groups.member.shape[1]
        M = sp.csr_matrix((np.ones(K * nP), (np.repeat(np.arange(K), nP), pb.groups.member.ravel())), shape=(K, G))
        reach = np.asarray(((A @ M) > 0).astype(float).T @ pb.counts).ravel()  # records that can end in g
        rare = pb.counts < 1.0 / pb.alpha
        has_rare = np.asarray(M[rare].sum(axis=0)).ravel() > 0
        short = np.flatnonzero(has_rare & (reach * pb.alpha < floor - 1e-12))
        if short.size == 0:
            return ""
        g = int(short[np.argmin(reach[short])])
        ci = int(np.flatnonzero((pb.groups.member == g).any(axis=0))[0])
        m = int(np.flatnonzero(pb.groups.member[:, ci] == g)[0])
        t = pb.table
        vals = ", ".join(f"{t.qi[j]} = {plain(t.categories[j][t.codes[m, j]])!r}" for j in pb.combos[ci])
        return (f"Only {reach[g]:g} records lie within {self.p.max_changed_variables} changed variable(s) of the group "
                f"{vals}, which holds a rare cell: C1 needs P_mm <= alpha * (records released into the group), so "
                f"P_mm <= {pb.alpha:g} * {reach[g]:g} = {pb.alpha * reach[g]:.4g} < {floor:g} for that cell "
                f"({short.size} such group(s)).")

    def general(self, floor: float, g_low: float, auto_blocks: bool) -> DesignResult:
        """Phase one, then the gamma ladder; the margin grows if verification ever fails."""
        pb, p, trace = self.problem, self.p, self.trace
        alpha = pb.alpha
        last_msg = ""
        for margin in _margins(p.margin):
            a_solve = alpha * (1.0 - margin)
            ph = largest_floor(pb, g_low, floor, a_solve, trace)
            if ph.status == "unproven":
                trace.add("phase1", ph.seconds, 0, f"no floor >= {g_low:g} found on its support (not proven)")
                allows = "" if self.relax is None else f" (the flow relaxation allows floors up to {self.relax:.4g})"
                why = (f"Phase one found no design with every diagonal entry >= {g_low:g} within its pricing rounds; "
                       f"one may exist{allows}.")
                if auto_blocks:
                    return self.rare(why)
                # a replacement design whose every diagonal entry clears the floor is a general
                # design too (verified like any other): a floor phase one did not find
                found = self._replacement()
                low = float(found.P.diagonal().min()) if found is not None else -np.inf
                if low >= g_low:
                    return self._finish(found, f"{why} The replacement design keeps every diagonal entry >= "
                                        f"{low:.4g}, so it is a general design at that floor; it is returned.")
                return self.identity(Status.INFEASIBLE, f"{why} {_ADVICE}", g_low)
            infeasible = ph.status == "infeasible" or (ph.status == "ok" and ph.t < g_low - 1e-9)
            if infeasible:
                trace.add("phase1", ph.seconds, 0, "infeasible")
                if auto_blocks:
                    return self.rare(f"No design with every diagonal entry >= {g_low:g} satisfies C1 (phase one).")
                return self.identity(Status.INFEASIBLE,
                                     f"No design satisfies C1 with every diagonal entry >= {g_low:g} (needed to keep "
                                     f"P invertible).{self._invariant_hint()} {_ADVICE}", g_low)
            if ph.status != "ok":
                trace.add("phase1", ph.seconds, 0, ph.status)
                return self.identity(Status.SOLVER_ERROR, f"Solver failed: {ph.status}.", g_low)
            trace.add("phase1", ph.seconds, 0, f"largest feasible floor {ph.t:.4g}")
            # t may sit up to PHASE1_TIEBREAK below the largest floor; a rung just above the
            # true largest floor is found infeasible by the linear stage and the next one is tried
            ladder = [g for g in _gamma_ladder(p.gamma, floor) if g <= ph.t + PHASE1_TIEBREAK] or [g_low]
            tried = []
            for gam in ladder:
                init = ph.support if supports(p.solver, "duals") else None  # a priced support
                att = solve_general(pb, gam, max(gam, floor), a_solve, trace, init=init)
                tried.append(gam)
                if att.status is AttemptStatus.INFEASIBLE:
                    continue
                if not att.ok:
                    return self.identity(Status.SOLVER_ERROR, f"Solver failed: {att.detail}.", gam, att.reduction)
                why = f"Diagonal floor gamma = {gam:g}"
                if gam < p.gamma:
                    why += (f": the reduced problem is infeasible at gamma = {p.gamma:g} (the largest feasible "
                            f"floor is {ph.t:.4g}), so gamma was lowered as the paper suggests.")
                else:
                    why += " (as requested)."
                rep = self.verify(att.P)
                if rep.max_risk <= alpha:
                    general = _Candidate("general", att.P, rep, l2_loss(att.P, pb.counts), None, att.reduction,
                                         att.solver, gam, why + f" Solved at alpha*(1-{margin:g}).")
                    # the structures that need no floor, made in seconds, may still have the smaller
                    # loss (by loss: without the refinement the general design minimises changes instead)
                    others = []
                    if auto_blocks and p.refine_loss:
                        others = [c for c in (self._replacement(), self._blocks() if self._blocks_affordable()
                                              else None) if c is not None]
                    best = min([general, *others], key=self._score)
                    if best is not general:
                        return self._finish(best, f"The {best.name} design has a smaller loss than the general "
                                            "design.", others=[general, *others])
                    return self._finish(general, "", others=[general, *others])
                last_msg = f"verification failed (max risk {rep.max_risk:.8g} > {alpha:g}) at margin {margin:g}"
                break
            else:
                return self.identity(Status.INFEASIBLE,
                                     f"No design satisfies C1 with a diagonal floor in {', '.join(f'{g:g}' for g in tried)}. "
                                     f"{_ADVICE}", tried[-1] if tried else None)
        return self.finish(att.P, Status.UNVERIFIED, last_msg, tried[-1], att.reduction, att.solver, rep)
