"""The optimal per-variable design (``structure="per_variable"``).

Each test checks the design against a computation that shares no code with it: C1 by loops over
the dense Kronecker product over the whole product space (Cator et al., eq. (1)), the exact L2
loss from the dense inverse of that product, :func:`pramopt.verify.c1_risk` on the released rows,
sdcMicro's own matrices calibrated to the same alpha, Monte Carlo draws with stated tolerances,
and R's ``write.csv`` layout read back by ``pramopt assess --matrix VAR=FILE``.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import pramopt
from pramopt.cli import main
from pramopt.errors import InvalidParameterError
from pramopt.io import read_matrix
from pramopt.per_variable.check import check_product_c1
from pramopt.per_variable.compare import calibrate_sdcmicro_product
from pramopt.per_variable.kind import example_per_variable
from pramopt.per_variable.model import loss_gradient, loss_value, projections
from pramopt.per_variable.release import estimate_per_variable
from pramopt.per_variable.step import StepProblem, c1_rows, solve_step
from pramopt.verify import c1_risk

TESTDATA = "/work/shared/data/testdata.csv"


@pytest.fixture(scope="module")
def small():
    df, qi, opts = example_per_variable()
    return df, qi, opts, pramopt.design(df, qi, combination_size=2, **opts)


def dense(result):
    """Every combination of categories (last variable fastest), kron of the matrices, and U0."""
    labels = [list(result.variable_matrices[q].index) for q in result.qi]
    keys = list(itertools.product(*labels))
    P = np.ones((1, 1))
    for q in result.qi:
        P = np.kron(P, result.variable_matrices[q].to_numpy())
    return keys, P


def counts_of(df, qi, keys):
    rows = [tuple(r) for r in df[qi].itertuples(index=False)]
    return np.array([sum(r == k for r in rows) for k in keys], dtype=float)


def brute_c1(P, keys, U0, combos):
    """max over present m, π and k0 of P(m -> k0) / sum_l U0(l) P(l -> k0), by loops."""
    worst = 0.0
    for pi in combos:
        for k0 in {tuple(k[i] for i in pi) for k in keys}:
            into = np.array(
                [sum(P[m, c] for c, k in enumerate(keys) if tuple(k[i] for i in pi) == k0)
                 for m in range(len(keys))]
            )  # fmt: skip
            den = U0 @ into
            for m in np.flatnonzero(U0 * into):  # a group nothing reaches has no risk
                worst = max(worst, into[m] / den)
    return worst


def test_c1_holds_by_brute_force_over_the_product_space(small):
    df, qi, opts, res = small
    assert res.success and res.status is pramopt.Status.SUCCESS
    keys, P = dense(res)
    U0 = counts_of(df, qi, keys)
    combos = list(itertools.combinations(range(3), 2))
    risk = brute_c1(P, keys, U0, combos)
    assert risk <= opts["alpha"]
    assert res.max_risk == pytest.approx(risk, rel=1e-12)
    # some design was needed: the identity breaks C1 on these data
    assert brute_c1(np.eye(len(keys)), keys, U0, combos) > opts["alpha"]


def test_loss_and_figures_against_the_dense_kronecker_product(small):
    df, qi, _, res = small
    keys, P = dense(res)
    U0 = counts_of(df, qi, keys)
    n = U0.sum()
    Pinv = np.linalg.inv(P)
    dense_loss = np.sum(Pinv**2, axis=1) @ (U0 @ P) / n**2 - 1.0 / n  # Cator et al., Theorem 1
    assert res.loss == pytest.approx(dense_loss, rel=1e-9)
    changes = U0 @ (1.0 - np.diag(P))
    assert res.expected_changes == pytest.approx(changes, rel=1e-12)
    labels = np.array(keys, dtype=object)
    per = sum(
        U0[m] * P[m, k] * np.sum(labels[m] != labels[k])
        for m in range(len(keys)) for k in range(len(keys))
    ) / changes  # fmt: skip
    assert res.changed_variables == pytest.approx(per, rel=1e-9)


def test_loss_gradient_matches_central_differences(small):
    _, _, _, res = small
    t = res.table
    mats = res.matrices()
    for v in range(3):
        G = loss_gradient(t.codes, t.counts, mats, v)
        rng = np.random.default_rng(v)
        D = rng.normal(size=G.shape)
        h = 1e-6
        up, down = list(mats), list(mats)
        up[v], down[v] = mats[v] + h * D, mats[v] - h * D
        fd = (loss_value(t.codes, t.counts, up) - loss_value(t.codes, t.counts, down)) / (2 * h)
        assert (G * D).sum() == pytest.approx(fd, rel=1e-5)


@pytest.mark.parametrize("seed,block", [(0, None), (1, None), (2, 1), (3, 1), (4, 1)])
def test_independent_check_equals_verify_on_the_released_rows(seed, block, monkeypatch):
    """The projected check against :func:`pramopt.verify.c1_risk` on every released row (with
    ``block`` 1, one projected cell at a time, so that stopping early by count is exercised)."""
    if block is not None:
        monkeypatch.setattr("pramopt.per_variable.check._BLOCK", block)
    rng = np.random.default_rng(seed)
    levels = [3, 4, 2, 3]
    codes = np.array(list(itertools.product(*[range(L) for L in levels])))
    keep = rng.random(len(codes)) < 0.6
    codes, counts = codes[keep], rng.integers(1, 20, keep.sum())
    mats = []
    for L in levels:
        M = rng.random((L, L)) * (rng.random((L, L)) < 0.7) + np.eye(L) * 2
        mats.append(M / M.sum(axis=1, keepdims=True))
    cols = np.array(list(itertools.product(*[range(L) for L in levels])))
    R = np.ones((len(codes), len(cols)))
    for v, M in enumerate(mats):
        R *= M[np.ix_(codes[:, v], cols[:, v])]
    combos = [c for s in (1, 2, 3) for c in itertools.combinations(range(4), s)]
    ref = c1_risk(R, codes, counts, combos, col_codes=cols)
    got = check_product_c1(codes, counts, mats, combos)
    assert got.max_risk == pytest.approx(ref.max_risk, rel=1e-12)
    for ci, r in enumerate(ref.risk_by_group):
        assert got.risk_by_combination[ci] == pytest.approx(r.max(), rel=1e-12)


def test_rare_projected_cells_are_those_under_one_over_alpha(small):
    df, qi, _, res = small
    t = res.table
    projs = projections(t.codes, t.counts, [len(c) for c in t.categories], [(0, 1), (2,)], 0.1)
    for p, cols in zip(projs, (["region", "tenure"], ["sex"])):
        sizes = df.groupby(cols).size()
        want = sorted(tuple(k) if isinstance(k, tuple) else (k,) for k in sizes[sizes < 10].index)
        got = sorted(tuple(t.categories[v][c] for v, c in zip(p.variables, row)) for row in p.rare)
        assert got == want


def test_c1_rows_are_exact_in_one_matrix(small):
    """C1's rows in the change D of one matrix are exact (linear): over a path D = s (T - M),
    some row is violated exactly when the independent check says C1 fails at M + D."""
    _, _, opts, res = small
    t = res.table
    level = opts["alpha"]
    combos = res.combination_indices
    projs = projections(t.codes, t.counts, [len(c) for c in t.categories], combos, level)
    start = [np.eye(4), np.eye(3), 0.8 * np.eye(2) + 0.1]
    v = 0
    A, b, _ = c1_rows(projs, start, v, level, keep=0.0)
    T = np.full((4, 4), 0.25)
    agree = set()
    for s in np.linspace(0.0, 1.0, 41):
        D = s * (T - start[v])
        mats = list(start)
        mats[v] = start[v] + D
        rows_violated = bool((A @ D.ravel() - b > 1e-12).any())
        checked = check_product_c1(t.codes, t.counts, mats, combos).max_risk
        if abs(checked - level) > 1e-9:
            assert rows_violated == (checked > level), s
            agree.add(rows_violated)
    assert agree == {True, False}  # the path crosses the boundary


def test_step_keeps_the_diagonal_floor():
    # a gradient that rewards lowering every diagonal entry: the floor, not the radius, binds
    pb = StepProblem(M=np.eye(3), grad=np.eye(3), radius=0.5, floor=0.8, marginal=None)
    D = solve_step(pb, sp.csr_matrix((0, 9)), np.zeros(0))
    M = np.eye(3) + D
    np.testing.assert_allclose(np.diag(M), 0.8, atol=1e-9)
    np.testing.assert_allclose(M.sum(axis=1), 1.0, atol=1e-9)


def test_independent_check_fails_closed():
    codes, counts = np.array([[0, 0], [1, 1]]), np.array([3, 4])
    good = [np.eye(2), np.eye(2)]
    assert check_product_c1(codes, counts, good, [(0, 1)]).max_risk == pytest.approx(1 / 3)
    for bad in (
        [np.array([[np.nan, 1.0], [0.0, 1.0]]), np.eye(2)],
        [np.array([[0.5, 0.4], [0.0, 1.0]]), np.eye(2)],  # a row summing to 0.9
        [np.array([[1.2, -0.2], [0.0, 1.0]]), np.eye(2)],
        [np.eye(2)],  # one matrix for two variables
    ):
        assert np.isnan(check_product_c1(codes, counts, bad, [(0, 1)]).max_risk)
    assert np.isnan(check_product_c1(codes, counts, good, []).max_risk)


def test_beats_sdcmicro_calibrated_to_the_same_alpha_on_testdata():
    df = pd.read_csv(TESTDATA)
    qi = ["roof", "walls", "water", "sex"]
    res = pramopt.design(df, qi, alpha=0.1, structure="per_variable")
    assert res.success and res.max_risk <= 0.1
    sdc = calibrate_sdcmicro_product(res.table, res.combination_indices, 0.1)
    assert sdc is not None and sdc.max_risk <= 0.1
    assert res.loss <= sdc.loss
    # the assessment of the same matrices as released (another code path) agrees
    a = pramopt.baselines.product_space.assess_per_variable(
        res.table, dict(res.variable_matrices), alpha=0.1
    )
    assert a.max_risk == pytest.approx(res.max_risk, rel=1e-12)
    assert a.loss == pytest.approx(res.loss, rel=1e-9)


def test_min_diagonal_and_perturb(small):
    df, qi, opts, _ = small
    res = pramopt.design(
        df, qi, combination_size=2, min_diagonal=0.6, perturb=["region", "tenure"], **opts
    )
    assert res.success
    assert res.perturbed == ("region", "tenure")
    np.testing.assert_array_equal(res.variable_matrices["sex"].to_numpy(), np.eye(2))
    for q in ("region", "tenure"):
        M = res.variable_matrices[q].to_numpy()
        assert np.diag(M).min() >= 0.6
        assert abs(np.linalg.det(M)) > 1e-6


def test_invariant_keeps_each_marginal(small):
    df, qi, opts, _ = small
    res = pramopt.design(df, qi, combination_size=2, invariant=True, **opts)
    assert res.success
    for q in qi:
        M = res.variable_matrices[q]
        u = df[q].value_counts().reindex(M.index).to_numpy(dtype=float)
        np.testing.assert_allclose(u @ M.to_numpy(), u, rtol=1e-7, atol=1e-6)


@pytest.mark.parametrize("alpha", [0.2, None])
def test_epsilon_of_the_dense_kronecker_product(small, alpha):
    """Under epsilon the product over the whole product space is epsilon-DP (its epsilon measured
    on the dense Kronecker product, Ikarashi et al. Theorem 1), with C1 when alpha is given."""
    df, qi, _, _ = small
    res = pramopt.design(
        df, qi, alpha=alpha, combination_size=2, structure="per_variable", epsilon=3.0
    )
    assert res.success
    keys, P = dense(res)
    eps = pramopt.dp_epsilon(P)
    assert eps <= 3.0 and res.epsilon == pytest.approx(eps, rel=1e-9)
    if alpha is not None:
        U0 = counts_of(df, qi, keys)
        assert brute_c1(P, keys, U0, list(itertools.combinations(range(3), 2))) <= alpha
    pramopt.release(df, res, seed=0)  # releasable: checked again
    # no worse than per-attribute retention-replacement at the same epsilon (its start, at an
    # epsilon a relative 1e-6 smaller)
    from pramopt.baselines.retention import retention_matrix, rho_from_epsilon

    levels = [len(c) for c in res.table.categories]
    rr = [retention_matrix(L, rho_from_epsilon(3.0, levels)) for L in levels]
    Prr = np.ones((1, 1))
    for M in rr:
        Prr = np.kron(Prr, M)
    U0 = counts_of(df, qi, keys)
    n = U0.sum()
    rr_loss = np.sum(np.linalg.inv(Prr) ** 2, axis=1) @ (U0 @ Prr) / n**2 - 1.0 / n
    if alpha is None:
        assert res.loss <= rr_loss * (1 + 1e-5)


def test_a_search_blind_to_the_constraints_is_not_reported_successful(small, monkeypatch):
    """With the design's own C1 rows and check, and its epsilon rows, switched off, the result
    comes from the independent checks alone: it fails them and says so."""
    import pramopt.per_variable.designer as designer

    df, qi, _, _ = small
    monkeypatch.setattr(designer, "max_risk", lambda *a, **k: 0.0)
    monkeypatch.setattr(designer, "c1_rows", lambda p, m, v, *a, **k: (
        sp.csr_matrix((0, m[v].size)), np.zeros(0), 0.0))  # fmt: skip
    monkeypatch.setattr(designer, "ratio_rows", lambda M, e: (
        sp.csr_matrix((0, M.size)), np.zeros(0)))  # fmt: skip
    monkeypatch.setattr(designer, "t_min", lambda pb, *a: [0.0] * len(pb.levels))
    for kw in ({"alpha": 0.2}, {"alpha": None, "epsilon": 3.0}):
        res = pramopt.design(df, qi, combination_size=2, structure="per_variable", **kw)
        assert not res.success and res.status is pramopt.Status.UNVERIFIED, kw


def test_matrices_under_the_floor_are_not_reported_successful(small):
    """The finished matrices are checked against min_diagonal whatever the search did: the
    design's own matrices (C1 holds) offered as a design with a floor above their diagonal."""
    from pramopt.params import DesignParams
    from pramopt.per_variable.designer import Problem, finish

    _, _, opts, res = small
    low = min(np.diag(M.to_numpy()).min() for M in res.variable_matrices.values())
    params = DesignParams.from_options(
        "design", combination_size=2, min_diagonal=min(0.99, low + 0.01), **opts
    )
    pb = Problem(res.table, res.combination_indices, range(3), params)
    out = finish(pb, res.matrices(), pramopt.Status.SUCCESS, "", [])
    assert out.max_risk <= opts["alpha"]  # C1 holds: only the floor fails
    assert not out.success and out.status is pramopt.Status.UNVERIFIED


def test_refusals_name_the_parameter(small):
    df, qi, _, _ = small
    with pytest.raises(InvalidParameterError, match="'fixed'.*identifying.*'age'"):
        pramopt.design(df, qi, alpha=0.2, structure="per_variable", fixed=["age"])
    with pytest.raises(InvalidParameterError, match="'fixed'.*epsilon"):
        pramopt.design(df, qi, epsilon=2.0, structure="per_variable", fixed=["sex"])
    with pytest.raises(InvalidParameterError, match="'fixed'.*no variable to perturb"):
        pramopt.design(df, qi, alpha=0.2, structure="per_variable", fixed=["sex"], perturb=["sex"])
    with pytest.raises(InvalidParameterError, match="'k'.*per_variable"):
        pramopt.design(df, qi, alpha=0.2, structure="per_variable", k=2.0)
    with pytest.raises(InvalidParameterError, match="'perturb'.*every identifying.*epsilon"):
        pramopt.design(df, qi, alpha=0.2, structure="per_variable", epsilon=2.0, perturb=["sex"])
    with pytest.raises(InvalidParameterError, match="'perturb'.*identifying.*'age'"):
        pramopt.design(df, qi, alpha=0.2, structure="per_variable", perturb=["age"])
    with pytest.raises(InvalidParameterError, match="'perturb'.*only to structure"):
        pramopt.design(df, qi, alpha=0.2, perturb=["sex"])


def test_unperturbed_rare_combination_is_infeasible(small):
    df, qi, _, _ = small
    res = pramopt.design(df, qi, alpha=0.2, structure="per_variable", perturb=["sex"])
    # region x tenure x sex holds rare cells; sex alone cannot hide a rare region x tenure pair
    assert not res.success
    with pytest.raises(pramopt.DesignMismatchError):
        pramopt.release(df, res, seed=1)


def test_release_changes_each_variable_with_its_matrix_probability(small):
    """Monte Carlo: over 60 releases, the share of records of category a released as b is
    within 5 standard errors of M_v[a, b] for every variable and pair, and variables are drawn
    independently."""
    df, qi, _, res = small
    reps = 60
    hits = {q: {} for q in qi}
    joint: dict = {}
    for s in range(reps):
        out = pramopt.release(df, res, seed=s)
        pd.testing.assert_series_equal(out["income"], df["income"])
        for q in qi:
            for (a, b), c in pd.crosstab(df[q], out[q]).stack().items():
                hits[q][(a, b)] = hits[q].get((a, b), 0) + c
        pairs = pd.DataFrame(
            {"a": df["region"], "b": df["tenure"], "a2": out["region"], "b2": out["tenure"]}
        )
        for (a, b, a2, b2), c in pairs.value_counts().items():
            joint.setdefault((a, b), {})
            joint[(a, b)][(a2, b2)] = joint[(a, b)].get((a2, b2), 0) + c
    for q in qi:
        M = res.variable_matrices[q]
        n_a = df[q].value_counts() * reps
        for a in M.index:
            for b in M.columns:
                p = M.loc[a, b]
                got = hits[q].get((a, b), 0) / n_a[a]
                se = np.sqrt(max(p * (1 - p), 1e-12) / n_a[a])
                assert abs(got - p) <= 5 * se + 1e-12, (q, a, b, got, p)
    # independence: per original (region, tenure) pair, the released pairs follow the product of
    # the two rows (each count within 5 Poisson standard deviations, plus 3)
    Mr, Mt = (res.variable_matrices[q] for q in ("region", "tenure"))
    for (a, b), obs in joint.items():
        n_ab = int(((df["region"] == a) & (df["tenure"] == b)).sum()) * reps
        for (a2, b2), c in obs.items():
            expect = n_ab * Mr.loc[a, a2] * Mt.loc[b, b2]
            assert abs(c - expect) <= 5 * np.sqrt(expect) + 3, (a, b, a2, b2, c, expect)


def test_estimate_inverts_each_matrix(small):
    df, qi, _, res = small
    out = pramopt.release(df, res, seed=7)
    est = estimate_per_variable(out, res, variables=["region", "tenure"])
    U = est["observed"].to_numpy(dtype=float).reshape(4, 3)
    T = est["estimate"].to_numpy().reshape(4, 3)
    Mr = res.variable_matrices["region"].to_numpy()
    Mt = res.variable_matrices["tenure"].to_numpy()
    np.testing.assert_allclose(Mr.T @ T @ Mt, U, atol=1e-8)  # U = P^T T, P = kron(Mr, Mt)
    assert T.sum() == pytest.approx(len(df))
    # unbiased: the mean estimate over releases is within 5 standard errors of the truth
    truth = (
        pd.crosstab(df["region"], df["tenure"])
        .reindex(
            index=res.variable_matrices["region"].index,
            columns=res.variable_matrices["tenure"].index,
        )
        .to_numpy(dtype=float)
    )
    mean = np.mean(
        [estimate_per_variable(
            pramopt.release(df, res, seed=s), res, variables=["region", "tenure"])[
            "estimate"].to_numpy().reshape(4, 3) for s in range(100)], axis=0,
    )  # fmt: skip
    se = est["se"].to_numpy().reshape(4, 3) / np.sqrt(100)
    assert np.all(np.abs(mean - truth) <= 5 * se + 1e-9)
    clipped = estimate_per_variable(out, res, nonnegative=True, variables=["region", "tenure"])
    assert (clipped["estimate"] >= 0).all() and clipped["estimate"].sum() == pytest.approx(len(df))


def test_save_load_and_r_csv_round_trip(small, tmp_path):
    df, qi, _, res = small
    pramopt.save_design(res, tmp_path / "d")
    back = pramopt.load_design(tmp_path / "d")
    for q in qi:
        pd.testing.assert_frame_equal(back.variable_matrices[q], res.variable_matrices[q])
        f = tmp_path / "d" / f"matrix_{q}.csv"
        first = f.read_text().splitlines()[0]
        assert first.startswith('"",')  # R's write.csv: an empty header over the row names
        M, cells = read_matrix(f, [q], data=df)
        lab = list(res.variable_matrices[q].index)
        order = [list(cells[q]).index(x) for x in lab]
        np.testing.assert_array_equal(M[np.ix_(order, order)], res.variable_matrices[q].to_numpy())
    data = tmp_path / "data.csv"
    df.to_csv(data, index=False)
    args = ["assess", "--data", str(data), "--qi", ",".join(qi), "--combinations", "2"]
    args += [x for q in qi for x in ("--matrix", f"{q}={tmp_path / 'd' / f'matrix_{q}.csv'}")]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main([*args, "--json"])
    a = json.loads(buf.getvalue())
    assert a["max_risk"] == pytest.approx(res.max_risk, rel=1e-12)
    assert a["loss"] == pytest.approx(res.loss, rel=1e-9)


def test_cli_design_release_with_perturb(small, tmp_path):
    df, qi, _, _ = small
    src = tmp_path / "data.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "design"
    code = main(
        ["design", "--data", str(src), "--qi", ",".join(qi), "--alpha", "0.2", "--combinations",
         "2", "--structure", "per_variable", "--perturb", "region,tenure", "--out", str(out), "-q"]
    )  # fmt: skip
    assert code == 0
    assert {p.name for p in out.iterdir()} >= {
        "design.json", "matrix_region.csv", "matrix_tenure.csv", "matrix_sex.csv", "report.md"
    }  # fmt: skip
    assert "released tenure" in (out / "report.md").read_text()
    res = pramopt.load_design(out)
    assert res.perturbed == ("region", "tenure") and res.success
    rel = tmp_path / "released.csv"
    assert main(["release", "--design", str(out), "--data", str(src), "--out", str(rel),
                 "--seed", "3", "-q"]) == 0  # fmt: skip
    got = pd.read_csv(rel)
    pd.testing.assert_series_equal(got["sex"], df["sex"])  # not perturbed
    pd.testing.assert_series_equal(got["income"], df["income"])
    # estimate, in Python and from the command line, inverts each perturbed matrix: M^T T_hat = U
    est_csv = tmp_path / "estimates.csv"
    assert main(["estimate", "--design", str(out), "--data", str(rel), "--out", str(est_csv),
                 "-q"]) == 0  # fmt: skip
    est = pd.read_csv(est_csv)
    py = pramopt.estimate(pd.read_csv(rel, dtype=str), res)  # the command line reads text
    np.testing.assert_allclose(est["estimate"].to_numpy(), py["estimate"].to_numpy(), atol=1e-9)
    # the released counts over (region, tenure) are Kronecker(M_region, M_tenure)^T applied to T_hat
    M = [res.variable_matrices[v].to_numpy() for v in ("region", "tenure")]
    K = np.kron(M[0], M[1])
    keys = ["region", "tenure"]
    levels = [list(res.variable_matrices[v].index) for v in keys]
    observed = got.groupby(keys).size()
    U = np.array([observed.get((a, b), 0) for a in levels[0] for b in levels[1]], dtype=float)
    T_hat = est.set_index(keys)["estimate"]
    T = np.array([T_hat.get((a, b), 0.0) for a in levels[0] for b in levels[1]])
    np.testing.assert_allclose(K.T @ T, U, atol=1e-6)
    # assess --matrix on the folder refuses it in a sentence that says how to assess it
    code, text = _run(["assess", "--matrix", str(out), "--data", str(src), "--qi", ",".join(qi)])
    assert code == 2 and "per-variable design" in text and "--matrix VAR=" in text
    assert "household" not in text


def _run(argv):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = main(argv)
    return code, buf.getvalue()


def test_a_variable_released_unchanged_must_have_the_identity_in_the_checked_matrices(small):
    # the re-check covers every variable's matrix, the release only the perturbed ones: a design
    # that says fewer variables are perturbed than its matrices perturb is refused, not released
    import dataclasses

    from pramopt.per_variable.release import release_per_variable

    df, qi, _, res = small
    assert len(res.perturbed) > 1
    shrunk = dataclasses.replace(res, perturbed=res.perturbed[:1])
    with pytest.raises(pramopt.DesignMismatchError, match="not the identity"):
        release_per_variable(df, shrunk, seed=1)
    # the release itself still goes ahead with the design as made
    assert len(release_per_variable(df, res, seed=1)) == len(df)


def test_strata_whose_labels_collide_are_refused_before_any_work():
    df, qi, opts = example_per_variable()
    df = df.copy()
    df["f"] = pd.Series([1 if i % 2 else "1" for i in range(len(df))], dtype=object)
    with pytest.raises(pramopt.InvalidParameterError, match="'fixed'"):
        pramopt.design(df, [*qi, "f"], fixed=["f"], combination_size=2, **opts)


def test_release_dask_refuses_a_per_variable_design_in_a_sentence(small):
    dd = pytest.importorskip("dask.dataframe")
    df, qi, _, res = small
    with pytest.raises(pramopt.InvalidParameterError, match="per-variable design"):
        pramopt.release_dask(dd.from_pandas(df, npartitions=2), res, seed=1)
