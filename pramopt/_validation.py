"""Parameter validation with messages that name the parameter, the value and what is allowed.

The wording follows scikit-learn's convention, for example
``The 'alpha' parameter of design must be in (0, 1); got 1.5.``
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp

from .errors import InvalidParameterError


def _shown(value: Any) -> str:
    """A value as a person writes it: numpy scalars as plain numbers (0.9, not np.float64(0.9))."""
    if isinstance(value, np.generic):
        value = value.item()
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def fail(name: str, owner: str, allowed: str, value: Any) -> None:
    """Raise the standard error for parameter ``name`` of ``owner``."""
    raise InvalidParameterError(
        f"The {name!r} parameter of {owner} must be {allowed}; got {_shown(value)}."
    )


def check_real(
    value: Any,
    name: str,
    owner: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = True,
    high_open: bool = True,
) -> float:
    """Return ``value`` as a float after checking it lies in the stated interval."""
    lo = "(" if low_open else "["
    hi = ")" if high_open else "]"
    interval = (
        f"{lo}{'-inf' if low is None else _fmt(low)}, {'inf' if high is None else _fmt(high)}{hi}"
    )
    allowed = f"a real number in {interval}"
    if isinstance(value, bool) or not isinstance(value, Real):
        fail(name, owner, allowed, value)
    v = float(value)
    if math.isnan(v):
        fail(name, owner, allowed, value)
    if low is not None and (v < low or (low_open and v == low)):
        fail(name, owner, allowed, value)
    if high is not None and (v > high or (high_open and v == high)):
        fail(name, owner, allowed, value)
    return v


def check_int(
    value: Any, name: str, owner: str, *, low: int | None = None, high: int | None = None
) -> int:
    """Return ``value`` as an int after checking ``low <= value <= high``."""
    parts = []
    if low is not None:
        parts.append(f">= {low}")
    if high is not None:
        parts.append(f"<= {high}")
    allowed = "an integer" + (" " + " and ".join(parts) if parts else "")
    if isinstance(value, bool) or not isinstance(value, Integral):
        fail(name, owner, allowed, value)
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        fail(name, owner, allowed, value)
    return v


def check_choice(value: Any, name: str, owner: str, choices) -> Any:
    """Check that ``value`` is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        fail(name, owner, "one of " + ", ".join(repr(c) for c in choices), value)
    return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


# ---------------------------------------------------------------------------------------------
# Matrices, category counts and frequencies (the closed forms and the risk measures)
# ---------------------------------------------------------------------------------------------

#: Tolerance on row sums of a transition matrix.
ROW_SUM_TOL = 1e-8


def as_transition_matrix(
    P, name: str, owner: str, *, square: bool = True, renormalize: float | None = None
) -> np.ndarray:
    """Return ``P`` as a dense float array after checking it is a (square) stochastic matrix.

    With ``renormalize=tol`` rows whose sums are within ``tol`` of 1 (a matrix rounded to a few
    decimals) are divided by their sums, with a warning saying how many and how far they were.
    """
    if sp.issparse(P):
        P = P.toarray()
    try:
        A = np.asarray(P, dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a matrix of probabilities; got "
            f"{type(P).__name__}."
        ) from None
    if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0 or (square and A.shape[0] != A.shape[1]):
        kind = "a non-empty square matrix" if square else "a non-empty 2-D matrix"
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be {kind}; got an array of shape {A.shape}."
        )
    bad = ~np.isfinite(A) | (A < 0)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must have finite non-negative entries; "
            f"got {float(A[i, j])!r} at row {i}, column {j} ({int(bad.sum())} such entries)."
        )
    rs = A.sum(axis=1)
    off = np.abs(rs - 1.0)
    if renormalize is not None and ROW_SUM_TOL < off.max() <= renormalize:
        import warnings

        n_off = int((off > ROW_SUM_TOL).sum())
        warnings.warn(
            f"{owner}: {n_off} rows of {name!r} summed to between {rs.min():.6g} and "
            f"{rs.max():.6g}; they were divided by their sums (renormalize tolerance "
            f"{renormalize:g}).",
            stacklevel=3,
        )
        return A / rs[:, None]
    if off.max() > ROW_SUM_TOL:
        hint = (
            ""
            if renormalize is not None
            else (
                " (a matrix rounded to a few decimals can be renormalised: renormalize=TOL, "
                "--renormalize TOL)"
            )
        )
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must have rows summing to 1; "
            f"got a row sum of {_shown(rs[np.argmax(off)])}{hint}."
        )
    return A


def as_levels(levels, name: str, owner: str) -> tuple[int, ...]:
    """Numbers of categories of each attribute, each an integer >= 1."""
    if isinstance(levels, (int, np.integer)) and not isinstance(levels, bool):
        levels = [levels]
    try:
        out = tuple(levels)
    except TypeError:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a list of category counts (integers >= 1); "
            f"got {levels!r}."
        ) from None
    if len(out) == 0 or any(
        isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in out
    ):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a non-empty list of integers >= 1; got "
            f"{levels!r}."
        )
    return tuple(int(v) for v in out)


def as_frequencies(T, name: str, owner: str) -> np.ndarray:
    """Category frequencies: a non-empty 1-D array of non-negative integers."""
    try:
        a = np.asarray(T, dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a list of non-negative integer "
            f"frequencies; got {T!r}."
        ) from None
    if (
        a.ndim != 1
        or a.size == 0
        or not np.all(np.isfinite(a))
        or (a < 0).any()
        or np.any(a != np.round(a))
    ):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a non-empty list of non-negative integer "
            f"frequencies; got {T!r}."
        )
    return a.astype(np.int64)
