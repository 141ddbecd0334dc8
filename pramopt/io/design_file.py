"""Designs on disk: ``design.json`` and ``matrix.csv`` (or a structured design's parameters) in a
design folder.

``design.json``
    Everything :func:`load_design` needs to rebuild the :class:`~pramopt.DesignResult`: the
    identifying variables and their categories, the present cells (codes) and counts, the
    matrix (its nonzero entries), the parameters, status and figures, and two SHA-256
    checksums: of the frequency table (:meth:`pramopt.FrequencyTable.checksum`, which ties the
    design to its data) and of the matrix (which detects a file edited by hand); the SHA-256 of
    ``matrix.csv``; and one of the fields that decide a release (status, alpha, Π, the files).
``matrix.csv``
    The matrix in long form: ``from_<var>`` ..., ``to_<var>`` ..., ``probability``, one row per
    nonzero transition.  A replacement or block design keeps its parameters instead
    (``parameters.npz``, ``parameters.csv``: :mod:`pramopt.io.parameters`), so that its folder
    grows with them and not with K^2; its ``matrix.csv`` is written only when asked or small.

Each file is written atomically (:mod:`pramopt.io.atomic`).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._labels import formula_safe_frame
from .._plain import number as _num
from .._plain import plain as _plain
from ..errors import DesignFileError, DesignMismatchError, InvalidParameterError
from ..frequency.table import FrequencyTable, frequency_table, table_from_record
from ..kinds import kind_of, kind_of_format
from ..result import DesignResult, Reduction, Stage, Status, matrix_long
from ..result import entries as _entries
from .atomic import DESIGN_FILE, atomic_write, check_out_file, file_sha256, write_text
from .parameters import (
    MATRIX_CSV_MAX_ENTRIES,
    PARAMETERS_CSV,
    PARAMETERS_FILE,
    STRUCTURED_FORMAT,
    checked_sidecar,
    read_form,
    write_form,
    write_parameters_csv,
)

__all__ = [
    "DESIGN_FILE",
    "MATRIX_FILE",
    "FORMAT",
    "save_design",
    "load_design",
    "matrix_long",
    "table_for_design",
]

#: The matrix in long form, beside ``design.json``; its SHA-256 is in ``design.json``.
MATRIX_FILE = "matrix.csv"

#: Format tag of ``design.json``; bumped on incompatible changes.
FORMAT = "pramopt-design/2"
_FORMAT_1 = "pramopt-design/1"


def matrix_sha256(P) -> str:
    """SHA-256 of a matrix's shape and nonzero entries (row, column, float64 value), row-major."""
    r, c, v = _entries(P)
    h = hashlib.sha256(repr(tuple(int(x) for x in P.shape)).encode())
    # the arrays' buffers themselves (no copy as bytes: a design may have millions of entries)
    for a in (r, c):
        h.update(np.ascontiguousarray(a, dtype="<i8").data)
    h.update(np.ascontiguousarray(v, dtype="<f8").data)
    return h.hexdigest()


def _dense_sha256(shape, r, c, v) -> str:
    """The checksum of format 1 (the dense matrix's bytes), for design files written before.

    The dense rows are hashed in blocks, so no K x K array is made.
    """
    M = sp.csr_array((v, (r, c)), shape=shape)
    h = hashlib.sha256(repr(tuple(shape)).encode())
    step = max(1, (1 << 22) // max(shape[1], 1))
    for s in range(0, shape[0], step):
        h.update(np.ascontiguousarray(M[s : s + step].toarray(), dtype=np.float64).tobytes())
    return h.hexdigest()


#: The fields of ``design.json`` that decide whether a release is safe; ``record_sha256`` covers
#: them, so that editing one (a status, alpha, Π) is detected like an edited matrix.
GUARDED = ("format", "method", "table_checksum", "matrix_sha256", "status", "alpha", "combinations")


def record_sha256(rec: dict) -> str:
    """SHA-256 of the guarded fields of a design record (canonical JSON).

    ``files`` (the checksums of the files written beside ``design.json``) is guarded too when the
    record has it, and so are ``epsilon`` and ``k`` of a design made under them, and the
    recoding (``details["recode"]``) of a design made on recoded data; records written before
    any of these existed keep their checksum.
    """
    keys = GUARDED + (("files",) if "files" in rec else ())
    guarded = {k: rec.get(k) for k in keys}
    params = rec.get("params") or {}
    if params.get("epsilon") is not None or params.get("k") is not None:
        # a release re-checks epsilon and k of a design made under them: they cannot be edited away
        guarded["privacy"] = [params.get("epsilon"), params.get("k")]
    recode = (rec.get("details") or {}).get("recode")
    if recode is not None:
        # a release recodes the data with it before matching them: an edited mapping would
        # release other categories than the design's
        guarded["recode"] = recode
    text = json.dumps(guarded, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def design_record(
    result: DesignResult,
    *,
    kind: str = "design",
    extra: dict | None = None,
    files: dict | None = None,
    matrix_file: str | None = None,
    form_file: str | None = None,
) -> dict:
    """The content of ``design.json`` for a result (plain JSON values); ``files`` maps the names of
    the files written beside it to their SHA-256.  With ``matrix_file`` the matrix's entries are
    in that file beside it (which ``files`` must list), not inline; with ``form_file`` the
    matrix is kept as the result's form's parameters in that file (``pramopt-design/3``)."""
    rec = _record(result, kind, extra, matrix_file, form_file)
    if files:
        rec["files"] = dict(files)
    rec["record_sha256"] = record_sha256(rec)
    return rec


def _record(
    result: DesignResult,
    kind: str,
    extra: dict | None,
    matrix_file: str | None = None,
    form_file: str | None = None,
) -> dict:
    table = result.table
    if form_file is not None:
        matrix: dict = {"shape": list(result.matrix.shape), "form": form_file}
    elif matrix_file is None:
        r, c, v = _entries(result.matrix)
        # repr of a float round-trips exactly through JSON
        matrix = {
            "shape": list(result.matrix.shape),
            "rows": r.tolist(),
            "cols": c.tolist(),
            "values": v.tolist(),
        }
    else:
        matrix = {"shape": list(result.matrix.shape), "file": matrix_file}
    return {
        "format": STRUCTURED_FORMAT if form_file is not None else FORMAT,
        "kind": kind,
        "method": result.method,
        "qi": list(table.qi),
        "categories": [_plain(list(cats)) for cats in table.categories],
        "codes": table.codes.tolist(),
        "counts": table.counts.tolist(),
        "table_checksum": table.checksum(),
        "matrix": matrix,
        "matrix_sha256": matrix_sha256(result.matrix),
        "status": result.status.value,
        "success": bool(result.success),
        "message": result.message,
        "alpha": result.alpha,
        "combinations": [list(cmb) for cmb in result.combinations],
        "params": _plain(result.params),
        "details": _plain(result.details),
        "figures": _plain({**result.figures(), "gamma": result.gamma}),
        "binding": [
            _plain({"combination": b[0], "k0": list(b[1]), "risk": b[2]})
            for b in result.binding_rows
        ],
        "reduction": _plain(result.reduction.as_dict()) if result.reduction is not None else None,
        "solver": result.solver,
        "stages": [
            _plain(
                {
                    "name": s.name,
                    "seconds": s.seconds,
                    "iterations": s.iterations,
                    "detail": s.detail,
                }
            )
            for s in result.stages
        ],
        **({"extra": _plain(extra)} if extra else {}),
    }


def save_design(
    result: DesignResult,
    folder,
    *,
    kind: str = "design",
    extra: dict | None = None,
    overwrite: bool = False,
    matrix_csv: bool | None = None,
) -> Path:
    """Create ``folder`` and write ``design.json`` and ``matrix.csv`` into it (each atomically).

    A design of another kind (:mod:`pramopt.kinds`) is written by its kind, in its format.  A
    design with a form (:attr:`~pramopt.DesignResult.form`: the replacement and block designs)
    is kept as its parameters, ``parameters.npz`` and ``parameters.csv``
    (:mod:`pramopt.io.parameters`): its folder grows with K, not K^2.

    Parameters
    ----------
    result : DesignResult or a result of another kind
    folder : str or Path
        The design folder: created (its parent must exist); an empty folder is written into.
    kind : str
        The ``kind`` written in ``design.json``.
    extra : dict, optional
        More fields of ``design.json``.
    overwrite : bool
        Write into a folder that is not empty, replacing its design files (its other files are
        left as they are); without it such a folder is refused, so that a design that may have
        been published is never replaced unasked.
    matrix_csv : bool, optional
        Write ``matrix.csv`` (True) or not (False).  By default it is written for every design
        kept as entries, and for a design kept as parameters only up to
        ``MATRIX_CSV_MAX_ENTRIES`` entries (its long form then stays a few MB).

    Returns
    -------
    Path
        The ``design.json`` written.

    Raises
    ------
    InvalidParameterError
        When the parent folder does not exist, ``folder`` is a file, or ``folder`` is not empty
        and ``overwrite`` is False.  Nothing is written then.
    """
    folder = Path(folder)
    made = _design_folder(folder, overwrite)
    try:
        other = kind_of(result)
        if other is not None:
            return other.save(result, folder, extra)
        # the files first, so that design.json can carry their checksums (an edited one is
        # detected); the folder was checked above
        form = result.form  # a result keeps a form only when it is exactly its matrix
        if matrix_csv is None:
            matrix_csv = form is None or result.matrix.nnz <= MATRIX_CSV_MAX_ENTRIES
        files = {}
        if matrix_csv:
            m = write_matrix(result.matrix, result.table, folder / MATRIX_FILE, overwrite=True)
            files[MATRIX_FILE] = file_sha256(m)
        sidecar = form_file = None
        if form is not None:
            form_file = PARAMETERS_FILE
            files[form_file] = file_sha256(write_form(form, folder / form_file))
            csv = write_parameters_csv(form, result.table, folder / PARAMETERS_CSV)
            files[PARAMETERS_CSV] = file_sha256(csv)
        elif result.matrix.nnz > INLINE_MAX:
            # millions of entries as JSON lists take gigabytes to write: binary, beside design.json
            sidecar = MATRIX_ENTRIES_FILE
            files[sidecar] = file_sha256(_write_entries(result.matrix, folder / sidecar))
        rec = design_record(
            result, kind=kind, extra=extra, files=files, matrix_file=sidecar, form_file=form_file
        )
        write_text(json.dumps(rec, indent=1, allow_nan=False), folder / DESIGN_FILE)
        for stale in {MATRIX_FILE, MATRIX_ENTRIES_FILE, PARAMETERS_FILE, PARAMETERS_CSV} - set(
            files
        ):
            (folder / stale).unlink(missing_ok=True)  # a replaced design's, not this one's
    except BaseException:
        if made:  # a folder this call created holds no design: leave nothing behind
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder / DESIGN_FILE


def _design_folder(folder: Path, overwrite: bool) -> bool:
    """Check (and create) the folder :func:`save_design` writes into; True when it created it."""
    where = "The 'folder' parameter of save_design must be"
    if folder.is_dir():
        if not overwrite and any(folder.iterdir()):
            raise InvalidParameterError(
                f"Refusing to write a design into {str(folder)!r}: the folder exists and is not "
                "empty. Give overwrite=True to save_design to replace its design files, or "
                "another folder (it is created)."
            )
        return False
    if folder.exists() or folder.is_symlink():
        raise InvalidParameterError(f"{where} a folder; got {str(folder)!r} (a file).")
    parent = folder.parent if str(folder.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidParameterError(
            f"{where} a folder in an existing folder; got {str(folder)!r} (the folder "
            f"{str(parent)!r} does not exist)."
        )
    try:
        folder.mkdir()
    except FileExistsError:  # made meanwhile by someone else: check it as one found
        return _design_folder(folder, overwrite)
    except OSError as e:
        raise InvalidParameterError(
            f"Cannot create the design folder {str(folder)!r}: {e.strerror or type(e).__name__}."
        ) from None
    return True


#: Entries of P written to matrix.csv at a time: a large design has millions, whose long form and
#: CSV text in one piece would make the save slow.
MATRIX_CHUNK = 500_000


#: Above this many entries the matrix goes to ``matrix.npz`` beside ``design.json`` (rows, columns
#: and values as binary arrays, checksummed in ``files``) instead of inline: inline lists of
#: millions of entries multiply the save's memory.
INLINE_MAX = 1_000_000
MATRIX_ENTRIES_FILE = "matrix.npz"


def _write_entries(P, path) -> Path:
    r, c, v = _entries(P)
    p = Path(path)  # beside matrix.csv, whose folder was checked
    with atomic_write(p) as fh:
        np.savez(fh, rows=r, cols=c, values=v)
    return p


def _read_entries(m: dict, p: Path, rec: dict):
    """Rows, columns and values of a matrix kept beside ``design.json`` (``m["file"]``), after its
    checksum (in the guarded ``files``) is checked: without the file there is no matrix."""
    name = str(m["file"])
    f = checked_sidecar(name, p, rec)
    try:
        with np.load(f, allow_pickle=False) as z:
            return (
                np.asarray(z["rows"], dtype=np.int64),
                np.asarray(z["cols"], dtype=np.int64),
                np.asarray(z["values"], dtype=float),
            )
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise DesignFileError(
            f"The design {str(p)!r} is malformed: cannot read {name}: {e}"
        ) from None


def write_matrix(P, table: FrequencyTable, path, *, overwrite: bool = False) -> Path:
    """``matrix.csv``: the long form of ``P`` (:func:`pramopt.result.matrix_long`), written
    atomically in pieces of ``MATRIX_CHUNK`` entries (the same bytes as in one piece), its
    labels safe to open in a spreadsheet (:func:`pramopt._labels.formula_safe`); a file already
    at ``path`` is replaced only with ``overwrite=True``."""
    p = check_out_file(path, force=overwrite, writer="write_matrix")
    n = P.nnz if sp.issparse(P) else np.count_nonzero(np.asarray(P))
    csr = sp.csr_matrix(P)
    with atomic_write(p) as fh:
        # whole rows at a time, so that every piece holds the entries of its rows in order
        step = max(1, int(MATRIX_CHUNK * csr.shape[0] / max(n, 1)))
        for s in range(0, max(csr.shape[0], 1), step):
            part = formula_safe_frame(matrix_long(csr[s : s + step], table, row_offset=s))
            fh.write(part.to_csv(index=False, header=s == 0).encode("utf-8"))
    return p


def _design_path(path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / DESIGN_FILE
    if not p.is_file():
        raise InvalidParameterError(
            f"No design at {str(path)!r}: expected a design folder or a {DESIGN_FILE}."
        )
    return p


def _no_constant(name: str):
    # pramopt writes design.json with allow_nan=False: a NaN or Infinity was put there by hand
    raise ValueError(f"it holds {name}, which pramopt never writes")


def load_design(path) -> DesignResult:
    """Rebuild the :class:`~pramopt.DesignResult` saved by :func:`save_design`.

    Files of the previous format (``pramopt-design/1``, a checksum of the dense matrix) are
    read too.

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
        rec = json.loads(p.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise DesignFileError(
            f"The design {str(p)!r} is not a complete design file (cut short or edited by hand?): "
            f"it stops making sense at line {e.lineno}. Write it again with pramopt design."
        ) from None
    except (OSError, ValueError) as e:
        raise DesignFileError(f"Cannot read the design {str(p)!r}: {e}") from None
    kind = kind_of_format(rec.get("format")) if isinstance(rec, dict) else None
    if kind is not None:  # a design of another kind (pramopt.kinds), e.g. households
        return kind.load(rec, p)
    if not isinstance(rec, dict) or rec.get("format") not in (FORMAT, _FORMAT_1, STRUCTURED_FORMAT):
        raise DesignFileError(f"{str(p)!r} is not a pramopt design file (format {FORMAT!r}).")
    return design_from_record(rec, p)


def design_from_record(rec: dict, p) -> DesignResult:
    """The :class:`~pramopt.DesignResult` of a design record, its checksums checked."""
    try:
        qi = tuple(rec["qi"])
        table = table_from_record(qi, rec)
        m = rec["matrix"]
        shape = tuple(int(x) for x in m["shape"])
        inline = "file" not in m and "form" not in m
        if inline:
            r = np.asarray(m["rows"], dtype=np.int64)
            c = np.asarray(m["cols"], dtype=np.int64)
            v = np.asarray(m["values"], dtype=float)
            P = sp.csr_array((v, (r, c)), shape=shape)
        fig = rec["figures"]
        status = Status(rec["status"])
        binding = [
            (b["combination"], tuple(b["k0"]), float(b["risk"])) for b in rec.get("binding") or []
        ]
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise DesignFileError(f"The design {str(p)!r} is malformed: {e!r}") from None
    form = None
    if "form" in m:  # parameters beside design.json: the matrix is made from them
        form = read_form(m, p, rec)
        if form.n_cells != shape[0] or shape[0] != shape[1]:
            raise DesignFileError(
                f"The design {str(p)!r} is malformed: {form.n_cells} cells of parameters for a "
                f"matrix {shape}."
            )
        P = sp.csr_array(form.matrix())
    elif not inline:  # beside design.json (its own errors say what is wrong with it)
        r, c, v = _read_entries(m, p, rec)
        try:
            P = sp.csr_array((v, (r, c)), shape=shape)
        except (TypeError, ValueError, IndexError) as e:
            raise DesignFileError(f"The design {str(p)!r} is malformed: {e!r}") from None
    if table.checksum() != rec.get("table_checksum"):
        raise DesignFileError(
            f"The design {str(p)!r} was modified: its cells or counts do not match their checksum."
        )
    current = rec["format"] in (FORMAT, STRUCTURED_FORMAT)
    # a form read back makes the very matrix it was saved with: an edited one does not
    expected = matrix_sha256(P) if current else _dense_sha256(shape, r, c, v)
    if expected != rec.get("matrix_sha256"):
        raise DesignFileError(
            f"The design {str(p)!r} was modified: its matrix does not match its checksum."
        )
    if current and record_sha256(rec) != rec.get("record_sha256"):
        raise DesignFileError(
            f"The design {str(p)!r} was modified: its status, alpha, combinations or recoding do "
            "not match their checksum."
        )
    for name, digest in (rec.get("files") or {}).items():
        # a file beside design.json that is not as written (design.json alone is authoritative,
        # so a missing one is no risk; an edited one would mislead whoever reads it)
        f = p.parent / str(name)
        if f.is_file() and file_sha256(f) != digest:
            raise DesignFileError(
                f"The design {str(p)!r} was modified: {name} does not match its checksum."
            )
    if P.shape != (table.n_cells, table.n_cells):
        raise DesignFileError(
            f"The design {str(p)!r} is malformed: matrix {P.shape} for {table.n_cells} cells."
        )
    check_guarantee(rec, qi, p)
    _check_recoding(rec, qi, p)
    red = rec.get("reduction")
    return DesignResult(
        matrix=P,
        status=status,
        loss=_num(fig["loss"]),
        expected_changes=_num(fig["expected_changes"]),
        max_risk=_num(fig["max_risk"]),
        min_diagonal=_num(fig["min_diagonal"]),
        gamma=None if fig.get("gamma") is None else float(fig["gamma"]),
        binding_rows=tuple(binding),
        reduction=Reduction.from_dict(red) if red else None,
        solver=rec.get("solver"),
        stages=tuple(
            Stage(s["name"], float(s["seconds"]), int(s["iterations"]), s.get("detail", ""))
            for s in rec.get("stages", [])
        ),
        condition_number=_num(fig["condition_number"]),
        message=rec.get("message", ""),
        alpha=float(rec["alpha"]),
        qi=qi,
        combinations=tuple(tuple(c) for c in rec["combinations"]),
        table=table,
        method=rec.get("method", "optimal"),
        params=dict(rec.get("params") or {}),
        details=dict(rec.get("details") or {}),
        form=form,
    )


def check_guarantee(rec: dict, qi, p) -> None:
    """Refuse a record whose α is not in (0, 1) or whose Π is empty or names other variables:
    no design pramopt makes has them, and a release checks C1 at the file's own α and Π."""
    alpha = rec.get("alpha")
    given = rec.get("params")
    params: dict = given if isinstance(given, dict) else {}
    # a design under epsilon or k alone (no C1) states alpha 1: its guarantee is those, which a
    # release checks again
    eps, k = params.get("epsilon"), params.get("k")
    private = params.get("alpha", 0) is None and (
        (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0)
        or (isinstance(k, (int, float)) and math.isfinite(k) and k > 1)  # k <= 1 holds always
    )
    if not (
        isinstance(alpha, (int, float))
        and not isinstance(alpha, bool)
        and (0.0 < alpha < 1.0 or (private and alpha == 1.0))
    ):
        raise DesignFileError(
            f"The design {str(p)!r} states alpha {alpha!r}; a risk bound must be in (0, 1) "
            "(1 only for a design under epsilon, or k above 1, alone). "
            "Refusing the file (was it edited?)."
        )
    combos = rec.get("combinations")
    if (
        not isinstance(combos, list)
        or not combos
        or not all(isinstance(c, list) and c and all(v in qi for v in c) for c in combos)
    ):
        raise DesignFileError(
            f"The design {str(p)!r} states the combinations {combos!r}; they must be a non-empty "
            f"list of non-empty subsets of {list(qi)!r}. Refusing the file (was it edited?)."
        )


def _check_recoding(rec: dict, qi, p) -> None:
    """Refuse a record whose recoding (``details["recode"]``) is not one, or recodes a variable
    the design does not have: a release would apply it."""
    recode = (rec.get("details") or {}).get("recode")
    if recode is None:
        return
    from ..recode import Recoding

    try:
        r = Recoding.from_dict(recode, f"the recoding of {str(p)!r}")
    except InvalidParameterError as e:
        raise DesignFileError(f"The design {str(p)!r} is malformed: {e}") from None
    other = [q for q in r.variables if q not in qi]
    if other:
        raise DesignFileError(
            f"The design {str(p)!r} recodes {other!r}, which are not among its identifying "
            f"variables {list(qi)!r}. Refusing the file (was it edited?)."
        )


def table_for_design(df: pd.DataFrame, result: DesignResult) -> FrequencyTable:
    """Frequency table of ``df`` coded with the design's categories (for the checksum test).

    Raises
    ------
    DesignMismatchError
        If ``df`` lacks an identifying variable or has a value the design does not know.
    """
    domains = {q: list(c) for q, c in zip(result.table.qi, result.table.categories)}
    try:
        return frequency_table(df, list(result.table.qi), domains=domains, owner="release")
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
