"""The correct-match risk R1 of Nayak et al. and Ghatak & Roy (one variable).

References are to D. Ghatak and B. K. Roy, *An Improved Bound for Security in an Identity
Disclosure Problem* (``../shared/seeds/000_…``).  One variable with categories ``c_1..c_k`` and
frequencies ``T``; rows of a matrix are original categories, columns released ones.  Section 3
defines ``α_i = p_{1i}``; the derivation of (8)-(9) and the closed form (11) need
``α_i = p_{i1}``, the probability that a unit of ``c_i`` is released as ``c_1`` (a column of
P), which is used here.  The last line of (10) is printed ``(1/a)[1 + 1/(β_1 Σ_{a-1})]^{-1}``;
the line above it and the appendix give ``(1/a)[1 + Σ_a / (β_1 Σ_{a-1})]^{-1}``, used here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._validation import (
    InvalidParameterError,
    as_frequencies,
    as_transition_matrix,
    check_int,
    check_real,
)

__all__ = [
    "nayak_r1",
    "correct_match_risk",
    "correct_match_risks",
    "expected_correct_match",
    "expected_squared_error",
    "simulate_intruder",
    "IntruderSimulation",
]


def nayak_r1(T, theta, block: Sequence[int] | None = None) -> float:
    """Nayak's closed form ``R1(1, T)`` of equation (11) for an IFPR block.

    Parameters
    ----------
    T : sequence of int
        Frequencies ``T_1, ..., T_{k_1}`` of the block, the target category first (or the
        frequencies of every category with ``block`` giving the block, target first).
    theta : float
        θ of the block, ``0 <= θ < T_1``.
    """
    owner = "nayak_r1"
    T = as_frequencies(T, "T", owner).astype(float)
    if block is not None:
        T = T[list(block)]
    if T.size < 2 or T[0] < 1:
        raise InvalidParameterError(
            f"The 'T' parameter of {owner} must give a block of at least 2 categories with T_1 >= "
            f"1; got {T.tolist()!r}."
        )
    T1 = T[0]
    theta = check_real(theta, "theta", owner, low=0.0, high=T1, low_open=False)
    k1 = T.size
    rest = T[1:]
    s = np.sum(rest / ((k1 - 1) * rest - theta))
    return float((T1 - theta) / (T1 * (T1 - theta) + theta**2 * s))


def _sigma_poly(alpha: np.ndarray, counts: np.ndarray, degree: int) -> tuple[np.ndarray, int]:
    """Coefficients 0..degree of ``prod_i (1 + β_i x)^{T*_i}`` up to a common factor.

    Categories with ``α_i = 1`` contribute their ``T*_i`` units for certain; they are returned
    as a shift ``s`` (``Σ_a`` is then coefficient ``a - s``).  Coefficients are kept scaled to
    a maximum of 1 after each product, so large frequencies neither overflow nor underflow.
    """
    poly = np.zeros(degree + 1)
    poly[0] = 1.0
    shift = 0
    j = np.arange(degree + 1, dtype=float)
    for a_i, t in zip(alpha, counts):
        if t <= 0 or a_i <= 0:
            continue
        if a_i >= 1.0:
            shift += int(t)
            continue
        m = int(min(t, degree))
        lb = math.log(a_i) - math.log1p(-a_i)
        jj = j[: m + 1]
        logc = (
            math.lgamma(t + 1)
            - np.array([math.lgamma(x + 1) for x in jj])
            - np.array([math.lgamma(t - x + 1) for x in jj])
            + jj * lb
        )
        c = np.exp(logc - logc.max())
        poly = np.convolve(poly, c)[: degree + 1]
        mx = poly.max()
        if mx > 0:
            poly /= mx
    return poly, shift


def correct_match_risk(alpha, t, a, target: int = 0) -> float:
    """Exact ``R1(a, t)`` of equation (10) for any PRAM column ``α`` and frequencies ``t``.

    ``R1(a, t) = (1/a) α_1 Σ_{a-1} / (α_1 Σ_{a-1} + (1 - α_1) Σ_a)`` where ``Σ_a`` is the
    coefficient of ``x^a`` in ``prod_i (1 + β_i x)^{T*_i}`` (``β_i = α_i / (1 - α_i)``,
    ``T*_1 = T_1 - 1``, ``T*_i = T_i``), computed by polynomial multiplication.

    Parameters
    ----------
    alpha : sequence of float
        ``α_i = P[Z = c_1 | X = c_i]``, the target's column of the PRAM matrix (see the module
        notes: the paper's ``p_{1i}`` must be read ``p_{i1}``).
    t : sequence of int
        Frequencies; ``t[target] >= 1``.
    a : int >= 1
        Number of released records with the target category, ``S_1``.
    target : int
        Index of ``c_1``.

    Returns
    -------
    float
        The probability of a correct match given ``S_1 = a``; 0 when ``S_1 = a`` is impossible.
    """
    owner = "correct_match_risk"
    t = as_frequencies(t, "t", owner)
    try:
        al = np.asarray(alpha, dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"The 'alpha' parameter of {owner} must be a list of probabilities; got {alpha!r}."
        ) from None
    if al.shape != t.shape or not np.all(np.isfinite(al)) or (al < 0).any() or (al > 1).any():
        raise InvalidParameterError(
            f"The 'alpha' parameter of {owner} must be {t.size} probabilities in [0, 1] (one per "
            f"category); got {alpha!r}."
        )
    target = check_int(target, "target", owner, low=0, high=t.size - 1)
    if t[target] < 1:
        raise InvalidParameterError(
            f"The 't' parameter of {owner} must have t[target] >= 1; got t[{target}] = "
            f"{int(t[target])}."
        )
    a = check_int(a, "a", owner, low=1)
    return _r1(al, t, a, target)


def _r1(al: np.ndarray, t: np.ndarray, a: int, target: int) -> float:
    counts = t.astype(np.int64).copy()
    counts[target] -= 1
    a1 = float(al[target])
    poly, shift = _sigma_poly(al, counts, a)

    def sig(i: int) -> float:
        i -= shift
        return float(poly[i]) if 0 <= i < poly.size else 0.0

    num = a1 * sig(a - 1)
    den = num + (1.0 - a1) * sig(a)
    return 0.0 if den <= 0 else num / den / a


def _matrix_and_frequencies(P, T, owner: str):
    """A transition matrix and one frequency per row of it, checked together."""
    A = as_transition_matrix(P, "P", owner)
    T = as_frequencies(T, "T", owner)
    if T.size != A.shape[0]:
        raise InvalidParameterError(
            f"The 'T' parameter of {owner} must have one frequency per row of P ({A.shape[0]}); "
            f"got {T.size}."
        )
    return A, T


def correct_match_risks(P, T, a: int = 1) -> np.ndarray:
    """``R1(a, T)`` with each category in turn as the intruder's target (0 where ``T_c = 0``).

    Parameters
    ----------
    P : array_like of shape (k, k)
        PRAM matrix of one variable.
    T : sequence of int
        Category frequencies.
    a : int
        ``S_1``; ``a = 1`` gives the largest risk when the target's own retention is the largest
        entry of its column (Theorem 3.1).
    """
    owner = "correct_match_risks"
    A, T = _matrix_and_frequencies(P, T, owner)
    a = check_int(a, "a", owner, low=1)
    if a == 1:
        return _r1_first(A, T)
    out = np.zeros(T.size)
    for c in range(T.size):
        if T[c] >= 1:
            out[c] = _r1(A[:, c], T, a, c)
    return out


def _r1_first(A: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``R1(1, T)`` of every target at once: ``α_c / (α_c + (1 - α_c) Σ_1)``.

    ``Σ_1 = sum_i T*_i β_i``; a unit released as the target with certainty (``α_i = 1``) makes
    ``S_1 = 1`` with ``Z_B = c_1`` impossible, so the risk given ``S_1 = 1`` is 0.
    """
    Tf = T.astype(float)
    sure = A >= 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        B = np.where(sure, 0.0, A / np.where(sure, 1.0, 1.0 - A))
    diag = np.diag(A)
    sigma1 = Tf @ B - np.diag(B)
    forced = Tf @ sure - np.diag(sure)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = diag / (diag + (1.0 - diag) * sigma1)
    r = np.where((forced > 0) | (T < 1) | (diag <= 0), 0.0, r)
    return np.nan_to_num(r, nan=0.0)


def expected_correct_match(P, T, target: int) -> float:
    """Unconditional probability that the intruder of Section 2 makes a correct match.

    ``E[1{Z_B = c_1} / S_1] = α_1 E[1 / (1 + O)]`` where ``O`` is the number of the other units
    released as ``c_1`` (a Poisson-binomial variable whose law is computed exactly).
    """
    owner = "expected_correct_match"
    A = as_transition_matrix(P, "P", owner)
    T = as_frequencies(T, "T", owner)
    target = check_int(target, "target", owner, low=0, high=T.size - 1)
    if T[target] < 1:
        raise InvalidParameterError(
            f"The 'target' parameter of {owner} must be a category with T >= 1; got {target}."
        )
    counts = T.copy()
    counts[target] -= 1
    pmf = np.array([1.0])
    for p, n in zip(A[:, target], counts):
        if n > 0 and p > 0:
            pmf = np.convolve(pmf, _binom_pmf(int(n), float(p)))
    return float(A[target, target] * np.sum(pmf / (1.0 + np.arange(pmf.size))))


def expected_squared_error(P, T) -> np.ndarray:
    """Exact per-category ``E[(S_j/n - T_j/n)^2]``, the paper's "mean squared estimation error".

    ``S_j`` is a sum of independent binomials ``Bin(T_i, p_ij)``, so its mean is
    ``sum_i T_i p_ij`` and its variance ``sum_i T_i p_ij (1 - p_ij)``; the expected squared
    error is the variance plus the squared bias (zero for an invariant P), over ``n^2``.
    ``simulate_intruder(...).mse`` estimates the same figure by simulation.
    """
    A, T = _matrix_and_frequencies(P, T, "expected_squared_error")
    n = T.sum()
    bias = T @ A - T
    var = T @ (A * (1.0 - A))
    return (var + bias**2) / n**2


def _binom_pmf(n: int, p: float) -> np.ndarray:
    from scipy.stats import binom

    return binom.pmf(np.arange(n + 1), n, p)


# ---------------------------------------------------------------------------------------------
# The intruder of Section 2, simulated
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntruderSimulation:
    """Seeded simulation of the intruder of Ghatak & Roy, Section 2.

    Attributes
    ----------
    correct_match : float
        Mean over simulations of ``1{Z_B = c_1} / S_1`` (0 when ``S_1 = 0``): the probability of a
        correct match averaged over the intruder's random pick.
    correct_match_drawn : float
        Share of simulations in which the intruder's random pick was the target.
    mse : ndarray of shape (k,)
        Per-category mean of ``(S_j/n - T_j/n)^2``, the paper's "mean squared estimation error".
    n_sim : int
    seed : int or None
    target : int
    """

    correct_match: float
    correct_match_drawn: float
    mse: np.ndarray
    n_sim: int
    seed: object
    target: int


def simulate_intruder(
    P, T, *, target: int | None = None, n_sim: int = 1000, seed=0
) -> IntruderSimulation:
    """Simulate the intruder of Section 2: release ``Z``, pick a random unit with ``Z = c_1``.

    Parameters
    ----------
    P : array_like of shape (k, k)
        PRAM matrix of one variable.
    T : sequence of int
        Category frequencies.
    target : int, optional
        Category of the target unit B (default: the least frequent category with ``T >= 1``).
    n_sim : int
        Number of released data sets.
    seed : int or numpy Generator
        Seed of the random numbers (results are reproducible).
    """
    owner = "simulate_intruder"
    A, T = _matrix_and_frequencies(P, T, owner)
    n_sim = check_int(n_sim, "n_sim", owner, low=1)
    if target is None:
        pos = np.flatnonzero(T >= 1)
        if pos.size == 0:
            raise InvalidParameterError(
                f"The 'T' parameter of {owner} must have a positive frequency; got {T.tolist()!r}."
            )
        target = int(pos[np.argmin(T[pos])])
    target = check_int(target, "target", owner, low=0, high=T.size - 1)
    if T[target] < 1:
        raise InvalidParameterError(
            f"The 'target' parameter of {owner} must be a category with T >= 1; got {target}."
        )
    rng = np.random.default_rng(seed)
    n = int(T.sum())
    k = T.size
    cm = np.zeros(n_sim)
    drawn = np.zeros(n_sim)
    se = np.zeros(k)
    others = T.copy()
    others[target] -= 1
    for s in range(n_sim):
        # B is one unit of the target category; the other units only matter through their counts
        zb = rng.choice(k, p=A[target])
        S = np.zeros(k, dtype=np.int64)
        for i in np.flatnonzero(others):
            S += rng.multinomial(int(others[i]), A[i])
        S[zb] += 1
        a = S[target]
        if zb == target:
            cm[s] = 1.0 / a
            drawn[s] = float(rng.integers(a) == 0)  # B is one of the a candidates
        se += ((S - T) / n) ** 2
    return IntruderSimulation(
        correct_match=float(cm.mean()),
        correct_match_drawn=float(drawn.mean()),
        mse=se / n_sim,
        n_sim=n_sim,
        seed=seed,
        target=target,
    )
