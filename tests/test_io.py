"""The Parquet instance / mechanism format: round trip, determinism, bad input, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mdp_core.errors import InputError, PrivacyError
from mdp_core.problem import io
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import write_mechanism


# ----------------------------------------------------------------------------- helpers
def edit_json(d: Path, **changes) -> None:
    meta = json.loads((d / "instance.json").read_text())
    meta.update(changes)
    (d / "instance.json").write_text(json.dumps(meta))


def replace_table(d: Path, name: str, table: pa.Table | pd.DataFrame) -> None:
    """Overwrite a table and re-register its sha256, so that the content checks (not the hash) fire."""
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table, preserve_index=False)
    pq.write_table(table, d / name)
    meta = json.loads((d / "instance.json").read_text())
    meta["tables"][name] = io.file_sha256(d / name)
    (d / "instance.json").write_text(json.dumps(meta))


def frame(d: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(d / name)


def rejects(d: Path, match: str) -> str:
    with pytest.raises(InputError, match=match) as info:
        io.read_instance(d)
    assert "\n" not in str(info.value)
    return str(info.value)


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


# ----------------------------------------------------------------------------- round trip
def test_round_trip(instance_dir: Path, grid_small):
    back = io.read_instance(instance_dir)
    np.testing.assert_array_equal(back.prior, grid_small.prior)
    np.testing.assert_array_equal(back.costs, grid_small.costs)
    np.testing.assert_array_equal(back.edges, grid_small.edges)
    np.testing.assert_array_equal(back.distances, grid_small.distances)
    assert (back.epsilon, back.eta, back.metric, back.distance_unit) == (10.0, 2.0, "euclidean", "km")
    pd.testing.assert_frame_equal(back.records, grid_small.records)
    pd.testing.assert_frame_equal(back.outputs, grid_small.outputs)
    assert back.provenance == grid_small.provenance
    assert io.read_instance(instance_dir, epsilon=0.5).epsilon == 0.5


def test_readable_without_the_library(instance_dir: Path, grid_small):
    """The documented schema, read with pandas / json only."""
    n, k = grid_small.n_records, grid_small.n_outputs
    rec, out = frame(instance_dir, "records.parquet"), frame(instance_dir, "outputs.parquet")
    edges, costs = frame(instance_dir, "edges.parquet"), frame(instance_dir, "costs.parquet")
    assert list(rec.columns[:2]) == ["record_id", "prior"] and rec["record_id"].dtype == np.int64
    assert rec["record_id"].tolist() == list(range(n)) and abs(rec["prior"].sum() - 1) < 1e-12
    assert out["output_id"].tolist() == list(range(k)) and "record_id" in out
    assert dict(edges.dtypes.astype(str)) == io.EDGE_SCHEMA
    assert (edges["i"] < edges["j"]).all() and (edges["distance"] <= 2.0).all()
    assert dict(costs.dtypes.astype(str)) == io.COST_SCHEMA and len(costs) == n * k
    meta = json.loads((instance_dir / "instance.json").read_text())
    for key in ("epsilon", "eta", "distance_unit", "metric", "n_records", "n_outputs", "schema_version", "tables"):
        assert key in meta
    assert set(meta["tables"]) == set(io.TABLES)
    assert meta["tables"]["costs.parquet"] == io.file_sha256(instance_dir / "costs.parquet")


def test_no_pandas_metadata_or_timestamps(instance_dir: Path):
    md = pq.read_schema(instance_dir / "records.parquet").metadata or {}
    assert b"pandas" not in md


def test_writing_twice_is_byte_identical(tmp_path: Path, grid_small):
    io.write_instance(grid_small, tmp_path / "a")
    os.utime(tmp_path, None)
    io.write_instance(grid_small, tmp_path / "b")
    for name in (*io.TABLES, "instance.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # and a re-read instance writes the same bytes again
    io.write_instance(io.read_instance(tmp_path / "a"), tmp_path / "c")
    for name in io.TABLES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes(), name


def test_optional_columns_with_strings_and_missing_values(tmp_path: Path, synth_small):
    """Optional record columns (text with a missing value, booleans) survive a write / read / write."""
    rec = synth_small.records.copy()
    rec["label"] = ["a", None] + [f"r{i}" for i in range(10)]
    rec["flag"] = np.arange(12) % 2 == 0
    inst = synth_small.replace(records=rec, provenance={"note": "ünïcode"})
    io.write_instance(inst, tmp_path / "a")
    back = io.read_instance(tmp_path / "a")
    pd.testing.assert_frame_equal(back.records, rec, check_dtype=False)
    assert back.provenance == {"note": "ünïcode"}
    io.write_instance(back, tmp_path / "b")
    for name in io.TABLES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path):
    from mdp_core.problem.datasets import synthetic

    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        io.write_instance(synthetic(n_records=12, n_outputs=4, seed=seed), tmp_path / name)
    read = lambda d, t: (tmp_path / d / t).read_bytes()  # noqa: E731
    assert all(read("a", t) == read("b", t) for t in (*io.TABLES, "instance.json"))
    assert read("a", "costs.parquet") != read("c", "costs.parquet")


def test_mechanism_round_trip_and_determinism(tmp_path: Path, grid_small):
    sol = solve(grid_small, "exp")
    info = write_mechanism(grid_small, sol.z, tmp_path / "m1", sol.solve_info())
    write_mechanism(grid_small, sol.z, tmp_path / "m2", sol.solve_info())
    assert (tmp_path / "m1/mechanism.parquet").read_bytes() == (tmp_path / "m2/mechanism.parquet").read_bytes()
    z = io.read_mechanism(tmp_path / "m1/mechanism.parquet")
    np.testing.assert_array_equal(z, sol.z)
    m = frame(tmp_path / "m1", "mechanism.parquet")
    assert dict(m.dtypes.astype(str)) == io.MECHANISM_SCHEMA and len(m) == z.size
    on_disk = json.loads((tmp_path / "m1/solve.json").read_text())
    assert on_disk["certificate"]["passed"] is True and on_disk == info
    assert on_disk["mechanism_sha256"] == io.file_sha256(tmp_path / "m1/mechanism.parquet")


# ----------------------------------------------------------------------------- bad input
def test_missing_column(instance_dir: Path):
    replace_table(instance_dir, "costs.parquet", frame(instance_dir, "costs.parquet").drop(columns=["cost"]))
    rejects(instance_dir, r"costs.parquet: missing column\(s\) \['cost'\]")


def test_missing_required_record_column(instance_dir: Path):
    replace_table(instance_dir, "records.parquet", frame(instance_dir, "records.parquet").drop(columns=["prior"]))
    rejects(instance_dir, "records.parquet: missing column.*prior")


def test_extra_column(instance_dir: Path):
    replace_table(instance_dir, "edges.parquet", frame(instance_dir, "edges.parquet").assign(weight=1.0))
    rejects(instance_dir, r"edges.parquet: unexpected column\(s\) \['weight'\]")


def test_mistyped_column(instance_dir: Path):
    replace_table(instance_dir, "edges.parquet", frame(instance_dir, "edges.parquet").astype({"i": "int32"}))
    rejects(instance_dir, "edges.parquet: column 'i' has type int32, expected int64")


def test_mistyped_float_column(instance_dir: Path):
    replace_table(instance_dir, "records.parquet", frame(instance_dir, "records.parquet").astype({"prior": "float32"}))
    rejects(instance_dir, "records.parquet: column 'prior' has type float32")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_cost(instance_dir: Path, bad):
    c = frame(instance_dir, "costs.parquet")
    c.loc[3, "cost"] = bad
    replace_table(instance_dir, "costs.parquet", c)
    rejects(instance_dir, "costs.parquet: column 'cost' contains NaN or infinite")


def test_infinite_distance(instance_dir: Path):
    e = frame(instance_dir, "edges.parquet")
    e.loc[0, "distance"] = np.inf
    replace_table(instance_dir, "edges.parquet", e)
    rejects(instance_dir, "edges.parquet: column 'distance' contains NaN or infinite")


def test_nan_prior(instance_dir: Path):
    r = frame(instance_dir, "records.parquet")
    r.loc[0, "prior"] = np.nan
    replace_table(instance_dir, "records.parquet", r)
    rejects(instance_dir, "'prior' contains NaN")


def test_duplicate_record_ids(instance_dir: Path):
    r = frame(instance_dir, "records.parquet")
    r.loc[1, "record_id"] = 0
    replace_table(instance_dir, "records.parquet", r)
    rejects(instance_dir, "records.parquet: duplicate record_id")


def test_record_ids_not_in_order(instance_dir: Path):
    r = frame(instance_dir, "records.parquet")
    r.loc[0, "record_id"] = 99
    replace_table(instance_dir, "records.parquet", r)
    rejects(instance_dir, r"record_id must be 0..19 in order")


def test_duplicate_output_ids(instance_dir: Path):
    o = frame(instance_dir, "outputs.parquet")
    o.loc[2, "output_id"] = 1
    replace_table(instance_dir, "outputs.parquet", o)
    rejects(instance_dir, "outputs.parquet: duplicate output_id")


def test_duplicate_cost_entries(instance_dir: Path):
    c = frame(instance_dir, "costs.parquet")
    c.loc[1, "k"] = 0  # (0, 0) twice, (0, 1) missing: still N*K rows
    replace_table(instance_dir, "costs.parquet", c)
    rejects(instance_dir, r"costs.parquet: duplicate \(i, k\)")


def test_prior_not_summing_to_one(instance_dir: Path):
    r = frame(instance_dir, "records.parquet")
    r["prior"] *= 1 + 1e-6
    replace_table(instance_dir, "records.parquet", r)
    rejects(instance_dir, "prior must sum to 1")


def test_negative_prior(instance_dir: Path):
    r = frame(instance_dir, "records.parquet")
    r.loc[0, "prior"] += 0.06
    r.loc[1, "prior"] = -0.01  # uniform 0.05 each: still sums to 1
    replace_table(instance_dir, "records.parquet", r)
    rejects(instance_dir, "prior has 1 negative")


@pytest.mark.parametrize("eps", [0.0, -1.0])
def test_epsilon_not_positive(instance_dir: Path, eps):
    edit_json(instance_dir, epsilon=eps)
    rejects(instance_dir, "epsilon must be a finite number > 0")


@pytest.mark.parametrize("eps", ["ten", None])
def test_epsilon_not_a_number(instance_dir: Path, eps):
    edit_json(instance_dir, epsilon=eps)
    rejects(instance_dir, "epsilon")


def test_eta_not_positive(instance_dir: Path):
    edit_json(instance_dir, eta=0.0)
    rejects(instance_dir, "eta must be a finite number > 0")


def test_edge_longer_than_eta(instance_dir: Path):
    edit_json(instance_dir, eta=1.2)  # the grid has edges of 1, sqrt(2) and 2 km
    rejects(instance_dir, r"edge \(0, 2\) has distance 2 > eta=1.2")


def test_self_loop(instance_dir: Path):
    e = frame(instance_dir, "edges.parquet")
    e.loc[0, "j"] = e.loc[0, "i"]
    replace_table(instance_dir, "edges.parquet", e)
    rejects(instance_dir, "self-loop")


def test_edge_id_out_of_range(instance_dir: Path):
    e = frame(instance_dir, "edges.parquet")
    e.loc[len(e) - 1, "j"] = 20
    replace_table(instance_dir, "edges.parquet", e)
    rejects(instance_dir, "edge endpoint out of range 0..19")


def test_cost_id_out_of_range(instance_dir: Path):
    c = frame(instance_dir, "costs.parquet")
    c.loc[0, "k"] = 6
    replace_table(instance_dir, "costs.parquet", c)
    rejects(instance_dir, "costs.parquet: ids out of range")


def test_output_record_id_out_of_range(instance_dir: Path):
    o = frame(instance_dir, "outputs.parquet")
    o.loc[0, "record_id"] = 20
    replace_table(instance_dir, "outputs.parquet", o)
    rejects(instance_dir, "record_id out of range")


def test_incomplete_cost_table(instance_dir: Path):
    replace_table(instance_dir, "costs.parquet", frame(instance_dir, "costs.parquet").iloc[:-1])
    rejects(instance_dir, r"costs.parquet: has 119 entries, needs all N\*K = 20\*6 = 120")


def test_n_records_disagrees_with_table(instance_dir: Path):
    edit_json(instance_dir, n_records=21)
    rejects(instance_dir, "record_id must be 0..20")


def test_modified_table_detected_by_hash(instance_dir: Path):
    c = frame(instance_dir, "costs.parquet")
    c.loc[0, "cost"] += 1.0
    pq.write_table(pa.Table.from_pandas(c, preserve_index=False), instance_dir / "costs.parquet")
    rejects(instance_dir, "costs.parquet: content does not match the sha256")


def test_truncated_parquet(instance_dir: Path):
    p = instance_dir / "edges.parquet"
    p.write_bytes(p.read_bytes()[:-100])
    rejects(instance_dir, "edges.parquet: content does not match the sha256")
    edit_json(
        instance_dir,
        tables={
            **json.loads((instance_dir / "instance.json").read_text())["tables"],
            "edges.parquet": io.file_sha256(p),
        },
    )
    rejects(instance_dir, "edges.parquet: not a readable Parquet file")


def test_unreadable_parquet(tmp_path: Path):
    p = tmp_path / "mechanism.parquet"
    p.write_bytes(b"this is not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        io.read_mechanism(p)


def test_missing_table(instance_dir: Path):
    (instance_dir / "outputs.parquet").unlink()
    rejects(instance_dir, "outputs.parquet: no such file")


def test_table_missing_from_hash_list(instance_dir: Path):
    """instance.json must list every table: otherwise a modified table would go undetected."""
    meta = json.loads((instance_dir / "instance.json").read_text())
    del meta["tables"]["costs.parquet"]
    (instance_dir / "instance.json").write_text(json.dumps(meta))
    rejects(instance_dir, "costs.parquet")


def test_non_existent_path(tmp_path: Path):
    with pytest.raises(InputError, match="no such instance directory"):
        io.read_instance(tmp_path / "nope")
    with pytest.raises(InputError, match="no such file"):
        io.read_mechanism(tmp_path / "nope.parquet")
    assert listing(tmp_path) == []


def test_missing_or_broken_instance_json(instance_dir: Path):
    (instance_dir / "instance.json").write_text("{not json")
    rejects(instance_dir, "unreadable JSON")
    (instance_dir / "instance.json").write_text("[1, 2]")
    rejects(instance_dir, "instance.json")
    (instance_dir / "instance.json").unlink()
    rejects(instance_dir, "instance.json: no such file")


def test_wrong_schema_version(instance_dir: Path):
    edit_json(instance_dir, schema_version=2)
    rejects(instance_dir, "not an mdp-instance v1 file")


def test_missing_json_key(instance_dir: Path):
    meta = json.loads((instance_dir / "instance.json").read_text())
    del meta["eta"]
    (instance_dir / "instance.json").write_text(json.dumps(meta))
    rejects(instance_dir, "missing key 'eta'")


def test_mechanism_bad_tables(tmp_path: Path):
    p = tmp_path / "m.parquet"
    pq.write_table(pa.table({"i": [0, 0, 1], "k": [0, 1, 0], "prob": [0.5, 0.5, 1.0]}), p)
    with pytest.raises(InputError, match="has 3 entries, needs all N\\*K = 2\\*2 = 4"):
        io.read_mechanism(p)
    pq.write_table(pa.table({"i": [0, 1], "k": [0, 0], "p": [1.0, 1.0]}), p)
    with pytest.raises(InputError, match="missing column"):
        io.read_mechanism(p)
    pq.write_table(pa.table({"i": [0, 1], "k": [0, 0], "prob": [1.0, np.nan]}), p)
    with pytest.raises(InputError, match="NaN"):
        io.read_mechanism(p)
    pq.write_table(pa.table({"i": [0, 1], "k": [0, 1], "prob": [1.0, 1.0]}), p)
    with pytest.raises(InputError, match="ids out of range"):
        io.read_mechanism(p, n_records=2, n_outputs=1)


# ----------------------------------------------------------------------------- atomic writes
def test_failing_writer_leaves_nothing(tmp_path: Path):
    def half_write(p: Path) -> None:
        p.write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        io.atomic_write(tmp_path / "t.parquet", half_write)
    assert listing(tmp_path) == []


def test_failing_writer_keeps_the_old_file(tmp_path: Path):
    target = tmp_path / "t.json"
    io.write_json(target, {"a": 1})
    with pytest.raises(ValueError):
        io.write_json(target, {"a": float("nan")})  # JSON has no NaN: refused before any byte is written
    with pytest.raises(RuntimeError):
        io.atomic_write(target, lambda p: (p.write_text("half"), (_ for _ in ()).throw(RuntimeError("boom"))))
    assert json.loads(target.read_text()) == {"a": 1}
    assert listing(tmp_path) == ["t.json"]


def test_unverified_mechanism_is_not_written(tmp_path: Path, grid_small):
    z = np.eye(grid_small.n_records, grid_small.n_outputs)
    z[:, 0] += 1.0 - z.sum(axis=1)  # row-stochastic but far from private
    with pytest.raises(PrivacyError, match="refusing to write an unverified mechanism"):
        write_mechanism(grid_small, z, tmp_path / "out", {"method": "test"})
    assert not (tmp_path / "out").exists() or listing(tmp_path / "out") == []


@pytest.mark.parametrize("info", [{"objective": float("nan")}, {"lower_bound": float("-inf")}, {"x": object()}])
def test_mechanism_with_unwritable_solve_info_writes_nothing(tmp_path: Path, grid_small, info):
    from mdp_core.solvers.mechanisms import exponential

    with pytest.raises(InputError, match="solve info is not strict JSON"):
        write_mechanism(grid_small, exponential(grid_small), tmp_path / "out", info)
    assert not (tmp_path / "out").exists()


def test_write_json_is_deterministic(tmp_path: Path):
    io.write_json(tmp_path / "a.json", {"b": 1, "a": [1.5, None]})
    io.write_json(tmp_path / "b.json", {"a": [1.5, None], "b": 1})
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_text().endswith("\n")
