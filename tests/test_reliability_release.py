"""Released files keep what the user did not ask to change: missing-value spellings, the text of
every kept value, the byte order mark; the release counts what it rewrote."""

from __future__ import annotations

import codecs
import csv
import io
import os
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from pramopt.cli import main

COUNTRIES = ["NA", "N/A", "None", "null", "NaN", "ZA", "BW"]


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _write_countries(path, n=900, seed=0, bom=False, countries=COUNTRIES):
    rng = np.random.default_rng(seed)
    rows = [
        [i, countries[rng.integers(len(countries))], "mf"[rng.integers(2)], rng.integers(1, 6)]
        for i in range(n)
    ]
    with open(path, "w", newline="", encoding="utf-8-sig" if bom else "utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "country", "sex", "age"])
        w.writerows(rows)


def _read(path):
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return list(csv.reader(fh))


def _changed_records(src_rows, rel_rows):
    """Records with any field written differently, counted from the two files' texts."""
    assert len(src_rows) == len(rel_rows)
    return sum(a != b for a, b in zip(src_rows[1:], rel_rows[1:]))


def _released_count(stdout):
    line = next(x for x in stdout.splitlines() if x.startswith("released "))
    return int(line.split(": ")[1].split(" changed")[0])


def test_na_is_namibia_and_every_spelling_comes_back(tmp_path):
    src, design, rel = tmp_path / "c.csv", tmp_path / "d", tmp_path / "r.csv"
    _write_countries(src)
    code, _, err = _run(
        "design", "--data", src, "--qi", "country,sex,age", "--alpha", "0.02", "--out", design
    )
    assert code == 0, err
    code, out, err = _run("release", "--design", design, "--data", src, "--seed", 1, "--out", rel)
    assert code == 0, err
    a, b = _read(src), _read(rel)
    countries = [r[1] for r in b[1:]]
    # nothing became empty, and each of the seven spellings is still a value of its own
    assert "" not in countries
    assert set(countries) == set(COUNTRIES)
    # the printed count is the number of records written differently, and some were
    reported = _released_count(out)
    assert reported == _changed_records(a, b) > 0


def test_na_values_are_missing_only_when_the_user_says_so(tmp_path):
    src, design = tmp_path / "c.csv", tmp_path / "d"
    _write_countries(src, countries=COUNTRIES + ["?"])
    argv = ["--qi", "country,sex,age", "--alpha", "0.02", "--na-values", "N/A,?"]
    code, _, err = _run("design", "--data", src, *argv, "--out", design)
    assert code == 0, err
    from pramopt.io import load_design

    cats = list(load_design(design).table.categories[0])
    assert [c for c in cats if isinstance(c, str)] == sorted(
        ["BW", "NA", "NaN", "None", "ZA", "null"]
    )
    assert sum(c != c for c in cats if not isinstance(c, str)) == 1  # one missing category
    # without the same markers the release refuses, naming the flag
    code, _, err = _run(
        "release", "--design", design, "--data", src, "--seed", 1, "--out", tmp_path / "x.csv"
    )
    assert code == 2 and "--na-values" in err
    assert not (tmp_path / "x.csv").exists()
    rel = tmp_path / "r.csv"
    code, out, err = _run(
        "release", "--design", design, "--data", src, "--seed", 1, "--out", rel,
        "--na-values", "N/A,?",
    )  # fmt: skip
    assert code == 0, err
    a, b = _read(src), _read(rel)
    assert _released_count(out) == _changed_records(a, b)
    # a missing value that stays missing keeps its spelling
    # a missing value stays missing (the default), in the spelling it was read in
    kept = [(x[1], y[1]) for x, y in zip(a[1:], b[1:]) if x[1] in ("N/A", "?")]
    assert kept and all(y == x for x, y in kept)
    assert "" not in {y[1] for y in b[1:]}


@pytest.mark.parametrize("bom", [True, False])
def test_byte_order_mark_is_kept(tmp_path, bom):
    src, design, rel = tmp_path / "c.csv", tmp_path / "d", tmp_path / "r.csv"
    _write_countries(src, n=300, bom=bom)
    assert _run("design", "--data", src, "--qi", "country,sex", "--out", design, "-q")[0] == 0
    code, _, err = _run("release", "--design", design, "--data", src, "--seed", 3, "--out", rel)
    assert code == 0, err
    assert rel.read_bytes().startswith(codecs.BOM_UTF8) == bom
    assert _read(rel)[0] == ["id", "country", "sex", "age"]


def test_kept_values_keep_their_text_in_a_typed_design(tmp_path):
    """A design on typed keys (pandas' defaults: NA and an empty field are both missing) writes
    a kept value as it was read, so a kept NA is not emptied."""
    import pandas as pd

    import pramopt
    from pramopt import count_file, release_file

    src, rel = tmp_path / "t.csv", tmp_path / "r.csv"
    rng = np.random.default_rng(5)
    age = rng.choice([*"abcdefghijkl", "NA", ""], 300)
    pd.DataFrame({"age": age, "sex": rng.choice(["m", "f"], 300)}).to_csv(src, index=False)
    table = count_file(src, ["age", "sex"])
    assert sum(pd.isna(c) for c in table.categories[0]) == 1
    res = pramopt.design(table, ["age", "sex"], alpha=0.05)
    assert res.success
    out = release_file(src, rel, res, seed=2)
    a, b = _read(src), _read(rel)
    assert out.changed == _changed_records(a, b) > 0
    # missing stays missing: an NA is written back as NA, an empty field stays empty
    pairs = list(zip(a[1:], b[1:]))
    assert any(x[0] == "NA" for x, _ in pairs) and any(x[0] == "" for x, _ in pairs)
    assert all(y[0] == "NA" for x, y in pairs if x[0] == "NA")
    assert all(y[0] == "" for x, y in pairs if x[0] == "")


# -- a forged design and the office's policy ------------------------------------------------------


def _risk(P, t, combos) -> float:
    """The largest left-hand side of C1 over ``combos``, from its definition (dense)."""
    P = np.asarray(P.toarray() if hasattr(P, "toarray") else P, dtype=float)
    U = t.counts.astype(float)
    worst = 0.0
    for pi in combos:
        keys = [tuple(r) for r in t.codes[:, list(pi)]]
        for k0 in set(keys):
            ing = np.array([k == k0 for k in keys])
            to_g = P[:, ing].sum(axis=1)
            worst = max(worst, float(to_g.max() / (U @ to_g)))
    return worst


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A verified design of the example at alpha 0.1, saved, and its data file."""
    import pramopt
    from pramopt.example import EXAMPLE_QI, example_data

    d = tmp_path_factory.mktemp("forge")
    df = example_data()
    df.to_csv(d / "data.csv", index=False)
    code, _, err = _run(
        "design", "--data", d / "data.csv", "--qi", ",".join(EXAMPLE_QI), "--out", d / "good", "-q"
    )
    assert code == 0, err
    res = pramopt.load_design(d / "good")
    assert res.success
    return d, res


def _forge(made, name, **change):
    """Save an edited design with pramopt's own writer, so that every checksum matches."""
    import dataclasses

    import scipy.sparse as sp

    from pramopt.io.design_file import save_design

    d, res = made
    out = d / name
    out.mkdir()
    if change.pop("identity", False):
        change["matrix"] = sp.identity(res.matrix.shape[0], format="csr")
    save_design(dataclasses.replace(res, **change), out)
    return out


def test_a_design_file_with_alpha_outside_0_1_is_refused(made):
    from pramopt.errors import DesignFileError

    d, _ = made
    for alpha in (2.0, 0.0, -0.1, 1.0):
        f = _forge(made, f"alpha{alpha}", identity=True, alpha=alpha)
        with pytest.raises(DesignFileError, match="alpha"):
            from pramopt import load_design

            load_design(f)
        rel = d / f"r{alpha}.csv"
        code, _, err = _run("release", "--design", f, "--data", d / "data.csv", "--out", rel)
        assert code == 2 and "alpha" in err and not rel.exists()


def test_a_design_file_with_no_combination_is_refused(made):
    from pramopt import load_design
    from pramopt.errors import DesignFileError

    f = _forge(made, "nocombo", combinations=())
    with pytest.raises(DesignFileError, match="combinations"):
        load_design(f)


def test_release_prints_what_it_checked_and_enforces_the_policy(made):
    d, res = made
    data = d / "data.csv"
    # the identity, re-signed as a design for alpha 0.99 over one single-variable combination
    weak = _forge(made, "weak", identity=True, alpha=0.99, combinations=((res.qi[0],),))
    t = res.table
    import itertools

    cbs = list(itertools.combinations(range(len(res.qi)), 3))
    pairs = list(itertools.combinations(range(len(res.qi)), 2))
    identity = np.eye(t.n_cells)
    assert _risk(identity, t, cbs) > 0.1  # the identity is unsafe under the CBS rule
    code, out, err = _run("release", "--design", weak, "--data", data, "--out", d / "w.csv")
    assert code == 0, err  # no policy stated: released, but saying what it checked
    assert "alpha 0.99" in out and "1 combination" in out
    for flags, combos in (
        (["--alpha", "0.1"], cbs),
        (["--alpha", "0.1", "--combination-size", "2"], pairs),
        (["--alpha", "0.02", "--combination-size", "2"], pairs),
    ):
        rel = d / "w2.csv"
        code, _, err = _run("release", "--design", weak, "--data", data, "--out", rel, *flags)
        # refused exactly when the identity fails C1 at the policy, from the definition
        meets = _risk(identity, t, combos) <= float(flags[1])
        assert (code == 0) == meets and rel.exists() == meets, (flags, err)
        if not meets:
            assert "weaker" in err
        rel.unlink(missing_ok=True)
    assert not _risk(identity, t, pairs) <= 0.02  # at least one refusal above
    policy = d / "policy.json"
    policy.write_text('{"alpha": 0.1, "combination_size": 3}')
    rel = d / "w3.csv"
    code, _, err = _run(
        "release", "--design", weak, "--data", data, "--out", rel, "--policy", policy
    )
    assert code == 2 and "weaker" in err and not rel.exists()
    # the true design meets the office's alpha exactly when its C1, from the definition, does
    for alpha in (0.1, 0.05, 0.3):
        rel = d / f"g{alpha}.csv"
        code, out, err = _run(
            "release", "--design", d / "good", "--data", data, "--out", rel, "--alpha", alpha
        )
        meets = _risk(res.matrix, t, cbs) <= alpha
        assert (code == 0) == meets, (alpha, err)
        assert rel.exists() == meets


def test_policy_flags_are_checked_before_any_work(made):
    d, _ = made
    for flags, word in (
        (["--alpha", "1.5"], "alpha"),
        (["--combination-size", "2"], "alpha"),
        (["--alpha", "0.1", "--policy", d / "nope.json"], "not both"),
    ):
        code, _, err = _run(
            "release", "--design", d / "good", "--data", d / "data.csv", "--out", d / "x.csv",
            *flags,
        )  # fmt: skip
        assert code == 2 and word in err, err


def test_values_of_different_types_are_not_merged():
    """1, 1.0 and True compare equal in Python; as identifying values they are refused rather
    than merged into one category (the command line reads them as three texts)."""
    import pandas as pd

    import pramopt
    from pramopt.errors import InvalidParameterError

    df = pd.DataFrame({"a": [1, 1.0, True, 2] * 10, "b": list("xyxy") * 10})
    with pytest.raises(InvalidParameterError, match="'a'.*1.0 \\(float\\)"):
        pramopt.frequency_table(df, ["a", "b"])
    same = pd.DataFrame({"a": [1, np.int64(1), 2, None] * 10, "b": list("xyxy") * 10})
    t = pramopt.frequency_table(same.astype({"a": object}), ["a", "b"])
    assert t.n_cells == 4  # (1, x), (1, y), (2, x), (missing, y): one kind of number


def test_too_many_categories_is_not_miscounted(tmp_path):
    """A file read in batches stops at the first batch over the limit: the message gives that as
    a floor, not as the column's number of categories (here 5,000)."""
    import re

    import pandas as pd

    from pramopt import count_file
    from pramopt.errors import InvalidParameterError

    src = tmp_path / "many.csv"
    pd.DataFrame({"id": [f"p{i}" for i in range(5000)], "sex": ["m", "f"] * 2500}).to_csv(
        src, index=False
    )
    with pytest.raises(InvalidParameterError) as e:
        count_file(src, ["id", "sex"], max_categories=100, batch_size=1000)
    msg = str(e.value)
    assert "'id' has more than max_categories=100 categories" in msg
    assert not re.search(r"has \d+ categories", msg)


# -- interrupted runs leave nothing behind --------------------------------------------------------


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_temporaries_of_a_killed_run_are_removed_by_the_next(tmp_path):
    from pramopt.io.atomic import _host, atomic_dir, atomic_write

    out = tmp_path / "r.csv"
    dead, alive, host = _dead_pid(), os.getppid(), _host()
    stale = tmp_path / f".r.csv.{host}-{dead}-0123456789ab.tmp"
    stale.write_bytes(b"x" * 1000)
    busy = tmp_path / f".r.csv.{host}-{alive}-0123456789ab.tmp"  # a running writer's: kept
    busy.write_bytes(b"y")
    other = tmp_path / f".s.csv.{host}-{dead}-0123456789ab.tmp"  # another target's: kept
    other.write_bytes(b"z")
    elsewhere = tmp_path / f".r.csv.abcdef-{dead}-0123456789ab.tmp"  # another machine's: kept
    elsewhere.write_bytes(b"w")
    huge = tmp_path / f".r.csv.{host}-99999999999999999999-0123456789ab.tmp"  # no such pid
    huge.write_bytes(b"v")
    with atomic_write(out) as fh:
        fh.write(b"a\n")
    assert out.read_bytes() == b"a\n"
    assert not stale.exists() and busy.exists() and other.exists()
    assert elsewhere.exists() and huge.exists()
    # a design folder moved aside by a killed run comes back when nothing took its place
    moved = tmp_path / f".d.{host}-{dead}-0123456789ab.old"
    moved.mkdir()
    (moved / "design.json").write_text("{}")
    left = tmp_path / f".d.{host}-{dead}-0123456789ab.tmp"
    left.mkdir()
    with atomic_dir(tmp_path / "d") as tmp:
        (tmp / "design.json").write_text('{"new": 1}')
    assert (tmp_path / "d" / "design.json").read_text() == '{"new": 1}'
    assert not left.exists() and not moved.exists()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["r.csv", busy.name, other.name, elsewhere.name, huge.name, "d"])


def test_sigterm_removes_the_temporary_file(tmp_path):
    import signal
    import subprocess
    import sys

    script = (
        "import time, sys\n"
        "from pramopt.cli import _on_terminate\n"
        "from pramopt.io.atomic import atomic_write\n"
        "_on_terminate()\n"
        f"with atomic_write({str(tmp_path / 'out.csv')!r}) as fh:\n"
        "    fh.write(b'x' * 100000)\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_exits_143_on_sigterm(tmp_path):
    """A long design, terminated: exit code 143, a message, and nothing written."""
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd

    rng = np.random.default_rng(1)
    src = tmp_path / "slow.csv"
    pd.DataFrame({f"k{i}": rng.integers(0, 9, 3000) for i in range(4)}).to_csv(src, index=False)
    argv = ["design", "--data", src, "--qi", "k0,k1,k2,k3", "--out", tmp_path / "d"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pramopt", *map(str, argv)], stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the design has started (its first stage line)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    err = first + err
    assert proc.returncode == 143, err
    assert "terminated" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.csv"]


def test_estimate_takes_quiet(made):
    d, _ = made
    rel = d / "for_estimate.csv"
    assert _run("release", "--design", d / "good", "--data", d / "data.csv", "--out", rel,
                "--seed", 2, "-q")[0] == 0  # fmt: skip
    code, out, err = _run("estimate", "--design", d / "good", "--data", rel, "--out",
                          d / "e1.csv", "-q")  # fmt: skip
    assert code == 0 and out == "", err
    code, out, err = _run("estimate", "--design", d / "good", "--data", rel, "--out", d / "e2.csv")
    assert (
        code == 0
        and out.startswith("wrote ")
        and (d / "e2.csv").read_bytes() == (d / "e1.csv").read_bytes()
    )


def test_many_cells_are_announced_before_any_work(tmp_path, monkeypatch):
    """A table with more cells than the limit warns before the model is built, on the command
    line too (here the limit is lowered to 50 and the data have 300 cells)."""
    import pandas as pd

    import pramopt
    import pramopt.optimize.designer as designer

    monkeypatch.setattr(designer, "LARGE_PROBLEM_CELLS", 50)

    def stop(*a, **k):
        raise RuntimeError("started")

    monkeypatch.setattr(designer.DesignProblem, "build", stop)
    df = pd.DataFrame({"id": [f"p{i}" for i in range(300)], "sex": ["m", "f"] * 150})
    with pytest.warns(pramopt.LargeProblemWarning, match="300 present cells"):
        with pytest.raises(RuntimeError, match="started"):
            pramopt.design(df, ["id", "sex"])
    src = tmp_path / "ids.csv"
    df.to_csv(src, index=False)
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(RuntimeError, match="started"):
        main(["design", "--data", str(src), "--qi", "id,sex", "--out", str(tmp_path / "d"), "-q"])
    assert err.getvalue().startswith("pramopt design: warning: 300 present cells")
