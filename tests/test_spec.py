"""Specs in models/: every one loads and validates; the example spec meets its expected figures."""

from __future__ import annotations

import io
import json
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import pramopt
from pramopt.cli import main
from pramopt.errors import InvalidParameterError
from pramopt.spec import load_spec, zipf_data

MODELS = Path(__file__).resolve().parents[1] / "models"
SPECS = sorted(MODELS.glob("*.toml"))


def test_the_expected_specs_exist():
    assert {"example", "testdata4", "testdata7", "zipf"} <= {p.stem for p in SPECS}


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_every_spec_validates_and_its_data_has_the_qi(path):
    raw = tomllib.loads(path.read_text())
    spec = load_spec(path)
    assert 0 < spec.alpha < 1 and spec.alpha == raw["design"]["alpha"]
    assert list(spec.qi) == raw["data"]["qi"]
    if spec.data_path is not None:
        # relative paths are resolved against the spec file's own folder
        assert spec.data_path == (MODELS / raw["data"]["path"]).resolve()
        assert (
            spec.data_path.parent.name == "data" and spec.data_path.parent.parent.name == "shared"
        )
        if not spec.data_path.exists():
            pytest.skip(f"data not found at {spec.data_path}")
    df = spec.load_data()
    assert set(spec.qi) <= set(df.columns) and len(df) > 0
    if "expected" in raw:
        assert raw["expected"].get("status") in (None, "success")


def test_example_spec_designs_with_its_expected_figures(tmp_path):
    path = MODELS / "example.toml"
    exp = tomllib.loads(path.read_text())["expected"]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["design", str(path), "--out", str(tmp_path / "d"), "--check"])
    assert code == 0, err.getvalue()
    rec = json.loads((tmp_path / "d" / "design.json").read_text())
    assert rec["status"] == exp["status"]
    # the figures recomputed from the written matrix, on the built-in data
    res = pramopt.io.load_design(tmp_path / "d")
    a = pramopt.assess(pramopt.example_data(), res.matrix, qi=list(res.qi))
    assert a.max_risk <= exp["max_risk"]["max"]
    assert res.matrix.diagonal().min() > exp["min_diagonal"]["min"]
    assert exp["expected_changes"]["min"] <= a.expected_changes <= exp["expected_changes"]["max"]
    assert a.loss <= exp["loss"]["max"]
    assert "all met" in out.getvalue()


def test_check_flags_missed_expected_figures(tmp_path):
    text = (
        (MODELS / "example.toml")
        .read_text()
        .replace("loss = { max = 1e-5 }", "loss = { max = 1e-9 }")
    )
    (tmp_path / "models").mkdir()
    spec = tmp_path / "models" / "strict.toml"
    spec.write_text(text)
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main(["design", str(spec), "--out", str(tmp_path / "d"), "--check"])
    assert code == 1 and "loss" in err.getvalue()


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda t: t.replace("[design]", "[design]\nbogus = 1"), "bogus"),
        (lambda t: t.replace("alpha = 0.1", ""), "alpha"),
        (lambda t: t.replace('builtin = "example"', 'builtin = "other"'), "builtin"),
        (
            lambda t: t.replace('builtin = "example"', 'builtin = "example"\npath = "x.csv"'),
            "exactly one",
        ),
        (lambda t: t + "\n[extra]\n", "unknown top-level"),
    ],
)
def test_invalid_specs_are_refused(tmp_path, edit, needle):
    p = tmp_path / "bad.toml"
    p.write_text(edit((MODELS / "example.toml").read_text()))
    with pytest.raises(InvalidParameterError, match=needle):
        load_spec(p)
    code = main(["design", str(p), "--out", str(tmp_path / "d"), "-q"])
    assert code == 2 and not (tmp_path / "d").exists()


def test_zipf_generator_is_seeded_and_zipf_like():
    a = zipf_data(n=20000, seed=3, levels=[6, 4], exponent=1.2)
    b = zipf_data(n=20000, seed=3, levels=[6, 4], exponent=1.2)
    assert a.equals(b) and not a.equals(zipf_data(n=20000, seed=4, levels=[6, 4], exponent=1.2))
    freq = a["z1"].value_counts(normalize=True).sort_index()
    w = np.arange(1, 7) ** -1.2
    np.testing.assert_allclose(freq.to_numpy(), w / w.sum(), atol=0.01)
