"""Release (apply PRAM) and estimate (the unbiased estimator (4) of Cator et al.)."""
from __future__ import annotations

import secrets

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ._validation import InvalidParameterError, PramoptError, check_int
from .data import FrequencyTable, cell_index, check_qi


class DesignMismatchError(PramoptError, ValueError):
    """The data do not match the design (other cells or counts), or the design is not safe."""


def make_rng(seed=None) -> np.random.Generator:
    """A numpy Generator: from ``seed`` when given, else seeded from the OS's secure source.

    Without a seed nobody, not even the releasing office, can reproduce the draw, which is the
    secure default for published data (as in diffprivlib).
    """
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(check_int(seed, "seed", "release", low=0))


def _table_of(result) -> FrequencyTable:
    table = getattr(result, "table", None)
    if table is None:
        raise InvalidParameterError("The 'result' parameter must carry its frequency table (a DesignResult).")
    return table


def record_cells(df: pd.DataFrame, table: FrequencyTable, owner: str) -> np.ndarray:
    """Index of each record's cell among the design's cells; error if a record has another cell."""
    qi = check_qi(df, table.qi, owner)
    codes = np.empty((len(df), len(qi)), dtype=np.int64)
    for j, q in enumerate(qi):
        cats = table.categories[j]
        c = cats.get_indexer(df[q])
        if cats.isna().any():
            c = np.where(df[q].isna().to_numpy(), int(np.flatnonzero(cats.isna())[0]), c)
        codes[:, j] = c
    idx = np.full(len(df), -1, dtype=np.int64)
    ok = (codes >= 0).all(axis=1)
    idx[ok] = cell_index(table, codes[ok])
    if (idx < 0).any():
        bad = df.loc[idx < 0, list(qi)].head(3).to_dict("records")
        raise DesignMismatchError(
            f"{int((idx < 0).sum())} records of the data fall in cells the design does not have "
            f"(for example {bad}); the design was made for other data.")
    return idx


def draw_cells(cells: np.ndarray, P, rng: np.random.Generator) -> np.ndarray:
    """Draw a released cell for every record from its cell's row of P (vectorised).

    Row r's cumulative probabilities are shifted by r, so that one ``searchsorted`` over the
    concatenated rows finds every record's draw without a Python loop.
    """
    Pc = sp.csr_matrix(P)
    Pc.eliminate_zeros()
    rows = np.repeat(np.arange(Pc.shape[0]), np.diff(Pc.indptr))
    data = Pc.data.astype(float)
    rowsum = np.bincount(rows, weights=data, minlength=Pc.shape[0])
    cum = np.cumsum(data)
    start = np.concatenate([[0.0], cum])[Pc.indptr[:-1]]
    # within-row cumulative share in (0, 1], shifted by the row number
    key = rows + (cum - start[rows]) / rowsum[rows]
    u = rng.random(cells.shape[0])
    pos = np.searchsorted(key, cells + u, side="right")
    # guard against rounding at the end of a row
    last = Pc.indptr[cells + 1] - 1
    pos = np.minimum(pos, last)
    return Pc.indices[pos]


def release(df: pd.DataFrame, result, seed=None, *, allow_unverified: bool = False) -> pd.DataFrame:
    """Perturb the identifying columns of ``df`` with the design's matrix.

    Each record's identifying values are drawn from its cell's row of P, independently; every
    other column is returned untouched.

    Parameters
    ----------
    df : pandas.DataFrame
        The microdata the design was made for.
    result : DesignResult
    seed : int, optional
        Seed for a reproducible draw.  Without it the generator is seeded from ``secrets``.
    allow_unverified : bool
        Release even with a design that failed verification (never do this for publication).
    """
    table = _table_of(result)
    if not getattr(result, "success", False) and not allow_unverified:
        raise DesignMismatchError(
            f"The design's status is {getattr(result.status, 'value', result.status)!r}: it did not pass "
            "the C1 verification, so it is not safe to release with.")
    cells = record_cells(df, table, "release")
    if not np.array_equal(np.bincount(cells, minlength=table.n_cells), table.counts):
        raise DesignMismatchError("The data's cell counts differ from those the design was made for.")
    new = draw_cells(cells, result.matrix, make_rng(seed))
    out = df.copy()
    for j, q in enumerate(table.qi):
        vals = pd.Series(np.asarray(table.categories[j].take(table.codes[new, j]), dtype=object), index=df.index)
        try:  # keep the column's dtype (categorical, integer, float with NaN, string)
            vals = vals.astype(df[q].dtype)
        except (TypeError, ValueError):
            pass
        out[q] = vals
    return out


def estimate(released: pd.DataFrame, result, by=None) -> pd.DataFrame:
    """Unbiased estimate of the original cell frequencies (Cator et al., eq. (4)).

    ``mu_hat(k; y) = (1/n) sum_l (P^-1)_{lk} U(l; y)``; returned on the count scale
    (``n * mu_hat``) for every cell, jointly with the categorical columns ``by`` if given.

    Returns
    -------
    pandas.DataFrame
        The cell values (and ``by`` values), ``observed`` released counts U and ``estimate``.
    """
    table = _table_of(result)
    cells = record_cells(released, table, "estimate")
    K = table.n_cells
    Pinv = np.linalg.inv(np.asarray(result.matrix, dtype=float))
    labels = result.cells.reset_index(drop=True)
    if by is None:
        U = np.bincount(cells, minlength=K).astype(float)
        out = labels.copy()
        out["observed"] = U
        out["estimate"] = Pinv.T @ U
        return out
    by = [by] if isinstance(by, str) else list(by)
    missing = [b for b in by if b not in released.columns]
    if missing:
        raise InvalidParameterError(f"The 'by' parameter of estimate must name columns of the data; {missing!r} are not.")
    clash = [b for b in by if b in table.qi]
    if clash:
        raise InvalidParameterError(f"The 'by' parameter of estimate must not name identifying variables; got {clash!r}.")
    ycode, yvals = pd.MultiIndex.from_frame(released[by]).factorize() if len(by) > 1 else pd.factorize(released[by[0]])
    ycode = np.asarray(ycode)
    Y = int(ycode.max()) + 1 if ycode.size else 0
    U = np.zeros((Y, K))
    np.add.at(U, (ycode, cells), 1.0)
    est = U @ Pinv  # row y: P^-T U(.; y), as a row vector
    frames = []
    for y in range(Y):
        f = labels.copy()
        yv = yvals[y] if len(by) > 1 else (yvals[y],)
        for b, v in zip(by, yv):
            f[b] = v
        f["observed"] = U[y]
        f["estimate"] = est[y]
        frames.append(f)
    return pd.concat(frames, ignore_index=True)
