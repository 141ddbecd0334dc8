"""Smoke test: each benchmark study runs on a tiny case and writes its tables and figures.

The full benchmark run (``python -m benchmarks``) is not part of the test suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # the benchmarks package beside pramopt

pytest.importorskip("matplotlib")

from benchmarks import figures, optimal_vs_closed, scaling, solvers  # noqa: E402,F401
from benchmarks._common import read_table, records_data, zipf_cells  # noqa: E402


def test_generators_are_seeded():
    a, b = zipf_cells(40, n_vars=4, seed=3), zipf_cells(40, n_vars=4, seed=3)
    assert a.equals(b)
    assert len(a.drop_duplicates()) == 40
    r = records_data(500, seed=0)
    assert r.equals(records_data(500, seed=0)) and len(r) == 500


def test_optimal_vs_closed_quick(tmp_path):
    res = optimal_vs_closed.run(tmp_path, quick=True, alphas=(0.1,), log=lambda m: None)
    opt = res[res.design == "optimal (pramopt)"]
    assert opt.meets_c1.all()
    head = read_table(tmp_path / "headline.csv")
    assert (head.ratio >= 1 - 1e-9).all()
    assert (tmp_path / "optimal_vs_closed.md").read_text().count("CPUs") == 1


def test_solvers_quick(tmp_path):
    res = solvers.run(
        tmp_path,
        quick=True,
        solvers=("HIGHS", "scipy.linprog(highs)"),
        only=("example",),
        log=lambda m: None,
    )
    assert len(res) == 2
    assert res.verified.all()
    assert np.allclose(res.objective, res.objective.iloc[0], rtol=1e-6)


@pytest.mark.slow  # a benchmark's smoke run: `pytest -m slow`
def test_scaling_quick(tmp_path):
    kdf, ndf = scaling.run(tmp_path, quick=True, cells=(40,), records=(2000,), log=lambda m: None)
    assert kdf.design_s.notna().all() and ndf.release_s.notna().all()
    assert (tmp_path / "scaling_slopes.md").exists()


@pytest.mark.slow  # a benchmark's smoke run: `pytest -m slow`
def test_figures_quick(tmp_path):
    optimal_vs_closed.run(tmp_path, quick=True, alphas=(0.1, 0.2), log=lambda m: None)
    paths = figures.run(tmp_path, quick=True, log=lambda m: None)
    assert all(p.stat().st_size > 1000 for p in paths)
    assert (tmp_path / "figure1_change_vs_frequency.png").exists()


def test_records_quick(tmp_path):
    from benchmarks import records

    res = records.run(
        tmp_path, quick=True, batch_sizes=(), formats=("parquet",), log=lambda m: None
    )
    row = res["records"].iloc[0]
    assert row.n == 20_000 and row.success and row.count_s > 0 and row.release_s > 0
    assert res["pipeline"].count_release_s.notna().all()
    assert res["inmemory"].same_checksum.all()
    assert (tmp_path / "records.md").exists() and res["figure"].stat().st_size > 1000


def test_census_generator_is_seeded_and_shaped_like_a_census():
    from benchmarks.census_data import CENSUS_KEYS, census_data, register_data

    a, b = census_data(3000, 8, seed=4), census_data(3000, 8, seed=4)
    assert a.equals(b) and list(a.columns) == list(CENSUS_KEYS)
    # the first keys do not depend on how many are asked for
    assert census_data(3000, 5, seed=4).equals(a[list(CENSUS_KEYS[:5])])
    levels = {
        "age": 18,
        "sex": 2,
        "region": 40,
        "marital": 5,
        "education": 8,
        "employment": 4,
        "citizenship": 3,
        "household_size": 6,
    }
    for k, L in levels.items():
        assert a[k].between(0, L - 1).all()
    # children are nearly all single and inactive; most 5-key cells are rare
    kids = a.age < 3
    assert (a.marital[kids] == 0).mean() > 0.95 and (a.employment[kids] == 2).mean() > 0.95
    cells = census_data(20000, 5, seed=0).value_counts()
    assert (cells < 10).mean() > 0.9
    r = register_data(4000, seed=0)
    assert r.nunique().tolist() <= [182, 2, 60, 4] and len(r.drop_duplicates()) > 3000


@pytest.mark.slow  # a benchmark's smoke run: `pytest -m slow`
def test_census_quick(tmp_path):
    from benchmarks import census

    df = census.run(tmp_path, quick=True, log=lambda m: None)
    assert (df.status == "success").all() and (df.max_risk <= 0.1).all()
    assert (tmp_path / "census.md").exists()


def test_peers_quick(tmp_path):
    from benchmarks import peers

    res = peers.run(tmp_path, quick=True, log=lambda m: None)
    # without a recorded or live run of the packages, no row claims to be one
    assert not res.peer.str.contains("real package").any()
    ideal = res[res.peer == "idealised formula after pymasq 0.6.5"]
    assert len(ideal) and ideal.what_was_run.str.startswith("NOT the package").all()
    assert (ideal.per_variable_invariance_error < 1e-9).all()
    assert (res.mean_leaving.dropna() >= 0).all() and (tmp_path / "peers.md").exists()


def test_privacy_design_quick(tmp_path):
    from benchmarks import privacy_design

    res = privacy_design.run(tmp_path, quick=True, log=lambda m: None)
    eps = res["epsilon"]
    opt = eps[eps.design == privacy_design.OPT]
    assert (opt.status == "success").all() and opt.meets_epsilon.all()
    # at equal epsilon no calibrated retention-replacement matrix loses less than the optimum
    fair = eps[eps.meets_epsilon]
    assert (fair.loss_vs_optimal >= 1 - 1e-9).all()
    assert (res["k"].loc[res["k"].design == privacy_design.OPT, "meets_k"]).all()
    assert (tmp_path / "privacy_design.md").exists() and (
        tmp_path / "privacy_design_c1.csv"
    ).exists()


def test_changed_variables_quick(tmp_path):
    from benchmarks import changed_variables

    res = changed_variables.run(tmp_path, quick=True, limits=(None, 1), log=lambda m: None)
    assert (res.status == "success").all()
    one = res[res.max_changed_variables == 1]
    assert (one.mean_vars_changed == 1).all() and (one.largest_vars_changed == 1).all()
    assert (tmp_path / "changed_variables.png").exists() and (
        tmp_path / "changed_variables.md"
    ).exists()


def test_frontier_quick(tmp_path):
    from benchmarks import frontier

    f = frontier.run(tmp_path, quick=True, log=lambda m: None)
    assert f.success and f.alphas == (0.1, 0.2)
    pts = read_table(tmp_path / "frontier_example.csv")
    assert len(pts) == 2 * len(f.names) and pts.meets_c1.all()
    assert (tmp_path / "frontier_example.png").read_bytes()[:4] == b"\x89PNG"


def test_households_quick(tmp_path):
    from benchmarks import households

    t = households.run(tmp_path, quick=True, log=lambda m: None)
    for _, hh in t[t.design.str.startswith("households")].iterrows():
        assert hh.status == "success" and hh.max_risk <= 0.1
        # members released together never disagree on a household-level key
        assert hh.households_disagree_urbrur == 0 and hh.households_disagree_roof == 0
    assert (tmp_path / "households_quick.md").exists() and (
        tmp_path / "households_quick.png"
    ).exists()


@pytest.mark.slow
def test_optimality_quick(tmp_path):
    # about a minute: SLSQP from seven starts on a 15-cell table
    from benchmarks import optimality

    res = optimality.run(tmp_path, quick=True, log=lambda m: None)
    row = res.iloc[0]
    assert row.status == "success" and row.feasible_starts >= 1 and np.isfinite(row.multistart_best)
    # the loss bound holds for the designer and for the best end point when it is in the bound's class
    assert row.design_loss >= row.loss_lower_bound > 0
    assert row.multistart_best >= row.loss_lower_bound or row.best_inverse_diagonal_min < 1 - 1e-9
    assert (tmp_path / "optimality.md").exists()


@pytest.mark.slow  # a benchmark's smoke run: `pytest -m slow`
def test_refine_models_quick(tmp_path):
    from benchmarks import refine_models

    res = refine_models.run(tmp_path, quick=True, log=lambda m: None)
    assert list(res.model) == list(refine_models.MODELS) and res.success.all()
    steps = read_table(tmp_path / "refine_models_steps.csv")
    assert set(steps.model) == set(refine_models.MODELS) and (steps.support > 0).all()


def test_refine_compare_quick(tmp_path):
    # this tree against itself as a labelled base: same loss, and the iterations to reach the base's
    # loss are counted from the progress callback's history (at most the refinement's iterations)
    from benchmarks import refine

    repo = Path(__file__).resolve().parents[1]
    refine.run(tmp_path, quick=True, base=[f"self={repo}"], log=lambda m: None)
    cmp = read_table(tmp_path / "refine_compare.csv")
    row = cmp.iloc[0]
    assert row.base == "self" and row.case == "example"
    assert row.new_loss == pytest.approx(row.base_loss, rel=1e-9)
    assert 1 <= row.new_iterations_to_base_loss <= row.new_iterations
    assert row.new_loss_at_20 == pytest.approx(row.new_loss, rel=1e-9)
    assert refine.to_reach([3.0, 2.0, 1.0], 2.0) == 2 and refine.to_reach([3.0], 2.0) is None


@pytest.mark.slow
def test_structures_quick(tmp_path):
    # about a minute: the hybrid structure (general rows for frequent cells, blocks for rare ones)
    from benchmarks import structures

    res = structures.run(tmp_path, quick=True, log=lambda m: None)
    row = res.iloc[0]
    # the study's matrix passes the full C1 check, and the proven loss bound holds for it (its
    # inverse has a diagonal >= 1: block triangular, diagonally dominant frequent rows)
    assert row.verified and row.max_risk <= structures.ALPHA
    assert row.loss >= row.loss_lower_bound > 0
    assert (tmp_path / "structures_quick.md").exists()
