"""Advice when the price of C1 is high: recodings ranked by the fewest changes they allow.

When most records must change to meet C1 (a register whose every cell is unique), no solver
helps: the request is at fault.  A methodologist then recodes -- bands an ordered variable,
merges a nominal one's rarest categories, climbs a hierarchy (region to province) -- or leaves a
variable out of the identifying ones.  :func:`advise` tries such recodings and ranks them by the
**proven lower bound** on the expected changes of every design meeting C1 on the recoded data
(the flow relaxation, :func:`pramopt.optimize.relaxation.changes_bound`: seconds each), steps
greedily from the best one until the bound is below a target share of the records, and makes
the designs of the best few to give their actual changes and loss.

Each option's recoding can be written as a file (:func:`pramopt.recode.write_recoding`) and
applied with ``pramopt design --recode FILE``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ._validation import InvalidParameterError, check_int, check_real
from .frequency.table import check_qi
from .price import HEAVY_SHARE
from .recode import Recoding, _text

__all__ = ["advise", "Advice", "candidate_moves", "Move"]

#: Widths of the bands tried on an ordered variable (adjacent categories merged).
BAND_WIDTHS = (2, 3, 5)


@dataclass(frozen=True)
class Move:
    """One step of advice: recode a variable, or leave it out of the identifying ones."""

    name: str
    variable: str
    recoding: Recoding = field(default_factory=Recoding)
    drop: bool = False


@dataclass(frozen=True)
class Advice:
    """What :func:`advise` found.

    Attributes
    ----------
    options : pandas.DataFrame
        One row per option tried, best first: ``option`` (in words), ``step`` (how many moves),
        ``qi`` (the identifying variables left), ``categories_lost``, ``cells``,
        ``bound_changes`` and ``bound_share`` (the proven minimum of expected changes of any
        design meeting C1, records and share of the records), and for the designs made
        ``design_changes``, ``design_share``, ``loss``, ``variables_per_changed_record``,
        ``status``.  Row 0 of ``baseline``
        is the data as given.
    recodings : list of Recoding
        Each option's recoding, in the rows' order.
    baseline : pandas.Series
        The figures of the data as given.
    n : int
        Records.
    seconds : float
    results : dict
        The designs made, by row of ``options``.
    """

    options: pd.DataFrame
    recodings: list
    baseline: pd.Series
    n: int
    seconds: float
    results: dict = field(default_factory=dict)

    def summary(self, rows: int = 10) -> str:
        """The ranked options in words (for the command line)."""
        b = self.baseline
        lines = [
            f"pramopt advise: {self.n} records; as given, no design meeting C1 changes fewer "
            f"than {b['bound_share']:.1%} of them ({b['bound_changes']:.0f})"
            + (
                f"; the design changes {b['design_share']:.1%}."
                if pd.notna(b.get("design_share"))
                else "."
            ),
            "  rank  proven min  design  loss       categories lost  option",
        ]
        for i, r in self.options.head(rows).iterrows():
            design = f"{r['design_share']:6.1%}" if pd.notna(r["design_share"]) else "     -"
            loss = f"{r['loss']:.3g}" if pd.notna(r["loss"]) else "-"
            lines.append(
                f"  {i + 1:>4}  {r['bound_share']:10.1%}  {design}  {loss:<9}  "
                f"{int(r['categories_lost']):>15}  {r['option']}"
            )
        return "\n".join(lines)


def _ordered(cats: list) -> list | None:
    """The categories in numeric order when every one writes a number, else None."""
    nums = pd.to_numeric(pd.Series([_text(c) for c in cats], dtype=object), errors="coerce")
    if nums.isna().any():
        return None
    order = np.argsort(nums.to_numpy(dtype=float), kind="stable")
    return [cats[i] for i in order]


def _band(q: str, cats: list, width: int) -> Move:
    m = {}
    for s in range(0, len(cats), width):
        part = [_text(c) for c in cats[s : s + width]]
        label = part[0] if len(part) == 1 else f"{part[0]}-{part[-1]}"
        m.update({t: label for t in part if t != label})
    return Move(f"band {q} by {width}", q, Recoding({q: m}, f"{q} banded by {width}"))


def _merge_rare(q: str, counts: pd.Series, below: float) -> Move | None:
    rare = [_text(c) for c, k in counts.items() if k < below]
    if len(rare) < 2:
        return None
    present = {_text(c) for c in counts.index}
    label = next(x for x in ("other", "other*", "other**", f"other {q}") if x not in present)
    return Move(
        f"merge {q}'s {len(rare)} categories with < {below:g} records",
        q,
        Recoding({q: {t: label for t in rare}}, f"{q}: {len(rare)} rare categories as {label!r}"),
    )


def candidate_moves(
    df: pd.DataFrame,
    qi: Sequence[str],
    alpha: float,
    *,
    ordered: Sequence[str] | None = None,
    hierarchies: Mapping[str, Mapping] | None = None,
) -> list[Move]:
    """The moves tried from data ``df`` (already recoded by earlier moves).

    Ordered variables (``ordered``; by default every variable whose categories all write
    numbers) are banded by ``BAND_WIDTHS``; every variable's rare categories (fewer than
    1/alpha and 3/alpha records) are merged; a ``hierarchies`` mapping (value -> group, as
    text) is climbed; and every variable is tried left out of the identifying ones.
    """
    moves: list[Move] = []
    for q in qi:
        counts = df[q].dropna().value_counts()
        cats = list(counts.index)
        if len(cats) < 2:
            continue
        ordered_cats = _ordered(cats)
        if ordered_cats is not None and (ordered is None or q in ordered):
            moves += [_band(q, ordered_cats, w) for w in BAND_WIDTHS if len(cats) > w]
        for below in (1.0 / alpha, 3.0 / alpha):
            mv = _merge_rare(q, counts, below)
            if mv is not None and mv.name not in {m.name for m in moves}:
                moves.append(mv)
        h = (hierarchies or {}).get(q)
        if h:
            texts = {_text(c) for c in cats}
            m = {str(k): str(v) for k, v in h.items() if str(k) in texts and str(k) != str(v)}
            if m:
                moves.append(Move(f"{q} by its hierarchy", q, Recoding({q: m}, f"{q} grouped")))
        if len(qi) > 1:
            moves.append(Move(f"leave {q} out of the identifying variables", q, drop=True))
    return moves


def check_options(
    qi, alpha, target, steps, designs, ordered, hierarchies, combination_size, combinations
):
    """The advice's options checked (before any data are read, on the command line): alpha,
    target, steps, designs, the variables named and Π; returns them with Π as design options."""
    from .frequency.combinations import resolve_combinations

    owner = "advise"
    alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    target = check_real(target, "target", owner, low=0.0, high=1.0, low_open=True)
    steps = check_int(steps, "steps", owner, low=1)
    designs = check_int(designs, "designs", owner, low=0)
    for name, given in (("ordered", ordered), ("hierarchies", hierarchies)):
        bad = [v for v in (given or ()) if v not in qi]
        if bad:
            raise InvalidParameterError(
                f"The {name!r} parameter of {owner} must name identifying variables among "
                f"{list(qi)!r}; got {bad!r}."
            )
    opts: dict = {}
    if combinations is not None:
        resolve_combinations(qi, explicit=combinations, owner=owner)  # names checked
        opts["combinations"] = [list(c) for c in combinations]
    if combination_size is not None:
        resolve_combinations(qi, size=combination_size, owner=owner)
        opts["combination_size"] = combination_size
    return alpha, target, steps, designs, opts


def _bound(df: pd.DataFrame, qi: list, alpha: float, opts: dict) -> tuple[float | None, int]:
    """The proven minimum of expected changes of any design meeting C1, and the cells."""
    from .optimize.designer import table_and_combinations
    from .optimize.diagnosis import CHANGES_BOUND_MAX_ROWS
    from .optimize.problem import DesignProblem
    from .optimize.relaxation import bound_combinations, changes_bound
    from .params import DesignParams

    params = DesignParams.from_options("advise", alpha=alpha, **opts)
    table, combos = table_and_combinations(df, qi, params, "advise")
    problem = DesignProblem.build(table, combos, params, "advise")
    used = bound_combinations(problem, CHANGES_BOUND_MAX_ROWS)
    lb = changes_bound(problem, 0.0, combinations=used) if used else None
    return lb, table.n_cells


def _combos(opts: dict, qi: list) -> dict | None:
    """The combination options for ``qi`` (a variable left out leaves its combinations); None
    when no combination is left."""
    out = dict(opts)
    if out.get("combinations") is not None:
        kept = [c for c in out["combinations"] if all(v in qi for v in c)]
        if not kept:
            return None
        out["combinations"] = kept
    elif out.get("combination_size", 3) > len(qi):
        out["combination_size"] = len(qi)
    return out


def advise(
    data: pd.DataFrame,
    qi: Sequence[str],
    alpha: float = 0.1,
    *,
    ordered: Sequence[str] | None = None,
    hierarchies: Mapping[str, Mapping] | None = None,
    target: float = HEAVY_SHARE,
    steps: int = 3,
    designs: int = 3,
    combination_size: int | None = None,
    combinations: Sequence[Sequence[str]] | None = None,
    structure: str = "replacement",
    progress: Callable[[str], None] | None = None,
) -> Advice:
    """Recodings of the identifying variables, ranked by the fewest changes they allow.

    Parameters
    ----------
    data : pandas.DataFrame
        The microdata.
    qi : list of str
        Identifying variables.
    alpha : float, default 0.1
        The risk bound of C1.
    ordered : list of str, optional
        The variables whose categories may be banded (by default every one whose categories
        all write numbers).
    hierarchies : dict, optional
        Per variable, a mapping from each value (its text) to its group (region -> province).
    target : float, default 0.25
        Step on (greedily, from the best option) until the proven minimum share of changed
        records is below this.
    steps : int, default 3
        The most moves combined.
    designs : int, default 3
        Make the designs of this many of the best options, and of the best that keeps every
        variable.
    combination_size, combinations
        Π, as for :func:`pramopt.design`.
    structure : str, default "replacement"
        The structure of the designs made: the replacement design is made in seconds and
        verified like any other; ``"auto"`` gives what ``pramopt design`` gives, in minutes.
    progress : callable, optional
        Called with a line of text after each option.

    Returns
    -------
    Advice
    """
    t0 = time.perf_counter()
    owner = "advise"
    qi = list(check_qi(data, qi, owner))
    alpha, target, steps, designs, opts = check_options(
        qi, alpha, target, steps, designs, ordered, hierarchies, combination_size, combinations
    )
    n = len(data)
    say = progress or (lambda s: None)
    base_bound, base_cells = _bound(data, qi, alpha, opts)
    search = _Search(data, qi, alpha, opts, ordered, hierarchies, say)
    search.rows.append(_row("as given", 0, qi, 0, base_cells, base_bound, n))
    search.recodings.append(Recoding())
    # every move, then recodings only: an office may prefer to keep every variable
    for drops in (True, False):
        search.greedy(steps, target, drops)
    rows, recodings = search.rows, search.recodings
    table = pd.DataFrame(rows)
    order = table.iloc[1:].sort_values(
        ["bound_share", "categories_lost"], kind="stable", na_position="last"
    )
    ranked = table.loc[order.index].reset_index(drop=True)
    recs = [recodings[i] for i in order.index]
    baseline = table.iloc[0].copy()
    results = _designs(data, qi, alpha, opts, ranked, recs, designs, structure, say)
    return Advice(ranked, recs, baseline, n, time.perf_counter() - t0, results)


class _Search:
    """The options tried, each once: greedy steps from the data as given."""

    def __init__(self, data, qi, alpha, opts, ordered, hierarchies, say):
        self.data, self.qi, self.alpha, self.opts = data, qi, alpha, opts
        self.ordered, self.hierarchies, self.say = ordered, hierarchies, say
        self.rows: list[dict] = []
        self.recodings: list[Recoding] = []
        self.seen: dict = {}
        self.original = {q: list(data[q].dropna().unique()) for q in qi}

    def _lost(self, rec: Recoding, qi: list) -> int:
        gone = sum(len(self.original[q]) - 1 for q in self.qi if q not in qi)
        kept = {q: self.original[q] for q in rec.variables if q in qi}
        return gone + sum(rec.categories_lost(kept).values())

    def option(self, rec: Recoding, qi: list, label: str, step: int):
        """(bound, lost) of an option, evaluated once."""
        key = (repr(sorted((q, sorted(m.items())) for q, m in rec.variables.items())), tuple(qi))
        if key in self.seen:
            return self.seen[key]
        o = _combos(self.opts, qi)
        if o is None:
            return None  # every combination named a variable left out
        df = rec.apply(self.data) if rec else self.data
        lb, cells = _bound(df, qi, self.alpha, o)
        lost = self._lost(rec, qi)
        self.rows.append(_row(label, step, qi, lost, cells, lb, len(self.data)))
        self.recodings.append(rec)
        self.say(f"{label}: proven minimum {self.rows[-1]['bound_share']:.1%} ({cells} cells)")
        self.seen[key] = (np.inf if lb is None else lb, lost)
        return self.seen[key]

    def greedy(self, steps: int, target: float, drops: bool) -> None:
        rec, qi = Recoding(), list(self.qi)
        for step in range(1, steps + 1):
            cur = rec.apply(self.data) if rec else self.data
            best = None
            moves = candidate_moves(
                cur, qi, self.alpha, ordered=self.ordered, hierarchies=self.hierarchies
            )
            for mv in moves:
                if mv.drop and not drops:
                    continue
                # a variable left out leaves the recoding too (its file names --qi's only)
                new_rec = rec.without(mv.variable) if mv.drop else rec.then(mv.recoding)
                new_qi = [q for q in qi if not (mv.drop and q == mv.variable)]
                label = _label(_describe(rec, self.qi, qi), mv.name)
                got = self.option(new_rec, new_qi, label, step)
                if got is not None and (best is None or got < best[0]):
                    best = (got, new_rec, new_qi)
            if best is None:
                return
            (lb, _), rec, qi = best
            if lb / len(self.data) < target:
                return


def _describe(rec: Recoding, qi: list, kept: list) -> str:
    dropped = [q for q in qi if q not in kept]
    parts = [rec.description] if rec.description else []
    parts += [f"{q} left out" for q in dropped]
    return "; ".join(parts)


def _label(state: str, move: str) -> str:
    return f"{state}; then {move}" if state else move


def _row(option, step, qi, lost, cells, lb, n) -> dict:
    return {
        "option": option,
        "step": step,
        "qi": ",".join(qi),
        "categories_lost": int(lost),
        "cells": int(cells),
        "bound_changes": np.nan if lb is None else float(lb),
        "bound_share": np.nan if lb is None else float(lb) / n,
        "design_changes": np.nan,
        "design_share": np.nan,
        "loss": np.nan,
        "variables_per_changed_record": np.nan,
        "status": "",
    }


def _designs(data, qi, alpha, opts, ranked, recs, count, structure, say) -> dict:
    """The designs of the ``count`` best options and of the best one that keeps every
    variable (their figures written into ``ranked``), by row."""
    import pramopt

    results: dict = {}
    if count == 0:
        return results
    picks = list(range(min(count, len(ranked))))
    whole = [i for i in range(len(ranked)) if ranked.at[i, "qi"] == ",".join(qi)]
    if whole and whole[0] not in picks:
        picks.append(whole[0])
    for i in picks:
        kept = ranked.at[i, "qi"].split(",")
        df = recs[i].apply(data) if recs[i] else data
        res = pramopt.design(df, kept, alpha, structure=structure, **(_combos(opts, kept) or {}))
        ranked.at[i, "design_changes"] = res.expected_changes
        ranked.at[i, "design_share"] = res.expected_changes / len(data)
        ranked.at[i, "loss"] = res.loss
        ranked.at[i, "status"] = res.status.value
        ranked.at[i, "variables_per_changed_record"] = (
            res.details.get("changed_variables") or {}
        ).get("mean", np.nan)
        results[i] = res
        say(f"{ranked.at[i, 'option']}: design changes {ranked.at[i, 'design_share']:.1%}")
    return results


#: The files of an advice folder; the first marks the folder as one that may be replaced.
ADVICE_FILES = ("advice.csv", "advice.md", "advice.png")


def write_advice(
    advice: Advice, out, recodings: int = 5, *, overwrite: bool = False
) -> pd.DataFrame:
    """Write ``advice.csv`` (every option), ``advice.md`` (the same for people), ``advice.png``
    (each option's proven minimum and design share against the categories it loses) and
    ``recode-<rank>.json`` for the first ``recodings`` options that recode (apply one with
    ``pramopt design --recode``), into the folder ``out`` (built aside, then renamed).  An advice
    folder already at ``out`` is replaced only with ``overwrite=True`` (another folder that is not
    empty never).  Returns the table written, with its ``rank`` and ``recode_file``."""
    from pathlib import Path

    from ._labels import formula_safe_frame
    from .io.atomic import atomic_dir
    from .recode import write_recoding

    table = advice.options.copy()
    table.insert(0, "rank", range(1, len(table) + 1))
    table["recode_file"] = ""
    written = 0
    for i, rec in enumerate(advice.recodings):
        if rec and written < recodings:
            table.at[i, "recode_file"] = f"recode-{i + 1}.json"
            written += 1
    with atomic_dir(
        Path(out), marker=ADVICE_FILES[0], force=overwrite, writer="write_advice"
    ) as tmp:
        formula_safe_frame(table).to_csv(tmp / "advice.csv", index=False)
        for i, name in enumerate(table["recode_file"]):
            if name:
                write_recoding(advice.recodings[i], tmp / name)
        (tmp / "advice.md").write_text(_markdown(advice, table), encoding="utf-8")
        _figure(advice, table).savefig(tmp / "advice.png", dpi=100)
    return table


def _markdown(advice: Advice, table: pd.DataFrame) -> str:
    from ._labels import formula_safe, short_label

    b = advice.baseline
    lines = [
        "# Recodings that lower the price of C1",
        "",
        f"{advice.n} records. As given, no design meeting C1 changes fewer than "
        f"{b['bound_share']:.1%} of them ({b['bound_changes']:.0f} records). Each option below "
        "is ranked by the same proven minimum on the recoded data (the flow relaxation); the "
        "designs made give the actual share.",
        "",
        "| rank | option | proven minimum | design | loss | variables per changed record "
        "| categories lost | cells | file |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        design = f"{r['design_share']:.1%}" if pd.notna(r["design_share"]) else ""
        loss = f"{r['loss']:.3g}" if pd.notna(r["loss"]) else ""
        per = r["variables_per_changed_record"]
        per = f"{per:.2f}" if pd.notna(per) else ""
        option = formula_safe(short_label(str(r["option"]), 120)).replace("|", "/")
        lines.append(
            f"| {r['rank']} | {option} | {r['bound_share']:.1%} | {design} | {loss} | {per} | "
            f"{r['categories_lost']} | {r['cells']} | {r['recode_file']} |"
        )
    return "\n".join(lines) + "\n"


def _figure(advice: Advice, table: pd.DataFrame):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    ax.scatter(table["categories_lost"], table["bound_share"], s=18, label="proven minimum")
    made = table[table["design_share"].notna()]
    ax.scatter(made["categories_lost"], made["design_share"], marker="x", label="design made")
    for _, r in table.head(10).iterrows():
        ax.annotate(str(r["rank"]), (r["categories_lost"], r["bound_share"]), fontsize=7)
    ax.axhline(advice.baseline["bound_share"], ls=":", c="grey", label="as given (proven minimum)")
    ax.set_xlabel("categories lost (merged away, or of a variable left out)")
    ax.set_ylabel("share of records changed")
    ax.legend(fontsize=8)
    ax.set_title("Recodings: what each option costs and buys", fontsize=10)
    fig.tight_layout()
    return fig
