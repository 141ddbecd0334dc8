"""One PRAM matrix per identifying variable, of locally least loss under a verified C1.

The matrices sdcMicro's ``pram()`` and mu-ARGUS release (each variable perturbed independently),
designed to minimise the exact L2 loss over the product space of the categories under the full C1
with every combination of categories a released cell: :mod:`.model` (the loss and C1's rows on
projected tables), :mod:`.step` (a trust-region LP on one matrix), :mod:`.designer`, :mod:`.check`
(the independent check), :mod:`.release` (release and the per-variable estimate),
:mod:`.design_file` (``design.json`` and ``matrix_<variable>.csv`` in R's ``write.csv`` layout),
:mod:`.report` (every figure without the product space), :mod:`.strata` (one set of matrices
per stratum of ``fixed`` variables), :mod:`.compare` (sdcMicro's matrices calibrated over the
product space).
Importing this package registers the kind (:mod:`.kind`) with :mod:`pramopt.kinds`.
"""

from ..kinds import register_kind
from .check import ProductCheck, check_product_c1
from .compare import calibrate_sdcmicro_product
from .kind import PER_VARIABLE
from .release import estimate_per_variable
from .result import PerVariableDesign

register_kind(PER_VARIABLE)

__all__ = [
    "PerVariableDesign",
    "ProductCheck",
    "check_product_c1",
    "calibrate_sdcmicro_product",
    "estimate_per_variable",
    "PER_VARIABLE",
]
