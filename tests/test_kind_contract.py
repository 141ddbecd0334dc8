"""The contract of every registered kind of design (:mod:`pramopt.kinds`), and the one-way imports.

For each kind the core must reach every capability through the registry: :func:`pramopt.design`
with the kind's trigger returns the kind's result type, and the releases, ``save_design``,
``load_design`` and the commands ``design`` and ``release`` call the kind's own functions (each
wrapped here to record its calls); saving and loading gives back an equal design.  The static
check parses every module of the core: none imports a kind's package, so the core works the same
whichever kinds are registered.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import math
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import pramopt
from pramopt import kinds
from pramopt.cli import main
from pramopt.params import DesignParams

ROOT = Path(pramopt.__file__).parent
#: The capabilities the core calls (the rest of a DesignKind is data or the example).
CALLED = (
    "design",
    "check_releasable",
    "release",
    "release_file",
    "load",
    "save",
    "report",
    "release_note",
)
REGISTERED = list(kinds.KINDS.values())


def _spied(kind, calls: list):
    """``kind`` with every capability the core calls wrapped to record its name in ``calls``."""

    def wrap(name, f):
        def recorded(*args, **kwargs):
            calls.append(name)
            return f(*args, **kwargs)

        return recorded

    return dataclasses.replace(kind, **{name: wrap(name, getattr(kind, name)) for name in CALLED})


@pytest.fixture(scope="module", params=REGISTERED, ids=[k.name for k in REGISTERED])
def case(request):
    kind = request.param
    data, qi, options = kind.example()
    return kind, data, list(qi), dict(options)


@pytest.fixture()
def spy(case, monkeypatch):
    """The case's kind, registered in place of itself with its capabilities recorded."""
    calls: list = []
    monkeypatch.setitem(kinds.KINDS, case[0].name, _spied(case[0], calls))
    return calls


@pytest.fixture(scope="module")
def designed(case):
    _, data, qi, options = case
    return pramopt.design(data, qi, **options)


def _same(a, b, where: str = "result") -> None:
    """``a`` equals ``b`` field by field: arrays and matrices exactly, NaN equal to NaN, a list
    equal to a tuple of the same items and a key to its text (JSON has neither tuples nor
    other keys)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif sp.issparse(a) or sp.issparse(b) or isinstance(a, np.ndarray):
        A = a.toarray() if sp.issparse(a) else np.asarray(a)
        B = b.toarray() if sp.issparse(b) else np.asarray(b)
        np.testing.assert_array_equal(A, B, err_msg=where)
    elif isinstance(a, (pd.Index, pd.Series, pd.DataFrame)):
        assert a.equals(b), where
    elif isinstance(a, Mapping):  # keys as JSON writes them
        a, b = {str(k): v for k, v in a.items()}, {str(k): v for k, v in b.items()}
        assert set(a) == set(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _match(names, patterns) -> bool:
    """Every file name matches one of the kind's ``files`` (a pattern such as ``matrix_*.csv``
    stands for one file per variable) and every pattern matches at least one file."""
    names, patterns = list(names), list(patterns)
    return all(any(fnmatch.fnmatchcase(n, p) for p in patterns) for n in names) and all(
        any(fnmatch.fnmatchcase(n, p) for n in names) for p in patterns
    )


def test_a_kind_is_registered_once_imported():
    """Every module of pramopt that registers a kind is imported by ``import pramopt``, so a kind
    never sits unregistered (and these tests never run over nothing)."""
    registering = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(_callee(n) == "register_kind" for n in ast.walk(tree)):
            registering.append(_module_name(path))
    assert registering and len(kinds.KINDS) >= len(registering)
    for name in registering:
        assert name in sys.modules, f"{name} registers a kind but import pramopt does not import it"


def test_half_wired_kind_is_refused_at_registration(case):
    kind = case[0]
    for name in CALLED:
        with pytest.raises(ValueError, match=name):
            kinds.register_kind(dataclasses.replace(kind, name="half", **{name: None}))
    with pytest.raises(ValueError, match="format"):  # another kind's result type and formats
        kinds.register_kind(dataclasses.replace(kind, name="twin"))
    assert "half" not in kinds.KINDS and "twin" not in kinds.KINDS


def test_trigger_and_design_dispatch(case, spy):
    kind, data, qi, options = case
    assert kinds.kind_for(DesignParams.from_options("design", **options)) is kinds.KINDS[kind.name]
    plain = DesignParams.from_options("design", alpha=options.get("alpha", 0.1))
    assert kinds.kind_for(plain) is None
    result = pramopt.design(data, qi, **options)
    assert spy == ["design"]
    assert isinstance(result, kind.result_type) and result.success
    assert kinds.kind_of(result) is kinds.KINDS[kind.name]


def test_release_dispatch(case, designed, spy, tmp_path):
    _, data, qi, _ = case
    out = pramopt.release(data, designed, seed=3)
    assert spy == ["release"]
    assert out.index.equals(data.index) and list(out.columns) == list(data.columns)
    pd.testing.assert_frame_equal(out.drop(columns=qi), data.drop(columns=qi))
    pd.testing.assert_frame_equal(out, pramopt.release(data, designed, seed=3))  # seeded
    src, dst = tmp_path / "data.csv", tmp_path / "released.csv"
    data.to_csv(src, index=False)
    del spy[:]
    rel = pramopt.release_file(src, dst, designed, seed=3)
    assert spy == ["release_file"]
    assert rel.n == len(data)
    # the same records as the release of the frame read from the file
    expected = pramopt.release(pd.read_csv(src), designed, seed=3)
    pd.testing.assert_frame_equal(pd.read_csv(dst), expected)


def test_estimate_capability(case, designed):
    """A kind that has an estimate (optional) estimates from its own release: the estimated
    counts sum to the records (every row of an inverse of a row-stochastic matrix sums to 1)."""
    kind, data, _, _ = case
    if kind.estimate is None:
        return
    est = kind.estimate(pramopt.release(data, designed, seed=2), designed)
    assert {"observed", "estimate", "se"} <= set(est.columns)
    assert est["observed"].sum() == len(data)
    assert est["estimate"].sum() == pytest.approx(len(data))


def test_save_load_round_trip(case, designed, spy, tmp_path):
    kind = case[0]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = pramopt.save_design(designed, tmp_path / "a")
    assert spy == ["save"]
    assert _match((p.name for p in (tmp_path / "a").iterdir()), kind.files)
    loaded = pramopt.load_design(tmp_path / "a")
    assert spy == ["save", "load"]
    assert isinstance(loaded, kind.result_type)
    _same(designed, loaded)
    again = pramopt.save_design(loaded, tmp_path / "b")
    assert again.read_bytes() == path.read_bytes()
    assert kind.formats[0] in path.read_text(encoding="utf-8")


def test_commands_dispatch(case, spy, tmp_path):
    """``pramopt design`` designs, saves and reports through the kind; ``pramopt release`` loads,
    checks, releases (a file, or in memory into another format) and summarises through it."""
    kind, data, qi, options = case
    src, out = tmp_path / "data.csv", tmp_path / "design"
    data.to_csv(src, index=False)
    flags = [x for k, v in options.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    assert (
        main(["design", "--data", str(src), "--qi", ",".join(qi), *flags, "--out", str(out), "-q"])
        == 0
    )
    assert spy == ["design", "save", "report"]  # the design is saved before its report is made
    assert _match((p.name for p in out.iterdir()), [*kind.files, "report.html", "report.md"])
    del spy[:]
    released = tmp_path / "released.csv"
    assert (
        main(
            [
                "release",
                "--design",
                str(out),
                "--data",
                str(src),
                "--out",
                str(released),
                "--seed",
                "1",
            ]
        )
        == 0
    )
    assert spy == ["load", "check_releasable", "release_file", "release_note"]
    del spy[:]
    assert (
        main(
            [
                "release",
                "--design",
                str(out),
                "--data",
                str(src),
                "--out",
                str(tmp_path / "r.parquet"),
                "--seed",
                "1",
                "-q",
            ]
        )
        == 0
    )
    assert spy == ["load", "check_releasable", "release", "release_note"]


def _callee(node) -> str | None:
    """The name a call calls (``f(...)`` or ``x.f(...)``); None for another node."""
    if not isinstance(node, ast.Call):
        return None
    return getattr(node.func, "id", getattr(node.func, "attr", None))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (relative imports resolved; ``from a import b`` gives both
    ``a`` and ``a.b``), and every string given to ``importlib.import_module``/``__import__``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [(node.lineno, mod)] + [(node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif (
            _callee(node) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.append((node.lineno, str(node.args[0].value)))
    return out


def _kind_packages() -> set[str]:
    """The package of each registered kind (``pramopt.<name>``, where its design function lives)."""
    return {
        ".".join(k.design.__module__.split(".")[:2])
        for k in kinds.KINDS.values()
        if k.design.__module__.startswith("pramopt.")
    } | {"pramopt.households"}


def test_resolved_imports():
    """The import parser resolves relative imports as Python does (checked on known lines)."""
    got = {m for _, m in _imported(ROOT / "publish" / "frame.py")}
    assert {"pramopt.kinds", "pramopt.kinds.kind_of", "pramopt.publish.sampling"} <= got
    got = {m for _, m in _imported(ROOT / "__init__.py")}
    assert "pramopt.households" in got


def test_no_core_module_imports_a_kind():
    """Outside a kind's own package only ``pramopt/__init__.py`` (which imports it once, so that it
    registers) may import it."""
    bad = []
    for package in _kind_packages():
        for path in ROOT.rglob("*.py"):
            name = _module_name(path)
            if name == "pramopt" or name == package or name.startswith(package + "."):
                continue
            bad += [
                f"{path.relative_to(ROOT.parent)}:{line} imports {mod}"
                for line, mod in _imported(path)
                if mod == package or mod.startswith(package + ".")
            ]
    assert not bad, "\n".join(bad)
