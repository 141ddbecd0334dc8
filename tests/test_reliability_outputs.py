"""The files pramopt writes beside a design: labels shortened for display, a report that fails
without losing the design, and text fields that a spreadsheet cannot read as formulas."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import time
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.cli import main
from pramopt.example import EXAMPLE_QI

#: The longest label a report or summary shows (characters).
LIMIT = 40
#: First characters of a field that a spreadsheet reads as a formula (OWASP's CSV injection rule).
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def run_main(*argv):
    """main(argv) with stdout and stderr captured: (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def owasp(text: str) -> str:
    """A text field as OWASP says to write it: a leading single quote before a formula
    character."""
    return "'" + text if text.startswith(TRIGGERS) else text


def md_tables(md: str) -> list[list[list[str]]]:
    """The Markdown report's tables: each a list of rows (header first, the rule left out), each
    row its cells (``\\|`` inside a cell kept as ``|``)."""
    tables, rows = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = re.split(r"(?<!\\) \| ", line.strip()[1:-1].strip())
            if not all(set(c) <= {"-", "|"} for c in cells):  # not the rule under the header
                rows.append([c.strip().replace("\\|", "|") for c in cells])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def html_cells(page: str) -> list[str]:
    """The text of every table cell and header of an HTML page, unescaped."""
    return [html.unescape(c) for c in re.findall(r"<t[dh]>([^<]*)</t[dh]>", page)]


def without_images(page: str) -> str:
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)


# ---------------------------------------------------------------------------------------------
# A long identifying value
# ---------------------------------------------------------------------------------------------

LONG = 100_000


@pytest.fixture(scope="module")
def long_csv(tmp_path_factory):
    """600 records; one record in 50 has a 100,000-character value of ``a``."""
    tmp = tmp_path_factory.mktemp("long")
    rng = np.random.default_rng(7)
    n = 600
    a = np.array(rng.choice(["north", "south", "east", "west"], n), dtype=object)
    a[::50] = "x" * LONG
    df = pd.DataFrame({"a": a, "b": rng.choice(["1", "2", "3"], n), "c": rng.choice(["u", "v"], n)})
    df.to_csv(tmp / "long.csv", index=False)
    return tmp / "long.csv"


def test_long_value_is_shortened_in_every_figure_and_table(long_csv, tmp_path, monkeypatch):
    from pramopt.report import plots

    figures = []
    png = plots.png

    def keep(fig):
        figures.append(fig)
        return png(fig)

    monkeypatch.setattr(plots, "png", keep)
    out = tmp_path / "d"
    t0 = time.perf_counter()
    code, said, err = run_main(
        "design", "--data", long_csv, "--qi", "a,b,c", "--alpha", 0.2, "--out", out
    )
    seconds = time.perf_counter() - t0
    assert code == 0, err
    # before, this design ran 26 s and died drawing a 100,000-character tick label
    assert seconds < 30, f"design and report took {seconds:.1f} s"
    # the design keeps the value whole: a release writes it back as it was
    res = pramopt.load_design(out)
    assert "x" * LONG in list(res.table.categories[0])
    too_long = "x" * (LIMIT + 1)
    md = (out / "report.md").read_text(encoding="utf-8")
    page = without_images((out / "report.html").read_text(encoding="utf-8"))
    assert too_long not in md and too_long not in page and too_long not in said
    # the label cells: the categories of the margins table and of each transition table
    tables = md_tables(md)
    margins = next(t for t in tables if t[0][:2] == ["variable", "category"])
    shown = [row[1] for row in margins[1:] if row[0] == "a"]
    assert len(shown) == 5 and all(len(c) <= LIMIT for c in shown)
    assert any(c.startswith("xxxx") for c in shown)
    for t in tables:
        if t[0][0].startswith("original "):
            assert all(len(c) <= LIMIT for c in t[0][1:] + [row[0] for row in t[1:]])
    # the drawings: Figure 1, the change rates and margins, the transition matrices
    assert len(figures) == 3
    ticks = []
    for fig in figures:
        for ax in fig.axes:
            ticks += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        assert all(too_long not in t.get_text() for t in fig.findobj(match=_is_text))
    assert all(len(t) <= LIMIT for t in ticks)
    assert any(t.startswith("xxxx") for t in ticks)


def _is_text(artist) -> bool:
    from matplotlib.text import Text

    return isinstance(artist, Text)


def test_a_failed_design_names_a_long_value_shortened(long_csv, tmp_path):
    # a = the long value in 12 records, fixed: they move only among themselves, and 12 < 1/alpha
    out = tmp_path / "d"
    code, said, err = run_main(
        "design",
        "--data",
        long_csv,
        "--qi",
        "a,b,c",
        "--alpha",
        0.05,
        "--fixed",
        "a",
        "--out",
        out,
    )
    assert code == 1, err
    res = pramopt.load_design(out)
    assert not res.success
    too_long = "x" * (LIMIT + 1)
    assert "the 12 records with a = 'xxxx" in res.message and too_long not in res.message
    assert too_long not in said
    assert too_long not in (out / "report.md").read_text(encoding="utf-8")


def test_distinct_long_labels_stay_distinct():
    from pramopt._labels import short_labels

    common = "y" * 60
    labels = [common + "1", common + "2", "short", "y" * LIMIT, "y" * (LIMIT - 1) + "…"]
    shown = short_labels(labels)
    assert len(set(shown)) == len(labels)
    assert all(len(s) <= LIMIT for s in shown)
    # labels within the limit are shown whole
    assert shown[2:4] == ["short", "y" * LIMIT]


# ---------------------------------------------------------------------------------------------
# A report that fails after the design
# ---------------------------------------------------------------------------------------------


def test_a_report_that_fails_keeps_the_design(tmp_path, monkeypatch):
    from pramopt.cli import _common

    def fail(*args, **kwargs):
        raise MemoryError("cannot draw")

    monkeypatch.setattr(_common, "render_html", fail)
    data = pramopt.example_data()
    data.to_csv(tmp_path / "data.csv", index=False)
    out = tmp_path / "d"
    code, _, err = run_main(
        "design", "--data", tmp_path / "data.csv", "--qi", ",".join(EXAMPLE_QI), "--out", out
    )
    assert code == 3
    assert "Traceback" not in err
    assert "report failed" in err and f"design was saved at {out}" in err
    assert "MemoryError" in err
    # the design is whole and verified: the same matrix as the library's own design
    res = pramopt.load_design(out)
    ref = pramopt.design(data, list(EXAMPLE_QI), alpha=0.1)
    assert res.success
    np.testing.assert_allclose(res.matrix.toarray(), ref.matrix.toarray(), atol=1e-12)
    assert not (out / "report.html").exists()


# ---------------------------------------------------------------------------------------------
# Formulas in labels
# ---------------------------------------------------------------------------------------------

FORMULAS = ['=HYPERLINK("http://x","y")', "+1", "-2", "@SUM(A1)", "plain"]


@pytest.fixture(scope="module")
def formula_design(tmp_path_factory):
    """Labels that a spreadsheet would read as formulas, designed by the command line."""
    tmp = tmp_path_factory.mktemp("formula")
    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame(
        {
            "a": rng.choice(FORMULAS, n),
            "b": rng.choice(["1", "-3"], n),
            "w": rng.choice([-1.5, 2.5], n),
            "t": rng.choice(["=1+1", "ok"], n),
        }
    )
    df.to_csv(tmp / "data.csv", index=False)
    out = tmp / "d"
    code, _, err = run_main(
        "design", "--data", tmp / "data.csv", "--qi", "a,b", "--alpha", 0.2, "--out", out, "-q"
    )
    assert code == 0, err
    return dict(tmp=tmp, data=df, dir=out)


def test_estimate_csv_escapes_labels_not_numbers(formula_design):
    tmp, df, d = formula_design["tmp"], formula_design["data"], formula_design["dir"]
    est = tmp / "est.csv"
    argv = ["estimate", "--design", d, "--data", tmp / "data.csv", "--by", "w,t"]
    code, _, err = run_main(*argv, "--out", est)
    assert code == 0, err
    code, printed, err = run_main(*argv)
    assert code == 0, err
    for text in (est.read_text(encoding="utf-8"), printed):
        rows = list(csv.reader(io.StringIO(text)))
        header, body = rows[0], rows[1:]
        assert header == ["a", "b", "w", "t", "observed", "estimate", "se"]
        cols = {h: [r[i] for r in body] for i, h in enumerate(header)}
        for q in ("a", "b", "t"):  # labels, written as OWASP says
            assert set(cols[q]) == {owasp(v) for v in df[q]}
        for q in ("w", "observed", "estimate", "se"):  # numbers, as numbers
            assert all(np.isfinite(float(v)) for v in cols[q])
        assert "-1.5" in cols["w"]
        for r in body:
            for h, v in zip(header, r):
                assert not v.startswith(TRIGGERS) or h in ("w", "estimate", "se")


def test_report_escapes_labels_and_the_design_keeps_them(formula_design):
    df, d = formula_design["data"], formula_design["dir"]
    # design.json keeps the exact labels: a release writes them back as they were
    res = pramopt.load_design(d)
    assert sorted(map(str, res.table.categories[0])) == sorted(set(df["a"]))
    assert sorted(map(str, res.table.categories[1])) == sorted(set(df["b"]))
    text = (d / "design.json").read_text(encoding="utf-8")
    assert all(json.dumps(v) in text for v in FORMULAS)
    md = (d / "report.md").read_text(encoding="utf-8")
    assert all(not line.startswith(TRIGGERS) for line in md.splitlines())
    tables = md_tables(md)
    seen = set()
    for t in tables:
        label_cols = [j for j, h in enumerate(t[0]) if h in ("category", "from", "to")]
        if t[0][0].startswith("original "):
            label_cols = [0]
            seen.update(t[0][1:])
            assert all(not h.startswith(TRIGGERS) for h in t[0])
        for row in t[1:]:
            seen.update(row[j] for j in label_cols)
            for j, cell in enumerate(row):
                if j in label_cols:
                    assert not cell.startswith(TRIGGERS), cell
                elif cell.startswith(TRIGGERS):  # a number written by pramopt, e.g. -0.5
                    assert cell[0] == "-" and np.isfinite(float(cell)), cell
    # every label of a is in the tables, escaped
    assert {owasp(v) for v in FORMULAS} <= seen
    for cell in html_cells((d / "report.html").read_text(encoding="utf-8")):
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        if cell.startswith("-"):
            assert np.isfinite(float(cell)), cell


def test_matrix_csv_escapes_labels_and_reads_them_back(tmp_path):
    """matrix.csv is written for people: its labels are escaped, and read back exact."""
    import csv as _csv

    import pramopt
    from pramopt.io import read_matrix
    from pramopt.io.design_file import write_matrix

    rng = np.random.default_rng(3)
    labels = ['=HYPERLINK("http://x","y")', "+1", "-2", "@SUM(A1)", "plain"]
    df = pd.DataFrame({"a": rng.choice(labels, 300), "b": rng.choice(["x", "y"], 300)})
    res = pramopt.design(df, ["a", "b"], alpha=0.2)
    assert res.success
    path = write_matrix(res.matrix, res.table, tmp_path / "matrix.csv")
    with open(path, newline="") as fh:
        rows = list(_csv.reader(fh))
    assert all(
        not f.startswith(("=", "+", "-", "@"))
        for r in rows
        for f in r
        if f.strip("0123456789.e-") != ""
    )
    P, cells = read_matrix(path, ["a", "b"], data=df)
    assert set(cells["a"]) <= set(labels) and set(cells["a"]) & {"+1", "-2"}
    dense = res.to_dense()
    key = {tuple(r): i for i, r in enumerate(res.table.cells().itertuples(index=False))}
    order = [key[tuple(r)] for r in cells.itertuples(index=False)]
    assert np.allclose(P, dense[np.ix_(order, order)])
