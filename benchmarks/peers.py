"""Study: the peers as they really behave (``python -m benchmarks peers``).

Every row says what was run:

* **pymasq 0.6.5, real package** and **pram 0.2.0, real package**: their own ``pram`` functions,
  run with their defaults on the identifying columns as text (string labels) in an isolated
  environment with a pandas they support (pandas < 3), through ``benchmarks/peers_real.py``, which
  records the per-variable matrices the packages really use.  The recorded runs are kept in
  ``results/peers_real/<data set>.json`` (package, pandas and NumPy versions inside) and re-used when
  no such environment is given; set ``PRAMOPT_PEER_PYTHON`` to its interpreter to run them again.
* **idealised formula after pymasq 0.6.5**: what pymasq's source appears to intend, an invariant
  matrix built from each category's own share (with the same random diagonal as the real run).  The
  package does not compute this: under pandas 2.x with string labels it pairs the categories, in
  sorted order, with the frequencies sorted by count (``value_counts()`` read by position), so its
  matrix is not invariant; on integer-valued categories without a 0 it raises ``KeyError: 0``.
* **sdcMicro 5.8.1 pram()**: its per-variable formula (``pramopt.baselines.sdcmicro``, equal to
  sdcMicro's R code), released as sdcMicro releases it, over the whole product space, and separately
  the **restricted** matrix (present cells, rows renormalised) that ``pramopt``'s sdcmicro baseline
  calibrates: another mechanism, no longer invariant.

Each is measured as released (``pramopt.baselines.product_space``: C1 with every combination a
released cell, the share of records released as combinations absent from the data, the exact loss
over the product space) and restricted to the present cells (C1 and loss of the renormalised matrix).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import pramopt
from pramopt.baselines.calibrate import l2_loss, product_matrix_on_cells
from pramopt.baselines.product_space import (
    PRODUCT_SPACE_MAX,
    assess_product_space,
    product_space_codes,
    released_rows,
    sdcmicro_matrices,
)
from pramopt.verify import c1_risk

from ._common import RESULTS, datasets, write_table

REAL_DIR = RESULTS / "peers_real"
SCRIPT = Path(__file__).resolve().parent / "peers_real.py"
PYMASQ_PROBS, PYMASQ_ALPHA = 0.8, 0.5
PRAM_M, PRAM_ALPHA = 0.8, 0.5


# ---------------------------------------------------------------------------------------------
# The recorded runs of the real packages
# ---------------------------------------------------------------------------------------------


def record_real(
    dname: str,
    df: pd.DataFrame,
    qi,
    python: str | None = None,
    seed: int = 0,
    folder: Path = REAL_DIR,
) -> dict | None:
    """Run the real packages with ``python`` (an isolated interpreter) and save the record, or
    read the saved record of ``dname``; None when neither is possible."""
    path = folder / f"{dname}.json"
    python = python or os.environ.get("PRAMOPT_PEER_PYTHON")
    if python:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            keys = Path(tmp) / "keys.csv"
            df[list(qi)].astype(str).to_csv(keys, index=False)
            subprocess.run(
                [python, str(SCRIPT), str(keys), str(path), "--seed", str(seed)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=1800,
            )
    if not path.exists():
        return None
    return json.loads(path.read_text())


def _order(table, v: int, labels) -> np.ndarray:
    """Positions in ``labels`` (text) of the table's categories of variable v."""
    pos = {str(lab): i for i, lab in enumerate(labels)}
    return np.array([pos[str(c)] for c in table.categories[v]])


def real_pymasq_matrices(table, rec: dict) -> list[np.ndarray]:
    """The matrices pymasq really used (rows = original category), in the table's category order."""
    mats = {m["column"]: m for m in rec["pymasq"]["matrices"]}
    out = []
    for v, name in enumerate(table.qi):
        m = mats[str(name)]
        o = _order(table, v, m["labels"])
        out.append(np.asarray(m["matrix"])[np.ix_(o, o)])
    return out


def real_pram_matrices(table, rec: dict) -> list[np.ndarray]:
    """The matrices pram really used, transposed to rows = original category, table order."""
    mats = {m["column"]: m for m in rec["pram"]["matrices"]}
    out = []
    for v, name in enumerate(table.qi):
        m = mats[str(name)]
        r, c = _order(table, v, m["labels"]), _order(table, v, m["columns"])
        out.append(np.asarray(m["matrix_columns_current"])[np.ix_(r, c)].T)
    return out


def pymasq_diagonals(table, rec: dict | None, seed: int = 0) -> list[np.ndarray]:
    """pymasq's random diagonal per variable in table order: the real run's draw, else seeded."""
    if rec is not None and rec["pymasq"].get("ok"):
        mats = {m["column"]: m for m in rec["pymasq"]["matrices"]}
        return [
            np.asarray(mats[str(q)]["diagonal_draw"])[_order(table, v, mats[str(q)]["labels"])]
            for v, q in enumerate(table.qi)
        ]
    rng = np.random.default_rng(seed)
    return [rng.uniform(PYMASQ_PROBS, 1.0, len(c)) for c in table.categories]


def _freqs(table, v: int) -> np.ndarray:
    return np.bincount(table.codes[:, v], weights=table.counts, minlength=len(table.categories[v]))


def _pymasq_formula(d: np.ndarray, f: np.ndarray, alpha: float) -> np.ndarray:
    L = d.size
    P = np.tile(((1 - d) / (L - 1))[:, None], (1, L))
    np.fill_diagonal(P, d)
    Q = P.T * f[None, :] / (f @ P)[:, None]  # Q[i, j] = P[j, i] f_j / sum_k f_k P[k, i]
    return alpha * (P @ Q) + (1 - alpha) * np.eye(L)


def pymasq_idealised_matrices(table, diagonals, alpha: float = PYMASQ_ALPHA) -> list[np.ndarray]:
    """The idealised formula after pymasq's source: each category's own share (invariant)."""
    return [_pymasq_formula(d, _freqs(table, v), alpha) for v, d in enumerate(diagonals)]


def pymasq_as_computed(table, diagonals, alpha: float = PYMASQ_ALPHA) -> list[np.ndarray]:
    """What pymasq 0.6.5 computes under pandas 2.x with string labels, in table order.

    Its categories are the labels sorted as text; its frequency vector is ``value_counts()``
    (sorted by count, largest first, ties in sorted label order) read by position, so the
    category in position j is paired with the j-th largest frequency.
    """
    out = []
    for v, d in enumerate(diagonals):
        labels = [str(c) for c in table.categories[v]]
        f = _freqs(table, v)
        sorted_labels = sorted(labels)
        by_label = dict(zip(labels, f))
        counts = sorted(
            (-by_label[lab], i) for i, lab in enumerate(sorted_labels)
        )  # stable: text order
        f_pos = np.array([-c for c, _ in counts], dtype=float)
        o = _order(table, v, sorted_labels)  # table order -> sorted-text positions
        d_sorted = np.empty_like(d)
        d_sorted[o] = d
        M = _pymasq_formula(d_sorted, f_pos, alpha)
        out.append(M[np.ix_(o, o)])
    return out


def pram_formula_matrices(table, m: float = PRAM_M, alpha: float = PRAM_ALPHA) -> list[np.ndarray]:
    """pram 0.2.0's ``__get_weighted_transition_matrix__`` (rows = original category): every column
    the frequency distribution, its diagonal raised to at least m, columns renormalised, mixed with
    the identity by alpha, renormalised; transposed.  Equal to the package's own function (tested
    against the recorded runs)."""
    mats = []
    for v in range(len(table.qi)):
        f = _freqs(table, v)
        L = f.size
        tm = np.tile((f / f.sum())[:, None], (1, L))
        np.fill_diagonal(tm, np.maximum(np.diag(tm), m))
        tm = tm / tm.sum(axis=0, keepdims=True)
        wm = alpha * tm + (1 - alpha) * np.eye(L)
        mats.append((wm / wm.sum(axis=0, keepdims=True)).T)
    return mats


def invariance_error(table, mats) -> float:
    """Largest ``|(f^T M)_j - f_j| / f_j`` over variables and categories (0: invariant)."""
    worst = 0.0
    for v, M in enumerate(mats):
        f = _freqs(table, v)
        worst = max(worst, float(np.max(np.abs(f @ M - f) / f)))
    return worst


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------


def mechanisms(table, dname: str, rec: dict | None) -> list[tuple[str, str, list[np.ndarray]]]:
    """(name, what was run, per-variable matrices) for every peer row of a data set."""
    out = []
    v = rec["versions"] if rec else {}
    env = (
        f"pandas {v.get('pandas')}, NumPy {v.get('numpy')}, Python {v.get('python')}" if rec else ""
    )
    if rec and rec["pymasq"].get("ok"):
        out.append(
            (
                "pymasq 0.6.5 (real package)",
                f"pymasq {v.get('pymasq')} pram() run, defaults probs={PYMASQ_PROBS}, alpha={PYMASQ_ALPHA}, "
                f"string labels, np.random.seed({rec['seed']}); {env}; matrices recorded from the package",
                real_pymasq_matrices(table, rec),
            )
        )
    elif rec:
        out.append(("pymasq 0.6.5 (real package)", f"fails: {rec['pymasq'].get('error')}", []))
    diag = pymasq_diagonals(table, rec)
    out.append(
        (
            "idealised formula after pymasq 0.6.5",
            "NOT the package: invariant formula with each category's own share"
            + (
                " (same random diagonal as the real run)"
                if rec and rec["pymasq"].get("ok")
                else " (seeded random diagonal)"
            ),
            pymasq_idealised_matrices(table, diag),
        )
    )
    if rec and rec["pram"].get("ok"):
        out.append(
            (
                "pram 0.2.0 (real package)",
                f"pram {v.get('pram')} pram() run, defaults m={PRAM_M}, alpha={PRAM_ALPHA}, string labels; {env}; "
                "matrices recorded from the package",
                real_pram_matrices(table, rec),
            )
        )
    else:
        out.append(
            (
                "pram 0.2.0 formula",
                "the package's matrix formula (equal to its function to 1e-15 under "
                "pandas 2.x, tested); the package itself was not run here",
                pram_formula_matrices(table),
            )
        )
    out.append(
        (
            "sdcMicro 5.8.1 pram() formula, as released",
            "sdcMicro's per-variable invariant PRAM (pramopt.baselines.sdcmicro, its R formula re-implemented; "
            "seeded random diagonal, not R's), defaults pd=0.8, alpha=0.5, over the whole product space",
            sdcmicro_matrices(table, 0.8, 0.5, seed=0),
        )
    )
    return out


def measure(table, combos, mats) -> dict:
    """The mechanism as released (product space) and restricted to the present cells."""
    P = product_matrix_on_cells(table.codes, mats)
    row = {
        "max_risk_restricted": c1_risk(P, table.codes, table.counts, combos).max_risk,
        "loss_restricted": l2_loss(P, table.counts),
        "per_variable_invariance_error": invariance_error(table, mats),
    }
    if np.prod([len(c) for c in table.categories]) <= PRODUCT_SPACE_MAX:
        a = assess_product_space(table, mats, combos)
        row.update(
            max_risk_released=a.max_risk,
            loss_released=a.loss,
            mean_leaving=a.mean_leaving,
            max_leaving=a.max_leaving,
            restricted_invariance_error=a.invariance_error_restricted,
        )
    return row


def run(out: Path, quick: bool = False, log=print) -> pd.DataFrame:
    rows = []
    for dname, (df, qi, _note) in datasets(quick).items():
        table = pramopt.frequency_table(df, qi)
        combos = pramopt.resolve_combinations(table.qi)
        try:
            rec = record_real(dname, df, qi, folder=(out / "peers_real") if quick else REAL_DIR)
        except (OSError, subprocess.SubprocessError) as exc:
            log(f"[peers] {dname}: real packages not run ({exc})")
            rec = None
        log(f"[peers] {dname} (K={table.n_cells}) real record: {'yes' if rec else 'no'}")
        for name, how, mats in mechanisms(table, dname, rec):
            row = dict(dataset=dname, K=table.n_cells, n=table.n, peer=name, what_was_run=how)
            if mats:
                row.update(measure(table, combos, mats))
            if rec and name.endswith("(real package)"):
                pkg = "pymasq" if name.startswith("pymasq") else "pram"
                row["released_absent_share_observed"] = rec[pkg].get("absent_share")
            rows.append(row)
        if rec is not None and rec["pymasq"].get("ok"):
            real = real_pymasq_matrices(table, rec)
            ideal = pymasq_idealised_matrices(table, pymasq_diagonals(table, rec))
            rows.append(
                dict(
                    dataset=dname,
                    K=table.n_cells,
                    n=table.n,
                    peer="pymasq real vs idealised",
                    what_was_run="largest |entry difference| between the package's matrices and the "
                    "idealised formula with the same diagonal",
                    max_abs_difference=max(float(np.abs(a - b).max()) for a, b in zip(real, ideal)),
                )
            )
            num = rec.get("pymasq_numeric_values", {})
            if not num.get("ok", True):
                rows.append(
                    dict(
                        dataset=dname,
                        K=table.n_cells,
                        n=table.n,
                        peer="pymasq 0.6.5 on numbers",
                        what_was_run=f"the same call with the values read as numbers: {num.get('error')}",
                    )
                )
    res = pd.DataFrame(rows)
    write_table(
        res,
        out,
        "peers",
        "Peers as they really behave: real packages, idealised formulas, sdcMicro",
        notes=_notes(),
    )
    return res


def _notes() -> list[str]:
    return [
        "what_was_run names the package and version that ran (real package) or says it is a formula.",
        "Measured as released: max_risk_released is C1 with every combination of the product space a "
        "released cell; mean_leaving / max_leaving the share of records (mean over records, worst cell) "
        "released as combinations absent from the data; loss_released the exact L2 loss over the product "
        "space.  released_absent_share_observed is that share in the package's own released data (one run).",
        "Restricted: the product matrix on the present cells with rows renormalised (records only move "
        "among present cells), another mechanism; restricted_invariance_error is max |U0^T R - U0| / U0.",
        "per_variable_invariance_error: max |f^T M - f| / f over the per-variable matrices (0: invariant).",
        "Real runs: benchmarks/peers_real.py in an isolated environment (pandas < 3); records in "
        "results/peers_real/.  C1 over every 3-variable combination (all variables when fewer).",
    ]


# ---------------------------------------------------------------------------------------------
# For the optimal-vs-closed table
# ---------------------------------------------------------------------------------------------


def peers(table, dname: str | None = None):
    """name -> (matrix on present cells, released rows over the product space, product-space codes,
    what was run), from the recorded real runs when there is one for ``dname``."""
    rec = None
    if dname is not None and (REAL_DIR / f"{dname}.json").exists():
        rec = json.loads((REAL_DIR / f"{dname}.json").read_text())
    levels = [len(c) for c in table.categories]
    cols = product_space_codes(levels) if np.prod(levels) <= 50_000 else None
    out = {}
    for name, how, mats in mechanisms(table, dname or "", rec):
        if not mats:
            continue
        P = product_matrix_on_cells(table.codes, mats)
        full = released_rows(table.codes, mats, cols) if cols is not None else None
        out[f"peer: {name}"] = (P, full, cols, how)
    return out
