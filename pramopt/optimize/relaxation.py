"""The flow relaxation of C1: how many records each cell sends out and receives.

A matrix P is summarised by ``out_k = U0(k) (1 - P_kk)``, the records cell k sends to other
cells, and ``in_k = sum_{l != k} U0(l) P_lk``, the records it receives.  Every released count
is then exact, ``E_k = U0(k) - out_k + in_k``, and so is every denominator of C1,
``D_g = sum_{k in g} E_k``.  Records are conserved (``sum in = sum out`` within each pool of
cells that may exchange records: the whole table, a stratum of the fixed variables, a block;
``in_k = out_k`` for an invariant design) and kept cells send nothing.  With
``max_changed_variables`` the flows ``f_kl = U0(k) P_kl`` of the permitted transitions are variables
too (``out_k = sum_l f_kl``, ``in_k = sum_l f_lk``), so that records go only where a design may send
them.  Of C1's rows it keeps, for every rare cell m (U0(m) < 1/alpha: the other rows always hold,
bound (2)) and every group g of m, ``P_mm <= S[m, g] <= alpha D_g``, that is
``alpha D_g + out_m / U0(m) >= 1``.  A diagonal floor t needs ``out_k <= (1 - t) U0(k)``.

Two uses:

* **A bound.**  Every P satisfying C1 with all P_kk >= t gives a feasible point with the same t,
  so the program's largest t bounds every diagonal floor from above (:func:`floor_bound`), far
  more cheaply than phase one on rare-heavy data.
* **A lower bound on the expected number of changed records.**  ``sum_k out_k`` is exactly the
  expected number of changed records of P, so the relaxation's smallest ``sum out``
  (:func:`changes_bound`) is at most that of every design satisfying C1 (with the same options):
  evidence of how far a design's expected changes can be from the best possible.
* **A design.**  ``P = diag(1 - o) + o w^T`` with ``o_k = out_k / U0(k)`` and the replacement
  distribution ``w = in / sum(in)`` (per pool) reproduces every ``out_k`` and ``in_k``
  exactly; it misses C1 only by the terms ``o_m w(g)`` the relaxation leaves out, which the
  replacement strategy absorbs with a margin (:mod:`.strategies.replacement`).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .backends import Outcome, solve_lp
from .constraints.c1 import build_groups
from .problem import DesignProblem

__all__ = [
    "FlowSolution",
    "flow_relaxation",
    "floor_bound",
    "changes_bound",
    "proven_minimum",
    "bound_combinations",
    "loss_bound",
]

#: Above this many C1 rows the floor relaxation imposes them lazily, starting with those of groups
#: of fewer than LAZY_GROUP_RECORDS / alpha records; after LAZY_ROUNDS rounds every row is imposed.
LAZY_ROWS_ABOVE = 50_000
LAZY_GROUP_RECORDS = 2.0
LAZY_ROUNDS = 8
#: With ``max_changed_variables`` the relaxation carries one flow per permitted transition, up to
#: this many (beyond, it leaves them out: a weaker relaxation, still a bound).
EDGE_LIMIT = 2_000_000
#: ... and for the bound on expected changes reported with every design, up to this many: the
#: changes program is solved by an interior point, minutes over a million flows.
CHANGES_EDGE_LIMIT = 200_000


@dataclass(frozen=True)
class FlowSolution:
    """The relaxation's optimum: the largest floor ``t`` and the flows that reach it.

    ``status`` is ``"ok"``, ``"infeasible"`` (not even t = 0: only when n < 1/alpha) or the
    solver's message.
    """

    status: str
    t: float | None = None
    out: np.ndarray | None = None
    inflow: np.ndarray | None = None


def flow_relaxation(
    problem: DesignProblem,
    alpha: float | None = None,
    pools: np.ndarray | None = None,
    t_max: float = 1.0,
    out_max: np.ndarray | None = None,
    *,
    t_min: float = 0.0,
    objective: str = "floor",
    edge_limit: int = EDGE_LIMIT,
) -> FlowSolution:
    """Maximise the common diagonal floor t of the relaxation (see the module docstring), or
    with ``objective="changes"`` minimise the records sent out, ``sum out``, at floors >= ``t_min``.

    Parameters
    ----------
    problem : DesignProblem
        Its ``params.solver`` solves the program.
    alpha : float, optional
        The level of C1 (default: the problem's).
    pools : ndarray of int, optional
        Pool of every cell; records are conserved within each pool (default: the strata of
        the fixed variables).  Ignored for an invariant design, where every cell is its own pool.
    t_max, t_min : float
        Bounds on t.
    objective : {"floor", "changes"}
    out_max : ndarray, optional
        Upper bound on each ``out_k`` besides ``(1 - t) U0(k)``.
    """
    alpha = problem.alpha if alpha is None else float(alpha)
    prog = _FlowProgram.build(problem, alpha, pools, t_max, out_max, t_min, objective, edge_limit)
    # Lazy rows on large tables: start with the rows of small groups (a group of U_g >= 1/(alpha t)
    # records meets its rows by itself once every cell keeps a share t), add the rows the solution
    # violates, and solve again; the answer is that of the full program, which it satisfies.
    W = prog.A_C.shape[0]
    active = np.ones(W, dtype=bool)
    if W > LAZY_ROWS_ABOVE and objective == "floor":
        active = problem.groups.size[prog.used][prog.gpos.ravel()] < LAZY_GROUP_RECORDS / alpha
    for round_ in range(LAZY_ROUNDS + 1):
        res = prog.solve(np.flatnonzero(active), problem.params.solver)
        if res.outcome is not Outcome.OPTIMAL or active.all():
            break
        viol = (prog.A_C @ res.x > -1.0 + 1e-9) & ~active
        if not viol.any():
            break
        active |= viol if round_ < LAZY_ROUNDS - 1 else True  # the last round imposes every row
    if res.outcome is Outcome.INFEASIBLE:
        return FlowSolution("infeasible")
    if res.outcome is not Outcome.OPTIMAL:
        return FlowSolution(f"solver failed: {res.detail}")
    x, K, o_in = res.x, problem.K, problem.K
    return FlowSolution(
        "ok",
        t=float(x[prog.o_t]),
        out=np.clip(x[:K], 0.0, problem.counts),
        inflow=np.maximum(x[o_in : o_in + K], 0.0),
    )


@dataclass(frozen=True)
class _FlowProgram:
    """The relaxation's rows: C1's (``A_C``, one per rare cell and group, ``<= -1``; with a
    positive least floor only the groups small enough to need them), the floor's (``A_T``,
    ``<= U``; none when t is fixed, its bound then on out) and the equalities; columns out (K),
    in (K), D (the groups of those rows), t, the flows of the permitted transitions and, when
    elastic, a slack per C1 row."""

    c: np.ndarray
    A_C: sp.csr_matrix
    A_T: sp.csr_matrix
    U: np.ndarray
    A_eq: sp.csr_matrix
    b_eq: np.ndarray
    bounds: np.ndarray
    o_t: int
    used: np.ndarray
    gpos: np.ndarray

    def solve(self, rows: np.ndarray, solver: str | None):
        """The program with C1's ``rows`` only."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the interior point: faster than the simplex on large tables (benchmarks/README.md)
            return solve_lp(
                self.c,
                A_ub=sp.vstack([self.A_C[rows], self.A_T], format="csr"),
                b_ub=np.concatenate([-np.ones(rows.size), self.U]),
                A_eq=self.A_eq,
                b_eq=self.b_eq,
                bounds=self.bounds,
                solver=solver,
                method="highs-ipm",
            )

    @classmethod
    def build(
        cls,
        problem: DesignProblem,
        alpha: float,
        pools,
        t_max: float,
        out_max,
        t_min: float,
        objective: str,
        edge_limit: int = EDGE_LIMIT,
        edges=None,
        elastic: float | None = None,
    ) -> _FlowProgram:
        """The program; ``edges`` (rows, cols) replaces the permitted transitions' list, and
        ``elastic`` gives every C1 row a slack at that cost per unit (columns after the flows)."""
        groups, K = problem.groups, problem.K
        U = problem.counts
        rare = np.flatnonzero(U < 1.0 / alpha)
        nP = groups.member.shape[1]
        rm = np.repeat(rare, nP)
        g_rows = groups.member[rare].ravel()
        if t_min > 0:
            # a group of U_g >= 1 / (alpha t_min) records meets its rows by itself: each of its
            # cells keeps a share t_min of its records, so alpha D_g >= alpha t_min U_g >= 1
            small = groups.size[g_rows] < 1.0 / (alpha * t_min)
            rm, g_rows = rm[small], g_rows[small]
        used, gpos = np.unique(g_rows, return_inverse=True)
        nG = used.size
        upos = np.full(groups.n_groups, -1, dtype=np.int64)
        upos[used] = np.arange(nG)
        # columns: out (K), in (K), D (nG), t, and with max_changed_variables the flow of every
        # permitted transition (E): records may then only go where a design may send them
        if edges is None and problem.max_changed is not None:
            edges = problem.allowed_pairs(edge_limit)
        E = 0 if edges is None else edges[0].size
        o_in, o_D, o_t = K, 2 * K, 2 * K + nG
        o_f = o_t + 1
        W = rm.size
        nv = o_f + E + (W if elastic is not None else 0)
        kk = np.repeat(np.arange(K), nP)
        gg = upos[groups.member.ravel()]
        ok = gg >= 0
        kk, gg = kk[ok], gg[ok]
        # D_g + sum_{k in g} (out_k - in_k) = sum_{k in g} U0(k)
        A_D = sp.csr_matrix(
            (
                np.concatenate([np.ones(nG), np.ones(kk.size), -np.ones(kk.size)]),
                (
                    np.concatenate([np.arange(nG), gg, gg]),
                    np.concatenate([o_D + np.arange(nG), kk, o_in + kk]),
                ),
            ),
            shape=(nG, nv),
        )
        b_D = np.bincount(gg, weights=U[kk], minlength=nG)
        # conservation per pool (per cell when invariant)
        if problem.params.invariant:
            pools = np.arange(K)
        elif pools is None:
            pools = problem.strata
        pools = np.unique(np.asarray(pools), return_inverse=True)[1].ravel()
        S = int(pools.max()) + 1 if K else 0
        A_S = sp.csr_matrix(
            (
                np.concatenate([np.ones(K), -np.ones(K)]),
                (
                    np.concatenate([pools, pools]),
                    np.concatenate([np.arange(K), o_in + np.arange(K)]),
                ),
            ),
            shape=(S, nv),
        )
        # -alpha D_g - out_m / U0(m) (- slack) <= -1 for every rare m and group g of m
        w = np.arange(W)
        vals = [np.full(W, -alpha), -1.0 / U[rm]]
        cols = [o_D + gpos.ravel(), rm]
        if elastic is not None:
            vals.append(-np.ones(W))
            cols.append(o_f + E + w)
        A_C = sp.csr_matrix(
            (np.concatenate(vals), (np.tile(w, len(vals)), np.concatenate(cols))),
            shape=(W, nv),
        )
        # out_k + U0(k) t <= U0(k)
        A_T = sp.csr_matrix(
            (
                np.concatenate([np.ones(K), U]),
                (np.tile(np.arange(K), 2), np.concatenate([np.arange(K), np.full(K, o_t)])),
            ),
            shape=(K, nv),
        )
        lo, hi, c = _bounds_and_cost(problem, nv, o_t, out_max, t_max, t_min, objective)
        if elastic is not None:
            c[o_f + E :] = elastic
        b_T = U
        if t_min >= t_max:
            # t fixed: its rows are bounds on out (t's column, in every row, would fill the
            # interior point's normal equations)
            hi[:K] = np.minimum(hi[:K], (1.0 - t_min) * U)
            A_T, b_T = A_T[:0], U[:0]
        A_eq = sp.vstack([A_D, A_S], format="csr")
        b_eq = np.concatenate([b_D, np.zeros(S)])
        if edges is not None:
            # out_k = sum of the flows leaving k, in_k = sum of those entering k
            er, ec = edges
            A_F = sp.csr_matrix(
                (
                    np.concatenate([np.ones(2 * K), -np.ones(2 * E)]),
                    (
                        np.concatenate([np.arange(2 * K), er, K + ec]),
                        np.concatenate([np.arange(2 * K), o_f + np.arange(E), o_f + np.arange(E)]),
                    ),
                ),
                shape=(2 * K, nv),
            )
            A_eq = sp.vstack([A_eq, A_F], format="csr")
            b_eq = np.concatenate([b_eq, np.zeros(2 * K)])
        return cls(c, A_C, A_T.tocsr(), b_T, A_eq, b_eq, np.column_stack([lo, hi]), o_t, used, gpos)


def _bounds_and_cost(problem, nv: int, o_t: int, out_max, t_max, t_min, objective: str) -> tuple:
    """Column bounds and cost of the flow program (out, in, D, t, flows; see ``build``)."""
    K = problem.K
    hi = np.full(nv, np.inf)
    if out_max is not None:
        hi[:K] = out_max
    hi[problem.keep_rows] = 0.0
    hi[o_t] = t_max
    lo = np.zeros(nv)
    lo[o_t] = t_min
    c = np.zeros(nv)
    if objective == "changes":
        c[:K] = 1.0
    else:
        c[o_t] = -1.0
    return lo, hi, c


def floor_bound(problem: DesignProblem, edge_limit: int | None = None) -> float | None:
    """An upper bound on the diagonal floor of every design satisfying C1 (None if unknown);
    ``edge_limit`` as for :func:`flow_relaxation` (0: no flows of permitted transitions).

    Above :data:`BISECT_ABOVE` cells without the transitions' flows, by bisection on programs
    with t fixed (:func:`_floor_by_bisection`): the program that maximises t carries t's column
    in every floor row, which fills its interior point's normal equations (minutes at 22,670
    cells, where one program with t fixed takes seconds)."""
    limit = EDGE_LIMIT if edge_limit is None else edge_limit
    if problem.K > BISECT_ABOVE and (limit == 0 or problem.max_changed is None):
        return _floor_by_bisection(problem)
    sol = flow_relaxation(problem, edge_limit=limit)
    if sol.status == "infeasible":
        return 0.0
    return sol.t if sol.status == "ok" else None


#: :func:`floor_bound` bisects above this many cells, to within BISECT_TOL of the largest floor
#: (the bound it returns is the upper end of its last interval: still a bound).
BISECT_ABOVE = 12_000
BISECT_TOL = 1e-3


def _floor_by_bisection(problem: DesignProblem) -> float | None:
    """The largest t at which the relaxation (without flows) is feasible, from above: the upper
    end of an interval of width BISECT_TOL whose lower end is feasible (None: a solver error)."""
    lo, hi = 0.0, 1.0
    while hi - lo > BISECT_TOL:
        t = 0.5 * (lo + hi)
        sol = flow_relaxation(problem, objective="changes", t_min=t, edge_limit=0)
        if sol.status == "ok":
            lo = t
        elif sol.status == "infeasible":
            hi = t
        else:
            return None
    return hi


def bound_combinations(problem: DesignProblem, max_rows: int) -> tuple[int, ...]:
    """The combinations whose rows :func:`changes_bound` keeps within ``max_rows`` rows: all of
    them when they fit, otherwise those with the most records in groups of fewer than 1/alpha
    records (the groups that must send or receive records); none (no bound) when the rows of one
    combination alone exceed ``max_rows``.

    Dropping rows of a minimisation can only lower its optimum, so the bound over any subset
    of the combinations is still a lower bound; these are the ones that carry most of it (on the
    5-key census sample the first alone gives 86% of the bound over all ten).
    """
    m = len(problem.combos)
    rare = int(np.count_nonzero(problem.counts < 1.0 / problem.alpha))
    if rare * m <= max_rows:
        return tuple(range(m))
    if rare > max_rows:
        return ()
    g = problem.groups
    small = g.size < 1.0 / problem.alpha
    score = np.bincount(g.combination[small], weights=g.size[small], minlength=m)
    keep = max_rows // rare
    return tuple(sorted(int(i) for i in np.argsort(-score, kind="stable")[:keep]))


def changes_bound(problem: DesignProblem, floor: float = 0.0, combinations=None) -> float | None:
    """A lower bound on the expected number of changed records, sum U0(m) (1 - P_mm), of every
    design that satisfies C1 with every diagonal entry >= ``floor`` (None if unknown).

    ``combinations`` (indices into ``problem.combos``) keeps the rows of those combinations
    only: a weaker bound, still valid, in a fraction of the time (see :func:`bound_combinations`).
    """
    if combinations is not None and len(combinations) < len(problem.combos):
        sub = tuple(problem.combos[i] for i in combinations)
        problem = dataclasses.replace(problem, combos=sub, groups=build_groups(problem.table, sub))
    sol = flow_relaxation(problem, objective="changes", t_min=floor, edge_limit=CHANGES_EDGE_LIMIT)
    if sol.status != "ok":
        return None
    assert sol.out is not None  # set with status "ok"
    return proven_minimum(float(sol.out.sum()))


def proven_minimum(changes: float) -> float:
    """The relaxation's fewest changes ``changes`` as the solver found them, rounded down by its
    tolerance (the optimum found may sit up to it above the true one): the bound to report."""
    return max(0.0, changes * (1 - 1e-7) - 1e-6)


def loss_bound(changes: float | None, counts) -> float | None:
    """A lower bound on the exact L2 loss from one on the expected changes: ``changes / n**2``.

    It holds for every matrix P meeting C1 (with the same options, so that ``changes`` bounds its
    expected changes) whose inverse Q has ``Q_jj >= 1`` for every cell j, which every design
    pramopt makes has: general designs (every diagonal entry above 1/2), replacement designs and
    block designs.  The derivation (``docs/method.md``, "How far from the best"): with ``q_j`` the
    rows of Q, ``sum_j P_kj q_j = e_k`` and ``sum_j P_kj = 1``, so the loss is
    ``n**2 L = sum_k U0(k) sum_j P_kj ||q_j - e_k||**2``; for ``j != k`` the j-th entry of
    ``q_j - e_k`` is ``Q_jj >= 1``, hence ``n**2 L >= sum_k U0(k) (1 - P_kk)``, the expected
    number of changed records, which is at least ``changes``.  Matrices outside that class may
    lie below it (a perturbed permutation of the cells can).
    """
    if changes is None:
        return None
    n = float(np.sum(counts))
    return changes / n**2
