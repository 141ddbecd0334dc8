"""A reliability campaign: random designs checked from the definitions, forged design files,
runs killed mid-write, hostile values.

``python -m benchmarks reliability`` writes ``reliability.md`` (one row per part, with what was
tried and what held) and ``reliability_cases.csv`` (the random cases).  Every check here uses
the files pramopt writes, read back with the ``csv`` module, or the C1 written from its
definition in ``tests/random_cases.py``; none reuses pramopt's own checks.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ._common import REPO, write_table

sys.path.insert(0, str(REPO / "tests"))


def _cli(*argv, timeout=600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "pramopt", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _popen(*argv) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "pramopt", *map(str, argv)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _random_cases(seeds, log) -> dict:
    from random_cases import campaign

    fig = campaign(seeds)
    for seed, p in fig["problems"]:
        log(f"  case {seed}: {p[:200]}")
    return fig


def _forged(d: Path, log) -> dict:
    """Designs re-signed with pramopt's own writer: each must be refused at load, or released
    only with an honest statement of its alpha and combinations and refused under a policy."""
    import pramopt
    from pramopt.example import EXAMPLE_QI, example_data
    from pramopt.io.design_file import save_design

    df = example_data()
    df.to_csv(d / "data.csv", index=False)
    r = _cli("design", "--data", d / "data.csv", "--qi", ",".join(EXAMPLE_QI), "--out", d / "g")
    res = pramopt.load_design(d / "g")
    eye = sp.identity(res.matrix.shape[0], format="csr")
    variants = [("alpha", a, {"matrix": eye, "alpha": a}) for a in (2.0, 1.0, 0.0, -0.1, 1e9)]
    variants += [
        ("no combination", None, {"combinations": ()}),
        ("identity, alpha 0.99", None, {"matrix": eye, "alpha": 0.99}),
        ("identity, one variable", None, {"matrix": eye, "combinations": ((res.qi[0],),)}),
        (
            "identity, alpha 0.99, one variable",
            None,
            {"matrix": eye, "alpha": 0.99, "combinations": ((res.qi[0],),)},
        ),
    ]
    tried = held = 0
    for i, (name, _, change) in enumerate(variants):
        f = d / f"forged{i}"
        f.mkdir()
        save_design(dataclasses.replace(res, **change), f)
        tried += 1
        out = d / f"rel{i}.csv"
        plain = _cli("release", "--design", f, "--data", d / "data.csv", "--out", out)
        policy = _cli(
            "release", "--design", f, "--data", d / "data.csv", "--out", d / f"pol{i}.csv",
            "--alpha", 0.1, "--combination-size", 3,
        )  # fmt: skip
        refused_at_load = plain.returncode == 2 and not out.exists()
        honest = plain.returncode == 0 and "checked C1 at alpha" in plain.stdout
        ok = (refused_at_load or honest) and policy.returncode == 2
        held += ok
        if not ok:
            log(f"  forged {name}: plain {plain.returncode}, policy {policy.returncode}")
    return {"tried": tried, "held": held, "design": r.returncode}


def _killed(d: Path, runs: int, log) -> dict:
    """Releases killed at random moments (SIGKILL and SIGTERM): the output is either absent or
    byte-identical to a full release with the same seed; the next run leaves no temporary."""
    from benchmarks.census_data import census_data

    df = census_data(300_000, 3, seed=3)
    qi = list(df.columns[:3])
    df.to_csv(d / "big.csv", index=False)
    r = _cli("design", "--data", d / "big.csv", "--qi", ",".join(qi), "--out", d / "bd", "-q")
    if r.returncode != 0:
        return {"tried": 0, "held": 0, "note": r.stderr[-200:]}
    t0 = time.perf_counter()
    _cli("release", "--design", d / "bd", "--data", d / "big.csv", "--out", d / "ref.csv",
         "--seed", 5, "-q")  # fmt: skip
    full = time.perf_counter() - t0
    ref = (d / "ref.csv").read_bytes()
    rng = random.Random(0)
    tried = held = left = 0
    for i in range(runs):
        sig = signal.SIGKILL if i % 2 == 0 else signal.SIGTERM
        out = d / f"k{i}.csv"
        p = _popen("release", "--design", d / "bd", "--data", d / "big.csv", "--out", out,
                   "--seed", 5, "-q")  # fmt: skip
        time.sleep(rng.uniform(0.4 * full, full))
        p.send_signal(sig)
        p.wait(timeout=120)
        tried += 1
        whole = not out.exists() or out.read_bytes() == ref
        temps = [x for x in d.iterdir() if x.name.startswith(f".{out.name}.")]
        # -SIGTERM: stopped while starting, before any file was opened
        ok_code = p.returncode in (0, -signal.SIGKILL, -signal.SIGTERM, 143)
        if sig == signal.SIGTERM:
            ok = whole and not temps and ok_code
        else:  # a killed process cannot clean up: the next write of the same file does
            left += bool(temps)
            # the killed run may have finished its file: the next write replaces it
            _cli("release", "--design", d / "bd", "--data", d / "big.csv", "--out", out,
                 "--seed", 5, "-q", "--force")  # fmt: skip
            again = [x for x in d.iterdir() if x.name.startswith(f".{out.name}.")]
            ok = whole and not again and out.read_bytes() == ref and ok_code
        held += ok
        if not ok:
            log(f"  killed run {i} ({sig.name}): code {p.returncode}, whole {whole}, {temps}")
    return {"tried": tried, "held": held, "left by SIGKILL": left, "release s": round(full, 1)}


def _namibia(d: Path) -> dict:
    """NA, N/A, None, null and NaN as countries: none comes out empty, none is merged."""
    rng = np.random.default_rng(0)
    vals = ["NA", "N/A", "None", "null", "NaN", "ZA", "BW"]
    src = d / "na.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "country", "sex", "age"])
        for i in range(900):
            w.writerow([i, vals[rng.integers(7)], "mf"[rng.integers(2)], rng.integers(1, 6)])
    _cli("design", "--data", src, "--qi", "country,sex,age", "--alpha", 0.02, "--out", d / "nd",
         "-q")  # fmt: skip
    r = _cli("release", "--design", d / "nd", "--data", src, "--out", d / "nr.csv", "--seed", 1)
    with open(src, newline="") as a, open(d / "nr.csv", newline="") as b:
        x, y = list(csv.reader(a))[1:], list(csv.reader(b))[1:]
    line = next(s for s in r.stdout.splitlines() if s.startswith("released "))
    reported = int(line.split(": ")[1].split(" changed")[0])
    return {
        "empty": sum(row[1] == "" for row in y),
        "spellings": len({row[1] for row in y}),
        "reported": reported,
        "differ": sum(p != q for p, q in zip(x, y)),
    }


def run(out: Path, quick: bool = False, log=print) -> None:
    seeds = range(5000, 5000 + (12 if quick else 450))
    rows = []
    t0 = time.perf_counter()
    fig = _random_cases(seeds, log)
    rows.append(
        {
            "part": "random designs (2-5 keys, 20-600 records, random options)",
            "tried": fig["cases"],
            "held": fig["cases"]
            - fig["unsafe"]
            - fig["options broken"]
            - fig["false infeasible"]
            - fig["release problems"],
            "detail": (
                f"{fig['successes']} successes, {fig['unsafe']} unsafe, {fig['infeasible']} "
                f"infeasible ({fig['false infeasible']} false), {fig['options broken']} with an "
                f"option broken, {fig['weaker option failed']} failed under a weaker option, "
                f"{fig['release problems']} release problems"
            ),
            "seconds": round(time.perf_counter() - t0, 1),
        }
    )
    log(f"random: {rows[-1]['detail']}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        f = _forged(d, log)
        rows.append(
            {
                "part": "forged design files, re-signed with pramopt's writer",
                "tried": f["tried"],
                "held": f["held"],
                "detail": "refused at load, or released saying its alpha and combinations; "
                "refused under the policy alpha 0.1, combinations of 3",
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        t0 = time.perf_counter()
        k = _killed(d, 4 if quick else 24, log)
        rows.append(
            {
                "part": "releases of 300,000 records killed mid-write (SIGKILL, SIGTERM alternately)",
                "tried": k["tried"],
                "held": k["held"],
                "detail": f"output absent or whole; {k.get('left by SIGKILL', 0)} SIGKILLs left "
                "a temporary, each removed by the next write; full release "
                f"{k.get('release s', '?')} s",
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        t0 = time.perf_counter()
        na = _namibia(d)
        rows.append(
            {
                "part": "NA, N/A, None, null, NaN as values (900 records)",
                "tried": 1,
                "held": int(
                    na["empty"] == 0 and na["spellings"] == 7 and na["reported"] == na["differ"]
                ),
                "detail": f"{na['empty']} empty fields, {na['spellings']} spellings released, "
                f"{na['reported']} reported changed, {na['differ']} written otherwise",
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    for r in rows:
        log(f"{r['part']}: {r['held']}/{r['tried']} ({r['detail']})")
    write_table(
        pd.DataFrame(rows),
        out,
        "reliability",
        "Reliability campaign: what was tried and what held",
        notes=[
            "Random designs: tests/random_cases.py (C1 from its definition, every option, a "
            "witness design for each INFEASIBLE, the release written as CSV and compared text "
            "by text).",
            "Command: python -m benchmarks reliability",
        ],
    )
