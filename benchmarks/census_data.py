"""Seeded synthetic microdata shaped like a census or labour-force sample.

Eight identifying variables, in the order the keys are added (``census_data(n, keys=k)`` uses the
first ``k``):

==============  ==========  ==========================================================
variable        categories  drawn from
==============  ==========  ==========================================================
age             18          five-year bands, a population pyramid (fewer old people)
sex             2           about 49/51, more women among the oldest
region          40          Zipf-sized regions (the largest holds ~20%, the smallest ~0.5%)
marital         5           single / married / divorced / widowed / partnership, by age and sex
education       8           by age (the young are still in school, the old had less) and region
employment      4           employed / unemployed / inactive / retired, by age, sex, education
citizenship     3           national / EU / other, by region (cities hold more foreigners) and age
household_size  6           1..6+, by marital status and age
==============  ==========  ==========================================================

The dependencies make the joint distribution lumpy as in real data: most combinations of five or
more keys are rare or unique while a few are large.  Every draw comes from one
``numpy.random.Generator`` seeded with ``seed``, variable after variable, so a sample is fully
determined by ``(n, seed)`` and its first ``k`` columns do not depend on how many keys are asked for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["CENSUS_KEYS", "census_data", "register_data"]

CENSUS_KEYS = (
    "age",
    "sex",
    "region",
    "marital",
    "education",
    "employment",
    "citizenship",
    "household_size",
)


def _draw(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One category per row of ``probs`` (rows need not be normalised)."""
    p = probs / probs.sum(axis=1, keepdims=True)
    u = rng.random(p.shape[0])
    return np.minimum((np.cumsum(p, axis=1) < u[:, None]).sum(axis=1), p.shape[1] - 1)


def census_data(n: int, keys: int = 8, seed: int = 0) -> pd.DataFrame:
    """``n`` records with the first ``keys`` (4 to 8) identifying variables of the table above.

    Values are small integer codes (``int16``).
    """
    if not 1 <= keys <= len(CENSUS_KEYS):
        raise ValueError(f"keys must be in 1..{len(CENSUS_KEYS)}; got {keys}")
    rng = np.random.default_rng(seed)
    # age: 18 five-year bands with a gently shrinking pyramid and a steep old-age tail
    band = np.arange(18)
    age = rng.choice(
        18, size=n, p=_norm(np.where(band < 13, 1.0 - 0.015 * band, 0.8 * 0.62 ** (band - 12)))
    )
    # sex: women outlive men
    p_f = 0.49 + 0.02 * np.clip(age - 12, 0, None)
    sex = (rng.random(n) < p_f).astype(np.int16)
    # region: Zipf-sized
    r = np.arange(1, 41)
    region = rng.choice(40, size=n, p=_norm(1.0 / r**1.05))
    # marital: single, married, divorced, widowed, registered partnership
    a = age[:, None].astype(float)
    married = np.clip((a - 3) / 4, 0, 1) * np.where(a > 13, 0.8, 1.0)
    m_probs = np.hstack(
        [
            np.where(a < 4, 1.0, 0.25 + 0.6 * np.exp(-(a - 4) / 2)),  # single
            2.2 * married,  # married
            0.35 * np.clip((a - 6) / 6, 0, 1),  # divorced
            0.02 + 0.9 * np.clip((a - 11) / 6, 0, 1) * (1 + sex[:, None]),  # widowed, more women
            0.06 * np.clip((a - 4) / 4, 0, 1) * np.exp(-a / 14),  # partnership
        ]
    )
    marital = _draw(rng, m_probs)
    # education: 8 levels; children are capped, older cohorts and rural regions have less
    level = np.arange(8)[None, :].astype(float)
    urban = (region < 5)[:, None]
    centre = np.where(a < 3, 0.6 * a, 3.2 + urban * 0.9 - 0.08 * np.clip(a - 8, 0, None))
    e_probs = np.exp(-0.5 * ((level - centre) / 1.3) ** 2) + 0.01
    e_probs = np.where(level > np.maximum(1, a * 1.5), 1e-4, e_probs)
    education = _draw(rng, e_probs)
    cols = {"age": age, "sex": sex, "region": region, "marital": marital, "education": education}
    if keys > 5:
        # employment: employed, unemployed, inactive, retired
        e = education[:, None].astype(float)
        working = (a >= 3) & (a < 13)
        emp = np.hstack(
            [
                np.where(working, 2.0 + 0.3 * e - 0.6 * sex[:, None], 0.05),
                np.where(working, 0.3 + 0.1 * (7 - e), 0.01),
                np.where(a < 3, 5.0, 0.8 + 0.4 * sex[:, None]),
                np.where(a >= 12, 1.5 * (a - 11), 0.01),
            ]
        )
        cols["employment"] = _draw(rng, emp)
    if keys > 6:
        foreign = 0.04 + 0.10 * (region < 3) + 0.04 * ((age >= 4) & (age < 9))
        c_probs = np.column_stack([1.0 - foreign, foreign * 0.55, foreign * 0.45])
        cols["citizenship"] = _draw(rng, c_probs)
    if keys > 7:
        size = np.arange(6)[None, :].astype(float)
        mar = marital[:, None]
        centre = np.where(mar == 1, 2.2, np.where(a < 4, 2.8, np.where(a > 12, 0.3, 0.8)))
        centre = centre + 0.4 * (a < 4)
        h_probs = np.exp(-0.5 * ((size - centre) / 1.1) ** 2) + 0.005
        cols["household_size"] = _draw(rng, h_probs)
    names = CENSUS_KEYS[:keys]
    return pd.DataFrame({k: np.asarray(cols[k], dtype=np.int16) for k in names})


def register_data(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    """A register extract with four keys of 182 x 2 x 60 x 4 categories (``n`` records).

    ``occupation`` (182 codes, Zipf-sized), ``sex``, ``municipality`` (60, Zipf-sized) and
    ``contract`` (4, skewed): at 4,000 records nearly every present cell is unique.
    """
    rng = np.random.default_rng(seed)
    occ = rng.choice(182, size=n, p=_norm(1.0 / np.arange(1, 183) ** 0.7))
    sex = rng.integers(0, 2, size=n)
    mun = rng.choice(60, size=n, p=_norm(1.0 / np.arange(1, 61) ** 0.6))
    contract = rng.choice(4, size=n, p=[0.6, 0.2, 0.15, 0.05])
    return pd.DataFrame(
        {"occupation": occ, "sex": sex, "municipality": mun, "contract": contract}
    ).astype(np.int16)


def _norm(p) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    return p / p.sum()
