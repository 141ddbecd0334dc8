"""Input checks shared by the closed-form designs (messages name the parameter)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import InvalidParameterError

#: Tolerance on row sums of a transition matrix.
ROW_SUM_TOL = 1e-8


def as_transition_matrix(P, name: str, owner: str, *, square: bool = True) -> np.ndarray:
    """Return ``P`` as a dense float array after checking it is a (square) stochastic matrix."""
    if sp.issparse(P):
        P = P.toarray()
    try:
        A = np.asarray(P, dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a matrix of probabilities; got {type(P).__name__}."
        ) from None
    if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0 or (square and A.shape[0] != A.shape[1]):
        kind = "a non-empty square matrix" if square else "a non-empty 2-D matrix"
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be {kind}; got an array of shape {A.shape}."
        )
    if not np.all(np.isfinite(A)) or (A < 0).any():
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must have finite non-negative entries; "
            f"got min {np.nanmin(A)!r}."
        )
    rs = A.sum(axis=1)
    if np.abs(rs - 1.0).max() > ROW_SUM_TOL:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must have rows summing to 1; "
            f"got a row sum of {rs[np.argmax(np.abs(rs - 1.0))]!r}."
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
            f"The {name!r} parameter of {owner} must be a list of category counts (integers >= 1); got {levels!r}."
        ) from None
    if len(out) == 0 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in out):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a non-empty list of integers >= 1; got {levels!r}."
        )
    return tuple(int(v) for v in out)


def as_frequencies(T, name: str, owner: str) -> np.ndarray:
    """Category frequencies: a non-empty 1-D array of non-negative integers."""
    try:
        a = np.asarray(T, dtype=float)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a list of non-negative integer frequencies; got {T!r}."
        ) from None
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or (a < 0).any() or np.any(a != np.round(a)):
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a non-empty list of non-negative integer frequencies; got {T!r}."
        )
    return a.astype(np.int64)
