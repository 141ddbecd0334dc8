"""The optimal PRAM designer: validate, make the candidates, verify them, finish.

data -> frequency table -> :class:`~.problem.DesignProblem` -> the strategies
(:mod:`.strategies`, chosen by ``structure`` or by auto mode's policy, :mod:`.auto`) -> the
independent check of every matrix kept (:mod:`pramopt.verify`) -> a
:class:`~pramopt.DesignResult` (:func:`pramopt.verified_result.finish`).

A design that fails the check at every margin (:func:`.auto.margins`) is reported UNVERIFIED,
never INFEASIBLE; why no design exists is said by :mod:`.diagnosis`; designs under epsilon and k
are made by :mod:`.epsilon_k`.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import warnings

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice
from ..errors import InvalidParameterError, LargeProblemWarning
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, frequency_table, refuse_string_qi
from ..loss import DENSE_MAX, l2_loss
from ..params import GAMMA_LADDER, DesignParams, parameters_doc, signature
from ..result import DesignResult, Status
from ..verified_result import finish
from ..verify import C1Report
from .auto import AUTO, Candidate, figures, margins, pick
from .diagnosis import (
    check_structure,
    explain_max_changed,
    forbidden,
    optimality_bounds,
    small_stratum,
)
from .epsilon_k import check_options, design_epsilon_k
from .objectives.l2 import SparseL2
from .problem import DesignProblem, ProgressFn
from .strategies import AttemptStatus, strategy
from .strategies.checks import CheckedTrace, check
from .support import hold_floor

__all__ = ["design", "GAMMA_LADDER"]

LOG = logging.getLogger("pramopt.design")

#: Above this many rows of the reduced C1 the designer warns before it starts
#: (see LargeProblemWarning).
LARGE_PROBLEM_ROWS = 1_000_000
#: Present cells above which a design is announced as large before any work (census-shaped data
#: of 47,000 cells take minutes; see benchmarks/README.md).
LARGE_PROBLEM_CELLS = 200_000

#: Above this many cells, or rows of C1 for rare cells, the command line announces that the design
#: may take minutes before it starts (on testdata's 7 keys, 412 cells, it takes about a minute).
ANNOUNCE_CELLS, ANNOUNCE_ROWS = 300, 100_000


def design(
    data,
    qi=None,
    alpha: float | None = DesignParams.alpha,
    *,
    progress: ProgressFn | None = None,
    client=None,
    **options,
) -> DesignResult:
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
    refuse_string_qi(qi, owner)  # before any kind of design takes it for a list of letters
    params = DesignParams.from_options(owner, alpha=alpha, **options)
    if progress is not None and not callable(progress):
        raise InvalidParameterError(
            f"The 'progress' parameter of {owner} must be a callable or None; got {progress!r}."
        )
    if params.solver is not None and params.solver != "HIGHS":
        from .backends import known_solvers  # imports cvxpy: only when a cvxpy solver is named

        check_choice(params.solver, "solver", owner, known_solvers())
    from ..kinds import kind_for  # kinds of design other than the record-level one

    kind = kind_for(params)
    if kind is not None:  # e.g. households: household-level keys once per household
        return kind.design(data, qi, params, design, progress=progress, client=client, owner=owner)
    table, combos = table_and_combinations(data, qi, params, owner)
    if table.n_cells > LARGE_PROBLEM_CELLS:
        # before the model is built: at this size that alone takes minutes
        warnings.warn(
            LargeProblemWarning(
                f"{table.n_cells:,} present cells of {len(table.qi)} identifying variables (more "
                f"than {LARGE_PROBLEM_CELLS:,}): the design may take many minutes and gigabytes. "
                "Coarser variables (fewer categories: a lower max_categories refuses the finest), "
                "fewer identifying variables or a fixed variable that splits the data make it "
                "smaller."
            ),
            stacklevel=2,
        )
    if params.epsilon is not None or params.k is not None:
        check_options(params, table, owner)
    if (params.workers is not None or client is not None) and not params.fixed:
        given = f"workers={params.workers}" if params.workers is not None else "a client"
        raise InvalidParameterError(
            f"The 'workers' and 'client' parameters of {owner} design the strata of 'fixed' "
            f"apart; got {given} without fixed variables."
        )
    if params.workers is not None or client is not None:
        from .strata import (  # independent designs per stratum of `fixed`
            check_client,
            design_strata,
        )

        res = design_strata(
            design,
            table,
            combos,
            params,
            client=check_client(client, owner),
            progress=progress,
            owner=owner,
        )
        if res is not None:
            return res
    trace = CheckedTrace(progress)
    with trace.stage("model") as info:
        problem = DesignProblem.build(table, combos, params, owner)
        info["detail"] = (
            f"{problem.groups.n_groups} (pi, k0) groups, {problem.rare_rows} rows of C1 for rare "
            "cells"
        )
    _say_size(problem, table, combos)
    return _Designer(problem, trace).run()


def _say_size(problem: DesignProblem, table, combos) -> None:
    """Before the work: announce a design that may take minutes, and warn of one whose C1 has
    more rows than a design should (:class:`LargeProblemWarning`)."""
    if table.n_cells > ANNOUNCE_CELLS or problem.rare_rows > ANNOUNCE_ROWS:
        LOG.info(
            "%d cells and %d rows of C1 for rare cells: the design may take minutes; each stage "
            "is shown as it finishes",
            table.n_cells,
            problem.rare_rows,
            extra={"announce": True},
        )
    if problem.rare_rows > LARGE_PROBLEM_ROWS and table.n_cells <= LARGE_PROBLEM_CELLS:
        # before minutes of work: say what makes it large and how to make it smaller
        rare = problem.rare_rows // len(combos)
        warnings.warn(
            LargeProblemWarning(
                f"{len(combos)} combinations of {len(table.qi)} identifying variables and {rare} "
                "rare cells give "
                f"{problem.rare_rows:,} rows of C1 (more than {LARGE_PROBLEM_ROWS:,}): the design "
                "may take many minutes "
                "and gigabytes. A smaller combination_size, an explicit list of combinations or "
                "coarser variables "
                "make it smaller."
            ),
            stacklevel=3,  # the caller of design()
        )


assert design.__doc__ is not None  # None only under python -OO, which fails here anyway
design.__doc__ = design.__doc__.replace("{parameters}", parameters_doc())
design.__signature__ = signature(  # type: ignore[attr-defined]  # read by inspect.signature
    design,
    before=[
        inspect.Parameter("data", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("qi", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        inspect.Parameter(
            "alpha", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DesignParams.alpha
        ),
    ],
    after=[
        inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("client", inspect.Parameter.KEYWORD_ONLY, default=None),
    ],
)


def table_and_combinations(data, qi, params: DesignParams, owner: str):
    """The frequency table of ``data`` (as given, when it is one) and the combinations Π that
    ``params`` ask for: what every design over the same data and options starts from."""
    if isinstance(data, FrequencyTable):
        table = data
    else:
        table = frequency_table(
            data, qi, domains=params.domains, max_categories=params.max_categories, owner=owner
        )
    return table, resolve_combinations(
        table.qi, params.combination_size, params.combinations, owner
    )


class _Designer:
    """One run of :func:`design` on a problem: the candidates, the retries and the result."""

    def __init__(self, problem: DesignProblem, trace: CheckedTrace):
        self.problem, self.trace, self.p = problem, trace, problem.params
        # (P, report, margin) of a block design that failed the check
        self._unverified: tuple[object, C1Report, float] | None = None
        # the structures beside the general design, when made before it
        self._beside: list[Candidate] | None = None

    def finish(self, c: Candidate, status: Status, message: str, details=None) -> DesignResult:
        pb = self.problem
        return finish(
            c.P,
            pb.table,
            pb.combos,
            pb.alpha,
            status,
            message,
            stages=self.trace.stages,
            gamma=c.gamma,
            reduction=c.reduction,
            solver=c.solver,
            report=c.report,
            params=self.p.to_dict(),
            loss=c.loss,
            condition=c.condition,
            details=details,
        )

    def identity(self, status: Status, message: str, gamma=None, reduction=None) -> DesignResult:
        return self.finish(Candidate.identity(self.problem.K, gamma, reduction), status, message)

    def run(self) -> DesignResult:
        res = self._run()
        if res.status is Status.INFEASIBLE and self.problem.max_changed is not None:
            res = explain_max_changed(self.problem, self.trace, res)
        return res

    def _run(self) -> DesignResult:
        pb, p = self.problem, self.p
        check_structure(pb)
        # C1 can hold for no P at all when n < 1/alpha: the U0-weighted mean of the left-hand
        # sides over m is 1/n for every (π, k0), so the largest is at least 1/n.
        if pb.n * pb.alpha < 1:
            return self.identity(
                Status.INFEASIBLE_DATA,
                f"C1 cannot hold for any matrix: n = {pb.n} < 1/alpha = {1 / pb.alpha:g}.",
            )
        small = small_stratum(pb)
        if small:
            return self.identity(Status.INFEASIBLE, small)
        if p.epsilon is not None or p.k is not None:
            return design_epsilon_k(pb, self.trace, self.finish)
        # Nothing to do when the original data already satisfy C1 (P = I).
        eye = sp.identity(pb.K, format="csr")
        rep = check(pb, self.trace, eye, "check P=I")
        if rep.max_risk <= pb.alpha:
            return self.finish(
                Candidate("identity", eye, rep),
                Status.SUCCESS,
                "The data already satisfy C1: P = I.",
            )
        if p.structure not in ("auto", "general"):
            return self.alone(p.structure, f"{strategy(p.structure).label} structure requested.")
        # every structure honours every option (the floor, strata, kept cells, invariance), so
        # auto mode may always turn to the structures that need no floor above 1/2
        skip = AUTO.skips_general(pb, self._floor_bound()) if p.structure == "auto" else None
        return self.without_general(skip) if skip else self.general(p.structure == "auto")

    def _floor_bound(self) -> float | None:
        """Above the cells of the general design with phase one and up to
        ``FLOOR_PROOF_MAX_CELLS`` (without ``max_changed_variables``): the flow relaxation's bound
        on every floor, once per design (the general design's own stage then reuses it)."""
        from .auto import FLOOR_PROOF_MAX_CELLS, GENERAL_AUTO_MAX_CELLS
        from .strategies.checks import once
        from .strategies.phase_one import floor_bound_stage

        pb = self.problem
        if not GENERAL_AUTO_MAX_CELLS < pb.K <= FLOOR_PROOF_MAX_CELLS or pb.max_changed is not None:
            return None
        return once(self.trace, "floor bound", lambda: floor_bound_stage(pb, self.trace))

    def general(self, auto: bool) -> DesignResult:
        """The general design at each margin until one passes the check; in auto mode beside
        the structures of ``AUTO.beside``, or, where there is none, those that need no floor."""
        pb = self.problem
        if auto and self.p.refine_loss:
            done = self._general_from_start()
            if done is not None:
                return done
        for margin in margins(self.p.margin):
            att = strategy("general").solve(pb, pb.alpha * (1.0 - margin), self.trace)
            if auto and att.auto_reason is not None:
                return self.without_general(att.auto_reason)
            if att.status is AttemptStatus.UNPROVEN:
                return self._replacement_as_general(att)
            if not att.ok:
                failed = Status.INFEASIBLE if att.status is AttemptStatus.INFEASIBLE else None
                return self.identity(
                    failed or Status.SOLVER_ERROR, att.detail, att.gamma, att.reduction
                )
            general = self._candidate("general", att, f" Solved at alpha*(1-{margin:g}).")
            assert general.report is not None  # _candidate checks every matrix
            if general.report.max_risk <= pb.alpha:
                # the structures that need no floor, made in seconds, may still have the smaller
                # loss (by loss: without the refinement the general design minimises changes)
                others: list[Candidate] = []
                if auto and self.p.refine_loss:
                    others = self._beside or self._candidates(AUTO.beside)
                return self._finish_best([general, *others], "")
            last = (
                f"verification failed (max risk {general.report.max_risk:.8g} > "
                f"{pb.alpha:g}) at margin {margin:g}"
            )
        return self.finish(dataclasses.replace(general, loss=None), Status.UNVERIFIED, last)

    def _general_from_start(self) -> DesignResult | None:
        """Auto mode where a structure that needs no floor clears a rung of the floor's ladder
        (:func:`.strategies.general_start.start_for`): those structures first, then the general
        design refined from the best of them, never to a larger loss; None where auto mode makes
        the general design as usual (the structures made are kept for it)."""
        from .strategies.general_start import START_MIN_CELLS, refine_from, start_for

        pb = self.problem
        if pb.K <= START_MIN_CELLS or pb.max_changed is not None:
            return None
        others = self._beside = self._candidates(AUTO.beside)
        start, gamma = start_for(pb, others, self._score)
        if start is None:
            return None
        for margin in margins(self.p.margin):
            level = pb.alpha * (1.0 - margin)
            att = refine_from(pb, level, self.trace, start.P, gamma, start.name)
            general = self._candidate("general", att, f" Solved at alpha*(1-{margin:g}).")
            assert general.report is not None  # _candidate checks every matrix
            if general.report.max_risk <= pb.alpha:
                return self._finish_best([general, *others], "")
        # the start itself passed the check: it stands for the general design
        return self._finish_best(others, "")

    def _replacement_as_general(self, att) -> DesignResult:
        """Phase one found no floor, and proved none impossible: a replacement design whose every
        diagonal entry clears the floor is a general design too (verified like any other)."""
        found, _ = self.candidate("replacement")
        low = float(found.P.diagonal().min()) if found is not None else -np.inf
        if low >= att.gamma:
            return self._finish(
                found,
                f"{att.auto_reason} The replacement design keeps every "
                f"diagonal entry >= {low:.4g}, so it is a general design at that "
                "floor; it is returned.",
            )
        return self.identity(Status.INFEASIBLE, att.detail, att.gamma)

    def without_general(self, reason: str) -> DesignResult:
        """No general design exists (or none was found): the best of ``AUTO.without``, else the
        first of ``AUTO.last_resort`` found."""
        # (those made beside a general design that was then not found are the same structures)
        found = self._beside or self._candidates(AUTO.without)
        for rule in AUTO.last_resort if not found else ():
            found = found or self._candidates((rule,))
        if found:
            return self._finish_best(found, reason)
        if self.problem.max_changed is not None:
            why = (
                f"{reason} The replacement and block designs, which need no floor, move records "
                "between cells that differ in more than max_changed_variables = "
                f"{self.p.max_changed_variables} variables."
            )
        else:
            why = (
                f"{reason} No block or replacement design satisfied C1 either. "
                f"{forbidden(self.problem)}"
            )
        return self.unverified(reason) or self.identity(Status.INFEASIBLE, why)

    def alone(self, name: str, reason: str) -> DesignResult:
        """One structure alone (``structure=name``)."""
        c, att = self.candidate(name)
        if c is not None:
            return self._finish(c, reason)
        if name == "blocks":  # the diagnosis runs only when no block design was made at all
            return self.unverified(reason) or self.identity(
                Status.INFEASIBLE, f"{reason} {att.detail} {forbidden(self.problem)}"
            )
        return self.unverified(reason) or self.identity(Status.INFEASIBLE, f"{reason} {att.detail}")

    def unverified(self, reason: str) -> DesignResult | None:
        """UNVERIFIED, when a design was made but failed the full check at every margin."""
        if self._unverified is None:
            return None
        P, rep, margin = self._unverified
        return self.finish(
            Candidate("blocks", P, rep),
            Status.UNVERIFIED,
            f"{reason} The block design failed the full C1 check at every margin "
            f"tried, up to {margin:g} (max risk {rep.max_risk:.8g} > alpha = "
            f"{self.problem.alpha:g}).",
        )

    def candidate(self, name: str) -> tuple:
        """``(candidate, attempt)``: the verified design of structure ``name`` (None: none) and
        the strategy's last answer; a matrix that fails the check is solved again at a larger
        margin (the solver's tolerance)."""
        pb = self.problem
        for margin in margins(self.p.margin):
            att = strategy(name).solve(pb, pb.alpha * (1.0 - margin), self.trace)
            if not att.ok:
                return None, att
            c = self._candidate(name, att)
            assert c.report is not None  # _candidate checks every matrix
            if c.report.max_risk <= pb.alpha:
                return c, att
            self._unverified = (c.P, c.report, margin)
        return None, att

    def _candidate(self, name: str, att, solved: str = "") -> Candidate:
        """The attempt's matrix with its full C1 check (free when the strategy checked it), its
        diagonal raised to ``min_diagonal`` exactly where a solver left it a hair below."""
        P = self._held(att.P)
        exact = P is att.P  # the strategy's closed forms describe its own matrix only
        if att.loss is not None and exact:
            loss = att.loss
        elif name == "general" and sp.issparse(P) and P.shape[0] > DENSE_MAX:
            # few receiver columns: the Woodbury form, where the sparse LU of the whole matrix
            # took minutes on 22,670 cells (the same number up to rounding)
            loss = SparseL2(P, self.problem.counts).loss
        else:
            loss = l2_loss(P, self.problem.counts)
        return Candidate(
            name,
            P,
            check(self.problem, self.trace, P),
            loss,
            att.condition if exact else None,
            att.reduction,
            att.solver,
            att.gamma,
            att.describe + solved,
        )

    def _held(self, P):
        """``P`` with every diagonal entry at least ``min_diagonal`` (:func:`.support.hold_floor`),
        the entries raised said in the trace."""
        floor = self.p.min_diagonal
        held = hold_floor(P, floor)
        if held is not P:
            assert floor is not None  # hold_floor changes nothing without a floor
            low = np.asarray(P.diagonal(), dtype=float)
            self.trace.add(
                "min_diagonal",
                0.0,
                0,
                f"{int(np.count_nonzero(low < floor))} diagonal entries raised to {floor:g} (by "
                f"at most {floor - float(low.min()):.3g}) from their rows' off-diagonal entries",
            )
        return held

    def _candidates(self, rules) -> list:
        """The verified designs of the structures ``rules`` admit, in their order."""
        found: list[Candidate] = []
        for rule in rules:
            if rule.admits(self.problem, bool(found)):
                c, _ = self.candidate(rule.structure)
                found += [c] if c is not None else []
        return found

    def _finish_best(self, found: list, reason: str) -> DesignResult:
        """The candidate auto mode picks (:func:`~.auto.pick`), with every candidate's figures."""
        table = {c.name: figures(c, self.problem, self._score(c)) for c in found}
        name, why = pick([c.name for c in found], table)
        best = next(c for c in found if c.name == name)
        if not why and len(found) > 1:
            why = f"The {name} design has the smallest objective."
        return self._finish(best, f"{reason} {why}".strip(), others=found, table=table)

    def _finish(self, c: Candidate, reason: str, others=(), table=None) -> DesignResult:
        also = "; ".join(f"{o.name} loss {o.loss:.4g}" for o in others if o is not c)
        details = {
            **optimality_bounds(self.problem, self.trace, c),
            "tried": {o.name: o.loss for o in others},
        }
        if table and len(table) > 1:
            details["candidates"] = table
        message = (
            f"{reason} {c.describe}".strip()
            + (f" (also tried: {also})." if also else "")
            + " Full C1 verified."
        )
        return self.finish(c, Status.SUCCESS, message, details)

    def _score(self, c: Candidate) -> float:
        """What the candidates are ranked by: the whole objective (the exact loss, plus the
        change_weights term when given)."""
        return self.problem.objective.value(c.P, self.problem.counts, loss=c.loss)
