"""Plain JSON values from numpy, pandas and Python objects (for design files, reports and
--json)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd


def plain(x):
    """JSON-safe Python value: numpy scalars and arrays unwrapped, NaN -> None, inf -> 'inf'."""
    if isinstance(x, Mapping):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return [plain(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    if x is pd.NA or x is pd.NaT:
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def number(x) -> float:
    """Inverse of :func:`plain` for one number (None -> NaN, 'inf' -> inf)."""
    if x is None:
        return math.nan
    return float(x)
