"""No output is overwritten unasked: every command that writes refuses an existing output before any
work unless --force, and the library's writers unless overwrite=True."""

from __future__ import annotations

import hashlib
import io
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest

import pramopt
from pramopt.cli import main
from pramopt.errors import InvalidParameterError
from pramopt.example import example_data

QI = "v1,v2,v3"


def run_main(*argv):
    """main(argv) with stdout and stderr captured: (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def digest(path: Path) -> dict:
    """Every file under ``path`` (or ``path`` itself) by its bytes' SHA-256."""
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The example data as CSV, a design of it and a release: the inputs of every command."""
    d = tmp_path_factory.mktemp("overwrite")
    example_data().to_csv(d / "data.csv", index=False)
    code, _, err = run_main(
        "design", "--data", d / "data.csv", "--qi", QI, "--alpha", 0.2, "--out", d / "design", "-q"
    )
    assert code == 0, err
    code, _, err = run_main(
        "release", "--design", d / "design", "--data", d / "data.csv", "--out", d / "rel.csv",
        "--seed", 1, "-q",
    )  # fmt: skip
    assert code == 0, err
    return d


def _commands(d: Path, out: Path) -> dict:
    """Each writing command's arguments, writing to ``out``."""
    data, design = d / "data.csv", d / "design"
    return {
        "design": ["design", "--data", data, "--qi", QI, "--alpha", 0.3, "--out", out],
        "release": ["release", "--design", design, "--data", data, "--out", out, "--seed", 2],
        "estimate": ["estimate", "--design", design, "--data", d / "rel.csv", "--out", out],
        "assess": ["assess", "--matrix", design, "--data", data, "--qi", QI, "--out", out],
        "baseline": ["baseline", "retention", "--data", data, "--qi", QI, "--out", out],
        "frontier": [
            "frontier", "--data", data, "--qi", QI, "--alphas", 0.2, "--baselines", "none",
            "--out", out,
        ],
        "advise": [
            "advise", "--data", data, "--qi", QI, "--designs", 0, "--steps", 1, "--out", out,
        ],
    }  # fmt: skip


OUTPUTS = {
    "design": "d",
    "release": "r.csv",
    "estimate": "e.csv",
    "assess": "a",
    "baseline": "b",
    "frontier": "f",
    "advise": "adv",
}


@pytest.mark.parametrize("command", list(OUTPUTS))
def test_an_existing_output_is_refused_unless_forced(made, tmp_path, command):
    out = tmp_path / OUTPUTS[command]
    argv = _commands(made, out)[command]
    code, _, err = run_main(*argv, "-q")
    assert code == 0, err
    before, inode = digest(out), out.stat().st_ino
    code, _, err = run_main(*argv, "-q")
    assert code == 2, err
    assert "Refusing to overwrite --out" in err and "--force" in err, err
    assert digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary left
    code, _, err = run_main(*argv, "-q", "--force")
    assert code == 0, err
    assert out.stat().st_ino != inode  # replaced whole (built aside, then renamed)
    if command == "design":
        assert pramopt.load_design(out).alpha == 0.3


def test_the_refusal_comes_before_any_work(made, tmp_path, monkeypatch):
    import pramopt.optimize.designer as designer

    def never(*a, **k):  # pragma: no cover - reached only if the check came too late
        raise AssertionError("designed before the output was checked")

    shutil.copytree(made / "design", tmp_path / "d")
    monkeypatch.setattr(designer, "design", never)
    code, _, err = run_main(*_commands(made, tmp_path / "d")["design"], "-q")
    assert code == 2 and "--force" in err, err


def test_force_never_replaces_the_data_read(made, tmp_path):
    shutil.copy(made / "rel.csv", tmp_path / "rel.csv")
    before = digest(tmp_path / "rel.csv")
    for command in ("release", "estimate"):
        argv = _commands(made, tmp_path / "rel.csv")[command]
        argv[argv.index("--data") + 1] = tmp_path / "rel.csv"
        code, _, err = run_main(*argv, "-q", "--force")
        assert code == 2 and "--out must not be the source file" in err, err
    assert digest(tmp_path / "rel.csv") == before


def test_a_sensitivity_verdict_is_not_overwritten(tmp_path):
    src = tmp_path / "c.csv"
    pd.DataFrame({"cell": ["A", "A", "B"], "contribution": [5, 3, 4]}).to_csv(src, index=False)
    out = tmp_path / "v.csv"
    out.write_text("published\n")
    argv = ["sensitivity", src, "--n", 1, "--k", 0.6, "--p", 0.1, "--t", 0.5, "--out", out]
    code, _, err = run_main(*argv)
    assert code == 2 and "--force" in err and out.read_text() == "published\n", err
    assert run_main(*argv, "--force")[0] == 0
    assert out.read_text().startswith("cell,")


@pytest.mark.parametrize(
    "argv, name",
    [(["design"], "design-example"), (["advise", "--designs", 0, "--steps", 1], "advice-data")],
)
def test_a_default_output_name_is_refused_too(made, tmp_path, monkeypatch, argv, name):
    marker = "design.json" if argv[0] == "design" else "advice.csv"
    (tmp_path / name).mkdir()
    (tmp_path / name / marker).write_text("published")
    monkeypatch.chdir(tmp_path)
    if argv[0] == "advise":
        argv = [*argv, "--data", made / "data.csv", "--qi", QI]
    code, _, err = run_main(*argv, "-q")
    assert code == 2, err
    assert repr(name) in err and "--force" in err and "--out" in err, err
    assert (tmp_path / name / marker).read_text() == "published"


def test_force_never_replaces_a_folder_that_is_not_pramopts(made, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("mine")
    for command in ("design", "assess"):
        code, _, err = run_main(*_commands(made, tmp_path / "d")[command], "-q", "--force")
        assert code == 2 and "Refusing to replace" in err, err
    # a design folder is not an assessment folder: assess --force leaves it too
    shutil.copytree(made / "design", tmp_path / "g")
    before = digest(tmp_path / "g")
    code, _, err = run_main(*_commands(made, tmp_path / "g")["assess"], "-q", "--force")
    assert code == 2 and "not an assessment folder" in err, err
    assert digest(tmp_path / "g") == before and (tmp_path / "d" / "keep.txt").read_text() == "mine"


def test_an_empty_folder_is_written_into(made, tmp_path):
    (tmp_path / "d").mkdir()
    code, _, err = run_main(*_commands(made, tmp_path / "d")["baseline"], "-q")
    assert code == 0, err
    assert (tmp_path / "d" / "design.json").is_file()


# -- the library ----------------------------------------------------------------------------------


def test_save_design_creates_its_folder_and_refuses_a_full_one(made, tmp_path):
    res = pramopt.load_design(made / "design")
    path = pramopt.save_design(res, tmp_path / "new")
    assert path == tmp_path / "new" / "design.json" and pramopt.load_design(tmp_path / "new")
    before = digest(tmp_path / "new")
    with pytest.raises(InvalidParameterError, match="overwrite=True"):
        pramopt.save_design(res, tmp_path / "new", extra={"name": "other"})
    assert digest(tmp_path / "new") == before
    pramopt.save_design(res, tmp_path / "new", extra={"name": "other"}, overwrite=True)
    assert digest(tmp_path / "new") != before
    with pytest.raises(InvalidParameterError, match="does not exist"):
        pramopt.save_design(res, tmp_path / "no" / "such")
    assert not (tmp_path / "no").exists()
    (tmp_path / "empty").mkdir()
    pramopt.save_design(res, tmp_path / "empty")  # an empty folder holds nothing to lose
    assert (tmp_path / "empty" / "matrix.csv").is_file()


def test_release_file_and_write_table_refuse_an_existing_file(made, tmp_path):
    res = pramopt.load_design(made / "design")
    dst = tmp_path / "r.csv"
    dst.write_text("published\n")
    with pytest.raises(InvalidParameterError, match="overwrite=True to release_file"):
        pramopt.release_file(made / "data.csv", dst, res, seed=1)
    assert dst.read_text() == "published\n"
    pramopt.release_file(made / "data.csv", dst, res, seed=1, overwrite=True)
    assert dst.read_bytes() == (made / "rel.csv").read_bytes()  # the CLI's release, seed 1
    t = tmp_path / "t.csv"
    t.write_text("published\n")
    with pytest.raises(InvalidParameterError, match="overwrite=True to write_table"):
        pramopt.write_table(pd.DataFrame({"a": [1]}), t)
    assert t.read_text() == "published\n"
    pramopt.write_table(pd.DataFrame({"a": [1]}), t, overwrite=True)
    assert t.read_text() == "a\n1\n"
