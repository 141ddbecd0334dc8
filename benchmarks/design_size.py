"""Size of a design folder and time of its uses, kept as parameters against kept as entries.

``python -m benchmarks.design_size [--quick] [--out DIR]``: the register case
(``census_data.register_data(4000)``: 182 x 2 x 60 x 4 categories, 3,486 present cells, nearly
every record unique) designed once at alpha = 0.1 (a replacement design, one pool: 11.6 million
entries), then saved twice: as its parameters (``parameters.npz``, ``parameters.csv``: what
``save_design`` writes now) and as entries (``matrix.csv``, ``matrix.npz``: what it wrote before,
and still writes for a result without a form).  For each folder: its bytes, the time to save and
load it, to release the 4,000 records (and of the release's C1 check alone), to estimate from the
release and to assess the design.  Results in
``design_size.md``.  ``--quick``: 1,000 records.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ._common import RESULTS, write_table
from .census_data import register_data


def _bytes(folder: Path) -> dict:
    return {f.name: f.stat().st_size for f in sorted(folder.iterdir())}


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def run(out: Path, quick: bool = False, log=print) -> pd.DataFrame:
    import pramopt
    from pramopt.publish.frame import full_c1_check

    n = 1000 if quick else 4000
    df = register_data(n, seed=0)
    qi = list(df.columns)
    res, t_design = _timed(pramopt.design, df, qi, alpha=0.1)
    log(
        f"register ({n} records, {res.table.n_cells} cells): {res.status.value}, "
        f"{res.matrix.nnz} entries, form: {res.form is not None}, design {t_design:.1f} s"
    )
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="design_size_"))
    try:
        for label, r in (("parameters", res), ("entries", dataclasses.replace(res, form=None))):
            folder = tmp / label
            _, t_save = _timed(pramopt.save_design, r, folder)
            back, t_load = _timed(pramopt.load_design, folder)
            released, t_release = _timed(pramopt.release, df, back, seed=1)
            _, t_estimate = _timed(pramopt.estimate, released, back)
            # the release's C1 check alone: from the form, or from the matrix's entries
            check, t_check = _timed(full_c1_check, back, back.table, back.combination_indices)
            # assess: from the form, or on the dense K x K matrix (a result without a form)
            assessed, t_assess = _timed(pramopt.assess, df, back, qi=qi, alpha=0.1)
            files = _bytes(folder)
            rows.append(
                {
                    "kept as": label,
                    "cells": res.table.n_cells,
                    "entries": int(res.matrix.nnz),
                    "folder MB": sum(files.values()) / 1e6,
                    "files (MB)": ", ".join(f"{k} {v / 1e6:.3g}" for k, v in files.items()),
                    "save s": t_save,
                    "load s": t_load,
                    "release s": t_release,
                    "C1 check s": t_check,
                    "max risk": f"{check.max_risk:.16g}",  # every digit: the two checks agree
                    "estimate s": t_estimate,
                    "assess s": t_assess,
                    "assess loss": f"{float(assessed.loss):.12g}",
                    "changed": int(np.sum(np.any(released[qi].to_numpy() != df[qi].to_numpy(), 1))),
                }
            )
            log(f"{label}: {rows[-1]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = pd.DataFrame(rows)
    write_table(
        table,
        out,
        "design_size",
        f"Design folder kept as parameters or as entries: the register case, {n} records",
        notes=[
            f"Design (auto mode, alpha = 0.1) {t_design:.0f} s, once; the same result saved both "
            "ways. Release and estimate read the loaded folder; the release includes the C1 "
            "check every release makes: from the parameters (`verify.c1_risk_form`) in the "
            "first row, from the matrix's entries (`verify.c1_risk`) in the second; "
            "`C1 check s` times that check alone, `max risk` is its result.",
            "`assess s`: `pramopt.assess` of the loaded design, from its parameters in the "
            "first row, on the dense K x K matrix in the second (a result without a form); "
            "`assess loss` is its exact L2 loss.",
            "`changed`: records whose identifying values the release changed (seed 1): the same "
            "draw from the parameters as from the entries.",
        ],
        floatfmt=".3g",
    )
    return table


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m benchmarks.design_size", description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    run(a.out, quick=a.quick)
