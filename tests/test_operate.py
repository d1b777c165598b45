"""Operating releases against a real Prefect server (the session's shared ``prefect_server``):
scheduled runs by all three routes reach Completed and publish a release, ``prefect.yaml`` deploys,
the entry point ignores folders in the working directory, and a failing run leaves its reason.

The three scheduling routes run side by side in one test (each a long-running process we start and
stop by its process group), so the suite pays for one schedule wait, not three.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import QUIET

pytestmark = [pytest.mark.flow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]

CONFIG = """
name = "{name}"
store = "{store}"
[dataset]
kind = "grid"
params = {{ rows = 4, cols = 5, n_outputs = 8, seed = 2 }}
[privacy]
epsilon = 10.0
eta = 2.0
[solve]
method = "lp"
[release]
n_individuals = 200
[evaluate]
baselines = []
counts_eps = [1.0]
counts_seeds = 2
"""


def _env(server, tmp_path: Path) -> dict[str, str]:
    return (
        os.environ
        | QUIET
        | {
            "PREFECT_API_URL": server["url"],
            "PREFECT_HOME": str(server["home"]),
            "MDP_RELEASE_HOME": str(tmp_path),
            "PREFECT_RUNNER_POLL_FREQUENCY": "2",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
        }
    )


def _run(args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """A command to its end, output captured as text."""
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _api(server, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        server["url"] + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    for attempt in range(4):  # a busy 2-core machine can keep the server from answering for a while
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.load(r)
        except (TimeoutError, OSError):
            if attempt == 3:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def _runs_of(server, deployment: str) -> list[dict]:
    return _api(server, "/flow_runs/filter", {"deployments": {"name": {"any_": [deployment]}}})


def _start(args: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _write_config(folder: Path, name: str, store: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, store=store))
    return path


def test_scheduled_runs_complete_by_serve_cli_python_serve_and_worker(prefect_server, tmp_path):
    env = _env(prefect_server, tmp_path)
    # A working directory full of traps: folders named like the project's top-level packages.
    cwd = tmp_path / "elsewhere"
    for trap in ("artifacts", "tasks", "mdp_core"):
        (cwd / trap).mkdir(parents=True)
    conf = tmp_path / "conf"
    # A relative store: resolved against the config file's folder, never the process's working directory.
    serve_cfg = _write_config(conf, "sched-serve", "stores/serve")
    worker_cfg = _write_config(conf, "sched-worker", "stores/worker")
    py_store = tmp_path / "stores" / "python"
    py_config = {
        "name": "sched-python",
        "store": str(py_store),
        "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 8, "seed": 2}},
        "solve": {"method": "lp"},
        "release": {"n_individuals": 200},
        "evaluate": {"baselines": [], "counts_eps": [1.0], "counts_seeds": 2},
    }
    script = textwrap.dedent(f"""
        from flows.release import release_flow
        release_flow.serve(name="sched-python", interval=30, parameters={{"config": {py_config!r}}})
    """)
    deployed = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "deploy",
            "--pool",
            "sched-pool",
            "--interval",
            "30",
            "--config",
            str(worker_cfg),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    assert "sched-pool" in deployed.stdout and "prefect worker start --pool sched-pool" in deployed.stdout
    procs = {
        "sched-serve": _start(
            [sys.executable, "-m", "flows.cli", "serve", "--interval", "30", "--config", str(serve_cfg)],
            cwd,
            env,
            tmp_path / "serve.log",
        ),
        "sched-python": _start([sys.executable, "-c", script], cwd, env, tmp_path / "python.log"),
        "sched-worker": _start(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", "sched-pool"],
            cwd,
            env,
            tmp_path / "worker.log",
        ),
    }
    done: dict[str, dict] = {}
    try:
        t0 = time.monotonic()
        while len(done) < 3 and time.monotonic() - t0 < 420:
            for dep in procs:
                if dep in done:
                    continue
                runs = _runs_of(prefect_server, dep)
                failed = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
                assert not failed, f"{dep}: {failed[0]['state']['message']}"
                ok = [r for r in runs if r["state_type"] == "COMPLETED"]
                if ok:
                    done[dep] = ok[0]
                    _stop(procs[dep])  # one completed scheduled run is the proof: spare the machine
            time.sleep(3)
    finally:
        for p in procs.values():
            _stop(p)
    logs = {
        d: (tmp_path / f).read_text(errors="replace")[-3000:]
        for d, f in (("sched-serve", "serve.log"), ("sched-python", "python.log"), ("sched-worker", "worker.log"))
    }
    assert set(done) == set(procs), {d: logs[d] for d in procs if d not in done}

    stores = {
        "sched-serve": conf / "stores" / "serve",
        "sched-worker": conf / "stores" / "worker",
        "sched-python": py_store,
    }
    for dep, run in done.items():
        assert run["name"].startswith(f"{dep}-"), run["name"]  # the release name + config hash
        assert {"dataset:grid", "method:lp", f"release:{dep}"} <= set(run["tags"])
        manifests = {p.parent: json.loads(p.read_text()) for p in stores[dep].glob("runs/*/manifest.json")}
        mine = [(d, m) for d, m in manifests.items() if m["flow_run_id"] == run["id"]]
        assert mine, f"{dep}: no release for flow run {run['id']} in {stores[dep]}"
        run_dir, manifest = mine[0]
        assert (run_dir / "mechanism.parquet").is_file() and manifest["privacy"]["certificate"]["passed"] is True
    assert not (cwd / "stores").exists() and not (cwd / "artifacts" / "store").exists()


def test_prefect_yaml_deploys_the_flow_from_this_checkout(prefect_server, tmp_path):
    env = _env(prefect_server, tmp_path) | {"PWD": str(REPO)}
    created = _run(
        [sys.executable, "-m", "prefect", "work-pool", "create", "mdp-release", "--type", "process"], REPO, env, 120
    )
    assert created.returncode == 0 or "already exists" in created.stdout + created.stderr, created.stderr[-2000:]
    proc = _run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"], REPO, env, 180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    deps = {d["name"]: d for d in _api(prefect_server, "/deployments/filter", {})}
    nightly = deps["nightly"]
    assert nightly["entrypoint"] == "flows/release.py:release_flow" and nightly["work_pool_name"] == "mdp-release"
    assert nightly["pull_steps"] == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 3 * * *"]


def test_failed_run_leaves_one_line_reason_in_run_folder_and_ui(prefect_server, tmp_path):
    env = _env(prefect_server, tmp_path)
    cfg = tmp_path / "fail.toml"
    # The solve stage gets 1 ms: it times out, the flow fails, the hook records why.
    cfg.write_text(CONFIG.format(name="fails", store=str(tmp_path / "st")) + "[run.timeouts]\nsolve = 0.001\n")
    proc = _run([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)], tmp_path, env, 300)
    assert proc.returncode == 1, proc.stderr[-2000:]  # a run failure, not bad input (TimeoutError is an OSError)
    records = list((tmp_path / "st" / "runs").glob("*-failed/FAILED.txt"))
    assert len(records) == 1
    reason = records[0].read_text().splitlines()[0]
    assert "timeout" in reason.lower() or "timed out" in reason.lower(), reason
    runs = _api(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:fails"]}}})
    assert runs and runs[0]["state_type"] == "FAILED"
    arts = _api(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": ["fails-failure"]}}})
    assert arts and reason in arts[0]["data"]

    # [run.timeouts] release applies to the publication too: every stage computes, the door times out,
    # nothing is published.
    cfg.write_text(CONFIG.format(name="late", store=str(tmp_path / "st2")) + "[run.timeouts]\nrelease = 0.001\n")
    proc = _run([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)], tmp_path, env, 300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    published = [d.name for d in (tmp_path / "st2" / "runs").iterdir()]
    assert len(published) == 1 and published[0].endswith("-failed"), published
    reason = (tmp_path / "st2" / "runs" / published[0] / "FAILED.txt").read_text().splitlines()[0]
    assert "timed out" in reason.lower() or "timeout" in reason.lower(), reason


def test_entry_point_ignores_package_named_folders_in_the_working_directory(tmp_path):
    for trap in ("artifacts", "tasks", "mdp_core"):
        (tmp_path / trap).mkdir()
    code = "import flows, artifacts.store, tasks.cache, mdp_core.io; print(artifacts.store.__file__)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == REPO / "artifacts" / "store.py"
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "ingest" in proc.stdout


def test_dask_workers_bind_the_project_packages_whatever_the_working_directory(tmp_path):
    """Dask worker processes (prefect-dask's local cluster, mdp_core.executor.DaskExecutor) import the
    project's modules by name with the working directory on sys.path: importing ``flows`` makes them
    preload ``flows``, which binds the checkout's packages there too (without it a package-named folder
    shadowed them and the run hung). A LocalCluster with the defaults both runners use, started from a
    folder holding ``artifacts/``, ``tasks/`` and ``mdp_core/`` packages."""
    for trap in ("artifacts", "tasks", "mdp_core"):
        (tmp_path / trap).mkdir()
        (tmp_path / trap / "__init__.py").write_text("")
    code = textwrap.dedent(
        """
        import json
        import flows  # what every process running the pipeline does first
        from distributed import Client, LocalCluster

        def where():
            import artifacts, mdp_core, tasks, tasks.evaluate
            return [m.__file__ for m in (artifacts, mdp_core, tasks, tasks.evaluate)]

        if __name__ == "__main__":
            with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
                with Client(cluster) as client:
                    print(json.dumps(list(client.run(where).values())))
        """
    )
    env = os.environ | QUIET
    env.pop("DASK_DISTRIBUTED__WORKER__PRELOAD", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [files] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert files == [
        str(REPO / "artifacts" / "__init__.py"),
        str(REPO / "mdp_core" / "__init__.py"),
        str(REPO / "tasks" / "__init__.py"),
        str(REPO / "tasks" / "evaluate.py"),
    ]


def test_server_command_reuses_a_running_server_and_reports_status(prefect_server, tmp_path):
    """`mdp-release server start | status | stop` against the session's server (already up: start
    adopts it, stop forgets it without killing a server it did not start)."""
    env = os.environ | QUIET | {"MDP_RELEASE_HOME": str(tmp_path)}
    env.pop("PREFECT_API_URL", None)
    port = prefect_server["url"].split(":")[-1].split("/")[0]

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "flows.cli", "server", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert cli("status").returncode == 1
    started = cli("start", "--port", port)
    assert started.returncode == 0 and f"127.0.0.1:{port}" in started.stdout
    status = cli("status")
    assert status.returncode == 0 and prefect_server["url"] in status.stdout
    assert cli("stop").returncode == 0
    assert cli("status").returncode == 1
    with urllib.request.urlopen(prefect_server["url"] + "/health", timeout=30) as r:
        assert r.status == 200  # still running


def test_deploy_with_cron_and_run_now(prefect_server, tmp_path):
    """The README's `mdp-release deploy --pool releases --cron ...` and `prefect deployment run ...`."""
    env = _env(prefect_server, tmp_path)
    cfg = _write_config(tmp_path, "cron-release", str(tmp_path / "st"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "deploy",
            "--pool",
            "releases",
            "--cron",
            "0 3 * * *",
            "--config",
            str(cfg),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dep = [d for d in _api(prefect_server, "/deployments/filter", {}) if d["name"] == "cron-release"][0]
    assert [s["schedule"]["cron"] for s in dep["schedules"]] == ["0 3 * * *"]
    assert dep["parameters"]["config"]["store"] == str(tmp_path / "st") and dep["work_pool_name"] == "releases"
    now = _run([sys.executable, "-m", "prefect", "deployment", "run", "mdp-release/cron-release"], tmp_path, env, 120)
    assert now.returncode == 0, now.stdout[-2000:] + now.stderr[-2000:]
    assert _runs_of(prefect_server, "cron-release"), "no flow run created"
