"""The office's release policy: the α and Π a design must meet to be released.

A design file carries its own α and Π, checksummed but not signed: whoever can write the folder
can re-sign a weaker design (α = 0.9, or Π cut to one variable) with the checksum functions
pramopt ships.  The release therefore states what it checked, and an office that states its
policy (``--alpha``, ``--combination-size`` or ``--combinations``, or a policy file) gets a
release only from a design that meets it: the design's α must be at most the policy's and its Π
must hold every combination of the policy's (every subset of 3 variables unless it says other),
or else the matrix must pass the full C1 at the policy's α and Π when checked again here
(:func:`pramopt.verify.c1_risk`, or :func:`pramopt.verify.c1_risk_form` from a replacement or
block design's parameters).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .._validation import InvalidParameterError
from ..errors import DesignMismatchError
from ..frequency.combinations import resolve_combinations
from .c1_check import full_c1_check

__all__ = [
    "ReleasePolicy",
    "release_policy",
    "read_policy",
    "enforce_policy",
    "describe_checked",
    "refuse_unverified_policy",
]


@dataclass(frozen=True)
class ReleasePolicy:
    """The least a released design must guarantee (all None: no policy).

    Attributes
    ----------
    alpha : float or None
        The largest risk allowed, in (0, 1); required by any policy (a design's own α is what
        an edited file would weaken).
    combination_size : int or None
        Every subset of this many identifying variables is a combination an intruder overviews.
        Neither this nor ``combinations``: every subset of 3 (all variables when there are
        fewer), the rule of Cator et al.
    combinations : tuple of tuple of str, or None
        The combinations, named (overrides ``combination_size``).
    """

    alpha: float | None = None
    combination_size: int | None = None
    combinations: tuple[tuple[str, ...], ...] | None = None

    @property
    def empty(self) -> bool:
        return self.alpha is None and self.combination_size is None and self.combinations is None


def _check_alpha(alpha, name: str, owner: str) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        a = math.nan
    if isinstance(alpha, bool) or not 0.0 < a < 1.0:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a number in (0, 1); got {alpha!r}."
        )
    return a


def release_policy(
    alpha=None, combination_size=None, combinations=None, owner: str = "release"
) -> ReleasePolicy:
    """A checked :class:`ReleasePolicy` (errors name the parameter, its value and what is
    allowed)."""
    a = None if alpha is None else _check_alpha(alpha, "alpha", owner)
    size = None
    if combination_size is not None:
        if isinstance(combination_size, bool) or not isinstance(combination_size, int):
            raise InvalidParameterError(
                f"The 'combination_size' parameter of {owner} must be a positive integer; got "
                f"{combination_size!r}."
            )
        if combination_size < 1:
            raise InvalidParameterError(
                f"The 'combination_size' parameter of {owner} must be a positive integer; got "
                f"{combination_size!r}."
            )
        size = combination_size
    combos = None
    if combinations is not None:
        if isinstance(combinations, str) or not all(
            not isinstance(c, str) and all(isinstance(v, str) for v in c) for c in combinations
        ):
            raise InvalidParameterError(
                f"The 'combinations' parameter of {owner} must be a list of lists of variable "
                f"names; got {combinations!r}."
            )
        combos = tuple(tuple(c) for c in combinations)
        if not combos or not all(combos):
            raise InvalidParameterError(
                f"The 'combinations' parameter of {owner} must list at least one non-empty "
                f"combination; got {combinations!r}."
            )
    if a is None and (size is not None or combos is not None):
        raise InvalidParameterError(
            f"The 'alpha' parameter of {owner} is required with a policy's combinations: state "
            "the largest risk allowed, a number in (0, 1)."
        )
    return ReleasePolicy(alpha=a, combination_size=size, combinations=combos)


def read_policy(path, owner: str = "release") -> ReleasePolicy:
    """A policy file: JSON with any of ``alpha``, ``combination_size`` and ``combinations``."""
    p = Path(path)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidParameterError(f"Cannot read the policy file {str(p)!r}: {e}") from None
    allowed = {"alpha", "combination_size", "combinations"}
    if not isinstance(rec, dict) or not rec or set(rec) - allowed:
        raise InvalidParameterError(
            f"The policy file {str(p)!r} must be a JSON object with some of the keys "
            f"{sorted(allowed)}; got {rec!r}."
        )
    return release_policy(
        rec.get("alpha"), rec.get("combination_size"), rec.get("combinations"), owner
    )


def _names(result, combos) -> list[list[str]]:
    qi = list(result.qi)
    return [[qi[i] for i in c] for c in combos]


def describe_checked(result) -> str:
    """The α and Π a release checked, in words (every release prints it)."""
    combos = _names(result, result.combination_indices)
    shown = ", ".join("+".join(c) for c in combos[:6]) + (
        f", … ({len(combos)} in all)" if len(combos) > 6 else ""
    )
    return f"checked C1 at alpha {result.alpha:g} over {len(combos)} combination(s): {shown}"


def refuse_unverified_policy(policy, allow_unverified: bool, owner: str) -> None:
    """A policy cannot be met by a release that skips the checks."""
    if allow_unverified and policy is not None and not policy.empty:
        raise InvalidParameterError(
            f"The 'policy' parameter of {owner} cannot be combined with allow_unverified=True: "
            "a release that skips the checks meets no policy."
        )


def enforce_policy(result, policy: ReleasePolicy | None, owner: str = "release") -> str | None:
    """Refuse a design weaker than ``policy``; return a sentence on what was checked.

    The design's own α and Π have been checked again on its matrix before this is called.  A
    design whose α is at most the policy's and whose Π holds every combination of the policy's
    meets it by that check.  Otherwise a person-level design is checked again, its full C1 at
    the policy's α and Π (a design for coarser combinations may still meet finer ones); a
    design of another kind (households) is refused.
    """
    if policy is None or policy.empty:
        return None
    alpha = float(policy.alpha)  # type: ignore[arg-type]  # required by release_policy
    if policy.combinations is not None:
        want = resolve_combinations(result.qi, explicit=policy.combinations, owner=owner)
    else:
        want = resolve_combinations(result.qi, size=policy.combination_size or 3, owner=owner)
    have = {tuple(c) for c in result.combination_indices}
    if result.alpha <= alpha and all(tuple(c) in have for c in want):
        return f"meets the policy (alpha {alpha:g}, {len(want)} combination(s))"
    from ..kinds import kind_of

    weaker = (
        f"The design was made for alpha {result.alpha:g} over {len(have)} combination(s); the "
        f"policy asks for alpha {alpha:g} over {len(want)}: "
        f"{', '.join('+'.join(c) for c in _names(result, want)[:6])}"
    )
    if kind_of(result) is not None:
        raise DesignMismatchError(f"{weaker}. Refusing to release with a weaker design.")
    table = result.table
    rep = full_c1_check(result, table, want)  # from the form where the design has one
    if not rep.max_risk <= alpha:
        raise DesignMismatchError(
            f"{weaker}; checked again under the policy its max risk is {rep.max_risk:.6g} > "
            f"{alpha:g}. Refusing to release with a weaker design."
        )
    return (
        f"meets the policy when checked again (max risk {rep.max_risk:.6g} <= alpha {alpha:g} "
        f"over {len(want)} combination(s))"
    )
