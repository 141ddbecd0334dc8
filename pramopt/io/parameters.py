"""A structured design's parameters beside ``design.json``, in place of its K x K entries.

A replacement or block design is ``diag(retention) + rate weights^T`` within each pool
(:class:`pramopt.structured.ReplacementForm`): 4 K numbers, where its matrix has up to K^2
entries (3,486 cells: 12 million entries, a 685 MB ``matrix.csv``).  Its folder holds

``parameters.npz``
    The four arrays as float64 and int64, read back exactly: :func:`load_design` rebuilds the
    matrix from them, and the matrix's own checksum in ``design.json`` (``matrix_sha256``) must
    match, so an edited parameter is refused even where the file's checksum was edited too.
``parameters.csv``
    The same for people: one row per cell, its values, its pool, the probability that a record
    keeps it outright, the probability that a record of it is drawn again from its pool, and its
    share of its pool's replacement draws.

``matrix.csv`` (the long form) is written for such a design only when asked or small
(:data:`MATRIX_CSV_MAX_ENTRIES`).  Both files are checksummed in ``design.json``'s guarded
``files``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from .._labels import formula_safe_frame
from ..errors import DesignFileError
from ..frequency.table import FrequencyTable
from ..structured import ReplacementForm
from .atomic import atomic_write, file_sha256

__all__ = [
    "PARAMETERS_FILE",
    "PARAMETERS_CSV",
    "STRUCTURED_FORMAT",
    "MATRIX_CSV_MAX_ENTRIES",
    "write_form",
    "read_form",
    "write_parameters_csv",
    "checked_sidecar",
]

PARAMETERS_FILE = "parameters.npz"
PARAMETERS_CSV = "parameters.csv"
#: Format tag of a ``design.json`` whose matrix is kept as parameters (a reader of
#: ``pramopt-design/2`` refuses it rather than finding no entries).
STRUCTURED_FORMAT = "pramopt-design/3"
#: A structured design's ``matrix.csv`` is written without being asked only up to this many
#: entries (a few MB): beyond, its size would grow with K^2 rather than with the parameters.
MATRIX_CSV_MAX_ENTRIES = 100_000

_ARRAYS = ("retention", "rate", "weights", "pools")


def write_form(form: ReplacementForm, path) -> Path:
    """``parameters.npz``: the form's four arrays, written atomically."""
    p = Path(path)
    with atomic_write(p) as fh:
        np.savez(fh, **{name: getattr(form, name) for name in _ARRAYS})
    return p


def checked_sidecar(name: str, p: Path, rec: dict) -> Path:
    """The file ``name`` beside the design ``p``, once its checksum in the record's (guarded)
    ``files`` is checked: without it, or edited, there is no design."""
    f = p.parent / name
    digest = (rec.get("files") or {}).get(name)
    if digest is None or "/" in name or "\\" in name:
        raise DesignFileError(
            f"The design {str(p)!r} is malformed: its matrix file {name!r} is not among its files."
        )
    if not f.is_file():
        raise DesignFileError(
            f"The design {str(p)!r} keeps its matrix in {name}, which is missing beside it."
        )
    if file_sha256(f) != digest:
        raise DesignFileError(
            f"The design {str(p)!r} was modified: {name} does not match its checksum."
        )
    return f


def read_form(m: dict, p: Path, rec: dict) -> ReplacementForm:
    """The form of the design ``p`` from the file its record names (``m["form"]``), checked
    against its checksum; its values are checked by :class:`ReplacementForm`."""
    name = str(m["form"])
    f = checked_sidecar(name, p, rec)
    try:
        with np.load(f, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in _ARRAYS}
        if arrays["pools"].dtype.kind not in "iu":
            raise ValueError("pools are not integers")
        return ReplacementForm(**arrays)
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as e:
        raise DesignFileError(
            f"The design {str(p)!r} is malformed: cannot read {name}: {e}"
        ) from None


def write_parameters_csv(form: ReplacementForm, table: FrequencyTable, path) -> Path:
    """``parameters.csv``: per cell (its values, labels safe in a spreadsheet), ``pool``,
    ``keep`` (the record keeps its cell outright), ``redraw`` (it is drawn again from its pool,
    possibly its own cell) and ``share`` (the cell's share of its pool's draws)."""
    total = np.bincount(form.pools, weights=form.weights)[form.pools]
    frame = table.cells().reset_index(drop=True)
    frame["pool"] = form.pools
    frame["keep"] = form.retention
    frame["redraw"] = form.rate * total
    frame["share"] = np.where(total > 0, form.weights / np.where(total > 0, total, 1.0), 0.0)
    p = Path(path)
    with atomic_write(p) as fh:
        fh.write(formula_safe_frame(pd.DataFrame(frame)).to_csv(index=False).encode("utf-8"))
    return p
