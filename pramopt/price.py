"""The price of a design: the share of records it changes, against the least any design could.

A design meeting C1 can change most records and still be a success.  :class:`Price` says how
many records a design is expected to change, the proven lower bound on that number for every
design meeting C1 with the same keys, categories, α and options (where the designer found one,
``details["expected_changes_lower_bound"]``), and, above :data:`HEAVY_SHARE`, the figures that
make it so: which identifying variables change most, and which combinations of Π hold the
records C1 cannot leave as they are.  The summaries and the reports say them in the same words;
other code (advice on recodings) may use the figures.

Everything is summed from the matrix's nonzero entries and the table's cells: nothing K x K is
made.  Imports nothing of pramopt but the frequency table and the labels, so that every result
type may use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from ._labels import short_labels
from .frequency.table import FrequencyTable

__all__ = [
    "HEAVY_SHARE",
    "TOP_COMBINATIONS",
    "Price",
    "design_price",
    "summary_lines",
    "changes_by_variable",
    "small_group_records",
    "bound_options",
]

#: Above this share of records expected to change, a design is a heavy perturbation.
HEAVY_SHARE = 0.25

#: How many combinations a heavy perturbation names.
TOP_COMBINATIONS = 3

#: Nonzero entries handled at a time: the codes of both ends are (entries x variables) arrays.
_CHUNK = 1 << 20

#: Options of ``design`` that restrict the designs the lower bound is about.
_RESTRICTING = ("min_diagonal", "fixed", "max_changed_variables", "keep_cells", "invariant")

WAY_OUT = "Coarser categories or fewer identifying variables lower the price: see `pramopt advise`."


@dataclass(frozen=True)
class Price:
    """How many records a design changes, against the fewest any design meeting C1 could.

    Attributes
    ----------
    n : int
        Records.
    changes : float
        Records expected to change, ``sum_m U0(m) (1 - P_mm)`` (a record-level release: those
        released in another cell).
    share : float
        ``changes / n``.
    minimum_changes, minimum_share : float or None
        A proven lower bound on the expected changes of every design meeting C1 with these keys,
        categories, α and :attr:`options`, and that over n; None when unknown.
    heavy : bool
        Whether ``share`` exceeds :data:`HEAVY_SHARE`.
    variables : tuple of (str, float)
        Per identifying variable, in the table's order, the expected number of records whose
        value of that variable changes: ``sum_{m, k} U0(m) P_mk [m_j != k_j]``.
    combinations : tuple of (tuple of str, int)
        Per combination of Π, most first, the records in groups (values of that combination)
        with fewer than 1/α records: the groups whose risk exceeds α when nothing changes.
    alpha : float
    bound_combinations : int or None
        How many combinations' rows the lower bound used (fewer than all: a weaker bound, still
        valid).
    options : tuple of str
        The options of the design the lower bound assumes (e.g. ``fixed``), empty when none.
    """

    n: int
    changes: float
    share: float
    minimum_changes: float | None
    minimum_share: float | None
    heavy: bool
    variables: tuple[tuple[str, float], ...]
    combinations: tuple[tuple[tuple[str, ...], int], ...]
    alpha: float
    bound_combinations: int | None = None
    options: tuple[str, ...] = ()

    @property
    def top_combinations(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        """The :data:`TOP_COMBINATIONS` combinations holding the most such records (none with
        none)."""
        return tuple(c for c in self.combinations if c[1] > 0)[:TOP_COMBINATIONS]

    def sentence(self) -> str:
        """The share changed and the least any design changes, in one sentence."""
        said = (
            f"{_percent(self.changes, self.n)} of records ({_count(_shown(self.changes))} of "
            f"{self.n:,}) are "
            "expected to change; "
        )
        scope = "meeting C1 with these keys, categories and alpha"
        if self.options:
            scope = (
                "meeting C1 with these keys, categories, alpha and options "
                f"({', '.join(self.options)})"
            )
        if self.minimum_changes is None or self.minimum_share is None:
            return said + f"the fewest records any design {scope} must change is unknown."
        rows = ""
        if self.bound_combinations is not None and self.bound_combinations < len(self.combinations):
            # still a bound on every design: rows left out only weaken it
            rows = (
                f"; a bound from the rows of {self.bound_combinations} of "
                f"{len(self.combinations)} combinations"
            )
        # the share of the count shown, so that both stay a lower bound
        least = _shown(self.minimum_changes, down=True)
        return said + (
            f"no design {scope} changes fewer than {_percent(least, self.n, down=True)} "
            f"({_count(least)}{rows})."
        )

    def heavy_why(self) -> str:
        """Why the design is marked a heavy perturbation (empty when it is not)."""
        if not self.heavy:
            return ""
        return f"more than {100 * HEAVY_SHARE:g}% of records are expected to change."

    def heavy_reasons(self) -> list[str]:
        """The figures that make the design heavy and the way out (empty when it is not)."""
        if not self.heavy:
            return []
        names = short_labels([v for v, _ in self.variables])
        by_var = sorted(zip(names, (e for _, e in self.variables)), key=lambda t: -t[1])
        out = [
            "Variables changing most (records expected to have that value changed): "
            + ", ".join(f"{v} {_count(_shown(e))} ({_percent(e, self.n)})" for v, e in by_var)
            + "."
        ]
        top = self.top_combinations
        limit = f"{1 / self.alpha:.4g}"
        if top:
            out.append(
                f"Combinations binding most (records in groups of fewer than 1/alpha = {limit}, "
                "at risk above alpha unless records change): "
                + "; ".join(
                    f"{{{', '.join(short_labels(c))}}} {r:,} ({_percent(r, self.n)})"
                    for c, r in top
                )
                + "."
            )
        else:
            out.append(f"No combination has a group of fewer than 1/alpha = {limit} records.")
        out.append(WAY_OUT)
        return out

    def as_dict(self) -> dict:
        """The figures as plain values (JSON)."""
        return {
            "n": self.n,
            "changes": self.changes,
            "share": self.share,
            "minimum_changes": self.minimum_changes,
            "minimum_share": self.minimum_share,
            "heavy": self.heavy,
            "variables": {v: e for v, e in self.variables},
            "combinations": [{"combination": list(c), "records": r} for c, r in self.combinations],
            "alpha": self.alpha,
            "bound_combinations": self.bound_combinations,
            "options": list(self.options),
        }


def summary_lines(price: Price, indent: str = "  ") -> list[str]:
    """The lines of a result's summary on its price: the sentence, and a heavy perturbation's
    mark with its figures."""
    lines = [indent + price.sentence()]
    if price.heavy:
        lines.append(f"{indent}HEAVY PERTURBATION: {price.heavy_why()}")
        lines += [indent + "  " + r for r in price.heavy_reasons()]
    return lines


def design_price(
    P,
    table: FrequencyTable,
    combinations: Sequence[Sequence[int]],
    alpha: float,
    *,
    changes: float | None = None,
    minimum: float | None = None,
    bound_combinations: int | None = None,
    options: Sequence[str] = (),
    col_codes: np.ndarray | None = None,
) -> Price:
    """The :class:`Price` of the matrix ``P`` on ``table``.

    Parameters
    ----------
    P : scipy.sparse matrix or ndarray of shape (K, K')
        Rows: the table's present cells; columns: the same cells, or the cells of ``col_codes``.
    table : FrequencyTable
    combinations : sequence of sequences of int
        Π as indices into ``table.qi``.
    alpha : float
    changes : float, optional
        The expected changed records when known (default ``sum_m U0(m) (1 - P_mm)``, which
        needs square ``P``).
    minimum : float, optional
        A proven lower bound on the expected changes of every design meeting C1.
    bound_combinations : int, optional
        How many combinations' rows that bound used.
    options : sequence of str
        The options of the design that bound assumes (:func:`bound_options`).
    col_codes : ndarray of shape (K', d), optional
        Codes of ``P``'s columns when they are not the table's cells.

    Returns
    -------
    Price
    """
    n = table.n
    if changes is None:
        diag = sp.csr_array(P).diagonal() if sp.issparse(P) else np.diag(np.asarray(P))
        changes = float(np.asarray(table.counts, dtype=float) @ (1.0 - diag))
    share = changes / n if n else float("nan")
    per_var = changes_by_variable(P, table, col_codes)
    records = small_group_records(table, combinations, alpha)
    combos = sorted(
        ((tuple(str(table.qi[i]) for i in c), int(r)) for c, r in zip(combinations, records)),
        key=lambda t: -t[1],
    )
    return Price(
        n=n,
        changes=float(changes),
        share=share,
        minimum_changes=None if minimum is None else float(minimum),
        minimum_share=None if minimum is None or not n else float(minimum) / n,
        heavy=bool(share > HEAVY_SHARE),
        variables=tuple((str(q), float(e)) for q, e in zip(table.qi, per_var)),
        combinations=tuple(combos),
        alpha=float(alpha),
        bound_combinations=bound_combinations,
        options=tuple(options),
    )


def changes_by_variable(
    P, table: FrequencyTable, col_codes: np.ndarray | None = None
) -> np.ndarray:
    """Per identifying variable, the expected records whose value of it changes.

    ``sum_{m, k} U0(m) P_mk [codes[m, j] != codes[k, j]]`` over P's nonzero entries, a piece
    of at most about a million entries at a time (nothing K x K is made).
    """
    M = sp.coo_array(P)
    codes = np.asarray(table.codes)
    cc = codes if col_codes is None else np.asarray(col_codes)
    counts = np.asarray(table.counts, dtype=float)
    out = np.zeros(codes.shape[1])
    for a in range(0, M.nnz, _CHUNK):
        r, c = M.row[a : a + _CHUNK], M.col[a : a + _CHUNK]
        flow = counts[r] * M.data[a : a + _CHUNK]
        for j in range(codes.shape[1]):
            out[j] += flow[codes[r, j] != cc[c, j]].sum()
    return out


def small_group_records(
    table: FrequencyTable, combinations: Sequence[Sequence[int]], alpha: float
) -> np.ndarray:
    """Per combination, the records in groups with fewer than 1/α records.

    A group is one value of the combination's variables; with P = I its C1 risk is 1/U_π(k0),
    above α exactly when it has fewer than 1/α records (the test is the verifier's, ``1/U > α``).
    """
    codes = np.asarray(table.codes)
    counts = np.asarray(table.counts, dtype=float)
    out = np.zeros(len(combinations), dtype=np.int64)
    for i, c in enumerate(combinations):
        if not codes.shape[0]:
            continue
        _, group = np.unique(codes[:, list(c)], axis=0, return_inverse=True)
        sizes = np.bincount(group.ravel(), weights=counts)
        out[i] = int(round(sizes[1.0 / sizes > alpha].sum()))
    return out


def bound_options(params: Mapping, table: FrequencyTable) -> tuple[str, ...]:
    """The options of ``params`` that restrict the designs a lower bound on the changes is about
    (the bound holds for the designs that honour them)."""
    out = [name for name in _RESTRICTING if params.get(name)]
    if params.get("missing", "keep") == "keep" and table.missing().any():
        out.append("missing='keep'")
    return tuple(out)


def _shown(x: float, down: bool = False) -> float:
    """Records as the sentences show them: whole from 100 up, 3 significant digits below;
    ``down``: rounded down, so that a lower bound stays one up to twice the solver's tolerance,
    which :func:`pramopt.optimize.relaxation.changes_bound` has already taken off (1e-7
    relative, 1e-6 absolute): a bound of 2986 records shows as 2,986, not 2,985."""
    if math.isnan(x) or x <= 0:  # unknown; none, or a rounding error below none
        return x if math.isnan(x) else 0.0
    dec = 0 if x >= 100 else 2 - math.floor(math.log10(x))
    if down:
        return math.floor((x + 2e-6) * (1 + 2e-7) * 10**dec) / 10**dec
    return round(x * 10**dec) / 10**dec


def _count(x: float) -> str:
    """A number of records :func:`_shown`, with thousands separators."""
    if math.isnan(x):
        return "n/a"
    if x >= 100 or x == 0:
        return f"{int(x):,}"
    return f"{x:.{2 - math.floor(math.log10(x))}f}".rstrip("0").rstrip(".")


def _percent(records: float, n: int, down: bool = False) -> str:
    """``records`` of ``n`` in percent, rounded half up (``down``: rounded down, for a lower
    bound, so that no design may lie below the figure shown) on the exact value: 1 decimal
    from 1% up, 2 significant digits below; 100% and 0% only when exact."""
    if math.isnan(records) or not n:
        return "n/a"
    p = Fraction(records) * 100 / n
    if p <= 0:
        return "0%"
    dec = 1 if p >= 1 else 1 - math.floor(math.log10(p))
    step = Fraction(1, 10**dec)
    shown = (
        Fraction(math.floor(p / step), 10**dec)
        if down
        else Fraction(math.floor(p / step + Fraction(1, 2)), 10**dec)
    )
    if shown >= 100 and p < 100:
        shown = 100 - step  # not all of them
    if shown <= 0:
        shown = step  # some of them
    return f"{float(shown):.{dec}f}%"
