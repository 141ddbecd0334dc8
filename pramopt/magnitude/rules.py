"""Sensitivity rules for magnitude tables and their a-posteriori check.

Implements the rules discussed by J. Domingo-Ferrer and V. Torra, "A critique of the
sensitivity rules usually employed for statistical table protection" ("the paper"; equation,
Example and Theorem numbers below are the paper's), and the paper's counterexamples:

* :func:`dominance` -- the (n, k)-dominance rule (Section 1);
* :func:`p_percent` -- the p%-rule in its common form, equation (10);
* :func:`pq_rule` -- the prior-posterior rule (Section 1), written so that ``q = 1`` gives (10);
* :func:`entropy` and :func:`entropy_rule` -- expression (7) and Algorithm 1;
* :func:`coalition_bound` -- the upper bound on the largest contribution that the ``c``
  largest other contributors get by pooling their values (expressions (4) and (15)), which the
  paper recommends as an a-posteriori check;
* :func:`~pramopt.magnitude.construction_1` ... ``construction_4`` -- the cells of Constructions 1-4
  (:mod:`pramopt.magnitude.constructions`);
* :func:`assess_cells` -- every verdict and the coalition bound for many cells at once;
* the ``pramopt sensitivity`` command (:mod:`pramopt.cli.sensitivity`).

Input forms
-----------
Every rule takes either the contributions of **one cell** (a 1-D sequence, NumPy array or
pandas Series of non-negative finite numbers; the order does not matter) and returns a scalar,
or a **DataFrame with one row per contribution**, a cell id column (``cell=``, default
``"cell"``) and a contribution column (``value=``, default ``"contribution"``), and returns a
Series indexed by cell id, in order of first appearance.

Conventions
-----------
* ``k``, ``p`` and ``q`` are **proportions**, not percents, as in the paper (Example 1 writes
  ``k = 0.6 (60%)``; Section 3 takes p as a proportion): pass 0.6, not 60.
* ``N`` is the number of contributions listed for the cell, zeros included (a zero adds
  nothing to the total, the rules' sums or the entropy, but it counts in ``log2 N`` of
  Algorithm 1; drop zero rows beforehand if they are not respondents).
* The constructions put cells exactly on a rule's boundary (Constructions 2 and 4 have
  ``sum = k x`` and ``x - x1 - x2 = p x1``), where floating-point rounding would otherwise
  decide the verdict.  Comparisons therefore allow a relative tolerance ``tol`` (default
  ``1e-9``, relative to the cell total for the sums and absolute for the normalised entropy),
  always resolved toward the verdict the paper gives on the boundary.  ``tol=0`` compares
  exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._validation import check_int, check_real
from ._input import (
    DEFAULT_CELL,
    DEFAULT_TOL,
    DEFAULT_VALUE,
    _Cells,
    _cells,
    _check_fraction,
    _check_tol,
    _raise,
)

__all__ = [
    "dominance",
    "p_percent",
    "pq_rule",
    "entropy",
    "entropy_rule",
    "coalition_bound",
    "CoalitionBound",
    "assess_cells",
]

# --------------------------------------------------------------------------- the rules


def dominance(contributions, n, k, *, cell=None, value=None, tol=DEFAULT_TOL):
    """(n, k)-dominance rule (Section 1 of the paper): True when the cell is sensitive.

    A cell is sensitive "if the sum of the contributions of n or fewer respondents represents a
    fraction k or more of the total cell value", that is, with ``x_1 >= x_2 >= ... >= x_N``,

    .. math:: x_1 + \\dots + x_{\\min(n, N)} \\ge k\\,x.

    The inequality is not strict: Construction 2 builds a sensitive cell with the n largest
    contributions adding to exactly ``k x``.

    Parameters
    ----------
    contributions : sequence of float or pandas.DataFrame
        One cell's contributions, or one row per contribution (see the module docstring).
    n : int
        Number of largest contributors, ``n >= 1``.
    k : float
        The fraction, in (0, 1]: a proportion, not a percent (Example 1: ``k = 0.6 (60%)``).
    cell, value : hashable, optional
        Cell id and contribution columns when ``contributions`` is a DataFrame (defaults
        ``"cell"`` and ``"contribution"``).
    tol : float, default 1e-9
        Sums within ``tol * x`` of ``k x`` count as equal, hence sensitive.

    Returns
    -------
    bool or pandas.Series of bool
        True for a sensitive cell; a Series indexed by cell for a DataFrame.

    Raises
    ------
    InvalidParameterError
        For ``n < 1``, ``k`` outside (0, 1], or bad contributions.
    """
    owner = "dominance"
    n = check_int(n, "n", owner, low=1)
    k = _check_fraction(k, "k", owner, high_open=False)
    tol = _check_tol(tol, owner)
    c = _cells(contributions, owner, cell, value)
    sensitive = c.top_sum(n) >= (k - tol) * c.total
    return c.out(sensitive, "dominance")


def p_percent(contributions, p, *, cell=None, value=None, tol=DEFAULT_TOL):
    """p%-rule in its common form, equation (10) of the paper: True when sensitive.

    The second largest contributor can estimate the largest contribution to within a
    proportion ``p`` of it, the cell being sensitive when

    .. math:: x - x_2 - x_1 \\le p\\,x_1, \\qquad (10)

    with ``x_2 = 0`` for a single-contributor cell (always sensitive).  The inequality is not
    strict: Construction 4 builds a sensitive cell with equality.

    Parameters
    ----------
    contributions : sequence of float or pandas.DataFrame
        One cell's contributions, or one row per contribution (see the module docstring).
    p : float
        The proportion p in (0, 1) (the paper takes p "as a proportion rather than as a
        percent": pass 0.1 for a 10% rule).
    cell, value : hashable, optional
        Column names when ``contributions`` is a DataFrame.
    tol : float, default 1e-9
        Left-hand sides within ``tol * x`` of ``p x_1`` count as equal, hence sensitive.

    Returns
    -------
    bool or pandas.Series of bool
        True for a sensitive cell.
    """
    owner = "p_percent"
    p = _check_fraction(p, "p", owner, high_open=True)
    tol = _check_tol(tol, owner)
    c = _cells(contributions, owner, cell, value)
    return c.out(_pq(c, p, 1.0, tol), "p_percent")


def pq_rule(contributions, p, q, *, cell=None, value=None, tol=DEFAULT_TOL):
    """Prior-posterior (pq) rule: True when the cell is sensitive.

    The paper defines the rule in words (Section 1): before publication every respondent can
    estimate every other contribution to within ``q``; the cell is sensitive if after
    publication someone can estimate a contribution to within ``p``.  For the second largest
    contributor attacking the largest one, the remainder ``x - x_1 - x_2`` is known to within
    ``q (x - x_1 - x_2)``, so the cell is sensitive when

    .. math:: q\\,(x - x_2 - x_1) \\le p\\,x_1,

    the standard form (Cox 2001; Hundepool et al.).  With ``q = 1`` (no prior knowledge, the
    paper's "q = 100") this is the p%-rule of equation (10).

    Parameters
    ----------
    contributions : sequence of float or pandas.DataFrame
        One cell's contributions, or one row per contribution (see the module docstring).
    p : float
        Posterior precision, a proportion in (0, 1).
    q : float
        Prior precision, a proportion in (p, 1]; ``q <= p`` would make no prior knowledge
        tighter than the protection asked for.
    cell, value : hashable, optional
        Column names when ``contributions`` is a DataFrame.
    tol : float, default 1e-9
        Ties within ``tol * x`` count as sensitive.

    Returns
    -------
    bool or pandas.Series of bool
        True for a sensitive cell.
    """
    owner = "pq_rule"
    p = _check_fraction(p, "p", owner, high_open=True)
    q = _check_fraction(q, "q", owner, high_open=False, low=p, low_text=f"p = {p:g}")
    tol = _check_tol(tol, owner)
    c = _cells(contributions, owner, cell, value)
    return c.out(_pq(c, p, q, tol), "pq_rule")


def _pq(c: _Cells, p: float, q: float, tol: float) -> np.ndarray:
    # the remainder is summed directly, not as x - x1 - x2, to avoid cancellation
    return c.tail_sum(2) <= (p / q) * c.nth(1) + tol * c.total


def entropy(contributions, *, cell=None, value=None):
    """Entropy of the relative contributions, expression (7) of the paper, in bits.

    .. math:: H(X) = -\\sum_{i=1}^N (x_i/x) \\log_2 (x_i/x), \\qquad (7)

    with ``0 log 0 = 0``.  ``0 <= H(X) <= log2 N``; the higher, the less concentrated.

    Parameters
    ----------
    contributions : sequence of float or pandas.DataFrame
        One cell's contributions, or one row per contribution (see the module docstring).
    cell, value : hashable, optional
        Column names when ``contributions`` is a DataFrame.

    Returns
    -------
    float or pandas.Series of float
    """
    c = _cells(contributions, "entropy", cell, value)
    return c.out(_entropy(c), "entropy")


def _entropy(c: _Cells) -> np.ndarray:
    rel = c.values / c.total[c.codes]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(rel > 0, -rel * np.log2(rel), 0.0)
    return np.bincount(c.codes, weights=terms, minlength=len(c.index))


def _normalised_entropy(c: _Cells, h: np.ndarray) -> np.ndarray:
    # H/log2 N; a single contributor is fully concentrated (0), not 0/0
    logn = np.log2(np.maximum(c.size, 1).astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(c.size > 1, h / np.where(c.size > 1, logn, 1.0), 0.0)


def entropy_rule(contributions, t, *, cell=None, value=None, tol=DEFAULT_TOL):
    """Entropy-based sensitivity rule, Algorithm 1 of the paper: True when sensitive.

    A cell with N contributions is sensitive when

    .. math:: H(X) / \\log_2 N < t,

    with H from expression (7).  A single-contributor cell has ``H = 0`` and is taken as
    fully concentrated (ratio 0), so it is sensitive for every ``t > 0``.  ``N`` counts every
    listed contribution, zeros included.  The paper warns that ``t`` should not be close to 1.

    Parameters
    ----------
    contributions : sequence of float or pandas.DataFrame
        One cell's contributions, or one row per contribution (see the module docstring).
    t : float
        Threshold in [0, 1].
    cell, value : hashable, optional
        Column names when ``contributions`` is a DataFrame.
    tol : float, default 1e-9
        Ratios within ``tol`` of ``t`` count as equal, hence non-sensitive (so that ``t = 1``
        leaves perfectly even cells non-sensitive despite rounding).

    Returns
    -------
    bool or pandas.Series of bool
        True for a sensitive cell.
    """
    owner = "entropy_rule"
    t = check_real(t, "t", owner, low=0.0, high=1.0, low_open=False, high_open=False)
    tol = _check_tol(tol, owner)
    c = _cells(contributions, owner, cell, value)
    ratio = _normalised_entropy(c, _entropy(c))
    return c.out(ratio < t - tol, "entropy_rule")


# --------------------------------------------------------------------------- coalition bound


@dataclass(frozen=True)
class CoalitionBound:
    """Upper bound on the largest contribution obtained by a coalition (expressions (4), (15)).

    Attributes
    ----------
    coalition_size : int
        ``c``, the number of colluding contributors (the 2nd, ..., (c+1)-th largest).
    total : float
        The cell total ``x``.
    largest : float
        The largest contribution ``x_1``.
    bound : float
        ``x - (x_2 + ... + x_{c+1})``, the coalition's upper bound on ``x_1``.
    gap : float
        ``bound - x_1``, the sum of the ``N - c - 1`` smallest contributions (the "tail"); 0
        when the coalition holds every other contribution.
    """

    coalition_size: int
    total: float
    largest: float
    bound: float
    gap: float

    @property
    def gap_share(self) -> float:
        """``gap / x``: the tail as a relative contribution (Examples 2 and 4)."""
        return self.gap / self.total

    @property
    def relative_gap(self) -> float:
        """``gap / x_1``: how far the bound is from ``x_1``, proportionally (Theorems 1, 3)."""
        return self.gap / self.largest


def coalition_bound(contributions, c=1, *, cell=None, value=None):
    """The a-posteriori bound the ``c`` largest other contributors get on the largest one.

    Knowing the published total ``x`` and pooling their own contributions, the 2nd to
    (c+1)-th largest contributors learn (expression (4) with ``c = n``, (15) with ``c = 2``)

    .. math:: x_1 \\le x - (x_2 + \\dots + x_{c+1}),

    whose gap to ``x_1`` is the sum of the ``N - c - 1`` smallest contributions.  A cell whose
    gap is small is exposed whatever a sensitivity rule says; the paper recommends this kind of
    a-posteriori check.  With ``c >= N - 1`` the coalition holds every other contribution and
    the bound is ``x_1`` itself.

    Parameters
    ----------
    contributions : sequence of float or pandas.DataFrame
        One cell's contributions, or one row per contribution (see the module docstring).
    c : int, default 1
        Coalition size, ``c >= 1`` (1: the second largest contributor alone, as in Example 1).
    cell, value : hashable, optional
        Column names when ``contributions`` is a DataFrame.

    Returns
    -------
    CoalitionBound or pandas.DataFrame
        For a DataFrame, one row per cell with columns ``total``, ``largest``, ``bound``,
        ``gap``, ``gap_share`` and ``relative_gap``.
    """
    owner = "coalition_bound"
    c_ = check_int(c, "c", owner, low=1)
    cells = _cells(contributions, owner, cell, value)
    largest = cells.nth(1)
    gap = cells.tail_sum(c_ + 1)
    bound = largest + gap  # equals x - (x_2 + ... + x_{c+1}) without the cancellation
    if cells.single:
        return CoalitionBound(
            c_, float(cells.total[0]), float(largest[0]), float(bound[0]), float(gap[0])
        )
    return pd.DataFrame(
        {
            "total": cells.total,
            "largest": largest,
            "bound": bound,
            "gap": gap,
            "gap_share": gap / cells.total,
            "relative_gap": gap / largest,
        },
        index=cells.index,
    )


def assess_cells(
    df, *, n, k, p, t, q=1.0, c=1, cell=DEFAULT_CELL, value=DEFAULT_VALUE, tol=DEFAULT_TOL
):
    """Every rule's verdict and the coalition bound for each cell of a DataFrame.

    Parameters
    ----------
    df : pandas.DataFrame
        One row per contribution, with a cell id column and a contribution column.
    n, k : int, float
        Parameters of :func:`dominance`.
    p : float
        Parameter of :func:`p_percent` and of :func:`pq_rule`.
    t : float
        Threshold of :func:`entropy_rule`.
    q : float, default 1.0
        Prior precision of :func:`pq_rule`; the default 1 (no prior knowledge) makes it the
        p%-rule, as Section 1 of the paper notes.
    c : int, default 1
        Coalition size of :func:`coalition_bound`.
    cell, value : hashable
        Column names.
    tol : float, default 1e-9
        Boundary tolerance of the rules.

    Returns
    -------
    pandas.DataFrame
        Indexed by cell id (order of first appearance), with columns ``contributors`` (N),
        ``total``, ``largest``, ``second``, ``dominance``, ``p_percent``, ``pq_rule``,
        ``entropy``, ``normalised_entropy``, ``entropy_rule`` (True = sensitive),
        ``coalition_size``, ``coalition_bound``, ``bound_gap``, ``gap_share`` and
        ``relative_gap`` (see :class:`CoalitionBound`).
    """
    return _assess(
        df, n=n, k=k, p=p, q=q, t=t, c=c, cell=cell, value=value, tol=tol, owner="assess_cells"
    )


def _check_params(owner, *, n, k, p, q, t, c, tol) -> dict:
    p_ = _check_fraction(p, "p", owner, high_open=True)
    return dict(
        n=check_int(n, "n", owner, low=1),
        k=_check_fraction(k, "k", owner, high_open=False),
        p=p_,
        q=_check_fraction(q, "q", owner, high_open=False, low=p_, low_text=f"p = {p_:g}"),
        t=check_real(t, "t", owner, low=0.0, high=1.0, low_open=False, high_open=False),
        c=check_int(c, "c", owner, low=1),
        tol=_check_tol(tol, owner),
    )


def _assess(df, *, owner, cell, value, **params):
    return _compute(df, cell=cell, value=value, owner=owner, **_check_params(owner, **params))


def _compute(df, *, n, k, p, q, t, c, cell, value, tol, owner):
    if not isinstance(df, pd.DataFrame):
        _raise("df", owner, "a pandas DataFrame with one row per contribution", type(df).__name__)
    cells = _cells(df, owner, cell, value)
    h = _entropy(cells)
    ratio = _normalised_entropy(cells, h)
    largest = cells.nth(1)
    gap = cells.tail_sum(c + 1)
    return pd.DataFrame(
        {
            "contributors": cells.size,
            "total": cells.total,
            "largest": largest,
            "second": cells.nth(2),
            "dominance": cells.top_sum(n) >= (k - tol) * cells.total,
            "p_percent": _pq(cells, p, 1.0, tol),
            "pq_rule": _pq(cells, p, q, tol),
            "entropy": h,
            "normalised_entropy": ratio,
            "entropy_rule": ratio < t - tol,
            "coalition_size": np.full(len(cells.index), c),
            "coalition_bound": largest + gap,
            "bound_gap": gap,
            "gap_share": gap / cells.total,
            "relative_gap": gap / largest,
        },
        index=cells.index,
    )
