"""Advice on recodings: the moves tried, the bound used to rank them, the designs made."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from full_c1 import min_changes
from random_cases import brute_force_risk

import pramopt
from pramopt.advise import advise, candidate_moves
from pramopt.errors import InvalidParameterError
from pramopt.recode import Recoding


def _register(n=300, seed=2):
    """A small register extract: most cells unique at alpha 0.1."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "occ": rng.choice(40, n, p=np.r_[np.full(10, 0.06), np.full(30, 0.4 / 30)]),
            "sex": rng.integers(0, 2, n),
            "age": rng.integers(0, 12, n),
        }
    )


def test_moves_band_merge_climb_and_drop():
    df = pd.DataFrame(
        {"age": [1, 2, 3, 4, 5] * 4 + [6], "reg": ["a"] * 15 + ["b"] * 4 + ["c", "d"]}
    )
    moves = {m.name: m for m in candidate_moves(df, ["age", "reg"], 0.25,
                                                hierarchies={"reg": {"c": "north", "d": "north"}})}  # fmt: skip
    band = moves["band age by 2"].recoding.variables["age"]
    assert band == {"1": "1-2", "2": "1-2", "3": "3-4", "4": "3-4", "5": "5-6", "6": "5-6"}
    # fewer than 1/alpha = 4 records: 6 (1 record); c and d (1 each) among reg's
    assert moves["merge reg's 2 categories with < 4 records"].recoding.variables == {
        "reg": {"c": "other", "d": "other"}
    }
    assert moves["reg by its hierarchy"].recoding.variables == {"reg": {"c": "north", "d": "north"}}
    assert moves["leave age out of the identifying variables"].drop
    # text categories are not banded
    assert not any(n.startswith("band reg") for n in moves)


def test_recoding_is_checked_and_composes():
    with pytest.raises(InvalidParameterError, match="own new categories"):
        Recoding({"a": {"1": "2", "2": "3"}})
    r = Recoding({"a": {"1": "1-2", "2": "1-2"}}).then(Recoding({"a": {"1-2": "1-4", "3": "1-4"}}))
    assert r.variables["a"] == {"1": "1-4", "2": "1-4", "1-2": "1-4", "3": "1-4"}
    for a in (pd.array([1, 2, 3, 4, None], dtype="Int64"), [1.0, 2.0, 3.0, 4.0, np.nan]):
        df = pd.DataFrame({"a": a, "b": [1, 2, 3, 4, 5]})
        out = r.apply(df)  # floats read from integers with a blank are their integers' texts
        assert out["a"].tolist()[:4] == ["1-4", "1-4", "1-4", "4"] and pd.isna(out["a"].iloc[4])
        assert out["b"].tolist() == [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def advice():
    df = _register()
    return df, advise(df, ["occ", "sex", "age"], 0.1, steps=2, designs=4, target=0.05)


def test_the_ranking_bound_lies_below_every_design(advice):
    """The proven minimum that ranks an option is at most the changes of its design, which
    passes C1 (from the definition) on the recoded data."""
    df, a = advice
    assert len(a.results) >= 4
    for i, res in a.results.items():
        row = a.options.iloc[i]
        assert res.success
        assert row["bound_changes"] <= res.expected_changes + 1e-6
        qi = row["qi"].split(",")
        recoded = a.recodings[i].apply(df) if a.recodings[i] else df
        assert brute_force_risk(res, recoded, qi, {}) <= 0.1
        # variables changed per changed record, by a dense loop over every transition
        P, codes, U = res.to_dense(), res.table.codes, res.table.counts
        moved = sum(U[m] * P[m, k] * (codes[m] != codes[k]).sum() for m in range(len(U))
                    for k in range(len(U)))  # fmt: skip
        assert row["variables_per_changed_record"] == pytest.approx(
            moved / (U @ (1 - np.diag(P))), rel=1e-9
        )
    shares = a.options["bound_share"].to_numpy()
    assert np.all(np.diff(shares[~np.isnan(shares)]) >= 0)  # ranked by the bound
    assert a.options["bound_share"].iloc[0] < a.baseline["bound_share"]


def test_the_bound_is_below_the_exact_minimum_on_a_small_case():
    """On a table small enough for the dense program over every entry of P, the advice's
    bound of each option is at most the exact fewest changes of a design meeting C1."""
    df = _register(n=60, seed=5)[["occ", "sex"]]
    df["occ"] = df["occ"] % 8
    a = advise(df, ["occ", "sex"], 0.2, steps=1, designs=0, combination_size=2)
    rows = a.options[a.options["qi"] == "occ,sex"]
    assert len(rows)
    for i in rows.index[:3]:
        rec = a.recodings[i]
        t = pramopt.frequency_table(rec.apply(df) if rec else df, ["occ", "sex"])
        exact = min_changes(t, 0.2, combos=[(0, 1)])
        assert rows.at[i, "bound_changes"] <= exact + 1e-6


def test_bad_parameters_are_refused_before_any_work():
    df = _register(50)
    with pytest.raises(InvalidParameterError, match="'ordered'.*'x'"):
        advise(df, ["occ", "sex"], ordered=["x"])
    with pytest.raises(InvalidParameterError, match="'target'"):
        advise(df, ["occ", "sex"], target=1.5)


def test_advice_files_drive_a_design_and_its_release(tmp_path):
    """pramopt advise writes recoding files that pramopt design --recode applies; the release
    then holds only the recoded categories (each record's text mapped in the test)."""
    import csv
    import io
    import json
    from contextlib import redirect_stderr, redirect_stdout

    from pramopt.cli import main

    def run(*argv):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in argv])
        return code, out.getvalue(), err.getvalue()

    src = tmp_path / "reg.csv"
    _register().to_csv(src, index=False)
    code, out, err = run("advise", "--data", src, "--qi", "occ,sex,age", "--steps", 1,
                         "--designs", 1, "--out", tmp_path / "adv")  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "adv" / "advice.png").stat().st_size > 0
    table = pd.read_csv(tmp_path / "adv" / "advice.csv", dtype=str, keep_default_na=False)
    name = next(f for f in table["recode_file"] if f)
    mapping = json.loads((tmp_path / "adv" / name).read_text())["variables"]
    code, _, err = run("design", "--data", src, "--qi", "occ,sex,age", "--recode",
                       tmp_path / "adv" / name, "--out", tmp_path / "d", "-q")  # fmt: skip
    assert code == 0, err
    code, _, err = run("release", "--design", tmp_path / "d", "--data", src, "--out",
                       tmp_path / "r.csv", "--seed", 4, "-q")  # fmt: skip
    assert code == 0, err
    with open(src, newline="") as a, open(tmp_path / "r.csv", newline="") as b:
        before, after = list(csv.DictReader(a)), list(csv.DictReader(b))
    for q, m in mapping.items():
        allowed = {m.get(r[q], r[q]) for r in before}
        assert {r[q] for r in after} <= allowed
        recoded_away = set(m) - set(m.values())
        assert recoded_away and not recoded_away & {r[q] for r in after}


def test_a_variable_left_out_leaves_the_recoding_and_combinations_are_checked():
    r = Recoding({"a": {"1": "1-2", "2": "1-2"}, "b": {"x": "y"}}, "a banded; b merged")
    assert r.without("a").variables == {"b": {"x": "y"}}
    assert r.without("a").description == "b merged"
    df = _register(50)
    with pytest.raises(InvalidParameterError, match="combinations.*sexx"):
        advise(df, ["occ", "sex"], combinations=[["occ", "sexx"]])
    a = advise(df, ["occ", "sex", "age"], steps=2, designs=0, target=0.01)
    for i, rec in enumerate(a.recodings):
        kept = a.options.at[i, "qi"].split(",")
        assert set(rec.variables) <= set(kept)  # no recoding of a variable left out
