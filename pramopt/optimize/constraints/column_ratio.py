"""Column-ratio rows: ε-DP and Pk-anonymity (Ikarashi et al.) as linear rows over a dense support.

Both notions bound ratios of entries of a column of P:

* **ε-DP** (Theorem 1): ``P[m, j] <= e^ε P[m', j]`` for every column j and rows m, m'.  With one
  auxiliary column ``L_j`` per cell this is ``L_j <= P[m, j] <= e^ε L_j``: 2 K^2 rows, exact.
* **Pk-anonymity** (Theorem 3): ``k = 1 + (n - 1) AR`` with
  ``AR = min_{u,v} M[u,v] M[v,u]`` and ``M[u,v] = min_j P[u,j] / P[v,j]``; requiring ``k >= k*``
  is ``M[u,v] M[v,u] >= a = (k* - 1)/(n - 1)`` for every pair, which bounds products of two
  ratios and is not linear.  A sufficient linear condition: with row weights ``s_m > 0``,

      L_j <= s_m P[m, j] <= r L_j   for every m, j,     r = a^(-1/2),

  gives ``P[u,j]/P[v,j] >= (s_v/s_u)/r``, hence ``M[u,v] M[v,u] >= 1/r^2 = a``.  With ``s = 1`` it
  is the plain bound ``max_m P[m,j] / min_m P[m,j] <= r`` on every column.  The weights are free
  (Theorem 3's AR does not change when a row of P is scaled), so the designer re-chooses them at
  its current P (:func:`balancing_weights`): the union over s of these sets is
  ``{P : every cycle u1 -> u2 -> ... -> u1 has mean log-ratio <= ln r}``, against Theorem 3's
  ``{every cycle of length 2}``; the two agree whenever the worst cycle of the current P has
  length 2.  The independent exact check (:func:`pramopt.risk.dp_pk_anonymity.pk_anonymity`)
  decides.

  Theorem 3's set itself is linear in ``y = ln P``
  (:func:`pramopt.optimize.program.pk_log_program`): the designer polishes in log space over it, up
  to ``EXACT_K_MAX_CELLS`` cells (its K^3 rows).

The rows share no code with those checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..support import Support

__all__ = [
    "RatioBound",
    "balancing_weights",
    "dense_support",
    "epsilon_bound",
    "pk_ratio_target",
    "ratio_rows",
    "ratio_slack",
    "softmax_rows",
]


@dataclass(frozen=True)
class RatioBound:
    """``L_j <= scale[m] * P[m, j] <= r * L_j`` for every entry (m, j) of the support.

    A :class:`~pramopt.optimize.constraints.Constraint` with one auxiliary column ``L_j`` per
    cell (block ``"L"``) and two rows per support entry, named ``{name}_hi`` and ``{name}_lo``.
    """

    r: float
    scale: np.ndarray | None = None  # None: every weight is 1 (ε-DP)
    name: str = "ratio"
    risk = True

    def columns(self, support: Support, elastic: bool = False) -> dict:
        return {"L": support.K}

    def rows(self, support: Support, elastic: bool = False) -> list:
        """``scale_m x_s - r L_j <= 0`` and ``scale_m x_s - L_j >= 0`` for every entry s = (m, j).

        A column whose ``L_j`` is 0 is entirely zero (that cell is never released), which
        Theorem 1 and 3 allow.
        """
        from . import RowBlock

        K, S = support.K, support.size
        scale = np.ones(K) if self.scale is None else np.asarray(self.scale, dtype=float)
        ar = np.arange(S)
        X = sp.csr_matrix((scale[support.rows], (ar, ar)), shape=(S, S))
        up = sp.csr_matrix((np.full(S, -float(self.r)), (ar, support.cols)), shape=(S, K))
        low = sp.csr_matrix((np.full(S, -1.0), (ar, support.cols)), shape=(S, K))
        return [
            RowBlock(f"{self.name}_hi", {"x": X, "L": up}, np.full(S, -np.inf), np.zeros(S)),
            RowBlock(f"{self.name}_lo", {"x": X, "L": low}, np.zeros(S), np.full(S, np.inf)),
        ]

    def prices(self, duals):
        """None: an entry outside the support brings two rows of its own, which force its column
        to zero at ``x = 0``, so these rows need a dense support."""

    def violated(self, P) -> np.ndarray:
        """The columns j whose row-scaled ``max_m / min_m`` over the rows exceeds ``r`` (a column
        with every entry zero holds, with ``L_j = 0``)."""
        P = np.asarray(P.toarray() if sp.issparse(P) else P, dtype=float)
        Q = P if self.scale is None else P * np.asarray(self.scale, dtype=float)[:, None]
        hi, lo = Q.max(axis=0), Q.min(axis=0)
        return np.flatnonzero((hi > 0) & (hi > self.r * lo))


def epsilon_bound(epsilon: float) -> RatioBound:
    """ε-DP (Theorem 1): every column's ``max / min <= e^ε``."""
    return RatioBound(math.exp(epsilon), None, "eps")


def dense_support(K: int) -> Support:
    """Every pair of cells."""
    idx = np.arange(K)
    return Support.from_pairs(np.repeat(idx, K), np.tile(idx, K), K)


def ratio_rows(support: Support, bounds) -> tuple[list, int]:
    """The rows of the bounds in a program whose columns are ``[x, L]``: ``(rows, width of L)``,
    each row block ``(name, mats, lo, hi)``, bound i's ``L`` in columns ``i K .. (i + 1) K``."""
    K = support.K
    bounds = tuple(bounds)
    out = []
    for i, b in enumerate(bounds):
        for blk in b.rows(support):
            L = blk.mats["L"]
            pad = [sp.csr_matrix((L.shape[0], w)) for w in (i * K, (len(bounds) - i - 1) * K)]
            mats = {"x": blk.mats["x"], "L": sp.hstack([pad[0], L, pad[1]], format="csr")}
            out.append((blk.name, mats, blk.lo, blk.hi))
    return out, len(bounds) * K


def pk_ratio_target(k: float, n: int) -> float:
    """``a = (k - 1)/(n - 1)``: Pk-anonymity at level k on n records needs ``AR >= a``
    (Theorem 3)."""
    if n <= 1:
        return 0.0
    return (float(k) - 1.0) / (n - 1.0)


def _log_ratios(P: np.ndarray) -> np.ndarray:
    """``W[u, v] = max_j ln(P[u, j] / P[v, j])`` over the columns in use (every entry positive
    there)."""
    used = P.max(axis=0) > 0
    L = np.log(P[:, used])
    K = P.shape[0]
    W = np.empty((K, K))
    step = max(1, int(2_000_000 // max(1, K * L.shape[1])))
    for s in range(0, K, step):
        W[s : s + step] = (L[s : s + step, None, :] - L[None, :, :]).max(axis=2)
    return W


def balancing_weights(P, iterations: int = 60, solver: str | None = None) -> np.ndarray:
    """Row weights s that make the row-scaled column ratios of P small.

    Minimises ``max_{u,v} (σ_u - σ_v + W[u,v])`` over σ = ln s (W from :func:`_log_ratios`); its
    minimum is the largest mean of a cycle of W, at least Theorem 3's ``-ln(AR)/2`` (the largest
    2-cycle).  Solved as a small linear program (K + 1 columns, K^2 rows) when highspy is there,
    else by ``iterations`` rounds of the averaging σ_u <- (σ_u + max_v(...) ...) heuristic.
    Every entry of P must be positive on the columns in use; ``solver`` is the design's ``solver=``.
    """
    P = np.asarray(P.toarray() if sp.issparse(P) else P, dtype=float)
    K = P.shape[0]
    if K == 1:
        return np.ones(1)
    W = _log_ratios(P)
    u, v = np.nonzero(~np.eye(K, dtype=bool))
    # variables (σ_0..σ_{K-1}, λ): minimise λ s.t. σ_u - σ_v - λ <= -W[u, v], σ_0 = 0
    try:
        from ..backends import Outcome, solve_lp  # imported here: the backends import this module

        n_pairs = u.size
        A = sp.csr_matrix(
            (
                np.concatenate([np.ones(n_pairs), -np.ones(n_pairs), -np.ones(n_pairs)]),
                (np.tile(np.arange(n_pairs), 3), np.concatenate([u, v, np.full(n_pairs, K)])),
            ),
            shape=(n_pairs, K + 1),
        )
        c = np.zeros(K + 1)
        c[K] = 1.0
        bounds = [(0.0, 0.0)] + [(None, None)] * (K - 1) + [(None, None)]
        res = solve_lp(c, A_ub=A, b_ub=-W[u, v], bounds=bounds, solver=solver, method="highs")
        if res.outcome is Outcome.OPTIMAL:
            assert res.x is not None  # set when optimal
            sigma = res.x[:K]
            return np.exp(sigma - sigma.mean())
    except (ValueError, FloatingPointError, np.linalg.LinAlgError):  # pragma: no cover
        # the solver could not weight the rows: plain column ratios, which are still sufficient
        pass
    return np.ones(K)


def ratio_slack(P, scale=None) -> float:
    """``max_j max_m (s_m P[m,j]) / min_m (s_m P[m,j])`` over the columns in use (inf with a
    zero)."""
    P = np.asarray(P.toarray() if sp.issparse(P) else P, dtype=float)
    Q = P if scale is None else P * np.asarray(scale, dtype=float)[:, None]
    used = Q.max(axis=0) > 0
    mn = Q[:, used].min(axis=0)
    if np.any(mn <= 0):
        return math.inf
    return float((Q[:, used].max(axis=0) / mn).max())


def softmax_rows(Y) -> np.ndarray:
    """Row-stochastic ``P`` with ``ln P = Y`` up to a shift of each row."""
    Z = Y - Y.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)
