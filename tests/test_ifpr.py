"""IFPR and the correct-match risk (Ghatak & Roy, ../shared/seeds/000_…; Nayak et al.)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pramopt.baselines.ifpr import (
    ifpr_block_matrix,
    ifpr_block_size,
    ifpr_design,
    ifpr_h,
    ifpr_matrix,
    ifpr_psi,
    ifpr_theta,
)
from pramopt.errors import InvalidParameterError
from pramopt.risk.correct_match import (
    correct_match_risk,
    correct_match_risks,
    expected_correct_match,
    expected_squared_error,
    nayak_r1,
    simulate_intruder,
)

# Ghatak & Roy, Table 1: minimum block size K1(xi, T1); rows T1 = 1..10, columns xi below.
TABLE1_XI = [0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3]
TABLE1 = [
    [11, 9, 8, 7, 6, 5, 5],
    [6, 5, 5, 4, 4, 3, 3],
    [5, 4, 3, 3, 3, 2, 2],
    [4, 3, 3, 2, 2, 2, 2],
    [3, 3, 2, 2, 2, 2, 2],
    [3, 2, 2, 2, 2, 2, 2],
    [2, 2, 2, 2, 2, 2, 2],
    [2, 2, 2, 2, 2, 2, 2],
    [2, 2, 2, 2, 2, 2, 2],
    [2, 2, 2, 2, 2, 2, 2],
]

# Section 4 example (Table 2 frequencies and the printed matrix, 3 decimals).
T_EX = [2, 205, 431, 106, 230, 221, 611, 194]
P_EX = np.array(
    [
        [0.172, 0.166, 0, 0.166, 0.166, 0.166, 0, 0.166],
        [0.002, 0.992, 0, 0.002, 0.002, 0.002, 0, 0.002],
        [0, 0, 1, 0, 0, 0, 0, 0],
        [0.003, 0.003, 0, 0.984, 0.003, 0.003, 0, 0.003],
        [0.001, 0.001, 0, 0.001, 0.993, 0.001, 0, 0.001],
        [0.001, 0.001, 0, 0.001, 0.001, 0.993, 0, 0.001],
        [0, 0, 0, 0, 0, 0, 1, 0],
        [0.002, 0.002, 0, 0.002, 0.002, 0.002, 0, 0.991],
    ]
)


@pytest.mark.parametrize("T1,j", [(t, j) for t in range(1, 11) for j in range(len(TABLE1_XI))])
def test_table1_all_entries(T1, j):
    # Ghatak & Roy, Table 1 (70 entries).
    assert ifpr_block_size(TABLE1_XI[j], T1) == TABLE1[T1 - 1][j]


def test_theta_section4():
    # Section 4: theta* = 1.656854 for xi = 0.1, T1 = 2; exactly psi(2, θ) = 0.1 <=> θ^2 + 8θ - 16 = 0.
    th = ifpr_theta(0.1, 2)
    assert th == pytest.approx(1.656854, abs=5e-7)
    assert th == pytest.approx(4 * math.sqrt(2) - 4, rel=1e-12)
    assert ifpr_block_size(0.1, 2) == 6  # "From Table 1, we get the required block size is 6"


def test_theta_solves_h():
    # Lemma 3.2: h(θ*) = ξ, h decreasing from h(0) = 1 to h(T1) = 0.
    for T1 in range(1, 11):
        for xi in TABLE1_XI:
            assert ifpr_h(ifpr_theta(xi, T1), T1) == pytest.approx(xi, rel=1e-10)
        assert ifpr_h(0.0, T1) == 1.0 and ifpr_h(float(T1), T1) == 0.0


def test_section4_matrix():
    d = ifpr_design(T_EX, 0.1)
    # the block is the 6 least frequent categories: 1, 2, 4, 5, 6, 8 (1-based) as in Section 4
    assert sorted(d.blocks[0]) == [0, 1, 3, 4, 5, 7]
    assert d.thetas[0] == pytest.approx(1.656854, abs=5e-7)
    assert np.abs(d.matrix - P_EX).max() <= 0.0005 + 1e-12
    np.testing.assert_array_equal(ifpr_matrix(T_EX, 0.1), d.matrix)
    # equation (2): invariance, T^T P = T^T
    assert d.is_invariant
    np.testing.assert_allclose(np.asarray(T_EX) @ d.matrix, T_EX, rtol=1e-12)
    assert d.meets_xi and d.max_r1 <= 0.1
    assert d.protected == (0,)


def test_nayak_r1_matches_exact_and_bound():
    d = ifpr_design(T_EX, 0.1)
    block = list(d.blocks[0])
    th = d.thetas[0]
    T = np.asarray(T_EX, dtype=float)
    # equation (11), written out in the test
    rest = T[block[1:]]
    r11 = (T[0] - th) / (T[0] * (T[0] - th) + th**2 * np.sum(rest / (5 * rest - th)))
    assert nayak_r1(T_EX, th, block=block) == pytest.approx(r11, rel=1e-12)
    assert correct_match_risk(d.matrix[:, 0], T_EX, 1, target=0) == pytest.approx(r11, rel=1e-10)
    assert r11 <= ifpr_psi(2, th) + 1e-15 and ifpr_psi(2, th) == pytest.approx(0.1, rel=1e-10)


def _r1_enumerate(alpha, t, a, target):
    """P[CM | S1 = a] by enumerating every unit's outcome (released as c1 or not)."""
    units = [i for i, n in enumerate(t) for _ in range(n)]
    b = units.index(target)  # B is the first unit of the target category
    num = den = 0.0
    for out in itertools.product([0, 1], repeat=len(units)):
        if sum(out) != a:
            continue
        p = 1.0
        for u, o in zip(units, out):
            p *= alpha[u] if o else 1 - alpha[u]
        den += p
        if out[b]:
            num += p / a
    return num / den if den > 0 else 0.0


@pytest.mark.parametrize("seed", range(6))
def test_r1_equation10_against_enumeration(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 4))
    t = rng.integers(1, 4, size=k).tolist()
    alpha = rng.uniform(0.05, 0.95, size=k)
    for a in range(1, sum(t) + 1):
        assert correct_match_risk(alpha, t, a, target=0) == pytest.approx(
            _r1_enumerate(alpha, t, a, 0), rel=1e-9, abs=1e-15
        )


def test_r1_with_certain_transitions():
    # a unit of category 1 released as c1 with certainty: S1 = 1 with Z_B = c1 is impossible
    alpha = [0.5, 1.0, 0.2]
    t = [1, 1, 2]
    for a in range(1, 5):
        assert correct_match_risk(alpha, t, a) == pytest.approx(
            _r1_enumerate(alpha, t, a, 0), abs=1e-15
        )


def test_r1_large_frequencies_do_not_overflow():
    alpha = [0.9, 0.001, 0.002]
    t = [3, 100000, 50000]
    r = correct_match_risk(alpha, t, 150, target=0)
    assert 0 < r < 1 / 150


def test_theorem_3_1_r1_decreases_in_a():
    # Theorem 3.1: with α1 >= αj, R1(1, T) >= R1(a, T)
    d = ifpr_design(T_EX, 0.1)
    r1 = correct_match_risk(d.matrix[:, 0], T_EX, 1)
    assert all(correct_match_risk(d.matrix[:, 0], T_EX, a) <= r1 for a in range(2, 30))


def test_expected_correct_match_matches_enumeration():
    P = np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
    t = [2, 1, 2]
    units = [i for i, n in enumerate(t) for _ in range(n)]
    tot = 0.0
    for out in itertools.product(range(3), repeat=len(units)):
        p = np.prod([P[u, o] for u, o in zip(units, out)])
        s1 = sum(o == 0 for o in out)
        if out[0] == 0:  # unit 0 is B, of category 0
            tot += p / s1
    assert expected_correct_match(P, t, 0) == pytest.approx(tot, rel=1e-12)


# Ghatak & Roy, Section 4: the mean squared estimation error of each category and the average
# correct-match probability, each from 1,000 simulations of the released data.
PAPER_E = [4.9350e-07, 7.6125e-07, 0.0, 7.4300e-07, 8.8550e-07, 7.8375e-07, 0.0, 8.5550e-07]
PAPER_CORRECT_MATCH = 0.07639286


def _squared_error_moments(P, T):
    """Exact E[D^2] and Var(D^2) of D = S_j - T_j per category, from the cumulants of a sum of
    independent binomials (kappa_2, kappa_3, kappa_4 of Bin(t, p) summed over the rows)."""
    P, T = np.asarray(P, float), np.asarray(T, float)
    q = P * (1 - P)
    mu = T @ P - T
    k2, k3 = T @ q, T @ (q * (1 - 2 * P))
    k4 = T @ (q * (1 - 6 * q))
    m2 = k2 + mu**2
    m4 = (k4 + 3 * k2**2) + 4 * mu * k3 + 6 * mu**2 * k2 + mu**4
    return m2, m4 - m2**2


def _correct_match_law(P, T, target):
    """Mean and variance of X = 1{Z_B = c_target} / S_target by a dynamic programme over the
    other units one at a time (law of the number O of them released as c_target)."""
    P, T = np.asarray(P, float), np.asarray(T, int).copy()
    T[target] -= 1
    pmf = np.zeros(int(T.sum()) + 1)
    pmf[0] = 1.0
    for i, t in enumerate(T):
        p = P[i, target]
        for _ in range(t):
            pmf[1:] = pmf[1:] * (1 - p) + pmf[:-1] * p
            pmf[0] *= 1 - p
    k = np.arange(pmf.size)
    a = P[target, target]
    m1, m2 = a * np.sum(pmf / (1 + k)), a * np.sum(pmf / (1 + k) ** 2)
    return m1, m2 - m1**2


def test_expected_squared_error_matches_enumeration():
    P = np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
    t = [2, 1, 2]
    units = [i for i, n in enumerate(t) for _ in range(n)]
    n = len(units)
    want = np.zeros(3)
    for out in itertools.product(range(3), repeat=n):
        p = np.prod([P[u, o] for u, o in zip(units, out)])
        S = np.bincount(out, minlength=3)
        want += p * ((S - np.array(t)) / n) ** 2
    np.testing.assert_allclose(expected_squared_error(P, t), want, rtol=1e-12)


def test_section4_exact_figures_and_the_papers_simulation():
    d = ifpr_design(T_EX, 0.1)
    T = np.asarray(T_EX, dtype=float)
    n = T.sum()
    # exact per-category error (closed form) and correct-match probability (law of O)
    E = expected_squared_error(d.matrix, T_EX)
    m2, var_d2 = _squared_error_moments(d.matrix, T_EX)
    np.testing.assert_allclose(E, m2 / n**2, rtol=1e-12)
    cm, cm_var = _correct_match_law(d.matrix, T_EX, 0)
    assert expected_correct_match(d.matrix, T_EX, 0) == pytest.approx(cm, rel=1e-10)
    assert cm < 0.1
    # the paper's figures are means of 1,000 simulations: every category's E and the correct
    # match lie within 3 exact standard errors of the exact values (categories 3 and 7 are kept
    # with probability 1: zero exactly, as in the paper)
    se_E = np.sqrt(var_d2 / 1000) / n**2
    paper = np.array(PAPER_E)
    assert np.all(E[paper == 0] == 0)
    assert np.all(np.abs(paper - E)[paper > 0] <= 3 * se_E[paper > 0])
    assert abs(PAPER_CORRECT_MATCH - cm) <= 3 * np.sqrt(cm_var / 1000)


def test_simulation_section4():
    d = ifpr_design(T_EX, 0.1)
    sim = simulate_intruder(d.matrix, T_EX, n_sim=4000, seed=2024)
    # same seed, same result
    again = simulate_intruder(d.matrix, T_EX, n_sim=4000, seed=2024)
    assert again.correct_match == sim.correct_match
    # the simulation's figures within 4 exact standard errors of the exact values, every category
    T = np.asarray(T_EX, dtype=float)
    n = T.sum()
    E = expected_squared_error(d.matrix, T_EX)
    _, var_d2 = _squared_error_moments(d.matrix, T_EX)
    se_E = np.sqrt(var_d2 / sim.n_sim) / n**2
    assert sim.mse[2] == 0 and sim.mse[6] == 0
    assert np.all(np.abs(sim.mse - E) <= 4 * se_E + 1e-30)
    cm, cm_var = _correct_match_law(d.matrix, T_EX, 0)
    assert abs(sim.correct_match - cm) <= 4 * np.sqrt(cm_var / sim.n_sim)


def test_every_category_is_protected():
    T = [1, 1, 2, 3, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130]
    d = ifpr_design(T, 0.2)
    assert set(d.protected) == {0, 1, 2, 3}
    assert d.meets_xi and np.all(d.r1[list(d.protected)] <= 0.2 + 1e-12)
    assert d.is_invariant
    first = ifpr_design(T, 0.2, protect="first")
    assert len(first.blocks) == 1 and first.blocks[0][0] == 0


def test_literal_lowest_partner_rule_can_break_members():
    # psi(T, θ) is not monotone in T: T1 = 1, ξ = 0.1 gives θ* = (−9 + sqrt(117))/2 and
    # a member with T = 2 in the same block has psi(2, θ*) > ξ.
    th = (-9 + math.sqrt(117)) / 2
    assert ifpr_theta(0.1, 1) == pytest.approx(th, rel=1e-12)
    assert (2 - th) / (2 * (2 - th) + th**2) > 0.1
    T = [1, 2] + [100] * 20
    lit = ifpr_design(T, 0.1, partners="lowest", protect="first")
    assert 1 in lit.blocks[0] and lit.r1[1] > 0.1
    safe = ifpr_design(T, 0.1)
    assert safe.meets_xi


def test_fallback_xi_l():
    # T1 = 1, ξ = 0.1 needs 11 categories; with 3, fall back to ξ_l = 1/(n* − l): K1(1/2, 1) = 3
    # (ψ(1, θ) = 1/2 at θ = (√5 − 1)/2, 1/(1 − θ) = 2.618) while K1(1/3, 1) = 4.
    d = ifpr_design([1, 50, 50], 0.1)
    assert d.xi_used == (0.5,)
    assert ifpr_block_size(0.5, 1) == 3 and ifpr_block_size(1 / 3, 1) == 4
    assert not d.meets_xi and d.max_r1 <= 0.5
    nofb = ifpr_design([1, 50, 50], 0.1, fallback=False)
    assert nofb.unprotected == (0,) and not nofb.blocks


def test_nayak_method_theta_below_one():
    d = ifpr_design([1, 3, 4, 50], 0.4, method="nayak")
    assert all(th < 1 for th in d.thetas) and d.is_invariant
    with pytest.raises(InvalidParameterError, match="'xi'"):
        ifpr_design([1, 3, 4], 0.2, method="nayak")


def test_block_matrix_rows_and_invariance():
    T = [3, 4, 5, 6, 7]
    P = ifpr_block_matrix(T, [[0, 2, 4], [1, 3]], [2.0, 1.5])
    np.testing.assert_allclose(P.sum(axis=1), 1)
    np.testing.assert_allclose(np.asarray(T) @ P, T)
    assert P[0, 0] == pytest.approx(1 - 2 / 3) and P[0, 2] == pytest.approx(2 / (2 * 3))
    assert correct_match_risks(P, T).shape == (5,)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: ifpr_theta(1.5, 2), "'xi'"),
        (lambda: ifpr_theta(0.1, 0), "'T1'"),
        (lambda: ifpr_block_size("a", 2), "'xi'"),
        (lambda: ifpr_design([1, -2, 3], 0.1), "'T'"),
        (lambda: ifpr_design([1, 2, 3], 0.1, partners="x"), "'partners'"),
        (lambda: ifpr_block_matrix([1, 2, 3], [[0, 5]], 0.5), "'blocks'"),
        (lambda: ifpr_block_matrix([1, 2, 3], [[0, 1]], 1.5), "'theta'"),
        (lambda: correct_match_risk([0.5, 0.2], [1, 2], 0), "'a'"),
        (lambda: correct_match_risk([0.5, 1.2], [1, 2], 1), "'alpha'"),
        (lambda: simulate_intruder(np.eye(2), [1, 2], n_sim=0), "'n_sim'"),
        (lambda: nayak_r1([2, 5], 3.0), "'theta'"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(InvalidParameterError, match=name):
        call()
