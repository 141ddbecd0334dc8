"""One trust-region step on one variable's matrix, every other matrix fixed.

With every ``M_w`` (w != v) fixed, each row of C1 over a combination π that holds v is linear in
``M_v``: the row of projected cell m and released group g = (g_v, h) reads

    A(m, h) M_v[m_v, g_v] - alpha * sum_i B(i, h) M_v[i, g_v] <= 0,

with ``A(m, h) = prod_{w in π, w != v} M_w[m_w, h_w]`` and ``B(i, h)`` the projected table with
``l_v = i`` contracted with the other matrices.  The step minimises the loss's linear model
(:func:`.model.loss_gradient`) over the change of ``M_v`` in a box of radius ``radius``: rows
stochastic, entries in [0, 1], the diagonal floor, the invariance ``u^T M_v = u^T`` when asked,
and C1's rows that are near binding (a working set: rows found violated after a step are added and
the step solved again).  The caller accepts it only when the exact loss drops and C1 holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from .model import Projection, candidate_groups, contract, gathered_numerators

__all__ = ["StepProblem", "c1_rows", "solve_step"]

#: Rows of the working set at most (the nearest to binding first).
ROWS_MAX = 30_000


@dataclass(frozen=True)
class StepProblem:
    """What one step on ``M_v`` needs besides the rows of C1."""

    M: np.ndarray
    grad: np.ndarray
    radius: float
    floor: float
    marginal: np.ndarray | None  # the variable's counts when the matrix must keep them


def c1_rows(
    projs: Sequence[Projection], mats: Sequence[np.ndarray], v: int, level: float, keep: float
) -> tuple[sp.csr_matrix, np.ndarray, float]:
    """C1's rows over the combinations that hold v whose left-hand side is at least ``keep *
    level`` now, as ``(A_ub, b_ub, largest left-hand side)`` in the change of ``M_v``
    (``vec`` row-major), ``A_ub @ vec(D) <= b_ub``."""
    L = mats[v].shape[0]
    M = mats[v]
    parts = []
    worst = 0.0
    for p in projs:
        if v not in p.variables or p.rare.shape[0] == 0:
            continue
        j = p.variables.index(v)
        sub = [mats[x] for x in p.variables]
        Bt = np.moveaxis(contract(p.tensor, sub, skip=j), j, 0)  # (i, other axes of π)
        B = Bt.reshape(L, -1)  # (i, h)
        den = (M.T @ B).ravel()  # flat groups with g_v first: (g_v, h)
        order = (j, *[a for a in range(len(sub)) if a != j])
        lv = tuple(p.levels[a] for a in order)
        view = Projection(p.variables, lv, p.tensor, p.rare[:, order], p.rare_counts)
        groups = candidate_groups(view, [sub[a] for a in order], den, keep * level)
        if groups.size == 0:
            continue
        num = gathered_numerators(view.rare, [sub[a] for a in order], groups, lv)  # (m, groups)
        with np.errstate(divide="ignore", invalid="ignore"):
            risk = np.where(num > 0, num / den[groups], 0.0)
        worst = max(worst, float(risk.max(initial=0.0)))
        m_i, k_i = np.nonzero(risk >= keep * level)
        if m_i.size == 0:
            continue
        if m_i.size > ROWS_MAX:
            top = np.argsort(-risk[m_i, k_i], kind="stable")[:ROWS_MAX]
            m_i, k_i = m_i[top], k_i[top]
        R = m_i.size
        g_i, h_i = np.divmod(groups[k_i], B.shape[1])
        mv = view.rare[m_i, 0]
        # A(m, h) = prod over the other variables of π of M_w[m_w, h_w]
        hc = np.unravel_index(h_i, lv[1:]) if len(order) > 1 else ()
        A = np.ones(R)
        for k, a in enumerate(order[1:]):
            A *= sub[a][view.rare[m_i, k + 1], hc[k]]
        # coefficient of D[i, g_v]: -level * B[i, h], plus A(m, h) on i = m_v
        coef = -level * B[:, h_i].T  # (R, L)
        coef[np.arange(R), mv] += A
        cols = np.arange(L)[None, :] * L + g_i[:, None]
        rows = np.repeat(np.arange(R), L)
        parts.append(
            (
                sp.csr_matrix((coef.ravel(), (rows, cols.ravel())), shape=(R, L * L)),
                -(num[m_i, k_i] - level * den[groups[k_i]]),
            )
        )
    if not parts:
        return sp.csr_matrix((0, L * L)), np.zeros(0), worst
    return sp.vstack([a for a, _ in parts]).tocsr(), np.concatenate([b for _, b in parts]), worst


def ratio_rows(M: np.ndarray, eps: float) -> tuple[sp.csr_matrix, np.ndarray]:
    """epsilon-DP of one matrix as rows in its change D: ``M'[i, j] <= e^eps M'[i2, j]`` for every
    column j and rows i != i2 (``vec`` row-major), ``A_ub @ vec(D) <= b_ub``."""
    L = M.shape[0]
    e = math.exp(eps)
    i, i2, j = (
        x.ravel() for x in np.meshgrid(np.arange(L), np.arange(L), np.arange(L), indexing="ij")
    )
    keep = i != i2
    i, i2, j = i[keep], i2[keep], j[keep]
    R = i.size
    rows = np.repeat(np.arange(R), 2)
    cols = np.stack([i * L + j, i2 * L + j], axis=1).ravel()
    vals = np.tile([1.0, -e], R)
    A = sp.csr_matrix((vals, (rows, cols)), shape=(R, L * L))
    return A, e * M[i2, j] - M[i, j]


def solve_step(pb: StepProblem, A_ub, b_ub) -> np.ndarray | None:
    """The change ``D`` of ``M_v`` minimising ``<grad, D>`` under the step's constraints; None
    when the program fails (the caller shrinks the radius)."""
    M, L = pb.M, pb.M.shape[0]
    lo = np.maximum(-M, -pb.radius)
    hi = np.minimum(1.0 - M, pb.radius)
    d = np.arange(L)
    lo[d, d] = np.maximum(lo[d, d], np.minimum(pb.floor - M[d, d], 0.0))
    eq = [sp.kron(sp.eye(L), np.ones((1, L)))]  # each row of D sums to 0
    if pb.marginal is not None:
        eq.append(sp.kron(pb.marginal[None, :], sp.eye(L)))  # u^T D = 0
    A_eq = sp.vstack(eq).tocsr()
    scale = float(np.abs(pb.grad).max()) or 1.0
    # rows scaled to unit size so that the solver's tolerances mean the same for every row
    if A_ub.shape[0]:
        norm = np.sqrt(np.asarray(A_ub.multiply(A_ub).sum(axis=1)).ravel())
        norm[norm == 0] = 1.0
        A_ub = sp.diags(1.0 / norm) @ A_ub
        b_ub = b_ub / norm
    res = linprog(
        (pb.grad / scale).ravel(),
        A_ub=A_ub if A_ub.shape[0] else None,
        b_ub=b_ub if A_ub.shape[0] else None,
        A_eq=A_eq,
        b_eq=np.zeros(A_eq.shape[0]),
        bounds=np.stack([lo.ravel(), hi.ravel()], axis=1),
        method="highs",
    )
    if res.status != 0 or res.x is None:
        return None
    return res.x.reshape(L, L)
