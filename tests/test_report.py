"""Reports: self-contained HTML with real PNG figures, risk tables checked against pandas."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import pramopt
from pramopt.example import EXAMPLE_QI
from pramopt.report import (
    ReportData,
    change_vs_frequency_figure,
    explanations,
    from_result,
    render_html,
    render_markdown,
    risk_by_combination,
    top_flows,
    variable_changes,
    variable_margins,
    variable_transitions,
)

QI = list(EXAMPLE_QI)
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def result():
    return pramopt.design(pramopt.example_data(), QI, 0.1)


@pytest.fixture(scope="module")
def html(result):
    return render_html(from_result(result, "test report"))


def test_html_is_self_contained_with_three_png_figures(html):
    # nothing fetched from elsewhere: no external scripts, styles or images
    assert not re.search(r"""(src|href)=['"]?(https?:|//|file:)""", html)
    assert "<style>" in html and "<script" not in html
    imgs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert (
        len(imgs) == 3
    )  # changes against frequency, per-variable utility, per-variable transitions
    for b in imgs:
        png = base64.b64decode(b)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_risk_before_matches_group_sizes_and_after_meets_alpha(result):
    data = pramopt.example_data()
    df = risk_by_combination(
        result.matrix,
        result.table,
        [tuple(QI.index(v) for v in c) for c in result.combinations],
        alpha=0.1,
    )
    # with P = I the C1 risk of a combination is 1 / (its smallest group), computed by pandas
    for row in df.itertuples(index=False):
        cols = row.combination.split(", ")
        assert row.risk_before == pytest.approx(1.0 / data.groupby(cols).size().min())
        assert row.groups == data.groupby(cols).ngroups
    assert len(df) == len(list(combinations(QI, 3)))
    assert (df["risk_after"] <= 0.1).all() and (df["over_after"] == 0).all()
    assert list(df["risk_after"]) == sorted(df["risk_after"], reverse=True)  # worst first
    assert df["risk_after"].max() == pytest.approx(result.max_risk)


def test_markdown_has_the_summary_and_risk_tables(result):
    md = render_markdown(from_result(result, "t"))
    assert md.startswith("# t")
    assert "## Risk before and after, per combination (worst first)" in md
    assert f"| records n | {len(pramopt.example_data())} |" in md
    # one table row per combination
    risk = md.split("## Risk before")[1].split("\n## ")[0]
    assert sum(1 for line in risk.splitlines() if re.match(r"\| v\d, v\d, v\d \|", line)) == 10


def test_failed_status_is_flagged(result):
    import dataclasses

    bad = dataclasses.replace(result, status=pramopt.Status.INFEASIBLE)
    d = from_result(bad)
    assert "NOT SAFE TO RELEASE" in render_html(d) and "NOT SAFE TO RELEASE" in render_markdown(d)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_renders_in_headless_chromium(html, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert shot.exists()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    # a non-trivial page: many distinct colours, not a blank screen
    assert len(np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_figure_1_shows_expected_changes_beside_the_probability(html, result):
    # the paper's near-linear Figure 1 is the expected number of changed records per cell,
    # U0(m)(1 - P_mm); the per-record probability 1 - P_mm is the second panel, and the caption
    # says which is which
    caption = re.search(
        r"<h2>Changes against frequency</h2><figure>.*?<figcaption>(.*?)</figcaption>", html, re.S
    )
    assert caption is not None
    text = caption.group(1)
    assert "Figure 1 of Cator et al." in text and "expected number of changed records" in text
    assert (
        "U0(m)(1 − P_mm)" in text
        and "probability that one of its records changes, 1 − P_mm" in text
    )
    # what the caption claims, on the example: the senders (cells receiving nothing) change with
    # about the same probability, so expected changes grow linearly with U0(m)
    P = result.to_dense()
    u = result.counts
    change = 1.0 - np.diag(P)
    received = (P - np.diag(np.diag(P))).sum(axis=0)
    senders = (change > 1e-6) & (received < 1e-6) & (u >= 1 / 0.1)
    assert senders.sum() >= 10
    med = np.median(change[senders])
    assert np.mean(np.abs(change[senders] / med - 1) < 0.05) >= 0.8  # most within 5% of one value
    assert change[senders].max() <= 2 * change[senders].min()
    assert np.corrcoef(u[senders], u[senders] * change[senders])[0, 1] > 0.99


# ---------------------------------------------------------------------------------------------
# Utility per variable, against brute force over the dense matrix
# ---------------------------------------------------------------------------------------------


@pytest.fixture(params=[None, 1, 37], ids=["whole", "row-by-row", "pieces-of-37"])
def flow_chunk(request, monkeypatch):
    """The flows summed at once, one row at a time, or in pieces of about 37 entries."""
    import pramopt.report.flows as report_flows

    if request.param is not None:
        monkeypatch.setattr(report_flows, "FLOW_CHUNK", request.param)
    return request.param


def test_change_rate_per_variable_is_the_brute_force_sum(result, flow_chunk):
    P, u, cells = result.to_dense(), result.counts, result.cells.to_numpy()
    K, d = cells.shape
    want = np.zeros(d)
    for m in range(K):
        for lo in range(K):
            for j in range(d):
                if cells[m, j] != cells[lo, j]:
                    want[j] += u[m] * P[m, lo]
    got = variable_changes(result.matrix, result.table)
    assert list(got["variable"]) == QI
    np.testing.assert_allclose(got["expected records changed"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["share of records"], want / result.n, rtol=1e-12)
    assert want.max() > 1  # the example's design does change values


def test_categories_after_are_the_released_margins(result, flow_chunk):
    released = result.counts @ result.to_dense()  # expected records per released cell, U0ᵀP
    cells = result.cells
    got = variable_margins(result.matrix, result.table)
    data = pramopt.example_data()
    for q in QI:
        after = pd.Series(released).groupby(cells[q].to_numpy()).sum()
        before = data[q].value_counts()
        g = got[got["variable"] == q].set_index("category")
        for cat in before.index:
            assert g.loc[str(cat), "before"] == before[cat]
            assert g.loc[str(cat), "after (expected)"] == pytest.approx(after[cat], rel=1e-12)
        assert g["after (expected)"].sum() == pytest.approx(result.n)


def test_transitions_per_variable_are_row_shares_of_the_joint_flows(result, flow_chunk):
    P, u, cells = result.to_dense(), result.counts, result.cells
    T = variable_transitions(result.matrix, result.table)
    q = QI[1]
    col = cells[q].to_numpy()
    for a in np.unique(col):
        rows = col == a
        for b in np.unique(col):
            want = (u[rows] @ P[rows][:, col == b]).sum() / u[rows].sum()
            assert T[q].loc[str(a), str(b)] == pytest.approx(want, rel=1e-10, abs=1e-15)
    np.testing.assert_allclose(T[q].sum(axis=1), 1.0)


@pytest.fixture
def two_variables():
    df = pd.DataFrame(
        {
            "region": ["N"] * 10 + ["S"] * 5 + ["S"] * 20,
            "age": ["young"] * 10 + ["old"] * 5 + ["young"] * 20,
        }
    )
    table = pramopt.frequency_table(df, ["region", "age"])
    cells = [tuple(r) for r in table.cells().itertuples(index=False)]
    ny, so, sy = cells.index(("N", "young")), cells.index(("S", "old")), cells.index(("S", "young"))
    P = np.eye(3)
    P[ny, ny], P[ny, so] = 0.7, 0.3  # 10 records x 0.3 = 3 expected: region and age change
    P[so, so], P[so, sy] = 0.9, 0.1  # 5 x 0.1 = 0.5: only age changes
    P[sy, sy], P[sy, ny] = 0.99, 0.01  # 20 x 0.01 = 0.2: only region changes
    return table, sp.csr_array(P)


def test_top_flows_name_the_cells_and_the_values_that_change(two_variables, flow_chunk):
    table, P = two_variables
    assert list(top_flows(P, table, n=2)["expected records"]) == [
        3.0,
        0.5,
    ]  # the largest, across pieces
    f = top_flows(P, table)
    assert list(f["from"]) == ["N, young", "S, old", "S, young"]
    assert list(f["to"]) == ["S, old", "S, young", "N, young"]
    assert list(f["changes"]) == ["region: N→S, age: young→old", "age: old→young", "region: S→N"]
    np.testing.assert_allclose(f["expected records"], [3.0, 0.5, 0.2])
    np.testing.assert_allclose(f["probability"], [0.3, 0.1, 0.01])
    assert list(f["records in cell"]) == [10, 5, 20]


def test_probability_of_change_plot_has_a_line_at_one_minus_gamma(result):
    fig = change_vs_frequency_figure(result.matrix.diagonal(), result.table, gamma=0.9)
    right = fig.axes[1]
    lines = [ln for ln in right.get_lines() if ln.get_gid() == "floor"]
    assert len(lines) == 1
    np.testing.assert_allclose(lines[0].get_ydata(), [0.1, 0.1])
    assert "γ = 0.9" in lines[0].get_label()
    assert right.get_ylim()[1] > 0.1  # the line is inside the plot
    none = change_vs_frequency_figure(result.matrix.diagonal(), result.table)
    assert not [ln for ln in none.axes[1].get_lines() if ln.get_gid() == "floor"]


def test_html_explains_what_a_newcomer_cannot_read(result, html):
    assert f"The dashed line is 1 − γ = {1 - result.gamma:.3g}" in html
    assert "the binding rows" in html and "condition number: how much correcting" in html
    # the reduction in words, not the Reduction's field names
    assert "rows left after dropping cells with at least 1/α records (bound (2))" in html
    for key in result.reduction.as_dict():
        assert f"<th>{key}</th>" not in html and f"<td>{key}</td>" not in html
    # an assessment's ε = ∞, k = 1 and R1 "–" each get their sentence
    figures = {
        "Pk-anonymity k": 1.0,
        "ε-DP": float("inf"),
        "max R1(1, T)": None,
        "condition number": 1.0,
    }
    words = " ".join(explanations(figures))
    assert "ε = ∞: no finite ε-differential-privacy guarantee" in words
    assert "Pk-anonymity k = 1: the smallest value, no Pk-anonymity guarantee" in words
    assert (
        "max R1(1, T) –: the correct-match risk of Nayak et al. is defined for a matrix that acts on one"
        in words
    )
    d = ReportData(
        title="t",
        matrix=result.matrix,
        table=result.table,
        combinations=result.combination_indices,
        figures=figures,
    )
    page = render_html(d)
    assert "ε = ∞: no finite ε-differential-privacy guarantee" in page
    assert "max R1(1, T) –" in render_markdown(d)


def test_a_report_on_20000_cells_makes_nothing_k_by_k(monkeypatch):
    import tracemalloc

    from pramopt.frequency.table import FrequencyTable
    from pramopt.report import plots

    levels = (40, 25, 20)
    codes = np.array(np.meshgrid(*[np.arange(L) for L in levels], indexing="ij")).reshape(3, -1).T
    K = codes.shape[0]
    assert K == 20_000
    counts = np.random.default_rng(0).integers(1, 6, K)
    table = FrequencyTable(
        qi=("a", "b", "c"),
        categories=tuple(pd.Index(range(L)) for L in levels),
        codes=codes,
        counts=counts,
    )
    nxt = (np.arange(K) + 1) % K
    P = sp.csr_array(
        (
            np.r_[np.full(K, 0.9), np.full(K, 0.1)],
            (np.r_[np.arange(K), np.arange(K)], np.r_[np.arange(K), nxt]),
        ),
        shape=(K, K),
    )
    # the figures take per-variable tables (categories x categories) and the diagonal; they are
    # left out here for time (matplotlib), the tables they are drawn from are all computed
    for key in plots.PLOTS:
        monkeypatch.setitem(plots.PLOTS, key, lambda figures: None)
    monkeypatch.setattr(plots, "png", lambda fig: "")
    d = ReportData(
        title="big", matrix=P, table=table, combinations=[(0, 1, 2)], alpha=0.1, gamma=0.9
    )
    tracemalloc.start()
    page = render_html(d)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "Transitions per variable" in page
    assert peak < 0.05 * K * K * 8  # a dense K x K array of floats would be 3.2 GB


# ---------------------------------------------------------------------------------------------
# Rendering: user data escaped; every figure id wired to its words and templates
# ---------------------------------------------------------------------------------------------


def test_labels_with_markup_are_escaped_in_html_and_pipes_in_markdown():
    import html as stdlib_html

    df = pd.DataFrame(
        {
            "a<b": ["<i>x</i>"] * 10 + ["p & q"] * 5 + ["o'k|y"] * 20,
            "c": ["1"] * 10 + ["2"] * 5 + ["1"] * 20,
        }
    )
    table = pramopt.frequency_table(df, ["a<b", "c"])
    P = sp.csr_array(np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]))
    d = ReportData(
        title="<script>t</script> & co",
        matrix=P,
        table=table,
        combinations=[(0, 1)],
        alpha=0.5,
        figures={"note <b>": "x & <y>"},
    )
    page = render_html(d)
    for raw in ("<i>x</i>", "<script>", "<b>", "<y>", "a<b", "o'k"):
        assert raw not in page
    for raw in (
        "<i>x</i>",
        "p & q",
        "o'k|y",
        "a<b",
        "<script>t</script> & co",
        "note <b>",
        "x & <y>",
    ):
        assert stdlib_html.escape(raw) in page
    assert f"<title>{stdlib_html.escape(d.title)}</title>" in page
    assert f"<summary>{stdlib_html.escape('a<b')}: transitions as a table (%)</summary>" in page
    md = render_markdown(d)
    assert md.startswith("# <script>t</script> & co\n")
    assert "| p & q, 2 | <i>x</i>, 1 |" in md  # a flow's cells, as written
    assert "| o'k\\|y, 1 |" in md  # a "|" in a value is escaped (the header's labels are not)


def _template_references(env, name):
    """(object, attribute) of every ``words.x``, ``words["x"]`` and ``images.x`` in a template."""
    from jinja2 import nodes

    tree = env.parse(env.loader.get_source(env, name)[0])
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node.node, nodes.Name) and node.node.name in ("words", "images"):
            key = node.attr if isinstance(node, nodes.Getattr) else node.arg
            yield node.node.name, key.value if isinstance(key, nodes.Const) else key


def test_every_figure_id_has_words_and_templates_and_templates_name_only_known_ids(result):
    from importlib.resources import files

    from pramopt.recode import Recoding
    from pramopt.report import data, plots, render, words

    ids = list(data.FIGURES)
    d = from_result(result, "t")
    # a recoding too, so that the report has every figure
    d.recoding = Recoding({"roof": {"2": "2-3", "3": "2-3"}}, "roofs").to_dict()
    assert d.reduction and d.stages  # so that the report has every figure
    assert [s.id for s in data.sections(d)] == ids
    assert set(words.WORDS) == set(ids)
    assert all(words.WORDS[i].title for i in ids)
    names = {
        p.name
        for p in files("pramopt.report").joinpath("templates").iterdir()
        if p.name.endswith(".j2")
    }
    per_figure = {f"{i}.{kind}.j2" for i in ids for kind in ("html", "md")}
    assert per_figure <= names
    assert names - per_figure == set(render.TEMPLATES)  # no template of an unknown figure
    assert set(plots.PLOTS) <= set(ids)
    for kind in ("html", "md"):
        env = render.environment(kind)
        for name in sorted(n for n in names if n.endswith(f".{kind}.j2")):
            for obj, key in _template_references(env, name):
                assert key in (words.WORDS if obj == "words" else plots.PLOTS), (name, obj, key)
