"""Household designs: household-level keys perturbed once per household, person-level keys per
person.

See :mod:`.model` (the record-level matrix), :mod:`.person` (the person LP), :mod:`.designer`,
:mod:`.release` and ARCHITECTURE.md for the risk model.  Importing this package registers the
household kind (:mod:`.kind`) with :mod:`pramopt.kinds`, through which the core reaches it.
"""

from ..kinds import register_kind
from .kind import HOUSEHOLDS
from .model import Layout, household_keys, record_matrix
from .result import HouseholdDesign, household_loss, record_check

register_kind(HOUSEHOLDS)

__all__ = [
    "HouseholdDesign",
    "Layout",
    "household_keys",
    "record_matrix",
    "record_check",
    "household_loss",
    "HOUSEHOLDS",
]
