"""max_changed_variables and change_weights, checked from their definitions.

Every non-zero transition is checked against the Hamming distance of its two cells computed here
from the codes by brute force; C1 by the full, unreduced rows of tests/full_c1.py; the loss by the
covariance formula of tests/reference.py; the smallest feasible distance on a case small enough to
argue by hand.
"""

from __future__ import annotations

import io
import itertools
import json
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from full_c1 import full_c1_rows
from reference import l2_loss_from_covariance

import pramopt
from pramopt.cli import main
from pramopt.errors import InvalidParameterError
from pramopt.example import EXAMPLE_QI, example_data
from pramopt.result import Status
from pramopt.spec import design_kwargs, load_spec
from pramopt.verified_result import finish
from pramopt.verify import changed_variables_violations


def _distances(P, codes):
    """(row, col, value, Hamming distance) of every non-zero off-diagonal entry, by brute force."""
    D = P.toarray()
    out = []
    for k, col in zip(*np.nonzero(D)):
        if k != col:
            out.append((k, col, D[k, col], sum(int(a != b) for a, b in zip(codes[k], codes[col]))))
    return out


def _c1_holds(res, size=3):
    A = full_c1_rows(res.table, res.alpha, size)
    return float(np.max(A @ res.matrix.toarray().ravel())) <= 1e-12


@pytest.fixture(scope="module")
def example():
    return example_data(), list(EXAMPLE_QI)


@pytest.mark.parametrize("d", [1, 2])
def test_every_transition_within_d_and_c1_holds(example, d):
    df, qi = example
    res = pramopt.design(df, qi, 0.1, max_changed_variables=d)
    assert res.success
    dist = _distances(res.matrix, res.table.codes)
    assert dist and max(h for *_, h in dist) <= d
    assert _c1_holds(res)
    # the reported figure: expected changed values per changed record, from P and U0 directly
    U = res.table.counts
    moved = sum(U[k] * v for k, _, v, _ in dist)
    mean = sum(U[k] * v * h for k, _, v, h in dist) / moved
    assert res.details["changed_variables"]["mean"] == pytest.approx(mean, rel=1e-12)
    assert res.details["changed_variables"]["max"] == max(h for *_, h in dist)
    assert res.details["max_changed_variables_check"]["violations"] == 0


def _hand_case():
    """Three binary variables, one combination (all three): the four cells with at most one 1
    hold 1 record each, the four others 50 (n = 204).  Cell 000 is rare; only the cells within
    Hamming distance 1 of it (000, 100, 010, 001: 4 records) can release records as 000, so C1's
    ``P_mm <= alpha * D_000 <= 0.1 * 4 = 0.4`` for m = 000 leaves no design with a diagonal floor
    of 0.51.  Within distance 2 the cells 110, 101, 011 (150 records) can send records into 000."""
    rows = []
    for cell in itertools.product([0, 1], repeat=3):
        rows += [cell] * (1 if sum(cell) <= 1 else 50)
    return pd.DataFrame(rows, columns=["a", "b", "c"])


def test_infeasible_names_the_smallest_feasible_distance():
    df = _hand_case()
    res = pramopt.design(df, ["a", "b", "c"], 0.1, max_changed_variables=1)
    assert res.status is Status.INFEASIBLE
    assert res.details["smallest_max_changed_variables"] == 2
    assert "is 2" in res.message and "Only 4 records" in res.message
    ok = pramopt.design(df, ["a", "b", "c"], 0.1, max_changed_variables=2)
    assert ok.success
    dist = _distances(ok.matrix, ok.table.codes)
    assert max(h for *_, h in dist) == 2  # distance 2 is needed, and used
    assert _c1_holds(ok)


def test_change_weights_reduce_changes_of_the_weighted_variable(example):
    df, qi = example
    plain = pramopt.design(df, qi, 0.1)
    heavy = pramopt.design(df, qi, 0.1, change_weights={"v5": 5})
    assert heavy.success and _c1_holds(heavy)

    def changes_of(res, j):  # expected records whose value of variable j changes, from P and U0
        codes = res.table.codes
        return sum(
            res.table.counts[k] * v
            for k, col, v, _ in _distances(res.matrix, codes)
            if codes[k, j] != codes[col, j]
        )

    j = qi.index("v5")
    assert changes_of(heavy, j) < 0.8 * changes_of(plain, j)
    # the reported loss stays the exact L2 loss; the weighted objective adds (2/n^2) sum U0 P w h
    n = heavy.table.counts.sum()
    assert heavy.loss == pytest.approx(
        l2_loss_from_covariance(heavy.matrix.toarray(), heavy.table.counts), rel=1e-8
    )
    assert heavy.details["weighted_objective"] == pytest.approx(
        heavy.loss + 2 / n**2 * 5 * changes_of(heavy, j), rel=1e-10
    )


def test_the_check_fails_closed_on_a_forged_matrix(example):
    df, qi = example
    res = pramopt.design(df, qi, 0.1, max_changed_variables=1)
    P = res.matrix.toarray()
    codes = res.table.codes
    # move a little of a row's diagonal to a cell three variables away
    k = 0
    far = next(col for col in range(len(codes)) if np.count_nonzero(codes[k] != codes[col]) == 3)
    P[k, far] += 1e-6
    P[k, k] -= 1e-6
    assert changed_variables_violations(sp.csr_matrix(P), codes, 1) == (1, 3)
    out = finish(
        P,
        res.table,
        [tuple(qi.index(v) for v in c) for c in res.combinations],
        0.1,
        Status.SUCCESS,
        "forged",
        params={"max_changed_variables": 1},
    )
    assert out.status is Status.UNVERIFIED and "does not meet it" in out.message
    # a NaN entry is a violation whatever the bound
    Q = np.eye(len(codes))
    Q[0, 1] = np.nan
    assert changed_variables_violations(sp.csr_matrix(Q), codes, len(qi))[0] == 1


def _run(*argv):
    o, e = io.StringIO(), io.StringIO()
    with redirect_stdout(o), redirect_stderr(e):
        code = main([str(a) for a in argv])
    return code, o.getvalue(), e.getvalue()


def test_cli_flags_and_spec_keys_round_trip(tmp_path):
    code, _, err = _run(
        "design",
        "--max-changed-variables",
        2,
        "--change-weights",
        "v5=5,v1=0.5",
        "--out",
        tmp_path / "d",
        "--quiet",
    )
    assert code == 0, err
    rec = json.loads((tmp_path / "d" / "design.json").read_text())
    assert rec["params"]["max_changed_variables"] == 2
    assert rec["params"]["change_weights"] == {"v5": 5.0, "v1": 0.5}
    assert "max changed variables" in (tmp_path / "d" / "report.md").read_text()
    again = pramopt.design(example_data(), list(EXAMPLE_QI), **rec["params"])
    P = pd.read_csv(tmp_path / "d" / "matrix.csv")
    assert again.matrix.nnz == int((P.probability > 0).sum())
    spec = tmp_path / "s.toml"
    spec.write_text(
        'name = "s"\n[data]\nbuiltin = "example"\nqi = ["v1", "v2", "v3", "v4", "v5"]\n'
        "[design]\nalpha = 0.1\nmax_changed_variables = 2\nchange_weights = { v5 = 5 }\n"
    )
    kw = design_kwargs(load_spec(spec))
    assert kw["max_changed_variables"] == 2 and dict(kw["change_weights"]) == {"v5": 5}
    code, _, err = _run("design", "--change-weights", "v5", "--out", tmp_path / "e")
    assert code != 0 and "NAME=WEIGHT" in err


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"max_changed_variables": 0}, "'max_changed_variables'"),
        ({"change_weights": {"nope": 1}}, "'change_weights'"),
        ({"change_weights": {"v5": -1}}, "change_weights['v5']"),
        ({"max_changed_variables": 1, "structure": "blocks"}, "'max_changed_variables'"),
        ({"max_changed_variables": 1, "epsilon": 2.0}, "'max_changed_variables'"),
    ],
)
def test_bad_values_are_refused_by_name(example, kw, needle):
    df, qi = example
    with pytest.raises(InvalidParameterError, match=None) as e:
        pramopt.design(df, qi, 0.1, **kw)
    assert needle in str(e.value)


def test_no_distance_helps_when_no_general_design_exists():
    """Every one of the 8 cells holds 2 records and is its own group (n = 16): the released counts D_m
    sum to 16, so some D_m <= 2 and that cell's P_mm <= 0.1 * 2 < 0.51 whatever the transitions; no
    max_changed_variables can help, and the result says so."""
    df = pd.DataFrame(
        [c for c in itertools.product([0, 1], repeat=3) for _ in range(2)], columns=["a", "b", "c"]
    )
    res = pramopt.design(df, ["a", "b", "c"], 0.1, max_changed_variables=1)
    assert res.status is Status.INFEASIBLE
    assert res.details["smallest_max_changed_variables"] is None
    assert "No max_changed_variables allows" in res.message


@pytest.mark.parametrize("structure", ["blocks", "replacement"])
def test_closed_forms_under_change_weights_report_the_exact_loss(example, structure):
    """The block and replacement designs are ranked by the weighted objective, but the result's
    loss is the exact L2 loss (covariance formula) and the weighted objective adds the weighted
    changes once, both computed here from P and the codes."""
    df, qi = example
    res = pramopt.design(df, qi, 0.1, change_weights={"v5": 5}, structure=structure)
    assert res.success and res.reduction.structure == structure
    exact = l2_loss_from_covariance(res.matrix.toarray(), res.table.counts)
    assert res.loss == pytest.approx(exact, rel=1e-8)
    codes, U = res.table.codes, res.table.counts
    j = qi.index("v5")
    weighted = sum(
        U[k] * v * 5
        for k, col, v, _ in _distances(res.matrix, codes)
        if codes[k, j] != codes[col, j]
    )
    assert res.details["weighted_objective"] == pytest.approx(
        exact + 2 / U.sum() ** 2 * weighted, rel=1e-8
    )


@pytest.mark.parametrize("w", [float("inf"), -float("inf")])
def test_an_infinite_weight_is_refused_by_name(example, w):
    df, qi = example
    with pytest.raises(InvalidParameterError, match=r"change_weights\['v5'\]"):
        pramopt.design(df, qi, 0.1, change_weights={"v5": w})


def _kept_far_case():
    """a (3 values), b, c binary; the six cells with c = 1 are kept.  The cells that may send records
    (c = 0) vary in a and b only, but a replacement design also sends records into the kept cells,
    three variables away from some senders."""
    rng = np.random.default_rng(0)
    rows = []
    for cell in itertools.product(range(3), [0, 1], [0, 1]):
        rows += [cell] * int(rng.integers(1, 30))
    keep = [{"a": a, "b": b, "c": 1} for a in range(3) for b in [0, 1]]
    return pd.DataFrame(rows, columns=["a", "b", "c"]), keep


def test_replacement_is_not_used_when_kept_cells_receive_from_too_far():
    df, keep = _kept_far_case()
    kw = dict(combination_size=2, keep_cells=keep, max_changed_variables=2)
    with pytest.raises(InvalidParameterError, match="'max_changed_variables'"):
        pramopt.design(df, ["a", "b", "c"], 0.2, structure="replacement", **kw)
    res = pramopt.design(df, ["a", "b", "c"], 0.2, **kw)
    assert res.success and "replacement" not in res.details["tried"]
    assert max(h for *_, h in _distances(res.matrix, res.table.codes)) <= 2
    assert _c1_holds(res, size=2)


def test_cli_names_the_flag_of_a_bad_weight(tmp_path):
    code, _, err = _run("design", "--change-weights", "v5=-1", "--out", tmp_path / "d")
    assert (
        code == 2
        and "--change-weights (entry 'v5') must be a real number in [0, inf); got -1.0" in err
    )
    assert not (tmp_path / "d").exists()


@pytest.mark.slow  # two dense designs under k: about 25 s
def test_privacy_designs_are_chosen_by_the_weighted_objective(example):
    """Under k the dense design competes with K-ary randomized response (which ignores the weights);
    with change_weights the pick is by the weighted objective, computed here from P and the codes:
    the result beats the unweighted pick on it and changes v5 less."""
    df, qi = example
    j = qi.index("v5")

    def weighted(res):
        P, codes, U = res.matrix.tocoo(), res.table.codes, res.table.counts.astype(float)
        moved = U[P.row] * P.data * 50 * (codes[P.row, j] != codes[P.col, j])
        v5 = float((U[P.row] * P.data * (codes[P.row, j] != codes[P.col, j])).sum())
        return l2_loss_from_covariance(res.matrix.toarray(), U) + 2 / U.sum() ** 2 * moved.sum(), v5

    plain = pramopt.design(df, qi, 0.1, k=3)
    heavy = pramopt.design(df, qi, 0.1, k=3, change_weights={"v5": 50})
    assert heavy.success and _c1_holds(heavy)
    (f_heavy, v5_heavy), (f_plain, v5_plain) = weighted(heavy), weighted(plain)
    assert heavy.details["weighted_objective"] == pytest.approx(f_heavy, rel=1e-8)
    assert f_heavy < f_plain and v5_heavy < v5_plain


@pytest.mark.parametrize("seed", [0, 1])
def test_changes_bound_under_max_changed_is_below_the_exact_restricted_minimum(seed):
    """The flow relaxation with only the permitted transitions bounds the expected changes of every
    design meeting the full C1 within distance 1: the exact minimum over P (full C1 rows from the
    definition, P_mk = 0 beyond distance 1) is at least the bound, which is itself above the
    unrestricted bound (the restriction is felt)."""
    from full_c1 import min_changes

    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem
    from pramopt.optimize.relaxation import changes_bound
    from pramopt.params import DesignParams

    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            f"v{i}": rng.choice(L, 250, p=(w := 1 / np.arange(1, L + 1) ** 1.5) / w.sum())
            for i, L in enumerate((3, 3, 2, 3))
        }
    )
    t = pramopt.frequency_table(df, list(df.columns))
    combos = resolve_combinations(t.qi, None, None, "test")

    def bound(d):
        return changes_bound(
            DesignProblem.build(
                t, combos, DesignParams.from_options("design", alpha=0.1, max_changed_variables=d)
            )
        )

    K = t.n_cells
    far = np.array(
        [
            [sum(a != b for a, b in zip(t.codes[k], t.codes[m])) > 1 for m in range(K)]
            for k in range(K)
        ]
    )
    exact = min_changes(t, 0.1, hi=np.where(far.ravel(), 0.0, 1.0))
    assert bound(None) < bound(1) <= exact + 1e-6


@pytest.mark.parametrize(
    "seed, d, kw", [(0, 1, {}), (1, 2, {}), (2, 1, {"fixed": ["v0"]}), (3, 2, {"keep": True})]
)
def test_permitted_pairs_are_those_of_the_brute_force_scan(seed, d, kw, monkeypatch):
    """Every ordered pair of different cells at Hamming distance <= d, not out of a kept cell and
    within one stratum of the fixed variables, by a double loop over the cells; over a limit
    below their number, None, from the count of a scan (no listing) or from the listing."""
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize import problem as problem_module
    from pramopt.optimize.problem import DesignProblem
    from pramopt.params import DesignParams

    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"v{i}": rng.integers(0, L, 300) for i, L in enumerate((3, 4, 2, 3, 2))})
    t = pramopt.frequency_table(df, list(df.columns))
    keep = (
        [dict(zip(t.qi, map(int, t.codes[i]))) for i in range(0, t.n_cells, 7)]
        if kw.get("keep")
        else None
    )
    p = DesignParams.from_options(
        "design", alpha=0.1, max_changed_variables=d, fixed=kw.get("fixed"), keep_cells=keep
    )
    pb = DesignProblem.build(t, resolve_combinations(t.qi, None, None, "test"), p)
    kept = {tuple(c.values()) for c in keep or []}
    cells = [tuple(int(x) for x in c) for c in t.codes]
    want = [
        (k, m)
        for k in range(len(cells))
        for m in range(len(cells))
        if k != m
        and cells[k] not in kept
        and sum(a != b for a, b in zip(cells[k], cells[m])) <= d
        and (not kw.get("fixed") or cells[k][0] == cells[m][0])
    ]
    listed = []
    by_groups = DesignProblem._near_pairs
    monkeypatch.setattr(
        DesignProblem, "_near_pairs", lambda self, lim: listed.append(lim) or by_groups(self, lim)
    )
    r, c = pb.allowed_pairs(10**6)
    assert list(zip(r.tolist(), c.tolist())) == want and listed == [10**6]
    assert pb.allowed_pairs(len(want) - 1) is None

    def fresh():
        return DesignProblem.build(t, resolve_combinations(t.qi, None, None, "test"), p)

    assert fresh()._count_allowed(10**9) == len(want)
    assert fresh().allowed_pairs(len(want) - 1) is None and listed == [10**6]  # counted only
    monkeypatch.setattr(problem_module, "SCAN_PAIRS_MAX", 0)
    assert fresh().allowed_pairs(len(want) - 1) is None and listed == [10**6, len(want) - 1]
