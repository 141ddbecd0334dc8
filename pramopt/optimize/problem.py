"""What one design is about: the data, Π, the options, and a trace of the work done.

:class:`DesignProblem` replaces long argument lists: every strategy takes the problem (and
the few numbers that change between attempts, such as the floor and the margin).
:class:`Trace` collects the stages' times and forwards progress to the caller's callback.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._activity import activity, current
from ..errors import CallbackError, InvalidParameterError
from ..frequency.table import FrequencyTable, cells_of
from ..params import DesignParams
from ..result import Stage
from .constraints.c1 import Groups, build_groups
from .objectives import Objective, default_objective, objective_for

__all__ = ["DesignProblem", "Trace", "ProgressFn"]

#: ``progress(stage, iteration, loss, radius_or_violations)``, called during long work.
ProgressFn = Callable[[str, int, float, float], None]

#: Every finished stage is logged here at INFO level (silent unless the caller configures
#: logging; the command line shows it on stderr).
LOG = logging.getLogger("pramopt.design")

#: Above this many cells the general design skips phase one and starts sparse
#: (:mod:`.strategies.general_scale`), and the diagnosis reuses the designer's floor bound.
PHASE_ONE_MAX_CELLS = 600

#: Up to this many ordered pairs of cells, the transitions ``max_changed_variables`` permits are
#: counted by a scan of every pair (seconds) before they are listed: listing them by groups of
#: equal codes takes minutes when, as for 4 of 5 variables, there are more than the caller's limit
#: (benchmarks/README.md).
SCAN_PAIRS_MAX = 100_000_000


@dataclass(frozen=True)
class DesignProblem:
    """The frequency table, Π, the validated parameters and what follows from them.

    Attributes
    ----------
    table : FrequencyTable
    combos : tuple of tuples of int
        Π as indices into ``table.qi``.
    params : DesignParams
    groups : Groups
        The (π, k0) groups reachable from present cells.
    fixed_idx : tuple of int
        Indices of the variables that never change.
    keep_rows : ndarray of int
        Cells whose records stay as they are.
    objective : Objective
        What the design minimises (:func:`~pramopt.optimize.objectives.objective_for`).
    """

    table: FrequencyTable
    combos: tuple
    params: DesignParams
    groups: Groups
    fixed_idx: tuple = ()
    keep_rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    objective: Objective = field(default_factory=default_objective)
    # the permitted transitions, listed once per problem (seconds to a minute at census scale)
    _pairs: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def build(
        table: FrequencyTable, combos, params: DesignParams, owner: str = "design"
    ) -> DesignProblem:
        """Check the options against the table and group its cells (no solving)."""
        qi = list(table.qi)
        fixed = list(params.fixed or ())
        bad = [f for f in fixed if f not in qi]
        if bad:
            raise InvalidParameterError(
                f"The 'fixed' parameter of {owner} must name identifying variables {qi!r}; got "
                f"{bad!r}."
            )
        keep = _keep_rows(table, params.keep_cells, owner)
        bad = [v for v in (params.change_weights or ()) if v not in qi]
        if bad:
            raise InvalidParameterError(
                f"The 'change_weights' parameter of {owner} must name identifying variables "
                f"{qi!r}; got {bad!r}."
            )
        objective = objective_for(params, table)
        return DesignProblem(
            table=table,
            combos=tuple(tuple(c) for c in combos),
            params=params,
            groups=build_groups(table, combos),
            fixed_idx=tuple(qi.index(f) for f in fixed),
            keep_rows=keep,
            objective=objective,
        )

    @property
    def K(self) -> int:
        return self.table.n_cells

    @property
    def n(self) -> int:
        return self.table.n

    @property
    def alpha(self) -> float:
        # alpha=None (allowed with epsilon or k): no C1, i.e. C1 at level 1, which every P meets
        return 1.0 if self.params.alpha is None else self.params.alpha

    # derived once (the problem is frozen): allowed() runs for every chunk of pricing
    @functools.cached_property
    def counts(self) -> np.ndarray:
        """U0 as floats."""
        return self.table.counts.astype(float)

    @functools.cached_property
    def kept(self) -> np.ndarray:
        """Boolean mask of the cells whose records stay as they are."""
        k = np.zeros(self.K, dtype=bool)
        k[self.keep_rows] = True
        return k

    @functools.cached_property
    def _fixed_codes(self) -> np.ndarray | None:
        """What a record never changes: its fixed variables' codes and, with ``missing="keep"``,
        which of its identifying values are missing."""
        parts = [self.table.codes[:, list(self.fixed_idx)]] if self.fixed_idx else []
        if self.params.missing == "keep":
            miss = self.missing_pattern
            if miss.any():
                parts.append(miss.astype(np.int64))
        return np.column_stack(parts) if parts else None

    @functools.cached_property
    def missing_pattern(self) -> np.ndarray:
        """(K, d) booleans: which identifying values of each cell are missing."""
        return self.table.missing()

    @functools.cached_property
    def rare_rows(self) -> int:
        """Rows of C1 the designs impose: every rare cell (U0 < 1/alpha) x every combination (the
        rows of frequent cells always hold, the paper's bound (2))."""
        return int(np.count_nonzero(self.counts < 1.0 / self.alpha)) * len(self.combos)

    @functools.cached_property
    def strata(self) -> np.ndarray:
        """Stratum of every cell: its fixed variables and missing pattern (all 0 without any)."""
        if self._fixed_codes is None:
            return np.zeros(self.K, dtype=np.int64)
        return np.unique(self._fixed_codes, axis=0, return_inverse=True)[1].ravel().astype(np.int64)

    @functools.cached_property
    def max_changed(self) -> int | None:
        """``max_changed_variables`` where it restricts anything, else None: cells that may exchange
        records never differ in more variables than those that are not fixed and take two values."""
        d = self.params.max_changed_variables
        if d is None:
            return None
        codes = self.table.codes
        free = [
            j
            for j in range(codes.shape[1])
            if j not in self.fixed_idx and self.K and np.any(codes[:, j] != codes[0, j])
        ]
        return d if d < len(free) else None

    def pools_within_distance(self, pools) -> bool:
        """Whether every pool (cells that a replacement or uniform design lets exchange records
        pairwise) varies in at most ``max_changed`` variables, so that no two of its cells are
        farther apart (always True without a restriction)."""
        d = self.max_changed
        if d is None:
            return True
        pools = np.asarray(pools)
        # every cell of a pool counts, kept ones too: they send nothing but receive replacements
        codes = self.table.codes
        for p in np.unique(pools):
            c = codes[pools == p]
            if np.count_nonzero((c != c[0]).any(axis=0)) > d:
                return False
        return True

    def within(self, r, c, d: int) -> np.ndarray:
        """Whether cells ``r[i]`` and ``c[i]`` differ in at most ``d`` identifying variables."""
        codes = self.table.codes
        return np.count_nonzero(codes[r] != codes[c], axis=-1) <= d

    def allowed(self, r, c) -> np.ndarray:
        """Transitions the options permit: not out of a kept cell, never across fixed strata, and
        between cells that differ in at most ``max_changed_variables`` identifying variables."""
        r, c = np.asarray(r), np.asarray(c)
        ok = ~self.kept[r]
        if self._fixed_codes is not None:
            ok &= np.all(self._fixed_codes[r] == self._fixed_codes[c], axis=-1)
        if self.max_changed is not None:
            ok &= self.within(r, c, self.max_changed)
        return ok

    def allowed_pairs(self, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Every permitted transition between two different cells, ordered by row then column;
        None when there are more than ``limit`` of them."""
        if self.max_changed is not None:
            known, known_limit = self._pairs.get("near", (None, -1))
            if known is not None:
                return known if known[0].size <= limit else None
            if limit <= known_limit:  # more than a limit at least as large as this one
                return None
            if (
                self.K**2 <= SCAN_PAIRS_MAX
                and self._near_upper() > limit
                and self._count_allowed(limit) > limit
            ):
                self._pairs["near"] = (None, limit)
                return None
            pairs = self._near_pairs(limit)
            self._pairs["near"] = (pairs, limit)
            return pairs
        rows, cols, total = [], [], 0
        for rr, cc, ok in self._scan():
            total += int(ok.sum())
            if total > limit:
                return None
            rows.append(rr[ok])
            cols.append(cc[ok])
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(rows), np.concatenate(cols)

    def _scan(self):
        """Every ordered pair of different cells in blocks of about 4 million, row by row:
        ``(rows, cols, permitted)``."""
        K = self.K
        step = max(1, (1 << 22) // max(K, 1))
        for a in range(0, K, step):
            gr, gc = np.meshgrid(np.arange(a, min(K, a + step)), np.arange(K), indexing="ij")
            rr, cc = gr.ravel(), gc.ravel()
            yield rr, cc, (rr != cc) & self.allowed(rr, cc)

    def _count_allowed(self, limit: int) -> int:
        """The permitted transitions counted by a scan of every pair, up to the first count above
        ``limit``."""
        total = 0
        for _, _, ok in self._scan():
            total += int(ok.sum())
            if total > limit:
                break
        return total

    def group_reach(self, pairs) -> np.ndarray:
        """Per (π, k0) group, the records a design using only the transitions ``pairs`` (rows,
        cols; :meth:`allowed_pairs`) can release into it: those of its own cells and of every
        cell with a transition into one of them, each cell counted once."""
        K, G = self.K, self.groups.n_groups
        r = np.concatenate([np.asarray(pairs[0], dtype=np.int64), np.arange(K)])
        c = np.concatenate([np.asarray(pairs[1], dtype=np.int64), np.arange(K)])
        adj = sp.csr_matrix((np.ones(r.size, dtype=bool), (r, c)), shape=(K, K))
        cells = np.arange(K)
        reach = np.zeros(G)
        # a group belongs to one combination: the distinct (cell, group) pairs of each add up;
        # a boolean product's pattern lists them without sorting millions of keys
        for j in range(self.groups.member.shape[1]):
            into = sp.csr_matrix(
                (np.ones(K, dtype=bool), (cells, self.groups.member[:, j])), shape=(K, G)
            )
            B = (adj @ into).tocsr()
            senders = np.repeat(cells, np.diff(B.indptr))
            reach += np.bincount(B.indices, weights=self.counts[senders], minlength=G)
        return reach

    def _near_upper(self) -> int:
        """An upper bound on the transitions within ``max_changed_variables`` from the sizes of
        the groups :meth:`_near_pairs` lists them from (each pair counted in every group that
        holds it): no scan is needed when this is within the limit."""
        return sum(int(np.sum(sizes * (sizes - 1))) for _, sizes in self._agreeing_groups())

    def _agreeing_groups(self):
        """Per set of v - d of the v variables (d = ``max_changed_variables``), each cell's group
        of equal codes on them and the groups' sizes: two cells at most d variables apart share
        a group of some such set."""
        codes, v = self.table.codes, self.table.codes.shape[1]
        for S in itertools.combinations(range(v), v - self.max_changed):
            key = np.unique(codes[:, list(S)], axis=0, return_inverse=True)[1].ravel()
            yield key, np.bincount(key).astype(np.int64)

    def _near_pairs(self, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`allowed_pairs` under ``max_changed_variables = d`` without the K x K scan (minutes
        at 20,000 cells): two cells at most d variables apart agree on some v - d of the v
        variables, so the pairs are those within the groups of equal codes on each such subset."""
        K = self.K
        found = np.empty(0, dtype=np.int64)  # r * K + c, sorted and distinct
        parts: list = []
        for key, sizes in self._agreeing_groups():
            if int(np.max(sizes * (sizes - 1), initial=0)) > limit:
                return None  # the ordered pairs of one group alone are more than limit
            members = np.flatnonzero(sizes[key] > 1)
            o = members[np.argsort(key[members], kind="stable")]
            s_o = sizes[key[o]]
            rows = np.repeat(o, s_o)
            first = np.repeat(
                np.searchsorted(key[o], key[o]), s_o
            )  # where each one's group starts in o
            within = np.arange(rows.size) - np.repeat(np.cumsum(s_o) - s_o, s_o)
            cols = o[first + within]
            ok = (rows != cols) & self.allowed(rows, cols)
            parts.append(rows[ok].astype(np.int64) * K + cols[ok])
            if sum(q.size for q in parts) > 2 * limit:  # merged in batches: one sort, not many
                found = np.unique(np.concatenate([found, *parts]))
                parts = []
                if found.size > limit:
                    return None
        found = np.unique(np.concatenate([found, *parts]))
        if found.size > limit:
            return None
        return found // K, found % K


def _keep_rows(table: FrequencyTable, keep_cells, owner: str) -> np.ndarray:
    if not keep_cells:
        return np.empty(0, dtype=np.int64)
    import pandas as pd

    kc = pd.DataFrame([dict(r) for r in keep_cells])
    missing = [q for q in table.qi if q not in kc.columns]
    if missing:
        raise InvalidParameterError(
            f"The 'keep_cells' parameter of {owner} must give a value of every identifying "
            "variable; "
            f"{missing!r} missing."
        )
    idx = cells_of(kc, table)
    if (idx < 0).any():
        raise InvalidParameterError(
            f"The 'keep_cells' parameter of {owner} must list cells present in the data; "
            f"{kc[idx < 0].to_dict('records')!r} are not."
        )
    return np.unique(idx)


class Trace:
    """The stages of one design (name, seconds, iterations, detail) and its progress callback."""

    def __init__(self, progress: ProgressFn | None = None):
        self.stages: list[Stage] = []
        self._progress = progress
        self._steps: dict[str, int] = {}

    def add(self, name: str, seconds: float, iterations: int = 0, detail: str = "") -> None:
        self.stages.append(Stage(name, float(seconds), int(iterations), detail))
        if LOG.isEnabledFor(logging.INFO):
            its = f", {iterations} iterations" if iterations else ""
            LOG.info("%s: %.1f s%s%s", name, seconds, its, f" ({detail})" if detail else "")

    @contextlib.contextmanager
    def stage(self, name: str):
        """Time a block; the block may set ``info["iterations"]`` and ``info["detail"]``."""
        info: dict[str, Any] = {"iterations": 0, "detail": ""}
        t0 = time.perf_counter()
        try:
            with activity(name):
                yield info
        finally:
            self.add(name, time.perf_counter() - t0, info["iterations"], info["detail"])

    def progress(self, stage: str, iteration: int, loss: float, worst: float) -> None:
        # A stage run in rounds (the refinement) counts from 1 in each; the user sees one count
        # per stage name that never goes backwards.
        iteration = max(self._steps.get(stage, 0) + 1, int(iteration))
        self._steps[stage] = iteration
        for act in current()[-1:]:
            act.advance(1)
        if self._progress is not None:
            try:
                self._progress(stage, iteration, loss, worst)
            except Exception as e:
                raise CallbackError(
                    f"The progress callback raised {type(e).__name__}: {e} (at stage {stage!r}, "
                    f"iteration {iteration}); the design was stopped."
                ) from e
