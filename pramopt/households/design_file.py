"""Household designs on disk: one ``design.json`` that carries the household structure.

The file (format ``pramopt-households/2``) holds the household part as a full design record
(:func:`pramopt.io.design_file.design_record`, with its own checksums), the person matrix (one
shared by every household cell, or one per household cell stacked, as ``person_structure`` says)
and table, the record-level table, the household column and keys, and a checksum over all of it, so
that ``pramopt release`` knows to draw household-level values once per household.  A reader that
knows only person-level designs refuses the format instead of releasing per record, and a reader
of format ``/1`` (one shared person matrix, still read here) refuses ``/2``.
``household_matrix.csv`` and ``person_matrix.csv`` beside it are for reading.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._labels import formula_safe_frame
from .._plain import number as _num
from .._plain import plain as _plain
from ..errors import DesignFileError
from ..frequency.table import FrequencyTable, table_from_record
from ..io.atomic import DESIGN_FILE, write_text
from ..io.design_file import check_guarantee, design_from_record, design_record
from ..io.tables import write_table
from ..result import Stage, Status, entries, matrix_long
from .result import HouseholdDesign, rebuild_layout

__all__ = ["FORMAT", "save_household_design", "load_household_design"]

FORMAT = "pramopt-households/2"
#: Earlier format: always one person matrix shared by every household cell.
FORMAT_1 = "pramopt-households/1"
_STRUCTURES = ("shared", "per household cell")


def _table_rec(t: FrequencyTable) -> dict:
    return {
        "qi": list(t.qi),
        "categories": [_plain(list(c)) for c in t.categories],
        "codes": t.codes.tolist(),
        "counts": t.counts.tolist(),
        "checksum": t.checksum(),
    }


def _table(rec: dict) -> FrequencyTable:
    qi = tuple(rec["qi"])
    t = table_from_record(qi, rec)
    if qi and t.checksum() != rec["checksum"]:
        raise DesignFileError(
            "The household design was modified: a table does not match its checksum."
        )
    return t


def _digest(rec: dict) -> str:
    body = {k: v for k, v in rec.items() if k != "record_sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    ).hexdigest()


def household_record(result: HouseholdDesign, extra: dict | None = None) -> dict:
    r, c, v = entries(result.person_matrix)
    lay = result.layout
    rec = {
        "format": FORMAT,
        "kind": "design",
        "method": result.method,
        "household": result.household,
        "household_keys": list(lay.household_keys),
        "person_keys": list(lay.person_keys),
        "qi": list(result.qi),
        "table": _table_rec(lay.table),
        "person_table": _table_rec(lay.person_table),
        "household_design": design_record(result.household_design),
        "person_structure": _STRUCTURES[
            result.person_matrix.shape[0] != result.person_matrix.shape[1]
        ],
        "person_matrix": {
            "shape": list(result.person_matrix.shape),
            "rows": r.tolist(),
            "cols": c.tolist(),
            "values": v.tolist(),
        },
        "status": result.status.value,
        "success": bool(result.success),
        "message": result.message,
        "alpha": result.alpha,
        "alpha_household": result.alpha_household,
        "combinations": [list(x) for x in result.combinations],
        "figures": _plain(result.figures()),
        "params": _plain(result.params),
        "details": _plain(result.details),
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
    rec["record_sha256"] = _digest(rec)
    return rec


def _person_long(result: HouseholdDesign) -> pd.DataFrame:
    """``person_matrix.csv``: the long form of ``Pp``, or of each used ``Pp^(h)`` headed by the
    household-level values of h (``household_<var>`` columns)."""
    lay = result.layout
    Pp = sp.csr_array(result.person_matrix)
    Kp = lay.person_table.n_cells
    if Pp.shape[0] == Kp:
        return matrix_long(Pp, lay.person_table)
    hcells = lay.household_table.cells()
    parts = []
    for h in np.unique(lay.h_of):
        block = matrix_long(Pp[h * Kp : (h + 1) * Kp], lay.person_table)
        head = pd.DataFrame(
            {f"household_{q}": [hcells.iloc[h][q]] * len(block) for q in hcells.columns}
        )
        parts.append(pd.concat([head, block], axis=1))
    return pd.concat(parts, ignore_index=True)


def save_household_design(result: HouseholdDesign, folder, extra: dict | None = None) -> Path:
    """Write ``design.json``, ``household_matrix.csv`` and ``person_matrix.csv`` into ``folder``."""
    folder = Path(folder)
    lay = result.layout
    # files for people to open: no label may start a spreadsheet formula (design.json keeps them)
    write_table(
        formula_safe_frame(matrix_long(result.household_matrix, lay.household_table)),
        folder / "household_matrix.csv",
        overwrite=True,  # save_design decided whether the folder may be written into
    )
    if lay.ppos:
        write_table(
            formula_safe_frame(_person_long(result)), folder / "person_matrix.csv", overwrite=True
        )
    write_text(
        json.dumps(household_record(result, extra), indent=1, allow_nan=False), folder / DESIGN_FILE
    )
    return folder / DESIGN_FILE


def load_household_design(rec: dict, path) -> HouseholdDesign:
    """Rebuild a :class:`HouseholdDesign` from the content of its ``design.json``."""
    if _digest(rec) != rec.get("record_sha256"):
        raise DesignFileError(
            f"The design {str(path)!r} was modified: it does not match its checksum."
        )
    if isinstance(rec.get("table"), dict):
        check_guarantee(rec, list(rec["table"].get("qi") or []), path)
    try:
        rh = design_from_record(rec["household_design"], path)
        table, person = _table(rec["table"]), _table(rec["person_table"])
        lay = rebuild_layout(table, rh.table, person, rec["household_keys"])
        m = rec["person_matrix"]
        Pp = sp.csr_array(
            (
                np.asarray(m["values"], dtype=float),
                (np.asarray(m["rows"], dtype=np.int64), np.asarray(m["cols"], dtype=np.int64)),
            ),
            shape=tuple(m["shape"]),
        )
        structure = rec.get("person_structure", "shared") if rec["format"] != FORMAT_1 else "shared"
        Kp, Kh = person.n_cells, rh.table.n_cells
        if structure not in _STRUCTURES or Pp.shape != (
            (Kp if structure == "shared" else Kh * Kp),
            Kp,
        ):
            raise ValueError(
                f"person matrix of shape {Pp.shape} for structure {structure!r} with {Kh} "
                "household "
                f"and {Kp} person cells"
            )
        fig = rec["figures"]
        return HouseholdDesign(
            household_design=rh,
            person_matrix=Pp,
            layout=lay,
            household=rec["household"],
            status=Status(rec["status"]),
            message=rec.get("message", ""),
            alpha=float(rec["alpha"]),
            combinations=tuple(tuple(c) for c in rec["combinations"]),
            max_risk=_num(fig["max_risk"]),
            loss=_num(fig["loss"]),
            expected_changes=_num(fig["expected_changes"]),
            alpha_household=float(rec["alpha_household"]),
            stages=tuple(
                Stage(s["name"], float(s["seconds"]), int(s["iterations"]), s.get("detail", ""))
                for s in rec.get("stages", [])
            ),
            params=dict(rec.get("params") or {}),
            details=dict(rec.get("details") or {}),
        )
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise DesignFileError(f"The design {str(path)!r} is malformed: {e!r}") from None
