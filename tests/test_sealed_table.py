"""The sealed table (issue 49): the privacy door reads the secret table once and seals its canonical rows under
``<store>/private/sealed/``; every later step reads the snapshot, never the file; nothing of the table -- its
path, its values -- leaves ``private/`` (docs/privacy.md, "The sealed table").

Real runs, no mocks: the stage tasks' own functions in the flow's own loop (``conftest.stage_loop``), and
``mdp-release run`` / ``approve`` against the session's Prefect server, whose database is scanned.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import (
    MDP,
    N_PEOPLE,
    POPULATION,
    api_post,
    people_config,
    people_table,
    people_toml,
    run_command,
    server_env,
    stage_loop,
)

from artifacts.private import PrivateStore
from artifacts.private_folder import LedgerError
from artifacts.store import Store
from flows.release import stage_params, stage_plan
from mdp_core.declarations import contract
from mdp_core.problem import microdata
from mdp_core.problem.datasets import grid
from mdp_core.release.door import table_people
from mdp_core.runtime.files import read_json

OTHER = "other-people"


def sealed_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the door seals of ``frame`` over the tests' 5 x 6 grid."""
    return microdata.sealed_rows(frame, grid(5, 6, n_outputs=30, seed=0))


def people_of(frame: pd.DataFrame):
    """The people the door reads of ``frame`` (its sealed rows, located on the tests' grid)."""
    inst = grid(5, 6, n_outputs=30, seed=0)
    rows = microdata.sealed_rows(frame, inst)
    return table_people(rows, inst, microdata.locate(rows, inst))


def run_swapping(root: Path, cfg, table: Path, swap_with: Path) -> tuple[dict, dict, object]:
    """The release of ``cfg`` through the flow's own loop (``conftest.stage_loop``) up to the measurement, the
    file ``table`` replaced by ``swap_with``'s bytes after the door (before the first stage after the draw):
    ({stage: ref}, {stage: params}, the door's plan)."""

    steps = stage_plan(cfg)
    after_draw = [s for s in steps[steps.index("draw") + 1 :] if s in contract.STAGE_NAMES]
    swapped: list[str] = []

    def before(stage: str, upstream: dict) -> None:
        if stage in after_draw and not swapped:
            tmp = table.with_name(table.name + ".swap")
            tmp.write_bytes(swap_with.read_bytes())
            os.replace(tmp, table)  # atomically: what a hostile step or a careless copy would do
            swapped.append(stage)

    params = stage_params(cfg)
    state = stage_loop(root, cfg, params, until="measure", before=before)
    assert swapped, "no stage ran after the draw"
    return state.refs, params, state.plan


def test_a_table_swapped_after_the_door_changes_nothing_and_is_not_charged_to_a_second_population(tmp_path):
    """Another population's table, already released and charged, copied over this release's file after the
    door: the release measures the people the door read (their count, their version), charges only its own
    population for them, and the other table stays the other population's, charged once."""
    root = tmp_path / "store"
    mine, theirs = tmp_path / "people.csv", tmp_path / "theirs.csv"
    original = people_table(mine, seed=7)
    other = people_table(theirs, seed=11, n=250)
    spare = tmp_path / "theirs-copy.csv"
    spare.write_bytes(theirs.read_bytes())
    _, _, _ = run_swapping(root, people_config(root, theirs, population=OTHER), theirs, spare)  # no change
    other_before = PrivateStore(root).budget(OTHER)
    assert other_before.n_charges == 2

    refs, params, plan = run_swapping(root, people_config(root, mine), mine, theirs)
    assert mine.read_bytes() == theirs.read_bytes()  # the swap happened
    prov = read_json(Store(root).path(refs["measure"], "release_provenance.json"))
    assert prov["n_individuals"] == N_PEOPLE != len(other)  # the people the door read, not the file's now
    private = PrivateStore(root)
    version = microdata.rows_sha256(sealed_of(original))
    pd.testing.assert_frame_equal(private.sealed_table(version), sealed_of(original))
    (held,) = [p.name for p in (root / "private" / "populations" / POPULATION / "versions").iterdir()]
    assert held == version  # one version of this population's table: the sealed one
    handle = private.table_handle(version)
    assert prov["table"] == plan.table == params["measure"]["table"] == handle  # what was approved: measured
    assert "microdata" not in params["measure"] and str(mine) not in json.dumps(params)
    draws = {e["detail"]["draw"] for e in private.entries(POPULATION) if e.get("kind") == "charge"}
    assert draws == {prov["draw_commitment"]} and private.load(prov["draw_commitment"]).version == version
    assert private.budget(OTHER) == other_before  # the other population: not charged again
    assert private.similar_population(people_of(other), None)[0] == OTHER  # each table: its own population
    assert private.similar_population(people_of(original), None)[0] == POPULATION


def test_the_snapshot_is_owner_only_content_addressed_keyed_and_checked(tmp_path):
    """The same people as CSV and as a reordered Parquet file with other columns: one snapshot (0600 in 0700
    folders, named by its rows' sha256, only the key columns), one handle, which is an HMAC under the store's
    key (another store: another handle) and no hash of anything public; an altered snapshot is refused."""
    frame = people_table(tmp_path / "people.csv")
    shuffled = frame.sample(frac=1.0, random_state=3).assign(age=41)
    shuffled.to_parquet(tmp_path / "people.parquet", index=False)
    root = tmp_path / "store"
    private = PrivateStore(root)
    sealed = []
    for name in ("people.csv", "people.parquet"):
        table, _ = microdata.read_secret(tmp_path / name)
        sealed.append(private.seal_table(sealed_of(table.frame)))
    assert sealed[0] == sealed[1]
    sha, handle = sealed[0]
    (path,) = (root / "private" / "sealed").iterdir()
    assert path.name == f"{sha}.parquet" and sha == microdata.rows_sha256(sealed_of(frame))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in (path.parent, path.parent.parent))
    rows = private.sealed_table(sha)
    assert list(rows.columns) == ["lat", "lon"] and len(rows) == N_PEOPLE  # no ssn, no age
    assert np.all(np.diff(rows["lat"].to_numpy()) >= 0)  # sorted: no file order survives
    public = {hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("people.csv", "people.parquet")}
    assert handle not in public | {sha} and len(handle) == 64
    elsewhere = PrivateStore(tmp_path / "elsewhere").seal_table(sealed_of(frame))
    assert elsewhere[0] == sha and elsewhere[1] != handle  # the same rows, another store's key: another handle
    altered = rows.copy()
    altered.loc[0, "lat"] += 1e-9
    altered.to_parquet(path, index=False)
    with pytest.raises(LedgerError, match="does not match") as info:
        private.sealed_table(sha)
    assert sha[:8] not in str(info.value)  # the rows' hash is the snapshot's private name: never in a message


# ----------------------------------------------------------------------------- Prefect, the store, failure records
SECRET_ID = "RESIDENT-PLANTED-7Q3Z"  # a resident id planted in the secret table's extra column
SECRET_AGE = "98765432"  # an age no file of a release would hold


def planted_table(path: Path, n: int = 120) -> tuple[float, float]:
    """A secret table at ``path`` with a planted resident id and age, and one person at distinctive coordinates
    (returned: lat, lon)."""
    inst = grid(5, 6, n_outputs=30, seed=0)
    rng = np.random.default_rng(5)
    pts = inst.records[["lat", "lon"]].to_numpy()[rng.integers(0, inst.n_records, n)] + rng.normal(0, 4e-4, (n, 2))
    pts[0] += (0.000123456789, -0.000098765431)
    ids = [SECRET_ID] + [f"r{k}" for k in range(1, n)]
    pd.DataFrame({"resident_id": ids, "age": int(SECRET_AGE), "lat": pts[:, 0], "lon": pts[:, 1]}).to_csv(
        path, index=False, float_format="%.12f"
    )
    return float(f"{pts[0, 0]:.12f}"), float(f"{pts[0, 1]:.12f}")


def needles(table: Path, lat: float, lon: float) -> list[bytes]:
    """What must not be found outside private/: the table's path and name, the planted id and age, the planted
    coordinates as text and as float64."""
    text = [str(table), table.name, SECRET_ID, SECRET_AGE, f"{lat:.12f}", f"{lon:.12f}", repr(lat), repr(lon)]
    return [t.encode() for t in text] + [struct.pack("<d", lat), struct.pack("<d", lon)]


def found_in(folder: Path, needle_list: list[bytes], skip: str | None = None) -> list[str]:
    """``file: needle`` for every needle found in a file under ``folder`` (``skip``: a top folder to leave out)."""
    hits = []
    for p in folder.rglob("*"):
        if p.is_file() and not (skip and p.relative_to(folder).parts[0] == skip):
            data = p.read_bytes()
            hits += [f"{p}: {n[:40]!r}" for n in needle_list if n in data]
    return hits


def _paused(server, name: str, within: float = 300) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        runs = api_post(server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"release:{name}"]}}})
        if runs and runs[0]["state_type"] == "PAUSED":
            return runs[0]
        assert not runs or runs[0]["state_type"] in ("PENDING", "RUNNING", "SCHEDULED"), runs[0]["state"]
        time.sleep(1)
    raise AssertionError(f"release {name} never paused")


def _prefect_records(server, name: str) -> str:
    """Everything Prefect's API holds of release ``name``'s flow runs: the runs (parameters, state messages),
    their task runs, logs and artifacts, as one JSON text."""
    runs = api_post(server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"release:{name}"]}}})
    ids = [r["id"] for r in runs]
    assert ids
    tasks = api_post(server, "/task_runs/filter", {"flow_runs": {"id": {"any_": ids}}})
    logs = api_post(server, "/logs/filter", {"logs": {"flow_run_id": {"any_": ids}}})
    arts = api_post(server, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": ids}}})
    return json.dumps([runs, tasks, logs, arts])


def test_no_path_or_value_of_the_table_reaches_prefect_the_store_or_a_failure_record(prefect_server, tmp_path):
    """A release approved through Prefect's pause, its file swapped while it waited, then a run of a table
    that cannot be parsed: the flow runs' parameters, task runs, logs and artifacts, every file of Prefect's
    home (its database included), every file of the store outside ``private/`` and the failed run's
    FAILED.txt and record.json hold neither the table's path nor a planted value; the swapped file changed
    nothing; the failure's detail (with the path) is under ``private/failures/`` only."""
    env = server_env(prefect_server, tmp_path)
    store = tmp_path / "store"
    table = tmp_path / "agency-secret-q7zx.csv"
    lat, lon = planted_table(table)
    cfg = tmp_path / "sealed.toml"
    cfg.write_text(people_toml("sealed", store, table, approval="required"))
    args = [MDP, "run", "--config", str(cfg)]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = _paused(prefect_server, "sealed")
    assert str(table) not in json.dumps(run["parameters"])
    assert run["parameters"]["config"]["release"]["microdata"].startswith("private-path:")
    people_table(table, seed=11, n=250)  # swapped while the officer reads the plan
    ok = run_command([MDP, "approve", run["id"], "--by", "A. Officer"], tmp_path, env, 120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    (prov,) = [read_json(p) for p in store.glob("runs/2*/release_provenance.json")]
    assert prov["n_individuals"] == 120  # the people the door sealed, not the 250 of the swapped file
    (manifest,) = [read_json(p) for p in store.glob("runs/2*/manifest.json")]
    assert len(prov["table"]) == 64 and manifest["approval"]["plan_sha256"]

    broken = tmp_path / "agency-secret-broken-q7zx.csv"
    planted_table(broken)
    with broken.open("a") as fh:
        fh.write(f"{SECRET_ID},{SECRET_AGE},{lat:.12f},{lon:.12f},extra\n")  # a malformed row: a parser error
    cfg_broken = tmp_path / "broken.toml"
    cfg_broken.write_text(people_toml("broken", store, broken, approval="none"))
    failed = run_command([MDP, "run", "--config", str(cfg_broken)], tmp_path, env, 600)
    assert failed.returncode != 0
    (record,) = store.glob("runs/*-failed")
    text = (record / "FAILED.txt").read_text()
    assert "SecretTableError" in text and "the [release] microdata file" in text, text
    detail = store / read_json(record / "record.json")["private_detail"]
    assert str(broken) in detail.read_text() and stat.S_IMODE(detail.stat().st_mode) == 0o600

    find = needles(table, lat, lon) + needles(broken, lat, lon)[:2]
    assert found_in(store / "private", find)  # the scan finds what is there: the paths, kept privately
    assert found_in(store, find, skip="private") == []
    for name in ("sealed", "broken"):
        records = _prefect_records(prefect_server, name).encode()
        assert [n for n in find if n in records] == []
    home = Path(prefect_server["home"])
    assert (home / "prefect.db").is_file()  # the server's database, scanned with everything beside it
    assert found_in(home, find) == []  # the database, its WAL, stored results, logs


def test_a_grid_table_given_in_the_grids_own_km_is_the_same_people_as_in_lat_lon():
    """A grid's records carry x0, x1 (km) and lat, lon: a table that gives x0, x1 (it raised KeyError 'lat') is
    brought into lat, lon by the grid's own map, so the universe test and the population sketch see the same
    people as when the same table gives lat, lon (in km, a sketch kept in lat, lon matched none of them)."""
    from mdp_core.problem.datasets.grid import grid_latlon

    inst = grid(5, 6, n_outputs=30, seed=0)
    km = inst.record_points()[[0, 7, 29]] + 0.05
    latlon = grid_latlon(km, (41.66, 12.24))
    by_km = people_of(pd.DataFrame({"x0": km[:, 0], "x1": km[:, 1]}))
    by_deg = people_of(pd.DataFrame({"lat": latlon[:, 0], "lon": latlon[:, 1]}))
    assert by_km.geo and by_deg.geo
    assert by_km.points is not None and by_deg.points is not None
    assert np.allclose(by_km.points, by_deg.points, rtol=0, atol=1e-12)
    assert np.allclose(by_km.records, by_deg.records, rtol=0, atol=1e-12)
    assert np.allclose(by_km.records, inst.records[["lat", "lon"]].to_numpy()[[0, 7, 29]])
