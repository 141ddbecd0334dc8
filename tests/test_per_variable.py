"""One matrix per variable (sdcMicro's pram(), mu-ARGUS) combined over the product space, as released.

Checked against the dense Kronecker product measured by the joint ``assess`` and a brute-force C1
written from the paper's equation (1) over every released combination; the matrices are sdcMicro's
own for testdata's roof and walls, as R 4.2.2 computed them (tests/test_sdcmicro_reference.py).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from test_sdcmicro_reference import CASES

from pramopt import assess
from pramopt.baselines.product_space import assess_per_variable
from pramopt.cli import main
from pramopt.errors import InvalidParameterError
from pramopt.report import variable_transitions

ROOF = pd.DataFrame(
    np.array(CASES["roof"][1]), index=["2", "4", "5", "6", "9"], columns=["2", "4", "5", "6", "9"]
)
WALLS = pd.DataFrame(np.array(CASES["walls"][1]), index=["2", "3", "9"], columns=["2", "3", "9"])
QI = ["roof", "walls", "sex"]


@pytest.fixture(scope="module")
def data():
    # roof never 9 in the data: the matrix adds a released category absent from the data
    rng = np.random.default_rng(3)
    n = 150
    return pd.DataFrame(
        {
            "roof": rng.choice(["2", "4", "5", "6"], n, p=[0.3, 0.6, 0.05, 0.05]),
            "walls": rng.choice(["2", "3", "9"], n, p=[0.3, 0.65, 0.05]),
            "sex": rng.choice(["1", "2"], n),
            "other": np.arange(n),
        }
    )


def dense_product(matrices):
    """The product space (every combination, last variable fastest) and kron of the matrices."""
    labels = [list(m.index) for m in matrices]
    cells = pd.DataFrame(list(itertools.product(*labels)), columns=QI)
    P = matrices[0].to_numpy()
    for m in matrices[1:]:
        P = np.kron(P, m.to_numpy())
    return cells, P


def brute_c1(P, cells, data, combos):
    """max over present m, π, k0 of P(m -> k0) / sum_l U0(l) P(l -> k0) (Cator et al., eq. (1)), loops only."""
    keys = [tuple(r) for r in cells.itertuples(index=False)]
    U0 = np.array(
        [((data[QI] == pd.Series(k, index=QI)).all(axis=1)).sum() for k in keys], dtype=float
    )
    worst = 0.0
    for pi in combos:
        for k0 in {tuple(k[i] for i in pi) for k in keys}:
            into = np.array(
                [
                    sum(P[m, c] for c, k in enumerate(keys) if tuple(k[i] for i in pi) == k0)
                    for m in range(len(keys))
                ]
            )
            den = U0 @ into
            for m in np.flatnonzero(U0):
                worst = max(worst, into[m] / den)
    return worst, U0


def test_per_variable_matrices_are_the_dense_kronecker_product_as_released(data):
    shuffled = WALLS.loc[:, ["9", "2", "3"]]  # columns matched by label, not position
    sex = pd.DataFrame(np.eye(2), index=["1", "2"], columns=["1", "2"])  # not given: unchanged
    a = assess_per_variable(
        data, {"roof": ROOF, "walls": shuffled}, QI, combination_size=2, alpha=0.1
    )
    cells, P = dense_product([ROOF, WALLS, sex])
    ref = assess(data, P, qi=QI, cells=cells, combination_size=2, alpha=0.1)
    assert a.n_cells == 5 * 3 * 2 == ref.n_cells and a.n_present == ref.n_present
    for f in ("max_risk", "expected_changes", "loss", "invariance_error", "condition_number", "k"):
        assert getattr(a, f) == pytest.approx(getattr(ref, f), rel=1e-9), f
    assert a.epsilon == ref.epsilon == np.inf  # sex is released unchanged: a zero next to a one
    combos = list(itertools.combinations(range(3), 2))
    risk, U0 = brute_c1(P, cells, data, combos)
    assert a.max_risk == pytest.approx(risk, rel=1e-12)
    absent = U0 == 0
    assert a.released_absent == pytest.approx(
        (U0 @ P[:, absent].sum(axis=1)) / len(data), rel=1e-12
    )
    assert a.released_absent > 0


def test_epsilon_and_k_of_full_matrices_are_the_dense_ones(data):
    full = {
        "roof": ROOF,
        "walls": WALLS,
        "sex": pd.DataFrame([[0.9, 0.1], [0.2, 0.8]], index=["1", "2"], columns=["1", "2"]),
    }
    a = assess_per_variable(data, full, QI)
    cells, P = dense_product([ROOF, WALLS, full["sex"]])
    ref = assess(data, P, qi=QI, cells=cells)
    assert np.isfinite(a.epsilon) and a.epsilon == pytest.approx(ref.epsilon, rel=1e-12)
    assert a.k > 1 and a.k == pytest.approx(ref.k, rel=1e-9)


def test_refusals_name_the_matrix_and_the_categories(data):
    with pytest.raises(
        InvalidParameterError, match=r"matrices\['walls'\].*every category of 'walls'.*'9'"
    ):
        no9 = pd.DataFrame([[0.9, 0.1], [0.1, 0.9]], index=["2", "3"], columns=["2", "3"])
        assess_per_variable(data, {"walls": no9}, QI)
    with pytest.raises(InvalidParameterError, match="must name identifying variables"):
        assess_per_variable(data, {"age": WALLS}, QI)


def run_main(*argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_reads_r_write_csv_per_variable_and_reports_the_product(data, tmp_path, capsys):
    data.to_csv(tmp_path / "data.csv", index=False)
    ROOF.to_csv(
        tmp_path / "Mroof.csv"
    )  # R's write.csv layout: an empty first header over the row names
    WALLS.loc[:, ["3", "9", "2"]].to_csv(tmp_path / "Mwalls.csv")
    assert open(tmp_path / "Mroof.csv").readline().startswith(",2,4")
    code, out, err = run_main(
        "assess",
        "--matrix",
        f"roof={tmp_path / 'Mroof.csv'}",
        "--matrix",
        f"walls={tmp_path / 'Mwalls.csv'}",
        "--data",
        tmp_path / "data.csv",
        "--qi",
        ",".join(QI),
        "--json",
        "--out",
        tmp_path / "rep",
        capsys=capsys,
    )
    got = json.loads(out)
    ref = assess_per_variable(data, {"roof": ROOF, "walls": WALLS}, QI, alpha=0.1)
    assert code == (0 if ref.meets_c1 else 1), err
    for f in ("max_risk", "expected_changes", "loss", "released_absent", "n_cells"):
        assert got[f] == pytest.approx(getattr(ref, f), rel=1e-12), f
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "released as absent combinations" in html
    md = (tmp_path / "rep" / "report.md").read_text()
    after9 = float(
        next(line for line in md.splitlines() if line.startswith("| roof | 9 | 0 |")).split("|")[4]
    )
    roof = data["roof"].value_counts()
    assert after9 == pytest.approx(
        sum(roof[c] * ROOF.loc[c, "9"] for c in roof.index), rel=1e-5
    )  # 9: absent, released


def test_report_transitions_of_a_product_are_the_variables_matrices(data):
    import scipy.sparse as sp

    from pramopt.baselines.product_space import (
        per_variable_matrices,
        product_space_codes,
        released_rows,
    )
    from pramopt.frequency.table import frequency_table

    table = frequency_table(data, QI)
    mats, extras = per_variable_matrices(table, {"roof": ROOF, "walls": WALLS})
    cols = product_space_codes([M.shape[0] for M in mats])
    T = variable_transitions(
        sp.csr_array(released_rows(table.codes, mats, cols)), table, col_codes=cols
    )
    np.testing.assert_allclose(
        T["roof"].to_numpy(), ROOF.iloc[:4].to_numpy(), rtol=1e-12
    )  # rows: roof in the data
    np.testing.assert_allclose(T["walls"].to_numpy(), WALLS.to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(T["sex"].to_numpy(), np.eye(2))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--matrix", "roof=a.csv", "--matrix", "m.csv"], "must be VAR=FILE for every matrix"),
        (["--matrix", "roof=a.csv", "--matrix", "roof=b.csv"], "names each variable once"),
        (["--matrix", "a.csv", "--matrix", "b.csv"], "give one matrix file, or one VAR=FILE"),
    ],
)
def test_cli_refuses_mixed_or_repeated_matrices(argv, message, tmp_path, capsys, data):
    data.to_csv(tmp_path / "data.csv", index=False)
    code, out, err = run_main(
        "assess", *argv, "--data", tmp_path / "data.csv", "--qi", ",".join(QI), capsys=capsys
    )
    assert code == 2 and message in err


def test_cli_matches_a_missing_value_written_na_by_r(tmp_path, capsys):
    """walls has missing values; R's write.csv writes its matrix's row and column for them as NA.
    The labels stay the text written ('2', not 2.0), so every category of the data has its row,
    and the figures are the library's on the same matrix with NaN labels."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame(
        {
            "roof": rng.choice(["2", "4"], 150),
            "walls": rng.choice(["2", "3", None], 150, p=[0.3, 0.6, 0.1]),
            "sex": rng.choice(["1", "2"], 150),
        }
    )
    df.to_csv(tmp_path / "data.csv", index=False)
    M = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]
    pd.DataFrame(M, index=["2", "3", "NA"], columns=["2", "3", "NA"]).to_csv(
        tmp_path / "Mwalls.csv"
    )
    code, out, err = run_main(
        "assess",
        "--matrix",
        f"walls={tmp_path / 'Mwalls.csv'}",
        "--data",
        tmp_path / "data.csv",
        "--qi",
        "roof,walls,sex",
        "--json",
        capsys=capsys,
    )
    assert code in (0, 1) and out, err
    got = json.loads(out)
    lab = ["2", "3", np.nan]
    ref = assess_per_variable(
        df, {"walls": pd.DataFrame(M, index=lab, columns=lab)}, ["roof", "walls", "sex"]
    )
    for f in ("max_risk", "expected_changes", "loss", "n_cells"):
        assert got[f] == pytest.approx(getattr(ref, f), rel=1e-12), f
    assert got["expected_changes"] == pytest.approx(
        0.2 * 150, rel=1e-12
    )  # every record leaves with 0.2
