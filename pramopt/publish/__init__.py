"""Applying a design to records, and estimating from released records.

* :mod:`.frame` -- :func:`release` and :func:`estimate` on pandas frames;
* :mod:`.file_release` -- :func:`release_file`, CSV or Parquet in record batches;
* :mod:`.distributed` -- :func:`release_dask`;
* :mod:`.policy` -- the office's release policy (the α and Π a released design must meet);
* :mod:`.sampling` -- the secure default seed, split-invariant uniforms, the row sampler.

Every release path checks the design again against the full C1 before it draws or writes
anything (:func:`.frame.releasable_table`).
"""

from .distributed import release_dask
from .file_release import FileRelease, release_file
from .frame import estimate, release
from .policy import ReleasePolicy, release_policy

__all__ = [
    "release",
    "estimate",
    "release_file",
    "FileRelease",
    "release_dask",
    "ReleasePolicy",
    "release_policy",
]
