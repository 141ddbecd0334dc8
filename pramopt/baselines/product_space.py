"""Per-variable PRAM as it is released: over the full product space of the categories.

A tool that perturbs each variable independently (sdcMicro's ``pram()``, the PyPI peers) releases
a record ``m`` as the combination ``k`` with probability ``prod_v M_v[m_v, k_v]`` over *every*
combination ``k`` of categories, including combinations absent from the data.  Its matrix on the
present cells is therefore not row-stochastic: the mass ``1 - sum_{k present} P[m, k]`` leaves the
present cells.  :func:`product_matrix_on_cells` (in :mod:`.calibrate`) restricts it to the present
cells and renormalises the rows; that restricted matrix is a different mechanism (records only
move among present cells) and no longer keeps an invariant per-variable matrix invariant.

:func:`assess_product_space` measures the mechanism as released: C1 with every product-space
combination as a released cell (the denominators count the mass that lands anywhere), the mass
leaving the present cells, and the exact L2 loss of the unbiased estimator over the product space
(``P = kron(M_1, ..., M_d)``, whose inverse is the product of the inverses, so the loss is
computed without forming ``P``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..frequency.table import FrequencyTable
from ..verify import c1_risk
from .sdcmicro import sdcmicro_invariant_matrix

__all__ = ["product_space_codes", "released_rows", "product_space_loss", "ProductSpaceAssessment",
           "assess_product_space", "sdcmicro_matrices"]

#: Above this many combinations the released rows (K x |product space|) are not formed.
PRODUCT_SPACE_MAX = 200_000


def product_space_codes(levels: Sequence[int]) -> np.ndarray:
    """Codes of every combination of categories (last variable fastest), shape (prod levels, d)."""
    return np.array(list(itertools.product(*[range(int(L)) for L in levels])), dtype=np.int64).reshape(
        -1, len(levels))


def released_rows(codes: np.ndarray, matrices: Sequence, col_codes: np.ndarray) -> np.ndarray:
    """``R[m, k] = prod_v M_v[codes[m, v], col_codes[k, v]]``: release probabilities of the cells
    ``codes`` into the combinations ``col_codes`` (not renormalised)."""
    R = np.ones((codes.shape[0], col_codes.shape[0]))
    for v, M in enumerate(matrices):
        R *= np.asarray(M, dtype=float)[np.ix_(codes[:, v], col_codes[:, v])]
    return R


def product_space_loss(codes: np.ndarray, counts: np.ndarray, matrices: Sequence,
                       col_codes: np.ndarray | None = None) -> float:
    """Exact L2 loss of the unbiased estimator over the product space.

    ``(1/n^2) sum_l ||row_l(P^-1)||^2 (U0^T P)_l - 1/n`` with ``P = kron(M_v)``: the squared
    norm of a row of ``P^-1`` is the product over variables of the squared row norms of
    ``M_v^-1``.  ``inf`` when a per-variable matrix is singular.
    """
    mats = [np.asarray(M, dtype=float) for M in matrices]
    try:
        norms = [np.sum(np.linalg.inv(M) ** 2, axis=1) for M in mats]
    except np.linalg.LinAlgError:
        return float("inf")
    levels = [M.shape[0] for M in mats]
    cols = product_space_codes(levels) if col_codes is None else col_codes
    counts = np.asarray(counts, dtype=float)
    w = counts @ released_rows(codes, mats, cols)
    r = np.ones(cols.shape[0])
    for v, nv in enumerate(norms):
        r *= nv[cols[:, v]]
    n = counts.sum()
    return float(r @ w / n**2 - 1.0 / n)


@dataclass(frozen=True)
class ProductSpaceAssessment:
    """A per-variable mechanism measured as released (over the full product space).

    Attributes
    ----------
    max_risk : float
        C1's largest left-hand side with every product-space combination a released cell.
    max_risk_restricted : float
        The same for the restricted matrix (present cells, rows renormalised), another mechanism.
    leaving : ndarray of shape (K,)
        Per present cell, the probability that a record is released as an absent combination.
    mean_leaving : float
        ``sum_m U0(m) leaving[m] / n``: the share of records expected outside the present cells.
    max_leaving : float
    loss : float
        Exact L2 loss over the product space (:func:`product_space_loss`).
    invariance_error_restricted : float
        ``max_k |(U0^T R)_k - U0(k)| / U0(k)`` of the restricted matrix ``R``: 0 when the
        restriction keeps the data's frequencies in expectation.
    n_combinations : int
        Size of the product space.
    """

    max_risk: float
    max_risk_restricted: float
    leaving: np.ndarray
    mean_leaving: float
    max_leaving: float
    loss: float
    invariance_error_restricted: float
    n_combinations: int


def assess_product_space(table: FrequencyTable, matrices: Sequence, combinations) -> ProductSpaceAssessment:
    """Measure per-variable matrices (rows = original category) as released and as restricted."""
    levels = [len(c) for c in table.categories]
    size = int(np.prod(levels))
    if size > PRODUCT_SPACE_MAX:
        raise ValueError(f"the product space has {size:,} combinations (more than {PRODUCT_SPACE_MAX:,})")
    cols = product_space_codes(levels)
    combos = [tuple(c) for c in combinations]
    full = released_rows(table.codes, matrices, cols)
    inside = released_rows(table.codes, matrices, table.codes)
    stay = inside.sum(axis=1)
    leaving = np.clip(1.0 - stay, 0.0, 1.0)
    restricted = inside / stay[:, None]
    U0 = np.asarray(table.counts, dtype=float)
    return ProductSpaceAssessment(
        max_risk=c1_risk(full, table.codes, U0, combos, col_codes=cols).max_risk,
        max_risk_restricted=c1_risk(restricted, table.codes, U0, combos).max_risk,
        leaving=leaving,
        mean_leaving=float(U0 @ leaving / U0.sum()),
        max_leaving=float(leaving.max()),
        loss=product_space_loss(table.codes, U0, matrices, cols),
        invariance_error_restricted=float(np.max(np.abs(U0 @ restricted - U0) / U0)),
        n_combinations=size,
    )


def sdcmicro_matrices(table: FrequencyTable, pd=0.8, alpha=0.5, seed=0) -> list[np.ndarray]:
    """Per-variable matrices of sdcMicro's ``pram()`` (re-implemented, :mod:`.sdcmicro`), one
    seeded random diagonal per variable, as :func:`.calibrate.sdcmicro_on_cells` uses them."""
    from .calibrate import _sdcmicro_uniforms, _variable_frequencies

    u = _sdcmicro_uniforms(table, seed)
    return [sdcmicro_invariant_matrix(_variable_frequencies(table, v), pd, alpha, uniforms=u[v])
            for v in range(len(table.qi))]
