"""Run the real peer packages and record the matrices they use (no pramopt import).

    python benchmarks/peers_real.py KEYS.csv OUT.json [--seed 0]

Run with the interpreter of an isolated environment that has the peers and a pandas they
support (pandas < 3: ``pymasq`` 0.6.5 raises ``KeyError`` under pandas 3 and ``pram`` 0.2.0 calls
``DataFrame.applymap``), for example::

    python3.11 -m venv /tmp/peerenv
    /tmp/peerenv/bin/pip install "pandas<3" pram==0.2.0 pymasq==0.6.5 tensorflow-cpu "joblib<1.3"

``KEYS.csv`` holds the identifying columns as text (string labels).  Each package's own ``pram``
function is called on the whole table with its defaults, the global NumPy generator seeded, and
its own matrix builder is wrapped so that the matrix it really uses for each column is recorded
(``pymasq.mitigations.pram.__calc_transition_matrix``, ``pram.Pram.__get_weighted_transition_matrix__``),
together with the random diagonal pymasq drew.  The released data's share of records whose
combination is absent from the input is recorded as a check of what the package did.  The same
call on the values read as numbers is recorded too (pymasq fails there when a
category 0 is absent).  Everything goes to ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback
import warnings


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import pandas

    out = {
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "numpy": numpy.__version__,
    }
    for name in ("pymasq", "pram", "tensorflow-cpu", "joblib"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _absent_share(before, after) -> float:
    present = set(map(tuple, before.astype(str).to_numpy().tolist()))
    rows = list(map(tuple, after.astype(str).to_numpy().tolist()))
    return sum(r not in present for r in rows) / len(rows)


def run_pymasq(keys, seed: int) -> dict:
    import numpy as np
    import pymasq.mitigations.pram  # noqa: F401  (the package, as installed)

    mod = sys.modules["pymasq.mitigations.pram"]
    name = "__calc_transition_matrix"
    original = getattr(mod, name)
    seen = []

    def recording(data, cats, probs, alpha):
        state = np.random.get_state()
        runif = np.random.uniform(low=probs, size=len(cats))  # the draw the original makes first
        np.random.set_state(state)
        out = original(data, cats, probs, alpha)
        seen.append(
            {
                "column": str(data.name),
                "labels": [str(c) for c in out.index],
                "matrix": out.to_numpy(dtype=float).tolist(),
                "diagonal_draw": runif.tolist(),
                "value_counts_order": [str(c) for c in data.value_counts().index],
            }
        )
        return out

    setattr(mod, name, recording)
    try:
        np.random.seed(seed)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            released = mod.pram(keys.copy())
        rec = {
            "ok": True,
            "matrices": seen,
            "absent_share": _absent_share(keys, released),
            "warnings": sorted({f"{x.category.__name__}: {str(x.message)[:160]}" for x in w}),
        }
    except Exception as exc:
        rec = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "trace": traceback.format_exc()[-1500:],
        }
    finally:
        setattr(mod, name, original)
    return rec


def run_pram(keys, seed: int) -> dict:
    import numpy as np
    import pram as pkg

    P = pkg.Pram
    name = "__get_weighted_transition_matrix__"
    original = getattr(P, name)
    seen = []

    def recording(values, m, alpha):
        out = original(values, m, alpha)
        # column = current value, row = released value
        seen.append(
            {
                "labels": [str(c) for c in out.index],
                "columns": [str(c) for c in out.columns],
                "matrix_columns_current": out.to_numpy(dtype=float).tolist(),
            }
        )
        return out

    setattr(P, name, staticmethod(recording))
    try:
        np.random.seed(seed)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            released = pkg.pram(keys.copy())
        for col, rec in zip(keys.columns, seen):
            rec["column"] = str(col)
        rec = {
            "ok": True,
            "matrices": seen,
            "absent_share": _absent_share(keys, released),
            "warnings": sorted({f"{x.category.__name__}: {str(x.message)[:160]}" for x in w}),
        }
    except Exception as exc:
        rec = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "trace": traceback.format_exc()[-1500:],
        }
    finally:
        setattr(P, name, staticmethod(original))
    return rec


def main(argv=None) -> int:
    import pandas as pd

    ap = argparse.ArgumentParser()
    ap.add_argument("keys")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    keys = pd.read_csv(a.keys, dtype=str, keep_default_na=False)

    def as_numbers(s):
        try:
            return pd.to_numeric(s)
        except (ValueError, TypeError):
            return s

    codes = keys.apply(as_numbers)  # the same values as numbers (integer-coded categories)
    out = {
        "versions": _versions(),
        "seed": a.seed,
        "rows": len(keys),
        "columns": list(keys.columns),
        "pymasq": run_pymasq(keys, a.seed),
        "pram": run_pram(keys, a.seed),
        "pymasq_numeric_values": {
            k: v for k, v in run_pymasq(codes, a.seed).items() if k != "matrices"
        },
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
