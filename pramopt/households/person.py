"""The person part of a household design: one LP in ``Pp`` with the household part fixed.

With ``Ph`` fixed, every row of C1 over the record-level matrix is linear in ``Pp``.  For a
combination π with household part πh and person part πp, a released value ``k0 = (a, b)`` and a
record cell ``m = (h, p)``::

    Nh(h, a) * Pp[p, B_b]  <=  alpha * sum_q W(q, a) * Pp[q, B_b],

where ``Nh(h, a) = sum_{h': h'_πh = a} Ph[h, h']`` (1 when πh is empty), ``Pp[p, B_b]`` is the mass
row p gives to the person cells projecting to b, and ``W(q, a) = sum_h U0(h, q) Nh(h, a)`` (records
counted).  Of the rows of one person cell p only the largest ``Nh(h, a)`` over the present
``(h, p)`` binds, so the LP has one row per (π, a, b, p) and one auxiliary variable per (π, a, b)
holding the right-hand side's sum.  Combinations without person-level keys do not involve ``Pp``:
they are the household design's own C1.  The objective is the expected number of records whose
person-level values change; every diagonal entry is at least ``floor`` (> 1/2 keeps ``Pp``
invertible by strict diagonal dominance).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..optimize.backends import Outcome, solve_lp
from .model import Layout, same_missing

__all__ = ["solve_person", "solve_person_replacement", "PERSON_MAX_CELLS"]

#: The person part is dense over the person cells (Kp^2 variables): refused above this many.
PERSON_MAX_CELLS = 300


def _indicator(inv: np.ndarray, n: int) -> sp.csr_array:
    return sp.csr_array((np.ones(inv.size), (np.arange(inv.size), inv)), shape=(inv.size, n))


def solve_person(
    lay: Layout,
    Ph,
    combos,
    alpha: float,
    floor: float,
    keep_missing: bool = True,
    solver: str | None = None,
):
    """The person matrix of fewest expected changes meeting C1 with ``Ph`` fixed.

    Parameters
    ----------
    lay : Layout
    Ph : sparse or dense (Kh, Kh)
    combos : sequence of tuples of int
        Π as indices into ``lay.table.qi``.
    alpha : float
        The level the LP works at (the caller's alpha times one minus a margin).
    floor : float
        Lower bound of every diagonal entry.
    keep_missing : bool
        A person cell with a missing value moves only among cells with the same missing pattern.
    solver : str, optional
        ``solver=`` of the design: the LP's solver.

    Returns
    -------
    ndarray of shape (Kp, Kp) or None
        None when the LP is infeasible (or fails).
    """
    tp = lay.person_table
    Kp = tp.n_cells
    if not lay.ppos:
        return np.ones((1, 1))
    # support: every pair of person cells (with the same missing pattern under missing='keep')
    gr, gc = np.meshgrid(np.arange(Kp), np.arange(Kp), indexing="ij")
    pr, pc = gr.ravel(), gc.ravel()
    if keep_missing:
        same = same_missing(tp, pr, pc)
        pr, pc = pr[same], pc[same]
    nx = pr.size
    ineq, eq = _c1_rows(lay, Ph, combos, alpha, pr, pc)
    (rows, cols, vals, n_ub), (erows, ecols, evals, n_aux) = ineq, eq
    nv = nx + n_aux
    # row sums: sum_p' Pp[p, p'] = 1
    srow = pr
    A_eq = sp.vstack(
        [
            sp.csr_array((evals, (erows, ecols)), shape=(n_aux, nv)),
            sp.csr_array((np.ones(nx), (srow, np.arange(nx))), shape=(Kp, nv)),
        ]
    ).tocsr()
    b_eq = np.concatenate([np.zeros(n_aux), np.ones(Kp)])
    A_ub = sp.csr_array((vals, (rows, cols)), shape=(n_ub, nv)) if n_ub else None
    b_ub = np.zeros(n_ub) if n_ub else None
    c = np.zeros(nv)
    w = tp.counts.astype(float)
    diag = pr == pc
    c[np.flatnonzero(diag)] = -w[pr[diag]] / w.sum()  # fewest expected changes
    lo = np.zeros(nv)
    lo[np.flatnonzero(diag)] = floor
    bounds = np.column_stack([lo, np.concatenate([np.ones(nx), np.full(n_aux, np.inf)])])
    # the interior point method: HiGHS' dual simplex stalls on these rows
    res = solve_lp(
        c,
        A_ub=A_ub,
        b_ub=b_ub,
        A_eq=A_eq,
        b_eq=b_eq,
        bounds=bounds,
        solver=solver,
        method="highs-ipm",
    )
    if res.outcome is not Outcome.OPTIMAL:
        return None
    assert res.x is not None  # set when optimal
    x = np.clip(res.x[:nx], 0.0, None)
    Pp = np.zeros((Kp, Kp))
    Pp[pr, pc] = x
    Pp[Pp < 1e-12] = 0.0  # solver dust
    return Pp / Pp.sum(axis=1, keepdims=True)


def _c1_rows(lay: Layout, Ph, combos, alpha: float, pr: np.ndarray, pc: np.ndarray):
    """C1's rows over the person matrix's entries ``(pr, pc)``, with one auxiliary variable per
    (π, a, b) after them: ``(rows, cols, vals, n_ub)`` of the inequalities and ``(rows, cols, vals,
    n_aux)`` of the equalities that define the auxiliaries."""
    nx = pr.size
    rows, cols, vals = [], [], []  # inequality rows
    erows, ecols, evals = [], [], []  # equalities defining the auxiliary variables
    n_ub = n_aux = 0
    for b_of, C, W in _groups(lay, Ph, combos):
        nb = int(b_of.max()) + 1
        bx = b_of[pc]  # the b of each variable's released person cell
        for a in range(C.shape[1]):
            for b in range(nb):
                sel = np.flatnonzero(bx == b)
                if not sel.size:
                    continue
                active = np.flatnonzero(C[:, a] > 0)
                if not active.size:
                    continue
                aux = nx + n_aux
                n_aux += 1
                # aux - sum_q W(q, a) Pp[q, B_b] = 0
                erows += [n_aux - 1] * (sel.size + 1)
                ecols += [aux] + sel.tolist()
                evals += [1.0] + (-W[pr[sel], a]).tolist()
                # C(p, a) Pp[p, B_b] - alpha aux <= 0, one row per person cell p
                for p in active:
                    mine = sel[pr[sel] == p]
                    rows += [n_ub] * (mine.size + 1)
                    cols += mine.tolist() + [aux]
                    vals += [C[p, a]] * mine.size + [-alpha]
                    n_ub += 1
    return (rows, cols, vals, n_ub), (erows, ecols, evals, n_aux)


def _groups(lay: Layout, Ph, combos):
    """Per combination with person-level keys: each person cell's b, and C(p, a), W(q, a)."""
    tp, t = lay.person_table, lay.table
    Ph = sp.csr_array(Ph, dtype=float)
    U0 = t.counts.astype(float)
    hset = {j: i for i, j in enumerate(lay.hpos)}
    pset = {j: i for i, j in enumerate(lay.ppos)}
    for pi in combos:
        ph = [hset[j] for j in pi if j in hset]
        pp = [pset[j] for j in pi if j in pset]
        if not pp:
            continue
        _, b_of = np.unique(tp.codes[:, pp], axis=0, return_inverse=True)
        b_of = np.asarray(b_of).ravel()
        if ph:
            _, a_of = np.unique(lay.household_table.codes[:, ph], axis=0, return_inverse=True)
            a_of = np.asarray(a_of).ravel()
            Nh = (Ph @ _indicator(a_of, int(a_of.max()) + 1)).toarray()
        else:
            Nh = np.ones((lay.household_table.n_cells, 1))
        M = Nh[lay.h_of]
        C = np.zeros((tp.n_cells, Nh.shape[1]))
        np.maximum.at(C, lay.p_of, M)
        W = np.zeros_like(C)
        np.add.at(W, lay.p_of, U0[:, None] * M)
        yield b_of, C, W


def solve_person_replacement(
    lay: Layout,
    Ph,
    combos,
    alpha: float,
    lam_min: float = 1e-3,
    keep_missing: bool = True,
    solver: str | None = None,
):
    """A replacement person matrix ``Pp = diag(lam) + (1 - lam) v^T`` (v: the person cells'
    frequencies among records of their missing pattern) of fewest expected changes meeting C1 with
    ``Ph`` fixed.

    With v fixed every left-hand side of C1 is linear in lam: row p of cell b and released a gives
    ``C(p,a) (lam_p [p in b] + (1 - lam_p) v_b) <=
    alpha sum_q W(q,a) (lam_q [q in b] + (1 - lam_q) v_b)``.
    lam = 0 is feasible whenever the household part meets C1 at alpha (the ratio is then Nh(h,a) /
    sum_h U_h(h) Nh(h,a)), and any lam > 0 keeps Pp invertible (the matrix determinant lemma: det =
    prod lam * (1 + sum_p (1 - lam_p) v_p / lam_p) > 0).  Returns None when infeasible. ``solver``
    is ``solver=`` of the design.
    """
    tp = lay.person_table
    Kp = tp.n_cells
    if not lay.ppos:
        return np.ones((1, 1))
    w = tp.counts.astype(float)
    if keep_missing:  # replacements only within a missing pattern
        _, pat = np.unique(tp.missing(), axis=0, return_inverse=True)
        pat = np.asarray(pat).ravel()
    else:
        pat = np.zeros(Kp, dtype=np.int64)
    v = w / np.bincount(pat, weights=w)[pat]
    same = pat[:, None] == pat[None, :]
    blocks, rhs = [], []
    for b_of, C, W in _groups(lay, Ph, combos):
        nb = int(b_of.max()) + 1
        for b in range(nb):
            inb = (b_of == b).astype(float)
            # v_b seen from each cell p: the mass of b within p's missing pattern
            vb = (same * (inb * v)[None, :]).sum(axis=1)
            for a in range(C.shape[1]):
                act = np.flatnonzero(C[:, a] > 0)
                if not act.size:
                    continue
                den_const = float(W[:, a] @ vb)
                den_coef = W[:, a] * (inb - vb)
                A = -alpha * np.tile(den_coef, (act.size, 1))
                A[np.arange(act.size), act] += C[act, a] * (inb[act] - vb[act])
                blocks.append(A)
                rhs.append(alpha * den_const - C[act, a] * vb[act])
    c = -w * (1.0 - v)  # fewest expected changes: sum_p w_p (1 - lam_p)(1 - v_p)
    A_ub = np.vstack(blocks) if blocks else None
    b_ub = np.concatenate(rhs) if rhs else None
    # first the largest common retention t (lam >= t), then the fewest changes with lam >= 0.9 t: a
    # vertex of the second LP alone puts some lam at lam_min, where the loss (~ 1 / lam^2) explodes
    if A_ub is not None:
        A1 = np.hstack([A_ub, np.zeros((A_ub.shape[0], 1))])
        T = np.hstack([-np.eye(Kp), np.ones((Kp, 1))])  # t - lam_p <= 0
        first = solve_lp(
            np.r_[np.zeros(Kp), -1.0],
            A_ub=np.vstack([A1, T]),
            b_ub=np.r_[b_ub, np.zeros(Kp)],
            bounds=[(lam_min, 1.0)] * Kp + [(lam_min, 1.0)],
            solver=solver,
            method="highs-ipm",
        )
        if first.outcome is not Outcome.OPTIMAL:
            return None
        assert first.x is not None  # set when optimal
        lam_min = max(lam_min, 0.9 * float(first.x[-1]))
    res = solve_lp(
        c, A_ub=A_ub, b_ub=b_ub, bounds=[(lam_min, 1.0)] * Kp, solver=solver, method="highs-ipm"
    )
    if res.outcome is not Outcome.OPTIMAL:
        return None
    assert res.x is not None  # set when optimal
    lam = np.clip(res.x, lam_min, 1.0)
    Pp = (1.0 - lam)[:, None] * (same * v[None, :])
    Pp[np.arange(Kp), np.arange(Kp)] += lam
    return Pp / Pp.sum(axis=1, keepdims=True)
