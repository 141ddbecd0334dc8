"""sdcMicro's per-variable PRAM matrix, pinned to values computed once by R.

How the values were made (R 4.2.2): ``calcTransitionMatrix`` copied verbatim from sdcMicro 5.8.1's
``R/pram.R`` (the branch that generates the matrix from ``pd`` and ``alpha``), run on
``factor(read.csv("testdata.csv")$roof)`` and ``$walls`` (sdcMicro's testdata) with
``set.seed(2026)`` before it, ``pd = 0.8``, ``alpha = 0.5``; the uniforms are ``runif(L)`` after the
same ``set.seed(2026)`` (R's ``runif(L, min = pd, max = 1)`` is ``pd + (1 - pd) runif(L)``).  Values
printed with ``sprintf("%.17g")``.  Only the counts and R's output are kept here, not the data.
"""

from __future__ import annotations

import numpy as np
import pytest

from pramopt.baselines.sdcmicro import sdcmicro_invariant_matrix

R_U = [
    0.69867347087711096,
    0.55653050588443875,
    0.14013995765708387,
    0.28572330623865128,
    0.55536900996230543,
]

CASES = {
    "roof": (
        [814, 3697, 19, 34, 16],
        [
            [
                0.92562585906267236,
                0.068917587748596423,
                0.0016211807504037899,
                0.0026015956136644035,
                0.0012337768246630787,
            ],
            [
                0.015174172687951718,
                0.97839393429363053,
                0.0018388134808306877,
                0.0030155427417286719,
                0.0015775367958583292,
            ],
            [
                0.069454796359404478,
                0.35779439150689746,
                0.55872028625647774,
                0.0098106616388214593,
                0.0042198642383988721,
            ],
            [
                0.062285259691847776,
                0.32789592694620295,
                0.0054824285628708161,
                0.60069786275148518,
                0.0036385220475932852,
            ],
            [
                0.06276839595473413,
                0.36450959589301513,
                0.0050110887830986609,
                0.0077318593511357305,
                0.55997906001801634,
            ],
        ],
    ),
    "walls": (
        [1203, 3327, 50],
        [
            [0.91683355925214705, 0.078800119235409596, 0.004366321512443443],
            [0.028493099921910958, 0.96671840838662959, 0.0047884916914594121],
            [0.10505369558938923, 0.31862623714970928, 0.57632006726090157],
        ],
    ),
}


@pytest.mark.parametrize("var", list(CASES))
def test_per_variable_matrix_equals_sdcmicro_pram(var):
    counts, R = CASES[var]
    L = len(counts)
    ours = sdcmicro_invariant_matrix(counts, pd=0.8, alpha=0.5, uniforms=R_U[:L])
    np.testing.assert_allclose(ours, np.array(R), rtol=0, atol=1e-15)
