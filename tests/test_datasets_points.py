"""User points loader: real Rome node coordinates (../shared/data, skipped when absent), vector
tables, outputs and cost files, merging of identical points, and a clear error for every malformed input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flows.cli import main
from mdp_core.errors import InputError
from mdp_core.problem.datasets import registry
from mdp_core.problem.datasets.points import points
from mdp_core.problem.io import read_instance, write_instance
from mdp_core.runtime.files import file_sha256

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ROME_FULL = DATA / "rome_full" / "nodes.csv"


def hav_km(lat1, lon1, lat2, lon2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(h))


@pytest.mark.skipif(not ROME_FULL.is_file(), reason="shared Rome data ../shared/data/rome_full absent")
def test_rome_nodes_as_latlon_points(tmp_path):
    nodes = pd.read_csv(ROME_FULL, usecols=["osmid", "y", "x"]).sample(400, random_state=1)
    table = pd.DataFrame(
        {"id": nodes["osmid"], "lat": nodes["y"], "lon": nodes["x"], "weight": np.arange(1, 401, dtype=float)}
    )
    table.to_parquet(tmp_path / "pts.parquet")
    inst = points(path=str(tmp_path / "pts.parquet"), n_outputs=50, eta=2.0, epsilon=10, seed=0)
    assert inst.metric == "haversine" and inst.distance_unit == "km"
    assert (inst.n_records, inst.n_outputs) == (400, 50)
    np.testing.assert_allclose(inst.prior, table["weight"] / table["weight"].sum())
    rec = inst.records
    assert "id" not in rec.columns  # the file's ids are never kept (published ids are generated: issue 49)
    for e in range(0, inst.n_edges, max(1, inst.n_edges // 25)):
        i, j = inst.edges[e]
        assert inst.distances[e] == pytest.approx(hav_km(rec.lat[i], rec.lon[i], rec.lat[j], rec.lon[j]), rel=1e-9)
    out = inst.outputs["record_id"].to_numpy()
    i, k = 17, 3
    assert inst.costs[i, k] == pytest.approx(hav_km(rec.lat[i], rec.lon[i], rec.lat[out[k]], rec.lon[out[k]]), rel=1e-9)
    assert inst.costs[out[k], k] == 0.0
    write_instance(inst, tmp_path / "inst")
    back = read_instance(tmp_path / "inst")
    np.testing.assert_array_equal(back.costs, inst.costs)
    np.testing.assert_array_equal(back.records["lat"], rec["lat"])
    assert back.provenance["source"]["files"][str(tmp_path / "pts.parquet")] == file_sha256(tmp_path / "pts.parquet")


def test_vector_points_outputs_and_cost_file(tmp_path):
    rng = np.random.default_rng(0)
    pts = pd.DataFrame(
        {"id": [f"p{i}" for i in range(8)], "a": rng.normal(size=8), "b": rng.normal(size=8), "label": ["x"] * 8}
    )
    pts.to_csv(tmp_path / "p.csv", index=False)
    outs = pd.DataFrame({"id": [10, 11, 12], "a": [0.0, 1.0, -1.0], "b": [0.0, 1.0, 1.0]})
    outs.to_csv(tmp_path / "o.csv", index=False)
    inst = points(path=str(tmp_path / "p.csv"), outputs=str(tmp_path / "o.csv"), eta=1.5, epsilon=2.0)
    assert inst.metric == "euclidean" and inst.n_outputs == 3
    assert list(inst.outputs.columns) == ["x0", "x1"]
    want = np.linalg.norm(pts[["a", "b"]].to_numpy()[:, None] - outs[["a", "b"]].to_numpy()[None], axis=2)
    np.testing.assert_allclose(inst.costs, want, rtol=1e-12)
    # an explicit cost table, rows in any order
    cost = pd.DataFrame(
        [(r, o, 10.0 * i + j) for i, r in enumerate(pts["id"]) for j, o in enumerate(outs["id"])],
        columns=["record_id", "output_id", "cost"],
    ).sample(frac=1, random_state=2)
    cost.to_parquet(tmp_path / "c.parquet")
    inst = points(
        path=str(tmp_path / "p.csv"), outputs=str(tmp_path / "o.csv"), costs=str(tmp_path / "c.parquet"), eta=1.5
    )
    np.testing.assert_array_equal(inst.costs, 10.0 * np.arange(8)[:, None] + np.arange(3)[None])
    write_instance(inst, tmp_path / "i")
    back = read_instance(tmp_path / "i")
    np.testing.assert_array_equal(back.output_points(), outs[["a", "b"]].to_numpy())
    assert "id" not in back.records.columns and "label" not in back.records.columns
    # explicit column choice
    one = points(path=str(tmp_path / "p.csv"), columns="a", eta=1.0)
    assert one.records.filter(regex=r"^x\d").shape[1] == 1


def test_identical_points_are_merged(tmp_path):
    pd.DataFrame({"x": [0.0, 0.0, 3.0], "y": [0.0, 0.0, 0.0], "weight": [1.0, 3.0, 4.0]}).to_csv(
        tmp_path / "p.csv", index=False
    )
    pd.DataFrame(
        {"record_id": [0, 0, 0, 1, 1, 1, 2, 2, 2], "output_id": [0, 1, 2] * 3, "cost": [0, 4, 8, 4, 8, 12, 1, 1, 1]}
    ).to_csv(tmp_path / "c.csv", index=False)
    inst = points(path=str(tmp_path / "p.csv"), costs=str(tmp_path / "c.csv"), eta=5.0)
    assert inst.n_records == 2 and inst.n_outputs == 2
    np.testing.assert_allclose(inst.prior, [0.5, 0.5])
    assert inst.records["n_merged"].tolist() == [2, 1]
    # record rows: weighted mean (1:3); output columns 0 and 1 merged: plain mean
    np.testing.assert_allclose(
        inst.costs, [[(0.25 * 0 + 0.75 * 4 + 0.25 * 4 + 0.75 * 8) / 2, 0.25 * 8 + 0.75 * 12], [1, 1]]
    )


BAD = {
    "missing lon": ("lat,weight\n41.9,1\n", r"has 'lat' but not 'lon'"),
    "nan": ("lat,lon\n41.9,12.5\n,12.4\n", r"column 'lat' has 1 row\(s\) with NaN"),
    "text in coords": ("x,y\n1,2\nabc,3\n", r"column 'x' mixes numbers and text"),
    "duplicate ids": ("id,lat,lon\n7,41.9,12.5\n7,41.8,12.4\n", r"duplicate id\(s\) \[7\]"),
    "lat range": ("lat,lon\n91,12.5\n41.8,12.4\n", "latitude must be in"),
    "zero weight": ("lat,lon,weight\n41.9,12.5,0\n41.8,12.4,0\n", "sums to zero"),
    "negative weight": ("lat,lon,weight\n41.9,12.5,-1\n41.8,12.4,2\n", "negative"),
    "no rows": ("lat,lon\n", "no rows"),
    "no coordinates": ("id,weight\n1,1\n", "no lat/lon columns and no numeric"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_points_raise_and_write_nothing(tmp_path, case, capsys):
    body, msg = BAD[case]
    (tmp_path / "p.csv").write_text(body)
    with pytest.raises(InputError, match=msg):
        points(path=str(tmp_path / "p.csv"))
    out = tmp_path / "inst"
    assert main(["export", "--dataset", "points", "--path", str(tmp_path / "p.csv"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mdp-release: error:")
    assert not out.exists()


def test_file_errors(tmp_path):
    (tmp_path / "p.csv").write_text("x,y\n0,0\n1,0\n")
    with pytest.raises(InputError, match="no such file"):
        points(path=str(tmp_path / "none.csv"))
    (tmp_path / "p.json").write_text("{}")
    with pytest.raises(InputError, match="unsupported"):
        points(path=str(tmp_path / "p.json"))
    (tmp_path / "p.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read"):
        points(path=str(tmp_path / "p.parquet"))
    (tmp_path / "c.csv").write_text("record_id,output_id,cost\n0,0,1\n0,1,2\n1,0,3\n")
    with pytest.raises(InputError, match="needs every record x output pair"):
        points(path=str(tmp_path / "p.csv"), costs=str(tmp_path / "c.csv"))
    (tmp_path / "c.csv").write_text("record_id,output_id,cost\n0,0,1\n0,1,2\n1,0,3\n1,0,3\n")
    with pytest.raises(InputError, match="duplicate"):
        points(path=str(tmp_path / "p.csv"), costs=str(tmp_path / "c.csv"))
    (tmp_path / "c.csv").write_text("record_id,output_id,cost\n0,0,1\n0,1,2\n1,0,3\n5,1,3\n")
    with pytest.raises(InputError, match=r"unknown record_id value\(s\) \[5\]"):
        points(path=str(tmp_path / "p.csv"), costs=str(tmp_path / "c.csv"))
    (tmp_path / "c.csv").write_text("record_id,output_id,price\n0,0,1\n")
    with pytest.raises(InputError, match="missing column 'cost'"):
        points(path=str(tmp_path / "p.csv"), costs=str(tmp_path / "c.csv"))
    (tmp_path / "o.csv").write_text("x\n0\n")
    with pytest.raises(InputError, match=r"missing column\(s\) \['y'\]"):
        points(path=str(tmp_path / "p.csv"), outputs=str(tmp_path / "o.csv"))
    with pytest.raises(InputError, match="not both"):
        points(path=str(tmp_path / "p.csv"), outputs=str(tmp_path / "o.csv"), n_outputs=1)
    (tmp_path / "ll.csv").write_text("lat,lon\n41.9,12.5\n")
    with pytest.raises(InputError, match="need lat and lon"):
        points(path=str(tmp_path / "ll.csv"), outputs=str(tmp_path / "o.csv"))


def test_registry_input_files(tmp_path):
    (tmp_path / "p.csv").write_text("x,y\n0,0\n1,0\n")
    assert registry.input_files("points", {"path": str(tmp_path / "p.csv")}) == [tmp_path / "p.csv"]
    with pytest.raises(InputError, match="missing required parameter"):
        registry.load("points", {})
