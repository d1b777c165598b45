"""Audit a published release from its files alone; the same check guards publication ("the door").

A release directory (``<store>/runs/<run>/``) holds ``manifest.json``, the released files it lists
under ``released_files`` {relative path: sha256} -- ``mechanism.parquet``, ``solve.json``,
``microdata.parquet``, ``aggregates.parquet``, ``release_provenance.json``, the evaluation files --
and the instance the mechanism was certified against (``instance/instance.json`` + its four Parquet
tables, listed the same way). :func:`audit_release` re-checks, with no store and no Prefect:

  1. every listed file exists and has its sha256 (so nothing was replaced after publication);
  2. the instance reads and validates (its tables against the hashes in its instance.json) and is the
     export the pipeline solved (instance.json hash = the export stage's, when the manifest lists it);
  3. the mechanism passes :func:`mdp_core.verify.verify` against that instance -- the exact tolerance
     and, when records carry coordinates, the edge table against the metric (KD-tree);
  4. the certificate recorded in the manifest and in solve.json is that of these bytes (verdict,
     pairs, violations, realised eps) and solve.json names the mechanism's sha256;
  5. microdata and aggregates come from this mechanism: ``release_provenance.json`` (written by the
     postprocess stage) names its sha256 and theirs; microdata output ids lie in 0..K-1.

Every discrepancy is one line; no finding = the release is what the manifest says.

The door (:func:`check_publication`) may pass a :class:`VerifiedMemo`: steps 2, 3 and the microdata
range of step 5 read the instance, the mechanism and the microdata and verify them -- a pure function of
those files' bytes and of the checking code. The memo keeps the certificate of content that checked out,
keyed by the sha256 of exactly those bytes (just recomputed, step 1) and the checking code's version, so
publishing the same bytes again (a fully cached re-run) reuses it instead of re-reading and re-verifying
them. Step 1, the comparison of the recorded certificate with the memo's (step 4) and the provenance
checks (step 5) run every time. ``mdp-release audit`` uses no memo.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdp_core.errors import MdpError, PrivacyError
from mdp_core.files import file_sha256, write_json

# Steps 2-5 import numpy, pandas and pyarrow (mdp_core.io, mdp_core.verify) when they run, not here: a
# publication whose content a VerifiedMemo already holds needs none of them.

INSTANCE_DIR = "instance"
PROVENANCE = "release_provenance.json"
REQUIRED = (
    "mechanism.parquet",
    "solve.json",
    "microdata.parquet",
    "aggregates.parquet",
    PROVENANCE,
    f"{INSTANCE_DIR}/instance.json",
)


def _load_json(path: Path) -> tuple[dict | None, str | None]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path.name}: missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path.name}: unreadable JSON ({type(exc).__name__})"
    if not isinstance(value, dict):
        return None, f"{path.name}: not a JSON object"
    return value, None


def _same_number(a: object, b: object, rel: float = 1e-12) -> bool:
    """Recorded vs recomputed certificate numbers ("inf" strings allowed)."""
    try:
        x, y = float(a), float(b)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return x == y or (math.isfinite(x) and math.isfinite(y) and abs(x - y) <= rel * max(abs(x), abs(y)))


def _check_listed_files(d: Path, listed: dict) -> tuple[dict[str, str], list[str]]:
    """Hash every file the manifest lists: ({relative path: actual sha256 hex}, findings)."""
    findings: list[str] = []
    actual: dict[str, str] = {}
    for name, digest in sorted(listed.items()):
        p = d / name
        if not p.is_file():
            findings.append(f"{name}: listed in the manifest but missing")
            continue
        actual[name] = file_sha256(p)
        if actual[name] != digest:
            findings.append(f"{name}: sha256 {actual[name][:12]}.. differs from the manifest's {str(digest)[:12]}..")
    for name in REQUIRED:
        if name not in listed:
            findings.append(f"{name}: not listed in the manifest (a release must carry it)")
    return actual, findings


def _check_certificate(manifest: dict, checked: dict[str, Any]) -> list[str]:
    """The manifest's recorded certificate and mechanism epsilon (per distance unit) vs the recomputed ones
    (``checked``: :func:`_check_content`'s record: ``certificate`` as ``Certificate.as_dict()``, ``summary``,
    ``instance_epsilon``)."""
    findings: list[str] = []
    cert = checked["certificate"]
    if cert.get("passed") is not True:
        findings.append(f"mechanism.parquet: fails verification against the instance: {checked['summary']}")
    privacy = manifest.get("privacy") or {}
    recorded = privacy.get("certificate") or {}
    if recorded.get("passed") is not True:
        findings.append("manifest.json: the recorded certificate does not say passed")
    for key in ("n_pairs", "n_violations", "n_infinite", "n_negative"):
        if key in recorded and recorded[key] != cert.get(key):
            findings.append(
                f"manifest.json: certificate {key}={recorded[key]} but the released files give {cert.get(key)}"
            )
    realised = cert.get("max_realised_epsilon")
    if "max_realised_epsilon" in recorded and not _same_number(recorded["max_realised_epsilon"], realised):
        shown = f"{realised:.12g}" if isinstance(realised, float) else realised
        findings.append(
            f"manifest.json: certificate realised eps {recorded['max_realised_epsilon']} but the released mechanism "
            f"gives {shown}"
        )
    eps = checked["instance_epsilon"]
    if "mechanism_epsilon" in privacy and not _same_number(privacy["mechanism_epsilon"], eps):
        findings.append(f"manifest.json: mechanism_epsilon {privacy['mechanism_epsilon']} != instance epsilon {eps:g}")
    return findings


def _check_solve_and_provenance(d: Path, actual: dict[str, str]) -> list[str]:
    """solve.json and release_provenance.json name the sha256 of the released files ({path: sha256 hex})."""
    findings: list[str] = []
    solve_info, err = _load_json(d / "solve.json")
    if solve_info is None:
        findings.append(err or "solve.json: unreadable")
    elif solve_info.get("mechanism_sha256") != actual["mechanism.parquet"]:
        findings.append("solve.json: mechanism_sha256 is not the released mechanism.parquet")
    prov, err = _load_json(d / PROVENANCE)
    if prov is None:
        findings.append(err or f"{PROVENANCE}: unreadable")
        return findings
    if prov.get("mechanism_sha256") != actual["mechanism.parquet"]:
        findings.append(f"{PROVENANCE}: microdata and aggregates were drawn from another mechanism (sha256 differs)")
    if prov.get("instance_json_sha256") != actual[f"{INSTANCE_DIR}/instance.json"]:
        findings.append(f"{PROVENANCE}: microdata and aggregates were drawn for another instance (sha256 differs)")
    for name in ("microdata.parquet", "aggregates.parquet"):
        want = prov.get(f"{name.split('.')[0]}_sha256")
        if name in actual and want != actual[name]:
            findings.append(f"{name}: sha256 differs from the one {PROVENANCE} records")
    return findings


def _check_microdata(path: Path, n_outputs: int) -> list[str]:
    """Every microdata ``output_id`` lies in 0..K-1 (K = ``n_outputs``)."""
    from mdp_core.io import read_table

    try:
        out = read_table(path, required={"output_id": "int64"})["output_id"].to_numpy()
        if out.size and (out.min() < 0 or out.max() >= n_outputs):
            return [f"microdata.parquet: output_id outside 0..{n_outputs - 1}"]
    except MdpError as exc:
        return [_first_line(exc)]
    return []


# The files steps 2, 3 and 5 (microdata range) read: their sha256s key a VerifiedMemo record.
CONTENT_FILES = ("mechanism.parquet", "microdata.parquet")


@dataclass(frozen=True)
class VerifiedMemo:
    """Records of released content that checked out (module docstring): ``folder/<key>.json``, ``key`` =
    sha256 of the content files' sha256s (:data:`CONTENT_FILES` and ``instance/*``) and ``salt`` (the
    version of the checking code: the caller's, e.g. the sha256 of this module and what it imports)."""

    folder: Path
    salt: str

    def key(self, actual: dict[str, str]) -> str:
        content = {n: h for n, h in actual.items() if n in CONTENT_FILES or n.startswith(f"{INSTANCE_DIR}/")}
        text = json.dumps({"salt": self.salt, "files": content}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, actual: dict[str, str]) -> dict[str, Any] | None:
        record, _ = _load_json(Path(self.folder) / f"{self.key(actual)}.json")
        if record is None or not isinstance(record.get("certificate"), dict) or "instance_epsilon" not in record:
            return None
        return record

    def put(self, actual: dict[str, str], record: dict[str, Any]) -> None:
        try:
            write_json(Path(self.folder) / f"{self.key(actual)}.json", record)
        except OSError:
            pass  # a memo only saves time: a failed write costs a re-verification next time


def _check_content(d: Path, actual: dict[str, str]) -> tuple[dict[str, Any] | None, list[str]]:
    """Steps 2, 3 and the microdata range: read and validate the instance, verify the mechanism against it.
    Returns ({certificate (as_dict), summary, instance_epsilon} or None when nothing could be read, findings)."""
    from mdp_core.io import read_instance, read_mechanism
    from mdp_core.verify import verify

    try:
        inst = read_instance(d / INSTANCE_DIR)
        z = read_mechanism(d / "mechanism.parquet", inst.n_records, inst.n_outputs)
        cert = verify(inst, z)
    except MdpError as exc:
        return None, [_first_line(exc)]
    checked = {"certificate": cert.as_dict(), "summary": cert.summary(), "instance_epsilon": inst.epsilon}
    findings = _check_microdata(d / "microdata.parquet", inst.n_outputs) if "microdata.parquet" in actual else []
    return checked, findings


def audit_release(run_dir: str | Path, memo: VerifiedMemo | None = None) -> list[str]:
    """All discrepancies of the release in ``run_dir`` (empty list = it checks out). Never raises for
    a bad release: each problem is a one-line finding (``file: what is wrong``). ``memo``: reuse and
    record the content checks of bytes already verified (module docstring; the door's, not an auditor's)."""
    d = Path(run_dir)
    if not d.is_dir():
        return [f"{d}: no such release directory"]
    manifest, err = _load_json(d / "manifest.json")
    if manifest is None:
        return [err or "manifest.json: unreadable"]
    listed = manifest.get("released_files")
    if manifest.get("format") != "mdp-release-manifest" or not isinstance(listed, dict):
        return ["manifest.json: not an mdp-release manifest with released_files"]
    actual, findings = _check_listed_files(d, listed)
    if any(n not in actual for n in ("mechanism.parquet", f"{INSTANCE_DIR}/instance.json")):
        return findings

    export_files = (manifest.get("stages") or {}).get("export", {}).get("files") or {}
    if "instance.json" in export_files and export_files["instance.json"] != actual[f"{INSTANCE_DIR}/instance.json"]:
        findings.append(f"{INSTANCE_DIR}/instance.json: not the instance the pipeline exported (sha256 differs)")
    checked = memo.get(actual) if memo is not None and not findings else None
    content_findings: list[str] = []
    if checked is None:
        checked, content_findings = _check_content(d, actual)
        if checked is None:
            return findings + content_findings
        if memo is not None and not findings and not content_findings and checked["certificate"].get("passed"):
            memo.put(actual, checked)
    findings += _check_certificate(manifest, checked)
    findings += _check_solve_and_provenance(d, actual)
    return findings + content_findings


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_publication(staged_dir: str | Path, memo: VerifiedMemo | None = None) -> None:
    """The door: raise :class:`PrivacyError` (one line) unless the staged release audits clean."""
    findings = audit_release(staged_dir, memo)
    if findings:
        more = f" (and {len(findings) - 1} more finding(s))" if len(findings) > 1 else ""
        raise PrivacyError(f"release refused: {findings[0]}{more}")


def provenance(mechanism: Path, instance_json: Path, microdata: Path, aggregates: Path, **extra: object) -> dict:
    """The record the postprocess stage writes next to its outputs (``release_provenance.json``)."""
    return {
        "mechanism_sha256": file_sha256(mechanism),
        "instance_json_sha256": file_sha256(instance_json),
        "microdata_sha256": file_sha256(microdata),
        "aggregates_sha256": file_sha256(aggregates),
    } | extra


__all__ = ["audit_release", "check_publication", "provenance", "VerifiedMemo", "INSTANCE_DIR", "PROVENANCE"]
