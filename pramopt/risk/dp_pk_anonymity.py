"""ε-differential privacy and Pk-anonymity of a PRAM matrix (Ikarashi, Kikuchi, Chida & Takahashi).

Rows of a matrix are original values, columns released values: ``A[u, v']`` is the probability
that ``u`` is released as ``v'`` (the paper's ``A_{u,v'}``).

* Theorem 1: ``ε = ln max_{u, v, v'} A[u, v'] / A[v, v']`` (infinite when a column has a zero
  next to a positive entry).  Corollary 1: the sum over attributes of a product mechanism.
  Corollary 2: the closed form for retention-replacement.
* Theorem 3: a PRAM mechanism is a Pk-anonymization for
  ``k = 1 + (|R| - 1) * min_{u, v, u', v'} A[u, v'] A[v, u'] / (A[u, u'] A[v, v'])``.
  Corollary 4: the minimum (``AR``) multiplies over the attributes of a product mechanism.
  Corollary 5 / equation (7): the closed form for retention-replacement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .._validation import (
    InvalidParameterError,
    as_levels,
    as_transition_matrix,
    check_int,
    check_real,
)

__all__ = [
    "dp_epsilon",
    "dp_epsilon_product",
    "dp_epsilon_retention",
    "pk_ratio",
    "pk_anonymity",
    "pk_anonymity_product",
    "pk_anonymity_retention",
]


def dp_epsilon(P) -> float:
    """ε of the ε-DP guarantee of a PRAM matrix (Ikarashi et al., Theorem 1).

    Parameters
    ----------
    P : array_like of shape (K, K')
        Row-stochastic transition matrix (row = original value, column = released value).

    Returns
    -------
    float
        ``ln max_{u, v, v'} P[u, v'] / P[v, v']``; ``inf`` when some column has a zero entry next
        to a positive one.  Columns that are entirely zero are never released and are ignored.
    """
    A = as_transition_matrix(P, "P", "dp_epsilon", square=False)
    cmax = A.max(axis=0)
    cmin = A.min(axis=0)
    used = cmax > 0
    if np.any(cmin[used] <= 0):
        return math.inf
    return float(np.log((cmax[used] / cmin[used]).max()))


def dp_epsilon_product(matrices: Sequence) -> float:
    """ε of a product (attribute-wise) PRAM mechanism: the sum of each ε (Corollary 1)."""
    mats = _matrix_list(matrices, "matrices", "dp_epsilon_product")
    return float(sum(dp_epsilon(A) for A in mats))


def dp_epsilon_retention(levels, rho) -> float:
    """ε of retention-replacement perturbation (Corollary 2, equation (3)).

    ``ε = sum_a ln((1 + (|V_a| - 1) ρ_a) / (1 - ρ_a))``; ``inf`` when some ``ρ_a = 1`` on an
    attribute with more than one value.

    Parameters
    ----------
    levels : sequence of int
        Number of values ``|V_a|`` of each attribute.
    rho : float or sequence of float
        Retention probability, one for all attributes or one per attribute, each in [0, 1].
    """
    levels = as_levels(levels, "levels", "dp_epsilon_retention")
    rhos = _rho_list(rho, len(levels), "dp_epsilon_retention")
    eps = 0.0
    for V, r in zip(levels, rhos):
        if V == 1:
            continue  # a single value: nothing to hide, contributes ln 1 = 0
        if r >= 1.0:
            return math.inf
        eps += math.log((1.0 + (V - 1) * r) / (1.0 - r))
    return float(eps)


def pk_ratio(P, chunk: int | None = None) -> float:
    """``AR = min_{u, v, u', v'} P[u, v'] P[v, u'] / (P[u, u'] P[v, v'])`` of Theorem 3.

    For fixed ``(u, v)`` the quantity factorises into ``M[u, v] * M[v, u]`` with
    ``M[u, v] = min_w P[u, w] / P[v, w]`` (over ``w`` with ``P[v, w] > 0``), so the minimum is
    computed in O(K^2 K') operations instead of a K^4 loop.  A term whose denominator is zero
    corresponds to a released table that cannot occur and is skipped.

    Returns
    -------
    float in [0, 1]
    """
    A = as_transition_matrix(P, "P", "pk_ratio", square=False)
    K = A.shape[0]
    if chunk is None:
        chunk = max(1, int(4_000_000 // max(1, K * A.shape[1])))
    M = np.empty((K, K))
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in range(0, K, chunk):
            num = A[s : s + chunk, None, :]  # (c, 1, K')
            ratio = np.where(A[None, :, :] > 0, num / A[None, :, :], np.inf)
            M[s : s + chunk] = ratio.min(axis=2)
    # Each row of A sums to 1, so some w has A[v, w] > 0 and M is finite.
    return float(min(1.0, (M * M.T).min()))


def pk_anonymity(P, n_records) -> float:
    """k of the Pk-anonymity of a PRAM matrix (Ikarashi et al., Theorem 3).

    ``k = 1 + (n_records - 1) * AR`` with ``AR`` from :func:`pk_ratio`: no adversary, whatever
    the background knowledge, estimates which person a released record came from with
    probability above ``1/k``.  The bound is tight (the theorem is an "if and only if").

    Parameters
    ----------
    P : array_like of shape (K, K')
        Row-stochastic transition matrix (rows: every value a record may have).
    n_records : int
        Number of records ``|R|`` (>= 1).

    Returns
    -------
    float in [1, n_records]
    """
    n = check_int(n_records, "n_records", "pk_anonymity", low=1)
    A = as_transition_matrix(P, "P", "pk_anonymity", square=False)
    return 1.0 + (n - 1) * pk_ratio(A)


def pk_anonymity_product(matrices: Sequence, n_records) -> float:
    """k of a product PRAM mechanism: ``1 + (|R| - 1) prod_a AR_a`` (Corollary 4)."""
    n = check_int(n_records, "n_records", "pk_anonymity_product", low=1)
    mats = _matrix_list(matrices, "matrices", "pk_anonymity_product")
    return 1.0 + (n - 1) * float(np.prod([pk_ratio(A) for A in mats]))


def pk_anonymity_retention(n_records, levels, rho) -> float:
    """k of retention-replacement perturbation (Corollary 5; equation (7) for one common ρ).

    ``k = 1 + (|R| - 1) prod_a ((1 - ρ_a) / (1 + (|V_a| - 1) ρ_a))^2``.
    """
    n = check_int(n_records, "n_records", "pk_anonymity_retention", low=1)
    levels = as_levels(levels, "levels", "pk_anonymity_retention")
    rhos = _rho_list(rho, len(levels), "pk_anonymity_retention")
    prod = 1.0
    for V, r in zip(levels, rhos):
        if V == 1:
            continue  # AR = 1 for a single value
        prod *= ((1.0 - r) / (1.0 + (V - 1) * r)) ** 2
    return 1.0 + (n - 1) * prod


def _rho_list(rho, d: int, owner: str) -> list[float]:
    if np.ndim(rho) == 0:
        r = check_real(rho, "rho", owner, low=0.0, high=1.0, low_open=False, high_open=False)
        return [r] * d
    rhos = list(np.asarray(rho, dtype=object).ravel())
    if len(rhos) != d:
        raise InvalidParameterError(
            f"The 'rho' parameter of {owner} must be one number or one per attribute ({d}); got "
            f"{len(rhos)} values."
        )
    return [
        check_real(r, "rho", owner, low=0.0, high=1.0, low_open=False, high_open=False)
        for r in rhos
    ]


def _matrix_list(matrices, name: str, owner: str) -> list[np.ndarray]:
    if isinstance(matrices, np.ndarray) and matrices.ndim == 2:
        matrices = [matrices]
    try:
        mats = list(matrices)
    except TypeError:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a list of transition matrices; got "
            f"{type(matrices).__name__}."
        ) from None
    if not mats:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must list at least one matrix; got []."
        )
    return [as_transition_matrix(A, name, owner, square=False) for A in mats]
