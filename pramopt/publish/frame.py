"""Release a data frame with a design (apply PRAM) and estimate from released data (eq. (4)).

Every release path -- :func:`release`, :func:`pramopt.release_file`, :func:`pramopt.release_dask`
-- starts with :func:`releasable_table`, which checks the design again against the full C1 with
the independent verifier (from its parameters when it is kept as a form, the law every record is
drawn from, else from its matrix), and ends its check of the data with
:func:`check_same_table`, so that no file or frame is written from a design that is unsafe or
made for other data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .._validation import ROW_SUM_TOL, InvalidParameterError
from ..errors import DesignMismatchError
from ..frequency.table import FrequencyTable, cells_of, check_qi, text_categories
from ..kinds import kind_of
from .c1_check import full_c1_check
from .sampling import AnySampler, UniformStream, sampler_for, seed_entropy

__all__ = [
    "release",
    "estimate",
    "releasable_table",
    "check_same_table",
    "record_cells",
    "release_frame",
    "released_column",
    "distinct_examples",
    "full_c1_check",
]


def check_same_table(got: FrequencyTable, table: FrequencyTable, source: str = "the data") -> None:
    """Refuse data whose cells or counts over the identifying variables are not the design's."""
    if got.checksum() != table.checksum():
        raise DesignMismatchError(
            f"The design was made for other data: the cells or counts of {source} over "
            f"{', '.join(map(str, table.qi))} differ (n = {got.n} vs {table.n}, {got.n_cells} vs "
            f"{table.n_cells} cells)."
        )


def _table_of(result) -> FrequencyTable:
    table = getattr(result, "table", None)
    if table is None:
        raise InvalidParameterError(
            "The 'result' parameter must carry its frequency table (a DesignResult)."
        )
    return table


def releasable_table(
    result, owner: str, allow_unverified: bool = False, policy=None
) -> FrequencyTable:
    """The design's frequency table, after checking that the design is safe to release with.

    A design whose status is not success is refused, and so is one whose matrix does not pass
    the full C1 when the independent verifier checks it again here on the design's own
    cells and counts (a result changed after it was made, or read from a file made
    elsewhere): a release never trusts the ``success`` flag alone.  A design with a form is
    checked from its parameters (:func:`full_c1_check`), the law every record is drawn from.
    ``allow_unverified`` skips both checks (never do this for publication).  A design weaker
    than the office's ``policy`` is refused (:func:`.policy.enforce_policy`); a policy cannot
    be combined with ``allow_unverified``.
    """
    from .policy import enforce_policy, refuse_unverified_policy

    refuse_unverified_policy(policy, allow_unverified, owner)
    table = _table_of(result)
    P = result.matrix
    if P.shape != (table.n_cells, table.n_cells):
        raise DesignMismatchError(f"The design's matrix is {P.shape} for {table.n_cells} cells.")
    if allow_unverified:
        return table
    if not getattr(result, "success", False):
        raise DesignMismatchError(
            f"The design's status is {getattr(result.status, 'value', result.status)!r}: it did "
            "not pass the C1 verification, so it is not safe to release with."
        )
    form = getattr(result, "form", None)
    if form is None:
        rows = np.asarray(sp.csr_array(P).sum(axis=1)).ravel()
    else:  # the rows of what is drawn: the form (which rebuilds the matrix bit for bit)
        rows = (
            form.retention + form.rate * np.bincount(form.pools, weights=form.weights)[form.pools]
        )
    if not np.all(np.abs(rows - 1.0) <= ROW_SUM_TOL):
        raise DesignMismatchError(
            "The design's matrix is not row-stochastic (a row sums to "
            f"{rows[np.argmax(np.abs(rows - 1.0))]!r}); refusing to release with it."
        )
    rep = full_c1_check(result, table, result.combination_indices)
    if not rep.max_risk <= result.alpha:
        raise DesignMismatchError(
            f"The design fails C1 when checked again (max risk {rep.max_risk:.6g} > alpha "
            f"{result.alpha:g}); refusing to release with it."
        )
    _check_privacy_again(result, table)
    enforce_policy(result, policy, owner)
    return table


def _check_privacy_again(result, table: FrequencyTable) -> None:
    """A design made under epsilon or k must still meet them (Theorems 1 and 3, measured again)."""
    params = getattr(result, "params", None) or {}
    eps, k = params.get("epsilon"), params.get("k")
    if eps is None and k is None:
        return
    from ..params import PRIVACY_MAX_CELLS
    from ..risk.dp_pk_anonymity import dp_epsilon, pk_anonymity

    if table.n_cells > PRIVACY_MAX_CELLS:  # no design under epsilon or k is made that large
        raise DesignMismatchError(
            f"The design claims epsilon or k on {table.n_cells} cells (at most "
            f"{PRIVACY_MAX_CELLS} are designed so); refusing to release with it."
        )
    P = sp.csr_array(result.matrix).toarray()  # dense and small, as checked above
    if eps is not None and not dp_epsilon(P) <= float(eps):
        raise DesignMismatchError(
            f"The design fails epsilon = {float(eps):g} when checked again (epsilon "
            f"{dp_epsilon(P):.6g}); refusing to release with it."
        )
    if k is not None and not pk_anonymity(P, table.n) >= float(k):
        raise DesignMismatchError(
            f"The design fails k = {float(k):g} when checked again (k "
            f"{pk_anonymity(P, table.n):.6g}); refusing to release with it."
        )


def distinct_examples(rows: pd.DataFrame, shown: int = 3) -> str:
    """The first ``shown`` distinct rows of ``rows`` (a refusal's examples), each with its number
    of rows, and how many other distinct rows there are: the same example three times would say
    less.  Values are compared as written (``repr``), so that missing values count as one."""
    if rows.empty:
        return "[]"
    codes = rows.map(repr).groupby(list(rows.columns), sort=False).ngroup().to_numpy()
    counts = np.bincount(codes)  # groups numbered in order of first appearance
    first = np.unique(codes, return_index=True)[1][:shown]
    said = [
        f"{r} ({k} record{'s' if k != 1 else ''})"
        for r, k in zip(rows.iloc[first].to_dict("records"), counts)
    ]
    more = len(counts) - len(first)
    if more:
        said.append(f"and {more} other combination{'s' if more != 1 else ''} of values")
    return ", ".join(said)


def record_cells(df: pd.DataFrame, table: FrequencyTable, owner: str) -> np.ndarray:
    """Index of each record's cell among the design's cells; error if a record has another cell."""
    qi = check_qi(df, table.qi, owner)
    idx = cells_of(df, table)
    if (idx < 0).any():
        bad = distinct_examples(df.loc[idx < 0, list(qi)])
        text = [
            q
            for q, c in zip(table.qi, table.categories)
            if text_categories(c) and not pd.api.types.is_string_dtype(df[q])
        ]
        hint = (
            (
                f" The design's categories of {text} are text, as written in a file (the command "
                "line reads them so); read the data as text too, e.g. pd.read_csv(path, "
                "dtype=str)."
            )
            if text
            else ""
        )
        raise DesignMismatchError(
            f"{int((idx < 0).sum())} records of the data fall in cells the design does not have "
            f"(for example {bad}); the design was made for other data.{hint}"
        )
    return idx


def release_frame(
    df: pd.DataFrame,
    table: FrequencyTable,
    sampler: AnySampler,
    uniforms: UniformStream,
    offset: int,
    owner: str = "release",
) -> pd.DataFrame:
    """Release the records of ``df``, which are records ``offset, offset + 1, ...`` of the data.

    Shared by :func:`release` (offset 0) and the Dask release (one call per partition).
    """
    cells = record_cells(df, table, owner)
    new = sampler.draw(cells, uniforms(offset, offset + len(df)))
    out = df.copy()
    for j, q in enumerate(table.qi):
        out[q] = released_column(df, q, table.categories[j], table.codes[new, j])
    return out


def released_column(df: pd.DataFrame, q: str, categories, codes) -> pd.Series:
    """Column ``q`` of a released frame: the categories at ``codes``, on ``df``'s index, in the
    dtype of ``df[q]`` where the values allow it (categorical, integer, float with NaN, string)."""
    vals = pd.Series(np.asarray(categories.take(codes), dtype=object), index=df.index)
    try:
        return vals.astype(df[q].dtype)
    except (TypeError, ValueError):
        return vals


def release(
    df: pd.DataFrame, result, seed=None, *, allow_unverified: bool = False, policy=None
) -> pd.DataFrame:
    """Perturb the identifying columns of ``df`` with the design's matrix.

    Each record's identifying values are drawn from its cell's row of P, independently; every
    other column is returned untouched.  A design made on recoded data (its ``recoding``) is
    applied to ``df`` recoded: every record's recoded variables hold their new categories.

    Parameters
    ----------
    df : pandas.DataFrame
        The microdata the design was made for (before or after its recoding).
    result : DesignResult
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw.  Without it the entropy comes from ``secrets``.  Record
        ``i`` takes its uniform from block ``i // BLOCK`` of a stream spawned from the seed
        (:class:`UniformStream`), so the same seed gives the same release here, with
        :func:`pramopt.release_file` (any batch size) and with the Dask release.
    allow_unverified : bool
        Release even with a design that failed verification (never do this for publication).
    policy : ReleasePolicy, optional
        The office's α and Π (:func:`pramopt.release_policy`): a design weaker than it is
        refused.
    """
    from .policy import enforce_policy
    from .recoded import recoded_frame

    # a design made on recoded data: the frame is matched, and released, recoded
    df = recoded_frame(df, result)
    kind = kind_of(result)
    if kind is not None:  # e.g. a household design: household-level values once per household
        enforce_policy(result, policy)
        return kind.release(df, result, seed)
    table = releasable_table(result, "release", allow_unverified, policy)
    cells = record_cells(df, table, "release")
    if not np.array_equal(np.bincount(cells, minlength=table.n_cells), table.counts):
        raise DesignMismatchError(
            "The design was made for other data: the cell counts of the frame over "
            f"{', '.join(map(str, table.qi))} differ from the design's."
        )
    return release_frame(
        df, table, sampler_for(result), UniformStream(seed_entropy(seed, "release")), 0
    )


def _factor(P):
    """Sparse LU of P (no dense inverse); a singular P cannot be inverted by the estimator."""
    try:
        return spla.splu(sp.csc_matrix(P, dtype=float))
    except RuntimeError:
        raise DesignMismatchError(
            "The design's matrix is singular: the estimator (4) needs P^-1."
        ) from None


#: Standard errors are computed up to this many cells: they need every column of P^-1 (K sparse
#: solves), beyond that ``se`` is NaN.
SE_MAX_CELLS = 20_000


def _variances(lu, U: np.ndarray, est: np.ndarray) -> np.ndarray:
    """Plug-in variances of the estimates, one row per ``by`` group (rows of ``U`` and ``est``).

    Given the original counts T, each record is released independently from its cell's row of P,
    so Cov(U) = diag(P^T T) - P^T diag(T) P and, with T_hat = P^-T U,
    Var(T_hat_j) = sum_k (P^-1)_kj^2 (P^T T)_k - T_j.  T is unknown: with T_hat in its place,
    P^T T_hat = U exactly, so the estimate is sum_k (P^-1)_kj^2 U_k - T_hat_j (clipped at 0).
    The columns of P^-1 are solved in blocks; no K x K array is made.
    """
    K = U.shape[1]
    out = np.empty_like(est)
    step = max(
        1, min(512, (1 << 23) // max(K, 1))
    )  # at most 8M floats (64 MB) per block of columns
    for a in range(0, K, step):
        b = min(K, a + step)
        E = np.zeros((K, b - a))
        E[np.arange(a, b), np.arange(b - a)] = 1.0
        W = lu.solve(E) ** 2  # (P^-1)_kj^2 for the columns j of this block
        out[:, a:b] = U @ W - est[:, a:b]
    return np.maximum(out, 0.0)


def _project_simplex(x: np.ndarray, total: float) -> np.ndarray:
    """The Euclidean projection of x onto {y >= 0, sum y = total} (sort-based, exact)."""
    if total <= 0:
        return np.zeros_like(x)
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - total
    idx = np.arange(1, x.size + 1)
    rho = np.flatnonzero(u - css / idx > 0)[-1]
    return np.maximum(x - css[rho] / (rho + 1), 0.0)


def refuse_kind(result, owner: str, what: str) -> None:
    """Refuse, in a sentence and the kind's own note, a design of another kind (households, one
    matrix per variable) where only a record-level design is understood."""
    kind = kind_of(result)
    if kind is not None:
        note = f" {kind.record_level_note}" if kind.record_level_note else ""
        raise InvalidParameterError(
            f"{what} takes a record-level design; this is a {kind.name} design.{note}"
        )


def _by_codes(released: pd.DataFrame, table: FrequencyTable, by, n: int):
    """``by`` as a list (None: one group), each record's code of its ``by`` values, the values
    of each code and their number; refuses columns the data lack or identifying variables."""
    if by is None:
        return None, np.zeros(n, dtype=np.int64), None, 1
    by = [by] if isinstance(by, str) else list(by)
    missing = [b for b in by if b not in released.columns]
    if missing:
        raise InvalidParameterError(
            f"The 'by' parameter of estimate must name columns of the data; {missing!r} are not."
        )
    clash = [b for b in by if b in table.qi]
    if clash:
        raise InvalidParameterError(
            f"The 'by' parameter of estimate must not name identifying variables; got {clash!r}."
        )
    ycode, yvals = (
        pd.MultiIndex.from_frame(released[by]).factorize()
        if len(by) > 1
        else pd.factorize(released[by[0]])
    )
    ycode = np.asarray(ycode)
    return by, ycode, yvals, int(ycode.max()) + 1 if ycode.size else 0


def estimate(released: pd.DataFrame, result, by=None, *, nonnegative: bool = False) -> pd.DataFrame:
    """Unbiased estimate of the original cell frequencies (Cator et al., eq. (4)), with
    standard errors.

    ``mu_hat(k; y) = (1/n) sum_l (P^-1)_{lk} U(l; y)``; returned on the count scale
    (``n * mu_hat``) for every cell, jointly with the categorical columns ``by`` if given.

    Parameters
    ----------
    released : pandas.DataFrame
        The released microdata (recoded first with the design's recoding, if it has one).
    result : DesignResult
        The design they were released with.
    by : str or list of str, optional
        Non-identifying categorical columns to cross with.
    nonnegative : bool, default False
        The unbiased estimate can be negative for small cells (P^-1 has negative entries).  By
        default it is returned as it is (unbiased; the negative values are information about the
        noise).  With ``nonnegative=True`` each estimate vector (per ``by`` group) is replaced by
        its Euclidean projection onto the counts that are >= 0 and sum to the group's records
        (no longer unbiased); ``se`` stays that of the unbiased estimate.

    Returns
    -------
    pandas.DataFrame
        The cell values (and ``by`` values), ``observed`` released counts U (integers),
        ``estimate`` and ``se``, its standard error (the plug-in variance of :func:`_variances`:
        the square root of sum_k (P^-1)_kj^2 U_k - estimate_j, at least 0; NaN above
        ``SE_MAX_CELLS`` cells, where every column of P^-1 would be too slow to solve, except for
        a design with a form, whose P^-1 is a closed form).
    """
    if not isinstance(nonnegative, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The 'nonnegative' parameter of estimate must be True or False; got {nonnegative!r}."
        )
    from .recoded import recoded_frame

    kind = kind_of(result)
    if kind is not None and kind.estimate is not None:  # e.g. one matrix per variable
        return kind.estimate(
            recoded_frame(released, result), result, by=by, nonnegative=nonnegative
        )
    refuse_kind(result, "estimate", "pramopt.estimate (pramopt estimate)")
    table = _table_of(result)
    # idempotent: data released with the design's recoding hold its categories already
    released = recoded_frame(released, result)
    cells = record_cells(released, table, "estimate")
    K = table.n_cells
    # a design kept as parameters has P^-1 in closed form (Sherman and Morrison, per pool): no
    # factorisation of its up to K^2 entries, and standard errors at any K
    form = getattr(result, "form", None)
    lu = _factor(result.matrix) if form is None else None
    labels = result.cells.reset_index(drop=True)
    by, ycode, yvals, Y = _by_codes(released, table, by, len(cells))
    U = np.zeros((Y, K))
    np.add.at(U, (ycode, cells), 1.0)
    if form is not None:
        est = form.inverse_times(U) if Y else U
        se = np.sqrt(np.maximum(form.inverse_squares_times(U) - est, 0.0)) if Y else U
    else:
        assert lu is not None  # factorised without a form
        est = lu.solve(np.ascontiguousarray(U.T), trans="T").T if Y else U  # row y: P^-T U(.; y)
        se = np.sqrt(_variances(lu, U, est)) if Y and K <= SE_MAX_CELLS else np.full_like(U, np.nan)
    if nonnegative:
        est = np.vstack([_project_simplex(e, u.sum()) for e, u in zip(est, U)]) if Y else est
    frames = []
    for y in range(Y):
        f = labels.copy()
        if by is not None:
            assert yvals is not None  # factorized with by
            yv = yvals[y] if len(by) > 1 else (yvals[y],)
            for b, v in zip(by, yv):
                f[b] = v
        f["observed"] = U[y].astype(np.int64)  # counts of records: whole numbers, shown so
        f["estimate"] = est[y]
        f["se"] = se[y]
        frames.append(f)
    if not frames:
        return pd.concat([labels.iloc[:0]], ignore_index=True).assign(
            observed=np.zeros(0, dtype=np.int64), estimate=[], se=[]
        )
    return pd.concat(frames, ignore_index=True)
