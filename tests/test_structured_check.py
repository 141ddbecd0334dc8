"""C1 checked from a replacement form's parameters, against the check of its matrix.

Every figure of :func:`pramopt.verify.c1_risk_form` is compared with :func:`pramopt.verify.c1_risk`
on the matrix built entry by entry from the definition, and on a tiny case with C1's left-hand
side computed by loops over every m, π and k0.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from pramopt.verify import c1_risk, c1_risk_form
from tests.test_structured_design import dense_from_definition


def random_case(seed: int, K: int = 30, d: int = 3, n_pools: int = 3):
    """A random form on K distinct cells: kept cells (rate 0), cells with weight 0, pools with
    one cell, groups of one cell; retention + rate * pool weight = 1 in every row."""
    rng = np.random.default_rng(seed)
    levels = rng.integers(2, 5, d)
    space = np.array(list(itertools.product(*[range(v) for v in levels])))
    codes = space[np.sort(rng.choice(len(space), size=min(K, len(space)), replace=False))]
    K = codes.shape[0]
    counts = rng.integers(1, 6, K).astype(float)
    pools = rng.integers(0, n_pools, K) * 7 + 2  # pool labels need not be 0..n-1
    pools[rng.integers(K)] = 999  # a pool of one cell
    w = np.where(rng.random(K) < 0.7, rng.random(K), 0.0)
    tot = np.bincount(pools, weights=w)[pools]
    rate = np.where(rng.random(K) < 0.75, rng.uniform(0.05, 0.95, K), 0.0)
    rate = np.where(tot > 0, rate / np.where(tot > 0, tot, 1.0), 0.0)
    retention = 1.0 - rate * tot
    combos = [c for r in (1, 2, d) for c in itertools.combinations(range(d), r)]
    return retention, rate, w, pools, codes, counts, combos


def assert_same_report(got, want):
    np.testing.assert_allclose(got.max_risk, want.max_risk, rtol=1e-12, atol=0)
    assert len(got.risk_by_group) == len(want.risk_by_group)
    for a, b in zip(got.risk_by_group, want.risk_by_group):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    for a, b in zip(got.groups_by_combination, want.groups_by_combination):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got.denominators, want.denominators):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    # the argmax names a combination and a group where the maximum is attained by its row
    assert got.argmax[1:] == want.argmax[1:] or np.isclose(
        got.risk_by_group[got.argmax[1]].max(), want.max_risk, rtol=1e-12
    )


@pytest.mark.parametrize("seed", range(40))
def test_form_check_equals_the_check_of_the_matrix(seed):
    ret, rate, w, pools, codes, counts, combos = random_case(seed, n_pools=1 + seed % 4)
    P = dense_from_definition(ret, rate, w, pools)
    got = c1_risk_form(ret, rate, w, pools, codes, counts, combos)
    want = c1_risk(sp.csr_matrix(P), codes, counts, combos)
    assert np.isfinite(got.max_risk)
    assert_same_report(got, want)
    # the row named by argmax attains the maximum of its group in the matrix
    m, ci, rep = got.argmax
    pi = list(combos[ci])
    in_g = np.all(codes[:, pi] == codes[rep, pi], axis=1)
    S = P[:, in_g].sum(axis=1)
    np.testing.assert_allclose(S[m] / (counts @ S), got.max_risk, rtol=1e-12)


def test_many_pools_and_larger_tables():
    for seed in range(5):
        ret, rate, w, pools, codes, counts, combos = random_case(100 + seed, K=200, d=4, n_pools=12)
        P = dense_from_definition(ret, rate, w, pools)
        assert_same_report(
            c1_risk_form(ret, rate, w, pools, codes, counts, combos),
            c1_risk(sp.csr_matrix(P), codes, counts, combos),
        )


def test_identity_and_uniform_forms():
    ret, rate, w, pools, codes, counts, combos = random_case(7)
    K = len(ret)
    ident = c1_risk_form(np.ones(K), np.zeros(K), np.zeros(K), np.zeros(K), codes, counts, combos)
    assert_same_report(ident, c1_risk(sp.identity(K, format="csr"), codes, counts, combos))
    # every record redrawn from the same law: the form's retention is 0 (still a valid matrix)
    u = np.full(K, 1.0 / K)
    uni = c1_risk_form(np.zeros(K), np.ones(K), u, np.zeros(K), codes, counts, combos)
    assert_same_report(uni, c1_risk(sp.csr_matrix(np.full((K, K), 1.0 / K)), codes, counts, combos))


def brute_force_max_risk(P, codes, counts, combos) -> float:
    """max over m, π, k0 of sum_{k: k_π = k0} P[m, k] / sum_l U0(l) sum_{k: k_π = k0} P[l, k]."""
    K = len(counts)
    best = -np.inf
    for pi in combos:
        for k0 in {tuple(codes[k, list(pi)]) for k in range(K)}:
            ks = [k for k in range(K) if tuple(codes[k, list(pi)]) == k0]
            den = sum(counts[r] * sum(P[r, k] for k in ks) for r in range(K))
            for m in range(K):
                num = sum(P[m, k] for k in ks)
                best = max(best, num / den if num > 0 else 0.0)
    return best


def test_tiny_case_from_the_definition():
    codes = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [2, 1]])
    counts = np.array([3.0, 1.0, 2.0, 1.0, 4.0])
    pools = np.array([0, 0, 0, 1, 1])
    w = np.array([0.5, 0.0, 0.25, 0.2, 0.4])
    rate = np.array([0.6, 0.8, 0.0, 1.0, 0.5])
    ret = 1.0 - rate * np.bincount(pools, weights=w)[pools]
    combos = [(0,), (1,), (0, 1)]
    P = dense_from_definition(ret, rate, w, pools)
    got = c1_risk_form(ret, rate, w, pools, codes, counts, combos)
    assert got.max_risk == pytest.approx(brute_force_max_risk(P, codes, counts, combos), rel=1e-12)


def test_a_row_outside_the_group_attains_the_maximum():
    """With rows summing to 1 exactly a member of the group has the largest mass into it; a row
    within the tolerance above 1 can put a row outside the group ahead, and it is counted."""
    codes = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    counts = np.array([2.0, 1.0, 3.0, 1.0])
    pools = np.zeros(4, dtype=np.int64)
    w = np.array([0.4, 0.3, 0.2, 0.1])
    rate = np.array([1.0, 1.0, 1.0 + 5e-9, 1.0])
    ret = np.zeros(4)
    combos = [(0,), (1,), (0, 1)]
    P = dense_from_definition(ret, rate, w, pools)
    got = c1_risk_form(ret, rate, w, pools, codes, counts, combos)
    want = brute_force_max_risk(P, codes, counts, combos)
    assert got.max_risk == pytest.approx(want, rel=1e-12)
    assert_same_report(got, c1_risk(sp.csr_matrix(P), codes, counts, combos))
    # in the group of cells with second value 1, row 2 (outside it) sends the most into it
    in_g = codes[:, 1] == 1
    S = P[:, in_g].sum(axis=1)
    assert int(np.argmax(S)) == 2 and not in_g[2]


def test_fails_closed():
    ret, rate, w, pools, codes, counts, combos = random_case(3)
    args = (codes, counts, combos)
    assert np.isfinite(c1_risk_form(ret, rate, w, pools, *args).max_risk)
    for name, bad in (("nan", np.nan), ("inf", np.inf), ("negative", -1e-9)):
        for which in range(3):
            arrs = [ret.copy(), rate.copy(), w.copy()]
            arrs[which][4] = bad
            rep = c1_risk_form(*arrs, pools, *args)
            assert np.isnan(rep.max_risk), (name, which)
            assert not rep.max_risk <= 0.99
    # a row that does not sum to 1
    r2 = ret.copy()
    r2[0] += 1e-6
    assert np.isnan(c1_risk_form(r2, rate, w, pools, *args).max_risk)
    w2 = w * 1.01  # every pool's rows off
    assert np.isnan(c1_risk_form(ret, rate, w2, pools, *args).max_risk)
    # pools that are not non-negative integers
    assert np.isnan(c1_risk_form(ret, rate, w, pools + 0.5, *args).max_risk)
    assert np.isnan(c1_risk_form(ret, rate, w, pools - 1000, *args).max_risk)
    assert np.isnan(c1_risk_form(ret, rate, w, np.where(pools == 2, np.nan, pools), *args).max_risk)
    # empty Π: nothing checked, nothing passes
    assert np.isnan(c1_risk_form(ret, rate, w, pools, codes, counts, []).max_risk)
    # arrays of another length than the cells
    with pytest.raises(ValueError):
        c1_risk_form(ret[:-1], rate, w, pools, *args)
    with pytest.raises(ValueError):
        c1_risk_form(ret, rate, w, pools[:-1], *args)
    with pytest.raises(ValueError):
        c1_risk_form(ret, rate, w, pools, codes, counts[:-1], combos)


# -- the release and the policy check a design with a form from its parameters -----------------


@pytest.fixture(scope="module")
def replacement(example):
    import pramopt
    from pramopt.example import EXAMPLE_QI

    res = pramopt.design(example, list(EXAMPLE_QI), alpha=0.1, structure="replacement", max_iter=5)
    assert res.success and res.form is not None
    return res


def test_release_checks_the_form_not_the_matrix(example, replacement, monkeypatch):
    import dataclasses

    import pramopt
    from pramopt.errors import DesignMismatchError
    from pramopt.publish import c1_check, frame

    res = replacement
    table = res.table
    want = c1_risk(res.matrix, table.codes, table.counts, res.combination_indices)
    got = frame.full_c1_check(res, table, res.combination_indices)
    assert_same_report(got, want)
    calls = []
    real = c1_check.c1_risk_form

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    def refuse(*a, **k):
        raise AssertionError("a design with a form was checked on its matrix")

    monkeypatch.setattr(c1_check, "c1_risk_form", spy)
    monkeypatch.setattr(c1_check, "c1_risk", refuse)
    out = pramopt.release(example, res, seed=2)
    assert len(out) == len(example) and calls
    # a design claiming an alpha below its risk is refused from its form
    weak = dataclasses.replace(res, alpha=0.999 * want.max_risk)
    assert weak.form is not None
    with pytest.raises(DesignMismatchError, match="fails C1"):
        pramopt.release(example, weak, seed=2)
    # without a form: the matrix, as before
    monkeypatch.setattr(c1_check, "c1_risk", c1_risk)
    bare = dataclasses.replace(weak, form=None)
    with pytest.raises(DesignMismatchError, match="fails C1"):
        pramopt.release(example, bare, seed=2)


def test_form_that_fails_closed_refuses_the_release(example, replacement, monkeypatch):
    """A form whose C1 check fails closed (NaN) is refused even where its matrix would pass."""
    import pramopt
    from pramopt.errors import DesignMismatchError
    from pramopt.publish import c1_check

    nan = c1_risk_form(np.ones(1), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros((1, 1)), [1], [])
    monkeypatch.setattr(c1_check, "c1_risk_form", lambda *a, **k: nan)
    with pytest.raises(DesignMismatchError, match="fails C1"):
        pramopt.release(example, replacement, seed=2)


def test_policy_checks_the_form_again(example, replacement, monkeypatch):
    import pramopt
    from pramopt.errors import DesignMismatchError
    from pramopt.publish import c1_check

    res = replacement
    table = res.table
    qi = list(res.qi)
    # a policy over every pair at a stricter alpha than the design's: checked again
    pairs = [list(c) for c in itertools.combinations(qi, 2)]
    idx = [tuple(qi.index(v) for v in c) for c in pairs]
    risk = c1_risk(res.matrix, table.codes, table.counts, idx).max_risk
    assert 0 < risk < res.alpha

    def refuse(*a, **k):
        raise AssertionError("a design with a form was checked on its matrix")

    monkeypatch.setattr(c1_check, "c1_risk", refuse)
    ok = pramopt.release_policy(alpha=min(0.99, risk * 1.001), combinations=pairs)
    pramopt.release(example, res, seed=1, policy=ok)
    bad = pramopt.release_policy(alpha=risk * 0.999, combinations=pairs)
    with pytest.raises(DesignMismatchError, match="checked again under the policy"):
        pramopt.release(example, res, seed=1, policy=bad)


# -- assess from the form ----------------------------------------------------------------------


def table_of(codes, counts):
    import pandas as pd

    from pramopt.frequency.table import frequency_table

    reps = np.repeat(np.arange(len(counts)), counts.astype(int))
    df = pd.DataFrame({f"v{i}": codes[reps, i] for i in range(codes.shape[1])})
    table = frequency_table(df, list(df.columns))
    assert np.array_equal(table.codes, codes) and np.array_equal(table.counts, counts)
    return table


def one_pool_moving(seed: int, K: int = 12):
    """One pool, every cell moving records and receiving them (finite ε and k), with ties."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.2, 1.0, K)
    w /= w.sum()
    rate = rng.uniform(0.1, 0.9, K)
    rate[:2] = rate[-1]  # tied rates
    return 1.0 - rate, rate, w, np.zeros(K, dtype=np.int64)


FIGURES = ("max_risk", "k", "epsilon", "expected_changes", "loss", "invariance_error")


def assert_assessments_equal(got, want, figures=FIGURES + ("condition_number",)):
    for key in figures:
        g, r = getattr(got, key), getattr(want, key)
        assert g == pytest.approx(r, rel=1e-9, abs=1e-12, nan_ok=True), (key, g, r)
    for key in ("n_records", "n_cells", "n_present", "n_combinations", "alpha", "r1_max"):
        assert getattr(got, key) == getattr(want, key), key


@pytest.mark.parametrize("seed", range(12))
def test_assess_from_the_form_equals_the_dense_assessment(seed):
    from pramopt.risk.assessment import _assess_form, assess
    from pramopt.structured import ReplacementForm

    ret, rate, w, pools, codes, counts, combos = random_case(seed, K=24, n_pools=1 + seed % 3)
    if seed % 4 == 3:  # one pool, every cell moving and receiving: ε and k finite
        ret, rate, w, pools = one_pool_moving(seed, K=len(ret))
    table = table_of(codes, counts)
    form = ReplacementForm(ret, rate, w, pools)  # retention >= 0.05 here
    P = dense_from_definition(ret, rate, w, pools)
    want = assess(table, P, alpha=0.3)
    got = _assess_form(table, form, None, [tuple(c) for c in want_combos(table)], 0.3, "assess")
    assert got is not None
    assert_assessments_equal(got, want)
    if seed % 4 == 3:
        assert np.isfinite(got.epsilon) and got.k > 1.0


def want_combos(table):
    from pramopt.frequency.combinations import resolve_combinations

    return resolve_combinations(table.qi, size=3, explicit=None, owner="assess")


def test_column_ratios_of_one_pool_equal_the_dense_ones():
    from pramopt.risk.assessment import form_dp_epsilon, form_pk_ratio
    from pramopt.risk.dp_pk_anonymity import dp_epsilon, pk_ratio
    from pramopt.structured import ReplacementForm

    for seed in range(20):
        ret, rate, w, pools = one_pool_moving(seed, K=3 + seed % 9)
        if seed % 3 == 0:  # the largest weight on the largest rate: other extremes bind
            rate[np.argmax(w)] = rate.max() * 1.05
            ret = 1.0 - rate
        f = ReplacementForm(ret, rate, w, pools)
        P = dense_from_definition(ret, rate, w, pools)
        assert form_dp_epsilon(f) == pytest.approx(dp_epsilon(P), rel=1e-12)
        assert form_pk_ratio(f) == pytest.approx(pk_ratio(P), rel=1e-12)
    # two cells, a kept cell, a cell receiving nothing, two pools
    cases = [
        (np.array([0.6, 0.7]), np.array([0.4, 0.3]), np.array([0.5, 0.5]), [0, 0]),
        (np.array([1.0, 0.5, 0.6]), np.array([0.0, 0.5, 0.4]), np.array([0.2, 0.5, 0.3]), [0] * 3),
        (np.array([1.0, 0.5, 0.6]), np.array([0.0, 0.5, 0.4]), np.array([0.0, 0.5, 0.5]), [0] * 3),
        (
            np.array([0.6, 0.7, 0.5]),
            np.array([0.4, 0.3, 1.0]),
            np.array([0.5, 0.5, 0.5]),
            [0, 0, 1],
        ),
        (np.array([1.0]), np.array([0.0]), np.array([0.0]), [0]),
    ]
    for ret, rate, w, pools in cases:
        f = ReplacementForm(ret, rate, w, pools)
        P = dense_from_definition(ret, rate, w, pools)
        np.testing.assert_allclose(P.sum(axis=1), 1.0)
        assert form_dp_epsilon(f) == pytest.approx(dp_epsilon(P), rel=1e-12)
        assert form_pk_ratio(f) == pytest.approx(pk_ratio(P), rel=1e-12)


def test_condition_number_of_large_pools_is_the_exact_one_norm_one(monkeypatch):
    from pramopt.risk import assessment
    from pramopt.structured import ReplacementForm

    monkeypatch.setattr(assessment, "DENSE_MAX", 3)  # every pool "large"
    for seed in range(6):
        ret, rate, w, pools, *_ = random_case(seed, K=30, n_pools=2)
        f = ReplacementForm(np.where(ret > 0, ret, 1.0), rate, w, pools)
        P = dense_from_definition(f.retention, rate, w, pools)
        want = np.linalg.norm(P, 1) * np.linalg.norm(np.linalg.inv(P), 1)
        assert assessment.form_condition_number(f) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("structure", ["replacement", "blocks"])
def test_assess_of_a_design_with_a_form_builds_no_dense_matrix(example, structure, monkeypatch):
    import dataclasses

    import pramopt
    from pramopt.example import EXAMPLE_QI
    from pramopt.risk import assessment

    qi = list(EXAMPLE_QI)
    res = pramopt.design(example, qi, alpha=0.1, structure=structure, max_iter=5)
    assert res.form is not None
    dense = res.to_dense()
    want = pramopt.assess(example, dense, qi=qi, alpha=0.1)
    bare = pramopt.assess(example, dataclasses.replace(res, form=None), qi=qi, alpha=0.1)

    def refuse(*a, **k):
        raise AssertionError("a design with a form was assessed on a dense matrix")

    monkeypatch.setattr(assessment, "as_transition_matrix", refuse)
    monkeypatch.setattr(type(res), "to_dense", refuse)
    got = pramopt.assess(example, res, qi=qi, alpha=0.1)
    assert_assessments_equal(got, want)
    assert_assessments_equal(bare, want)


def test_assess_command_on_a_folder_of_parameters(example, tmp_path, monkeypatch):
    """``pramopt assess --matrix FOLDER`` on a design kept as parameters: the figures of the same
    design kept as entries (read back dense), its report written, and no dense matrix made."""
    import dataclasses
    import io
    import json
    from contextlib import redirect_stderr, redirect_stdout

    import pramopt
    from pramopt.cli import main
    from pramopt.example import EXAMPLE_QI
    from pramopt.risk import assessment

    def run(*argv):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in argv])
        return code, out.getvalue(), err.getvalue()

    qi = list(EXAMPLE_QI)
    csv = tmp_path / "data.csv"
    example.to_csv(csv, index=False)
    as_read = pramopt.io.read_table(csv, text=qi)  # identifying values as the command reads them
    res = pramopt.design(as_read, qi, alpha=0.1, structure="replacement", max_iter=5)
    new = pramopt.save_design(res, tmp_path / "new").parent
    old = pramopt.save_design(dataclasses.replace(res, form=None), tmp_path / "old").parent
    code, out, err = run("assess", "--matrix", old, "--data", csv, "--qi", ",".join(qi), "--json")
    assert code == 0, err
    want = json.loads(out)

    def refuse(*a, **k):
        raise AssertionError("a design kept as parameters was assessed on a dense matrix")

    monkeypatch.setattr(assessment, "as_transition_matrix", refuse)
    monkeypatch.setattr(pramopt.DesignResult, "to_dense", refuse)
    code, out, err = run(
        "assess", "--matrix", new, "--data", csv, "--qi", ",".join(qi), "--json",
        "--out", tmp_path / "rep",
    )  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key
        else:
            assert got[key] == value, key
    assert {p.name for p in (tmp_path / "rep").iterdir()} >= {"report.html", "assessment.json"}


@pytest.mark.parametrize("bad", [np.inf, np.nan, -1.0])
def test_counts_that_are_not_finite_and_non_negative_fail_closed(bad):
    # an infinite count made every left-hand side 0 (a pass); both checks now fail closed
    K = 4
    codes = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    counts = np.array([5.0, 1.0, 3.0, 2.0])
    counts[1] = bad
    ret, rate = np.full(K, 0.6), np.full(K, 0.4)
    w, pools = np.full(K, 0.25), np.zeros(K, dtype=int)
    P = dense_from_definition(ret, rate, w, pools)
    combos = [(0,), (1,)]
    assert np.isnan(c1_risk(P, codes, counts, combos).max_risk)
    assert np.isnan(c1_risk_form(ret, rate, w, pools, codes, counts, combos).max_risk)
