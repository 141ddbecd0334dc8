"""Files in and out: microdata (CSV, Parquet), designs on disk, matrices made elsewhere.

Every file is written to a temporary name in its target folder and renamed with
:func:`os.replace`, so a reader never sees half a file and an interrupted run leaves the old
file (or nothing) behind.  A design folder is built in a temporary folder next to the target
and renamed in one step.

A design folder holds

``design.json``
    Everything :func:`load_design` needs to rebuild the :class:`~pramopt.DesignResult`: the
    identifying variables and their categories, the present cells (codes) and counts, the
    matrix (its nonzero entries), the parameters, status and figures, and two SHA-256
    checksums: of the frequency table (:meth:`pramopt.FrequencyTable.checksum`, which ties the
    design to its data) and of the matrix (which detects a file edited by hand).
``matrix.csv``
    The matrix in long form: ``from_<var>`` ..., ``to_<var>`` ..., ``probability``, one row per
    nonzero transition.
``report.html``, ``report.md``
    The report (:mod:`pramopt.report`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ._validation import InvalidParameterError, PramoptError
from .data import FrequencyTable, frequency_table
from .result import DesignResult, Stage, Status

__all__ = [
    "DESIGN_FILE", "FORMAT", "read_table", "write_table", "atomic_write", "atomic_dir",
    "save_design", "load_design", "read_matrix", "matrix_long", "table_for_design",
    "DesignFileError",
]

#: Name of the machine-readable design file inside a design folder.
DESIGN_FILE = "design.json"
#: Format tag of ``design.json``; bumped on incompatible changes.
FORMAT = "pramopt-design/1"

_PARQUET = (".parquet", ".pq")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class DesignFileError(PramoptError, ValueError):
    """A design file that is missing, malformed or was edited after it was written."""


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def read_table(path) -> pd.DataFrame:
    """Read microdata from ``.csv`` or ``.parquet``/``.pq`` (by extension).

    Raises
    ------
    InvalidParameterError
        For a missing file, an unknown extension or a file pandas cannot parse.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".csv",) + _PARQUET:
        raise InvalidParameterError(f"Cannot read {str(p)!r}: the file name must end in .csv, .parquet or .pq.")
    if not p.is_file():
        raise InvalidParameterError(f"Cannot read {str(p)!r}: no such file.")
    try:
        return pd.read_parquet(p) if suffix in _PARQUET else pd.read_csv(p)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise InvalidParameterError(f"Cannot read {str(p)!r}: {e}") from None


def _check_out(path, kinds=(".csv",) + _PARQUET) -> Path:
    p = Path(path)
    if p.suffix.lower() not in kinds:
        raise InvalidParameterError(
            f"Cannot write {str(p)!r}: the file name must end in {', '.join(kinds)}.")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InvalidParameterError(f"Cannot write {str(p)!r}: the folder {str(folder)!r} does not exist.")
    if p.is_dir():
        raise InvalidParameterError(f"Cannot write {str(p)!r}: it is a folder.")
    return p


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Open a temporary file next to ``path``; rename it to ``path`` only if the block succeeds.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path``
    is left as it was.
    """
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make outputs private
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_table(df: pd.DataFrame, path) -> Path:
    """Write ``df`` as CSV or Parquet (by extension), atomically."""
    p = _check_out(path)
    with atomic_write(p) as fh:
        if p.suffix.lower() in _PARQUET:
            df.to_parquet(fh, index=False)
        else:
            fh.write(df.to_csv(index=False).encode())
    return p


def write_text(text: str, path) -> Path:
    """Write a text file (UTF-8) atomically."""
    with atomic_write(path) as fh:
        fh.write(text.encode("utf-8"))
    return Path(path)


@contextlib.contextmanager
def atomic_dir(path):
    """Build a folder in a temporary folder next to ``path``; put it in place at the end.

    Yields the temporary folder.  An existing ``path`` is replaced only if it is empty or holds
    a design (a ``design.json``), so that a user's other folder is never wiped; the old folder
    is moved aside first and deleted once the new one is in place.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidParameterError(f"Cannot write {str(p)!r}: the folder {str(parent)!r} does not exist.")
    if p.exists():
        if not p.is_dir():
            raise InvalidParameterError(f"Cannot write the folder {str(p)!r}: a file of that name exists.")
        if any(p.iterdir()) and not (p / DESIGN_FILE).is_file():
            raise InvalidParameterError(
                f"Refusing to replace {str(p)!r}: it is not empty and holds no {DESIGN_FILE}.")
    tmp = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent))
    old = None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        if p.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".old", dir=parent))
            os.rmdir(old)
            os.replace(p, old)
        os.replace(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not p.exists():
            os.replace(old, p)  # put the previous design back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Designs on disk
# ---------------------------------------------------------------------------------------------

def _plain(x):
    """JSON-safe Python value (numpy scalars unwrapped, NaN -> None, inf -> 'inf')."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_plain(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    if x is pd.NA or x is pd.NaT:
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def _num(x) -> float:
    if x is None:
        return math.nan
    if isinstance(x, str):
        return float(x)
    return float(x)


def matrix_sha256(P: np.ndarray) -> str:
    """SHA-256 of a matrix's shape and float64 bytes."""
    A = np.ascontiguousarray(P, dtype=np.float64)
    h = hashlib.sha256(repr(A.shape).encode())
    h.update(A.tobytes())
    return h.hexdigest()


def matrix_long(P: np.ndarray, cells: pd.DataFrame) -> pd.DataFrame:
    """Long form of ``P``: ``from_<var>``, ``to_<var>``, ``probability`` for each nonzero entry."""
    r, c = np.nonzero(P)
    left = cells.iloc[r].reset_index(drop=True).add_prefix("from_")
    right = cells.iloc[c].reset_index(drop=True).add_prefix("to_")
    return pd.concat([left, right, pd.Series(P[r, c], name="probability")], axis=1)


def design_record(result: DesignResult, *, kind: str = "design", extra: dict | None = None) -> dict:
    """The content of ``design.json`` for a result (plain JSON values)."""
    table = result.table
    if table is None:
        raise InvalidParameterError("The result carries no frequency table; it cannot be saved.")
    P = np.asarray(result.matrix, dtype=float)
    r, c = np.nonzero(P)
    return {
        "format": FORMAT,
        "kind": kind,
        "qi": list(table.qi),
        "categories": [_plain(list(cats)) for cats in table.categories],
        "codes": table.codes.tolist(),
        "counts": table.counts.tolist(),
        "table_checksum": table.checksum(),
        "matrix": {"shape": list(P.shape), "rows": r.tolist(), "cols": c.tolist(),
                   # repr of a float round-trips exactly through JSON
                   "values": P[r, c].tolist()},
        "matrix_sha256": matrix_sha256(P),
        "status": result.status.value,
        "success": bool(result.success),
        "message": result.message,
        "alpha": result.alpha,
        "combinations": [list(cmb) for cmb in result.combinations],
        "params": _plain(result.params),
        "figures": _plain({
            "max_risk": result.max_risk, "loss": result.loss,
            "expected_changes": result.expected_changes, "min_diagonal": result.min_diagonal,
            "gamma": result.gamma, "condition_number": result.condition_number,
            "n": result.n, "cells": len(result.counts),
        }),
        "binding": _plain(result.binding.assign(k0=result.binding["k0"].map(list)).to_dict("records")
                          if len(result.binding) else []),
        "reduction": _plain(result.reduction),
        "solver": result.solver,
        "stages": [_plain({"name": s.name, "seconds": s.seconds, "iterations": s.iterations,
                           "detail": s.detail}) for s in result.stages],
        **({"extra": _plain(extra)} if extra else {}),
    }


def save_design(result: DesignResult, folder, *, kind: str = "design", extra: dict | None = None) -> Path:
    """Write ``design.json`` and ``matrix.csv`` into an existing ``folder`` (each atomically)."""
    folder = Path(folder)
    rec = design_record(result, kind=kind, extra=extra)
    write_text(json.dumps(rec, indent=1, allow_nan=False), folder / DESIGN_FILE)
    write_table(matrix_long(np.asarray(result.matrix, dtype=float), result.cells), folder / "matrix.csv")
    return folder / DESIGN_FILE


def _design_path(path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / DESIGN_FILE
    if not p.is_file():
        raise InvalidParameterError(f"No design at {str(path)!r}: expected a design folder or a {DESIGN_FILE}.")
    return p


def load_design(path) -> DesignResult:
    """Rebuild the :class:`~pramopt.DesignResult` saved by :func:`save_design`.

    Parameters
    ----------
    path : str or Path
        A design folder or its ``design.json``.

    Raises
    ------
    DesignFileError
        If the file is malformed, or its frequency table or matrix no longer match the
        checksums written with them (the file was edited).
    """
    p = _design_path(path)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DesignFileError(f"Cannot read the design {str(p)!r}: {e}") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise DesignFileError(f"{str(p)!r} is not a pramopt design file (format {FORMAT!r}).")
    try:
        qi = tuple(rec["qi"])
        cats = tuple(pd.Index([np.nan if v is None else v for v in c]) for c in rec["categories"])
        codes = np.asarray(rec["codes"], dtype=np.int64).reshape(-1, len(qi))
        counts = np.asarray(rec["counts"], dtype=np.int64)
        table = FrequencyTable(qi=qi, categories=cats, codes=codes, counts=counts)
        m = rec["matrix"]
        P = np.zeros(tuple(m["shape"]))
        P[np.asarray(m["rows"], dtype=np.int64), np.asarray(m["cols"], dtype=np.int64)] = m["values"]
        fig = rec["figures"]
        status = Status(rec["status"])
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise DesignFileError(f"The design {str(p)!r} is malformed: {e!r}") from None
    if table.checksum() != rec.get("table_checksum"):
        raise DesignFileError(
            f"The design {str(p)!r} was modified: its cells or counts do not match their checksum.")
    if matrix_sha256(P) != rec.get("matrix_sha256"):
        raise DesignFileError(f"The design {str(p)!r} was modified: its matrix does not match its checksum.")
    if P.shape != (table.n_cells, table.n_cells):
        raise DesignFileError(f"The design {str(p)!r} is malformed: matrix {P.shape} for {table.n_cells} cells.")
    binding = pd.DataFrame(rec.get("binding") or [], columns=["combination", "k0", "risk"])
    binding["k0"] = binding["k0"].map(tuple)
    return DesignResult(
        matrix=P, cells=table.cells(), counts=counts.copy(), status=status,
        loss=_num(fig["loss"]), expected_changes=_num(fig["expected_changes"]),
        max_risk=_num(fig["max_risk"]), min_diagonal=_num(fig["min_diagonal"]),
        gamma=None if fig.get("gamma") is None else float(fig["gamma"]),
        binding=binding, reduction=dict(rec.get("reduction") or {}), solver=rec.get("solver"),
        stages=tuple(Stage(s["name"], float(s["seconds"]), int(s["iterations"]), s.get("detail", ""))
                     for s in rec.get("stages", [])),
        condition_number=_num(fig["condition_number"]), message=rec.get("message", ""),
        alpha=float(rec["alpha"]), qi=qi, combinations=tuple(tuple(c) for c in rec["combinations"]),
        params=dict(rec.get("params") or {}), table=table)


def table_for_design(df: pd.DataFrame, result: DesignResult) -> FrequencyTable:
    """Frequency table of ``df`` coded with the design's categories (for the checksum test).

    Raises
    ------
    DesignMismatchError
        If ``df`` lacks an identifying variable or has a value the design does not know.
    """
    from .release import DesignMismatchError

    domains = {q: list(c) for q, c in zip(result.table.qi, result.table.categories)}
    try:
        return frequency_table(df, list(result.table.qi), domains=domains, owner="release")
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None


# ---------------------------------------------------------------------------------------------
# Matrices made elsewhere
# ---------------------------------------------------------------------------------------------

def _coerce(col: pd.Series, like: pd.Series) -> pd.Series:
    """Give labels read from a matrix file the data column's dtype where that is lossless."""
    try:
        out = col.astype(like.dtype)
    except (TypeError, ValueError):
        return col
    return out if (out.astype(str) == col.astype(str)).all() else col


def read_matrix(path, qi, data: pd.DataFrame | None = None) -> tuple[np.ndarray, pd.DataFrame]:
    """Read a transition matrix and its cell labels.

    Accepted forms:

    * a design folder or ``design.json`` written by pramopt;
    * a **long** CSV/Parquet with ``from_<var>`` and ``to_<var>`` columns for every identifying
      variable and a ``probability`` column (missing pairs are 0);
    * a **square** CSV/Parquet whose first columns are the identifying variables (the row
      cell) and whose other K columns are the probabilities of moving into the K cells, in the
      same order as the rows (their headers are not used).

    Parameters
    ----------
    path : str or Path
    qi : list of str
        Identifying variables.
    data : pandas.DataFrame, optional
        The microdata; labels are converted to its columns' dtypes where that is lossless.

    Returns
    -------
    (ndarray of shape (K, K), DataFrame of the K cells)
    """
    qi = list(qi)
    p = Path(path)
    if p.is_dir() or p.name == DESIGN_FILE:
        res = load_design(p)
        if list(res.qi) != qi:
            raise InvalidParameterError(
                f"The design {str(path)!r} is for identifying variables {list(res.qi)!r}, not {qi!r}.")
        return np.asarray(res.matrix), res.cells
    df = read_table(p)
    fcols, tcols = [f"from_{q}" for q in qi], [f"to_{q}" for q in qi]
    if all(c in df.columns for c in fcols + tcols) and "probability" in df.columns:
        frm = df[fcols].set_axis(qi, axis=1)
        to = df[tcols].set_axis(qi, axis=1)
        if data is not None:
            for q in qi:
                frm[q], to[q] = _coerce(frm[q], data[q]), _coerce(to[q], data[q])
        both = pd.concat([frm, to], ignore_index=True)
        key = pd.MultiIndex.from_frame(both.astype(object))
        cells_idx = key.unique()
        pos = cells_idx.get_indexer(key)
        n = len(df)
        K = len(cells_idx)
        P = np.zeros((K, K))
        np.add.at(P, (pos[:n], pos[n:]), df["probability"].to_numpy(dtype=float))
        cells = both.drop_duplicates().reset_index(drop=True)
        cells = cells.iloc[pd.MultiIndex.from_frame(cells.astype(object)).get_indexer(cells_idx)].reset_index(drop=True)
        return P, cells
    missing = [q for q in qi if q not in df.columns]
    if missing:
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: expected from_/to_ columns and 'probability' (long form) "
            f"or the identifying variables {qi!r} followed by K probability columns (square form); "
            f"{missing!r} missing.")
    cells = df[qi].reset_index(drop=True)
    probs = df.drop(columns=qi)
    if probs.shape[1] != len(df):
        raise InvalidParameterError(
            f"Cannot read the matrix {str(p)!r}: a square matrix needs as many probability columns as rows; "
            f"got {probs.shape[1]} columns for {len(df)} rows.")
    try:
        P = probs.to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"Cannot read the matrix {str(p)!r}: non-numeric probabilities.") from None
    if data is not None:
        for q in qi:
            cells[q] = _coerce(cells[q], data[q])
    return P, cells
