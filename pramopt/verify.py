"""Independent verifier of the C1 security constraint (Cator, Hensbergen & Rozenholc, eq. (1)).

This module deliberately shares no code with the solver's constraint building
(:mod:`pramopt.optimize.constraints`): it recomputes every left-hand side of (1) from the raw
cell codes, the counts and the matrix, for **every** present cell m, every combination π and
every k0 that a present cell projects to.  A design is only reported successful when this check
passes with ``max_risk <= alpha``; no tolerance is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class C1Report:
    """Result of a full C1 check.

    Attributes
    ----------
    max_risk : float
        Largest left-hand side of (1) over all m, π, k0.
    argmax : tuple
        ``(m, combination index, representative column cell of k0)`` where the maximum is
        attained.
    risk_by_group : list of ndarray
        For each combination π, the largest left-hand side over m for each k0 (in the order of
        ``groups_by_combination``).
    groups_by_combination : list of ndarray
        For each π, the k0 values (rows of projected codes) in the order used above.
    denominators : list of ndarray
        For each π, ``sum_l U0(l) sum_{k: k_pi = k0} P_lk`` per k0.
    """

    max_risk: float
    argmax: tuple
    risk_by_group: list
    groups_by_combination: list
    denominators: list


def _nan_report() -> C1Report:
    # what every check returns where it fails closed: NaN passes no max_risk <= alpha
    return C1Report(
        max_risk=float("nan"),
        argmax=(),
        risk_by_group=[],
        groups_by_combination=[],
        denominators=[],
    )


def _group_sums(Pm, cols: np.ndarray, counts: np.ndarray, pi):
    """For one combination: k0 values, each column cell's k0, S[m, g] and the denominators."""
    k0s, inv = np.unique(cols[:, list(pi)], axis=0, return_inverse=True)
    inv = np.asarray(inv).ravel()
    Kc, G = cols.shape[0], k0s.shape[0]
    # S[m, g] = sum over released cells k with k_pi = k0(g) of P[m, k]
    ind = sp.csr_matrix((np.ones(Kc), (np.arange(Kc), inv)), shape=(Kc, G))
    S = (Pm @ ind).tocsc()
    return k0s, inv, S, np.asarray(S.T @ counts).ravel()


def _as_csr(P) -> sp.csr_matrix:
    return sp.csr_matrix(P, dtype=float, copy=True)


def _ratios(colmax: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Each group's worst left-hand side, ``colmax / den``: 0 where nothing is sent into it, inf
    where something is but the denominator is not positive (fail closed)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(colmax > 0, colmax / np.where(den > 0, den, 1.0), 0.0)
        return np.where((colmax > 0) & (den <= 0), np.inf, r)


def _counts_ok(counts: np.ndarray, K: int) -> bool:
    """U0 is K finite, non-negative counts (an infinite count would make every risk 0)."""
    return counts.shape == (K,) and bool(np.all(np.isfinite(counts)) and np.all(counts >= 0))


def c1_risk(
    P,
    codes: np.ndarray,
    counts: np.ndarray,
    combinations: Sequence[Sequence[int]],
    col_codes: np.ndarray | None = None,
) -> C1Report:
    """Evaluate the left-hand side of C1 for every (m, π, k0).

    Parameters
    ----------
    P : array_like or sparse matrix of shape (K, K)
        Transition matrix on the present cells (row = original cell, column = released cell).
    codes : ndarray of shape (K, d)
        Codes of the present cells.
    counts : ndarray of shape (K,)
        U0, the frequency of each present cell.
    combinations : sequence of sequences of int
        Π, each a tuple of column indices into ``codes``.
    col_codes : ndarray of shape (K', d), optional
        Codes of the released cells (the columns of P) when they differ from the present
        cells, for example a design on the full product space.  P is then K x K'.

    Returns
    -------
    C1Report
        ``max_risk`` is NaN -- which no ``max_risk <= alpha`` test passes -- when P has a NaN,
        infinite or negative entry, or when Π is empty (nothing would be checked): the check
        fails closed.
    """
    codes = np.asarray(codes)
    cols = codes if col_codes is None else np.asarray(col_codes)
    counts = np.asarray(counts, dtype=float)
    K, Kc = codes.shape[0], cols.shape[0]
    Pm = _as_csr(P)
    if Pm.shape != (K, Kc):
        raise ValueError(f"P has shape {Pm.shape}, expected {(K, Kc)}")
    if (
        not (np.all(np.isfinite(Pm.data)) and np.all(Pm.data >= 0))
        or not _counts_ok(counts, K)
        or len(combinations) == 0
    ):
        return _nan_report()
    best = -np.inf
    arg: tuple = ()
    risks, groups, dens = [], [], []
    for ci, pi in enumerate(combinations):
        k0s, inv, S, den = _group_sums(Pm, cols, counts, pi)
        G = k0s.shape[0]
        # worst row per column: max over m of S[m, g] (entries are >= 0, so the sparse max is exact)
        colmax = np.asarray(S.max(axis=0).todense()).ravel() if G else np.zeros(0)
        argrow = np.asarray(S.argmax(axis=0)).ravel() if G else np.zeros(0, dtype=np.int64)
        r = _ratios(colmax, den)
        risks.append(r)
        groups.append(k0s)
        dens.append(den)
        g = int(np.argmax(r)) if G else 0
        if G and r[g] > best:
            best = float(r[g])
            rep = int(np.flatnonzero(inv == g)[0])
            arg = (int(argrow[g]), ci, rep)
    return C1Report(
        max_risk=float(best),
        argmax=arg,
        risk_by_group=risks,
        groups_by_combination=groups,
        denominators=dens,
    )


def _pool_numbers(pools: np.ndarray) -> np.ndarray | None:
    """Pools numbered 0, 1, ...; None (fail closed) unless they are non-negative integers."""
    if pools.dtype.kind not in "iu":
        try:
            f = pools.astype(float)
        except (TypeError, ValueError):
            return None
        if not np.all(np.isfinite(f) & (f == np.floor(f)) & (np.abs(f) < 2.0**53)):
            return None
        pools = f
    pool = pools.astype(np.int64)
    if pool.size and pool.min() < 0:
        return None
    return np.asarray(np.unique(pool, return_inverse=True)[1], dtype=np.int64).ravel()


def _form_groups(inv, G, pool, ret, rt, w, counts, sent, top):
    """For one combination (each cell's group ``inv`` among ``G``): each cell's ``S[m, g]`` at
    its own group, the denominators, each group's largest ``S[m, g]``, and the (pool, group)
    pairs that hold a cell with the largest ``S[m, g]`` of the pool's rows outside the group."""
    # W_p(g) for every (pool, group) pair that holds a cell
    keys, pair = np.unique(pool * max(G, 1) + inv, return_inverse=True)
    pair = np.asarray(pair).ravel()
    W = np.bincount(pair, weights=w, minlength=keys.size)
    p_of, g_of = keys // max(G, 1), keys % max(G, 1)
    own = ret + rt * W[pair]  # S[m, g] of each cell m at its own group
    den = np.bincount(inv, weights=counts * ret, minlength=G) + np.bincount(
        g_of, weights=W * sent[p_of], minlength=G
    )
    # the largest S[m, g] of pool p's rows outside g (with rows summing to 1 exactly a
    # member of g is never below it; the rows' tolerance is why it is counted)
    outside = top[p_of] * W
    colmax = np.zeros(G)
    np.maximum.at(colmax, inv, own)
    np.maximum.at(colmax, g_of, outside)
    return own, den, colmax, p_of, g_of, outside


def c1_risk_form(
    retention,
    rate,
    weights,
    pools,
    codes: np.ndarray,
    counts: np.ndarray,
    combinations: Sequence[Sequence[int]],
    row_tol: float = 1e-8,
) -> C1Report:
    """:func:`c1_risk` of ``P[m, j] = retention[m] [m == j] + rate[m] weights[j] [same pool]``,
    from these four arrays, without the matrix's up to K^2 entries.

    Within a pool, the mass row m sends into a group g of released cells (those with
    ``k_pi = k0``) is ``S[m, g] = retention[m] [m in g] + rate[m] W_pool(m)(g)``, with
    ``W_p(g)`` the weights of pool p's cells in g.  So the denominator of g is
    ``sum_{m in g} U0(m) retention[m] + sum_p W_p(g) sum_{m in p} U0(m) rate[m]``, and the
    largest ``S[m, g]`` over m is either a member's own ``S[m, g]`` or, for a row outside g,
    ``max_{m in p} rate[m] W_p(g)`` for some pool p (a member's own value is at least its
    ``rate[m] W_p(g)``, so taking the pool's largest rate over all its rows changes no maximum).
    Each combination costs O(K log K), over the (pool, group) pairs the cells occupy.

    Parameters
    ----------
    retention, rate, weights : array_like of shape (K,)
        The matrix's parameters (``weights`` of every cell within its pool).
    pools : array_like of shape (K,)
        Pool of every cell (non-negative integers).
    codes, counts, combinations
        As for :func:`c1_risk` (the released cells are the present cells).
    row_tol : float
        Largest ``|retention[m] + rate[m] sum_pool(m) weights - 1|`` accepted.

    Returns
    -------
    C1Report
        The same report as :func:`c1_risk` on the matrix (up to the rounding of its sums).
        ``max_risk`` is NaN -- which no ``max_risk <= alpha`` test passes -- when a parameter is
        NaN, infinite or negative, a pool is not a non-negative integer, a row does not sum to
        1 within ``row_tol``, or Π is empty: the check fails closed.  Arrays of other lengths
        than the cells raise ValueError, as a matrix of another shape does.
    """
    codes = np.asarray(codes)
    counts = np.asarray(counts, dtype=float)
    K = codes.shape[0]
    ret, rt, w = (np.array(a, dtype=float).ravel() for a in (retention, rate, weights))
    pl = np.asarray(pools).ravel()
    if any(a.size != K for a in (ret, rt, w, pl)) or counts.shape != (K,):
        raise ValueError(
            f"the form has {(ret.size, rt.size, w.size, pl.size)} parameters and "
            f"{counts.shape} counts, expected {K} each"
        )
    floats = np.concatenate([ret, rt, w])
    if (
        not (np.all(np.isfinite(floats)) and np.all(floats >= 0))
        or not _counts_ok(counts, K)
        or len(combinations) == 0
    ):
        return _nan_report()
    pool = _pool_numbers(pl)
    if pool is None:
        return _nan_report()
    n_pools = int(pool.max(initial=-1)) + 1
    rows = ret + rt * np.bincount(pool, weights=w, minlength=n_pools)[pool]
    if not np.all(np.abs(rows - 1.0) <= row_tol):
        return _nan_report()
    # per pool: the records it sends out, sum U0 rate, and its largest rate
    sent = np.bincount(pool, weights=counts * rt, minlength=n_pools)
    top = np.zeros(n_pools)
    np.maximum.at(top, pool, rt)
    best = -np.inf
    arg: tuple = ()
    risks, groups, dens = [], [], []
    for ci, pi in enumerate(combinations):
        k0s, inv = np.unique(codes[:, list(pi)], axis=0, return_inverse=True)
        inv = np.asarray(inv, dtype=np.int64).ravel()
        G = k0s.shape[0]
        own, den, colmax, p_of, g_of, outside = _form_groups(
            inv, G, pool, ret, rt, w, counts, sent, top
        )
        r = _ratios(colmax, den)
        risks.append(r)
        groups.append(k0s)
        dens.append(den)
        g = int(np.argmax(r)) if G else 0
        if G and r[g] > best:
            best = float(r[g])
            members = np.flatnonzero(inv == g)
            # the row attaining the maximum: a member, else a pool's largest rate
            m = int(members[np.argmax(own[members])])
            if not own[m] >= colmax[g]:
                p = int(p_of[np.flatnonzero((g_of == g) & (outside >= colmax[g]))[0]])
                m = int(np.flatnonzero((pool == p) & (rt >= top[p]))[0])
            arg = (m, ci, int(members[0]))
    return C1Report(
        max_risk=float(best),
        argmax=arg,
        risk_by_group=risks,
        groups_by_combination=groups,
        denominators=dens,
    )


def violated_rows(P, codes, counts, combinations, alpha: float) -> list[tuple[int, int, int]]:
    """All (m, combination index, representative cell of k0) with left-hand side > alpha."""
    codes = np.asarray(codes)
    counts = np.asarray(counts, dtype=float)
    K = codes.shape[0]
    Pm = _as_csr(P)
    out: list[tuple[int, int, int]] = []
    for ci, pi in enumerate(combinations):
        k0s, inv, S, den = _group_sums(Pm, codes, counts, pi)
        S = S.tocoo()
        bad = S.data > alpha * den[S.col]
        if bad.any():
            rep = np.zeros(k0s.shape[0], dtype=np.int64)
            rep[inv[::-1]] = np.arange(K)[::-1]  # first member of each group
            out.extend(zip(S.row[bad].tolist(), [ci] * int(bad.sum()), rep[S.col[bad]].tolist()))
    return out


# ---------------------------------------------------------------------------------------------
# How many identifying values a transition changes (max_changed_variables), from the codes alone
# ---------------------------------------------------------------------------------------------


def transition_distances(
    P, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every stored non-zero off-diagonal entry of ``P`` and the number of identifying variables
    its two cells differ in (their Hamming distance, from the raw codes).

    Returns ``(rows, cols, values, distances)``.  A NaN, infinite or negative entry is returned
    with distance ``codes.shape[1] + 1`` (more than any two cells can differ in), so that no bound
    on the distance passes it.
    """
    codes = np.asarray(codes)
    Pm = sp.coo_matrix(_as_csr(P))
    off = (Pm.row != Pm.col) & (Pm.data != 0)
    r, c, v = Pm.row[off], Pm.col[off], Pm.data[off]
    dist = np.empty(r.size, dtype=np.int64)
    step = 1 << 18
    for s in range(0, r.size, step):
        dist[s : s + step] = np.count_nonzero(
            codes[r[s : s + step]] != codes[c[s : s + step]], axis=1
        )
    bad = ~np.isfinite(v) | (v < 0)
    dist[bad] = codes.shape[1] + 1
    return r, c, v, dist


def changed_variables_violations(P, codes: np.ndarray, max_changed: int) -> tuple[int, int]:
    """``(entries, largest distance)``: how many non-zero off-diagonal entries of ``P`` join
    cells that differ in more than ``max_changed`` identifying variables, and the largest such
    distance (0 when ``P`` has no off-diagonal entry).  A design meets ``max_changed_variables``
    only when the count is 0; a NaN, infinite or negative entry always counts (fail closed)."""
    _, _, _, dist = transition_distances(P, codes)
    return int(np.count_nonzero(dist > max_changed)), int(dist.max(initial=0))
