"""Inverse-frequency PRAM (IFPR) of Nayak et al. / Ghatak & Roy.

References are to D. Ghatak and B. K. Roy, *An Improved Bound for Security in an Identity
Disclosure Problem* (``../shared/seeds/000_…``).  One variable with categories ``c_1..c_k`` and
frequencies ``T``; rows of a matrix are original categories, columns released ones
(``p_ij = P[Z = c_j | X = c_i]``, equation (1)).

Notes on the paper's text (checked against its own numbers):

* Equation (2) is printed ``P T = T``; with the row convention of (1) the invariance that the
  IFPR matrix (3) satisfies is ``T^T P = T^T`` (column sums weighted by ``T``).
* Section 3 defines ``α_i = p_{1i}``; the derivation of (8)-(9) and the closed form (11) need
  ``α_i = p_{i1}``, the probability that a unit of ``c_i`` is released as ``c_1`` (a column
  of P).  This module uses the column, which reproduces (11).
* The last line of (10) is printed ``(1/a)[1 + 1/(β_1 Σ_{a-1})]^{-1}``; the line above it and
  the appendix give ``(1/a)[1 + Σ_a / (β_1 Σ_{a-1})]^{-1}``, used here.
* Section 3 calls ``K_1(ξ, T_1)`` "the largest integer contained in" ``T_1/(T_1 - θ)``; Table 1
  (all 70 entries) and the Section 4 example (block size 6 from 5.83) are reproduced by the
  smallest integer not below it, and never less than 2 (a block has ``k' > 1``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validation import InvalidParameterError, as_frequencies, check_choice, check_int, check_real
from ..risk.correct_match import correct_match_risks

__all__ = [
    "ifpr_psi",
    "ifpr_h",
    "ifpr_theta",
    "ifpr_block_size",
    "ifpr_block_matrix",
    "ifpr_design",
    "ifpr_matrix",
    "IFPRDesign",
]


# ---------------------------------------------------------------------------------------------
# θ* and the block size (Section 3, Lemma 3.2, Table 1)
# ---------------------------------------------------------------------------------------------


def ifpr_psi(T1, theta) -> float:
    """The bound ``ψ(T_1, θ) = (T_1 - θ) / (T_1 (T_1 - θ) + θ^2)`` of equation (11)."""
    T1 = check_real(T1, "T1", "ifpr_psi", low=0.0)
    theta = check_real(
        theta, "theta", "ifpr_psi", low=0.0, high=T1, low_open=False, high_open=False
    )
    return (T1 - theta) / (T1 * (T1 - theta) + theta**2)


def ifpr_h(theta, T1) -> float:
    """``h(θ)`` of the proof of Lemma 3.2: ``ψ(1, θ)`` below ``T_1/(T_1+1)``, ``ψ(T_1, θ)`` above.

    Continuous and strictly decreasing on ``[0, T_1]`` from 1 to 0.
    """
    T1 = check_real(T1, "T1", "ifpr_h", low=1.0, low_open=False)
    theta = check_real(theta, "theta", "ifpr_h", low=0.0, high=T1, low_open=False, high_open=False)
    T = 1.0 if theta < T1 / (T1 + 1.0) else T1
    return (T - theta) / (T * (T - theta) + theta**2) if T > theta else 0.0


def _psi(T: float, theta: float) -> float:
    return (T - theta) / (T * (T - theta) + theta**2)


def _psi_root(xi: float, T: float) -> float:
    """Positive root of ``ψ(T, θ) = ξ``: ``ξ θ^2 + (1 - ξT) θ - T (1 - ξT) = 0`` (nan if none)."""
    b = 1.0 - xi * T
    disc = b * (1.0 + 3.0 * xi * T)  # b^2 + 4 ξ T b
    if disc < 0:
        return math.nan
    return (-b + math.sqrt(disc)) / (2.0 * xi)


def _theta(xi: float, T1: float) -> float:
    switch = T1 / (T1 + 1.0)
    th = _psi_root(xi, T1)
    if math.isfinite(th) and switch <= th < T1:
        return th
    th = _psi_root(xi, 1.0)
    if not (0.0 < th <= switch + 1e-12):  # pragma: no cover - h is continuous, so one branch holds
        raise RuntimeError(f"no root of h(theta) = {xi} for T1 = {T1}")
    return th


def ifpr_theta(xi, T1) -> float:
    """θ* solving ``h(θ) = ξ`` on ``(0, T_1)`` (Lemma 3.2; ``h`` is ψ on its two branches).

    Parameters
    ----------
    xi : float in (0, 1)
        Required bound on the probability of a correct match.
    T1 : int >= 1
        Frequency of the category to protect.

    Returns
    -------
    float
        θ*; 1.656854 for ξ = 0.1, T1 = 2 (Section 4).
    """
    xi = check_real(xi, "xi", "ifpr_theta", low=0.0, high=1.0)
    T1 = check_int(T1, "T1", "ifpr_theta", low=1)
    return _theta(xi, float(T1))


def ifpr_block_size(xi, T1) -> int:
    """Minimum block size ``K_1(ξ, T_1)`` (Section 3, Table 1).

    ``max(2, ceil(T_1 / (T_1 - θ*)))``; see the module notes on "largest integer".
    """
    xi = check_real(xi, "xi", "ifpr_block_size", low=0.0, high=1.0)
    T1 = check_int(T1, "T1", "ifpr_block_size", low=1)
    return _block_size(_theta(xi, float(T1)), float(T1))


def _block_size(theta: float, T1: float) -> int:
    K = T1 / (T1 - theta)
    # guard against K landing a rounding error above an integer
    k = math.ceil(K - 1e-9)
    return max(2, int(k))


def _nayak_theta(xi: float) -> float:
    """θ < 1 with ``max_{T >= 1} ψ(T, θ) = ξ``: ``h`` with ``T_1 = 2`` (needs ξ > 1/3)."""
    return _theta(xi, 2.0)


# ---------------------------------------------------------------------------------------------
# The IFPR matrix (equation (3)) and the Section 2 procedure
# ---------------------------------------------------------------------------------------------


def ifpr_block_matrix(T, blocks: Sequence[Sequence[int]], theta) -> np.ndarray:
    """The IFPR block-diagonal matrix of equation (3).

    Within a block of size ``k'``: ``p_ii = 1 - θ_b / T_i`` and ``p_ij = θ_b / ((k' - 1) T_i)``;
    categories outside every block keep their value.  The matrix is invariant,
    ``T^T P = T^T`` (equation (2) in the row convention).

    Parameters
    ----------
    T : sequence of int
        Category frequencies.
    blocks : sequence of sequences of int
        Disjoint blocks of category indices, each of size >= 2.
    theta : float or sequence of float
        θ of each block (one number for all blocks), ``0 <= θ_b <= min_{i in b} T_i``.
    """
    owner = "ifpr_block_matrix"
    T = as_frequencies(T, "T", owner)
    k = T.size
    blocks = [list(b) for b in blocks]
    seen: set[int] = set()
    for b in blocks:
        if (
            len(b) < 2
            or any(
                isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < k
                for i in b
            )
            or len(set(b)) != len(b)
            or seen.intersection(b)
        ):
            raise InvalidParameterError(
                f"The 'blocks' parameter of {owner} must be disjoint lists of at least 2 category "
                f"indices in [0, {k - 1}]; got {blocks!r}."
            )
        seen.update(int(i) for i in b)
    thetas = [theta] * len(blocks) if np.ndim(theta) == 0 else list(theta)
    if len(thetas) != len(blocks):
        raise InvalidParameterError(
            f"The 'theta' parameter of {owner} must be one number or one per block "
            f"({len(blocks)}); got {len(thetas)}."
        )
    P = np.eye(k)
    for b, th in zip(blocks, thetas):
        tmin = float(T[b].min())
        if tmin < 1:
            raise InvalidParameterError(
                f"The 'blocks' parameter of {owner} must only hold categories with T >= 1; got "
                f"block {b!r}."
            )
        th = check_real(th, "theta", owner, low=0.0, high=tmin, low_open=False, high_open=False)
        kb = len(b)
        idx = np.asarray(b)
        Tb = T[idx].astype(float)
        sub = (th / ((kb - 1) * Tb))[:, None] * np.ones((1, kb))
        np.fill_diagonal(sub, 1.0 - th / Tb)
        P[np.ix_(idx, idx)] = sub
    return P


@dataclass(frozen=True)
class IFPRDesign:
    """Result of the IFPR procedure of Ghatak & Roy, Section 2.

    Attributes
    ----------
    matrix : ndarray of shape (k, k)
        The block-diagonal matrix (3).
    frequencies : ndarray of shape (k,)
        T.
    xi : float
        Requested bound ξ.
    blocks : tuple of tuple of int
        The blocks, each starting with the category it was formed to protect.
    thetas : tuple of float
        θ* of each block.
    xi_used : tuple of float
        The ξ (or fallback ``ξ_l = 1/(n* - l)``) each block was built for.
    protected : tuple of int
        Categories that needed protection (``0 < T_c <= 1/ξ``).
    unprotected : tuple of int
        Categories that needed protection but could not be put in any block.
    r1 : ndarray of shape (k,)
        Exact ``R1(1, T)`` of each category as the intruder's target (equation (11) form for a
        general matrix; 0 where ``T_c = 0``).
    invariance_error : float
        ``max_j |(T^T P)_j - T_j|``, zero up to rounding.
    method : str
        ``"ghatak-roy"`` or ``"nayak"``.
    """

    matrix: np.ndarray
    frequencies: np.ndarray
    xi: float
    blocks: tuple
    thetas: tuple
    xi_used: tuple
    protected: tuple
    unprotected: tuple
    r1: np.ndarray = field(repr=False)
    invariance_error: float
    method: str

    @property
    def is_invariant(self) -> bool:
        """Whether ``T^T P = T^T`` holds (equation (2)) up to 1e-9 relative."""
        return self.invariance_error <= 1e-9 * max(1.0, float(self.frequencies.sum()))

    @property
    def max_r1(self) -> float:
        """Largest exact ``R1(1, T)`` over the categories that needed protection."""
        idx = list(self.protected)
        return float(self.r1[idx].max()) if idx else 0.0

    @property
    def meets_xi(self) -> bool:
        """Whether every category that needed protection has ``R1(1, T) <= ξ``."""
        return not self.unprotected and self.max_r1 <= self.xi + 1e-12


def ifpr_design(
    T,
    xi,
    *,
    method: str = "ghatak-roy",
    protect: str = "all",
    partners: str = "safe",
    fallback: bool = True,
) -> IFPRDesign:
    """The whole procedure of Ghatak & Roy, Section 2, for one variable.

    For each category ``c`` with ``0 < T_c <= 1/ξ`` (lowest frequency first) not yet in a block:
    form a block of ``K_1(ξ, T_c)`` categories from ``c`` and the not yet used categories with
    ``T_j >= T_c``, taking the lowest frequencies first (as in Section 4), with θ* solving
    ``h(θ) = ξ``.  When too few such categories exist, fall back to ``ξ_l = 1/(n* - l)``,
    ``l = 1, 2, ...`` where ``1/n* <= ξ < 1/(n* - 1)``, until one fits.

    Parameters
    ----------
    T : sequence of int
        Category frequencies.
    xi : float in (0, 1)
        Bound on the probability of a correct match, equation (4).
    method : {"ghatak-roy", "nayak"}
        ``"nayak"``: Nayak et al.'s original design with θ < 1 (the θ with
        ``max_{T >= 1} ψ(T, θ) = ξ``, ``h`` with ``T_1 = 2``), only for ξ > 1/3.
    protect : {"all", "first"}
        Protect every category that needs it, or only the least frequent one (``c_1``).
    partners : {"safe", "lowest"}
        How the other categories of a block are chosen among the unused ones with
        ``T_j >= T_c``.  ``"lowest"`` is the paper's rule taken literally (lowest frequencies
        first).  It protects ``c`` but not always the other members: ``ψ(T, θ)`` is not
        monotone in ``T``, so a member with a small ``T_j > T_c`` can have ``R1(1, T) > ξ``
        (for ``T_c = 1``, ``T_j = 2``, ξ = 0.1: θ* = 0.908 and ``ψ(2, θ*) = 0.363``).
        ``"safe"`` (default) only takes members with ``T_j = T_c`` or ``ψ(T_j, θ*) <= ξ``, lowest
        first, which bounds every member's ``R1(1, T)`` by ξ (the sum in (11) is at least 1).
        Both give the Section 4 example.
    fallback : bool
        Use the ``ξ_l`` fallback; otherwise a category without enough partners stays unprotected.

    Returns
    -------
    IFPRDesign
    """
    owner = "ifpr_design"
    T = as_frequencies(T, "T", owner)
    xi = check_real(xi, "xi", owner, low=0.0, high=1.0)
    check_choice(method, "method", owner, ["ghatak-roy", "nayak"])
    check_choice(protect, "protect", owner, ["all", "first"])
    check_choice(partners, "partners", owner, ["safe", "lowest"])
    if method == "nayak" and xi <= 1.0 / 3.0:
        raise InvalidParameterError(
            f"The 'xi' parameter of {owner} must be in (1/3, 1) with method='nayak' (θ < 1); got "
            f"{xi!r}."
        )
    k = T.size
    need = [int(c) for c in np.lexsort((np.arange(k), T)) if 0 < T[c] <= 1.0 / xi]
    if protect == "first":
        need = need[:1]
    used: set[int] = set()
    blocks, thetas, xis, unprotected = [], [], [], []
    n_star = math.ceil(1.0 / xi - 1e-12)  # 1/n* <= ξ < 1/(n* - 1)
    for c in need:
        if c in used:
            continue
        found = _block_for(c, T, used, xi, n_star, method, partners, fallback)
        if found is None:
            unprotected.append(c)
            continue
        b, th, x = found
        blocks.append(tuple(b))
        thetas.append(th)
        xis.append(x)
        used.update(b)
    P = ifpr_block_matrix(T, blocks, thetas) if blocks else np.eye(k)
    r1 = correct_match_risks(P, T)
    inv = float(np.abs(T @ P - T).max())
    return IFPRDesign(
        matrix=P,
        frequencies=T,
        xi=xi,
        blocks=tuple(blocks),
        thetas=tuple(thetas),
        xi_used=tuple(xis),
        protected=tuple(need),
        unprotected=tuple(unprotected),
        r1=r1,
        invariance_error=inv,
        method=method,
    )


def _block_for(c: int, T, used, xi, n_star: int, method, partners, fallback):
    """The block that protects category ``c``: ``(members, θ, ξ used)``, or None."""
    k = T.size
    cand = [
        int(j) for j in np.lexsort((np.arange(k), T)) if j != c and j not in used and T[j] >= T[c]
    ]
    levels = [xi] + ([1.0 / m for m in range(n_star - 1, 1, -1)] if fallback else [])
    if method == "nayak":
        levels = [x for x in levels if x > 1.0 / 3.0]

    def theta_of(x, c=c):
        return _nayak_theta(x) if method == "nayak" else _theta(x, float(T[c]))

    # the block size falls as ξ grows: skip (by bisection) the levels needing more partners
    # than there are candidates, instead of trying thousands of ξ_l one by one
    lo, hi = 0, len(levels)
    while lo < hi:
        mid = (lo + hi) // 2
        if _block_size(theta_of(levels[mid]), float(T[c])) - 1 <= len(cand):
            hi = mid
        else:
            lo = mid + 1
    for x in levels[lo:]:
        th = theta_of(x)
        kb = _block_size(th, float(T[c]))
        if partners == "safe":
            ok = [j for j in cand if T[j] == T[c] or _psi(float(T[j]), th) <= x + 1e-12]
        else:
            ok = cand
        if len(ok) >= kb - 1:
            return [c] + ok[: kb - 1], th, x
    return None


def ifpr_matrix(T, xi, **kwargs) -> np.ndarray:
    """The matrix of :func:`ifpr_design` (Ghatak & Roy, Section 2); see that function."""
    return ifpr_design(T, xi, **kwargs).matrix
