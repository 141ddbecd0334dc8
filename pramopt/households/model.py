"""Households: which keys are household-level, the tables, and the record-level matrix.

A household design is two matrices: ``Ph`` on the household-level cells (the values of the
household-level keys; a household's cell is drawn once and copied to every member) and ``Pp`` on
the person-level cells (drawn per person, independently of the household draw), either one matrix
for all or one ``Pp^(h)`` per original household cell (:mod:`.conditional`).  A record of cell
``(h, p)`` is therefore released as ``(h', p')`` with probability

    P((h, p) -> (h', p')) = Ph[h, h'] * Pp^(h)[p, p'],

its *marginal* law, whatever the correlation between the members of one household.  The released
cells are every pair ``(h', p')`` of a household cell and a person cell, including pairs absent
from the data; :func:`record_matrix` builds this K x K' matrix (present cells x released pairs
that can occur) row by row, never as a Kronecker product of the full spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._plain import plain
from ..errors import InvalidParameterError
from ..frequency.table import FrequencyTable, cell_index, frequency_table

__all__ = [
    "Layout",
    "household_keys",
    "layout",
    "record_matrix",
    "household_codes",
    "person_index",
    "person_diagonal",
    "same_missing",
]


def _non_constant(df: pd.DataFrame, household: str, keys) -> dict:
    """For each key that differs within some household: the id of one such household."""
    out = {}
    g = df.groupby(household, sort=False, dropna=False)
    for q in keys:
        n = g[q].nunique(dropna=False)
        bad = n[n > 1]
        if len(bad):
            out[q] = bad.index[0]
    return out


def household_keys(
    df: pd.DataFrame, qi, household: str, named=None, owner: str = "design"
) -> tuple[tuple, tuple]:
    """The household-level and person-level identifying variables (each in ``qi``'s order).

    ``named`` (the ``household_keys`` parameter) must be identifying variables that are constant
    within every household; without it every identifying variable that is constant within every
    household is household-level.

    Raises
    ------
    InvalidParameterError
        For a household column that is not in the data, is an identifying variable or has a
        missing value; a named key that is not an identifying variable or differs within a
        household (the error names the variable and one household); or no household-level key.
    """
    qi = list(qi)
    if household not in df.columns:
        raise InvalidParameterError(
            f"The 'household' parameter of {owner} must name a column of the data; got "
            f"{household!r} "
            f"(columns: {list(map(str, df.columns))[:20]})."
        )
    if household in qi:
        raise InvalidParameterError(
            f"The 'household' parameter of {owner} must not be an identifying variable; got "
            f"{household!r}."
        )
    if df[household].isna().any():
        i = int(np.flatnonzero(df[household].isna().to_numpy())[0])
        raise InvalidParameterError(
            f"The 'household' column {household!r} must identify the household of every record; "
            f"record {i} has "
            "none (a missing value)."
        )
    if named is not None:
        bad = [q for q in named if q not in qi]
        if bad:
            raise InvalidParameterError(
                f"The 'household_keys' parameter of {owner} must list identifying variables "
                f"({qi}); got {bad}."
            )
        differ = _non_constant(df, household, named)
        if differ:
            q, hid = next(iter(differ.items()))
            raise InvalidParameterError(
                f"The 'household_keys' parameter of {owner} names {q!r}, which is not constant "
                "within household "
                f"{household} = {plain(hid)!r} (and {len(differ) - 1} other key(s) differ within "
                "some household). "
                "A household-level key must have one value per household; leave it out to treat "
                "it as person-level."
            )
        hkeys = [q for q in qi if q in set(named)]
    else:
        differ = _non_constant(df, household, qi)
        hkeys = [q for q in qi if q not in differ]
    if not hkeys:
        raise InvalidParameterError(
            f"The 'household' parameter of {owner} needs a household-level key, but none of the "
            "identifying variables "
            f"{qi} is constant within every household of {household!r}."
        )
    return tuple(hkeys), tuple(q for q in qi if q not in hkeys)


@dataclass(frozen=True)
class Layout:
    """The tables of a household design and how the record cells split into them.

    Attributes
    ----------
    table : FrequencyTable
        Record cells over every identifying variable (records counted).
    household_table, person_table : FrequencyTable
        Cells over the household-level and the person-level keys, records counted (a table with
        no variable has one cell holding every record).
    h_of, p_of : ndarray of shape (K,)
        Each record cell's household cell and person cell.
    hpos, ppos : tuple of int
        Positions in ``table.qi`` of the household-level and person-level keys.
    """

    table: FrequencyTable
    household_table: FrequencyTable
    person_table: FrequencyTable
    h_of: np.ndarray
    p_of: np.ndarray
    hpos: tuple
    ppos: tuple

    @property
    def household_keys(self) -> tuple:
        return tuple(self.household_table.qi)

    @property
    def person_keys(self) -> tuple:
        return tuple(self.person_table.qi)


def _sub_table(table: FrequencyTable, pos) -> FrequencyTable:
    """The table's records counted over the variables at ``pos`` (same categories)."""
    pos = list(pos)
    if not pos:
        return FrequencyTable(
            qi=(),
            categories=(),
            codes=np.zeros((1, 0), dtype=np.int64),
            counts=np.array([table.n], dtype=np.int64),
        )
    codes, inv = np.unique(table.codes[:, pos], axis=0, return_inverse=True)
    counts = np.bincount(np.asarray(inv).ravel(), weights=table.counts).astype(np.int64)
    return FrequencyTable(
        qi=tuple(table.qi[j] for j in pos),
        categories=tuple(table.categories[j] for j in pos),
        codes=codes.astype(np.int64),
        counts=counts,
    )


def split(
    table: FrequencyTable,
    hkeys,
    household_table: FrequencyTable | None = None,
    person_table: FrequencyTable | None = None,
) -> Layout:
    """The layout of a record table whose household-level keys are ``hkeys``."""
    hpos = tuple(j for j, q in enumerate(table.qi) if q in set(hkeys))
    ppos = tuple(j for j in range(len(table.qi)) if j not in hpos)
    th = household_table if household_table is not None else _sub_table(table, hpos)
    tp = person_table if person_table is not None else _sub_table(table, ppos)

    def index(sub, pos):
        if not pos:
            return np.zeros(table.n_cells, dtype=np.int64)
        return cell_index(sub, table.codes[:, list(pos)])

    h_of, p_of = index(th, hpos), index(tp, ppos)
    if (h_of < 0).any() or (p_of < 0).any():
        raise InvalidParameterError(
            "The household and person tables do not cover the record cells."
        )
    return Layout(table, th, tp, h_of, p_of, hpos, ppos)


def layout(
    df: pd.DataFrame, qi, hkeys, domains=None, max_categories=None, owner: str = "design"
) -> Layout:
    """Count ``df`` and split its cells into household and person cells."""
    kw = {} if max_categories is None else {"max_categories": max_categories}
    table = frequency_table(df, list(qi), domains=domains, owner=owner, **kw)
    return split(table, hkeys)


def household_codes(
    df: pd.DataFrame, household: str, h_cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each record's household number (in order of first appearance) and each household's cell.

    ``h_cells`` is each record's household cell; the caller has checked that it is constant within
    every household."""
    hh, _ = pd.factorize(df[household], sort=False)
    hh = np.asarray(hh, dtype=np.int64)
    first = np.full(int(hh.max()) + 1 if hh.size else 0, -1, dtype=np.int64)
    first[hh[::-1]] = np.arange(hh.size)[::-1]
    return hh, h_cells[first]


def person_index(Pp, h: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The row of the person matrix that draws a record of household cell h and person cell p.

    ``Pp`` is either one matrix for every household cell (Kp x Kp: row p) or one per household
    cell, stacked (Kh Kp x Kp: row ``h Kp + p``, :mod:`.conditional`); with one household cell
    the two agree."""
    Kp = Pp.shape[1]
    p = np.asarray(p, dtype=np.int64)
    return p if Pp.shape[0] == Kp else np.asarray(h, dtype=np.int64) * Kp + p


def person_diagonal(Pp, h: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``Pp^(h)[p, p]`` for each pair (h, p)."""
    P = sp.csr_array(Pp, dtype=float)
    return np.asarray(P[person_index(P, h, p), np.asarray(p, dtype=np.int64)]).ravel()


def record_matrix(Ph, Pp, h_of: np.ndarray, p_of: np.ndarray) -> tuple[sp.csr_array, np.ndarray]:
    """The record-level matrix: row m (cell ``(h_of[m], p_of[m])``) has
    ``Ph[h, h'] * Pp^(h)[p, p']`` at the released pair ``(h', p')`` (``Pp^(h) = Pp`` for a person
    part shared by every household cell, see :func:`person_index`).

    Returns the K x K' matrix over the pairs that some row reaches, and those pairs as
    ``(h', p')`` rows (K' x 2), in increasing order of ``h' * Kp + p'``.
    """
    Rh = sp.csr_array(sp.csr_array(Ph, dtype=float)[np.asarray(h_of)])
    Pp = sp.csr_array(Pp, dtype=float)
    Rp = sp.csr_array(Pp[person_index(Pp, h_of, p_of)])
    Rh.eliminate_zeros()
    Rp.eliminate_zeros()
    Kp = Rp.shape[1]
    K = Rh.shape[0]
    nh, npp = np.diff(Rh.indptr), np.diff(Rp.indptr)
    # every entry e of Rh (row r) pairs with every entry of Rp's row r
    row_h = np.repeat(np.arange(K), nh)
    reps = npp[row_h]
    eh = np.repeat(np.arange(Rh.nnz), reps)
    starts = np.repeat(np.cumsum(reps) - reps, reps)
    ep = np.repeat(Rp.indptr[:-1][row_h], reps) + (np.arange(reps.sum()) - starts)
    key = Rh.indices[eh].astype(np.int64) * Kp + Rp.indices[ep]
    vals = Rh.data[eh] * Rp.data[ep]
    used, col = np.unique(key, return_inverse=True)
    rows = np.repeat(np.arange(K), nh * npp)
    R = sp.csr_array((vals, (rows, np.asarray(col).ravel())), shape=(K, used.size))
    return R, np.column_stack([used // Kp, used % Kp])


def released_codes(lay: Layout, pairs: np.ndarray) -> np.ndarray:
    """Codes (over every identifying variable, in ``table.qi`` order) of released pairs
    ``(h', p')``."""
    out = np.empty((pairs.shape[0], len(lay.table.qi)), dtype=np.int64)
    if lay.hpos:
        out[:, list(lay.hpos)] = lay.household_table.codes[pairs[:, 0]]
    if lay.ppos:
        out[:, list(lay.ppos)] = lay.person_table.codes[pairs[:, 1]]
    return out


def same_missing(person_table: FrequencyTable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether person cells ``a[i]`` and ``b[i]`` have the same missing pattern: the pairs a person
    matrix may use with ``missing="keep"``."""
    miss = person_table.missing()
    return (miss[a] == miss[b]).all(axis=1)
