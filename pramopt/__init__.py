"""pramopt: optimal PRAM matrices for statistical disclosure control."""
from ._validation import InvalidParameterError, PramoptError
from .combinations import resolve_combinations
from .data import FrequencyTable, frequency_table
from .loss import SparseL2, condition_number, expected_changes, l2_loss, l2_loss_and_grad, l2_loss_sparse
from .verify import C1Report, c1_risk
from .design import design, floor_upper_bound
from .stream import FileRelease, count_file, release_file
from .distributed import count_dask, release_dask
from .example import example_data
from .release import DesignMismatchError, estimate, release
from .result import DesignResult, Stage, Status
from . import tables
from .assess import Assessment, assess
from .closed_form import (
    CalibratedBaseline, IFPRDesign, IntruderSimulation, calibrate_all, calibrate_ifpr,
    calibrate_retention, calibrate_sdcmicro, correct_match_risk, correct_match_risks,
    dp_epsilon, dp_epsilon_product, dp_epsilon_retention, expected_correct_match,
    ifpr_block_matrix, ifpr_block_size, ifpr_design, ifpr_h, ifpr_matrix, ifpr_psi, ifpr_theta,
    nayak_r1, pk_anonymity, pk_anonymity_product, pk_anonymity_retention, pk_ratio,
    product_matrix_on_cells, reconstruct_counts, reconstruction_error, retention_matrix,
    retention_matrix_multi, retention_on_cells, retention_rho, rho_from_epsilon, rho_from_k,
    sdcmicro_invariant_matrix, sdcmicro_on_cells, simulate_intruder,
)
from .io import load_design, read_matrix, read_table, save_design, write_table
from .spec import load_spec

__version__ = "0.1.0"

__all__ = [
    "InvalidParameterError",
    "PramoptError",
    "FrequencyTable",
    "frequency_table",
    "resolve_combinations",
    "l2_loss",
    "l2_loss_and_grad",
    "l2_loss_sparse",
    "SparseL2",
    "floor_upper_bound",
    "count_file",
    "release_file",
    "FileRelease",
    "count_dask",
    "release_dask",
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
    "Assessment",
    "assess",
    "CalibratedBaseline",
    "IFPRDesign",
    "IntruderSimulation",
    "calibrate_all",
    "calibrate_ifpr",
    "calibrate_retention",
    "calibrate_sdcmicro",
    "correct_match_risk",
    "correct_match_risks",
    "dp_epsilon",
    "dp_epsilon_product",
    "dp_epsilon_retention",
    "expected_correct_match",
    "ifpr_block_matrix",
    "ifpr_block_size",
    "ifpr_design",
    "ifpr_h",
    "ifpr_matrix",
    "ifpr_psi",
    "ifpr_theta",
    "nayak_r1",
    "pk_anonymity",
    "pk_anonymity_product",
    "pk_anonymity_retention",
    "pk_ratio",
    "product_matrix_on_cells",
    "reconstruct_counts",
    "reconstruction_error",
    "retention_matrix",
    "retention_matrix_multi",
    "retention_on_cells",
    "retention_rho",
    "rho_from_epsilon",
    "rho_from_k",
    "sdcmicro_invariant_matrix",
    "sdcmicro_on_cells",
    "simulate_intruder",
    "load_design",
    "save_design",
    "read_matrix",
    "read_table",
    "write_table",
    "load_spec",
]
