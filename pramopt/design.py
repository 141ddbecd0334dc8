"""The optimal PRAM designer: data -> frequencies -> model -> reducer -> solver -> verified result."""
from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import verify as _verify
from ._validation import InvalidParameterError, check_choice, check_int, check_real
from .combinations import resolve_combinations
from .data import MAX_CATEGORIES, FrequencyTable, cell_index, frequency_table
from .loss import DENSE_MAX, condition_number, expected_changes, l2_loss
from .model import C1Block, Groups, Support, build_groups, c1_block
from .reduce import reduce_constraints
from .result import DesignResult, Stage, Status
from .solve import DesignLP, HighsLP, clean, refine, solver_chain

#: Floors tried in turn when the reduced problem is infeasible at the requested gamma.  They
#: stay above 1/2: a strictly diagonally dominant P is invertible, which the estimator (4) and
#: the loss need (a minimum-changes solution without a floor can be singular).
GAMMA_LADDER = (0.95, 0.9, 0.8, 0.7, 0.6, 0.51)

#: Up to this many cells the support of P is dense (every pair of cells).
DENSE_SUPPORT_MAX = 300

ProgressFn = Callable[[str, int, float, float], None]


def _gamma_ladder(gamma: float, floor: float) -> list[float]:
    ladder = [gamma] + [g for g in GAMMA_LADDER if g < gamma]
    return [g for g in ladder if g >= floor] or [max(gamma, floor)]


def _support(table: FrequencyTable, groups: Groups, alpha: float, gamma: float, mode: str,
             fixed_idx: Sequence[int], keep_rows: np.ndarray) -> Support:
    """Allowed transitions.

    ``dense``: every pair of cells.  ``targets``: every row may move into the cells of the
    (π, k0) groups that need protection (U_π(k0) < 1/(gamma alpha)); those are the only
    columns whose inflow raises a C1 denominator (Section 4 of the paper: a good P moves
    records into the few cells that cover the problem combinations).
    """
    if mode == "dense":
        cols = np.arange(table.n_cells)
    else:
        problem = groups.size < 1.0 / (max(gamma, 1e-12) * alpha)
        cols = np.flatnonzero(problem[groups.member].any(axis=1))
    return _rows_into(table, cols, fixed_idx, keep_rows)


def _rows_into(table: FrequencyTable, cols, fixed_idx, keep_rows) -> Support:
    """Every row except the kept ones may move into ``cols`` (within the strata of ``fixed``)."""
    K = table.n_cells
    rr, cc = np.meshgrid(np.arange(K), cols, indexing="ij")
    rr, cc = rr.ravel(), cc.ravel()
    ok = _allowed_fn(table, fixed_idx, keep_rows)(rr, cc)
    return Support.from_pairs(rr[ok], cc[ok], K)


def design(
    data,
    qi: Sequence[str] | None = None,
    alpha: float = 0.1,
    *,
    combinations: Sequence[Sequence[str]] | None = None,
    combination_size: int = 3,
    gamma: float = 0.95,
    min_diagonal: float | None = None,
    fixed: Sequence[str] | None = None,
    keep_cells: Sequence[Mapping] | pd.DataFrame | None = None,
    invariant: bool = False,
    domains: Mapping[str, Sequence] | None = None,
    max_categories: int = MAX_CATEGORIES,
    solver: str | None = None,
    refine_loss: bool = True,
    support: str = "auto",
    structure: str = "auto",
    margin: float = 1e-5,
    rtol: float = 1e-4,
    max_iter: int = 100,
    progress: ProgressFn | None = None,
) -> DesignResult:
    """Design a PRAM matrix of minimal exact L2 loss under the C1 security constraint.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        Microdata (one row per record), or its frequency table.
    qi : list of str
        Identifying variables (ignored when ``data`` is a FrequencyTable).
    alpha : float in (0, 1)
        Security level of C1: no present cell may be identified with posterior > alpha.
    combinations : list of lists of str, optional
        Explicit set Π.  Default: every subset of ``combination_size`` variables.
    combination_size : int, default 3
        Size of the subsets in Π (the CBS rule is 3).
    gamma : float in (0, 1], default 0.95
        Diagonal floor P_kk >= gamma that the paper's reduction relies on.  Lowered along
        ``GAMMA_LADDER`` when the reduced problem is infeasible.
    min_diagonal : float in [0, 1), optional
        A hard floor on every diagonal entry that is never lowered.
    fixed : list of str, optional
        Identifying variables that must never change (PRAM within their strata).
    keep_cells : DataFrame or list of dicts, optional
        Cells (values of every identifying variable) whose records must stay as they are.
    invariant : bool, default False
        Require U0^T P = U0^T (expected released frequencies equal the original ones).
    domains : dict, optional
        Categories per variable when they should not be taken from the data.
    solver : str, optional
        A cvxpy solver name; default is the chain HIGHS, CLARABEL, ECOS, SCS.
    refine_loss : bool, default True
        Improve the linear-surrogate solution on the exact (non-convex) L2 loss.
    support : {"auto", "dense", "targets", "cover"}
        Allowed transitions of a general design; "auto" is dense up to ``DENSE_SUPPORT_MAX``
        cells, else a cover of the problem groups that column generation widens.
    structure : {"auto", "general", "blocks"}
        ``general``: any row-stochastic P with every diagonal entry above 1/2 (invertible by
        strict diagonal dominance).  ``blocks``: block-diagonal retention-replacement blocks
        (:mod:`pramopt.blocks`), invertible for any diagonal, for data where most cells are rare
        or unique.  ``auto``: general, and blocks when no general design can exist (the counting
        bound :func:`floor_upper_bound` or phase one says so).
    margin : float, default 1e-5
        Relative margin inside alpha at which the solver works; grown tenfold (at most twice)
        if the independent verification ever fails.
    rtol, max_iter : float, int
        Stopping rule of the refinement: it stops when the loss improved by less than ``rtol``
        (relative) over its last 10 iterations or the predicted decrease is below
        ``rtol * loss``, and after ``max_iter`` iterations at most.
    progress : callable, optional
        ``progress(stage, iteration, loss, radius_or_violations)``, called during long work.

    Returns
    -------
    DesignResult
        ``success`` is True only when the full, unreduced C1 holds with ``max_risk <= alpha``.
    """
    owner = "design"
    alpha = check_real(alpha, "alpha", owner, low=0, high=1)
    gamma = check_real(gamma, "gamma", owner, low=0, high=1, high_open=False)
    floor = 0.0 if min_diagonal is None else check_real(min_diagonal, "min_diagonal", owner, low=0, high=1, low_open=False)
    margin = check_real(margin, "margin", owner, low=0, high=0.1, low_open=False)
    rtol = check_real(rtol, "rtol", owner, low=0, low_open=False)
    max_iter = check_int(max_iter, "max_iter", owner, low=0)
    check_choice(support, "support", owner, ["auto", "dense", "targets", "cover"])
    check_choice(structure, "structure", owner, ["auto", "general", "blocks"])
    if solver is not None:
        import cvxpy as cp
        check_choice(str(solver).upper(), "solver", owner, cp.installed_solvers())

    if isinstance(data, FrequencyTable):
        table = data
    else:
        table = frequency_table(data, qi, domains=domains, max_categories=max_categories, owner=owner)
    qi = table.qi
    combos = resolve_combinations(qi, combination_size, combinations, owner)
    fixed = list(fixed or [])
    bad = [f for f in fixed if f not in qi]
    if bad:
        raise InvalidParameterError(
            f"The 'fixed' parameter of {owner} must name identifying variables {list(qi)!r}; got {bad!r}.")
    fixed_idx = [qi.index(f) for f in fixed]
    keep_rows = _keep_rows(table, keep_cells, owner)

    stages: list[Stage] = []
    K, n = table.n_cells, table.n
    counts = table.counts.astype(float)
    common = dict(alpha=alpha, qi=qi, combinations=tuple(tuple(qi[i] for i in c) for c in combos),
                  table=table,
                  params=dict(alpha=alpha, gamma=gamma, min_diagonal=min_diagonal, fixed=fixed,
                              invariant=invariant, solver=solver, support=support, margin=margin,
                              combination_size=combination_size, refine_loss=refine_loss,
                              structure=structure))

    def verify(P, stage="verify"):
        t0 = time.perf_counter()
        rep = _verify.c1_risk(P, table.codes, counts, combos)
        stages.append(Stage(stage, time.perf_counter() - t0))
        return rep

    def finish(P, status, message, gamma_used, reduction, solver_name, rep=None):
        # the full check decides success; a report already computed for P is reused, not redone
        rep = verify(P) if rep is None else rep
        if status is Status.SUCCESS and not rep.max_risk <= alpha:
            status = Status.UNVERIFIED
        # large designs are summarised from the sparse matrix (sparse LU, no dense inverse)
        Ps = sp.csr_matrix(P) if K > DENSE_MAX else np.asarray(P.toarray() if sp.issparse(P) else P)
        t0 = time.perf_counter()
        loss, cond = l2_loss(Ps, counts), condition_number(Ps)
        stages.append(Stage("summary", time.perf_counter() - t0, 0, "loss and condition number"))
        return DesignResult(
            matrix=np.asarray(P.toarray() if sp.issparse(P) else P), cells=table.cells(),
            counts=table.counts.copy(), status=status,
            loss=loss, expected_changes=expected_changes(Ps, counts),
            max_risk=rep.max_risk, min_diagonal=float(np.min(Ps.diagonal())), gamma=gamma_used,
            binding=_binding(rep, table, combos, qi, alpha), reduction=reduction, solver=solver_name,
            stages=tuple(stages), condition_number=cond, message=message, **common)

    # C1 can hold for no P at all when n < 1/alpha: the U0-weighted mean of the left-hand
    # sides over m is 1/n for every (π, k0), so the largest is at least 1/n.
    if n * alpha < 1:
        return finish(sp.identity(K, format="csr"), Status.INFEASIBLE_DATA,
                      f"C1 cannot hold for any matrix: n = {n} < 1/alpha = {1 / alpha:g}.", None, {}, None)

    t0 = time.perf_counter()
    groups = build_groups(table, combos)
    stages.append(Stage("model", time.perf_counter() - t0, 0, f"{groups.n_groups} (pi, k0) groups"))

    # Nothing to do when the original data already satisfy C1 (P = I).
    rep = verify(sp.identity(K, format="csr"), "check P=I")
    if rep.max_risk <= alpha:
        return finish(sp.identity(K, format="csr"), Status.SUCCESS, "The data already satisfy C1: P = I.", None, {}, None, rep)

    solvers = solver_chain(solver)

    def blocks(reason):
        # The block structure (pramopt.blocks): invertible whatever its diagonal.  A few block
        # sizes (in records) are tried and the verified design of smallest loss is kept.
        best = None
        a_solve = alpha * (1.0 - margin)
        # larger blocks let lambda approach alpha (smaller loss) but mix more distant cells:
        # double the block size while the loss still drops by 5% and the support stays small
        target = float(np.ceil(4.0 / alpha))
        prev = np.inf
        while target <= max(4.0 / alpha, table.n):
            out = _solve_blocks(table, groups, combos, a_solve, alpha, target, fixed_idx, keep_rows,
                                invariant, refine_loss, rtol, max_iter, stages, progress)
            target *= 2
            if out["status"] == "ok":
                P = out["P"]
                rep = verify(P)
                if rep.max_risk <= alpha:
                    f = l2_loss(P, counts)
                    if best is None or f < best[0]:
                        best = (f, P, rep, out)
            if best is not None and (best[3]["reduction"]["support"] > BLOCK_SUPPORT_MAX
                                     or best[0] > 0.95 * prev):
                break
            prev = best[0] if best is not None else np.inf
        if best is None:
            return finish(sp.identity(K, format="csr"), Status.INFEASIBLE, reason + " No block design satisfied C1 either.",
                          None, {}, None)
        f, P, rep, out = best
        return finish(P, Status.SUCCESS, reason + " A block-diagonal retention-replacement design was made "
                      f"instead ({out['reduction']['blocks']} blocks of at least "
                      f"{out['reduction']['block_target_records']:g} records; P_b = lambda I + 1 v^T is "
                      "invertible for any lambda > 0). Full C1 verified.",
                      None, out["reduction"], out["solver"], rep)

    g_low = max(GAMMA_LADDER[-1], floor)
    bound = floor_upper_bound(table, groups, alpha)
    if structure == "blocks":
        return blocks("Block structure requested.")
    if bound < g_low and structure == "auto" and not invariant and min_diagonal is None:
        return blocks(f"No design with a diagonal floor >= {g_low:g} exists: C1 caps every floor at "
                      f"alpha * n / (largest number of groups of one combination) = {bound:.4g}.")
    # HiGHS first (the default chain): programs go to highspy directly, with column generation
    use_highs = solvers[:1] == ["HIGHS"]
    solve_at = _solve_highs if use_highs else _solve_at_gamma
    last_msg = ""
    for _ in range(3):
        a_solve = alpha * (1.0 - margin)
        # Phase one: the largest diagonal floor for which the reduced problem is feasible.
        t0 = time.perf_counter()
        ph = solve_at(table, groups, combos, a_solve, alpha, g_low, floor, support, fixed_idx,
                      keep_rows, invariant, solvers, False, rtol, 0, [], progress, max_floor=True)
        infeasible = ph["status"] == "infeasible" or (ph["status"] == "ok" and ph["t"] < g_low - 1e-9)
        if infeasible and structure == "auto" and not invariant and min_diagonal is None:
            stages.append(Stage("phase1", time.perf_counter() - t0, 0, "infeasible"))
            return blocks(f"No design with every diagonal entry >= {g_low:g} satisfies C1 (phase one).")
        if infeasible:
            stages.append(Stage("phase1", time.perf_counter() - t0, 0, "infeasible"))
            hint = (" An invariant design fixes every C1 denominator at U_pi(k0), so it needs "
                    "U_pi(k0) >= 1/(2 alpha) for every combination present." if invariant else "")
            return finish(sp.identity(K, format="csr"), Status.INFEASIBLE,
                          f"No design satisfies C1 with every diagonal entry >= {g_low:g} (needed to keep "
                          f"P invertible).{hint} Coarsen the identifying variables, use fewer "
                          f"combinations or a larger alpha.", g_low, {}, None)
        if ph["status"] != "ok":
            stages.append(Stage("phase1", time.perf_counter() - t0, 0, ph["status"]))
            return finish(sp.identity(K, format="csr"), Status.SOLVER_ERROR, f"Solver failed: {ph['status']}.", g_low, {}, None)
        t_star = ph["t"]
        stages.append(Stage("phase1", time.perf_counter() - t0, 0, f"largest feasible floor {t_star:.4g}"))
        # t_star may sit up to PHASE1_TIEBREAK below the largest floor; a rung just above the
        # true largest floor is found infeasible by the linear stage and the next one is tried
        ladder = [g for g in _gamma_ladder(gamma, floor) if g <= t_star + PHASE1_TIEBREAK] or [g_low]
        tried = []
        for gam in ladder:
            extra = {"init": ph.get("support")} if use_highs else {}
            out = solve_at(table, groups, combos, a_solve, alpha, gam, max(gam, floor), support,
                           fixed_idx, keep_rows, invariant, solvers, refine_loss, rtol, max_iter,
                           stages, progress, **extra)
            tried.append(gam)
            if out["status"] == "infeasible":
                last_msg = f"infeasible with diagonal floor {gam:g}"
                continue
            if out["status"] != "ok":
                return finish(sp.identity(K, format="csr"), Status.SOLVER_ERROR, f"Solver failed: {out['status']}.", gam,
                              out["reduction"], None)
            P = out["P"]
            why = f"Diagonal floor gamma = {gam:g}"
            if gam < gamma:
                why += (f": the reduced problem is infeasible at gamma = {gamma:g} (the largest feasible "
                        f"floor is {t_star:.4g}), so gamma was lowered as the paper suggests.")
            else:
                why += " (as requested)."
            rep = verify(P)
            if rep.max_risk <= alpha:
                return finish(P, Status.SUCCESS, why + f" Full C1 verified; solved at alpha*(1-{margin:g}).",
                              gam, out["reduction"], out["solver"], rep)
            last_msg = f"verification failed (max risk {rep.max_risk:.8g} > {alpha:g}) at margin {margin:g}"
            break
        else:
            return finish(sp.identity(K, format="csr"), Status.INFEASIBLE,
                          f"No design satisfies C1 with a diagonal floor in {', '.join(f'{g:g}' for g in tried)}. "
                          f"Coarsen the identifying variables, use fewer combinations or a larger alpha.",
                          tried[-1] if tried else None, {}, None)
        margin = min(margin * 10, 0.1)
    return finish(P, Status.UNVERIFIED, last_msg, tried[-1], out["reduction"], out["solver"], rep)


def _keep_rows(table: FrequencyTable, keep_cells, owner: str) -> np.ndarray:
    if keep_cells is None:
        return np.empty(0, dtype=np.int64)
    kc = pd.DataFrame(keep_cells)
    missing = [q for q in table.qi if q not in kc.columns]
    if missing:
        raise InvalidParameterError(
            f"The 'keep_cells' parameter of {owner} must give a value of every identifying variable; "
            f"{missing!r} missing.")
    codes = np.column_stack([table.categories[i].get_indexer(kc[q]) for i, q in enumerate(table.qi)])
    idx = cell_index(table, codes) if (codes >= 0).all() else np.full(len(kc), -1)
    if (idx < 0).any():
        raise InvalidParameterError(
            f"The 'keep_cells' parameter of {owner} must list cells present in the data; "
            f"{kc[idx < 0].to_dict('records')!r} are not.")
    return np.unique(idx)


class _WorkingSet:
    """The C1 rows (m, g) imposed on the solver, grown lazily from the full check.

    ``missing(P)`` runs the independent full C1 check at the solve level and returns the
    violated rows (as keys m * G + g) that are not imposed yet; ``add`` imposes them.
    """

    def __init__(self, m, g, table, groups, combos, a_solve):
        self.m, self.g = np.asarray(m, dtype=np.int64), np.asarray(g, dtype=np.int64)
        self.table, self.groups, self.combos, self.a_solve = table, groups, combos, a_solve
        self.counts = table.counts.astype(float)
        self.added = 0

    def missing(self, P) -> list:
        v = _verify.violated_rows(P, self.table.codes, self.counts, self.combos, self.a_solve)
        if not v:
            return []
        v = np.asarray(v)
        G = self.groups.n_groups
        key = np.unique(v[:, 0] * G + self.groups.member[v[:, 2], v[:, 1]])
        return key[~np.isin(key, self.m * G + self.g)].tolist()

    def add(self, keys) -> None:
        keys = np.asarray(keys, dtype=np.int64)
        G = self.groups.n_groups
        self.m = np.concatenate([self.m, keys // G])
        self.g = np.concatenate([self.g, keys % G])
        self.added += keys.size

    def block(self, sup, counts) -> C1Block:
        return c1_block(sup, self.groups, counts, self.m, self.g)


def _solve_at_gamma(table, groups, combos, a_solve, alpha, gam, floor, support_mode, fixed_idx,
                    keep_rows, invariant, solvers, refine_loss, rtol, max_iter, stages, progress,
                    max_floor=False):
    """Reduce at floor ``gam``, solve the linear stage with lazy rows, then refine the exact loss."""
    K = table.n_cells
    counts = table.counts.astype(float)
    t0 = time.perf_counter()
    red = reduce_constraints(table, groups, alpha, gam, lazy_outside=True)
    mode = support_mode if support_mode != "auto" else ("dense" if K <= DENSE_SUPPORT_MAX else "targets")
    sup = _support(table, groups, alpha, gam, mode, fixed_idx, keep_rows)
    if not max_floor:
        stages.append(Stage(f"reduce@{gam:g}", time.perf_counter() - t0, 0,
                            f"{red.m.size} rows, support {sup.size} ({mode})"))
    ws = _WorkingSet(red.m, red.g, table, groups, combos, a_solve)

    def bounds(sup):
        lo = np.zeros(sup.size)
        lo[sup.diag] = floor
        lo[sup.diag[keep_rows]] = 1.0
        return lo, np.ones(sup.size)

    def pending(x):
        """Rows of the full C1 violated at the solve level and missing from the working set."""
        return ws.missing(sup.to_matrix(x))

    def build(sup):
        return DesignLP(sup, counts, ws.block(sup, counts), a_solve, invariant,
                        max_floor=max_floor)

    def build_refine(sup):
        # the refinement re-solves one LP with new costs and bounds: a warm-started HiGHS
        # model when HiGHS is in the chain, else the cvxpy program
        blk = ws.block(sup, counts)
        if "HIGHS" in solvers:
            return HighsLP(sup, counts, blk, a_solve, invariant)
        return DesignLP(sup, counts, blk, a_solve, invariant)

    # linear stage (minimum expected changes, or phase one) with lazy constraint generation
    lo, hi = bounds(sup)
    c_lin = np.zeros(sup.size)
    if not max_floor:
        c_lin[sup.diag] = -counts  # minimise expected changes = sum U0 (1 - P_mm)
    t_lin = time.perf_counter()
    rounds = 0
    while True:
        rounds += 1
        lp = build(sup)
        out = lp.solve(c_lin, lo, hi, solvers)
        if out.x is None:
            stages.append(Stage(f"linear@{gam:g}", time.perf_counter() - t_lin, rounds, out.status))
            return {"status": "infeasible" if out.status == "infeasible" else out.status,
                    "reduction": red.as_dict()}
        x = clean(sup, out.x)
        new = pending(x)
        if progress is not None:
            progress("phase1" if max_floor else "linear", rounds,
                     l2_loss(sup.to_matrix(x).toarray(), counts), len(new))
        if not new:
            break
        ws.add(new)
    if max_floor:
        return {"status": "ok", "t": float(np.min(x[sup.diag]))}
    solver_used = out.solver
    stages.append(Stage(f"linear@{gam:g}", time.perf_counter() - t_lin, rounds,
                        f"{solver_used}, expected changes {expected_changes(sup.to_matrix(x), counts):.4g}"))

    if refine_loss and max_iter > 0:
        t_ref = time.perf_counter()
        if mode != "dense":
            # Refine over every row x the cells that received records in the linear stage: the
            # paper (Section 4) finds that a good P only moves records into a few covering cells.
            P_lin = sup.to_matrix(x).tolil()
            P_lin.setdiag(0)
            recv = np.flatnonzero(np.asarray(P_lin.tocsr().sum(axis=0)).ravel() > 0)
            new_sup = _rows_into(table, recv, fixed_idx, keep_rows).union(*sup.to_matrix(x).nonzero())
            x = new_sup.from_matrix(sup.to_matrix(x))
            sup = new_sup
        lp = build_refine(sup)
        lo, hi = bounds(sup)
        its = 0
        info = None
        while True:
            x, info = refine(lp, x, counts, lo, hi, solvers, check=pending, rtol=rtol,
                             max_iter=max_iter - its, progress=progress)
            its += info.iterations
            if info.stop_reason != "constraints" or its >= max_iter:
                break
            ws.add(info.added_constraints)
            lp = build_refine(sup)
        stages.append(Stage("refine", time.perf_counter() - t_ref, its,
                            f"support {sup.size}, stop: {info.stop_reason}, loss {info.loss_end:.4g}"))
    reduction = red.as_dict()
    reduction.update(final_working_set=int(ws.m.size), lazy_added=int(ws.added), support=int(sup.size),
                     support_mode=mode)
    return {"status": "ok", "P": sup.to_matrix(x), "reduction": reduction, "solver": solver_used}


def _binding(rep: "_verify.C1Report", table: FrequencyTable, combos, qi, alpha: float) -> pd.DataFrame:
    """C1 groups whose worst row is within 1e-4 (relative) of alpha, worst first."""
    rows = []
    for ci, (risk, k0s) in enumerate(zip(rep.risk_by_group, rep.groups_by_combination)):
        hit = np.flatnonzero(risk >= alpha * (1 - 1e-4))
        for g in hit:
            names = [qi[i] for i in combos[ci]]
            vals = [table.categories[i][k0s[g, j]] for j, i in enumerate(combos[ci])]
            rows.append({"combination": ",".join(names), "k0": tuple(vals), "risk": float(risk[g])})
    df = pd.DataFrame(rows, columns=["combination", "k0", "risk"])
    return df.sort_values("risk", ascending=False, ignore_index=True)


#: Sources of the initial cover support: at most this many support entries from the largest
#: cells into the cover (column generation adds whatever else helps).
COVER_BUDGET = 200_000
#: Rounds of column generation in one stage before giving up widening (the result stays
#: verified; only optimality over the full support is then not proven).
MAX_PRICING_ROUNDS = 60
#: Column generation stops once the Lagrangian bound puts the restricted linear stage within
#: this relative distance of the full K x K program's optimum.
LP_GAP_RTOL = 1e-4
#: Pricing rounds of phase one once its restricted program is feasible (see _solve_highs).
PHASE1_PRICING_ROUNDS = 5
#: Weight of the expected-changes tie-break in phase one (relative to the floor t).
PHASE1_TIEBREAK = 1e-4
#: Block designs stop growing their blocks beyond this many support entries.
BLOCK_SUPPORT_MAX = 2_000_000
#: The refinement prices new transitions after every this many iterations.
REFINE_CHUNK = 10
#: Largest initial refinement support beyond the linear stage's transitions (see _refine_pairs).
REFINE_SUPPORT_MAX = 100_000


def _cover_support(table, groups, alpha, gam, fixed_idx, keep_rows) -> Support:
    """Diagonal plus transitions from the largest cells into a greedy cover of the problem groups."""
    from .colgen import greedy_cover

    K = table.n_cells
    counts = table.counts.astype(float)
    problem = groups.size < 1.0 / (max(gam, 1e-12) * alpha)
    cover = greedy_cover(groups, problem, counts)
    n_src = int(min(K, max(20, COVER_BUDGET // max(1, cover.size))))
    sources = np.argsort(-counts, kind="stable")[:n_src]
    rr, cc = np.meshgrid(np.setdiff1d(sources, keep_rows), cover, indexing="ij")
    rr, cc = rr.ravel(), cc.ravel()
    ok = _allowed_fn(table, fixed_idx, keep_rows)(rr, cc)
    return Support.from_pairs(rr[ok], cc[ok], K)


def _allowed_fn(table, fixed_idx, keep_rows):
    """Transitions the options permit: not out of a kept cell, never across fixed strata."""
    kept = np.zeros(table.n_cells, dtype=bool)
    kept[keep_rows] = True
    codes = table.codes[:, fixed_idx] if fixed_idx else None

    def allowed(r, c):
        ok = ~kept[r]
        if codes is not None:
            ok &= np.all(codes[r] == codes[c], axis=1)
        return ok

    return allowed


def _solve_highs(table, groups, combos, a_solve, alpha, gam, floor, support_mode, fixed_idx,
                 keep_rows, invariant, solvers, refine_loss, rtol, max_iter, stages, progress,
                 max_floor=False, init: Support | None = None, widen: bool = True):
    """The HiGHS path: reduce at floor ``gam``, solve with lazy rows and column generation.

    Like :func:`_solve_at_gamma`, but the programs go to HiGHS directly (duals, warm starts,
    fast infeasibility) and, unless the support is dense, start from a cover support that
    column generation widens until no transition outside it has a negative reduced cost.
    Phase one (``max_floor``) is elastic -- every C1 row has a penalised slack -- so that a
    restricted support is never infeasible and can be priced; a positive slack after pricing
    means the floor is infeasible for the full K x K program.
    """
    from .colgen import Pricer, membership

    K = table.n_cells
    counts = table.counts.astype(float)
    t0 = time.perf_counter()
    red = reduce_constraints(table, groups, alpha, gam, lazy_outside=True)
    mode = support_mode if support_mode != "auto" else ("dense" if K <= DENSE_SUPPORT_MAX else "cover")
    if mode == "cover":
        sup = _cover_support(table, groups, alpha, gam, fixed_idx, keep_rows)
    else:
        sup = _support(table, groups, alpha, gam, mode, fixed_idx, keep_rows)
    if init is not None:
        sup = sup.union(init.rows, init.cols)
    widen = widen and mode != "dense"
    if not max_floor:
        stages.append(Stage(f"reduce@{gam:g}", time.perf_counter() - t0, 0,
                            f"{red.m.size} rows, support {sup.size} ({mode})"))
    ws = _WorkingSet(red.m, red.g, table, groups, combos, a_solve)
    allowed = _allowed_fn(table, fixed_idx, keep_rows)
    mem = membership(groups)
    added_cols = 0

    def bounds(sup):
        lo = np.zeros(sup.size)
        lo[sup.diag] = floor
        lo[sup.diag[keep_rows]] = 1.0
        return lo, np.ones(sup.size)

    def pending(sup, x):
        return ws.missing(sup.to_matrix(x))

    def lin_cost(sup):
        c = np.zeros(sup.size)
        if not max_floor:
            c[sup.diag] = -counts  # minimise expected changes = sum U0 (1 - P_mm)
        return c

    # linear stage (or phase one) with lazy rows and column generation
    t_lin = time.perf_counter()
    rounds = 0
    elastic = 1e3 if max_floor else None
    kept = np.zeros(K, dtype=bool)
    kept[keep_rows] = True

    def lp_vectors(lp):
        # cost and bounds in the LP's column order (priced columns are appended at the end)
        r, c = lp.rows_lp, lp.cols_lp
        diag = r == c
        if max_floor:
            # a tie-break towards keeping records: t alone leaves the LP free to move records
            # anywhere, and every needless move violates C1 rows that are only checked lazily
            # (on 400 rare-heavy cells, ~900 rows per round for 10+ rounds); it costs t at most
            # PHASE1_TIEBREAK, since sum_m U0(m) P_mm / n <= 1
            cost = np.where(diag, -PHASE1_TIEBREAK * counts[r] / counts.sum(), 0.0)
        else:
            cost = np.where(diag, -counts[r], 0.0)
        lo = np.where(diag, np.where(kept[r], 1.0, floor), 0.0)
        return cost, lo, np.ones(r.size)

    lp = None
    lp_gap = 0.0
    prev_E = np.inf
    while True:
        rounds += 1
        if lp is None:
            lp = HighsLP(sup, counts, ws.block(sup, counts), a_solve, invariant,
                         max_floor=max_floor, elastic=elastic)
        c, lo, hi = lp_vectors(lp)
        out = lp.solve(c, lo, hi)
        if out.x is None:
            stages.append(Stage(f"linear@{gam:g}", time.perf_counter() - t_lin, rounds, out.status))
            return {"status": out.status, "reduction": red.as_dict()}
        x = clean(sup, sup.from_matrix(sp.csr_matrix((out.x, (lp.rows_lp, lp.cols_lp)), shape=(K, K))))
        new = pending(sup, x)
        if progress is not None:
            progress("phase1" if max_floor else "linear", rounds, expected_changes(sup.to_matrix(x), counts),
                     len(new))
        if new and max_floor:
            # An upper bound on every feasible floor, before imposing the rest of the rows (on
            # rare-heavy data dozens of rounds of ~1,000 rows each): more rows only lower t, and
            # transitions outside the support can raise the objective by at most the Lagrangian
            # bound (each row sums to one; priced below -tol, so K * tol more).  The objective
            # is -t - tie-break + slack cost, so -objective - bound >= t for every feasible P.
            r = np.empty(0, dtype=np.int64)
            bound = 0.0
            if widen:
                tol = 1e-7
                r, cc, bound = Pricer(sup, groups, counts, lp.block, lp.duals(), allowed, mem).candidates(
                    tol=tol, max_add=max(2000, 2 * K))
                bound -= K * tol
            if -lp.objective - bound < gam - 1e-9:
                return {"status": "infeasible", "reduction": red.as_dict(), "support": sup}
            if r.size:
                sup = sup.union(r, cc)
                added_cols += r.size
        if new:
            ws.add(new)
            lp = None
            continue
        if widen and rounds < MAX_PRICING_ROUNDS:
            scale = lp.scale  # the cost scale HiGHS solved with (1 in phase one)
            r, cc, bound = Pricer(sup, groups, counts, lp.block, lp.duals(), allowed, mem).candidates(
                tol=1e-7 * scale, max_add=max(2000, 2 * K))
            # stop when the Lagrangian bound certifies the restricted optimum to be within
            # LP_GAP_RTOL of the full program's (degenerate tails add columns for nothing)
            obj = float(c @ out.x)
            gap = -bound / max(abs(obj) if max_floor else expected_changes(sup.to_matrix(x), counts), 1e-12)
            lp_gap = gap
            # ... or when a round gained less than that (the bound sums a worst case over every
            # row and can stay loose while the objective has stalled; it is reported as is)
            E = expected_changes(sup.to_matrix(x), counts)
            stalled = not max_floor and prev_E - E <= LP_GAP_RTOL * max(E, 1e-12)
            prev_E = E
            if gap <= LP_GAP_RTOL or stalled:
                r = r[:0]
            # Phase one only has to bound the floor from below: once the restricted program is
            # feasible (no slack) after a few rounds, a floor from the ladder below its t is
            # safe, and the linear stage prices to optimality at that floor anyway.
            settled = max_floor and rounds >= PHASE1_PRICING_ROUNDS and float(lp.slack.max(initial=0.0)) <= 1e-9
            if r.size and not settled:
                # a rebuilt model is solved with presolve, which beats HiGHS's warm start from
                # the old basis once thousands of columns are added (measured on 5,577 cells)
                sup = sup.union(r, cc)
                lp = None
                added_cols += r.size
                continue
        break
    if max_floor:
        slack = float(lp.slack.max()) if lp.slack is not None and lp.slack.size else 0.0
        if slack > 1e-9:
            return {"status": "infeasible", "reduction": red.as_dict(), "support": sup}
        return {"status": "ok", "t": float(np.min(x[sup.diag])), "support": sup, "x": x}
    solver_used = out.solver
    stages.append(Stage(f"linear@{gam:g}", time.perf_counter() - t_lin, rounds,
                        f"{solver_used}, support {sup.size} (+{added_cols} priced, gap to full <= {lp_gap:.1e}), "
                        f"expected changes "
                        f"{expected_changes(sup.to_matrix(x), counts):.4g}"))

    if refine_loss and max_iter > 0:
        t_ref = time.perf_counter()
        if widen:
            # Refine over every row x the cells that received records in the linear stage
            # (Section 4: a good P moves records into a few covering cells); pricing with the
            # exact loss's gradient adds whatever else would help.
            Px = sup.to_matrix(x).tocoo()
            off = (Px.row != Px.col) & (Px.data > 0)
            rr, cc = _refine_pairs(Px, off, counts, allowed)
            small = Support.from_pairs(np.concatenate([rr, Px.row[off]]),
                                       np.concatenate([cc, Px.col[off]]), K)
            x = small.from_matrix(sup.to_matrix(x))
            sup = small
        its = 0
        info = None
        lp = None
        radius, hist = 0.05, ()
        dropped = np.empty(0, dtype=np.int64)  # keys row * K + col dropped once: never again
        idle = 0  # chunks in a row without an accepted step
        stop = None
        while its < max_iter:
            if lp is None:
                lp = HighsLP(sup, counts, ws.block(sup, counts), a_solve, invariant)
            lo, hi = bounds(sup)
            # in chunks, so that pricing can widen the support while the refinement runs
            x, info = refine(lp, x, counts, lo, hi, solvers, check=lambda z: pending(sup, z), rtol=rtol,
                             max_iter=min(REFINE_CHUNK if widen else max_iter, max_iter - its),
                             progress=progress, sparse=mode != "dense", radius=radius, history=hist)
            its += info.iterations
            radius, hist = info.radius, info.history
            if info.stop_reason == "constraints":
                ws.add(info.added_constraints)
                lp = None
                continue
            if info.stop_reason.startswith("subproblem"):
                break
            # priced columns that the trust region cannot turn into a decrease twice in a row:
            # the linear model is exhausted there
            idle = idle + 1 if info.accepted == 0 else 0
            if idle >= 2:
                stop = "stalled (no accepted step after pricing)"
                break
            r = np.empty(0)
            drop = np.zeros(sup.size, dtype=bool)
            if widen and info.duals is not None:
                # price transitions outside the support with the exact loss's gradient
                tol = rtol * 1e-3 * info.grad_scale
                r, cc, _ = Pricer(sup, groups, counts, lp.block, info.duals, allowed, mem).candidates(
                    cost_fn=info.grad_columns, tol=tol, max_add=max(2000, 2 * K))
                # ... and drop unused transitions that the same prices call unattractive, so that
                # the trust-region LP stays small (pricing brings them back if that changes)
                dj = lp.col_duals()[np.lexsort((lp.cols_lp, lp.rows_lp))]  # in support order
                keys = sup.rows * K + sup.cols
                # each transition is dropped at most once, so that dropping and pricing cannot cycle
                drop = (x <= 0.0) & (sup.rows != sup.cols) & (dj > tol) & ~np.isin(keys, dropped)
            if r.size or drop.sum() > sup.size // 10:
                base = sup
                if drop.any():
                    dropped = np.union1d(dropped, keys[drop])
                    base = Support.from_pairs(sup.rows[~drop], sup.cols[~drop], K)
                sup_new = base.union(r, cc) if r.size else base
                x = sup_new.from_matrix(sup.to_matrix(x))
                sup = sup_new
                added_cols += r.size
                lp = None
                radius, hist = max(radius, 0.0125), ()
            elif info.stop_reason != "max_iter":
                break
        stages.append(Stage("refine", time.perf_counter() - t_ref, its,
                            f"support {sup.size}, stop: {stop or info.stop_reason}, loss {info.loss_end:.4g}"))
    reduction = red.as_dict()
    reduction.update(final_working_set=int(ws.m.size), lazy_added=int(ws.added), support=int(sup.size),
                     support_mode=mode, priced_transitions=int(added_cols), linear_gap_bound=float(lp_gap))
    return {"status": "ok", "P": sup.to_matrix(x), "reduction": reduction, "solver": solver_used}


def _refine_pairs(Px: sp.coo_matrix, off: np.ndarray, counts: np.ndarray, allowed) -> tuple:
    """Candidate transitions for the refinement: movers x receivers of the linear stage.

    When every mover may go to every receiver within REFINE_SUPPORT_MAX entries, that is the
    support.  Otherwise (thousands of cells, almost all of them movers) each mover keeps the
    receivers where the exact loss's gradient at the linear-stage design is smallest -- within a
    row, moving mass from the diagonal to column c changes the loss at rate G[m, c] - G[m, m] --
    and the pricing between refinement chunks adds whatever else would help.  On 5,577 cells
    the full product has 1.9M entries and one trust-region LP over it takes about 100 s.
    """
    K = Px.shape[0]
    recv = np.unique(Px.col[off])
    movers = np.unique(np.concatenate([Px.row[off], recv]))
    if movers.size * recv.size <= REFINE_SUPPORT_MAX:
        rr, cc = np.meshgrid(movers, recv, indexing="ij")
        rr, cc = rr.ravel(), cc.ravel()
        ok = allowed(rr, cc)
        return rr[ok], cc[ok]
    from .loss import SparseL2

    k = max(1, REFINE_SUPPORT_MAX // movers.size)
    s = SparseL2(sp.csr_matrix(Px), counts)
    if s.singular:  # cannot happen above the 0.51 floor; keep the linear stage's own pairs
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    step = max(1, 4_000_000 // K)  # gradient blocks of at most 4M entries (32 MB)
    best_val = np.full((movers.size, 0), np.inf)
    best_col = np.zeros((movers.size, 0), dtype=np.intp)
    for a in range(0, recv.size, step):
        cols = recv[a:a + step]
        G = s.grad_columns(cols)[movers]
        rr, cc = np.meshgrid(movers, cols, indexing="ij")
        G[~allowed(rr.ravel(), cc.ravel()).reshape(G.shape)] = np.inf
        G[rr == cc] = np.inf  # the diagonal is always in the support
        vals = np.concatenate([best_val, G], axis=1)
        idx = np.concatenate([best_col, np.broadcast_to(cols, G.shape)], axis=1)
        keep = np.argsort(vals, axis=1, kind="stable")[:, :k]
        best_val = np.take_along_axis(vals, keep, axis=1)
        best_col = np.take_along_axis(idx, keep, axis=1)
    ok = np.isfinite(best_val)
    out_r = np.broadcast_to(movers[:, None], best_val.shape)[ok]
    out_c = best_col[ok]
    return out_r, out_c


def floor_upper_bound(table: FrequencyTable, groups: Groups, alpha: float) -> float:
    """An upper bound on any diagonal floor that C1 allows: alpha * n / max_π |groups of π|.

    Every (π, k0) group holds a present cell m with P(m, g) >= P_mm >= t, so C1 forces
    D_g >= t / alpha; the denominators of one π add up to n (each record's released cell
    lies in exactly one group of π).  Hence n >= |groups of π| * t / alpha for every π.
    When this is below 1/2 no strictly diagonally dominant design exists, which the designer
    learns here without solving anything.
    """
    per_combo = np.bincount(groups.combination)
    return float(alpha * table.n / per_combo.max())


def _solve_blocks(table, groups, combos, a_solve, alpha, target, fixed_idx, keep_rows, invariant,
                  refine_loss, rtol, max_iter, stages, progress):
    """Block-diagonal retention-replacement design (see :mod:`pramopt.blocks`), verified lazily."""
    from .blocks import LAMBDA_MIN, BlockModel, make_blocks

    K = table.n_cells
    counts = table.counts.astype(float)
    t0 = time.perf_counter()
    bm = BlockModel(make_blocks(table, target, fixed_idx, keep_rows), K)
    sup = bm.support
    # start with each rare row's own groups; rows outside their group join when violated
    rare = np.flatnonzero(counts < 1.0 / alpha)
    nP = groups.member.shape[1]
    ws = _WorkingSet(np.repeat(rare, nP), groups.member[rare].ravel(), table, groups, combos, a_solve)
    stages.append(Stage(f"blocks({target:g})", time.perf_counter() - t0, 0,
                        f"{bm.B} blocks, {bm.n_params} parameters, support {sup.size}"))
    cx = np.zeros(sup.size)
    cx[sup.diag] = -counts
    cz = bm.T.T @ cx
    lo = np.zeros(bm.n_params)
    lo[: bm.B] = LAMBDA_MIN
    kept_blocks = bm.block_of[np.asarray(keep_rows, dtype=np.int64)]
    lo[kept_blocks] = 1.0
    hi = np.ones(bm.n_params)

    def pending(z):
        return ws.missing(bm.matrix(z))

    t_lin = time.perf_counter()
    rounds = 0
    while True:
        rounds += 1
        lp = HighsLP(sup, counts, ws.block(sup, counts), a_solve, invariant, param=bm.T)
        out = lp.solve(cz, lo, hi)
        if out.x is None:
            stages.append(Stage(f"linear(blocks {target:g})", time.perf_counter() - t_lin, rounds, out.status))
            return {"status": out.status, "reduction": {}}
        z = bm.clean(out.x)
        new = pending(z)
        if progress is not None:
            progress("linear", rounds, expected_changes(bm.matrix(z), counts), len(new))
        if not new:
            break
        ws.add(new)
    stages.append(Stage(f"linear(blocks {target:g})", time.perf_counter() - t_lin, rounds,
                        f"expected changes {expected_changes(bm.matrix(z), counts):.4g}"))
    if refine_loss and max_iter > 0:
        t_ref = time.perf_counter()
        its = 0

        def loss(zz):
            f, g = bm.loss_and_grad(zz, counts)
            return f, g, None

        while its < max_iter:
            z, info = refine(lp, z, counts, lo, hi, None, check=pending, rtol=rtol, max_iter=max_iter - its,
                             progress=progress, loss=loss, clean_fn=bm.clean)
            its += info.iterations
            if info.stop_reason != "constraints":
                break
            ws.add(info.added_constraints)
            lp = HighsLP(sup, counts, ws.block(sup, counts), a_solve, invariant, param=bm.T)
        stages.append(Stage("refine(blocks)", time.perf_counter() - t_ref, its,
                            f"stop: {info.stop_reason}, loss {info.loss_end:.4g}"))
    lam = z[: bm.B]
    reduction = {"structure": "blocks", "blocks": bm.B, "block_target_records": target,
                 "min_lambda": float(lam.min()), "final_working_set": int(ws.m.size), "support": int(sup.size)}
    return {"status": "ok", "P": bm.matrix(z), "reduction": reduction, "solver": out.solver}
