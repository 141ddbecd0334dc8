"""Designs per stratum of the fixed variables (``workers=`` / ``client=``), merged into one matrix.

The references are written here from the paper's definition (eq. (1)), counting U0 from the
records: the merged design must meet the full C1 over every triple, and C1 within every stratum
with each triple extended by the fixed variable; parallel, sequential and Dask runs must give
the same matrix.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt import InvalidParameterError, Status
from pramopt.example import EXAMPLE_QI
from pramopt.loss import l2_loss

QI = list(EXAMPLE_QI)
FIXED = "v1"


def brute_force_risk(P, cells, df: pd.DataFrame, qi, combos) -> float:
    """Largest P(m -> k0) / sum_l U0(l) P(l -> k0) over present m, π in ``combos`` and k0.

    ``cells`` are the labels of P's rows and columns; U0 is counted from the records.
    """
    cells = [tuple(r) for r in cells[qi].itertuples(index=False)]
    recs = [tuple(r) for r in df[qi].itertuples(index=False)]
    U0 = np.array([recs.count(c) for c in cells], dtype=float)
    assert U0.sum() == len(df)
    worst = 0.0
    for pi in combos:
        for k0 in {tuple(c[i] for i in pi) for c in cells}:
            cols = [j for j, c in enumerate(cells) if tuple(c[i] for i in pi) == k0]
            S = P[:, cols].sum(axis=1)
            present = U0 > 0
            worst = max(worst, float(S[present].max() / (U0 @ S)))
    return worst


def triples(qi):
    return list(itertools.combinations(range(len(qi)), 3))


@pytest.fixture(scope="module")
def sequential(example):
    return pramopt.design(example, QI, alpha=0.1, fixed=[FIXED], workers=1)


@pytest.fixture(scope="module")
def parallel(example):
    return pramopt.design(example, QI, alpha=0.1, fixed=[FIXED], workers=2)


def test_merged_design_meets_c1_by_brute_force(sequential, example):
    res = sequential
    P = res.to_dense()
    # the full C1 of the paper over every triple
    full = brute_force_risk(P, res.cells, example, QI, triples(QI))
    assert full <= 0.1
    assert full == pytest.approx(res.max_risk, rel=1e-9)
    assert res.success, res.message
    assert "2 strata" in res.message
    # C1 within each stratum, every triple extended by the fixed variable
    f = QI.index(FIXED)
    for v in sorted(example[FIXED].unique()):
        rows = np.flatnonzero(res.cells[FIXED].to_numpy() == v)
        sub = example[example[FIXED] == v]
        within = brute_force_risk(
            P[np.ix_(rows, rows)],
            res.cells.iloc[rows],
            sub,
            QI,
            [tuple(sorted(set(pi) | {f})) for pi in triples(QI)],
        )
        assert within <= 0.1, v
    # the per-stratum figures and the loss of a block-diagonal matrix
    assert [s["status"] for s in res.details["strata"]] == ["success", "success"]
    assert sum(s["records"] for s in res.details["strata"]) == len(example)
    assert res.loss == pytest.approx(l2_loss(res.matrix, res.counts), rel=1e-9)


def test_no_transition_crosses_strata_and_fixed_values_are_released_unchanged(sequential, example):
    P = sequential.to_dense()
    v = sequential.cells[FIXED].to_numpy()
    assert np.all(P[v[:, None] != v[None, :]] == 0)
    out = pramopt.release(example, sequential, seed=3)
    pd.testing.assert_series_equal(out[FIXED], example[FIXED])
    assert (out[QI] != example[QI]).any(axis=1).sum() > 0  # something did change


def test_parallel_equals_sequential(sequential, parallel):
    assert parallel.success
    assert (parallel.matrix != sequential.matrix).nnz == 0
    assert "2 local processes" in parallel.message
    assert parallel.params["workers"] == 2 and sequential.params["workers"] == 1


def test_params_repeat_the_design(sequential):
    again = pramopt.design(sequential.table, **sequential.params)
    assert (again.matrix != sequential.matrix).nnz == 0


def test_per_stratum_costs_loss_against_the_joint_design(sequential, example):
    joint = pramopt.design(example, QI, alpha=0.1, fixed=[FIXED])
    assert joint.success and "strata" not in joint.details
    # the per-stratum condition is the stronger one: never a smaller loss here
    assert sequential.loss >= joint.loss


def test_keep_cells_go_to_their_stratum(example):
    keep = {"v1": 1, "v2": 0, "v3": 0, "v4": 0, "v5": 0}
    res = pramopt.design(example, QI, alpha=0.1, fixed=[FIXED], workers=1, keep_cells=[keep])
    assert res.success
    k = int(np.flatnonzero((res.cells == pd.Series(keep)).all(axis=1))[0])
    assert res.matrix[k, k] == 1.0


def test_too_small_stratum_is_infeasible_and_named(example):
    extra = pd.DataFrame({q: [0, 1, 0] for q in QI}).assign(v1=7)
    df = pd.concat([example, extra], ignore_index=True)
    res = pramopt.design(df, QI, alpha=0.1, fixed=[FIXED], workers=2)
    assert res.status is Status.INFEASIBLE and not res.success
    assert "v1=7 (3 records)" in res.message and "1/alpha = 10" in res.message
    with pytest.raises(pramopt.DesignMismatchError):
        pramopt.release(df, res, seed=1)


def test_a_failing_stratum_is_named(example):
    # a hard diagonal floor the small stratum cannot meet with a general design
    res = pramopt.design(
        example, QI, alpha=0.1, fixed=[FIXED], workers=1, structure="general", min_diagonal=0.9
    )
    assert res.status is Status.INFEASIBLE, res.message
    assert res.message.startswith("Stratum v1=1 (281 records, 23 cells) failed:")
    assert [s["status"] for s in res.details["strata"]] == ["success", "infeasible"]


def test_one_stratum_is_the_joint_design(example):
    # a fixed variable with one value: one stratum, so the joint design (workers without any
    # fixed variable is refused: test_reliability)
    df = example.assign(c=0)
    joint = pramopt.design(df, QI + ["c"], alpha=0.1, fixed=["c"], max_iter=5)
    res = pramopt.design(df, QI + ["c"], alpha=0.1, fixed=["c"], workers=2, max_iter=5)
    assert (res.matrix != joint.matrix).nnz == 0 and "strata" not in res.details


def test_bad_workers_and_client():
    df = pd.DataFrame({"a": [0, 1] * 20, "b": [0, 0, 1, 1] * 10})
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidParameterError, match="'workers'"):
            pramopt.design(df, ["a", "b"], fixed=["a"], workers=bad)
    with pytest.raises(InvalidParameterError, match="'client'"):
        pramopt.design(df, ["a", "b"], fixed=["a"], client="tcp://localhost:8786")
    with pytest.raises(InvalidParameterError, match="'fixed'"):
        pramopt.design(df, ["a", "b"], fixed=["c"], workers=1)


def test_dask_cluster_gives_the_same_matrix(sequential, example):
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
    )
    try:
        with distributed.Client(cluster) as client:
            res = pramopt.design(example, QI, alpha=0.1, fixed=[FIXED], client=client)
    finally:
        cluster.close()
    assert res.success and "Dask cluster" in res.message
    assert (res.matrix != sequential.matrix).nnz == 0
    assert res.params["workers"] == 1  # repeats it in this process
