"""Information loss of a PRAM matrix (Cator, Hensbergen & Rozenholc, Section 3).

The exact L2 loss of the unbiased estimator (4) is

    l2(P) = (1/n^2) * sum_l ||row_l(P^-1)||^2 * (U0^T P)_l  -  1/n,

which does not depend on the non-identifying variables.  Its first-order term at P = I is
``2/n^2`` times the expected number of changed records, the linear surrogate.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp


def _dense(P) -> np.ndarray:
    return P.toarray() if sp.issparse(P) else np.asarray(P, dtype=float)


def expected_changes(P, counts) -> float:
    """Expected number of records whose identifying values change: sum_m U0(m) (1 - P_mm)."""
    diag = P.diagonal() if sp.issparse(P) else np.diag(np.asarray(P, dtype=float))
    counts = np.asarray(counts, dtype=float)
    return float(counts @ (1.0 - diag))


def l2_loss(P, counts) -> float:
    """Exact expected squared L2 error of the unbiased estimator (end of Section 3).

    Returns ``inf`` for a singular (or numerically singular) matrix.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    Pd = _dense(P)
    try:
        with warnings.catch_warnings():  # an exactly singular P is reported as inf, not warned
            warnings.simplefilter("ignore", sla.LinAlgWarning)
            lu = sla.lu_factor(Pd, check_finite=True)
    except (ValueError, np.linalg.LinAlgError):
        return float("inf")
    if np.any(np.abs(np.diag(lu[0])) < 1e-14 * max(1.0, np.abs(Pd).max())):
        return float("inf")
    Q = sla.lu_solve(lu, np.eye(Pd.shape[0]))
    w = counts @ Pd
    r = np.einsum("ij,ij->i", Q, Q)
    return float((r @ w) / n**2 - 1.0 / n)


def l2_loss_and_grad(P, counts) -> tuple[float, np.ndarray]:
    """Exact L2 loss and its gradient with respect to every entry of P.

    With Q = P^-1, w = U0^T P and r_l = ||row_l(Q)||^2:
    d l2 / d P = (1/n^2) * (U0 r^T - 2 Q^T diag(w) Q Q^T).
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    Pd = _dense(P)
    Q = np.linalg.inv(Pd)
    w = counts @ Pd
    r = np.einsum("ij,ij->i", Q, Q)
    f = (r @ w) / n**2 - 1.0 / n
    M = Q.T @ (w[:, None] * Q)
    grad = (np.outer(counts, r) - 2.0 * (M @ Q.T)) / n**2
    return float(f), grad


def condition_number(P) -> float:
    """2-norm condition number of P (inf when singular)."""
    try:
        return float(np.linalg.cond(_dense(P)))
    except np.linalg.LinAlgError:
        return float("inf")


# --------------------------------------------------------------------------------------------
# Large sparse designs: diagonal plus a few receiver columns (Woodbury / block inverse)
# --------------------------------------------------------------------------------------------

#: Default singularity threshold of :class:`SparseL2` (see there).
SPARSE_RCOND = 1e-12

# Work arrays of the gradient are processed in pieces of about this many float64 entries.
_CHUNK = 1 << 21


class SparseL2:
    r"""Exact L2 loss of a sparse PRAM matrix and its gradient, without a dense inverse.

    Same quantities as :func:`l2_loss` and :func:`l2_loss_and_grad` (Cator, Hensbergen &
    Rozenholc, end of Section 3), for matrices whose off-diagonal entries lie in a few
    *receiver* columns ``R`` (``r = |R|`` much smaller than ``K``).  The matrix is factorised
    once; the loss, the gradient at chosen pairs and gradient column blocks are then read off.

    Method.  Let ``D'`` be diagonal with ``D'_kk = P_kk`` for ``k`` not in ``R`` and ``1`` on
    ``R``.  Then ``P = D' + E_R S^T`` with ``E_R = (P - D')[:, R]`` and ``S = I[:, R]``, and the
    Woodbury identity gives ``Q = P^-1 = D'^-1 - U M S^T`` with ``U = D'^-1 E_R`` and
    ``M = (I_r + U[R, :])^-1``.  Because columns outside ``R`` carry only their diagonal
    entry, ``P[R, not R] = 0`` and ``I_r + U[R, :] = P[R, R]``: this is block-triangular
    inversion, ``M = P[R, R]^-1``.  Hence ``Q = Dn + QR S^T`` with
    ``Dn = diag(1/P_kk off R, 0 on R)`` and ``QR = Q[:, R] = S - U M``, whose row ``k`` is
    ``M[j]`` for ``k = R[j]``, ``-P[k, R] M / P_kk`` for other ``k`` sending into ``R``, and zero
    otherwise.  Only the non-zero rows of ``QR`` (the *active* rows) are stored.  With
    ``w = U0^T P`` and ``r_l = ||row_l(Q)||^2 = Dn_l^2 + ||QR[l]||^2``::

        loss = r . w / n^2 - 1/n
        grad = (U0 r^T - 2 Q^T W Q Q^T) / n^2,      W = diag(w)
        Q^T W Q Q^T = A QR^T + Dn^3 W + S QR^T W Dn^2,   A = Dn W QR + S H,  H = QR^T W QR

    (``Q Q^T = Dn^2 + QR QR^T`` since ``S^T Dn = 0``).  Cost: ``O(r^3 + nnz(P[:, R]) r)`` for
    the loss, ``O(a r^2)`` more for the first gradient request (``a`` = number of active
    rows), memory ``O(a r)``; no ``K x K`` array is ever formed.

    Parameters
    ----------
    P : scipy.sparse matrix or array_like, shape (K, K)
        The PRAM matrix (rows: true cells, columns: released cells).  Row-stochasticity is
        not required; the loss is the same function of the entries as :func:`l2_loss`.
        Stored zeros are ignored.
    counts : array_like, shape (K,)
        ``U0``: the number of records in each cell (``n = counts.sum()`` must be positive).
    rcond : float, optional
        Singularity threshold.  ``P`` is treated as singular (loss ``inf``) when it has a
        non-finite entry, when a diagonal entry outside ``R`` satisfies
        ``|P_kk| <= rcond * max(1, max|P|)`` (the column ``k`` is then (numerically) zero), or
        when the LAPACK estimate of the reciprocal 1-norm condition number of ``P[R, R]`` is
        below ``rcond``.  At the default ``1e-12`` the loss of such a matrix would exceed
        about ``1e24 / n^2`` and carry few correct digits anyway.

    Attributes
    ----------
    loss : float
        The exact L2 loss, ``inf`` when ``P`` is singular.
    singular : bool
        Whether ``P`` was found singular.
    receivers : ndarray of int
        The receiver columns ``R`` (sorted).
    K, n : int, float
        Number of cells, number of records.

    Notes
    -----
    All gradient entries are partial derivatives of the loss as a function of the ``K^2``
    entries of ``P`` (as in :func:`l2_loss_and_grad`), also at pairs outside the support of
    ``P``; projecting onto row-stochastic directions is the caller's business.  Gradient
    methods raise :class:`numpy.linalg.LinAlgError` when ``P`` is singular.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> P = sp.csr_matrix(np.array([[0.9, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.2, 0.8]]))
    >>> f = SparseL2(P, [5, 3, 2])
    >>> bool(np.isclose(f.loss, l2_loss(P, [5, 3, 2])))
    True
    >>> f.grad_at([0, 2], [1, 1]).shape
    (2,)
    """

    def __init__(self, P, counts, *, rcond: float = SPARSE_RCOND):
        P = sp.csr_matrix(P, dtype=float, copy=True)
        P.eliminate_zeros()
        K = P.shape[0]
        if P.shape != (K, K):
            raise ValueError(f"P must be square, got shape {P.shape}")
        counts = np.asarray(counts, dtype=float).ravel()
        if counts.shape != (K,):
            raise ValueError(f"counts must have length {K}, got {counts.shape[0]}")
        self.K = K
        self.n = float(counts.sum())
        if not self.n > 0:
            raise ValueError("counts must sum to a positive number")
        self._counts = counts
        self._P = P
        coo = P.tocoo()
        off = coo.row != coo.col
        R = np.unique(coo.col[off]).astype(np.intp)
        self.receivers = R
        self.singular = True
        self.loss = float("inf")
        self._H = None
        if not np.all(np.isfinite(P.data)):
            return
        r = R.size
        inR = np.zeros(K, dtype=bool)
        inR[R] = True
        diag = P.diagonal()
        scale = max(1.0, float(np.abs(P.data).max(initial=0.0)))
        if np.any(np.abs(diag[~inR]) <= rcond * scale):
            return
        Dn = np.zeros(K)
        Dn[~inR] = 1.0 / diag[~inR]
        PcR = P[:, R].tocsr()  # K x r, the only off-diagonal part
        nnz_row = np.diff(PcR.indptr)
        senders = np.flatnonzero((nnz_row > 0) & ~inR)
        if r:
            PRR = PcR[R].toarray()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lu, piv = sla.lu_factor(PRR, check_finite=False)
                rc, info = sla.lapack.dgecon(lu, np.abs(PRR).sum(axis=0).max(), norm="1")
            if info != 0 or not rc >= rcond:
                return
            M = sla.lu_solve((lu, piv), np.eye(r), check_finite=False)
            QS = -(Dn[senders, None] * (PcR[senders] @ M))
            QR = np.vstack([M, QS])
        else:
            QR = np.zeros((0, 0))
        act = np.concatenate([R, senders])  # QR row i belongs to cell act[i]; R first
        idx = np.full(K, act.size, dtype=np.intp)  # inactive cells -> a zero sentinel row
        idx[act] = np.arange(act.size)
        self._act, self._idx, self._Dn = act, idx, Dn
        self._QRx = np.vstack([QR, np.zeros((1, r))])
        w = np.asarray(P.T @ counts).ravel()
        self._w = w
        rr = Dn**2
        rr[act] += np.einsum("ij,ij->i", QR, QR)
        self._r = rr
        self.loss = float((rr @ w) / self.n**2 - 1.0 / self.n)
        self.singular = False

    # -- gradient ---------------------------------------------------------------------------
    def _ready(self):
        if self.singular:
            raise np.linalg.LinAlgError("P is singular: the L2 loss is infinite")
        if self._H is None:
            r = self.receivers.size
            QR = self._QRx[:-1]
            wa = self._w[self._act]
            H = QR.T @ (wa[:, None] * QR)
            A = np.empty_like(self._QRx)
            A[:r] = H
            s = self._act[r:]
            A[r:-1] = (self._Dn[s] * wa[r:])[:, None] * QR[r:]
            A[-1] = 0.0
            self._H, self._Ax = H, A

    def _extra_at(self, rows, cols):
        """The diagonal part Dn^3 W + S QR^T W Dn^2 of Q^T W Q Q^T at pairs."""
        Dn, w, r = self._Dn, self._w, self.receivers.size
        out = np.where(rows == cols, Dn[cols] ** 3 * w[cols], 0.0)
        j = self._idx[rows]
        inR = j < r
        if np.any(inR):
            c = cols[inR]
            out[inR] += self._QRx[self._idx[c], j[inR]] * w[c] * Dn[c] ** 2
        return out

    def grad_at(self, rows, cols) -> np.ndarray:
        """Gradient entries ``d loss / d P[rows[i], cols[i]]``.

        Parameters
        ----------
        rows, cols : array_like of int, same shape
            The pairs; any pairs, inside or outside the support of ``P``.

        Returns
        -------
        ndarray of float, same shape as ``rows``

        Notes
        -----
        Columns requested by many pairs (at least ``a / 8`` of them, ``a`` = number of active
        rows) are evaluated as matrix products against all active rows; the remaining pairs
        by row-wise dot products, in pieces.  Memory stays ``O(a r)`` plus the output.
        """
        self._ready()
        rows = np.asarray(rows, dtype=np.intp)
        cols = np.asarray(cols, dtype=np.intp)
        if rows.shape != cols.shape:
            raise ValueError("rows and cols must have the same shape")
        shape = rows.shape
        rows, cols = rows.ravel(), cols.ravel()
        if rows.size and (min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= self.K):
            raise IndexError("pair index out of range")
        T = self._extra_at(rows, cols)
        idx, QRx, Ax = self._idx, self._QRx, self._Ax
        a = self._act.size
        ir, ic = idx[rows], idx[cols]
        live = np.flatnonzero((ir < a) & (ic < a))  # the A QR^T term vanishes elsewhere
        if live.size:
            per_col = np.bincount(ic[live], minlength=a)
            blockcol = per_col * 8 >= a
            use_block = blockcol[ic[live]]
            self._dots_block(T, live[use_block], ir, ic, np.flatnonzero(blockcol))
            self._dots_pairs(T, live[~use_block], ir, ic)
        G = (self._counts[rows] * self._r[cols] - 2.0 * T) / self.n**2
        return G.reshape(shape)

    def _dots_pairs(self, T, sel, ir, ic):
        r = self.receivers.size
        step = max(1, _CHUNK // max(r, 1))
        for s in range(0, sel.size, step):
            p = sel[s:s + step]
            T[p] += np.einsum("ij,ij->i", self._Ax[ir[p]], self._QRx[ic[p]])

    def _dots_block(self, T, sel, ir, ic, bcols):
        if not sel.size:
            return
        a, r = self._act.size, self.receivers.size
        pos = np.full(a, -1, dtype=np.intp)
        pos[bcols] = np.arange(bcols.size)
        pc = pos[ic[sel]]
        order = np.argsort(pc, kind="stable")
        sel, pc = sel[order], pc[order]
        step = max(1, _CHUNK // max(a, 1))
        A = self._Ax[:-1]
        for s in range(0, bcols.size, step):
            lo, hi = np.searchsorted(pc, [s, s + step])
            if lo == hi:
                continue
            B = A @ self._QRx[bcols[s:s + step]].T  # a x chunk
            p = sel[lo:hi]
            T[p] += B[ir[p], pc[lo:hi] - s]

    def grad_columns(self, cols) -> np.ndarray:
        """Gradient block ``d loss / d P[:, cols]`` for all rows, shape ``(K, len(cols))``.

        Meant for column generation (candidate receiver columns); the caller chooses how many
        columns to ask for at once (the block is dense, ``8 K len(cols)`` bytes).
        """
        self._ready()
        cols = np.atleast_1d(np.asarray(cols, dtype=np.intp))
        if cols.ndim != 1:
            raise ValueError("cols must be one-dimensional")
        if cols.size and (cols.min() < 0 or cols.max() >= self.K):
            raise IndexError("column index out of range")
        K, a, r = self.K, self._act.size, self.receivers.size
        Dn, w = self._Dn, self._w
        Qc = self._QRx[self._idx[cols]]  # len(cols) x r
        T = np.zeros((K, cols.size))
        T[self._act] = self._Ax[:-1] @ Qc.T
        T[self.receivers] += (Qc * (w[cols] * Dn[cols] ** 2)[:, None]).T
        T[cols, np.arange(cols.size)] += Dn[cols] ** 3 * w[cols]
        return (np.outer(self._counts, self._r[cols]) - 2.0 * T) / self.n**2

    def grad_support(self) -> sp.csr_matrix:
        """The gradient on the stored non-zeros of ``P``, as a CSR matrix of the same pattern."""
        self._ready()
        G = self._P.copy()
        rows = np.repeat(np.arange(self.K), np.diff(G.indptr))
        G.data = self.grad_at(rows, G.indices)
        return G


def l2_loss_sparse(P, counts, *, rcond: float = SPARSE_RCOND) -> float:
    """Exact L2 loss of a sparse PRAM matrix, ``inf`` when singular (see :class:`SparseL2`).

    Equal to :func:`l2_loss` up to rounding, in ``O(r^3 + nnz(P[:, R]) r)`` time for ``r``
    receiver columns instead of ``O(K^3)``.
    """
    return SparseL2(P, counts, rcond=rcond).loss


def l2_loss_and_grad_sparse(P, counts, rows, cols, *, rcond: float = SPARSE_RCOND
                            ) -> tuple[float, np.ndarray]:
    """Exact L2 loss and its gradient at the pairs ``(rows[i], cols[i])`` (see :class:`SparseL2`).

    Equal to ``(f, G[rows, cols])`` with ``f, G = l2_loss_and_grad(P, counts)`` up to rounding.
    Raises :class:`numpy.linalg.LinAlgError` when ``P`` is singular (as the dense version does).
    """
    s = SparseL2(P, counts, rcond=rcond)
    return s.loss, s.grad_at(rows, cols)
