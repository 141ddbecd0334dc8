"""Reports: self-contained HTML with real PNG figures, risk tables checked against pandas."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

import pramopt
from pramopt.example import EXAMPLE_QI
from pramopt.report import from_result, render_html, render_markdown, risk_by_combination

QI = list(EXAMPLE_QI)
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def result():
    return pramopt.design(pramopt.example_data(), QI, 0.1)


@pytest.fixture(scope="module")
def html(result):
    return render_html(from_result(result, "test report"))


def test_html_is_self_contained_with_two_png_figures(html):
    # nothing fetched from elsewhere: no external scripts, styles or images
    assert not re.search(r"""(src|href)=['"]?(https?:|//|file:)""", html)
    assert "<style>" in html and "<script" not in html
    imgs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(imgs) == 2
    for b in imgs:
        png = base64.b64decode(b)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_risk_before_matches_group_sizes_and_after_meets_alpha(result):
    data = pramopt.example_data()
    df = risk_by_combination(result.matrix, result.table,
                             [tuple(QI.index(v) for v in c) for c in result.combinations], alpha=0.1)
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
    assert sum(1 for line in md.splitlines() if re.match(r"\| v\d, v\d, v\d \|", line)) == 10


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
    subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    "--window-size=1200,2000", page.as_uri()],
                   capture_output=True, timeout=60, cwd=tmp_path)
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
    caption = re.search(r"<h2>Changes against frequency</h2><figure>.*?<figcaption>(.*?)</figcaption>", html, re.S)
    assert caption is not None
    text = caption.group(1)
    assert "Figure 1 of Cator et al." in text and "expected number of changed records" in text
    assert "U0(m)(1 − P_mm)" in text and "probability that one of its records changes, 1 − P_mm" in text
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
