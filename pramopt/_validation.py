"""Parameter validation with messages that name the parameter, the value and what is allowed.

The wording follows scikit-learn's convention, for example
``The 'alpha' parameter of design must be in (0, 1); got 1.5.``
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any


class PramoptError(Exception):
    """Base class of every error pramopt raises on purpose."""


class InvalidParameterError(PramoptError, ValueError):
    """A parameter value that pramopt cannot accept (bad input, exit code 2 in the CLI)."""


def fail(name: str, owner: str, allowed: str, value: Any) -> None:
    """Raise the standard error for parameter ``name`` of ``owner``."""
    raise InvalidParameterError(
        f"The {name!r} parameter of {owner} must be {allowed}; got {value!r}."
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
    interval = f"{lo}{'-inf' if low is None else _fmt(low)}, {'inf' if high is None else _fmt(high)}{hi}"
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


def check_int(value: Any, name: str, owner: str, *, low: int | None = None, high: int | None = None) -> int:
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
