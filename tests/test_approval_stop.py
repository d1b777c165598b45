"""SIGTERM to a run that waits for its officer says what happened (issue 52): the run ends Cancelled "stopped while
waiting for the officer's approval: SIGTERM received; nothing was measured, nothing was charged" -- nothing was
solving, so not "solve stopped: SIGTERM received, during the officer's approval" as before -- on the terminal, in
its Prefect state and in its failure record, and nothing is charged."""

from __future__ import annotations

import json
import signal

import pytest
from conftest import STOP_WITHIN, api_post
from test_approval import _nothing_charged, _paused_run, _start

pytestmark = [pytest.mark.flow]

SAID = "stopped while waiting for the officer's approval: SIGTERM received; nothing was measured, nothing was charged"


def test_sigterm_while_waiting_for_the_officer_says_so_and_charges_nothing(prefect_server, tmp_path):
    proc, store = _start(prefect_server, tmp_path, "appr-term", approval="required")
    run = _paused_run(prefect_server, "appr-term")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=2 * STOP_WITHIN)
    lines = [ln for ln in err.splitlines() if ln.startswith("mdp-release: error:")]
    assert proc.returncode == 1 and lines == [f"mdp-release: error: {SAID}"], err[-3000:]
    assert "Traceback" not in err and "solve stopped" not in err, err[-3000:]
    (final,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
    assert (final["state_type"], final["state"]["message"]) == ("CANCELLED", SAID), final["state"]
    (record,) = store.glob("runs/*-failed/record.json")
    assert json.loads(record.read_text())["reason"] == f"cancelled at the officer's approval: Interrupted: {SAID}"
    _nothing_charged(store, "appr-term-people")
