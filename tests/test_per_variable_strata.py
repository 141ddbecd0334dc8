"""Per-variable designs with ``fixed`` strata: one set of matrices per stratum.

Checked against computations that share no code with the design: C1 by loops over the dense
Kronecker product of each stratum's matrices over the whole product space (within each stratum,
and over the whole data with the strata's rows stacked), Monte Carlo releases whose records of
each stratum move as that stratum's matrix says, and the files read back (``design.json``,
``pramopt assess --matrix`` on each stratum's records).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import pramopt
from pramopt.cli import main
from pramopt.per_variable.kind import example_per_variable
from pramopt.per_variable.report import from_per_variable
from pramopt.report import sections
from tests.test_per_variable_design import brute_c1


@pytest.fixture(scope="module", params=[["sex"], ["region"]], ids=["sex", "region"])
def stratified(request):
    df, qi, opts = example_per_variable(600)
    res = pramopt.design(df, qi, combination_size=2, fixed=request.param, **opts)
    return df, qi, opts, request.param, res


def whole_P(res, keys, qi, fixed):
    """The dense mechanism over the product space: row m is the Kronecker product of m's
    stratum's matrices (the identity for a stratum absent from the data)."""
    K = np.array(keys, dtype=object)
    P = np.eye(len(keys))
    for m, key in enumerate(keys):
        label = ", ".join(f"{f}={key[qi.index(f)]}" for f in fixed)
        if label not in res.strata:
            continue
        row = np.ones(len(keys))
        for j, q in enumerate(qi):
            M = res.strata[label][q]
            row *= np.array([M.loc[key[j], k] for k in K[:, j]])
        P[m] = row
    return P


def test_c1_by_brute_force_per_stratum_and_over_the_whole_data(stratified):
    df, qi, opts, fixed, res = stratified
    assert res.success and res.fixed == tuple(fixed) and len(res.strata) > 1
    assert not res.variable_matrices  # no one set describes the release
    keys = list(itertools.product(*[list(res.table.categories[j]) for j in range(len(qi))]))
    rows = pd.Series([tuple(r) for r in df[qi].itertuples(index=False)]).value_counts()
    U0 = np.array([rows.get(k, 0) for k in keys], dtype=float)
    P = whole_P(res, keys, qi, fixed)
    F = [qi.index(f) for f in fixed]
    K = np.array(keys, dtype=object)
    # no record leaves its stratum: the fixed values are released unchanged
    same = (K[:, None, F] == K[None, :, F]).all(axis=2)
    assert np.all(P[~same] == 0)
    combos = list(itertools.combinations(range(len(qi)), 2))
    alpha = opts["alpha"]
    for label in res.strata:
        inside = np.array([", ".join(f"{f}={k[qi.index(f)]}" for f in fixed) == label
                           for k in keys])  # fmt: skip
        # within the stratum: π extended by the fixed variables, only its records
        ext = [tuple(sorted(set(pi) | set(F))) for pi in combos]
        risk = brute_c1(P, keys, U0 * inside, ext)
        assert risk <= alpha
        assert res.details["strata"][label]["max_risk"] == pytest.approx(risk, rel=1e-9)
    whole = brute_c1(P, keys, U0, combos)
    assert whole <= alpha and res.max_risk == pytest.approx(whole, rel=1e-9)
    # the strata's matrices differ (one set for all would not be this design)
    sets = list(res.strata.values())
    q = next(v for v in qi if v not in fixed)
    assert not np.allclose(sets[0][q].to_numpy(), sets[-1][q].to_numpy())
    # the loss of the block-diagonal mechanism, from the dense inverse
    n = U0.sum()
    dense_loss = np.sum(np.linalg.inv(P) ** 2, axis=1) @ (U0 @ P) / n**2 - 1.0 / n
    assert res.loss == pytest.approx(dense_loss, rel=1e-9)
    assert res.expected_changes == pytest.approx(U0 @ (1 - np.diag(P)), rel=1e-12)


def test_release_draws_each_stratum_from_its_own_matrix(stratified):
    df, qi, _, fixed, res = stratified
    reps = 60
    label_of = (
        df[fixed].astype(str).apply(lambda r: ", ".join(f"{f}={r[f]}" for f in fixed), axis=1)
    )
    moved: dict = {}
    estimates = []
    for seed in range(reps):
        out = pramopt.release(df, res, seed=seed)
        pd.testing.assert_frame_equal(out[fixed], df[fixed])  # released unchanged
        for q in res.perturbed:
            t = pd.crosstab([label_of, df[q]], out[q])
            moved[q] = t if q not in moved else moved[q].add(t, fill_value=0)
        if seed < 30:
            estimates.append(pramopt.estimate(out, res)["estimate"].to_numpy())
    for q in res.perturbed:
        for (label, a), row in moved[q].iterrows():
            total = row.sum()
            M = res.strata[label][q]
            for b, hits in row.items():
                p = M.loc[a, b]
                # 5 binomial standard errors (and a floor for p near 0 or 1)
                tol = 5 * np.sqrt(p * (1 - p) / total) + 3 / total
                assert abs(hits / total - p) <= tol, (label, q, a, b, hits / total, p)
    # the estimate inverts each stratum's matrices: unbiased for the original table
    truth = df.groupby(qi).size()
    grid = pramopt.estimate(pramopt.release(df, res, seed=0), res)[qi]
    want = np.array([truth.get(tuple(r), 0) for r in grid.itertuples(index=False)], float)
    est = np.array(estimates)
    se = est.std(axis=0, ddof=1) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - want) <= 5 * se + 1e-6)


def test_save_load_round_trip_and_assess_each_stratum(stratified, tmp_path):
    df, qi, opts, fixed, res = stratified
    pramopt.save_design(res, tmp_path / "d")
    back = pramopt.load_design(tmp_path / "d")
    assert back.fixed == res.fixed and list(back.strata) == list(res.strata)
    assert back.success and back.check().max_risk == pytest.approx(res.max_risk, rel=1e-12)
    for label, mats in res.strata.items():
        for q in qi:
            pd.testing.assert_frame_equal(back.strata[label][q], mats[q])
        # each stratum's files, read back by assess on that stratum's records: C1 within it
        name = label.replace(", ", "_").replace("=", "_")
        values = [x.split("=")[1] for x in label.split(", ")]
        sub = df[(df[fixed].astype(str) == values).all(axis=1)]
        data = tmp_path / f"{name}.csv"
        sub.to_csv(data, index=False)
        args = ["assess", "--data", str(data), "--qi", ",".join(qi), "--combinations", "2",
                "--alpha", str(opts["alpha"])]  # fmt: skip
        for q in qi:
            args += ["--matrix", f"{q}={tmp_path / 'd' / f'matrix_{q}_{name}.csv'}"]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*args, "--json"]) == 0
        got = json.loads(buf.getvalue())["max_risk"]
        assert got == pytest.approx(res.details["strata"][label]["max_risk"], rel=1e-9)
        assert got <= opts["alpha"]


def test_report_of_a_stratified_design_is_the_data_level_one(stratified):
    df, qi, _, fixed, res = stratified
    got = {s.id: s.data for s in sections(from_per_variable(res))}
    keys = list(itertools.product(*[list(res.table.categories[j]) for j in range(len(qi))]))
    rows = pd.Series([tuple(r) for r in df[qi].itertuples(index=False)]).value_counts()
    U0 = np.array([rows.get(k, 0) for k in keys], dtype=float)
    P = whole_P(res, keys, qi, fixed)
    K = np.array(keys, dtype=object)
    flow = U0[:, None] * P
    for j, q in enumerate(qi):
        T = got["transitions"][q]
        for a in res.table.categories[j]:
            for b in res.table.categories[j]:
                want = flow[np.ix_(K[:, j] == a, K[:, j] == b)].sum() / U0[K[:, j] == a].sum()
                assert T.loc[str(a), str(b)] == pytest.approx(want, abs=1e-6)
    risk = got["risk"]
    assert risk["risk_after"].max() == pytest.approx(res.max_risk, rel=1e-12)
    assert (risk["over_after"] == 0).all()


def test_strata_that_pass_their_own_checks_still_need_the_whole_data_one(monkeypatch):
    """With each stratum's search blind to C1 and its own check switched off (every stratum
    says success), success comes from the check over the whole data alone: it fails and says so."""
    import pramopt.per_variable.check as check
    import pramopt.per_variable.designer as designer
    import pramopt.per_variable.strata as strata

    real = strata.check_product_c1  # the whole data's check, bound before the patch below

    df, qi, opts = example_per_variable(600)
    monkeypatch.setattr(designer, "max_risk", lambda *a, **k: 0.0)
    monkeypatch.setattr(designer, "c1_rows", lambda p, m, v, *a, **k: (
        sp.csr_matrix((0, m[v].size)), np.zeros(0), 0.0))  # fmt: skip
    monkeypatch.setattr(check, "check_product_c1", lambda *a, **k: check.ProductCheck(0.0, (), ()))
    res = pramopt.design(df, qi, combination_size=2, fixed=["sex"], **opts)
    assert strata.check_product_c1 is real
    assert all(p["status"] == "success" for p in res.details["strata"].values())
    assert not res.success and res.status is pramopt.Status.UNVERIFIED
    assert res.max_risk > opts["alpha"] and "not safe to release" in res.message
