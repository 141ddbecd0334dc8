"""One risk report for any PRAM matrix on one data set.

Side by side: the C1 maximum risk of Cator, Hensbergen & Rozenholc (the core verifier), the
Pk-anonymity k and the ε-DP ε of Ikarashi et al., the largest correct-match risk ``R1(1, T)``
of Nayak et al. / Ghatak & Roy when the matrix acts on one variable, the expected number of
changed records, the exact L2 loss, the invariance error and the condition number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from .._validation import ROW_SUM_TOL, InvalidParameterError, as_transition_matrix, check_real
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, category_codes, frequency_table
from ..loss import DENSE_MAX, condition_number, expected_changes, l2_loss
from ..result import DesignResult
from ..verify import c1_risk, c1_risk_form
from .correct_match import correct_match_risks
from .dp_pk_anonymity import dp_epsilon, pk_anonymity, pk_ratio

__all__ = ["Assessment", "assess"]

#: Largest matrix for which :func:`assess` computes the Pk-anonymity k (O(K^3) operations).
MAX_CELLS_FOR_K = 3000


@dataclass(frozen=True)
class Assessment:
    """Risk and utility of one PRAM matrix on one data set.

    Attributes
    ----------
    max_risk : float
        Largest left-hand side of C1 (Cator et al., eq. (1)) over every present cell, every
        combination π and every k0 (:func:`pramopt.verify.c1_risk`).
    k : float
        Pk-anonymity (Ikarashi et al., Theorem 3) with ``|R|`` = number of records; ``nan`` for a
        matrix with more than ``MAX_CELLS_FOR_K`` rows, except a design kept as parameters
        (its ``form``), whose k is found in O(K) at any size.
    epsilon : float
        ε-DP (Ikarashi et al., Theorem 1); ``inf`` when a column mixes zero and positive entries.
    expected_changes : float
        Expected number of records whose identifying values change.
    loss : float
        Exact L2 loss of the unbiased estimator (Cator et al., Section 3); ``inf`` if singular.
    r1_max : float or None
        Largest ``R1(1, T)`` (Ghatak & Roy eq. (10)-(11)) over the categories, each as the
        intruder's target, when the matrix acts on one variable; ``None`` otherwise.
        ``R1(1, T)`` is the risk given that one released record has the target's category; it
        bounds ``R1(a, T)`` for every ``a`` when the target's retention probability is the
        largest entry of its column (Theorem 3.1).
    invariance_error : float
        ``||U0^T P - U0^T||_1``: expected records moved out of balance (0 for invariant PRAM).
    condition_number : float
        2-norm condition number of the matrix; for a design kept as parameters with a pool of
        more than :data:`pramopt.loss.DENSE_MAX` cells, the exact 1-norm one (no dense matrix
        is made).
    n_records : int
    n_cells : int
        Number of rows (= columns) of the matrix.
    n_present : int
        Number of cells present in the data.
    n_combinations : int
        Size of Π.
    alpha : float or None
        The C1 level to compare ``max_risk`` with, when given.
    released_absent : float or None
        For per-variable matrices combined over the product space
        (:func:`pramopt.baselines.product_space.assess_per_variable`): the share of records
        expected to be released as a combination of categories absent from the data; ``None``
        for one matrix on the cells.
    """

    max_risk: float
    k: float
    epsilon: float
    expected_changes: float
    loss: float
    r1_max: float | None
    invariance_error: float
    condition_number: float
    n_records: int
    n_cells: int
    n_present: int
    n_combinations: int
    alpha: float | None = None
    released_absent: float | None = None

    @property
    def meets_c1(self) -> bool | None:
        """Whether ``max_risk <= alpha`` (``None`` when no alpha was given)."""
        return None if self.alpha is None else bool(self.max_risk <= self.alpha)

    def to_dict(self) -> dict:
        """Plain dictionary (infinite values stay ``float('inf')``)."""
        d = asdict(self)
        d["meets_c1"] = self.meets_c1
        return d

    def summary(self) -> str:
        """A short human-readable report."""

        def f(x, fmt="{:.6g}"):
            return (
                "n/a"
                if x is None
                else ("inf" if isinstance(x, float) and math.isinf(x) else fmt.format(x))
            )

        lines = [
            f"PRAM assessment: {self.n_records} records, {self.n_present} present cells, "
            f"{self.n_cells}x{self.n_cells} matrix, {self.n_combinations} combinations",
            f"  C1 max risk (Cator et al.)        {f(self.max_risk)}"
            + (
                ""
                if self.alpha is None
                else f"  (alpha = {self.alpha:g}: {'met' if self.meets_c1 else 'NOT met'})"
            ),
            f"  Pk-anonymity k (Ikarashi et al.)  {f(self.k)}",
            f"  epsilon-DP (Ikarashi et al.)      {f(self.epsilon)}",
            f"  max R1(1, T) (Nayak; one var.)    {f(self.r1_max)}",
            f"  expected changed records          {f(self.expected_changes, '{:.2f}')}",
            f"  exact L2 loss                     {f(self.loss)}",
            f"  invariance error ||U0'P - U0'||_1 {f(self.invariance_error)}",
            f"  condition number                  {f(self.condition_number)}",
        ]
        if self.released_absent is not None:
            lines.insert(
                1,
                f"  one matrix per variable, combined over all {self.n_cells} combinations of "
                f"categories; {100 * self.released_absent:.3g}% of records expected released as "
                "combinations absent from the data (counted in C1)",
            )
        return "\n".join(lines)


def assess(
    data,
    matrix,
    qi=None,
    cells=None,
    *,
    combinations=None,
    combination_size=3,
    alpha=None,
    renormalize: float | None = None,
) -> Assessment:
    """Report every risk notion of the seeds for one PRAM matrix on one data set.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        Microdata (then ``qi`` is required) or its frequency table.
    matrix : array_like of shape (K, K), or DesignResult
        Row-stochastic transition matrix.  Without ``cells`` its rows and columns are the
        present cells of ``frequency_table(data, qi)`` in that table's (lexicographic) order.
        A design result stands for its matrix on its own cells; one kept as parameters (its
        ``form``, a replacement, block or uniform design) is assessed from them, with no
        K x K array (:func:`_assess_form`), when its cells are the cells of the data.
    qi : list of str, optional
        Identifying variables (required for a DataFrame).
    cells : pandas.DataFrame, optional
        The cells of the matrix's rows and columns, one column per identifying variable, in
        matrix order; may include cells absent from the data (for example the whole product
        space) but must include every present cell.
    combinations : list of lists of str, optional
        Π explicitly; by default every subset of ``combination_size`` variables.
    combination_size : int
        Size of the subsets of Π when ``combinations`` is not given.
    alpha : float in (0, 1), optional
        C1 level to report against.
    renormalize : float, optional
        Accept rows that sum to within this of 1 (a matrix rounded to a few decimals, as other
        tools write them) and divide them by their sums, with a warning.  By default a row must
        sum to 1 within 1e-8.

    Returns
    -------
    Assessment
    """
    owner = "assess"
    table = _table_of(data, qi, owner)
    form = None
    if isinstance(matrix, DesignResult):
        # a design result: its matrix on its own cells, from its parameters where it has a form
        form = getattr(matrix, "form", None)
        cells = matrix.cells if cells is None else cells
        matrix = matrix.matrix
    if alpha is not None:
        alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0)
    combos = resolve_combinations(
        table.qi, size=combination_size, explicit=combinations, owner=owner
    )
    if renormalize is not None:
        renormalize = check_real(
            renormalize, "renormalize", owner, low=0.0, high=0.1, high_open=False
        )
    if form is not None:
        quick = _assess_form(table, form, cells, combos, alpha, owner)
        if quick is not None:
            return quick
        matrix = form.matrix()  # cells absent from the data: checked on the matrix
    P = as_transition_matrix(matrix, "matrix", owner, renormalize=renormalize)
    K = table.n_cells
    col_codes, rows = _matrix_cells(table, P, cells, owner)
    counts_full = np.zeros(P.shape[0])
    counts_full[rows] = table.counts
    rep = c1_risk(P[rows], table.codes, table.counts, combos, col_codes=col_codes)
    r1 = None
    if len(table.qi) == 1:
        r1 = float(correct_match_risks(P, counts_full.astype(np.int64)).max())
    return Assessment(
        max_risk=float(rep.max_risk),
        # Theorem 3 costs O(K^3): skip it (nan) for very large matrices such as a product space
        k=pk_anonymity(P, table.n) if P.shape[0] <= MAX_CELLS_FOR_K else math.nan,
        epsilon=dp_epsilon(P),
        expected_changes=expected_changes(P, counts_full),
        loss=l2_loss(P, counts_full),
        r1_max=r1,
        invariance_error=float(np.abs(counts_full @ P - counts_full).sum()),
        condition_number=condition_number(P),
        n_records=table.n,
        n_cells=int(P.shape[0]),
        n_present=K,
        n_combinations=len(combos),
        alpha=alpha,
    )


def _assess_form(table: FrequencyTable, form, cells, combos, alpha, owner: str):
    """:func:`assess` of ``P = diag(retention) + rate weights^T`` per pool from its parameters,
    in O(K |Π|) and O(K) memory, when the form's cells are exactly the data's present cells
    (else None: the caller assesses the matrix).  Every figure is the dense one's: C1 from
    :func:`pramopt.verify.c1_risk_form`, the column ratios of ε and k from each column's three
    kinds of entries, the loss from the closed-form inverse; the condition number is the dense
    2-norm one while every pool has at most ``DENSE_MAX`` cells, above it the exact 1-norm one
    (:func:`pramopt.loss.condition_number` estimates it so for a large sparse matrix)."""
    col_codes, rows = _matrix_cells(table, _FormShape(form.n_cells), cells, owner)
    K = table.n_cells
    if form.n_cells != K:
        return None
    # the form in the table's order (a permutation of its cells; pools are unordered)
    f = type(form)(form.retention[rows], form.rate[rows], form.weights[rows], form.pools[rows])
    counts = np.asarray(table.counts, dtype=float)
    total = np.bincount(f.pools, weights=f.weights)[f.pools]
    row_sums = f.retention + f.rate * total
    if not np.all(np.abs(row_sums - 1.0) <= ROW_SUM_TOL):
        i = int(np.argmax(np.abs(row_sums - 1.0)))
        raise InvalidParameterError(
            f"The 'matrix' parameter of {owner} must have rows summing to 1; its parameters give "
            f"a row sum of {row_sums[i]!r} at row {i}."
        )
    rep = c1_risk_form(
        f.retention, f.rate, f.weights, f.pools, table.codes, counts, combos, row_tol=ROW_SUM_TOL
    )
    diag = f.retention + f.rate * f.weights
    sent = np.bincount(f.pools, weights=counts * f.rate)[f.pools]
    mass = counts * f.retention + f.weights * sent  # U0^T P
    n = counts.sum()
    r1 = None
    if len(table.qi) == 1:  # one variable: K is its number of categories
        r1 = float(correct_match_risks(f.matrix().toarray(), counts.astype(np.int64)).max())
    ar = form_pk_ratio(f)
    return Assessment(
        max_risk=float(rep.max_risk),
        k=1.0 + (table.n - 1) * ar,
        epsilon=form_dp_epsilon(f),
        expected_changes=float(counts @ (1.0 - diag)),
        loss=float(f.inverse_squares_times(mass).sum() / n**2 - 1.0 / n),
        r1_max=r1,
        invariance_error=float(np.abs(mass - counts).sum()),
        condition_number=form_condition_number(f),
        n_records=table.n,
        n_cells=K,
        n_present=K,
        n_combinations=len(combos),
        alpha=alpha,
    )


class _FormShape:
    """Stands for a form's K x K matrix where only its shape is read."""

    def __init__(self, K: int):
        self.shape = (K, K)


def _others_min(values: np.ndarray, pools: np.ndarray) -> np.ndarray:
    """For every cell, the smallest of ``values`` over the other cells of its pool (inf where
    it is alone): the pool's smallest, or its second smallest for the cell holding it."""
    m = int(pools.max(initial=-1)) + 1
    first = np.full(m, np.inf)
    np.minimum.at(first, pools, values)
    holder = np.full(m, -1, dtype=np.int64)
    at = np.flatnonzero(values == first[pools])
    holder[pools[at]] = at  # one holder per pool (a tie leaves the others their own minimum)
    own = np.arange(values.size) == holder[pools]
    second = np.full(m, np.inf)
    np.minimum.at(second, pools[~own], values[~own])
    return np.where(own, second[pools], first[pools])


def form_dp_epsilon(f) -> float:
    """ε of Theorem 1 from the columns of a form: column j holds ``retention[j] + rate[j] w[j]``
    on the diagonal, ``rate[k] w[j]`` for the other cells k of its pool and 0 elsewhere, so it
    mixes 0 and positive entries (ε infinite) unless there is one pool whose every cell moves
    records and receives them."""
    K = f.n_cells
    if f.n_pools > 1:
        return math.inf
    if K == 1:
        return 0.0
    if f.rate.min() <= 0.0 or f.weights.min() <= 0.0:
        return math.inf
    diag = f.retention + f.rate * f.weights
    # the diagonal holds rate[j] w[j] and more, so the largest rate over all cells gives the
    # largest entry; the smallest entry needs the smallest rate of the other cells
    hi = np.maximum(diag, f.rate.max() * f.weights)
    lo = np.minimum(diag, _others_min(f.rate, f.pools) * f.weights)
    if lo.min() <= 0.0:  # a product that underflowed
        return math.inf
    return float(np.log((hi / lo).max()))


def form_pk_ratio(f) -> float:
    """``AR`` of Theorem 3 (:func:`.dp_pk_anonymity.pk_ratio`) from a form, in O(K).

    Two pools, a kept cell (rate 0) or a cell that receives nothing, next to another cell: a row
    has a zero where another's is positive in every ratio's numerator, so ``AR = 0``.  Otherwise
    (one pool of at least three cells, all moving and receiving) ``min_w P[u, w] / P[v, w]`` is
    ``rate[u] phi[v]`` with ``phi[v] = min(1 / rate[v], w[v] / P[v, v])`` (the other cells'
    columns give ``rate[u] / rate[v]``, v's own column ``rate[u] w[v] / P[v, v]``, u's own a
    larger ratio), so the product over (u, v) and (v, u) is ``psi[u] psi[v]`` with
    ``psi = rate phi``: ``AR`` is the product of the two smallest psi."""
    K = f.n_cells
    if K == 1:
        return 1.0
    if f.n_pools > 1 or f.rate.min() <= 0.0 or f.weights.min() <= 0.0:
        return 0.0
    if K == 2:  # no third column: the 2 x 2 matrix itself
        return pk_ratio(f.matrix().toarray())
    diag = f.retention + f.rate * f.weights
    psi = f.rate * np.minimum(1.0 / f.rate, f.weights / diag)
    two = np.partition(psi, 1)[:2]
    return float(min(1.0, two[0] * two[1]))


def form_condition_number(f) -> float:
    """The condition number of a form's matrix: 2-norm, from each pool's dense block, while every
    pool has at most ``DENSE_MAX`` cells (the matrix is block diagonal over its pools); above it
    the 1-norm condition number, exactly, from the closed forms of the column sums of P and of
    ``|P^-1|`` (``P^-1[k, j] = [k == j] / c_k - a_k b_j / s`` with ``a, b >= 0``)."""
    pools = f.pools
    sizes = np.bincount(pools)
    if sizes.max(initial=0) <= DENSE_MAX:
        s_max, s_min = 0.0, math.inf
        P = f.matrix()
        for p in np.flatnonzero(sizes):
            cells = np.flatnonzero(pools == p)
            sv = np.linalg.svd(P[cells][:, cells].toarray(), compute_uv=False)
            s_max, s_min = max(s_max, sv[0]), min(s_min, sv[-1])
        return float(s_max / s_min) if s_min > 0 else math.inf
    c, r, w = f.retention, f.rate, f.weights
    col_p = c + w * np.bincount(pools, weights=r)[pools]  # column sums of P
    a, b = r / c, w / c
    s = (1.0 + np.bincount(pools, weights=w * a))[pools]
    a_pool = np.bincount(pools, weights=a)[pools]
    # column j of P^-1: 1 / c_j - a_j b_j / s on the diagonal, -a_k b_j / s for the others
    col_inv = np.abs(1.0 / c - a * b / s) + b * (a_pool - a) / s
    return float(col_p.max() * col_inv.max())


def _table_of(data, qi, owner: str) -> FrequencyTable:
    """The frequency table of ``data`` (a DataFrame with ``qi``, or a table whose ``qi`` match)."""
    if isinstance(data, FrequencyTable):
        if qi is not None and tuple([qi] if isinstance(qi, str) else qi) != data.qi:
            raise InvalidParameterError(
                f"The 'qi' parameter of {owner} must match the frequency table's variables "
                f"{list(data.qi)!r}; got {qi!r}."
            )
        return data
    if isinstance(data, pd.DataFrame):
        if qi is None:
            raise InvalidParameterError(
                f"The 'qi' parameter of {owner} must name the identifying variables when data is a "
                "DataFrame; got None."
            )
        return frequency_table(data, qi, owner=owner)
    raise InvalidParameterError(
        f"The 'data' parameter of {owner} must be a pandas DataFrame or a FrequencyTable; "
        f"got {type(data).__name__}."
    )


def _matrix_cells(table: FrequencyTable, P, cells, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """The codes of the matrix's cells and the matrix row of each present cell, checked."""
    K = table.n_cells
    if cells is None:
        if P.shape[0] != K:
            raise InvalidParameterError(
                f"The 'matrix' parameter of {owner} must be {K}x{K} (one row per present cell) "
                f"when 'cells' is not given; got {P.shape[0]}x{P.shape[1]}."
            )
        return table.codes, np.arange(K)
    col_codes = _cell_codes(table, cells, owner)
    if P.shape[0] != col_codes.shape[0]:
        raise InvalidParameterError(
            f"The 'matrix' parameter of {owner} must have one row per cell of 'cells' "
            f"({col_codes.shape[0]}); got {P.shape[0]}x{P.shape[1]}."
        )
    lookup = {tuple(r): i for i, r in enumerate(col_codes.tolist())}
    if len(lookup) != col_codes.shape[0]:
        raise InvalidParameterError(f"The 'cells' parameter of {owner} must list each cell once.")
    missing = [tuple(r) for r in table.codes.tolist() if tuple(r) not in lookup]
    if missing:
        lab = (
            table.cells().iloc[[table.codes.tolist().index(list(missing[0]))]].to_dict("records")[0]
        )
        raise InvalidParameterError(
            f"The 'cells' parameter of {owner} must include every cell present in the data; "
            f"{len(missing)} missing, e.g. {lab!r}."
        )
    return col_codes, np.array([lookup[tuple(r)] for r in table.codes.tolist()], dtype=np.int64)


def _cell_codes(table: FrequencyTable, cells, owner: str) -> np.ndarray:
    """Codes of the listed cells in the table's coding (new labels get new codes)."""
    if not isinstance(cells, pd.DataFrame):
        raise InvalidParameterError(
            f"The 'cells' parameter of {owner} must be a DataFrame with columns "
            f"{list(table.qi)!r}; got {type(cells).__name__}."
        )
    miss = [q for q in table.qi if q not in cells.columns]
    if miss:
        raise InvalidParameterError(
            f"The 'cells' parameter of {owner} must have a column per identifying variable; "
            f"{miss!r} missing."
        )
    out = np.empty((len(cells), len(table.qi)), dtype=np.int64)
    for i, q in enumerate(table.qi):
        cats = table.categories[i]
        col = cells[q]
        idx = category_codes(col, cats)
        new = idx < 0
        if new.any():
            extra, inv = np.unique(col[new].astype(str).to_numpy(), return_inverse=True)
            idx[new] = len(cats) + inv
        out[:, i] = idx
    return out
