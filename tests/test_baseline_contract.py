"""One contract for every registered baseline family (:data:`pramopt.baselines.BASELINES`).

A family registered once must be reachable under its one name from every reader --
:func:`pramopt.baseline`, :func:`pramopt.calibrate_all`, :func:`pramopt.frontier` and the
``pramopt baseline`` command -- each giving a result whose ``method`` and ``params["family"]``
are that name and whose matrix its matrix builder makes again from the tuned parameters; it
must have a one-line description (the command's help shows it) and declare only options its
calibration takes.  Old spellings are read, never written.  The producers' shared contract
(C1 by brute force, save/load, release) is tests/test_contract.py, which runs over the same
registry.
"""

from __future__ import annotations

import inspect
import io
import json
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.baselines import ALIASES, BASELINES, BaselineFamily, register
from pramopt.baselines.registry import OldNameWarning
from pramopt.cli import build_parser, main

ALPHA = 0.2
QI = ["a", "b", "c", "d"]
NAMES = list(BASELINES)


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
        }
    )


@pytest.fixture(scope="module")
def produced(data):
    return {name: pramopt.baseline(data, QI, name, ALPHA) for name in NAMES}


def run_main(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", NAMES)
def test_entry_is_complete(name):
    fam = BASELINES[name]
    assert isinstance(fam, BaselineFamily) and fam.name == name
    assert fam.description.strip() and "\n" not in fam.description
    assert callable(fam.calibrate) and callable(fam.matrix)
    assert fam.tuned and all(isinstance(k, str) for k in fam.tuned)
    takes = {
        p.name
        for p in inspect.signature(fam.calibrate).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert set(fam.options) <= takes, f"{name}: options its calibration does not take"
    assert name not in ALIASES


@pytest.mark.parametrize("name", NAMES)
def test_baseline_gives_the_family_and_its_matrix_builder_the_same_matrix(name, produced):
    fam, r = BASELINES[name], produced[name]
    assert r.method == name and r.params["family"] == name
    assert r.success, r.message
    assert all(k in r.details for k in fam.tuned)
    np.testing.assert_allclose(fam.matrix(r.table, r.details), r.to_dense(), rtol=0, atol=1e-12)


def test_calibrate_all_and_the_frontier_reach_every_family(data, produced):
    table = pramopt.frequency_table(data, QI)
    combos = pramopt.resolve_combinations(QI)
    every = pramopt.calibrate_all(table, combos, ALPHA)
    assert list(every) == NAMES
    fr = pramopt.frontier(table, alphas=[ALPHA], baselines="all")
    assert list(fr.points["design"]) == ["optimal", *NAMES]
    for name in NAMES:
        assert every[name].method == name
        assert every[name].loss == pytest.approx(produced[name].loss, rel=1e-12)
        row = fr.points[fr.points["design"] == name].iloc[0]
        assert row["loss"] == pytest.approx(produced[name].loss, rel=1e-12)
        assert row["parameters"], f"{name}: no tuned parameter on the frontier"


@pytest.mark.parametrize("name", NAMES)
def test_the_command_runs_every_family(name, data, produced, tmp_path):
    data.to_csv(tmp_path / "d.csv", index=False)
    code, _, err = run_main(
        "baseline",
        name,
        "--data",
        tmp_path / "d.csv",
        "--qi",
        ",".join(QI),
        "--alpha",
        ALPHA,
        "--out",
        tmp_path / "out",
        "-q",
    )
    assert code == 0 and err == ""
    rec = json.loads((tmp_path / "out" / "design.json").read_text())
    assert rec["method"] == name and rec["params"]["family"] == name
    assert rec["figures"]["loss"] == pytest.approx(produced[name].loss, rel=1e-9)
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["baseline"]
    assert f"{name}  " in sub.description and BASELINES[name].description in sub.description


def test_old_spellings_are_read_never_written(data, produced, tmp_path):
    assert set(ALIASES.values()) <= set(NAMES)
    for old, name in ALIASES.items():
        with pytest.warns(OldNameWarning, match=f"write '{name}'"):
            r = pramopt.baseline(data, QI, old, ALPHA)
        assert r.method == name and r.params["family"] == name
        assert (r.matrix != produced[name].matrix).nnz == 0
    with pytest.warns(OldNameWarning, match="write 'retention'"):
        fr = pramopt.frontier(data, QI, [ALPHA], baselines=["rr"])
    assert list(fr.points["design"]) == ["optimal", "retention"]
    data.to_csv(tmp_path / "d.csv", index=False)
    code, _, err = run_main(
        "baseline",
        "invariant",
        "--data",
        tmp_path / "d.csv",
        "--qi",
        ",".join(QI),
        "--alpha",
        ALPHA,
        "--out",
        tmp_path / "old",
        "-q",
    )
    assert code == 0 and "old name" in err and "'sdcmicro'" in err
    assert json.loads((tmp_path / "old" / "design.json").read_text())["method"] == "sdcmicro"


def test_a_design_file_with_an_old_family_name_still_reproduces(produced, tmp_path):
    # design.json files written before the one registry hold params.family "rr"
    r = pramopt.baseline(
        produced["retention"].table, family="retention", alpha=ALPHA, per_attribute=True
    )
    pramopt.save_design(r, tmp_path)
    rec = json.loads((tmp_path / "design.json").read_text())
    rec["params"]["family"] = "rr"
    (tmp_path / "design.json").write_text(json.dumps(rec))
    back = pramopt.load_design(tmp_path)
    assert back.method == "retention-per-attribute"
    with pytest.warns(OldNameWarning, match="'rr' is an old name"):
        again = pramopt.baseline(back.table, **back.params)
    assert again.method == "retention-per-attribute" and (again.matrix != r.matrix).nnz == 0


def test_register_refuses_a_taken_name_or_a_half_entry():
    fam = BASELINES["ifpr"]
    with pytest.raises(pramopt.InvalidParameterError, match="taken"):
        register(fam)
    with pytest.raises(pramopt.InvalidParameterError, match="taken"):
        register(BaselineFamily("rr", fam.calibrate, fam.matrix, fam.tuned, fam.options, "x"))
    with pytest.raises(pramopt.InvalidParameterError, match="one-line description"):
        register(BaselineFamily("new", fam.calibrate, fam.matrix, fam.tuned, fam.options, ""))
    assert "new" not in BASELINES
