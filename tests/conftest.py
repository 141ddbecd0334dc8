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


@pytest.fixture(scope="session")
def example():
    """The built-in example microdata (seeded)."""
    from pramopt.example import example_data

    return example_data()


@pytest.fixture(scope="session")
def result(example):
    """The optimal design of the built-in example at alpha = 0.1."""
    import pramopt
    from pramopt.example import EXAMPLE_QI

    return pramopt.design(example, list(EXAMPLE_QI), alpha=0.1)
