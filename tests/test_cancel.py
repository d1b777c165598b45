"""Cancelling ``mdp-release run`` (a run without a deployment) through a real Prefect server.

``prefect flow-run cancel ID`` (the API's CANCELLING state: what Prefect offers for a run the UI cannot
cancel) and SIGTERM end the run **Cancelled**; the stopped solve task run is Cancelled
with the one-line stop message (no traceback); one cancellation record (``FAILED.txt`` + ``record.json``)
is in the release's store; nothing is published and nothing of the stopped stage is cached; the command
exits 1 with ``mdp-release: error: solve stopped: ...``.

Before: the cancelled run stayed "Cancelling" for 5 minutes after its process ended (the engine proposed
Failed, which the server refuses for a cancelling run) and its solve task run was Failed with a
traceback; SIGTERM ended the run Failed.

The solve: ``tests/test_stop.py``'s dense instance (N = 300, K = 100, > 90 s), stopped a few seconds in. The tests
assert the outcome (cancelled, nothing written), never how fast: a stop takes well under a second on a quiet machine
and ten or more at load 10; :data:`HANG_GUARD` only ends a run that never stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import DENSE_RUN_CONFIG, api_post, children, nothing_published, run_until_solving, wait_gone

pytestmark = [pytest.mark.flow, pytest.mark.slow]
HANG_GUARD = 120.0  # seconds: a run that has not stopped by then never will (not a measure of speed)


def _flow_run_of(server: dict[str, Any], since: float) -> dict[str, Any]:
    """The running ``mdp-release`` flow run started after ``since`` (unix time): the test's own."""
    runs = api_post(
        server,
        "/flow_runs/filter",
        {"flow_runs": {"state": {"type": {"any_": ["RUNNING"]}}}, "sort": "START_TIME_DESC", "limit": 10},
    )
    from datetime import datetime

    mine = [r for r in runs if r["start_time"] and datetime.fromisoformat(r["start_time"]).timestamp() >= since - 1]
    assert len(mine) == 1, [(r["name"], r["start_time"]) for r in runs]
    return mine[0]


def _flow_run(server: dict[str, Any], run_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server['url']}/flow_runs/{run_id}", timeout=30) as r:
        return json.loads(r.read())


def _solve_task_run(server: dict[str, Any], run_id: str, within: float = HANG_GUARD) -> dict[str, Any]:
    """The flow run's solve task run once its state is final (task states arrive as events)."""
    end = time.monotonic() + within
    while True:
        runs = api_post(server, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}, "limit": 50})
        solve = [r for r in runs if r["name"].startswith("solve")]
        if solve and solve[0]["state"]["type"] not in ("RUNNING", "PENDING") or time.monotonic() > end:
            assert solve, [r["name"] for r in runs]
            return solve[0]
        time.sleep(0.5)


def _record(store: Path) -> dict[str, Any]:
    """The one cancellation record of the store."""
    folders = list((store / "runs").glob("*-failed"))
    assert len(folders) == 1, folders
    record = json.loads((folders[0] / "record.json").read_text())
    assert (folders[0] / "FAILED.txt").read_text().splitlines()[0] == record["reason"]
    return record


def _check_cancelled(server: dict[str, Any], run_id: str, store: Path, reason: str) -> None:
    flow_run = _flow_run(server, run_id)
    assert flow_run["state"]["type"] == "CANCELLED", flow_run["state"]
    assert "solve stopped: " + reason in flow_run["state"]["message"], flow_run["state"]
    task = _solve_task_run(server, run_id)
    state = task["state"]
    assert state["type"] == "CANCELLED", state
    assert state["message"].startswith("solve stopped: " + reason) and "nothing was written" in state["message"]
    assert "Traceback" not in state["message"] and "\n" not in state["message"], state["message"]
    record = _record(store)
    assert record["state"] == "cancelled" and record["stage"] == "solve", record
    assert record["reason"].startswith("cancelled at solve: Interrupted: solve stopped: " + reason), record
    nothing_published(store)
    keys = store / "prefect" / "keys"  # the stopped stage left no Prefect cache record
    stage_keys = {p.name for p in (store / "objects").glob("*/*")} if (store / "objects").exists() else set()
    assert not keys.exists() or {p.name for p in keys.iterdir()} <= stage_keys


def test_prefect_flow_run_cancel_ends_a_cli_run_cancelled_within_seconds(prefect_server, tmp_path):
    """``prefect flow-run cancel ID`` of a running ``mdp-release run``: the run is Cancelled (not left
    Cancelling), its solve task run Cancelled, one record, exit 1, its worker processes gone."""
    since = time.time()
    proc, lines, _ = run_until_solving(prefect_server, tmp_path)
    try:
        run_id = _flow_run_of(prefect_server, since)["id"]
        time.sleep(3.0)
        workers = children(proc.pid)
        env = os.environ | {"PREFECT_API_URL": prefect_server["url"], "PREFECT_HOME": str(prefect_server["home"])}
        out = subprocess.run(
            [sys.executable, "-m", "prefect", "flow-run", "cancel", run_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        proc.wait(timeout=HANG_GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    assert proc.returncode == 1, text[-3000:]
    assert "mdp-release: error: solve stopped: the flow run was cancelled (Cancelling)" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert not wait_gone(workers, HANG_GUARD)
    _check_cancelled(prefect_server, run_id, tmp_path / "store", "the flow run was cancelled (Cancelling)")


def test_sigterm_ends_a_cli_run_cancelled(prefect_server, tmp_path):
    """SIGTERM to ``mdp-release run`` during the solve: the run ends Cancelled (not Failed), its solve task run
    Cancelled, one record, nothing published or cached of the solve, exit 1."""
    since = time.time()
    proc, lines, _ = run_until_solving(prefect_server, tmp_path)
    try:
        run_id = _flow_run_of(prefect_server, since)["id"]
        time.sleep(3.0)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=HANG_GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    assert proc.returncode == 1, text[-3000:]
    assert "mdp-release: error: solve stopped: SIGTERM received" in text, text[-3000:]
    _check_cancelled(prefect_server, run_id, tmp_path / "store", "SIGTERM received")


def test_cancel_of_a_served_run_ends_it_and_its_solve_task_cancelled(prefect_server, tmp_path):
    """A run of ``mdp-release serve`` (a deployment run: the UI's Cancel button and ``prefect flow-run
    cancel`` both set CANCELLING) cancelled during the dense solve: the run ends Cancelled, its solve task run Cancelled without a traceback (before: Failed with one), one cancellation record
    (the run's process writes it; the runner's own ``on_cancellation`` hook, called after the process
    ended, finds it written and no longer fails), and serve keeps serving."""
    cfg = tmp_path / "dense.toml"
    cfg.write_text('name = "cancel-serve"\n' + DENSE_RUN_CONFIG.format(store=tmp_path / "store", extra=""))
    env = os.environ | {
        "PREFECT_API_URL": prefect_server["url"],
        "PREFECT_HOME": str(prefect_server["home"]),
        "MDP_RELEASE_HOME": str(tmp_path),
        "PREFECT_RUNNER_POLL_FREQUENCY": "2",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "MPLBACKEND": "Agg",
    }
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve", "--interval", "86400", "--config", str(cfg)],
        cwd=tmp_path,
        env=env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        end = time.monotonic() + 90
        deployment = None
        while deployment is None and time.monotonic() < end:
            try:
                with urllib.request.urlopen(
                    f"{prefect_server['url']}/deployments/name/mdp-release/cancel-serve-serve", timeout=30
                ) as r:
                    deployment = json.loads(r.read())
            except OSError:
                assert serve.poll() is None, log.read_text()[-3000:]
                time.sleep(1.0)
        assert deployment is not None, log.read_text()[-3000:]
        run_id = api_post(prefect_server, f"/deployments/{deployment['id']}/create_flow_run", {})["id"]
        while "solve[lp]: N=300" not in log.read_text(errors="replace"):
            assert time.monotonic() < end + 60, log.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(3.0)
        cancel = subprocess.run(
            [sys.executable, "-m", "prefect", "flow-run", "cancel", run_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        t0 = time.monotonic()
        while _flow_run(prefect_server, run_id)["state"]["type"] != "CANCELLED":
            assert time.monotonic() - t0 < HANG_GUARD, (_flow_run(prefect_server, run_id)["state"], log)
            time.sleep(0.5)
        hook = "Hook '_on_cancellation' finished running successfully"  # the runner's, after the process ended
        while hook not in log.read_text(errors="replace"):
            assert time.monotonic() - t0 < HANG_GUARD and serve.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
                serve.wait()
    text = log.read_text(errors="replace")
    assert "An error was encountered while running hook" not in text, text[-3000:]
    reason = _record(tmp_path / "store")["reason"]  # a cancel from Prefect reads as one (issue 52), never SIGTERM
    assert "SIGTERM received" not in reason and "cancelled" in reason.split("solve stopped: ")[1], reason
    task = _solve_task_run(prefect_server, run_id)
    assert task["state"]["type"] == "CANCELLED", (task["state"], text[-3000:])
    assert "Traceback" not in task["state"]["message"], task["state"]["message"]
    record = _record(tmp_path / "store")
    assert record["state"] == "cancelled" and record["flow_run_id"] == run_id, record
    assert record["reason"].startswith("cancelled at solve: "), record
    nothing_published(tmp_path / "store")


def test_sigterm_to_a_batch_cancels_its_running_release(prefect_server, tmp_path):
    """SIGTERM to ``mdp-release run --config a --config b`` during a's solve: a's release run ends Cancelled
    with its record in its own store, b never starts, the batch run ends Cancelled, exit 1."""
    paths = []
    for name in ("batch-a", "batch-b"):
        path = tmp_path / f"{name}.toml"
        path.write_text(f'name = "{name}"\n' + DENSE_RUN_CONFIG.format(store=tmp_path / name, extra=""))
        paths.append(path)
    env = os.environ | {
        "PREFECT_API_URL": prefect_server["url"],
        "PREFECT_HOME": str(prefect_server["home"]),
        "MDP_RELEASE_HOME": str(tmp_path),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "MPLBACKEND": "Agg",
    }
    since = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "run", "--config", str(paths[0]), "--config", str(paths[1])],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for ln in proc.stdout:
            lines.append(ln)
            if "solve[lp]: N=300" in ln:
                break
        time.sleep(3.0)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=HANG_GUARD)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    assert proc.returncode == 1 and "mdp-release: error: solve stopped: SIGTERM received" in text, text[-3000:]
    from datetime import datetime

    runs = [
        r
        for r in api_post(prefect_server, "/flow_runs/filter", {"sort": "START_TIME_DESC", "limit": 20})
        if r["start_time"] and datetime.fromisoformat(r["start_time"]).timestamp() >= since - 1
    ]
    by_name = {r["name"].split("-")[0] + "-" + r["name"].split("-")[1]: r for r in runs}
    assert by_name["batch-a"]["state_type"] == "CANCELLED", [(r["name"], r["state_type"]) for r in runs]
    assert "batch-b" not in by_name, [r["name"] for r in runs]
    batch = [r for r in runs if r["parent_task_run_id"] is None and r["id"] != by_name["batch-a"]["id"]]
    assert len(batch) == 1 and batch[0]["state_type"] == "CANCELLED", [(r["name"], r["state_type"]) for r in runs]
    assert _record(tmp_path / "batch-a")["state"] == "cancelled"
    assert not (tmp_path / "batch-b" / "runs").exists()
