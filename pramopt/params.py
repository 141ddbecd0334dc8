"""The designer's parameters, declared once.

Each parameter of :func:`pramopt.design` is one field of :class:`DesignParams`, with its
default, its check and its documentation.  Everything else is derived from these fields:

* the ``Parameters`` section of :func:`pramopt.design`'s docstring and its signature;
* the flags of ``pramopt design`` (:mod:`pramopt.cli.design`: one flag per field whose
  ``cli`` metadata holds its argparse options; ``"type"`` names a converter there);
* the keys a design spec's ``[design]`` table may hold (:data:`SPEC_KEYS`);
* ``DesignResult.params``, which holds the validated values, so that
  ``pramopt.design(table, **result.params.to_dict())`` makes the same design again.

A new parameter is one new field here (and its use in the optimiser).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from ._validation import check_choice, check_int, check_real, fail
from .frequency.table import MAX_CATEGORIES
from .optimize.strategies import STRUCTURES

__all__ = [
    "DesignParams",
    "SPEC_KEYS",
    "parameters_doc",
    "signature",
    "GAMMA_LADDER",
    "BELOW_HALF_FLOORS",
    "BELOW_HALF_MAX_CONDITION",
    "DENSE_SUPPORT_MAX",
    "PRIVACY_MAX_CELLS",
]

#: Floors tried in turn when the reduced problem is infeasible at the requested gamma.  They
#: stay above 1/2: a strictly diagonally dominant P is invertible, which the estimator (4) and
#: the loss need (a minimum-changes solution without a floor can be singular).
GAMMA_LADDER = (0.95, 0.9, 0.8, 0.7, 0.6, 0.51)
#: Floors below 1/2 a general design under ``max_changed_variables`` may take, in turn, where the
#: flow relaxation proves that no design meets C1 with every diagonal entry >= 0.51 (no other
#: structure honours the restriction).  P is then not invertible by its form: each design's
#: invertibility is checked numerically (:data:`BELOW_HALF_MAX_CONDITION`).
BELOW_HALF_FLOORS = (0.45, 0.4, 0.3, 0.2)
#: A design below the 1/2 floor is returned only when its condition number is finite and at
#: most this (a design at a floor >= 0.51 has an infinity-norm condition number of at most 50).
BELOW_HALF_MAX_CONDITION = 1e6
#: Up to this many cells the support of a general design is dense (every pair of cells).
DENSE_SUPPORT_MAX = 300
#: The values of ``structure``: the strategies' (:data:`~pramopt.optimize.strategies.STRUCTURES`)
#: and "per_variable", one matrix per identifying variable, a kind of design of its own
#: (:mod:`pramopt.per_variable`, reached through :mod:`pramopt.kinds`).
STRUCTURE_CHOICES = (*STRUCTURES, "per_variable")
#: Designs under epsilon or k are dense over the present cells (every entry of a column is
#: positive together): refused above this many cells, as each trust-region LP has 2 K^2 ratio
#: rows.
PRIVACY_MAX_CELLS = 200

# ---------------------------------------------------------------------------------------------
# Checks: each takes (value, name, owner) and returns the normalised value
# ---------------------------------------------------------------------------------------------


def _real(low=None, high=None, low_open=True, high_open=True, optional=False):
    def check(v, name, owner):
        if optional and v is None:
            return None
        return check_real(
            v, name, owner, low=low, high=high, low_open=low_open, high_open=high_open
        )

    return check


def _int(low=None, high=None, optional=False):
    def check(v, name, owner):
        if optional and v is None:
            return None
        return check_int(v, name, owner, low=low, high=high)

    return check


def _choice(*choices):
    return lambda v, name, owner: check_choice(v, name, owner, list(choices))


def _bool(v, name, owner):
    if not isinstance(v, (bool, np.bool_)):
        fail(name, owner, "True or False", v)
    return bool(v)


def _names(v, name, owner):
    if v is None:
        return None
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, Sequence) or not all(isinstance(x, str) for x in v):
        fail(name, owner, "a list of identifying variable names", v)
    return tuple(v)


def _column(v, name, owner):
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        fail(name, owner, "the name of a column of the data", v)
    return v


def _combinations(v, name, owner):
    if v is None:
        return None
    if isinstance(v, str) or not isinstance(v, Sequence):
        fail(name, owner, "a list of lists of identifying variable names", v)
    out = []
    for c in v:
        c = [c] if isinstance(c, str) else c
        if not isinstance(c, Sequence) or not all(isinstance(x, str) for x in c):
            fail(name, owner, "a list of lists of identifying variable names", v)
        out.append(tuple(c))
    return tuple(out)


def _cells(v, name, owner):
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and all(isinstance(r, Mapping) for r in v):
        v = [dict(r) for r in v]
    try:
        records = pd.DataFrame(v).to_dict("records")
    except (TypeError, ValueError):
        fail(name, owner, "a DataFrame or a list of dicts (one value per identifying variable)", v)
    return tuple(MappingProxyType(dict(r)) for r in records)


def _domains(v, name, owner):
    if v is None:
        return None
    if not isinstance(v, Mapping):
        fail(name, owner, "a mapping from identifying variables to lists of categories", v)
    return MappingProxyType({k: tuple(c) for k, c in v.items()})


def _weights(v, name, owner):
    # {variable: weight >= 0}; the names are checked against the identifying variables by the
    # designer
    if v is None:
        return None
    if not isinstance(v, Mapping) or not v:
        fail(name, owner, "a non-empty mapping from identifying variable names to weights >= 0", v)
    out = {}
    for key, w in v.items():
        if not isinstance(key, str):
            fail(name, owner, "a mapping from identifying variable names (str) to weights >= 0", v)
        # finite: an infinite weight makes 0 * inf = NaN costs for the cells that keep the variable
        out[key] = check_real(w, f"{name}[{key!r}]", owner, low=0, low_open=False, high=math.inf)
    return MappingProxyType(out)


def _alpha(v, name, owner):
    # None (or "none" from a spec or the command line): no C1 constraint, allowed only with
    # epsilon or k
    if v is None or (isinstance(v, str) and v.strip().lower() == "none"):
        return None
    return check_real(v, name, owner, low=0, high=1)


def _solver(v, name, owner):
    # the name is checked against the solvers installed here by the designer, before any work
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        fail(name, owner, "the name of an LP solver (HIGHS or a cvxpy solver)", v)
    return v.strip().upper()


# ---------------------------------------------------------------------------------------------
# The declaration
# ---------------------------------------------------------------------------------------------


def _param(
    default,
    check: Callable,
    kind: str,
    doc: str,
    cli: dict | None = None,
    flags: Sequence[str] = (),
    own_flag: bool = True,
) -> Any:
    """A field of :class:`DesignParams`.

    ``kind`` is the numpydoc type; ``doc`` the description; ``cli`` the argparse options of its
    flag (``None``: not on the command line, spec and Python only; a ``"type"`` given as a
    string names a converter of :mod:`pramopt.cli.design`); ``flags`` other spellings;
    ``own_flag=False`` leaves out the flag named after the parameter (``--min-diagonal``).
    """
    meta = {
        "check": check,
        "kind": kind,
        "doc": doc,
        "cli": cli,
        "flags": tuple(flags),
        "own_flag": own_flag,
    }
    if isinstance(default, (list, dict)):  # pragma: no cover - defaults are immutable
        raise TypeError("mutable default")
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class DesignParams:
    """The validated parameters of one design (see :func:`pramopt.design`)."""

    alpha: float | None = _param(
        0.1,
        _alpha,
        "float in (0, 1) or None",
        "Security level of C1: no present cell may be identified with posterior > alpha.  None "
        "(``--alpha none``) drops C1, which is allowed only when epsilon or k is given.",
        cli={"type": "alpha", "metavar": "A"},
    )
    combinations: tuple | None = _param(
        None,
        _combinations,
        "list of lists of str, optional",
        "Explicit set Π of combinations of identifying variables.  Default: every subset of "
        "``combination_size`` variables.",
        cli={
            "type": "names",
            "action": "append",
            "metavar": "A,B",
            "dest": "combinations",
            "help": "one combination of Π (repeat the flag for more)",
        },
        flags=("--combination",),
        own_flag=False,
    )
    combination_size: int = _param(
        3,
        _int(low=1),
        "int, default 3",
        "Size of the subsets in Π (the CBS rule is 3; all variables when there are fewer).",
        cli={"type": int, "metavar": "SIZE"},
        flags=("--combinations",),
    )
    gamma: float = _param(
        0.95,
        _real(0, 1, high_open=False),
        "float in (0, 1], default 0.95",
        "Diagonal floor P_kk >= gamma that the paper's reduction relies on.  Lowered along "
        f"{', '.join(map(str, GAMMA_LADDER[1:]))} when the reduced problem is infeasible.",
        cli={"type": float},
    )
    min_diagonal: float | None = _param(
        None,
        _real(0, 1, low_open=False, optional=True),
        "float in [0, 1), optional",
        "A hard floor on every diagonal entry that is never lowered.",
        cli={"type": float},
    )
    fixed: tuple | None = _param(
        None,
        _names,
        "list of str, optional",
        "Identifying variables that must never change (PRAM within their strata).",
        cli={"type": "names", "metavar": "A,B"},
    )
    workers: int | None = _param(
        None,
        _int(low=1, optional=True),
        "int >= 1, optional",
        "Design each stratum of the ``fixed`` variables on its own, in this many local processes "
        "(1: one after the other in this process), and merge them into one matrix checked against "
        "the full C1.  Each stratum then meets C1 within itself, every combination extended by "
        "the fixed variables: the risk an intruder who sees the unchanged fixed values faces, and "
        "a stronger condition than the joint design's, which can cost loss.  Default: one joint "
        "design.  Processes are started with 'spawn': a script needs an ``if __name__ == "
        "'__main__':`` guard.",
        cli={"type": int, "metavar": "N"},
    )
    max_changed_variables: int | None = _param(
        None,
        _int(low=1, optional=True),
        "int >= 1, optional",
        "A record may change at most this many of its identifying values: every transition "
        "between two different cells is between cells that differ in at most this many "
        "identifying variables (Hamming distance; a missing value counts as one more category).  "
        "Only the general design honours it (the replacement and block designs move records "
        "between every pair of cells of a pool, and are used only where no pool has more than "
        "this many varying variables); where no design keeps every diagonal entry >= 0.51 the "
        "general design goes below 1/2 (0.45, 0.4, 0.3, 0.2, never below ``min_diagonal``) and "
        "is returned only with a condition number of at most 1e6, computed from P; where it "
        "makes C1 infeasible the result says so with the smallest number that the flow "
        "relaxation of C1 allows.",
        cli={"type": int, "metavar": "D"},
    )
    change_weights: Mapping | None = _param(
        None,
        _weights,
        "dict, optional",
        "Weights w_j >= 0 of identifying variables (unnamed ones weigh 0) that make changing them "
        "costlier: the design minimises the exact L2 loss plus (2/n^2) * sum_m U0(m) sum_k P_mk "
        "sum_j w_j [m_j != k_j], the expected weighted number of changed values on the scale of "
        "the L2 loss's own first-order cost of a changed record (2/n^2 each).  The general and "
        "dense designs optimise it; the replacement and block designs (closed forms) are compared "
        "with them on it.  The reported loss stays the exact L2 loss; the weighted objective is "
        "in details['weighted_objective'].",
        cli={"type": "weights", "metavar": "A=W,B=W"},
    )
    keep_cells: tuple | None = _param(
        None,
        _cells,
        "DataFrame or list of dicts, optional",
        "Cells (a value of every identifying variable) whose records must stay as they are.",
        cli={
            "type": "cells_file",
            "metavar": "FILE",
            "help": "CSV or Parquet file of cells (a column per identifying variable) whose "
            "records stay",
        },
    )
    missing: str = _param(
        "keep",
        _choice("keep", "category"),
        '{"keep", "category"}, default "keep"',
        "Records with a missing identifying value: 'keep' leaves every missing value missing and "
        "makes no value missing (such records change only their other values, among cells with "
        "the same missing pattern); 'category' treats missing as one more category that PRAM may "
        "change.",
        cli={"choices": ["keep", "category"]},
    )
    invariant: bool = _param(
        False,
        _bool,
        "bool, default False",
        "Require U0^T P = U0^T (expected released frequencies equal the original ones).",
        cli={"action": "store_true"},
    )
    domains: Mapping | None = _param(
        None,
        _domains,
        "dict, optional",
        "Categories per variable when they should not be taken from the data.",
        cli={"type": "json", "metavar": "JSON"},
    )
    max_categories: int = _param(
        MAX_CATEGORIES,
        _int(low=1),
        f"int, default {MAX_CATEGORIES}",
        "Refuse identifying variables with more categories than this (bin them first).",
        cli={"type": int},
    )
    solver: str | None = _param(
        None,
        _solver,
        "str, optional",
        "An LP solver for the general design's programs: HIGHS or a cvxpy solver name.  Default: "
        "HiGHS directly, falling back to CLARABEL, ECOS and SCS through cvxpy when HiGHS fails "
        "(block designs always use that default chain).",
        cli={"metavar": "NAME"},
    )
    refine_loss: bool = _param(
        True,
        _bool,
        "bool, default True",
        "Improve the linear-surrogate solution on the exact (non-convex) L2 loss.",
        cli={
            "action": "store_false",
            "help": "keep the linear stage's design (minimum expected changes)",
        },
        flags=("--no-refine-loss",),
        own_flag=False,
    )
    support: str = _param(
        "auto",
        _choice("auto", "dense", "targets", "cover"),
        '{"auto", "dense", "targets", "cover"}',
        f"Allowed transitions of a general design; 'auto' is dense up to {DENSE_SUPPORT_MAX} "
        "cells, else a cover of the problem groups that column generation widens.",
        cli={"choices": ["auto", "dense", "targets", "cover"]},
    )
    structure: str = _param(
        "auto",
        _choice(*STRUCTURE_CHOICES),
        "{" + ", ".join(f'"{s}"' for s in STRUCTURE_CHOICES) + "}",
        "'general': any row-stochastic P with every diagonal entry above 1/2 (invertible by "
        "strict diagonal dominance); where phase one finds no floor within its pricing rounds, "
        "the replacement design when its diagonal clears the floor.  'blocks': block-diagonal "
        "retention-replacement blocks, invertible for any diagonal, for data where most cells are "
        "rare or unique.  'replacement': every cell keeps its records with a probability of its "
        "own and otherwise draws a replacement from one distribution (per stratum), chosen by the "
        "flow relaxation of C1; invertible for any diagonal, found in seconds.  'auto': the "
        "replacement design, the general design where one can exist (the flow relaxation and "
        "phase one say so; up to 600 cells) and blocks where it cannot (up to 4,000 cells, or "
        "when there is no replacement design); the verified design of smallest loss.  "
        "'per_variable': one row-stochastic, invertible matrix per identifying variable (as "
        "sdcMicro's pram() and mu-ARGUS release), applied independently, of minimal exact L2 loss "
        "under the full C1 over the product space of the categories (see "
        ":mod:`pramopt.per_variable`).",
        cli={
            "choices": list(STRUCTURE_CHOICES),
            "help": "general: any P with every diagonal entry above 1/2; blocks: block-diagonal "
            "retention-replacement blocks; replacement: a retention per cell and one replacement "
            "distribution; auto: the verified design of smallest loss among those that can exist; "
            "per_variable: one matrix per identifying variable, applied independently "
            "(default auto)",
        },
    )
    perturb: tuple | None = _param(
        None,
        _names,
        "list of str, optional",
        "With structure='per_variable': the identifying variables that are perturbed (the others "
        "are released unchanged).  Default: all of them.",
        cli={"type": "names", "metavar": "A,B"},
    )
    epsilon: float | None = _param(
        None,
        _real(0, optional=True),
        "float > 0, optional",
        "ε-differential privacy (Ikarashi et al., Theorem 1) over the present cells: in every "
        "column of P, P_mk <= exp(epsilon) P_m'k for all cells m, m' (so every entry is "
        f"positive).  The design is then dense over the present cells (at most {PRIVACY_MAX_CELLS} "
        "cells).  Combines with C1 (alpha) and k.",
        cli={"type": float, "metavar": "EPS"},
    )
    k: float | None = _param(
        None,
        _real(1, low_open=False, optional=True),
        "float >= 1, optional",
        "Pk-anonymity (Ikarashi et al., Theorem 3) of the released records: k = 1 + (n - 1) AR "
        "must be at least this, AR = min P[u,v']P[v,u'] / (P[u,u']P[v,v']) over the present "
        "cells.  Imposed through a row-scaled bound on every column's max/min ratio (a sufficient "
        "linear condition, re-scaled from the design until it stops helping); checked exactly.",
        cli={"type": float, "metavar": "K"},
    )
    household: str | None = _param(
        None,
        _column,
        "str, optional",
        "Column of household identifiers: identifying variables constant within every household "
        "(``household_keys``) are perturbed once per household and copied to every member, the "
        "others per person, so that members stay identical on household-level keys (needs the "
        "microdata, not a frequency table; see :mod:`pramopt.households`).",
        cli={"metavar": "COLUMN"},
    )
    household_keys: tuple | None = _param(
        None,
        _names,
        "list of str, optional",
        "With ``household``: the household-level identifying variables (each must be constant "
        "within every household).  Default: every identifying variable that is constant within "
        "every household.",
        cli={"type": "names", "metavar": "A,B"},
    )
    margin: float = _param(
        1e-5,
        _real(0, 0.1, low_open=False),
        "float in [0, 0.1), default 1e-5",
        "Relative margin inside alpha at which the solver works; grown tenfold (at most twice) if "
        "the independent verification ever fails.",
        cli={"type": float},
    )
    rtol: float = _param(
        1e-4,
        _real(0, low_open=False),
        "float >= 0, default 1e-4",
        "The refinement stops when the loss improved by less than rtol (relative) over its last 10 "
        "iterations or the predicted decrease is below rtol * loss.",
        cli={"type": float},
    )
    max_iter: int = _param(
        100,
        _int(low=0),
        "int >= 0, default 100",
        "Most iterations of the refinement.",
        cli={"type": int},
    )

    def __post_init__(self):
        # fields are checked in declaration order; a check may normalise its value
        for f in dataclasses.fields(self):
            value = f.metadata["check"](getattr(self, f.name), f.name, "design")
            object.__setattr__(self, f.name, value)
        if self.perturb is not None and self.structure != "per_variable":
            from .errors import InvalidParameterError

            raise InvalidParameterError(
                "The 'perturb' parameter of design applies only to structure='per_variable' (one "
                f"matrix per variable); got perturb={list(self.perturb)!r} with "
                f"structure={self.structure!r}."
            )
        if self.alpha is None and self.epsilon is None and self.k is None:
            from .errors import InvalidParameterError

            raise InvalidParameterError(
                "The 'alpha' parameter of design may be None (no C1) only when 'epsilon' or 'k' "
                "is given; got alpha=None with neither."
            )
        if self.alpha is None and self.epsilon is None and self.k is not None and self.k <= 1:
            from .errors import InvalidParameterError

            # k = 1 + (n - 1) AR >= 1 holds for every matrix: alone it guarantees nothing
            raise InvalidParameterError(
                "The 'k' parameter of design must be above 1 when it is the only guarantee "
                f"(alpha=None, no epsilon); got k={self.k!r}."
            )

    @classmethod
    def from_options(cls, owner: str = "design", **options) -> DesignParams:
        """Validated parameters from keyword arguments; unknown names are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            from .errors import InvalidParameterError

            raise InvalidParameterError(
                f"{owner} got unknown parameters {unknown!r}; its parameters are {sorted(known)!r}."
            )
        return cls(**options)

    def to_dict(self) -> dict:
        """Every parameter as plain Python values (lists, dicts), as ``design.json`` stores them."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "keep_cells" and v is not None:
                v = [dict(r) for r in v]
            elif f.name == "domains" and v is not None:
                v = {k: list(c) for k, c in v.items()}
            elif f.name == "change_weights" and v is not None:
                v = dict(v)
            elif isinstance(v, tuple):
                v = [list(c) if isinstance(c, tuple) else c for c in v]
            out[f.name] = v
        return out


#: Keys a spec's ``[design]`` table may hold: every parameter.
SPEC_KEYS = tuple(f.name for f in dataclasses.fields(DesignParams))


def parameters_doc(indent: int = 4) -> str:
    """The numpydoc ``Parameters`` entries of every design parameter."""
    pad = " " * indent
    lines = []
    for f in dataclasses.fields(DesignParams):
        lines.append(f"{pad}{f.name} : {f.metadata['kind']}")
        lines += textwrap.wrap(
            f.metadata["doc"],
            96 - indent - 4,
            initial_indent=pad + "    ",
            subsequent_indent=pad + "    ",
        )
    return "\n".join(lines)


def signature(
    fn, before: Sequence[inspect.Parameter], after: Sequence[inspect.Parameter] = ()
) -> inspect.Signature:
    """``fn``'s signature with every design parameter as a keyword argument with its default."""
    params = list(before)
    names = {p.name for p in params}
    for f in dataclasses.fields(DesignParams):
        if f.name not in names:
            params.append(
                inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
            )
    params += list(after)
    return inspect.Signature(params, return_annotation=inspect.signature(fn).return_annotation)
