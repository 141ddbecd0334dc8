"""A restarted HiGHS program solves only the rows that can bind within each solve's box.

The program is shaped like the refinement's step programs: columns ``x`` within a box around a
point, auxiliary columns ``D >= 0`` defined by equalities ``D = B x``, row sums, and rows
``N x - a D <= u``, some of which the box leaves unable to bind.  The references are
independent of the row selection: scipy's ``linprog`` on the full program for the optimum, one
LP per row for the largest activity a row can reach, and weak duality on the full program for
the duals (the Lagrangian bound of a dual vector equals the optimum only if it is optimal).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from pramopt.optimize.backends import installed
from pramopt.optimize.backends.highs import HighsProgram, binding_rows
from pramopt.optimize.program import LinearProgram

pytestmark = pytest.mark.skipif(not installed("HIGHS"), reason="highspy not installed")

ROWS, WIDTH, GROUPS, INEQ, TIGHT = 6, 5, 3, 40, 6


def _program(seed: int, elastic: bool = False):
    rng = np.random.default_rng(seed)
    n = ROWS * WIDTH
    x0 = rng.uniform(0.2, 1.0, (ROWS, WIDTH))
    x0 = (x0 / x0.sum(axis=1, keepdims=True)).ravel()
    B = sp.random(
        GROUPS, n, density=0.5, random_state=seed, data_rvs=lambda k: rng.integers(1, 5, k)
    )
    B = sp.csr_matrix(B, dtype=float)
    N = sp.csr_matrix(
        sp.random(
            INEQ, n, density=0.15, random_state=seed + 1, data_rvs=lambda k: rng.uniform(1, 3, k)
        )
    )
    gpos = rng.integers(0, GROUPS, INEQ)
    a = 0.3
    Dg = sp.csr_matrix((np.full(INEQ, -a), (np.arange(INEQ), gpos)), shape=(INEQ, GROUPS))
    D0 = B @ x0
    # margins: some rows a box of 0.05 can reach, some it cannot
    u = N @ x0 - a * D0[gpos] + rng.uniform(0.0, 2.0, INEQ)
    # rows over one entry of each of three row sums, which the box reaches at its corner: one
    # a little above that corner's activity (cannot bind), one a little below (can)
    tight = np.stack([np.arange(3) * WIDTH + rng.integers(0, WIDTH, 3) for _ in range(TIGHT)])
    T = sp.csr_matrix(
        (np.ones(tight.size), (np.repeat(np.arange(TIGHT), 3), tight.ravel())), (TIGHT, n)
    )
    corner = T @ np.minimum(1.0, x0 + 0.05)
    u_tight = corner + np.where(np.arange(TIGHT) % 2 == 0, 1e-3, -1e-3)
    sums = sp.kron(sp.identity(ROWS), np.ones((1, WIDTH)))
    blocks = [[sums, None], [B, -sp.identity(GROUPS)], [N, Dg], [T, None]]
    n_s = INEQ if elastic else 0
    if elastic:  # an elastic slack s >= 0 per row of N, unbounded above and in no equality
        S = -sp.identity(INEQ)
        blocks = [[*b, z] for b, z in zip(blocks, [None, None, S, sp.csr_matrix((TIGHT, INEQ))])]
    A = sp.bmat(blocks, format="csc")
    m = A.shape[0]
    end = n + GROUPS + n_s
    row_lo = np.concatenate([np.ones(ROWS), np.zeros(GROUPS), np.full(INEQ + TIGHT, -np.inf)])
    row_hi = np.concatenate([np.ones(ROWS), np.zeros(GROUPS), u, u_tight])
    prog = LinearProgram(
        A=A,
        row_lo=row_lo,
        row_hi=row_hi,
        col_lo=np.zeros(end),
        col_hi=np.concatenate([np.ones(n), np.full(GROUPS + n_s, np.inf)]),
        cost=np.concatenate([np.zeros(n + GROUPS), np.full(n_s, 10.0)]),
        n_x=n,
        cols={"t": slice(end, end), "s": slice(n + GROUPS, end)},
        rows={"rows": slice(0, m)},
        support=None,
        scale_costs=not elastic,  # the slacks' fixed costs in the units of c
        restart=True,
    )
    lo = np.maximum(0.0, x0 - 0.05)
    hi = np.minimum(1.0, x0 + 0.05)
    c = rng.normal(size=n)
    return prog, c, lo, hi


def _bounds(lo, hi) -> list:
    return [(a, None if np.isinf(b) else b) for a, b in zip(lo, hi)]


def _full_bounds(prog, lo, hi):
    col_lo, col_hi = prog.col_lo.copy(), prog.col_hi.copy()
    col_lo[: prog.n_x], col_hi[: prog.n_x] = lo, hi
    return col_lo, col_hi


CASES = [(seed, False) for seed in range(4)] + [(seed, True) for seed in range(2)]


@pytest.mark.parametrize(("seed", "elastic"), CASES)
def test_rows_left_out_cannot_bind_within_the_box(seed, elastic):
    prog, c, lo, hi = _program(seed, elastic)
    col_lo, col_hi = _full_bounds(prog, lo, hi)
    keep = binding_rows(prog.A, prog.row_lo, prog.row_hi, col_lo, col_hi)
    eq = prog.row_lo == prog.row_hi
    A_eq = prog.A[eq].toarray()
    dropped = np.flatnonzero(~keep)
    assert dropped.size  # the box leaves some rows unable to bind ...
    assert np.all(keep[eq])
    assert (~keep).sum() < (~eq).sum()  # ... and not all of them
    for i in dropped:
        # the largest activity the row reaches within the box and the equalities
        row = prog.A[i].toarray().ravel()
        res = linprog(
            -row, A_eq=A_eq, b_eq=prog.row_lo[eq], bounds=_bounds(col_lo, col_hi), method="highs"
        )
        assert res.status == 0
        assert -res.fun <= prog.row_hi[i] + 1e-9


@pytest.mark.parametrize(("seed", "elastic"), CASES)
def test_a_restarted_program_reaches_the_full_programs_optimum_and_duals(seed, elastic):
    prog, c, lo, hi = _program(seed, elastic)
    col_lo, col_hi = _full_bounds(prog, lo, hi)
    A = prog.A.toarray()
    eq = prog.row_lo == prog.row_hi
    cost = np.concatenate([c, prog.cost[prog.n_x :]])
    ref = linprog(
        cost,
        A_ub=A[~eq],
        b_ub=prog.row_hi[~eq],
        A_eq=A[eq],
        b_eq=prog.row_lo[eq],
        bounds=_bounds(col_lo, col_hi),
        method="highs",
    )
    assert ref.status == 0

    lp = HighsProgram(prog)
    out = lp.solve(c, lo, hi)
    assert out.ok
    assert lp.h.getNumRow() < A.shape[0]  # solved without the rows that cannot bind
    assert out.objective == pytest.approx(ref.fun, rel=1e-9, abs=1e-12)
    x = np.concatenate([out.x, (prog.A[ROWS : ROWS + GROUPS, : prog.n_x] @ out.x), out.slack])
    assert np.all(A[~eq] @ x <= prog.row_hi[~eq] + 1e-9)  # every row of the full program

    # the duals, zero on the rows left out, are optimal for the full program: their
    # Lagrangian bound over the box equals the optimum
    y = lp.duals().rows
    assert y.shape == (A.shape[0],)
    assert np.all(y[~eq] <= 1e-12)
    red = cost - A.T @ y
    aux = slice(prog.n_x, None)
    assert np.all(red[aux] >= -1e-9)  # D, s >= 0 unbounded above: no descent along them
    bound = float(y[eq] @ prog.row_lo[eq] + y[~eq] @ prog.row_hi[~eq]) + float(
        np.minimum(red[: prog.n_x] * lo, red[: prog.n_x] * hi).sum()
    )  # (+ red * 0 for D and s)
    assert bound == pytest.approx(ref.fun, rel=1e-8, abs=1e-10)
