"""Peers from PyPI: the ``pram`` package (JiscDACT/pram 0.2.0) and ``pymasq`` (0.6.5).

Both perturb each variable independently with a per-variable matrix and only return the
perturbed data.  Their matrices are what their released data imply, so they are evaluated
exactly, as the product of the per-variable matrices: (a) restricted to the present cells with
rows renormalised (as the calibrated baselines, so that loss and risk compare directly), and
(b) on the full product space (the peer may release a combination absent from the data), where
C1 is evaluated with ``c1_risk(..., col_codes=every product cell)``.

The packages are optional.  When a package imports and its matrix builder runs, its own function
builds the per-variable matrices; otherwise the formula from its source (quoted below) is used and
the table says so:

* ``pram.Pram.__get_weighted_transition_matrix__(values, m=0.8, alpha=0.5)``: column j is the
  frequency distribution of the variable, its diagonal raised to at least m, columns renormalised,
  mixed with the identity by alpha, renormalised (column = current value, so P is its transpose).
* ``pymasq.mitigations.pram`` (``probs=0.8, alpha=0.5``): random diagonal d_i ~ U(probs, 1), off-
  diagonal (1 - d_i)/(L - 1); invariant product P Q with Q[i, j] = P[j, i] f_j / sum_k f_k P[k, i];
  mixed with the identity by alpha.  pymasq draws with the global NumPy generator; here it is seeded.
"""
from __future__ import annotations

import itertools

import numpy as np

from pramopt.baselines.calibrate import product_matrix_on_cells


def _freqs(table, v):
    return np.bincount(table.codes[:, v], weights=table.counts, minlength=len(table.categories[v]))


def pram_package_matrices(table, m: float = 0.8, alpha: float = 0.5):
    """Per-variable row-stochastic matrices of the ``pram`` package; (matrices, how)."""
    mats, how = [], "formula from pram 0.2.0 source"
    try:
        import pram as _pram  # noqa: F401
        ok = True
    except Exception as exc:  # pragma: no cover - optional
        ok, why = False, f"pram not importable ({type(exc).__name__})"
    for v in range(len(table.qi)):
        f = _freqs(table, v)
        M = None
        if ok:
            try:
                vals = np.repeat(np.arange(f.size), f.astype(np.int64)).astype(str)
                tm = _pram.Pram.__get_weighted_transition_matrix__(vals, m, alpha)
                order = [str(i) for i in range(f.size)]
                M = tm.loc[order, order].to_numpy().T
                how = "pram 0.2.0 own function"
            except Exception as exc:
                why = f"pram's own function fails here: {type(exc).__name__}: {str(exc)[:60]}"
                ok = False
        if M is None:
            L = f.size
            tm = np.tile((f / f.sum())[:, None], (1, L))        # column j = frequency distribution
            d = np.maximum(np.diag(tm), m)
            np.fill_diagonal(tm, d)
            tm = tm / tm.sum(axis=0, keepdims=True)
            wm = alpha * tm + (1 - alpha) * np.eye(L)
            wm = wm / wm.sum(axis=0, keepdims=True)
            M = wm.T
        mats.append(M)
    if how.startswith("formula") and "why" in locals():
        how += f" ({why})"
    return mats, how


_PYMASQ: list = []


def _pymasq_status() -> str:
    """Try the import once per process (it pulls in TensorFlow and takes seconds)."""
    if not _PYMASQ:
        import importlib.util
        if importlib.util.find_spec("pymasq") is None:
            _PYMASQ.append(" (pymasq not installed)")
        else:
            try:
                import pymasq.mitigations.pram  # noqa: F401
                _PYMASQ.append(" (pymasq imports; its pram() only returns data, so the formula is used)")
            except Exception as exc:  # pragma: no cover - optional
                _PYMASQ.append(f" (pymasq not importable: {type(exc).__name__}: {str(exc)[:60]})")
    return _PYMASQ[0]


def pymasq_matrices(table, probs: float = 0.8, alpha: float = 0.5, seed: int = 0):
    """Per-variable row-stochastic matrices of pymasq's PRAM; (matrices, how)."""
    how = "formula from pymasq 0.6.5 source" + _pymasq_status()
    rng = np.random.default_rng(seed)
    mats = []
    for v in range(len(table.qi)):
        f = _freqs(table, v)
        f = f / f.sum()
        L = f.size
        d = rng.uniform(probs, 1.0, size=L)
        Pm = np.tile(((1 - d) / max(L - 1, 1))[:, None], (1, L))
        np.fill_diagonal(Pm, d)
        Q = (Pm.T * f[None, :]) / (f @ Pm)[:, None]
        T = Pm @ Q
        mats.append(alpha * T + (1 - alpha) * np.eye(L))
    return mats, how


def product_space(table):
    """Codes of every cell of the product space and the full product matrix factory."""
    levels = [len(c) for c in table.categories]
    return np.array(list(itertools.product(*[range(L) for L in levels])), dtype=np.int64)


def full_matrix(table, mats, cols):
    K = table.n_cells
    P = np.ones((K, cols.shape[0]))
    for v, M in enumerate(mats):
        P *= np.asarray(M)[np.ix_(table.codes[:, v], cols[:, v])]
    return P


def peers(table):
    """name -> (matrix on present cells, full product-space matrix, product-space codes, how)."""
    cols = product_space(table) if np.prod([len(c) for c in table.categories]) <= 50_000 else None
    out = {}
    for name, fn in (("peer: pram (PyPI) defaults", pram_package_matrices),
                     ("peer: pymasq defaults", pymasq_matrices)):
        mats, how = fn(table)
        P = product_matrix_on_cells(table.codes, mats)
        full = full_matrix(table, mats, cols) if cols is not None else None
        out[name] = (P, full, cols, how)
    return out
