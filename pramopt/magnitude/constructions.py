"""The counterexample cells of Domingo-Ferrer & Torra: Lemma 1, equation (11), Constructions 1-4.

Each construction puts a cell exactly on a rule's boundary (see :mod:`pramopt.magnitude.rules`
for the tolerance that resolves such boundaries toward the paper's verdicts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from .._validation import check_int
from .rules import _check_fraction, _raise

__all__ = [
    "CounterexampleCell",
    "dominance_ratio",
    "p_percent_ratio",
    "construction_1",
    "construction_2",
    "construction_3",
    "construction_4",
    "MAX_CONSTRUCTION_N",
]

#: Largest N the constructions build (the cells are dense arrays).
MAX_CONSTRUCTION_N = 10_000_000


@dataclass(frozen=True)
class CounterexampleCell:
    """A cell built by one of the paper's Constructions 1-4.

    Attributes
    ----------
    construction : int
        1 and 3 build non-sensitive cells X_ns, 2 and 4 sensitive cells X_s.
    contributions : tuple of float
        ``x_1, ..., x_N`` in the paper's order (decreasing).  Constructions 1 and 2 give the
        relative contributions ``x_i / x`` (total 1); Constructions 3 and 4 the absolute
        contributions, totalling ``x`` of equation (12).
    r : float
        The ratio solving equation (1) (Constructions 1, 2) or (11) (Constructions 3, 4).
    epsilon : float or None
        The shift ``ε`` of Constructions 1 and 3; None for 2 and 4.
    """

    construction: int
    contributions: tuple
    r: float
    epsilon: float | None

    @property
    def sensitive_by_design(self) -> bool:
        """What the construction's rule declares: False for X_ns, True for X_s."""
        return self.construction in (2, 4)

    @property
    def N(self) -> int:  # noqa: N802 - the paper's name
        """Number of contributors."""
        return len(self.contributions)

    @property
    def total(self) -> float:
        """The cell total ``x``."""
        return float(math.fsum(self.contributions))

    def array(self) -> np.ndarray:
        """The contributions as a NumPy array."""
        return np.asarray(self.contributions, dtype=float)


def _f_lemma1(r: float, n: int, N: int) -> float:
    """f(r) = (r^n - 1)/(r^N - 1) of equation (1), continuous on [0, 1]."""
    if r <= 0.0:
        return 1.0
    if r >= 1.0:
        return n / N
    lr = math.log(r)
    return math.expm1(n * lr) / math.expm1(N * lr)


def _check_dominance_construction(n, k, N, owner):
    n = check_int(n, "n", owner, low=1)
    k = _check_fraction(k, "k", owner, high_open=True)
    N = check_int(N, "N", owner, low=n + 1, high=MAX_CONSTRUCTION_N)
    if not n / N < k:
        _raise("N", owner, f"an integer > n/k = {n / k:g} (Lemma 1 needs n/N < k)", repr(N))
    return n, k, N


def dominance_ratio(n, k, N):
    """The ``r`` in [0, 1) of Lemma 1: ``(r^n - 1)/(r^N - 1) = k``, equation (1).

    ``f`` decreases from 1 at ``r = 0`` to ``n/N`` as ``r -> 1``, so a root exists for
    ``n/N < k < 1`` and is unique.

    Parameters
    ----------
    n : int
        Dominance parameter n >= 1.
    k : float
        Dominance parameter, a proportion in (0, 1).
    N : int
        Number of contributors, with ``n < N`` and ``n/N < k``.

    Returns
    -------
    float
    """
    n, k, N = _check_dominance_construction(n, k, N, "dominance_ratio")
    return _dominance_ratio(n, k, N, "dominance_ratio")


def _dominance_ratio(n, k, N, owner):
    r = float(
        brentq(
            lambda r: _f_lemma1(r, n, N) - k,
            0.0,
            1.0,
            xtol=1e-16,
            rtol=4 * np.finfo(float).eps,
            maxiter=500,
        )
    )
    if r >= 1.0 - 1e-12:
        # k is within rounding of n/N: the cell would be uniform and eps would vanish
        _raise(
            "N", owner, f"an integer clearly above n/k = {n / k!r} (Lemma 1 needs n/N < k)", repr(N)
        )
    return r


def _R(r: float, N: int) -> np.ndarray:
    """R_i = r^i (r - 1)/(r^{N+1} - r) of equation (3), i = 1..N, which sum to 1.

    Computed as the normalised geometric sequence r^{i-1} / (1 + r + ... + r^{N-1}), the same
    quantity without the 0/0 of (3) as r approaches 0 or 1.
    """
    w = r ** np.arange(N, dtype=float)
    return w / math.fsum(w)


def construction_1(n, k, N):
    """Construction 1: a cell X_ns that (n, k)-dominance declares non-sensitive.

    With ``r`` from Lemma 1 and ``R_i`` of equation (3), the relative contributions are
    ``R_i`` except ``x_n/x = R_n - ε`` and ``x_{n+1}/x = R_{n+1} + ε``, where
    ``ε = (R_n - R_{n+1})/3``; the n largest add to ``k - ε < k``.

    Parameters
    ----------
    n : int
        Dominance parameter n >= 1.
    k : float
        Dominance parameter, a proportion in (0, 1).
    N : int
        Number of contributors, ``N > n`` and ``N > n/k``.

    Returns
    -------
    CounterexampleCell
        Relative contributions (total 1).

    Notes
    -----
    For ``n = 1`` the shift lowers the largest contribution itself to ``R_1 - ε``, so X_ns and
    X_s do not share ``x_1`` (Example 2 states 0.369 for both; X_ns has 0.3567).
    """
    n, k, N = _check_dominance_construction(n, k, N, "construction_1")
    r = _dominance_ratio(n, k, N, "construction_1")
    R = _R(r, N)
    eps = (R[n - 1] - R[n]) / 3.0
    x = R.copy()
    x[n - 1] -= eps
    x[n] += eps
    return CounterexampleCell(1, tuple(float(v) for v in x), r, float(eps))


def construction_2(n, k, N):
    """Construction 2: a cell X_s that (n, k)-dominance declares sensitive.

    The relative contributions are ``R_1, ..., R_n`` (adding to ``k``) followed by
    ``N - n`` equal contributions ``(1 - k)/(N - n)``.

    Parameters
    ----------
    n, k, N
        As in :func:`construction_1`.

    Returns
    -------
    CounterexampleCell
        Relative contributions (total 1).
    """
    n, k, N = _check_dominance_construction(n, k, N, "construction_2")
    r = _dominance_ratio(n, k, N, "construction_2")
    R = _R(r, N)
    x = np.concatenate((R[:n], np.full(N - n, (1.0 - k) / (N - n))))
    return CounterexampleCell(2, tuple(float(v) for v in x), r, None)


def _g_eq11(r: float, N: int) -> float:
    """g(r) = (r^N - r^2)/(r - 1) = r^2 + ... + r^{N-1} of equation (11)."""
    if r <= 0.0:
        return 0.0
    if r >= 1.0:
        return float(N - 2)
    return r * r * -math.expm1((N - 2) * math.log(r)) / (1.0 - r)


def _check_p_construction(p, N, owner):
    p = _check_fraction(p, "p", owner, high_open=True)
    N = check_int(N, "N", owner, low=3, high=MAX_CONSTRUCTION_N)
    return p, N


def p_percent_ratio(p, N):
    """The ``r`` in (0, 1) of equation (11): ``(r^N - r^2)/(r - 1) = p``.

    ``g(r) = r^2 + ... + r^{N-1}`` increases from 0 to ``N - 2 >= 1 > p`` on [0, 1), so the
    root exists and is unique for ``N >= 3``.

    Parameters
    ----------
    p : float
        The p%-rule's proportion in (0, 1).
    N : int
        Number of contributors, ``N >= 3``.

    Returns
    -------
    float
    """
    p, N = _check_p_construction(p, N, "p_percent_ratio")
    return _p_ratio(p, N)


def _p_ratio(p, N):
    return float(
        brentq(
            lambda r: _g_eq11(r, N) - p,
            0.0,
            1.0,
            xtol=1e-16,
            rtol=4 * np.finfo(float).eps,
            maxiter=500,
        )
    )


def construction_3(p, N):
    """Construction 3: a cell X_ns that the p%-rule (10) declares non-sensitive.

    With ``r`` from equation (11), the contributions are ``x_1 = r``, ``x_2 = r^2 - ε``,
    ``x_3 = r^3 + ε`` and ``x_i = r^i`` for ``i >= 4``, where ``ε = (r^2 - r^3)/3``; they add
    to ``x = (r^{N+1} - r)/(r - 1)`` of equation (12), and ``x - x_1 - x_2 = pr + ε > p x_1``.

    Parameters
    ----------
    p : float
        The p%-rule's proportion in (0, 1).
    N : int
        Number of contributors, ``N >= 3``.

    Returns
    -------
    CounterexampleCell
        Absolute contributions.
    """
    p, N = _check_p_construction(p, N, "construction_3")
    r = _p_ratio(p, N)
    x = r ** np.arange(1, N + 1, dtype=float)
    eps = (r**2 - r**3) / 3.0
    x[1] -= eps
    x[2] += eps
    return CounterexampleCell(3, tuple(float(v) for v in x), r, float(eps))


def construction_4(p, N):
    """Construction 4: a cell X_s that the p%-rule (10) declares sensitive.

    The contributions are ``x_1 = r``, ``x_2 = r^2`` and ``N - 2`` equal contributions
    ``pr/(N - 2)``; they add to ``x`` (equation (14)) and ``x - x_1 - x_2 = p x_1``.

    Parameters
    ----------
    p, N
        As in :func:`construction_3`.

    Returns
    -------
    CounterexampleCell
        Absolute contributions.
    """
    p, N = _check_p_construction(p, N, "construction_4")
    r = _p_ratio(p, N)
    x = np.concatenate(([r, r * r], np.full(N - 2, p * r / (N - 2))))
    return CounterexampleCell(4, tuple(float(v) for v in x), r, None)
