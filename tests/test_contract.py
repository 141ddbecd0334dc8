"""One contract for every producer of a design: pramopt.design and every calibrated baseline.

Each result must be a row-stochastic, read-only sparse matrix on the present cells; ``success``
must agree with C1 recomputed here by brute force over the records (Cator et al., eq. (1),
sharing no code with pramopt); it must survive save/load unchanged; ``params`` must make the
same design again; and it must release.  Further: the promises of the package's layout (no
cvxpy on import, nothing on stdout, the solver chain falls back, every release re-checks C1,
parameters declared once).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import pramopt
from pramopt._plain import plain
from pramopt.errors import DesignMismatchError

ALPHA = 0.2


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    n = 300
    return pd.DataFrame(
        {
            "a": rng.choice(["x", "y", "z"], n, p=[0.6, 0.3, 0.1]),
            "b": rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1]),
            "c": rng.choice(2, n, p=[0.7, 0.3]),
            "d": rng.choice(3, n, p=[0.5, 0.45, 0.05]),
            "w": rng.random(n),
        }
    )


QI = ["a", "b", "c", "d"]

PRODUCERS = {
    "design": lambda df: pramopt.design(df, QI, alpha=ALPHA),
    "design-blocks": lambda df: pramopt.design(df, QI, alpha=ALPHA, structure="blocks"),
    "design-replacement": lambda df: pramopt.design(df, QI, alpha=ALPHA, structure="replacement"),
    "design-epsilon": lambda df: pramopt.design(df, QI, alpha=ALPHA, epsilon=3.0),
    # every registered baseline family (a seed other than the default where the family draws one)
    **{
        name: (
            lambda df, name=name, seed=("seed" in fam.options): pramopt.baseline(
                df, QI, name, ALPHA, **({"seed": 2} if seed else {})
            )
        )
        for name, fam in pramopt.baselines.BASELINES.items()
    },
    "retention-option-per-attribute": lambda df: pramopt.baseline(
        df, QI, "retention", ALPHA, per_attribute=True
    ),
}


def brute_force_risk(res, df: pd.DataFrame, qi, size: int = 3) -> float:
    """Largest left-hand side of eq. (1) over every present m, every triple π and every k0.

    U0 is counted here from the records; the result only supplies its matrix and the order of
    its cells (its rows and columns).
    """
    P = res.to_dense()
    cells = [tuple(r) for r in res.cells[qi].itertuples(index=False)]
    recs = [tuple(r) for r in df[qi].itertuples(index=False)]
    U0 = np.array([recs.count(c) for c in cells], dtype=float)
    assert U0.sum() == len(df)  # every record lies in one of the matrix's cells
    worst = 0.0
    for pi in itertools.combinations(range(len(qi)), size):
        for k0 in {tuple(c[i] for i in pi) for c in cells}:
            cols = [j for j, c in enumerate(cells) if tuple(c[i] for i in pi) == k0]
            S = P[:, cols].sum(axis=1)
            worst = max(worst, float(S.max() / (U0 @ S)))
    return worst


@pytest.fixture(scope="module", params=list(PRODUCERS))
def produced(request, data):
    return request.param, PRODUCERS[request.param](data)


def test_matrix_is_stochastic_sparse_and_read_only(produced):
    name, res = produced
    assert isinstance(res.matrix, sp.sparray), name
    P = res.to_dense()
    assert P.shape == (res.table.n_cells, res.table.n_cells)
    assert (P >= 0).all()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
    with pytest.raises(ValueError):
        res.matrix.data[0] = 0.5
    with pytest.raises(ValueError):
        res.counts[0] = 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.alpha = 0.9


def test_success_agrees_with_brute_force_c1(produced, data):
    name, res = produced
    risk = brute_force_risk(res, data, QI)
    assert res.max_risk == pytest.approx(risk, rel=1e-9), name
    assert res.success == (risk <= ALPHA)
    assert res.success, f"{name}: {res.message}"


def test_save_load_round_trip(produced, tmp_path):
    name, res = produced
    pramopt.save_design(res, tmp_path)
    back = pramopt.load_design(tmp_path)
    assert (back.matrix != res.matrix).nnz == 0
    assert back.status is res.status and back.method == res.method
    assert back.figures() == pytest.approx(res.figures(), nan_ok=True)
    assert plain(back.params) == plain(res.params)
    assert back.reduction == res.reduction
    assert back.binding_rows == tuple((c, tuple(k), r) for c, k, r in res.binding_rows)


def test_params_reproduce_the_design(produced):
    name, res = produced
    again = (
        pramopt.design(res.table, **res.params)
        if res.method == "optimal"
        else pramopt.baseline(res.table, **res.params)
    )
    assert (again.matrix != res.matrix).nnz == 0, name
    assert again.loss == res.loss


def test_releases_and_only_identifying_columns_change(produced, data):
    name, res = produced
    out = pramopt.release(data, res, seed=4)
    pd.testing.assert_series_equal(out["w"], data["w"])
    assert set(map(tuple, out[QI].to_numpy())) <= set(map(tuple, data[QI].to_numpy()))


def test_every_release_path_checks_c1_again(data, tmp_path):
    # a result claiming success whose matrix does not meet C1 (P = I on data that need PRAM)
    res = pramopt.design(data, QI, alpha=ALPHA)
    forged = dataclasses.replace(res, matrix=sp.identity(res.table.n_cells, format="csr"))
    assert (
        forged.success
        and pramopt.c1_risk(
            forged.matrix, res.table.codes, res.table.counts, forged.combination_indices
        ).max_risk
        > ALPHA
    )
    with pytest.raises(DesignMismatchError, match="fails C1"):
        pramopt.release(data, forged, seed=1)
    data.to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(DesignMismatchError, match="fails C1"):
        pramopt.release_file(tmp_path / "d.csv", tmp_path / "r.csv", forged, seed=1)
    assert not (tmp_path / "r.csv").exists()
    # a NaN matrix is never released either
    nan = dataclasses.replace(res, matrix=sp.csr_array(np.full((res.table.n_cells,) * 2, np.nan)))
    with pytest.raises(DesignMismatchError):
        pramopt.release(data, nan, seed=1)


def test_fallback_chain_solves_with_cvxpy_when_highs_fails(data, monkeypatch):
    from pramopt.optimize.backends import LPSolution, Outcome, highs

    calls = []

    def broken(self, c, lo, hi):
        calls.append(1)
        return LPSolution(Outcome.ERROR, None, None, 0.0, "highspy: simulated failure")

    monkeypatch.setattr(highs.HighsProgram, "solve", broken)
    res = pramopt.design(data, QI, alpha=ALPHA, max_iter=5)
    assert calls, "HiGHS was not tried first"
    assert res.success and res.solver == "CLARABEL"
    assert brute_force_risk(res, data, QI) <= ALPHA


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_import_does_not_load_cvxpy_and_design_prints_nothing():
    r = _run(
        "import sys, pramopt; assert 'cvxpy' not in sys.modules, 'cvxpy imported'\n"
        "res = pramopt.design(pramopt.example_data(), ['v1', 'v2', 'v3', 'v4', 'v5'], alpha=0.1)\n"
        "assert res.success\n"
        "assert 'cvxpy' not in sys.modules, 'cvxpy imported by the default design'"
    )
    assert r.returncode == 0, r.stderr
    # HiGHS's banner is written by C++ to file descriptor 1: a subprocess sees it, capsys would not
    assert r.stdout == ""


def test_parameters_are_declared_once():
    fields = {f.name: f.default for f in dataclasses.fields(pramopt.DesignParams)}
    sig = inspect.signature(pramopt.design)
    assert {k: v.default for k, v in sig.parameters.items() if k in fields} == fields
    assert set(fields) <= set(sig.parameters)
    assert set(pramopt.spec.DESIGN_KEYS) == set(fields)
    for name in fields:
        assert f"    {name} : " in pramopt.design.__doc__
    from pramopt.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    dests = {a.dest for a in sub.choices["design"]._actions}
    cli_fields = [
        f.name for f in dataclasses.fields(pramopt.DesignParams) if f.metadata["cli"] is not None
    ]
    assert set(cli_fields) <= dests
    assert {"support", "structure", "keep_cells"} <= set(cli_fields)
    with pytest.raises(pramopt.InvalidParameterError, match="unknown parameters"):
        pramopt.design(pramopt.example_data(), ["v1", "v2"], gama=0.9)


def test_report_leaves_matplotlib_state_alone(tmp_path):
    r = _run(
        "import matplotlib; matplotlib.use('svg')\n"
        "import matplotlib.pyplot as plt; fig = plt.figure()\n"
        "import pramopt\n"
        "from pramopt.report import from_result, render_html\n"
        "res = pramopt.design(pramopt.example_data(), ['v1', 'v2', 'v3', 'v4', 'v5'], alpha=0.1)\n"
        "render_html(from_result(res))\n"
        "assert matplotlib.get_backend().lower() == 'svg', matplotlib.get_backend()\n"
        "assert plt.get_fignums() == [fig.number], plt.get_fignums()"
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("bad", [np.nan, np.inf, -0.1])
def test_c1_check_fails_closed(bad):
    # a matrix with a NaN, infinite or negative entry never passes C1, whatever alpha
    codes = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    counts = np.array([5, 5, 5, 5])
    P = np.full((4, 4), 0.25)
    P[1, 2] = bad
    rep = pramopt.c1_risk(P, codes, counts, [(0, 1)])
    assert not rep.max_risk <= 0.99
    assert not pramopt.c1_risk(np.full((4, 4), np.nan), codes, counts, [(0,)]).max_risk <= 0.99


def test_result_cannot_be_changed_in_place(data):
    res = pramopt.design(
        data, QI, alpha=ALPHA, max_iter=3, combinations=[["a", "b", "c"], ["b", "c", "d"]]
    )
    assert isinstance(res.params["combinations"], tuple)
    M = res.matrix
    for attempt in (
        lambda: setattr(M, "data", np.zeros_like(M.data)),
        lambda: M.resize((2, 2)),
        lambda: M.data.__setitem__(0, 0.0),
        lambda: res.table.counts.__setitem__(0, 99),
        lambda: res.params["combinations"].append(("a",)),
    ):
        with pytest.raises((AttributeError, ValueError, TypeError)):
            attempt()
    copy = M.copy()  # a copy is an ordinary array to change at will
    copy.data[:] = 0.0
    assert M.data.max() > 0
