"""sdcMicro's ``pram()`` matrices calibrated to C1 over the product space, as released.

The baseline a per-variable design is compared with: sdcMicro's own algorithm
(:func:`pramopt.baselines.product_space.sdcmicro_matrices`, one seeded random diagonal per
variable), its two knobs tuned so that the mechanism *as released* (every variable drawn
independently, over the whole product space) meets C1, checked by :mod:`.check`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..baselines.product_space import sdcmicro_matrices
from ..frequency.table import FrequencyTable
from .check import check_product_c1
from .model import loss_value

__all__ = ["SdcMicroCalibration", "calibrate_sdcmicro_product"]

#: sdcMicro's ``pd`` (the smallest diagonal entry of its random matrix) tried in turn.
PD_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95)


@dataclass(frozen=True)
class SdcMicroCalibration:
    """The calibrated sdcMicro matrices: knobs, matrices, verified risk and exact loss."""

    pd: float
    alpha_pram: float
    matrices: tuple
    max_risk: float
    loss: float
    expected_changes: float


def calibrate_sdcmicro_product(
    table: FrequencyTable,
    combinations,
    alpha: float,
    pd_grid: Sequence[float] = PD_GRID,
    seed: int = 0,
    steps: int = 30,
) -> SdcMicroCalibration | None:
    """For each ``pd`` the smallest perturbation ``alpha_pram`` that meets C1 (bisection; the
    risk falls as it grows), and of these the pair of smallest exact loss; None when no ``pd``
    meets C1 even at ``alpha_pram = 1``."""
    codes, counts = table.codes, np.asarray(table.counts, dtype=float)

    def holds(mats) -> bool:
        return check_product_c1(codes, counts, mats, combinations).holds(alpha)

    best: SdcMicroCalibration | None = None
    for pd in pd_grid:
        if not holds(sdcmicro_matrices(table, pd, 1.0, seed)):
            continue
        lo, hi = 0.0, 1.0
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            if holds(sdcmicro_matrices(table, pd, mid, seed)):
                hi = mid
            else:
                lo = mid
        mats = sdcmicro_matrices(table, pd, hi, seed)
        loss = loss_value(codes, counts, mats)
        if best is None or loss < best.loss:
            stay = np.ones(len(counts))
            for v, M in enumerate(mats):
                stay *= np.diag(M)[codes[:, v]]
            best = SdcMicroCalibration(
                pd=float(pd),
                alpha_pram=float(hi),
                matrices=tuple(mats),
                max_risk=check_product_c1(codes, counts, mats, combinations).max_risk,
                loss=float(loss),
                expected_changes=float(counts @ (1.0 - stay)),
            )
    return best
