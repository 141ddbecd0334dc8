"""The household kind of design as the core sees it (:class:`pramopt.kinds.DesignKind`).

:func:`pramopt.design` hands a design with ``household=`` to it, and the releases,
:func:`pramopt.load_design`, :func:`pramopt.save_design` and the commands hand it the
:class:`.result.HouseholdDesign` they get; :mod:`pramopt.households` registers it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..kinds import DesignKind
from .design_file import FORMAT, FORMAT_1, load_household_design, save_household_design
from .designer import design_households
from .release import check_releasable, release_households, release_households_file, release_note
from .report import from_household
from .result import HouseholdDesign

__all__ = ["HOUSEHOLDS", "example_households"]


def example_households(n_households: int = 120, seed: int = 0) -> tuple[pd.DataFrame, list, dict]:
    """A small household problem: region and roof shared by a household's members, relat and sex
    per person, ``household="hid"`` at alpha 0.1 (synthetic, seeded)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_households):
        region = rng.choice([1, 2, 3, 4, 5], p=[0.4, 0.3, 0.15, 0.1, 0.05])
        roof = rng.choice(["a", "b", "c"], p=[0.6, 0.3, 0.1])
        for i in range(int(rng.integers(1, 6))):
            rows.append(
                {
                    "hid": 1000 + g,
                    "region": region,
                    "roof": roof,
                    "relat": 1 if i == 0 else rng.choice([2, 3], p=[0.3, 0.7]),
                    "sex": rng.choice([1, 2]),
                    "income": round(float(rng.normal()), 6),
                }
            )
    qi = ["region", "roof", "relat", "sex"]
    return pd.DataFrame(rows), qi, {"alpha": 0.1, "household": "hid"}


HOUSEHOLDS = DesignKind(
    name="household",
    result_type=HouseholdDesign,
    formats=(FORMAT, FORMAT_1),
    files=("design.json", "household_matrix.csv", "person_matrix.csv"),
    applies=lambda params: params.household is not None,
    design=design_households,
    check_releasable=check_releasable,
    release=release_households,
    release_file=release_households_file,
    load=load_household_design,
    save=save_household_design,
    report=from_household,
    release_note=release_note,
    example=example_households,
    record_level_note=(
        "Its release draws household values once per household and so reaches combinations of "
        "values that no record of the data has. Its record-level risk is checked at release and "
        "in its report."
    ),
)
