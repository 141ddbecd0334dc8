"""One name per baseline family, at every entry point.

Over the registry (:data:`pramopt.baselines.BASELINES` and the old spellings of
:data:`pramopt.baselines.ALIASES`): every entry point -- :func:`pramopt.baseline`,
:func:`pramopt.frontier` (a name or a list), ``pramopt baseline``, ``pramopt frontier
--baselines`` and a spec's ``[frontier] baselines`` -- accepts every registered name and every
old spelling, runs the family the name stands for, and shows only the registered name (result,
``design.json``, report, frontier table, printed output).  An old spelling is never silent: the
Python API issues an :class:`OldNameWarning`, the commands a note on stderr, both naming the
registered name; a registered name gives neither.  An unknown name is refused by each, naming
the registered names.
"""

from __future__ import annotations

import io
import json
import re
import warnings
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.baselines.registry import ALIASES, BASELINES, OldNameWarning
from pramopt.cli import build_parser, main

ALPHA = 0.3
QI = ["a", "b", "c"]
#: Every name an entry point accepts -> the registered name it runs.
EVERY = {**{name: name for name in BASELINES}, **ALIASES}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(4)
    n = 120
    return pd.DataFrame(
        {
            "a": rng.choice(["x", "y", "z"], n, p=[0.6, 0.3, 0.1]),
            "b": rng.choice([1, 2], n, p=[0.7, 0.3]),
            "c": rng.choice([1, 2, 3], n, p=[0.5, 0.4, 0.1]),
        }
    )


@pytest.fixture(scope="module")
def csv(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("names") / "d.csv"
    data.to_csv(path, index=False)
    return path


def run_main(*argv):
    """A command's exit code, stdout and stderr; it says an old name in its own words, so no
    Python warning about one may escape it."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in argv])
    assert not [w for w in seen if issubclass(w.category, OldNameWarning)]
    return code, out.getvalue(), err.getvalue()


def run(call):
    """``call()`` and the messages of the OldNameWarnings it issued."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in seen if issubclass(w.category, OldNameWarning)]


def _said(given: str, name: str, notes: list[str]) -> None:
    """An old spelling is said once, naming what it runs; a registered name says nothing."""
    if given == name:
        assert notes == []
    else:
        assert len(notes) == 1 and repr(given) in notes[0] and repr(name) in notes[0], notes


def _word(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize("given", list(EVERY))
def test_the_python_api_runs_and_names_the_family(given, data):
    name = EVERY[given]
    r, notes = run(lambda: pramopt.baseline(data, QI, given, ALPHA))
    assert r.method == name and r.params["family"] == name
    _said(given, name, notes)
    assert _word(name, r.summary()) and (given == name or not _word(given, r.summary()))
    for baselines in (given, [given]):
        f, notes = run(lambda b=baselines: pramopt.frontier(data, QI, [ALPHA], baselines=b))
        assert list(f.points["design"]) == ["optimal", name]
        assert list(f.baselines[ALPHA]) == [name] and f.result(ALPHA, name).method == name
        _said(given, name, notes)
        shown = f.summary() + f.to_html(png=b"") + f.ratios().to_csv()
        assert _word(name, shown) and (given == name or not _word(given, shown))


@pytest.mark.parametrize("given", list(EVERY))
def test_pramopt_baseline_runs_and_names_the_family(given, csv, tmp_path):
    name = EVERY[given]
    code, out, err = run_main(
        "baseline", given, "--data", csv, "--qi", ",".join(QI), "--alpha", ALPHA, "--out", tmp_path
    )
    assert code in (0, 1), err
    rec = json.loads((tmp_path / "design.json").read_text())
    assert rec["method"] == name and rec["params"]["family"] == name
    report = (tmp_path / "report.md").read_text()
    for text in (out, report):
        assert _word(name, text) and (given == name or not _word(given, text))
    if given == name:
        assert "old name" not in err
    else:
        assert f"{given!r} is an old name" in err and f"write {name!r}" in err


@pytest.mark.parametrize("given", list(EVERY))
@pytest.mark.parametrize("source", ["flag", "spec"])
def test_pramopt_frontier_runs_and_names_the_family(given, source, csv, tmp_path):
    name = EVERY[given]
    if source == "flag":
        args = ["--data", csv, "--qi", ",".join(QI), "--baselines", given]
    else:
        spec = tmp_path / "s.toml"
        spec.write_text(
            f'name = "s"\n[data]\npath = "{csv.as_posix()}"\nqi = {json.dumps(QI)}\n'
            f"[design]\nalpha = {ALPHA}\n"
            f'[frontier]\nalphas = [{ALPHA}]\nbaselines = ["{given}"]\n'
        )
        args = [spec]
    code, out, err = run_main("frontier", *args, "--alphas", ALPHA, "--out", tmp_path / "f")
    assert code == 0, err
    points = pd.read_csv(tmp_path / "f" / "frontier.csv")
    assert list(points["design"]) == ["optimal", name]
    page = (tmp_path / "f" / "frontier.html").read_text()
    for text in (out, page):
        assert _word(name, text) and (given == name or not _word(given, text))
    if given == name:
        assert "old name" not in err
    else:
        assert err.count(f"{given!r} is an old name") == 1 and f"write {name!r}" in err


def test_help_texts_list_the_registered_names_and_the_old_ones():
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    base, front = commands["baseline"].format_help(), commands["frontier"].format_help()
    flat = " ".join(front.split())
    for name in BASELINES:
        assert name in base and name in flat
    for old, name in ALIASES.items():
        for text in (" ".join(base.split()), flat):
            assert f"{old} for {name}" in text


@pytest.mark.parametrize("entry", ["baseline", "frontier", "frontier-list", "cli", "cli-frontier"])
def test_an_unknown_name_is_refused_naming_the_registered_ones(entry, data, csv, tmp_path):
    if entry.startswith("cli"):
        cmd = (
            ["baseline", "nope", "--data", csv, "--qi", ",".join(QI), "--out", tmp_path]
            if entry == "cli"
            else ["frontier", "--data", csv, "--qi", ",".join(QI), "--baselines", "nope"]
        )
        code, _, err = run_main(*cmd, *([] if entry == "cli" else ["--out", tmp_path / "f"]))
        assert code == 2 and "nope" in err
        assert all(name in err for name in BASELINES)
        return
    call = {
        "baseline": lambda: pramopt.baseline(data, QI, "nope", ALPHA),
        "frontier": lambda: pramopt.frontier(data, QI, [ALPHA], baselines="nope"),
        "frontier-list": lambda: pramopt.frontier(data, QI, [ALPHA], baselines=["nope"]),
    }[entry]
    with pytest.raises(pramopt.InvalidParameterError) as e:
        call()
    assert "nope" in str(e.value) and all(repr(name) in str(e.value) for name in BASELINES)
