"""Operating releases against a real Prefect server (the session's shared ``prefect_server``):
scheduled runs by all three routes reach Completed and publish a release, ``prefect.yaml`` deploys,
the entry point ignores folders in the working directory, and a failing run leaves its stage and reason;
and the commands of docs/operating.md's "Scheduled releases", in order, after ``mdp-release server start`` on a server of
their own.

The three scheduling routes run side by side in one test (each a long-running process we start and
stop by its process group), so the suite pays for one schedule wait, not three.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import (
    MDP,
    PREFECT,
    QUIET,
    api_post,
    first_completed,
    free_port,
    operate_env,
    run_command,
    runs_of,
    start_logged,
    stop_group,
)

pytestmark = [pytest.mark.flow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
# s between two ticks: a deployment's first tick comes one interval after it is made (the test waits for it);
# a run of the 4 x 5 grid below takes about as long, so a tick or two are skipped meanwhile
INTERVAL = "15"

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
simulate = true
n_individuals = 200
[evaluate]
baselines = []
counts_eps = [1.0]
counts_seeds = 2
"""


def _write_config(folder: Path, name: str, store: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, store=store))
    return path


def test_scheduled_runs_complete_by_serve_cli_python_serve_and_worker(prefect_server, tmp_path):
    env = operate_env(prefect_server, tmp_path)
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
        "release": {"simulate": True, "n_individuals": 200},
        "evaluate": {"baselines": [], "counts_eps": [1.0], "counts_seeds": 2},
    }
    script = tmp_path / "scripts" / "serve_it.py"  # a script run by its path: its folder on sys.path, not cwd's
    script.parent.mkdir()
    script.write_text(
        textwrap.dedent(f"""
        from flows.release import release_flow
        if __name__ == "__main__":
            release_flow.serve(name="sched-python", interval={INTERVAL}, parameters={{"config": {py_config!r}}})
    """)
    )
    deployed = subprocess.run(
        [
            MDP,
            "deploy",
            "--pool",
            "sched-pool",
            "--interval",
            INTERVAL,
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
        "sched-serve-serve": start_logged(
            [MDP, "serve", "--interval", INTERVAL, "--config", str(serve_cfg)], cwd, env, tmp_path / "serve.log"
        ),
        "sched-python": start_logged([sys.executable, str(script)], cwd, env, tmp_path / "python.log"),
        "sched-worker-sched-pool": start_logged(
            [PREFECT, "worker", "start", "--pool", "sched-pool"],
            cwd,
            env,
            tmp_path / "worker.log",
        ),
    }
    done = first_completed(prefect_server, procs, 420)
    logs = {
        d: (tmp_path / f).read_text(errors="replace")[-3000:]
        for d, f in (
            ("sched-serve-serve", "serve.log"),
            ("sched-python", "python.log"),
            ("sched-worker-sched-pool", "worker.log"),
        )
    }
    assert set(done) == set(procs), {d: logs[d] for d in procs if d not in done}
    assert "never awaited" not in logs["sched-serve-serve"]  # serve stopped by SIGTERM, cleanly
    assert procs["sched-serve-serve"].returncode == 0, logs["sched-serve-serve"]
    left = [r for r in runs_of(prefect_server, "sched-serve-serve") if r["state_type"] == "SCHEDULED"]
    assert not left, f"{len(left)} scheduled runs left after serve stopped"

    releases = {  # deployment -> (release name, store)
        "sched-serve-serve": ("sched-serve", conf / "stores" / "serve"),
        "sched-worker-sched-pool": ("sched-worker", conf / "stores" / "worker"),
        "sched-python": ("sched-python", py_store),
    }
    for dep, run in done.items():
        release, store = releases[dep]
        assert run["name"].startswith(f"{release}-"), run["name"]  # the release name + config hash + time
        assert {"dataset:grid", "method:lp", f"release:{release}"} <= set(run["tags"])
        manifests = {p.parent: json.loads(p.read_text()) for p in store.glob("runs/*/manifest.json")}
        mine = [(d, m) for d, m in manifests.items() if m["flow_run_id"] == run["id"]]
        assert mine, f"{dep}: no release for flow run {run['id']} in {store}"
        run_dir, manifest = mine[0]
        assert (run_dir / "mechanism.parquet").is_file() and manifest["privacy"]["certificate"]["passed"] is True
    assert not (cwd / "stores").exists() and not (cwd / "artifacts" / "store").exists()


def test_prefect_yaml_deploys_the_flow_from_this_checkout(prefect_server, tmp_path):
    env = operate_env(prefect_server, tmp_path) | {"PWD": str(REPO)}
    created = run_command(
        [sys.executable, "-m", "prefect", "work-pool", "create", "mdp-release", "--type", "process"], REPO, env, 120
    )
    assert created.returncode == 0 or "already exists" in created.stdout + created.stderr, created.stderr[-2000:]
    proc = run_command([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"], REPO, env, 180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    deps = {d["name"]: d for d in api_post(prefect_server, "/deployments/filter", {})}
    nightly = deps["nightly"]
    assert nightly["entrypoint"] == "flows/release.py:release_flow" and nightly["work_pool_name"] == "mdp-release"
    assert nightly["pull_steps"] == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 3 * * *"]


def test_failed_run_leaves_one_line_reason_in_run_folder_and_ui(prefect_server, tmp_path):
    env = operate_env(prefect_server, tmp_path)
    cfg = tmp_path / "fail.toml"
    # The solve stage gets 1 ms: it times out, the flow fails, the hook records why.
    cfg.write_text(CONFIG.format(name="fails", store=str(tmp_path / "st")) + "[run.timeouts]\nsolve = 0.001\n")
    proc = run_command([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)], tmp_path, env, 300)
    assert proc.returncode == 1, proc.stderr[-2000:]  # a run failure, not bad input (TimeoutError is an OSError)
    records = list((tmp_path / "st" / "runs").glob("*-failed/FAILED.txt"))
    assert len(records) == 1
    reason = records[0].read_text().splitlines()[0]
    assert reason.startswith("solve: ") and ("timeout" in reason.lower() or "timed out" in reason.lower()), reason
    runs = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:fails"]}}})
    assert runs and runs[0]["state_type"] == "FAILED"
    arts = api_post(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": ["fails-failure"]}}})
    assert arts and reason in arts[0]["data"]

    # [run.timeouts] publish applies to the publication too: every stage computes, the door times out,
    # nothing is published.
    cfg.write_text(CONFIG.format(name="late", store=str(tmp_path / "st2")) + "[run.timeouts]\npublish = 0.001\n")
    proc = run_command([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)], tmp_path, env, 300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    published = [d.name for d in (tmp_path / "st2" / "runs").iterdir()]
    assert len(published) == 1 and published[0].endswith("-failed"), published
    reason = (tmp_path / "st2" / "runs" / published[0] / "FAILED.txt").read_text().splitlines()[0]
    assert reason.startswith("publish: ") and ("timed out" in reason.lower() or "timeout" in reason.lower()), reason


def test_run_sends_one_heartbeat_of_its_own_like_prefects(prefect_server, tmp_path):
    """``mdp-release run`` against a server: each run's ``prefect.flow-run.heartbeat`` comes from the release's
    own thread (Prefect's engine heartbeat off, whose thread the run would wait for at its end), exactly once
    for a short run (so not the engine's as well), with the resource and related flow and tags that Prefect's
    automations match (a run whose heartbeats stop is marked Crashed)."""
    env = operate_env(prefect_server, tmp_path)
    cfg = _write_config(tmp_path, "beats", str(tmp_path / "st"))
    for _ in range(2):  # the first run computes, the second is fully cached
        proc = run_command([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)], tmp_path, env, 300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    runs = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:beats"]}}})
    assert len(runs) == 2 and all(r["state_type"] == "COMPLETED" for r in runs)
    ids = {f"prefect.flow-run.{r['id']}": r for r in runs}
    body = {
        "filter": {
            "event": {"name": ["prefect.flow-run.heartbeat"]},
            "resource": {"id": sorted(ids)},
            "occurred": {"since": "2000-01-01T00:00:00Z"},
        },
        "limit": 50,
    }
    for _ in range(30):  # the server persists events a moment after they arrive
        events = api_post(prefect_server, "/events/filter", body)["events"]
        if len(events) >= 2:
            break
        time.sleep(1)
    assert sorted(e["resource"]["prefect.resource.id"] for e in events) == sorted(ids), events
    for e in events:
        run = ids[e["resource"]["prefect.resource.id"]]
        assert e["resource"]["prefect.resource.name"] == run["name"]
        related = {(r["prefect.resource.role"], r["prefect.resource.id"]) for r in e["related"]}
        assert ("flow", f"prefect.flow.{run['flow_id']}") in related
        assert ("tag", "prefect.tag.release:beats") in related


@pytest.mark.filterwarnings("ignore:Artifact creation outside of a flow or task run:FutureWarning")
def test_a_crash_without_a_message_still_records_its_stage_and_a_reason(prefect_server, tmp_path):
    """A crash after publication (the flow cancelled by its runtime: ``CancelledError()``, whose text is
    empty) records the stage it was at and the state's message, never an empty reason."""
    import asyncio
    from uuid import uuid4

    from prefect.client.schemas.objects import FlowRun
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Crashed

    from flows import operate_ui

    run = FlowRun(flow_id=uuid4(), name="crashy-run", parameters={"config": {"name": "crashy", "store": str(tmp_path)}})
    operate_ui.at_stage(str(run.id), "after publication (runs/x is published)")
    state = Crashed(message="Execution was cancelled by the runtime environment.", data=asyncio.CancelledError())
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["url"]}):
        folder = operate_ui.record_failure(run, state)
    assert folder is not None
    first = (folder / "FAILED.txt").read_text().splitlines()[0]
    assert first == (
        "after publication (runs/x is published): CancelledError: Execution was cancelled by the runtime environment."
    )
    # a run that failed before any stage says so
    run2 = FlowRun(flow_id=uuid4(), name="early", parameters={"config": {"name": "crashy", "store": str(tmp_path)}})
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["url"]}):
        folder2 = operate_ui.record_failure(run2, Crashed(message="", data=asyncio.CancelledError()))
    assert folder2 is not None
    assert (folder2 / "FAILED.txt").read_text().splitlines()[0] == "before the first stage: CancelledError: no message"


def test_importing_flows_changes_no_environment_and_no_module_table(tmp_path):
    """Importing the flow (what a worker, the Python API and the CLI do) sets no environment variable and
    binds no module by hand: Prefect is configured only where Prefect documents it."""
    code = textwrap.dedent(
        """
        import json, os, sys
        env, mods = dict(os.environ), set(sys.modules)
        import flows, flows.release
        added = sorted(set(sys.modules) - mods)
        wrong = [m for m in added if m.split(".")[0] in ("artifacts", "tasks", "mdp_core", "flows")
                 and not (getattr(sys.modules[m], "__file__", None) or "").startswith(sys.argv[1])]
        print(json.dumps({"env": sorted(k for k in set(os.environ) ^ set(env)), "wrong": wrong}))
        """
    )
    script = tmp_path / "probe.py"
    script.write_text(code)
    env = os.environ.copy()
    for k in ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK", "DASK_DISTRIBUTED__WORKER__PRELOAD"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, str(script), str(REPO)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"env": [], "wrong": []}


def test_console_script_and_python_P_ignore_package_named_folders_in_the_working_directory(tmp_path):
    """The documented protection against an ``artifacts/`` (``tasks/``, ``mdp_core/``) folder in the working
    directory: the ``mdp-release`` console script does not put the working directory on ``sys.path``, and
    ``python -P`` (PYTHONSAFEPATH) does the same for ``-m`` / ``-c``."""
    for trap in ("artifacts", "tasks", "mdp_core"):
        (tmp_path / trap).mkdir()
        (tmp_path / trap / "__init__.py").write_text("raise ImportError('the trap was imported')\n")
    proc = subprocess.run([MDP, "run", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "ingest" in proc.stdout, proc.stderr
    code = "import flows.release, artifacts.store; print(artifacts.store.__file__)"
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Path(proc.stdout.strip().splitlines()[-1]) == REPO / "artifacts" / "store.py"


def test_dask_workers_import_the_project_packages_whatever_the_working_directory(tmp_path):
    """Dask worker processes (prefect-dask's local cluster, mdp_core.runtime.executor.DaskExecutor) import the
    project's modules by name with the ``sys.path`` of the process that started them: started from the
    console script or a script run by its path, a folder there holding ``artifacts/``, ``tasks/`` and
    ``mdp_core/`` packages cannot shadow them (no preload, nothing bound by hand)."""
    pytest.importorskip("distributed")
    for trap in ("artifacts", "tasks", "mdp_core"):
        (tmp_path / trap).mkdir()
        (tmp_path / trap / "__init__.py").write_text("")
    code = textwrap.dedent(
        """
        import json
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
    script = tmp_path / "scripts" / "cluster.py"
    script.parent.mkdir()
    script.write_text(code)
    env = os.environ | QUIET
    env.pop("DASK_DISTRIBUTED__WORKER__PRELOAD", None)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
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
    assert started.returncode == 0 and started.stdout == f"export PREFECT_API_URL={prefect_server['url']}\n"
    status = cli("status")
    assert status.returncode == 0 and prefect_server["url"] in status.stdout
    second = cli("start", "--port", str(free_port()))  # would orphan the first: refused, nothing started
    assert second.returncode == 2 and "already running at " + prefect_server["url"] in second.stderr, second.stderr
    assert cli("stop").returncode == 0
    assert cli("status").returncode == 1
    gone = subprocess.run(  # an exported PREFECT_API_URL at which nothing answers is no server
        [sys.executable, "-m", "flows.cli", "server", "status"],
        env=env | {"PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gone.returncode == 1 and "no server answers" in gone.stdout, gone.stdout
    with urllib.request.urlopen(prefect_server["url"] + "/health", timeout=30) as r:
        assert r.status == 200  # still running


def test_deploy_with_cron_and_run_now(prefect_server, tmp_path):
    """The README's `mdp-release deploy --pool releases --cron ...` and `prefect deployment run ...`."""
    env = operate_env(prefect_server, tmp_path)
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
    dep = [d for d in api_post(prefect_server, "/deployments/filter", {}) if d["name"] == "cron-release-releases"][0]
    assert [s["schedule"]["cron"] for s in dep["schedules"]] == ["0 3 * * *"]
    assert dep["parameters"]["config"]["store"] == str(tmp_path / "st") and dep["work_pool_name"] == "releases"
    now = run_command(
        [sys.executable, "-m", "prefect", "deployment", "run", "mdp-release/cron-release-releases"], tmp_path, env, 120
    )
    assert now.returncode == 0, now.stdout[-2000:] + now.stderr[-2000:]
    assert runs_of(prefect_server, "cron-release-releases"), "no flow run created"


def _readme_operations() -> tuple[list[str], str]:
    """The shell commands (``bash`` blocks, in order, comments dropped) and the Python example of the
    "Scheduled releases" section of docs/operating.md."""
    text = (REPO / "docs" / "operating.md").read_text()
    section = text[text.index("\n## Scheduled releases") + 1 :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"```(bash|python)\n(.*?)```", section, re.S)
    commands = [
        re.split(r"\s+#\s", ln)[0].strip()
        for lang, b in blocks
        if lang == "bash"
        for ln in b.splitlines()
        if ln.strip()
    ]
    [python] = [b for lang, b in blocks if lang == "python"]
    return commands, python


def test_readme_operations_work_as_written_after_server_start(tmp_path):
    """Every command of docs/operating.md's "Scheduled releases", in order, in a fresh Prefect home with no PREFECT_API_URL:
    ``mdp-release server start --set-profile`` (on a free port, the one change) and then ``serve``,
    the Python ``release_flow.serve`` example, ``deploy``, ``prefect deployment ls``, ``prefect worker
    start``, ``prefect deployment run`` exactly as written, from the repository root (the shipped
    ``flows/examples/grid-release.toml``; its store, unset, is ``$MDP_RELEASE_STORE``: a temporary folder).
    Long-running ones run in the background until the runs they should make have completed, then get
    SIGTERM. Then ``server stop`` takes the profile setting back."""
    commands, python = _readme_operations()
    assert commands[0] == "mdp-release server start --set-profile", commands
    assert any(c.startswith("prefect worker start") for c in commands), commands
    import tomllib

    assert all("release.toml" not in c or "flows/examples/grid-release.toml" in c for c in commands), commands
    name = tomllib.loads((REPO / "flows/examples/grid-release.toml").read_text())["name"]
    work, store = REPO, tmp_path / "store"
    home = tmp_path / "prefect-home"
    env = os.environ | QUIET | {"PREFECT_HOME": str(home), "MDP_RELEASE_HOME": str(tmp_path / "mdp-home")}
    env |= {"MDP_RELEASE_STORE": str(store)}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env |= {"PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    env |= {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5"}  # for the server `server start` starts
    env |= {"COLUMNS": "250"}  # prefect's tables: full names
    env.pop("PREFECT_API_URL", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    background: dict[str, subprocess.Popen] = {}
    try:
        for i, command in enumerate(commands):
            if i == 0:
                command += f" --port {port}"
            if command.startswith(("mdp-release serve ", "prefect worker start ")):
                background[command] = start_logged(
                    ["bash", "-c", f"exec {command}"], work, env, tmp_path / f"bg{i}.log"
                )
                continue
            proc = run_command(["bash", "-c", command], work, env, 240)
            assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
            if i == 0:
                assert proc.stdout == f"export PREFECT_API_URL={url}\n", proc.stdout
                background["python"] = start_logged([sys.executable, "-c", python], work, env, tmp_path / "python.log")
            if command.startswith("prefect deployment ls"):
                assert f"{name}-releases" in proc.stdout, proc.stdout[-2000:]  # it talks to that server
        server = {"url": url}
        t0, done = time.monotonic(), {}
        while time.monotonic() - t0 < 300 and len(done) < 2:
            for dep in (f"{name}-serve", f"{name}-releases"):
                runs = runs_of(server, dep)
                failed = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
                assert not failed, f"{dep}: {failed[0]['state']['message']}"
                if any(r["state_type"] == "COMPLETED" for r in runs):
                    done[dep] = True
            time.sleep(3)
        logs = {p.name: p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log")}
        assert set(done) == {f"{name}-serve", f"{name}-releases"}, logs
        deployments = {d["name"] for d in api_post(server, "/deployments/filter", {})}
        assert {f"{name}-serve", f"{name}-releases", "nightly"} <= deployments  # the Python API found it
    except BaseException:  # stop the server anyway (it runs in a session of its own)
        run_command(["bash", "-c", "mdp-release server stop"], work, env, 120)
        raise
    finally:
        for proc in background.values():
            stop_group(proc)
    [(i, serve)] = [(i, background[c]) for i, c in enumerate(commands) if c.startswith("mdp-release serve ")]
    serve_log = (tmp_path / f"bg{i}.log").read_text(errors="replace")
    assert serve.returncode == 0 and "never awaited" not in serve_log, serve_log[-2000:]
    assert not [r for r in runs_of(server, f"{name}-serve") if r["state_type"] == "SCHEDULED"]
    folders = [p for p in (store / "runs").iterdir() if p.name != "latest"]
    releases = [p for p in folders if not p.name.endswith("-failed")]
    assert releases and all((p / "manifest.json").is_file() for p in releases)
    # a tick in flight when the test stopped its worker or Prefect's serve: recorded, killed by that SIGTERM
    stopped = [json.loads((p / "record.json").read_text())["reason"] for p in folders if p not in releases]
    assert all("SIGTERM" in reason for reason in stopped), stopped
    stopped = run_command(["bash", "-c", "mdp-release server stop"], work, env, 120)
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
    assert "PREFECT_API_URL" not in (home / "profiles.toml").read_text()
    t0 = time.monotonic()
    while urllib_healthy(url) and time.monotonic() - t0 < 30:
        time.sleep(0.5)
    assert not urllib_healthy(url)


def urllib_healthy(url: str) -> bool:
    from flows.run import healthy

    return healthy(url)


PRIVATE = ("PREFECT__", "os._exit", "sys.modules", "sys.argv[0]", "SubprocessASGIServer", "drain_all", "prefect._")


def test_no_private_prefect_names_and_no_process_hacks_in_the_code():
    """Prefect through its public API only: no private environment flags (``PREFECT__*``), no private
    modules (``prefect._*``), no draining of its workers, no ``os._exit``, no ``sys.modules`` rewriting,
    no ``sys.argv[0]`` checks, anywhere in the project's packages."""
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for pkg in ("flows", "tasks", "mdp_core", "artifacts")
        for path in sorted((REPO / pkg).rglob("*.py"))
        if "store" not in path.relative_to(REPO).parts[1:-1]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if any(name in line for name in PRIVATE)
    ]
    assert found == []


def _first_stderr_line(args: list[str], cwd: Path, env: dict) -> tuple[float, str, subprocess.Popen]:
    """Start ``args``; seconds until its first line on stderr, the line, and the process (still running)."""
    import threading

    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    got: list[tuple[float, str]] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: got.append((time.monotonic() - t0, proc.stderr.readline())))
    reader.start()
    reader.join(timeout=60)
    assert got, f"no line on stderr within 60 s: {args}"
    return got[0][0], got[0][1], proc


def test_every_long_command_shows_a_first_line_within_5_s(prefect_server, tmp_path):
    """`run`, `export`, `solve` (the slow starters): a first line on stderr within 5 s of starting (or done)."""
    env = operate_env(prefect_server, tmp_path)
    cfg = _write_config(tmp_path, "first-line", str(tmp_path / "st"))
    inst = tmp_path / "inst"
    cases = [
        [MDP, "run", "--config", str(cfg)],
        [MDP, "export", "--dataset", "grid", "--rows", "20", "--cols", "25", "--n-outputs", "100", "--out", str(inst)],
        [MDP, "solve", str(inst), "--method", "lp", "--out", str(tmp_path / "sol")],
    ]
    for args in cases:
        seconds, line, proc = _first_stderr_line(args, tmp_path, env)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (args, line, err[-2000:])
        # a line, or done already (stderr closed: "" read) -- within 5 s either way
        assert seconds < 5.0 and (line == "" or line.startswith(("mdp-release ", "solving "))), (args, seconds, line)
