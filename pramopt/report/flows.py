"""The flows of a design, P's nonzero entries one piece at a time, and the tables made of them.

A flow is an entry of P off the diagonal in records: ``U0(m) P_mk`` expected records of cell m
released as cell k.  :func:`_flows` yields them a piece at a time (never K x K), with the codes of
both cells; :func:`variable_labels` names each variable's codes as the data write them;
:func:`top_flows` and :func:`changed_together` are the report's two tables of flows.  Flows below
:data:`NEGLIGIBLE` records are solver round-off and left out of both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..frequency.table import FrequencyTable, is_missing

__all__ = [
    "NEGLIGIBLE",
    "TIE_DIGITS",
    "FLOW_CHUNK",
    "variable_labels",
    "top_flows",
    "changed_together",
]

#: Shares and expected records below this are solver round-off, not movement: the report leaves
#: flows of fewer records out and shows smaller shares and records as blank or 0 (its words say so).
NEGLIGIBLE = 1e-6

#: Flows whose expected records agree to this many significant digits are one size in the flows
#: table.
TIE_DIGITS = 3

#: Entries of P handled at a time when summing flows: the codes of both ends of each entry are
#: (entries x variables) arrays, 1.4 GB at once for the 18 million entries of a 5-key census design.
FLOW_CHUNK = 1 << 20


def _flows(P, table: FrequencyTable, col_codes=None):
    """Per piece of at most about ``FLOW_CHUNK`` nonzero entries of P: original codes and released
    codes (each (entries, d)), the expected records U0(m) P_mk of each entry, and its row m."""
    M = sp.csr_array(P)
    indptr, indices, data = M.indptr, M.indices, M.data
    codes = np.asarray(table.codes)
    cc = codes if col_codes is None else np.asarray(col_codes)
    counts = np.asarray(table.counts, dtype=float)
    K = M.shape[0]
    a = 0
    while a < K:
        # rows a..b-1 hold at most FLOW_CHUNK entries (at least one row)
        b = max(a + 1, int(np.searchsorted(indptr, indptr[a] + FLOW_CHUNK, side="right")) - 1)
        b = min(b, K)
        lo, hi = indptr[a], indptr[b]
        r = np.repeat(np.arange(a, b), np.diff(indptr[a : b + 1]))
        c, v = indices[lo:hi], data[lo:hi].astype(float)
        keep = v != 0
        r, c = r[keep], c[keep]
        yield codes[r], cc[c], counts[r] * v[keep], r
        a = b


def _whole(values) -> bool:
    """True when every value that is not missing is a float with an integer value (a column of
    whole numbers that pandas holds as floats because a value is missing)."""
    seen = [x for x in values if not is_missing(x)]
    return bool(seen) and all(
        isinstance(x, (float, np.floating)) and float(x).is_integer() for x in seen
    )


def _label(x, whole: bool = False) -> str:
    """A category as the data write it: 'missing' for a missing value, ``2`` for the float 2.0
    of a column of whole numbers (``whole``), else the value's text."""
    if is_missing(x):
        return "missing"
    return str(int(x)) if whole else str(x)


def variable_labels(table: FrequencyTable, col_codes=None, col_cells=None) -> list[list[str]]:
    """Per identifying variable, the label of each code (a missing value reads 'missing').

    A variable whose categories are all whole numbers held as floats is labelled as integers
    (``2``, not ``2.0``); text is kept as written.  Codes beyond the table's categories
    (released categories absent from the data, in a matrix made elsewhere) take their labels
    from ``col_cells``, the cells of the matrix's columns.
    """
    cc = None if col_codes is None else np.asarray(col_codes)
    out = []
    for j, (q, cats) in enumerate(zip(table.qi, table.categories)):
        released = []
        if cc is not None and cc.shape[0] and int(cc[:, j].max()) >= len(cats):
            if col_cells is not None:
                released = [
                    (code, value)
                    for code, value in zip(cc[:, j].tolist(), col_cells[q].tolist())
                    if code >= len(cats)
                ]
            extra = [f"#{k}" for k in range(len(cats), int(cc[:, j].max()) + 1)]
        else:
            extra = []
        whole = _whole([*cats, *(v for _, v in released)])
        lab = [_label(x, whole) for x in cats]
        for code, value in released:
            extra[code - len(cats)] = _label(value, whole)
        out.append(lab + extra)
    return out


def _size_keys(flow: np.ndarray) -> np.ndarray:
    """Each positive flow's size to :data:`TIE_DIGITS` significant digits as an int64 that orders
    like the flows (its decimal exponent, then its mantissa): equal keys, one size."""
    e = np.floor(np.log10(flow)).astype(np.int64) - (TIE_DIGITS - 1)
    mant = np.rint(flow / 10.0**e).astype(np.int64)
    over = mant >= 10**TIE_DIGITS  # 9.9996 rounds up to 10.00: one digit more
    mant[over] //= 10
    e[over] += 1
    return (e + 400) * 10 ** (TIE_DIGITS + 1) + mant


def top_flows(P, table: FrequencyTable, n: int = 15, col_codes=None, labels=None) -> pd.DataFrame:
    """The sizes of flow that move the most records in expectation, largest first.

    A flow is an entry off the diagonal, ``U0(m) P_mk`` expected records of cell m released as
    cell k; flows below :data:`NEGLIGIBLE` records (solver round-off) are left out.  Flows of the
    same size (to :data:`TIE_DIGITS` significant digits) are one line: a replacement design
    moves a unique record to hundreds of cells alike, and a list of those says nothing.

    Returns
    -------
    DataFrame
        At most ``n`` lines: ``from`` and ``to`` of one flow of that size (the first in the
        matrix's order; the cells' values in the order of ``table.qi``), ``changes`` naming
        each variable whose value changes (``roof: 4→2, walls: 3→2``), its ``records in cell``
        and ``probability``, ``expected records`` (of each flow of the line) and ``flows of
        this size``.
    """
    labels = labels if labels is not None else variable_labels(table, col_codes)
    d = len(table.qi)
    keys, counts, reps = [], [], []
    for frm, to, flow, r in _flows(P, table, col_codes):
        moved = (frm != to).any(axis=1) & (flow >= NEGLIGIBLE)
        frm, to, flow, r = frm[moved], to[moved], flow[moved], r[moved]
        # the n largest sizes of the whole are among each piece's n largest
        key, first, count = np.unique(_size_keys(flow), return_index=True, return_counts=True)
        top = slice(max(0, len(key) - n), None)
        i = first[top]
        keys.append(key[top])
        counts.append(count[top])
        reps.append((frm[i], to[i], flow[i], r[i]))
    if keys:
        key, count = np.concatenate(keys), np.concatenate(counts)
        frm, to, flow, r = (np.concatenate([p[i] for p in reps]) for i in range(4))
    else:
        key, count = np.empty(0, np.int64), np.empty(0, np.int64)
        frm, to = np.empty((0, d), np.int64), np.empty((0, d), np.int64)
        flow, r = np.empty(0), np.empty(0, np.int64)
    # one line per size over every piece: counts summed, the first piece's flow shown
    size, first, where = np.unique(key, return_index=True, return_inverse=True)
    total = np.bincount(where, weights=count, minlength=len(size)).astype(np.int64)
    order = first[::-1][:n]
    many = total[::-1][:n]

    def cell(code):
        return ", ".join(labels[j][code[j]] for j in range(d))

    def changes(a, b):
        return ", ".join(
            f"{table.qi[j]}: {labels[j][a[j]]}→{labels[j][b[j]]}" for j in range(d) if a[j] != b[j]
        )

    u = np.asarray(table.counts)[r[order]]
    return pd.DataFrame(
        {
            "from": [cell(frm[i]) for i in order],
            "to": [cell(to[i]) for i in order],
            "changes": [changes(frm[i], to[i]) for i in order],
            "records in cell": u,
            "probability": flow[order] / u,
            "expected records": flow[order],
            "flows of this size": many,
        }
    )


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a boolean array and each row's index among them (as
    ``np.unique(axis=0)``, through one integer per row when the rows fit in 62 bits: ten times
    faster on a million flows)."""
    d = rows.shape[1]
    if d > 62:
        sets, where = np.unique(rows, axis=0, return_inverse=True)
        return sets, where.ravel()
    bits = rows.astype(np.int64) @ (np.int64(1) << np.arange(d, dtype=np.int64))
    keys, where = np.unique(bits, return_inverse=True)
    sets = ((keys[:, None] >> np.arange(d, dtype=np.int64)) & 1).astype(bool)
    return sets, where.ravel()


def changed_together(P, table: FrequencyTable, n: int = 15, col_codes=None) -> pd.DataFrame:
    """The expected records per set of identifying variables that change together.

    Each flow ``U0(m) P_mk`` off the diagonal of at least :data:`NEGLIGIBLE` records counts for
    the set of variables in which cells m and k differ.  A design that changes one variable at a
    time and one that changes every variable at once move the same records very differently.

    Returns
    -------
    DataFrame
        ``variables changed`` (names in the order of ``table.qi``), ``variables`` (how many),
        ``expected records``, ``share of records`` (of n) and ``flows`` (nonzero entries of P),
        most records first; beyond ``n`` sets, one last line sums the others.
    """
    d = len(table.qi)
    sums: dict[tuple, list] = {}
    for frm, to, flow, _ in _flows(P, table, col_codes):
        diff = frm != to
        keep = diff.any(axis=1) & (flow > 0)  # every record counts in the totals
        if not keep.any():
            continue
        sets, where = _unique_rows(diff[keep])
        records = np.bincount(where, weights=flow[keep], minlength=len(sets))
        many = np.bincount(where, minlength=len(sets))
        for s, e, c in zip(map(tuple, sets.tolist()), records, many):
            acc = sums.setdefault(s, [0.0, 0])
            acc[0] += float(e)
            acc[1] += int(c)
    # a set whose records sum to round-off is not shown; every other sums all its flows
    rows = sorted(((k, v) for k, v in sums.items() if v[0] >= NEGLIGIBLE), key=lambda kv: -kv[1][0])
    lines = [
        (", ".join(str(table.qi[j]) for j in range(d) if s[j]), sum(s), e, c)
        for s, (e, c) in rows[:n]
    ]
    if len(rows) > n:
        rest = rows[n:]
        lines.append(
            (
                f"{len(rest)} other sets",
                None,
                sum(e for _, (e, _) in rest),
                sum(c for _, (_, c) in rest),
            )
        )
    nrec = float(table.n)
    return pd.DataFrame(
        {
            "variables changed": [x[0] for x in lines],
            "variables": pd.array([x[1] for x in lines], dtype="Int64"),
            "expected records": [x[2] for x in lines],
            "share of records": [x[2] / nrec if nrec else float("nan") for x in lines],
            "flows": [x[3] for x in lines],
        }
    )
