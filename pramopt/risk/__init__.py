"""Every risk notion of the seeds, for any PRAM matrix.

* :mod:`pramopt.verify` -- C1 (Cator et al.), the core check, kept apart from the optimiser;
* :mod:`.dp_pk_anonymity` -- ε-DP (Theorem 1) and Pk-anonymity (Theorem 3) of Ikarashi et al.;
* :mod:`.correct_match` -- the correct-match risk R1 of Nayak et al. / Ghatak & Roy;
* :mod:`.assessment` -- :func:`assess`, all of them side by side for one matrix on one data set.
"""

from .assessment import Assessment, assess
from .correct_match import (
    IntruderSimulation,
    correct_match_risk,
    correct_match_risks,
    expected_correct_match,
    nayak_r1,
    simulate_intruder,
)
from .dp_pk_anonymity import (
    dp_epsilon,
    dp_epsilon_product,
    dp_epsilon_retention,
    pk_anonymity,
    pk_anonymity_product,
    pk_anonymity_retention,
    pk_ratio,
)

__all__ = [
    "Assessment",
    "assess",
    "IntruderSimulation",
    "correct_match_risk",
    "correct_match_risks",
    "expected_correct_match",
    "nayak_r1",
    "simulate_intruder",
    "dp_epsilon",
    "dp_epsilon_product",
    "dp_epsilon_retention",
    "pk_anonymity",
    "pk_anonymity_product",
    "pk_anonymity_retention",
    "pk_ratio",
]
