"""The flow relaxation of C1 with a flow per permitted transition, by column generation.

Under ``max_changed_variables`` the relaxation of :mod:`.relaxation` carries the flow
``f_kl = U0(k) P_kl`` of every permitted transition, millions on census-shaped data.  Its
changes program (fewest records sent out at diagonal floors >= t) is solved here over a few of
them, priced into the program as they are needed: each cell's largest permitted senders and
receivers first, then each round the transitions of most negative reduced cost.

The restricted programs are one HiGHS model (:class:`~.backends.highs.ColumnProgram`) that
grows by columns: its rows are fixed (the relaxation's rows do not depend on which flows are
listed), a round adds the new flows' columns and the primal simplex starts from the previous
basis, a few pivots instead of a fresh solve (benchmarks/README.md, census section).  With
another ``solver=`` each round is a fresh program through :func:`~.backends.solve_lp`.

Two uses: the seeds and the floor bound of the general design at census scale
(:mod:`.strategies.general_scale`), and the diagnosis's question whether a number of changed
variables allows a floor at all (:func:`allows_floor`).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .backends import LPResult, Outcome, solve_lp
from .problem import DesignProblem
from .relaxation import _FlowProgram

__all__ = [
    "EdgeFlows",
    "edge_flows",
    "routed_flows",
    "allows_floor",
    "edge_seeds",
    "smallest_per_key",
]

#: :func:`edge_flows` starts from each cell's this many largest permitted senders and receivers,
#: adds up to this many of the most negatively priced transitions of each cell per round, and
#: gives up pricing after EDGE_ROUNDS rounds (its bound still holds).
EDGE_SEEDS = 4
EDGE_ADD_PER_CELL = 8
EDGE_ROUNDS = 40
#: Cost of a unit of slack of a C1 row, per record of the table: a unit costs more than changing
#: every record, so no optimum keeps a slack it can avoid.
EDGE_ELASTIC = 10.0
#: HiGHS's algorithm for the first restricted program of each phase (the interior point with
#: crossover: a vertex, so that the later rounds start from a basis; the first changes program
#: by the primal simplex from phase one's basis took 2-3x longer) and for the later ones (the
#: primal simplex from the kept basis: new columns keep it feasible).
FIRST_SOLVER = "ipm"
NEXT_SOLVER = "simplex"
#: Whether :func:`edge_flows` starts with phase one (else with the changes and penalised
#: slacks from the first round, proving infeasibility by a bound above n).
PHASE_ONE = True
#: :func:`routed_flows` scales the records sent out to this many integer units in all (a
#: maximum flow needs integer capacities, here 32-bit ones) and calls the optimum routed when
#: the flow misses at most ROUTE_SLACK of them (the rounding of each capacity).
ROUTE_UNITS = 1 << 30
ROUTE_SLACK = 1e-6
#: A C1 row's slack below this counts as none (the rows are of order 1; the floor relaxation's
#: own tolerance, diagnosis.RELAXATION_TOL, is the same).
SLACK_TOL = 1e-6


@dataclass(frozen=True)
class EdgeFlows:
    """The changes program of the relaxation over the permitted transitions, by column generation.

    ``changes`` is the restricted program's optimum (records sent out, plus the cost of any slack
    left), ``bound`` a proven lower bound on the expected changes of every design meeting C1
    with every diagonal entry at least the floor and only permitted transitions, and ``rows``,
    ``cols``, ``flows`` the transitions that carry records at the optimum (``flows`` records each).
    ``slack`` is the largest slack of a C1 row left (zero when the flows meet every row).
    ``seconds`` lists the solver's time per round.  ``no_solution``: phase one proved that no
    flows meet every C1 row (``bound`` is then the least slack's cost, above 0; ``changes`` is
    None until phase one ends).
    """

    status: str
    changes: float | None = None
    bound: float | None = None
    slack: float = 0.0
    rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cols: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    flows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    rounds: int = 0
    seconds: tuple[float, ...] = ()
    no_solution: bool = False
    #: the share of the records sent out that travel along permitted transitions (below 1 only
    #: for :func:`routed_flows`, whose optimum may not be routable)
    routed: float = 1.0


class _Restricted:
    """The changes program over the listed flows: one growing HiGHS model (``warm``) or, for
    another solver or ``warm=False``, a fresh program per round."""

    def __init__(
        self, problem: DesignProblem, floor: float, edges, elastic: float, warm: bool, one: bool
    ):
        # t fixed at the floor (fewer changes never need a higher one); the flows of ``edges``
        # are the columns after t, then a slack per C1 row, then the flows added later
        self.prog = _FlowProgram.build(
            problem, problem.alpha, None, floor, None, floor, "changes", edges=edges,
            elastic=elastic,
        )  # fmt: skip
        p = self.prog
        # phase one: the C1 rows' slacks alone cost (a well-scaled program); then the changes
        self.costs = {"changes": p.c.copy(), "slack": np.zeros_like(p.c)}
        self.costs["slack"][p.o_t + 1 + edges[0].size :] = 1.0
        self.phase = "slack" if one else "changes"
        self.K, self.E0, self.W = problem.K, edges[0].size, p.A_C.shape[0]
        self.o_f = p.o_t + 1
        self.solver = problem.params.solver
        self.A = sp.vstack([p.A_C, p.A_T, p.A_eq], format="csr")
        n_ub = p.A_C.shape[0] + p.A_T.shape[0]
        self.row_lo = np.concatenate([np.full(n_ub, -np.inf), p.b_eq])
        self.row_hi = np.concatenate([-np.ones(p.A_C.shape[0]), p.U, p.b_eq])
        self.edges = [np.asarray(edges[0]), np.asarray(edges[1])]
        self.model = None
        if warm and self.solver in (None, "HIGHS"):
            from .backends.highs import ColumnProgram

            self.model = ColumnProgram(
                self.costs[self.phase], self.A.tocsc(), self.row_lo, self.row_hi, *p.bounds.T
            )
        self.first = True

    def _flow_cols(self, er, ec) -> sp.csc_matrix:
        """Columns of new flows: -1 in the rows summing the flows leaving ``er`` and entering
        ``ec`` (the last 2 K rows)."""
        m, E = self.A.shape[0], er.size
        base = m - 2 * self.K
        return sp.csc_matrix(
            (
                -np.ones(2 * E),
                (np.concatenate([base + er, base + self.K + ec]), np.tile(np.arange(E), 2)),
            ),
            shape=(m, E),
        )

    def to_changes(self) -> None:
        """From phase one to the changes program (the same columns, the last basis kept).

        The slacks keep their cost of EDGE_ELASTIC n per unit rather than being fixed at 0:
        with them fixed, the first changes program took 4-6x longer (4-key census sample)."""
        self.phase = "changes"
        self.first = True
        if self.model is not None:
            E = self.edges[0].size - self.E0
            self.model.set_costs(np.concatenate([self.costs["changes"], np.zeros(E)]))

    def add(self, er, ec) -> None:
        self.edges = [np.concatenate([self.edges[0], er]), np.concatenate([self.edges[1], ec])]
        if self.model is not None:
            z = np.zeros(er.size)
            self.model.add_cols(z, z, np.full(er.size, np.inf), self._flow_cols(er, ec))

    def solve(self) -> LPResult:
        if self.model is not None:
            res = self.model.run(FIRST_SOLVER if self.first else NEXT_SOLVER)
            self.first = False
            return res
        # a fresh program over every listed flow (columns: the first ones, slacks, the later)
        er, ec = self.edges
        extra = self._flow_cols(er[self.E0 :], ec[self.E0 :])
        A = sp.hstack([self.A, extra], format="csr")
        n_ub = np.count_nonzero(np.isinf(self.row_lo))
        E = er.size - self.E0
        bounds = np.vstack([self.prog.bounds, np.column_stack([np.zeros(E), np.full(E, np.inf)])])
        c = np.concatenate([self.costs[self.phase], np.zeros(E)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = solve_lp(
                c,
                A_ub=A[:n_ub],
                b_ub=self.row_hi[:n_ub],
                A_eq=A[n_ub:],
                b_eq=self.row_hi[n_ub:],
                bounds=bounds,
                solver=self.solver,
                method="highs-ipm",
            )
        if res.marginals is not None:  # one dual per row, as the loaded model gives them
            m = res.marginals
            y = np.concatenate([np.asarray(m.ineqlin, float), np.asarray(m.eqlin, float)])
            res = dataclasses.replace(res, marginals=dataclasses.replace(m, eqlin=y))
        return res

    def flows_and_slack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The listed flows' values (in the order of ``edges``) and the C1 rows' slacks."""
        o, E0, W = self.o_f, self.E0, self.W
        return np.concatenate([x[o : o + E0], x[o + E0 + W :]]), x[o + E0 : o + E0 + W]


def edge_flows(
    problem: DesignProblem,
    floor: float,
    pairs,
    seeds=None,
    *,
    warm: bool = True,
    feasible_only: bool = False,
    gap: float = 0.0,
) -> EdgeFlows:
    """Minimise the records sent out (the relaxation's ``sum out``) at floors >= ``floor`` with a
    flow per permitted transition, pricing the transitions ``pairs`` (rows, cols; every
    permitted one, :meth:`DesignProblem.allowed_pairs`) into the program as they are needed.

    The restricted programs carry a slack on every C1 row, so the first is feasible whatever
    ``seeds`` (indices into the pairs) it starts from.  **Phase one** minimises the slacks' sum
    until no row keeps one; its bound (below) above 0 proves that the relaxation has no
    solution (``no_solution``; with ``feasible_only`` it stops at either answer).  **Then** the
    cost is the records sent out plus :data:`EDGE_ELASTIC` n per unit of slack, from the last
    basis.  A flow's reduced cost is ``y_out(k) + y_in(l)`` with the duals of the rows that sum
    the flows leaving k and entering l.  **The bound** is weak duality for the full program
    (every permitted flow, slacks allowed, so a relaxation of C1): the restricted optimum plus,
    per cell k, the most records it may send, ``(1 - floor) U0(k)``, times its most negative
    reduced cost, lowered by ``1e-7 n`` for the solver's tolerances (phase one's bound the same
    way, on the least total slack); the slacks only enlarge the program, so the bound holds for
    every design meeting C1 with the floor and only permitted transitions.  Pricing stops when
    nothing is left to add, after :data:`EDGE_ROUNDS` rounds, or once the optimum is within
    ``gap`` (relative) of the bound.
    ``warm=False`` solves a fresh program every round (the same optimum, slower).
    """
    K, U = problem.K, problem.counts
    n = float(U.sum())
    pr, pc = (np.asarray(a, dtype=np.int64) for a in pairs)
    cap = (1.0 - floor) * U.astype(float)
    cap[problem.keep_rows] = 0.0
    if seeds is None:
        seeds = edge_seeds(U, pr, pc, EDGE_SEEDS)
    active = np.zeros(pr.size, dtype=bool)
    active[seeds] = True
    order = np.flatnonzero(active)  # the listed pairs, in the order of the model's columns
    one = feasible_only or PHASE_ONE
    prog = _Restricted(problem, floor, (pr[order], pc[order]), EDGE_ELASTIC * n, warm, one)
    best, secs = -np.inf, []
    for rounds in range(1, EDGE_ROUNDS + 1):
        res = prog.solve()
        secs.append(res.seconds)
        if res.outcome is not Outcome.OPTIMAL or res.marginals is None or res.x is None:
            return EdgeFlows(f"solver failed: {res.detail}", rounds=rounds, seconds=tuple(secs))
        assert res.objective is not None  # set when optimal
        obj = float(res.objective)
        y = np.asarray(res.marginals.eqlin, dtype=float)[-2 * K :]
        rc = y[pr] + y[K + pc]
        per_row = np.full(K, np.inf)
        np.minimum.at(per_row, pr, rc)
        low = obj + float(cap @ np.minimum(per_row, 0.0))
        if prog.phase == "slack":
            if low - 1e-7 * n > 0.0:  # no point without slack: nor one of fewer than n changes
                return _result(prog, res.x, EDGE_ELASTIC * n * (low - 1e-7 * n),
                               None, rounds, secs, no_solution=True)  # fmt: skip
            if prog.flows_and_slack(res.x)[1].max(initial=0.0) <= SLACK_TOL:
                if feasible_only:
                    return _result(prog, res.x, None, None, rounds, secs)
                prog.to_changes()
                continue
        else:
            best = max(best, low)
            if best - 1e-7 * n > n:  # no point without slack (it would cost at most n)
                return _result(prog, res.x, best - 1e-7 * n, obj, rounds, secs, no_solution=True)
            if obj - best <= gap * abs(obj):
                break
        neg = np.flatnonzero((rc < -1e-9) & ~active)
        if neg.size and rounds == EDGE_ROUNDS:  # the last round: nothing added unsolved
            break
        if neg.size == 0:
            if prog.phase == "slack":  # a slack left at phase one's optimum
                return _result(prog, res.x, EDGE_ELASTIC * n * max(0.0, low - 1e-7 * n),
                               None, rounds, secs, no_solution=low - 1e-7 * n > 0.0)  # fmt: skip
            break
        new = neg[smallest_per_key(pr[neg], rc[neg], EDGE_ADD_PER_CELL)]
        active[new] = True
        order = np.concatenate([order, new])
        prog.add(pr[new], pc[new])
    if prog.phase == "slack" or best == -np.inf:  # cut short before the changes were solved
        return _result(prog, res.x, None, None, rounds, secs)
    return _result(prog, res.x, max(0.0, best - 1e-7 * n), obj, rounds, secs)


def _result(prog, x, bound, changes, rounds, secs, no_solution=False) -> EdgeFlows:
    """The flows that carry records, the largest slack left and the figures."""
    f, slack = prog.flows_and_slack(x)
    carry = f > 1e-9
    return EdgeFlows(
        "ok",
        changes=changes,
        bound=bound,
        slack=float(slack.max(initial=0.0)),
        rows=np.asarray(prog.edges[0])[carry],
        cols=np.asarray(prog.edges[1])[carry],
        flows=f[carry],
        rounds=rounds,
        seconds=tuple(secs),
        no_solution=no_solution,
    )


def routed_flows(problem: DesignProblem, floor: float, pairs) -> EdgeFlows | None:
    """The flow relaxation's fewest changes without the transitions' flows (seconds), routed
    along the permitted transitions ``pairs`` by a maximum flow; None when its solver fails.

    Every design meeting C1 with every diagonal entry >= ``floor`` is a point of the relaxation
    without flows, so its optimum bounds their changes whatever the transitions; when the
    records each cell sends out and receives at that optimum can travel along permitted
    transitions alone, those flows are an optimum of the program with a flow per permitted
    transition too (whose minimum lies between the two), found without its rounds.  The
    capacities are the optimum's records scaled to integers (a maximum flow needs them): the
    routed flows are seeds, and the bound is the relaxation's own.  ``routed`` is the share of
    the records sent out that the maximum flow carries: below 1 (less ``ROUTE_SLACK``), the flows
    are only part of a solution, and the bound, still valid, may lie below the program's with a
    flow per permitted transition.
    """
    from scipy.sparse.csgraph import maximum_flow

    from .relaxation import flow_relaxation, proven_minimum

    sol = flow_relaxation(problem, objective="changes", t_min=floor, edge_limit=0)
    if sol.status != "ok" or sol.out is None or sol.inflow is None:
        return None
    out, inflow = sol.out, sol.inflow
    total = float(out.sum())
    K = problem.K
    if total <= 0.0:
        empty = np.zeros(0, dtype=np.int64)
        return EdgeFlows("ok", changes=0.0, bound=0.0, rows=empty, cols=empty)
    pr, pc = (np.asarray(a, dtype=np.int64) for a in pairs)
    scale = ROUTE_UNITS / total
    cap_out = np.floor(out * scale).astype(np.int64)
    cap_in = np.floor(inflow * scale).astype(np.int64)
    keep = (cap_out[pr] > 0) & (cap_in[pc] > 0)
    pr, pc = pr[keep], pc[keep]
    send, recv = np.flatnonzero(cap_out), np.flatnonzero(cap_in)
    src, sink = 2 * K, 2 * K + 1
    rows = np.concatenate([np.full(send.size, src), pr, K + recv])
    cols = np.concatenate([send, K + pc, np.full(recv.size, sink)])
    caps = np.concatenate([cap_out[send], np.minimum(cap_out[pr], cap_in[pc]), cap_in[recv]])
    graph = sp.csr_array((caps.astype(np.int32), (rows, cols)), shape=(2 * K + 2, 2 * K + 2))
    res = maximum_flow(graph, src, sink)
    need = max(1, min(int(cap_out.sum()), int(cap_in.sum())))
    f = sp.csr_array(res.flow)[:K, K : 2 * K].tocoo()
    carry = f.data > 0
    return EdgeFlows(
        "ok",
        changes=total,
        bound=proven_minimum(total),
        rows=np.asarray(f.row[carry], dtype=np.int64),
        cols=np.asarray(f.col[carry], dtype=np.int64),
        flows=f.data[carry] / scale,
        rounds=0,
        routed=min(1.0, res.flow_value / need),
    )


def allows_floor(problem: DesignProblem, floor: float, pairs) -> tuple[bool | None, EdgeFlows]:
    """Whether the flow relaxation of C1 over the permitted transitions ``pairs`` allows every
    diagonal entry >= ``floor``: True when its flows meet every C1 row without slack (a point of
    the relaxation), False when the least total slack of its C1 rows is proven above 0 (no
    point without slack exists), None when neither is shown (pricing cut short); by phase one
    of :func:`edge_flows`."""
    flows = edge_flows(problem, floor, pairs, feasible_only=True)
    if flows.status != "ok":
        return None, flows
    if flows.no_solution:
        return False, flows
    return (True if flows.slack <= SLACK_TOL else None), flows


def edge_seeds(U, pr, pc, per_cell: int) -> np.ndarray:
    """Indices into the pairs: each cell's ``per_cell`` largest senders and receivers."""
    return np.concatenate(
        [smallest_per_key(pc, -U[pr], per_cell), smallest_per_key(pr, -U[pc], per_cell)]
    )


def smallest_per_key(keys: np.ndarray, vals: np.ndarray, per_key: int) -> np.ndarray:
    """Positions of the ``per_key`` smallest ``vals`` of each key (ties: the earlier first)."""
    order = np.lexsort((vals, keys))
    k = keys[order]
    if k.size == 0:
        return order
    start = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    rank = np.arange(k.size) - np.repeat(start, np.diff(np.r_[start, k.size]))
    return order[rank < per_key]
