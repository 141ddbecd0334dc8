"""The design under ε-DP (``epsilon``) and/or Pk-anonymity (``k``) of Ikarashi et al.

The dense strategy (:mod:`.strategies.dense_ratio`) solves inside a margin; here its matrix
and the closed-form retention-replacement matrices calibrated at the requirements themselves
are checked exactly (C1 by :mod:`pramopt.verify`, Theorem 1's epsilon, Theorem 3's k), the
solver's tolerance is repaired by mixing with the strategy's feasible start, and the checked
matrix of smallest objective is the design, so it is never worse than either closed form.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import InvalidParameterError
from ..frequency.table import FrequencyTable
from ..loss import l2_loss
from ..params import PRIVACY_MAX_CELLS, DesignParams
from ..result import DesignResult, Status
from .auto import Candidate
from .problem import DesignProblem, Trace
from .strategies import AttemptStatus, strategy
from .strategies.checks import check
from .strategies.dense_ratio import working_margin

__all__ = ["check_options", "design_epsilon_k"]

#: Mixing weights with the feasible start tried in turn when the solver's matrix misses a
#: requirement by its tolerance (the feasible set is convex in P for epsilon and C1).
MIX_WEIGHTS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5)


def check_options(p: DesignParams, table: FrequencyTable, owner: str) -> None:
    """Designs under epsilon or k: dense over the present cells, so a bounded K and no option that
    forces zeros into a column (fixed strata, kept cells)."""
    what = " and ".join(
        f"{n}={v:g}" for n, v in (("epsilon", p.epsilon), ("k", p.k)) if v is not None
    )
    zeros = "forces zeros next to positive entries in a column of P"
    infinite = "which makes epsilon infinite and k = 1"
    if table.n_cells > PRIVACY_MAX_CELLS:
        raise InvalidParameterError(
            f"The 'epsilon' and 'k' parameters of {owner} need a dense matrix over the present "
            f"cells (every entry of a column positive together); with {table.n_cells} cells "
            f"(more than {PRIVACY_MAX_CELLS}) that is too large to design ({what} given). "
            "Coarsen the identifying variables or use fewer."
        )
    codes = table.codes
    free = int(np.count_nonzero((codes != codes[:1]).any(axis=0))) if table.n_cells else 0
    if p.max_changed_variables is not None and p.max_changed_variables < free:
        raise InvalidParameterError(
            f"The 'max_changed_variables' parameter of {owner} cannot be combined with {what}: "
            f"it {zeros}, {infinite}."
        )
    for name in ("fixed", "keep_cells"):
        if getattr(p, name):
            raise InvalidParameterError(
                f"The {name!r} parameter of {owner} cannot be combined with {what}: it {zeros}, "
                f"{infinite}."
            )
    if p.missing == "keep" and table.missing().any():
        raise InvalidParameterError(
            f"The 'missing' parameter of {owner} must be 'category' with {what} on data with "
            f"missing identifying values: 'keep' {zeros} (records move only among cells with "
            f"their missing pattern), {infinite}."
        )
    if p.invariant:
        raise InvalidParameterError(
            f"The 'invariant' parameter of {owner} is not supported with {what}."
        )
    if p.structure not in ("auto", "general"):
        raise InvalidParameterError(
            f"The 'structure' parameter of {owner} must be 'auto' or 'general' with {what} (a "
            f"dense design over the present cells); got {p.structure!r}."
        )
    if p.k is not None and p.k > table.n:
        raise InvalidParameterError(
            f"The 'k' parameter of {owner} must be at most the number of records ({table.n}); "
            f"got {p.k:g}."
        )


def design_epsilon_k(pb: DesignProblem, trace: Trace, finish) -> DesignResult:
    """A dense design under epsilon and/or k (and C1 unless alpha is None); success only when
    every requirement holds exactly.  ``finish(candidate, status, message, details)`` builds the
    result."""
    from ..baselines.retention_meeting import retention_meeting

    p = pb.params
    att = strategy("epsilon_k").solve(pb, pb.alpha * (1.0 - working_margin(p)), trace)
    # the fallbacks: both calibrated at the requirements themselves (checked exactly), so that
    # the design is never worse than either at the same epsilon and k (the solver works inside
    # the margins, and where K-ary randomized response is optimal it would lose by the margin)
    fall = retention_meeting(pb.table, pb.combos, epsilon=p.epsilon, k=p.k, alpha=p.alpha)
    fall_joint = retention_meeting(
        pb.table, pb.combos, epsilon=p.epsilon, k=p.k, alpha=p.alpha, joint=True
    )
    cands = []
    if att.ok:
        assert att.P is not None  # an ok attempt has a matrix
        P, meas = _repaired(pb, trace, att.P.toarray(), att.start)
        if meas["ok"]:
            cands.append(("optimal", P, meas, l2_loss(sp.csr_matrix(P), pb.counts)))
    for name, f in (("retention-replacement", fall), ("K-ary randomized response", fall_joint)):
        if f.ok:
            cands.append((name, f.P, _measure(pb, trace, f.P), f.loss))
    # a singular P meets epsilon and k (equal rows are perfectly private) but has no unbiased
    # estimator: it is never a design
    ok = [c for c in cands if c[2]["ok"] and np.isfinite(c[3])]
    want = ", ".join(
        f"{n} {v}"
        for n, v in (
            ("alpha", p.alpha),
            ("epsilon", p.epsilon),
            ("k", p.k),
            ("min_diagonal", p.min_diagonal),
        )
        if v is not None
    )
    if not ok:
        if att.ok:
            assert att.P is not None  # an ok attempt has a matrix
            P = att.P.toarray()
            meas = _measure(pb, trace, P)
            return finish(
                Candidate("optimal", P),
                Status.UNVERIFIED,
                f"The design fails the exact checks of {want}: " + _says(meas) + ".",
                _details(p, meas, fall),
            )
        status = (
            Status.SOLVER_ERROR if att.status is AttemptStatus.SOLVER_ERROR else Status.INFEASIBLE
        )
        return finish(
            Candidate.identity(pb.K),
            status,
            f"No invertible matrix over the present cells was found that meets {want} "
            f"({att.detail or 'no feasible start with a finite loss'}). Relax epsilon, k or alpha.",
            None,
        )
    # the whole objective (change_weights too)
    name, P, meas, loss = min(ok, key=lambda c: pb.objective.value(c[1], pb.counts, loss=c[3]))
    det = _details(p, meas, fall)
    det["tried"] = {c[0]: c[3] for c in cands if c[2]["ok"]}
    why = (
        (
            "The optimal dense design under "
            if name == "optimal"
            else f"The {name} matrix (no better design found) under "
        )
        + want
        + ". "
    )
    msg = why + _says(meas) + f"; binding: {det['binding']}. All requirements verified exactly."
    return finish(
        Candidate(name, P, loss=loss, solver=att.solver if name == "optimal" else "closed form"),
        Status.SUCCESS,
        msg,
        det,
    )


def _repaired(pb: DesignProblem, trace: Trace, P, start) -> tuple:
    """``P`` and its checks; where it misses a requirement by the solver's tolerance, its first mix
    with the feasible ``start`` (strictly inside the margin) that meets them all."""
    meas = _measure(pb, trace, P)
    if not meas["ok"] and start is not None:
        for t in MIX_WEIGHTS:
            Pt = (1.0 - t) * P + t * start
            mt = _measure(pb, trace, Pt)
            if mt["ok"]:
                return Pt, dict(mt, mixed=t)
    return P, meas


def _measure(pb: DesignProblem, trace: Trace, P) -> dict:
    """The independent checks: C1 (pramopt.verify), Theorem 1's epsilon and Theorem 3's k."""
    from ..risk.dp_pk_anonymity import dp_epsilon, pk_ratio

    p = pb.params
    rep = check(pb, trace, P)
    eps = dp_epsilon(P)
    ar = pk_ratio(P)
    k = 1.0 + (pb.n - 1) * ar
    ok = rep.max_risk <= pb.alpha
    if p.epsilon is not None:
        ok = ok and eps <= p.epsilon
    if p.k is not None:
        ok = ok and k >= p.k
    if p.min_diagonal is not None:
        ok = ok and float(np.min(np.diag(P))) >= p.min_diagonal
    return {
        "ok": bool(ok),
        "max_risk": float(rep.max_risk),
        "epsilon": float(eps),
        "k": float(k),
        "pk_ratio": float(ar),
        "min_diagonal": float(np.min(np.diag(P))),
    }


def _says(meas: dict) -> str:
    return (
        f"measured epsilon {meas['epsilon']:.6g}, k {meas['k']:.6g}, C1 max risk "
        f"{meas['max_risk']:.6g}, smallest diagonal {meas['min_diagonal']:.6g}"
    )


def _details(p: DesignParams, meas: dict, start) -> dict:
    slack = {}
    if p.alpha is not None:
        slack["alpha"] = 1.0 - meas["max_risk"] / p.alpha
    if p.epsilon is not None:
        slack["epsilon"] = 1.0 - meas["epsilon"] / p.epsilon
    if p.k is not None:
        slack["k"] = 1.0 - p.k / meas["k"]
    tight = [n for n, v in slack.items() if v <= 1e-3]
    binding = (
        " and ".join(tight) if tight else f"none (closest: {min(slack, key=slack.__getitem__)})"
    )
    return {
        "epsilon": meas["epsilon"],
        "k": meas["k"],
        "pk_ratio": meas["pk_ratio"],
        "c1_max_risk": meas["max_risk"],
        "epsilon_target": p.epsilon,
        "k_target": p.k,
        "alpha_target": p.alpha,
        "slack": slack,
        "binding": binding,
        "mixed_with_start": meas.get("mixed", 0.0),
        "retention_replacement": {
            "rho": [float(r) for r in start.rho],
            "loss": start.loss,
            "epsilon": start.epsilon,
            "k": start.k,
            "ok": start.ok,
        },
    }
