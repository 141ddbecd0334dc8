"""Input handling of the magnitude-table rules: one cell's contributions, or a frame of many
cells."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd

from .._validation import InvalidParameterError, check_real

#: Default tolerance of the boundary comparisons (see :mod:`pramopt.magnitude.rules`).
DEFAULT_TOL = 1e-9
DEFAULT_CELL = "cell"
DEFAULT_VALUE = "contribution"


def _raise(name: str, owner: str, allowed: str, got: str) -> None:
    """The standard message, with a ``got`` text already formatted by the caller."""
    raise InvalidParameterError(f"The {name!r} parameter of {owner} must be {allowed}; got {got}.")


@dataclass(frozen=True)
class _Cells:
    """Contributions grouped by cell and sorted in decreasing order within each cell."""

    index: pd.Index  # cell ids, order of first appearance
    codes: np.ndarray  # cell position of each sorted contribution
    values: np.ndarray  # contributions, sorted by cell then decreasing
    rank: np.ndarray  # 0 for a cell's largest contribution, 1 for the second, ...
    size: np.ndarray  # N of each cell
    total: np.ndarray  # x of each cell
    single: bool  # the input was one cell

    def top_sum(self, m: int) -> np.ndarray:
        """Sum of the ``m`` largest contributions of each cell."""
        keep = self.rank < m
        return np.bincount(self.codes[keep], weights=self.values[keep], minlength=len(self.index))

    def tail_sum(self, m: int) -> np.ndarray:
        """Sum of all but the ``m`` largest contributions of each cell, summed directly."""
        keep = self.rank >= m
        return np.bincount(self.codes[keep], weights=self.values[keep], minlength=len(self.index))

    def nth(self, m: int) -> np.ndarray:
        """The ``m``-th largest contribution (1-based) of each cell, 0 where N < m."""
        keep = self.rank == m - 1
        return np.bincount(self.codes[keep], weights=self.values[keep], minlength=len(self.index))

    def out(self, arr: np.ndarray, name: str):
        """A scalar for one cell, a Series indexed by cell otherwise."""
        if self.single:
            v = arr[0]
            return bool(v) if arr.dtype == bool else float(v)
        return pd.Series(arr, index=self.index, name=name)


def _cells(contributions: Any, owner: str, cell: Any = None, value: Any = None) -> _Cells:
    """Validate the input of a rule and group it by cell."""
    if isinstance(contributions, pd.DataFrame):
        cell = DEFAULT_CELL if cell is None else cell
        value = DEFAULT_VALUE if value is None else value
        return _frame_cells(contributions, owner, cell, value)
    for name, given in (("cell", cell), ("value", value)):
        if given is not None:
            _raise(name, owner, "None unless contributions is a DataFrame", repr(given))
    return _sequence_cell(contributions, owner)


def _sequence_cell(contributions: Any, owner: str) -> _Cells:
    allowed = "a non-empty 1-D sequence of non-negative finite real numbers (or a DataFrame)"
    if (
        contributions is None
        or isinstance(contributions, (str, bytes))
        or np.isscalar(contributions)
    ):
        _raise("contributions", owner, allowed, repr(contributions))
    try:
        raw = np.asarray(contributions)
        if raw.dtype.kind not in "iuf":
            # keep the elements as given ([1, "2"] would otherwise become strings)
            raw = np.asarray(contributions, dtype=object)
    except Exception:  # ragged nested input and the like
        _raise("contributions", owner, allowed, _short(contributions))
    if raw.ndim != 1:
        _raise("contributions", owner, allowed, f"an array of shape {raw.shape}")
    if raw.size == 0:
        _raise("contributions", owner, allowed, "an empty cell")
    if raw.dtype.kind in "iuf":
        values = raw.astype(float)
    else:  # objects, booleans, strings...: find the first element that is not a number
        values = np.empty(raw.size)
        for i, v in enumerate(raw.astype(object)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (Real, np.number)):
                _raise("contributions", owner, allowed, f"{_item(v)!r} at position {i}")
            values[i] = float(v)
    _check_values(values, np.zeros(values.size, dtype=np.intp), None, owner, "contributions")
    order = np.argsort(-values, kind="stable")
    values = values[order]
    codes = np.zeros(values.size, dtype=np.intp)
    return _Cells(
        index=pd.Index([0]),
        codes=codes,
        values=values,
        rank=np.arange(values.size),
        size=np.array([values.size]),
        total=np.array([values.sum()]),
        single=True,
    )


def _frame_cells(df: pd.DataFrame, owner: str, cell: Any, value: Any) -> _Cells:
    cols = list(df.columns)
    listed = ", ".join(repr(c) for c in cols) or "none"
    for name, col in (("cell", cell), ("value", value)):
        if col not in cols:
            _raise(name, owner, f"a column of the DataFrame (columns: {listed})", repr(col))
    if cell == value:
        _raise("value", owner, "a column other than the cell column", repr(value))
    if len(df) == 0:
        _raise("contributions", owner, "a DataFrame with at least one row", "an empty DataFrame")
    ids = df[cell]
    if isinstance(ids, pd.DataFrame) or isinstance(df[value], pd.DataFrame):
        _raise("contributions", owner, "a DataFrame with unique column names", f"columns {listed}")
    missing = ids.isna().to_numpy()
    if missing.any():
        row = df.index[int(np.argmax(missing))]
        _raise(
            "contributions",
            owner,
            f"a DataFrame whose cell column {cell!r} has no missing ids",
            f"a missing id at row {row!r}",
        )
    col = df[value]
    if pd.api.types.is_bool_dtype(col):
        _raise(
            "contributions",
            owner,
            f"a DataFrame whose column {value!r} holds numbers",
            "a boolean column",
        )
    num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    codes, uniques = pd.factorize(ids, sort=False)
    index = pd.Index(uniques, name=cell)
    bad = np.isnan(num)
    if bad.any():
        i = int(np.argmax(bad))
        _raise(
            "contributions",
            owner,
            f"a DataFrame whose column {value!r} holds non-negative finite real numbers",
            f"{col.iloc[i]!r} in cell {ids.iloc[i]!r}",
        )
    _check_values(num, codes, index, owner, "contributions", column=value)
    order = np.lexsort((-num, codes))
    codes_s = codes[order]
    values = num[order]
    size = np.bincount(codes_s, minlength=len(index))
    starts = np.concatenate(([0], np.cumsum(size)[:-1]))
    rank = np.arange(values.size) - starts[codes_s]
    total = np.bincount(codes_s, weights=values, minlength=len(index))
    return _Cells(index, codes_s, values, rank, size, total, single=False)


def _check_values(values, codes, index, owner, name, column=None) -> None:
    """Reject NaN, infinite and negative contributions and cells with a zero total."""

    def where(i: int) -> str:
        return f" at position {i}" if index is None else f" in cell {index[codes[i]]!r}"

    allowed = "a sequence of non-negative finite real numbers"
    if column is not None:
        allowed = f"a DataFrame whose column {column!r} holds non-negative finite real numbers"
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.argmax(bad))
        _raise(name, owner, allowed, f"{float(values[i])!r}{where(i)}")
    total = np.bincount(codes, weights=values, minlength=1 if index is None else len(index))
    zero = total <= 0
    if zero.any():
        j = int(np.argmax(zero))
        cell_txt = "" if index is None else f" in cell {index[j]!r}"
        _raise(name, owner, "contributions with a positive cell total x", f"a total of 0{cell_txt}")


def _item(v: Any) -> Any:
    """A NumPy scalar as the Python object it holds, for readable messages."""
    return v.item() if isinstance(v, np.generic) else v


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_tol(tol: Any, owner: str) -> float:
    return check_real(tol, "tol", owner, low=0.0, high=0.01, low_open=False, high_open=False)


def _check_fraction(
    value: Any,
    name: str,
    owner: str,
    *,
    high_open: bool,
    low: float = 0.0,
    low_text: str | None = None,
) -> float:
    """A proportion in (low, 1) or (low, 1]; the message reminds that percents are not taken."""
    hi = ")" if high_open else "]"
    interval = f"({low_text or _num(low)}, 1{hi}"
    allowed = f"a real number in {interval} (a proportion: 60% is 0.6)"
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(float(value)):
        _raise(name, owner, allowed, repr(value))
    v = float(value)
    if v <= low or v > 1 or (high_open and v == 1):
        _raise(name, owner, allowed, repr(value))
    return v


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
