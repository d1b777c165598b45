"""Notifications as documented (issue 52): each skipped tick sends one message (a tick of a deployment that finds
its slot taken ends Cancelled at once, :mod:`flows.slot`: seen before, 1 of 5 skipped ticks paged), a stage
stopped on request is logged at WARNING, never ERROR, and a run cancelled from Prefect reads as a cancel, not as
"SIGTERM received"."""

from __future__ import annotations

import logging
from uuid import uuid4

import pytest
from test_notify import _Receiver
from test_notify_once import _messages

from flows import operate_ui, slot
from flows.cli import main


def test_a_cancelled_task_run_is_logged_at_warning_other_ends_unchanged():
    from prefect.settings import PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW, temporary_settings

    operate_ui.cancels_at_warning()
    operate_ui.cancels_at_warning()  # once per process
    logger = logging.getLogger("prefect.task_runs")
    assert sum(isinstance(f, operate_ui._CancelledIsNotAnError) for f in logger.filters) == 1
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    logger.addHandler(keep)
    try:  # no flow run here: nothing for the API
        with temporary_settings({PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW: "ignore"}):
            logger.error("Finished in state Cancelled('solve stopped: SIGTERM received, during lp solve')")
            logger.error("Finished in state Failed('solve: TimeoutError')")
    finally:
        logger.removeHandler(keep)
    assert [(r.levelname, str(r.msg).split("(")[0]) for r in seen] == [
        ("WARNING", "Finished in state Cancelled"),
        ("ERROR", "Finished in state Failed"),
    ]


@pytest.mark.flow
def test_each_skipped_tick_sends_one_message_and_a_ui_cancel_reads_as_one(prefect_server, tmp_path, monkeypatch):
    """Runs of a deployment tagged as `serve` tags them, each ended as a skipped tick ends (Running, then
    Cancelled with :data:`flows.slot.SKIPPED`, a second apart): one message each."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelled, Cancelling, Running

    url, name = prefect_server["url"], f"skip-{uuid4().hex[:8]}"
    receiver = _Receiver()
    monkeypatch.setattr("flows.run.STATE_FILE", tmp_path / "server.json")
    monkeypatch.setenv("PREFECT_API_URL", url)

    @flow(name="mdp-release")
    def release() -> None:
        pass

    ticks = []
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            assert main(["notify", "--release", name, "--webhook", f"{receiver.url}/hook"]) == 0
            flow_id = client.create_flow(release)
            deployment = client.create_deployment(flow_id=flow_id, name=f"{name}-serve", tags=[f"release:{name}"])
            for _ in range(4):
                run = client.create_flow_run_from_deployment(deployment)
                client.set_flow_run_state(run.id, Running())
                client.set_flow_run_state(
                    run.id, Cancelled(message=f"{slot.SKIPPED} (held by x Paused); nothing was done")
                )
                ticks.append(client.read_flow_run(run.id))
            got = _messages(receiver, 4)
            cancelled = client.create_flow_run_from_deployment(deployment)  # the UI's Cancel of a running run
            client.set_flow_run_state(cancelled.id, Running())
            client.set_flow_run_state(cancelled.id, Cancelling())
            words = operate_ui.stop_words(cancelled.id, "solve stopped: SIGTERM received, during lp solve")
            running = client.create_flow_run_from_deployment(deployment)  # SIGTERM to `serve`, say: as it was
            client.set_flow_run_state(running.id, Running())
            as_is = operate_ui.stop_words(running.id, "solve stopped: SIGTERM received, during lp solve")
    finally:
        receiver.close()
        with temporary_settings(updates={PREFECT_API_URL: url}):
            assert main(["notify", "--release", name, "--remove"]) == 0
    subjects = sorted(g["subject"] for g in got)
    assert subjects == sorted(f"mdp-release {name}: flow run {t.name} Cancelled" for t in ticks), subjects
    assert all(slot.SKIPPED in g["body"] for g in got)
    assert words == f"solve stopped: {operate_ui.CANCEL_WORDS}, during lp solve"
    assert as_is == "solve stopped: SIGTERM received, during lp solve"
