"""Auto mode's candidate policy, as data: which structures, under which sizes, in which order.

The counting bound and the flow relaxation say in seconds whether a general design (every
diagonal entry >= 0.51) can exist; where they rule that out but leave one of the floors below
1/2 (:data:`~pramopt.params.BELOW_HALF_FLOORS`), the general design goes below 1/2 (its
invertibility checked from P; over the transitions that change at most two identifying
variables) and competes like any other candidate.  It is made only where a floor is left, and
only up to ``GENERAL_SCALE_AUTO_MAX_CELLS`` cells (above ``GENERAL_AUTO_MAX_CELLS``, over the
transitions that change at most two identifying variables) -- at any size under
``max_changed_variables``, which the structures that need no floor cannot honour across a
pool.  Beside it (with
``refine_loss``) and where there is none, the structures that need no floor are made: the
replacement design always, the block design up to ``BLOCKS_AUTO_MAX_CELLS`` cells and
``BLOCKS_AUTO_MAX_ROWS`` rows of the reduced C1 (and, where there is no general design, whenever
no replacement design is found); the uniform design only when none of those is found.  On the
package example, testdata and rare-heavy tables the better of the replacement and block designs
comes within 1.3% of the general design's loss in a fraction of its time.  From
``START_MIN_CELLS`` to ``GENERAL_AUTO_MAX_CELLS`` cells (without ``max_changed_variables``) they
are made first, and where the best of them keeps every diagonal entry above a rung of the
floor's ladder it is itself a general design at that floor: the general design is then refined
from it (:mod:`.strategies.general_start`), without phase one and the linear stage, and its loss
is never above that start's.  Every candidate is verified, and the smallest objective wins --
unless another candidate's objective is within ``COMPARABLE_OBJECTIVE`` of it while its records
change at most ``FEWER_CHANGED_VALUES`` as many identifying values (:func:`pick`): then the one of
those that changes the fewest.  Every candidate's loss, objective, expected changes and variables
changed per changed record are reported (``details["candidates"]``).

The retries are here too: the solver works at alpha * (1 - margin) so that its feasibility
tolerance never turns into a violation; if the verifier still finds one, the margin grows
tenfold (twice at most, from ``MARGIN_FLOOR`` at least).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..loss import changed_variables, expected_changes
from ..params import GAMMA_LADDER
from ..result import Reduction
from ..verify import C1Report
from .constraints.c1 import floor_upper_bound
from .diagnosis import below_half_hint, floor_ruled_out, floors_below_half
from .problem import DesignProblem

__all__ = [
    "Rule",
    "AutoPolicy",
    "AUTO",
    "Candidate",
    "margins",
    "GENERAL_AUTO_MAX_CELLS",
    "GENERAL_SCALE_AUTO_MAX_CELLS",
    "FLOOR_PROOF_MAX_CELLS",
    "BLOCKS_AUTO_MAX_CELLS",
    "BLOCKS_AUTO_MAX_ROWS",
    "MARGIN_FLOOR",
    "COMPARABLE_OBJECTIVE",
    "FEWER_CHANGED_VALUES",
    "figures",
    "pick",
]

#: Up to this many cells auto mode makes the general design with phase one (and, above
#: ``START_MIN_CELLS``, from the replacement or block design); above it, at census scale, over
#: the transitions that change at most two identifying variables
#: (:mod:`.strategies.general_scale`) ...
GENERAL_AUTO_MAX_CELLS = 600
#: ... up to this many cells: beyond, the census-scale general design takes longer than the
#: 10 minutes auto mode allows it on 2 cores (2,610 cells: about a minute; 6,505, below 1/2:
#: about 9 minutes in all; 9,206: 20-25 minutes; benchmarks/README.md, section 7), and auto
#: mode makes only the structures that need no floor.
GENERAL_SCALE_AUTO_MAX_CELLS = 7_000
#: Up to this many cells (without ``max_changed_variables``) auto mode asks the flow relaxation
#: whether a general design can exist before it skips one for its size, so that the summary says
#: which (seconds up to here; minutes at 22,670 cells).
FLOOR_PROOF_MAX_CELLS = 12_000

#: Above this many cells auto mode makes a block design only when no replacement design is found:
#: on large rare-heavy tables the block design is much slower and loses to the replacement design.
BLOCKS_AUTO_MAX_CELLS = 4000

#: ... and only up to this many rows of the reduced C1 (rare cells x combinations): beyond, each
#: block size costs far more than the replacement design.
BLOCKS_AUTO_MAX_ROWS = 100_000

#: The margin grows from at least this when the verification fails (a margin of 0 would stay 0).
MARGIN_FLOOR = 1e-5

#: Auto mode's rule beyond the smallest objective (:func:`pick`): a candidate whose objective is
#: within this factor of the smallest ...
COMPARABLE_OBJECTIVE = 1.10
#: ... and whose records change, in expectation, at most this fraction as many identifying values
#: as the smallest objective's candidate wins: a release that keeps records plausible at a
#: comparable loss is the one an office publishes.
FEWER_CHANGED_VALUES = 2.0 / 3.0


@dataclass(frozen=True)
class Rule:
    """One structure auto mode makes, and the sizes up to which it makes it.

    ``alone``: it is made above those sizes too when no structure before it in its list was
    found.
    """

    structure: str
    max_cells: int | None = None
    max_rows: int | None = None
    alone: bool = False

    def admits(self, problem: DesignProblem, found: bool) -> bool:
        """Whether auto mode makes this structure on ``problem`` (``found``: an earlier one was)."""
        small = (self.max_cells is None or problem.K <= self.max_cells) and (
            self.max_rows is None or problem.rare_rows <= self.max_rows
        )
        return small or (self.alone and not found)


@dataclass(frozen=True)
class AutoPolicy:
    """Auto mode's candidates.

    Attributes
    ----------
    general : Rule
        The structure with a diagonal floor above 1/2, tried first where one can exist.
    beside : tuple of Rule
        Also made beside a verified general design (with ``refine_loss``: without it the general
        design minimises expected changes, not the loss).
    without : tuple of Rule
        Made where there is no general design.
    last_resort : tuple of Rule
        Tried in turn when none of ``without`` is found.
    """

    general: Rule
    beside: tuple
    without: tuple
    last_resort: tuple

    def skips_general(self, problem: DesignProblem, relax: float | None = None) -> str | None:
        """Why auto mode makes no general design on ``problem`` before trying one (None: it tries):
        the counting bound or the flow relaxation's bound on every floor (``relax``, when known)
        rules out every floor the general design tries (above 1/2, and the floors below it of
        :data:`~pramopt.params.BELOW_HALF_FLOORS`), or the table is too large."""
        floor = problem.params.min_diagonal or 0.0
        g_low = max(GAMMA_LADDER[-1], floor)
        below = ""  # where only a floor below 1/2 is left, the sentence that says so
        ruled_out = floor_ruled_out(relax, g_low)
        if ruled_out is not None:
            if not floors_below_half(relax, floor):
                return ruled_out
            below = ruled_out + below_half_hint(relax, floor)
        bound = floor_upper_bound(problem.table, problem.groups, problem.alpha)
        if bound < g_low:
            capped = (
                f"No design with a diagonal floor >= {g_low:g} exists: C1 caps every floor at "
                f"alpha * n / (largest number of groups of one combination) = {bound:.4g}."
            )
            if not floors_below_half(bound, floor):
                return capped
            below = below or capped
        if problem.max_changed is not None:
            # the structures that need no floor move records between every pair of a pool's
            # cells: under max_changed_variables the general design is the one that honours it
            return None
        if not self.general.admits(problem, found=False):
            may = (
                ""
                if relax is None or below
                else f" (one may exist: the flow relaxation allows floors up to {relax:.4g})"
            )
            return (
                f"{below} With {problem.K} cells (more than {self.general.max_cells}), auto mode "
                "makes the structures found in minutes and skips the general design, which takes "
                f"longer at this size{may} (structure='general' asks for it)."
            ).strip()
        return None

    def structures(self) -> set:
        """Every structure the policy can make."""
        rules = (self.general, *self.beside, *self.without, *self.last_resort)
        return {r.structure for r in rules}


AUTO = AutoPolicy(
    general=Rule("general", max_cells=GENERAL_SCALE_AUTO_MAX_CELLS),
    beside=(Rule("replacement"), Rule("blocks", BLOCKS_AUTO_MAX_CELLS, BLOCKS_AUTO_MAX_ROWS)),
    without=(
        Rule("replacement"),
        Rule("blocks", BLOCKS_AUTO_MAX_CELLS, BLOCKS_AUTO_MAX_ROWS, alone=True),
    ),
    last_resort=(Rule("uniform"),),
)


def margins(margin: float) -> list[float]:
    """The margins tried in turn: the requested one, then tenfold twice (from MARGIN_FLOOR at
    least)."""
    out = [margin]
    for _ in range(2):
        nxt = min(max(10 * out[-1], MARGIN_FLOOR), 0.1)
        if nxt > out[-1]:
            out.append(nxt)
    return out


@dataclass(frozen=True)
class Candidate:
    """A design the designer may return: its matrix and what the result reports about it.

    ``report`` is the full C1 check of ``P`` when made (None: the result makes it); ``loss`` and
    ``condition`` are closed forms when known (None: computed from ``P``); ``describe`` is the
    sentence on the design in the result's message.
    """

    name: str
    P: object
    report: C1Report | None = None
    loss: float | None = None
    condition: float | None = None
    reduction: Reduction | None = None
    solver: str | None = None
    gamma: float | None = None
    describe: str = ""

    @staticmethod
    def identity(K: int, gamma: float | None = None, reduction=None) -> Candidate:
        """P = I: what a design that found no matrix returns."""
        return Candidate("identity", sp.identity(K, format="csr"), gamma=gamma, reduction=reduction)


def figures(c: Candidate, problem: DesignProblem, objective: float) -> dict:
    """What the result reports for every candidate: its loss and objective, the expected changed
    records, the expected changed identifying values and the variables changed per changed
    record."""
    E = expected_changes(c.P, problem.counts)
    cv = changed_variables(c.P, problem.table.codes, problem.counts)
    per = cv["mean"]
    return {
        "loss": None if c.loss is None else float(c.loss),
        "objective": float(objective),
        "expected_changes": float(E),
        "changed_values": float(E * per) if np.isfinite(per) else 0.0,
        "variables_per_changed_record": float(per),
    }


def pick(names: list, table: dict) -> tuple[str, str]:
    """Auto mode's choice among verified candidates ``names`` (their :func:`figures` in
    ``table``): the smallest objective, unless another candidate's objective is within
    ``COMPARABLE_OBJECTIVE`` of it while it changes at most ``FEWER_CHANGED_VALUES`` as many
    identifying values -- then the one of those that changes the fewest.  Returns the name and
    the sentence that says why (empty when the smallest objective wins)."""
    best = min(names, key=lambda n: table[n]["objective"])
    b = table[best]
    plausible = [
        n
        for n in names
        if table[n]["objective"] <= COMPARABLE_OBJECTIVE * b["objective"]
        and table[n]["changed_values"] <= FEWER_CHANGED_VALUES * b["changed_values"]
    ]
    if not plausible:
        return best, ""
    won = min(plausible, key=lambda n: table[n]["changed_values"])
    w = table[won]
    why = (
        f"The {won} design is chosen over the {best} design: its objective is within "
        f"{COMPARABLE_OBJECTIVE - 1:.0%} ({w['objective']:.4g} against {b['objective']:.4g}) "
        f"while it changes {w['changed_values']:.4g} identifying values in expectation against "
        f"{b['changed_values']:.4g} ({w['variables_per_changed_record']:.2f} against "
        f"{b['variables_per_changed_record']:.2f} per changed record)."
    )
    return won, why
