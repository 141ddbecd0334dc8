"""Beyond one machine: releasing a Dask DataFrame, partition by partition.

:func:`release_dask` gives the same records as :func:`pramopt.release` on ``ddf.compute()``
with the same seed: record ``i`` of the frame takes its uniform from block ``i // BLOCK`` of
the seed's stream, and every partition knows the position of its first record (from the
partition sizes counted while checking the data against the design).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._validation import InvalidParameterError
from ..errors import DesignMismatchError
from ..frequency.distributed import _check_frame, _partition_counts, _table
from ..frequency.table import FrequencyTable, check_qi_names
from .frame import check_same_table, refuse_kind, releasable_table, release_frame
from .recoded import recoding_of
from .sampling import AnySampler, UniformStream, sampler_for, seed_entropy

__all__ = ["release_dask"]


class _PartitionRelease:
    """Release of one partition, whose first record is record ``offsets[number]`` of the frame."""

    def __init__(
        self, table: FrequencyTable, sampler: AnySampler, entropy: int, offsets: np.ndarray
    ):
        self.table, self.sampler, self.entropy, self.offsets = table, sampler, entropy, offsets

    def __call__(self, part: pd.DataFrame, partition_info=None) -> pd.DataFrame:
        if partition_info is None:
            raise RuntimeError("release_dask needs Dask to pass partition_info to map_partitions.")
        start = int(self.offsets[partition_info["number"]])
        if len(part) == 0:
            return part.copy()
        return release_frame(
            part, self.table, self.sampler, UniformStream(self.entropy), start, "release_dask"
        )


def release_dask(ddf, result, seed=None, *, allow_unverified: bool = False, policy=None):
    """Perturb the identifying columns of a Dask DataFrame with the design's matrix.

    The data are checked against the design first (one pass: every value known to the design
    and the cell counts equal to the design's), which also gives the size of every partition;
    the release itself is lazy (``map_partitions``).

    Parameters
    ----------
    ddf : dask.dataframe.DataFrame
        The microdata the design was made for (recoded first with the design's recoding, if it
        has one).
    result : DesignResult
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw; without it 128 bits of entropy come from ``secrets``
        once, when this function is called (so computing the result twice gives the same
        records).  The same seed gives the same records as :func:`pramopt.release` on
        ``ddf.compute()`` and :func:`pramopt.release_file`.
    allow_unverified : bool
        Release even with a design that failed verification (never do this for publication).
    policy : ReleasePolicy, optional
        The office's α and Π (:func:`pramopt.release_policy`): a design weaker than it is
        refused.

    Returns
    -------
    dask.dataframe.DataFrame
        Same partitions, columns and dtypes as ``ddf`` (a recoded variable as text).

    Raises
    ------
    DesignMismatchError
        For a design that did not pass verification, or data it was not made for.
    """
    owner = "release_dask"
    # other kinds (households, one matrix per variable) release through release/release_file
    refuse_kind(result, owner, "release_dask")
    table = releasable_table(result, owner, allow_unverified, policy)
    _check_frame(ddf, owner)
    qi = check_qi_names(ddf.columns, table.qi, owner)
    rec = recoding_of(result)
    if rec:  # a design made on recoded data: matched, and released, recoded (lazily)
        ddf = ddf.map_partitions(rec.apply, meta=rec.apply(ddf._meta))
    entropy = seed_entropy(seed, owner)
    parts, (count, part) = _partition_counts(ddf, qi)
    domains = {q: list(c) for q, c in zip(table.qi, table.categories)}
    try:
        got = _table(
            parts, count, qi, domains, max(max(len(c) for c in table.categories), 1), "release"
        )
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
    check_same_table(got, table, "the Dask frame")
    sizes = (
        parts.groupby(part)[count]
        .sum()
        .reindex(range(ddf.npartitions), fill_value=0)
        .to_numpy(dtype=np.int64)
    )
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    fn = _PartitionRelease(table, sampler_for(result), entropy, offsets)
    return ddf.map_partitions(fn, meta=ddf._meta)
