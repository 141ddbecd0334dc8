"""Reliability: options keep their promises, no false "infeasible", errors at the door.

Each test reproduces a failure seen in a randomized campaign (see ``random_cases.py``); the
property tests at the end run that campaign derandomised (and larger with ``-m slow``).  Every
check of C1 here is the brute force of ``random_cases`` (written from the paper's definition).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from random_cases import brute_force_risk, campaign, make_case, option_violations, witness

import pramopt
from pramopt.optimize.strategies import Attempt, AttemptStatus
from pramopt.optimize.strategies import blocks as blocks_mod

QI = ["v1", "v2", "v3", "v4", "v5"]


def _run(case, **override):
    opts = {**case["options"], **override}
    return pramopt.design(case["df"], case["qi"], case["alpha"], **opts), opts


def _assert_safe_and_honoured(res, case, opts):
    assert res.success, res.message
    assert brute_force_risk(res, case["df"], case["qi"], opts) <= case["alpha"]
    assert option_violations(res, case["df"], case["qi"], opts) == []


# -- options keep their promises --------------------------------------------------------------


def test_block_design_honours_min_diagonal():
    # seed 43: blocks at min_diagonal 0.7 once returned SUCCESS with a smallest diagonal of 0.01
    case = make_case(43)
    assert case["options"]["structure"] == "blocks" and case["options"]["min_diagonal"] == 0.7
    res, opts = _run(case)
    if res.success:
        _assert_safe_and_honoured(res, case, opts)
    else:
        assert res.status is pramopt.Status.INFEASIBLE and "0.7" in res.message


def test_min_diagonal_honoured_in_auto_mode(example):
    # a floor the general design cannot have (the flow relaxation caps it near 0.4) but a block or
    # replacement design can: either way every diagonal entry is at least the floor
    res = pramopt.design(example, QI, alpha=0.1, min_diagonal=0.3, invariant=True)
    assert res.success, res.message
    assert res.matrix.diagonal().min() >= 0.3
    np.testing.assert_allclose(res.counts @ res.matrix, res.counts, rtol=0, atol=1e-6)


# -- a weaker option never turns a success into a failure -----------------------------------


@pytest.mark.parametrize("seed", [4, 33, 95])
def test_invariant_in_auto_mode_is_not_falsely_infeasible(seed):
    # P = lam I + (1 - lam) 1 w^T with w = U0 / n is invariant, invertible and meets C1 here
    case = make_case(seed)
    assert case["options"].get("invariant") and "structure" not in case["options"]
    assert witness(case["df"], case["qi"], case["alpha"], case["options"]) <= case["alpha"]
    res, opts = _run(case)
    _assert_safe_and_honoured(res, case, opts)


def test_min_diagonal_zero_is_no_constraint(example):
    for alpha in (0.1, 0.05):
        base = pramopt.design(example, QI, alpha=alpha, max_iter=5)
        zero = pramopt.design(example, QI, alpha=alpha, max_iter=5, min_diagonal=0.0)
        assert base.success and zero.success, zero.message


def test_margin_zero_grows(example):
    # at margin 0 the solver's tolerance leaves the risk a hair above alpha; the margin must grow
    # from a positive floor (0 x 10 stays 0) and end verified
    res = pramopt.design(example, QI, alpha=0.1, margin=0, max_iter=5)
    assert res.success and res.max_risk <= 0.1, res.message


def _identity_at_margin_zero(real):
    def solve(problem, target, a_solve, trace):
        if a_solve >= problem.alpha:  # the margin-0 attempt: a design that fails the check
            return Attempt(
                AttemptStatus.OK, P=sp.identity(problem.K, format="csr"), reduction=None, solver="x"
            )
        return real(problem, target, a_solve, trace)

    return solve


def test_block_path_grows_the_margin(example, monkeypatch):
    monkeypatch.setattr(
        blocks_mod, "_solve_at_size", _identity_at_margin_zero(blocks_mod._solve_at_size)
    )
    res = pramopt.design(example, QI, alpha=0.1, margin=0, structure="blocks", max_iter=5)
    assert res.success and res.max_risk <= 0.1, res.message


def test_block_path_reports_unverified_not_infeasible(example, monkeypatch):
    def never(problem, target, a_solve, trace):
        return Attempt(
            AttemptStatus.OK, P=sp.identity(problem.K, format="csr"), reduction=None, solver="x"
        )

    monkeypatch.setattr(blocks_mod, "_solve_at_size", never)
    res = pramopt.design(example, QI, alpha=0.1, structure="blocks")
    assert res.status is pramopt.Status.UNVERIFIED and not res.success
    assert "failed the full C1 check" in res.message


# -- INFEASIBLE only when an option rules every design out, and then it is named ---------------


def test_infeasible_names_min_diagonal(example):
    # invariant designs of the example at alpha 0.1 have diagonal floors of at most 0.4 (flow relaxation)
    res = pramopt.design(example, QI, alpha=0.1, invariant=True, min_diagonal=0.6, max_iter=3)
    assert res.status is pramopt.Status.INFEASIBLE
    assert "min_diagonal = 0.6 rules out every design" in res.message


def test_infeasible_names_a_stratum_too_small(example):
    # three records alone in a stratum of v1: for a combination with v1, the U0-weighted mean of
    # S[m, g] / D_g over the stratum's cells is 1/3, so some left-hand side of C1 is >= 1/3 > alpha
    df = example.copy()
    df.loc[:2, "v1"] = 9
    res = pramopt.design(df, QI, alpha=0.1, fixed=["v1"], max_iter=3)
    assert res.status is pramopt.Status.INFEASIBLE
    assert "fixed = ['v1']: the 3 records with v1 = 9 can only move among themselves" in res.message
    assert pramopt.design(df, QI, alpha=0.1, max_iter=3).success


def test_infeasible_names_options_that_forbid_together(example):
    # a unique cell kept as it is, in an invariant design: its groups' denominators are their own
    # counts, too small for alpha; either option alone leaves designs
    t = pramopt.frequency_table(example, QI)
    k = int(np.argmin(t.counts))
    cell = {q: int(t.categories[j][t.codes[k, j]]) for j, q in enumerate(QI)}
    res = pramopt.design(example, QI, alpha=0.1, keep_cells=[cell], invariant=True, max_iter=3)
    assert res.status is pramopt.Status.INFEASIBLE
    assert "keep_cells and invariant together rule out every design" in res.message
    for one in ({"keep_cells": [cell]}, {"invariant": True}):
        assert pramopt.design(example, QI, alpha=0.1, max_iter=3, **one).success


# -- errors at the door ---------------------------------------------------------------------------


def test_unhashable_values_are_refused_with_the_variable_named(example):
    df = example.copy()
    df["v2"] = df["v2"].apply(lambda x: [x])
    with pytest.raises(
        pramopt.InvalidParameterError, match="'v2' must hold numbers or strings; record 0"
    ):
        pramopt.design(df, QI, alpha=0.1)


def test_combinations_as_a_string_is_refused(example):
    with pytest.raises(pramopt.InvalidParameterError, match="'combinations' parameter of design"):
        pramopt.design(example, QI, alpha=0.1, combinations="v1")


def test_integer_column_names(example):
    df = example.rename(columns={q: i for i, q in enumerate(QI)})
    res = pramopt.design(df, list(range(5)), alpha=0.1, max_iter=3)
    assert res.success and "0" in res.summary()


def test_progress_callback_errors_are_wrapped(example):
    def bad(*args):
        raise RuntimeError("boom")

    with pytest.raises(
        pramopt.CallbackError, match="progress callback raised RuntimeError: boom"
    ) as e:
        pramopt.design(example, QI, alpha=0.1, progress=bad)
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(
        pramopt.InvalidParameterError, match="'progress' parameter of design must be a callable"
    ):
        pramopt.design(example, QI, alpha=0.1, progress=3)


def test_large_problems_warn_before_the_work(monkeypatch):
    # many identifying variables: C(12, 3) = 220 triples; the warning names the figure and a way out
    import pramopt.optimize.designer as designer

    monkeypatch.setattr(designer, "LARGE_PROBLEM_ROWS", 10_000)

    def stop(*a, **k):  # the warning must come before the designer starts
        raise RuntimeError("started")

    monkeypatch.setattr(designer._Designer, "run", stop)
    rng = np.random.default_rng(5)
    df = pd.DataFrame({f"q{i}": rng.integers(0, 3, 300) for i in range(12)})
    with pytest.warns(
        pramopt.LargeProblemWarning,
        match="220 combinations of 12 identifying variables.*combination_size",
    ):
        with pytest.raises(RuntimeError, match="started"):
            pramopt.design(df, list(df.columns), alpha=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="started"):
            pramopt.design(df, list(df.columns), alpha=0.1, combination_size=1)


# -- every check fails closed ---------------------------------------------------------------------


def _bad_matrices(K):
    base = np.full((K, K), 1.0 / K)
    out = {}
    for name, v in (("nan", np.nan), ("inf", np.inf), ("negative", -0.1)):
        M = base.copy()
        M[1, 2] = v
        out[name] = M
    out["all nan"] = np.full((K, K), np.nan)
    out["wrong shape"] = np.full((K + 1, K + 1), 1.0 / (K + 1))
    return out


@pytest.mark.parametrize("bad", ["nan", "inf", "negative", "all nan", "wrong shape"])
def test_every_check_fails_closed(example, bad):
    # each check either refuses the matrix or reports a figure that passes no threshold
    t = pramopt.frequency_table(example, QI)
    M = _bad_matrices(t.n_cells)[bad]
    combos = pramopt.resolve_combinations(QI)
    try:
        risk = pramopt.c1_risk(M, t.codes, t.counts, combos).max_risk
    except (ValueError, pramopt.PramoptError):
        risk = None
    assert risk is None or not risk <= 0.99
    checks = {
        "dp_epsilon": lambda: pramopt.dp_epsilon(M),
        "pk_anonymity": lambda: pramopt.pk_anonymity(M, 100),
        "pk_ratio": lambda: pramopt.pk_ratio(M),
        "assess": lambda: pramopt.assess(example, M, QI),
    }
    if bad == "wrong shape":  # a matrix alone has no wrong shape; against the data it has
        checks = {"assess": checks["assess"]}
    for check in checks.values():
        with pytest.raises(pramopt.InvalidParameterError):
            check()
    res = pramopt.design(example, QI, alpha=0.1, max_iter=3)
    if M.shape == res.matrix.shape:
        import dataclasses

        forged = dataclasses.replace(res, matrix=sp.csr_array(M))
        with pytest.raises(pramopt.DesignMismatchError):
            pramopt.release(example, forged, seed=1)


# -- release trusts nothing it reads -----------------------------------------------------------


def test_edited_matrix_csv_is_detected(example, tmp_path):
    res = pramopt.design(example, QI, alpha=0.1, max_iter=3)
    pramopt.save_design(res, tmp_path)
    pramopt.load_design(tmp_path)  # as written: loads
    m = pd.read_csv(tmp_path / "matrix.csv")
    m.loc[0, "probability"] = 1.0
    m.to_csv(tmp_path / "matrix.csv", index=False)
    with pytest.raises(pramopt.DesignFileError, match="matrix.csv does not match its checksum"):
        pramopt.load_design(tmp_path)
    # and the checksum of matrix.csv cannot be edited away: it is guarded with alpha and status
    rec = json.loads((tmp_path / "design.json").read_text())
    rec["files"] = {}
    (tmp_path / "design.json").write_text(json.dumps(rec))
    with pytest.raises(pramopt.DesignFileError, match="modified"):
        pramopt.load_design(tmp_path)


# -- the property tests ---------------------------------------------------------------------------


def _assert_campaign(figures):
    problems = "\n".join(f"seed {s}: {p[:300]}" for s, p in figures["problems"])
    assert figures["unsafe"] == 0, problems
    assert figures["options broken"] == 0, problems
    assert figures["false infeasible"] == 0, problems
    assert figures["weaker option failed"] == 0, problems
    assert figures["other status"] == 0, problems
    assert figures["release problems"] == 0, problems


def test_random_designs_are_safe_honest_and_monotone():
    """Over random data: (a) every success passes the brute-force C1, (b) no INFEASIBLE for
    n > 1/alpha unless an option forbids every design, (c) a weaker option never turns a success
    into a failure, (d) every option holds in the result, (e) its design file states an alpha
    in (0, 1) and combinations, and a release of the data as CSV writes every record it did not
    change as it was read and reports exactly the records it changed."""
    _assert_campaign(campaign(range(1000, 1012)))


@pytest.mark.slow
def test_random_designs_campaign_large():
    _assert_campaign(campaign(range(2000, 2300)))


def test_workers_without_fixed_is_refused(example):
    with pytest.raises(
        pramopt.InvalidParameterError, match="'workers' and 'client' parameters of design"
    ):
        pramopt.design(example, QI, alpha=0.1, workers=2)
