"""Block designs for data where most cells are rare or unique (the hard case).

When almost every record is unique, C1 cannot hold with a diagonal floor above 1/2: every
(π, k0) group of a unique record needs about 1/alpha records' worth of inflow, far more than
the rest of the data can send while keeping P_kk > 1/2.  Strict diagonal dominance, which the
designer otherwise uses to keep P invertible, is then out of reach.

Here P is block diagonal over groups of neighbouring cells, and inside a block b

    P_b = lambda_b I + 1 v_b^T,      lambda_b + sum_{k in b} v_k = 1,  lambda_b >= eps,  v >= 0,

the retention-replacement form of Ikarashi et al. with a free replacement distribution per
block.  Every entry is linear in (lambda, v), so the C1 constraints stay linear and the
program has only K + (number of blocks) variables; and det P_b = lambda_b^(|b|-1), so P is
invertible for every feasible point however small its diagonal.  The inverse has the closed
form P_b^-1 = (I - 1 v_b^T) / lambda_b, which gives the exact L2 loss and its gradient in O(K).
The result is verified against the full, unreduced C1 like every other design.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .data import FrequencyTable
from .model import Support

#: Smallest lambda_b: keeps P well away from singular (cond(P_b) grows like 1/lambda_b).
LAMBDA_MIN = 1e-3


def make_blocks(table: FrequencyTable, target: float, fixed_idx=(), keep_rows=()) -> list[np.ndarray]:
    """Consecutive cells (in lexicographic order, so neighbours share their leading values)
    grouped until a block holds at least ``target`` records; never across the strata of the
    fixed variables; kept cells form blocks of their own."""
    K = table.n_cells
    counts = table.counts
    keep = np.zeros(K, dtype=bool)
    keep[np.asarray(keep_rows, dtype=np.int64)] = True
    if fixed_idx:
        strata = np.unique(table.codes[:, list(fixed_idx)], axis=0, return_inverse=True)[1].ravel()
    else:
        strata = np.zeros(K, dtype=np.int64)
    blocks: list[np.ndarray] = [np.array([k]) for k in np.flatnonzero(keep)]
    for s in np.unique(strata):
        cells = np.flatnonzero((strata == s) & ~keep)
        cur, tot = [], 0.0
        for k in cells:
            cur.append(k)
            tot += counts[k]
            if tot >= target:
                blocks.append(np.array(cur))
                cur, tot = [], 0.0
        if cur:  # the remainder joins the stratum's last block, so no block is too small
            if blocks and len(blocks[-1]) and strata[blocks[-1][0]] == s and not keep[blocks[-1][0]]:
                blocks[-1] = np.concatenate([blocks[-1], cur])
            else:
                blocks.append(np.array(cur))
    return blocks


class BlockModel:
    """The map z = (lambda_1..lambda_B, v_1..v_K) -> the entries of a block-diagonal P.

    Attributes
    ----------
    support : Support
        Every pair of cells within a block.
    T : scipy.sparse.csr_matrix
        x = T z, the support entries of P.
    block_of : ndarray
        Block index of every cell.
    """

    def __init__(self, blocks, K: int):
        self.blocks = [np.asarray(b, dtype=np.int64) for b in blocks]
        self.B = len(self.blocks)
        self.K = K
        self.block_of = np.empty(K, dtype=np.int64)
        for i, b in enumerate(self.blocks):
            self.block_of[b] = i
        rows = np.concatenate([np.repeat(b, b.size) for b in self.blocks])
        cols = np.concatenate([np.tile(b, b.size) for b in self.blocks])
        self.support = Support.from_pairs(rows, cols, K)
        r, c = self.support.rows, self.support.cols
        S = self.support.size
        diag = r == c
        # x_s = lambda_{block} [r == c] + v_c
        Tl = sp.csr_matrix((np.ones(int(diag.sum())), (np.flatnonzero(diag), self.block_of[r[diag]])),
                           shape=(S, self.B))
        Tv = sp.csr_matrix((np.ones(S), (np.arange(S), c)), shape=(S, K))
        self.T = sp.hstack([Tl, Tv], format="csr")

    @property
    def n_params(self) -> int:
        return self.B + self.K

    def split(self, z):
        return z[: self.B], z[self.B:]

    def clean(self, z, eps: float = LAMBDA_MIN) -> np.ndarray:
        """Clip to the feasible box and renormalise each block so that its rows sum to one."""
        lam, v = self.split(np.asarray(z, dtype=float).copy())
        lam = np.maximum(lam, eps)
        v = np.maximum(v, 0.0)
        tot = lam + np.bincount(self.block_of, weights=v, minlength=self.B)
        return np.concatenate([lam / tot, v / tot[self.block_of]])

    def matrix(self, z) -> sp.csr_matrix:
        return self.support.to_matrix(self.T @ z)

    def loss_and_grad(self, z, counts) -> tuple[float, np.ndarray]:
        """Exact L2 loss (Cator et al., end of Section 3) and its gradient in z, in O(K).

        With P_b^-1 = (I - 1 v^T)/lambda: ||row_l(P^-1)||^2 = (1 - 2 v_l + |v_b|^2)/lambda^2 and
        w_l = (U0^T P)_l = lambda U0_l + v_l n_b, where n_b is the block's number of records.
        """
        counts = np.asarray(counts, dtype=float)
        n = counts.sum()
        lam, v = self.split(np.asarray(z, dtype=float))
        b = self.block_of
        nb = np.bincount(b, weights=counts, minlength=self.B)
        v2 = np.bincount(b, weights=v * v, minlength=self.B)
        lamk = lam[b]
        w = lamk * counts + v * nb[b]
        r = (1.0 - 2.0 * v + v2[b]) / lamk**2
        f = float(r @ w) / n**2 - 1.0 / n
        A = np.bincount(b, weights=w, minlength=self.B)           # sum of w over the block
        g_lam = np.bincount(b, weights=-2.0 * r * w / lamk + r * counts, minlength=self.B)
        g_v = (-2.0 * w + 2.0 * v * A[b]) / lamk**2 + r * nb[b]
        return f, np.concatenate([g_lam, g_v]) / n**2
