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
from scipy.optimize import linprog

from .model import Layout

__all__ = ["solve_person", "PERSON_MAX_CELLS"]

#: The person part is dense over the person cells (Kp^2 variables): refused above this many.
PERSON_MAX_CELLS = 300


def _indicator(inv: np.ndarray, n: int) -> sp.csr_array:
    return sp.csr_array((np.ones(inv.size), (np.arange(inv.size), inv)), shape=(inv.size, n))


def solve_person(lay: Layout, Ph, combos, alpha: float, floor: float, keep_missing: bool = True):
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

    Returns
    -------
    ndarray of shape (Kp, Kp) or None
        None when the LP is infeasible (or fails).
    """
    tp, t = lay.person_table, lay.table
    Kp = tp.n_cells
    if not lay.ppos:
        return np.ones((1, 1))
    Ph = sp.csr_array(Ph, dtype=float)
    U0 = t.counts.astype(float)
    # support: every pair of person cells (with the same missing pattern under missing='keep')
    pr, pc = np.meshgrid(np.arange(Kp), np.arange(Kp), indexing="ij")
    pr, pc = pr.ravel(), pc.ravel()
    if keep_missing:
        miss = tp.missing()
        same = (miss[pr] == miss[pc]).all(axis=1)
        pr, pc = pr[same], pc[same]
    nx = pr.size
    hset = {j: i for i, j in enumerate(lay.hpos)}
    pset = {j: i for i, j in enumerate(lay.ppos)}
    rows, cols, vals = [], [], []  # inequality rows
    erows, ecols, evals = [], [], []  # equalities defining the auxiliary variables
    n_ub = n_aux = 0
    for pi in combos:
        ph = [hset[j] for j in pi if j in hset]
        pp = [pset[j] for j in pi if j in pset]
        if not pp:
            continue  # no Pp in these rows: the household design's C1
        _, b_of = np.unique(tp.codes[:, pp], axis=0, return_inverse=True)
        b_of = np.asarray(b_of).ravel()
        nb = int(b_of.max()) + 1
        if ph:
            _, a_of = np.unique(lay.household_table.codes[:, ph], axis=0, return_inverse=True)
            a_of = np.asarray(a_of).ravel()
            Nh = (Ph @ _indicator(a_of, int(a_of.max()) + 1)).toarray()  # Kh x nA
        else:
            Nh = np.ones((lay.household_table.n_cells, 1))
        nA = Nh.shape[1]
        M = Nh[lay.h_of]  # K x nA
        C = np.zeros((Kp, nA))
        np.maximum.at(C, lay.p_of, M)
        W = np.zeros((Kp, nA))
        np.add.at(W, lay.p_of, U0[:, None] * M)
        bx = b_of[pc]  # the b of each variable's released person cell
        for a in range(nA):
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
    nv = nx + n_aux
    # row sums: sum_p' Pp[p, p'] = 1
    srow = pr
    A_eq = sp.vstack([sp.csr_array((evals, (erows, ecols)), shape=(n_aux, nv)),
                      sp.csr_array((np.ones(nx), (srow, np.arange(nx))), shape=(Kp, nv))]).tocsr()
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
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs")
    if res.status != 0:
        return None
    x = np.clip(res.x[:nx], 0.0, None)
    Pp = np.zeros((Kp, Kp))
    Pp[pr, pc] = x
    Pp[Pp < 1e-12] = 0.0  # solver dust
    return Pp / Pp.sum(axis=1, keepdims=True)
