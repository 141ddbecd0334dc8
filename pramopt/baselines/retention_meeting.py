"""Retention-replacement at a required ε-DP or Pk-anonymity on the present cells of a table.

Algorithms 1-3 of Ikarashi et al. choose ρ on the product space (:mod:`.retention`).  A design
lives on the present cells: the product matrix is restricted to them and each row renormalised
(:func:`~pramopt.baselines.calibrate.retention_on_cells`), which changes its ε and k.  Here ρ is
calibrated so that the **restricted** matrix meets the requirements, measured exactly by
:func:`pramopt.risk.dp_pk_anonymity.dp_epsilon` and
:func:`~pramopt.risk.dp_pk_anonymity.pk_anonymity` (and, with ``alpha``, C1 by
:func:`pramopt.verify.c1_risk`).  It is feasible for the designer's program at the same ε and k, so
the designer starts from it and falls back to it.

With one ρ per attribute (Corollary 2), the ε budget is split among the attributes:
``ε_a = w_a E`` gives ``ρ_a = (e^{ε_a} - 1)/(e^{ε_a} + |V_a| - 1)``; E is the largest budget whose
restricted matrix meets every requirement, and the split w minimises the exact L2 loss
(Nelder-Mead on the simplex).  On the product space ``AR = e^{-2 Σ ε_a}`` (Corollary 5), so the
same split serves k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..frequency.table import FrequencyTable
from ..loss import l2_loss
from ..risk.dp_pk_anonymity import dp_epsilon, pk_anonymity
from ..verify import c1_risk
from .calibrate import retention_on_cells

__all__ = ["PrivacyRetention", "retention_meeting", "rho_of_epsilon", "joint_retention"]


@dataclass(frozen=True)
class PrivacyRetention:
    """A retention-replacement matrix on the present cells and what it meets."""

    P: np.ndarray
    rho: list
    epsilon: float
    k: float
    max_risk: float
    loss: float
    ok: bool


def rho_of_epsilon(eps: float, V: int) -> float:
    """ρ of one attribute with |V| values whose ε (Corollary 2) is ``eps``."""
    if V <= 1 or math.isinf(eps):
        return 1.0
    e = math.exp(eps)
    return (e - 1.0) / (e + V - 1.0)


def _measure(table: FrequencyTable, combos, P) -> tuple[float, float, float]:
    eps = dp_epsilon(P)
    k = pk_anonymity(P, table.n)
    risk = c1_risk(P, table.codes, table.counts, combos).max_risk if combos else 0.0
    return eps, k, risk


def _meets(m, epsilon, k, alpha) -> bool:
    eps, kk, risk = m
    return (
        (epsilon is None or eps <= epsilon)
        and (k is None or kk >= k)
        and (alpha is None or risk <= alpha)
    )


def _largest(build, ok, iters: int = 50):
    """Largest t in [0, 1] with ok(build(t)), by bisection (t = 0: the uniform matrix)."""
    P1 = build(1.0)
    if ok(P1):
        return 1.0
    lo, hi = 0.0, 1.0
    if not ok(build(0.0)):
        return None
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if ok(build(mid)):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return lo


def joint_retention(K: int, rho: float) -> np.ndarray:
    """Retention-replacement over the present cells as one attribute (K-ary randomized response):
    ``ρ I + (1 - ρ) J / K``; its ε is ``ln(1 + K ρ/(1 - ρ))`` (Corollary 2 with |V| = K)."""
    return rho * np.eye(K) + (1.0 - rho) / K * np.ones((K, K))


def retention_meeting(
    table: FrequencyTable,
    combos=(),
    *,
    epsilon=None,
    k=None,
    alpha=None,
    per_attribute: bool = False,
    joint: bool = False,
    max_evals: int = 60,
) -> PrivacyRetention:
    """The retention-replacement matrix on the present cells of largest ρ meeting ε, k and C1.

    Parameters
    ----------
    table : FrequencyTable
    combos : Π as indices (only used with ``alpha``)
    epsilon, k, alpha : the requirements (None: not required)
    per_attribute : bool
        One ρ per attribute (the ε budget split to minimise the L2 loss) instead of one for all.
    joint : bool
        The present cells as one attribute (:func:`joint_retention`), not a product over attributes.

    Returns
    -------
    PrivacyRetention
        ``ok`` is False when not even ρ = 0 (a uniform matrix) meets the requirements.
    """
    levels = [len(c) for c in table.categories]
    d = len(levels)
    combos = tuple(combos) if alpha is not None else ()

    def ok(P):
        return _meets(_measure(table, combos, P), epsilon, k, alpha)

    def result(P, rho):
        m = _measure(table, combos, P)
        return PrivacyRetention(
            P, rho, m[0], m[1], m[2], l2_loss(P, table.counts), _meets(m, epsilon, k, alpha)
        )

    if joint:
        t = _largest(lambda r: joint_retention(table.n_cells, r), ok)
        rho = 0.0 if t is None else t
        return result(joint_retention(table.n_cells, rho), [rho])
    if not per_attribute:
        t = _largest(lambda r: retention_on_cells(table, r), ok)
        rho = 0.0 if t is None else t
        return result(retention_on_cells(table, rho), [rho] * d)

    cap = 60.0  # a budget of e^60: every ρ_a is 1 to double precision

    def rhos_of(w, E):
        return [rho_of_epsilon(wa * E, V) for wa, V in zip(w, levels)]

    def best_for(w):
        t = _largest(lambda s: retention_on_cells(table, rhos_of(w, s * cap)), ok)
        if t is None:
            return None, math.inf
        rho = rhos_of(w, t * cap)
        return rho, l2_loss(retention_on_cells(table, rho), table.counts)

    seen = {}

    def f(theta):
        w = np.exp(np.concatenate([[0.0], theta]))
        w = w / w.sum()
        key = tuple(np.round(theta, 6))
        if key not in seen:
            seen[key] = best_for(w)
        return seen[key][1]

    from scipy.optimize import minimize

    # start from the split of the common ρ, then let the loss move it
    V = np.array(levels, dtype=float)
    e0 = np.log1p(V * 0.5 / (1 - 0.5))  # the relative ε of a common ρ = 1/2
    theta0 = np.log(e0[1:] / e0[0]) if d > 1 else np.zeros(0)
    if d > 1:
        res = minimize(
            f,
            theta0,
            method="Nelder-Mead",
            options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-9},
        )
        theta = res.x
    else:
        theta = theta0
    f(theta)
    rho, _ = min(seen.values(), key=lambda v: v[1])
    if rho is None:
        rho = [0.0] * d
    return result(retention_on_cells(table, rho), list(rho))
