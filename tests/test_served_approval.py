"""Issue 52 on a real Prefect server: a served release that waits for its officer survives the wait.

Before, ``mdp-release serve`` gave its deployment Prefect's *deployment* concurrency limit: the run's slot is a
lease the server revokes when the run pauses (``RUNNING -> PAUSED``), so the engine's next lease renewal got
410 Gone and killed the paused run ("Concurrency lease renewal failed ... Terminating execution", 225 s after
it started), and the next tick started and paused beside it. Now the run holds a slot of the deployment's
global concurrency limit with a lease of its own (``flows.slot.one_run_at_a_time``), renewed while it waits.

The lease is Prefect's ``PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION`` (the API's floor,
60 s, here): the run waits longer than that, the ticks due meanwhile are skipped and say so (one that starts
after an unrenewed lease would have been revoked, by the server's repossessor, proves the renewal), the officer's
``mdp-release approve`` then lets it measure and publish, charged once; SIGTERM to ``serve`` with a run
waiting ends both within seconds, the waiting run Cancelled, nothing charged.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import (
    MDP,
    REPOSSESSOR_SECONDS,
    STOP_WITHIN,
    api_post,
    operate_env,
    people_table,
    people_toml,
    run_command,
    runs_of,
    start_logged,
    stop_group,
)

from artifacts.private import PrivateStore
from flows.slot import SKIPPED, slot_name

pytestmark = [pytest.mark.flow, pytest.mark.slow]

LEASE = 60  # s: the shortest lease Prefect's API grants
SLACK = 5  # s: the repossessor's own latency (it schedules each revocation as a task), on a loaded machine
RELEASE = {"max_total_epsilon": 100.0, "approval": "required", "approval_timeout": 900}  # conftest.people_toml's


def _wait(what: str, within: float, probe, log: Path, proc) -> object:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        got = probe()
        if got:
            return got
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        time.sleep(2)
    raise AssertionError(f"{what} within {within} s: {log.read_text(errors='replace')[-3000:]}")


def _at(stamp: str) -> float:
    """The server's ISO 8601 timestamp ``stamp`` in POSIX seconds."""
    return datetime.fromisoformat(stamp).timestamp()


def _bad(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]


def test_a_served_run_waits_past_its_lease_for_the_officer_then_publishes_charged_once(prefect_server, tmp_path):
    name = "served-wait"
    people_table(tmp_path / "people.csv", n=250)
    cfg = tmp_path / "release.toml"
    store = tmp_path / "store"
    cfg.write_text(people_toml(name, store, **RELEASE))
    env = operate_env(prefect_server, tmp_path) | {
        "PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION": str(LEASE)
    }
    log = tmp_path / "serve.log"
    serve = start_logged([MDP, "serve", "--interval", "20", "--config", str(cfg)], tmp_path, env, log)
    dep = f"{name}-serve"
    try:

        def paused() -> list[dict]:
            runs = runs_of(prefect_server, dep)
            assert not _bad(runs), _bad(runs)[0]["state"]
            return [r for r in runs if r["state_type"] == "PAUSED"]

        (first,) = _wait("a paused run", 240, paused, log, serve)
        # no Prefect deployment lease to lose: the deployment has no deployment concurrency limit
        assert first["state"]["state_details"].get("deployment_concurrency_lease_id") is None
        (deployment,) = api_post(prefect_server, "/deployments/filter", {"deployments": {"name": {"any_": [dep]}}})
        assert deployment["concurrency_limit"] is None, deployment
        limit = api_post(prefect_server, "/v2/concurrency_limits/filter", {})
        (slot,) = [c for c in limit if c["name"] == slot_name(deployment["id"])]
        assert (slot["limit"], slot["active_slots"]) == (1, 1)
        assert PrivateStore(store).budget(f"{name}-people").n_charges == 0  # nothing charged while it waits

        # the run took its slot before its door, so before it paused: unrenewed, its lease was revoked by then
        expired = _at(first["state"]["timestamp"]) + LEASE + REPOSSESSOR_SECONDS + SLACK

        def waited_and_skipped() -> list[dict]:
            runs = runs_of(prefect_server, dep)
            assert not _bad(runs), _bad(runs)[0]["state"]
            others = [r for r in runs if r["id"] != first["id"] and r["state_type"] in ("PAUSED", "COMPLETED")]
            assert not others, [(r["name"], r["state_name"]) for r in others]  # no second run beside it
            (now,) = [r for r in runs if r["id"] == first["id"]]
            assert now["state_type"] == "PAUSED", now["state"]  # still waiting, not killed
            skipped = [r for r in runs if r["state_type"] == "CANCELLED" and r["state"]["message"].startswith(SKIPPED)]
            return [r for r in skipped if r["start_time"] and _at(r["start_time"]) > expired]  # the slot still held

        skipped = _wait(
            "a tick skipped after the run's lease would have expired", LEASE + 180, waited_and_skipped, log, serve
        )
        assert first["name"] in skipped[0]["state"]["message"]  # it names the run holding the slot
        (art,) = api_post(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": [f"{name}-approval"]}}})
        sha = re.search(r"Plan sha256:\*\* `([0-9a-f]{64})`", art["data"]).group(1)
        wrong = run_command([MDP, "approve", first["id"], "--by", "A. Officer", "--plan", "0" * 12], tmp_path, env, 120)
        assert wrong.returncode == 2 and "is not this run's plan" in wrong.stderr, wrong.stderr[-2000:]
        approve = [MDP, "approve", first["id"], "--by", "A. Officer", "--plan", sha[:12], "--note", "minute 12"]
        ok = run_command(approve, tmp_path, env, 120)
        assert ok.returncode == 0 and f"approved plan {sha}" in ok.stdout, ok.stderr[-2000:]
        assert "waits for your decision" in ok.stdout and f"Plan sha256:** `{sha}`" in ok.stdout

        def completed() -> list[dict]:
            runs = runs_of(prefect_server, dep)
            assert not _bad(runs), _bad(runs)[0]["state"]
            return [r for r in runs if r["id"] == first["id"] and r["state_type"] == "COMPLETED"]

        _wait("the approved run completed", 300, completed, log, serve)
        ended = [r for r in runs_of(prefect_server, dep) if r["id"] != first["id"] and r["state_type"] != "SCHEDULED"]
        assert all(r["state"]["message"].startswith(SKIPPED) for r in ended if r["state_type"] == "CANCELLED")
        assert {r["state_type"] for r in ended} <= {"CANCELLED", "RUNNING", "PENDING", "PAUSED"}, ended
        assert PrivateStore(store).budget(f"{name}-people").n_charges == 2  # perturbation and counts, once
        (manifest,) = [p / "manifest.json" for p in (store / "runs").glob("2*") if (p / "manifest.json").exists()]
        approval = json.loads(manifest.read_text())["approval"]
        assert (approval["by"], approval["note"], approval["plan_sha256"]) == ("A. Officer", "minute 12", sha)

        # the next tick waits for its officer too; SIGTERM to serve ends it and serve within seconds
        def second() -> list[dict]:
            return [r for r in paused() if r["id"] != first["id"]]

        (waiting,) = _wait("the next run waiting", 240, second, log, serve)
        t0 = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        stop_group(serve)
    # 2 x STOP_WITHIN: Prefect's runner polls a killed process every 3 s and a loaded 2-core machine takes
    # seconds to end one (before: 30 s of the runner's grace per waiting run, 63 s seen with two)
    assert took < 2 * STOP_WITHIN, (took, log.read_text(errors="replace")[-3000:])
    (final,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [waiting["id"]]}}})
    assert final["state_type"] == "CANCELLED", final["state"]
    assert PrivateStore(store).budget(f"{name}-people").n_charges == 2  # the stopped run charged nothing


def test_approving_a_run_killed_while_it_waited_says_so_and_marks_it_crashed(prefect_server, tmp_path):
    """Issue 49 item 5: a paused run killed with -9 stays Paused on the server; approving it said "approved: the
    run measures and releases" and left it Running forever. Now ``approve`` waits for the run to take the
    decision; it never does, so the run is set Crashed, and ``approve`` says so (exit 2), never "approved"."""
    import os

    from conftest import server_env

    people_table(tmp_path / "people.csv", n=250)
    cfg = tmp_path / "release.toml"
    cfg.write_text(people_toml("killed-wait", tmp_path / "store", **RELEASE))
    env = server_env(prefect_server, tmp_path)
    proc = subprocess.Popen(
        [MDP, "run", "--config", str(cfg)], cwd=tmp_path, env=env, start_new_session=True, stderr=subprocess.DEVNULL
    )
    try:
        t0 = time.monotonic()
        while True:
            runs = api_post(
                prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:killed-wait"]}}}
            )
            if runs and runs[0]["state_type"] == "PAUSED":
                break
            assert time.monotonic() - t0 < 240 and proc.poll() is None, runs and runs[0]["state"]
            time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    run = runs[0]
    # a short wait for the run to take the decision (flows.approve_cli.take_within; default 60 s): it never will
    quick = env | {"MDP_RELEASE_APPROVE_WAIT": "10"}
    answer = run_command([MDP, "approve", run["id"], "--by", "A. Officer"], tmp_path, quick, 180)
    assert answer.returncode == 2 and "approved" not in answer.stdout.splitlines()[-1], answer.stdout
    assert "did not take the decision within 10 s" in answer.stderr and "now Crashed" in answer.stderr, answer.stderr
    (final,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
    assert final["state_type"] == "CRASHED" and "did not take the officer's decision" in final["state"]["message"]
    again = run_command([MDP, "approve", run["id"], "--by", "A. Officer"], tmp_path, env, 120)
    assert again.returncode == 2 and "is not waiting for an approval: it is Crashed" in again.stderr, again.stderr
    assert PrivateStore(tmp_path / "store").budget("killed-wait-people").n_charges == 0


@pytest.mark.parametrize("wait", ["5", "soon", "inf", "nan"])
def test_a_bad_approve_wait_is_refused_before_anything_is_sent(wait, monkeypatch, capsys):
    """``MDP_RELEASE_APPROVE_WAIT`` (flows.approve_cli.take_within): seconds, at least the run's 10 s poll; anything
    else is an error (exit 2, one line) before the server is asked (none runs here) or a decision sent."""
    from flows.cli import main

    monkeypatch.setenv("MDP_RELEASE_APPROVE_WAIT", wait)
    assert main(["approve", "9b2d1c3e-0000-4000-8000-000000000000", "--by", "A. Officer"]) == 2
    err = capsys.readouterr().err
    assert f"MDP_RELEASE_APPROVE_WAIT={wait!r}: seconds, at least 10 (unset: 60)" in err, err
