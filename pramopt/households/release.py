"""Releasing with a household design: household-level values once per household, person-level per
person.

Every release re-checks the record-level matrix against the full C1 (:func:`.result.record_check`,
the independent verifier) and refuses data whose cells or counts are not the design's, or whose
household-level keys differ within a household.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._plain import plain
from .._validation import ROW_SUM_TOL
from ..errors import DesignMismatchError, InvalidParameterError
from ..frequency.table import FrequencyTable, cell_index, check_qi, count_rows, record_codes
from ..publish.file_release import FileRelease, release_in_memory
from ..publish.frame import check_same_table, released_column
from ..publish.sampling import Sampler, UniformStream, seed_entropy
from .model import household_codes, person_index
from .result import HouseholdDesign

__all__ = ["release_households", "release_households_file", "check_releasable", "release_note"]


def check_releasable(result: HouseholdDesign) -> None:
    """Refuse a household design that did not succeed, is not row-stochastic or fails C1 again."""
    if not result.success:
        raise DesignMismatchError(
            f"The household design's status is {result.status.value!r}: it did not pass the "
            "C1 verification, so it is not safe to release with."
        )
    for name, P in (("household", result.household_matrix), ("person", result.person_matrix)):
        rows = np.asarray(sp.csr_array(P).sum(axis=1)).ravel()
        if not np.all(np.abs(rows - 1.0) <= ROW_SUM_TOL) or (sp.csr_array(P).data < 0).any():
            raise DesignMismatchError(
                f"The design's {name} matrix is not row-stochastic; refusing to release with it."
            )
    rep = result.check()
    if not rep.max_risk <= result.alpha:
        raise DesignMismatchError(
            "The household design fails C1 when checked again at record level (max risk "
            f"{rep.max_risk:.6g} > alpha "
            f"{result.alpha:g}); refusing to release with it."
        )


def _codes(df: pd.DataFrame, table: FrequencyTable) -> np.ndarray:
    """Each record's codes under the design's categories (error for a value it does not know)."""
    domains = {q: list(c) for q, c in zip(table.qi, table.categories)}
    try:
        codes, _ = record_codes(
            df, list(table.qi), domains, max(len(c) for c in table.categories) + 1, "release"
        )
    except InvalidParameterError as e:
        raise DesignMismatchError(f"The data do not match the design: {e}") from None
    return codes


def release_households(df: pd.DataFrame, result: HouseholdDesign, seed=None) -> pd.DataFrame:
    """Perturb the identifying columns of ``df`` with a household design.

    Each household's household-level values are drawn once from its cell's row of ``Ph`` and
    written to every member; each record's person-level values are drawn from its row of ``Pp``.
    Every other column is returned untouched.

    Parameters
    ----------
    df : pandas.DataFrame
        The microdata the design was made for, with its household column.
    result : HouseholdDesign
    seed : int or numpy.random.Generator, optional
        Seed for a reproducible draw (default: from :mod:`secrets`).  Households take their
        uniforms from one stream (by order of first appearance), records from another (by position).
    """
    check_releasable(result)
    lay = result.layout
    table = lay.table
    check_qi(df, table.qi, "release")
    if result.household not in df.columns:
        raise DesignMismatchError(
            f"The data have no household column {result.household!r}, which the design needs."
        )
    codes = _codes(df, table)
    hh, _ = pd.factorize(df[result.household], sort=False)
    hh = np.asarray(hh, dtype=np.int64)
    # first: a household-level key that differs within a household
    # (a clearer error than other counts)
    hkey = pd.DataFrame(codes[:, list(lay.hpos)]).groupby(hh).nunique().to_numpy()
    differ = np.flatnonzero((hkey > 1).any(axis=1))
    if differ.size:
        g = int(differ[0])
        hid = df[result.household].iloc[int(np.flatnonzero(hh == g)[0])]
        members = codes[hh == g][:, list(lay.hpos)]
        var = next(
            lay.household_keys[j] for j in range(len(lay.hpos)) if len(np.unique(members[:, j])) > 1
        )
        raise DesignMismatchError(
            f"The household-level key {var!r} differs within household {result.household} = "
            f"{plain(hid)!r} "
            f"({differ.size} household(s) in all): a household design copies one value to every "
            "member."
        )
    cells, counts = count_rows(codes, [len(c) for c in table.categories])
    check_same_table(
        FrequencyTable(qi=table.qi, categories=table.categories, codes=cells, counts=counts), table
    )
    rec = cell_index(table, codes)
    h_rec, p_rec = lay.h_of[rec], lay.p_of[rec]
    hh, h_of_household = household_codes(df, result.household, h_rec)
    entropy = seed_entropy(seed, "release")
    # two streams from one seed: households and persons
    e_h, e_p = (
        int.from_bytes(
            np.random.SeedSequence(entropy, spawn_key=(k,)).generate_state(4).tobytes(), "little"
        )
        for k in (0, 1)
    )
    new_h = Sampler(result.household_matrix).draw(
        h_of_household, UniformStream(e_h)(0, h_of_household.size)
    )[hh]
    # a person matrix per household cell: the row of the record's original household cell
    new_p = Sampler(result.person_matrix).draw(
        person_index(result.person_matrix, h_rec, p_rec), UniformStream(e_p)(0, len(df))
    )
    out = df.copy()
    parts = [(lay.household_table, lay.hpos, new_h), (lay.person_table, lay.ppos, new_p)]
    for sub, _pos, new in parts:
        for j, q in enumerate(sub.qi):
            out[q] = released_column(df, q, sub.categories[j], sub.codes[new, j])
    return out


def release_households_file(
    src, dst, result: HouseholdDesign, seed, dialect, owner: str
) -> FileRelease:
    """:func:`pramopt.release_file` with a household design: in memory (households need every
    member at once), every non-identifying field written back as read."""
    return release_in_memory(
        src, dst, result, seed, dialect, owner, check=check_releasable, release=release_households
    )


def release_note(result: HouseholdDesign) -> str:
    """What ``pramopt release`` adds to its summary: the keys drawn once per household."""
    keys = ", ".join(map(str, result.household_keys))
    return f"; household-level keys {keys} once per household of {result.household!r}"
