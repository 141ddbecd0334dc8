"""The parameters of a retention-replacement matrix, the form the replacement and block designs
take: ``P = diag(retention) + rate weights^T`` within each pool of cells.

A record of cell k is kept outright with probability ``retention[k]``; otherwise it is replaced
by a cell j of its own pool, chosen with probability ``rate[k] * weights[j]``.  The replacement
design (:mod:`pramopt.optimize.strategies.replacement`, ``diag(1 - o) + o w^T``) has
``retention = 1 - o``, ``rate = o``, ``weights = w``; the block design
(:mod:`pramopt.optimize.strategies.blocks`, ``lambda_b I + 1 v_b^T``) has ``retention = lambda_b``,
``rate = 1``, ``weights = v``.  Both are a diagonal plus a rank-one term per pool, so 4 K numbers
hold what the sparse matrix holds in up to K^2 entries: a design folder keeps these
(:mod:`pramopt.io.parameters`), a release draws from them in O(log K) per record
(:class:`FormSampler`), and the estimator applies P^-1 in O(K) by Sherman and Morrison's formula
(:meth:`ReplacementForm.inverse_times`).

:meth:`ReplacementForm.matrix` makes the very floats the strategies make (the same products and
sums), so a form read back from a file reproduces the matrix it was saved with bit for bit, and
:meth:`ReplacementForm.describes` tells, in O(entries) and without building a matrix, whether a
form is that of a given matrix.  This module imports nothing of pramopt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["ReplacementForm", "FormSampler", "form_or_none"]

#: Rows of a matrix compared at a time by :meth:`ReplacementForm.describes` (bounds its memory).
_ROWS_PER_CHUNK = 256


def _frozen(a, dtype) -> np.ndarray:
    out = np.array(a, dtype=dtype, copy=True).ravel()
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class ReplacementForm:
    """``P[k, j] = retention[k] [k == j] + rate[k] weights[j] [pools[k] == pools[j]]``.

    Attributes
    ----------
    retention : ndarray of shape (K,)
        Probability that a record keeps its cell outright (> 0, so that P is invertible).
    rate : ndarray of shape (K,)
        How much of its pool's replacement weights a cell's row takes (>= 0; 0: a kept cell).
    weights : ndarray of shape (K,)
        Replacement weight of every cell within its pool (>= 0).
    pools : ndarray of shape (K,), int
        Pool of every cell: records move only within their pool.

    Every row sums to one: ``retention[k] + rate[k] * sum(weights of k's pool) = 1``.  All
    arrays are read-only copies.
    """

    retention: np.ndarray
    rate: np.ndarray
    weights: np.ndarray
    pools: np.ndarray

    def __post_init__(self):
        for name, dtype in (
            ("retention", float),
            ("rate", float),
            ("weights", float),
            ("pools", np.int64),
        ):
            object.__setattr__(self, name, _frozen(getattr(self, name), dtype))
        K = self.retention.size
        if any(getattr(self, n).size != K for n in ("rate", "weights", "pools")):
            raise ValueError("a replacement form's arrays must all have one entry per cell")
        floats = np.concatenate([self.retention, self.rate, self.weights])
        if not np.all(np.isfinite(floats)):
            raise ValueError("a replacement form's parameters must be finite")
        if K and (
            self.retention.min() <= 0.0
            or self.rate.min() < 0.0
            or self.weights.min() < 0.0
            or self.pools.min() < 0
        ):
            raise ValueError(
                "a replacement form needs retention > 0, rate >= 0, weights >= 0 and pools >= 0"
            )

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_replacement(cls, o, w, pools) -> ReplacementForm:
        """The form of ``diag(1 - o) + o w^T`` within each pool (the replacement design)."""
        o = np.asarray(o, dtype=float)
        return cls(retention=1.0 - o, rate=o, weights=w, pools=pools)

    @classmethod
    def from_blocks(cls, lam, v, block_of) -> ReplacementForm:
        """The form of ``lambda_b I + 1 v_b^T`` within each block b (the block design);
        ``lam`` has one entry per block, ``v`` and ``block_of`` one per cell."""
        block_of = np.asarray(block_of, dtype=np.int64)
        lam = np.asarray(lam, dtype=float)[block_of]
        return cls(retention=lam, rate=np.ones(block_of.size), weights=v, pools=block_of)

    # -- sizes ---------------------------------------------------------------------------------

    @property
    def n_cells(self) -> int:
        return int(self.retention.size)

    @property
    def n_pools(self) -> int:
        return int(np.unique(self.pools).size)

    def _senders_receivers(self) -> tuple[np.ndarray, np.ndarray]:
        # the cells that move records out, and those that receive them
        return self.rate > 0, self.weights > 0

    def nnz(self) -> int:
        """Entries of :meth:`matrix` (the diagonal, and senders x receivers per pool)."""
        send, recv = self._senders_receivers()
        m = int(self.pools.max(initial=-1)) + 1
        s = np.bincount(self.pools[send], minlength=m)
        r = np.bincount(self.pools[recv], minlength=m)
        # a sender that also receives holds its diagonal among its pool's entries
        both = np.bincount(self.pools[send & recv], minlength=m)
        return int(self.n_cells + s @ r - both.sum())

    # -- the matrix ------------------------------------------------------------------------------

    def matrix(self) -> sp.csr_matrix:
        """The sparse matrix (indices sorted): the diagonal sums ``retention + rate * weights``
        and the other entries are ``rate * weights``, the floats the strategies compute.  Built
        row by row into CSR arrays, pool by pool (no coordinate list to sort)."""
        K = self.n_cells
        send, recv = self._senders_receivers()
        m = int(self.pools.max(initial=-1)) + 1
        receivers = np.bincount(self.pools[recv], minlength=m)
        lengths = np.ones(K, dtype=np.int64)  # a kept cell: its diagonal alone
        lengths[send] = receivers[self.pools[send]] + ~recv[send]
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        data = np.empty(int(indptr[-1]))
        indices = np.empty(int(indptr[-1]), dtype=np.int64)
        kept = np.flatnonzero(~send)
        data[indptr[kept]], indices[indptr[kept]] = self.retention[kept], kept
        for p in np.unique(self.pools[send]):
            S = np.flatnonzero(send & (self.pools == p))
            R = np.flatnonzero(recv & (self.pools == p))
            vals = (self.rate[S][:, None] * self.weights[R][None, :]).ravel()
            cols = np.tile(R, S.size)
            at = np.arange(S.size) * R.size + np.searchsorted(R, S)
            own = recv[S]  # a sender that receives: its diagonal is retention + its product
            vals[at[own]] = self.retention[S[own]] + vals[at[own]]
            if not own.all():
                vals = np.insert(vals, at[~own], self.retention[S[~own]])
                cols = np.insert(cols, at[~own], S[~own])
            if S[-1] - S[0] + 1 == S.size:  # consecutive rows (one pool, a block): one slice
                data[indptr[S[0]] : indptr[S[-1] + 1]] = vals
                indices[indptr[S[0]] : indptr[S[-1] + 1]] = cols
                continue
            L = lengths[S]
            dest = np.repeat(indptr[S] - (np.cumsum(L) - L), L) + np.arange(int(L.sum()))
            data[dest], indices[dest] = vals, cols
        P = sp.csr_matrix((data, indices, indptr), shape=(K, K))
        P.has_sorted_indices = True
        P.eliminate_zeros()  # a product that underflowed
        return P

    def describes(self, P) -> bool:
        """True when :meth:`matrix` equals ``P`` exactly (same nonzero entries, same floats);
        checked row by row from ``P``'s entries, with no second matrix made."""
        if not sp.issparse(P):
            return False
        M = sp.csr_matrix(P)
        K = self.n_cells
        if M.shape != (K, K):
            return False
        if M.has_canonical_format is False:
            M = M.copy()
            M.sum_duplicates()
        send, recv = self._senders_receivers()
        m = int(self.pools.max(initial=-1)) + 1
        receivers = np.bincount(self.pools[recv], minlength=m)
        for a in range(0, K, _ROWS_PER_CHUNK):
            b = min(K, a + _ROWS_PER_CHUNK)
            lo, hi = M.indptr[a], M.indptr[b]
            r = np.repeat(np.arange(a, b), np.diff(M.indptr[a : b + 1]))
            c = M.indices[lo:hi].astype(np.int64)
            v = M.data[lo:hi]
            same = self.pools[r] == self.pools[c]
            want = np.where(same, self.rate[r] * self.weights[c], 0.0)
            diag = r == c
            want[diag] = self.retention[r[diag]] + self.rate[r[diag]] * self.weights[c[diag]]
            if np.any(v == 0.0) or not np.array_equal(v, want):
                return False
            # every entry of the form is stored: a sender has its pool's receivers and its own
            # diagonal, any other row its diagonal alone (products are never 0 here: both > 0)
            rows = np.arange(a, b)
            expect = np.where(send[rows], receivers[self.pools[rows]] + (~recv[rows]), 1).astype(
                np.int64
            )
            if not np.array_equal(np.diff(M.indptr[a : b + 1]), expect):
                return False
        return True

    # -- the inverse (Sherman and Morrison, per pool) --------------------------------------------

    def _inverse_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # P^-1[k, j] = [k == j] / c_k - alpha_k beta_j / s_pool with c = retention,
        # alpha = rate / c, beta = weights / c and s = 1 + sum_pool weights * alpha
        alpha = self.rate / self.retention
        beta = self.weights / self.retention
        s = 1.0 + np.bincount(self.pools, weights=self.weights * alpha)
        return alpha, beta, s[self.pools]

    def inverse_times(self, U) -> np.ndarray:
        """``U @ P^-1`` for each row of ``U`` (shape (Y, K)), in O(Y K): the estimator's
        ``P^-T U(.; y)`` for each group y."""
        U = np.atleast_2d(np.asarray(U, dtype=float))
        alpha, beta, s = self._inverse_parts()
        m = int(self.pools.max(initial=-1)) + 1
        per_pool = np.stack(
            [np.bincount(self.pools, weights=u * alpha, minlength=m) for u in U]
        ).reshape(U.shape[0], m)
        return U / self.retention - beta * per_pool[:, self.pools] / s

    def inverse_squares_times(self, U) -> np.ndarray:
        """``U @ (P^-1)**2`` (entrywise square) for each row of ``U``, in O(Y K): the sums
        ``sum_k (P^-1)[k, j]^2 U_k`` of the estimator's plug-in variances."""
        U = np.atleast_2d(np.asarray(U, dtype=float))
        alpha, beta, s = self._inverse_parts()
        c = self.retention
        m = int(self.pools.max(initial=-1)) + 1
        per_pool = np.stack(
            [np.bincount(self.pools, weights=u * alpha**2, minlength=m) for u in U]
        ).reshape(U.shape[0], m)
        return (
            U / c**2 - 2.0 * alpha * beta * U / (c * s) + (beta / s) ** 2 * per_pool[:, self.pools]
        )


def form_or_none(make, *args) -> ReplacementForm | None:
    """``make(*args)`` (a constructor of :class:`ReplacementForm`), or None where its parameters
    are not a valid form (a retention of 0, a weight a solver left at -1e-12): the design is then
    kept, released and inverted as its matrix, like any other."""
    try:
        return make(*args)
    except ValueError:
        return None


class FormSampler:
    """Draws of a release from a :class:`ReplacementForm`, in O(log K) per record and O(K) to
    build; the same draw, for the same uniform, as :class:`pramopt.publish.sampling.Sampler` on
    the form's matrix (up to the last bits of the cumulative sums).

    Row k of P, in column order, is its pool's receivers with probabilities ``rate[k] w_j``
    and, at column k, ``retention[k]`` on top.  A record of cell k with uniform u goes to the
    first column whose cumulative probability exceeds ``u`` times the row's total: before its own
    column this is a search in the pool's cumulative weights, at its own column the kept record,
    after it the same search shifted by the retention.
    """

    def __init__(self, form: ReplacementForm):
        self.form = form
        K = form.n_cells
        pools = form.pools
        w = np.where(form.weights > 0, form.weights, 0.0)
        m = int(pools.max(initial=-1)) + 1
        # the receivers, by pool and then column; their cumulative weights within the pool
        order = np.lexsort((np.arange(K), pools))
        order = order[w[order] > 0]
        p_of = pools[order]
        self.start = np.zeros(m + 1, dtype=np.int64)
        self.start[1:] = np.cumsum(np.bincount(p_of, minlength=m))
        cum = np.cumsum(w[order])
        cum = cum - np.concatenate([[0.0], cum])[self.start[:-1]][p_of]
        self.total = np.bincount(pools, weights=w, minlength=m)
        self.order = order
        # shifted by the pool number: one searchsorted for every record (as the row sampler
        # shifts by the row), at a cost of log2(pools) bits of the uniform
        self.key = p_of + cum / np.where(self.total > 0, self.total, 1.0)[p_of]
        # each cell's cumulative pool weight before its own column (receivers j < k of its pool)
        ck = p_of * max(K, 1) + order  # increasing: pools, then columns
        g = np.searchsorted(ck, pools * max(K, 1) + np.arange(K))
        inside = g > self.start[pools]
        self.before = np.where(inside, cum[np.maximum(g - 1, 0)] if cum.size else 0.0, 0.0)

    def draw(self, cells: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Released cell of each record, from its cell and its uniform."""
        f = self.form
        cells = np.asarray(cells, dtype=np.int64)
        ret, rate, pool = f.retention[cells], f.rate[cells], f.pools[cells]
        tot = self.total[pool]
        t = np.asarray(u, dtype=float) * (ret + rate * tot)  # u times the row's sum
        before = rate * self.before[cells]
        out = cells.copy()
        moves = (rate > 0) & (tot > 0)
        # before the own column (no retention yet), or after it (the retention passed)
        for mask, shift in ((moves & (t < before), 0.0), (moves & (t >= before + ret), 1.0)):
            if not mask.any():
                continue
            q = pool[mask]
            share = (t[mask] - shift * ret[mask]) / rate[mask] / self.total[q]
            pos = np.searchsorted(self.key, q + share, side="right")
            # rounding at the end of a pool stays in the pool
            pos = np.clip(pos, self.start[q], self.start[q + 1] - 1)
            out[mask] = self.order[pos]
        return out
