"""The exact L2 loss and the estimator (4) of Cator et al., Section 3."""

from __future__ import annotations

import itertools
import time
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from pramopt.loss import expected_changes, l2_loss
from pramopt.optimize.objectives import l2 as L2
from pramopt.optimize.objectives import l2_sparse as L2S
from pramopt.optimize.objectives.l2 import (
    SparseL2,
    l2_loss_and_grad,
    l2_loss_and_grad_sparse,
    l2_loss_sparse,
)
from pramopt.optimize.support import Support


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
    P = np.array(
        [[0.7, 0.2, 0.1, 0.0], [0.1, 0.8, 0.05, 0.05], [0.0, 0.1, 0.9, 0.0], [0.05, 0.05, 0.0, 0.9]]
    )
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
    # pramopt.estimate on every possible release of 5 records, weighted by its probability:
    # the mean is U0 exactly (eq. (4) is unbiased) and the mean squared error of U/n is the
    # reported L2 loss, both against the law of the release enumerated here.
    import pandas as pd
    from reference import l2_loss_from_covariance, release_outcomes

    import pramopt
    from pramopt.result import DesignResult, Status

    values = np.array(["a", "b", "c"])
    units = [0, 0, 0, 1, 2]
    df = pd.DataFrame({"x": values[units]})
    table = pramopt.frequency_table(df, ["x"])
    P = np.array([[0.7, 0.2, 0.1], [0.25, 0.6, 0.15], [0.1, 0.3, 0.6]])
    res = DesignResult(
        matrix=P,
        status=Status.SUCCESS,
        loss=0.0,
        expected_changes=0.0,
        max_risk=0.0,
        min_diagonal=0.6,
        gamma=None,
        binding_rows=(),
        reduction=None,
        solver=None,
        stages=(),
        condition_number=1.0,
        message="",
        alpha=0.5,
        qi=("x",),
        combinations=(("x",),),
        table=table,
    )
    U0 = table.counts.astype(float)
    n = U0.sum()
    mean, mse, total = np.zeros(3), 0.0, 0.0
    for out, prob in release_outcomes(P, units):
        est = pramopt.estimate(pd.DataFrame({"x": values[list(out)]}), res)["estimate"].to_numpy()
        mean += prob * est
        mse += prob * np.sum((est / n - U0 / n) ** 2)
        total += prob
    assert total == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(mean, U0, rtol=1e-12)
    assert l2_loss(P, U0) == pytest.approx(mse, rel=1e-12)
    assert l2_loss_from_covariance(P, U0) == pytest.approx(mse, rel=1e-12)


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
        assert l2_loss(P, counts) == pytest.approx(
            2 * expected_changes(P, counts) / n**2, rel=20 * t
        )


def test_singular_matrix_has_infinite_loss():
    P = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert l2_loss(P, [3, 4]) == np.inf


# -- SparseL2: the same loss and gradient via Woodbury (block-triangular) inversion ----------
# The reference throughout is the dense-inverse implementation of the formula at the end of
# Section 3 of Cator et al. (l2_loss / l2_loss_and_grad), an independent computation.


@pytest.fixture(params=["dense", "sparse", "sparse inverse, dense block", "over the budget"])
def block(request, monkeypatch):
    """SparseL2 with the receivers' block dense, sparse (pramopt.optimize.objectives.l2_sparse)
    whatever its size and density, from the whole sparse inverse made dense, or dense once the
    sparse inverse goes over its budget: all must give the dense inverse's numbers."""
    if request.param != "dense":
        monkeypatch.setattr(L2S, "SPARSE_RECEIVERS", -1)
        monkeypatch.setattr(L2S, "SPARSE_DENSITY", np.inf if request.param == "sparse" else 0.0)
        # too full, not foreseen from the structure
        monkeypatch.setattr(L2S, "surely_dense", lambda PRR, a: False)
    if request.param == "sparse inverse, dense block":  # M whole, then QR measured too full
        rows = L2S.inverse_rows
        monkeypatch.setattr(L2S, "inverse_rows", lambda *a, budget: rows(*a, budget=np.inf))
    return request.param


def receiver_design(K, r, rng, p_send=0.6, max_targets=3):
    """Random sparse row-stochastic P: diagonal in [0.3, 1] plus entries in r receiver columns.

    Receivers may send to other receivers; rows that do not send keep P_mm = 1.
    """
    R = rng.choice(K, r, replace=False)
    rows, cols, vals = [], [], []
    for m in range(K):
        targets = R[R != m]
        if targets.size and rng.random() < p_send:
            d = rng.uniform(0.3, 1.0)
            t = rng.choice(
                targets, min(targets.size, int(rng.integers(1, max_targets + 1))), replace=False
            )
            rows += [m] * (t.size + 1)
            cols += [m, *t]
            vals += [d, *((1 - d) * rng.dirichlet(np.ones(t.size)))]
        else:
            rows.append(m), cols.append(m), vals.append(1.0)
    return sp.csr_matrix((vals, (rows, cols)), shape=(K, K))


def assert_matches_dense(P, counts, rng, n_pairs=200, n_cols=7):
    s = SparseL2(P, counts)
    f, G = l2_loss_and_grad(P.toarray(), counts)
    assert not s.singular
    assert s.loss == pytest.approx(f, rel=1e-10, abs=1e-14 / counts.sum())
    assert l2_loss_sparse(P, counts) == s.loss
    scale = np.abs(G).max()
    K = P.shape[0]
    # the support (the block route: many pairs per receiver column)
    Gs = s.grad_support()
    Pc = P.tocoo()
    np.testing.assert_allclose(
        Gs.toarray()[Pc.row, Pc.col], G[Pc.row, Pc.col], rtol=1e-9, atol=1e-12 * scale
    )
    # scattered pairs anywhere, in and out of the support (the pairwise route)
    a, b = rng.integers(0, K, (2, n_pairs))
    np.testing.assert_allclose(s.grad_at(a, b), G[a, b], rtol=1e-9, atol=1e-12 * scale)
    f2, g2 = l2_loss_and_grad_sparse(P, counts, a.reshape(-1, 2), b.reshape(-1, 2))
    assert f2 == s.loss and g2.shape == (n_pairs // 2, 2)
    np.testing.assert_allclose(g2.ravel(), G[a, b], rtol=1e-9, atol=1e-12 * scale)
    # column blocks (candidates for column generation), receivers and non-receivers alike
    C = rng.choice(K, min(K, n_cols), replace=False)
    C = np.concatenate([C, s.receivers[:2]])
    np.testing.assert_allclose(s.grad_columns(C), G[:, C], rtol=1e-9, atol=1e-12 * scale)
    return s


@pytest.mark.parametrize(
    "K,r,seed", [(5, 2, 0), (12, 1, 1), (12, 4, 2), (60, 6, 3), (120, 30, 4), (300, 20, 5)]
)
def test_sparse_loss_and_gradient_match_dense_inverse(K, r, seed, block):
    rng = np.random.default_rng(seed)
    P = receiver_design(K, r, rng)
    counts = rng.integers(0, 40, K).astype(float)
    counts[0] += 1
    s = assert_matches_dense(P, counts, rng)
    assert set(s.receivers) <= set(range(K)) and len(s.receivers) <= r


def test_dense_gradient_block_in_small_pieces(monkeypatch):
    # every piecewise loop of the dense gradient block (sender columns of Z, gathered entries)
    # cut into many pieces: the same numbers as the dense inverse
    import pramopt.optimize.objectives.l2_dense as L2D

    monkeypatch.setattr(L2D, "_GATHER", 97)
    rng = np.random.default_rng(6)
    P = receiver_design(300, 20, rng)
    counts = rng.integers(0, 40, 300).astype(float)
    assert_matches_dense(P, counts, rng)


def test_sparse_all_columns_receivers_dense_matrix(block):
    # R = every column: Woodbury degenerates to the dense inverse of P[R, R] = P.
    rng = np.random.default_rng(11)
    K = 40
    P = rng.random((K, K)) + K * np.diag(rng.uniform(0.3, 1.0, K))
    P /= P.sum(axis=1, keepdims=True)
    counts = rng.integers(1, 30, K).astype(float)
    s = assert_matches_dense(sp.csr_matrix(P), counts, rng)
    assert s.receivers.size == K
    assert SparseL2(P, counts).loss == s.loss  # a dense array is accepted too


def test_sparse_diagonal_matrices(block):
    # r = 0.  P = I: l2 = sum_l U0_l / n^2 - 1/n = 0 exactly.  A general diagonal P:
    # Q = diag(1/d), w = U0 * d, so l2 = sum_l U0_l / d_l / n^2 - 1/n.
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 50, 30).astype(float)
    n = counts.sum()
    s = SparseL2(sp.identity(30, format="csr"), counts)
    assert s.loss == 0.0 and s.receivers.size == 0
    d = rng.uniform(0.2, 1.0, 30)
    s = SparseL2(sp.diags(d), counts)
    assert s.loss == pytest.approx(np.sum(counts / d) / n**2 - 1 / n, rel=1e-13)
    assert_matches_dense(sp.csr_matrix(sp.diags(d)), counts, rng)


def test_sparse_gradient_matches_finite_differences(block):
    # Central differences of the sparse loss itself, at pairs in the support (diagonal of a
    # receiver and of a non-receiver, an entry into a receiver) and outside it (an entry into
    # a non-receiver column, which changes the receiver set of the perturbed matrix).
    rng = np.random.default_rng(5)
    K = 9
    P = receiver_design(K, 3, rng, p_send=0.9).toarray()
    counts = rng.integers(1, 20, K).astype(float)
    R = SparseL2(P, counts).receivers
    nonR = np.setdiff1d(np.arange(K), R)
    sender = int(np.flatnonzero((P[:, R].sum(axis=1) > 0) & ~np.isin(np.arange(K), R))[0])
    pairs = [
        (R[0], R[0]),
        (nonR[0], nonR[0]),
        (sender, int(R[np.argmax(P[sender, R])])),
        (R[1], nonR[1]),
        (nonR[0], nonR[2]),
        (R[0], R[2]),
    ]
    s = SparseL2(P, counts)
    g = s.grad_at([p[0] for p in pairs], [p[1] for p in pairs])
    h = 1e-6
    for (a, b), ga in zip(pairs, g):
        E = np.zeros((K, K))
        E[a, b] = h
        fd = (l2_loss_sparse(P + E, counts) - l2_loss_sparse(P - E, counts)) / (2 * h)
        assert ga == pytest.approx(fd, rel=1e-5)


def test_sparse_singular_matrices_have_infinite_loss(block):
    counts = np.array([3.0, 4.0, 5.0, 6.0])
    # a zero column: cell 1 sends everything to the receiver 0 and nobody releases cell 1
    P0 = np.array([[1.0, 0, 0, 0], [1.0, 0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0.5, 0.5]])
    # two identical rows among the receivers 0 and 1
    P1 = np.array([[0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 1.0, 0], [0.2, 0.3, 0, 0.5]])
    # identical receiver rows, also sending to a third receiver (3 x 3 block of rank 2)
    P2 = np.array([[0.4, 0.3, 0.3, 0], [0.4, 0.3, 0.3, 0], [0.1, 0.1, 0.8, 0], [0, 0, 0.1, 0.9]])
    # a receiver that keeps nothing, sending to a receiver with the same row (a zero pivot in
    # the back-substitution over single cells)
    P3 = np.array([[0, 1.0, 0, 0], [0, 1.0, 0, 0], [0.5, 0, 0.5, 0], [0, 0, 0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for P in (P0, P1, P2, P3):
            assert l2_loss(P, counts) == np.inf
            s = SparseL2(sp.csr_matrix(P), counts)
            assert s.singular and s.loss == np.inf
            assert l2_loss_sparse(P, counts) == np.inf
            with pytest.raises(np.linalg.LinAlgError):
                s.grad_at([0], [0])
            with pytest.raises(np.linalg.LinAlgError):
                l2_loss_and_grad_sparse(P, counts, [0], [1])
        bad = P1.copy()
        bad[2, 2] = np.nan
        assert l2_loss_sparse(bad, counts) == np.inf
        # nearly singular: below the documented threshold on rcond(P[R, R])
        near = P1.copy()
        near[0, :2] = [0.5 + 1e-15, 0.5 - 1e-15]
        assert l2_loss_sparse(near, counts) == np.inf
        assert np.isfinite(l2_loss_sparse(near, counts, rcond=0.0))


def test_sparse_rejects_bad_shapes():
    with pytest.raises(ValueError):
        SparseL2(np.eye(3)[:2], [1, 2])
    with pytest.raises(ValueError):
        SparseL2(np.eye(3), [1, 2])
    with pytest.raises(ValueError):
        SparseL2(np.eye(3), [0, 0, 0])
    s = SparseL2(np.eye(3), [1, 2, 3])
    with pytest.raises(IndexError):
        s.grad_at([0], [3])
    with pytest.raises(TypeError):
        s.grad_at([0.0], [1.0])
    assert s.grad_at([], []).shape == (0,) and s.grad_columns([]).shape == (3, 0)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    K=st.integers(2, 25),
    frac=st.floats(0.0, 1.0),
    p_send=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_sparse_property_agrees_with_dense(K, frac, p_send, seed):
    rng = np.random.default_rng(seed)
    P = receiver_design(K, int(round(frac * K)), rng, p_send=p_send, max_targets=K)
    counts = rng.integers(0, 10, K).astype(float)
    counts[rng.integers(K)] += 1
    s = SparseL2(P, counts)
    f, G = l2_loss_and_grad(P.toarray(), counts)
    assert s.loss == pytest.approx(f, rel=1e-10, abs=1e-14)
    m, k = np.divmod(np.arange(K * K), K)
    np.testing.assert_allclose(s.grad_at(m, k), G.ravel(), rtol=1e-9, atol=1e-12 * np.abs(G).max())


@pytest.mark.parametrize("max_targets", [1, 3])
def test_sparse_pieces_and_blocks(monkeypatch, max_targets):
    # Tiny work pieces: several pieces of pairs, of the gathers of E's entries and of the
    # sender rows (both the sparse and the dense-block products) -- same numbers.
    import pramopt.optimize.objectives.l2 as loss_mod
    import pramopt.optimize.objectives.l2_dense as dense_mod

    monkeypatch.setattr(loss_mod, "_CHUNK", 64)
    monkeypatch.setattr(loss_mod, "_PAIRS", 37)
    monkeypatch.setattr(dense_mod, "_GATHER", 5)
    rng = np.random.default_rng(21 + max_targets)
    P = receiver_design(150, 30, rng, p_send=0.8, max_targets=max_targets)
    counts = rng.integers(0, 40, 150).astype(float)
    assert_matches_dense(P, counts, rng, n_pairs=400, n_cols=20)


@pytest.mark.parametrize("slowdown,formed", [(0, False), (1e12, True)])
def test_receiver_entries_by_either_route(monkeypatch, slowdown, formed):
    # A receiver row's entries of the gradient's block Z come from its two factors (gathered
    # dot products) or from the whole block formed once; which one is a cost estimate
    # (GATHER_SLOWDOWN), and both give the dense inverse's numbers.
    import pramopt.optimize.objectives.l2_dense as dense_mod

    monkeypatch.setattr(dense_mod, "GATHER_SLOWDOWN", slowdown)
    rng = np.random.default_rng(31)
    P = receiver_design(200, 40, rng, p_send=0.7)
    counts = rng.integers(0, 40, 200).astype(float)
    _, G = l2_loss_and_grad(P.toarray(), counts)
    s = SparseL2(P, counts)
    assert not s._sparse and s.receivers.size > 20
    a = np.repeat(s.receivers, 5)  # receiver rows, against any columns
    b = rng.integers(0, 200, a.size)
    got = s.grad_at(a, b)
    assert s._ZT.full is formed
    np.testing.assert_allclose(got, G[a, b], rtol=1e-9, atol=1e-12 * np.abs(G).max())


@pytest.mark.parametrize("seed", range(6))
def test_surely_dense_only_when_the_inverse_is_full(seed, monkeypatch):
    # surely_dense skips the sparse inverse from the structure alone; it must never call a
    # block dense whose inverse (a dense solve, counted) is within the sparse block's budget.
    rng = np.random.default_rng(seed)
    K, r = 80, 30
    P = receiver_design(
        K, r, rng, p_send=rng.uniform(0.2, 0.9), max_targets=int(rng.integers(1, 4))
    )
    d = P.diagonal()
    inR = np.bincount(P.indices, minlength=K) > (d != 0)
    R = np.flatnonzero(inR)
    PRR = sp.csr_matrix(P[R][:, R])
    a = R.size + int(np.count_nonzero((np.asarray(P[:, R].sum(axis=1)).ravel() > 0) & ~inR))
    M = np.linalg.inv(PRR.toarray())
    full = int(np.count_nonzero(np.abs(M) > 1e-14 * np.abs(M).max()))
    verdicts = []
    for share in (0.001, 0.01, 0.05, 0.2, 0.5):
        monkeypatch.setattr(L2S, "SPARSE_DENSITY", share)
        verdict = L2S.surely_dense(PRR, a)
        verdicts.append(verdict)
        if verdict:
            assert full > share * a * R.size
    assert any(verdicts)  # the check does fire on these designs (at the smallest share)


@pytest.mark.parametrize("seed", range(8))
def test_inverse_by_components_matches_dense_inverse(seed):
    # chains of single cells, cycles of a few and one large component, in random order
    from pramopt.optimize.objectives.l2_dense import inverse

    rng = np.random.default_rng(seed)
    r = 60
    A = np.diag(rng.uniform(0.3, 1.0, r))
    for _ in range(int(rng.integers(20, 120))):
        i, j = rng.integers(0, r, 2)
        A[i, j] += rng.uniform(0.0, 0.3) * (i != j)
    big = rng.choice(r, int(rng.integers(2, 25)), replace=False)
    A[big, np.roll(big, 1)] += 0.2  # a cycle through these cells: one component
    M = inverse(sp.csr_matrix(A), 1e-12)
    ref = np.linalg.inv(A)
    np.testing.assert_allclose(M, ref, rtol=1e-10, atol=1e-12 * np.abs(M).max())
    assert M.flags.c_contiguous
    # the same by sparse rows: the same numbers, and only the reference's non-zeros stored
    Ms = L2S.sparse_inverse(sp.csr_matrix(A))
    np.testing.assert_allclose(Ms.toarray(), ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    assert Ms.nnz <= np.count_nonzero(np.abs(ref) > 1e-14 * np.abs(ref).max())
    # given up once it holds more than its budget, never after returning a part of M
    with pytest.raises(L2S.TooDense):
        L2S.sparse_inverse(sp.csr_matrix(A), budget=Ms.nnz / 2)
    assert L2S.sparse_inverse(sp.csr_matrix(A), budget=Ms.nnz).nnz == Ms.nnz


def scaling_design(K, r, rng, dense_block):
    """Diagonal in [0.3, 1] plus r receiver columns: every row sends to every receiver
    (``dense_block``, nnz ~ K r) or to 1-3 of them."""
    if not dense_block:
        return receiver_design(K, r, rng, p_send=0.9)
    R = rng.choice(K, r, replace=False)
    B = rng.random((K, r))
    d = rng.uniform(0.3, 1.0, K)
    B *= ((1 - d) / B.sum(axis=1))[:, None]
    B[R, np.arange(r)] = 0.0
    return (
        sp.csr_matrix((B.ravel(), (np.repeat(np.arange(K), r), np.tile(R, K))), shape=(K, K))
        + sp.diags(d)
    ).tocsr()


@pytest.mark.slow
@pytest.mark.parametrize("K,r", [(1000, 100), (5000, 500)])
@pytest.mark.parametrize("dense_block", [True, False])
def test_sparse_scaling(K, r, dense_block, capsys):
    # Loss, gradient on the support (~K r pairs for a dense receiver block) and a block of 100
    # candidate columns.  The dense path holds at least five K x K arrays; the sparse one must
    # stay below two even when P[:, R] is dense, and below one otherwise (beyond the fixed
    # work pieces of a few MB that dominate at small K).  Timings are printed, not asserted.
    rng = np.random.default_rng(0)
    P = scaling_design(K, r, rng, dense_block)
    counts = rng.integers(0, 100, K).astype(float)
    tracemalloc.start()
    t0 = time.perf_counter()
    s = SparseL2(P, counts)
    t1 = time.perf_counter()
    Gs = s.grad_support()
    t2 = time.perf_counter()
    Gc = s.grad_columns(rng.choice(K, 100, replace=False))
    t3 = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    with capsys.disabled():
        print(
            f"\nK={K} r={r} nnz={P.nnz}: loss {t1 - t0:.2f}s, grad on support {t2 - t1:.2f}s, "
            f"100 columns {t3 - t2:.2f}s, peak {peak / 2**20:.0f} MiB (one dense K x K: {8 * K * K / 2**20:.0f} MiB)"
        )
    assert np.isfinite(s.loss) and np.all(np.isfinite(Gs.data)) and Gc.shape == (K, 100)
    assert peak < max((2 if dense_block else 1) * 8 * K * K, 64 * 2**20)


def _counted_design(monkeypatch, seed):
    """A random sparse design on its support (``sup, x, counts``) and the list that grows by one
    with every :class:`SparseL2` made (a factorisation) from then on (its ``single`` flag)."""
    rng = np.random.default_rng(seed)
    K = 40
    P = receiver_design(K, 8, rng).tocoo()
    counts = rng.integers(1, 30, K).astype(float)
    sup = Support.from_pairs(P.row, P.col, K)
    made = []  # whether each asked for single precision

    class Counted(L2.SparseL2):
        def __init__(self, *a, **k):
            made.append(k.get("single", False))
            super().__init__(*a, **k)

    monkeypatch.setattr(L2, "SparseL2", Counted)
    return sup, sup.from_matrix(P.tocsr()), counts, made


def test_evaluator_factorises_each_point_once(monkeypatch):
    # a refinement step values its trial point and then another one (the search along the step
    # or over the span), takes either, and asks for the gradient there: that gradient must come
    # from the factorisation already made, and equal the dense inverse's
    sup, x0, counts, made = _counted_design(monkeypatch, 7)
    x1 = np.where(sup.rows != sup.cols, 0.5 * x0, x0)  # another point (rows need not sum to 1)
    evaluate = L2.L2.on_support(sup, counts, sparse=True)
    f0 = evaluate.value(x0)
    f1 = evaluate.value(x1)
    f, g, _ = evaluate(x0)  # the first point taken after the second was valued
    assert len(made) == 2
    f_ref, G = l2_loss_and_grad(sup.to_matrix(x0).toarray(), counts)
    assert f == f0 == pytest.approx(f_ref, rel=1e-10)
    np.testing.assert_allclose(g, G[sup.rows, sup.cols], rtol=1e-9, atol=1e-12 * np.abs(G).max())
    assert f1 == pytest.approx(l2_loss(sup.to_matrix(x1).toarray(), counts), rel=1e-10)
    evaluate(x1)  # the other point again: after a gradient only that point is kept
    assert len(made) == 3


def test_evaluator_on_a_wider_support_reuses_the_same_matrix(monkeypatch):
    # pricing widens the refinement's support between chunks: the next evaluator's first point
    # is the same matrix (new transitions at zero), already factorised by the last evaluator
    sup, x, counts, made = _counted_design(monkeypatch, 8)
    wide = sup.union(np.array([0, 1, 2]), np.array([5, 6, 7]))
    assert wide.size > sup.size
    first = L2.L2.on_support(sup, counts, sparse=True)
    first.value(x)
    first.value(np.where(sup.rows == sup.cols, x, 0.9 * x))  # a trial point not taken
    first.keep(x)  # the point the chunk ended at: only its design goes on
    assert len(first.designs) == 1
    second = L2.L2.on_support(wide, counts, sparse=True, previous=first)
    xw = wide.from_matrix(sup.to_matrix(x))
    f, g, _ = second(xw)
    assert len(made) == 2
    f_ref, G = l2_loss_and_grad(sup.to_matrix(x).toarray(), counts)
    assert f == pytest.approx(f_ref, rel=1e-10)
    np.testing.assert_allclose(g, G[wide.rows, wide.cols], rtol=1e-9, atol=1e-12 * np.abs(G).max())
    # another matrix is valued anew
    second.value(np.where(wide.rows == wide.cols, xw, 0.5 * xw))
    assert len(made) == 3


def _dense_reference(P, counts):
    """Loss, gradient and the diagonal of ``H = Q[:, R]^T W Q[:, R]`` from the dense inverse."""
    Pd = P.toarray()
    f, G = l2_loss_and_grad(Pd, counts)
    Q = np.linalg.inv(Pd)
    w = counts @ Pd
    return f, G, lambda R: np.einsum("k,kp->p", w, Q[:, R] ** 2)


def test_single_precision_block_matches_dense_inverse(monkeypatch):
    # a well-conditioned receivers' block inverted in single precision: the loss, gradient and
    # curvature terms of the dense inverse in double, to single precision's accuracy
    monkeypatch.setattr(L2, "SINGLE_MIN_RECEIVERS", 1)
    rng = np.random.default_rng(11)
    K = 300
    P = receiver_design(K, 60, rng)
    counts = rng.integers(1, 40, K).astype(float)
    s = SparseL2(P, counts, single=True)
    assert s._QRx.dtype == np.float32 and s.block_condition <= L2.SINGLE_MAX_CONDITION
    f, G, h = _dense_reference(P, counts)
    scale = np.abs(G).max()
    assert s.loss == pytest.approx(f, rel=1e-5)
    Pc = P.tocoo()
    np.testing.assert_allclose(s.grad_at(Pc.row, Pc.col), G[Pc.row, Pc.col], atol=1e-5 * scale)
    C = np.concatenate([rng.choice(K, 7, replace=False), s.receivers[:2]])
    np.testing.assert_allclose(s.grad_columns(C), G[:, C], atol=1e-5 * scale)
    np.testing.assert_allclose(s.h_diagonal(), h(s.receivers), rtol=1e-5)
    # the block's 1-norm condition number, from the dense inverse
    R = s.receivers
    cond = (
        np.abs(P.toarray()[np.ix_(R, R)]).sum(0).max()
        * np.abs(np.linalg.inv(P.toarray()[np.ix_(R, R)])).sum(0).max()
    )
    assert s.block_condition == pytest.approx(cond, rel=1e-5)


def test_single_precision_only_below_its_condition_limit(monkeypatch):
    # above SINGLE_MAX_CONDITION the block is inverted in double: the dense inverse's numbers
    # to double precision's accuracy (and below SINGLE_MIN_RECEIVERS single is never tried)
    rng = np.random.default_rng(12)
    K = 120
    P = receiver_design(K, 30, rng)
    counts = rng.integers(1, 40, K).astype(float)
    f, G, _ = _dense_reference(P, counts)
    monkeypatch.setattr(L2, "SINGLE_MIN_RECEIVERS", 31)
    assert SparseL2(P, counts, single=True)._QRx.dtype == np.float64
    monkeypatch.setattr(L2, "SINGLE_MIN_RECEIVERS", 1)
    monkeypatch.setattr(L2, "SINGLE_MAX_CONDITION", 1.0)  # a condition number is at least 1
    s = SparseL2(P, counts, single=True)
    assert s._QRx.dtype == np.float64
    assert s.loss == pytest.approx(f, rel=1e-10)
    Pc = P.tocoo()
    np.testing.assert_allclose(
        s.grad_at(Pc.row, Pc.col), G[Pc.row, Pc.col], rtol=1e-9, atol=1e-12 * np.abs(G).max()
    )


def test_evaluator_asks_single_precision_unless_the_last_block_was_ill_conditioned(monkeypatch):
    # the refinement's evaluator asks for single precision; where the last block's condition
    # number was above half the limit it asks for double at once (no single-precision try that
    # would be thrown away), and returns to single once a block is well below the limit
    monkeypatch.setattr(L2, "SINGLE_MIN_RECEIVERS", 1)
    sup, x0, counts, made = _counted_design(monkeypatch, 9)
    evaluate = L2.L2.on_support(sup, counts, sparse=True)
    points = [np.where(sup.rows != sup.cols, t * x0, x0) for t in (1.0, 0.9, 0.8, 0.7)]
    evaluate.value(points[0])
    assert made == [True] and evaluate.designs[-1][1]._QRx.dtype == np.float32
    cond = evaluate.designs[-1][1].block_condition
    monkeypatch.setattr(L2, "SINGLE_MAX_CONDITION", 1.9 * cond)
    f = evaluate.value(points[1])
    assert made[-1] is False and evaluate.designs[-1][1]._QRx.dtype == np.float64
    assert f == pytest.approx(l2_loss(sup.to_matrix(points[1]).toarray(), counts), rel=1e-10)
    monkeypatch.setattr(L2, "SINGLE_MAX_CONDITION", 1e5)
    f = evaluate.value(points[2])
    assert made[-1] is True and evaluate.designs[-1][1]._QRx.dtype == np.float32
    assert f == pytest.approx(l2_loss(sup.to_matrix(points[2]).toarray(), counts), rel=1e-5)
    # a new support's evaluator goes on from the last design's condition number
    monkeypatch.setattr(L2, "SINGLE_MAX_CONDITION", 1.0)
    evaluate.keep(points[2])
    L2.L2.on_support(sup, counts, sparse=True, previous=evaluate).value(points[3])
    assert made[-1] is False
