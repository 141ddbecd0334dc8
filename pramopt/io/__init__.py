"""Files in and out: microdata (CSV, Parquet), designs on disk, matrices made elsewhere.

* :mod:`.atomic` -- every file written to a temporary name and renamed.
* :mod:`.tables` -- microdata files.
* :mod:`.design_file` -- ``design.json`` and ``matrix.csv``.
* :mod:`.parameters` -- a replacement or block design kept as its parameters (``parameters.npz``,
  ``parameters.csv``) instead of its K x K entries.
* :mod:`.matrices` -- matrices made by other tools.
"""

from .atomic import DESIGN_FILE, atomic_dir, atomic_write, write_text
from .design_file import FORMAT, load_design, matrix_long, save_design, table_for_design
from .matrices import read_matrix
from .tables import read_table, write_table

__all__ = [
    "DESIGN_FILE",
    "FORMAT",
    "atomic_dir",
    "atomic_write",
    "write_text",
    "load_design",
    "save_design",
    "matrix_long",
    "table_for_design",
    "read_matrix",
    "read_table",
    "write_table",
]
