"""The built-in example: seeded synthetic microdata shaped like Section 4 of Cator et al.

Four binary and one ternary identifying variable (|X| = 48 cells), 2,500 records, and a
dependence structure that leaves a few cells and triples rare, as in the paper's example
(17 cells with 0 < U0(m) < 10 there).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EXAMPLE_QI = ("v1", "v2", "v3", "v4", "v5")


def example_data(n: int = 2500, seed: int = 3) -> pd.DataFrame:
    """Seeded microdata with four binary and one ternary identifying variable.

    The binary variables are 1 with probabilities 0.1, 0.2, 0.3 and 0.4 and the ternary one
    takes 0, 1, 2 with probabilities 0.64, 0.3, 0.06, independently.  With the default seed
    this leaves 47 of the 48 cells present, 18 of them rare (U0 < 10) and 5 rare triples
    (U_π(k0) < 10) among the 104 (π, k0) -- close to the paper's 17 rare cells and 5 problem
    combinations.  A non-identifying column ``income`` shows that only identifying columns
    are ever changed.
    """
    rng = np.random.default_rng(seed)
    cols: list[np.ndarray] = [rng.random(n) < p for p in (0.1, 0.2, 0.3, 0.4)]
    cols.append(rng.choice(3, n, p=[0.64, 0.3, 0.06]))
    df = pd.DataFrame(np.column_stack(cols).astype(np.int64), columns=list(EXAMPLE_QI))
    df["income"] = np.round(rng.lognormal(10, 0.5, n), 2)
    return df
