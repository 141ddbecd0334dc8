"""pramopt: optimal PRAM matrices for statistical disclosure control."""
from ._validation import InvalidParameterError, PramoptError
from .combinations import resolve_combinations
from .data import FrequencyTable, frequency_table
from .loss import condition_number, expected_changes, l2_loss, l2_loss_and_grad
from .verify import C1Report, c1_risk
from .design import design
from .example import example_data
from .release import DesignMismatchError, estimate, release
from .result import DesignResult, Stage, Status
from . import tables

__version__ = "0.1.0"

__all__ = [
    "InvalidParameterError",
    "PramoptError",
    "FrequencyTable",
    "frequency_table",
    "resolve_combinations",
    "l2_loss",
    "l2_loss_and_grad",
    "expected_changes",
    "condition_number",
    "C1Report",
    "c1_risk",
    "design",
    "DesignResult",
    "Stage",
    "Status",
    "release",
    "estimate",
    "DesignMismatchError",
    "example_data",
    "tables",
]
