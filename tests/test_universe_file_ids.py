"""A user's universe file, what is left of issue 49 (docs/privacy.md, "The rules of the door", rule 5).

* **Published ids are generated.** The road file's node ids (``osmid``; the grid's snapped ``road_osmid``) are
  never published: a secret table keyed by them cannot be joined to a release. A real Rome road release of a
  table keyed by osmid publishes, audits clean, and no published file holds a single osmid of the road file,
  while the door still resolves the table's keys through them (the sealed snapshot holds the record ids the
  osmids name).
* **The grid's universe test sees the road file.** A grid whose road nodes are the people moved 1-10 m is
  refused by rule 5 (its cell centres are not what the file gives, its snapped nodes are); the real Rome road
  network under the same grid is not.

Real data from ``../shared/data`` (skipped when absent), real HiGHS solves, the stage tasks' own functions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import publish_release, run_stages
from test_universe_rule import ROME, RULE, _check, _road_of, _rule5, _table, needs_rome, rome_people

from mdp_core.declarations import dataset_kinds

R_M = 6_371_008.8


# ------------------------------------------------------------------------------------------- published ids
def test_no_kind_publishes_a_users_file_ids():
    """Declared once: the road file's ids are a kind's file columns, never a public one."""
    public = dataset_kinds.public_record_columns()
    assert {"osmid", "road_osmid", "road_lat", "road_lon"} <= dataset_kinds.FILE_COLUMNS
    assert not public & dataset_kinds.FILE_COLUMNS
    for decl in dataset_kinds.DECLARED.values():
        assert not decl.file_columns or decl.universe_files, decl.name  # only a user's universe file has them
    road = {"file_parameters": ("nodes",), "universe_files": ("nodes",), "file_columns": frozenset({"osmid"})}
    with pytest.raises(TypeError, match="never public"):
        dataset_kinds.Kind("x", dataset_kinds.RoadParams, "m:f", public_columns=frozenset({"osmid"}), **road)


def _road_release(root: Path, table: Path, **release):
    from flows.config import parse_config

    files = {"nodes": str(ROME / "nodes.csv"), "edges": str(ROME / "edges.csv")}
    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "road", "params": files | {"n_records": 120, "n_outputs": 20, "loss": "distance"}},
            "privacy": {"epsilon": 5.0, "eta": 0.8, "max_stretch": 50.0},
            "solve": {"method": "lp"},
            "release": {"microdata": str(table), "population": "rome-by-osmid", "max_total_epsilon": 1000.0}
            | {"max_distance": 0.6, "eps_counts": 1.0}
            | release,
            "evaluate": {"baselines": [], "counts_eps": [1.0], "counts_seeds": 1},
        }
    )


def _numbers_in(path: Path) -> set[int]:
    """Every integer a published file holds: Parquet columns (integers, and whole floats) or the digits of a
    text file."""
    if path.suffix == ".parquet":
        out: set[int] = set()
        for col in pq.read_table(path).to_pandas().select_dtypes("number").columns:
            v = pq.read_table(path, columns=[col]).column(0).to_numpy(zero_copy_only=False)
            v = v[np.isfinite(v) & (v == np.floor(v))] if v.dtype.kind == "f" else v
            out |= {int(x) for x in v}
        return out
    import re

    return {int(t) for t in re.findall(rb"\d+", path.read_bytes())}


@pytest.mark.slow  # a release's or a solve's seconds (docs/development.md: over ~3 s)
@needs_rome
@pytest.mark.parametrize("prior", ["uniform", "dp"])
def test_a_table_keyed_by_osmid_is_resolved_at_the_door_and_no_osmid_is_published(tmp_path, prior):
    """With ``prior = "dp"`` too: the prior stage maps the sealed record ids against the records without the
    file's ids, as the measure stage does (it matched them against the osmids: every row unreadable, after the
    charge)."""
    from artifacts.store import Store
    from mdp_core.problem import microdata
    from mdp_core.problem.datasets.road import road

    dp = {"prior": "dp", "eps_prior": 0.5} if prior == "dp" else {}
    cfg = _road_release(tmp_path / "store", tmp_path / "people.csv", **dp)
    inst = road(**cfg.dataset.loader_params())  # the ingested instance: the road file's ids are there
    people = rome_people(400, 9)
    ids = microdata.locate(people, inst).record_ids
    keep = ids[microdata.locate(people, inst).distances <= 0.6]
    osmids = inst.records["osmid"].to_numpy()
    pd.DataFrame({"record": osmids[keep], "age": np.arange(keep.size) % 90}).to_csv(
        tmp_path / "people.csv", index=False
    )

    refs = run_stages(tmp_path / "store", cfg)
    run = publish_release(Store(tmp_path / "store"), refs, cfg=cfg)  # the publication's audit: clean, or it raises

    cols = set(pq.read_schema(run / "instance" / "records.parquet").names)
    assert cols == {"record_id", "prior", "lat", "lon"}, cols  # generated ids and coordinates only
    every = set(inst.records["osmid"].astype(int)) | {int(o) for o in pd.read_csv(ROME / "nodes.csv")["osmid"]}
    for f in sorted(p for p in run.rglob("*") if p.is_file()):
        found = _numbers_in(f) & every
        assert not found, f"{f.relative_to(run)} publishes {len(found)} of the road file's osmids"
    assert "osmid" not in json.dumps(json.loads((run / "manifest.json").read_text()).get("stages", {}))

    # the door resolved the keys: the snapshot holds the generated record ids the osmids name, nothing else
    sealed = sorted((tmp_path / "store" / "private" / "sealed").glob("*.parquet"))
    assert len(sealed) == 1
    got = pd.read_parquet(sealed[0])
    assert list(got.columns) == ["record"]
    assert sorted(int(v) for v in got["record"]) == sorted(keep.tolist())


@needs_rome
def test_a_key_naming_no_record_is_counted_not_guessed(tmp_path):
    """An osmid of no record (or of a road node that is not one), a record id given as a key and an empty key:
    unreadable, counted by the door, never matched to a record."""
    from flows.door import read_secret_table
    from flows.plan import plan_run
    from mdp_core.problem.datasets.road import road

    table = tmp_path / "people.csv"
    cfg = _road_release(tmp_path / "store", table)
    inst = road(**cfg.dataset.loader_params())
    osmids = inst.records["osmid"].astype(int).tolist()
    stranger = next(int(o) for o in pd.read_csv(ROME / "nodes.csv")["osmid"] if int(o) not in set(osmids))
    pd.DataFrame({"record": [str(o) for o in osmids[:5]] + [str(stranger), "3", ""]}).to_csv(table, index=False)
    facts, _, _, rows = read_secret_table(plan_run(cfg), inst, 0.6)
    assert (facts.n_people, facts.n_unreadable) == (8, 3)
    assert sorted(v for v in rows["record"] if v is not None) == [str(i) for i in range(5)]


# ---------------------------------------------------------------------------------- the grid's universe test
def _jittered(p: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each (lat, lon) moved 1-10 m in a random direction."""
    rng = np.random.default_rng(seed)
    m, a = rng.uniform(1.0, 10.0, len(p)), rng.uniform(0, 2 * np.pi, len(p))
    lat = p[:, 0] + np.rad2deg(m / R_M * np.sin(a))
    return np.column_stack([lat, p[:, 1] + np.rad2deg(m / R_M * np.cos(a) / np.cos(np.deg2rad(p[:, 0])))])


GRID = {"rows": 16, "cols": 16, "cell_km": 0.25, "n_outputs": 30, "loss": "distance"}


@needs_rome
def test_a_grid_whose_road_nodes_are_the_people_is_refused(tmp_path):
    """Rule 5 compared the people with the cell centres, so road nodes made of the people (moved 1-10 m) passed;
    it compares them with the nodes the cells snap to, the road file's points the release is built from."""
    path, df = _table(tmp_path)
    files = _road_of(_jittered(df[["lat", "lon"]].to_numpy()), tmp_path / "road")
    dataset = {"kind": "grid", "params": {"road_nodes": files["nodes"], "road_edges": files["edges"]} | GRID}
    rep = _check(tmp_path, path, dataset, "epsilon = 10.0\neta = 0.5", 0.5)
    why = _rule5(rep.reasons)
    assert len(why) == 1 and RULE in why[0], rep.reasons
    assert "RID-" not in why[0] and f"{df['lat'].iloc[0]:.4f}" not in why[0]
    bare = re.sub(r"rule 5|delta = [0-9.e+-]+", "", why[0])  # the rule's number and setting: no share, no count
    assert "%" not in why[0] and re.search(r"\d", bare) is None, why[0]


@needs_rome
def test_a_grid_on_the_rome_road_network_is_admitted(tmp_path):
    path, _ = _table(tmp_path)
    dataset = {
        "kind": "grid",
        "params": {"road_nodes": str(ROME / "nodes.csv"), "road_edges": str(ROME / "edges.csv")} | GRID,
    }
    rep = _check(tmp_path, path, dataset, "epsilon = 10.0\neta = 0.5", 0.5)
    assert not _rule5(rep.reasons), rep.reasons
