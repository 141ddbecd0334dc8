"""The check every release makes of its data: the design's own cells and counts.

Apart from :mod:`.frame` so that the household release (:mod:`pramopt.households.release`),
which :func:`pramopt.release` hands household designs to, can use it without importing back.
"""
from __future__ import annotations

from ..errors import DesignMismatchError
from ..frequency.table import FrequencyTable

__all__ = ["check_same_table"]


def check_same_table(got: FrequencyTable, table: FrequencyTable, source: str = "the data") -> None:
    """Refuse data whose cells or counts over the identifying variables are not the design's."""
    if got.checksum() != table.checksum():
        raise DesignMismatchError(
            f"The design was made for other data: the cells or counts of {source} over "
            f"{', '.join(map(str, table.qi))} differ (n = {got.n} vs {table.n}, {got.n_cells} vs "
            f"{table.n_cells} cells).")
