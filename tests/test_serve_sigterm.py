"""Issue 41 on a real Prefect server: ``mdp-release serve`` skips the ticks a run overlaps (the deployment's
global concurrency limit, ``flows.slot.one_run_at_a_time``: issue 52) instead of running them late, says so, and names its upcoming
runs after the release; SIGTERM ends ``mdp-release run`` and ``serve`` within seconds even when the Prefect
server is gone (flows/run.py ``bounded_stop``)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    MDP,
    QUIET,
    STOP_WITHIN,
    api_post,
    children,
    free_port,
    nothing_published,
    operate_env,
    run_until_solving,
    runs_of,
    start_logged,
    stop_group,
    wait_gone,
)

from flows.run import healthy
from flows.slot import SKIPPED

pytestmark = [pytest.mark.flow, pytest.mark.slow]

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
baselines = ["exp"]
counts_eps = [1.0]
counts_seeds = 2
"""


def _config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, store=tmp_path / f"{name}-store"))
    return path


def _when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_serve_skips_the_ticks_a_run_overlaps_says_so_and_names_upcoming_runs(prefect_server, tmp_path):
    """Every 3 s, a release whose runs take longer (a served run's process alone takes seconds): the ticks due
    while a run runs end Cancelled (skipped) and no run starts late; serve's log says the run is longer than
    the interval and which ticks it skipped; the runs still scheduled carry the release's name."""
    log = tmp_path / "serve.log"
    proc = start_logged(
        [MDP, "serve", "--interval", "3", "--config", str(_config(tmp_path, "skip-demo"))],
        tmp_path,
        operate_env(prefect_server, tmp_path),
        log,
    )
    seen: dict[str, list[dict]] = {}
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 300:
            runs = runs_of(prefect_server, "skip-demo-serve")
            bad = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
            assert not bad, bad[0]["state"]["message"]
            seen = {
                "completed": [r for r in runs if r["state_type"] == "COMPLETED"],
                "skipped": [
                    r for r in runs if r["state_type"] == "CANCELLED" and r["state"]["message"].startswith(SKIPPED)
                ],
                "named": [r for r in runs if r["state_type"] == "SCHEDULED" and r["name"].startswith("skip-demo-")],
            }
            text = log.read_text(errors="replace")
            if all(seen.values()) and "longer than the interval of 3 s" in text and "was skipped" in text:
                break
            assert proc.poll() is None, text[-3000:]
            time.sleep(2)
    finally:
        stop_group(proc)
    text = log.read_text(errors="replace")
    assert all(seen.values()), ({k: len(v) for k, v in seen.items()}, text[-3000:])
    assert "longer than the interval of 3 s" in text and "was skipped" in text, text[-3000:]
    for r in seen["completed"]:  # on time (the process start aside), never queued behind a long run
        late = (_when(r["start_time"]) - _when(r["expected_start_time"])).total_seconds()
        assert late < 20, (r["name"], late)
        assert r["name"].startswith("skip-demo-")


def _own_server(tmp_path: Path) -> tuple[subprocess.Popen, dict]:
    """A `prefect server start` of this test's own (it is killed), as tests/conftest.py's session server."""
    home = tmp_path / "prefect-home"
    home.mkdir()
    url = f"http://127.0.0.1:{free_port()}/api"
    env = os.environ | QUIET | {"PREFECT_HOME": str(home), "PREFECT_UI_API_URL": url, "PREFECT_SERVER_UI_API_URL": url}
    env.pop("PREFECT_API_URL", None)
    port = url.rsplit(":", 1)[1].split("/")[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", port],
        stdout=open(home / "server.log", "wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    t0 = time.monotonic()
    while not healthy(url):
        if proc.poll() is not None or time.monotonic() - t0 > 180:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    return proc, {"url": url, "home": home}


def test_sigterm_ends_run_and_serve_within_seconds_when_the_server_is_gone(tmp_path):
    """A run in its solve and an idle serve, their Prefect server killed, then SIGTERM: both end within
    seconds (Prefect's client would retry each call to the dead API for a minute: it took 4+ minutes), with a
    line saying why; the run's cancellation record is in its store, nothing is published, no process is left."""
    server, info = _own_server(tmp_path)
    serve = None
    try:
        run, lines, _ = run_until_solving(info, tmp_path)
        log = tmp_path / "serve.log"
        env = operate_env(info, tmp_path)
        serve = start_logged(
            [MDP, "serve", "--interval", "3600", "--config", str(_config(tmp_path, "gone"))], tmp_path, env, log
        )
        t0 = time.monotonic()
        while not api_post(info, "/deployments/filter", {"deployments": {"name": {"any_": ["gone-serve"]}}}):
            assert time.monotonic() - t0 < 120 and serve.poll() is None, log.read_text(errors="replace")[-3000:]
            time.sleep(1)
        time.sleep(3)  # the runner is up
        workers = children(run.pid) | children(serve.pid)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        t0 = time.monotonic()
        run.send_signal(signal.SIGTERM)
        serve.send_signal(signal.SIGTERM)
        for proc in (run, serve):
            proc.wait(timeout=STOP_WITHIN + 5)
        took = time.monotonic() - t0
    finally:
        for proc in [p for p in (locals().get("run"), serve) if p is not None]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
    t1 = time.monotonic()
    while "does not answer" not in "".join(lines) and time.monotonic() - t1 < 5:  # the reader thread's last lines
        time.sleep(0.1)
    text = "".join(lines)
    assert took < STOP_WITHIN, (took, text[-3000:])
    assert run.returncode != 0 and "does not answer" in text and "SIGTERM received" in text, text[-3000:]
    assert "does not answer" in log.read_text(errors="replace"), log.read_text(errors="replace")[-3000:]
    nothing_published(tmp_path / "store")
    records = list((tmp_path / "store" / "runs").glob("*-failed/FAILED.txt"))
    assert records and records[0].read_text().startswith("cancelled at solve"), records
    assert not wait_gone(workers, STOP_WITHIN), "a child process outlived its command"
