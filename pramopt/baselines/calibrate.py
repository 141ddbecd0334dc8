"""Closed-form PRAM families calibrated to just meet C1 at α on a data set (equal security).

Each calibration returns a K x K matrix on the **present cells** of the frequency table, the
same cells as the core designer, so that :func:`pramopt.verify.c1_risk` and
:func:`pramopt.loss.l2_loss` compare the designs directly.  A family defined on the whole
product space (retention-replacement, sdcMicro's PRAM) is *restricted to the present cells*:
rows and columns of present cells are kept and each row is renormalised, i.e. a record is only
ever changed into a combination that is present in the data.  The restricted matrix is what is
evaluated (its risk, loss, ε and k), not the product-space matrix.

The searches use a fast dense evaluation of the C1 left-hand sides; the final matrix is always
checked with the independent verifier :func:`pramopt.verify.c1_risk`, and every calibration
returns a :class:`~pramopt.DesignResult` made by :func:`pramopt.verified_result.finish`, as
:func:`pramopt.design` does: ``success`` means that check gave ``max_risk <= alpha``,
``details`` holds the tuned parameters and the number of C1 evaluations, and ``params`` the
inputs, so that :func:`pramopt.baseline` with them makes the same design again.  The closed
forms are dense by nature (every cell may move to every other), so these are for data sets
of at most a few thousand cells.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from .._plain import plain
from .._validation import InvalidParameterError, check_int, check_real
from ..frequency.table import FrequencyTable
from ..loss import l2_loss as _l2_loss
from ..result import DesignResult, Stage, Status
from ..verified_result import finish
from ..verify import c1_risk
from .ifpr import ifpr_design
from .retention import retention_matrix
from .sdcmicro import sdcmicro_invariant_matrix

__all__ = [
    "product_matrix_on_cells",
    "retention_on_cells",
    "ifpr_on_cells",
    "sdcmicro_on_cells",
    "calibrate_retention",
    "calibrate_ifpr",
    "calibrate_sdcmicro",
]


def l2_loss(P, counts) -> float:
    """Exact L2 loss; a singular matrix gives ``inf`` without SciPy's singular-matrix warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _l2_loss(P, counts)


# ---------------------------------------------------------------------------------------------
# Matrices on the present cells
# ---------------------------------------------------------------------------------------------


def product_matrix_on_cells(codes, matrices: Sequence) -> np.ndarray:
    """Product of per-variable matrices restricted to the given cells, rows renormalised.

    ``P[m, m'] = prod_v M_v[m_v, m'_v] / sum_{m''} prod_v M_v[m_v, m''_v]`` over the cells
    ``m, m', m''`` listed in ``codes``: each variable is perturbed independently and a record is
    only changed into one of the listed (present) cells.

    Parameters
    ----------
    codes : ndarray of shape (K, d)
        Integer codes of the cells.
    matrices : sequence of d square matrices
        Transition matrix of each variable (indexed by its codes).
    """
    codes = np.asarray(codes)
    if codes.ndim != 2 or len(matrices) != codes.shape[1]:
        raise InvalidParameterError(
            "The 'matrices' parameter of product_matrix_on_cells must give one matrix per column "
            "of codes "
            f"({codes.shape[1] if codes.ndim == 2 else '?'}); got {len(matrices)}."
        )
    K = codes.shape[0]
    P = np.ones((K, K))
    for v, M in enumerate(matrices):
        c = codes[:, v]
        P *= np.asarray(M, dtype=float)[np.ix_(c, c)]
    rs = P.sum(axis=1, keepdims=True)
    if np.any(rs <= 0):
        raise InvalidParameterError(
            "The 'matrices' parameter of product_matrix_on_cells gives a cell no present cell to "
            "move to."
        )
    return P / rs


def retention_on_cells(table: FrequencyTable, rho) -> np.ndarray:
    """Retention-replacement with ρ (one, or one per variable) restricted to the present cells.

    The domain of each variable is its categories in ``table`` (``len(table.categories[v])``).
    """
    d = len(table.qi)
    rhos = [rho] * d if np.ndim(rho) == 0 else list(rho)
    if len(rhos) != d:
        raise InvalidParameterError(
            "The 'rho' parameter of retention_on_cells must be one number or one per variable "
            f"({d}); got {len(rhos)}."
        )
    mats = [retention_matrix(len(table.categories[v]), r) for v, r in enumerate(rhos)]
    return product_matrix_on_cells(table.codes, mats)


def ifpr_on_cells(table: FrequencyTable, xi: float) -> np.ndarray:
    """The IFPR design of Ghatak & Roy with ξ, the present cells taken as one variable's
    categories."""
    return ifpr_design(table.counts, xi).matrix


def _variable_frequencies(table: FrequencyTable, v: int) -> np.ndarray:
    return np.bincount(table.codes[:, v], weights=table.counts, minlength=len(table.categories[v]))


def _sdcmicro_uniforms(table: FrequencyTable, seed) -> list[np.ndarray]:
    ss = np.random.SeedSequence(seed)
    return [
        np.random.default_rng(s).random(len(table.categories[v]))
        for v, s in enumerate(ss.spawn(len(table.qi)))
    ]


def sdcmicro_on_cells(table: FrequencyTable, pd=0.8, alpha=0.5, seed=0) -> np.ndarray:
    """sdcMicro's per-variable PRAM (re-implementation), restricted to the cells, rows renormalised.

    See :mod:`pramopt.baselines.sdcmicro`; one ``pd`` and ``alpha`` for all variables (as
    sdcMicro recycles them), an independent seeded diagonal per variable.  This restricted matrix
    is not what sdcMicro releases: its ``pram()`` perturbs each variable over all its categories,
    so a record may become a combination absent from the data (on testdata with 7 keys and the
    defaults, 8.3% of the records on average, 56% for the worst cell), and the restriction is no
    longer invariant.  :func:`pramopt.baselines.product_space.assess_product_space` measures the
    mechanism as released.
    """
    u = _sdcmicro_uniforms(table, seed)
    mats = [
        sdcmicro_invariant_matrix(_variable_frequencies(table, v), pd, alpha, uniforms=u[v])
        for v in range(len(table.qi))
    ]
    return product_matrix_on_cells(table.codes, mats)


# ---------------------------------------------------------------------------------------------
# Fast evaluation of C1 for the searches (the final check is always pramopt.verify.c1_risk)
# ---------------------------------------------------------------------------------------------


class _C1Screen:
    """Largest C1 left-hand side of a dense K x K matrix on the present cells, in one product."""

    def __init__(self, codes: np.ndarray, counts: np.ndarray, combinations):
        K = codes.shape[0]
        blocks = []
        for pi in combinations:
            _, inv = np.unique(codes[:, list(pi)], axis=0, return_inverse=True)
            inv = np.asarray(inv).ravel()
            blocks.append(
                sp.csr_matrix((np.ones(K), (np.arange(K), inv)), shape=(K, int(inv.max()) + 1))
            )
        self.ind = sp.hstack(blocks).tocsr()
        self.counts = counts.astype(float)
        self.calls = 0

    def group_sums(self, P: np.ndarray) -> np.ndarray:
        """S[m, g] = sum over the cells k of group g of P[m, k] (every π side by side)."""
        return np.asarray((self.ind.T @ P.T).T)

    def __call__(self, P: np.ndarray) -> float:
        return self.from_sums(self.group_sums(P))

    def from_sums(self, S: np.ndarray) -> float:
        self.calls += 1
        den = self.counts @ S
        top = S.max(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(top > 0, top / den, 0.0)
        return float(np.max(r))


def _check_inputs(table, combinations, alpha, owner):
    if not isinstance(table, FrequencyTable):
        raise InvalidParameterError(
            f"The 'table' parameter of {owner} must be a FrequencyTable "
            f"(pramopt.frequency_table); got {type(table).__name__}."
        )
    alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0)
    try:
        combos = [tuple(int(i) for i in c) for c in combinations]
    except TypeError:
        raise InvalidParameterError(
            f"The 'combinations' parameter of {owner} must be a list of tuples of column indices; "
            f"got {combinations!r}."
        ) from None
    d = len(table.qi)
    if not combos or any(not c or min(c) < 0 or max(c) >= d for c in combos):
        raise InvalidParameterError(
            f"The 'combinations' parameter of {owner} must be a non-empty list of tuples of "
            f"indices in [0, {d - 1}]; got {combinations!r}."
        )
    return alpha, combos


def _finish(
    family,
    table,
    combos,
    alpha,
    P,
    params,
    screen,
    fallback: Callable | None = None,
    *,
    inputs: dict,
    t0: float,
) -> DesignResult:
    """Verify with c1_risk; if rounding puts the searched matrix just above α, try ``fallback``."""
    rep = c1_risk(P, table.codes, table.counts, combos)
    tries = 0
    while rep.max_risk > alpha and fallback is not None and tries < 20:
        nxt = fallback(tries)
        if nxt is None:
            break
        P, params = nxt
        rep = c1_risk(P, table.codes, table.counts, combos)
        tries += 1
    evaluations = screen.calls + 1 + tries
    ok = rep.max_risk <= alpha
    msg = (
        f"Closed-form {family} calibrated to meet C1 at alpha = {alpha:g}; parameters "
        f"{json.dumps(plain({k: v for k, v in params.items() if k != 'blocks'}))[:300]}."
    )
    if not ok:
        msg += (
            f" No member of the family meets C1 on these data (best max risk {rep.max_risk:.6g})."
        )
    stage = Stage(
        "calibrate", time.perf_counter() - t0, evaluations, f"{evaluations} C1 evaluations"
    )
    qi = list(table.qi)
    inputs = {
        "family": family,
        "alpha": alpha,
        "combinations": [[qi[i] for i in c] for c in combos],
        **inputs,
    }
    return finish(
        P,
        table,
        combos,
        alpha,
        Status.SUCCESS if ok else Status.INFEASIBLE,
        msg,
        stages=(stage,),
        solver=f"closed form ({family})",
        report=rep,
        method=family,
        params=inputs,
        details={**params, "evaluations": evaluations},
        loss=l2_loss(P, table.counts),
    )


def _largest_feasible(
    f: Callable[[float], float], alpha: float, lo: float, hi: float, tol: float
) -> float | None:
    """Largest x in [lo, hi] with f(x) <= alpha, for f increasing in x (bisection)."""
    if f(hi) <= alpha:
        return hi
    if f(lo) > alpha:
        return None
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if f(mid) <= alpha:
            lo = mid
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------------------------------------
# Retention-replacement
# ---------------------------------------------------------------------------------------------


def calibrate_retention(
    table: FrequencyTable,
    combinations,
    alpha,
    *,
    per_attribute: bool = False,
    tol: float = 1e-4,
    passes: int = 2,
) -> DesignResult:
    """Largest retention probability ρ whose restricted matrix meets C1 at ``alpha``.

    With ``per_attribute=False`` one ρ for all variables, found by bisection (the risk grows
    with ρ, from the uniform matrix at ρ = 0 to the identity at ρ = 1).  With
    ``per_attribute=True`` one ρ per variable, by coordinate search: starting from the common ρ
    and from greedy starts (variables raised one at a time, in increasing and decreasing order
    of their number of categories), each ρ_a is raised by bisection to the largest value that
    keeps C1 with the others fixed; the start with the smallest L2 loss is kept.

    Parameters
    ----------
    table : FrequencyTable
    combinations : sequence of tuples of int
        Π (see :func:`pramopt.resolve_combinations`).
    alpha : float in (0, 1)
    per_attribute : bool
    tol : float
        Bisection tolerance on ρ.
    passes : int
        Rounds of the coordinate search.
    """
    owner = "calibrate_retention"
    t0 = time.perf_counter()
    alpha, combos = _check_inputs(table, combinations, alpha, owner)
    tol = check_real(tol, "tol", owner, low=0.0, high=0.5)
    passes = check_int(passes, "passes", owner, low=1)
    inputs = {"per_attribute": bool(per_attribute), "tol": tol, "passes": passes}
    screen = _C1Screen(table.codes, table.counts, combos)
    d = len(table.qi)
    levels = [len(c) for c in table.categories]
    # same[v][m, m'] = 1 where cells m and m' agree on variable v: the retention factor of v on
    # the cells is rho * same + (1 - rho) / |V_v|, linear in rho
    same = [
        (table.codes[:, v][:, None] == table.codes[:, v][None, :]).astype(float) for v in range(d)
    ]

    def factor(v, r):
        return r * same[v] + (1.0 - r) / levels[v]

    def build(rhos):
        U = np.ones_like(same[0])
        for v, r in enumerate(rhos):
            U *= factor(v, r)
        return U / U.sum(axis=1, keepdims=True)

    rho = _largest_feasible(lambda r: screen(build([r] * d)), alpha, 0.0, 1.0, tol)
    family = "retention-per-attribute" if per_attribute else "retention"

    def finish(P, params, fallback=None):
        return _finish(
            family, table, combos, alpha, P, params, screen, fallback, inputs=inputs, t0=t0
        )

    if rho is None:
        return finish(
            build([0.0] * d), {"rho": [0.0] * d if per_attribute else 0.0, "levels": levels}
        )
    if not per_attribute:

        def back_one(i, rho=rho):
            r = max(0.0, rho - tol * 2**i)
            return build([r] * d), {"rho": r, "levels": levels}

        return finish(build([rho] * d), {"rho": rho, "levels": levels}, back_one)

    def ascend(rhos, order):
        return _ascend(rhos, order, factor, same, levels, screen, alpha, tol, passes)

    by_levels = sorted(range(d), key=lambda v: levels[v])
    starts = [
        ascend([rho] * d, range(d)),
        ascend([0.0] * d, by_levels),
        ascend([0.0] * d, by_levels[::-1]),
    ]
    feasible = [r for r in starts if screen(build(r)) <= alpha]
    best = min(feasible, key=lambda r: l2_loss(build(r), table.counts)) if feasible else [rho] * d

    def back(i, best=best):
        r = [max(0.0, x - tol * 2**i) for x in best]
        return build(r), {"rho": r, "levels": levels}

    return finish(build(best), {"rho": best, "levels": levels}, back)


def _ascend(rhos, order, factor, same, levels, screen, alpha, tol, passes: int) -> list:
    """Coordinate search from ``rhos``: each ρ_v in ``order`` raised by bisection to the largest
    value that keeps C1 with the others fixed, for ``passes`` rounds or until none moves."""
    rhos = list(rhos)
    for _ in range(passes):
        changed = False
        for v in order:
            rest = np.ones_like(same[0])
            for w, r in enumerate(rhos):
                if w != v:
                    rest *= factor(w, r)
            A1, A0 = rest * same[v], rest / levels[v]
            S1, S0 = screen.group_sums(A1), screen.group_sums(A0)
            r1, r0 = A1.sum(axis=1), A0.sum(axis=1)

            # C1 risk with rho_v = r, the others fixed: linear before normalising
            def f(r, S1=S1, S0=S0, r1=r1, r0=r0):
                return screen.from_sums(
                    (r * S1 + (1.0 - r) * S0) / (r * r1 + (1.0 - r) * r0)[:, None]
                )

            best = _largest_feasible(f, alpha, rhos[v], 1.0, tol)
            if best is not None and best > rhos[v] + tol / 2:
                rhos[v] = best
                changed = True
        if not changed:
            break
    return rhos


# ---------------------------------------------------------------------------------------------
# IFPR on the present cells
# ---------------------------------------------------------------------------------------------


def calibrate_ifpr(
    table: FrequencyTable, combinations, alpha, *, n_grid: int = 40, tol: float = 1e-4
) -> DesignResult:
    """The IFPR design (Ghatak & Roy, Section 2) on the present cells that just meets C1.

    The K present cells are treated as the categories of one variable with frequencies
    ``T = counts``; the largest ξ whose design meets C1 at ``alpha`` is searched on a geometric
    grid of ``n_grid`` values in ``[max(1/n, alpha/20), 0.99]`` and refined by bisection next to the
    largest feasible grid value (the risk need not be monotone in ξ, because block sizes jump).
    """
    owner = "calibrate_ifpr"
    t0 = time.perf_counter()
    alpha, combos = _check_inputs(table, combinations, alpha, owner)
    n_grid = check_int(n_grid, "n_grid", owner, low=2)
    screen = _C1Screen(table.codes, table.counts, combos)
    T = table.counts
    n = table.n
    designs: dict[float, object] = {}

    def design(x):
        if x not in designs:
            designs[x] = ifpr_design(T, x)
        return designs[x]

    def risk(x):
        return screen(design(x).matrix)

    grid = np.geomspace(max(1.0 / n, alpha / 20.0), 0.99, n_grid)
    ok = [x for x in grid if risk(float(x)) <= alpha]
    if not ok:
        x = float(grid[0])
    else:
        x = float(max(ok))
        i = int(np.searchsorted(grid, x))
        if i + 1 < grid.size:
            lo, hi = x, float(grid[i + 1])
            while hi - lo > tol * lo:
                mid = 0.5 * (lo + hi)
                if risk(mid) <= alpha:
                    lo = mid
                else:
                    hi = mid
            x = lo
    d = design(x)
    params = {
        "xi": x,
        "blocks": [list(map(int, b)) for b in d.blocks],
        "thetas": list(d.thetas),
        "max_r1": d.max_r1,
        "unprotected": list(d.unprotected),
    }
    lower = sorted((float(g) for g in ok if g < x), reverse=True)

    def back(i):
        if i >= len(lower):
            return None
        dd = design(lower[i])
        return dd.matrix, {
            "xi": lower[i],
            "blocks": [list(map(int, b)) for b in dd.blocks],
            "thetas": list(dd.thetas),
            "max_r1": dd.max_r1,
            "unprotected": list(dd.unprotected),
        }

    return _finish(
        "ifpr",
        table,
        combos,
        alpha,
        d.matrix,
        params,
        screen,
        back,
        inputs={"n_grid": n_grid, "tol": tol},
        t0=t0,
    )


# ---------------------------------------------------------------------------------------------
# sdcMicro's per-variable PRAM restricted to the present cells (re-implementation)
# ---------------------------------------------------------------------------------------------


def calibrate_sdcmicro(
    table: FrequencyTable,
    combinations,
    alpha,
    *,
    pd_grid: Sequence[float] | None = None,
    seed=0,
    tol: float = 1e-4,
) -> DesignResult:
    """sdcMicro's per-variable PRAM restricted to the present cells (:func:`sdcmicro_on_cells`;
    re-implemented, see :mod:`.sdcmicro`) tuned to meet C1.  Restricted, it is neither the
    mechanism sdcMicro releases nor invariant.

    For each ``pd`` of ``pd_grid`` the smallest ``alpha_pram`` (mixing weight with the identity)
    that meets C1 is found by bisection (the risk falls as ``alpha_pram`` grows); among these the
    pair with the smallest L2 loss is kept.  The random diagonals are drawn once from ``seed``.
    """
    owner = "calibrate_sdcmicro"
    t0 = time.perf_counter()
    alpha, combos = _check_inputs(table, combinations, alpha, owner)
    if pd_grid is None:
        pd_grid = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95)
    pd_grid = [
        check_real(p, "pd_grid", owner, low=0.0, high=1.0, low_open=False, high_open=False)
        for p in pd_grid
    ]
    if not pd_grid:
        raise InvalidParameterError(
            f"The 'pd_grid' parameter of {owner} must list at least one pd; got []."
        )
    screen = _C1Screen(table.codes, table.counts, combos)
    u = _sdcmicro_uniforms(table, seed)
    freqs = [_variable_frequencies(table, v) for v in range(len(table.qi))]

    def build(pd, a):
        mats = [
            sdcmicro_invariant_matrix(freqs[v], pd, a, uniforms=u[v]) for v in range(len(freqs))
        ]
        return product_matrix_on_cells(table.codes, mats)

    best = None
    for pd in pd_grid:
        # risk(1 - a) increasing in (1 - a): largest 1 - a, i.e. smallest a, that is feasible
        def risk_at(k: float, pd: float = pd) -> float:
            return screen(build(pd, 1.0 - k))

        keep = _largest_feasible(risk_at, alpha, 0.0, 1.0, tol)
        if keep is None:
            continue
        a = 1.0 - keep
        P = build(pd, a)
        loss = l2_loss(P, table.counts)
        if best is None or loss < best[0]:
            best = (loss, pd, a, P)
    if best is None:
        pd, a = min(pd_grid), 1.0
        P = build(pd, a)
    else:
        _, pd, a, P = best

    def back(i, pd=pd, a=a):
        a2 = min(1.0, a + tol * 2**i)
        return build(pd, a2), {"pd": pd, "alpha": a2, "seed": seed}

    return _finish(
        "sdcmicro",
        table,
        combos,
        alpha,
        P,
        {"pd": pd, "alpha": a, "seed": seed},
        screen,
        back,
        inputs={"pd_grid": list(pd_grid), "seed": seed, "tol": tol},
        t0=t0,
    )
