"""pramopt: optimal PRAM matrices for statistical disclosure control.

The pipeline (see ARCHITECTURE.md): :mod:`pramopt.frequency` (data to frequency tables) ->
:mod:`pramopt.optimize` (the designer) -> :mod:`pramopt.verify` (the independent C1 check) ->
:class:`DesignResult` -> :mod:`pramopt.publish` (release and estimate) and :mod:`pramopt.io`.
Beside it: :mod:`pramopt.baselines` (closed forms of the literature), :mod:`pramopt.risk`
(every risk notion), :mod:`pramopt.report`, :mod:`pramopt.spec`, :mod:`pramopt.cli`, and the
magnitude-table rules in :mod:`pramopt.magnitude`.

Importing pramopt does not import cvxpy (only ``solver=`` with a cvxpy solver does) and prints
nothing.
"""

# imported for its effect: it registers the household kind of design (pramopt.kinds)
from . import households as _households

# per_variable is imported for its effect too: it registers the per-variable kind of design
from . import magnitude, per_variable
from .advise import Advice, advise, write_advice
from .baselines import (
    IFPRDesign,
    OldNameWarning,
    baseline,
    calibrate_all,
    calibrate_ifpr,
    calibrate_retention,
    calibrate_sdcmicro,
    ifpr_block_matrix,
    ifpr_block_size,
    ifpr_design,
    ifpr_h,
    ifpr_matrix,
    ifpr_psi,
    ifpr_theta,
    product_matrix_on_cells,
    reconstruct_counts,
    reconstruction_error,
    retention_matrix,
    retention_matrix_multi,
    retention_on_cells,
    retention_rho,
    rho_from_epsilon,
    rho_from_k,
    sdcmicro_invariant_matrix,
    sdcmicro_on_cells,
)
from .choices import Choice, ChoiceFrontier, choice_frontier, variables_per_changed_record
from .errors import (
    CallbackError,
    DesignFileError,
    DesignMismatchError,
    InvalidParameterError,
    LargeProblemWarning,
    PramoptError,
)
from .example import example_data
from .frequency import FrequencyTable, count_dask, count_file, frequency_table, resolve_combinations
from .io import load_design, read_matrix, read_table, save_design, write_table
from .loss import condition_number, expected_changes, l2_loss
from .optimize.constraints.c1 import floor_upper_bound
from .optimize.designer import design
from .optimize.objectives.l2 import SparseL2, l2_loss_and_grad, l2_loss_sparse
from .params import DesignParams
from .publish import (
    FileRelease,
    ReleasePolicy,
    estimate,
    release,
    release_dask,
    release_file,
    release_policy,
)
from .recode import Recoding, read_recoding, write_recoding
from .result import DesignResult, Reduction, Stage, Status
from .risk import (
    Assessment,
    IntruderSimulation,
    assess,
    correct_match_risk,
    correct_match_risks,
    dp_epsilon,
    dp_epsilon_product,
    dp_epsilon_retention,
    expected_correct_match,
    nayak_r1,
    pk_anonymity,
    pk_anonymity_product,
    pk_anonymity_retention,
    pk_ratio,
    simulate_intruder,
)
from .spec import load_spec
from .tradeoff import Frontier, frontier
from .verify import C1Report, c1_risk

__version__ = "0.1.0"

__all__ = [
    # errors
    "PramoptError",
    "InvalidParameterError",
    "DesignMismatchError",
    "DesignFileError",
    "CallbackError",
    "LargeProblemWarning",
    # data
    "FrequencyTable",
    "frequency_table",
    "resolve_combinations",
    "count_file",
    "count_dask",
    "example_data",
    # design
    "design",
    "DesignParams",
    "frontier",
    "choice_frontier",
    "Choice",
    "ChoiceFrontier",
    "advise",
    "Advice",
    "write_advice",
    "Recoding",
    "read_recoding",
    "write_recoding",
    "Frontier",
    "DesignResult",
    "Reduction",
    "Stage",
    "Status",
    "floor_upper_bound",
    # loss
    "l2_loss",
    "l2_loss_and_grad",
    "l2_loss_sparse",
    "SparseL2",
    "expected_changes",
    "condition_number",
    "variables_per_changed_record",
    # verification and risk
    "C1Report",
    "c1_risk",
    "Assessment",
    "assess",
    "dp_epsilon",
    "dp_epsilon_product",
    "dp_epsilon_retention",
    "pk_anonymity",
    "pk_anonymity_product",
    "pk_anonymity_retention",
    "pk_ratio",
    "correct_match_risk",
    "correct_match_risks",
    "expected_correct_match",
    "nayak_r1",
    "simulate_intruder",
    "IntruderSimulation",
    # release
    "release",
    "estimate",
    "release_file",
    "ReleasePolicy",
    "release_policy",
    "FileRelease",
    "release_dask",
    # baselines
    "baseline",
    "calibrate_all",
    "calibrate_ifpr",
    "calibrate_retention",
    "calibrate_sdcmicro",
    "product_matrix_on_cells",
    "retention_on_cells",
    "sdcmicro_on_cells",
    "IFPRDesign",
    "OldNameWarning",
    "ifpr_block_matrix",
    "ifpr_block_size",
    "ifpr_design",
    "ifpr_h",
    "ifpr_matrix",
    "ifpr_psi",
    "ifpr_theta",
    "reconstruct_counts",
    "reconstruction_error",
    "retention_matrix",
    "retention_matrix_multi",
    "retention_rho",
    "rho_from_epsilon",
    "rho_from_k",
    "sdcmicro_invariant_matrix",
    # files
    "load_design",
    "save_design",
    "read_matrix",
    "read_table",
    "write_table",
    "load_spec",
    # magnitude tables
    "magnitude",
    # one matrix per variable
    "per_variable",
]

del _households
