"""What the report's figures and tables label and show, checked against the data themselves.

Each expectation is computed here from the data frame (pandas) or from the matrix entries the
test writes, and each drawing is rendered (Agg) so that the boxes of its labels and legends are
the ones a reader sees.
"""

from __future__ import annotations

import re
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from matplotlib.backends.backend_agg import FigureCanvasAgg

import pramopt
from pramopt.example import EXAMPLE_QI
from pramopt.report import (
    PLOTS,
    ReportData,
    change_vs_frequency_figure,
    from_result,
    render_html,
    render_markdown,
    sections,
    transitions_figure,
    variable_transitions,
    variables_figure,
)
from pramopt.report.flows import NEGLIGIBLE, changed_together, top_flows

#: A share written the way the report writes small shares when round-off is let through.
SCIENTIFIC = re.compile(r"\d(?:\.\d+)?e-\d+")


def _report(df: pd.DataFrame, qi, P) -> ReportData:
    table = pramopt.frequency_table(df, qi)
    return ReportData(title="t", matrix=sp.csr_array(P), table=table, combinations=[(0,)])


def _shown(d: ReportData) -> dict:
    return {s.id: s.data for s in sections(d)}


def _drawn(fig):
    """The figure drawn once (so that every text has its final place) and its renderer."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _ticks(axis) -> list[tuple[float, str]]:
    """(position, text) of the ticks an axis shows with a label."""
    return [
        (float(t.get_loc()), label.get_text())
        for t in axis.get_major_ticks()
        for label in (t.label1, t.label2)  # a colour bar labels its right side
        if label.get_visible() and label.get_text()
    ]


@pytest.fixture(params=[None, 1, 37], ids=["whole", "row-by-row", "pieces-of-37"])
def flow_chunk(request, monkeypatch):
    """The flows summed at once, one row at a time, or in pieces of about 37 entries."""
    import pramopt.report.flows as report_flows

    if request.param is not None:
        monkeypatch.setattr(report_flows, "FLOW_CHUNK", request.param)
    return request.param


def _shift(n_cells: int, moved: float) -> np.ndarray:
    """Each present cell keeps 1 - moved and sends ``moved`` to the next cell (cyclically)."""
    P = (1 - moved) * np.eye(n_cells)
    P[np.arange(n_cells), (np.arange(n_cells) + 1) % n_cells] += moved
    return P


@pytest.fixture(scope="module")
def register_like():
    """A variable of 150 codes that are neither 0.. nor contiguous, with a small one beside."""
    rng = np.random.default_rng(5)
    codes = np.arange(3, 903, 6)  # 150 codes: position p is code 3 + 6p, never p
    n = 600
    return pd.DataFrame(
        {"occupation": rng.choice(codes, n), "contract": rng.choice([1, 2, 4], n)}
    ).astype("int64")


def test_heat_map_ticks_are_the_categories_as_written(register_like):
    df = register_like
    table = pramopt.frequency_table(df, ["occupation", "contract"])
    d = _report(df, ["occupation", "contract"], _shift(table.n_cells, 0.2))
    fig = PLOTS["transitions"](_shown(d))
    _drawn(fig)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    for q in ("occupation", "contract"):
        cats = [str(v) for v in sorted(df[q].unique())]  # the values as the data write them
        ax = panels[q]
        for axis in (ax.xaxis, ax.yaxis):
            shown = _ticks(axis)
            assert 2 <= len(shown) <= 20, (q, len(shown))
            for pos, text in shown:
                assert pos == int(pos) and text == cats[int(pos)], (q, pos, text)
        if len(cats) <= 15:
            assert [t for _, t in _ticks(ax.xaxis)] == cats  # every one when they fit


def _overlapping(boxes) -> list:
    return [(a, b) for (a, ba), (b, bb) in combinations(boxes, 2) if ba.overlaps(bb)]


def test_no_two_labels_of_a_heat_map_or_its_colour_bar_overprint(register_like):
    df = register_like
    table = pramopt.frequency_table(df, ["occupation", "contract"])
    # shares from 0.2% to 40%: a log colour scale over more than two decades
    P = _shift(table.n_cells, 0.4)
    P[0, 2:40] = np.geomspace(1e-3, 5e-3, 38) / 20
    P[0, 0] = 1 - P[0, 1:].sum()
    data = _shown(_report(df, ["occupation", "contract"], P))
    fig = transitions_figure(data["transitions"])
    _labels_apart(fig)
    colourbar = [ax for ax in fig.axes if not ax.get_title()]
    assert len(colourbar) == 1 and len(_ticks(colourbar[0].yaxis)) >= 2
    # the categories before and after: the largest categories of each variable, each named
    _labels_apart(variables_figure(data["change_rates"], data["margins"]))


def _labels_apart(fig) -> None:
    """No two tick labels of one axis of ``fig`` overlap once drawn."""
    renderer = _drawn(fig)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [
                (t.get_text(), t.get_window_extent(renderer))
                for t in axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True)
                if t.get_visible() and t.get_text()
            ]
            assert not _overlapping(labels), (ax.get_title() or "colour bar", axis.axis_name)


def test_integer_categories_held_as_floats_print_as_integers():
    # pandas holds whole numbers as floats when one is missing; the data write 1, 2, 3
    df = pd.DataFrame(
        {
            "roof": [1.0, 2.0, np.nan, 3.0, 1.0, 2.0, 3.0, 1.0],
            "walls": ["1.0", "2.0", "1.0", "2.0", "1.0", "2.0", "1.0", "1.0"],
        }
    )
    table = pramopt.frequency_table(df, ["roof", "walls"])
    d = _report(df, ["roof", "walls"], _shift(table.n_cells, 0.3))
    data = _shown(d)
    roof = sorted(df["roof"].dropna().astype("int64").astype(str).unique()) + ["missing"]
    walls = sorted(df["walls"].unique())  # text stays as written: "1.0"
    T = data["transitions"]
    assert list(T["roof"].index) == roof and list(T["roof"].columns) == roof
    assert list(T["walls"].columns) == walls
    m = data["margins"]
    assert list(m[m["variable"] == "roof"]["category"]) == roof
    for cell in list(data["flows"]["from"]) + list(data["flows"]["to"]):
        value = cell.split(", ")[0]
        assert value in roof, cell
    fig = transitions_figure(T)
    _drawn(fig)
    ax = next(a for a in fig.axes if a.get_title() == "roof")
    assert [t for _, t in _ticks(ax.xaxis)] == roof
    assert "1.0 |" not in render_markdown(d).split("## Transitions")[1].split("### walls")[0]


def _shares(table, P: np.ndarray, q: str) -> pd.Series:
    """(category a, category b) -> the share of a's records released as b, a != b, by pandas
    from every nonzero entry of P."""
    cells = table.cells()
    m, k = np.nonzero(P)
    flows = pd.DataFrame(
        {
            "from": cells[q].to_numpy()[m],
            "to": cells[q].to_numpy()[k],
            "records": np.asarray(table.counts, dtype=float)[m] * P[m, k],
        }
    )
    flows = flows[flows["from"] != flows["to"]]
    per = pd.Series(np.asarray(table.counts, dtype=float)).groupby(cells[q].to_numpy()).sum()
    s = flows.groupby(["from", "to"])["records"].sum()
    return s / per[s.index.get_level_values(0)].to_numpy()


def test_round_off_is_blank_and_out_of_the_colour_scale():
    df = pd.DataFrame({"a": list("xxxxyyyzzz"), "b": list("pqpqpqpqpq")})
    table = pramopt.frequency_table(df, ["a", "b"])
    clean = _shift(table.n_cells, 0.1)
    P = clean.copy()
    for (m, k), v in {(0, 3): 2e-10, (2, 0): 3e-09}.items():  # solver round-off
        P[m, k] += v
        P[m, m] -= v
    d = _report(df, ["a", "b"], P)
    data = _shown(d)
    for q in ("a", "b"):
        real = _shares(table, clean, q)
        T = data["transitions"][q]
        shown = {(a, b): T.loc[a, b] for a in T.index for b in T.columns if a != b and T.loc[a, b]}
        assert set(shown) == set(real.index), q  # the round-off moves are 0
        for key, v in real.items():
            assert shown[key] == pytest.approx(v, rel=1e-6)
    md = render_markdown(d)
    assert not SCIENTIFIC.search(md.split("## Transitions")[1].split("## Reduction")[0])
    assert f"{100 * NEGLIGIBLE:g}%" in md and f"{100 * NEGLIGIBLE:g}%" in render_html(d)
    assert (data["flows"]["expected records"] >= NEGLIGIBLE).all()
    smallest = min(_shares(table, clean, q).min() for q in ("a", "b"))
    # drawn from the report's tables, and from the exact ones (round-off included)
    for T in (data["transitions"], variable_transitions(sp.csr_array(P), table)):
        fig = transitions_figure(T)
        img = next(ax for ax in fig.axes if ax.get_title() == "a").get_images()[0]
        assert img.norm.vmin == pytest.approx(smallest, rel=1e-6)


def _inside(box, points) -> bool:
    return bool(
        (
            (points[:, 0] > box.x0)
            & (points[:, 0] < box.x1)
            & (points[:, 1] > box.y0)
            & (points[:, 1] < box.y1)
        ).any()
    )


def _legends_clear(fig) -> None:
    renderer = _drawn(fig)
    legends = [leg for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes)] if leg]
    assert legends
    for leg in legends:
        box = leg.get_window_extent(renderer)
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            # off the plotting area altogether: whatever the data, nothing is under it
            assert not box.overlaps(ax.bbox), ax.get_title()
            texts = [t for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label]
            for t in texts:
                if t.get_visible() and t.get_text():
                    assert not box.overlaps(t.get_window_extent(renderer)), t.get_text()
            for patch in ax.patches:  # bars
                assert not box.overlaps(patch.get_window_extent(renderer))
            for coll in ax.collections:  # scatter points
                pts = coll.get_offset_transform().transform(coll.get_offsets())
                assert not _inside(box, pts)


def test_legends_cover_neither_data_nor_ticks():
    res = pramopt.design(pramopt.example_data(), list(EXAMPLE_QI), 0.1)
    _legends_clear(change_vs_frequency_figure(res.matrix.diagonal(), res.table, gamma=0.95))
    data = _shown(from_result(res))
    _legends_clear(variables_figure(data["change_rates"], data["margins"]))
    # categories of equal size: bars of one height leave a legend inside a panel no room
    df = pd.DataFrame({"sex": [1, 2] * 60, "region": [1, 2, 3] * 40})
    d = _report(df, ["sex", "region"], _shift(6, 0.2))
    data = _shown(d)
    _legends_clear(variables_figure(data["change_rates"], data["margins"]))


def _replacement_like():
    """One cell of 40 records moving 3 of them to the next cell, and 30 unique records each
    sending 0.0024 of itself to 30 cells alike: a replacement design's many equal flows."""
    rng = np.random.default_rng(2)
    df = pd.DataFrame(
        {"a": ["big"] * 40 + [f"u{i:02d}" for i in range(30)], "b": rng.choice(["p", "q"], 70)}
    )
    df.loc[:39, "b"] = "p"
    table = pramopt.frequency_table(df, ["a", "b"])
    K, u = table.n_cells, np.asarray(table.counts)
    P = np.eye(K)
    big = int(np.argmax(u))
    P[big, big], P[big, (big + 1) % K] = 1 - 3 / 40, 3 / 40
    for m in np.flatnonzero(u == 1):
        targets = [k for k in range(K) if k != m][:30]
        P[m, targets] = 0.0024 * (1 + 1e-13 * rng.standard_normal(30))  # equal but for round-off
        P[m, m] = 1 - P[m, targets].sum()
    return df, table, P


def test_flows_of_one_size_are_one_line_that_counts_them(flow_chunk):
    df, table, P = _replacement_like()
    f = top_flows(sp.csr_array(P), table)
    u = np.asarray(table.counts, dtype=float)
    flow = u[:, None] * P
    np.fill_diagonal(flow, 0)
    sizes = pd.Series(np.round(flow[flow > 0], 12)).value_counts().sort_index(ascending=False)
    assert list(f["flows of this size"]) == list(sizes.to_numpy())
    np.testing.assert_allclose(f["expected records"], sizes.index.to_numpy(), rtol=1e-9)
    assert len(f) == 2 and list(f["flows of this size"]) == [1, 30 * 30]
    # 0.99996 and 1 are one size to three digits (the rounding carries into the exponent)
    df = pd.DataFrame({"a": ["p", "q", "r"]})
    P = np.array([[4e-5, 0.99996, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    f = top_flows(sp.csr_array(P), pramopt.frequency_table(df, ["a"]))
    assert list(f["flows of this size"]) == [2] and list(f["to"]) == ["q"]


def test_changed_together_is_the_brute_force_sum_per_set_of_variables(flow_chunk):
    df, table, P = _replacement_like()
    got = changed_together(sp.csr_array(P), table, n=100)
    cells = table.cells().to_numpy()
    u = np.asarray(table.counts, dtype=float)
    rows = []
    for m in range(len(u)):
        for k in range(len(u)):
            if P[m, k] > 0 and m != k:
                diff = [q for q, a, b in zip(table.qi, cells[m], cells[k]) if a != b]
                rows.append((", ".join(diff), u[m] * P[m, k]))
    want = (
        pd.DataFrame(rows, columns=["set", "records"])
        .groupby("set")["records"]
        .agg(["sum", "size"])
    )
    assert set(got["variables changed"]) == set(want.index)
    for _, row in got.iterrows():
        assert row["expected records"] == pytest.approx(want.loc[row["variables changed"], "sum"])
        assert row["flows"] == want.loc[row["variables changed"], "size"]
        assert row["share of records"] == pytest.approx(row["expected records"] / len(df))
    assert list(got["expected records"]) == sorted(got["expected records"], reverse=True)


def test_a_short_log_axis_is_labelled_with_plain_numbers_that_do_not_overprint():
    # unique and small cells only (1 to 6 records): less than a decade on the log axis
    df = pd.DataFrame({"a": np.repeat(np.arange(6), [1, 2, 3, 4, 5, 6])})
    table = pramopt.frequency_table(df, ["a"])
    fig = change_vs_frequency_figure(np.full(6, 0.2), table)
    renderer = _drawn(fig)
    axis = fig.axes[1].xaxis
    labels = [t for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True) if t.get_text()]
    low, high = fig.axes[1].get_xlim()
    shown = [t for t in labels if low <= t.get_position()[0] <= high]
    assert len(shown) >= 2
    for t in shown:
        assert float(t.get_text()) == pytest.approx(t.get_position()[0])  # 3, not 3×10⁰
    assert not _overlapping([(t.get_text(), t.get_window_extent(renderer)) for t in shown])


def test_flows_each_below_round_off_still_count_in_their_set():
    # many rare cells each sending 5e-7 records to each other (a large pool): every flow is below
    # the display threshold, but together they move real records, which the table must count
    from pramopt.frequency.table import FrequencyTable

    K = 40
    codes = np.array([[i % 2, i] for i in range(K)])  # variable b differs between every pair
    table = FrequencyTable(
        qi=("a", "b"),
        categories=(pd.Index([0, 1]), pd.Index(range(K))),
        codes=codes,
        counts=np.ones(K, dtype=np.int64),
    )
    tiny = 5e-7
    P = np.full((K, K), tiny)
    np.fill_diagonal(P, 1.0 - tiny * (K - 1))
    got = changed_together(sp.csr_array(P), table, n=100)
    total = got["expected records"].sum()
    assert total == pytest.approx(K * (K - 1) * tiny)  # 7.8e-4 records in all, none left out
