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

from .._validation import InvalidParameterError, as_transition_matrix, check_real
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, category_codes, frequency_table
from ..loss import condition_number, expected_changes, l2_loss
from ..verify import c1_risk
from .correct_match import correct_match_risks
from .dp_pk_anonymity import dp_epsilon, pk_anonymity

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
        matrix with more than ``MAX_CELLS_FOR_K`` rows.
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
        2-norm condition number of the matrix.
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
    matrix : array_like of shape (K, K)
        Row-stochastic transition matrix.  Without ``cells`` its rows and columns are the
        present cells of ``frequency_table(data, qi)`` in that table's (lexicographic) order.
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
    if alpha is not None:
        alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0)
    combos = resolve_combinations(
        table.qi, size=combination_size, explicit=combinations, owner=owner
    )
    if renormalize is not None:
        renormalize = check_real(
            renormalize, "renormalize", owner, low=0.0, high=0.1, high_open=False
        )
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
