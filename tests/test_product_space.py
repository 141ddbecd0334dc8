"""Per-variable PRAM measured as released (over the product space), against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from reference import l2_loss_from_covariance

import pramopt
from pramopt.baselines.calibrate import sdcmicro_on_cells
from pramopt.baselines.product_space import (
    assess_product_space,
    product_space_loss,
    sdcmicro_matrices,
)
from pramopt.loss import l2_loss


@pytest.fixture(scope="module")
def sparse_table():
    # 3 x 3 x 2 = 18 combinations, 9 present: per-variable PRAM releases into the other 9
    rng = np.random.default_rng(5)
    cells = [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 1),
        (1, 2, 0),
        (2, 2, 1),
        (0, 0, 1),
        (2, 1, 0),
        (1, 1, 1),
        (2, 0, 0),
    ]
    sizes = rng.integers(1, 40, len(cells))
    rows = [c for c, s in zip(cells, sizes) for _ in range(s)]
    df = pd.DataFrame(rows, columns=["a", "b", "c"])
    return df, pramopt.frequency_table(df, ["a", "b", "c"])


def _kron(mats):
    P = np.ones((1, 1))
    for M in mats:
        P = np.kron(P, M)
    return P


def test_sdcmicro_release_leaves_the_present_cells(sparse_table):
    df, t = sparse_table
    mats = sdcmicro_matrices(t, 0.8, 0.5, seed=0)
    combos = [(0, 1), (0, 2), (1, 2)]  # the CBS rule with 3 variables would be the one triple
    a = assess_product_space(t, mats, combos)
    # brute force over the 18 combinations: the full product matrix, rows = present cells
    every = list(itertools.product(range(3), range(3), range(2)))
    full = _kron(mats)
    present = [every.index(tuple(c)) for c in t.codes]
    R = full[present]
    np.testing.assert_allclose(R.sum(axis=1), 1.0)
    leaving = 1 - R[:, present].sum(axis=1)
    np.testing.assert_allclose(a.leaving, leaving, atol=1e-12)
    assert a.mean_leaving == pytest.approx(t.counts @ leaving / t.n)
    assert a.max_leaving > 0.05
    # C1 with every combination a released cell, by loops over pi and its released values k0
    U0 = t.counts
    risk = 0.0
    for pi in combos:
        for k0 in {tuple(k[i] for i in pi) for k in every}:
            S = R[:, [j for j, k in enumerate(every) if tuple(k[i] for i in pi) == k0]].sum(axis=1)
            risk = max(risk, S.max() / (U0 @ S))
    assert a.max_risk == pytest.approx(risk, rel=1e-12)
    # the restricted matrix is what sdcmicro_on_cells gives, and is no longer invariant
    # although every per-variable matrix is (p^T M = p^T for its own shares)
    restricted = R[:, present] / R[:, present].sum(axis=1, keepdims=True)
    np.testing.assert_allclose(sdcmicro_on_cells(t, 0.8, 0.5, seed=0), restricted, atol=1e-12)
    for v, M in enumerate(mats):
        f = np.bincount(t.codes[:, v], weights=U0)
        np.testing.assert_allclose(f @ M, f, atol=1e-9)
    assert a.invariance_error_restricted == pytest.approx(np.max(np.abs(U0 @ restricted - U0) / U0))
    assert a.invariance_error_restricted > 0.01


def test_product_space_loss_is_the_dense_loss_over_every_combination(sparse_table):
    _, t = sparse_table
    mats = sdcmicro_matrices(t, 0.7, 0.6, seed=3)
    every = list(itertools.product(range(3), range(3), range(2)))
    U = np.zeros(len(every))
    for c, u in zip(t.codes, t.counts):
        U[every.index(tuple(c))] = u
    P = _kron(mats)
    got = product_space_loss(t.codes, t.counts, mats)
    assert got == pytest.approx(l2_loss_from_covariance(P, U), rel=1e-9)
    assert got == pytest.approx(l2_loss(P, U), rel=1e-9)


@pytest.mark.slow
def test_sdcmicro_on_testdata_sends_mass_outside(shared_data):
    # testdata, 7 keys, sdcMicro's defaults (pd 0.8, alpha 0.5): 8.3% of the records on average,
    # 56% for the worst cell, are released as combinations absent from the data
    td = pd.read_csv(shared_data / "testdata.csv")
    keys = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]
    t = pramopt.frequency_table(td, keys)
    a = assess_product_space(t, sdcmicro_matrices(t), pramopt.resolve_combinations(t.qi))
    assert a.mean_leaving == pytest.approx(0.0833, abs=0.001)
    assert a.max_leaving == pytest.approx(0.5595, abs=0.001)
    assert a.invariance_error_restricted > 1
