"""The reducer: which C1 rows need to be imposed (Cator et al., Section 4, bounds (2) and (5)).

* Bound (2): rows m with U0(m) >= 1/alpha always satisfy C1.
* With every diagonal entry P_kk >= gamma: a group g = (π, k0) with U_π(k0) >= 1/(gamma alpha)
  always satisfies C1.
* Bound (5): for m outside g (m_π != k0) the left-hand side is at most (1 - gamma)/(gamma U_π(k0)),
  so such rows need checking only where U_π(k0) < (1 - gamma)/(gamma alpha).  With
  (1 - gamma)/gamma < alpha this never happens, which is the paper's third rule.

The reduction is exact given the floor, so the solver enforces P_kk >= gamma whenever it is used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import FrequencyTable
from .model import Groups


@dataclass(frozen=True)
class Reduction:
    """Constraint counts before and after each reduction, and the working set it leaves.

    Attributes
    ----------
    gamma : float
        Diagonal floor the reduction relies on (0 means none).
    full : int
        Every present m times every (π, k0).
    after_row_bound : int
        After dropping rows with U0(m) >= 1/alpha (bound (2)).
    after_group_bound : int
        After dropping groups with U_π(k0) >= 1/(gamma alpha).
    after_member_rule : int
        After dropping rows outside their group that bound (5) clears: the reduced problem.
    outside_rows : int
        Rows m outside g that bound (5) does not clear (part of ``after_member_rule``).
    m, g : ndarray
        The reduced working set of (m, g) pairs.  If ``lazy_outside`` was requested, the rows
        outside their group are left out and only added once a full check finds them violated.
    """

    gamma: float
    full: int
    after_row_bound: int
    after_group_bound: int
    after_member_rule: int
    outside_rows: int
    m: np.ndarray
    g: np.ndarray

    def as_dict(self) -> dict:
        return {
            "gamma": self.gamma,
            "full": self.full,
            "after_row_bound": self.after_row_bound,
            "after_group_bound": self.after_group_bound,
            "after_member_rule": self.after_member_rule,
            "outside_rows": self.outside_rows,
            "working_set": int(self.m.size),
        }


def reduce_constraints(
    table: FrequencyTable,
    groups: Groups,
    alpha: float,
    gamma: float,
    *,
    lazy_outside: bool = True,
) -> Reduction:
    """Apply the paper's reductions for a diagonal floor ``gamma`` (0 for none)."""
    counts = np.asarray(table.counts, dtype=float)
    K, G = table.n_cells, groups.n_groups
    rare = np.flatnonzero(counts < 1.0 / alpha)
    if gamma > 0:
        problem = np.flatnonzero(groups.size < 1.0 / (gamma * alpha))
        outside = groups.size < (1.0 - gamma) / (gamma * alpha)
    else:
        problem = np.arange(G)
        outside = np.ones(G, dtype=bool)
    # rows inside their own group: every rare member of each problem group
    ci = groups.combination[problem]
    mem_m, mem_g = [], []
    for c in np.unique(ci):
        gs = problem[ci == c]
        col = groups.member[rare, c]
        hit = np.isin(col, gs)
        mem_m.append(rare[hit])
        mem_g.append(col[hit])
    m_in = np.concatenate(mem_m) if mem_m else np.empty(0, np.int64)
    g_in = np.concatenate(mem_g) if mem_g else np.empty(0, np.int64)
    out_groups = problem[outside[problem]]
    n_out = int(out_groups.size * rare.size - np.isin(g_in, out_groups).sum())
    if lazy_outside or out_groups.size == 0:
        m_w, g_w = m_in, g_in
    else:
        mm, gg = np.meshgrid(rare, out_groups, indexing="ij")
        mm, gg = mm.ravel(), gg.ravel()
        inside = groups.member[mm, groups.combination[gg]] == gg
        m_w = np.concatenate([m_in, mm[~inside]])
        g_w = np.concatenate([g_in, gg[~inside]])
    return Reduction(
        gamma=float(gamma),
        full=int(K * G),
        after_row_bound=int(rare.size * G),
        after_group_bound=int(rare.size * problem.size),
        after_member_rule=int(m_in.size + n_out),
        outside_rows=n_out,
        m=m_w.astype(np.int64),
        g=g_w.astype(np.int64),
    )
