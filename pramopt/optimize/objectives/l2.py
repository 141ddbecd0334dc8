"""The exact L2 loss as the optimiser sees it: value and gradient, on dense or sparse designs.

The loss itself (:func:`pramopt.loss.l2_loss`) is the measure every result reports; this
module adds what the optimiser needs: the gradient (dense inverse), the Woodbury /
block-triangular form :class:`SparseL2` for large sparse designs, the closed form of block
designs, and :class:`L2Loss`, the :class:`~pramopt.optimize.objectives.Objective` that ties
them together.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...loss import as_dense, l2_loss
from . import l2_dense, l2_sparse


def l2_loss_and_grad(P, counts) -> tuple[float, np.ndarray]:
    """Exact L2 loss and its gradient with respect to every entry of P.

    With Q = P^-1, w = U0^T P and r_l = ||row_l(Q)||^2:
    d l2 / d P = (1/n^2) * (U0 r^T - 2 Q^T diag(w) Q Q^T).
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    Pd = as_dense(P)
    Q = np.linalg.inv(Pd)
    w = counts @ Pd
    r = np.einsum("ij,ij->i", Q, Q)
    f = (r @ w) / n**2 - 1.0 / n
    M = Q.T @ (w[:, None] * Q)
    grad = (np.outer(counts, r) - 2.0 * (M @ Q.T)) / n**2
    return float(f), grad


# --------------------------------------------------------------------------------------------
# Large sparse designs: diagonal plus a few receiver columns (Woodbury / block inverse)
# --------------------------------------------------------------------------------------------

#: Default singularity threshold of :class:`SparseL2` (see there).
SPARSE_RCOND = 1e-12

# Work arrays of the gradient are processed in pieces of about this many float64 entries.
_CHUNK = 1 << 21
# Pairs are processed in pieces of this many.
_PAIRS = 1 << 18
# Valued designs an evaluator keeps (each holds its active rows x receivers block).
_HELD = 2

#: Receivers from which :class:`SparseL2` with ``single=True`` works in single precision.
SINGLE_MIN_RECEIVERS = 1000
#: Largest 1-norm condition number of the receivers' block kept in single precision.  The
#: textbook bound on the inverse's relative error, ``cond * 6e-8``, is far above what the
#: census designs show (loss 6e-8 to 2.5e-7 and gradient 5e-7 to 2.6e-6 relative at condition
#: numbers of 1.2e4 to 2.8e4, benchmarks/README.md); at this limit it is still below 1%.
SINGLE_MAX_CONDITION = 1e5


def _same_matrix(A: sp.csr_matrix, B: sp.csr_matrix) -> bool:
    """Whether two canonical CSR matrices (sorted, no duplicates or stored zeros) are equal."""
    return (
        A.shape == B.shape
        and A.nnz == B.nnz
        and np.array_equal(A.indptr, B.indptr)
        and np.array_equal(A.indices, B.indices)
        and np.array_equal(A.data, B.data)
    )


def _rows_times_dense(A, rows, B, out):
    """``out[:] = A[rows] @ B`` for sparse ``A``, in row blocks; dense-ish blocks use BLAS."""
    step = max(1, _CHUNK // max(B.shape[1], 1))
    for s in range(0, rows.size, step):
        sub = A[rows[s : s + step]]
        if sub.nnz > 0.05 * sub.shape[0] * sub.shape[1]:
            np.matmul(sub.toarray(), B, out=out[s : s + step])
        else:
            out[s : s + step] = sub @ B


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

    (``Q Q^T = Dn^2 + QR QR^T`` since ``S^T Dn = 0``).  ``M`` comes from block
    back-substitution over the strongly connected components of ``P[R, R]``
    (:func:`.l2_dense.inverse`): at most ``O(r^3)``, much less when the components are small.
    Cost: that plus ``O(nnz(P[:, R]) r)`` for the loss, ``O(r^3)`` more for the first gradient
    request (``A QR^T = Z E^T``, :mod:`.l2_dense`), then ``O(1)`` per gradient entry in a
    receiver column and a sender's number of transitions in another; memory
    ``O(a r + nnz(P))`` (``a`` = number of active rows) plus work pieces of a few MB.  No
    ``K x K`` array is ever formed; ``QR`` is kept dense (``a x r``), which bounds the sizes
    this serves to ``a r`` in the tens of millions, except above
    :data:`~.l2_sparse.SPARSE_RECEIVERS` receivers while at most
    :data:`~.l2_sparse.SPARSE_DENSITY` of it is non-zero: ``M``, ``QR``, ``H`` and ``A`` are then
    sparse (:mod:`.l2_sparse`), with the same formulas.

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
    single : bool, optional
        Invert a dense receivers' block of at least :data:`SINGLE_MIN_RECEIVERS` cells in
        single precision (LAPACK's and BLAS's single-precision routines take about half the
        time, and the block half the memory) when its 1-norm condition number is at most
        :data:`SINGLE_MAX_CONDITION`, else in double.  The loss and gradient then carry a
        relative error of about the condition number times 6e-8 (sums are taken in double);
        for the refinement's trial points and steps, not for a reported loss.

    Attributes
    ----------
    loss : float
        The exact L2 loss, ``inf`` when ``P`` is singular.
    singular : bool
        Whether ``P`` was found singular.
    receivers : ndarray of int
        The receiver columns ``R`` (sorted).
    block_condition : float
        The exact 1-norm condition number of the receivers' block ``P[R, R]`` as inverted
        (``inf`` when singular or not formed: a sparse block).
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

    def __init__(self, P, counts, *, rcond: float = SPARSE_RCOND, single: bool = False):
        P = sp.csr_matrix(P, dtype=float, copy=True)
        P.sum_duplicates()
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
        diag = P.diagonal()
        # column k is a receiver iff it has a stored entry off the diagonal
        inR = np.bincount(P.indices, minlength=K) > (diag != 0)
        R = np.flatnonzero(inR)
        r = R.size
        self.receivers = R
        self._sparse = False
        self.singular = True
        self.block_condition = float("inf") if r else 1.0
        self.loss = float("inf")
        self._H: np.ndarray | None = None
        self._ZT: l2_dense.GradientBlock | None = None
        if not np.all(np.isfinite(P.data)):
            return
        scale = max(1.0, float(np.abs(P.data).max(initial=0.0)))
        if np.any(np.abs(diag[~inR]) <= rcond * scale):
            return
        Dn = np.zeros(K)
        Dn[~inR] = 1.0 / diag[~inR]
        # P[:, R] (K x r), then its active rows: R, then the other cells sending into R
        keep = inR[P.indices]
        indptr = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])[P.indptr]
        pos = np.cumsum(inR) - 1  # column k = R[pos[k]]
        PcR = sp.csr_matrix((P.data[keep], pos[P.indices[keep]], indptr), shape=(K, r))
        del keep, indptr
        senders = np.flatnonzero((np.diff(PcR.indptr) > 0) & ~inR)
        act = np.concatenate([R, senders])
        idx = np.full(K, act.size, dtype=np.intp)  # inactive cells -> a zero sentinel row
        idx[act] = np.arange(act.size)
        self._F = l2_dense.senders_rows(PcR[senders], Dn[senders])
        self._sparse = r > l2_sparse.SPARSE_RECEIVERS and not l2_sparse.surely_dense(
            PcR[R], act.size
        )
        if self._sparse:
            budget = l2_sparse.SPARSE_DENSITY * act.size * r
            try:
                QRs = l2_sparse.inverse_rows(PcR, R, self._F, rcond, budget=budget)
            except l2_sparse.TooDense:  # M alone is over the budget: the dense block below
                self._sparse = False
        if self._sparse:
            if QRs is None:
                return
            if QRs.nnz > l2_sparse.SPARSE_DENSITY * QRs.shape[0] * r:
                self._sparse = False  # too dense for sparse products to pay: the dense block
                QRd = QRs.toarray()
                norms = np.einsum("ij,ij->i", QRd[:-1], QRd[:-1])
                self._finish(P, counts, act, idx, Dn, QRd, norms)
            else:
                norms = QRs[:-1].multiply(QRs[:-1]).sum(axis=1)
                self._finish(P, counts, act, idx, Dn, QRs, norms)
            return
        if r:
            M = self._block_inverse(PcR[R], rcond, single and r >= SINGLE_MIN_RECEIVERS)
            if M is None:
                return
            # + a zero sentinel row for the inactive cells
            QR = np.empty((act.size + 1, r), dtype=M.dtype)
            QR[:r] = M
            del M
            F = self._F.astype(QR.dtype, copy=False)
            _rows_times_dense(F, np.arange(senders.size), QR[:r], out=QR[r:-1])
        else:
            QR = np.zeros((1, 0))
        QR[-1] = 0.0
        del PcR
        self._finish(P, counts, act, idx, Dn, QR, _row_norms(QR[:-1]))

    def _block_inverse(self, PRR, rcond: float, single: bool) -> np.ndarray | None:
        """``P[R, R]^-1`` (None: singular), in single precision where asked and its condition
        number is at most :data:`SINGLE_MAX_CONDITION`; ``block_condition`` is set."""
        if single:
            M = l2_dense.inverse(PRR, rcond, dtype=np.float32)
            cond = np.inf if M is None else l2_sparse.condition(PRR, M)
            if cond <= SINGLE_MAX_CONDITION:
                self.block_condition = cond
                return M
        M = l2_dense.inverse(PRR, rcond)
        if M is not None:
            self.block_condition = l2_sparse.condition(PRR, M)
        return M

    def _finish(self, P, counts, act, idx, Dn, QRx, norms) -> None:
        """Keep the factorisation (``QRx``: the active rows of ``QR`` and a zero row, dense or
        sparse) and value the loss (``norms``: the squared norms of those active rows)."""
        self._act, self._idx, self._Dn = act, idx, Dn
        self._QRx = QRx
        w = np.asarray(P.T @ counts).ravel()
        self._w = w
        rr = Dn**2
        rr[act] += np.asarray(norms).ravel()
        self._r = rr
        self.loss = float((rr @ w) / self.n**2 - 1.0 / self.n)
        self.singular = False

    # -- gradient ---------------------------------------------------------------------------
    def _ready(self):
        """Raise if singular; on first use form the gradient's block: ``H`` and the active rows
        of ``A`` (+ zero row) when the receivers' block is sparse, ``Z^T`` and ``E`` when it is
        dense (:mod:`.l2_dense`)."""
        if self.singular:
            raise np.linalg.LinAlgError("P is singular: the L2 loss is infinite")
        if self._H is None and self._sparse:
            r = self.receivers.size
            wa, s = self._w[self._act], self._act[r:]
            self._H, self._Ax = l2_sparse.products(self._QRx, wa, self._Dn[s], r)
        if self._ZT is None and not self._sparse:
            r = self.receivers.size
            M = self._QRx[:r]
            s = self._act[r:]
            self._ZT = l2_dense.GradientBlock(M, self._F, self._w[self._act], self._Dn[s])

    def h_diagonal(self) -> np.ndarray:
        """The diagonal of ``H = QR^T W QR`` (one entry per receiver)."""
        if self._sparse:
            self._ready()
            assert self._H is not None  # _ready() made it
            return np.asarray(self._H.diagonal())
        if self.singular:  # a dense block needs only M for it, not the gradient's block
            raise np.linalg.LinAlgError("P is singular: the L2 loss is infinite")
        r = self.receivers.size
        return l2_dense.h_diagonal(self._QRx[:r], self._F, self._w[self._act])

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
        The ``A QR^T`` term is non-zero only when both cells are active.  With a dense
        receivers' block it is read off ``Z E^T`` (:mod:`.l2_dense`), one entry of ``Z`` per
        stored entry of ``E``'s row; with a sparse one, by sparse row products.  Pairs are
        processed in pieces, so the extra memory is a few MB.
        """
        self._ready()
        rows = np.asarray(rows)
        cols = np.asarray(cols)
        if rows.shape != cols.shape:
            raise ValueError("rows and cols must have the same shape")
        shape = rows.shape
        rows, cols = rows.ravel(), cols.ravel()
        if rows.size and not (
            np.issubdtype(rows.dtype, np.integer) and np.issubdtype(cols.dtype, np.integer)
        ):
            raise TypeError("rows and cols must be integer arrays")
        if rows.size and (min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= self.K):
            raise IndexError("pair index out of range")
        if self._sparse:
            T = l2_sparse.pair_terms(self, rows, cols)
            return ((self._counts[rows] * self._r[cols] - 2.0 * T) / self.n**2).reshape(shape)
        Dn, w, r = self._Dn, self._w, self.receivers.size
        idx, QRx, ZT = self._idx, self._QRx, self._ZT
        assert ZT is not None  # _ready() made it
        T = np.zeros(rows.size)  # [Q^T W Q Q^T] at the pairs
        if not ZT.full:  # on the whole request: its pieces alone would each look small
            need = 0
            for lo in range(0, rows.size, _PAIRS):
                need += ZT.entries(idx[rows[lo : lo + _PAIRS]], idx[cols[lo : lo + _PAIRS]])
            ZT.plan(need)
        for lo in range(0, rows.size, _PAIRS):
            hi = min(lo + _PAIRS, rows.size)
            rw, cl = rows[lo:hi], cols[lo:hi]
            ir, ic = idx[rw], idx[cl]
            t = T[lo:hi]
            l2_sparse.diagonal_terms(t, rw, cl, ir, ic, Dn, w, r, QRx)
            t += ZT.pair_terms(ir, ic)  # A QR^T = Z E^T
            t *= -2.0
            t += self._counts[rw] * self._r[cl]
            t /= self.n**2
        return T.reshape(shape)

    def grad_columns(self, cols) -> np.ndarray:
        """Gradient block ``d loss / d P[:, cols]`` for all rows.

        Parameters
        ----------
        cols : array_like of int, shape (c,)
            Columns, e.g. candidate receiver columns in column generation.  The block is dense
            (``8 K c`` bytes) and costs ``O(a nnz(E[cols]))`` with a dense receivers' block
            (:mod:`.l2_dense`), ``O(a r c)`` at most with a sparse one: ask for columns in
            batches.

        Returns
        -------
        ndarray of float, shape (K, c)
        """
        self._ready()
        cols = np.atleast_1d(np.asarray(cols, dtype=np.intp))
        if cols.ndim != 1:
            raise ValueError("cols must be one-dimensional")
        if cols.size and (cols.min() < 0 or cols.max() >= self.K):
            raise IndexError("column index out of range")
        if self._sparse:
            T = l2_sparse.column_terms(self, cols)
            return (np.outer(self._counts, self._r[cols]) - 2.0 * T) / self.n**2
        K = self.K
        Dn, w = self._Dn, self._w
        Qc = self._QRx[self._idx[cols]]  # len(cols) x r
        T = np.zeros((K, cols.size))
        assert self._ZT is not None  # _ready() made it
        T[self._act] = self._ZT.columns(self._idx[cols])  # A QR^T = Z E^T
        T[self.receivers] += (Qc * (w[cols] * Dn[cols] ** 2)[:, None]).T
        T[cols, np.arange(cols.size)] += Dn[cols] ** 3 * w[cols]
        return (np.outer(self._counts, self._r[cols]) - 2.0 * T) / self.n**2

    def grad_support(self) -> sp.csr_matrix:
        """The gradient on the stored non-zeros of ``P``.

        Returns
        -------
        scipy.sparse.csr_matrix, shape (K, K)
            Same pattern as ``P`` (duplicates summed, stored zeros dropped).
        """
        self._ready()
        G = self._P.copy()
        rows = np.repeat(np.arange(self.K), np.diff(G.indptr))
        G.data = self.grad_at(rows, G.indices)
        return G


def _row_norms(A: np.ndarray) -> np.ndarray:
    """Squared norms of the rows of ``A``, summed in double precision (in pieces)."""
    out = np.empty(A.shape[0])
    step = max(1, _CHUNK // max(A.shape[1], 1))
    for lo in range(0, A.shape[0], step):
        out[lo : lo + step] = np.einsum(
            "ij,ij->i", A[lo : lo + step], A[lo : lo + step], dtype=np.float64
        )
    return out


def l2_loss_sparse(P, counts, *, rcond: float = SPARSE_RCOND) -> float:
    """Exact L2 loss of a sparse PRAM matrix, ``inf`` when singular (see :class:`SparseL2`).

    Equal to :func:`l2_loss` up to rounding, in ``O(r^3 + nnz(P[:, R]) r)`` time for ``r``
    receiver columns instead of ``O(K^3)``.
    """
    return SparseL2(P, counts, rcond=rcond).loss


def l2_loss_and_grad_sparse(
    P, counts, rows, cols, *, rcond: float = SPARSE_RCOND
) -> tuple[float, np.ndarray]:
    """Exact L2 loss and its gradient at the pairs ``(rows[i], cols[i])`` (see :class:`SparseL2`).

    Equal to ``(f, G[rows, cols])`` with ``f, G = l2_loss_and_grad(P, counts)`` up to rounding.
    Raises :class:`numpy.linalg.LinAlgError` when ``P`` is singular (as the dense version does).
    """
    s = SparseL2(P, counts, rcond=rcond)
    return s.loss, s.grad_at(rows, cols)


class Gradient:
    """A valued design's gradient, for pricing: ``gradient(cols)`` is the ``K x len(cols)``
    block (:meth:`SparseL2.grad_columns`), ``gradient.at(rows, cols)`` the entries at the pairs
    alone (:meth:`SparseL2.grad_at`).  Over a list of permitted transitions the pairs are a few
    hundred per column, where whole columns cost ``K`` entries each: on a 5-key census design
    3.2 s against 4.0 s for the same values (benchmarks/README.md)."""

    __slots__ = ("_s",)

    def __init__(self, s: SparseL2):
        self._s = s

    def __call__(self, cols) -> np.ndarray:
        return self._s.grad_columns(cols)

    def at(self, rows, cols) -> np.ndarray:
        return self._s.grad_at(rows, cols)


# --------------------------------------------------------------------------------------------
# The objective of the designer
# --------------------------------------------------------------------------------------------


class L2Loss:
    """The exact L2 loss as an :class:`~pramopt.optimize.objectives.Objective`."""

    name = "l2"

    def value(self, P, counts, loss: float | None = None) -> float:
        return l2_loss(P, counts) if loss is None else float(loss)

    def linear_cost(self, rows, cols) -> np.ndarray | None:
        return None

    def on_support(self, support, counts, sparse: bool, previous=None):
        counts = np.asarray(counts, dtype=float)
        if not sparse:

            def dense(x):
                f, G = l2_loss_and_grad(support.to_matrix(x).toarray(), counts)
                return f, G[support.rows, support.cols], (lambda cols: G[:, cols])

            return dense

        # the designs last valued, newest last, each with its matrix, so that a gradient reuses
        # the factorisation: a step values its trial point and then another one and may take
        # either, and the next support's first point is the last one taken on this support
        last: list = list(getattr(previous, "designs", ()))[-_HELD:]

        def matrix(x) -> sp.csr_matrix:
            P = support.to_matrix(np.asarray(x, dtype=float))
            P.sum_duplicates()
            P.eliminate_zeros()
            return P

        def held(P) -> int | None:
            return next((i for i, (Q, _) in enumerate(last) if _same_matrix(Q, P)), None)

        def design(x) -> SparseL2:
            P = matrix(x)
            i = held(P)
            if i is not None:
                last.append(last.pop(i))
                return last[-1][1]
            # single precision for a large receivers' block (SparseL2's ``single``), unless the
            # last design's block was near the limit: then double at once, not after a try
            cond = last[-1][1].block_condition if last else 1.0
            if len(last) >= _HELD:
                last.pop(0)  # before the next factorisation: memory holds _HELD at most
            # no dense K x K inverse
            s = SparseL2(P, counts, single=cond <= SINGLE_MAX_CONDITION / 2)
            last.append((P, s))
            return s

        def woodbury(x):
            s = design(x)
            last[:] = last[-1:]  # a gradient is asked at an accepted point: the others are done
            if s.singular:
                return float("inf"), None, None
            return s.loss, s.grad_at(support.rows, support.cols), Gradient(s)

        def keep(x) -> None:
            """Keep only ``x``'s design, if held: the next support starts there."""
            i = held(matrix(x))
            last[:] = [] if i is None else [last[i]]

        woodbury.designs = last  # type: ignore[attr-defined]
        woodbury.keep = keep  # type: ignore[attr-defined]
        woodbury.value = lambda x: design(x).loss  # type: ignore[attr-defined]
        return woodbury

    def curvature_on_support(self, support, counts, sparse: bool):
        from .l2_curvature import l2_curvature_on_support

        return l2_curvature_on_support(support, counts, sparse)

    def on_blocks(self, model, counts):
        counts = np.asarray(counts, dtype=float)

        def evaluate(z):
            f, g = block_loss_and_grad(model, z, counts)
            return f, g, None

        return evaluate


def block_loss_and_grad(model, z, counts) -> tuple[float, np.ndarray]:
    """Exact L2 loss of a block design and its gradient in z = (lambda, v), in O(K).

    In a block b, P_b = lambda I + 1 v^T and P_b^-1 = (I - 1 v^T)/lambda, so
    ||row_l(P^-1)||^2 = (1 - 2 v_l + |v_b|^2)/lambda^2 and w_l = (U0^T P)_l = lambda U0_l + v_l n_b,
    where n_b is the block's number of records.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    lam, v = model.split(np.asarray(z, dtype=float))
    b = model.block_of
    B = model.B
    nb = np.bincount(b, weights=counts, minlength=B)
    v2 = np.bincount(b, weights=v * v, minlength=B)
    lamk = lam[b]
    w = lamk * counts + v * nb[b]
    r = (1.0 - 2.0 * v + v2[b]) / lamk**2
    f = float(r @ w) / n**2 - 1.0 / n
    A = np.bincount(b, weights=w, minlength=B)  # sum of w over the block
    g_lam = np.bincount(b, weights=-2.0 * r * w / lamk + r * counts, minlength=B)
    g_v = (-2.0 * w + 2.0 * v * A[b]) / lamk**2 + r * nb[b]
    return f, np.concatenate([g_lam, g_v]) / n**2


#: The exact L2 loss, the designer's objective.
L2 = L2Loss()
