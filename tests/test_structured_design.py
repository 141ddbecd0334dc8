"""Replacement and block designs kept, released and inverted as their parameters.

Every figure is checked against an independent computation: the dense matrix built entry by
entry from the definition, ``numpy.linalg.inv``, Monte Carlo frequencies, or the same command on
the same design kept as entries (the path every other design takes).
"""

from __future__ import annotations

import dataclasses
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import pramopt
from pramopt.cli import main
from pramopt.example import EXAMPLE_QI
from pramopt.frequency.table import FrequencyTable
from pramopt.io import design_file as DF
from pramopt.io import read_matrix
from pramopt.io.design_file import record_sha256
from pramopt.optimize.strategies.blocks import BlockModel
from pramopt.optimize.strategies.replacement_form import replacement_matrix
from pramopt.publish import sampling
from pramopt.publish.sampling import Sampler
from pramopt.result import Reduction, Status
from pramopt.structured import FormSampler, ReplacementForm, form_or_none
from pramopt.verified_result import finish

QI = list(EXAMPLE_QI)


def dense_from_definition(retention, rate, weights, pools) -> np.ndarray:
    """P[k, j] = retention[k] [k == j] + rate[k] weights[j] [same pool], entry by entry."""
    K = len(retention)
    P = np.zeros((K, K))
    for k in range(K):
        for j in range(K):
            if pools[k] == pools[j]:
                P[k, j] += rate[k] * weights[j]
        P[k, k] += retention[k]
    return P


def random_replacement(K: int, n_pools: int, seed: int):
    """o, w, pools of a replacement design: some cells kept, some receiving nothing."""
    rng = np.random.default_rng(seed)
    pools = rng.integers(0, n_pools, K)
    o = np.where(rng.random(K) < 0.7, rng.uniform(0.0, 0.9, K), 0.0)
    w = np.where(rng.random(K) < 0.6, rng.random(K), 0.0)
    tot = np.bincount(pools, weights=w, minlength=n_pools)[pools]
    w = np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 0.0)
    o[tot <= 0] = 0.0
    return o, w, pools


# -- the form is the strategies' matrix --------------------------------------------------------


def test_form_makes_the_replacement_and_block_matrices_exactly():
    o, w, pools = random_replacement(40, 3, seed=1)
    form = ReplacementForm.from_replacement(o, w, pools)
    M = form.matrix()
    ref = dense_from_definition(1.0 - o, o, w, pools)
    np.testing.assert_allclose(M.toarray(), ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(M.sum(axis=1), 1.0, atol=1e-12)
    # the very floats of the replacement strategy's matrix: a saved form reproduces it exactly
    R = sp.csr_matrix(replacement_matrix(o, w, pools))
    R.eliminate_zeros()
    assert (M != R).nnz == 0 and M.nnz == form.nnz()
    assert form.describes(R)
    R2 = R.copy()
    R2.data[3] = np.nextafter(R2.data[3], 1.0)  # one entry one ulp off
    assert not form.describes(R2)
    R3 = R.tolil()
    R3[0, 39 if pools[0] != pools[39] else 38] = 1e-3  # an entry the form does not have
    assert not form.describes(sp.csr_matrix(R3))

    # a block design: lambda_b I + 1 v_b^T, from the block model's own matrix
    blocks = [np.arange(0, 7), np.arange(7, 8), np.arange(8, 20)]
    bm = BlockModel(blocks, 20)
    rng = np.random.default_rng(2)
    z = bm.clean(np.concatenate([[0.3, 1.0, 0.05], rng.random(20)]))
    B = sp.csr_matrix(bm.matrix(z))
    B.eliminate_zeros()
    bform = ReplacementForm.from_blocks(z[: bm.B], z[bm.B :], bm.block_of)
    assert bform.describes(B)
    lam = z[: bm.B][bm.block_of]
    ref = dense_from_definition(lam, np.ones(20), z[bm.B :], bm.block_of)
    np.testing.assert_allclose(B.toarray(), ref, rtol=0, atol=1e-15)


def test_one_pool_and_invalid_parameters():
    # one pool of consecutive cells (the register case's shape), every sender also a receiver
    rng = np.random.default_rng(7)
    o, w = rng.uniform(0.1, 0.9, 60), rng.random(60)
    w /= w.sum()
    pools = np.zeros(60, dtype=np.int64)
    form = ReplacementForm.from_replacement(o, w, pools)
    np.testing.assert_allclose(
        form.matrix().toarray(), dense_from_definition(1.0 - o, o, w, pools), rtol=0, atol=1e-15
    )
    R = sp.csr_matrix(replacement_matrix(o, w, pools))
    assert (form.matrix() != R).nnz == 0 and form.describes(R)
    # a retention of 0 or a weight a solver left below 0 is no form: the matrix is kept as entries
    assert form_or_none(ReplacementForm.from_replacement, np.ones(60), w, pools) is None
    bad = w.copy()
    bad[0] = -1e-12
    assert form_or_none(ReplacementForm.from_replacement, o, bad, pools) is None
    assert form_or_none(ReplacementForm.from_replacement, o, w, pools) is not None


def test_closed_form_inverse_equals_numpy_inverse():
    o, w, pools = random_replacement(30, 2, seed=3)
    form = ReplacementForm.from_replacement(o, w, pools)
    Pinv = np.linalg.inv(dense_from_definition(1.0 - o, o, w, pools))
    U = np.random.default_rng(4).integers(0, 50, size=(3, 30)).astype(float)
    np.testing.assert_allclose(form.inverse_times(U), U @ Pinv, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(form.inverse_squares_times(U), U @ Pinv**2, rtol=1e-10, atol=1e-9)


def test_form_sampler_frequencies_match_the_matrix():
    """Monte Carlo: 200,000 draws per row; every transition frequency within 5 standard errors
    of its probability (and 1e-12), and the same draws as the row sampler for the same
    uniforms."""
    o, w, pools = random_replacement(25, 3, seed=5)
    form = ReplacementForm.from_replacement(o, w, pools)
    P = dense_from_definition(1.0 - o, o, w, pools)
    K, N = 25, 200_000
    rng = np.random.default_rng(6)
    cells = np.repeat(np.arange(K), N)
    u = rng.random(cells.size)
    got = FormSampler(form).draw(cells, u)
    freq = np.bincount(cells * K + got, minlength=K * K).reshape(K, K) / N
    tol = 5.0 * np.sqrt(P * (1.0 - P) / N) + 1e-12
    assert np.all(np.abs(freq - P) <= tol)
    assert np.all(freq[P == 0] == 0)
    same = Sampler(form.matrix()).draw(cells, u)
    assert np.count_nonzero(same != got) <= 2  # only where a uniform meets a rounded boundary


# -- designs on disk ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def designs(example):
    """The replacement and the block design of the example, each as made."""
    out = {}
    for structure in ("replacement", "blocks"):
        res = pramopt.design(example, QI, alpha=0.1, structure=structure, max_iter=5)
        assert res.success and res.form is not None, structure
        out[structure] = res
    return out


def _folder_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.iterdir())


@pytest.mark.parametrize("structure", ["replacement", "blocks"])
def test_structured_design_saved_as_parameters_and_read_back(designs, tmp_path, structure):
    res = designs[structure]
    d = pramopt.save_design(res, tmp_path / "d", matrix_csv=False).parent
    assert sorted(p.name for p in d.iterdir()) == [
        "design.json",
        "parameters.csv",
        "parameters.npz",
    ]
    rec = json.loads((d / "design.json").read_text())
    assert rec["format"] == "pramopt-design/3"
    assert rec["matrix"] == {"shape": list(res.matrix.shape), "form": "parameters.npz"}
    back = pramopt.load_design(d)
    assert back.form is not None and (back.matrix != res.matrix).nnz == 0
    assert np.array_equal(back.matrix.data, res.matrix.data)
    # parameters.csv, for people: keep + redraw = 1 on every row, shares sum to 1 per pool
    csv = pd.read_csv(d / "parameters.csv")
    assert list(csv.columns) == [*QI, "pool", "keep", "redraw", "share"]
    np.testing.assert_allclose(csv.keep + csv.redraw, 1.0, atol=1e-12)
    np.testing.assert_allclose(
        csv.keep.to_numpy(),
        res.to_dense().diagonal() - (csv.redraw * csv.share).to_numpy(),
        atol=1e-12,
    )


def _big_form_design(K: int):
    """A one-pool replacement design on K cells (K^2 entries), figures given, C1 checked."""
    rng = np.random.default_rng(K)
    codes = np.stack([np.arange(K) // 40, np.arange(K) % 40], axis=1).astype(np.int64)
    cats = (pd.Index(range(K // 40 + 1)), pd.Index(range(40)))
    table = FrequencyTable(qi=("a", "b"), categories=cats, codes=codes, counts=np.ones(K, int))
    w = rng.random(K)
    form = ReplacementForm.from_replacement(np.full(K, 0.5), w / w.sum(), np.zeros(K, int))
    red = Reduction(structure="replacement", form=form)
    return finish(
        form.matrix(),
        table,
        [(0, 1)],
        0.9,
        Status.SUCCESS,
        "",
        reduction=red,
        loss=0.0,
        condition=1.0,
    )


def test_folder_grows_with_the_parameters_not_k_squared(tmp_path):
    small, big = _big_form_design(400), _big_form_design(1600)
    assert big.form is not None and big.matrix.nnz == 1600**2
    sizes = []
    for res, name in ((small, "s"), (big, "b")):
        d = pramopt.save_design(res, tmp_path / name).parent
        assert not (d / "matrix.csv").exists() and not (d / "matrix.npz").exists()
        sizes.append(_folder_bytes(d))
    # 4 times the cells: 16 times the entries, about 4 times the folder
    assert sizes[1] < 5 * sizes[0]
    assert sizes[1] < 200 * 1600  # bytes per cell, design.json's cells and counts included
    assert (pramopt.load_design(tmp_path / "b").matrix != big.matrix).nnz == 0


# -- edited parameters are refused, old folders still load ------------------------------------


def _rewrite_npz(path: Path, **changes):
    z = dict(np.load(path))
    z.update(changes)
    np.savez(path, **z)


def _forge_checksums(d: Path, names):
    rec = json.loads((d / "design.json").read_text())
    for name in names:
        rec["files"][name] = DF.file_sha256(d / name)
    rec["record_sha256"] = record_sha256(rec)
    (d / "design.json").write_text(json.dumps(rec))


def test_edited_parameters_are_refused(designs, tmp_path):
    res = designs["replacement"]
    d = pramopt.save_design(res, tmp_path / "d").parent
    npz = d / "parameters.npz"
    ret = np.load(npz)["retention"].copy()
    k = int(np.flatnonzero(np.load(npz)["rate"] > 0)[0])
    ret[k] = np.nextafter(ret[k], 1.0)  # one ulp: a kept record a hair likelier
    _rewrite_npz(npz, retention=ret)
    with pytest.raises(pramopt.DesignFileError, match="parameters.npz does not match"):
        pramopt.load_design(d)
    # the file's checksum edited too: the guarded record no longer matches
    rec = json.loads((d / "design.json").read_text())
    rec["files"]["parameters.npz"] = DF.file_sha256(npz)
    (d / "design.json").write_text(json.dumps(rec))
    with pytest.raises(pramopt.DesignFileError, match="modified"):
        pramopt.load_design(d)
    # and the record's checksum as well: the matrix made from the parameters is not the one saved
    _forge_checksums(d, ["parameters.npz"])
    with pytest.raises(pramopt.DesignFileError, match="its matrix does not match its checksum"):
        pramopt.load_design(d)

    # parameters that are no design (a negative weight), every checksum forged
    d2 = pramopt.save_design(res, tmp_path / "d2").parent
    w = np.load(d2 / "parameters.npz")["weights"].copy()
    w[0] = -0.5
    _rewrite_npz(d2 / "parameters.npz", weights=w)
    _forge_checksums(d2, ["parameters.npz"])
    with pytest.raises(pramopt.DesignFileError, match="malformed"):
        pramopt.load_design(d2)
    # the table for people is guarded too, and a missing parameters file is no design
    d3 = pramopt.save_design(res, tmp_path / "d3").parent
    text = (d3 / "parameters.csv").read_text()
    (d3 / "parameters.csv").write_text(text.replace(",0.", ",1.", 1))
    with pytest.raises(pramopt.DesignFileError, match="parameters.csv does not match"):
        pramopt.load_design(d3)
    (d3 / "parameters.csv").write_text(text)
    (d3 / "parameters.npz").unlink()
    with pytest.raises(pramopt.DesignFileError, match="parameters.npz, which is missing"):
        pramopt.load_design(d3)


def test_folders_kept_as_entries_still_load(designs, tmp_path):
    res = designs["blocks"]
    old = dataclasses.replace(res, form=None)  # what every folder before parameters held
    d = pramopt.save_design(old, tmp_path / "old").parent
    assert json.loads((d / "design.json").read_text())["format"] == "pramopt-design/2"
    assert (d / "matrix.csv").is_file() and not (d / "parameters.npz").exists()
    back = pramopt.load_design(d)
    assert back.form is None and (back.matrix != res.matrix).nnz == 0
    # a result whose matrix was replaced keeps no form: its matrix is what is saved and released
    M = res.to_dense()
    M[0, :] = M[0, ::-1]
    assert dataclasses.replace(res, matrix=sp.csr_array(M)).form is None


# -- release, estimate and assess from the parameters -----------------------------------------


@pytest.fixture(scope="module")
def folders(designs, tmp_path_factory):
    """Each design saved as parameters and as entries (the old way)."""
    root = tmp_path_factory.mktemp("folders")
    out = {}
    for name, res in designs.items():
        new = pramopt.save_design(res, root / f"{name}-form").parent
        old = pramopt.save_design(dataclasses.replace(res, form=None), root / f"{name}-old").parent
        out[name] = (new, old)
    return out


@pytest.mark.parametrize("structure", ["replacement", "blocks"])
def test_release_from_parameters_builds_no_row_sampler(
    example, folders, structure, monkeypatch, tmp_path
):
    new, old = (pramopt.load_design(d) for d in folders[structure])
    ref = pramopt.release(example, old, seed=11)  # drawn from the matrix's rows
    csv = tmp_path / "data.csv"
    example.to_csv(csv, sep=";", index=False)
    pramopt.release_file(csv, tmp_path / "old.csv", old, seed=11, sep=";")

    def refuse(self, P):
        raise AssertionError("a design kept as parameters built a row sampler of its matrix")

    monkeypatch.setattr(sampling.Sampler, "__init__", refuse)
    got = pramopt.release(example, new, seed=11)
    pd.testing.assert_frame_equal(got, ref)
    # a file: the same bytes, dialect and every kept value as the release of the entries
    pramopt.release_file(csv, tmp_path / "new.csv", new, seed=11, sep=";")
    assert (tmp_path / "new.csv").read_bytes() == (tmp_path / "old.csv").read_bytes()


@pytest.mark.parametrize("structure", ["replacement", "blocks"])
def test_estimate_from_parameters_equals_dense_inverse(example, folders, designs, structure):
    new, old = (pramopt.load_design(d) for d in folders[structure])
    released = pramopt.release(example, new, seed=3)
    got = pramopt.estimate(released, new, by="hhcivil" if "hhcivil" in example else None)
    lu = pramopt.estimate(released, old, by="hhcivil" if "hhcivil" in example else None)
    cols = [c for c in got.columns if c not in ("observed", "estimate", "se")]
    pd.testing.assert_frame_equal(got[cols], lu[cols])
    np.testing.assert_allclose(got.estimate, lu.estimate, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.se, lu.se, rtol=1e-9, atol=1e-9)
    # and from numpy's inverse of the dense matrix, without a by
    Pinv = np.linalg.inv(designs[structure].to_dense())
    plain = pramopt.estimate(released, new)
    U = plain.observed.to_numpy(dtype=float)
    np.testing.assert_allclose(plain.estimate, U @ Pinv, rtol=1e-9, atol=1e-9)
    se = np.sqrt(np.maximum(U @ Pinv**2 - U @ Pinv, 0.0))
    np.testing.assert_allclose(plain.se, se, rtol=1e-9, atol=1e-9)


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("structure", ["replacement", "blocks"])
def test_assess_from_parameters_equals_dense(example, folders, designs, structure):
    """What ``assess --matrix FOLDER`` reads from a folder of parameters, and its assessment,
    equal those of the design's own dense matrix."""
    new, _ = folders[structure]
    P, cells = read_matrix(new, QI, data=example)
    dense = designs[structure].to_dense()
    assert np.array_equal(P, dense)
    got = pramopt.assess(example, P, qi=QI, cells=cells, alpha=0.1).to_dict()
    ref = pramopt.assess(example, dense, qi=QI, alpha=0.1).to_dict()
    assert got.keys() == ref.keys()
    for key, value in ref.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key


@pytest.mark.slow
def test_assess_and_estimate_commands_from_parameters(example, tmp_path, monkeypatch):
    """The commands on a design kept as parameters give what they give on the same design kept
    as entries (its dense matrix read back from them); the design command writes no matrix.csv
    for it unless asked."""
    csv = tmp_path / "data.csv"
    example.to_csv(csv, index=False)
    qi = ",".join(QI)
    new = tmp_path / "new"
    monkeypatch.setattr(DF, "MATRIX_CSV_MAX_ENTRIES", 0)  # as for a design of millions
    code, _, err = _run("design", "--data", csv, "--qi", qi, "--structure", "blocks", "--out", new)
    assert code == 0, err
    names = {p.name for p in new.iterdir()}
    assert {"design.json", "parameters.npz", "parameters.csv"} <= names
    assert not names & {"matrix.csv", "matrix.npz"}
    res = pramopt.load_design(new)
    assert res.form is not None
    old = pramopt.save_design(dataclasses.replace(res, form=None), tmp_path / "old").parent
    figures = []
    for d in (new, old):
        code, out, err = _run("assess", "--matrix", d, "--data", csv, "--qi", qi, "--json")
        assert code == 0, err
        figures.append(json.loads(out))
    assert figures[0].keys() == figures[1].keys()
    for key, value in figures[1].items():
        if isinstance(value, float):
            assert figures[0][key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key
    rel = tmp_path / "rel.csv"
    assert _run("release", "--design", new, "--data", csv, "--out", rel, "--seed", 5, "-q")[0] == 0
    a = _run("estimate", "--design", new, "--data", rel)
    b = _run("estimate", "--design", old, "--data", rel)
    assert a[0] == b[0] == 0, a[2] + b[2]
    ea, eb = pd.read_csv(io.StringIO(a[1])), pd.read_csv(io.StringIO(b[1]))
    pd.testing.assert_frame_equal(ea[[*QI, "observed"]], eb[[*QI, "observed"]])
    np.testing.assert_allclose(ea.estimate, eb.estimate, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ea.se, eb.se, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_design_command_writes_matrix_csv_when_asked(example, tmp_path, monkeypatch):
    csv = tmp_path / "data.csv"
    example.to_csv(csv, index=False)
    monkeypatch.setattr(DF, "MATRIX_CSV_MAX_ENTRIES", 0)  # as for a design of millions
    args = ["design", "--data", csv, "--qi", ",".join(QI), "--structure", "replacement", "-q"]
    code, _, err = _run(*args, "--matrix-csv", "--out", tmp_path / "b")
    assert code == 0, err
    res = pramopt.load_design(tmp_path / "b")
    assert res.form is not None
    long = pd.read_csv(tmp_path / "b" / "matrix.csv")
    assert len(long) == res.matrix.nnz
    np.testing.assert_allclose(np.sort(long.probability), np.sort(res.matrix.data), rtol=1e-15)


def test_overwriting_a_folder_leaves_no_file_of_the_design_replaced(designs, tmp_path):
    res = designs["replacement"]
    d = pramopt.save_design(res, tmp_path / "d", matrix_csv=True).parent
    assert (d / "matrix.csv").is_file()
    pramopt.save_design(res, d, matrix_csv=False, overwrite=True)
    assert not (d / "matrix.csv").exists() and (d / "parameters.npz").is_file()
    (d / "notes.txt").write_text("mine")  # a file of the user's stays
    pramopt.save_design(dataclasses.replace(res, form=None), d, overwrite=True)
    names = {p.name for p in d.iterdir()}
    assert names == {"design.json", "matrix.csv", "notes.txt"}
    assert pramopt.load_design(d).form is None


def test_the_uniform_design_keeps_its_form_and_it_is_its_matrix(example):
    # the last resort is a replacement design too: its form rebuilds its matrix entry by entry
    from pramopt.frequency.combinations import resolve_combinations
    from pramopt.optimize.problem import DesignProblem, Trace
    from pramopt.optimize.strategies import strategy
    from pramopt.params import DesignParams

    table = pramopt.frequency_table(example, QI)
    params = DesignParams(alpha=0.1)
    problem = DesignProblem.build(table, resolve_combinations(table.qi, 3, None, "t"), params)
    att = strategy("uniform").solve(problem, 0.1, Trace())
    assert att.ok and att.reduction is not None and att.reduction.form is not None
    f = att.reduction.form
    dense = dense_from_definition(f.retention, f.rate, f.weights, f.pools)
    assert np.abs(dense - att.P.toarray()).max() < 1e-15
