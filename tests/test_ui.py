"""What an agency sees in the Prefect UI, checked in a real browser (headless chromium over the DevTools
protocol) against the session's real Prefect server: the flow run's name and tags, named task runs for
all 8 stages, the release / report / evaluation artifacts, and plots that render (naturalWidth > 0).

Screenshots land in the test's tmp folder (``flow_run.png``, ``report.png``, ``release.png``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from cdp import Browser, find_chromium
from conftest import QUIET, api_post

from flows.config import ReleaseFlowConfig
from mdp_core.declarations import contract

pytestmark = [pytest.mark.flow, pytest.mark.slow]

CHROMIUM = find_chromium()
STAGES = [st.name for st in contract.STAGES if st.runs(ReleaseFlowConfig())]  # CONFIG's: the default's stages

CONFIG = """
name = "ui-check"
store = "{store}"
[dataset]
kind = "grid"
params = {{ rows = 4, cols = 6, n_outputs = 8, seed = 4 }}
[partition]
subsets = 2
[solve]
method = "benders"
[release]
simulate = true
n_individuals = 200
[evaluate]
baselines = ["exp"]
counts_eps = [0.5, 1.0]
counts_seeds = 2
"""

# JavaScript: click every leaf element whose text is exactly the given string; how many were clicked.
CLICK = (
    "Array.from(document.querySelectorAll('*')).filter(e => e.children.length == 0 && e.innerText"
    " && e.innerText.trim() == %s).map(e => (e.click(), 1)).length"
)
IMAGES = "Array.from(document.images).filter(i => i.src.startsWith('data:image/png')).map(i => i.complete ? i.naturalWidth : -1)"


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium/chrome on PATH (apt-get install -y chromium)")
def test_flow_run_page_shows_stages_artifacts_and_plots(prefect_server, tmp_path):
    cfg = tmp_path / "ui.toml"
    cfg.write_text(CONFIG.format(store=tmp_path / "store"))
    env = (
        os.environ
        | QUIET
        | {
            "PREFECT_API_URL": prefect_server["url"],
            "PREFECT_HOME": str(prefect_server["home"]),
            "MDP_RELEASE_HOME": str(tmp_path),
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--config", str(cfg), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads(proc.stdout)
    run_id = manifest["flow_run_id"]
    ui = prefect_server["url"].removesuffix("/api")
    with urllib.request.urlopen(f"{prefect_server['url']}/flow_runs/{run_id}", timeout=30) as r:
        run = json.load(r)

    progress = {
        a["key"]: a
        for a in api_post(
            prefect_server,
            "/artifacts/filter",
            {"flow_runs": {"id": {"any_": [run_id]}}, "artifacts": {"type": {"any_": ["progress"]}}},
        )
    }
    assert float(progress["ui-check-solve-progress"]["data"]) == 100.0  # the solve's progress bar, finished
    assert "benders" in progress["ui-check-solve-progress"]["description"]

    browser = Browser(tmp_path / "chromium", CHROMIUM)
    try:
        page = browser.open(f"{ui}/runs/flow-run/{run_id}")
        page.wait_for(f"document.body && document.body.innerText.includes({json.dumps(run['name'])})", 90)
        text = page.eval("document.body.innerText")
        assert run["name"].startswith("ui-check-")
        for tag in ("dataset:grid", "method:benders", "release:ui-check"):
            assert tag in text, tag
        page.screenshot(tmp_path / "flow_run.png")

        page.wait_for(CLICK % json.dumps("Task Runs"), 60)
        page.wait_for(" && ".join(f"document.body.innerText.includes('{s}-')" for s in STAGES), 60)

        page.wait_for(CLICK % json.dumps("Artifacts"), 60)
        for key in ("ui-check-release", "ui-check-report", "ui-check-evaluation"):
            page.wait_for(f"document.body.innerText.includes('{key}')", 60)
        page.screenshot(tmp_path / "artifacts.png")

        page.wait_for(CLICK % json.dumps("ui-check-report"), 60)
        page.wait_for("document.location.href.includes('/artifacts/artifact/')", 60)
        widths = page.wait_for(f"(w => w.length >= 3 && w.every(x => x >= 0) && w)({IMAGES})", 60)
        assert all(w > 0 for w in widths), f"plots that did not render: {widths}"  # bounds, partition, counts
        assert "Privacy certificate: PASS" in page.eval("document.body.innerText")
        page.screenshot(tmp_path / "report.png")

        page.goto(f"{ui}/runs/flow-run/{run_id}")
        page.wait_for(CLICK % json.dumps("Artifacts"), 90)
        page.wait_for(CLICK % json.dumps("ui-check-release"), 60)
        body = page.wait_for("document.body.innerText.includes('realised eps') && document.body.innerText", 60)
        for fragment in (manifest["run_name"], "PASS", "eps_counts", "lower bound", "gap", "manifest"):
            assert fragment in body, fragment
        page.screenshot(tmp_path / "release.png")
        page.close()
    finally:
        browser.close()
