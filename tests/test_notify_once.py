"""``mdp-release notify`` pages once (issue 41): one message per flow run (a run cancelled from the UI
enters Cancelled twice, 50 s apart), an operator's own cancels can be left out, a refused release says
REFUSED and why, and a population's low budget is announced once per budget."""

from __future__ import annotations

import time
from uuid import uuid4

import pytest
from test_budget_artifact import spend
from test_notify import _Receiver

from artifacts.private import PrivateStore
from flows import notify, operate_ui
from flows.cli import main
from flows.ledger_cli import read_budget_view
from mdp_core.errors import InputError


# ----------------------------------------------------------------------------- no server
def _args(*argv: str):
    import argparse

    p = argparse.ArgumentParser()
    notify.add_notify_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_hear_refused_and_low_budgets_and_cancels_can_be_left_out():
    n = notify.notification_from_args(_args("--release", "r", "--webhook", "http://h/"))
    assert n.states == ("Failed", "Refused", "Crashed", "Cancelled", "TimedOut", "BudgetLow")
    quiet = notify.notification_from_args(_args("--release", "r", "--webhook", "http://h/", "--no-cancel-alerts"))
    assert quiet.states == ("Failed", "Refused", "Crashed", "TimedOut", "BudgetLow")
    picked = notify.notification_from_args(
        _args("--release", "r", "--webhook", "http://h/", "--events", "failed,crashed,refused,budget-low")
    )
    assert picked.states == ("Failed", "Crashed", "Refused", "BudgetLow")
    with pytest.raises(InputError, match="leaves no state"):
        notify.notification_from_args(
            _args("--release", "r", "--webhook", "h", "--states", "Cancelled", "--no-cancel-alerts")
        )
    spec = notify.trigger_spec(quiet)
    assert "prefect.flow-run.Cancelled" not in spec["expect"] and "mdp-release.budget.low" in spec["expect"]
    assert spec["for_each"] == {"prefect.resource.id", "mdp-release.budget-epoch"}  # per run, per budget
    assert spec["within"] == notify.DEDUP_WINDOW and spec["posture"] == "Reactive"
    assert notify.state_of_event(notify.event_name("BudgetLow")) == "BudgetLow"
    assert "low budgets, once per budget" in notify.description(n) and "BudgetLow" not in notify.description(n)


# ----------------------------------------------------------------------------- on the session's server
WHY = "release refused: it would bring population 'p''s privacy spend to 41.52 (cap 36.99); nothing was measured"


def _run_of(client, name: str):
    """A flow run of the flow ``mdp-release`` tagged ``release:<name>`` from its creation, Running."""
    from prefect import flow
    from prefect.states import Running

    @flow(name=notify.FLOW_NAME)
    def release() -> None:
        pass

    run = client.create_flow_run(release, tags=[f"release:{name}"])
    client.set_flow_run_state(run.id, Running())
    return client.read_flow_run(run.id)


def _messages(receiver: _Receiver, want: int, quiet: float = 6.0) -> list[dict]:
    """The ``want`` messages the receiver gets within 90 s, then ``quiet`` s of nothing more."""
    got = [receiver.got.get(timeout=90)[1] for _ in range(want)]
    time.sleep(quiet)
    while not receiver.got.empty():
        got.append(receiver.got.get()[1])
    return got


@pytest.mark.flow
def test_one_message_per_cancelled_run_refusals_say_why_a_low_budget_once(
    prefect_server, tmp_path, monkeypatch, capsys
):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelled, Cancelling, Failed
    from prefect.variables import Variable

    url, name = prefect_server["url"], f"once-{uuid4().hex[:8]}"
    receiver = _Receiver()
    monkeypatch.setattr("flows.run.STATE_FILE", tmp_path / "server.json")
    monkeypatch.setenv("PREFECT_API_URL", url)
    pop = f"once-{uuid4().hex[:8]}"
    spend(tmp_path, pop, 5)  # LOW: 2.39 left, a release like the last costs 6.92
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            assert main(["notify", "--release", name, "--webhook", f"{receiver.url}/hook"]) == 0
            cancelled = _run_of(client, name)  # Cancel in the UI: Cancelling, the run's own stop, the runner's
            client.set_flow_run_state(cancelled.id, Cancelling())
            client.set_flow_run_state(cancelled.id, Cancelled(message="solve stopped: the flow run was cancelled"))
            client.set_flow_run_state(
                cancelled.id, Cancelled(message="Flow run was cancelled successfully."), force=True
            )
            refused = _run_of(client, name)
            client.set_flow_run_state(refused.id, Failed(name="Refused", message=WHY))
            view = read_budget_view(tmp_path, PrivateStore(tmp_path), pop)
            assert operate_ui.announce_budget(view, name, refused)
            assert not operate_ui.announce_budget(view, name, refused)  # recorded: not again
            Variable.unset(
                operate_ui.SENT_PREFIX + operate_ui.population_slug(pop)
            )  # even a second announcement (a race) pages once
            assert operate_ui.announce_budget(view, name, refused)
            got = _messages(receiver, 3)
            capsys.readouterr()
            assert main(["notify", "--list"]) == 0
            assert f"low-budget warning sent: population {pop} (low, left 2.39 of cap 36.99" in capsys.readouterr().out
    finally:
        receiver.close()
        with temporary_settings(updates={PREFECT_API_URL: url}):
            assert main(["notify", "--release", name, "--remove"]) == 0
    by_subject = {g["subject"]: g for g in got}
    assert len(got) == 3 and len(by_subject) == 3, [g["subject"] for g in got]
    assert f"mdp-release {name}: flow run {cancelled.name} Cancelled" in by_subject
    assert f"mdp-release {name}: release REFUSED (flow run {refused.name}): {WHY}" in by_subject
    low = next(g for s, g in by_subject.items() if "budget is LOW" in s)
    assert low["subject"] == operate_ui.budget_message(view, name)[0]
    assert f"/runs/flow-run/{refused.id}" in low["body"] and "6.92" in low["body"]
