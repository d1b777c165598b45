"""The officer's budget in the Prefect UI (issue 41): the artifact ``budget-<population>`` -- each release's
charge by what it paid for, every cap decision, what is left, what the next release like the last costs and
how many more fit -- from the same figures as ``mdp-release ledger`` (one shared view, ``flows.ledger_cli.
BudgetView``); published by a run after it released and after it was refused, and the low-budget warning
armed once per population and budget (a raise or a new budget re-arms it, a lowering does not)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from uuid import uuid4

import pytest

from artifacts.ledger import BudgetRefused
from artifacts.private import PrivateStore
from artifacts.published import published_heads
from flows import operate_ui
from flows.cli import main
from flows.ledger_cli import budget_epoch, outlook_line, read_budget_view
from tasks.measure import charge_all, charge_key

RADIUS = {"value": 2.0, "unit": "km"}
MONTH = {"prior": 0.5, "perturb": 5.42, "counts": 1.0}  # 6.92 a release
CAP = 36.99  # five releases: 34.6 spent, 2.39 left: the sixth does not fit (LOW)


def spend(root: Path, population: str, months: int, cap: float = CAP) -> list[str]:
    """``months`` monthly releases of ``population`` charged as the pipeline charges them (prior first, then
    perturbation and counts: :func:`tasks.measure.charge_all`), each published in runs/ with the ledger
    position its manifest commits to. Returns the run folders' names."""
    names = []
    for i in range(1, months + 1):
        priv = PrivateStore(root)
        draw, _ = priv.draw(population, f"{i:064x}")
        params = {"max_total_epsilon": cap, "require_cap": True, "radius": RADIUS, "release_key": "c" * 64}
        keys = {kind: charge_key(kind, draw, i) for kind in MONTH}
        charge_all(priv, draw, params, {keys["prior"]: ("prior", MONTH["prior"])})
        charge_all(priv, draw, params, {keys[k]: (k, MONTH[k]) for k in ("perturb", "counts")})
        at = priv.position(population, (keys["perturb"], keys["counts"]))
        assert at is not None
        name = f"2026-{i:02d}-01T030000Z-run{i}"
        (root / "runs" / name).mkdir(parents=True)
        ledger = {"population": population, "ledger_seq": at["seq"], "ledger_head": at["head"]}
        (root / "runs" / name / "manifest.json").write_text(json.dumps({"privacy": {"ledger": ledger}}))
        names.append(name)
    return names


# ----------------------------------------------------------------------------- no server
def test_the_artifact_shows_the_ledgers_figures_and_says_low(tmp_path, capsys):
    pop = "rome-residents"
    runs = spend(tmp_path, pop, 5)
    priv = PrivateStore(tmp_path)
    view = read_budget_view(tmp_path, priv, pop)
    row = view.row
    assert (row["status"], row["fits"], row["left"], row["last_cost"], row["releases"]) == ("low", 0, 2.39, 6.92, 5)
    assert main(["ledger", "--store", str(tmp_path), "--json"]) == 0  # the command shows the same figures
    (shown,) = json.loads(capsys.readouterr().out)
    assert {k: shown[k] for k in ("status", "fits", "left", "last_cost", "releases")} == {
        k: row[k] for k in ("status", "fits", "left", "last_cost", "releases")
    }
    md = operate_ui.budget_markdown(view, priv.history(pop, row["ledger_seq"]))
    assert md.startswith(f"# Budget of population `{pop}`")
    assert "| status | **LOW**: 2.39 left; the next release like the last (6.92) would be refused" in md
    assert "| cap | 36.99 |" in md and "| how many more fit | 0 |" in md
    assert "| the next release like it costs | 6.92 |" in md
    assert "| # | budget | release | perturbation | counts | prior | total |" in md
    assert f"| 5 | 0 (current) | (run {runs[4]}) | 5.42 | 1 | 0.5 | 6.92 |" in md
    assert "| first cap | 36.99 | 0 | config | first cap, from the config's max_total_epsilon |" in md
    assert "Refused" not in md
    refused = "refused at the privacy door: BudgetRefused: release refused: it would bring ... (cap 36.99)"
    assert f"**Refused:** {refused}" in operate_ui.budget_markdown(view, [], refused)
    subject, body = operate_ui.budget_message(view, "rome-monthly")
    assert subject == (
        f"mdp-release rome-monthly: population {pop}'s budget is LOW: 2.39 left of 36.99, the next release like "
        "the last costs 6.92"
    )
    assert outlook_line(view).removeprefix(f"{pop}: ") in body
    assert f"mdp-release ledger cap --population {pop} --set X --raise" in body


def test_a_raise_or_a_new_budget_rearms_the_warning_a_lowering_does_not(tmp_path):
    pop = "rome-residents"
    spend(tmp_path, pop, 5)
    priv = PrivateStore(tmp_path)
    first = read_budget_view(tmp_path, priv, pop).row["epoch"]
    assert first == budget_epoch(priv.entries(pop)) == 1  # the first cap (entry 0 is the genesis)
    priv.set_cap(pop, 36.0, "A. Officer", "tighter")
    assert read_budget_view(tmp_path, priv, pop).row["epoch"] == first  # a lowering: still warned
    priv.set_cap(pop, 37.5, "A. Officer", "board decision", allow_raise=True)
    raised = read_budget_view(tmp_path, priv, pop).row
    assert raised["epoch"] > first and raised["status"] == "low"  # re-armed: 2.9 left still fits none
    priv.start_new_budget(pop, 20.0, "A. Officer", "new survey wave", published_heads(tmp_path, pop))
    fresh = read_budget_view(tmp_path, priv, pop)
    assert fresh.row["epoch"] > raised["epoch"] and fresh.row["status"] == "ok" and fresh.last is None
    md = operate_ui.budget_markdown(fresh, priv.history(pop, fresh.row["ledger_seq"]))
    for decided in ("| lowered | 36 |", "| raised | 37.5 |", "| new budget (spent 0) | 20 |"):
        assert decided in md
    assert "| A. Officer | board decision |" in md and "| 5 | 0 |" in md  # the old budget's releases stay listed
    assert "ok: 20 left; no release charged yet in this budget" in md


def test_an_exhausted_budget_and_keys_prefect_accepts(tmp_path):
    spend(tmp_path, "p", 2, cap=13.84)  # two releases spend it exactly
    view = read_budget_view(tmp_path, PrivateStore(tmp_path), "p")
    assert view.row["status"] == "exhausted"
    assert "**EXHAUSTED**" in operate_ui.budget_markdown(view, [])
    assert "budget is EXHAUSTED (cap 13.84)" in operate_ui.budget_message(view, "r")[0]
    from prefect.client.schemas.actions import ArtifactCreate, VariableCreate

    slugs = {operate_ui.population_slug(p) for p in ("rome.people", "rome_people", "rome-people")}
    assert len(slugs) == 3 and "rome-people" in slugs  # two names never share a key
    assert operate_ui.budget_key("p", "/real/store") != operate_ui.budget_key("p", "/scratch/store")  # per store
    for p in ("rome.people", "rome_people", "a" * 63):
        ArtifactCreate(key=operate_ui.budget_key(p, "/a/b/store"), type="markdown", data="x")
        VariableCreate(name=operate_ui.SENT_PREFIX + operate_ui.population_slug(p), value={})


# ----------------------------------------------------------------------------- on the session's server
CONFIG = {
    "name": "rome-monthly",
    "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 6}},
    "release": {"microdata": "people.csv", "max_total_epsilon": CAP},
}


def _latest(url: str, key: str) -> dict:
    from conftest import api_post

    found = api_post({"url": url}, "/artifacts/filter", {"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC"})
    return found[0]


@pytest.mark.flow
def test_runs_publish_the_budget_and_warn_once_per_budget(prefect_server, tmp_path):
    """A run after its release publishes ``budget-<population>`` and warns (LOW); a refused run of the same
    population adds the refusal to the artifact and does not warn again; a raise re-arms the warning."""
    from prefect import flow
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Failed
    from prefect.variables import Variable

    url, pop = prefect_server["url"], f"budget-{uuid4().hex[:8]}"
    spend(tmp_path, pop, 5)
    (tmp_path / "people.csv").write_text("lat,lon\n")
    config = CONFIG | {"store": str(tmp_path), "release": CONFIG["release"] | {"population": pop}}
    sent_name = operate_ui.SENT_PREFIX + operate_ui.population_slug(pop)

    @flow(name="budget-artifact-test")
    def after_release(config: dict) -> bool:
        return operate_ui.publish_budget(config["store"], pop, config["name"]) is not None

    @flow(name="budget-artifact-test")
    def refused(config: dict) -> None:
        why = "release refused: it would bring the spend to 41.52 (cap 36.99); nothing was measured"
        run = FlowRunContext.get().flow_run  # type: ignore[union-attr]
        operate_ui.record_failure(run, Failed(name="Refused", message=why, data=BudgetRefused(why)), "refused")

    with temporary_settings(updates={PREFECT_API_URL: url}):
        assert after_release(config)
        art = _latest(url, operate_ui.budget_key(pop, tmp_path))
        assert art["type"] == "markdown" and "**LOW**" in art["data"] and "Refused" not in art["data"]
        sent = Variable.get(sent_name)
        assert sent["epoch"] == 1 and sent["status"] == "low" and sent["release"] == "rome-monthly"
        refused(config)
        art = _latest(url, operate_ui.budget_key(pop, tmp_path))
        assert "**Refused:** refused at before the first stage: BudgetRefused: release refused" in art["data"]
        assert "**LOW**" in art["data"]
        assert Variable.get(sent_name) == sent  # warned once for this budget
        PrivateStore(tmp_path).set_cap(pop, 37.5, "A. Officer", "one more month", allow_raise=True)
        assert after_release(config)
        rearmed = Variable.get(sent_name)
        assert rearmed["epoch"] > sent["epoch"] and rearmed["left"] == 2.9
    assert str(tmp_path) not in art["data"] and "people.csv" not in art["data"]  # nothing of the config's paths
    events = _events(url, pop, want=2)
    assert sorted(e["resource"]["mdp-release.budget-epoch"] for e in events) == sorted(
        [str(sent["epoch"]), str(rearmed["epoch"])]
    )
    assert all(e["related"] for e in events)


def _events(url: str, population: str, want: int, within: float = 30) -> list[dict]:
    """The low-budget events of ``population`` the server received (waits up to ``within`` s for ``want``)."""
    from conftest import api_post

    body = {
        "filter": {
            "event": {"name": [operate_ui.BUDGET_EVENT]},
            "resource": {"id": [operate_ui.BUDGET_RESOURCE + population]},
            "occurred": {"since": "2020-01-01T00:00:00Z"},
        }
    }
    t0, found = time.monotonic(), []
    while time.monotonic() - t0 < within:
        found = api_post({"url": url}, "/events/filter", body)["events"]
        if len(found) >= want:
            break
        time.sleep(1)
    return found
