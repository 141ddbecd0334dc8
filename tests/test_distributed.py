"""Counting and release on Dask DataFrames, against a real local Dask cluster.

The references are the in-memory ``frequency_table`` and ``release`` of ``ddf.compute()`` with
the same seed, and the streamed ``release_file`` of the same data written to disk.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from test_stream import (  # noqa: E402
    SYN_KEYS,
    assert_counts_match_pandas,
    assert_same_table,
    fake_design,
    synthetic,
)

import pramopt  # noqa: E402
from pramopt import (  # noqa: E402
    InvalidParameterError,  # noqa: E402
    count_dask,
    release_dask,
    release_file,  # noqa: E402
)
from pramopt.errors import DesignMismatchError  # noqa: E402


@pytest.fixture(scope="module")
def client():
    """Two worker processes with one thread each (the suite's only cluster; closed at the end)."""
    with dask.config.set({"dataframe.convert-string": False}):
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=50,
        )
        with distributed.Client(cluster) as c:
            yield c
        cluster.close()


@pytest.fixture(scope="module")
def frame(client, tmp_path_factory):
    df = synthetic(n=4000, seed=5)
    tmp = tmp_path_factory.mktemp("dask")
    df.to_csv(tmp / "syn.csv", index=False)
    local = pd.read_csv(tmp / "syn.csv")  # the frame pandas reads, as the streamed path sees it
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(local, npartitions=7)
    return dict(df=local, ddf=ddf, csv=tmp / "syn.csv", tmp=tmp)


def test_count_dask_equals_in_memory(frame):
    got = count_dask(frame["ddf"], SYN_KEYS)
    local = frame["ddf"].compute()
    assert_same_table(got, pramopt.frequency_table(local, SYN_KEYS))
    assert_counts_match_pandas(got, local, SYN_KEYS)
    dom = {"d": [False, True, "never"]}
    assert_same_table(
        count_dask(frame["ddf"], ["d", "e"], domains=dom),
        pramopt.frequency_table(local, ["d", "e"], domains=dom),
    )


def test_count_dask_categories_only_in_some_partitions(client):
    # 'late' appears only in the last partition and NaN only in the first: the categories are
    # still sorted as for the whole frame, with the missing value last
    df = pd.DataFrame({"k": [np.nan] + ["b"] * 49 + ["a"] * 50 + ["late"] * 10, "z": range(110)})
    ddf = dd.from_pandas(df, npartitions=4, sort=False)
    got = count_dask(ddf, ["k"])
    assert [str(c) for c in got.categories[0]] == ["a", "b", "late", "nan"]
    np.testing.assert_array_equal(got.counts, [50, 49, 10, 1])


def test_release_dask_equals_in_memory_and_stream(frame):
    ddf, local = frame["ddf"], frame["ddf"].compute()
    res = fake_design(pramopt.frequency_table(local, SYN_KEYS))
    got = release_dask(ddf, res, seed=42)
    assert got.npartitions == ddf.npartitions
    out = got.compute()
    pd.testing.assert_frame_equal(out, pramopt.release(local, res, seed=42))
    # the streamed release of the same file with the same seed gives the same records
    release_file(frame["csv"], frame["tmp"] / "r.csv", res, seed=42, batch_size=333)
    pd.testing.assert_frame_equal(pd.read_csv(frame["tmp"] / "r.csv"), out.reset_index(drop=True))
    # repartitioned input: same records
    again = release_dask(ddf.repartition(npartitions=3), res, seed=42).compute()
    pd.testing.assert_frame_equal(again, out)
    # a lazily drawn seed is drawn once: computing twice gives the same records
    lazy = release_dask(ddf, res)
    pd.testing.assert_frame_equal(lazy.compute(), lazy.compute())


def test_release_dask_refusals(frame):
    ddf, local = frame["ddf"], frame["ddf"].compute()
    res = fake_design(pramopt.frequency_table(local, SYN_KEYS))
    with pytest.raises(DesignMismatchError, match="made for other data"):
        release_dask(ddf.loc[ddf.index > 0], res, seed=1)
    bad = local.copy()
    bad.loc[5, "e"] = "zz"
    with pytest.raises(DesignMismatchError, match="do not match the design"):
        release_dask(dd.from_pandas(bad, npartitions=3), res, seed=1)
    failed = fake_design(pramopt.frequency_table(local, SYN_KEYS))
    failed = type(failed)(**{**failed.__dict__, "status": pramopt.Status.INFEASIBLE})
    with pytest.raises(DesignMismatchError, match="infeasible"):
        release_dask(ddf, failed, seed=1)
    with pytest.raises(InvalidParameterError, match="must be a dask DataFrame"):
        count_dask(local, SYN_KEYS)
    with pytest.raises(InvalidParameterError, match=r"\['nope'\] not among"):
        count_dask(ddf, ["a", "nope"])
