"""Study 5 ("many records"): streamed counting and release of files of 1M-30M records.

Synthetic files (``write_records``: 3 identifying columns with 12, 10 and 2 categories -- an
integer region, a text age band, a text sex -- and 3 other columns: an integer id, a float
income and an integer weight) are written once per size as Parquet and CSV into a temporary
folder.  Every measurement runs in a fresh process (``python -m benchmarks.records --count ...``
and so on) whose peak resident memory (VmHWM) is its own:

* ``count``    -- ``pramopt.count_file``; then the design of the counted table
  (``pramopt.design``, alpha 0.1), saved for the release;
* ``release``  -- ``pramopt.release_file`` with that design;
* ``pipeline`` -- count and release in one process (the "together" time), with the design the
  count point made;
* ``inmemory`` -- ``pramopt.frequency_table`` on the frame in memory, before (codes then
  ``np.unique(axis=0)``, the previous implementation, re-created here) and after the
  integer-key counting, and the in-memory ``pramopt.release``.

``--quick`` (the smoke test) runs one small size in the calling process, with the design's
linear stage only.

A last series varies the batch size at the largest n (Parquet) to show what memory does
depend on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ._common import max_rss_mb, run_child, write_table

SIZES = (1_000_000, 3_000_000, 10_000_000, 30_000_000)
#: The in-memory series stops here (the old counting needs minutes and GiBs beyond).
INMEMORY_MAX = 10_000_000
#: The batch-size series runs at this n (or the largest size when it is not among the sizes).
BATCH_N = 10_000_000
#: Runs of each streamed timing (the fastest is reported: the machine is shared).
REPEAT = 2
KEYS = ["region", "ageband", "sex"]
AGES = [f"{10 * i:02d}-{10 * i + 9:02d}" for i in range(9)] + ["90+"]
ALPHA = 0.1
CHUNK = 1 << 20


def records_chunk(rng: np.random.Generator, start: int, m: int):
    """Records ``start, ..., start + m - 1`` as an Arrow table (6 planted rare records at the start)."""
    import pyarrow as pa

    p = 1.0 / np.arange(1, 13)
    region = rng.choice(12, m, p=p / p.sum()) + 1
    w = np.array([12, 13, 14, 14, 13, 12, 10, 7, 4, 1.0])
    age = rng.choice(10, m, p=w / w.sum())
    sex = rng.integers(0, 2, m)
    # region 12 has nobody over 80 except the planted records: 3 rare cells keep C1 binding
    corner = (region == 12) & (age >= 8)
    region[corner] = 1
    if start == 0:
        k = min(6, m)
        region[:k] = 12
        age[:k] = [8, 8, 9, 9, 9, 9][:k]
        sex[:k] = [0, 0, 1, 1, 0, 0][:k]
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + m, dtype=np.int64)),
            "region": pa.array(region.astype(np.int64)),
            "ageband": pa.array(np.array(AGES, dtype=object)[age], type=pa.string()),
            "sex": pa.array(np.where(sex == 0, "F", "M").astype(object), type=pa.string()),
            "income": pa.array(np.round(rng.lognormal(10, 0.6, m), 2)),
            "weight": pa.array(rng.integers(50, 500, m)),
        }
    )


def write_records(folder: Path, n: int, seed: int = 0) -> dict:
    """``records-<n>.parquet`` (row groups of 2**20 records) and ``records-<n>.csv``, written in chunks."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    pq_path, csv_path = folder / f"records-{n}.parquet", folder / f"records-{n}.csv"
    pw = cw = None
    for s in range(0, n, CHUNK):
        t = records_chunk(rng, s, min(CHUNK, n - s))
        if pw is None:
            pw = pq.ParquetWriter(pq_path, t.schema)
            cw = pacsv.CSVWriter(
                csv_path, t.schema, write_options=pacsv.WriteOptions(quoting_style="none")
            )
        pw.write_table(t)
        cw.write_table(t)
    pw.close()
    cw.close()
    return {"parquet": pq_path, "csv": csv_path}


def records_frame(n: int, seed: int = 0) -> pd.DataFrame:
    """The same records as ``write_records`` as one pandas frame (for the in-memory series)."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    return pa.concat_tables(
        [records_chunk(rng, s, min(CHUNK, n - s)) for s in range(0, n, CHUNK)]
    ).to_pandas()


# ---------------------------------------------------------------------------------------------
# Points (each in a fresh process)
# ---------------------------------------------------------------------------------------------


def _best(fn, repeat: int):
    """(last result, fastest time, every time) of ``repeat`` runs of ``fn``."""
    times, res = [], None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
    return res, min(times), [round(t, 3) for t in times]


def count_point(
    path: str, design_dir: str, batch_size: int, design_kw: dict, repeat: int = 1
) -> dict:
    import pramopt
    from pramopt import count_file

    rss0 = max_rss_mb()
    table, t_count, runs = _best(lambda: count_file(path, KEYS, batch_size=batch_size), repeat)
    peak = max_rss_mb()
    t0 = time.perf_counter()
    res = pramopt.design(table, alpha=ALPHA, **design_kw)
    t_design = time.perf_counter() - t0
    pramopt.save_design(res, design_dir)
    return dict(
        n=table.n,
        K=table.n_cells,
        count_s=t_count,
        count_runs=runs,
        design_s=t_design,
        success=bool(res.success),
        expected_changes=res.expected_changes,
        rss_after_import_mb=rss0,
        count_peak_rss_mb=peak,
    )


def release_point(path: str, design_dir: str, out: str, batch_size: int, repeat: int = 1) -> dict:
    import pramopt
    from pramopt import release_file

    rss0 = max_rss_mb()
    res = pramopt.load_design(design_dir)
    rel, t_rel, runs = _best(
        # each repeat rewrites the benchmark's own output
        lambda: release_file(path, out, res, seed=1, batch_size=batch_size, overwrite=True),
        repeat,
    )
    return dict(
        n=rel.n,
        changed=rel.changed,
        batches=rel.batches,
        release_s=t_rel,
        release_runs=runs,
        rss_after_import_mb=rss0,
        release_peak_rss_mb=max_rss_mb(),
        out_mb=os.path.getsize(out) / 2**20,
    )


def pipeline_point(path: str, design_dir: str, out: str, batch_size: int, repeat: int = 1) -> dict:
    """count_file, then the design (loaded: it was made by the count point from the same table), then release_file."""
    import pramopt
    from pramopt import count_file, release_file

    best = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        table = count_file(path, KEYS, batch_size=batch_size)
        t1 = time.perf_counter()
        res = pramopt.load_design(design_dir)
        assert res.table.checksum() == table.checksum()
        t2 = time.perf_counter()
        rel = release_file(path, out, res, seed=1, batch_size=batch_size, overwrite=True)
        t3 = time.perf_counter()
        r = dict(n=rel.n, count_s=t1 - t0, release_s=t3 - t2, count_release_s=(t1 - t0) + (t3 - t2))
        best = r if best is None or r["count_release_s"] < best["count_release_s"] else best
    best["runs"] = repeat
    best["peak_rss_mb"] = max_rss_mb()
    return best


def _old_frequency_table(df: pd.DataFrame, qi):
    """The counting of pramopt before streaming: per-record codes, then np.unique(axis=0)."""
    from pramopt.frequency.table import FrequencyTable, record_codes

    codes, cats = record_codes(df, qi)
    cells, counts = np.unique(codes, axis=0, return_counts=True)
    return FrequencyTable(
        qi=tuple(qi), categories=cats, codes=cells.astype(np.int64), counts=counts.astype(np.int64)
    )


def inmemory_point(n: int, old: bool, design_dir: str) -> dict:
    import pramopt

    rss0 = max_rss_mb()
    df = records_frame(n)
    rss_data = max_rss_mb()
    t0 = time.perf_counter()
    new = pramopt.frequency_table(df, KEYS)
    t_new = time.perf_counter() - t0
    out = dict(n=n, count_new_s=t_new, rss_after_import_mb=rss0, rss_with_data_mb=rss_data)
    if old:
        t0 = time.perf_counter()
        ref = _old_frequency_table(df, KEYS)
        out["count_old_s"] = time.perf_counter() - t0
        out["same_checksum"] = ref.checksum() == new.checksum()
    res = pramopt.load_design(design_dir)  # made by the count point from the same records
    t0 = time.perf_counter()
    pramopt.release(df, res, seed=1)
    out["release_inmemory_s"] = time.perf_counter() - t0
    out["peak_rss_mb"] = max_rss_mb()
    return out


# ---------------------------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------------------------


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return float("nan")


def run(
    out: Path,
    quick: bool = False,
    sizes=None,
    batch_sizes=None,
    formats=("parquet", "csv"),
    timeout: float | None = None,
    log=print,
) -> dict:
    from pramopt.frequency.file_counting import DEFAULT_BATCH_SIZE

    sizes = tuple(sizes or ((20_000,) if quick else SIZES))
    # quick: the linear stage only (the refinement of a 239-cell design takes seconds)
    dkw = ["--design-kw", json.dumps({"refine_loss": False} if quick else {})]
    inprocess = (
        quick  # quick: no process start-ups (the smoke test); memory figures are then the parent's
    )
    rep = ["--repeat", str(1 if quick else REPEAT)]

    def point(args: list[str]) -> dict:
        if not inprocess:
            return run_child(["benchmarks.records"] + args, timeout)
        return json.loads(json.dumps(main(args, echo=False), default=float))

    batch_sizes = tuple(
        (1_000, 4_000)
        if quick and batch_sizes is None
        else (16_384, 65_536, 262_144)
        if batch_sizes is None
        else batch_sizes
    )
    timeout = timeout or (120.0 if quick else 600.0)
    bs = DEFAULT_BATCH_SIZE
    tmp = Path(tempfile.mkdtemp(prefix="pramopt-records-"))
    rows, pipe, batch_rows, mem_rows = [], [], [], []
    try:
        for n in sizes:
            t0 = time.perf_counter()
            paths = write_records(tmp, n)
            log(
                f"[records] n={n}: files written in {time.perf_counter() - t0:.1f} s "
                f"(parquet {paths['parquet'].stat().st_size / 2**20:.0f} MiB, csv {paths['csv'].stat().st_size / 2**20:.0f} MiB)"
            )
            for fmt in formats:
                src = str(paths[fmt])
                ddir = tmp / f"design-{fmt}-{n}"
                ddir.mkdir()
                dst = str(tmp / f"released-{n}.{fmt}")
                row = dict(
                    format=fmt,
                    n=n,
                    file_mb=os.path.getsize(src) / 2**20,
                    batch_size=bs,
                    load_before=_load(),
                )
                c = point(["--count", src, "--design", str(ddir), "--batch", str(bs)] + dkw + rep)
                row.update(c)
                r = point(
                    ["--release", src, "--design", str(ddir), "--out", dst, "--batch", str(bs)]
                    + rep
                )
                row.update(
                    {k: v for k, v in r.items() if k not in ("n", "rss_after_import_mb", "wall")}
                )
                if "count_s" in row and "release_s" in row:
                    row["count_plus_release_s"] = row["count_s"] + row["release_s"]
                row.pop("wall", None)
                rows.append(row)
                log(
                    f"[records] {fmt} n={n}: count {row.get('count_s', float('nan')):.2f} s, release "
                    f"{row.get('release_s', float('nan')):.2f} s, peaks {row.get('count_peak_rss_mb', float('nan')):.0f} / "
                    f"{row.get('release_peak_rss_mb', float('nan')):.0f} MiB {row.get('status', '')}"
                )
                p = point(
                    ["--pipeline", src, "--design", str(ddir), "--out", dst, "--batch", str(bs)]
                    + rep
                )
                p.update(format=fmt, n=n, load_before=row["load_before"])
                p.pop("wall", None)
                pipe.append(p)
                log(
                    f"[records] {fmt} n={n}: pipeline count+release {p.get('count_release_s', float('nan')):.2f} s "
                    f"(design {p.get('design_s', float('nan')):.2f} s) {p.get('status', '')}"
                )
                if os.path.exists(dst):
                    os.remove(dst)
            if n == (BATCH_N if BATCH_N in sizes else sizes[-1]):
                for fmt, b in [(f, b) for f in formats for b in batch_sizes]:
                    ddir = tmp / f"design-batch-{fmt}-{b}"
                    ddir.mkdir()
                    src, dst = str(paths[fmt]), str(tmp / f"released-batch.{fmt}")
                    c = point(["--count", src, "--design", str(ddir), "--batch", str(b)] + dkw)
                    r = point(
                        ["--release", src, "--design", str(ddir), "--out", dst, "--batch", str(b)]
                    )
                    batch_rows.append(
                        dict(
                            format=fmt,
                            n=n,
                            batch_size=b,
                            count_s=c.get("count_s"),
                            count_peak_rss_mb=c.get("count_peak_rss_mb"),
                            release_s=r.get("release_s"),
                            release_peak_rss_mb=r.get("release_peak_rss_mb"),
                            rss_after_import_mb=c.get("rss_after_import_mb"),
                        )
                    )
                    log(f"[records] batch {b}: {batch_rows[-1]}")
            for f in paths.values():
                f.unlink()
        for n in [
            m for m in sizes if m <= INMEMORY_MAX
        ]:  # after the files are gone: the frame needs the memory
            log(f"[records] in memory n={n}")
            m = point(
                ["--inmemory", str(n), "--old", "--design", str(tmp / f"design-{formats[0]}-{n}")]
            )
            m.setdefault("n", n)
            m.pop("wall", None)
            mem_rows.append(m)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    df, pdf, bdf, mdf = (
        pd.DataFrame(rows),
        pd.DataFrame(pipe),
        pd.DataFrame(batch_rows),
        pd.DataFrame(mem_rows),
    )
    common = [
        "Synthetic records (benchmarks/records.py, write_records, seed 0): identifying columns region (integer, 12 "
        "categories), ageband (text, 10) and sex (text, 2), K = 239 present cells with 6 planted records in 3 rare "
        "cells so that C1 binds; other columns id (integer), income (float), weight (integer). Parquet: snappy, row "
        "groups of 2**20 records; CSV: written by pyarrow (header quoted, values not).",
        "Every point runs in a fresh process; peak_rss is that process's VmHWM (peak resident memory), "
        "rss_after_import the same right after importing pramopt (numpy, pandas, pyarrow, scipy, cvxpy).",
        f"Machine: {os.cpu_count()} CPUs, shared with other CPU-heavy jobs during the run: load_before is the "
        "1-minute load average just before the point. Streamed timings are the fastest of "
        f"{1 if quick else REPEAT} runs in the point's process (every run in *_runs); the batch-size series and "
        "the in-memory series are single runs.",
    ]
    write_table(
        df,
        out,
        "records",
        "Streamed counting and release against the number of records n",
        notes=common
        + [
            f"count_s: pramopt.count_file (batch_size {bs}); design_s: pramopt.design(table, alpha={ALPHA}) of the "
            "counted table (independent of n: it only sees the table); release_s: pramopt.release_file with that "
            "design (seed 1), which also checks the counts of the source against the design in the same pass; "
            "count_plus_release_s: their sum. Separate processes, so each peak is its own.",
            "count_peak_rss_mb is read right after counting (before the design).",
        ],
    )
    write_table(
        pdf,
        out,
        "records_pipeline",
        "Count and release of one file in one process",
        notes=common
        + [
            "count_release_s: count_file + release_file in the same process (the target: 10 million records "
            "counted and released in under 30 s); the design between them is the one the count point made (loaded, "
            "not timed: see design_s in records.md)."
        ],
    )
    if len(bdf):
        write_table(
            bdf,
            out,
            "records_batch",
            "Peak memory and time against the batch size",
            notes=common
            + [
                "Memory grows with the batch size, not with n (compare records.md). A CSV is read "
                "in blocks of about batch_size records; pyarrow's reader keeps a few dozen blocks "
                "in flight. A Parquet release also holds one output row group (2**17 records)."
            ],
        )
    write_table(
        mdf,
        out,
        "records_inmemory",
        "In-memory counting before and after the integer-key change",
        notes=common
        + [
            "count_old_s: per-record codes then np.unique(codes, axis=0) (pramopt before streaming, re-created in "
            "benchmarks/records.py); count_new_s: pramopt.frequency_table (mixed-radix int64 keys, np.bincount "
            "here); same_checksum: both tables have the same checksum; release_inmemory_s: pramopt.release on "
            "the whole frame; peak_rss_mb includes the frame (rss_with_data_mb)."
        ],
    )
    fig = figure(out, df, mdf, bdf)
    return {"records": df, "pipeline": pdf, "batch": bdf, "inmemory": mdf, "figure": fig}


def figure(out: Path, df: pd.DataFrame, mdf: pd.DataFrame, bdf: pd.DataFrame) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not len(df) or "count_s" not in df:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ax = axes[0]
    for i, fmt in enumerate(("parquet", "csv")):
        g = df[df.format == fmt].sort_values("n")
        ax.plot(g.n, g.count_s, marker="o", color=f"C{i}", ls="--", label=f"count_file ({fmt})")
        ax.plot(g.n, g.release_s, marker="s", color=f"C{i}", ls=":", label=f"release_file ({fmt})")
        ax.plot(
            g.n,
            g.count_plus_release_s,
            marker="D",
            color=f"C{i}",
            lw=2,
            label=f"count + release ({fmt})",
        )
    ax.plot([1e7], [30], marker="*", ms=12, color="grey", ls="none", label="target: 10M in 30 s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records n")
    ax.set_ylabel("seconds")
    ax.set_title("Streamed time (one process per point)", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[1]
    for i, fmt in enumerate(("parquet", "csv")):
        g = df[df.format == fmt].sort_values("n")
        ax.plot(
            g.n,
            g.count_peak_rss_mb,
            marker="o",
            color=f"C{i}",
            ls="--",
            label=f"count_file ({fmt})",
        )
        ax.plot(
            g.n,
            g.release_peak_rss_mb,
            marker="s",
            color=f"C{i}",
            ls=":",
            label=f"release_file ({fmt})",
        )
    if len(mdf) and "peak_rss_mb" in mdf:
        ax.plot(
            mdf.n,
            mdf.peak_rss_mb,
            marker="^",
            color="C3",
            label="in memory (frame + count + release)",
        )
    ax.plot(
        df.n.drop_duplicates(),
        [df.rss_after_import_mb.median()] * df.n.nunique(),
        color="grey",
        lw=1,
        label="after imports",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records n")
    ax.set_ylabel("peak resident memory (MiB)")
    ax.set_title("Peak memory", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[2]
    if len(mdf) and "count_old_s" in mdf:
        ax.plot(
            mdf.n, mdf.count_old_s, marker="o", label="frequency_table before (np.unique axis=0)"
        )
        ax.plot(mdf.n, mdf.count_new_s, marker="s", label="frequency_table after (int keys)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records n")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
    ax.set_title("In-memory counting", fontsize=10)
    fig.tight_layout()
    p = out / "records.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def main(argv=None, echo: bool = True) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count")
    ap.add_argument("--release")
    ap.add_argument("--pipeline")
    ap.add_argument("--inmemory", type=int)
    ap.add_argument("--old", action="store_true")
    ap.add_argument("--design")
    ap.add_argument("--out")
    ap.add_argument("--batch", type=int, default=1 << 16)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--design-kw", default="{}", help="JSON keyword arguments of pramopt.design")
    a = ap.parse_args(argv)
    kw = json.loads(a.design_kw)
    if a.count:
        r = count_point(a.count, a.design, a.batch, kw, a.repeat)
    elif a.release:
        r = release_point(a.release, a.design, a.out, a.batch, a.repeat)
    elif a.pipeline:
        r = pipeline_point(a.pipeline, a.design, a.out, a.batch, a.repeat)
    else:
        r = inmemory_point(a.inmemory, a.old, a.design)
    if echo:
        print(json.dumps(r, default=float))
    return r


if __name__ == "__main__":
    main()
