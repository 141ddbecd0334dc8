"""C1's rows added as they are found violated: the linear stage and the refinement around it.

A strategy starts from a working set of C1 rows (each rare cell's own groups, or the reducer's) and
checks every point against the full C1; rows found violated join the working set and the program
is rebuilt.  The block and privacy strategies use these two loops (the general design's linear
stage interleaves pricing with them and has its own).
"""

from __future__ import annotations

from .refine import refine

__all__ = ["solve_lazy", "refine_lazy"]


def solve_lazy(load, cost, lo, hi, clean, pending, add, on_round=None):
    """Solve ``load()``'s program until its point violates no C1 row outside the working set.

    Parameters
    ----------
    load : callable
        ``load() -> lp``: the program on the current working set (a backend chain).
    cost, lo, hi : ndarray
        Costs and bounds of its ``x`` (or ``z``) columns.
    clean : callable
        ``clean(x)``: the solver's point made exact (clipped, rows renormalised).
    pending : callable
        ``pending(x)``: the C1 rows the point violates that the working set lacks.
    add : callable
        ``add(rows)``: puts them into the working set.
    on_round : callable, optional
        ``on_round(rounds, x, new)`` after every solve with a point (progress).

    Returns
    -------
    (out, x, lp, rounds)
        The last solve's outcome, its cleaned point (None when the solver found none: ``out``
        says why), the program it was solved on and the number of solves.
    """
    rounds = 0
    while True:
        rounds += 1
        lp = load()
        out = lp.solve(cost, lo, hi)
        if out.x is None:
            return out, None, lp, rounds
        x = clean(out.x)
        new = pending(x)
        if on_round is not None:
            on_round(rounds, x, new)
        if not new:
            return out, x, lp, rounds
        add(new)


def refine_lazy(load, lp, x, lo, hi, evaluate, pending, add, max_iter: int, **options):
    """:func:`.refine.refine` from ``x`` on ``lp``, rebuilding the program (``load``) with the rows
    the full check finds missing (``pending``, ``add``) until it stops for another reason or
    ``max_iter`` iterations have run in all; ``options`` go to ``refine``.

    Returns ``(x, info, iterations)``; ``info`` is None when ``max_iter`` is not positive.
    """
    its = 0
    info = None
    while its < max_iter:
        x, info = refine(lp, x, lo, hi, evaluate, check=pending, max_iter=max_iter - its, **options)
        its += info.iterations
        if info.stop_reason != "constraints":
            break
        add(info.added_constraints)
        lp = load()
    return x, info, its
