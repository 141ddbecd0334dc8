"""The README's walk-through, run as written: every figure it quotes is what the commands print.

The commands are read from the README's walk-through block and run in a folder holding sdcMicro's
testdata as ``survey.csv`` (read from ``../shared``, never copied into the repository).  Each
fragment below must appear both in the README (whitespace and quote marks normalised) and in what
the commands print, so a change that moves a figure fails here until the README says it again.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.test_cli import run_main

ROOT = Path(__file__).resolve().parents[1]
TESTDATA = ROOT.parent / "shared" / "data" / "testdata.csv"

#: (what a command prints, how the README quotes it).
QUOTED = (
    ("pramopt design: success", "pramopt design: success"),
    (
        "2.0% of records (90.8 of 4,580) are expected to change; no design meeting C1 with these "
        "keys, categories and alpha changes fewer than 0.68% (31.5).",
    )
    * 2,
    ("max C1 risk      = 0.099999  (bound 0.1", "max C1 risk 0.099999 (bound 0.1"),
    ("exact L2 loss    = 8.96386e-06", "exact L2 loss 8.96386e-06"),
    ("general      8.964e-06  90.787  2.51", "2.51 for the one chosen"),
    ("released 4580 records to released.csv: 81 changed (expected 90.79).",) * 2,
    ("wrote 47 estimates of 4580 released records",) * 2,
    ("C1 max risk (Cator et al.)        0.099999  (alpha = 0.1: met)", "0.099999 (α = 0.1: met)"),
    ("expected changed records          90.79", "90.79 expected changed records"),
)


def _flat(text: str) -> str:
    text = re.sub(r"^\s*>\s?", "", text, flags=re.M)
    return re.sub(r"\s+", " ", text)


def _walkthrough_commands(readme: str) -> list[list[str]]:
    section = readme.split("## Walk-through", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line)[1:] for line in block.strip().splitlines()]


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    if not TESTDATA.is_file():
        pytest.skip("sdcMicro's testdata is not in ../shared/data")
    folder = tmp_path_factory.mktemp("walk")
    (folder / "survey.csv").symlink_to(TESTDATA)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    outputs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        for argv in _walkthrough_commands(readme):
            code, out, err = run_main(*argv)
            assert code == 0, (argv, out, err)
            outputs.append(out + err)
    return readme, "\n".join(outputs)


def test_the_walkthrough_runs_four_commands(printed):
    readme, _ = printed
    commands = [argv[0] for argv in _walkthrough_commands(readme)]
    assert commands == ["design", "release", "estimate", "assess"]


@pytest.mark.parametrize(("printed_text", "quoted"), QUOTED)
def test_every_quoted_figure_is_printed_and_in_the_readme(printed, printed_text, quoted):
    readme, output = printed
    assert _flat(printed_text) in _flat(output), f"the commands no longer print {printed_text!r}"
    assert _flat(quoted) in _flat(readme), f"the README does not quote {quoted!r}"


def test_the_python_example_runs(printed, tmp_path, monkeypatch):
    readme, output = printed
    code = readme.split("## In Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    (tmp_path / "survey.csv").symlink_to(TESTDATA)
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(code.replace("print(", "str("), "README", "exec"), names)
    assert names["res"].success
    assert len(names["released"]) == 4580
    # the Python example designs what the command line designed from the same file
    cli = float(re.search(r"expected changes = ([0-9.]+) of", output).group(1))
    assert names["res"].expected_changes == pytest.approx(cli, abs=0.005)
