"""Block designs for data where most cells are rare or unique (the hard case).

When almost every record is unique, C1 cannot hold with a diagonal floor above 1/2: every
(π, k0) group of a unique record needs about 1/alpha records' worth of inflow, far more than
the rest of the data can send while keeping P_kk > 1/2.  Strict diagonal dominance, which the
designer otherwise uses to keep P invertible, is then out of reach.

Here P is block diagonal over groups of neighbouring cells, and inside a block b

    P_b = lambda_b I + 1 v_b^T,      lambda_b + sum_{k in b} v_k = 1,  lambda_b >= eps,  v >= 0,

the retention-replacement form of Ikarashi et al. with a free replacement distribution per
block.  Every entry is linear in (lambda, v), so the C1 constraints stay linear and the
program has only K + (number of blocks) variables; and det P_b = lambda_b^(|b|-1), so P is
invertible for every feasible point however small its diagonal.  The inverse has the closed
form P_b^-1 = (I - 1 v_b^T) / lambda_b, which gives the exact L2 loss and its gradient in O(K).
The result is verified against the full, unreduced C1 like every other design.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import scipy.sparse as sp

from ...frequency.table import FrequencyTable
from ...loss import expected_changes, l2_loss
from ...result import Reduction
from ...structured import ReplacementForm, form_or_none
from ..backends import chain
from ..constraints.c1 import WorkingSet
from ..constraints.invariance import Invariance
from ..problem import DesignProblem, Trace
from ..program import build_program
from ..support import Support
from . import Attempt, AttemptStatus, beyond_distance
from .checks import check
from .lazy import refine_lazy, solve_lazy

__all__ = ["solve", "make_blocks", "BlockModel", "LAMBDA_MIN", "BLOCK_SUPPORT_MAX"]

#: Block designs stop growing their blocks beyond this many support entries.
BLOCK_SUPPORT_MAX = 2_000_000


#: Smallest lambda_b: keeps P well away from singular (cond(P_b) grows like 1/lambda_b).
LAMBDA_MIN = 1e-3


def make_blocks(
    table: FrequencyTable, target: float, fixed_idx=(), keep_rows=(), strata=None
) -> list[np.ndarray]:
    """Consecutive cells (in lexicographic order, so neighbours share their leading values)
    grouped until a block holds at least ``target`` records; never across strata (``strata``,
    by default those of the fixed variables); kept cells form blocks of their own."""
    K = table.n_cells
    counts = table.counts
    keep = np.zeros(K, dtype=bool)
    keep[np.asarray(keep_rows, dtype=np.int64)] = True
    if strata is not None:
        strata = np.asarray(strata)
    elif fixed_idx:
        strata = np.unique(table.codes[:, list(fixed_idx)], axis=0, return_inverse=True)[1].ravel()
    else:
        strata = np.zeros(K, dtype=np.int64)
    blocks: list[np.ndarray] = [np.array([k]) for k in np.flatnonzero(keep)]
    for s in np.unique(strata):
        cells = np.flatnonzero((strata == s) & ~keep)
        cur, tot = [], 0.0
        for k in cells:
            cur.append(k)
            tot += counts[k]
            if tot >= target:
                blocks.append(np.array(cur))
                cur, tot = [], 0.0
        if cur:  # the remainder joins the stratum's last block, so no block is too small
            if (
                blocks
                and len(blocks[-1])
                and strata[blocks[-1][0]] == s
                and not keep[blocks[-1][0]]
            ):
                blocks[-1] = np.concatenate([blocks[-1], cur])
            else:
                blocks.append(np.array(cur))
    return blocks


class BlockModel:
    """The map z = (lambda_1..lambda_B, v_1..v_K) -> the entries of a block-diagonal P.

    Attributes
    ----------
    support : Support
        Every pair of cells within a block.
    T : scipy.sparse.csr_matrix
        x = T z, the support entries of P.
    block_of : ndarray
        Block index of every cell.
    """

    def __init__(self, blocks, K: int, floor: float = LAMBDA_MIN):
        self.floor = max(float(floor), LAMBDA_MIN)  # every lambda_b, hence every diagonal entry
        self.blocks = [np.asarray(b, dtype=np.int64) for b in blocks]
        self.B = len(self.blocks)
        self.K = K
        self.block_of = np.empty(K, dtype=np.int64)
        for i, b in enumerate(self.blocks):
            self.block_of[b] = i
        rows = np.concatenate([np.repeat(b, b.size) for b in self.blocks])
        cols = np.concatenate([np.tile(b, b.size) for b in self.blocks])
        self.support = Support.from_pairs(rows, cols, K)
        r, c = self.support.rows, self.support.cols
        S = self.support.size
        diag = r == c
        # x_s = lambda_{block} [r == c] + v_c
        Tl = sp.csr_matrix(
            (np.ones(int(diag.sum())), (np.flatnonzero(diag), self.block_of[r[diag]])),
            shape=(S, self.B),
        )
        Tv = sp.csr_matrix((np.ones(S), (np.arange(S), c)), shape=(S, K))
        self.T = sp.hstack([Tl, Tv], format="csr")

    @property
    def n_params(self) -> int:
        return self.B + self.K

    def split(self, z):
        return z[: self.B], z[self.B :]

    def clean(self, z) -> np.ndarray:
        """Clip to the feasible box and rescale each block's v so that its rows sum to one.

        lambda_b is kept at or above the floor exactly (the diagonal is lambda_b + v_k, so a
        ``min_diagonal`` held by lambda_b is held by P), and v fills the rest of each row.
        """
        lam, v = self.split(np.asarray(z, dtype=float).copy())
        lam = np.clip(lam, self.floor, 1.0)
        v = np.maximum(v, 0.0)
        vs = np.bincount(self.block_of, weights=v, minlength=self.B)
        scale = np.where(vs > 0, (1.0 - lam) / np.where(vs > 0, vs, 1.0), 0.0)
        lam = np.where(vs > 0, lam, 1.0)
        return np.concatenate([lam, v * scale[self.block_of]])

    def matrix(self, z) -> sp.csr_matrix:
        return self.support.to_matrix(self.T @ z)


def _solve_at_size(problem: DesignProblem, target: float, a_solve: float, trace: Trace) -> Attempt:
    """Block-diagonal retention-replacement design with blocks of ``target`` records, verified
    lazily."""
    p = problem.params
    K = problem.K
    counts = problem.counts
    t0 = time.perf_counter()
    # min_diagonal holds when every lambda_b does (P_kk = lambda_b + v_k >= lambda_b)
    bm = BlockModel(
        make_blocks(problem.table, target, keep_rows=problem.keep_rows, strata=problem.strata),
        K,
        floor=p.min_diagonal or LAMBDA_MIN,
    )
    sup = bm.support
    # start with each rare row's own groups; rows outside their group join when violated
    rare = np.flatnonzero(counts < 1.0 / problem.alpha)
    nP = problem.groups.member.shape[1]
    ws = WorkingSet(
        np.repeat(rare, nP),
        problem.groups.member[rare].ravel(),
        problem.table,
        problem.groups,
        problem.combos,
        a_solve,
    )
    trace.add(
        f"blocks({target:g})",
        time.perf_counter() - t0,
        0,
        f"{bm.B} blocks, {bm.n_params} parameters, support {sup.size}",
    )
    cx = np.zeros(sup.size)
    cx[sup.diag] = -counts
    cz = bm.T.T @ cx
    lo = np.zeros(bm.n_params)
    lo[: bm.B] = bm.floor
    lo[bm.block_of[np.asarray(problem.keep_rows, dtype=np.int64)]] = 1.0
    hi = np.ones(bm.n_params)

    def pending(z):
        return ws.missing(bm.matrix(z))

    def load():
        # always the default chain (HiGHS first): block programs reach millions of support
        # entries, beyond what the interior-point solvers behind cvxpy handle in reasonable time
        inv = [Invariance(counts)] if p.invariant else []
        return chain(build_program(sup, [ws.rows(sup), *inv], param=bm.T), None)

    t_lin = time.perf_counter()
    out, z, lp, rounds = solve_lazy(
        load,
        cz,
        lo,
        hi,
        bm.clean,
        pending,
        ws.add,
        on_round=lambda r, z, new: trace.progress(
            "linear", r, expected_changes(bm.matrix(z), counts), len(new)
        ),
    )
    if z is None:
        trace.add(f"linear(blocks {target:g})", time.perf_counter() - t_lin, rounds, out.status)
        kind = (
            AttemptStatus.INFEASIBLE if out.status == "infeasible" else AttemptStatus.SOLVER_ERROR
        )
        return Attempt(kind, detail=out.status)
    trace.add(
        f"linear(blocks {target:g})",
        time.perf_counter() - t_lin,
        rounds,
        f"expected changes {expected_changes(bm.matrix(z), counts):.4g}",
    )
    if p.refine_loss and p.max_iter > 0:
        z = _refine_blocks(problem, bm, trace, load, lp, z, lo, hi, pending, ws)
    lam = z[: bm.B]
    reduction = Reduction(
        structure="blocks",
        blocks=bm.B,
        block_target_records=float(target),
        min_lambda=float(lam.min()),
        final_working_set=int(ws.m.size),
        support=int(sup.size),
        # the design's parameters: saved, released and inverted instead of its entries
        form=form_or_none(ReplacementForm.from_blocks, lam, z[bm.B :], bm.block_of),
    )
    return Attempt(AttemptStatus.OK, P=bm.matrix(z), reduction=reduction, solver=out.solver)


def _refine_blocks(problem: DesignProblem, bm, trace: Trace, load, lp, z, lo, hi, pending, ws):
    """The refinement of the exact loss over the block parameters ``z`` (lazy C1 rows)."""
    p = problem.params
    t_ref = time.perf_counter()
    evaluate = problem.objective.on_blocks(bm, problem.counts)
    z, info, its = refine_lazy(
        load,
        lp,
        z,
        lo,
        hi,
        evaluate,
        pending,
        ws.add,
        p.max_iter,
        rtol=p.rtol,
        progress=trace.progress,
        clean_fn=bm.clean,
    )
    trace.add(
        "refine(blocks)",
        time.perf_counter() - t_ref,
        its,
        f"stop: {info.stop_reason}, loss {info.loss_end:.4g}",
    )
    return z


def _support(att: Attempt) -> int:
    """The size of a block attempt's support (its reduction always gives it)."""
    assert att.reduction is not None and att.reduction.support is not None
    return att.reduction.support


def solve(problem: DesignProblem, level: float, trace: Trace) -> Attempt:
    """The block design of smallest objective over a few block sizes, solved at ``level``.

    Larger blocks let lambda approach alpha (smaller loss) but mix more distant cells: the
    block size (in records) starts at 4/alpha and doubles while the objective still drops by 5%
    and the support stays below ``BLOCK_SUPPORT_MAX``.  Each size's matrix is checked against
    the full C1 (:func:`.checks.check`) and only those that pass compete; when none passes, the
    last matrix that failed is returned (the designer's check fails it, and a larger margin may
    mend it); INFEASIBLE when no size gave a matrix.
    """
    skipped = beyond_distance(problem, trace, "blocks", None)
    if skipped is not None:
        return skipped
    alpha, counts = problem.alpha, problem.counts
    best = failed = None
    target = float(np.ceil(4.0 / alpha))
    prev = np.inf
    while target <= max(4.0 / alpha, problem.n):
        att = _solve_at_size(problem, target, level, trace)
        target *= 2
        if att.ok:
            if check(problem, trace, att.P).max_risk <= alpha:
                loss = l2_loss(att.P, counts)
                f = problem.objective.value(att.P, counts, loss=loss)
                if best is None or f < best[1]:
                    best = (dataclasses.replace(att, loss=loss), f)
            else:
                failed = att
        if best is not None and (_support(best[0]) > BLOCK_SUPPORT_MAX or best[1] > 0.95 * prev):
            break
        prev = best[1] if best is not None else np.inf
    if best is None:
        return failed or Attempt(AttemptStatus.INFEASIBLE, detail="No block design satisfied C1.")
    r = best[0].reduction
    assert r is not None  # every block attempt has one
    return dataclasses.replace(
        best[0],
        describe=(
            f"A block-diagonal retention-replacement design was made ({r.blocks} blocks of at "
            "least "
            f"{r.block_target_records:g} records; P_b = lambda I + 1 v^T is invertible for any "
            "lambda > 0)."
        ),
    )
