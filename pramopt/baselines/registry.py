"""The closed-form baseline families, each registered once under the one name pramopt shows.

:data:`BASELINES` maps a name to its :class:`BaselineFamily`: the calibration that tunes it to
just meet C1, the matrix it makes from the tuned parameters, the names of those parameters, the
options the calibration takes and one line for help texts.  Every reader goes through it:
:func:`baseline`, :func:`calibrate_all`, :func:`pramopt.frontier` (and a spec's ``[frontier]
baselines``) and the ``pramopt baseline`` command.  A result's ``method`` and its
``params["family"]`` are the registered name.

Old spellings that scripts, specs and saved design files may hold (:data:`ALIASES`: ``"rr"``,
``"invariant"``) are read as the name they stand for, never written or shown: every reader
turns a name into the registered one through :func:`canonical_name`, which says so (an
:class:`OldNameWarning` in Python, a note on stderr from the commands, both from
:func:`old_name_note`).
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType, MappingProxyType

import numpy as np

from .._validation import InvalidParameterError, check_real
from ..frequency.table import FrequencyTable
from ..params import DesignParams
from ..result import DesignResult
from .calibrate import (
    calibrate_ifpr,
    calibrate_retention,
    calibrate_sdcmicro,
    ifpr_on_cells,
    retention_on_cells,
    sdcmicro_on_cells,
)

__all__ = [
    "ALIASES",
    "BASELINES",
    "BaselineFamily",
    "OldNameWarning",
    "baseline",
    "calibrate_all",
    "canonical_name",
    "family_named",
    "old_name_note",
    "register",
]


@dataclass(frozen=True)
class BaselineFamily:
    """One closed-form family of PRAM matrices and its calibration to C1.

    Attributes
    ----------
    name : str
        The one name users read: the result's ``method`` and ``params["family"]``, the
        command's argument, the frontier's row.
    calibrate : callable
        ``calibrate(table, combinations, alpha, **options) -> DesignResult``: the member of the
        family that just meets C1 at ``alpha``, finished like every design (its ``method`` is
        ``name``, its ``details`` hold the tuned parameters).
    matrix : callable
        ``matrix(table, details) -> ndarray``: the K x K matrix on the present cells that the
        parameters in a result's ``details`` give (the calibrated matrix again).
    tuned : tuple of str
        The keys of ``details`` that the calibration tunes (shown on the frontier).
    options : tuple of str
        The keyword options ``calibrate`` takes (``seed`` among them when it draws at random).
    description : str
        One line for help texts.
    """

    name: str
    calibrate: Callable[..., DesignResult]
    matrix: Callable[[FrequencyTable, Mapping], np.ndarray]
    tuned: tuple[str, ...]
    options: tuple[str, ...]
    description: str

    def run(
        self, table: FrequencyTable, combinations, alpha, *, seed: int = 0, **options
    ) -> DesignResult:
        """The calibration with ``options``; ``seed`` is passed only to a family that takes it."""
        if "seed" in self.options:
            options.setdefault("seed", seed)
        return self.calibrate(table, combinations, alpha, **options)


_REGISTRY: dict[str, BaselineFamily] = {}
#: Every family by its name, in registration order (the order of the frontier's rows).
BASELINES: Mapping[str, BaselineFamily] = MappingProxyType(_REGISTRY)
#: Old spellings still read on input -> the registered name (never written or shown).
ALIASES: Mapping[str, str] = MappingProxyType({"rr": "retention", "invariant": "sdcmicro"})


def register(family: BaselineFamily) -> BaselineFamily:
    """Add a family under its name; a name taken (or an old spelling) is refused."""
    if not isinstance(family, BaselineFamily):
        raise InvalidParameterError(
            "The 'family' parameter of register must be a BaselineFamily; "
            f"got {type(family).__name__}."
        )
    if family.name in _REGISTRY or family.name in ALIASES:
        raise InvalidParameterError(
            f"The 'family' parameter of register names {family.name!r}, which is taken; "
            f"taken: {sorted([*_REGISTRY, *ALIASES])!r}."
        )
    if not family.description.strip() or "\n" in family.description:
        raise InvalidParameterError(
            f"The 'family' parameter of register must have a one-line description; "
            f"got {family.description!r} for {family.name!r}."
        )
    _REGISTRY[family.name] = family
    return family


class OldNameWarning(FutureWarning):
    """An old spelling of a baseline family's name was given: the family it stands for runs,
    under its registered name.  A FutureWarning, so that scripts show it by default."""


def old_name_note(old: str) -> str:
    """The sentence that says what the old spelling ``old`` (a key of :data:`ALIASES`) runs."""
    name = ALIASES[old]
    return (
        f"{old!r} is an old name of the baseline family {name!r}, which it runs; "
        f"write {name!r} (the old name will be removed)."
    )


def _first_caller_outside() -> int:
    """The ``stacklevel`` of the first frame outside pramopt, counted from the caller of this
    function: a warning then points at the line of the user's script that gave the name."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(root):
        frame, level = frame.f_back, level + 1
    return level


def canonical_name(
    name, owner: str = "baseline", parameter: str = "family", *, warn: bool = True
) -> str:
    """The registered name that ``name`` is, or that the old spelling ``name`` stands for.

    Parameters
    ----------
    name : str
        A name of :data:`BASELINES` or a key of :data:`ALIASES`.
    owner, parameter : str
        The function and parameter named in the error.
    warn : bool
        Issue an :class:`OldNameWarning` for an old spelling (a command says it in its own
        words instead, with :func:`old_name_note`).

    Raises
    ------
    InvalidParameterError
        When ``name`` is neither, naming the registered names.
    """
    if isinstance(name, str) and name in ALIASES:
        if warn:
            warnings.warn(old_name_note(name), OldNameWarning, stacklevel=_first_caller_outside())
        return ALIASES[name]
    if not isinstance(name, str) or name not in _REGISTRY:
        raise InvalidParameterError(
            f"The {parameter!r} parameter of {owner} must be one of {list(_REGISTRY)!r}; "
            f"got {name!r}."
        )
    return name


def family_named(name, owner: str = "baseline", parameter: str = "family") -> BaselineFamily:
    """The family registered as ``name`` or as the old spelling ``name`` stands for (with an
    :class:`OldNameWarning`, :func:`canonical_name`)."""
    return _REGISTRY[canonical_name(name, owner, parameter)]


def calibrate_all(table: FrequencyTable, combinations, alpha, *, seed=0) -> dict[str, DesignResult]:
    """Every registered family calibrated on one data set, by name (:data:`BASELINES`)."""
    return {name: fam.run(table, combinations, alpha, seed=seed) for name, fam in BASELINES.items()}


def baseline(
    data,
    qi=None,
    family: str = "retention",
    alpha: float | None = DesignParams.alpha,
    *,
    combinations=None,
    combination_size: int = DesignParams.combination_size,
    **options,
) -> DesignResult:
    """A closed-form family calibrated to just meet C1 at ``alpha`` on a data set.

    Parameters
    ----------
    data : pandas.DataFrame or FrequencyTable
        Microdata (then ``qi`` is required) or its frequency table.
    qi : list of str, optional
        Identifying variables.
    family : str
        A name of :data:`BASELINES`: ``"retention"`` (retention-replacement,
        :func:`~pramopt.baselines.calibrate_retention`; ``per_attribute=True`` for one ρ per
        variable), ``"retention-per-attribute"``, ``"ifpr"`` (:func:`calibrate_ifpr`) or
        ``"sdcmicro"`` (sdcMicro's per-variable PRAM restricted to the present cells, rows
        renormalised, :func:`calibrate_sdcmicro`; not invariant).  The old spellings ``"rr"``
        and ``"invariant"`` run ``"retention"`` and ``"sdcmicro"``, with an
        :class:`OldNameWarning`; the result names the family as registered.
    alpha : float in (0, 1)
    combinations, combination_size
        Π, as for :func:`pramopt.design`.
    **options
        The family's own options (:attr:`BaselineFamily.options`: ``per_attribute``, ``seed``,
        ``n_grid``, ``pd_grid``, ``tol``, ``passes``).

    Returns
    -------
    DesignResult
        Verified by the independent C1 check; ``details`` holds the tuned parameters.
    """
    from ..frequency.combinations import resolve_combinations
    from ..frequency.table import frequency_table

    owner = "baseline"
    fam = family_named(family, owner)
    alpha = check_real(alpha, "alpha", owner, low=0.0, high=1.0)
    table = data if isinstance(data, FrequencyTable) else frequency_table(data, qi, owner=owner)
    combos = resolve_combinations(table.qi, combination_size, combinations, owner)
    other = sorted(set(options) - set(fam.options))
    if other:
        raise InvalidParameterError(
            f"The options of baseline {fam.name!r} are {list(fam.options)!r}; got {other!r}."
        )
    return fam.calibrate(table, combos, alpha, **options)


def _retention_matrix(table: FrequencyTable, details: Mapping) -> np.ndarray:
    return retention_on_cells(table, details["rho"])


def _ifpr_matrix(table: FrequencyTable, details: Mapping) -> np.ndarray:
    return ifpr_on_cells(table, details["xi"])


def _sdcmicro_matrix(table: FrequencyTable, details: Mapping) -> np.ndarray:
    return sdcmicro_on_cells(table, details["pd"], details["alpha"], details["seed"])


register(
    BaselineFamily(
        "retention",
        calibrate_retention,
        _retention_matrix,
        ("rho",),
        ("per_attribute", "tol", "passes"),
        "retention-replacement (Ikarashi et al.), one ρ for every variable",
    )
)
register(
    BaselineFamily(
        "retention-per-attribute",
        functools.partial(calibrate_retention, per_attribute=True),
        _retention_matrix,
        ("rho",),
        ("per_attribute", "tol", "passes"),
        "retention-replacement, one ρ per variable",
    )
)
register(
    BaselineFamily(
        "ifpr",
        calibrate_ifpr,
        _ifpr_matrix,
        ("xi",),
        ("n_grid", "tol"),
        "inverse-frequency PRAM of Ghatak & Roy on the present cells",
    )
)
register(
    BaselineFamily(
        "sdcmicro",
        calibrate_sdcmicro,
        _sdcmicro_matrix,
        ("pd", "alpha"),
        ("pd_grid", "seed", "tol"),
        "sdcMicro's PRAM per variable, restricted (not invariant)",
    )
)
