"""Household designs: household-level keys once per household, person-level keys per person.

Every figure is checked against an independent computation: the record-level matrix entry by entry
from its definition, C1 by brute force over (m, π, k0), released frequencies by Monte Carlo.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.cli import main
from pramopt.errors import DesignMismatchError, InvalidParameterError

QI = ["region", "roof", "relat", "sex"]
ALPHA = 0.1


def households(n_households=120, seed=0) -> pd.DataFrame:
    """Synthetic households: region and roof shared by the members, relat and sex per person."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_households):
        region = rng.choice([1, 2, 3, 4, 5], p=[0.4, 0.3, 0.15, 0.1, 0.05])
        roof = rng.choice(["a", "b", "c"], p=[0.6, 0.3, 0.1])
        for i in range(int(rng.integers(1, 6))):
            rows.append(
                dict(
                    hid=1000 + g,
                    region=region,
                    roof=roof,
                    relat=1 if i == 0 else rng.choice([2, 3], p=[0.3, 0.7]),
                    sex=rng.choice([1, 2]),
                    income=round(float(rng.normal()), 6),
                )
            )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data():
    return households()


@pytest.fixture(scope="module")
def result(data):
    """The household design with one person matrix shared by every household cell (the person
    part per household cell switched off: where its refinement ends lower, auto mode picks it, and
    the tests of that structure use ``conditional`` below)."""
    from pramopt.households import designer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(designer, "solve_person_by_household", lambda *a, **k: None)
        r = pramopt.design(data, QI, alpha=ALPHA, household="hid")
    assert r.success and r.details["person_structure"] != "by-household"
    assert r.person_matrix.shape == (r.layout.person_table.n_cells,) * 2
    return r


def test_household_keys_are_those_constant_in_every_household(data, result):
    constant = [q for q in QI if (data.groupby("hid")[q].nunique() == 1).all()]
    assert constant == ["region", "roof"]
    assert result.household_keys == ("region", "roof") and result.person_keys == ("relat", "sex")


def _dense(P):
    return np.asarray(P.toarray() if hasattr(P, "toarray") else P)


def test_record_matrix_factorises(result):
    """Entry (m, k) is Ph[h(m), h(k)] * Pp[p(m), p(k)], cells matched by their values."""
    R, cols = result.record_matrix()
    R = _dense(R)
    t, lay = result.table, result.layout
    Ph, Pp = _dense(result.household_matrix), _dense(result.person_matrix)
    hix = {tuple(r): i for i, r in enumerate(lay.household_table.codes.tolist())}
    pix = {tuple(r): i for i, r in enumerate(lay.person_table.codes.tolist())}
    hpos, ppos = (
        [t.qi.index(q) for q in result.household_keys],
        [t.qi.index(q) for q in result.person_keys],
    )
    # every pair (h', p') a row can reach is a column
    reach = {
        (h2, p2)
        for m in t.codes.tolist()
        for h2 in np.flatnonzero(Ph[hix[tuple(m[j] for j in hpos)]])
        for p2 in np.flatnonzero(Pp[pix[tuple(m[j] for j in ppos)]])
    }
    assert len(reach) == cols.shape[0]
    for i, m in enumerate(t.codes.tolist()):
        h, p = hix[tuple(m[j] for j in hpos)], pix[tuple(m[j] for j in ppos)]
        for k, c in enumerate(cols.tolist()):
            h2, p2 = hix[tuple(c[j] for j in hpos)], pix[tuple(c[j] for j in ppos)]
            assert R[i, k] == pytest.approx(Ph[h, h2] * Pp[p, p2], abs=1e-15)
    assert np.allclose(R.sum(axis=1), 1.0)


def _brute_c1(R, codes, counts, cols, combos):
    """max over m, π, k0 of sum_{k: k_π = k0} R[m, k] / sum_l U0(l) sum_{k: k_π = k0} R[l, k], by loops."""
    best = 0.0
    for pi in combos:
        for k0 in {tuple(c[j] for j in pi) for c in cols.tolist()}:
            inside = [k for k, c in enumerate(cols.tolist()) if tuple(c[j] for j in pi) == k0]
            num = R[:, inside].sum(axis=1)
            den = float(counts @ num)
            if num.max() > 0:
                best = max(best, float(num.max()) / den)
    return best


@pytest.mark.parametrize(
    "design", ["result", "conditional"], ids=["one-person-matrix", "per-household-cell"]
)
def test_full_c1_by_brute_force_over_released_pairs(design, request):
    res = request.getfixturevalue(design)
    R, cols = res.record_matrix()
    combos = list(itertools.combinations(range(len(QI)), 3))
    worst = _brute_c1(_dense(R), res.table.codes, res.table.counts.astype(float), cols, combos)
    assert worst <= ALPHA
    assert worst == pytest.approx(res.max_risk, rel=1e-9)


def test_members_identical_on_household_keys_after_release(data, result):
    out = pramopt.release(data, result, seed=3)
    assert (out.groupby("hid")[["region", "roof"]].nunique() == 1).all().all()
    # some households did change their household-level values, some persons their person-level ones
    assert ((out[["region", "roof"]] != data[["region", "roof"]]).any(axis=1)).any()
    assert ((out[["relat", "sex"]] != data[["relat", "sex"]]).any(axis=1)).any()
    pd.testing.assert_series_equal(out["income"], data["income"])
    pd.testing.assert_series_equal(out["hid"], data["hid"])


def _count_released(out, res, col_index, total):
    """Add the released records of ``out`` to ``total``, per released cell of ``res``'s record matrix
    (a KeyError: a cell the matrix cannot reach)."""
    qi = list(res.table.qi)
    t = pramopt.frequency_table(
        out, qi, domains={q: list(c) for q, c in zip(qi, res.table.categories)}
    )
    for c, n in zip(t.codes.tolist(), t.counts):
        total[col_index[tuple(c)]] += n


def _assert_within_5_se(data, mean, expected, reps):
    """Mean released counts within 5 standard errors of U0^T R, a household moving its members
    together: a count's variance is at most sum_g size_g^2 / 4."""
    sizes = data.groupby("hid").size().to_numpy()
    se = np.sqrt((sizes**2).sum() / 4 / reps)
    assert np.max(np.abs(mean - expected)) < 5 * se


def test_release_frequencies_match_the_record_matrix(data, result):
    """Monte Carlo: mean released count per released cell within 5 standard errors of U0^T R.

    A household moves its members together, so a count's variance is bounded by
    sum_g size_g^2 / 4 (each household adds at most size_g records to one cell)."""
    R, cols = result.record_matrix()
    expected = result.table.counts.astype(float) @ _dense(R)
    col_index = {tuple(c): k for k, c in enumerate(cols.tolist())}
    reps = 150
    total = np.zeros(cols.shape[0])
    for s in range(reps):
        _count_released(pramopt.release(data, result, seed=s), result, col_index, total)
    _assert_within_5_se(data, total / reps, expected, reps)


def test_loss_counts_the_shared_household_draw(data, result):
    """The loss with households is the independent-records formula plus a non-negative term, equal
    when the household part is the identity; checked against a dense estimator simulation."""
    assert result.loss >= result.details["loss_independent"] - 1e-15
    R, cols = result.record_matrix()
    # Monte Carlo of E||mu_hat - mu||^2 over the released pairs, mu_hat = P^-T U / n on the pair space
    lay = result.layout
    Kh, Kp = lay.household_table.n_cells, lay.person_table.n_cells
    Q = np.kron(
        np.linalg.inv(_dense(result.household_matrix)), np.linalg.inv(_dense(result.person_matrix))
    )
    qi = list(result.table.qi)
    hix = {tuple(r): i for i, r in enumerate(lay.household_table.codes.tolist())}
    pix = {tuple(r): i for i, r in enumerate(lay.person_table.codes.tolist())}
    hpos, ppos = (
        [qi.index(q) for q in result.household_keys],
        [qi.index(q) for q in result.person_keys],
    )

    def pair_counts(frame):
        t = pramopt.frequency_table(
            frame, qi, domains={q: list(c) for q, c in zip(qi, result.table.categories)}
        )
        U = np.zeros(Kh * Kp)
        for c, n in zip(t.codes.tolist(), t.counts):
            U[hix[tuple(c[j] for j in hpos)] * Kp + pix[tuple(c[j] for j in ppos)]] += n
        return U

    n = len(data)
    mu = pair_counts(data) / n
    reps = 150
    err = [
        np.sum((Q.T @ pair_counts(pramopt.release(data, result, seed=s)) / n - mu) ** 2)
        for s in range(reps)
    ]
    sd = np.std(err) / np.sqrt(reps)
    assert abs(np.mean(err) - result.loss) < 5 * sd


def test_errors_name_the_parameter(data):
    with pytest.raises(
        InvalidParameterError, match="'household' parameter of design must name a column"
    ):
        pramopt.design(data, QI, household="nope")
    with pytest.raises(
        InvalidParameterError,
        match=r"names 'sex', which is not constant within household hid = \d+",
    ):
        pramopt.design(data, QI, household="hid", household_keys=["region", "sex"])
    with pytest.raises(
        InvalidParameterError, match="'household_keys' parameter of design must list identifying"
    ):
        pramopt.design(data, QI, household="hid", household_keys=["income"])
    with pytest.raises(InvalidParameterError, match="needs the microdata as a DataFrame"):
        pramopt.design(pramopt.frequency_table(data, QI), QI, household="hid")
    with pytest.raises(InvalidParameterError, match="cannot be combined with fixed"):
        pramopt.design(data, QI, household="hid", fixed=["region"])
    with pytest.raises(
        InvalidParameterError, match="cannot be combined with max_changed_variables=1"
    ):
        pramopt.design(data, QI, household="hid", max_changed_variables=1)
    # a record's diagonal is Ph[h, h] Pp[p, p]: a floor on each part is not one on the records
    with pytest.raises(InvalidParameterError, match="cannot be combined with min_diagonal=0.4"):
        pramopt.design(data, QI, household="hid", min_diagonal=0.4)
    with pytest.raises(InvalidParameterError, match="none of the identifying variables"):
        pramopt.design(data, ["relat", "sex"], household="hid")


def test_release_file_refuses_what_a_household_release_does_not_do(data, result, tmp_path):
    src = tmp_path / "data.csv"
    data.to_csv(src, index=False)
    for kw, needle in (
        ({"batch_size": 10}, "'batch_size'"),
        ({"allow_unverified": True}, "'allow_unverified'"),
    ):
        with pytest.raises(
            InvalidParameterError, match=needle + " parameter of release_file is not supported"
        ):
            pramopt.release_file(src, tmp_path / "out.csv", result, seed=1, **kw)
    assert not (tmp_path / "out.csv").exists()


def test_release_refuses_a_household_that_differs_on_a_household_key(data, result):
    bad = data.copy()
    g = bad.groupby("hid").size()
    hid = int(g[g > 1].index[0])
    i = bad.index[bad.hid == hid][1]
    bad.loc[i, "region"] = 3 if bad.loc[i, "region"] != 3 else 1
    with pytest.raises(
        DesignMismatchError, match=rf"'region' differs within household hid = {hid}"
    ):
        pramopt.release(bad, result, seed=1)


def test_cli_and_spec_round_trip(data, tmp_path, capsys):
    src = tmp_path / "h.csv"
    data.to_csv(src, index=False)
    d = tmp_path / "d"
    assert (
        main(
            [
                "design",
                "--data",
                str(src),
                "--qi",
                ",".join(QI),
                "--household",
                "hid",
                "--out",
                str(d),
                "-q",
            ]
        )
        == 0
    )
    rec = json.loads((d / "design.json").read_text())
    assert rec["household"] == "hid" and rec["household_keys"] == ["region", "roof"]
    assert "households" in (d / "report.md").read_text()
    loaded = pramopt.load_design(d)
    assert loaded.success and loaded.check().max_risk <= ALPHA
    out = tmp_path / "o.csv"
    assert (
        main(
            [
                "release",
                "--design",
                str(d),
                "--data",
                str(src),
                "--out",
                str(out),
                "--seed",
                "2",
                "-q",
            ]
        )
        == 0
    )
    rel = pd.read_csv(out)
    assert (rel.groupby("hid")[["region", "roof"]].nunique() == 1).all().all()
    pd.testing.assert_series_equal(rel["income"], data["income"])
    # an edited design file is refused
    rec["alpha"] = 0.5
    (d / "design.json").write_text(json.dumps(rec))
    with pytest.raises(pramopt.DesignFileError):
        pramopt.load_design(d)
    # a spec with household keys
    spec = tmp_path / "h.toml"
    spec.write_text(
        f'name = "h"\n[data]\npath = "{src.name}"\nqi = {json.dumps(QI)}\n'
        '[design]\nalpha = 0.1\nhousehold = "hid"\nhousehold_keys = ["region", "roof"]\n'
    )
    s = pramopt.load_spec(spec)
    from pramopt.spec import design_kwargs

    r = pramopt.design(s.load_data(), list(s.qi), **design_kwargs(s))
    assert (
        r.success
        and r.household == "hid"
        and tuple(r.params["household_keys"]) == ("region", "roof")
    )


# --- one person matrix per household cell --------------------------------------------------------


@pytest.fixture(scope="module")
def conditional(data):
    """The household design whose person part depends on the household cell (the designer's other
    person parts switched off so that it is the one chosen)."""
    from pramopt.households import designer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(designer, "solve_person", lambda *a, **k: None)
        mp.setattr(designer, "solve_person_replacement", lambda *a, **k: None)
        r = pramopt.design(data, QI, alpha=ALPHA, household="hid")
    assert r.success and r.details["person_structure"] == "by-household"
    lay = r.layout
    assert r.person_matrix.shape == (
        lay.household_table.n_cells * lay.person_table.n_cells,
        lay.person_table.n_cells,
    )
    return r


def _blocks(r):
    """Pp^(h) as a (Kh, Kp, Kp) array: row h * Kp + p of the stacked matrix is Pp^(h)[p, .]."""
    lay = r.layout
    Kh, Kp = lay.household_table.n_cells, lay.person_table.n_cells
    return _dense(r.person_matrix).reshape(Kh, Kp, Kp)


def _cell_maps(r):
    t, lay = r.table, r.layout
    hix = {tuple(x): i for i, x in enumerate(lay.household_table.codes.tolist())}
    pix = {tuple(x): i for i, x in enumerate(lay.person_table.codes.tolist())}
    hpos, ppos = [t.qi.index(q) for q in r.household_keys], [t.qi.index(q) for q in r.person_keys]
    return (lambda c: hix[tuple(c[j] for j in hpos)]), (lambda c: pix[tuple(c[j] for j in ppos)])


def test_conditional_record_matrix_is_ph_times_the_household_cells_person_matrix(conditional):
    r = conditional
    R, cols = r.record_matrix()
    R = _dense(R)
    Ph, B = _dense(r.household_matrix), _blocks(r)
    h_of, p_of = _cell_maps(r)
    used = sorted({h_of(m) for m in r.table.codes.tolist()})
    # the person part does depend on the household cell here
    assert any(not np.allclose(B[used[0]], B[h]) for h in used[1:])
    for i, m in enumerate(r.table.codes.tolist()):
        h, p = h_of(m), p_of(m)
        for k, c in enumerate(cols.tolist()):
            assert R[i, k] == pytest.approx(Ph[h, h_of(c)] * B[h, p, p_of(c)], abs=1e-15)
    assert np.allclose(R.sum(axis=1), 1.0)


def test_conditional_blocks_are_invertible_by_dominance(conditional):
    """Within each household cell, a present person cell's row keeps more on its diagonal than it
    sends to the other present person cells; the rows of absent person cells are the identity."""
    B = _blocks(conditional)
    h_of, p_of = _cell_maps(conditional)
    present = {}
    for m in conditional.table.codes.tolist():
        present.setdefault(h_of(m), set()).add(p_of(m))
    for h in range(B.shape[0]):
        here = present.get(h, set())
        for p in range(B.shape[1]):
            if p in here:
                assert B[h, p, p] - sum(B[h, p, q] for q in here if q != p) >= 0.05 - 1e-9
            else:
                assert B[h, p, p] == 1.0


def test_conditional_release_keeps_households_and_matches_the_record_matrix(data, conditional):
    r = conditional
    R, cols = r.record_matrix()
    expected = r.table.counts.astype(float) @ _dense(R)
    qi = list(r.table.qi)
    col_index = {tuple(c): k for k, c in enumerate(cols.tolist())}
    reps = 100
    total = np.zeros(cols.shape[0])
    h_of, p_of = _cell_maps(r)

    def enc(f):
        return np.column_stack(
            [pd.Index(c).get_indexer(f[q]) for q, c in zip(qi, r.table.categories)]
        )

    orig = enc(data)
    h0, p0 = np.array([h_of(c) for c in orig.tolist()]), np.array([p_of(c) for c in orig.tolist()])
    B = _blocks(r)
    Kp = B.shape[1]
    moved = np.zeros((len(data), Kp))  # per record: how often each person cell was released
    for s in range(reps):
        out = pramopt.release(data, r, seed=s)
        assert (out.groupby("hid")[["region", "roof"]].nunique() == 1).all().all()
        _count_released(out, r, col_index, total)
        moved[np.arange(len(data)), [p_of(c) for c in enc(out).tolist()]] += 1
    pd.testing.assert_series_equal(out["income"], data["income"])
    _assert_within_5_se(data, total / reps, expected, reps)
    # person draws are independent given the record: per original (h, p), the released person cells
    # follow row p of Pp^(h) (binomial standard errors)
    key = h0 * Kp + p0
    for k in np.unique(key):
        rows = key == k
        got, q = moved[rows].sum(axis=0), B[k // Kp, k % Kp]
        n_draws = rows.sum() * reps
        assert np.all(np.abs(got - n_draws * q) <= 5 * np.sqrt(n_draws * q * (1 - q)) + 1e-9)


def test_conditional_loss_by_monte_carlo_on_the_pair_space(data, conditional):
    """The estimator lives on every pair (h, p): the dense matrix Ph[h, h'] Pp^(h)[p, p'] over all
    Kh Kp pairs is inverted directly and the squared error of P^-T U / n simulated."""
    r = conditional
    lay = r.layout
    Kh, Kp = lay.household_table.n_cells, lay.person_table.n_cells
    Ph, B = _dense(r.household_matrix), _blocks(r)
    P = np.einsum("ac,abd->abcd", Ph, B).reshape(Kh * Kp, Kh * Kp)
    assert np.allclose(P.sum(axis=1), 1.0)
    Q = np.linalg.inv(P)
    h_of, p_of = _cell_maps(r)
    qi = list(r.table.qi)

    def pair_counts(frame):
        t = pramopt.frequency_table(
            frame, qi, domains={q: list(c) for q, c in zip(qi, r.table.categories)}
        )
        U = np.zeros(Kh * Kp)
        for c, n in zip(t.codes.tolist(), t.counts):
            U[h_of(c) * Kp + p_of(c)] += n
        return U

    n = len(data)
    mu = pair_counts(data) / n
    # the independent-records part in closed form from the dense inverse
    U0P = pair_counts(data) @ P
    assert r.details["loss_independent"] == pytest.approx(
        float(U0P @ np.sum(Q**2, axis=1)) / n**2 - 1 / n, rel=1e-9
    )
    reps = 150
    err = [
        np.sum((Q.T @ pair_counts(pramopt.release(data, r, seed=s)) / n - mu) ** 2)
        for s in range(reps)
    ]
    sd = np.std(err) / np.sqrt(reps)
    assert abs(np.mean(err) - r.loss) < 5 * sd
    assert r.loss > r.details["loss_independent"]


def test_member_pairs_count_ordered_pairs_of_distinct_members(data, result):
    from pramopt.households.result import member_pairs

    lay = result.layout
    Kh, Kp = lay.household_table.n_cells, lay.person_table.n_cells
    h_of, p_of = _cell_maps(result)
    codes = np.column_stack(
        [pd.Index(c).get_indexer(data[q]) for q, c in zip(result.table.qi, result.table.categories)]
    )
    hh = pd.factorize(data["hid"])[0]
    hs = np.array([h_of(c) for c in codes.tolist()])
    ps = np.array([p_of(c) for c in codes.tolist()])
    want = np.zeros((Kh, Kp, Kp))
    for i in range(len(data)):
        for j in range(len(data)):
            if i != j and hh[i] == hh[j]:
                want[hs[i], ps[i], ps[j]] += 1
    got = member_pairs(hh, hs, ps, Kh, Kp).toarray().reshape(Kh, Kp, Kp)
    assert np.array_equal(got, want)


def test_conditional_design_file_round_trip_and_the_old_format(conditional, result, tmp_path):
    from pramopt.households.design_file import _digest, save_household_design

    (tmp_path / "c").mkdir()
    (tmp_path / "o").mkdir()
    save_household_design(conditional, tmp_path / "c")
    rec = json.loads((tmp_path / "c" / "design.json").read_text())
    assert (
        rec["format"] == "pramopt-households/2" and rec["person_structure"] == "per household cell"
    )
    back = pramopt.load_design(tmp_path / "c")
    assert back.success and back.person_matrix.shape == conditional.person_matrix.shape
    assert (abs(back.person_matrix - conditional.person_matrix) > 0).nnz == 0
    assert back.check().max_risk == pytest.approx(conditional.max_risk, rel=1e-12)
    assert back.loss == conditional.loss
    # released the same way from the file as from memory
    df = households()
    pd.testing.assert_frame_equal(
        pramopt.release(df, back, seed=5), pramopt.release(df, conditional, seed=5)
    )
    # a stacked matrix that claims to be shared is refused
    rec["person_structure"] = "shared"
    rec["record_sha256"] = _digest(rec)
    (tmp_path / "c" / "design.json").write_text(json.dumps(rec))
    with pytest.raises(pramopt.DesignFileError, match="malformed"):
        pramopt.load_design(tmp_path / "c")
    # a design file of the first format (one shared person matrix) still loads
    save_household_design(result, tmp_path / "o")
    old = json.loads((tmp_path / "o" / "design.json").read_text())
    old["format"] = "pramopt-households/1"
    del old["person_structure"]
    old["record_sha256"] = _digest(old)
    (tmp_path / "o" / "design.json").write_text(json.dumps(old))
    back = pramopt.load_design(tmp_path / "o")
    assert back.success and back.person_matrix.shape == result.person_matrix.shape
    assert back.check().max_risk == pytest.approx(result.max_risk, rel=1e-12)
