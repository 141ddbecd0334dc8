"""Design specs: TOML files (in ``models/``) that describe one design end to end.

A spec names its data (a file, the built-in example or a seeded generator), the identifying
variables, α, Π, the designer's options, and optionally the figures expected and the paper they
come from.  The CLI (``pramopt design SPEC.toml``), the tests and the benchmarks read the same
files.  Layout::

    name = "example"
    description = "..."
    paper = "Cator, Hensbergen & Rozenholc, Section 4"    # optional

    [data]                       # exactly one of: path, builtin; or a [generator] table
    path = "../../shared/data/testdata.csv"
    qi = ["urbrur", "roof", "walls"]
    recode = "recode.json"       # optional: a recoding applied first (pramopt design --recode)

    [design]                     # parameters of pramopt.design (pramopt.params; alpha required)
    alpha = 0.1
    combination_size = 3         # or combinations = [["a", "b"], ...]
    gamma = 0.95
    solver = "HIGHS"

    [generator]                  # instead of [data] path/builtin
    kind = "zipf"
    n = 5000
    seed = 7
    levels = [8, 6, 5, 4]        # categories per variable
    exponent = 1.1               # P(category j) proportional to j^-exponent

    [expected]                   # checked by check_expected
    status = "success"
    min_diagonal = { min = 0.95 }
    loss = { max = 1e-5 }

    [frontier]                   # optional: pramopt frontier SPEC.toml (pramopt.frontier)
    alphas = [0.05, 0.1, 0.2]    # the design's alpha above is then not used
    baselines = "auto"           # or "all", "none", ["retention", "ifpr", ...]

**Relative data paths** are resolved against the folder holding the spec, as a path written in
any file is: for a spec in ``models/``, ``../../shared/data/testdata.csv`` means the ``shared``
folder next to the checkout.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np
import pandas as pd

from ._validation import InvalidParameterError
from .params import SPEC_KEYS as DESIGN_KEYS

__all__ = ["Spec", "load_spec", "check_expected", "zipf_data", "DESIGN_KEYS", "FIGURES"]
#: Figures of a design that ``[expected]`` may bound.
FIGURES = (
    "max_risk",
    "loss",
    "expected_changes",
    "min_diagonal",
    "condition_number",
    "n",
    "cells",
    "epsilon",
    "k",
)

_TOP = (
    "name",
    "description",
    "paper",
    "data",
    "design",
    "generator",
    "expected",
    "notes",
    "frontier",
)
#: Keys of the optional ``[frontier]`` table (``pramopt frontier SPEC.toml``).
FRONTIER_KEYS = ("alphas", "baselines")


@dataclass(frozen=True)
class Spec:
    """A parsed design spec.

    Attributes
    ----------
    path : Path
    name, description, paper : str
    qi : tuple of str
    data_path : Path or None
        The resolved data file, when the spec reads one.
    builtin : str or None
        ``"example"`` for :func:`pramopt.example_data`.
    generator : dict or None
    design : dict
        Keyword arguments for :func:`pramopt.design`.
    expected : dict
    frontier : dict
        The ``[frontier]`` table (``alphas``, optionally ``baselines``) for
        :func:`pramopt.frontier`.
    recode_path : Path or None
        The resolved recoding file (``[data] recode``), applied to the data before the design.
    """

    path: Path
    name: str
    description: str
    paper: str
    qi: tuple
    data_path: Path | None
    builtin: str | None
    generator: dict | None
    design: dict
    expected: dict = field(default_factory=dict)
    frontier: dict = field(default_factory=dict)
    recode_path: Path | None = None

    @property
    def alpha(self) -> float:
        return float(self.design.get("alpha", 0.1))

    def recoding(self):
        """The :class:`~pramopt.recode.Recoding` of ``[data] recode``, or None."""
        if self.recode_path is None:
            return None
        from .recode import read_recoding

        return read_recoding(self.recode_path, flag="[data] recode")

    def load_data(self, recoded: bool = True) -> pd.DataFrame:
        """The spec's microdata (read, built in or generated), recoded with ``[data] recode``
        unless ``recoded`` is False."""
        if self.builtin is not None:
            from .example import example_data

            df = example_data()
        elif self.generator is not None:
            df = zipf_data(
                **{k: v for k, v in self.generator.items() if k not in ("kind", "names")},
                names=self.qi,
            )
        else:
            from .io import read_table

            df = read_table(self.data_path)
        rec = self.recoding() if recoded else None
        return rec.apply(df) if rec else df


def _bad(path, what: str) -> NoReturn:
    raise InvalidParameterError(f"Invalid spec {str(path)!r}: {what}.")


def load_spec(path) -> Spec:
    """Read and validate a spec.

    Raises
    ------
    InvalidParameterError
        For a missing or malformed file, an unknown key, a missing data source or qi, or a data
        file that does not exist.
    """
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError(f"No spec at {str(p)!r}.")
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InvalidParameterError(f"Invalid spec {str(p)!r}: {e}") from None
    unknown = sorted(set(raw) - set(_TOP))
    if unknown:
        _bad(p, f"unknown top-level keys {unknown!r} (allowed: {list(_TOP)!r})")
    data = raw.get("data", {})
    gen = raw.get("generator")
    design = dict(raw.get("design", {}))
    bad = sorted(set(design) - set(DESIGN_KEYS))
    if bad:
        _bad(p, f"unknown [design] keys {bad!r} (allowed: {list(DESIGN_KEYS)!r})")
    if "alpha" not in design:
        _bad(p, "[design] must give alpha")
    qi = data.get("qi") or (gen or {}).get("names")
    if not qi or not all(isinstance(q, str) for q in qi):
        _bad(p, "[data] qi must list the identifying variables")
    sources = [k for k in ("path", "builtin") if k in data] + (
        ["generator"] if gen is not None else []
    )
    if len(sources) != 1:
        _bad(
            p,
            "give exactly one data source ([data] path, [data] builtin or [generator]); got "
            f"{sources!r}",
        )
    data_path = builtin = recode_path = None
    if "recode" in data:
        rp = Path(str(data["recode"]))
        recode_path = rp if rp.is_absolute() else (p.resolve().parent / rp).resolve()
        if not recode_path.is_file():
            _bad(p, f"[data] recode names no file ({str(recode_path)!r})")
    if "path" in data:
        dp = Path(data["path"])
        # relative to the spec file's own folder, wherever the command is run from
        data_path = dp if dp.is_absolute() else (p.resolve().parent / dp).resolve()
    elif "builtin" in data:
        builtin = data["builtin"]
        if builtin != "example":
            _bad(p, f"[data] builtin must be 'example'; got {builtin!r}")
    else:
        assert gen is not None  # the one data source left
        if gen.get("kind") != "zipf":
            _bad(p, f"[generator] kind must be 'zipf'; got {gen.get('kind')!r}")
        extra = sorted(set(gen) - {"kind", "n", "seed", "levels", "exponent", "names"})
        if extra:
            _bad(p, f"unknown [generator] keys {extra!r}")
        if "names" in gen and list(gen["names"]) != list(qi):
            _bad(p, "[generator] names must equal [data] qi")
        missing = [k for k in ("n", "seed", "levels") if k not in gen]
        if missing:
            _bad(p, f"[generator] needs {missing!r}")
        if len(gen["levels"]) != len(qi):
            _bad(
                p, "[generator] levels must give one number of categories per identifying variable"
            )
    expected = dict(raw.get("expected", {}))
    bad = sorted(set(expected) - set(FIGURES) - {"status", "source"})
    if bad:
        _bad(p, f"unknown [expected] keys {bad!r} (allowed: status, source, {', '.join(FIGURES)})")
    for k in FIGURES:
        if k in expected and (
            not isinstance(expected[k], dict) or not set(expected[k]) <= {"min", "max"}
        ):
            _bad(p, f"[expected] {k} must be a table with min and/or max")
    frontier = _frontier_table(p, raw.get("frontier"))
    return Spec(
        path=p,
        name=str(raw.get("name", p.stem)),
        description=str(raw.get("description", "")),
        paper=str(raw.get("paper", "")),
        qi=tuple(qi),
        data_path=data_path,
        builtin=builtin,
        generator=dict(gen) if gen is not None else None,
        design=design,
        expected=expected,
        frontier=frontier,
        recode_path=recode_path,
    )


def _frontier_table(p: Path, table) -> dict:
    """The checked ``[frontier]`` table (empty when the spec has none)."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        _bad(p, "frontier must be a table ([frontier] alphas = [...])")
    bad = sorted(set(table) - set(FRONTIER_KEYS))
    if bad:
        _bad(p, f"unknown [frontier] keys {bad!r} (allowed: {list(FRONTIER_KEYS)!r})")
    if "alphas" not in table:
        _bad(p, "[frontier] must give alphas")
    from .tradeoff import check_alphas  # the same check as pramopt.frontier's

    try:
        alphas = check_alphas(table["alphas"], "frontier")
    except InvalidParameterError as e:
        _bad(p, f"[frontier] alphas: {e}".rstrip("."))
    return {**table, "alphas": list(alphas)}


def design_kwargs(spec: Spec) -> dict:
    """Keyword arguments of :func:`pramopt.design` (after ``data`` and ``qi``)."""
    kw = dict(spec.design)
    if "combinations" in kw:
        kw["combinations"] = [list(c) for c in kw["combinations"]]
    return kw


def check_expected(spec: Spec, figures: dict, status: str) -> list[str]:
    """Every way the figures of a design miss the spec's expected ones (empty if none).

    ``figures`` maps the names in :data:`FIGURES` to values; ``status`` is the status's value.
    """
    misses = []
    exp = spec.expected
    if "status" in exp and exp["status"] != status:
        misses.append(f"status {status!r}, expected {exp['status']!r}")
    for k in FIGURES:
        if k not in exp:
            continue
        v = float(figures.get(k, math.nan))
        lo, hi = exp[k].get("min"), exp[k].get("max")
        if math.isnan(v) or (lo is not None and not v >= lo) or (hi is not None and not v <= hi):
            misses.append(
                f"{k} = {v:.6g}, expected in [{lo if lo is not None else '-inf'}, "
                f"{hi if hi is not None else 'inf'}]"
            )
    return misses


def zipf_data(n: int, seed: int, levels, exponent: float = 1.1, names=None) -> pd.DataFrame:
    """Seeded microdata whose identifying variables have Zipf-like marginals.

    Variable ``i`` takes category ``j = 1 .. levels[i]`` with probability proportional to
    ``j ** -exponent``, independently of the others; the product of long tails leaves many
    rare cells, as in registers with detailed codes.  A non-identifying ``weight`` column is
    added.

    Parameters
    ----------
    n : int
        Number of records.
    seed : int
    levels : list of int
        Categories per variable.
    exponent : float
    names : list of str, optional
        Column names (default ``z1``, ``z2``, ...).
    """
    if not isinstance(n, int) or n < 1 or not isinstance(seed, int) or seed < 0:
        raise InvalidParameterError(
            f"zipf_data needs an integer n >= 1 and seed >= 0; got n={n!r}, seed={seed!r}."
        )
    names = list(names) if names is not None else [f"z{i + 1}" for i in range(len(levels))]
    rng = np.random.default_rng(seed)
    cols = {}
    for name, L in zip(names, levels):
        w = np.arange(1, int(L) + 1, dtype=float) ** -float(exponent)
        cols[name] = rng.choice(int(L), size=n, p=w / w.sum()) + 1
    df = pd.DataFrame(cols)
    df["weight"] = np.round(rng.uniform(50, 150, n), 1)
    return df
