"""The gradient of :class:`~.l2.SparseL2` with a dense receivers' block, through ``G = M M^T``.

:class:`~.l2.SparseL2` writes ``QR = Q[:, R] = E M`` on its active rows, with ``M = P[R, R]^-1``
and ``E = [I_r; F]``, ``F = -Dn_s P[s, R]`` (a sender's row of ``F`` holds its few transitions
into ``R``).  The gradient's matrix ``A QR^T`` (``A = Dn W QR + S H``, ``H = QR^T W QR``) is then
``Z E^T`` with::

    H = M^T C M,   C = E^T W E = W_R + F^T W_s F   (r x r, sparse)
    Z[R] = H M^T = M^T (C G),   Z[s] = Dn_s W_s F G,   G = M M^T.

``Z`` costs a symmetric product and one ``r x r x r`` product (that one only when pricing asks for
whole columns, :class:`GradientBlock`), and a gradient entry then costs
``nnz(E_j)`` (one entry for a receiver column, a sender's few transitions otherwise).  Forming
``A`` from ``H = QR^T W QR`` instead costs ``O(a r^2)`` and each entry ``O(r)``: at census scale,
where the active rows ``a`` are two or three times ``r`` and pricing asks for millions of
entries, that is what each refinement step spent its time on (benchmarks/README.md).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from . import l2_sparse

__all__ = ["inverse", "senders_rows", "weights_block", "GradientBlock", "pair_terms", "h_diagonal"]

#: Entries of ``E`` gathered at a time by :func:`pair_terms`.
_GATHER = 1 << 21

#: How many of BLAS's multiply-adds one multiply-add of a gathered dot product costs: an entry
#: of ``Z[R]`` read off its two factors (``O(r)`` gathered) against the whole of ``Z[R]`` (one
#: ``r x r x r`` product).  Measured 70 on a 5-key census design (4,267 receivers, 2 cores:
#: 0.41e9 gathered against 29e9 per second, benchmarks/README.md).
GATHER_SLOWDOWN = 64


def inverse(PRR: sp.csr_matrix, rcond: float, dtype=np.float64) -> np.ndarray | None:
    """``M = P[R, R]^-1`` (dense, row-major, of ``dtype``) by block back-substitution, or None
    when singular.

    Row ``i`` of ``P M = I`` reads ``sum_j P_ij M[j] = e_i``: the rows of ``M`` of one strongly
    connected component ``S`` of ``P[R, R]``'s graph follow from those of the components it
    sends into, ``M[S] = P_SS^-1 (I[S] - P[S, out] M[out])``.  Components are taken level by
    level from the sinks up (a level's components send only into lower levels), all the
    single cells of a level in one sparse product.  On census designs most components are
    single cells and the largest holds a fraction of ``R``, so this costs a fraction of a dense
    inversion's ``O(r^3)``; at worst (one component) it is one.

    Singular: a non-finite entry, an exactly singular block, or the exact 1-norm condition
    number ``||P[R, R]||_1 ||M||_1`` (both at hand) above ``1 / rcond``.
    """
    PRR = sp.csr_matrix(PRR)
    r = PRR.shape[0]
    M = np.zeros((r, r), dtype=dtype)
    if r == 0:
        return M
    label, level, size, out = l2_sparse.components(PRR)
    # products with M in M's precision (no upcast copy of M)
    out = out.astype(dtype, copy=False)
    diag = PRR.diagonal()
    for lv in range(int(level.max()) + 1):
        at = np.flatnonzero(level == lv)
        rhs = -np.asarray(out[at] @ M) if out[at].nnz else np.zeros((at.size, r), dtype=dtype)
        rhs[np.arange(at.size), at] += 1.0
        single = size[at] == 1
        if np.any(diag[at[single]] == 0.0):
            return None
        M[at[single]] = rhs[single] / diag[at[single], None]
        for comp in np.unique(label[at[~single]]):
            k = np.flatnonzero(label[at] == comp)
            S = at[k]
            inv = _inverse_block(PRR[S][:, S].toarray(order="F").astype(dtype, order="F"))
            if inv is None:  # exactly singular: a zero pivot
                return None
            # the right-hand side is I on the component's own columns (no cell it sends into
            # reaches back into it); elsewhere only the columns it reaches are nonzero, and a
            # large component at a low level reaches a fraction of R
            M[np.ix_(S, S)] = inv
            b = rhs[k]
            b[:, S] = 0.0
            cols = np.flatnonzero(np.any(b != 0.0, axis=0))
            if cols.size:
                M[np.ix_(S, cols)] = inv @ b[:, cols]
    if not np.all(np.isfinite(M)):
        return None
    if not l2_sparse.well_conditioned(PRR, M, rcond):
        return None
    return M


def _inverse_block(A: np.ndarray) -> np.ndarray | None:
    """``A^-1`` by LAPACK's ``getrf`` and ``getri`` (about 2 n^3 operations, where an LU and a
    solve for the n columns of I cost 8/3 n^3), or None when a pivot is exactly zero; ``A`` is
    overwritten."""
    getrf, getri, lwork = sla.get_lapack_funcs(("getrf", "getri", "getri_lwork"), (A,))
    lu, piv, info = getrf(A, overwrite_a=True)
    if info != 0:
        return None
    size, info = lwork(A.shape[0])
    inv, info = getri(lu, piv, lwork=max(1, int(size)), overwrite_lu=True)
    return inv if info == 0 else None


def senders_rows(PcR_s: sp.csr_matrix, Dn_s) -> sp.csr_matrix:
    """``F = -Dn_s P[s, R]``: the senders' rows of ``E``."""
    return sp.csr_matrix(sp.diags(-np.asarray(Dn_s, dtype=float)) @ PcR_s)


class GradientBlock:
    """``Z^T`` (columns: the active rows, then a zero column) and ``E`` (its rows likewise),
    with ``Z[R]`` formed only when many of its entries are asked for.

    Parameters
    ----------
    M : ndarray, shape (r, r)
        ``P[R, R]^-1``.
    F : scipy.sparse.csr_matrix, shape (a - r, r)
        The senders' rows of ``E`` (:func:`senders_rows`).
    wa : ndarray, shape (a,)
        ``w = U0^T P`` on the active rows (receivers first).
    Dn_s : ndarray, shape (a - r,)
        ``1 / P_kk`` of the senders.

    Notes
    -----
    ``G`` is one symmetric product and ``Z[s] = Dn_s W_s F G`` a sparse one.  An entry of
    ``Z[R] = M^T C G`` is ``(C M)[:, p] . G[:, l]``: the gradient on a refinement's support
    needs a few per receiver, ``O(r)`` each, where the whole of ``Z[R]`` costs an ``r x r x r``
    product; pricing, which asks for whole columns, forms it once (:meth:`columns`).  ``Z`` is
    kept transposed (``r x (a + 1)``, row-major) so that a block of its columns
    ``E[cols] @ Z^T`` is a sparse times row-major dense product.
    """

    def __init__(self, M: np.ndarray, F: sp.csr_matrix, wa, Dn_s):
        r = M.shape[0]
        wa = np.asarray(wa, dtype=float)
        self.r = r
        self.G: np.ndarray | None = M @ M.T  # one array times its transpose: symmetric product
        # the sparse factors in M's precision, so that no product upcasts a dense block
        C = weights_block(F, wa).astype(M.dtype, copy=False)
        F = F.astype(M.dtype, copy=False)
        # (C M)^T = M^T C, row-major: row p is Z[R][p, l]'s left factor
        self.CMT: np.ndarray | None = np.ascontiguousarray(np.asarray(C @ M).T)
        # its first r columns: Z[R]^T, when formed
        self.ZT = np.empty((r, r + F.shape[0] + 1), dtype=M.dtype)
        step = max(1, _GATHER // max(r, 1))  # (F G)^T in pieces: no (a - r) x r temporary
        for lo in range(0, F.shape[0], step):
            hi = min(lo + step, F.shape[0])
            self.ZT[:, r + lo : r + hi] = np.asarray(F[lo:hi] @ self.G).T
        self.ZT[:, r:-1] *= Dn_s * wa[r:]
        self.ZT[:, -1] = 0.0
        self.full = False
        E = sp.vstack(
            [sp.identity(r, format="csr", dtype=M.dtype), F, sp.csr_matrix((1, r), dtype=M.dtype)],
            format="csr",
        )
        E.sort_indices()
        self.E = E

    def form(self) -> None:
        """Form ``Z[R]^T = G C M`` (G and C symmetric) and drop what only the entries needed."""
        if not self.full:
            assert self.G is not None and self.CMT is not None
            np.matmul(self.G, self.CMT.T, out=self.ZT[:, : self.r])  # no r x r temporary
            self.full = True
            self.G = self.CMT = None

    def entries(self, ir, ic) -> int:
        """How many products of ``Z[R]``'s two factors the pairs ``(ir, ic)`` need unformed."""
        rec = np.asarray(ir, dtype=np.intp) < self.r
        return int(np.diff(self.E.indptr)[np.asarray(ic, dtype=np.intp)[rec]].sum())

    def plan(self, entries: int) -> None:
        """Form ``Z[R]`` now if ``entries`` (:meth:`entries`, summed over every piece of a
        request) cost more gathered than the whole block does."""
        # gathered dot products of length r cost far more per operation than the r^3 product
        if not self.full and entries * GATHER_SLOWDOWN > self.r**2:
            self.form()

    def pair_terms(self, ir, ic) -> np.ndarray:
        """``Z[ir[i]] . E[ic[i]]`` for every pair (positions among the active rows); the caller
        plans (:meth:`plan`) on the whole request first."""
        ir = np.asarray(ir, dtype=np.intp)
        ic = np.asarray(ic, dtype=np.intp)
        rec = ir < self.r
        if self.full or not rec.any():
            return pair_terms(self.ZT, self.E, ir, ic)
        out = np.zeros(ir.size)
        other = ~rec
        out[other] = pair_terms(self.ZT, self.E, ir[other], ic[other])
        out[rec] = _receiver_terms(self.CMT, self.G, self.E, ir[rec], ic[rec])
        return out

    def columns(self, idx_cols) -> np.ndarray:
        """``[Z E^T]`` for every active row (rows) and the columns at positions ``idx_cols``."""
        self.form()
        return (self.E[idx_cols] @ self.ZT)[:, :-1].T


def _entries(E: sp.csr_matrix, ic) -> tuple[np.ndarray, np.ndarray]:
    """The stored entries of the rows ``E[ic]``, flat: ``(which, at)``, the pair each belongs
    to and its position in ``E.indices`` / ``E.data``."""
    deg = np.diff(E.indptr)[ic]
    which = np.repeat(np.arange(ic.size), deg)
    # the flat position t of pair i's k-th entry is offset[i] + k; E's is indptr + k
    offset = np.cumsum(deg) - deg
    at = np.repeat(E.indptr[ic] - offset, deg) + np.arange(int(deg.sum()))
    return which, at


def _receiver_terms(CMT, G, E, p, ic) -> np.ndarray:
    """``Z[R][p[i]] . E[ic[i]] = sum_l E[ic[i], l] (CMT[p[i]] . G[l])`` for every pair."""
    r = CMT.shape[0]
    which, at = _entries(E, ic)
    n = at.size
    vals = np.empty(n)
    step = max(1, _GATHER // max(r, 1))
    for lo in range(0, n, step):
        w, a = which[lo : lo + step], at[lo : lo + step]
        vals[lo : lo + step] = np.einsum("ij,ij->i", CMT[p[w]], G[E.indices[a]]) * E.data[a]
    return np.bincount(which, weights=vals, minlength=p.size)


def weights_block(F: sp.csr_matrix, wa) -> sp.csr_matrix:
    """``C = E^T W E = W_R + F^T W_s F`` (r x r, sparse), ``wa`` = ``w`` on the active rows."""
    r = F.shape[1]
    wa = np.asarray(wa, dtype=float)
    return sp.csr_matrix(sp.diags(wa[:r]) + F.T @ sp.diags(wa[r:]) @ F)


def h_diagonal(M: np.ndarray, F: sp.csr_matrix, wa) -> np.ndarray:
    """The diagonal of ``H = QR^T W QR = M^T C M``, in ``O(nnz(C) r)``."""
    CM = np.asarray(weights_block(F, wa).astype(M.dtype, copy=False) @ M)
    return np.einsum("kp,kp->p", M, CM, dtype=np.float64)


def pair_terms(ZT: np.ndarray, E: sp.csr_matrix, ir, ic) -> np.ndarray:
    """``Z[ir[i]] . E[ic[i]]`` (``ZT = Z^T``) for every pair (positions among the active rows,
    the zero row last), gathering only ``E``'s stored entries."""
    ir = np.asarray(ir, dtype=np.intp)
    ic = np.asarray(ic, dtype=np.intp)
    out = np.zeros(ir.size)
    deg = np.diff(E.indptr)[ic]
    ends = np.cumsum(deg)
    lo = 0
    while lo < ir.size:
        # pairs [lo, hi) with at most _GATHER entries of E between them (at least one pair)
        base = ends[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, base + _GATHER, side="right")))
        if ends[hi - 1] > base:
            which, at = _entries(E, ic[lo:hi])
            vals = ZT[E.indices[at], ir[lo:hi][which]] * E.data[at]
            out[lo:hi] = np.bincount(which, weights=vals, minlength=hi - lo)
        lo = hi
    return out
