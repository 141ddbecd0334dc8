"""A loaded HiGHS program marked ``restart`` solves every time as a newly loaded one would.

The refinement's step programs change every cost and bound between solves; on large census
supports the previous basis made a slower start than none, so those programs ask for a solve
from scratch.  The reference is a fresh model of the same program, solved once with the second
costs and bounds (a first solve is from scratch whatever the flag).  HiGHS is deterministic, so a
solve from scratch takes exactly the fresh model's simplex iterations and reaches its vertex; a
warm start from the first optimum takes fewer.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from pramopt.optimize.backends import installed
from pramopt.optimize.backends.highs import HighsProgram
from pramopt.optimize.program import LinearProgram

pytestmark = pytest.mark.skipif(not installed("HIGHS"), reason="highspy not installed")


def _program(restart: bool) -> LinearProgram:
    """A transportation-like program: 12 sources, 10 sinks, every pair a column."""
    rng = np.random.default_rng(3)
    S, T = 12, 10
    n = S * T
    rows = np.concatenate([np.repeat(np.arange(S), T), S + np.tile(np.arange(T), S)])
    cols = np.concatenate([np.arange(n), np.arange(n)])
    A = sp.csc_matrix((np.ones(2 * n), (rows, cols)), shape=(S + T, n))
    supply = rng.uniform(5, 10, S)
    demand = np.full(T, supply.sum() / T * 0.9)
    return LinearProgram(
        A=A,
        row_lo=np.concatenate([np.full(S, -np.inf), demand]),
        row_hi=np.concatenate([supply, np.full(T, np.inf)]),
        col_lo=np.zeros(n),
        col_hi=np.full(n, 10.0),
        cost=np.zeros(n),
        n_x=n,
        cols={"t": slice(n, n), "s": slice(n, n)},
        rows={"rows": slice(0, S + T)},
        support=None,
        restart=restart,
    )


def _costs():
    rng = np.random.default_rng(5)
    c1 = rng.uniform(1, 2, 120)
    c2 = c1 * rng.uniform(0.9, 1.1, 120)  # a nearby program: the first optimum is a good start
    return c1, c2


@pytest.mark.parametrize("restart", [True, False])
def test_a_restart_program_solves_again_from_scratch(restart):
    c1, c2 = _costs()
    prog = _program(restart)
    lo, hi = prog.col_lo, prog.col_hi * 0.8

    fresh = HighsProgram(dataclasses.replace(prog))  # a new model of the same program
    ref = fresh.solve(c2, lo, hi)
    ref_iters = fresh.h.getInfo().simplex_iteration_count
    assert ref_iters > 5  # the reference has work to do from scratch

    loaded = HighsProgram(prog)
    assert loaded.solve(c1, prog.col_lo, prog.col_hi).ok
    out = loaded.solve(c2, lo, hi)
    iters = loaded.h.getInfo().simplex_iteration_count
    assert out.objective == pytest.approx(ref.objective, rel=1e-9)
    if restart:
        assert iters == ref_iters
        np.testing.assert_array_equal(out.x, ref.x)
    else:  # the warm start, kept for every other program
        assert iters < ref_iters
