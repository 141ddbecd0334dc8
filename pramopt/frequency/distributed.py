"""Beyond one machine: counting a Dask DataFrame, partition by partition.

:func:`count_dask` gives the same table as :func:`pramopt.frequency_table` on
``ddf.compute()``: each partition counts its distinct combinations of identifying values
(``groupby(..., dropna=False).size()``), and the client codes the concatenated distinct values
as the in-memory path codes a whole column (``pd.factorize(sort=True)``, missing last), so
categories that appear only in some partitions are handled like any other.  Only small
per-partition cell counts come back to the client.  Dask is imported lazily: the rest of
pramopt works without it (``pip install 'pramopt[dask]'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .._validation import InvalidParameterError, check_int
from .table import (
    MAX_CATEGORIES,
    FrequencyTable,
    check_domains,
    check_qi_names,
    count_rows,
    record_codes,
)

__all__ = ["count_dask"]


_COUNT = "__pramopt_count__"
_PART = "__pramopt_partition__"


def _dask_dataframe():
    try:
        import dask.dataframe as dd
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "pramopt's Dask functions need dask: pip install 'pramopt[dask]' "
            "(dask[dataframe] and distributed)."
        ) from e
    return dd


def _check_frame(ddf, owner: str):
    dd = _dask_dataframe()
    if not isinstance(ddf, dd.DataFrame):
        raise InvalidParameterError(
            f"The 'ddf' parameter of {owner} must be a dask DataFrame; got {type(ddf).__name__}."
        )


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


def _table(
    parts: pd.DataFrame, count: str, qi, domains, max_categories, owner: str
) -> FrequencyTable:
    if int(parts[count].sum()) == 0:
        raise InvalidParameterError(
            f"The 'data' parameter of {owner} must have at least one row; got an empty frame."
        )
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
