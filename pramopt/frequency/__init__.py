"""From microdata to frequency tables: the first stage of the pipeline.

* :mod:`.table` -- :class:`FrequencyTable` and :func:`frequency_table` (in memory);
* :mod:`.combinations` -- the set Π of combinations an intruder may overview;
* :mod:`.file_counting` -- :func:`count_file`, CSV or Parquet files in record batches;
* :mod:`.distributed` -- :func:`count_dask`, Dask DataFrames partition by partition.
"""

from .combinations import resolve_combinations
from .distributed import count_dask
from .file_counting import count_file
from .table import FrequencyTable, frequency_table

__all__ = ["FrequencyTable", "frequency_table", "resolve_combinations", "count_file", "count_dask"]
