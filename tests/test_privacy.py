"""ε-DP and Pk-anonymity of PRAM matrices (Ikarashi et al., ../shared/seeds/002_…)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pramopt.errors import InvalidParameterError
from pramopt.risk.dp_pk_anonymity import (
    dp_epsilon,
    dp_epsilon_product,
    dp_epsilon_retention,
    pk_anonymity,
    pk_anonymity_product,
    pk_anonymity_retention,
    pk_ratio,
)

# Section 2.3: retention-replacement on "sex" with ρ = 1/2.
A22 = np.array([[0.75, 0.25], [0.25, 0.75]])


def test_two_by_two_by_hand():
    # Theorem 1: ε = ln max A[u,v']/A[v,v'] = ln(0.75/0.25) = ln 3.
    assert dp_epsilon(A22) == pytest.approx(math.log(3), rel=1e-14)
    # Corollary 2: ln((1 + (2-1)·0.5)/(1 - 0.5)) = ln 3.
    assert dp_epsilon_retention([2], 0.5) == pytest.approx(math.log(3), rel=1e-14)
    # Theorem 3: min ratio = (0.25·0.25)/(0.75·0.75) = 1/9, so k = 1 + (10 - 1)/9 = 2 on 10 records.
    assert pk_ratio(A22) == pytest.approx(1 / 9, rel=1e-14)
    assert pk_anonymity(A22, 10) == pytest.approx(2.0, rel=1e-14)
    # Corollary 5: ((1 - 0.5)/(1 + 0.5))^2 = 1/9.
    assert pk_anonymity_retention(10, [2], 0.5) == pytest.approx(2.0, rel=1e-14)


def _brute_k(A, R):
    """1 / max posterior Pr[Π(r) = r' | T' = τ'] over τ, τ', r, r' with the adversary knowing τ (Section 3)."""
    V = A.shape[0]
    perms = list(itertools.permutations(range(R)))
    best = 0.0
    for tau in itertools.product(range(V), repeat=R):
        for taup in itertools.product(range(A.shape[1]), repeat=R):
            w = np.array([np.prod([A[tau[s], taup[p[s]]] for s in range(R)]) for p in perms])
            tot = w.sum()
            if tot <= 0:
                continue
            for r in range(R):
                for rp in range(R):
                    num = sum(wi for wi, p in zip(w, perms) if p[r] == rp)
                    best = max(best, num / tot)
    return 1.0 / best


@pytest.mark.parametrize("V,R,seed", [(2, 3, 0), (3, 3, 1), (2, 4, 2), (3, 4, 3)])
def test_theorem3_against_brute_force_posterior(V, R, seed):
    A = np.random.default_rng(seed).dirichlet(np.ones(V), size=V)
    assert pk_anonymity(A, R) == pytest.approx(_brute_k(A, R), rel=1e-10)


def test_theorem3_brute_force_with_zeros():
    A = np.array([[0.7, 0.3, 0.0], [0.2, 0.5, 0.3], [0.0, 0.4, 0.6]])
    assert pk_anonymity(A, 3) == pytest.approx(_brute_k(A, 3), rel=1e-10)
    assert pk_anonymity(A, 3) == 1.0  # a zero next to a positive entry in a column


def _naive_ratio(A):
    K, Kp = A.shape
    best = math.inf
    for u, v in itertools.product(range(K), repeat=2):
        for up, vp in itertools.product(range(Kp), repeat=2):
            den = A[u, up] * A[v, vp]
            if den > 0:
                best = min(best, A[u, vp] * A[v, up] / den)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_factorised_minimum_equals_k4_loop(seed):
    rng = np.random.default_rng(seed)
    A = rng.dirichlet(np.ones(6) * 0.7, size=6)
    if seed % 2:
        A[A < 0.05] = 0
        A /= A.sum(axis=1, keepdims=True)
    assert pk_ratio(A) == pytest.approx(_naive_ratio(A), rel=1e-12, abs=1e-300)


def test_pk_ratio_is_fast_on_400_cells():
    import time

    A = np.random.default_rng(0).dirichlet(np.ones(400), size=400)
    t = time.perf_counter()
    pk_ratio(A)
    assert time.perf_counter() - t < 10


def test_corollaries_1_and_4_products():
    rng = np.random.default_rng(5)
    A = rng.dirichlet(np.ones(3), size=3)
    B = rng.dirichlet(np.ones(2), size=2)
    AB = np.kron(A, B)
    assert dp_epsilon(AB) == pytest.approx(dp_epsilon(A) + dp_epsilon(B), rel=1e-12)
    assert dp_epsilon_product([A, B]) == pytest.approx(dp_epsilon(AB), rel=1e-12)
    assert pk_ratio(AB) == pytest.approx(pk_ratio(A) * pk_ratio(B), rel=1e-12)
    assert pk_anonymity_product([A, B], 50) == pytest.approx(pk_anonymity(AB, 50), rel=1e-12)


def test_epsilon_infinite_and_identity():
    assert dp_epsilon(np.eye(3)) == math.inf
    assert pk_anonymity(np.eye(3), 100) == 1.0
    U = np.full((4, 4), 0.25)
    assert dp_epsilon(U) == 0.0 and pk_anonymity(U, 100) == pytest.approx(100.0)
    assert dp_epsilon_retention([3], 1.0) == math.inf


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: pk_anonymity(A22, 0), "'n_records'"),
        (lambda: pk_anonymity(np.array([[0.5, 0.6], [0.5, 0.5]]), 3), "'P'"),
        (lambda: dp_epsilon([[1.0, -0.1, 0.1]]), "'P'"),
        (lambda: dp_epsilon("x"), "'P'"),
        (lambda: dp_epsilon_retention([2, 0], 0.5), "'levels'"),
        (lambda: dp_epsilon_retention([2, 3], [0.5]), "'rho'"),
        (lambda: pk_anonymity_retention(10, [2], 1.5), "'rho'"),
        (lambda: pk_anonymity_product([], 3), "'matrices'"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(InvalidParameterError, match=name):
        call()
