"""Smoke test: the per-variable comparison study runs on testdata with 4 keys and writes its table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks import per_variable_compare  # noqa: E402
from benchmarks._common import TESTDATA, read_table  # noqa: E402


@pytest.mark.slow  # a benchmark's smoke run: `pytest -m slow`
@pytest.mark.skipif(not TESTDATA.exists(), reason="shared testdata not available")
def test_per_variable_compare_quick(tmp_path):
    per_variable_compare.run(tmp_path, quick=True, data=["td4"], log=lambda m: None)
    t = read_table(tmp_path / "per_variable_compare.csv")
    assert list(t.design) == list(per_variable_compare.DESIGNS)
    # every design is verified at the same alpha, and the ratio of the design to itself is 1
    assert t.success.all() and (t["max risk"] <= per_variable_compare.ALPHA + 1e-12).all()
    pv = t[t.design == "per-variable"].iloc[0]
    assert pv["per-variable loss / this loss"] == pytest.approx(1.0)
    sdc = t[t.design == "sdcMicro"].iloc[0]
    assert pv["loss"] <= sdc["loss"]
    assert (tmp_path / "per_variable_compare.md").exists()
