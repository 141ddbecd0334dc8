"""Releasing with a per-variable design, and the unbiased estimate from its release.

Each perturbed variable of each record is drawn from its matrix's row, independently of the other
variables and records (its own uniform stream from the seed); the other fields are returned as
they are.  Every release first checks the design again (:func:`check_releasable`, the independent
check of :mod:`.check`) and refuses data whose cells or counts are not the design's.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .._validation import ROW_SUM_TOL
from ..errors import DesignMismatchError, InvalidParameterError
from ..frequency.table import FrequencyTable, check_qi, count_rows, record_codes
from ..publish.file_release import FileRelease, release_in_memory
from ..publish.frame import check_same_table, released_column
from ..publish.sampling import Sampler, UniformStream, seed_entropy
from .result import PerVariableDesign

__all__ = [
    "check_releasable",
    "release_per_variable",
    "release_per_variable_file",
    "release_note",
    "estimate_per_variable",
    "ESTIMATE_MAX_CELLS",
]

#: The estimate's table (product of the chosen variables' categories) is refused above this.
ESTIMATE_MAX_CELLS = 2_000_000


def check_releasable(result: PerVariableDesign) -> None:
    """Refuse a design that did not succeed, whose matrices are not row-stochastic, or that fails
    C1 when checked again."""
    if not result.success:
        raise DesignMismatchError(
            f"The per-variable design's status is {result.status.value!r}: it did not pass the "
            "C1 verification, so it is not safe to release with."
        )
    named = [(q, M) for m in result.strata.values() for q, M in m.items()]
    for q, M in named or result.variable_matrices.items():
        A = M.to_numpy(dtype=float)
        if (
            not np.all(np.isfinite(A))
            or (A < 0).any()
            or not np.all(np.abs(A.sum(axis=1) - 1.0) <= ROW_SUM_TOL)
        ):
            raise DesignMismatchError(
                f"The matrix of {q!r} is not row-stochastic; refusing to release with it."
            )
    # the check below covers every variable's matrix; a variable released unchanged must have
    # the identity there, or the mechanism checked is not the one released
    for mats in result.matrix_sets():
        for v, q in enumerate(result.qi):
            if q not in result.perturbed and not np.array_equal(
                np.asarray(mats[v], dtype=float), np.eye(len(mats[v]))
            ):
                raise DesignMismatchError(
                    f"The matrix of {q!r} is not the identity, but {q!r} is released unchanged; "
                    "refusing to release with it."
                )
    alpha = 1.0 if result.alpha is None else float(result.alpha)  # under epsilon alone: alpha 1
    rep = result.check()
    if not rep.max_risk <= alpha:
        raise DesignMismatchError(
            f"The per-variable design fails C1 when checked again (max risk "
            f"{rep.max_risk:.6g} > alpha {alpha:g}); refusing to release with it."
        )
    target = result.params.get("epsilon")
    if target is not None:
        from ..risk.dp_pk_anonymity import dp_epsilon_product

        eps = max(dp_epsilon_product(m) for m in result.matrix_sets())
        if not eps <= target:
            raise DesignMismatchError(
                f"The per-variable design's epsilon is {eps:.6g} when measured again, above its "
                f"epsilon {target:g}; refusing to release with it."
            )


def _codes(df: pd.DataFrame, table: FrequencyTable, owner: str) -> np.ndarray:
    """Each record's codes under the design's categories (error for a value it does not know)."""
    check_qi(df, table.qi, owner)
    domains = {q: list(c) for q, c in zip(table.qi, table.categories)}
    try:
        codes, _ = record_codes(
            df, list(table.qi), domains, max(len(c) for c in table.categories) + 1, owner
        )
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
    return codes


def _stream(entropy: int, v: int) -> UniformStream:
    """Variable v's own uniform stream, spawned from the release's entropy."""
    state = np.random.SeedSequence(entropy, spawn_key=(v,)).generate_state(4).tobytes()
    return UniformStream(int.from_bytes(state, "little"))


def release_per_variable(df: pd.DataFrame, result: PerVariableDesign, seed=None) -> pd.DataFrame:
    """Perturb every perturbed identifying variable of ``df`` independently with its matrix.

    Parameters
    ----------
    df : pandas.DataFrame
        The microdata the design was made for.
    result : PerVariableDesign
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw (default: from :mod:`secrets`); variable v of record i takes
        uniform i of the v-th stream spawned from it.
    """
    check_releasable(result)
    table = result.table
    codes = _codes(df, table, "release")
    cells, counts = count_rows(codes, [len(c) for c in table.categories])
    check_same_table(
        FrequencyTable(qi=table.qi, categories=table.categories, codes=cells, counts=counts), table
    )
    entropy = seed_entropy(seed, "release")
    out = df.copy()
    sets, rec_strata = result.matrix_sets(), record_strata(codes, result)
    for v, q in enumerate(table.qi):
        if q not in result.perturbed:
            continue
        u = _stream(entropy, v)(0, len(df))
        new = np.empty(len(df), dtype=np.int64)
        for s, mats in enumerate(sets):  # each record with its stratum's matrix
            at = np.flatnonzero(rec_strata == s)
            new[at] = Sampler(mats[v]).draw(codes[at, v], u[at])
        out[q] = released_column(df, q, table.categories[v], new)
    return out


def record_strata(codes: np.ndarray, result: PerVariableDesign) -> np.ndarray:
    """Each record's stratum (an index into ``result.matrix_sets()``; 0 without ``fixed``),
    from its codes under the design's categories; -1 for a stratum the design has not."""
    if not result.fixed:
        return np.zeros(len(codes), dtype=np.int64)
    qi = list(result.table.qi)
    idx = [qi.index(f) for f in result.fixed]
    levels = [len(result.table.categories[j]) for j in idx]
    t = result.table
    keys = np.unique(np.asarray(t.codes)[:, idx], axis=0)  # the strata, in stratum_of's order
    flat_keys = np.ravel_multi_index(tuple(keys.T), levels)
    lookup = np.full(math.prod(levels), -1, dtype=np.int64)
    lookup[flat_keys] = np.arange(len(keys))
    return lookup[np.ravel_multi_index(tuple(np.asarray(codes)[:, idx].T), levels)]


def release_per_variable_file(
    src, dst, result: PerVariableDesign, seed, dialect, owner: str
) -> FileRelease:
    """:func:`pramopt.release_file` with a per-variable design: in memory, every non-identifying
    field written back as read."""
    return release_in_memory(
        src, dst, result, seed, dialect, owner, check=check_releasable, release=release_per_variable
    )


def release_note(result: PerVariableDesign) -> str:
    """What ``pramopt release`` adds to its summary: the variables drawn independently."""
    each = f"one matrix per stratum of {', '.join(result.fixed)}" if result.fixed else "one matrix"
    return f"; {', '.join(map(str, result.perturbed))} drawn independently, {each} each"


def _contract(T: np.ndarray, mats: list) -> np.ndarray:
    for j, M in enumerate(mats):
        T = np.moveaxis(np.tensordot(T, M, axes=([j], [0])), -1, j)
    return T


def _simplex(x: np.ndarray, total: float) -> np.ndarray:
    """The Euclidean projection of x onto {y >= 0, sum y = total} (sort-based, exact)."""
    if total <= 0:
        return np.zeros_like(x)
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - total
    rho = np.flatnonzero(u - css / np.arange(1, x.size + 1) > 0)[-1]
    return np.maximum(x - css[rho] / (rho + 1), 0.0)


def _estimated(codes, mask, rec_strata, invs, levels) -> tuple:
    """The released table of the records in ``mask``, its unbiased estimate and plug-in
    variance: per stratum, the released table with each axis multiplied by ``M_v^-1`` (and by
    its squared entries, minus the estimate), summed over the strata (independent)."""
    size = math.prod(levels)
    U, est, var = (np.zeros(levels) for _ in range(3))
    for s, inv in enumerate(invs):
        rows = mask & (rec_strata == s)
        flat = np.ravel_multi_index(tuple(codes[rows].T), levels)
        Us = np.bincount(flat, minlength=size).astype(float).reshape(levels)
        e = _contract(Us, inv)
        U, est, var = U + Us, est + e, var + _contract(Us, [N * N for N in inv]) - e
    return U, est, var


def estimate_per_variable(
    released: pd.DataFrame,
    result: PerVariableDesign,
    by=None,
    *,
    nonnegative: bool = False,
    variables=None,
) -> pd.DataFrame:
    """Unbiased estimate of the original frequencies over ``variables`` (default: every
    identifying variable), inverting each matrix (Cator et al., eq. (4), per variable).

    ``P^-1 = kron(M_v^-1)`` and every row of ``M_v^-1`` sums to 1, so the estimate of the table
    over any set of variables is the released table over them with each axis multiplied by
    ``M_v^-1``; its plug-in variance is the released table with each axis multiplied by the
    squared entries of ``M_v^-1``, minus the estimate.  ``by`` and ``nonnegative`` are those of
    :func:`pramopt.estimate` (``nonnegative``: each estimate projected onto the counts that are
    >= 0 and sum to its group's records; ``se`` stays that of the unbiased estimate).

    Returns
    -------
    pandas.DataFrame
        One row per combination of the variables' categories (and ``by`` value): the values,
        ``observed`` released counts, ``estimate`` and ``se``.
    """
    owner = "estimate"
    table = result.table
    names = list(table.qi)
    variables = (
        names
        if variables is None
        else ([variables] if isinstance(variables, str) else list(variables))
    )
    bad = [v for v in variables if v not in names]
    if bad or not variables:
        raise InvalidParameterError(
            f"The 'variables' parameter of {owner} must name identifying variables among "
            f"{names!r}; got {variables!r}."
        )
    idx = [names.index(v) for v in variables]
    levels = [len(table.categories[j]) for j in idx]
    if math.prod(levels) > ESTIMATE_MAX_CELLS:
        raise InvalidParameterError(
            f"The 'variables' parameter of {owner} spans {math.prod(levels):,} combinations "
            f"(more than {ESTIMATE_MAX_CELLS:,}); estimate fewer variables at once."
        )
    all_codes = _codes(released, table, owner)
    codes = all_codes[:, idx]
    # a stratified design: each stratum's records inverted with its own matrices (the fixed
    # values are released unchanged, so a released record's stratum is its original one)
    rec_strata = record_strata(all_codes, result)
    if (rec_strata < 0).any():
        raise DesignMismatchError(
            f"The released data have values of the fixed variables {list(result.fixed)!r} that "
            "no stratum of the design has."
        )
    invs = [[np.linalg.inv(m[j]) for j in idx] for m in result.matrix_sets()]
    groups: list = [(None, np.ones(len(released), dtype=bool))]
    if by is not None:
        by = [by] if isinstance(by, str) else list(by)
        missing = [b for b in by if b not in released.columns or b in names]
        if missing:
            raise InvalidParameterError(
                f"The 'by' parameter of {owner} must name non-identifying columns of the data; "
                f"got {missing!r}."
            )
        keys = released[by].astype(object).apply(tuple, axis=1)
        groups = [(k, (keys == k).to_numpy()) for k in pd.unique(keys)]
    grid = pd.MultiIndex.from_product([list(table.categories[j]) for j in idx], names=variables)
    frames = []
    for key, mask in groups:
        U, est, var = _estimated(codes, mask, rec_strata, invs, levels)
        f = grid.to_frame(index=False)
        if by is not None:
            for b, x in zip(by, key):
                f[b] = x
        f["observed"] = U.ravel().astype(np.int64)
        f["estimate"] = _simplex(est.ravel(), float(mask.sum())) if nonnegative else est.ravel()
        f["se"] = np.sqrt(np.maximum(var.ravel(), 0.0))
        frames.append(f)
    return pd.concat(frames, ignore_index=True)
