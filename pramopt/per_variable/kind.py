"""The per-variable kind of design as the core sees it (:class:`pramopt.kinds.DesignKind`).

:func:`pramopt.design` hands a design with ``structure="per_variable"`` to it, and the releases,
:func:`pramopt.load_design`, :func:`pramopt.save_design` and the commands hand it the
:class:`.result.PerVariableDesign` they get; :mod:`pramopt.per_variable` registers it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..kinds import DesignKind
from .design_file import FORMAT, load_per_variable, save_per_variable
from .designer import design_per_variable
from .release import (
    check_releasable,
    estimate_per_variable,
    release_note,
    release_per_variable,
    release_per_variable_file,
)
from .report import from_per_variable
from .result import PerVariableDesign

__all__ = ["PER_VARIABLE", "example_per_variable"]


def example_per_variable(n: int = 400, seed: int = 0) -> tuple[pd.DataFrame, list, dict]:
    """A small problem: three identifying variables (4, 3 and 2 categories, one rare category
    each) and a non-identifying column, ``structure="per_variable"`` at alpha 0.2 (seeded)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "region": rng.choice(["north", "south", "east", "west"], n, p=[0.5, 0.3, 0.15, 0.05]),
            "tenure": rng.choice([1, 2, 3], n, p=[0.6, 0.35, 0.05]),
            "sex": rng.choice(["f", "m"], n),
            "income": np.round(rng.normal(size=n), 6),
        }
    )
    return df, ["region", "tenure", "sex"], {"alpha": 0.2, "structure": "per_variable"}


PER_VARIABLE = DesignKind(
    name="per-variable",
    result_type=PerVariableDesign,
    formats=(FORMAT,),
    files=("design.json", "matrix_*.csv"),
    applies=lambda params: params.structure == "per_variable",
    design=design_per_variable,
    check_releasable=check_releasable,
    release=release_per_variable,
    release_file=release_per_variable_file,
    load=load_per_variable,
    save=save_per_variable,
    report=from_per_variable,
    release_note=release_note,
    example=example_per_variable,
    estimate=estimate_per_variable,
    record_level_note=(
        "Its matrices are one per variable, released over every combination of categories: "
        "assess them with --matrix VAR=<folder>/matrix_VAR.csv for each variable (with fixed "
        "strata, matrix_VAR_<stratum>.csv on that stratum's records)."
    ),
)
