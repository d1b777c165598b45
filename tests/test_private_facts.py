"""Nothing derived from the true records outside ``private/`` (issue 39, finding 8; issue 41).

1. An error about the secret table (the door's, or raised on the run path) says what kind of problem and where to
   look, never how many people nor which rows: not in the exception's text (the terminal, Prefect's state message and logs, its
   persisted result), not in ``runs/*-failed/FAILED.txt`` / ``record.json``; the row numbers go to
   ``<store>/private/failures/`` (0600 in 0700) and to ``mdp-release check``'s terminal.
2. A manifest names the secret table by its role, never by its path; ``run --from-manifest`` takes the path
   from the operator (``--microdata``) and reproduces the same bytes, checked against the recorded draw.
4. The failure artifact is a markdown artifact (it renders as markdown, not as a quoted JSON string).

Point 3 (the signing key): tests/test_signing_key.py. Releases run through the stage tasks' ``.fn``
(``conftest.run_stages``), without a Prefect server, except the ``ops`` test at the end.
"""

from __future__ import annotations

import json
import pickle
import re
import stat
import sys
from pathlib import Path
from uuid import uuid4

import pytest
from conftest import (
    N_PEOPLE,
    POPULATION,
    api_post,
    people_config,
    people_table,
    people_toml,
    publish_release,
    run_command,
    run_stages,
    server_env,
)

from mdp_core.errors import InputError, MdpError, PrivacyError, SecretTableError

FAR_ROW = 337  # the 1-based data row of the person far from every record: no public text may name it
MILAN = (45.4642, 9.19)  # ~480 km from every record of the Rome grid


@pytest.fixture()
def far_table(tmp_path: Path) -> Path:
    """The conftest people with one of them (data row :data:`FAR_ROW`) moved to Milan."""
    path = tmp_path / "people.csv"
    df = people_table(path)
    df.loc[FAR_ROW - 1, ["lat", "lon"]] = MILAN
    df.to_csv(path, index=False)
    return path


def no_row(text: str) -> None:
    """No public text names the far row: the number on its own (not inside a time stamp or an id) or a "data row"."""
    assert re.search(rf"(?<![0-9A-Za-z]){FAR_ROW}(?![0-9A-Za-z])", text) is None and "data row" not in text, text


def run_path_error(root: Path, table: Path) -> SecretTableError:
    """The error the measure stage (and a DP prior) raises for ``table``: tasks.measure.individuals."""
    from artifacts.private import PrivateStore
    from mdp_core.problem import microdata
    from mdp_core.problem.datasets import grid
    from tasks.measure import individuals

    inst = grid(5, 6, n_outputs=30, seed=0)
    private = PrivateStore(root)
    version, handle = private.seal_table(microdata.sealed_rows(microdata.read_secret(table)[0].frame, inst))
    draw, _ = private.draw(POPULATION, version)
    params = {"table": handle, "max_distance": None}
    with pytest.raises(SecretTableError) as info:
        individuals(private, params, inst, draw)
    return info.value


# ----------------------------------------------------------------------------- 1. which people
def test_a_run_path_error_keeps_its_count_and_rows_private(tmp_path, far_table):
    from prefect.states import format_exception

    from tasks.cache import ArtifactRefSerializer

    exc = run_path_error(tmp_path / "store", far_table)
    public = str(exc)
    assert "some individual(s) lie farther than max_distance" in public and f"{N_PEOPLE}" not in public
    assert "mdp-release check --config" in public
    no_row(public)
    no_row(format_exception(exc))  # what Prefect's state message holds
    no_row(ArtifactRefSerializer().dumps(exc).decode())  # what a stage's persisted failure holds
    copy = pickle.loads(pickle.dumps(exc))  # a pickled copy (Prefect's result storage): the public message only
    assert isinstance(copy, SecretTableError) and str(copy) == public
    no_row(copy.detail)
    assert "data row(s) " in exc.detail  # the operator's detail names the row (of the sealed, sorted table)
    assert f"1 of {N_PEOPLE} individual(s) lie farther" in exc.detail  # and counts them


FAR, UNREADABLE = 7, 13  # the attacker's table: counts no public message may carry


@pytest.fixture()
def attacker_table(tmp_path: Path) -> Path:
    """The conftest people with :data:`FAR` of them moved to Milan and :data:`UNREADABLE` without a latitude."""
    path = tmp_path / "people.csv"
    df = people_table(path)
    df.loc[100 : 100 + FAR - 1, ["lat", "lon"]] = MILAN
    df.loc[200 : 200 + UNREADABLE - 1, "lat"] = float("nan")
    df.to_csv(path, index=False)
    return path


def no_count(text: str) -> None:
    """No number in ``text`` but max_distance's setting: neither the table's size nor any count of its people."""
    assert re.search(r"\d", re.sub(r"max_distance = [0-9.]+", "", text)) is None, text


def test_the_doors_refusals_carry_no_count_of_the_table(tmp_path, attacker_table):
    """The door's errors for 7 people far from every record and 13 unreadable rows (a real table located on the
    grid, the door's own plan): the SecretTableError's message (the terminal, Prefect's state, logs) names the
    rule and the remedy with no count; its detail (the private failure record) and `check`'s terminal count them."""
    from flows.check import run_check
    from mdp_core.problem import microdata
    from mdp_core.problem.datasets import grid
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy, table_facts

    inst = grid(5, 6, n_outputs=30, seed=0)
    loc = microdata.locate(microdata.read_secret(attacker_table)[0].frame, inst)
    settings = Settings(epsilon=2.0, eta=1.5, population=POPULATION)
    plan = plan_privacy(settings, GraphFacts.recomputed(inst)[0], table_facts(loc, inst.n_records, 1.5))
    assert len(plan.errors) == 2 and "have NaN" in plan.errors[0] and "farther than" in plan.errors[1]
    with pytest.raises(SecretTableError) as info:
        plan.admit()
    for text in (str(info.value), pickle.loads(pickle.dumps(info.value)).detail, *plan.reasons):
        no_count(text)
        assert "mdp-release check --config" in text
    assert f"{UNREADABLE} of {N_PEOPLE} row(s)" in info.value.detail and f"{FAR} of {N_PEOPLE}" in info.value.detail
    (tmp_path / "release.toml").write_text(people_toml("attack", tmp_path / "store", attacker_table))
    rep = run_check(tmp_path / "release.toml")  # the pointer holds: check's terminal counts and names them
    assert sum(r.startswith("microdata: some") for r in rep.reasons) == 2, rep.reasons
    assert any(h.startswith(f"microdata: {UNREADABLE} row(s) with NaN") for h in rep.hints), rep.hints
    assert any(h.startswith(f"microdata: {FAR} of {N_PEOPLE} individual(s) lie farther") for h in rep.hints)


def test_rule_6_names_no_share_at_the_door_nor_at_the_claim(tmp_path):
    """Rule 6 refuses a table sharing most of its people with another population, at the door (the measured
    share in its TableFacts) and at the measure stage's claim (``tasks.measure.claim_table``, a real keyed
    sketch): both PrivacyErrors name the population, the rule's thresholds and the remedy, never the share
    (no "%", no digit but the rule's number and its 0.9 threshold); the door's details (check's terminal) keep the share."""
    import numpy as np

    from artifacts.private import PrivateStore
    from artifacts.store import Store
    from mdp_core.problem.datasets import grid
    from mdp_core.release.door import GraphFacts, Settings, TableFacts, plan_privacy
    from mdp_core.release.similarity import People
    from tasks.measure import claim_table

    inst = grid(5, 6, n_outputs=30, seed=0)
    facts = TableFacts(n_people=N_PEOPLE, n_records=inst.n_records, other_population="earlier", other_share=0.97)
    plan = plan_privacy(Settings(epsilon=2.0, eta=1.5, population=POPULATION), GraphFacts.recomputed(inst)[0], facts)
    with pytest.raises(PrivacyError) as door:
        plan.admit()
    assert any("97%" in d for d in plan.details), plan.details
    rng = np.random.default_rng(3)
    box = ([41.88, 12.47], [41.92, 12.52])
    people = People(rng.uniform(*box, size=(600, 2)), rng.uniform(*box, size=(600, 2)), True)
    store = Store(tmp_path / "store")
    assert PrivateStore(store.root).claim_table(people, "earlier") is None
    with pytest.raises(PrivacyError) as claim:
        claim_table(store, people, POPULATION)  # the same people under another name
    for text in (str(door.value), str(claim.value)):
        assert "rule 6" in text and "population 'earlier'" in text and "%" not in text, text
        assert re.search(r"\d", text.replace("0.9", "").replace("rule 6", "")) is None, text


def test_a_malformed_row_is_not_named_on_the_run_path(tmp_path):
    from mdp_core.problem import microdata

    path = tmp_path / "people.csv"
    rows = ["41.9,12.5"] * (FAR_ROW - 1) + ["41.9,12.5,extra"]
    path.write_text("lat,lon\n" + "\n".join(rows) + "\n")
    with pytest.raises(SecretTableError) as info:
        microdata.read_secret(path)
    no_row(str(info.value))
    assert f"data row {FAR_ROW}" in info.value.detail


@pytest.mark.filterwarnings("ignore:Artifact creation outside of a flow or task run:FutureWarning")
def test_the_failure_record_is_public_and_the_rows_are_private(tmp_path, far_table):
    """record_failure (the flow's failure hook) with the stage's real error: FAILED.txt and record.json (0644)
    say how many and point to the private detail; the rows are in private/failures/ (0600, folders 0700)."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Failed

    from flows import operate_ui

    store = tmp_path / "store"
    exc = run_path_error(store, far_table)
    run = FlowRun(flow_id=uuid4(), name="leaky-run", parameters={"config": {"name": "leaky", "store": str(store)}})
    operate_ui.at_stage(str(run.id), "measure")
    # no Prefect server here: the UI artifact fails (a warning), the records stand
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        folder = operate_ui.record_failure(run, Failed(message=str(exc), data=exc))
    assert folder is not None
    failed, record = (folder / "FAILED.txt").read_text(), (folder / "record.json").read_text()
    for text in (failed, record):
        no_row(text)
    assert failed.startswith("measure: SecretTableError: microdata: some individual(s)")
    private = store / json.loads(record)["private_detail"]
    assert private.parent == store / "private" / "failures" and str(private) in failed
    assert "data row(s) " in private.read_text() and "as the door sealed it" in private.read_text()
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in (private.parent, private.parent.parent))
    assert stat.S_IMODE((folder / "FAILED.txt").stat().st_mode) == 0o644


def test_a_release_of_a_table_with_a_far_person_names_no_row(tmp_path, far_table):
    """The stages in the flow's order refuse the table (wherever the refusal comes from), naming no row."""
    with pytest.raises(MdpError) as info:
        run_stages(tmp_path / "store", people_config(tmp_path / "store", far_table))
    no_row(str(info.value))
    no_count(str(info.value))
    assert "some individual(s) lie farther" in str(info.value)


# ----------------------------------------------------------------------------- 2. the table's path
def test_a_manifest_names_the_table_by_its_role_and_a_rerun_needs_its_path(tmp_path, capsys):
    import datetime as _dt

    from artifacts.store import Store
    from flows.cli import main
    from flows.manifest import SECRET_TABLE_ROLE, new_manifest
    from flows.manifest_read import manifest_draw
    from flows.run import rerun_config
    from mdp_core.release import audit
    from tasks.measure import secret_draw

    root, table = tmp_path / "store", tmp_path / "agency-secret-people.csv"
    people_table(table)
    cfg = people_config(root, table)
    m = new_manifest("mdp-release-manifest", "r", "abcd1234", _dt.datetime.now(_dt.UTC), cfg, {}, {}, {})
    assert m["config"]["release"]["microdata"] == SECRET_TABLE_ROLE and table.name not in json.dumps(m)

    refs = run_stages(root, cfg)
    run = publish_release(Store(root), refs, cfg=cfg)
    manifest = run / "manifest.json"
    assert table.name not in manifest.read_text() and audit.audit_release(run) == []

    with pytest.raises(InputError, match="--microdata PATH"):
        rerun_config(manifest)
    assert main(["run", "--from-manifest", str(manifest)]) == 2  # refused before Prefect starts
    assert "--microdata PATH" in capsys.readouterr().err
    again = rerun_config(manifest, str(table))
    assert again == cfg
    refs2 = run_stages(root, again)  # the same table, the same draw: the same bytes
    assert {s: r.files for s, r in refs2.items()} == {s: r.files for s, r in refs.items()}
    other = tmp_path / "other.csv"
    people_table(other, seed=8)
    with pytest.raises(InputError, match="another version of the table"):
        secret_draw(Store(root), POPULATION, "0" * 64, commitment=manifest_draw(manifest))  # another version


# ----------------------------------------------------------------------------- 4. the UI artifact (and 1, in Prefect)
@pytest.mark.filterwarnings("ignore:Artifact creation outside of a flow or task run:FutureWarning")
def test_a_failed_run_in_prefect_names_no_row_and_its_artifact_is_markdown(prefect_server, tmp_path, far_table):
    """A real run of the table on the session's Prefect server: the command's error, the flow run's and task
    runs' state messages, the run's logs, FAILED.txt and the failure artifact name no row; the artifact is a
    markdown artifact (its data is the markdown itself, not a JSON string), also when written by a hook
    outside the run (the runner's cancellation hook)."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Failed

    from flows import operate_ui

    store = tmp_path / "store"
    cfg = tmp_path / "leaky.toml"
    cfg.write_text(people_toml("leaky", store, far_table, counts_seeds=2, population=POPULATION))
    env = server_env(prefect_server, tmp_path)
    proc = run_command([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)], tmp_path, env, 600)
    assert proc.returncode in (1, 2), proc.stderr[-3000:]
    no_row(proc.stderr)
    runs = api_post(prefect_server, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["release:leaky"]}}})
    assert runs and runs[0]["state_type"] == "FAILED"
    no_row(runs[0]["state"]["message"])
    tasks = api_post(prefect_server, "/task_runs/filter", {"flow_runs": {"id": {"any_": [runs[0]["id"]]}}})
    for t in tasks:
        no_row(str((t.get("state") or {}).get("message")))
    logs = api_post(prefect_server, "/logs/filter", {"logs": {"flow_run_id": {"any_": [runs[0]["id"]]}}})
    no_row("\n".join(str(x["message"]) for x in logs))
    (failed,) = store.glob("runs/*-failed/FAILED.txt")
    no_row(failed.read_text())
    arts = api_post(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": ["leaky-failure"]}}})
    assert arts and arts[0]["type"] == "markdown" and arts[0]["data"].startswith("# Release `leaky` FAILED")
    no_row(arts[0]["data"])

    run = FlowRun(flow_id=uuid4(), name="hooked", parameters={"config": {"name": "hooked", "store": str(store)}})
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["url"]}):
        operate_ui.record_failure(run, Failed(message="boom", data=ValueError("solve: no feasible point")))
    arts = api_post(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": ["hooked-failure"]}}})
    assert arts and arts[0]["data"].startswith("# Release `hooked` FAILED\n\n**Reason:**")
    assert arts[0]["flow_run_id"] == str(run.id)
