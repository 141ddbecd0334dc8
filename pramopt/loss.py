"""Utility measures of a PRAM matrix: the exact L2 loss (Cator, Hensbergen & Rozenholc, Section 3),
the expected number of changed records, the condition number.

The exact L2 loss of the unbiased estimator (4) is

    l2(P) = (1/n^2) * sum_l ||row_l(P^-1)||^2 * (U0^T P)_l  -  1/n,

which does not depend on the non-identifying variables.  Its first-order term at P = I is
``2/n^2`` times the expected number of changed records, the linear surrogate.  These are the
figures every result reports; the optimiser's differentiable forms of the same loss (its
gradient, the Woodbury form for large sparse designs, the closed form of block designs) are in
:mod:`pramopt.optimize.objectives.l2`.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

__all__ = ["l2_loss", "expected_changes", "condition_number", "DENSE_MAX"]


def as_dense(P) -> np.ndarray:
    """P as a dense float array (a sparse P is made dense: for small matrices only)."""
    return P.toarray() if sp.issparse(P) else np.asarray(P, dtype=float)


def expected_changes(P, counts) -> float:
    """Expected number of records whose identifying values change: sum_m U0(m) (1 - P_mm)."""
    diag = P.diagonal() if sp.issparse(P) else np.diag(np.asarray(P, dtype=float))
    counts = np.asarray(counts, dtype=float)
    return float(counts @ (1.0 - diag))


#: Above this many cells a sparse P is handled by a sparse LU instead of dense algebra.
DENSE_MAX = 1500


def _sparse_lu(P):
    import scipy.sparse.linalg as spla

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return spla.splu(sp.csc_matrix(P, dtype=float))
        except RuntimeError:  # "Factor is exactly singular"
            return None


def _l2_splu(P, w) -> float:
    """sum_l ||row_l(P^-1)||^2 w_l of a large sparse P from a sparse LU: rows of P^-1 come in
    pieces from solves with P^T, so neither a dense inverse nor a dense K x K LU is formed."""
    K = P.shape[0]
    lu = _sparse_lu(P)
    if lu is None:
        return float("inf")
    r = np.empty(K)
    step = 512
    for s in range(0, K, step):
        e = np.zeros((K, min(step, K - s)))
        e[np.arange(s, s + e.shape[1]), np.arange(e.shape[1])] = 1.0
        Y = lu.solve(e, trans="T")  # columns of Y = rows of P^-1
        r[s : s + e.shape[1]] = np.einsum("ij,ij->j", Y, Y)
    if not np.all(np.isfinite(r)):
        return float("inf")
    return float(r @ w)


def _components(P) -> list[np.ndarray] | None:
    """The cells of each connected component of P's transition graph, or None if there is one.

    P is block diagonal over these components (after a permutation), and so is P^-1: the loss
    and the condition number split into one small problem per component.
    """
    from scipy.sparse.csgraph import connected_components

    n_comp, label = connected_components(sp.csr_matrix(P), directed=True, connection="weak")
    if n_comp <= 1:
        return None
    order = np.argsort(label, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(label[order])) + 1)


def _diagonal_blocks(P: sp.csr_matrix, parts):
    """(cells, P[cells][:, cells]) for every component, from one permuted copy of P (slicing
    the whole matrix once per component would cost nnz(P) each time)."""
    order = np.concatenate(parts)
    Pp = P[order][:, order].tocsr()
    start = 0
    for cells in parts:
        end = start + cells.size
        yield cells, Pp[start:end, start:end]
        start = end


def _l2_dense(Pd: np.ndarray, w: np.ndarray) -> float:
    """sum_l ||row_l(P^-1)||^2 w_l for a dense P (inf when singular)."""
    try:
        with warnings.catch_warnings():  # an exactly singular P is reported as inf, not warned
            warnings.simplefilter("ignore", sla.LinAlgWarning)
            lu = sla.lu_factor(Pd, check_finite=True)
    except (ValueError, np.linalg.LinAlgError):
        return float("inf")
    if np.any(np.abs(np.diag(lu[0])) < 1e-14 * max(1.0, np.abs(Pd).max())):
        return float("inf")
    Q = sla.lu_solve(lu, np.eye(Pd.shape[0]))
    return float(np.einsum("ij,ij->i", Q, Q) @ w)


def l2_loss(P, counts) -> float:
    """Exact expected squared L2 error of the unbiased estimator (end of Section 3).

    Returns ``inf`` for a singular (or numerically singular) matrix.  A sparse P is split into
    the connected components of its transition graph (a block design has one per block); each
    component of at most ``DENSE_MAX`` cells is inverted densely, a larger one through a sparse
    LU, so no K x K dense array is formed.
    """
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    if not sp.issparse(P):
        Pd = as_dense(P)
        return _l2_dense(Pd, counts @ Pd) / n**2 - 1.0 / n
    P = sp.csr_matrix(P, dtype=float)
    w = np.asarray(P.T @ counts).ravel()
    parts = _components(P) or [np.arange(P.shape[0])]
    total = 0.0
    for cells, sub in _diagonal_blocks(P, parts):
        if cells.size <= DENSE_MAX:
            total += _l2_dense(sub.toarray(), w[cells])
        else:
            total += _l2_splu(sub, w[cells])
        if not np.isfinite(total):
            return float("inf")
    return float(total / n**2 - 1.0 / n)


def condition_number(P) -> float:
    """Condition number of P (inf when singular).

    The 2-norm condition number, exactly, when P is dense or every connected component of a
    sparse P has at most ``DENSE_MAX`` cells (P is block diagonal over its components, so its
    singular values are those of the blocks).  Otherwise the 1-norm condition number estimated
    with ``scipy.sparse.linalg.onenormest`` (Higham and Tisseur's block estimator) on P and on
    P^-1 applied through a sparse LU.
    """
    if not sp.issparse(P):
        try:
            return float(np.linalg.cond(as_dense(P)))
        except np.linalg.LinAlgError:
            return float("inf")
    P = sp.csr_matrix(P, dtype=float)
    parts = _components(P) or [np.arange(P.shape[0])]
    if max(c.size for c in parts) > DENSE_MAX:
        return _onenorm_condition(P)
    s_max, s_min = 0.0, np.inf
    for _, sub in _diagonal_blocks(P, parts):
        try:
            sv = np.linalg.svd(sub.toarray(), compute_uv=False)
        except np.linalg.LinAlgError:
            return float("inf")
        s_max, s_min = max(s_max, sv[0]), min(s_min, sv[-1])
    if not np.isfinite(s_max) or s_min <= 0:
        return float("inf")
    return float(s_max / s_min)


def _onenorm_condition(P: sp.csr_matrix) -> float:
    import scipy.sparse.linalg as spla

    lu = _sparse_lu(P)
    if lu is None:
        return float("inf")
    K = P.shape[0]
    inv = spla.LinearOperator(
        (K, K), matvec=lu.solve, rmatvec=lambda y: lu.solve(y, trans="T"), dtype=float
    )
    return float(spla.onenormest(P) * spla.onenormest(inv))


def changed_variables(P, codes, counts, qi=()) -> dict:
    """How many identifying values a changed record has altered, in expectation under ``P``.

    With ``h(k, l)`` the number of identifying variables cells k and l differ in (from the codes,
    :func:`pramopt.verify.transition_distances`) and ``e_j = sum_k U0(k) sum_{l: h(k, l) = j} P_kl``
    the expected number of records released with j changed values:

    * ``mean``: ``sum_j j e_j / sum_j e_j``, the mean number of variables changed per changed record
      (NaN when no record changes);
    * ``distribution``: ``{j: e_j / sum e}`` over the j that occur;
    * ``max``: the largest ``h`` of a non-zero transition (0 for P = I);
    * ``per_variable``: the expected number of records whose value of each variable changes.
    """
    from .verify import transition_distances

    codes = np.asarray(codes)
    counts = np.asarray(counts, dtype=float)
    r, c, v, dist = transition_distances(P, codes)
    mass = counts[r] * v
    total = float(mass.sum())
    e = np.bincount(dist, weights=mass, minlength=codes.shape[1] + 1)
    names = list(qi) if len(qi) == codes.shape[1] else [str(j) for j in range(codes.shape[1])]
    per_var = {}
    for j, name in enumerate(names):
        per_var[str(name)] = float(mass[codes[r, j] != codes[c, j]].sum())
    return {
        "mean": float(e @ np.arange(e.size) / total) if total > 0 else float("nan"),
        "distribution": {int(j): float(e[j] / total) for j in np.flatnonzero(e > 0)}
        if total > 0
        else {},
        "max": int(dist.max(initial=0)),
        "per_variable": per_var,
    }
