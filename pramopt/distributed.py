"""Beyond one machine: counting and release on Dask DataFrames.

Both functions work partition by partition (``map_partitions``); only small per-partition
cell counts come back to the client, so the design step -- which only sees the
:class:`~pramopt.FrequencyTable` -- never needs the records.  Dask is imported lazily: the rest
of pramopt works without it (``pip install 'pramopt[dask]'``).

:func:`count_dask` gives the same table as :func:`pramopt.frequency_table` on
``ddf.compute()``: each partition counts its distinct combinations of identifying values
(``groupby(..., dropna=False).size()``), and the client codes the concatenated distinct values
as the in-memory path codes a whole column (``pd.factorize(sort=True)``, missing last), so
categories that appear only in some partitions are handled like any other.

:func:`release_dask` gives the same records as :func:`pramopt.release` on ``ddf.compute()``
with the same seed: record ``i`` of the frame takes its uniform from block ``i // BLOCK`` of
the seed's stream, and every partition knows the position of its first record (from the
partition sizes counted while checking the data against the design).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ._validation import InvalidParameterError, check_int
from .data import MAX_CATEGORIES, FrequencyTable, check_domains, check_qi_names, count_rows, record_codes
from .release import (
    DesignMismatchError, Sampler, UniformStream, check_releasable, release_frame, seed_entropy,
)

__all__ = ["count_dask", "release_dask"]

_COUNT = "__pramopt_count__"
_PART = "__pramopt_partition__"


def _dask_dataframe():
    try:
        import dask.dataframe as dd
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "pramopt's Dask functions need dask: pip install 'pramopt[dask]' "
            "(dask[dataframe] and distributed).") from e
    return dd


def _check_frame(ddf, owner: str):
    dd = _dask_dataframe()
    if not isinstance(ddf, dd.DataFrame):
        raise InvalidParameterError(
            f"The 'ddf' parameter of {owner} must be a dask DataFrame; got {type(ddf).__name__}.")


class _PartitionCounts:
    """Distinct combinations of the identifying values of one partition, with their counts."""

    def __init__(self, qi, names: tuple[str, str]):
        self.qi = list(qi)
        self.count, self.part = names

    def __call__(self, part: pd.DataFrame, partition_info=None) -> pd.DataFrame:
        g = part.groupby(self.qi, dropna=False, observed=True, sort=False).size()
        out = g.reset_index(name=self.count)
        out[self.count] = out[self.count].astype(np.int64)
        out[self.part] = np.int64(partition_info["number"] if partition_info else -1)
        return out


def _names(qi) -> tuple[str, str]:
    count, part = _COUNT, _PART
    while count in qi or part in qi:
        count, part = count + "_", part + "_"
    return count, part


def _partition_counts(ddf, qi) -> tuple[pd.DataFrame, tuple[str, str]]:
    """Per-partition cell counts of every partition, concatenated (a small pandas frame)."""
    names = _names(qi)
    fn = _PartitionCounts(qi, names)
    meta = fn(ddf._meta.iloc[:0])
    return ddf.map_partitions(fn, meta=meta).compute(), names


def _table(parts: pd.DataFrame, count: str, qi, domains, max_categories, owner: str) -> FrequencyTable:
    if int(parts[count].sum()) == 0:
        raise InvalidParameterError(f"The 'data' parameter of {owner} must have at least one row; got an empty frame.")
    values = parts[list(qi)].reset_index(drop=True)
    codes, cats = record_codes(values, qi, domains, max_categories, owner)
    cells, counts = count_rows(codes, [len(c) for c in cats], parts[count].to_numpy())
    return FrequencyTable(qi=tuple(qi), categories=cats, codes=cells, counts=counts)


def count_dask(
    ddf,
    qi: Sequence[str],
    domains: Mapping[str, Sequence] | None = None,
    *,
    max_categories: int = MAX_CATEGORIES,
) -> FrequencyTable:
    """Frequency table of a Dask DataFrame, counted partition by partition.

    Parameters
    ----------
    ddf : dask.dataframe.DataFrame
        Microdata, one row per record.
    qi : list of str
        Identifying variables.
    domains : dict, optional
        Categories of some variables, when they should not be taken from the data.
    max_categories : int
        Refuse variables with more categories than this (bin them first).

    Returns
    -------
    FrequencyTable
        The same as :func:`pramopt.frequency_table` on ``ddf.compute()``.
    """
    owner = "count_dask"
    _check_frame(ddf, owner)
    qi = check_qi_names(ddf.columns, qi, owner)
    domains = check_domains(domains, qi, owner)
    max_categories = check_int(max_categories, "max_categories", owner, low=1)
    parts, (count, _) = _partition_counts(ddf, qi)
    return _table(parts, count, qi, domains, max_categories, owner)


class _PartitionRelease:
    """Release of one partition, whose first record is record ``offsets[number]`` of the frame."""

    def __init__(self, table: FrequencyTable, sampler: Sampler, entropy: int, offsets: np.ndarray):
        self.table, self.sampler, self.entropy, self.offsets = table, sampler, entropy, offsets

    def __call__(self, part: pd.DataFrame, partition_info=None) -> pd.DataFrame:
        if partition_info is None:
            raise RuntimeError("release_dask needs Dask to pass partition_info to map_partitions.")
        start = int(self.offsets[partition_info["number"]])
        if len(part) == 0:
            return part.copy()
        return release_frame(part, self.table, self.sampler, UniformStream(self.entropy), start, "release_dask")


def release_dask(ddf, result, seed=None, *, allow_unverified: bool = False):
    """Perturb the identifying columns of a Dask DataFrame with the design's matrix.

    The data are checked against the design first (one pass: every value known to the design
    and the cell counts equal to the design's), which also gives the size of every partition;
    the release itself is lazy (``map_partitions``).

    Parameters
    ----------
    ddf : dask.dataframe.DataFrame
        The microdata the design was made for.
    result : DesignResult
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw; without it 128 bits of entropy come from ``secrets``
        once, when this function is called (so computing the result twice gives the same
        records).  The same seed gives the same records as :func:`pramopt.release` on
        ``ddf.compute()`` and :func:`pramopt.stream.release_file`.
    allow_unverified : bool
        Release even with a design that failed verification (never do this for publication).

    Returns
    -------
    dask.dataframe.DataFrame
        Same partitions, columns and dtypes as ``ddf``.

    Raises
    ------
    DesignMismatchError
        For a design that did not pass verification, or data it was not made for.
    """
    owner = "release_dask"
    table = check_releasable(result, owner, allow_unverified)
    _check_frame(ddf, owner)
    qi = check_qi_names(ddf.columns, table.qi, owner)
    entropy = seed_entropy(seed, owner)
    parts, (count, part) = _partition_counts(ddf, qi)
    domains = {q: list(c) for q, c in zip(table.qi, table.categories)}
    try:
        got = _table(parts, count, qi, domains, max(max(len(c) for c in table.categories), 1), "release")
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
    if got.checksum() != table.checksum():
        raise DesignMismatchError(
            f"The design was made for other data: the cells or counts over {', '.join(map(str, qi))} differ "
            f"(n = {got.n} vs {table.n}, {got.n_cells} vs {table.n_cells} cells).")
    sizes = (parts.groupby(part)[count].sum()
             .reindex(range(ddf.npartitions), fill_value=0).to_numpy(dtype=np.int64))
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    fn = _PartitionRelease(table, Sampler(result.matrix), entropy, offsets)
    return ddf.map_partitions(fn, meta=ddf._meta)
