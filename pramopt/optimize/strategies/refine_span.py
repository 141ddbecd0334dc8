"""The search of a linear step over the points the program has admitted (see :class:`Span`).

Linear (SLP) steps zig-zag across the loss's curved valleys: each goes to a vertex of the box
and the next partly undoes it (successive steps' cosine about -0.35 on 4 census keys).  The
last few steps ``s_j`` (with the change of the gradient over each, ``y_j``: the Hessian times
``s_j`` by the secant) and the new step ``d`` to the LP's vertex span a small space on which
the loss's quadratic model is known without another gradient: ``s_i' H s_j`` from the secants,
``d' H s_j = d' y_j``, and ``d' H d`` from the loss at the vertex, which the line search values
anyway.  The iterates and LP vertices since the program was loaded lie in that space, and
every convex combination of them is admitted by the program, so the model's minimiser over
their hull (a quadratic over a simplex of a few dimensions) needs no other solve.  Rows of
the full C1 missing from the program are still checked by the caller before a step is taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

__all__ = ["Span", "simplex_min", "MEMORY_STEPS"]

#: Accepted linear steps whose secants, iterates and vertices the search keeps.
MEMORY_STEPS = 3
#: An admitted point is used only if the steps' span holds it to this relative residual.
IN_SPAN_RTOL = 1e-8


@dataclass(frozen=True)
class Span:
    """The last accepted linear steps on one program: steps, secants and admitted points."""

    steps: tuple = ()  # s_j, oldest first
    secants: tuple = ()  # y_j = g(x_j) - g(x_{j-1})
    points: tuple = ()  # admitted points other than the current iterate (iterates, vertices)

    def after(self, x, xn, vertex, g, gn) -> Span:
        """The span after an accepted step from ``x`` to ``xn`` (``vertex``: the LP's); the
        empty one where the loss does not curve upwards along the step (no secant to trust)."""
        s, y = xn - x, gn - g
        ys = float(y @ s)
        ok = np.all(np.isfinite(y)) and ys > 1e-12 * float(np.linalg.norm(y) * np.linalg.norm(s))
        m = MEMORY_STEPS
        if not ok or m <= 0:
            return Span()
        steps = (*self.steps, s)[-m:]
        secants = (*self.secants, y)[-m:]
        points = (*self.points, x, vertex)[-2 * m :]
        return Span(steps, secants, points)

    def search(self, x, f, g, vertex, fv, lin, loss, clean_fn):
        """The model's minimiser over the hull of ``x``, ``vertex`` and the kept points, valued.

        Returns ``((x, f), predicted decrease)``, or None when there is nothing kept, when the
        minimiser is on the segment from ``x`` to the vertex (the search along the step does as
        well) or when it does not beat both ``x`` and the vertex (``fv``: the loss there).
        """
        if not self.steps or not (np.isfinite(f) and np.isfinite(fv)):
            return None
        d = vertex - x
        basis = np.column_stack([*self.steps, d])
        Q = np.column_stack([p - x for p in self.points])
        C, inside = _coordinates(basis, Q)
        if not inside.any():
            return None
        Q, C = Q[:, inside], C[:, inside]
        Y = np.column_stack(self.secants)
        S = basis[:, :-1]
        SY = S.T @ Y
        Hb = np.empty((basis.shape[1],) * 2)
        Hb[:-1, :-1] = 0.5 * (SY + SY.T)
        Hb[:-1, -1] = Hb[-1, :-1] = Y.T @ d
        Hb[-1, -1] = 2.0 * (fv - f + lin)  # the quadratic through f(x), its slope, f(vertex)
        # anchors: x (the origin), the vertex, the kept points in the span
        Cfull = np.column_stack([np.zeros(basis.shape[1]), np.eye(basis.shape[1])[:, -1], C])
        H = Cfull.T @ Hb @ Cfull
        c = np.concatenate([[0.0, -lin], Q.T @ g])
        lam, m = simplex_min(c, H)
        if lam[2:].max(initial=0.0) <= 1e-12 or m >= min(0.0, fv - f):
            return None
        xp = clean_fn(x + lam[1] * d + Q @ lam[2:])
        fp = loss.value(xp)
        if not np.isfinite(fp) or fp >= min(f, fv):
            return None
        return (xp, fp), -m


def _coordinates(basis, Q):
    """Coordinates of ``Q``'s columns in ``basis`` (least squares) and which columns the basis
    holds to :data:`IN_SPAN_RTOL`."""
    C, *_ = np.linalg.lstsq(basis, Q, rcond=None)
    res = np.linalg.norm(Q - basis @ C, axis=0)
    inside = res <= IN_SPAN_RTOL * np.maximum(np.linalg.norm(Q, axis=0), 1e-300)
    return C, inside


def simplex_min(c, H):
    """The minimiser of ``c . l + 1/2 l' H l`` over the simplex ``l >= 0, sum(l) = 1`` and its
    value (``H`` symmetric, not necessarily definite; a few dimensions).

    The minimum is a stationary point of the model on the relative interior of some face, so
    the best of those over every face is the global one.
    """
    c = np.asarray(c, dtype=float)
    H = np.asarray(H, dtype=float)
    q = c.size
    best, val = np.eye(q)[0], 0.5 * H[0, 0] + c[0]
    for k in range(1, q + 1):
        for face in combinations(range(q), k):
            f = list(face)
            lam = _face_point(c[f], H[np.ix_(f, f)])
            if lam is None:
                continue
            full = np.zeros(q)
            full[f] = lam
            v = float(c @ full + 0.5 * full @ H @ full)
            if v < val:
                best, val = full, v
    return best, val


def _face_point(c, H):
    """The stationary point of the model on the affine hull of a face (``sum = 1``), if it is
    unique and inside the face."""
    k = c.size
    K = np.zeros((k + 1, k + 1))
    K[:k, :k] = H
    K[:k, k] = K[k, :k] = 1.0
    rhs = np.concatenate([-c, [1.0]])
    try:
        sol = np.linalg.solve(K, rhs)
    except np.linalg.LinAlgError:
        return None
    lam = sol[:k]
    if not np.all(np.isfinite(lam)) or lam.min() < -1e-12:
        return None
    return np.clip(lam, 0.0, None) / max(np.clip(lam, 0.0, None).sum(), 1e-300)
