"""The receivers' block of :class:`~.l2.SparseL2` kept sparse, for designs with many receivers.

:class:`~.l2.SparseL2` writes ``Q = P^-1 = Dn + QR S^T`` with ``M = P[R, R]^-1`` and the active
rows of ``QR = Q[:, R]`` (``M`` itself for the receivers, ``-P[k, R] M / P_kk`` for the other
cells sending into ``R``).  It stores ``M`` and ``QR`` dense: ``O(r^3)`` for the factorisation
and ``O(a r^2)`` for the gradient's ``H = QR^T W QR``, minutes per evaluation with thousands of
receivers.  On census-shaped designs ``P[R, R]`` is the identity's pattern plus the few
transitions between receivers, and its inverse is just as sparse (1.4% of its entries on the
4-key sample's linear-stage design, 1,514 receivers): here ``M`` comes from block
back-substitution over the components of ``P[R, R]``'s graph with sparse rows
(:func:`sparse_inverse`, given up as soon as it holds more entries than the sparse block's budget),
and ``QR``, ``H`` and ``A`` stay sparse.  The formulas are those of
:class:`~.l2.SparseL2`; only the storage differs, so both give the same numbers up to rounding.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

__all__ = [
    "SPARSE_RECEIVERS",
    "SPARSE_DENSITY",
    "surely_dense",
    "well_conditioned",
    "condition",
    "TooDense",
    "components",
    "inverse_rows",
    "sparse_inverse",
    "products",
    "pair_terms",
    "column_terms",
]

#: :class:`~.l2.SparseL2` keeps the receivers' block sparse above this many receivers (below,
#: dense BLAS on a small block is faster: with 1,500 the 4-key census design's refinement took
#: 295 s against 158 s, benchmarks/README.md).
SPARSE_RECEIVERS = 3000

#: ... and while at most this share of the active rows' ``QR`` entries are non-zero: a sparse
#: product of density d costs about d^2 times the dense one's operations, each some 1,000 times
#: slower than BLAS's, so beyond a few percent the dense block is faster.
SPARSE_DENSITY = 0.02

#: Pairs handled at a time by :func:`pair_terms` (rows of two sparse slices of that length).
_PAIRS = 1 << 16


def surely_dense(PRR: sp.csr_matrix, a: int) -> bool:
    """Whether ``M = P[R, R]^-1`` is certainly too full for the sparse block, from the
    structure alone: cells of one strongly connected component of ``P[R, R]``'s graph reach
    one another, so (but for cancellation) the component's square block of ``M`` is full, and
    those blocks alone exceed :data:`SPARSE_DENSITY` of the ``a x r`` active rows."""
    r = PRR.shape[0]
    _, label = csgraph.connected_components(PRR, directed=True, connection="strong")
    sizes = np.bincount(label).astype(float)
    return float(sizes @ sizes) > SPARSE_DENSITY * a * r


def condition(PRR, M) -> float:
    """The exact 1-norm condition number ``||P[R, R]||_1 ||M||_1`` of ``P[R, R]`` (``M`` its
    inverse, dense or sparse: both norms at hand; column sums in double)."""
    norm_p = np.asarray(abs(PRR).sum(axis=0)).max(initial=0.0)
    norm_m = np.asarray(abs(M).sum(axis=0, dtype=np.float64)).max(initial=0.0)
    return float(norm_p) * float(norm_m)


def well_conditioned(PRR, M, rcond: float) -> bool:
    """Whether the exact 1-norm condition number of ``P[R, R]`` (:func:`condition`) is at most
    ``1 / rcond``."""
    return condition(PRR, M) * rcond <= 1.0


class TooDense(Exception):
    """The sparse inverse would hold more entries than the sparse block's budget."""


def components(PRR: sp.csr_matrix) -> tuple:
    """The structure of ``P[R, R]``'s graph that its inverse follows: ``(label, level, size,
    out)``, each cell's strongly connected component, the component's level (its longest path
    to a sink of the condensation: a level's components send only into lower levels) and size,
    and ``P[S, out]``, the entries between components (a sparse ``r x r`` matrix)."""
    r = PRR.shape[0]
    n_comp, label = csgraph.connected_components(PRR, directed=True, connection="strong")
    rows = np.repeat(np.arange(r), np.diff(PRR.indptr))
    cross = label[rows] != label[PRR.indices]
    out = sp.csr_matrix((PRR.data * cross, PRR.indices.copy(), PRR.indptr.copy()), shape=(r, r))
    out.eliminate_zeros()
    level = _levels(label[rows[cross]], label[PRR.indices[cross]], n_comp)[label]
    size = np.bincount(label, minlength=n_comp)[label]
    return label, level, size, out


def _levels(src, dst, n: int) -> np.ndarray:
    """Each node's longest path to a sink in the acyclic graph of edges ``src -> dst``."""
    level = np.zeros(n, dtype=np.int64)
    for _ in range(n):
        new = np.zeros(n, dtype=np.int64)
        np.maximum.at(new, src, level[dst] + 1)
        if np.array_equal(new, level):
            break
        level = new
    return level


def inverse_rows(
    PcR: sp.csr_matrix, R, F: sp.csr_matrix, rcond: float, budget: float = np.inf
) -> sp.csr_matrix | None:
    """The active rows of ``QR`` (``M`` for the receivers, then ``F M`` for the senders, ``F``
    their rows ``-P[k, R] / P_kk``) and a zero row last, sparse; None when ``P[R, R]`` is
    singular: its exact 1-norm condition number (``||P[R, R]||_1 ||M||_1``, both at hand) above
    ``1 / rcond``, a non-finite entry, or an exactly singular block.  Raises :class:`TooDense`
    as soon as ``M`` holds more than ``budget`` entries."""
    r = R.size
    if r == 0:
        return sp.csr_matrix((1, 0))
    PRR = sp.csr_matrix(PcR[R])
    M = sparse_inverse(PRR, budget)
    if M is None or not np.all(np.isfinite(M.data)):
        return None
    if not well_conditioned(PRR, M, rcond):
        return None
    send = F @ M
    zero = sp.csr_matrix((1, r))
    return sp.vstack([M, send, zero], format="csr")


def sparse_inverse(PRR: sp.csr_matrix, budget: float = np.inf) -> sp.csr_matrix | None:
    """``M = P[R, R]^-1``, sparse, by block back-substitution over the components of
    :func:`components` (see :func:`.l2_dense.inverse`, the same with ``M`` dense); None when a
    block is exactly singular.  Raises :class:`TooDense` as soon as ``M`` holds more than
    ``budget`` entries, before the rest is computed.

    A row of ``M`` is non-zero only where its cell reaches others in ``P[R, R]``'s graph, so
    the products stay as sparse as ``M`` itself: no solve with ``r`` right-hand sides.
    """
    r = PRR.shape[0]
    label, level, size, out = components(PRR)
    diag = PRR.diagonal()
    order: list = []  # cells whose rows of M are known, in the order of `done`'s rows
    done = sp.csr_matrix((0, r))
    for lv in range(int(level.max()) + 1 if r else 0):
        at = np.flatnonzero(level == lv)
        eye = sp.csr_matrix((np.ones(at.size), (np.arange(at.size), at)), shape=(at.size, r))
        o = out[at]
        # the entries of a level's rows point only into lower levels, whose rows are done
        rhs = (eye - o[:, np.concatenate(order)] @ done).tocsr() if o.nnz else eye
        single = size[at] == 1
        if np.any(diag[at[single]] == 0.0):
            return None
        rows_lv = [at[single]]
        blocks_lv = [sp.diags(1.0 / diag[at[single]]) @ rhs[np.flatnonzero(single)]]
        for comp in np.unique(label[at[~single]]):
            k = np.flatnonzero(label[at] == comp)
            S = at[k]
            B = rhs[k]
            cols = np.unique(B.indices)
            with warnings.catch_warnings():  # exact singularity: a zero pivot, checked below
                warnings.simplefilter("ignore", sla.LinAlgWarning)
                lu, piv = sla.lu_factor(PRR[S][:, S].toarray(), check_finite=False)
            if not np.all(np.diagonal(lu)):
                return None
            X = sla.lu_solve((lu, piv), B[:, cols].toarray(), check_finite=False)
            rr, cc = np.nonzero(X)
            rows_lv.append(S)
            blocks_lv.append(sp.csr_matrix((X[rr, cc], (rr, cols[cc])), shape=(S.size, r)))
        order += rows_lv
        if done.nnz + sum(b.nnz for b in blocks_lv) > budget:
            raise TooDense
        done = sp.vstack([done, *blocks_lv], format="csr")
    if not r:
        return sp.csr_matrix((0, 0))
    M = done[np.argsort(np.concatenate(order))]
    M.eliminate_zeros()
    return M


def products(QRx: sp.csr_matrix, wa, Dn_s, r: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``H = QR^T W QR`` (r x r) and the active rows of ``A = Dn W QR + S H`` with a zero row
    last, both sparse."""
    QR = QRx[:-1]
    H = (QR.T @ sp.diags(wa) @ QR).tocsr()
    A = sp.vstack(
        [H, sp.diags(Dn_s * wa[r:]) @ QR[r:], sp.csr_matrix((1, QR.shape[1]))], format="csr"
    )
    return H, A


def diagonal_terms(t, rw, cl, ir, ic, Dn, w, r: int, QRx) -> None:
    """Add to ``t`` the terms ``Dn^3 W`` and ``S QR^T W Dn^2`` of ``[Q^T W Q Q^T]`` at the pairs
    ``rw, cl`` (``ir, ic``: their active-row positions), ``QRx`` dense or sparse."""
    p = np.flatnonzero(rw == cl)  # Dn^3 W
    t[p] = Dn[cl[p]] ** 3 * w[cl[p]]
    p = np.flatnonzero(ir < r)  # S QR^T W Dn^2: rows in R
    if p.size:
        c = cl[p]
        t[p] += np.asarray(QRx[ic[p], ir[p]]).ravel() * (w[c] * Dn[c] ** 2)


def pair_terms(s, rows, cols) -> np.ndarray:
    """``[Q^T W Q Q^T]`` at the pairs, with ``QR`` and ``A`` sparse (see ``SparseL2.grad_at``)."""
    Dn, w, a, r = s._Dn, s._w, s._act.size, s.receivers.size
    idx, QRx, Ax = s._idx, s._QRx, s._Ax
    T = np.zeros(rows.size)
    for lo in range(0, rows.size, _PAIRS):
        hi = min(lo + _PAIRS, rows.size)
        rw, cl = rows[lo:hi], cols[lo:hi]
        ir, ic = idx[rw], idx[cl]
        t = T[lo:hi]
        diagonal_terms(t, rw, cl, ir, ic, Dn, w, r, QRx)
        p = np.flatnonzero((ir < a) & (ic < a))  # A QR^T: both active
        if p.size:
            t[p] += np.asarray(Ax[ir[p]].multiply(QRx[ic[p]]).sum(axis=1)).ravel()
    return T


def column_terms(s, cols) -> np.ndarray:
    """``[Q^T W Q Q^T][:, cols]`` for all rows, dense K x len(cols) (see
    ``SparseL2.grad_columns``)."""
    Dn, w = s._Dn, s._w
    Qc = s._QRx[s._idx[cols]]  # len(cols) x r
    T = np.zeros((s.K, cols.size))
    T[s._act] = (s._Ax[:-1] @ Qc.T).toarray()
    T[s.receivers] += (sp.diags(w[cols] * Dn[cols] ** 2) @ Qc).T.toarray()
    T[cols, np.arange(cols.size)] += Dn[cols] ** 3 * w[cols]
    return T
