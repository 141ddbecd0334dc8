"""The price of a design: the share of records it changes, the least any design could, and the
figures of a heavy perturbation, each checked against a computation of its own."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from test_cli import run_main

import pramopt
from benchmarks.census_data import register_data
from pramopt.example import EXAMPLE_QI
from pramopt.price import HEAVY_SHARE, design_price
from pramopt.report import from_result, render_html, render_markdown

ALPHA = 0.1


@pytest.fixture(scope="module")
def mild():
    """The built-in example: a fraction of a percent of the records change."""
    data = pramopt.example_data()
    return data, pramopt.design(data, list(EXAMPLE_QI), alpha=ALPHA)


@pytest.fixture(scope="module")
def heavy():
    """A small register: four keys of 182 x 2 x 60 x 4 categories, nearly every cell unique."""
    data = register_data(300, seed=1)
    return data, pramopt.design(data, list(data.columns), alpha=ALPHA)


CASES = ["mild", "heavy"]


def brute_force_variable_changes(res) -> dict:
    """sum over every (m, k) of U0(m) P[m, k] [codes[m, j] != codes[k, j]], from the dense P."""
    P, codes, counts = res.to_dense(), res.table.codes, res.counts
    K, d = codes.shape
    out = np.zeros(d)
    for m in range(K):
        for k in range(K):
            for j in range(d):
                if codes[m, j] != codes[k, j]:
                    out[j] += counts[m] * P[m, k]
    return dict(zip(res.qi, out))


@pytest.mark.parametrize("case", CASES)
def test_changes_by_variable_match_a_dense_brute_force(case, request):
    _, res = request.getfixturevalue(case)
    expected = brute_force_variable_changes(res)
    got = dict(res.price().variables)
    assert list(got) == list(res.qi)
    for v in res.qi:
        assert got[v] == pytest.approx(expected[v], rel=1e-9, abs=1e-9), v
    assert max(expected.values()) > 0


@pytest.mark.parametrize("case", CASES)
def test_binding_combinations_match_a_pandas_groupby(case, request):
    data, res = request.getfixturevalue(case)
    price = res.price()
    got = dict(price.combinations)
    assert set(got) == set(res.combinations)
    for combo in res.combinations:
        sizes = data.groupby(list(combo), dropna=False).size()
        assert got[combo] == int(sizes[sizes < 1 / ALPHA].sum()), combo
    # most first, and the top three are the three largest
    counts = [r for _, r in price.combinations]
    assert counts == sorted(counts, reverse=True)
    assert [r for _, r in price.top_combinations] == [r for r in counts if r > 0][:3]


@pytest.mark.parametrize("case", CASES)
def test_share_is_the_expected_changes_over_n(case, request):
    data, res = request.getfixturevalue(case)
    P, counts = res.to_dense(), res.counts
    expected = float(np.sum(counts * (1 - np.diag(P)))) / len(data)
    price = res.price()
    assert price.share == pytest.approx(expected, rel=1e-12)
    assert price.n == len(data)
    assert price.minimum_changes == res.details["expected_changes_lower_bound"]
    assert price.minimum_share == pytest.approx(price.minimum_changes / len(data))
    assert price.minimum_changes <= price.changes


def test_heavy_flag_above_a_quarter_of_the_records(mild, heavy):
    _, m = mild
    _, h = heavy
    assert m.price().share < 0.05 and not m.price().heavy
    assert h.price().share > 0.8 and h.price().heavy
    assert m.figures()["heavy_perturbation"] is False
    assert h.figures()["heavy_perturbation"] is True
    # the threshold itself: just above and at a quarter of the records
    n = h.n
    idx = h.combination_indices
    above = design_price(h.matrix, h.table, idx, ALPHA, changes=HEAVY_SHARE * n + 0.5)
    at = design_price(h.matrix, h.table, idx, ALPHA, changes=HEAVY_SHARE * n)
    assert above.heavy and not at.heavy


def sentence_numbers(res):
    """The sentence's figures, computed here: the share and count changed, and the bound."""
    n = res.n
    changed = float(np.sum(res.counts * (1 - res.matrix.diagonal())))
    bound = res.details["expected_changes_lower_bound"]
    return n, changed, bound


def test_the_sentence_opens_the_summary_with_the_figures(heavy):
    _, res = heavy
    n, changed, bound = sentence_numbers(res)
    lines = res.summary().splitlines()
    first = lines[1]
    assert first == "  " + res.price().sentence()
    assert f"{100 * changed / n:.1f}% of records ({round(changed):,} of {n:,})" in first
    assert "no design meeting C1 with these keys, categories and alpha changes fewer than" in first
    assert f"({math.floor(bound):,})" in first
    assert lines[2].startswith("  HEAVY PERTURBATION: more than 25% of records")


def test_heavy_summary_names_variables_combinations_and_the_way_out(heavy):
    data, res = heavy
    s = res.summary()
    expected = brute_force_variable_changes(res)
    worst = max(expected, key=expected.get)
    line = next(ln for ln in s.splitlines() if "Variables changing most" in ln)
    # the variables in order of their changes, the first with its count
    order = sorted(expected, key=lambda v: -expected[v])
    assert [line.index(f" {v} ") for v in order] == sorted(line.index(f" {v} ") for v in order)
    assert f"{worst} {round(expected[worst]):,} ({100 * expected[worst] / len(data):.1f}%)" in line
    line = next(ln for ln in s.splitlines() if "Combinations binding most" in ln)
    sizes = {}
    for c in res.combinations:
        per_group = data.groupby(list(c)).size()
        sizes[c] = int(per_group[per_group < 1 / ALPHA].sum())
    top = sorted(sizes, key=lambda c: -sizes[c])[:3]
    for c in top:
        assert f"{{{', '.join(c)}}} {sizes[c]:,} ({100 * sizes[c] / len(data):.1f}%)" in line
    assert "see `pramopt advise`" in s


def test_a_mild_design_has_the_sentence_and_no_mark(mild):
    _, res = mild
    lines = res.summary().splitlines()
    n, changed, _ = sentence_numbers(res)
    assert lines[1].startswith(f"  {100 * changed / n:.2f}% of records ({changed:.2g} of {n:,})")
    assert "HEAVY" not in res.summary() and "pramopt advise" not in res.summary()
    md = render_markdown(from_result(res))
    assert res.price().sentence() in md and "Heavy perturbation" not in md


def test_unknown_and_partial_bounds_are_said_as_such(heavy):
    _, res = heavy
    details = {k: v for k, v in res.details.items() if k != "expected_changes_lower_bound"}
    unknown = dataclasses.replace(res, details=details)
    assert unknown.price().minimum_changes is None and unknown.price().minimum_share is None
    assert "must change is unknown" in unknown.summary().splitlines()[1]
    assert unknown.figures()["changed_share_lower_bound"] is None
    partial = dataclasses.replace(res, details={**res.details, "lower_bound_combinations": 2})
    assert "a bound from the rows of 2 of 4 combinations" in partial.price().sentence()
    fixed = dataclasses.replace(res, params={**res.params, "fixed": ["sex"]})
    assert "alpha and options (fixed)" in fixed.price().sentence()


def test_cli_report_and_design_file(heavy, tmp_path):
    data, res = heavy
    csv = tmp_path / "register.csv"
    data.to_csv(csv, index=False)
    out = tmp_path / "d"
    code, stdout, _ = run_main(
        "design", "--data", csv, "--qi", ",".join(data.columns), "--alpha", ALPHA, "--out", out
    )
    assert code == 0
    summary = stdout[stdout.index("pramopt design: success") :].splitlines()
    sentence = summary[1].strip()
    assert re.match(r"\d+\.\d% of records \([\d,]+ of 300\) are expected to change; ", sentence)
    assert summary[2].startswith("  HEAVY PERTURBATION")
    md = (out / "report.md").read_text(encoding="utf-8").splitlines()
    # title, status, then the sentence and the mark before anything else
    assert md[2] == "**Status: success**" and md[4] == sentence
    assert md[6].startswith("**Heavy perturbation:** more than 25% of records")
    assert md[8].startswith("* Variables changing most") and "`pramopt advise`" in md[10]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.index("Heavy perturbation") < html.index("<h2>")
    assert "<code>pramopt advise</code>" in html
    # design.json: the scalars, which a loaded design computes again from its matrix
    fig = json.loads((out / "design.json").read_text(encoding="utf-8"))["figures"]
    back = pramopt.load_design(out)
    share = float(np.sum(back.counts * (1 - back.matrix.diagonal()))) / len(data)
    assert fig["heavy_perturbation"] is True and back.price().heavy
    assert fig["changed_share"] == pytest.approx(share, rel=1e-12)
    assert back.price().share == fig["changed_share"]
    assert back.price().minimum_share is not None
    assert fig["changed_share_lower_bound"] == back.price().minimum_share
    assert {**back.figures(), "gamma": back.gamma} == pytest.approx(fig, nan_ok=True)


def test_html_report_has_the_sentence_on_top(mild):
    _, res = mild
    html = render_html(from_result(res))
    top = html[: html.index("<h2>")]
    assert "of records (" in top and "class='heavy'" not in top


def test_as_dict_is_plain_json(heavy):
    _, res = heavy
    d = json.loads(json.dumps(res.price().as_dict()))
    assert d["heavy"] is True and d["n"] == res.n
    assert list(d["variables"]) == list(res.qi)
    assert pd.Series(d["variables"]).sum() >= res.price().changes - 1e-9


def test_percent_rounds_a_lower_bound_down_and_never_claims_all():
    from pramopt.price import _percent

    assert _percent(1235, 10000, down=True) == "12.3%"  # a design at 12.36% is not below it
    assert _percent(1235, 10000) == "12.4%"
    assert _percent(1999, 2000) == "99.9%" and _percent(2000, 2000) == "100.0%"
