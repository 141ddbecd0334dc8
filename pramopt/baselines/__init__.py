"""Closed-form PRAM designs of the literature, and each one calibrated to just meet C1.

* :mod:`.retention` -- retention-replacement perturbation, Algorithms 1-3, reconstruction
  (Ikarashi et al.);
* :mod:`.ifpr` -- inverse-frequency PRAM (Nayak et al.; Ghatak & Roy);
* :mod:`.sdcmicro` -- sdcMicro's invariant PRAM of one variable;
* :mod:`.product_space` -- per-variable PRAM measured as released, over the product space;
* :mod:`.calibrate` -- each family tuned to meet C1 on a data set, returned as a verified
  :class:`~pramopt.DesignResult`;
* :mod:`.registry` -- :data:`BASELINES`, every family under its one name, read by
  :func:`baseline`, :func:`calibrate_all`, :func:`pramopt.frontier` and ``pramopt baseline``;
* :mod:`.retention_meeting` -- retention-replacement at a required ε-DP or Pk-anonymity.

A new baseline is one file here with its matrices, a ``calibrate_*`` function that ends with
``_finish`` (the same verification as every design), and one ``register(BaselineFamily(...))``
in :mod:`.registry`; ``tests/test_baseline_contract.py`` then runs it through every reader.
"""

from .calibrate import (
    calibrate_ifpr,
    calibrate_retention,
    calibrate_sdcmicro,
    ifpr_on_cells,
    product_matrix_on_cells,
    retention_on_cells,
    sdcmicro_on_cells,
)
from .ifpr import (
    IFPRDesign,
    ifpr_block_matrix,
    ifpr_block_size,
    ifpr_design,
    ifpr_h,
    ifpr_matrix,
    ifpr_psi,
    ifpr_theta,
)
from .registry import (
    ALIASES,
    BASELINES,
    BaselineFamily,
    OldNameWarning,
    baseline,
    calibrate_all,
    canonical_name,
    family_named,
    old_name_note,
    register,
)
from .retention import (
    reconstruct_counts,
    reconstruction_error,
    retention_matrix,
    retention_matrix_multi,
    retention_rho,
    rho_from_epsilon,
    rho_from_k,
)
from .sdcmicro import sdcmicro_invariant_matrix, sdcmicro_uniforms

__all__ = [
    "BASELINES",
    "ALIASES",
    "BaselineFamily",
    "OldNameWarning",
    "canonical_name",
    "old_name_note",
    "register",
    "family_named",
    "baseline",
    "calibrate_all",
    "calibrate_ifpr",
    "calibrate_retention",
    "calibrate_sdcmicro",
    "product_matrix_on_cells",
    "retention_on_cells",
    "ifpr_on_cells",
    "sdcmicro_on_cells",
    "IFPRDesign",
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
    "sdcmicro_uniforms",
]
