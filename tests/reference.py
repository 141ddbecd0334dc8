"""Independent reference computations for the tests (no pramopt code).

Each function is derived from a definition, not from the formula pramopt implements, so a
test that compares pramopt with it can fail when pramopt is wrong.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np


def l2_loss_from_covariance(P, counts) -> float:
    """E||mu_hat - mu||^2 of the unbiased estimator mu_hat = P^-T U / n, from the law of U.

    The released counts are a sum of independent multinomials, U = sum_m Mult(U0(m), P[m]), so
    Cov(U) = sum_m U0(m) (diag(P[m]) - P[m] P[m]^T); mu_hat is unbiased, so its mean squared
    error is the trace of its covariance, P^-T Cov(U) P^-1 / n^2.  (pramopt evaluates the
    closed form (1/n^2) sum_l ||row_l(P^-1)||^2 (U0^T P)_l - 1/n instead.)
    """
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P, dtype=float)
    U0 = np.asarray(counts, dtype=float)
    n = U0.sum()
    cov = np.diag(U0 @ P) - P.T @ (U0[:, None] * P)
    Pinv = np.linalg.inv(P)
    return float(np.trace(Pinv.T @ cov @ Pinv) / n**2)


def covering_cells(df, qi, combos, alpha: float) -> set[int]:
    """Positions (in sorted order of the present cells) of the cells that lie in a problem
    combination: some pi of ``combos`` (index tuples) where fewer than 1/alpha records share the
    cell's values on pi.  Counted from the records, by explicit loops."""
    rows = [tuple(r) for r in df[qi].itertuples(index=False)]
    cells = sorted(set(rows))
    out = set()
    for pi in combos:
        c = Counter(tuple(r[i] for i in pi) for r in rows)
        for k, cell in enumerate(cells):
            if c[tuple(cell[i] for i in pi)] < 1 / alpha:
                out.add(k)
    return out


def release_outcomes(P, units):
    """Every released vector of a few records with its probability: (outcome, prob) pairs.

    ``units`` gives each record's original cell; record r goes to cell o_r with P[units[r], o_r].
    """
    P = np.asarray(P, dtype=float)
    K = P.shape[1]
    for out in itertools.product(range(K), repeat=len(units)):
        yield out, float(np.prod([P[u, o] for u, o in zip(units, out)]))


def c1_max_risk_from_definition(P, counts, codes, combos) -> float:
    """The largest left-hand side of C1, S[m, g] / D[g], by loops over combinations and groups."""
    P, U = np.asarray(P, dtype=float), np.asarray(counts, dtype=float)
    worst = 0.0
    for pi in combos:
        keys = [tuple(r) for r in codes[:, list(pi)]]
        for k0 in set(keys):
            S = P[:, [k == k0 for k in keys]].sum(axis=1)
            worst = max(worst, S.max() / (U @ S))
    return worst
