"""Closed-form families calibrated to just meet C1 (equal security)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from reference import l2_loss_from_covariance
from test_design import brute_force_max_risk

from pramopt.baselines import (
    calibrate_all,
    calibrate_ifpr,
    calibrate_retention,
    calibrate_sdcmicro,
    product_matrix_on_cells,
    retention_on_cells,
    sdcmicro_on_cells,
)
from pramopt.baselines.retention import retention_matrix
from pramopt.baselines.sdcmicro import sdcmicro_invariant_matrix
from pramopt.errors import InvalidParameterError
from pramopt.frequency.combinations import resolve_combinations
from pramopt.frequency.table import frequency_table
from pramopt.verify import c1_risk

KEYS = ["urbrur", "roof", "walls", "water", "electcon", "relat", "sex"]


@pytest.fixture(scope="module")
def small_df():
    rng = np.random.default_rng(7)
    n = 400
    return pd.DataFrame(
        {
            "a": rng.choice(3, n, p=[0.6, 0.3, 0.1]),
            "b": rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1]),
            "c": rng.choice(2, n, p=[0.7, 0.3]),
            "d": rng.choice(3, n, p=[0.5, 0.45, 0.05]),
        }
    )


@pytest.fixture(scope="module")
def small(small_df):
    t = frequency_table(small_df, ["a", "b", "c", "d"])
    return t, resolve_combinations(t.qi, 3)


def _risk(P, df):
    """Full C1 of a matrix on the small data's cells (sorted, as the table orders them), by loops."""
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P)
    return brute_force_max_risk(
        P, df, ["a", "b", "c", "d"], list(itertools.combinations(range(4), 3))
    )


def test_product_matrix_restricted_to_present_cells(small):
    t, _ = small
    rhos = [0.3, 0.5, 0.8, 0.6]
    full = np.ones((1, 1))
    for v, r in enumerate(rhos):
        full = np.kron(full, retention_matrix(len(t.categories[v]), r))
    dims = [len(c) for c in t.categories]
    idx = np.ravel_multi_index(t.codes.T, dims)  # row-major = Kronecker order
    sub = full[np.ix_(idx, idx)]
    expect = sub / sub.sum(axis=1, keepdims=True)  # rows renormalised over present cells
    np.testing.assert_allclose(retention_on_cells(t, rhos), expect, rtol=1e-12)
    np.testing.assert_allclose(
        product_matrix_on_cells(
            t.codes, [retention_matrix(dims[v], r) for v, r in enumerate(rhos)]
        ),
        expect,
        rtol=1e-12,
    )


def test_sdcmicro_matrix_is_invariant():
    f = np.array([50.0, 30.0, 15.0, 5.0])
    R = sdcmicro_invariant_matrix(f, pd=0.6, alpha=0.7, seed=3)
    np.testing.assert_allclose(R.sum(axis=1), 1)
    np.testing.assert_allclose(f @ R, f, rtol=1e-12)  # p^T R = p^T
    np.testing.assert_allclose(sdcmicro_invariant_matrix(f, 0.6, 0.0, seed=3), np.eye(4))
    # step by step from the description: d ~ U(pd, 1), P, Bayes inverse Q, R = PQ, mix with I
    u = np.random.default_rng(3).random(4)
    d = 0.6 + 0.4 * u
    P = np.array([[d[i] if i == j else (1 - d[i]) / 3 for j in range(4)] for i in range(4)])
    p = f / f.sum()
    Q = np.array(
        [
            [P[j, k] * p[j] / sum(p[h] * P[h, k] for h in range(4)) for j in range(4)]
            for k in range(4)
        ]
    )
    np.testing.assert_allclose(R, 0.7 * P @ Q + 0.3 * np.eye(4), rtol=1e-12)


@pytest.mark.parametrize("per_attribute", [False, True])
def test_calibrate_retention_just_meets_c1(small, small_df, per_attribute):
    t, combos = small
    res = calibrate_retention(t, combos, 0.2, per_attribute=per_attribute)
    # risk by loops over the records (eq. (1)), loss from the covariance of the release
    assert res.success and res.max_risk == pytest.approx(_risk(res.matrix, small_df), rel=1e-9)
    assert res.max_risk <= 0.2
    assert res.matrix.shape == (t.n_cells, t.n_cells)
    assert res.loss == pytest.approx(l2_loss_from_covariance(res.matrix, t.counts), rel=1e-9)
    if not per_attribute:
        # "just": a slightly larger ρ breaks C1
        assert (
            c1_risk(
                retention_on_cells(t, res.details["rho"] + 0.01), t.codes, t.counts, combos
            ).max_risk
            > 0.2
        )
    else:
        common = calibrate_retention(t, combos, 0.2)
        assert res.loss <= common.loss * (1 + 1e-9)


def test_calibrate_ifpr_and_sdcmicro(small, small_df):
    t, combos = small
    for res in (calibrate_ifpr(t, combos, 0.2), calibrate_sdcmicro(t, combos, 0.2, seed=1)):
        # the reported risk and loss against a brute force over records and the release's law
        risk = _risk(res.matrix, small_df)
        assert res.max_risk == pytest.approx(risk, rel=1e-9)
        assert res.success == (risk <= 0.2)
        assert res.loss == pytest.approx(l2_loss_from_covariance(res.matrix, t.counts), rel=1e-9)
        assert res.matrix.shape == (t.n_cells, t.n_cells)
        np.testing.assert_allclose(res.matrix.sum(axis=1), 1)
    ifpr = calibrate_ifpr(t, combos, 0.2)
    assert ifpr.success and ifpr.details["xi"] > 0
    sdc = calibrate_sdcmicro(t, combos, 0.2, seed=1)
    assert sdc.success
    np.testing.assert_allclose(
        sdc.to_dense(), sdcmicro_on_cells(t, sdc.details["pd"], sdc.details["alpha"], seed=1)
    )


def test_identity_already_safe_needs_no_perturbation():
    df = pd.DataFrame({"x": [0] * 30 + [1] * 30, "y": [0, 1] * 30})
    t = frequency_table(df, ["x", "y"])
    combos = resolve_combinations(t.qi)
    assert calibrate_retention(t, combos, 0.1).details["rho"] == 1.0
    assert calibrate_sdcmicro(t, combos, 0.1).details["alpha"] == 0.0


def test_impossible_alpha_reports_failure():
    df = pd.DataFrame({"x": [0, 1, 2], "y": [0, 1, 0]})
    t = frequency_table(df, ["x", "y"])
    res = calibrate_retention(t, resolve_combinations(t.qi), 0.1)  # n = 3 < 1/alpha
    assert not res.success and res.max_risk > 0.1


def test_testdata_common_rho(shared_data):
    df = pd.read_csv(shared_data / "testdata.csv")
    t = frequency_table(df, KEYS)
    combos = resolve_combinations(KEYS, 3)
    res = calibrate_retention(t, combos, 0.1)
    assert res.success and res.max_risk <= 0.1 and t.n_cells == 412


@pytest.mark.slow
def test_testdata_all_baselines(shared_data):
    df = pd.read_csv(shared_data / "testdata.csv")
    t = frequency_table(df, KEYS)
    combos = resolve_combinations(KEYS, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = calibrate_all(t, combos, 0.1)
    for r in res.values():
        assert r.success == (c1_risk(r.matrix, t.codes, t.counts, combos).max_risk <= 0.1)


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"alpha": 1.5}, "'alpha'"),
        ({"combinations": [(0, 9)]}, "'combinations'"),
        ({"table": "x"}, "'table'"),
    ],
)
def test_bad_input(small, kw, name):
    t, combos = small
    args = {"table": t, "combinations": combos, "alpha": 0.1}
    args.update(kw)
    with pytest.raises(InvalidParameterError, match=name):
        calibrate_retention(args["table"], args["combinations"], args["alpha"])
