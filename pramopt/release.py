"""Release (apply PRAM) and estimate (the unbiased estimator (4) of Cator et al.)."""
from __future__ import annotations

import secrets

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ._validation import InvalidParameterError, PramoptError, check_int
from .data import FrequencyTable, cell_index, check_qi


class DesignMismatchError(PramoptError, ValueError):
    """The data do not match the design (other cells or counts), or the design is not safe."""


#: Records per block of the random stream: record ``i`` takes its uniform from block
#: ``i // BLOCK``, whose generator is spawned from the release's entropy, so that the draw of a
#: record depends only on the seed and its position, never on how the data are split.
BLOCK = 1 << 16


def make_rng(seed=None) -> np.random.Generator:
    """A numpy Generator: from ``seed`` when given, else seeded from the OS's secure source.

    Without a seed nobody, not even the releasing office, can reproduce the draw, which is the
    secure default for published data (as in diffprivlib).
    """
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(check_int(seed, "seed", "release", low=0))


def seed_entropy(seed=None, owner: str = "release") -> int:
    """The entropy of a release's random stream.

    ``None`` draws 128 bits from :mod:`secrets` (once per release, so that nobody can repeat
    the draw); an int >= 0 is used as it is; a :class:`numpy.random.Generator` gives 128 bits
    from its stream (and so advances it).
    """
    if seed is None:
        return secrets.randbits(128)
    if isinstance(seed, np.random.Generator):
        hi, lo = (int(x) for x in seed.integers(0, 2**64, size=2, dtype=np.uint64))
        return (hi << 64) | lo
    return check_int(seed, "seed", owner, low=0)


def block_uniforms(entropy: int, block: int) -> np.ndarray:
    """The ``BLOCK`` uniforms of block ``block`` of the stream with this entropy."""
    ss = np.random.SeedSequence(entropy, spawn_key=(int(block),))
    return np.random.default_rng(ss).random(BLOCK)


class UniformStream:
    """Uniform draws in [0, 1) indexed by record position, the same however they are requested.

    ``stream(start, stop)`` returns the uniforms of records ``start, ..., stop - 1``: record
    ``i`` gets entry ``i % BLOCK`` of block ``i // BLOCK``, whose generator is
    ``default_rng(SeedSequence(entropy, spawn_key=(i // BLOCK,)))``.  The last block used is
    kept, so that consecutive small batches do not regenerate it.
    """

    def __init__(self, entropy: int):
        self.entropy = int(entropy)
        self._block = -1
        self._u = None

    def _get(self, b: int) -> np.ndarray:
        if b != self._block:
            self._u = block_uniforms(self.entropy, b)
            self._block = b
        return self._u

    def __call__(self, start: int, stop: int) -> np.ndarray:
        start, stop = int(start), int(stop)
        out = np.empty(max(stop - start, 0))
        pos = start
        while pos < stop:
            b = pos // BLOCK
            hi = min(stop, (b + 1) * BLOCK)
            out[pos - start:hi - start] = self._get(b)[pos - b * BLOCK:hi - b * BLOCK]
            pos = hi
        return out


class Sampler:
    """Row-wise sampler of a transition matrix, built once and applied to any number of batches.

    Row r's cumulative probabilities (rescaled so that each row ends at exactly 1) are shifted
    by r, so that one ``searchsorted`` over the concatenated rows finds every record's draw
    without a Python loop; a record of cell r with uniform u gets the first entry of row r
    whose cumulative probability exceeds u.  Adding u to r costs ``log2(K)`` bits of u's 53,
    a resolution of about ``K * 2**-53`` on the probabilities.
    """

    def __init__(self, P):
        Pc = sp.csr_matrix(P, dtype=float)
        Pc.eliminate_zeros()
        K = Pc.shape[0]
        counts = np.diff(Pc.indptr)
        if (counts == 0).any():
            r = int(np.flatnonzero(counts == 0)[0])
            raise InvalidParameterError(f"The design's matrix has an empty row {r}; every row of P must sum to 1.")
        rows = np.repeat(np.arange(K), counts)
        cum = np.cumsum(Pc.data)
        start = np.concatenate([[0.0], cum])[Pc.indptr[:-1]]
        total = cum[Pc.indptr[1:] - 1] - start  # the last entry of each row gets share exactly 1
        self.key = rows + (cum - start[rows]) / total[rows]
        self.last = Pc.indptr[1:] - 1
        self.indices = Pc.indices.astype(np.int64)
        self.n_cells = K

    def draw(self, cells: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Released cell of each record, from its cell and its uniform."""
        cells = np.asarray(cells, dtype=np.int64)
        pos = np.searchsorted(self.key, cells + u, side="right")
        # guard against rounding at the end of a row
        pos = np.minimum(pos, self.last[cells])
        return self.indices[pos]


def _table_of(result) -> FrequencyTable:
    table = getattr(result, "table", None)
    if table is None:
        raise InvalidParameterError("The 'result' parameter must carry its frequency table (a DesignResult).")
    return table


def record_cells(df: pd.DataFrame, table: FrequencyTable, owner: str) -> np.ndarray:
    """Index of each record's cell among the design's cells; error if a record has another cell."""
    qi = check_qi(df, table.qi, owner)
    codes = np.empty((len(df), len(qi)), dtype=np.int64)
    for j, q in enumerate(qi):
        cats = table.categories[j]
        c = cats.get_indexer(df[q])
        if cats.isna().any():
            c = np.where(df[q].isna().to_numpy(), int(np.flatnonzero(cats.isna())[0]), c)
        codes[:, j] = c
    idx = np.full(len(df), -1, dtype=np.int64)
    ok = (codes >= 0).all(axis=1)
    idx[ok] = cell_index(table, codes[ok])
    if (idx < 0).any():
        bad = df.loc[idx < 0, list(qi)].head(3).to_dict("records")
        raise DesignMismatchError(
            f"{int((idx < 0).sum())} records of the data fall in cells the design does not have "
            f"(for example {bad}); the design was made for other data.")
    return idx


def draw_cells(cells: np.ndarray, P, rng: np.random.Generator) -> np.ndarray:
    """Draw a released cell for every record from its cell's row of P (vectorised).

    One uniform per record from ``rng``, in record order; see :class:`Sampler`.
    """
    cells = np.asarray(cells, dtype=np.int64)
    return Sampler(P).draw(cells, rng.random(cells.shape[0]))


def check_releasable(result, owner: str, allow_unverified: bool = False) -> FrequencyTable:
    """The design's frequency table, after refusing a design that did not pass verification."""
    table = _table_of(result)
    if not getattr(result, "success", False) and not allow_unverified:
        raise DesignMismatchError(
            f"The design's status is {getattr(result.status, 'value', result.status)!r}: it did not pass "
            "the C1 verification, so it is not safe to release with.")
    P = np.asarray(result.matrix)
    if P.shape != (table.n_cells, table.n_cells):
        raise DesignMismatchError(f"The design's matrix is {P.shape} for {table.n_cells} cells.")
    return table


def release_frame(df: pd.DataFrame, table: FrequencyTable, sampler: Sampler, uniforms: UniformStream,
                  offset: int, owner: str = "release") -> pd.DataFrame:
    """Release the records of ``df``, which are records ``offset, offset + 1, ...`` of the data.

    Shared by :func:`release` (offset 0) and the Dask release (one call per partition).
    """
    cells = record_cells(df, table, owner)
    new = sampler.draw(cells, uniforms(offset, offset + len(df)))
    out = df.copy()
    for j, q in enumerate(table.qi):
        vals = pd.Series(np.asarray(table.categories[j].take(table.codes[new, j]), dtype=object), index=df.index)
        try:  # keep the column's dtype (categorical, integer, float with NaN, string)
            vals = vals.astype(df[q].dtype)
        except (TypeError, ValueError):
            pass
        out[q] = vals
    return out


def release(df: pd.DataFrame, result, seed=None, *, allow_unverified: bool = False) -> pd.DataFrame:
    """Perturb the identifying columns of ``df`` with the design's matrix.

    Each record's identifying values are drawn from its cell's row of P, independently; every
    other column is returned untouched.

    Parameters
    ----------
    df : pandas.DataFrame
        The microdata the design was made for.
    result : DesignResult
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw.  Without it the entropy comes from ``secrets``.  Record
        ``i`` takes its uniform from block ``i // BLOCK`` of a stream spawned from the seed
        (:class:`UniformStream`), so the same seed gives the same release here, with
        :func:`pramopt.stream.release_file` (any batch size) and with the Dask release.
    allow_unverified : bool
        Release even with a design that failed verification (never do this for publication).
    """
    table = check_releasable(result, "release", allow_unverified)
    cells = record_cells(df, table, "release")
    if not np.array_equal(np.bincount(cells, minlength=table.n_cells), table.counts):
        raise DesignMismatchError("The data's cell counts differ from those the design was made for.")
    return release_frame(df, table, Sampler(result.matrix), UniformStream(seed_entropy(seed, "release")), 0)


def estimate(released: pd.DataFrame, result, by=None) -> pd.DataFrame:
    """Unbiased estimate of the original cell frequencies (Cator et al., eq. (4)).

    ``mu_hat(k; y) = (1/n) sum_l (P^-1)_{lk} U(l; y)``; returned on the count scale
    (``n * mu_hat``) for every cell, jointly with the categorical columns ``by`` if given.

    Returns
    -------
    pandas.DataFrame
        The cell values (and ``by`` values), ``observed`` released counts U and ``estimate``.
    """
    table = _table_of(result)
    cells = record_cells(released, table, "estimate")
    K = table.n_cells
    Pinv = np.linalg.inv(np.asarray(result.matrix, dtype=float))
    labels = result.cells.reset_index(drop=True)
    if by is None:
        U = np.bincount(cells, minlength=K).astype(float)
        out = labels.copy()
        out["observed"] = U
        out["estimate"] = Pinv.T @ U
        return out
    by = [by] if isinstance(by, str) else list(by)
    missing = [b for b in by if b not in released.columns]
    if missing:
        raise InvalidParameterError(f"The 'by' parameter of estimate must name columns of the data; {missing!r} are not.")
    clash = [b for b in by if b in table.qi]
    if clash:
        raise InvalidParameterError(f"The 'by' parameter of estimate must not name identifying variables; got {clash!r}.")
    ycode, yvals = pd.MultiIndex.from_frame(released[by]).factorize() if len(by) > 1 else pd.factorize(released[by[0]])
    ycode = np.asarray(ycode)
    Y = int(ycode.max()) + 1 if ycode.size else 0
    U = np.zeros((Y, K))
    np.add.at(U, (ycode, cells), 1.0)
    est = U @ Pinv  # row y: P^-T U(.; y), as a row vector
    frames = []
    for y in range(Y):
        f = labels.copy()
        yv = yvals[y] if len(by) > 1 else (yvals[y],)
        for b, v in zip(by, yv):
            f[b] = v
        f["observed"] = U[y]
        f["estimate"] = est[y]
        frames.append(f)
    return pd.concat(frames, ignore_index=True)
