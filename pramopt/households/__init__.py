"""Household designs: household-level keys perturbed once per household, person-level keys per person.

See :mod:`.model` (the record-level matrix), :mod:`.person` (the person LP), :mod:`.designer`,
:mod:`.release` and ARCHITECTURE.md for the risk model.
"""
from .model import Layout, household_keys, record_matrix
from .result import HouseholdDesign, household_loss, record_check

__all__ = ["HouseholdDesign", "Layout", "household_keys", "record_matrix", "record_check", "household_loss"]
