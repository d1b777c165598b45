"""Refusals findable in the UI (issue 52), in a real browser (headless chromium over the DevTools protocol,
:mod:`cdp`) against the session's real Prefect server: a release the budget refuses ends in the state named
Refused, tagged ``refused`` (:func:`flows.operate_ui.tag_refused`); the runs list filtered by that tag shows it
and hides a run that was not refused.

Prefect's UI skips a custom state name in its state filter (PrefectHQ/prefect 16402, 21566): the tag is what it
filters on. The runs page (``/runs``) reads its filter from the route's query (Prefect 3.8's UI bundle,
``prefect/server/ui/assets``: ``tag``, ``state``, ``flow``, ``deployment``, ``workPool``, ``workQueue``), so
``/runs?tag=refused`` is the filter an officer applies in the *Tags* box. Screenshot: ``refused_runs.png`` in the
test's tmp folder.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest
from cdp import Browser, find_chromium
from conftest import api_post
from test_approval import _start

pytestmark = [pytest.mark.flow, pytest.mark.slow]

CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium/chrome on PATH (apt-get install -y chromium)")
def test_the_runs_list_filtered_by_the_refused_tag_finds_the_refused_release(prefect_server, tmp_path):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Completed

    proc, _ = _start(prefect_server, tmp_path, "ui-refused", cap=0.5, approval="none")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and "refused" in err, err[-3000:]
    (run,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:ui-refused"]}}})
    assert (run["state_type"], run["state_name"]) == ("FAILED", "Refused") and "refused" in run["tags"]

    @flow(name="mdp-release")
    def release() -> None:
        pass

    with temporary_settings(updates={PREFECT_API_URL: prefect_server["url"]}), get_client(sync_client=True) as client:
        other = client.create_flow_run(release, name="ui-refused-not-refused", tags=["release:ui-refused-ok"])
        client.set_flow_run_state(other.id, Completed())

    ui = prefect_server["url"].removesuffix("/api")
    browser = Browser(tmp_path / "chromium", CHROMIUM)
    try:
        page = browser.open(f"{ui}/runs")  # unfiltered: both runs are listed
        page.wait_for(f"document.body && document.body.innerText.includes({json.dumps(other.name)})", 90)
        assert run["name"] in page.eval("document.body.innerText")
        page.goto(f"{ui}/runs?{urllib.parse.urlencode({'tag': 'refused'})}")
        page.wait_for(f"document.body && document.body.innerText.includes({json.dumps(run['name'])})", 90)
        page.wait_for(f"!document.body.innerText.includes({json.dumps(other.name)})", 30)  # the filter applied
        text = page.eval("document.body.innerText")
        assert "refused" in text and "Refused" in text  # the tag filter, and the run's state as it reads
        page.screenshot(tmp_path / "refused_runs.png")
        assert (tmp_path / "refused_runs.png").stat().st_size > 10_000
        page.close()
    finally:
        browser.close()
