"""The errors pramopt raises on purpose (the CLI turns each into exit code 2, without a
traceback)."""

from __future__ import annotations

__all__ = [
    "PramoptError",
    "InvalidParameterError",
    "DesignMismatchError",
    "DesignFileError",
    "CallbackError",
    "LargeProblemWarning",
]


class PramoptError(Exception):
    """Base class of every error pramopt raises on purpose."""


class InvalidParameterError(PramoptError, ValueError):
    """A parameter value that pramopt cannot accept (bad input, exit code 2 in the CLI)."""


class DesignMismatchError(PramoptError, ValueError):
    """The data do not match the design (other cells or counts), or the design is not safe."""


class DesignFileError(PramoptError, ValueError):
    """A design file that is missing, malformed or was edited after it was written."""


class CallbackError(PramoptError, RuntimeError):
    """A callback the user passed (``progress=``) raised; the work was stopped (the original
    exception is chained as ``__cause__``)."""


class LargeProblemWarning(UserWarning):
    """A design that will be large (many C1 rows): issued before the work starts, with a way out."""
