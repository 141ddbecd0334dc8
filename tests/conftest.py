"""Shared test fixtures.

Real microdata (sdcMicro's testdata, GPL-2) is read from ``../shared/data`` beside the
repository and never copied into it; tests that need it are skipped when it is absent.
"""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "testdata.csv").exists():
        pytest.skip(f"shared test data not found at {SHARED_DATA}")
    return SHARED_DATA
