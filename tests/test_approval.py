"""The officer's release (issue 41): ``[release] approval`` and refusals that read as refusals.

Unit level (no server): the config key and its defaults, the plan's hash and the officer's summary (public
figures only), the policy envelope, the hook outside a flow run, the ``approve`` command's own errors. On the
session's real Prefect server (``ops``): a paused run approved with ``mdp-release approve`` (Prefect's
``resume_flow_run`` with the input) measures and publishes, and the next run of its policy runs unattended;
a rejected one and a timed-out one end **Refused**, nothing measured, nothing charged; a release the budget
refuses ends Refused too, one line, no traceback.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import MDP, POPULATION, api_post, people_table, people_toml, run_command, server_env

from artifacts.private import PrivateStore
from artifacts.store import Store
from flows.approval import (
    ApprovalInput,
    NotApproved,
    PolicyApprovalInput,
    budget_view,
    outside_envelope,
    plan_figures,
    plan_sha256,
    read_envelope,
    summary_markdown,
    wait_for_approval,
    write_envelope,
)
from flows.config import approval_mode, as_config, config_hash, parse_config, to_parameter
from flows.ledger_cli import epsilon_text
from flows.plan import plan_run
from mdp_core.errors import InputError, PrivacyError
from mdp_core.release.door import GraphFacts, Settings, plan_privacy

GRID = {"kind": "grid", "params": {"rows": 5, "cols": 6, "n_outputs": 30, "seed": 0}}


def _approval(root: Path, **release):
    """The run plan's approval terms of :func:`_config` (flows.plan.RunPlan.approval)."""
    return plan_run(_config(root, **release)).approval


def _config(root: Path, **release):
    base = {"microdata": str(root / "people.csv"), "population": POPULATION, "max_total_epsilon": 100.0}
    return parse_config({"store": str(root / "store"), "dataset": GRID, "release": base | release})


def _plan(eps: float = 2.0, population: str | None = POPULATION, eps_counts: float = 1.0):
    settings = Settings(epsilon=eps, eta=1.5, eps_counts=eps_counts, population=population)
    return plan_privacy(settings, GraphFacts(30, (30,), 1.25, "km")).admit()


# ------------------------------------------------------------------------------------------------ config
def test_the_default_is_policy_when_deployed_none_in_a_terminal_or_for_simulated_people(tmp_path):
    assert approval_mode(_config(tmp_path)) == "none"  # a terminal run: its operator approves by starting it
    assert approval_mode(_config(tmp_path), deployed=True) == "policy"  # nobody started it: a person, once
    assert approval_mode(parse_config({"release": {"simulate": True}})) == "none"
    for mode in ("required", "policy", "none"):
        assert approval_mode(_config(tmp_path, approval=mode)) == mode
    with pytest.raises(InputError, match="approval"):
        _config(tmp_path, approval="maybe")
    with pytest.raises(InputError, match="approval_timeout"):
        _config(tmp_path, approval_timeout=0)


def test_an_unset_approval_is_not_written_and_a_set_one_round_trips(tmp_path):
    """Configs written before the key keep their hash and published config; a set one survives every route."""
    unset = _config(tmp_path)
    assert "approval" not in unset.model_dump(mode="json")["release"]
    assert "approval_timeout" not in unset.model_dump(mode="json")["release"]
    assert config_hash(unset) == config_hash(as_config(unset.model_dump(mode="json")))
    policy = _config(tmp_path, approval="policy", approval_timeout=30)
    assert policy.model_dump(mode="json")["release"]["approval"] == "policy"
    assert as_config(to_parameter(policy)) == policy == as_config(policy.model_dump(mode="json"))
    assert config_hash(policy) != config_hash(unset)


# ------------------------------------------------------------------------------------------------ the plan
def test_the_plan_hash_is_of_its_public_figures():
    plan = _plan()
    figures = plan_figures(plan)
    assert set(figures) == {
        "population",
        "radius",
        "max_distance",
        "guarantee",
        "charges",
        "charge",
        "settings",
        "table",
    }
    assert figures["charge"] >= sum(figures["charges"].values())  # the exact sum, rounded up
    assert plan_sha256(plan) == plan_sha256(_plan()) and len(plan_sha256(plan)) == 64
    assert plan_sha256(_plan(eps=3.0)) != plan_sha256(plan) != plan_sha256(_plan(eps_counts=0.5))


def test_the_summary_states_the_plan_and_the_budget_history_and_writes_nothing(tmp_path):
    root = tmp_path / "store"
    private = PrivateStore(root)
    private.set_cap(POPULATION, 30.0, "A. Officer", "first budget | wave 1")
    private.set_cap(POPULATION, 20.0, "B. Board", "lowered")
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))
    plan = _plan()
    view = budget_view(root, plan, config_cap=None)  # the stored 20 applies
    assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before  # read only
    assert view is not None and view.cap == 20.0 and view.spent == 0.0 and view.cap_note == "the ledger's"
    assert budget_view(root, plan, config_cap=20.0) == view
    assert view.left_after == 20 - plan.charge.value and [h["kind"] for h in view.history] == ["cap", "lower"]
    md = summary_markdown("agency", plan, view, plan_sha256(plan), "**To decide:** here.")
    assert plan.guarantee.statement() in md and plan_sha256(plan) in md and "**To decide:** here." in md
    assert "A. Officer" in md and "first budget \\| wave 1" in md and "B. Board" in md
    assert f"{float(plan.charge.value):.6g}" in md or f"{plan.charges()['perturb']:.6g}" in md
    for config_cap in (10.0, 25.0):  # one cap: a config that disagrees with the ledger is ignored, and says so
        other = budget_view(root, plan, config_cap=config_cap)
        assert other is not None and other.cap == 20.0
        assert other.cap_note == f"the ledger's; this release's max_total_epsilon {config_cap:g} is ignored"
    first = budget_view(tmp_path / "fresh", plan, config_cap=40.0)
    assert first is not None and first.cap == 40.0 and first.history == () and not (tmp_path / "fresh").exists()
    assert budget_view(root, _plan(population=None), None) is None  # simulated people: no budget


# ------------------------------------------------------------------------------------------------ policy
def _envelope(root: Path, plan, max_charge: float, min_left: float = 0.0) -> dict:
    answer = PolicyApprovalInput(
        approve=True, name="A. Officer", note="nightly", max_charge=max_charge, min_left=min_left
    )
    write_envelope(root, "agency", plan, answer, "2026-01-01T00:00:00+00:00")
    envelope = read_envelope(root, "agency")
    assert envelope is not None
    return envelope


def test_a_plan_inside_the_envelope_runs_unattended_and_each_way_out_is_named(tmp_path):
    root = tmp_path / "store"
    plan = _plan()
    charge = float(plan.charge.value) + 1e-9
    assert outside_envelope(None, plan, None) == ["no envelope has been approved for this release yet"]
    envelope = _envelope(root, plan, max_charge=charge, min_left=10.0)
    assert (root / "approvals").stat().st_mode & 0o777 == 0o700
    view = budget_view(root, plan, config_cap=100.0)
    assert outside_envelope(envelope, plan, view) == []
    more = outside_envelope(envelope, _plan(eps_counts=2.0), view)
    assert any("additive_epsilon" in w for w in more) and any("the charge" in w for w in more)
    assert any("epsilon_per_unit" in w for w in outside_envelope(envelope, _plan(eps=2.5), view))
    assert "population" in outside_envelope(envelope, _plan(population="others"), view)[0]
    tight = budget_view(root, plan, config_cap=12.0)
    assert "leave" in outside_envelope(envelope, plan, tight)[0]


def test_every_view_shows_the_charge_at_one_precision_and_the_envelope_admits_what_it_shows(tmp_path):
    """Issue 52: approved with ``--max-charge 6.5``, every run paused with "the charge 6.5 is above the envelope's
    6.5" (the exact charge carries the certificate's 1e-9 tolerance) and the form prefilled 6.500000005."""
    root = tmp_path / "store"
    plan = _plan()
    shown = epsilon_text(plan.charge.value)
    assert Fraction(shown) != plan.charge.value  # the exact charge has more digits than anyone reads
    md = summary_markdown("agency", plan, None, plan_sha256(plan), "")
    assert f"**This release's charge:** {shown} (" in md
    envelope = _envelope(root, plan, max_charge=float(shown))  # what the summary and the form show
    view = budget_view(root, plan, config_cap=100.0)
    assert outside_envelope(envelope, plan, view) == []
    below = float(epsilon_text(Fraction(shown) * Fraction(999, 1000)))
    (why,) = outside_envelope(_envelope(root, plan, max_charge=below), plan, view)
    assert why == f"the charge {shown} is above the envelope's {epsilon_text(below)}"


def test_the_hook_outside_a_flow_run_asks_nobody_but_a_policy_still_applies(tmp_path):
    """The stages called directly (tests, the library) cannot wait for a person: a warning, no record;
    a policy release inside its envelope gets the envelope's approval record."""
    store = Store(tmp_path / "store")
    plan = _plan()
    assert wait_for_approval(_approval(tmp_path, approval="none"), store, plan) is None
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("mdp_release").addHandler(handler)  # Prefect's logging set-up replaces pytest's capture
    try:
        assert wait_for_approval(_approval(tmp_path, approval="required"), store, plan) is None
    finally:
        logging.getLogger("mdp_release").removeHandler(handler)
    assert any("nobody to ask" in m for m in seen)
    policy = _config(tmp_path, approval="policy")
    assert wait_for_approval(plan_run(policy).approval, store, plan) is None  # no envelope yet: a person would be asked
    from flows.config import release_name

    answer = PolicyApprovalInput(approve=True, name="A. Officer", note="", max_charge=50.0)
    write_envelope(store.root, release_name(policy), plan, answer, "2026-01-01T00:00:00+00:00")
    record = wait_for_approval(plan_run(policy).approval, store, plan)
    assert record is not None and record["mode"] == "policy" and record["by"] == "A. Officer"
    assert record["plan_sha256"] == plan_sha256(plan) and record["plan"] == plan_figures(plan)
    assert set(record) == {"mode", "by", "at", "note", "plan_sha256", "plan"}


def test_a_run_says_which_cap_it_uses_when_its_config_disagrees_with_the_ledger(tmp_path):
    """Issue 52: after ``ledger cap --set 60 --raise`` the next scheduled run was refused "cap 27" because the
    config's max_total_epsilon won, and nothing said so. The stored cap applies; the run's log says so."""
    store = Store(tmp_path / "store")
    PrivateStore(store.root).set_cap(POPULATION, 60.0, "A. Officer", "board decision")
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("mdp_release").addHandler(handler)
    try:
        assert wait_for_approval(_approval(tmp_path, approval="none", max_total_epsilon=27.0), store, _plan()) is None
    finally:
        logging.getLogger("mdp_release").removeHandler(handler)
    said = [m for m in seen if m.startswith("cap: ")]
    assert said == [
        f"cap: population {POPULATION!r}: the ledger's stored cap 60 applies; the config's max_total_epsilon 27 is "
        "ignored (the stored cap is the truth: change it with mdp-release ledger cap --population P --set X "
        "[--raise] --by WHO --why TEXT, and remove max_total_epsilon from the config)"
    ]


def test_the_decision_form_needs_a_name_and_not_approved_is_a_refusal():
    with pytest.raises(ValueError):
        ApprovalInput(approve=True, name="", note="")
    assert issubclass(NotApproved, PrivacyError)


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("\u200b", ""),  # zero-width space: a blank name that looks like none
        ("A.\u200bOfficer", ""),
        ("A. Officer\u202e", ""),  # a bidi override reverses what follows on screen
        ("   ", ""),
        ("A. Officer", "line one\nline two"),  # a control character
        ("A. Officer", "<script>x</script>"),
        ("A. Officer", "see [minute](http://x)"),
        ("A. Officer", "a | b"),  # a table cell's end in the summary's history
        ("<b>A</b>", ""),
    ],
)
def test_the_decision_is_a_printable_name_and_a_plain_note(name, note):
    """Prefect's API accepted the name "\u200b" and a markdown note, both signed into the release (issue 49)."""
    with pytest.raises(ValueError, match="must (be plain printable text|not be blank)"):
        ApprovalInput(approve=True, name=name, note=note)
    ok = ApprovalInput(approve=True, name="  Ä. Öfficer-Ñ (DPO)  ", note="minute 12, ticket #4; 50% OK")
    assert ok.name == "Ä. Öfficer-Ñ (DPO)" and ok.note == "minute 12, ticket #4; 50% OK"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["approve", "not-a-run", "--by", "A. Officer"], "not a flow run id"),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", " "], "--by must not be blank"),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "\u200b"], "U+200B"),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "A", "--note", "**x**`y`"], "U+0060"),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "A", "--plan", "abc"], "--plan is the plan"),
        (
            ["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "A", "--reject", "--max-charge", "3"],
            "not with --reject",
        ),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "A", "--until", "31/12/2026"], "YYYY-MM-DD"),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "A", "--max-runs", "-1"], "--max-runs"),
        (["approve", "0190f3a2-0000-7000-8000-000000000000", "--by", "A", "--reject", "--max-runs", "3"], "--reject"),
    ],
)
def test_approve_refuses_bad_arguments_before_asking_a_server(args, needle, capsys):
    from flows.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mdp-release: error: ") and needle in err[0]


# ------------------------------------------------------------------------------------------------ a real server
def _start(server, tmp_path: Path, name: str, cap: float = 100.0, **release) -> tuple[subprocess.Popen, Path]:
    """``mdp-release run`` of a fresh microdata release ``name`` (its own store) in the background; ``release``:
    more ``[release]`` settings."""
    folder = tmp_path / name
    folder.mkdir()
    people_table(folder / "people.csv", n=337)  # a count of the secret table: never in what the officer sees
    cfg = folder / "release.toml"
    store = folder / "store"
    cfg.write_text(people_toml(name, store, max_total_epsilon=cap, **release))
    env = server_env(server, tmp_path)
    args = [MDP, "run", "--config", str(cfg)]
    return subprocess.Popen(args, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), store


def _paused_run(server, name: str, within: float = 120) -> dict:
    """The flow run of release ``name`` once it is paused (waiting for the approval)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        runs = api_post(server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"release:{name}"]}}})
        if runs and runs[0]["state_type"] == "PAUSED":
            return runs[0]
        assert not runs or runs[0]["state_type"] in ("PENDING", "RUNNING", "SCHEDULED"), runs[0]["state"]
        time.sleep(1)
    raise AssertionError(f"release {name} never paused")


def _nothing_charged(store: Path, population: str) -> None:
    assert not (store / "private").exists() or PrivateStore(store).budget(population).n_charges == 0
    assert not (store / "objects" / "measure").exists()
    assert [p.name for p in (store / "runs").glob("*") if not p.name.endswith("-failed")] == []


def test_a_paused_release_measures_only_once_an_officer_approves_then_its_policy_runs_alone(prefect_server, tmp_path):
    """``approval = "policy"`` with no envelope yet: the run pauses after the door with the officer's summary,
    nothing charged; ``mdp-release approve`` resumes it: it charges, publishes and records the envelope. The
    next run stays inside it and runs unattended; a decision for a run that no longer waits is an error."""
    proc, store = _start(prefect_server, tmp_path, "appr-yes", approval="policy")
    run = _paused_run(prefect_server, "appr-yes")
    assert PrivateStore(store).budget("appr-yes-people").n_charges == 0  # nothing charged while it waits
    (art,) = api_post(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": ["appr-yes-approval"]}}})
    assert "Plan sha256" in art["data"] and "waits for your approval" in art["data"]
    assert "**Why you are asked:** no envelope has been approved for this release yet." in art["data"]  # issue 52
    assert not re.search(r"\b337\b", art["data"])  # public figures only
    env = server_env(prefect_server, tmp_path)
    ok = run_command([MDP, "approve", run["id"], "--by", "A. Officer", "--note", "minute 12"], tmp_path, env, 120)
    assert ok.returncode == 0 and "approved" in ok.stdout, ok.stderr[-2000:]
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    (final,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
    assert final["state_type"] == "COMPLETED"
    assert PrivateStore(store).budget("appr-yes-people").n_charges == 2  # perturbation and counts
    (manifest,) = [json.loads(m.read_text()) for m in store.glob("runs/2*/manifest.json")]
    assert manifest["approval"]["by"] == "A. Officer" and manifest["approval"]["note"] == "minute 12"
    assert manifest["approval"]["mode"] == "policy" and len(manifest["approval"]["plan_sha256"]) == 64
    envelope = read_envelope(store, "appr-yes")
    assert envelope is not None and envelope["by"] == "A. Officer" and envelope["runs_used"] == 0
    charge = float(epsilon_text(manifest["approval"]["plan"]["charge"]))
    assert envelope["min_left"] == charge > 0  # the default: one release's charge stays, never spent unattended
    assert envelope["table"] == manifest["approval"]["plan"]["table"] is not None and envelope["max_runs"] == 12
    unattended = run_command([MDP, "run", "--config", str(tmp_path / "appr-yes" / "release.toml")], tmp_path, env)
    assert unattended.returncode == 0 and "inside the envelope A. Officer approved" in unattended.stderr
    assert (read_envelope(store, "appr-yes") or {})["runs_used"] == 1
    assert "waits for approval" not in unattended.stderr
    again = run_command([MDP, "approve", run["id"], "--by", "A. Officer"], tmp_path, env, 120)
    assert again.returncode == 2 and "not waiting for an approval" in again.stderr


def test_a_rejected_or_timed_out_release_ends_refused_and_charges_nothing(prefect_server, tmp_path):
    """Rejected (``mdp-release approve --reject``), or no decision within ``approval_timeout``: the run ends
    in the state named Refused; one error line, no traceback."""
    timed, timed_store = _start(prefect_server, tmp_path, "appr-late", approval="required", approval_timeout=3)
    no, no_store = _start(prefect_server, tmp_path, "appr-no", approval="required")
    run = _paused_run(prefect_server, "appr-no")
    env = server_env(prefect_server, tmp_path)
    reject = [MDP, "approve", run["id"], "--by", "B. Officer", "--reject", "--note", "not this week"]
    assert run_command(reject, tmp_path, env, 120).returncode == 0
    cases = {
        "appr-no": (no, no_store, "rejected by B. Officer (not this week)"),
        "appr-late": (timed, timed_store, "nobody decided within 3 s"),
    }
    for name, (proc, store, why) in cases.items():
        _, err = proc.communicate(timeout=300)
        lines = [ln for ln in err.splitlines() if ln.startswith("mdp-release: error:")]
        assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
        assert why in lines[0] and "nothing was measured, nothing was charged" in lines[0]
        (final,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"release:{name}"]}}})
        assert (final["state_type"], final["state_name"]) == ("FAILED", "Refused"), final["state"]
        assert why in final["state"]["message"]
        _nothing_charged(store, f"{name}-people")
        (record,) = store.glob("runs/*-failed/record.json")
        assert json.loads(record.read_text())["state"] == "refused"


def test_a_release_the_budget_refuses_ends_refused_with_one_line(prefect_server, tmp_path):
    """A PrivacyError (here BudgetRefused: a cap below this release's charge) is a verdict: Refused, no
    traceback on the terminal, the failure record says refused; nothing measured or charged."""
    proc, store = _start(prefect_server, tmp_path, "appr-cap", cap=0.5, approval="none")
    _, err = proc.communicate(timeout=300)
    lines = [ln for ln in err.splitlines() if ln.startswith("mdp-release: error:")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    (run,) = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:appr-cap"]}}})
    assert (run["state_type"], run["state_name"]) == ("FAILED", "Refused") and "cap" in run["state"]["message"]
    # findable: Prefect's state filters skip a custom state name; the tag "refused" is what its filters see
    tagged = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["refused"]}}})
    assert run["id"] in {r["id"] for r in tagged} and "refused" in run["tags"]
    _nothing_charged(store, "appr-cap-people")
    (record,) = store.glob("runs/*-failed/record.json")
    assert json.loads(record.read_text())["state"] == "refused"
