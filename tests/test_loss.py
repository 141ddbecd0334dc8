"""The exact L2 loss and the estimator (4) of Cator et al., Section 3."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from pramopt.loss import expected_changes, l2_loss, l2_loss_and_grad


def exact_expected_loss(P, xi, y):
    """E_P sum_{(k,y)} (mu_hat - mu)^2 by enumerating every outcome of the n records."""
    n, K = len(xi), P.shape[0]
    ys = sorted(set(y))
    Pinv = np.linalg.inv(P)
    mu = np.zeros((K, len(ys)))
    for i in range(n):
        mu[xi[i], ys.index(y[i])] += 1.0 / n
    total = 0.0
    for out in itertools.product(range(K), repeat=n):
        prob = np.prod([P[xi[i], out[i]] for i in range(n)])
        U = np.zeros((K, len(ys)))
        for i in range(n):
            U[out[i], ys.index(y[i])] += 1
        mu_hat = Pinv.T @ U / n  # eq. (4)
        total += prob * np.sum((mu_hat - mu) ** 2)
    return total


def test_l2_formula_matches_exhaustive_expectation():
    # End of Section 3: l2(P) = (1/n^2) sum_l ||row_l(P^-1)||^2 (U0^T P)_l - 1/n, and it does not
    # depend on y.  Checked against the defining expectation, enumerated exactly (3^4 outcomes).
    P = np.array([[0.8, 0.15, 0.05], [0.1, 0.85, 0.05], [0.05, 0.05, 0.9]])
    xi = [0, 0, 1, 2]
    y = ["a", "b", "a", "a"]
    counts = np.bincount(xi, minlength=3)
    assert l2_loss(P, counts) == pytest.approx(exact_expected_loss(P, xi, y), rel=1e-10)


def test_l2_formula_matches_monte_carlo():
    # Monte Carlo of PRAM on a small table: 40,000 replications; the standard error of the
    # mean squared error is estimated from the draws and the formula must lie within 4 of them.
    rng = np.random.default_rng(12345)
    P = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.8, 0.05, 0.05], [0.0, 0.1, 0.9, 0.0], [0.05, 0.05, 0.0, 0.9]])
    counts = np.array([5, 12, 3, 20])
    n = counts.sum()
    xi = np.repeat(np.arange(4), counts)
    Pinv = np.linalg.inv(P)
    cum = np.cumsum(P, axis=1)
    R = 40000
    u = rng.random((R, n))
    out = (u[:, :, None] > cum[xi][None, :, :]).sum(axis=2)
    U = np.stack([(out == k).sum(axis=1) for k in range(4)], axis=1)
    err = ((U @ Pinv - counts) / n) ** 2
    se = err.sum(axis=1)
    assert abs(se.mean() - l2_loss(P, counts)) < 4 * se.std(ddof=1) / np.sqrt(R)


def test_estimator_is_exactly_unbiased():
    # E[U] = P^T U0, so E[mu_hat] = P^-T P^T U0 / n = U0 / n exactly (Section 3).
    rng = np.random.default_rng(3)
    K = 6
    P = rng.random((K, K)) + 4 * np.eye(K)
    P /= P.sum(axis=1, keepdims=True)
    counts = rng.integers(1, 30, K).astype(float)
    EU = P.T @ counts
    np.testing.assert_allclose(np.linalg.inv(P).T @ EU, counts, rtol=1e-12)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(7)
    K = 5
    P = rng.random((K, K)) + 3 * np.eye(K)
    P /= P.sum(axis=1, keepdims=True)
    counts = rng.integers(1, 20, K).astype(float)
    f, G = l2_loss_and_grad(P, counts)
    h = 1e-6
    for a, b in [(0, 0), (1, 3), (4, 2), (2, 2)]:
        E = np.zeros((K, K))
        E[a, b] = h
        fd = (l2_loss(P + E, counts) - l2_loss(P - E, counts)) / (2 * h)
        assert G[a, b] == pytest.approx(fd, rel=1e-5)


def test_first_order_term_is_expected_changes():
    # At P = I + tE the loss is 2 t * (expected changes)/n^2 + O(t^2) (the linear surrogate).
    counts = np.array([10.0, 3.0, 7.0])
    E = np.array([[-0.2, 0.1, 0.1], [0.0, -0.5, 0.5], [0.3, 0.0, -0.3]])
    n = counts.sum()
    for t in (1e-4, 1e-5):
        P = np.eye(3) + t * E
        assert l2_loss(P, counts) == pytest.approx(2 * expected_changes(P, counts) / n**2, rel=20 * t)


def test_singular_matrix_has_infinite_loss():
    P = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert l2_loss(P, [3, 4]) == np.inf
