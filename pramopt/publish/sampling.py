"""Random draws of a release: a secure default seed, split-invariant uniforms, a row sampler
(:class:`Sampler`, or :class:`pramopt.structured.FormSampler` for a design kept as parameters:
:func:`sampler_for`)."""

from __future__ import annotations

import secrets

import numpy as np
import scipy.sparse as sp

from .._validation import InvalidParameterError, check_int
from ..structured import FormSampler

#: Records per block of the random stream: record ``i`` takes its uniform from block
#: ``i // BLOCK``, whose generator is spawned from the release's entropy, so that the draw of a
#: record depends only on the seed and its position, never on how the data are split.
BLOCK = 1 << 16


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
        self._u = np.empty(0)  # no block yet

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
            out[pos - start : hi - start] = self._get(b)[pos - b * BLOCK : hi - b * BLOCK]
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
        Pc = sp.csr_matrix(P, dtype=float, copy=True)
        Pc.eliminate_zeros()
        K = Pc.shape[0]
        counts = np.diff(Pc.indptr)
        if (counts == 0).any():
            r = int(np.flatnonzero(counts == 0)[0])
            raise InvalidParameterError(
                f"The design's matrix has an empty row {r}; every row of P must sum to 1."
            )
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


#: What a release draws with: both have ``draw(cells, u)``.
AnySampler = Sampler | FormSampler


def sampler_for(result) -> AnySampler:
    """The sampler of a release with ``result``: from its form when it has one (a replacement or
    block design: O(K) to build, O(log K) per record, never its K^2 entries), else from its
    matrix.  Both give the same draw for the same uniform (up to the last bits of a sum)."""
    form = getattr(result, "form", None)
    return FormSampler(form) if form is not None else Sampler(result.matrix)
