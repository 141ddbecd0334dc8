"""Which rows a refinement QP imposes at first, and which of the others its solution violates.

A QP of the refinement keeps the linear programs' rows: the rows' sums, C1's denominators (an
auxiliary column each, defined by one equality row) and C1's rows.  Each transition enters the
denominator of every combination its column is in, so the denominators' rows make one dense block
of the interior point's factorisation, and its cost grows with the cube of their number.  Most of
C1's rows keep a wide slack inside the trust region, and a denominator that only such rows use need
not be in the QP at all.

So the QP is first solved with the inequality rows whose slack at the centre is at most
:data:`SLACK` (with every other row that shares one of their auxiliary columns), the auxiliary
columns those rows use and the rows that define them.  Every row left out is then evaluated at the
solution (the left-out auxiliary columns from their defining rows, which must also stay within
their bounds); the violated ones are added and the QP solved again, until none is violated.  The
rows left out are then slack at the solution, so it is the whole QP's (a convex program: its KKT
conditions hold with zero multipliers on them).  After :data:`ROUNDS` rounds the whole QP is
solved.  :data:`SLACK` changes the time only, never the solution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Rows", "first_rows", "violated", "SLACK", "ROUNDS"]

#: An inequality row whose slack at the centre is above this is left out at first.
SLACK = 0.2
#: Rounds of added rows before the whole QP is solved.
ROUNDS = 3


@dataclass
class Rows:
    """The rows and columns a QP imposes (masks over the program's) and how to rebuild the rest."""

    rows: np.ndarray
    cols: np.ndarray
    defining: np.ndarray  # per auxiliary column: its defining equality row (-1: none)
    nx: int
    need: np.ndarray | None = None  # auxiliary columns kept whatever the rows (out of bounds once)

    @property
    def whole(self) -> bool:
        return bool(self.rows.all() and self.cols.all())


def _defining_rows(A: sp.csr_matrix, program, nx: int) -> np.ndarray:
    """Per auxiliary column, an equality row in which it is the only auxiliary column (-1: none,
    or the column has a cost: it is then never left out)."""
    n_aux = A.shape[1] - nx
    out = np.full(n_aux, -1, dtype=np.int64)
    if n_aux == 0:
        return out
    aux = sp.csr_matrix(A[:, nx:])
    eq = program.row_lo == program.row_hi
    single = eq & (np.diff(aux.indptr) == 1)
    r = np.flatnonzero(single)
    out[aux.indices[aux.indptr[r]]] = r
    out[program.cost[nx:] != 0] = -1
    return out


def _values(A: sp.csr_matrix, program, x, defining: np.ndarray) -> np.ndarray:
    """Every column's value at ``x``: the auxiliary ones from their defining rows (nan: none)."""
    nx = x.size
    y = np.concatenate([x, np.full(A.shape[1] - nx, np.nan)])
    ok = defining >= 0
    r = defining[ok]
    rows = A[r]
    own = np.asarray(rows[:, nx:][np.arange(r.size), np.flatnonzero(ok)]).ravel()
    y[nx + np.flatnonzero(ok)] = (program.row_lo[r] - rows[:, :nx] @ x) / own
    return y


def _slack(A, program, y) -> np.ndarray:
    """Each row's slack at ``y`` (-inf where a column it uses has no value)."""
    ay = A @ np.nan_to_num(y, nan=0.0)
    unknown = (abs(A) @ np.isnan(y).astype(float)) > 0
    with np.errstate(invalid="ignore"):
        s = np.minimum(program.row_hi - ay, ay - program.row_lo)
    s[unknown] = -np.inf
    return s


def first_rows(program, center, A: sp.csr_matrix) -> Rows:
    """The rows and columns of the first QP (all of them without a centre); ``A`` is the
    program's matrix in CSR form."""
    nx = program.n_x
    m, n = A.shape
    defining = _defining_rows(A, program, nx)
    everything = Rows(np.ones(m, bool), np.ones(n, bool), defining, nx)
    if center is None or not (defining >= 0).any():
        return everything
    y = _values(A, program, np.asarray(center, dtype=float), defining)
    eq = program.row_lo == program.row_hi
    rows = eq | ~(_slack(A, program, y) > SLACK)
    rows[defining[defining >= 0]] = False  # back below, where a kept row needs the column
    out = _closed(A, Rows(rows, np.ones(n, bool), defining, nx))
    # worth it only where a part of the denominators goes
    return everything if out.cols.all() else out


def _closed(A: sp.csr_matrix, r: Rows) -> Rows:
    """``r`` with every row that shares an auxiliary column with a kept inequality row, the
    auxiliary columns kept rows use and their defining rows."""
    nx = r.nx
    aux = sp.csr_matrix(A[:, nx:])
    droppable = r.defining >= 0
    is_def = np.zeros(A.shape[0], bool)
    is_def[r.defining[droppable]] = True
    rows = r.rows & ~is_def
    used = np.asarray(abs(aux[rows]).sum(axis=0)).ravel() > 0
    # the other rows of those columns (C1: every row of a kept group), defining rows aside
    rows |= ((abs(aux) @ used.astype(float)) > 0) & ~is_def
    used = np.asarray(abs(aux[rows]).sum(axis=0)).ravel() > 0
    keep_aux = used | ~droppable | (r.need if r.need is not None else False)
    rows |= np.isin(np.arange(A.shape[0]), r.defining[keep_aux & droppable])
    cols = np.concatenate([np.ones(nx, bool), keep_aux])
    return Rows(rows, cols, r.defining, nx, r.need)


def violated(program, r: Rows, x, A: sp.csr_matrix) -> Rows | None:
    """The rows after a solution ``x`` of the QP over ``r``: ``r`` with the violated rows left out
    added (and what they need), or None when none is violated; ``A`` as for :func:`first_rows`."""
    y = _values(A, program, np.asarray(x, dtype=float), r.defining)
    late = ~r.rows & ~(_slack(A, program, y) >= 0)
    is_def = np.zeros(A.shape[0], bool)
    is_def[r.defining[r.defining >= 0]] = True
    late &= ~is_def  # a defining row holds by the column's value
    # a left-out auxiliary column outside its bounds (C1's denominators are >= 0) comes back
    nx = r.nx
    aux = y[nx:]
    with np.errstate(invalid="ignore"):
        out = ~r.cols[nx:] & ~((aux >= program.col_lo[nx:]) & (aux <= program.col_hi[nx:]))
    if not late.any() and not out.any():
        return None
    need = out if r.need is None else (r.need | out)
    return _closed(A, Rows(r.rows | late, r.cols, r.defining, nx, need))
