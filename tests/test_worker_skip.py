"""A skipped tick is quiet under ``serve`` and under ``deploy`` + ``prefect worker`` (issue 52): a run of a
deployment that finds its slot taken (:mod:`flows.slot`) ends Cancelled with the skip's message, and neither the
run's log on the server nor the serving process's or the worker's terminal holds an ERROR or a traceback. (Before,
the process a worker starts logged "Engine execution exited with unexpected exception ... Skipped" with a
traceback at every skipped tick: Prefect's engine asks a run that ended Cancelled for its result, which raises.)

One test: both routes on the session's server, a slot held by hand (a lease, as a paused run holds it), one run of
each deployment, the worker run once (``--run-once``): no schedule to wait for.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import MDP, PREFECT, api_post, operate_env, run_command, start_logged, stop_group

from flows import slot

pytestmark = [pytest.mark.flow, pytest.mark.slow]

CONFIG = """
name = "skip-tick"
store = "{store}"
[dataset]
kind = "grid"
params = {{ rows = 4, cols = 5, n_outputs = 8, seed = 2 }}
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


def _deployment(server: dict, name: str, within: float = 120) -> dict:
    """The deployment ``name`` once it is on the server (``serve`` creates its own as it starts)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = api_post(server, "/deployments/filter", {"deployments": {"name": {"any_": [name]}}})
        if found:
            return found[0]
        time.sleep(1)
    raise AssertionError(f"no deployment {name} within {within} s")


def _ended(server: dict, run_ids: list[str], within: float = 240) -> dict[str, dict]:
    """{run id: the run} once every run of ``run_ids`` is in a final state."""
    end = time.monotonic() + within
    runs: dict[str, dict] = {}
    while time.monotonic() < end:
        runs = {r["id"]: r for r in api_post(server, "/flow_runs/filter", {"flow_runs": {"id": {"any_": run_ids}}})}
        if len(runs) == len(run_ids) and all(
            r["state_type"] in ("COMPLETED", "FAILED", "CANCELLED", "CRASHED") for r in runs.values()
        ):
            return runs
        time.sleep(1)
    raise AssertionError(f"runs not ended within {within} s: {[(r['name'], r['state_type']) for r in runs.values()]}")


def _loud(text: str) -> list[str]:
    """The lines of ``text`` that are an ERROR (or worse) log line or part of a traceback."""
    return [ln for ln in text.splitlines() if "| ERROR" in ln or "| CRITICAL" in ln or "Traceback" in ln]


def test_a_skipped_tick_ends_cancelled_with_no_error_under_serve_and_a_worker(prefect_server, tmp_path: Path):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    env = operate_env(prefect_server, tmp_path)
    cfg = tmp_path / "skip-tick.toml"
    cfg.write_text(CONFIG.format(store=tmp_path / "store"))
    deployed = run_command([MDP, "deploy", "--pool", "skip-pool", "--config", str(cfg)], tmp_path, env, 180)
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    serve = start_logged([MDP, "serve", "--interval", "3600", "--config", str(cfg)], tmp_path, env, tmp_path / "s.log")
    worker_log = tmp_path / "worker.log"
    try:
        deployments = [
            _deployment(prefect_server, "skip-tick-skip-pool"),
            _deployment(prefect_server, "skip-tick-serve"),
        ]
        with temporary_settings({PREFECT_API_URL: prefect_server["url"]}), get_client(sync_client=True) as client:
            for dep in deployments:  # the slot held, as a run waiting for its officer holds it
                slot.set_slots(dep["id"], 1)
                client.increment_concurrency_slots_with_lease(
                    names=[slot.slot_name(dep["id"])], slots=1, mode="concurrency", lease_duration=600
                )
            run_ids = [str(client.create_flow_run_from_deployment(dep["id"]).id) for dep in deployments]
        worker = run_command([PREFECT, "worker", "start", "--pool", "skip-pool", "--run-once"], tmp_path, env, 300)
        worker_log.write_text(worker.stdout + worker.stderr)
        runs = _ended(prefect_server, run_ids)
    finally:
        stop_group(serve)
    for run in runs.values():
        assert run["state_type"] == "CANCELLED", (run["name"], run["state"])
        assert run["state"]["message"].startswith(slot.SKIPPED), run["state"]["message"]
        logs = api_post(prefect_server, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run["id"]]}}})
        assert logs, run["name"]  # the run's process logged (Finished in state Cancelled(...)): the check looks
        loud = [(lg["level"], lg["message"][:300]) for lg in logs if lg["level"] >= 40 or "Traceback" in lg["message"]]
        assert loud == [], (run["name"], loud)
    assert any("Finished in state Cancelled" in ln for ln in worker_log.read_text().splitlines())
    assert _loud(worker_log.read_text()) == []
    assert _loud((tmp_path / "s.log").read_text()) == []
