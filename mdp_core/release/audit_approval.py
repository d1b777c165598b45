"""The audit's check of the officer's approval (:mod:`mdp_core.release.audit`, issue 49): the manifest's
``approval`` record (:mod:`flows.approval`: ``{mode, by, at, note, plan_sha256, plan}``) against the config
that asked for it and the release it approved.

- **Present when it must be.** A manifest of version >= :data:`ALWAYS_RECORDED` always carries the record
  (mode "none": nobody was asked); an older one carries it when its config sets ``[release] approval`` to
  "required" or "policy". A removed record is a finding.
- **Its mode** is one of :data:`MODES` and the configured one when the config sets it; with the config unset,
  "policy" (a deployed run) or "none" (a run started by hand, simulated people), never "required".
- **Who and why.** A person's decision (mode required or policy) names who decided: a printable, non-blank
  string (:func:`printable`: no control, zero-width or other format character, no separator but the space),
  at an ISO 8601 time; its note is plain text (printable, new lines allowed). Mode "none" names nobody.
- **What was approved.** ``plan_sha256`` is :func:`mdp_core.release.plan_hash.figures_sha256` of the
  published ``plan`` figures, and the figures are the release's own: the privacy door's plan recomputed from
  the released files (:func:`mdp_core.release.audit_provenance.door_plan`) gives the same population, radius,
  max_distance, charges, whole charge and settings; the guarantee is release_provenance.json's; the sealed
  table's handle is the provenance's ``table`` when it states one. An invented record with a made-up hash, an
  approval of another plan, or an edited figure is a finding.

A record re-signed with the agency's key passes the signature (step 0); only these checks can catch it.

**Later approvals** (issue 52, :mod:`mdp_core.release.approvals_log`): a release folder's ``approvals.json``, when
there is one, is this release's (its ``manifest_sha256``, its folder name), signed by the key beside the manifest,
and holds only people's decisions (mode required or policy, a printable name, an ISO 8601 time, a plain-text note)
of the plan the manifest approved (the same ``plan_sha256``), oldest first (:func:`check_approvals_file`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from mdp_core.declarations.budget import round_up
from mdp_core.release.audit_common import RECOMPUTED, Record, _agrees, _compare, _obj, _show
from mdp_core.release.audit_provenance import _stretch, _stretch_within, door_plan
from mdp_core.release.plan_hash import figures_sha256

WHERE = "manifest.json approval"
MODES = ("required", "policy", "none")  # = flows.config's [release] approval choices
ALWAYS_RECORDED = 4  # = flows.manifest.MANIFEST_VERSION from which every release records its approval
PERSON = ("required", "policy")  # the modes in which a person decided
SETTINGS_EXACT = (
    *("epsilon", "eta", "eps_counts", "eps_prior", "eps_error", "max_stretch", "allow_unprotected", "population"),
)  # eps_error (issue 50): in the settings only when measured (Settings.as_params), as in the plan approved


def printable(text: object, newlines: bool = False) -> bool:
    """``text`` is a non-blank string of printable characters (:meth:`str.isprintable`: no control, format --
    zero-width among them --, surrogate, private-use or unassigned character, no separator but the space);
    ``newlines``: line breaks allowed between printable lines (a note)."""
    if not isinstance(text, str) or not text.strip():
        return False
    return all(line.isprintable() for line in (text.split("\n") if newlines else [text]))


def check_approval(manifest: dict, prov: dict, facts: Record) -> list[str]:
    """Findings of the manifest's approval record (module docstring)."""
    block = manifest.get("approval")
    configured = _obj(_obj(manifest.get("config")).get("release")).get("approval")
    version = manifest.get("version")
    recorded_always = isinstance(version, int) and not isinstance(version, bool) and version >= ALWAYS_RECORDED
    if block is None:
        if recorded_always:
            return [f"{WHERE}: missing (a manifest of version {version} records who approved its plan, or nobody)"]
        if configured in PERSON:
            return [f"{WHERE}: missing, but the config requires approval = {configured}"]
        return []
    if not isinstance(block, dict):
        return [f"{WHERE}: not an object"]
    findings = _check_mode(block, configured) + _check_person(block)
    plan = block.get("plan")
    if plan is None and not recorded_always:  # approved before the record carried the figures: the hash only
        sha = block.get("plan_sha256")
        if block.get("mode") in PERSON and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
            findings.append(f"{WHERE}: plan_sha256 is not a sha256 hex hash")
        return findings
    if not isinstance(plan, dict):
        return findings + [f"{WHERE}: plan is not the plan's figures (an object)"]
    try:
        sha = figures_sha256(plan)
    except (TypeError, ValueError):
        return findings + [f"{WHERE}: plan is not canonical JSON (a non-finite number)"]
    if block.get("plan_sha256") != sha:
        findings.append(
            f"{WHERE}: plan_sha256 {_show(block.get('plan_sha256'))} is not the sha256 of the plan it states ({sha})"
        )
    return findings + check_plan_figures(plan, prov, facts)


def _check_mode(block: dict, configured: object) -> list[str]:
    """The record's mode: a known one, the configured one when the config sets it, "policy" or "none" unset."""
    mode = block.get("mode")
    if mode not in MODES:
        return [f"{WHERE}: mode {_show(mode)} is not one of {list(MODES)}"]
    if configured is not None and mode != configured:
        return [f"{WHERE}: mode {mode} but the config sets approval = {configured}"]
    if configured is None and mode == "required":
        return [f"{WHERE}: mode required but the config leaves approval unset (policy or none)"]
    return []


def _check_person(block: dict) -> list[str]:
    """A person's decision names them (printable, non-blank), its time (ISO 8601) and a plain-text note;
    mode "none" names nobody."""
    if block.get("mode") not in MODES:
        return []  # _check_mode says so
    if block.get("mode") not in PERSON:
        named = [k for k in ("by", "at", "note") if block.get(k) not in (None, "")]
        return [f"{WHERE}: mode {block.get('mode')} (nobody asked) but {k} is given" for k in named]
    findings = []
    if not printable(block.get("by")):
        findings.append(f"{WHERE}: by is not a printable, non-blank name (control or zero-width characters)")
    note = block.get("note")
    if note is None or (note != "" and not printable(note, newlines=True)):
        findings.append(f"{WHERE}: note is not plain text (control or zero-width characters)")
    try:
        _dt.datetime.fromisoformat(str(block.get("at")))
    except ValueError:
        findings.append(f"{WHERE}: at {_show(block.get('at'))} is not an ISO 8601 time")
    return findings


def check_plan_figures(plan: dict, prov: dict, facts: Record) -> list[str]:
    """The approved plan's figures are the release's: the privacy door's plan recomputed from the released
    files (population, radius, max_distance, charges, charge, settings), the provenance's guarantee and
    sealed-table handle."""
    where = f"{WHERE} plan"
    findings = _compare(where, "guarantee", plan.get("guarantee"), prov.get("guarantee"), RECOMPUTED)
    if "table" in prov:
        findings += _compare(where, "table", plan.get("table"), prov.get("table"))
    stretch = _stretch(prov, facts)
    door = door_plan(prov, facts, stretch, _stretch_within(prov, facts, stretch))
    if door is None:
        return findings  # the provenance's own checks report the missing figures
    want: dict[str, Any] = {
        "population": door.population,
        "radius": door.radius,
        "max_distance": door.max_distance,
        "charges": door.charges(),
        "charge": round_up(door.charge.value),
    }
    for key, value in want.items():
        findings += _compare(where, key, plan.get(key), value, RECOMPUTED)
    settings, recomputed = _obj(plan.get("settings")), door.settings.as_params()
    for key in SETTINGS_EXACT:
        if not _agrees(settings.get(key), recomputed.get(key), RECOMPUTED):
            findings.append(
                f"{where}: settings {key} {_show(settings.get(key))} but the release gives {_show(recomputed.get(key))}"
            )
    for key, value in (("protection_radius", door.radius), ("max_distance", door.max_distance)):
        if settings.get(key) is not None:  # unset: eta, which the radius / max_distance figures state
            findings += _compare(where, f"settings {key}", settings.get(key), value, RECOMPUTED)
    return findings


def check_approvals_file(d: Path, manifest: dict) -> list[str]:
    """Findings of the release folder ``d``'s approvals.json (none without the file; module docstring)."""
    from mdp_core.release import approvals_log as log

    where = log.APPROVALS_FILE
    if not (d / where).exists():
        return []
    try:
        record = json.loads((d / where).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [f"{where}: unreadable ({type(exc).__name__})"]
    if not isinstance(record, dict) or record.get("format") != log.FORMAT or record.get("version") != log.VERSION:
        return [f"{where}: not a {log.FORMAT} record of version {log.VERSION}"]
    keys = {"format", "version", "release", "manifest_sha256", "approvals", *log.SIGNATURE_KEYS}
    findings = [f"{where}: key {k} is not an approvals key" for k in sorted(set(record) - keys)]
    findings += [f"{where}: missing key {k}" for k in sorted(keys - set(record))]
    if (problem := log.signature_problem(d, record)) is not None:
        findings.append(f"{where}: {problem}")
    try:
        mine = hashlib.sha256((d / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        mine = None
    if record.get("manifest_sha256") != mine or record.get("release") != d.resolve().name:  # runs/latest: its target
        findings.append(f"{where}: not the approvals of this release (its manifest_sha256 or folder name differs)")
    entries = record.get("approvals")
    if not isinstance(entries, list) or not entries:
        return findings + [f"{where}: approvals is not a non-empty list"]
    plan = _obj(manifest.get("approval")).get("plan_sha256")
    for i, e in enumerate(entries):
        findings += _check_later(f"{where} approvals[{i}]", e, plan)
    times = [str(_obj(e).get("at")) for e in entries]
    if times != sorted(times):
        findings.append(
            f"{where}: approvals are not oldest first by decision time (an entry was moved or its time edited)"
        )
    return findings


def _check_later(where: str, entry: object, plan: object) -> list[str]:
    """One later approval: exactly its keys, a person's decision (:func:`_check_person`) of the manifest's plan."""
    from mdp_core.release.approvals_log import ENTRY_KEYS

    if not isinstance(entry, dict) or set(entry) != set(ENTRY_KEYS):
        return [f"{where}: not an approval with exactly the keys {list(ENTRY_KEYS)}"]
    if entry.get("mode") not in PERSON:
        return [f"{where}: mode {_show(entry.get('mode'))} is not a person's decision"]
    findings = [f.replace(WHERE, where) for f in _check_person(entry)]
    if entry.get("plan_sha256") != plan:
        findings.append(f"{where}: plan_sha256 {_show(entry.get('plan_sha256'))} is not the plan the manifest approved")
    return findings


__all__ = ["ALWAYS_RECORDED", "MODES", "check_approval", "check_approvals_file", "check_plan_figures", "printable"]
