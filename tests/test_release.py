"""Release (PRAM draws) and the unbiased estimator (4) of Cator et al."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.example import EXAMPLE_QI
from pramopt.publish.sampling import Sampler, UniformStream, seed_entropy

QI = list(EXAMPLE_QI)


def test_draws_follow_rows_of_P():
    # Monte Carlo: 200,000 draws from each of three rows; every empirical frequency lies within
    # 5 binomial standard errors of P.
    P = np.array([[0.7, 0.2, 0.1, 0.0], [0.0, 1.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    P = np.vstack([P, [0.0, 0.0, 0.5, 0.5]])
    R = 200_000
    cells = np.repeat(np.arange(4), R)
    out = Sampler(P).draw(cells, UniformStream(seed_entropy(1))(0, len(cells)))  # as release draws
    for a in range(4):
        freq = np.bincount(out[cells == a], minlength=4) / R
        se = np.sqrt(P[a] * (1 - P[a]) / R)
        assert np.all(np.abs(freq - P[a]) <= 5 * se + 1e-12)


def test_release_changes_only_identifying_columns(example, result):
    out = pramopt.release(example, result, seed=5)
    pd.testing.assert_series_equal(out["income"], example["income"])
    assert list(out.columns) == list(example.columns)
    assert out[QI].dtypes.tolist() == example[QI].dtypes.tolist()
    # every released record lies in a present cell
    pramopt.frequency_table(out, QI)


def test_seed_reproducible_and_secure_default(example, result):
    a = pramopt.release(example, result, seed=11)
    b = pramopt.release(example, result, seed=11)
    pd.testing.assert_frame_equal(a, b)
    # without a seed two draws come from independently seeded generators; with ~7.5 expected
    # changes each, the chance that the whole releases coincide is below 1e-3 on this design
    draws = [pramopt.release(example, result)[QI] for _ in range(4)]
    assert any(not draws[0].equals(d) for d in draws[1:])


def test_estimate_is_unbiased_in_expectation(example, result):
    # E[U] = P^T U0 exactly, and estimate() applied to expected counts must return U0.
    est = pramopt.estimate(example, result)  # released == original: estimate = P^-T U0
    Pinv = np.linalg.inv(result.to_dense())
    np.testing.assert_allclose(est["estimate"], Pinv.T @ result.counts, rtol=1e-10)
    # E[estimate(release)] through pramopt.estimate: estimate is linear in the released counts,
    # so applying it to one record of each cell (one `by` group per record) gives its columns,
    # and E[U_k] = sum over records of P[cell of record, k] (the law of the release, by loops)
    cells = result.cells.reset_index(drop=True)
    one_each = cells.assign(record=np.arange(len(cells)))
    per_record = (
        pramopt.estimate(one_each, result, by="record")["estimate"]
        .to_numpy()
        .reshape(len(cells), len(cells))
    )
    P = result.to_dense()
    pos = {tuple(c): i for i, c in enumerate(cells[QI].itertuples(index=False))}
    EU = np.zeros(len(cells))
    for rec in example[QI].itertuples(index=False):
        EU += P[pos[tuple(rec)]]
    np.testing.assert_allclose(EU @ per_record, result.counts, atol=1e-8)


def test_estimate_monte_carlo_mean():
    # Monte Carlo of release + estimate on a small table with a moderately mixing P: the mean of
    # 4,000 estimates is within 5 standard errors of U0 for every cell (eq. (4) is unbiased).
    from pramopt.result import DesignResult, Status

    df = pd.DataFrame({"a": [0] * 30 + [1] * 20 + [2] * 10})
    table = pramopt.frequency_table(df, ["a"])
    P = np.array([[0.8, 0.15, 0.05], [0.1, 0.7, 0.2], [0.1, 0.3, 0.6]])
    res = DesignResult(
        matrix=P,
        status=Status.SUCCESS,
        loss=0.0,
        expected_changes=0.0,
        max_risk=0.0,
        min_diagonal=0.6,
        gamma=None,
        binding_rows=(),
        reduction=None,
        solver=None,
        stages=(),
        condition_number=1.0,
        message="",
        alpha=0.5,
        qi=("a",),
        combinations=(("a",),),
        table=table,
    )
    ests = np.array(
        [pramopt.estimate(pramopt.release(df, res, seed=s), res)["estimate"] for s in range(4000)]
    )
    se = ests.std(axis=0, ddof=1) / np.sqrt(len(ests))
    assert np.all(np.abs(ests.mean(axis=0) - table.counts) <= 5 * se)


def test_estimate_by_other_column(example, result):
    df = example.assign(region=np.where(example["income"] > 22000, "hi", "lo"))
    est = pramopt.estimate(df, result, by="region")
    assert set(est["region"]) == {"hi", "lo"}
    # summed over region the joint estimate equals the marginal one (linearity of (4))
    tot = est.groupby(QI)["estimate"].sum().to_numpy()
    np.testing.assert_allclose(
        np.sort(tot), np.sort(pramopt.estimate(df, result)["estimate"]), rtol=1e-9
    )


def test_release_refuses_other_data(example, result):
    other = example.copy()
    other.loc[0, "v1"] = 1 - other.loc[0, "v1"]
    with pytest.raises(pramopt.DesignMismatchError):
        pramopt.release(other.iloc[1:], result, seed=1)


def test_release_keeps_dtypes_and_missing_category():
    # With missing="category" missing values are a category PRAM may change; released columns
    # keep their dtypes.  (With the default "keep", the one record missing both reg and age could
    # not hide: that design is refused with the figure.)
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "sex": rng.choice(["m", "f"], n),
            "reg": pd.Categorical(rng.choice(["N", "S", "E", None], n, p=[0.5, 0.3, 0.17, 0.03])),
            "age": rng.choice([1.0, 2.0, np.nan], n, p=[0.6, 0.38, 0.02]),
        }
    )
    res = pramopt.design(df, ["sex", "reg", "age"], alpha=0.2, missing="category")
    assert res.success
    out = pramopt.release(df, res, seed=3)
    assert out.dtypes.to_dict() == df.dtypes.to_dict()
    # released cells are cells of the design (including those with missing values)
    t = pramopt.frequency_table(out, ["sex", "reg", "age"])
    assert t.counts.sum() == n
