"""Model-level checks against Cator, Hensbergen & Rozenholc (seed 001)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.optimize.constraints.c1 import build_groups, c1_block
from pramopt.optimize.support import Support
from pramopt.verify import c1_risk


def full_space_frame():
    """One record in every cell of {0,1}^4 x {0,1,2} (Section 4's space)."""
    rows = list(itertools.product([0, 1], [0, 1], [0, 1], [0, 1], [0, 1, 2]))
    return pd.DataFrame(rows, columns=list("abcde"))


def test_paper_space_has_48_cells_and_104_combinations():
    # Section 4: "X = {0,1}^4 x {0,1,2}, with 48 elements ... the number of different
    # combinations (pi, k0) is 104".  Independently: C(4,3)*2^3 + C(4,2)*2^2*3 = 32 + 72.
    df = full_space_frame()
    table = pramopt.frequency_table(df, list("abcde"))
    combos = pramopt.resolve_combinations(list("abcde"))
    assert table.n_cells == 48
    assert build_groups(table, combos).n_groups == 104 == 4 * 8 + 6 * 4 * 3


def random_table(seed, n=60, levels=(2, 3, 2, 2)):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"v{i}": rng.integers(0, L, n) for i, L in enumerate(levels)})
    qi = list(df.columns)
    return pramopt.frequency_table(df, qi), pramopt.resolve_combinations(qi)


def test_identity_gives_one_over_group_frequency():
    # Section 2: with P = I the left-hand side of (1) is 1/U_pi(k0) for m with m_pi = k0
    # (and 0 for the others).
    table, combos = random_table(1)
    rep = c1_risk(np.eye(table.n_cells), table.codes, table.counts, combos)
    for ci, pi in enumerate(combos):
        proj = table.codes[:, list(pi)]
        for g, k0 in enumerate(rep.groups_by_combination[ci]):
            U = table.counts[(proj == k0).all(axis=1)].sum()
            assert rep.risk_by_group[ci][g] == pytest.approx(1.0 / U, rel=1e-12)


def test_constant_matrix_gives_one_over_n():
    # Section 2: with constant P the left-hand side of (1) equals 1/n for every m, pi, k0.
    table, combos = random_table(2)
    K = table.n_cells
    rep = c1_risk(np.full((K, K), 1.0 / K), table.codes, table.counts, combos)
    for r in rep.risk_by_group:
        np.testing.assert_allclose(r, 1.0 / table.n, rtol=1e-12)


def brute_force_lhs(P, codes, counts, pi, m, k0):
    """Equation (1) written out with explicit loops (independent of both code paths)."""
    num = sum(P[m, k] for k in range(len(codes)) if tuple(codes[k, list(pi)]) == tuple(k0))
    den = sum(
        counts[h]
        * sum(P[h, k] for k in range(len(codes)) if tuple(codes[k, list(pi)]) == tuple(k0))
        for h in range(len(codes))
    )
    return num / den


def test_constraint_block_matches_equation_1():
    # The solver's sparse C1 rows (N x - alpha B x) evaluated at a random P agree with (1).
    table, combos = random_table(3, n=40)
    K = table.n_cells
    rng = np.random.default_rng(0)
    P = rng.random((K, K)) + np.eye(K) * 3
    P /= P.sum(axis=1, keepdims=True)
    groups = build_groups(table, combos)
    sup = Support.from_pairs(*np.nonzero(np.ones((K, K))), K)
    x = sup.from_matrix(P)
    mm, gg = np.meshgrid(np.arange(K), np.arange(groups.n_groups), indexing="ij")
    blk = c1_block(sup, groups, table.counts, mm.ravel(), gg.ravel())
    D = blk.B @ x
    ratio = (blk.N @ x) / D[blk.gpos]
    for w in rng.choice(blk.m.size, 40, replace=False):
        g = blk.g[w]
        ci = groups.combination[g]
        k0 = table.codes[groups.rep[g], list(combos[ci])]
        assert ratio[w] == pytest.approx(
            brute_force_lhs(P, table.codes, table.counts, combos[ci], blk.m[w], k0), rel=1e-12
        )


def test_cell_index_without_overflow():
    # 20 variables of 9 categories: 9^20 > 2^62 mixed-radix keys, so whole rows are matched.
    from pramopt.frequency.table import cell_index

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.integers(0, 9, (200, 20)), columns=[f"x{i}" for i in range(20)])
    df.iloc[0] = np.arange(20) % 9  # ensure every column has all 9 categories somewhere
    table = pramopt.frequency_table(df, list(df.columns))
    idx = cell_index(table, table.codes[::-1])
    np.testing.assert_array_equal(idx, np.arange(table.n_cells)[::-1])
    present = {tuple(r) for r in table.codes}
    absent = next(r for r in ([k] * 20 for k in range(9)) if tuple(r) not in present)
    assert cell_index(table, np.array([absent]))[0] == -1
