"""The audit checks the officer's approval (issue 49, :mod:`mdp_core.release.audit_approval`): before, removing
the manifest's ``approval`` record, inventing one with a made-up plan hash or putting another name in it passed
(re-signed). Each edit below is made to a copy of the release ``tests/conftest.py`` publishes and re-signed
(:func:`conftest.edit`), so the signature holds and only the approval's own check can catch it: every test
asserts that its findings are the approval's and nothing else's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import claims_of, edit, edit_report, findings, read

from mdp_core.release import audit
from mdp_core.release.audit_approval import printable
from mdp_core.release.plan_hash import figures_sha256

WHERE = "manifest.json approval"


def only_approval(run: Path, *needles: str) -> list[str]:
    """The audit's findings on ``run``: each needle in one of them, and all of them the approval's."""
    out = findings(run, *needles)
    assert out and all(f.startswith(WHERE) for f in out), out
    return out


def edit_approval(run: Path, change) -> None:
    """Apply ``change`` to the manifest (:func:`conftest.edit`), then restate its approval record in report.md
    (the claim re-rendered, issue 52): the report agrees with the manifest, so only the approval's own check sees
    the edit."""
    from mdp_core.release.report import evaluation_markdown, render_report
    from mdp_core.release.report_approval import approval_claim

    edit(run, "manifest.json", change)
    c = claims_of(run) | {"approval": approval_claim(read(run, "manifest.json").get("approval"))}
    shown = frozenset(p.name for p in run.glob("*.png"))
    edit_report(run, lambda _: render_report(c, evaluation_markdown(run / "evaluation.parquet"), shown))


def approved(m: dict, by: str = "A. Officer", note: str = "minute 12") -> None:
    """Turn the release's record into a person's approval of the same plan under ``approval = required``
    (what flows.approval.wait_for_approval records): a coherent record, which audits clean (with its report
    restating it: :func:`edit_approval`)."""
    m["config"]["release"]["approval"] = "required"
    m["approval"] |= {"mode": "required", "by": by, "at": "2026-11-29T02:30:00+00:00", "note": note}


def test_the_release_records_its_unattended_approval_and_audits_clean(released):
    rec = read(released, "manifest.json")["approval"]
    assert rec["mode"] == "none" and rec["by"] is None
    assert rec["plan_sha256"] == figures_sha256(rec["plan"])
    prov = read(released, audit.PROVENANCE)
    assert rec["plan"]["guarantee"] == prov["guarantee"]
    assert audit.audit_release(released) == []


def test_a_coherent_approval_audits_clean(run):
    edit_approval(run, approved)
    assert audit.audit_release(run) == []


def test_removed_approval_is_a_finding(run):
    edit_approval(run, lambda m: m.pop("approval"))
    only_approval(run, f"{WHERE}: missing")


def test_removed_approval_of_an_older_manifest_that_required_one_is_a_finding(run):
    def older(m: dict) -> None:
        approved(m)
        m["version"] = 3
        m.pop("approval")

    edit_approval(run, older)
    only_approval(run, "missing, but the config requires approval = required")


def test_invented_approval_with_a_fake_plan_hash_is_a_finding(run):
    def invent(m: dict) -> None:
        approved(m)
        m["approval"]["plan_sha256"] = "ab" * 32

    edit_approval(run, invent)
    only_approval(run, "plan_sha256")


def test_approval_of_another_plan_is_a_finding_even_with_its_own_hash(run):
    """The record names a cheaper plan and hashes it correctly: the figures are not the release's."""

    def other_plan(m: dict) -> None:
        approved(m)
        plan = m["approval"]["plan"]
        plan["charge"] = plan["charge"] / 2
        plan["charges"] = {k: v / 2 for k, v in plan["charges"].items()}
        plan["settings"]["epsilon"] = plan["settings"]["epsilon"] / 2
        m["approval"]["plan_sha256"] = figures_sha256(plan)

    edit_approval(run, other_plan)
    out = only_approval(run, f"{WHERE} plan: charge", f"{WHERE} plan: charges", f"{WHERE} plan: settings epsilon")
    assert not any("plan_sha256" in f for f in out)


def test_mode_other_than_the_configured_one_is_a_finding(run):
    edit_approval(run, lambda m: approved(m) or m["approval"].update(mode="policy"))
    only_approval(run, "mode policy but the config sets approval = required")
    edit_approval(run, lambda m: m["approval"].update(mode="rubber-stamp"))
    only_approval(run, "mode rubber-stamp is not one of")


@pytest.mark.parametrize(
    "by, why",
    [
        ("\u200b", "zero-width space"),
        ("A.\u200bOfficer", "zero-width space inside"),
        ("A. Officer\u202e", "right-to-left override"),
        ("  ", "blank"),
        ("", "empty"),
        ("A\x1b[31mB", "terminal escape"),
        ("A\nB", "line break"),
    ],
)
def test_a_name_that_is_not_printable_and_non_blank_is_a_finding(run, by, why):
    edit_approval(run, lambda m: approved(m, by=by))
    only_approval(run, f"{WHERE}: by is not a printable, non-blank name")


def test_edited_name_of_the_wrong_type_or_for_nobody_is_a_finding(run):
    edit_approval(run, lambda m: approved(m) or m["approval"].update(by=["A. Officer"]))
    only_approval(run, f"{WHERE}: by is not a printable")

    def nobody_asked(m: dict) -> None:
        m["config"]["release"].pop("approval")
        m["approval"].update(mode="none", by="A. Officer", note="", at=None)

    edit_approval(run, nobody_asked)
    only_approval(run, "mode none (nobody asked) but by is given")


def test_a_note_with_control_characters_is_a_finding_plain_text_is_not(run):
    edit_approval(run, lambda m: approved(m, note="ticket 12\nsee the minutes of 2026-11-28"))
    assert audit.audit_release(run) == []
    edit_approval(run, lambda m: m["approval"].update(note="ok\x07\u200b"))
    only_approval(run, f"{WHERE}: note is not plain text")


def test_printable():
    assert printable("A. Officer") and printable("Zoë Ørsted-Ñúñez") and printable("l1\nl2", newlines=True)
    assert not any(printable(x) for x in ("\u200b", "\u2060", "a\u00adb", "\ufeff", " ", "a\tb", None, 3))
