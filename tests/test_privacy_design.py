"""Designs under ε-DP and Pk-anonymity (Ikarashi et al., ../shared/seeds/002_…), alone or with C1.

The constraints are checked here by brute force, sharing no code with pramopt: ε over every
pair of rows and every column (Theorem 1's definition), k from the posterior by enumeration of
every permutation of the records (Section 3, ``_brute_k`` of test_privacy) where the data are
tiny, and from Theorem 3's minimum over every (u, v, u', v') otherwise; C1 by brute force over
the records (test_contract).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_contract import brute_force_risk
from test_privacy import _brute_k

import pramopt
from pramopt.baselines.retention_meeting import retention_meeting
from pramopt.errors import InvalidParameterError
from pramopt.frequency.table import frequency_table
from pramopt.optimize.constraints.column_ratio import (
    RatioBound,
    balancing_weights,
    dense_support,
    ratio_rows,
    ratio_slack,
)

QI = ["a", "b", "c"]


@pytest.fixture(scope="module")
def small():
    """~12 cells, 200 records, a few rare cells (C1 binds at alpha 0.2)."""
    rng = np.random.default_rng(3)
    n = 200
    return pd.DataFrame(
        {
            "a": rng.choice(2, n, p=[0.7, 0.3]),
            "b": rng.choice(3, n, p=[0.6, 0.3, 0.1]),
            "c": rng.choice(2, n, p=[0.9, 0.1]),
        }
    )


def brute_epsilon_holds(P, eps, rtol=0.0) -> bool:
    """Theorem 1 by definition: P[m, j] <= e^eps P[m', j] for every column j and rows m, m'."""
    P = np.asarray(P)
    bound = math.exp(eps) * (1 + rtol)
    for j in range(P.shape[1]):
        col = P[:, j]
        if not col.any():
            continue  # never released
        for m in range(P.shape[0]):
            for m2 in range(P.shape[0]):
                if col[m] > bound * col[m2]:
                    return False
    return True


def brute_ar(P) -> float:
    """Theorem 3's AR = min P[u,v']P[v,u'] / (P[u,u']P[v,v']) over every (u, v, u', v')."""
    P = np.asarray(P)
    num = P[:, None, None, :] * P[None, :, :, None]  # [u, v, u', v'] = P[u,v'] P[v,u']
    den = P[:, None, :, None] * P[None, :, None, :]  # P[u,u'] P[v,v']
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(den > 0, num / den, np.inf)
    return float(min(1.0, r.min()))


# ------------------------------------------------------------------------------------------
# The rows themselves against brute force
# ------------------------------------------------------------------------------------------


def _rows_hold(P, bound: RatioBound) -> bool:
    """Whether some L >= 0 satisfies the program's ratio rows at x = P (the best L is the column min)."""
    K = P.shape[0]
    sup = dense_support(K)
    rows, width = ratio_rows(sup, (bound,))
    x = sup.from_matrix(P)
    s = np.ones(K) if bound.scale is None else bound.scale
    L = (P * s[:, None]).min(axis=0)
    ok = True
    for _, mats, lo, hi in rows:
        v = mats["x"] @ x + mats["L"] @ L
        ok &= bool(np.all(v >= lo - 1e-12) and np.all(v <= hi + 1e-12))
    return ok


@pytest.mark.parametrize("seed", range(6))
def test_epsilon_rows_agree_with_brute_force(seed):
    rng = np.random.default_rng(seed)
    K = 5
    P = rng.dirichlet(np.ones(K) * 2, size=K)
    eps = math.log(ratio_slack(P))  # the matrix's own epsilon: just inside, then just outside
    for e, expect in ((eps * (1 + 1e-6), True), (eps * (1 - 1e-3), False)):
        assert _rows_hold(P, RatioBound(math.exp(e))) is expect
        assert brute_epsilon_holds(P, e) is expect


@pytest.mark.parametrize("seed", range(6))
def test_k_rows_are_sufficient_and_weights_tighten_them(seed):
    """Row-scaled column ratio <= r implies AR >= 1/r^2 (every (u, v, u', v')); the balancing
    weights reach Theorem 3's bound when the worst cycle is a pair."""
    rng = np.random.default_rng(seed)
    K = 5
    P = rng.dirichlet(np.ones(K) * 3, size=K)
    s = balancing_weights(P)
    r_plain, r_scaled = ratio_slack(P), ratio_slack(P, s)
    assert r_scaled <= r_plain * (1 + 1e-9)
    ar = brute_ar(P)
    assert ar >= 1 / r_plain**2 * (1 - 1e-9)
    assert ar >= 1 / r_scaled**2 * (1 - 1e-9)
    assert _rows_hold(P, RatioBound(r_scaled * (1 + 1e-9), s))
    # the rows at the r Theorem 3 allows hold with the balancing weights whenever they are tight
    if math.isclose(r_scaled, 1 / math.sqrt(ar), rel_tol=1e-6):
        assert _rows_hold(P, RatioBound((1 + 1e-6) / math.sqrt(ar), s))


# ------------------------------------------------------------------------------------------
# Designs
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_epsilon_design_holds_by_brute_force_and_beats_retention(small, eps):
    res = pramopt.design(small, QI, alpha=None, epsilon=eps)
    assert res.success, res.message
    P = res.to_dense()
    assert brute_epsilon_holds(P, eps)
    assert res.details["epsilon"] <= eps
    # the calibrated retention-replacement matrix at the same epsilon on the same data is feasible:
    # the design is never worse
    t = frequency_table(small, QI)
    rr = retention_meeting(t, epsilon=eps)
    rr_per = retention_meeting(t, epsilon=eps, per_attribute=True, max_evals=20)
    assert rr.ok and brute_epsilon_holds(rr.P, eps)
    assert res.loss <= rr.loss * (1 + 1e-12)
    assert res.loss <= rr_per.loss * (1 + 1e-12)
    joint = retention_meeting(t, epsilon=eps, joint=True)  # the cells as one attribute (K-ary RR)
    assert res.loss <= joint.loss * (1 + 1e-12)
    assert "epsilon" in res.details["binding"]


def test_epsilon_with_c1_by_brute_force(small):
    res = pramopt.design(small, QI, alpha=0.2, epsilon=3.0)
    assert res.success, res.message
    assert brute_epsilon_holds(res.to_dense(), 3.0)
    assert brute_force_risk(res, small, QI) <= 0.2
    assert res.details["c1_max_risk"] == pytest.approx(res.max_risk)
    alone = pramopt.design(small, QI, alpha=None, epsilon=3.0)
    assert alone.loss <= res.loss * (1 + 1e-6)  # adding C1 can only cost


@pytest.mark.parametrize("k", [2.0, 20.0, 100.0])
def test_k_design_holds_against_theorem3_by_brute_force(small, k):
    res = pramopt.design(small, QI, alpha=None, k=k)
    assert res.success, res.message
    n = len(small)
    assert 1 + (n - 1) * brute_ar(res.to_dense()) >= k
    t = frequency_table(small, QI)
    rr = retention_meeting(t, k=k)
    assert res.loss <= rr.loss * (1 + 1e-12)


def test_k_design_against_the_posterior_by_enumeration():
    """Four records in three cells: the adversary's posterior over every permutation (Section 3)."""
    df = pd.DataFrame({"a": [0, 0, 1, 1], "b": [0, 0, 0, 1]})
    for k in (1.5, 2.5):
        res = pramopt.design(df, ["a", "b"], alpha=None, k=k)
        assert res.success, res.message
        assert _brute_k(res.to_dense(), 4) >= k * (1 - 1e-9)
        assert res.details["k"] == pytest.approx(_brute_k(res.to_dense(), 4), rel=1e-8)


def test_all_three_together(small):
    res = pramopt.design(small, QI, alpha=0.2, epsilon=2.5, k=30.0)
    assert res.success, res.message
    P = res.to_dense()
    assert brute_epsilon_holds(P, 2.5)
    assert 1 + (len(small) - 1) * brute_ar(P) >= 30.0
    assert brute_force_risk(res, small, QI) <= 0.2
    d = res.details
    assert d["binding"] and "binding" in res.message
    assert set(d["slack"]) == {"alpha", "epsilon", "k"}
    assert "epsilon (Thm 1)" in res.summary()


def test_the_result_reproduces_and_saves(small, tmp_path):
    res = pramopt.design(small, QI, alpha=None, epsilon=2.0)
    assert res.params["alpha"] is None and res.params["epsilon"] == 2.0
    again = pramopt.design(res.table, **res.params)
    assert again.loss == pytest.approx(res.loss, rel=1e-6)
    assert res.figures()["epsilon"] == res.details["epsilon"]
    from pramopt.io import load_design, save_design

    save_design(res, tmp_path)
    back = load_design(tmp_path)
    assert back.details["epsilon"] == pytest.approx(res.details["epsilon"])


def test_a_singular_matrix_is_never_a_design(small):
    # epsilon ~ 0: only matrices with (nearly) identical rows qualify; they have no unbiased
    # estimator, so no design succeeds, and the message says why
    res = pramopt.design(small, QI, alpha=None, epsilon=1e-12)
    assert not res.success and "invertible" in res.message


@pytest.mark.parametrize("eps,k", [(1.0, None), (None, 30.0), (2.0, 50.0)])
def test_the_optimiser_itself_meets_the_rows(small, eps, k):
    """The strategy's matrix, before any exact check or fallback, meets ε and k up to the solver's
    tolerance (brute force): the rows are in the program."""
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem, Trace
    from pramopt.optimize.strategies.dense_ratio import solve_privacy
    from pramopt.params import DesignParams

    t = frequency_table(small, QI)
    params = DesignParams.from_options(alpha=None, epsilon=eps, k=k)
    pb = DesignProblem.build(t, resolve_combinations(t.qi, 3, None, "t"), params)
    start = retention_meeting(t, epsilon=eps, k=k)
    att = solve_privacy(pb, [("rr", start.P)], eps, k, None, Trace(None))
    P = att.P.toarray()
    assert att.ok and pramopt.loss.l2_loss(P, t.counts) < 0.5 * start.loss
    if eps is not None:
        assert brute_epsilon_holds(P, eps, rtol=1e-6)
    if k is not None:
        assert 1 + (len(small) - 1) * brute_ar(P) >= k * (1 - 1e-5)


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(alpha=None), "'alpha'"),
        (dict(epsilon=-1.0), "'epsilon'"),
        (dict(epsilon=0.0), "'epsilon'"),
        (dict(k=0.5), "'k'"),
        (dict(k=1e6), "'k'"),
        (dict(epsilon=1.0, fixed=["a"]), "'fixed'"),
        (dict(epsilon=1.0, invariant=True), "'invariant'"),
        (dict(k=2.0, structure="blocks"), "'structure'"),
        (dict(alpha="x", epsilon=1.0), "'alpha'"),
    ],
)
def test_bad_input_is_refused_with_the_parameter_named(small, kw, name):
    with pytest.raises(InvalidParameterError, match=name):
        pramopt.design(small, QI, **kw)


def test_too_many_cells_is_refused_before_any_work():
    from pramopt.params import PRIVACY_MAX_CELLS

    rng = np.random.default_rng(0)
    n = 3 * PRIVACY_MAX_CELLS
    df = pd.DataFrame({"a": rng.integers(0, 40, n), "b": rng.integers(0, 40, n)})
    assert frequency_table(df, ["a", "b"]).n_cells > PRIVACY_MAX_CELLS
    with pytest.raises(InvalidParameterError, match=r"'epsilon'.*cells"):
        pramopt.design(df, ["a", "b"], epsilon=1.0)


def test_cli_epsilon_and_k(tmp_path, small):
    import json

    from pramopt.cli import main

    path = tmp_path / "d.csv"
    small.to_csv(path, index=False)
    out = tmp_path / "out"
    rc = main(
        [
            "design",
            "--data",
            str(path),
            "--qi",
            "a,b,c",
            "--alpha",
            "none",
            "--epsilon",
            "2",
            "--k",
            "5",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    doc = json.loads((out / "design.json").read_text())
    assert (
        doc["params"]["alpha"] is None
        and doc["params"]["epsilon"] == 2.0
        and doc["params"]["k"] == 5.0
    )
    md = (out / "report.md").read_text()
    assert "ε (Theorem 1), measured" in md and "Pk-anonymity k, measured" in md


@pytest.mark.slow  # about a minute: 47 cells under C1, epsilon and k together
def test_privacy_spec_meets_its_expected_figures(tmp_path):
    from pathlib import Path

    from pramopt.cli import main

    spec = Path(__file__).resolve().parents[1] / "models" / "example_privacy.toml"
    assert main(["design", str(spec), "--out", str(tmp_path / "d"), "--check", "--quiet"]) == 0


def test_min_diagonal_is_honoured(small):
    res = pramopt.design(small, QI, alpha=None, epsilon=3.0, min_diagonal=0.5)
    assert res.success, res.message
    P = res.to_dense()
    assert P.diagonal().min() >= 0.5 and brute_epsilon_holds(P, 3.0)


def test_missing_values_kept_are_refused_and_as_a_category_designed(small):
    df = small.astype(object)
    df.loc[:4, "b"] = None
    with pytest.raises(InvalidParameterError, match="'missing'"):
        pramopt.design(df, QI, alpha=None, epsilon=2.0)
    res = pramopt.design(df, QI, alpha=None, epsilon=2.0, missing="category")
    assert res.success and brute_epsilon_holds(res.to_dense(), 2.0)


def test_release_checks_epsilon_again(small):
    # a design made under epsilon whose matrix was swapped for one that does not meet it (C1 is off:
    # only the epsilon check can refuse it)
    import dataclasses

    import scipy.sparse as sparse

    res = pramopt.design(small, QI, alpha=None, epsilon=2.0, max_iter=3)
    assert res.success
    P = res.to_dense()
    P[0] = 0.0
    P[0, 0] = 1.0  # zeros next to positive entries in every other column: epsilon = inf
    forged = dataclasses.replace(res, matrix=sparse.csr_array(P))
    with pytest.raises(pramopt.DesignMismatchError, match="fails epsilon = 2 when checked again"):
        pramopt.release(small, forged, seed=1)


def test_epsilon_cannot_be_edited_out_of_a_design_file(small, tmp_path):
    import json

    res = pramopt.design(small, QI, alpha=None, epsilon=2.0, max_iter=3)
    pramopt.save_design(res, tmp_path)
    rec = json.loads((tmp_path / "design.json").read_text())
    rec["params"]["epsilon"] = None
    (tmp_path / "design.json").write_text(json.dumps(rec))
    with pytest.raises(pramopt.DesignFileError, match="modified"):
        pramopt.load_design(tmp_path)


def test_exact_k_steps_keep_the_floor(small):
    # the floor is a hard constraint of every step, not only of the final check
    res = pramopt.design(small, QI, alpha=None, k=20, min_diagonal=0.2, max_iter=20)
    assert res.success and res.matrix.diagonal().min() >= 0.2
