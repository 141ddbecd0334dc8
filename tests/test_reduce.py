"""The reducer is safe (Cator et al., Section 4, bounds (2) and (5))."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pramopt
from pramopt.optimize.backends import chain
from pramopt.optimize.constraints.c1 import C1Rows, build_groups, c1_block, reduce_constraints
from pramopt.optimize.program import build_program
from pramopt.optimize.support import Support, clean
from pramopt.verify import c1_risk


@st.composite
def small_data(draw):
    d = draw(st.integers(3, 4))
    levels = [draw(st.integers(2, 3)) for _ in range(d)]
    n = draw(st.integers(25, 70))
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    # skewed marginals so that some cells and triples are rare
    cols = {
        f"v{i}": rng.choice(L, n, p=np.arange(L, 0, -1) / (L * (L + 1) / 2))
        for i, L in enumerate(levels)
    }
    return pd.DataFrame(cols)


@settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    df=small_data(), gamma=st.sampled_from([0.6, 0.8, 0.95]), alpha=st.sampled_from([0.15, 0.25])
)
def test_reduced_optimum_satisfies_full_c1(df, gamma, alpha):
    # Solve the *reduced* problem only (no lazy generation, no full check inside the solver),
    # with the floor P_kk >= gamma it relies on; the independent verifier must then find the
    # full, unreduced C1 satisfied.
    qi = list(df.columns)
    table = pramopt.frequency_table(df, qi)
    combos = pramopt.resolve_combinations(qi)
    groups = build_groups(table, combos)
    K = table.n_cells
    sup = Support.from_pairs(*np.nonzero(np.ones((K, K))), K)
    counts = table.counts.astype(float)
    c = np.zeros(sup.size)
    c[sup.diag] = -counts
    # the reduced problem may be infeasible at a high floor: step down as the designer does
    for floor in [g for g in (0.95, 0.8, 0.6, 0.51) if g <= gamma]:
        red = reduce_constraints(table, groups, alpha, floor, lazy_outside=False)
        lp = chain(
            build_program(
                sup, [C1Rows(c1_block(sup, groups, counts, red.m, red.g), alpha * (1 - 1e-6))]
            ),
            "HIGHS",
        )
        lo = np.zeros(sup.size)
        lo[sup.diag] = floor
        out = lp.solve(c, lo, np.ones(sup.size))
        if out.x is not None:
            break
    assume(out.x is not None)
    P = sup.to_matrix(clean(sup, out.x)).toarray()
    assert c1_risk(P, table.codes, counts, combos).max_risk <= alpha * (1 + 1e-9)


def test_reduction_counts_on_a_hand_example():
    # Bound (2): rows with U0 >= 1/alpha drop out; groups with U_pi(k0) >= 1/(gamma alpha) drop out.
    df = pd.DataFrame({"a": [0] * 20 + [1] * 3, "b": [0] * 20 + [1] * 3, "c": [0] * 22 + [1]})
    table = pramopt.frequency_table(df, ["a", "b", "c"])
    combos = pramopt.resolve_combinations(["a", "b", "c"])  # one triple
    groups = build_groups(table, combos)
    red = reduce_constraints(table, groups, 0.1, 0.95, lazy_outside=False)
    # cells: (0,0,0) x20, (1,1,0) x2, (1,1,1) x1 -> rare cells are the last two
    assert red.full == 3 * 3
    assert red.after_row_bound == 2 * 3
    assert red.after_group_bound == 2 * 2
    # (1-g)/(g alpha) = 0.526 < 1 <= U: no row outside its group needs checking
    assert red.after_member_rule == 2 and red.outside_rows == 0
