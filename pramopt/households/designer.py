"""Designing a household PRAM: the household part by the designer, the person part by one LP.

1. ``Ph``: :func:`pramopt.design` on the household-level table (records counted), with Π projected
   onto the household-level keys, at ``alpha_h = f * alpha`` for f along ``HOUSEHOLD_FRACTIONS``.
   A combination of household keys only has the same left-hand sides at record level as in this
   table, so it holds at ``alpha_h <= alpha``; the projections of the mixed combinations are a
   stand-in that leaves room for the person part (a smaller ``alpha_h`` asks less of ``Pp``).
2. The person part, with ``Ph`` fixed, meeting the full C1 at record level with the designer's
   margin: one matrix ``Pp`` for every household cell (:mod:`.person`: general and replacement),
   and one matrix ``Pp^(h)`` per household cell (:mod:`.conditional`), which can perturb persons
   where the released household values need it and so works at a larger ``alpha_h``.  The latter is
   tried down the ladder until it first succeeds; the ladder stops once the household part's own
   loss reaches the best loss found (a smaller ``alpha_h`` only perturbs the households more).
3. The record-level matrix ``Ph[h, h'] Pp^(h)[p, p']`` is checked by :mod:`pramopt.verify` over
   every released pair; of the verified candidates the smallest exact loss wins.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .._activity import activity
from ..errors import InvalidParameterError
from ..frequency.combinations import resolve_combinations
from ..frequency.table import FrequencyTable, cells_of
from ..params import DesignParams
from ..result import Stage, Status
from .conditional import solve_person_by_household
from .model import household_codes, household_keys, layout, person_diagonal
from .person import PERSON_MAX_CELLS, solve_person, solve_person_replacement
from .result import HouseholdDesign, household_loss, member_pairs, record_check

LOG = logging.getLogger("pramopt.design")

#: The parameters the household design sets itself for its household part.
_SET_PER_PART = frozenset(
    ("household", "household_keys", "alpha", "combinations", "combination_size", "domains")
)


class _LoggedStages(list):
    """The design's stages; each one appended is also said on the ``pramopt.design`` logger (the
    command line shows it), as the record-level design's stages are."""

    def append(self, stage: Stage) -> None:
        super().append(stage)
        detail = f" ({stage.detail})" if stage.detail else ""
        LOG.info("%s: %.1f s%s", stage.name, stage.seconds, detail)


__all__ = ["design_households", "HOUSEHOLD_FRACTIONS"]

#: alpha_h / alpha tried for the household part, largest first.
HOUSEHOLD_FRACTIONS = (1.0, 0.8, 0.6, 0.45, 0.3, 0.2, 0.1)
#: Margins inside alpha at which the person LP works (grown when the check fails).
_MARGINS = (1e-5, 1e-4, 1e-3)
#: Parameters a household design cannot combine with
#: (each forces structure on one matrix of records).
# min_diagonal: a record's diagonal is Ph[h, h] Pp[p, p], below each part's floor; not designed for
_REFUSED = (
    "fixed",
    "keep_cells",
    "workers",
    "invariant",
    "epsilon",
    "k",
    "max_changed_variables",
    "change_weights",
    "min_diagonal",
)


def _refuse(p: DesignParams, data, client, owner: str) -> pd.DataFrame:
    if isinstance(data, FrequencyTable) or not isinstance(data, pd.DataFrame):
        raise InvalidParameterError(
            f"The 'household' parameter of {owner} needs the microdata as a DataFrame (with the "
            "column "
            f"{p.household!r}), not {type(data).__name__}: a frequency table does not say who "
            "lives together."
        )
    for name in _REFUSED:
        if getattr(p, name) not in (None, False, ()):
            raise InvalidParameterError(
                f"The 'household' parameter of {owner} cannot be combined with "
                f"{name}={getattr(p, name)!r} "
                "(not supported for household designs)."
            )
    if client is not None:
        raise InvalidParameterError(
            f"The 'household' parameter of {owner} cannot be combined with a Dask client."
        )
    if p.alpha is None:
        raise InvalidParameterError(
            f"The 'household' parameter of {owner} needs alpha (C1); got alpha=None."
        )
    return data


def design_households(
    data, qi, params: DesignParams, design, progress=None, client=None, owner: str = "design"
) -> HouseholdDesign:
    """The household design of :func:`pramopt.design` (``household=`` given); ``design`` is that
    function, used for the household part."""
    df = _refuse(params, data, client, owner)
    assert params.household is not None and params.alpha is not None  # _refuse checked them
    t0 = time.perf_counter()
    hkeys, pkeys = household_keys(df, qi, params.household, params.household_keys, owner)
    lay = layout(df, qi, hkeys, params.domains, params.max_categories, owner)
    if lay.person_table.n_cells > PERSON_MAX_CELLS:
        raise InvalidParameterError(
            f"The person-level keys {list(pkeys)} of the 'household' design have "
            f"{lay.person_table.n_cells} cells "
            f"(at most {PERSON_MAX_CELLS}: the person part is dense); coarsen them or name more "
            "household_keys."
        )
    table = lay.table
    combos = resolve_combinations(table.qi, params.combination_size, params.combinations, owner)
    hcombos = _household_combinations(table, combos, lay.hpos)
    rec_cells = cells_of(df[list(table.qi)], table)
    hh, _ = household_codes(df, params.household, lay.h_of[rec_cells])
    same = member_pairs(
        hh,
        lay.h_of[rec_cells],
        lay.p_of[rec_cells],
        lay.household_table.n_cells,
        lay.person_table.n_cells,
    )
    _announce(lay)
    stages = _LoggedStages()
    stages.append(
        Stage(
            "households",
            time.perf_counter() - t0,
            0,
            f"{int(hh.max()) + 1} households; household-level {list(hkeys)}, person-level "
            f"{list(pkeys)}",
        )
    )
    base = {k: v for k, v in params.to_dict().items() if k not in _SET_PER_PART}
    alpha = float(params.alpha)
    floor = max(0.51, params.min_diagonal or 0.0)
    fractions = HOUSEHOLD_FRACTIONS if lay.ppos else (1.0,)
    keep = params.missing == "keep"
    best, tried, last, found = None, {}, None, set()
    seen: list[sp.csr_array] = []
    for frac in fractions:
        a_h = alpha * frac
        t1 = time.perf_counter()
        with activity(f"the household part at alpha {a_h:.4g}"):
            rh = design(
                lay.household_table, alpha=a_h, combinations=hcombos, progress=progress, **base
            )
        stages.append(
            Stage(
                f"households@{frac:g}",
                time.perf_counter() - t1,
                0,
                f"household part at alpha {a_h:.4g}: {rh.status.value}, loss {rh.loss:.4g}",
            )
        )
        if not rh.success:
            last = rh
            break  # a smaller alpha_h is harder still
        if best is not None and rh.loss >= best[0]:
            break  # the household part alone loses as much as the best design found
        if any((abs(rh.matrix - m) > 0).nnz == 0 for m in seen):
            continue  # the same household part (P = I already meets the smaller alpha): nothing new
        seen.append(rh.matrix)
        kinds = ("general", "replacement") + (() if "by-household" in found else ("by-household",))
        for kind in kinds:
            with activity(f"the person part ({kind}) at alpha_h {a_h:.4g}", len(_MARGINS)) as act:
                hit = _person_at_margins(
                    kind, frac, lay, rh, combos, alpha, floor, keep, params, same, stages, act
                )
            if hit is None:
                continue
            loss, indep, Pp, rep, n_cols = hit
            found.add(kind)
            tried[f"{kind}@{frac:g}"] = loss
            if best is None or loss < best[0]:
                best = (loss, indep, frac, rh, Pp, rep, n_cols, kind)
    hd = dict(households=int(hh.max()) + 1, tried_fractions=tried)
    out: dict[str, Any] = dict(
        household=params.household,
        alpha=alpha,
        combinations=tuple(tuple(table.qi[j] for j in c) for c in combos),
        params=params.to_dict(),
        layout=lay,
        stages=stages,
    )
    if best is None:
        return _not_found(last if last is not None else rh, lay, hd, out)
    return _chosen(best, alpha, lay, tried, hd, out)


def _announce(lay) -> None:
    """Say, before the work, how much of it the household design may do (it can take minutes)."""
    LOG.info(
        "the household design: up to %d household parts (%d household cells), each with up to 3 "
        "person parts (%d person cells) tried at up to %d margins; this can take minutes",
        len(HOUSEHOLD_FRACTIONS if lay.ppos else (1.0,)),
        lay.household_table.n_cells,
        lay.person_table.n_cells,
        len(_MARGINS),
        extra={"announce": True},
    )


def _person_at_margins(
    kind, frac, lay, rh, combos, alpha, floor, keep, params, same, stages, act=None
):
    """The person part of ``kind`` under the household part ``rh``, at the first margin where
    it meets C1 at record level: ``(loss, indep, Pp, rep, n_cols)``, or None.  Appends a stage
    per try."""
    for margin in _MARGINS:
        if act is not None and margin != _MARGINS[0]:
            act.advance()
        t1 = time.perf_counter()
        a_s = alpha * (1 - margin)
        if kind == "general":
            Pp = solve_person(lay, rh.matrix, combos, a_s, floor, keep, solver=params.solver)
        elif kind == "replacement":
            Pp = solve_person_replacement(
                lay,
                rh.matrix,
                combos,
                a_s,
                max(1e-3, params.min_diagonal or 0.0),
                keep,
                solver=params.solver,
            )
        else:
            Pp = solve_person_by_household(
                lay,
                rh.matrix,
                combos,
                a_s,
                max(0.15, params.min_diagonal or 0.0),
                keep,
                solver=params.solver,
            )
        name = f"person {kind}@{frac:g}"
        if Pp is None:
            stages.append(Stage(name, time.perf_counter() - t1, 0, "infeasible"))
            return None
        rep, R, cols = record_check(lay, rh.matrix, Pp, combos)
        if rep.max_risk <= alpha:
            try:
                loss, indep = household_loss(lay, rh.matrix, Pp, same)
            except np.linalg.LinAlgError:  # a singular person part has no unbiased estimator
                stages.append(Stage(name, time.perf_counter() - t1, 0, "singular"))
                return None
            stages.append(
                Stage(
                    name,
                    time.perf_counter() - t1,
                    0,
                    f"record-level max risk {rep.max_risk:.6g} "
                    f"at margin {margin:g}, loss {loss:.4g}",
                )
            )
            return loss, indep, Pp, rep, R.shape[1]
        stages.append(
            Stage(
                name,
                time.perf_counter() - t1,
                0,
                f"record-level max risk {rep.max_risk:.6g} > alpha at margin {margin:g}",
            )
        )
        if kind == "by-household" and not rep.max_risk <= alpha * 1.01:
            # far above alpha: a larger margin does not help (and each try is a large LP)
            return None
    return None


def _not_found(rh, lay, hd: dict, out: dict) -> HouseholdDesign:
    """The infeasible result: no household part, or no person part under any of them."""
    why = (
        f"the household part failed at alpha {rh.alpha:g} ({rh.message})"
        if not rh.success
        else "no person part met C1 at record level with any household part tried"
    )
    return HouseholdDesign(
        household_design=rh,
        person_matrix=np.eye(lay.person_table.n_cells),
        status=Status.INFEASIBLE,
        message=f"No household design found: {why}.",
        max_risk=float("nan"),
        loss=float("nan"),
        expected_changes=float("nan"),
        alpha_household=rh.alpha,
        details=hd,
        **out,
    )


def _household_combinations(table: FrequencyTable, combos, hpos) -> list:
    """Π projected onto the household-level keys (each projection once, empty ones left out)."""
    hpos = set(hpos)
    hcombos = []
    for pi in combos:
        c = [table.qi[j] for j in pi if j in hpos]
        if c and c not in hcombos:
            hcombos.append(c)
    return hcombos


def _chosen(best, alpha: float, lay, tried: dict, hd: dict, out: dict) -> HouseholdDesign:
    """The household design of the best verified candidate ``best``."""
    table = lay.table
    loss, indep, frac, rh, Pp, rep, kr, kind = best
    Ph = rh.matrix
    diag = Ph.diagonal()[lay.h_of] * person_diagonal(Pp, lay.h_of, lay.p_of)
    changes = float(table.counts @ (1.0 - diag))
    status = Status.SUCCESS if rep.max_risk <= alpha and rh.success else Status.UNVERIFIED
    what = (
        "one person matrix per household cell"
        if kind == "by-household"
        else f"{kind} person matrix"
    )
    msg = (
        f"Household-level keys drawn once per household (household part at alpha_h = {frac:g} "
        "alpha), "
        f"person-level keys per person ({what}; tried: "
        f"{', '.join(f'{k} loss {v:.4g}' for k, v in tried.items())}); "
        "full C1 verified on the record-level matrix."
    )
    hd.update(loss_independent=indep, released_cells=kr, fraction=frac, person_structure=kind)
    return HouseholdDesign(
        household_design=rh,
        person_matrix=Pp,
        status=status,
        message=msg,
        max_risk=float(rep.max_risk),
        loss=loss,
        expected_changes=changes,
        alpha_household=alpha * frac,
        details=hd,
        **out,
    )
