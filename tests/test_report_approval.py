"""The officer's approval where the officer looks (issue 52): report.md's summary states it (who, when, the note,
the mode, the plan's sha256), typed text shown literally, and the audit checks the report's claim against the
manifest; a later approval of the same plan (a re-run that published nothing new) is appended, signed, to the
release folder's ``approvals.json``, which the audit checks too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import OTHER_KEY, claims_of, edit, findings, read, resign
from test_audit_approval import approved, edit_approval

from flows import operate_ui
from mdp_core.release import approvals_log, audit
from mdp_core.release.report_approval import approval_sentence, markdown_text

SHA = "ab" * 32
HOSTILE = "![x](http://e.invalid/a.png) <img src=x> | `code` *b* [l](u) &lt; \\"


def _unescape(md: str) -> tuple[str, str]:
    """(the text a CommonMark reader shows of ``md``, the characters it leaves unescaped)."""
    shown, bare, i = [], [], 0
    while i < len(md):
        if md[i] == "\\" and i + 1 < len(md):
            shown.append(md[i + 1])
            i += 2
            continue
        shown.append(md[i])
        bare.append(md[i])
        i += 1
    return "".join(shown), "".join(bare)


def test_typed_text_is_shown_literally_never_as_markup():
    text, bare = _unescape(markdown_text(HOSTILE + "\nline\u202e"))
    assert text == " ".join(HOSTILE.split()) + " line<U+202E>"  # what was typed, on one line, the override named
    assert not set(bare) & set("!*[]<>|`&\\_~:") and "\u202e" not in bare  # no character left to act as markup


def test_the_summary_states_who_when_mode_note_and_plan():
    a = {"mode": "required", "by": "A. Officer", "at": "2026-11-29T02:30:00+00:00", "note": HOSTILE, "plan_sha256": SHA}
    line = approval_sentence({"approval": a})
    assert line is not None and line.startswith("- **Approval.** Approved by **A. Officer** at 2026-11-29T02\\:30")
    assert "`approval = required`" in line and f"`{SHA}`" in line and markdown_text(HOSTILE) in line
    nobody = approval_sentence({"approval": a | {"mode": "none", "by": None, "at": None, "note": None}})
    assert nobody is not None and "Nobody was asked" in nobody and SHA in nobody
    assert approval_sentence({}) is None  # a report made before issue 52: no bullet
    cell = operate_ui.approval_text(a)  # the release artifact's cell
    assert "**A. Officer**" in cell and markdown_text(HOSTILE) in cell and SHA in cell and " | " not in cell


def test_the_published_report_states_the_approval_and_the_audit_holds_it_to_the_manifest(released, run):
    text = (released / "report.md").read_text()
    rec = read(released, "manifest.json")["approval"]
    assert claims_of(released)["approval"] == {k: rec[k] for k in ("mode", "by", "at", "note", "plan_sha256")}
    summary = text.split("# Appendix")[0]
    assert "- **Approval.** Nobody was asked" in summary and rec["plan_sha256"] in summary
    edit_approval(run, approved)  # the manifest and its report agree: clean, and the report names the officer
    assert audit.audit_release(run) == []
    assert "Approved by **A. Officer**" in (run / "report.md").read_text().split("# Appendix")[0]
    edit(run, "manifest.json", lambda m: m["approval"].update(by="B. Other"))  # the manifest alone edited
    findings(run, "report.md: claims approval")


def _later(by: str, at: str) -> dict:
    return {"mode": "required", "by": by, "at": at, "note": "minute 13", "plan_sha256": None}


def test_a_later_approval_of_the_same_plan_is_appended_signed_and_audited(released, tmp_path: Path):
    store = tmp_path / "store"
    shutil.copytree(released.parent.parent, store, symlinks=True)
    folder = store / "runs" / released.name
    manifest = read(folder, "manifest.json")
    plan = manifest["approval"]["plan_sha256"]
    again = manifest | {"same_as": folder.name, "approval": _later("B. Officer", "2026-12-01T09:00:00+00:00")}
    again["approval"]["plan_sha256"] = plan
    assert operate_ui.later_approval(store, folder, again)  # through the flow's own hook, with the store's key
    assert not operate_ui.later_approval(store, folder, again)  # the same decision: recorded once
    other = again | {"approval": again["approval"] | {"at": "2026-12-02T09:00:00+00:00", "plan_sha256": SHA}}
    assert not operate_ui.later_approval(store, folder, other)  # another plan: not this release's approval
    nobody = again | {"approval": again["approval"] | {"mode": "none"}}
    assert not operate_ui.later_approval(store, folder, nobody)
    record = read(folder, approvals_log.APPROVALS_FILE)
    assert [e["by"] for e in record["approvals"]] == ["B. Officer"] and record["approvals"][0]["plan_sha256"] == plan
    assert (folder / approvals_log.APPROVALS_FILE).stat().st_mode & 0o777 == 0o644
    assert audit.audit_release(folder) == []
    alias = store / "runs" / "alias"  # as the README audits it: through runs/latest, a link to the folder
    alias.symlink_to(folder.name)
    assert audit.audit_release(alias) == []


def test_an_edited_reordered_or_foreign_approvals_record_is_a_finding(run):
    resign(run)
    plan = read(run, "manifest.json")["approval"]["plan_sha256"]
    for by, at in (("B. Officer", "2026-12-01T09:00:00+00:00"), ("C. Officer", "2026-12-02T09:00:00+00:00")):
        assert approvals_log.append_approval(run, _later(by, at) | {"plan_sha256": plan}, "run-1", OTHER_KEY)
    assert audit.audit_release(run) == []
    path = run / approvals_log.APPROVALS_FILE
    good = path.read_text()

    def rewrite(change) -> None:
        record = json.loads(good)
        change(record)
        path.write_text(json.dumps(record))

    rewrite(lambda r: r["approvals"][0].update(by="Mallory"))
    findings(run, "approvals.json: the signature does not verify")
    rewrite(lambda r: r["approvals"].reverse())
    findings(run, "approvals.json: the signature does not verify", "not oldest first")
    rewrite(lambda r: r.update(manifest_sha256="0" * 64))
    findings(run, "not the approvals of this release")
    path.write_text(good)
    edit(run, "manifest.json", lambda m: m.update(note_added=None) or m.pop("note_added"))  # re-signed manifest
    findings(run, "not the approvals of this release")  # the record names the manifest's bytes it was made for


def _paused(server, name: str, within: float = 300) -> dict:
    """The paused (waiting for its officer) flow run of release ``name``."""
    import time

    from conftest import api_post

    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        filt = {"flow_runs": {"tags": {"all_": [f"release:{name}"]}, "state": {"type": {"any_": ["PAUSED"]}}}}
        runs = api_post(server, "/flow_runs/filter", filt)
        if runs:
            return runs[0]
        time.sleep(1)
    raise AssertionError(f"release {name} never paused")


@pytest.mark.flow
@pytest.mark.slow
def test_an_unchanged_plan_approved_twice_publishes_once_and_records_both(prefect_server, tmp_path):
    """``approval = "required"`` run twice on the same table: each run pauses, the officer approves each; the second
    publishes nothing new (the same content), and its approval is appended to the release's approvals.json."""
    import subprocess

    from conftest import MDP, run_command, server_env
    from test_approval import _start

    proc, store = _start(prefect_server, tmp_path, "appr-twice", approval="required")
    env = server_env(prefect_server, tmp_path)
    first = _paused(prefect_server, "appr-twice")
    ok = run_command([MDP, "approve", first["id"], "--by", "A. Officer", "--note", "minute 12"], tmp_path, env, 120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert proc.communicate(timeout=600) and proc.returncode == 0
    cfg = tmp_path / "appr-twice" / "release.toml"
    again = subprocess.Popen(
        [MDP, "run", "--config", str(cfg)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second = _paused(prefect_server, "appr-twice")
    assert second["id"] != first["id"]
    ok = run_command([MDP, "approve", second["id"], "--by", "B. Officer", "--note", "minute 13"], tmp_path, env, 120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    (folder,) = [p.parent for p in store.glob("runs/2*/manifest.json")]  # one release, one folder
    assert "Approved by **A. Officer**" in (folder / "report.md").read_text().split("# Appendix")[0]
    (entry,) = read(folder, approvals_log.APPROVALS_FILE)["approvals"]
    assert (entry["by"], entry["note"], entry["flow_run_id"]) == ("B. Officer", "minute 13", second["id"])
    assert entry["plan_sha256"] == read(folder, "manifest.json")["approval"]["plan_sha256"]
    assert audit.audit_release(folder) == []
