"""A recoding as part of the design: applied before counting, kept in design.json (guarded),
re-applied at release and estimate, shown in the report.  Released files and estimates are
checked against plain Python and pandas computations made here."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import pramopt
from pramopt.cli import main
from pramopt.errors import DesignFileError
from pramopt.recode import Recoding, write_recoding

QI = ["age", "region", "sex"]


def run_main(*argv):
    """main(argv) with stdout and stderr captured: (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def read_texts(path) -> list[list[str]]:
    """Every field of a CSV as the text written (no typing, no missing values)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def write_data(path, n: int, ages, regions, seed: int, skew: float = 0.0) -> pd.DataFrame:
    """Microdata written as text, with fields whose spelling a release must keep: income
    ('1.50', a quoted field with a comma) and a note (' x ', 'NA', empty)."""
    rng = np.random.default_rng(seed)
    w = np.arange(1, len(regions) + 1, dtype=float) ** -skew
    df = pd.DataFrame(
        {
            "age": rng.choice([str(a) for a in ages], n),
            "region": rng.choice(regions, n, p=w / w.sum()),
            "sex": rng.choice(["1", "2"], n),
            "income": [
                f"{v:.2f}" if i % 7 else f'"{v:.1f}, approx"'
                for i, v in enumerate(rng.gamma(2.0, 1.5, n))
            ],
            "note": rng.choice(["a", " x ", "NA", ""], n),
        }
    )
    lines = ["age,region,sex,income,note"] + [
        ",".join(r) for r in df.astype(str).itertuples(index=False)
    ]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return df


def band(ages, width: int) -> dict[str, str]:
    """Ages banded by ``width``, as a plain dict (the test's own mapping)."""
    return {str(a): f"{a - a % width}-{a - a % width + width - 1}" for a in ages}


@pytest.fixture(scope="module")
def identity_case(tmp_path_factory):
    """(a): a design that keeps every record (alpha 0.9, few categories after recoding)."""
    d = tmp_path_factory.mktemp("recode_identity")
    ages = range(20, 40)
    write_data(d / "data.csv", 600, ages, ["north", "east", "south", "west"], seed=1)
    mapping = {"age": band(ages, 10), "region": {"east": "east+south", "south": "east+south"}}
    write_recoding(Recoding(mapping, "ages by ten; east and south merged"), d / "recode.json")
    code, out, err = run_main(
        "design", "--data", d / "data.csv", "--qi", ",".join(QI), "--alpha", "0.9",
        "--recode", d / "recode.json", "--out", d / "design", "-q",
    )  # fmt: skip
    assert code == 0, err
    return d, mapping


def test_round_trip_through_the_cli(identity_case):
    d, mapping = identity_case
    res = pramopt.load_design(d / "design")
    assert res.success and res.expected_changes == 0  # P = I: every record keeps its cell
    assert res.recoding is not None and res.recoding.variables == mapping
    code, out, err = run_main(
        "release", "--design", d / "design", "--data", d / "data.csv", "--out", d / "rel.csv",
        "--seed", "3",
    )  # fmt: skip
    assert code == 0, err
    assert "recoded age (20 → 2 categories), region (4 → 3) before release." in out
    src, rel = read_texts(d / "data.csv"), read_texts(d / "rel.csv")
    assert rel[0] == src[0] and len(rel) == len(src)
    for a, b in zip(src[1:], rel[1:]):
        # the recoded values, mapped here with plain dicts; every other field as written
        assert b[0] == mapping["age"].get(a[0], a[0])
        assert b[1] == mapping["region"].get(a[1], a[1])
        assert b[2:] == a[2:]
    # the non-identifying fields are byte for byte the source's
    src_bytes = (d / "data.csv").read_bytes().splitlines()
    rel_bytes = (d / "rel.csv").read_bytes().splitlines()
    assert [s.split(b",", 3)[3] for s in src_bytes] == [r.split(b",", 3)[3] for r in rel_bytes]

    code, out, err = run_main(
        "estimate", "--design", d / "design", "--data", d / "rel.csv", "--out", d / "est.csv"
    )
    assert code == 0, err
    est = pd.read_csv(d / "est.csv", dtype={"age": str, "region": str, "sex": str})
    raw = pd.read_csv(d / "data.csv", dtype=str, keep_default_na=False)
    raw["age"] = raw["age"].map(mapping["age"])
    raw["region"] = raw["region"].map(lambda r: mapping["region"].get(r, r))
    want = raw.groupby(QI).size()
    got = est.set_index(QI)["estimate"]
    assert sorted(got.index) == sorted(want.index)
    np.testing.assert_allclose(got.loc[want.index].to_numpy(), want.to_numpy(), atol=1e-9)
    # estimating from the source itself: recoded first, the same counts
    code, out, err = run_main(
        "estimate", "--design", d / "design", "--data", d / "data.csv", "--out", d / "est2.csv"
    )
    assert code == 0, err
    assert pd.read_csv(d / "est2.csv")["estimate"].tolist() == est["estimate"].tolist()
    # assess reads the design's categories: the source recoded first
    code, out, err = run_main(
        "assess", "--matrix", d / "design", "--data", d / "data.csv", "--qi", ",".join(QI)
    )
    assert code == 0 and "12 present cells" in out, err


def test_report_shows_the_recoding_summarised(tmp_path):
    ages = range(0, 100)
    write_data(tmp_path / "data.csv", 3000, ages, ["n", "s"], seed=2)
    mapping = {"age": band(ages, 50)}
    write_recoding(Recoding(mapping, "two age bands"), tmp_path / "r.json")
    code, _, err = run_main(
        "design", "--data", tmp_path / "data.csv", "--qi", ",".join(QI), "--alpha", "0.9",
        "--recode", tmp_path / "r.json", "--out", tmp_path / "d", "-q",
    )  # fmt: skip
    assert code == 0, err
    md = (tmp_path / "d" / "report.md").read_text(encoding="utf-8")
    html = (tmp_path / "d" / "report.html").read_text(encoding="utf-8")
    section = md.split("## Recoding before PRAM")[1].split("\n## ")[0]
    assert "| age | 100 | 2 | 100 |" in section and "two age bands" in section
    assert "(20 of 100)" in section and "80 more" in section
    assert section.count("| 0-49 |") + section.count("| 50-99 |") == 20  # 20 examples, not 100
    assert "Recoding before PRAM" in html and "two age bands" in html


@pytest.fixture(scope="module")
def perturbing_case(tmp_path_factory):
    """(b): a design that changes records (rare cells at a low alpha)."""
    d = tmp_path_factory.mktemp("recode_perturb")
    ages = range(18, 78)
    regions = [f"r{i:02d}" for i in range(12)]
    write_data(d / "data.csv", 500, ages, regions, seed=5, skew=1.2)
    mapping = {"age": band(ages, 15), "region": {"r08": "r08+", "r09": "r08+", "r10": "r08+"}}
    write_recoding(Recoding(mapping, "ages by 15; rare regions merged"), d / "recode.json")
    code, out, err = run_main(
        "design", "--data", d / "data.csv", "--qi", ",".join(QI), "--alpha", "0.34",
        "--recode", d / "recode.json", "--out", d / "design", "-q",
    )  # fmt: skip
    assert code == 0, err
    return d, mapping


def test_a_perturbing_design_releases_recoded_categories(perturbing_case):
    d, mapping = perturbing_case
    res = pramopt.load_design(d / "design")
    assert res.success and res.expected_changes > 1
    code, out, err = run_main(
        "release", "--design", d / "design", "--data", d / "data.csv", "--out", d / "rel.csv",
        "--seed", "11",
    )  # fmt: skip
    assert code == 0, err  # the release's check of the recoded counts passed
    assert "released 500 records" in out and ": 0 changed" not in out
    src, rel = read_texts(d / "data.csv"), read_texts(d / "rel.csv")
    assert len(rel) == len(src) and rel[0] == src[0]
    source_values = {j: {r[j] for r in src[1:]} for j in (0, 1)}
    for j, q in ((0, "age"), (1, "region")):
        allowed = set(mapping[q].values()) | (source_values[j] - set(mapping[q]))
        assert {r[j] for r in rel[1:]} <= allowed, q
    assert {r[0] for r in rel[1:]} <= set(mapping["age"].values())  # every age listed
    changed = sum(
        (b[0], b[1], b[2]) != (mapping["age"][a[0]], mapping["region"].get(a[1], a[1]), a[2])
        for a, b in zip(src[1:], rel[1:])
    )
    assert changed > 0
    src_bytes = (d / "data.csv").read_bytes().splitlines()
    rel_bytes = (d / "rel.csv").read_bytes().splitlines()
    assert [s.split(b",", 3)[3] for s in src_bytes] == [r.split(b",", 3)[3] for r in rel_bytes]


def test_parquet_release_writes_recoded_columns_as_text(tmp_path):
    rng = np.random.default_rng(4)
    df = pd.DataFrame(
        {
            "age": rng.integers(20, 40, 400),
            "region": rng.choice(["n", "e", "s"], 400),
            "sex": rng.integers(1, 3, 400),
            "w": rng.normal(size=400),
        }
    )
    df.to_parquet(tmp_path / "data.parquet")
    mapping = {"age": band(range(20, 40), 10)}
    write_recoding(Recoding(mapping), tmp_path / "r.json")
    code, _, err = run_main(
        "design", "--data", tmp_path / "data.parquet", "--qi", ",".join(QI), "--alpha", "0.9",
        "--recode", tmp_path / "r.json", "--out", tmp_path / "d", "-q",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run_main(
        "release", "--design", tmp_path / "d", "--data", tmp_path / "data.parquet",
        "--out", tmp_path / "rel.parquet", "--seed", "1", "-q",
    )  # fmt: skip
    assert code == 0, err
    schema = pq.read_schema(tmp_path / "rel.parquet")
    assert str(schema.field("age").type) == "string" and str(schema.field("sex").type) == "int64"
    out = pd.read_parquet(tmp_path / "rel.parquet")
    assert out["age"].tolist() == [mapping["age"][str(a)] for a in df["age"]]
    assert out["w"].tolist() == df["w"].tolist() and out["sex"].tolist() == df["sex"].tolist()


def test_an_edited_recoding_is_detected_on_load(identity_case, tmp_path):
    d, _ = identity_case
    folder = tmp_path / "design"
    shutil.copytree(d / "design", folder)
    rec = json.loads((folder / "design.json").read_text(encoding="utf-8"))
    rec["details"]["recode"]["variables"]["age"]["25"] = "20-24"  # one mapping, nothing re-signed
    (folder / "design.json").write_text(json.dumps(rec, indent=1), encoding="utf-8")
    with pytest.raises(DesignFileError, match="was modified"):
        pramopt.load_design(folder)
    code, _, err = run_main(
        "release", "--design", folder, "--data", d / "data.csv", "--out", tmp_path / "r.csv"
    )
    assert code != 0 and "was modified" in err and not (tmp_path / "r.csv").exists()


def test_a_recoding_of_an_unknown_variable_is_refused_before_any_work(identity_case, tmp_path):
    d, _ = identity_case
    write_recoding(Recoding({"height": {"1": "low"}}), tmp_path / "bad.json")
    code, out, err = run_main(
        "design", "--data", d / "data.csv", "--qi", ",".join(QI), "--alpha", "0.9",
        "--recode", tmp_path / "bad.json", "--out", tmp_path / "d",
    )  # fmt: skip
    assert code != 0
    assert "--recode" in err and "'height'" in err and "age, region, sex" in err
    assert not (tmp_path / "d").exists() and out == ""


def test_the_python_api_releases_and_estimates_recoded(tmp_path):
    df = write_data(tmp_path / "d.csv", 400, range(30, 50), ["a", "b", "c"], seed=8)
    rec = Recoding({"age": band(range(30, 50), 5), "region": {"b": "bc", "c": "bc"}}, "bands")
    res = pramopt.design(rec.apply(df), QI, alpha=0.9)
    assert res.success and res.expected_changes == 0 and res.recoding is None
    res = dataclasses.replace(res, details={**res.details, "recode": rec.to_dict()})
    assert res.recoding == rec
    out = pramopt.release(df, res, seed=1)
    assert out["age"].tolist() == [rec.variables["age"][a] for a in df["age"]]
    assert out["region"].tolist() == [{"b": "bc", "c": "bc"}.get(r, r) for r in df["region"]]
    assert out[["sex", "income", "note"]].equals(df[["sex", "income", "note"]])
    est = pramopt.estimate(df, res).set_index(QI)["estimate"]  # recoded first
    want = out.groupby(QI).size()
    np.testing.assert_allclose(est.loc[want.index].to_numpy(), want.to_numpy())
    # a design saved and loaded keeps its recoding
    pramopt.save_design(res, tmp_path / "design")
    assert pramopt.load_design(tmp_path / "design").recoding == rec


def test_count_file_recodes_before_counting(tmp_path):
    df = write_data(tmp_path / "d.csv", 300, range(10, 30), ["a", "b"], seed=9)
    rec = Recoding({"age": band(range(10, 30), 10)})
    t = pramopt.count_file(tmp_path / "d.csv", QI, recode=rec, keys_as_text=True)
    m = rec.variables["age"]
    plain = df.assign(age=[m.get(str(v), str(v)) for v in df["age"]])  # the mapping by hand
    want = plain.groupby(QI).size().to_dict()
    assert dict(zip(map(tuple, t.cells().to_numpy()), t.counts.tolist())) == want
    with pytest.raises(pramopt.InvalidParameterError, match="recode"):
        pramopt.count_file(tmp_path / "d.csv", ["age", "sex"], recode=Recoding({"region": {}}))


def test_a_spec_names_its_recoding(tmp_path):
    write_data(tmp_path / "d.csv", 200, range(10, 30), ["a", "b"], seed=3)
    rec = Recoding({"age": band(range(10, 30), 10)})
    write_recoding(rec, tmp_path / "r.json")
    body = '[data]\npath = "d.csv"\nqi = ["age", "region", "sex"]\nrecode = "{}"\n[design]\nalpha = 0.5\n'
    (tmp_path / "s.toml").write_text(body.format("r.json"), encoding="utf-8")
    spec = pramopt.load_spec(tmp_path / "s.toml")
    assert spec.recoding() == rec
    assert set(spec.load_data()["age"]) == {"10-19", "20-29"}
    assert spec.load_data(recoded=False)["age"].nunique() == 20
    (tmp_path / "bad.toml").write_text(body.format("nope.json"), encoding="utf-8")
    with pytest.raises(pramopt.InvalidParameterError, match="recode"):
        pramopt.load_spec(tmp_path / "bad.toml")
