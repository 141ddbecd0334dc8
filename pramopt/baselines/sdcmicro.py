"""sdcMicro's invariant PRAM, re-implemented in Python from the description of sdcMicro's
``pram()``.

This is **not** sdcMicro's code and does not call R; it follows the algorithm that sdcMicro's
``pram()`` documents and implements (Templ, Kowarik & Meindl; argument ``pd``, the minimum
diagonal entry, and ``alpha``, the amount of perturbation), for one variable at a time:

1. draw the diagonal ``d_i ~ U(pd, 1)`` for each of the ``L`` categories and spread the rest of
   each row evenly, ``P[i, j] = (1 - d_i)/(L - 1)``;
2. with the category shares ``p``, form the Bayes inverse
   ``Q[k, j] = P[j, k] p_j / sum_l p_l P[l, k]``;
3. ``R = P Q`` is invariant (``p^T R = p^T``);
4. release with ``R_s = alpha R + (1 - alpha) I``, still invariant.

The random diagonal is drawn with NumPy from a seed (sdcMicro uses R's ``runif``), as
``d_i = pd + (1 - pd) u_i`` with ``u_i ~ U(0, 1)``, so that a search over ``pd`` can keep the
``u_i`` fixed.  Variables are perturbed independently, so the matrix on the cells is the
product over variables of the per-variable entries.
"""

from __future__ import annotations

import numpy as np

from .._validation import InvalidParameterError, check_real

__all__ = ["sdcmicro_invariant_matrix", "sdcmicro_uniforms"]


def sdcmicro_uniforms(n_categories, seed=0) -> np.ndarray:
    """The ``u_i ~ U(0, 1)`` behind the random diagonal, one per category (seeded)."""
    rng = np.random.default_rng(seed)
    return rng.random(int(n_categories))


def sdcmicro_invariant_matrix(
    frequencies, pd=0.8, alpha=0.5, *, seed=0, uniforms=None
) -> np.ndarray:
    """Invariant PRAM matrix of one variable as sdcMicro's ``pram()`` builds it (re-implementation).

    Parameters
    ----------
    frequencies : sequence of float
        Frequencies (or shares) of the ``L`` categories in the data.
    pd : float in [0, 1]
        Minimum diagonal entry of the random matrix P.
    alpha : float in [0, 1]
        Amount of perturbation: ``R_s = alpha R + (1 - alpha) I``.
    seed : int, optional
        Seed of the random diagonal (ignored when ``uniforms`` is given).
    uniforms : array_like of shape (L,), optional
        The ``u_i`` of the diagonal ``d_i = pd + (1 - pd) u_i``.

    Returns
    -------
    ndarray of shape (L, L)
        ``R_s``, row-stochastic and invariant for the given frequencies.
    """
    owner = "sdcmicro_invariant_matrix"
    f = np.asarray(frequencies, dtype=float)
    if f.ndim != 1 or f.size == 0 or not np.all(np.isfinite(f)) or (f < 0).any() or f.sum() <= 0:
        raise InvalidParameterError(
            f"The 'frequencies' parameter of {owner} must be a non-empty list of non-negative "
            f"numbers with a positive sum; got {frequencies!r}."
        )
    pd = check_real(pd, "pd", owner, low=0.0, high=1.0, low_open=False, high_open=False)
    alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0, low_open=False, high_open=False)
    L = f.size
    if L == 1:
        return np.ones((1, 1))
    u = sdcmicro_uniforms(L, seed) if uniforms is None else np.asarray(uniforms, dtype=float)
    if u.shape != (L,) or (u < 0).any() or (u > 1).any():
        raise InvalidParameterError(
            f"The 'uniforms' parameter of {owner} must be {L} numbers in [0, 1]; got {uniforms!r}."
        )
    d = pd + (1.0 - pd) * u
    P = np.repeat(((1.0 - d) / (L - 1))[:, None], L, axis=1)
    np.fill_diagonal(P, d)
    p = f / f.sum()
    s = p @ P  # s_k = sum_l p_l P[l, k]
    with np.errstate(divide="ignore", invalid="ignore"):
        Q = np.where(s[:, None] > 0, P.T * p[None, :] / s[:, None], 0.0)
    # a released category that no one can reach (s_k = 0) gets a row mapping to itself
    Q[s <= 0, :] = 0.0
    Q[np.flatnonzero(s <= 0), np.flatnonzero(s <= 0)] = 1.0
    R = P @ Q
    Rs = alpha * R + (1.0 - alpha) * np.eye(L)
    return Rs / Rs.sum(axis=1, keepdims=True)
