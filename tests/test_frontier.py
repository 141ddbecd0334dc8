"""The risk–utility frontier (pramopt.frontier, ``pramopt frontier``).

Its points are checked against separate designs and against C1 computed here from its
definition; its files are read back; bad α are refused before any work.
"""

from __future__ import annotations

import base64
import io
import itertools
import re
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest

import pramopt
from pramopt.cli import main
from pramopt.errors import CallbackError, InvalidParameterError
from pramopt.example import EXAMPLE_QI
from pramopt.verify import c1_risk

QI = list(EXAMPLE_QI)
#: IFPR cannot meet C1 at 0.02 on the example (its best risk is 0.047): a failing baseline point.
ALPHAS = (0.02, 0.2)


@pytest.fixture(scope="module")
def fr(example):
    return pramopt.frontier(example, QI, ALPHAS)


def c1_from_definition(P, df, qi, size=3) -> float:
    """Largest left-hand side of C1 (Cator et al., eq. (1)) from the records: for every present
    cell m, triple π and value k0 of π, sum_{k: k_π = k0} P_mk / sum_l U0(l) sum_{k: k_π = k0} P_lk."""
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P, dtype=float)
    cells = df[qi].drop_duplicates().sort_values(qi).itertuples(index=False, name=None)
    cells = [tuple(c) for c in cells]
    u0 = df.groupby(qi).size()
    U0 = np.array([u0[c] for c in cells], dtype=float)
    worst = 0.0
    for pi in itertools.combinations(range(len(qi)), size):
        keys = [tuple(c[i] for i in pi) for c in cells]
        for k0 in set(keys):
            inside = np.array([k == k0 for k in keys])
            mass = P[:, inside].sum(axis=1)  # P(released value of π is k0 | original m)
            worst = max(worst, float(mass.max() / (U0 @ mass)))
    return worst


def test_the_table_has_one_row_per_alpha_and_design(fr):
    pts = fr.points
    names = ["optimal", *pramopt.baselines.BASELINES]
    assert list(pts.columns[:9]) == [
        "alpha",
        "design",
        "kind",
        "status",
        "meets_c1",
        "loss",
        "expected_changes",
        "max_risk",
        "seconds",
    ]
    assert [(a, n) for a, n in zip(pts["alpha"], pts["design"])] == [
        (a, n) for a in ALPHAS for n in names
    ]
    assert fr.alphas == ALPHAS and fr.names == tuple(names)
    assert (pts["seconds"] > 0).all()


def test_the_points_equal_separate_designs(fr, example):
    # an independent computation: pramopt.design at each α, counting the data itself
    for a in ALPHAS:
        r = pramopt.design(example, QI, alpha=a)
        row = fr.points[(fr.points["alpha"] == a) & (fr.points["design"] == "optimal")].iloc[0]
        assert row["status"] == r.status.value == "success"
        assert row["loss"] == pytest.approx(r.loss, rel=1e-6)
        assert row["expected_changes"] == pytest.approx(r.expected_changes, rel=1e-6, abs=1e-9)
        # and the table says what the matrix gives: sum_m U0(m) (1 - P_mm)
        P = fr.result(a).matrix
        assert row["expected_changes"] == pytest.approx(
            float(fr.table.counts @ (1 - P.diagonal())), rel=1e-9
        )


def test_each_baseline_point_is_calibrated_alone_and_verified(fr, example):
    table = pramopt.frequency_table(example, QI)
    combos = pramopt.resolve_combinations(QI)
    for a in ALPHAS:
        for name, b in fr.baselines[a].items():
            row = fr.points[(fr.points["alpha"] == a) & (fr.points["design"] == name)].iloc[0]
            alone = pramopt.baselines.BASELINES[name].run(table, combos, a)
            assert row["loss"] == pytest.approx(alone.loss, rel=1e-9)
            risk = c1_from_definition(b.matrix, example, QI)
            assert row["max_risk"] == pytest.approx(risk, rel=1e-9)
            assert bool(row["meets_c1"]) == (risk <= a) == b.success


def test_every_point_meeting_c1_has_its_risk_at_most_alpha(fr, example):
    ok = fr.points[fr.points["meets_c1"]]
    assert len(ok) == len(fr.points) - 1  # only IFPR at 0.02 fails
    for a, name in zip(ok["alpha"], ok["design"]):
        P = fr.result(a, name).matrix
        assert c1_from_definition(P, example, QI) <= a + 1e-12
        assert (
            c1_risk(P, fr.table.codes, fr.table.counts, pramopt.resolve_combinations(QI)).max_risk
            <= a + 1e-12
        )


def test_a_baseline_that_cannot_reach_alpha_is_shown_as_failing(fr, example):
    row = fr.points[(fr.points["alpha"] == 0.02) & (fr.points["design"] == "ifpr")].iloc[0]
    assert row["status"] == "infeasible" and not row["meets_c1"]
    assert c1_from_definition(fr.result(0.02, "ifpr").matrix, example, QI) > 0.02
    assert np.isnan(fr.ratios().set_index("alpha").loc[0.02, "ifpr"])


def test_the_optimal_loss_does_not_grow_with_alpha(example):
    # C1 at α is looser than at any smaller α (nested feasible sets), so the optimal loss cannot
    # grow with α.  The designer is not proven to reach the global optimum (a diagonal floor γ,
    # a restricted support) and stops at a relative tolerance, so the property is asserted to
    # 1e-6 relative; on these data each step lowers the loss by a factor of 1.5 to 3.
    alphas = (0.03, 0.05, 0.1, 0.2, 0.3)
    f = pramopt.frontier(example, QI, alphas, baselines="none")
    loss = f.points["loss"].to_numpy()
    assert list(f.points["design"]) == ["optimal"] * len(alphas) and f.success
    assert np.all(loss[1:] <= loss[:-1] * (1 + 1e-6)), loss
    assert loss[0] > 10 * loss[-2]  # not flat: the frontier says something


def test_the_frequency_table_is_counted_once(example, monkeypatch):
    import pramopt.optimize.designer as D
    import pramopt.tradeoff as ru

    # the frontier and design() both count through the designer's table_and_combinations
    calls = []
    real = D.frequency_table
    monkeypatch.setattr(D, "frequency_table", lambda *a, **k: calls.append(1) or real(*a, **k))
    seen = []
    real_design = ru.design
    monkeypatch.setattr(
        ru, "design", lambda data, *a, **k: seen.append(data) or real_design(data, *a, **k)
    )
    f = pramopt.frontier(example, QI, (0.1, 0.2), baselines="none")
    assert len(calls) == 1 and all(d is f.table for d in seen) and len(seen) == 2


def test_progress_is_called_per_point_and_its_errors_stop_the_frontier(example):
    events = []
    pramopt.frontier(
        example,
        QI,
        (0.2,),
        baselines=["retention"],
        progress=lambda a, n, r: events.append((a, n, r is None)),
    )
    assert events == [
        (0.2, "optimal", True),
        (0.2, "optimal", False),
        (0.2, "retention", True),
        (0.2, "retention", False),
    ]

    def boom(*_):
        raise RuntimeError("stop")

    with pytest.raises(CallbackError, match="stop"):
        pramopt.frontier(example, QI, (0.2,), baselines="none", progress=boom)


@pytest.mark.parametrize(
    "alphas", [(), [0.1, 0.1], [0.0, 0.1], [0.1, 1.0], [0.1, "x"], "0.1", [np.nan], None]
)
def test_bad_alphas_are_refused_naming_alphas(example, alphas, monkeypatch):
    import pramopt.tradeoff as ru

    monkeypatch.setattr(
        ru, "design", lambda *a, **k: pytest.fail("designed before checking alphas")
    )
    with pytest.raises(InvalidParameterError, match="'alphas' parameter of frontier"):
        pramopt.frontier(example, QI, alphas)


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"alpha": 0.1}, "alphas=\\[...\\]"),
        ({"gamma": 2.0}, "'gamma'"),
        ({"baselines": "bogus"}, "'baselines'"),
        ({"baselines": ["ifpr", "ifpr"]}, "'baselines'"),
        ({"bogus": 1}, "unknown parameters"),
        ({"household": "v1"}, "'household' parameter of design is not supported by frontier"),
    ],
)
def test_bad_options_are_refused_before_any_design(example, kw, needle, monkeypatch):
    import pramopt.tradeoff as ru

    monkeypatch.setattr(
        ru, "design", lambda *a, **k: pytest.fail("designed before checking the options")
    )
    with pytest.raises(InvalidParameterError, match=needle):
        pramopt.frontier(example, QI, (0.1,), **kw)


def test_auto_leaves_the_baselines_out_of_large_tables_with_a_note(example, monkeypatch):
    import pramopt.tradeoff as ru

    monkeypatch.setattr(ru, "BASELINE_MAX_CELLS", 10)
    f = pramopt.frontier(example, QI, (0.2,))
    assert f.names == ("optimal",) and "left out" in f.notes[0]
    assert pramopt.frontier(example, QI, (0.2,), baselines=["retention"]).names == (
        "optimal",
        "retention",
    )


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_command_writes_table_figure_and_page(tmp_path, example):
    data = tmp_path / "ex.csv"
    example.to_csv(data, index=False)
    out = tmp_path / "f"
    code, stdout, err = _run(
        [
            "frontier",
            "--data",
            str(data),
            "--qi",
            ",".join(QI),
            "--alphas",
            "0.2,0.1",
            "--baselines",
            "retention,ifpr",
            "--out",
            str(out),
        ]
    )
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "frontier.csv",
        "frontier.html",
        "frontier.png",
    ]
    t = pd.read_csv(out / "frontier.csv")
    assert list(zip(t["alpha"], t["design"])) == [
        (a, n) for a in (0.1, 0.2) for n in ("optimal", "retention", "ifpr")
    ]
    r = pramopt.design(example, QI, alpha=0.2)  # the optimal row is the design of the same file
    assert t[(t.alpha == 0.2) & (t.design == "optimal")]["loss"].iloc[0] == pytest.approx(
        r.loss, rel=1e-6
    )
    png = (out / "frontier.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "frontier.html").read_text()
    embedded = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page).group(1)
    assert base64.b64decode(embedded) == png
    assert page.count("<tr>") >= 6 + 1 and "retention" in page
    # one stderr line per point, in the progress style
    assert len([line for line in err.splitlines() if "α = " in line and "loss" in line]) == 6
    # run again with --force: the frontier folder is replaced; a folder of something else is not
    again = ["frontier", "--alphas", "0.2", "--baselines", "none", "-q", "--out", str(out)]
    assert _run([*again, "--force"])[0] == 0
    assert len(pd.read_csv(out / "frontier.csv")) == 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    code, _, err = _run(["frontier", "--alphas", "0.2", "-q", "--out", str(other)])
    assert code == 2 and "not a frontier folder" in err and (other / "keep.txt").exists()


@pytest.mark.parametrize("alphas", ["", "0.1,0.1", "0.1,x", "0,0.1", "0.5,1.5", "0.1,,0.2", "abc"])
def test_the_command_refuses_bad_alphas_before_any_work(tmp_path, alphas, monkeypatch):
    import pramopt.tradeoff as ru

    monkeypatch.setattr(
        ru, "design", lambda *a, **k: pytest.fail("designed before checking --alphas")
    )
    code, _, err = _run(["frontier", "--alphas", alphas, "--out", str(tmp_path / "f")])
    assert code == 2 and "--alphas" in err and "Traceback" not in err
    assert not (tmp_path / "f").exists()


def test_a_spec_gives_the_alphas(tmp_path):
    from pathlib import Path

    spec = Path(__file__).resolve().parents[1] / "models" / "example_frontier.toml"
    s = pramopt.load_spec(spec)
    assert s.frontier["alphas"] == [0.05, 0.1, 0.2]
    text = (
        spec.read_text()
        .replace('baselines = "all"', 'baselines = "none"')
        .replace("alphas = [0.05, 0.1, 0.2]", "alphas = [0.2, 0.1]")
    )
    (tmp_path / "s.toml").write_text(text)
    code, _, err = _run(["frontier", str(tmp_path / "s.toml"), "-q", "--out", str(tmp_path / "f")])
    assert code == 0, err
    assert list(pd.read_csv(tmp_path / "f" / "frontier.csv")["alpha"]) == [0.1, 0.2]
    (tmp_path / "bad.toml").write_text(text.replace("alphas = [0.2, 0.1]", "alphas = [0.2, 2]"))
    with pytest.raises(InvalidParameterError, match=r"\[frontier\] alphas"):
        pramopt.load_spec(tmp_path / "bad.toml")


def test_options_that_restrict_or_reweight_the_optimal_design_are_noted(example):
    """max_changed_variables restricts the optimal design only (the baselines change any number of
    variables: checked here from their matrices), and change_weights makes it minimise another
    objective than the loss the points compare: both are said in the notes."""
    f = pramopt.frontier(
        example,
        QI,
        (0.2,),
        baselines=["retention"],
        max_changed_variables=2,
        change_weights={"v5": 2},
    )
    opt, base = f.result(0.2), f.result(0.2, "retention")
    codes = opt.table.codes

    def farthest(P):
        D = P.toarray()
        return max(int(np.count_nonzero(codes[k] != codes[h])) for k, h in zip(*np.nonzero(D)))

    assert opt.success and farthest(opt.matrix) <= 2 < farthest(base.matrix)
    assert any("max_changed_variables" in n for n in f.notes)
    assert any("change_weights" in n for n in f.notes)
