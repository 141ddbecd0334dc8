"""Closed-form PRAM designs and risk measures from the literature.

* :mod:`.ifpr` - inverse-frequency PRAM and the correct-match risk (Nayak et al.; Ghatak & Roy).
* :mod:`.privacy` - ε-DP and Pk-anonymity of any PRAM matrix (Ikarashi et al.).
* :mod:`.retention` - retention-replacement perturbation, Algorithms 1-3, reconstruction.
* :mod:`.sdcmicro` - sdcMicro's invariant PRAM, re-implemented from its description.
* :mod:`.baselines` - each family calibrated to just meet C1 on a data set.
"""
from .baselines import (CalibratedBaseline, calibrate_all, calibrate_ifpr, calibrate_retention,
                        calibrate_sdcmicro, product_matrix_on_cells, retention_on_cells, sdcmicro_on_cells)
from .ifpr import (IFPRDesign, IntruderSimulation, correct_match_risk, correct_match_risks,
                   expected_correct_match, ifpr_block_matrix, ifpr_block_size, ifpr_design, ifpr_h,
                   ifpr_matrix, ifpr_psi, ifpr_theta, nayak_r1, simulate_intruder)
from .privacy import (dp_epsilon, dp_epsilon_product, dp_epsilon_retention, pk_anonymity,
                      pk_anonymity_product, pk_anonymity_retention, pk_ratio)
from .retention import (reconstruct_counts, reconstruction_error, retention_matrix,
                        retention_matrix_multi, retention_rho, rho_from_epsilon, rho_from_k)
from .sdcmicro import sdcmicro_invariant_matrix, sdcmicro_uniforms

__all__ = [
    "CalibratedBaseline", "calibrate_all", "calibrate_ifpr", "calibrate_retention", "calibrate_sdcmicro",
    "product_matrix_on_cells", "retention_on_cells", "sdcmicro_on_cells",
    "IFPRDesign", "IntruderSimulation", "correct_match_risk", "correct_match_risks", "expected_correct_match",
    "ifpr_block_matrix", "ifpr_block_size", "ifpr_design", "ifpr_h", "ifpr_matrix", "ifpr_psi", "ifpr_theta",
    "nayak_r1", "simulate_intruder",
    "dp_epsilon", "dp_epsilon_product", "dp_epsilon_retention", "pk_anonymity", "pk_anonymity_product",
    "pk_anonymity_retention", "pk_ratio",
    "reconstruct_counts", "reconstruction_error", "retention_matrix", "retention_matrix_multi",
    "retention_rho", "rho_from_epsilon", "rho_from_k",
    "sdcmicro_invariant_matrix", "sdcmicro_uniforms",
]
