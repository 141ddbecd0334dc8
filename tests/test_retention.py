"""Retention-replacement, Algorithms 1-3 and reconstruction (Ikarashi et al., ../shared/seeds/002_…)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pramopt.baselines.retention import (
    reconstruct_counts,
    reconstruction_error,
    retention_matrix,
    retention_matrix_multi,
    retention_rho,
    rho_from_epsilon,
    rho_from_k,
)
from pramopt.errors import InvalidParameterError
from pramopt.risk.dp_pk_anonymity import dp_epsilon, pk_anonymity


def _k_eq7(n, levels, rho):
    # equation (7), written out
    return 1 + (n - 1) * math.prod((1 - rho) / (1 + (V - 1) * rho) for V in levels) ** 2


def test_rho_p100_anonymity_paper_example():
    # Section 4: P100-anonymity on 100,000 records, attributes of 2, 5 and 10 values: ρ ≈ 0.303.
    rho = retention_rho(100_000, [2, 5, 10], k=100)
    assert rho == pytest.approx(0.303, abs=1e-3)
    assert _k_eq7(100_000, [2, 5, 10], rho) == pytest.approx(100, rel=1e-9)
    assert rho_from_k(100, 100_000, [2, 5, 10]) == rho


def test_retention_matrix_section_2_3():
    # "male" kept with 3/4, changed with 1/4 for ρ = 1/2.
    np.testing.assert_allclose(retention_matrix(2, 0.5), [[0.75, 0.25], [0.25, 0.75]])
    A = retention_matrix(4, 0.2)
    assert A[0, 0] == pytest.approx(0.2 + 0.8 / 4) and A[0, 1] == pytest.approx(0.8 / 4)


def test_kronecker_multi_attribute():
    A = retention_matrix_multi([2, 3], [0.4, 0.7])

    # entry (u, v) = prod_a A_a[u_a, v_a]; index = 3 * u_1 + u_2
    def a1(i, j):
        return 0.4 * (i == j) + 0.6 / 2

    def a2(i, j):
        return 0.7 * (i == j) + 0.3 / 3

    for u in range(6):
        for v in range(6):
            assert A[u, v] == pytest.approx(a1(u // 3, v // 3) * a2(u % 3, v % 3))
    # the product mechanism's ε and k are those of Corollaries 1-2 and 4-5
    assert dp_epsilon(A) == pytest.approx(math.log(1.4 / 0.6) + math.log(2.4 / 0.3))
    assert pk_anonymity(A, 1000) == pytest.approx(1 + 999 * (0.6 / 1.4) ** 2 * (0.3 / 2.4) ** 2)


def test_algorithm2_closed_form():
    # one attribute: ε = ln((1 + (V-1)ρ)/(1-ρ))  <=>  ρ = (e^ε - 1)/(e^ε + V - 1)
    for V, eps in [(2, 1.0), (5, 0.3), (10, 2.5)]:
        assert rho_from_epsilon(eps, [V]) == pytest.approx(
            (math.exp(eps) - 1) / (math.exp(eps) + V - 1), rel=1e-9
        )


def test_algorithm3_is_the_minimum():
    n, lv = 10_000, [2, 5]
    rk = retention_rho(n, lv, k=20)
    re = retention_rho(n, lv, epsilon=1.0)
    assert retention_rho(n, lv, k=20, epsilon=1.0) == min(rk, re)
    assert _k_eq7(n, lv, rk) == pytest.approx(20, rel=1e-9)


def test_reconstruction_undoes_expected_perturbation():
    x = np.array([[30.0, 5.0, 0.0], [12.0, 40.0, 13.0]])
    A1, A2 = retention_matrix(2, 0.6), retention_matrix(3, 0.3)
    # expected released counts, computed on the flattened product space with the Kronecker product
    released = (x.ravel() @ np.kron(A1, A2)).reshape(2, 3)
    np.testing.assert_allclose(reconstruct_counts(released, [A1, A2]), x, atol=1e-9)
    flat = reconstruct_counts(released.ravel(), np.kron(A1, A2))
    np.testing.assert_allclose(flat, x.ravel(), atol=1e-9)


def test_l1_error_d():
    # d = sum |x - y| / |R| = (1 + 2 + 3) / 10
    assert reconstruction_error([4, 3, 3], [5, 1, 6]) == pytest.approx(0.6)
    assert reconstruction_error([4, 3, 3], [5, 1, 6], n_records=20) == pytest.approx(0.3)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: retention_rho(100, [2, 3]), "'k'"),
        (lambda: retention_rho(0, [2, 3], k=2), "'n_records'"),
        (lambda: retention_rho(100, [2, 3], k=0.5), "'k'"),
        (lambda: retention_rho(100, [2, 3], epsilon=-1), "'epsilon'"),
        (lambda: retention_rho(100, "ab", k=2), "'levels'"),
        (lambda: retention_matrix(3, 1.5), "'rho'"),
        (lambda: retention_matrix(0, 0.5), "'n_values'"),
        (lambda: retention_matrix_multi([2, 3], [0.5, 0.5, 0.5]), "'rho'"),
        (lambda: reconstruct_counts([1, 2], [np.eye(3)]), "'matrices'"),
        (lambda: reconstruction_error([1, 2], [1, 2, 3]), "'reconstructed_counts'"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(InvalidParameterError, match=name):
        call()
