"""Per-variable designs on disk: ``design.json`` and one ``matrix_<variable>.csv`` per variable.

``design.json`` (format ``pramopt-per-variable/1``) holds the frequency table (with its
checksum), every matrix with its categories, Π, α, the figures and parameters, and a checksum over
all of it; a reader that knows only record-level designs refuses the format.  Each
``matrix_<variable>.csv`` is the variable's square matrix in R's ``write.csv`` layout (an empty
first header over the row labels, then one column per released category), which
``pramopt assess --matrix VARIABLE=FILE`` and R's ``read.csv(..., row.names = 1)`` read back.
A design with ``fixed`` strata writes one ``matrix_<variable>_<stratum>.csv`` per variable and
stratum (every one, the fixed variables' the identity), which ``assess --matrix`` reads for the
records of that stratum.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .._labels import formula_safe
from .._plain import plain
from ..errors import DesignFileError
from ..frequency.table import is_missing, table_from_record
from ..io.atomic import DESIGN_FILE, write_text
from ..result import Stage, Status
from .result import PerVariableDesign, figures_of, labelled, stratum_of

__all__ = ["FORMAT", "save_per_variable", "load_per_variable", "matrix_file", "r_matrix_csv"]

FORMAT = "pramopt-per-variable/1"


def matrix_file(variable: str, stratum: str | None = None) -> str:
    """The file name of a variable's matrix, ``matrix_<variable>.csv``, or with ``fixed``
    strata ``matrix_<variable>_<stratum>.csv`` (``sex=f, region=north`` as
    ``sex_f_region_north``); characters other than letters, digits, ``.``, ``-`` and ``_``
    replaced by ``_``."""
    name = str(variable) if stratum is None else f"{variable}_{stratum.replace(', ', '_')}"
    return f"matrix_{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.csv"


def _files(result: PerVariableDesign) -> dict:
    """File name -> labelled matrix, every stratum's with ``fixed``."""
    if not result.strata:
        return {matrix_file(q): result.variable_matrices[q] for q in result.qi}
    return {matrix_file(q, label): m[q] for label, m in result.strata.items() for q in result.qi}


def _r_text(label) -> str:
    """A label as R's write.csv writes it: NA for a missing value, else quoted text."""
    if is_missing(label):
        return "NA"
    text = str(formula_safe(label if isinstance(label, str) else str(label)))
    return '"' + text.replace('"', '""') + '"'


def r_matrix_csv(M: pd.DataFrame) -> str:
    """``M`` as R's ``write.csv(M)`` writes a matrix with dimnames (numbers to full precision)."""
    lines = [",".join(['""'] + [_r_text(c) for c in M.columns])]
    for label, row in zip(M.index, M.to_numpy(dtype=float)):
        lines.append(",".join([_r_text(label)] + [repr(float(x)) for x in row]))
    return "\r\n".join(lines) + "\r\n"  # R writes CRLF on Windows only; either is read back


def _digest(rec: dict) -> str:
    body = {k: v for k, v in rec.items() if k != "record_sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    ).hexdigest()


def _json_safe(x):
    """NaN and infinite figures as None (JSON has neither)."""
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def per_variable_record(result: PerVariableDesign, extra: dict | None = None) -> dict:
    """The content of ``design.json``."""
    t = result.table
    rec = {
        "format": FORMAT,
        "kind": "design",
        "method": result.method,
        "qi": list(t.qi),
        "table": {
            "categories": [
                plain([None if is_missing(c) else c for c in cats]) for cats in t.categories
            ],
            "codes": np.asarray(t.codes).tolist(),
            "counts": np.asarray(t.counts).tolist(),
            "checksum": t.checksum(),
        },
        "matrices": {
            q: np.asarray(M.to_numpy(dtype=float)).tolist()
            for q, M in result.variable_matrices.items()
        },
        "files": (
            {lab: {q: matrix_file(q, lab) for q in t.qi} for lab in result.strata}
            if result.strata
            else {q: matrix_file(q) for q in t.qi}
        ),
        "fixed": list(result.fixed),
        "strata": {
            label: {q: np.asarray(M.to_numpy(dtype=float)).tolist() for q, M in m.items()}
            for label, m in result.strata.items()
        },
        "perturbed": list(result.perturbed),
        "combinations": [list(c) for c in result.combinations],
        "alpha": result.alpha,
        "status": result.status.value,
        "success": bool(result.success),
        "message": result.message,
        "max_risk": result.max_risk,
        "loss": result.loss,
        "expected_changes": result.expected_changes,
        "changed_variables": result.changed_variables,
        "epsilon": result.epsilon,
        "figures": figures_of(result),
        "params": plain(result.params),
        "details": plain(result.details),
        "stages": [
            plain(
                {
                    "name": s.name,
                    "seconds": s.seconds,
                    "iterations": s.iterations,
                    "detail": s.detail,
                }
            )
            for s in result.stages
        ],
        **({"extra": plain(extra)} if extra else {}),
    }
    rec = _json_safe(rec)
    rec["record_sha256"] = _digest(rec)
    return rec


def save_per_variable(result: PerVariableDesign, folder, extra: dict | None = None) -> Path:
    """Write ``design.json`` and one ``matrix_<variable>.csv`` per identifying variable."""
    folder = Path(folder)
    files = _files(result)
    if len(files) != len(result.qi) * max(1, len(result.strata)):
        raise DesignFileError(
            f"Two identifying variables {list(result.qi)!r} (or strata) give the same matrix "
            "file name."
        )
    for name, M in files.items():
        write_text(r_matrix_csv(M), folder / name)
    write_text(
        json.dumps(per_variable_record(result, extra), indent=1, allow_nan=False),
        folder / DESIGN_FILE,
    )
    return folder / DESIGN_FILE


def _number(x) -> float:
    return float("nan") if x is None else float(x)


def load_per_variable(rec: dict, path) -> PerVariableDesign:
    """Rebuild a :class:`PerVariableDesign` from the content of its ``design.json``."""
    if _digest(rec) != rec.get("record_sha256"):
        raise DesignFileError(
            f"The design {str(path)!r} was modified: it does not match its checksum."
        )
    try:
        qi = tuple(rec["qi"])
        tr = rec["table"]
        table = table_from_record(qi, tr)
        if table.checksum() != tr["checksum"]:
            raise DesignFileError(
                f"The design {str(path)!r} has a table that does not match its checksum."
            )
        fixed = tuple(rec.get("fixed", ()))
        strata = {
            label: {q: labelled(table, v, np.asarray(m[q], dtype=float)) for v, q in enumerate(qi)}
            for label, m in rec.get("strata", {}).items()
        }
        if fixed and list(strata) != stratum_of(table, fixed)[0]:
            raise DesignFileError(
                f"The design {str(path)!r} has strata that are not those of its table."
            )
        mats = {
            q: labelled(table, v, np.asarray(rec["matrices"][q], dtype=float))
            for v, q in enumerate(qi)
            if not fixed
        }
        return PerVariableDesign(
            table=table,
            variable_matrices=mats,
            perturbed=tuple(rec["perturbed"]),
            combinations=tuple(tuple(c) for c in rec["combinations"]),
            alpha=None if rec["alpha"] is None else float(rec["alpha"]),
            status=Status(rec["status"]),
            success=bool(rec["success"]),
            message=str(rec["message"]),
            max_risk=_number(rec["max_risk"]),
            loss=_number(rec["loss"]),
            expected_changes=_number(rec["expected_changes"]),
            changed_variables=_number(rec["changed_variables"]),
            epsilon=None if rec.get("epsilon") is None else float(rec["epsilon"]),
            fixed=fixed,
            strata=strata,
            params=dict(rec["params"]),
            details=dict(rec["details"]),
            stages=tuple(Stage(**s) for s in rec["stages"]),
            method=str(rec.get("method", "per-variable")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise DesignFileError(
            f"The design {str(path)!r} is not a complete per-variable design: {e}"
        ) from None
