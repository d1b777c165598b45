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
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from mdp_core.errors import MdpError, PrivacyError
from mdp_core.instance import Instance
from mdp_core.io import file_sha256, read_instance, read_mechanism, read_table
from mdp_core.verify import Certificate, verify

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


def _check_certificate(manifest: dict, cert: Certificate, inst: Instance) -> list[str]:
    """The manifest's recorded certificate and mechanism epsilon (per distance unit) vs the recomputed ones."""
    findings: list[str] = []
    if not cert.passed:
        findings.append(f"mechanism.parquet: fails verification against the instance: {cert.summary()}")
    privacy = manifest.get("privacy") or {}
    recorded = privacy.get("certificate") or {}
    if recorded.get("passed") is not True:
        findings.append("manifest.json: the recorded certificate does not say passed")
    for key in ("n_pairs", "n_violations", "n_infinite", "n_negative"):
        if key in recorded and recorded[key] != getattr(cert, key):
            findings.append(
                f"manifest.json: certificate {key}={recorded[key]} but the released files give {getattr(cert, key)}"
            )
    if "max_realised_epsilon" in recorded and not _same_number(
        recorded["max_realised_epsilon"], cert.max_realised_epsilon
    ):
        findings.append(
            f"manifest.json: certificate realised eps {recorded['max_realised_epsilon']} but the released mechanism "
            f"gives {cert.max_realised_epsilon:.12g}"
        )
    if "mechanism_epsilon" in privacy and not _same_number(privacy["mechanism_epsilon"], inst.epsilon):
        findings.append(
            f"manifest.json: mechanism_epsilon {privacy['mechanism_epsilon']} != instance epsilon {inst.epsilon:g}"
        )
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
    try:
        out = read_table(path, required={"output_id": "int64"})["output_id"].to_numpy()
        if out.size and (out.min() < 0 or out.max() >= n_outputs):
            return [f"microdata.parquet: output_id outside 0..{n_outputs - 1}"]
    except MdpError as exc:
        return [_first_line(exc)]
    return []


def audit_release(run_dir: str | Path) -> list[str]:
    """All discrepancies of the release in ``run_dir`` (empty list = it checks out). Never raises for
    a bad release: each problem is a one-line finding (``file: what is wrong``)."""
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
    try:
        inst = read_instance(d / INSTANCE_DIR)
        z = read_mechanism(d / "mechanism.parquet", inst.n_records, inst.n_outputs)
        cert = verify(inst, z)
    except MdpError as exc:
        return findings + [f"{_first_line(exc)}"]
    findings += _check_certificate(manifest, cert, inst)
    findings += _check_solve_and_provenance(d, actual)
    if "microdata.parquet" in actual:
        findings += _check_microdata(d / "microdata.parquet", inst.n_outputs)
    return findings


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_publication(staged_dir: str | Path) -> None:
    """The door: raise :class:`PrivacyError` (one line) unless the staged release audits clean."""
    findings = audit_release(staged_dir)
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


__all__ = ["audit_release", "check_publication", "provenance", "INSTANCE_DIR", "PROVENANCE"]
