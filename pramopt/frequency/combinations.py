"""The set Π of combinations of identifying variables that an intruder may overview."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations as _combinations

from .._validation import InvalidParameterError, check_int


def resolve_combinations(
    qi: Sequence[str],
    size: int | None = 3,
    explicit: Sequence[Sequence[str]] | None = None,
    owner: str = "design",
) -> tuple[tuple[int, ...], ...]:
    """Return Π as tuples of indices into ``qi``.

    By default every subset of 3 identifying variables (the CBS rule of Cator et al.,
    Section 1), or the whole of ``qi`` when it has fewer than 3 variables.

    Parameters
    ----------
    qi : sequence of str
        Identifying variables.
    size : int, optional
        Size of the subsets; every subset of this size is used.
    explicit : sequence of sequences of str, optional
        An explicit list of subsets (overrides ``size``).
    """
    qi = list(qi)
    if explicit is not None:
        out = []
        for c in explicit:
            if isinstance(c, str):
                c = [c]
            c = list(c)
            bad = [v for v in c if v not in qi]
            if not c or bad or len(set(c)) != len(c):
                raise InvalidParameterError(
                    f"The 'combinations' parameter of {owner} must be a list of non-empty subsets "
                    "of "
                    f"the identifying variables {qi!r} without repeats; got {list(c)!r}."
                )
            idx = tuple(sorted(qi.index(v) for v in c))
            if idx not in out:
                out.append(idx)
        if not out:
            raise InvalidParameterError(
                f"The 'combinations' parameter of {owner} must list at least one subset; got []."
            )
        return tuple(out)
    if size is None:
        size = 3
    size = check_int(size, "combination_size", owner, low=1)
    if size > len(qi):
        if len(qi) < 3 and size == 3:
            size = len(qi)  # fewer than 3 identifying variables: use all of them
        else:
            raise InvalidParameterError(
                f"The 'combination_size' parameter of {owner} must be an integer in [1, {len(qi)}] "
                f"(the number of identifying variables); got {size}."
            )
    return tuple(_combinations(range(len(qi)), size))
