"""``mdp-release notify``: its argument handling (no server), and end to end on the session's Prefect
server: a webhook receiver on loopback hears, within 60 s, that a flow run of the release failed -- and
only that release's run, with nothing of the run's parameters in the message."""

from __future__ import annotations

import http.server
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from conftest import QUIET, api_post, free_port

from flows import notify
from flows.cli import main
from mdp_core.errors import InputError

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- argument handling (no server)
def test_states_parse_any_case_and_unknown_ones_are_named():
    assert notify.parse_states("failed, CRASHED,timedout,Failed") == ("Failed", "Crashed", "TimedOut")
    assert notify.parse_states(",".join(notify.DEFAULT_STATES)) == notify.DEFAULT_STATES
    with pytest.raises(InputError, match="unknown state 'Broken'"):
        notify.parse_states("Failed,Broken")
    with pytest.raises(InputError, match="empty state name"):
        notify.parse_states("Failed,,Crashed")


def test_webhook_is_checked_without_repeating_it_and_shown_redacted():
    assert notify.check_webhook(" https://hooks.example.org/T0/B1/s3cr3t ") == "https://hooks.example.org/T0/B1/s3cr3t"
    for bad, why in [
        ("ftp://example.org/s3cr3t", "scheme 'ftp'"),
        ("hooks.example.org/s3cr3t", "no scheme"),
        ("https:///s3cr3t", "no host"),
        ("http://example.org:99999/s3cr3t", "not a URL"),
    ]:
        with pytest.raises(InputError, match=why) as exc:
            notify.check_webhook(bad)
        assert "s3cr3t" not in str(exc.value)
    assert notify.redact("https://user:pw@hooks.example.org/T0/B1/s3cr3t?x=1") == "https://hooks.example.org/..."
    assert notify.redact("http://127.0.0.1:8080") == "http://127.0.0.1:8080"


def test_names_default_from_the_release_and_are_checked():
    assert notify.default_name("grid-eps10-lp") == "mdp-release-notify-grid-eps10-lp"
    assert notify.default_name("*") == "mdp-release-notify-all-releases"
    assert notify.check_release("*") == "*"
    for bad in ("Grid", "grid eps", "-x", "a" * 64):
        with pytest.raises(InputError, match="not a release name"):
            notify.check_release(bad)
    with pytest.raises(InputError, match="lowercase letters"):
        notify.check_name("My Hook")


def test_trigger_matches_the_flow_and_the_release_tag_or_every_release():
    one = notify.trigger_spec(notify.Notification("n", "grid-eps10-lp", "http://h/", ("Failed", "Crashed")))
    assert one["expect"] == {"prefect.flow-run.Failed", "prefect.flow-run.Crashed"}
    assert one["match"] == {"prefect.resource.id": "prefect.flow-run.*"}
    assert one["match_related"] == [
        {"prefect.resource.role": "flow", "prefect.resource.name": "mdp-release"},
        {"prefect.resource.role": "tag", "prefect.resource.id": "prefect.tag.release:grid-eps10-lp"},
    ]
    every = notify.trigger_spec(notify.Notification("n", "*", "http://h/"))
    assert every["match_related"] == [{"prefect.resource.role": "flow", "prefect.resource.name": "mdp-release"}]
    assert every["expect"] == {notify.event_name(s) for s in notify.DEFAULT_STATES}
    assert {"prefect.flow-run.Refused", "mdp-release.budget.low"} <= every["expect"]
    assert every["match"] == {"prefect.resource.id": ["prefect.flow-run.*", "mdp-release.population.*"]}
    from prefect.automations import EventTrigger

    EventTrigger(**one)  # a valid trigger


def test_message_templates_use_only_the_run_name_state_message_id_and_release():
    """The webhook body never carries the run's parameters (the config) or anything else of the run: its name,
    state, message (the triggering state's, for a refusal), id, release tag; a low budget's text is the event's
    own (flows.operate_ui.budget_message: public figures)."""
    allowed = {
        "flow_run.name",
        "flow_run.state.name",
        "flow_run.state.message",
        "flow_run.id",
        "event.payload.subject",
        "event.payload.body",
        "event.resource['prefect.state-message'] | truncate(300)",
        "if event.event == 'mdp-release.budget.low'",
        "elif event.event == 'prefect.flow-run.Refused'",
        "else",
        "t[8:]",
        "t in flow_run.tags",
        "if t.startswith('release:')",
        "endif",
        "endfor",
    }
    for release in ("grid-eps10-lp", "*"):
        n = notify.Notification("n", release, "http://h/")
        subject, body = notify.templates(n, "http://127.0.0.1:4200")
        text = subject + body
        used = {e.strip().removeprefix("for ").strip() for e in re.findall(r"{[{%](.*?)[%}]}", text)}
        assert used <= allowed, used - allowed
        assert "Run: http://127.0.0.1:4200/runs/flow-run/{{ flow_run.id }}" in body
        assert (release in subject) == (release != "*")
    assert "flow run id {{ flow_run.id }}" in notify.templates(n, None)[1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["notify", "--webhook", "http://h/"], "needs --release NAME"),
        (["notify", "--release", "x"], "needs --webhook URL"),
        (["notify", "--release", "Bad Name", "--webhook", "http://h/"], "not a release name"),
        (["notify", "--release", "x", "--webhook", "mailto:ops@example.org"], "scheme 'mailto'"),
        (["notify", "--release", "x", "--webhook", "http://h/", "--states", "Oops"], "unknown state 'Oops'"),
        (["notify", "--release", "x", "--webhook", "http://h/", "--name", "A B"], "lowercase letters"),
        (["notify", "--list", "--release", "x"], "--list takes no"),
        (["notify", "--remove"], "--remove needs --release NAME or --name"),
        (["notify", "--remove", "--release", "x", "--webhook", "http://h/"], "--remove takes no --webhook"),
        (["notify", "--remove", "--list"], "not allowed with argument"),
    ],
)
def test_bad_arguments_are_one_line_errors_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mdp-release: error:") and message in err and "\n" not in err, err


def test_without_a_server_it_says_how_to_get_one_exit_2(tmp_path):
    env = {k: v for k, v in (os.environ | QUIET).items() if k != "PREFECT_API_URL"}
    env |= {"PREFECT_HOME": str(tmp_path / "home"), "MDP_RELEASE_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "notify", "--release", "x", "--webhook", "http://127.0.0.1:9/h"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "notifications live on a Prefect server: run `mdp-release server start`" in proc.stderr


def test_a_server_that_does_not_answer_is_an_error_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("flows.run.STATE_FILE", tmp_path / "server.json")
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{free_port()}/api")
    assert main(["notify", "--release", "x", "--webhook", "http://127.0.0.1:9/h"]) == 2
    assert "no Prefect server answers at http://127.0.0.1:" in capsys.readouterr().err


# ----------------------------------------------------------------------------- end to end
class _Receiver:
    """An HTTP receiver on a free loopback port (a thread): every POST's path and JSON body into a queue."""

    def __init__(self) -> None:
        got: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(min(size, 1 << 20))
                try:
                    got.put((self.path, json.loads(raw)))
                except ValueError:
                    got.put((self.path, {"unparsed": raw.decode(errors="replace")}))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.got = got
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# A release that passes config validation (its input file exists) and fails in its first stage, ingest:
# the points table has a header and no rows (InputError: not retried).
CONFIG = """
name = "{name}"
store = "{store}"
[dataset]
kind = "points"
params = {{ path = "{csv}" }}
[release]
simulate = true
[evaluate]
baselines = []
"""

# A flow run of the real release flow, created as a deployment creates its runs: carrying the release's
# tags (flows.release.run_tags) from the start.
RUN = """
import sys
from prefect import tags
from flows.config import load_config
from flows.plan import run_tags
from flows.release import release_flow
cfg = load_config(sys.argv[1])
try:
    with tags(*run_tags(cfg)):
        release_flow(config=cfg)
except Exception as exc:
    print("failed:", type(exc).__name__)
"""


@pytest.mark.flow
@pytest.mark.slow
def test_webhook_hears_a_failed_run_of_the_release_and_only_of_it(prefect_server, tmp_path, monkeypatch):
    url = prefect_server["url"]
    env = (
        os.environ
        | QUIET
        | {
            "PREFECT_API_URL": url,
            "PREFECT_HOME": str(prefect_server["home"]),
            "MDP_RELEASE_HOME": str(tmp_path),
            "PYTHONPATH": str(REPO),
        }
    )
    name, other = f"notify-{uuid4().hex[:8]}", f"notify-{uuid4().hex[:8]}-other"
    auto = notify.default_name(name)
    csv = tmp_path / "people.csv"
    csv.write_text("lat,lon\n")
    configs = {}
    for n in (name, other):
        configs[n] = tmp_path / f"{n}.toml"
        configs[n].write_text(CONFIG.format(name=n, store=tmp_path / "store", csv=csv))
    receiver = _Receiver()
    hook = f"{receiver.url}/hook?token=t0ken-{uuid4().hex[:6]}"
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("PREFECT_API_URL", url)
    monkeypatch.setattr("flows.run.STATE_FILE", tmp_path / "server.json")
    t0 = time.monotonic()
    try:
        # the console command, as an operator runs it
        proc = subprocess.run(
            [sys.executable, "-m", "flows.cli", "notify", "--release", name, "--webhook", hook],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"created notification {auto}: automation " in proc.stdout
        assert "t0ken" not in proc.stdout + proc.stderr  # the webhook URL is shown redacted only
        with temporary_settings(updates={PREFECT_API_URL: url}):
            assert main(["notify", "--release", name, "--webhook", hook]) == 0  # again: replaced, not doubled
            assert len(api_post({"url": url}, "/automations/filter", {"automations": {"name": {"any_": [auto]}}})) == 1
            found = {e.name: e for e in notify.existing()}
        assert found[auto].webhook == f"{receiver.url}/..." and found[auto].enabled
        assert set(found[auto].states) == set(notify.DEFAULT_STATES)
        blocks = api_post({"url": url}, "/block_documents/filter", {"block_documents": {"name": {"any_": [auto]}}})
        assert len(blocks) == 1 and "t0ken" not in json.dumps(blocks)  # the URL is a secret value of the block

        # a failing run of another release first, then one of this release
        for n in (other, name):
            run = subprocess.run(
                [sys.executable, "-c", RUN, str(configs[n])],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert "failed: InputError" in run.stdout, run.stderr[-2000:]
        runs = api_post({"url": url}, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"release:{name}"]}}})
        assert len(runs) == 1 and runs[0]["state_type"] == "FAILED", runs
        path, got = receiver.got.get(timeout=60)
        heard = time.monotonic() - t0
        assert path.startswith("/hook?token=t0ken")
        assert set(got) == {"subject", "body", "text"}
        assert got["subject"] == f"mdp-release {name}: flow run {runs[0]['name']} Failed"
        body = got["body"]
        assert f"Release {name}: flow run {runs[0]['name']} of flow mdp-release entered state Failed." in body
        assert (
            "Message: Flow run encountered an exception: InputError: people.csv: the points table has no rows" in body
        )
        assert f"/runs/flow-run/{runs[0]['id']}" in body
        assert str(tmp_path) not in json.dumps(got)  # nothing of the config (its paths) travels
        assert other not in json.dumps(got)  # the other release's run did not notify
        time.sleep(2)
        assert receiver.got.empty()  # one failure, one message
        print(f"notified {heard:.1f}s after the test began")
    finally:
        receiver.close()
        with temporary_settings(updates={PREFECT_API_URL: url}):
            assert main(["notify", "--release", name, "--remove"]) == 0
    assert api_post({"url": url}, "/automations/filter", {"automations": {"name": {"any_": [auto]}}}) == []
    assert api_post({"url": url}, "/block_documents/filter", {"block_documents": {"name": {"any_": [auto]}}}) == []
