"""The solver backends and what each can do, as data.

Every backend is one :class:`BackendInfo` in :data:`BACKENDS`, keyed by the name ``solver=``
takes, and one module of this package that implements its capabilities:

* ``installed(name) -> bool``: whether the libraries it needs load here (imports them lazily);
* with ``lp``: ``load(program, name)`` (a :class:`~pramopt.optimize.program.LinearProgram` held
  for re-solves, see :class:`pramopt.optimize.backends.Loaded`) and ``solve_lp(c, A_ub, b_ub,
  A_eq, b_eq, bounds, *, name, method, options) -> LPResult`` (one program given as matrices);
* with ``qp``: ``solve_qp(program, cost, hdiag, lo, hi, **options) -> LPSolution``.

``duals``: the LP solves return duals (a loaded program's ``duals()``, a one-shot LP's
``marginals``); ``warm_start``: a loaded program re-solves from its last basis.  A name that is
not registered but that cvxpy can load is a cvxpy backend with the capabilities of the others.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace

__all__ = [
    "BackendInfo",
    "BACKENDS",
    "CAPABILITIES",
    "DEFAULT_LP",
    "DEFAULT_QP",
    "register",
    "backend",
    "supports",
    "installed",
    "implementation",
]

#: The capabilities :func:`supports` answers for.
CAPABILITIES = ("lp", "qp", "duals", "warm_start")


@dataclass(frozen=True)
class BackendInfo:
    """A backend: its ``solver=`` name, its capabilities and the module of this package that
    implements them (see the module docstring)."""

    name: str
    lp: bool
    qp: bool
    duals: bool
    warm_start: bool
    module: str
    description: str = ""


BACKENDS: dict[str, BackendInfo] = {}


def register(info: BackendInfo) -> BackendInfo:
    """Add ``info`` to :data:`BACKENDS` under its (upper-case) name."""
    if info.name != info.name.upper():
        raise ValueError(f"a backend's name is upper case; got {info.name!r}")
    BACKENDS[info.name] = info
    return info


_CVXPY = BackendInfo(
    "CVXPY",
    lp=True,
    qp=False,
    duals=False,
    warm_start=False,
    module="cvx",
    description="an LP solver called through cvxpy",
)

register(
    BackendInfo(
        "HIGHS",
        lp=True,
        qp=False,
        duals=True,
        warm_start=True,
        module="highs",
        description="HiGHS: highspy for loaded programs, scipy's linprog for one-shot LPs",
    )
)
for _name in ("CLARABEL", "ECOS", "SCS"):
    register(replace(_CVXPY, name=_name, description=f"{_name} through cvxpy"))
register(
    BackendInfo(
        "CLARABEL_QP",
        lp=False,
        qp=True,
        duals=True,
        warm_start=False,
        module="clarabel_qp",
        description="convex QPs over a loaded program's rows, by Clarabel directly",
    )
)

#: The backend of one-shot LPs when ``solver=None`` (the first of :func:`solver_names`' chain).
DEFAULT_LP = "HIGHS"
#: The backend of QPs when none is named.
DEFAULT_QP = "CLARABEL_QP"


def backend(solver: str | None, default: str = DEFAULT_LP) -> BackendInfo:
    """The backend ``solver=`` names (``None``: ``default``); an unregistered name is taken to be a
    cvxpy solver."""
    name = default if solver is None else str(solver).upper()
    info = BACKENDS.get(name)
    return info if info is not None else replace(_CVXPY, name=name)


def supports(solver: str | None, capability: str) -> bool:
    """Whether the backend ``solver=`` starts with can do ``capability`` (one of
    :data:`CAPABILITIES`); ``solver=None`` is the default chain, which starts with HiGHS."""
    if capability not in CAPABILITIES:
        raise ValueError(
            f"The 'capability' parameter of supports must be one of {', '.join(CAPABILITIES)}; "
            f"got {capability!r}."
        )
    return bool(getattr(backend(solver), capability))


def implementation(info: BackendInfo):
    """The module of this package that implements ``info`` (imported here; it imports its solver
    libraries only when it solves)."""
    return importlib.import_module(f"{__package__}.{info.module}")


def installed(solver: str | None) -> bool:
    """Whether the backend ``solver=`` names can run here (its libraries load)."""
    info = backend(solver)
    return bool(implementation(info).installed(info.name))
