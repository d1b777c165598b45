"""Rule 5 (the universe test) for a grid on a road file when the secret table gives the grid's own km (issue 49).

A grid's records carry x0, x1 (km from its south-west corner) and lat, lon: a table may give either. The universe
test compares the people with the road nodes the cells snap to (lat, lon); a table in km was compared with them
as if its km were degrees, so road nodes made of the people (moved 1-10 m) were refused for a table in lat/lon
and admitted for the same people in km. The door brings km people into lat, lon by the grid's own map: the same
verdict, whichever columns the table gives. The real Rome road network is admitted with a km table.

Real data from ``../shared/data`` (skipped when absent); ``mdp-release check``'s own door.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_universe_file_ids import GRID, _jittered
from test_universe_rule import ROME, RULE, _check, _road_of, _rule5, _table, needs_rome

PRIVACY = "epsilon = 10.0\neta = 0.5"
KM_PER_DEG_LAT = 111.32  # the grid's map (mdp_core/problem/datasets/grid.py), written out here on purpose


def _anchored(df: pd.DataFrame) -> dict:
    """The grid's parameters with its south-west corner 100 m south-west of the people's."""
    lat, lon = float(df["lat"].min()) - 0.0009, float(df["lon"].min()) - 0.0012
    return GRID | {"anchor_lat": lat, "anchor_lon": lon}


def _in_km(tmp_path: Path, df: pd.DataFrame, grid: dict) -> Path:
    """The same table with lat, lon replaced by the grid's x0 (east), x1 (north) in km from its anchor."""
    a_lat, a_lon = grid["anchor_lat"], grid["anchor_lon"]
    x0 = (df["lon"] - a_lon) * KM_PER_DEG_LAT * np.cos(np.radians(a_lat))
    x1 = (df["lat"] - a_lat) * KM_PER_DEG_LAT
    path = tmp_path / "people-km.csv"
    df.drop(columns=["lat", "lon"]).assign(x0=x0, x1=x1).to_csv(path, index=False)
    return path


@needs_rome
def test_road_nodes_made_of_the_people_are_refused_whichever_columns_the_table_gives(tmp_path):
    """Before: the km table was compared with the road nodes' degrees (people_near 0%): admitted."""
    path, df = _table(tmp_path)
    files = _road_of(_jittered(df[["lat", "lon"]].to_numpy()), tmp_path / "road")
    grid = _anchored(df)
    dataset = {"kind": "grid", "params": {"road_nodes": files["nodes"], "road_edges": files["edges"]} | grid}
    why = {}
    for name, table in (("latlon", path), ("km", _in_km(tmp_path, df, grid))):
        (tmp_path / name).mkdir()
        rep = _check(tmp_path / name, table, dataset, PRIVACY, 0.5)
        why[name] = _rule5(rep.reasons)
        assert len(why[name]) == 1 and RULE in why[name][0], (name, rep.reasons)
        assert "RID-" not in why[name][0] and f"{df['lat'].iloc[0]:.4f}" not in why[name][0]
    # the same people: the same observed shares (the nulls' seeded shifts follow the table's canonical row order)
    assert why["km"][0].split("where")[0] == why["latlon"][0].split("where")[0]


@needs_rome
def test_the_rome_road_network_is_admitted_with_a_km_table(tmp_path):
    _, df = _table(tmp_path)
    grid = _anchored(df)
    files = {"road_nodes": str(ROME / "nodes.csv"), "road_edges": str(ROME / "edges.csv")}
    rep = _check(tmp_path, _in_km(tmp_path, df, grid), {"kind": "grid", "params": files | grid}, PRIVACY, 0.5)
    assert not _rule5(rep.reasons), rep.reasons
    assert not [r for r in rep.reasons if "lat, lon" in r], rep.reasons  # read, not refused for its columns


def test_people_in_an_instances_own_coordinates_with_no_exact_map_are_refused_by_name():
    """A universe-points instance that is not a grid with its anchor: no exact map from its coordinates to the
    file's degrees, so the table is refused with the columns to give, not tested in the wrong unit."""
    from dataclasses import replace

    from mdp_core.errors import SecretTableError
    from mdp_core.problem.datasets.grid import grid
    from mdp_core.release.door import universe_facts
    from mdp_core.release.similarity import People

    inst = grid(4, 4, n_outputs=8, seed=0)
    recs = inst.records.assign(road_lat=inst.records["lat"], road_lon=inst.records["lon"])
    pts = inst.record_points()
    bare = replace(inst, records=recs, provenance={"dataset": "grid", "parameters": {}})
    with pytest.raises(SecretTableError, match="give them as lat, lon") as err:
        universe_facts(People(pts, pts, False), bare)
    assert "road_lat, road_lon" in str(err.value) and f"{pts[0, 0]:.3f}" not in str(err.value)
    t = universe_facts(People(pts, pts, False), replace(inst, records=recs))  # the grid's own map: its centres
    assert t is not None and t.people_near == 1.0
