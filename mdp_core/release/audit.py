"""Audit a published release from its files alone; the same check guards publication ("the door").

A release directory (``<store>/runs/<run>/``) holds ``manifest.json``, the released files it lists
under ``released_files`` {relative path: sha256} -- ``mechanism.parquet``, ``solve.json``,
``microdata.parquet``, ``aggregates.parquet``, ``release_provenance.json``, the evaluation files,
``report.md`` -- and the instance the mechanism was certified against (``instance/instance.json`` + its
four Parquet tables). :func:`audit_release` recomputes every privacy and solver claim, with no store and
no Prefect, and reports each disagreement as one line (``file: what is wrong``):

  0. signature (:func:`check_signature`, :mod:`mdp_core.release.signing`): ``signature.json`` + ``public_key.pem``
     beside manifest.json, an Ed25519 signature over its exact bytes (the manifest lists every released
     file's sha256); with a pinned agency key (``public_key``), or inside the agency's store, the key must
     be that one. A missing or bad signature is a finding; the other checks still run;
  1. files: every listed file exists and has its sha256; every file a release must carry is listed;
     nothing but the listed files (and manifest.json) sits in the folder; only files a release
     publishes are listed (:func:`_check_folder`); each is the output its stage recorded in the manifest,
     and every published file a stage recorded is listed (:func:`_check_stages`);
  2. content (:func:`_check_content`, a pure function of the Parquet and instance bytes): the instance
     reads and validates; the mechanism passes :func:`mdp_core.solvers.verify.verify` against it (exact
     tolerance, edge table against the metric); its expected loss sum_i p_i sum_k c_ik z_ik is recomputed; every Parquet file has only allowed columns
     (:data:`COLUMNS`; no name holding ``seed``, ``secret``, ``true_``, ``record_id``); the microdata are
     individuals 0..n-1 each with an output id in 0..K-1 and exactly that output's public coordinates;
     the aggregates are consistent non-negative integer counts (outputs and zones sum to the total);
  3. certificates (:func:`_check_certificates`): every field of the certificate recorded in the manifest
     and in solve.json equals the recomputed one (no missing, no extra field);
  4. solve.json (:func:`_check_solve`): its keys, the mechanism's sha256, N and K, the objective
     (= the recomputed loss, relative 1e-9), upper bound = objective, lower bound <= objective, gap and
     relative gap as :mod:`mdp_core.solvers.solve` defines them, "optimal" only with the gap closed per its own
     gap options; the manifest's ``solve`` summary repeats it;
  5. release_provenance.json (:func:`_check_provenance`): format v3 (v2 still read, with its own keys and
     formulas: releases made before populations). v3: ``population``, ``protection`` (components and
     stretch recomputed from the instance's records, edges and distances with the graph stage's
     :func:`mdp_core.release.protection.graph_protection`: a stated stretch is never trusted; who is
     unprotected, the recomputed stretch vs max_stretch and allow_unprotected, snap distances), the
     guarantee (stretch = the recomputed one, metric eps = eps x stretch, the statement's figures) and the
     ledger (this release = eps x recomputed stretch x protection_radius + additive, 0 <= it <= total <=
     cap, left = cap - total, ledger_seq / head); microdata without ``individual`` and sorted by output_id.
     (A v2 release states no metric factor: its statement is in the graph's distance.) Then its keys, the sha256s of the
     mechanism, instance.json, microdata and aggregates, n_individuals = microdata rows = the total count,
     eps_counts = the aggregates' column, counts_sensitivity = 2 per noisy level = noise_scale *
     eps_counts, eps_prior, the guarantee (eps per unit, additive eps = eps_counts + eps_prior, unit, the
     statement's figures) and the ledger (this release = eps * eta + additive, total >= it, <= the cap);
  6. the manifest's ``privacy`` block (:func:`_check_privacy`): eps, eta, unit = the instance's; every
     other figure = the provenance's; its ``config`` (:func:`_check_config`): the configured eps, eta,
     eps_counts, prior, cap, n and method = the released ones;
  7. evaluation.parquet / utility_vs_eps.parquet (:func:`_check_evaluation`): the released method's row
     states the recomputed loss, certificate, bounds and the instance's eps / eta / sizes;
  8. report.md (:func:`_check_report`): every key of its ``<!-- mdp-release-claims {json} -->`` block
     equals the recomputed / checked value, and the whole text -- the officer's page and the technical
     appendix -- is :func:`mdp_core.release.report.render_report` of those claims, character for character (an
     edited sentence is a finding). Only an unsigned v2 release may carry the old claims-only report;
  9. every key of every published JSON file (:func:`_check_declared_keys`) is declared in
     :mod:`mdp_core.declarations.contract` (:attr:`~mdp_core.declarations.contract.PublishedFile.blocks`: the manifest's
     config section by section, its stages, code and package versions; solve.json's options, repair and
     solver; instance.json's tables and provenance; ...), and no object sits where a value is declared.

  10. the officer's approval (:mod:`mdp_core.release.audit_approval`): the manifest's ``approval`` record is
      there when it must be, its mode is the configured one, who decided is a printable name, and the plan it
      approved hashes to its ``plan_sha256`` and is the release's own plan;
  11. coherence (:mod:`mdp_core.release.audit_coherence`, in steps 2 and 4): every count's intervals are placed
      around one measurement at its noise scale and level, solve.json's repair figures fit the certification,
      and the microdata's output histogram is one the published counts and mechanism make plausible (a
      stated test, false-alarm rate <= 0.1 %).

No finding = the release is what its files say.

The steps live in modules by subject: :mod:`~mdp_core.release.audit_common` (the contract's views, tolerances,
helpers), :mod:`~mdp_core.release.audit_files` (steps 1-2: files and columns),
:mod:`~mdp_core.release.audit_bounds` (steps 3, 4, 7: certificates, bounds, evaluation),
:mod:`~mdp_core.release.audit_provenance` (steps 5-6), :mod:`~mdp_core.release.audit_legacy` (provenance v2
readers); this module keeps the report (step 8), the declared keys (step 9) and the entry points.

Which files a release must carry or may publish, their allowed columns and keys and the stage that wrote
each are declared once, in :mod:`mdp_core.declarations.contract`; :data:`REQUIRED`, :data:`PUBLISHED`,
:data:`COLUMNS`, :data:`NAME_EXCEPTIONS`, the key sets and :func:`_stage_of` are views of it.

The door (:func:`check_publication`) runs every step on every publication: there is no memo of content
"already verified" (a file in the store that says so could be forged next to a planted mechanism). A fully
cached re-run publishes nothing new (``flows.manifest.publish_run``), so it pays for none of this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from mdp_core.declarations import contract
from mdp_core.declarations.budget import additive_epsilon
from mdp_core.errors import MdpError, PrivacyError
from mdp_core.release.audit_approval import check_approval, check_approvals_file
from mdp_core.release.audit_bounds import (
    _check_certificates,
    _check_evaluation,
    _check_manifest_solve,
    _check_solve,
)
from mdp_core.release.audit_common import (
    AGGREGATE_COLUMNS,
    CLAIM_KEYS,
    CLAIM_KEYS_OPTIONAL,
    CLAIM_KEYS_V2,
    CLAIMS_TAG,
    COLUMNS,
    DEFAULT_GAP,
    INSTANCE_DIR,
    PRIOR_SOURCES,
    PROVENANCE,
    PROVENANCE_KEYS,
    PROVENANCE_KEYS_V2,
    PROVENANCE_VERSIONS,
    PUBLISHED,
    RECOMPUTED,
    REPORT_VERSION,
    REQUIRED,
    SIGNATURE_FILES,
    SOLVE_KEYS,
    Record,
    _compare,
    _load_json,
    _obj,
)
from mdp_core.release.audit_files import (
    _check_content,
    _check_folder,
    _check_listed_files,
    _check_stages,
)
from mdp_core.release.audit_provenance import (
    _check_config,
    _check_privacy,
    _check_provenance,
    _version,
)
from mdp_core.runtime.files import file_sha256


def signed_claims(facts: Record, solve: dict, prov: dict) -> Record:
    """The value of every report claim (:data:`CLAIM_KEYS`) from the recomputed and checked records: the
    instance, the certificate and loss recomputed from the Parquet bytes, the counts' facts, solve.json
    (checked by step 4), the provenance (step 5), the released method's evaluation row (step 7) and the manifest's
    approval record (``facts["approval"]``, checked by step 10)."""
    from mdp_core.release.report_approval import approval_claim

    inst, cert = facts["instance"], facts["certificate"]
    micro = facts.get("microdata.parquet") or {}
    agg = facts.get("aggregates.parquet") or {}
    rows = [r for r in facts.get("evaluation.parquet") or [] if r.get("method") == solve.get("method")]
    row = rows[0] if rows else {}
    auto = _obj(_obj(solve.get("extra")).get("auto"))
    return {
        "report_version": REPORT_VERSION,
        "epsilon": inst["epsilon"],
        "eta": inst["eta"],
        "distance_unit": inst["distance_unit"],
        "n_records": inst["n_records"],
        "n_outputs": inst["n_outputs"],
        "n_edges": inst["n_edges"],
        "loss": inst.get("loss"),
        "n_zones": agg.get("n_zones"),
        "n_individuals": micro.get("rows", prov.get("n_individuals")),
        "microdata_source": prov.get("microdata_source"),
        "population": prov.get("population"),
        "counts_epsilon": prov.get("eps_counts"),
        "count_noise_scale": _obj(agg.get("scales")).get("output"),
        "prior_epsilon": prov.get("eps_prior"),
        "prior_source": prov.get("prior_source"),
        "additive_epsilon": additive_epsilon(prov),
        "people_error": prov.get("people_error"),
        "guarantee": prov.get("guarantee"),
        "ledger": prov.get("ledger"),
        "protection": prov.get("protection"),
        "draw_commitment": prov.get("draw_commitment"),
        "method": solve.get("method"),
        "method_run": auto.get("method", solve.get("method")),
        "auto_reason": auto.get("reason"),
        "status": solve.get("status"),
        "objective": facts["objective"],
        "lower_bound": solve.get("lower_bound"),
        "gap": solve.get("gap"),
        "iterations": solve.get("iterations"),
        "seconds": solve.get("seconds"),
        "certificate_passed": cert.get("passed"),
        "certificate_pairs": cert.get("n_pairs"),
        "certificate_violations": cert.get("n_violations"),
        "certificate_ratio_tol": cert.get("ratio_tol"),
        "max_realised_epsilon": cert.get("max_realised_epsilon"),
        "every_pair": cert.get("pairs") == "all",
        "dist_loss_mean": row.get("dist_loss_mean"),
        "adversary_error": row.get("adversary_error"),
        "expected_loss": row.get("expected_loss"),
        "approval": approval_claim(facts.get("approval")),
    }


def _signed_claims_v2(facts: Record, solve: dict, prov: dict) -> Record:
    """The claims of a report written before reports were rendered from their claims (:data:`CLAIM_KEYS_V2`)."""
    full = signed_claims(facts, solve, prov)
    led = _obj(prov.get("ledger"))
    return {k: full[k] for k in CLAIM_KEYS_V2 if k in full} | {"ledger_total_so_far": led.get("total_so_far")}


CLAIMS_BLOCK = re.compile(r"<!--\s*" + re.escape(CLAIMS_TAG) + r"\s+(.*?)\s*-->", re.DOTALL)


def _check_report(d: Path, actual: dict[str, str], facts: Record, solve: dict, prov: dict, signed: bool) -> list[str]:
    """report.md: one claims block, exactly the claim keys, each equal to the recomputed / checked value,
    and the whole text = :func:`mdp_core.release.report.render_report` of those claims (every sentence, the
    officer's page and the appendix). A report of the old form (claims only, :data:`CLAIM_KEYS_V2`) is
    accepted for an unsigned provenance-v2 release (made before reports were rendered from their claims)."""
    if "report.md" not in actual:
        return []
    try:
        text = (d / "report.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [f"report.md: unreadable ({type(exc).__name__})"]
    blocks = CLAIMS_BLOCK.findall(text)
    if not blocks:
        return [f"report.md: no {CLAIMS_TAG} block"] if _version(prov) is not None else []
    if len(blocks) > 1:
        return [f"report.md: {len(blocks)} {CLAIMS_TAG} blocks (one allowed)"]
    try:
        claims = json.loads(blocks[0])
    except json.JSONDecodeError:
        return [f"report.md: the {CLAIMS_TAG} block is not JSON"]
    if not isinstance(claims, dict):
        return [f"report.md: the {CLAIMS_TAG} block is not a JSON object"]
    old_form = "report_version" not in claims
    if old_form and (signed or _version(prov) != 2):
        return [f"report.md: the {CLAIMS_TAG} block has no report_version (the report is not rendered from its claims)"]
    keys, expected = (CLAIM_KEYS_V2, _signed_claims_v2) if old_form else (CLAIM_KEYS, signed_claims)
    want = expected(facts, solve, prov)
    findings = [f"report.md: claim {k} is not a claim the audit checks" for k in sorted(set(claims) - keys)]
    if not old_form:
        findings += [f"report.md: claim {k} is missing" for k in sorted(keys - set(claims) - CLAIM_KEYS_OPTIONAL)]
    for key in sorted(set(claims) & keys):
        findings += _compare("report.md", f"claims {key}", claims[key], want[key], RECOMPUTED)
    if old_form or findings:
        return findings
    return _check_report_text(text, claims, facts, actual)


def _check_report_text(text: str, claims: Record, facts: Record, actual: dict[str, str]) -> list[str]:
    """report.md is, character for character, the report rendered from its (checked) claims."""
    from mdp_core.release.report import render_report

    if facts.get("evaluation_markdown") is None:
        return ["report.md: cannot be regenerated: no readable evaluation.parquet in the release"]
    figures = frozenset(n for n in actual if "/" not in n and n.endswith(".png"))
    try:
        want = render_report(claims, facts["evaluation_markdown"], figures)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [f"report.md: its claims do not render a report ({type(exc).__name__})"]
    if text == want:
        return []
    got_lines, want_lines = text.split("\n"), want.split("\n")
    differ = [i for i in range(max(len(got_lines), len(want_lines))) if _line(got_lines, i) != _line(want_lines, i)]
    return [
        f"report.md: line {differ[0] + 1} is not the text the audit renders from the checked claims "
        f"({len(differ)} line(s) differ; every sentence of the report is regenerated from its claims)"
    ]


def _line(lines: list[str], i: int) -> str | None:
    return lines[i] if i < len(lines) else None


# ----------------------------------------------------------------------------- step 9: every key declared
# Paths of each JSON file whose keys another step checks (its findings name them): not reported twice.
KEYS_CHECKED_ELSEWHERE: dict[str, frozenset[str]] = {
    "manifest.json": frozenset({"privacy", "privacy.certificate", "privacy.guarantee", "privacy.ledger"})
    | {"privacy.protection", "solve"},
    "solve.json": frozenset({"", "certificate"}),
    PROVENANCE: frozenset({"", "guarantee", "ledger", "protection"}),
    SIGNATURE_FILES[0]: frozenset({""}),
}


def _holds_object(value: object) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(_holds_object(v) for v in value))


def _undeclared(
    where: str, value: dict, blocks: dict[str, frozenset[str]], free: frozenset[str], checked: frozenset[str], path: str
) -> Iterator[str]:
    """Every key of the JSON object ``value`` (the object at dotted ``path`` of the file ``where``) that its
    declared block does not allow, and every object where the block declares a value
    (:attr:`mdp_core.declarations.contract.PublishedFile.blocks`; ``free``: objects whose keys are not enumerated;
    ``checked``: paths whose keys and values another step checks)."""
    allowed = blocks.get(path, frozenset())
    for key, item in value.items():
        here = f"{path}.{key}" if path else str(key)
        if contract.ANY_KEY in allowed:
            child = f"{path}.{contract.ANY_KEY}" if path else contract.ANY_KEY
        elif key in allowed:
            child = here
        else:
            if path not in checked:
                yield f"{where}: key {here} is not declared in the release contract"
            continue
        if isinstance(item, list) and f"{child}[]" in blocks:
            for n, element in enumerate(item):
                if isinstance(element, dict):
                    yield from _undeclared(where, element, blocks, free, checked, f"{child}[]")
                else:
                    yield f"{where}: {here}[{n}] is not an object"
            continue
        if child in blocks or child in free:
            if isinstance(item, dict) and child in blocks:
                yield from _undeclared(where, item, blocks, free, checked, child)
            elif not isinstance(item, dict) and item is not None:
                yield f"{where}: {here} is not an object"
        elif path not in checked and _holds_object(item):
            yield f"{where}: {here} holds an object where the release contract declares a value"


def _check_declared_keys(d: Path, manifest: dict) -> list[str]:
    """Every key of every published JSON file is declared in :mod:`mdp_core.declarations.contract` (the manifest's
    config, stages, code and package versions, solve.json's options, repair and solver, instance.json's
    tables and provenance, ...) or is a finding."""
    kind = _obj(_obj(manifest.get("config")).get("dataset")).get("kind")
    findings: list[str] = []
    if "config" in manifest and kind not in contract.DATASET_PARAMETER_KEYS:
        findings.append(f"manifest.json: config dataset.kind {kind} is not a declared dataset kind")
    for f in contract.PUBLISHED:
        if not f.blocks or not (d / f.path).is_file():
            continue
        value = manifest if f.path == "manifest.json" else _load_json(d / f.path)[0]
        if value is not None:  # unreadable: the step that reads it says so
            blocks = contract.json_blocks(f.path, kind)
            checked = KEYS_CHECKED_ELSEWHERE.get(f.path, frozenset())
            findings += _undeclared(f.path, value, blocks, f.free, checked, "")
    return findings


def _check_claims(d: Path, manifest: dict, actual: dict[str, str], facts: Record, signed: bool) -> list[str]:
    """Steps 3-8 (JSON and text only: they run on every publication, memo or not)."""
    solve, err = _load_json(d / "solve.json")
    prov, err2 = _load_json(d / PROVENANCE)
    findings = [e for e in (err, err2) if e]
    solve, prov = solve or {}, prov or {}
    inst = facts["instance"]
    findings += _check_certificates(manifest, solve, facts)
    findings += _check_solve(solve, actual, facts)
    findings += _check_manifest_solve(manifest, solve)
    findings += _check_provenance(prov, actual, facts)
    findings += _check_privacy(manifest, prov, inst)
    findings += _check_config(manifest, prov, solve, inst)
    findings += _check_evaluation(facts, solve, prov)
    findings += _check_report(d, actual, facts | {"approval": manifest.get("approval")}, solve, prov, signed)
    findings += check_approval(manifest, prov, facts) + check_approvals_file(d, manifest)
    return findings + _check_declared_keys(d, manifest)


# ----------------------------------------------------------------------------- entry points
def check_signature(run_dir: str | Path, public_key: str | bytes | None = None) -> tuple[str | None, list[str]]:
    """Step 0: the release's Ed25519 signature over manifest.json (:mod:`mdp_core.release.signing`). ``public_key``
    pins the agency key (PEM bytes or its 64-hex fingerprint); without one, a release folder inside a store
    whose private part holds the signing key is compared with that key, or with one of the store's retired
    keys (a release signed before ``mdp-release key rotate``). Returns (the signer's fingerprint
    or None, findings)."""
    from mdp_core.release import signing

    pin: str | bytes | None = public_key
    if pin is None:
        store = signing.store_of(run_dir)
        if store is not None:
            try:
                pin = signing.agency_fingerprint(store)
                signer = signing.verify_release(run_dir, None).fingerprint
                if signer is not None and signer in signing.retired_fingerprints(store):
                    pin = signer  # signed by this store before a key rotation (its retired key, kept privately)
            except MdpError:
                pin = None
    check = signing.verify_release(run_dir, pin)
    return check.fingerprint, list(check.findings)


def audit_release(run_dir: str | Path, public_key: str | bytes | None = None) -> list[str]:
    """All discrepancies of the release in ``run_dir`` (empty list = it checks out). Never raises for
    a bad release: each problem is a one-line finding (``file: what is wrong``). The signature is checked
    first (:func:`check_signature`, ``public_key`` = the pinned agency key); a missing or invalid one is a
    finding and the other checks still run."""
    d = Path(run_dir)
    if not d.is_dir():
        return [f"{d}: no such release directory"]
    _, signature_findings = check_signature(d, public_key)
    signed = (d / SIGNATURE_FILES[0]).is_file()
    manifest, err = _load_json(d / "manifest.json")
    if manifest is None:
        return signature_findings + [err or "manifest.json: unreadable"]
    listed = manifest.get("released_files")
    if manifest.get("format") != "mdp-release-manifest" or not isinstance(listed, dict):
        return signature_findings + ["manifest.json: not an mdp-release manifest with released_files"]
    actual, findings = _check_listed_files(d, listed)
    findings += _check_folder(d, listed)
    if any(n not in actual for n in ("mechanism.parquet", f"{INSTANCE_DIR}/instance.json")):
        return signature_findings + findings

    findings += _check_stages(manifest, actual)
    facts, content_findings = _check_content(d, actual)
    if facts is None:
        return signature_findings + findings + content_findings
    claims = _check_claims(d, manifest, actual, facts, signed)
    return signature_findings + findings + claims + content_findings


def check_publication(staged_dir: str | Path, public_key: str | bytes | None = None) -> None:
    """The door: raise :class:`PrivacyError` (one line) unless the staged (and signed) release audits clean
    (``public_key``: the key it must be signed with, e.g. the fingerprint of the key that just signed it)."""
    findings = audit_release(staged_dir, public_key)
    if findings:
        more = f" (and {len(findings) - 1} more finding(s))" if len(findings) > 1 else ""
        raise PrivacyError(f"release refused: {findings[0]}{more}")


def provenance(mechanism: Path, instance_json: Path, microdata: Path, aggregates: Path, **extra: object) -> dict:
    """The record the measure stage writes next to its outputs (``release_provenance.json``)."""
    return {
        "mechanism_sha256": file_sha256(mechanism),
        "instance_json_sha256": file_sha256(instance_json),
        "microdata_sha256": file_sha256(microdata),
        "aggregates_sha256": file_sha256(aggregates),
    } | extra


__all__ = [
    "audit_release",
    "check_publication",
    "provenance",
    "signed_claims",
    "check_signature",
    "INSTANCE_DIR",
    "PROVENANCE",
    "CLAIM_KEYS",
    "CLAIMS_BLOCK",
    # the release contract's views (defined in mdp_core.release.audit_common), read here as audit.NAME
    "AGGREGATE_COLUMNS",
    "COLUMNS",
    "DEFAULT_GAP",
    "PRIOR_SOURCES",
    "PROVENANCE_KEYS",
    "PROVENANCE_KEYS_V2",
    "PROVENANCE_VERSIONS",
    "PUBLISHED",
    "REQUIRED",
    "SIGNATURE_FILES",
    "SOLVE_KEYS",
]
