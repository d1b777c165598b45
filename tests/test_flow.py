"""End-to-end release flow tests against one real Prefect server shared by this module.

Every run is a separate OS process (``python -m flows.cli run``) talking to the server, so the cache
behaviour shown here is the cross-process one users get. Stage execution is read from the run
manifests (``stages.<name>.cache_hit``), never from timing.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import api_post, run_command, server_env

from mdp_core.declarations import contract

pytestmark = [pytest.mark.flow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
STAGES = [s for s in contract.CACHED_STAGES if s != "prior"]  # the default config has no prior stage
# Parquet files holding wall-clock timings (columns named *seconds): reproducible apart from those.
TIMED = {"evaluation.parquet", "trace.parquet"}
# Drawn with the store's secret draw: the same bytes from the same store, different in another store.
DRAWN = {"microdata.parquet", "aggregates.parquet", "cbdp_error.parquet"}


CONFIG = """
store = "{store}"
[dataset]
kind = "grid"
params = {{ rows = 5, cols = 6, n_outputs = 12, seed = 1 }}
[privacy]
epsilon = {epsilon}
eta = 2.0
[partition]
method = "{partition}"
subsets = 3
[solve]
method = "{method}"
[release]
simulate = true
n_individuals = 500
eps_counts = 1.0
[evaluate]
baselines = ["exp"]
"""


def _run(server, tmp_path: Path, store: Path, *extra: str, **cfg) -> dict:
    values = {"store": store, "epsilon": 10.0, "partition": "kmdv", "method": "benders"} | cfg
    path = tmp_path / f"cfg-{time.monotonic_ns()}.toml"
    path.write_text(CONFIG.format(**values) + values.get("tail", ""))
    env = server_env(server, tmp_path)
    args = [sys.executable, "-m", "flows.cli", "run", "--json", *extra]
    if "--from-manifest" not in extra:
        args += ["--config", str(path)]
    proc = run_command(args, tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)  # this run's manifest (a run that published nothing new has no file of its own)


def _executed(manifest: dict) -> set[str]:
    return {s for s, e in manifest["stages"].items() if not e["cache_hit"]}


def test_cached_reruns_and_selective_invalidation(prefect_server, tmp_path):
    store = tmp_path / "store"
    first = _run(prefect_server, tmp_path, store)
    assert _executed(first) == set(STAGES)
    assert first["privacy"]["certificate"]["passed"] is True
    run_dir = Path(first["run_dir"]) if "run_dir" in first else store / "runs" / first["run_name"]
    for name in ("mechanism.parquet", "evaluation.parquet", "aggregates.parquet", "microdata.parquet", "manifest.json"):
        assert (run_dir / name).is_file(), name

    # What the Prefect UI shows for this run: the evaluation table and the markdown report.
    arts = {
        a["key"]: a
        for a in api_post(prefect_server, "/artifacts/filter", {"flow_runs": {"id": {"any_": [first["flow_run_id"]]}}})
    }
    name = "grid-eps10-benders"  # the release name derived from the config: artifact keys per release
    assert first["flow_run_id"] and arts[f"{name}-evaluation"]["type"] == "table"
    rows = arts[f"{name}-evaluation"]["data"]
    rows = json.loads(rows) if isinstance(rows, str) else rows
    assert {row["method"] for row in rows} >= {"benders", "exp"}
    assert (
        arts[f"{name}-report"]["type"] == "markdown" and "Privacy certificate: PASS" in arts[f"{name}-report"]["data"]
    )
    assert "data:image/png;base64," in arts[f"{name}-report"]["data"]  # plots the browser can show
    release_md = arts[f"{name}-release"]["data"]
    assert str(run_dir) in release_md and "realised eps" in release_md and "PASS" in release_md
    assert (store / "runs" / "latest" / "manifest.json").is_file()

    second = _run(prefect_server, tmp_path, store)
    assert _executed(second) == set()
    assert {s: e["cache_key"] for s, e in second["stages"].items()} == {
        s: e["cache_key"] for s, e in first["stages"].items()
    }
    # Two fully cached re-runs: the same bytes, so nothing new is published; latest is the first release.
    third = _run(prefect_server, tmp_path, store)
    assert second["released_files"] == third["released_files"] == first["released_files"]
    assert second["same_as"] == third["same_as"] == run_dir.name
    assert Path(second["run_dir"]) == Path(third["run_dir"]) == run_dir
    assert [p.name for p in (store / "runs").iterdir() if p.name != "latest"] == [run_dir.name]
    assert (store / "runs" / "latest").resolve() == run_dir.resolve()
    # ... but every run has a name of its own (release name, config hash, UTC time, id)
    names = [
        f["name"]
        for f in api_post(
            prefect_server,
            "/flow_runs/filter",
            {"flow_runs": {"id": {"any_": [m["flow_run_id"] for m in (first, second, third)]}}},
        )
    ]
    assert len(set(names)) == 3 and all(n.startswith(f"{name}-") for n in names), names

    eps = _run(prefect_server, tmp_path, store, epsilon=5.0)
    assert _executed(eps) == {"export", "solve", "measure", "evaluate"}

    part = _run(prefect_server, tmp_path, store, partition="kmrec")
    assert {"ingest", "graph", "export"}.isdisjoint(_executed(part))
    assert {"partition", "solve"} <= _executed(part)

    # Delete one artifact file of the partition stage: only that stage recomputes; its output is
    # byte-identical, so stages downstream keep their keys and stay cached.
    victim = store / first["stages"]["partition"]["artifact"] / "partition.parquet"
    victim.unlink()
    healed = _run(prefect_server, tmp_path, store)
    assert _executed(healed) == {"partition"}
    assert victim.is_file()

    refreshed = _run(prefect_server, tmp_path, store, "--refresh-from", "solve")
    assert _executed(refreshed) == {"solve", "measure", "evaluate"}


def test_keep_releases_keeps_the_newest_n_and_latest(prefect_server, tmp_path):
    """``[run] keep_releases = 2``: three different releases of one config (a fresh secret draw each:
    cached solve, new microdata) leave the newest two; ``latest`` points at the newest."""
    store = tmp_path / "store"
    dirs = []
    for extra in ([], ["--new-draw"], ["--new-draw"]):
        m = _run(prefect_server, tmp_path, store, *extra, method="lp", tail="[run]\nkeep_releases = 2\n")
        assert "same_as" not in m
        dirs.append(Path(m["run_dir"]))
    assert len(set(dirs)) == 3
    left = sorted(p.name for p in (store / "runs").iterdir() if p.name != "latest" and not p.name.startswith("."))
    assert left == sorted(d.name for d in dirs[1:])
    assert (store / "runs" / "latest").resolve() == dirs[2].resolve()


def test_rerun_from_manifest_reproduces_parquet_bytes(prefect_server, tmp_path):
    """From the same store: byte-identical (the draw is in its private part), even with every cached
    object deleted. Into another store: refused -- the draw is private to the store that made it."""
    store_a = tmp_path / "a"
    first = _run(prefect_server, tmp_path, store_a, method="lp")
    manifest_path = store_a / "runs" / first["run_name"] / "manifest.json"
    saved = tmp_path / "manifest.json"
    shutil.copyfile(manifest_path, saved)
    shutil.rmtree(store_a / "objects")
    shutil.rmtree(store_a / "runs")
    shutil.rmtree(store_a / "prefect", ignore_errors=True)
    again = _run(prefect_server, tmp_path, store_a, "--from-manifest", str(saved), "--store", str(store_a))
    assert _executed(again) == set(STAGES)
    assert again["privacy"]["draw_commitment"] == first["privacy"]["draw_commitment"]
    assert again["privacy"]["ledger"] == first["privacy"]["ledger"]  # the same release spends nothing more
    for name, digest in first["released_files"].items():
        if name in TIMED or name in ("solve.json", "report.md"):  # wall-clock timings inside
            continue
        assert again["released_files"][name] == digest, name
    env = server_env(prefect_server, tmp_path)
    args = [sys.executable, "-m", "flows.cli", "run", "--from-manifest", str(saved), "--store", str(tmp_path / "b")]
    proc = run_command(args, tmp_path, env)
    assert proc.returncode == 2 and "reproduced only from the store that made it" in proc.stderr, proc.stderr[-2000:]


SWEEP = """
store = "{store}"
[dataset]
kind = "grid"
params = {{ rows = 4, cols = 5, n_outputs = 8, seed = 2 }}
[privacy]
epsilon = {epsilon}
[partition]
subsets = 2
[solve]
method = "benders"
[release]
simulate = true
n_individuals = 200
[evaluate]
baselines = ["exp", "lp"]
eps_factors = [0.5, 1.0]
counts_eps = [1.0]
counts_seeds = 2
[run]
task_runner = "{runner}"
max_workers = {workers}
"""


def _cli(server, tmp_path: Path, *configs: Path) -> list[dict]:
    env = server_env(server, tmp_path)
    args = [sys.executable, "-m", "flows.cli", "run", "--json"]
    for c in configs:
        args += ["--config", str(c)]
    proc = run_command(args, tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    return out if isinstance(out, list) else [out]


def _same_release(dir_a: Path, dir_b: Path) -> None:
    """The same release apart from timings and what the two stores' secret draws decide."""
    parquet = sorted(p.name for p in dir_a.glob("*.parquet") if p.name not in DRAWN)
    assert parquet and parquet == sorted(p.name for p in dir_b.glob("*.parquet") if p.name not in DRAWN)
    for name in parquet:
        if name in TIMED:
            a, b = (pd.read_parquet(d / name) for d in (dir_a, dir_b))
            a, b = (f.drop(columns=[c for c in f.columns if c.endswith("seconds")]) for f in (a, b))
            pd.testing.assert_frame_equal(a, b)
        else:
            assert (dir_a / name).read_bytes() == (dir_b / name).read_bytes(), name


def test_dask_task_runner_gives_the_serial_release_bytes_and_batch_shares_stages(prefect_server, tmp_path):
    pytest.importorskip("prefect_dask")
    distributed = pytest.importorskip("distributed")
    serial, dask = tmp_path / "serial.toml", tmp_path / "dask.toml"
    serial.write_text(SWEEP.format(store=tmp_path / "s1", epsilon=10.0, runner="thread", workers=1))
    (a,) = _cli(prefect_server, tmp_path, serial)
    # A running Dask cluster (2 worker processes) that the flow reaches through `dask_address`.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        dask.write_text(
            SWEEP.format(store=tmp_path / "s2", epsilon=10.0, runner="dask", workers=2)
            + f'dask_address = "{cluster.scheduler_address}"\n'
        )
        (b,) = _cli(prefect_server, tmp_path, dask)
    # each baseline and sweep point was its own cached task run: 2 baselines at eps + 3 mechanisms at eps/2
    assert len(list((tmp_path / "s2" / "objects" / "evaluate_point").glob("*/ref.json"))) == 5
    _same_release(Path(a["run_dir"]), Path(b["run_dir"]))

    # Two configs, one flow: the second shares ingest/graph/partition with the first (cached).
    other = tmp_path / "other.toml"
    other.write_text(SWEEP.format(store=tmp_path / "s1", epsilon=5.0, runner="thread", workers=2))
    first, second = _cli(prefect_server, tmp_path, serial, other)
    assert {"ingest", "graph", "partition"}.isdisjoint(_executed(second)) and "solve" in _executed(second)
    assert second["privacy"]["mechanism_epsilon"] == 5.0 and first["privacy"]["mechanism_epsilon"] == 10.0
    # The batch parent: named after its releases, tagged, with an artifact saying where each went.
    batch = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["batch"]}}})
    batch = [f for f in batch if f["name"].startswith("batch-2-grid-")]
    assert batch and {"batch", "dataset:grid", "method:benders", "eps:10", "eps:5"} <= set(batch[0]["tags"])
    arts = api_post(prefect_server, "/artifacts/filter", {"flow_runs": {"id": {"any_": [batch[0]["id"]]}}})
    table = [a for a in arts if a["key"] == "mdp-release-batch"]
    assert table and all(m["run_dir"] in table[0]["data"] for m in (first, second))
