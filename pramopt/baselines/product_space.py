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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._validation import InvalidParameterError, as_transition_matrix, check_real
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, category_codes, frequency_table
from ..risk.assessment import Assessment
from ..risk.correct_match import correct_match_risks
from ..risk.dp_pk_anonymity import dp_epsilon_product, pk_anonymity_product
from ..verify import c1_risk
from .sdcmicro import sdcmicro_invariant_matrix

__all__ = [
    "product_space_codes",
    "released_rows",
    "product_space_loss",
    "ProductSpaceAssessment",
    "assess_product_space",
    "sdcmicro_matrices",
    "per_variable_matrices",
    "assess_per_variable",
]

#: Above this many combinations the released rows (K x |product space|) are not formed.
PRODUCT_SPACE_MAX = 200_000


def product_space_codes(levels: Sequence[int]) -> np.ndarray:
    """Codes of every combination of categories (last variable fastest), shape (prod levels, d)."""
    return np.array(
        list(itertools.product(*[range(int(L)) for L in levels])), dtype=np.int64
    ).reshape(-1, len(levels))


def released_rows(codes: np.ndarray, matrices: Sequence, col_codes: np.ndarray) -> np.ndarray:
    """``R[m, k] = prod_v M_v[codes[m, v], col_codes[k, v]]``: release probabilities of the cells
    ``codes`` into the combinations ``col_codes`` (not renormalised)."""
    R = np.ones((codes.shape[0], col_codes.shape[0]))
    for v, M in enumerate(matrices):
        R *= np.asarray(M, dtype=float)[np.ix_(codes[:, v], col_codes[:, v])]
    return R


def product_space_loss(
    codes: np.ndarray, counts: np.ndarray, matrices: Sequence, col_codes: np.ndarray | None = None
) -> float:
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


def assess_product_space(
    table: FrequencyTable, matrices: Sequence, combinations
) -> ProductSpaceAssessment:
    """Measure per-variable matrices (rows = original category) as released and as restricted."""
    levels = [
        np.asarray(M).shape[0] for M in matrices
    ]  # a matrix may add categories absent from the data
    size = int(np.prod(levels))
    if size > PRODUCT_SPACE_MAX:
        raise ValueError(
            f"the product space has {size:,} combinations (more than {PRODUCT_SPACE_MAX:,})"
        )
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
    return [
        sdcmicro_invariant_matrix(_variable_frequencies(table, v), pd, alpha, uniforms=u[v])
        for v in range(len(table.qi))
    ]


def per_variable_matrices(
    table: FrequencyTable,
    matrices: Mapping,
    owner: str = "assess_per_variable",
    renormalize: float | None = None,
) -> tuple[list[np.ndarray], list[list]]:
    """One matrix per identifying variable, in the table's codes (the identity where none is given).

    Parameters
    ----------
    table : FrequencyTable
    matrices : mapping of variable name to a square DataFrame or array
        A DataFrame is matched by label: its index (original categories) and columns (released
        categories) are the same labels in any order, and include every category of the variable
        in the data (more are allowed: they are released categories absent from the data).  An
        array is in the order of ``table.categories``.
    renormalize : float, optional
        Accept rows that sum to within this of 1 and divide them by their sums, with a warning.

    Returns
    -------
    (list of ndarray, list of lists)
        Per variable the matrix, rows and columns in code order (the table's categories, then
        the matrix's other categories), and the labels of those extra categories.
    """
    unknown = [q for q in matrices if q not in table.qi]
    if unknown:
        raise InvalidParameterError(
            f"The 'matrices' parameter of {owner} must name identifying variables "
            f"{list(table.qi)!r}; got {unknown!r}."
        )
    mats: list[np.ndarray] = []
    extras: list[list] = []
    for j, q in enumerate(table.qi):
        cats = table.categories[j]
        if q not in matrices:
            mats.append(np.eye(len(cats)))  # not given a matrix: released unchanged
            extras.append([])
            continue
        M = matrices[q]
        name = f"matrices[{q!r}]"
        if isinstance(M, pd.DataFrame):
            rows, cols = pd.Index(M.index), pd.Index(M.columns)
            if (
                rows.has_duplicates
                or len(rows) != len(cols)
                or set(map(str, rows)) != set(map(str, cols))
            ):
                raise InvalidParameterError(
                    f"The {name} parameter of {owner} must have the same categories, once each, "
                    "as rows and as "
                    f"columns; got rows {list(rows)!r} and columns {list(cols)!r}."
                )
            col_of = {str(c): i for i, c in enumerate(cols)}
            A = as_transition_matrix(
                M.to_numpy(dtype=float)[:, [col_of[str(r)] for r in rows]],
                name,
                owner,
                renormalize=renormalize,
            )
            code = category_codes(pd.Series(list(rows), dtype=object), cats)
            absent = [cats[i] for i in range(len(cats)) if i not in set(code.tolist())]
            if absent:
                raise InvalidParameterError(
                    f"The {name} parameter of {owner} must have a row for every category of {q!r} "
                    "in the data; "
                    f"{absent[:5]!r} missing (the matrix has {list(rows)[:10]!r})."
                )
            extra = np.flatnonzero(code < 0)
            code[extra] = len(cats) + np.arange(extra.size)
            order = np.argsort(code)
            mats.append(A[np.ix_(order, order)])
            extras.append([rows[i] for i in extra])
        else:
            A = as_transition_matrix(M, name, owner, renormalize=renormalize)
            if A.shape[0] != len(cats):
                raise InvalidParameterError(
                    f"The {name} parameter of {owner} must be {len(cats)}x{len(cats)} (one row "
                    "per category of "
                    f"{q!r}, in the data's order {list(cats)!r}) when it is not a labelled "
                    "DataFrame; got "
                    f"{A.shape[0]}x{A.shape[1]}."
                )
            mats.append(A)
            extras.append([])
    return mats, extras


def _table_of(data, qi, owner: str) -> FrequencyTable:
    """The frequency table of ``data`` (as given, when it is one)."""
    if isinstance(data, FrequencyTable):
        return data
    elif isinstance(data, pd.DataFrame):
        if qi is None:
            raise InvalidParameterError(
                f"The 'qi' parameter of {owner} must name the identifying variables when data is "
                "a DataFrame; got None."
            )
        return frequency_table(data, qi, owner=owner)
    else:
        raise InvalidParameterError(
            f"The 'data' parameter of {owner} must be a pandas DataFrame or a FrequencyTable; got "
            f"{type(data).__name__}."
        )


def assess_per_variable(
    data,
    matrices: Mapping,
    qi=None,
    *,
    combinations=None,
    combination_size=3,
    alpha=None,
    renormalize: float | None = None,
) -> Assessment:
    """Assess one PRAM matrix per variable (sdcMicro's ``pram()``, μ-ARGUS) as it is released.

    The variables are perturbed independently, so a record of cell m is released as the
    combination k with probability ``prod_v M_v[m_v, k_v]`` over the whole product space of the
    categories (``P = kron(M_1, ..., M_d)``), combinations absent from the data included.  C1 is
    measured with every combination a released cell, so its denominators count the mass sent
    there; ``released_absent`` is the share of records expected to be released as one of them.
    ε and k are the sums and products over the variables (Ikarashi et al., Corollaries 1 and 4),
    the condition number the product of the variables' ones, the loss
    :func:`product_space_loss`; nothing of size |product space|² is made.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
    matrices : mapping of variable name to a square labelled DataFrame or array
        See :func:`per_variable_matrices`; variables without a matrix are released unchanged.
    qi, combinations, combination_size, alpha, renormalize
        As :func:`pramopt.assess`.

    Returns
    -------
    Assessment
        ``n_cells`` is the size of the product space.
    """
    owner = "assess_per_variable"
    table = _table_of(data, qi, owner)
    if not isinstance(matrices, Mapping) or not matrices:
        raise InvalidParameterError(
            f"The 'matrices' parameter of {owner} must map at least one identifying variable to "
            "its matrix; "
            f"got {type(matrices).__name__}."
        )
    if alpha is not None:
        alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0)
    if renormalize is not None:
        renormalize = check_real(
            renormalize, "renormalize", owner, low=0.0, high=0.1, high_open=False
        )
    combos = resolve_combinations(
        table.qi, size=combination_size, explicit=combinations, owner=owner
    )
    mats, _ = per_variable_matrices(table, matrices, owner, renormalize)
    levels = [M.shape[0] for M in mats]
    size = math.prod(levels)
    if size > PRODUCT_SPACE_MAX:
        raise InvalidParameterError(
            f"The 'matrices' parameter of {owner} spans a product space of {size:,} combinations "
            "of categories "
            f"({' x '.join(map(str, levels))}), more than {PRODUCT_SPACE_MAX:,}; assess fewer "
            "variables at once."
        )
    cols = product_space_codes(levels)
    U0 = np.asarray(table.counts, dtype=float)
    R = released_rows(
        table.codes, mats, cols
    )  # K x |product space|: present cells into every combination
    present = np.ravel_multi_index(tuple(table.codes.T), levels)
    n = float(U0.sum())
    released = U0 @ R
    counts_full = np.zeros(size)
    counts_full[present] = U0
    stay = R[np.arange(len(U0)), present]
    r1 = None
    if len(table.qi) == 1:
        r1 = float(correct_match_risks(mats[0], counts_full.astype(np.int64)).max())
    return Assessment(
        max_risk=float(c1_risk(R, table.codes, U0, combos, col_codes=cols).max_risk),
        k=pk_anonymity_product(mats, table.n),
        epsilon=dp_epsilon_product(mats),
        expected_changes=float(U0 @ (1.0 - stay)),
        loss=product_space_loss(table.codes, U0, mats, cols),
        r1_max=r1,
        invariance_error=float(np.abs(released - counts_full).sum()),
        condition_number=float(np.prod([np.linalg.cond(M) for M in mats])),
        n_records=table.n,
        n_cells=size,
        n_present=len(U0),
        n_combinations=len(combos),
        alpha=alpha,
        released_absent=float((U0 @ (1.0 - R[:, present].sum(axis=1))) / n),
    )
