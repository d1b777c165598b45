"""A later approval of a published release's unchanged plan (issue 52): ``runs/<release>/approvals.json``.

A re-run whose released content is that of a release already published publishes nothing new (one release, one
folder: ``flows.manifest.publish_run``), so a second approval of the same plan -- a ``required`` release run again,
a policy envelope approved again -- changed no published byte. It is appended to the release folder's
``approvals.json`` (an entry is never rewritten or removed; entries are kept oldest first by decision time, so
one decided earlier but published later is inserted in its place, under the folder's lock; 0644):

    {"format": "mdp-release-approvals", "version": 1, "release": <folder name>,
     "manifest_sha256": sha256 of the folder's manifest.json (the release the approvals are of),
     "approvals": [{"mode", "by", "at", "note", "plan_sha256", "flow_run_id"}, ...],   # oldest first
     "key_fingerprint": the signing key's, "signature": base64 Ed25519 over the canonical JSON of the rest}

signed with the store's key, the one that signed the manifest (``public_key.pem`` beside it), over the canonical
JSON (sorted keys, no whitespace) of every key but the two signature fields. Only a person's decision (mode
``required`` or ``policy``) of the plan the manifest approved (the same ``plan_sha256``) is recorded, once per
decision (a decision's ``by`` and ``at`` already in the manifest or the file is not appended again: a policy run
inside the envelope the manifest's approval recorded adds nothing). :func:`mdp_core.release.audit_approval.
check_approvals_file` checks the file. Everything in it is public: names and notes a person typed to be published. One writer at a time:
an append holds an exclusive ``flock`` of the release folder itself (:func:`mdp_core.runtime.files.exclusive_lock`
with ``folder=True``: no lock file beside the published ones), so two runs approved at once both land, neither
overwrites the other's, each in its place by decision time (``at``: a run decided first may publish second).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from mdp_core.errors import PrivacyError
from mdp_core.runtime.files import atomic_write, exclusive_lock

APPROVALS_FILE = "approvals.json"
FORMAT = "mdp-release-approvals"
VERSION = 1
ENTRY_KEYS = ("mode", "by", "at", "note", "plan_sha256", "flow_run_id")
SIGNATURE_KEYS = ("key_fingerprint", "signature")
PERSON = ("required", "policy")


def canonical(record: dict[str, Any]) -> bytes:
    """The bytes signed: the canonical JSON of ``record`` without :data:`SIGNATURE_KEYS`."""
    body = {k: v for k, v in record.items() if k not in SIGNATURE_KEYS}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _decided(entry: dict[str, Any]) -> tuple[Any, Any]:
    return entry.get("by"), entry.get("at")


def append_approval(folder: str | Path, approval: dict[str, Any], flow_run_id: str, key: Any) -> bool:
    """Append ``approval`` (this run's record, :mod:`flows.approval`) to the release ``folder``'s approvals.json,
    signed with ``key`` (the store's Ed25519 private key), when it is a person's decision of the plan the folder's
    manifest approved and not recorded yet; returns whether it was appended. PrivacyError when the existing file
    is not this release's or its signature does not verify (nothing is written)."""
    d = Path(folder)
    data = (d / "manifest.json").read_bytes()
    manifest = json.loads(data)
    first = manifest.get("approval") if isinstance(manifest.get("approval"), dict) else {}
    if approval.get("mode") not in PERSON or approval.get("plan_sha256") != first.get("plan_sha256"):
        return False
    with exclusive_lock(d, folder=True):  # read, verify, append and write as one: a concurrent append waits
        return _append(d, data, first, approval, flow_run_id, key)


def _append(d: Path, data: bytes, first: dict[str, Any], approval: dict[str, Any], flow_run_id: str, key: Any) -> bool:
    """:func:`append_approval`'s read-modify-write, under the folder's lock (``data``: the manifest's bytes,
    ``first``: its approval)."""
    from mdp_core.release import signing

    record = read_approvals(d) or {
        "format": FORMAT,
        "version": VERSION,
        "release": d.name,
        "manifest_sha256": hashlib.sha256(data).hexdigest(),
        "approvals": [],
    }
    if record.get("manifest_sha256") != hashlib.sha256(data).hexdigest():
        raise PrivacyError(f"{d / APPROVALS_FILE}: not the approvals of this release (another manifest's)")
    if record["approvals"]:
        _verify(d, record)
    seen = {_decided(first), *(_decided(e) for e in record["approvals"])}
    if _decided(approval) in seen:
        return False
    entry = {k: approval.get(k) for k in ENTRY_KEYS[:-1]} | {"flow_run_id": str(flow_run_id)}
    record = {k: v for k, v in record.items() if k not in SIGNATURE_KEYS}
    # oldest first (what the audit checks), by decision time: two runs decided at once may publish in either order
    record["approvals"] = sorted([*record["approvals"], entry], key=lambda e: str(e.get("at")))
    record["key_fingerprint"] = signing.fingerprint(key.public_key())
    record["signature"] = base64.b64encode(key.sign(canonical(record))).decode("ascii")
    text = json.dumps(record, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    atomic_write(d / APPROVALS_FILE, lambda p: p.write_text(text, encoding="utf-8"))
    os.chmod(d / APPROVALS_FILE, 0o644)  # published, as the folder's other files
    return True


def read_approvals(folder: str | Path) -> dict[str, Any] | None:
    """The release folder's approvals.json (None: none). PrivacyError when it is not an approvals record."""
    path = Path(folder) / APPROVALS_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PrivacyError(f"{path}: unreadable ({type(exc).__name__})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("approvals"), list):
        raise PrivacyError(f"{path}: not an approvals record ({FORMAT})")
    return record


def signature_problem(folder: Path, record: dict[str, Any]) -> str | None:
    """Why ``record``'s signature does not verify with the folder's ``public_key.pem`` (None: it does)."""
    from cryptography.exceptions import InvalidSignature

    from mdp_core.errors import InputError
    from mdp_core.release import signing

    try:
        pub = signing.load_public_key((folder / signing.PUBLIC_KEY).read_bytes())
    except (OSError, InputError):
        return f"{signing.PUBLIC_KEY}: missing or unreadable"
    if record.get("key_fingerprint") != signing.fingerprint(pub):
        return f"key_fingerprint is not the fingerprint of {signing.PUBLIC_KEY} (the key that signed the manifest)"
    try:
        pub.verify(base64.b64decode(str(record.get("signature", "")), validate=True), canonical(record))
    except (InvalidSignature, ValueError, TypeError):
        return f"the signature does not verify with {signing.PUBLIC_KEY} (edited after signing)"
    return None


def _verify(folder: Path, record: dict[str, Any]) -> None:
    problem = signature_problem(folder, record)
    if problem is not None:
        raise PrivacyError(f"{folder / APPROVALS_FILE}: {problem}; nothing appended")


__all__ = ["APPROVALS_FILE", "append_approval", "canonical", "read_approvals", "signature_problem"]
