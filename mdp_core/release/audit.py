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

No finding = the release is what its files say.

Which files a release must carry or may publish, their allowed columns and keys and the stage that wrote
each are declared once, in :mod:`mdp_core.declarations.contract`; :data:`REQUIRED`, :data:`PUBLISHED`,
:data:`COLUMNS`, :data:`NAME_EXCEPTIONS`, the key sets and :func:`_stage_of` are views of it.

The door (:func:`check_publication`) runs every step on every publication: there is no memo of content
"already verified" (a file in the store that says so could be forged next to a planted mechanism). A fully
cached re-run publishes nothing new (``flows.manifest.publish_run``), so it pays for none of this.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from mdp_core.declarations import contract
from mdp_core.declarations.budget import additive_epsilon, stated_metric, this_release
from mdp_core.declarations.methods import GapOptions
from mdp_core.errors import MdpError, PrivacyError
from mdp_core.runtime.files import file_sha256
from mdp_core.solvers.result import BOUND_TOLERANCE, gap_closed

# Step 2 imports numpy, pandas and pyarrow (mdp_core.problem.io, mdp_core.solvers.verify) when it runs, not at import.

# The release contract (mdp_core.declarations.contract) declares every published file once; these are its views.
INSTANCE_DIR = contract.INSTANCE_DIR
PROVENANCE = contract.PROVENANCE
PROVENANCE_FORMAT = contract.PROVENANCE_FORMAT
PROVENANCE_VERSION = contract.PROVENANCE_VERSION
PROVENANCE_VERSIONS = contract.PROVENANCE_VERSIONS
CLAIMS_TAG = "mdp-release-claims"  # = mdp_core.release.report.CLAIMS_TAG (not imported: it pulls in pandas)
INSTANCE_TABLES = contract.INSTANCE_TABLES
_LISTED = tuple(f for f in contract.PUBLISHED if f.listed)
REQUIRED = tuple(f.path for f in _LISTED if f.required)  # every release lists them
# Beside manifest.json, not listed in it (they sign it): mdp_core.release.signing.SIGNATURE / PUBLIC_KEY.
SIGNATURE_FILES = contract.SIGNATURE_FILES
# Everything a release may list (besides the top-level *.png figures): tasks.publish.released_files.
PUBLISHED = frozenset(f.path for f in _LISTED if "*" not in f.path)

# ----------------------------------------------------------------------------- allow-lists
COORDINATE = contract.COORDINATE
_PARQUET = tuple(f for f in _LISTED if f.columns is not None)
WITH_COORDINATES = frozenset(f.path for f in _PARQUET if f.coordinates)
AGGREGATE_COLUMNS = contract.published("aggregates.parquet").column_names
COLUMNS: dict[str, frozenset[str]] = {f.path: frozenset(f.column_names) for f in _PARQUET}
FORBIDDEN = contract.FORBIDDEN  # in any published column or provenance key
# Allowed names holding a FORBIDDEN fragment: the public record ids of the instance and each released output's
# record.
NAME_EXCEPTIONS: dict[str, frozenset[str]] = {f.path: f.name_exceptions for f in _PARQUET if f.name_exceptions}
ORDERED = frozenset(f.path for f in _PARQUET if f.ordered)  # exactly the declared columns, in order
SOLVE_KEYS = contract.SOLVE_KEYS
MANIFEST_SOLVE_KEYS = contract.MANIFEST_SOLVE_KEYS
GUARANTEE_KEYS_V2 = contract.GUARANTEE_KEYS_V2
GUARANTEE_KEYS = contract.GUARANTEE_KEYS
LEDGER_KEYS_V2 = contract.LEDGER_KEYS_V2
LEDGER_KEYS = contract.LEDGER_KEYS
PROTECTION_KEYS = contract.PROTECTION_KEYS
PROVENANCE_KEYS_V2 = contract.PROVENANCE_KEYS_V2
PROVENANCE_KEYS = contract.PROVENANCE_KEYS
POPULATION = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
PRIVACY_KEYS = contract.PRIVACY_KEYS
PRIVACY_KEYS_V3_OPTIONAL = contract.PRIVACY_KEYS_V3_OPTIONAL  # allowed (repeating the provenance) in v3
# privacy-block key -> the provenance key it repeats
PRIVACY_FROM_PROVENANCE = {
    "counts_epsilon": "eps_counts",
    "prior_epsilon": "eps_prior",
    "prior_source": "prior_source",
    "microdata_source": "microdata_source",
    "n_individuals": "n_individuals",
    "draw_commitment": "draw_commitment",
    "guarantee": "guarantee",
    "ledger": "ledger",
    "population": "population",
    "protection": "protection",
}
# The claims block of a report written before reports were rendered from their claims (provenance v2).
CLAIM_KEYS_V2 = frozenset(
    "epsilon eta distance_unit counts_epsilon prior_epsilon additive_epsilon ledger_total_so_far n_individuals "
    "method objective lower_bound gap max_realised_epsilon certificate_passed".split()
)
REPORT_VERSION = 3  # = mdp_core.release.report.REPORT_VERSION: claims from which the whole report.md is rendered
CLAIM_KEYS = frozenset(
    "report_version epsilon eta distance_unit n_records n_outputs n_edges n_zones n_individuals microdata_source "
    "population counts_epsilon count_noise_scale prior_epsilon prior_source additive_epsilon guarantee ledger "
    "protection draw_commitment method method_run auto_reason status objective lower_bound gap iterations seconds "
    "certificate_passed certificate_pairs certificate_violations certificate_ratio_tol max_realised_epsilon "
    "dist_loss_mean adversary_error expected_loss loss".split()
)
# Claims a v3 report written before them does not have (the audit accepts their absence; present, each is
# checked): ``loss``, the instance's loss (issue 40).
CLAIM_KEYS_OPTIONAL = frozenset({"loss"})
PRIOR_SOURCES = frozenset(contract.PRIOR_SOURCES)
MICRODATA_SOURCES = contract.MICRODATA_SOURCES
DEFAULT_GAP = (GapOptions.gap_abs, GapOptions.gap_rel)  # the declared gap, when solve.json records none
EXACT = 1e-12  # relative: the same number written twice (a copy, or the same computation on the same bytes)
RECOMPUTED = 1e-9  # relative: a figure recomputed from the released files (sums in another order)
TINY = 1e-14  # absolute floor for certificate evidence near 0 (max_abs_violation, max_row_sum_error)

Record = dict[str, Any]


# ----------------------------------------------------------------------------- small helpers
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


def _obj(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _num(value: object) -> float | None:
    """``value`` as a float (JSON numbers and "inf" / "-inf"), None for anything else (bools, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if isinstance(value, str) and value not in ("inf", "-inf"):
        return None
    x = float(value)
    return None if math.isnan(x) else x


def _same_number(a: object, b: object, rel: float = EXACT, floor: float = 0.0) -> bool:
    """Two numbers within ``rel`` (relative) or ``floor`` (absolute); "inf" strings allowed, bools are not numbers."""
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return False
    return x == y or (math.isfinite(x) and math.isfinite(y) and abs(x - y) <= max(rel * max(abs(x), abs(y)), floor))


def _agrees(a: object, b: object, rel: float = EXACT, floor: float = 0.0) -> bool:
    """``a`` states ``b``: numbers within tolerance, dicts and lists element by element, the rest equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_agrees(a[k], b[k], rel, floor) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_agrees(x, y, rel, floor) for x, y in zip(a, b, strict=True))
    if _num(a) is not None and _num(b) is not None:
        return _same_number(a, b, rel, floor)
    return type(a) is type(b) and a == b


def _show(value: object) -> str:
    """A recorded or recomputed value in a finding (floats in full: shortest repr that reads back)."""
    return repr(value) if isinstance(value, float) else json.dumps(value) if isinstance(value, dict) else str(value)


def _compare(where: str, what: str, recorded: object, expected: object, rel: float = EXACT) -> list[str]:
    """One finding when the file ``where`` states ``what`` = ``recorded`` but the release gives ``expected``."""
    if _agrees(recorded, expected, rel):
        return []
    return [f"{where}: {what} {_show(recorded)} but the released files give {_show(expected)}"]


def _forbidden(name: str) -> bool:
    return any(fragment in name.lower() for fragment in FORBIDDEN)


def _forbidden_keys(value: object, path: str = "") -> Iterator[str]:
    """Every key (dotted path) of a JSON value whose name holds a FORBIDDEN fragment."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if _forbidden(str(key)):
                yield here
            yield from _forbidden_keys(item, here)
    elif isinstance(value, list):
        for item in value:
            yield from _forbidden_keys(item, path)


def _keys(where: str, value: dict, allowed: frozenset[str], required: bool = True) -> list[str]:
    """Unknown keys (and, when ``required``, missing ones) of ``value`` against ``allowed``."""
    out = [f"{where}: key {k} is not allowed in a published file" for k in sorted(set(value) - allowed)]
    if required:
        out += [f"{where}: missing key {k}" for k in sorted(allowed - set(value))]
    return out


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# ----------------------------------------------------------------------------- step 1: the files
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


def _publishable(name: str) -> bool:
    """A file a release lists (:data:`mdp_core.declarations.contract.PUBLISHED`: the declared files and figures)."""
    return contract.is_published(name) and contract.published(name).listed


def _check_folder(d: Path, listed: dict) -> list[str]:
    """Only files a release publishes are listed, and nothing unlisted sits in the folder."""
    findings = [
        f"{n}: not a file a release publishes (listed in the manifest)" for n in sorted(listed) if not _publishable(n)
    ]
    for p in sorted(d.rglob("*")):
        name = p.relative_to(d).as_posix()
        if (p.is_file() or p.is_symlink()) and name not in ("manifest.json", *SIGNATURE_FILES) and name not in listed:
            findings.append(f"{name}: in the release folder but not listed in the manifest")
    return findings


def _stage_of(name: str) -> tuple[str, str]:
    """(pipeline stage, file name in its output) of a published file (:attr:`PublishedFile.stage` /
    :attr:`~mdp_core.declarations.contract.PublishedFile.file`); an undeclared name: the evaluate stage's (the
    export stage's under ``instance/``)."""
    if contract.is_published(name) and contract.published(name).listed:
        return contract.published(name).stage, name.rpartition("/")[2]
    if name.startswith(f"{INSTANCE_DIR}/"):
        return "export", name.split("/", 1)[1]
    return "evaluate", name


def _check_stages(manifest: dict, actual: dict[str, str]) -> list[str]:
    """Every published file is the output of the stage the manifest records (same sha256); every file a
    release publishes that a stage recorded as its output is listed (a declared file is not dropped)."""
    stages, findings = _obj(manifest.get("stages")), []
    for name, digest in sorted(actual.items()):
        stage, file = _stage_of(name)
        recorded = _obj(_obj(contract.stage_entry(stages, stage)).get("files")).get(file)
        if recorded is not None and recorded != digest:
            what = "the instance the pipeline exported" if stage == "export" else f"the {stage} stage's output"
            findings.append(f"{name}: not {what} (sha256 differs)")
    listed = _obj(manifest.get("released_files"))
    for f in _LISTED:
        written = _obj(_obj(contract.stage_entry(stages, f.stage)).get("files"))
        names = [n for n in written if f.matches(n)] if "*" in f.path else [f.path] if f.file in written else []
        findings += [
            f"{n}: the {f.stage} stage wrote it but the release does not list it" for n in names if n not in listed
        ]
    return findings


# ----------------------------------------------------------------------------- step 2: content (memoisable)
def _check_columns(d: Path, actual: dict[str, str]) -> list[str]:
    """Every listed Parquet file has only allowed columns (aggregates: exactly, in order) and no forbidden name."""
    import pyarrow.parquet as pq

    findings: list[str] = []
    for name in sorted(n for n in actual if n.endswith(".parquet")):
        try:
            cols = list(pq.read_schema(d / name).names)
        except Exception as exc:  # pyarrow raises several types for non-Parquet bytes
            findings.append(f"{name}: not a readable Parquet file ({type(exc).__name__})")
            continue
        allowed = COLUMNS.get(name, frozenset())
        coords = name in WITH_COORDINATES
        for col in cols:
            if col in NAME_EXCEPTIONS.get(name, ()):
                continue
            if _forbidden(col) or not (col in allowed or (coords and COORDINATE.fullmatch(col))):
                findings.append(f"{name}: column {col} is not allowed in a published file")
        want_cols = contract.published(name).column_names if name in ORDERED else ()
        before_intervals = name == "aggregates.parquet" and tuple(cols) == contract.AGGREGATE_COLUMNS_BEFORE_41
        if name in ORDERED and tuple(cols) != want_cols and not before_intervals:
            want = list(want_cols)
            findings.append(f"{name}: columns {cols} are not {want} in this order")
    return findings


def _microdata_facts(path: Path, inst: Any) -> tuple[Record | None, list[str]]:
    """Output ids in 0..K-1 and every other column exactly the output's public value
    (:func:`mdp_core.release.perturb.perturbed_microdata`); a v2 ``individual`` column, when present, is 0..n-1.
    Facts: {"rows": n, "individual": whether the column is there, "sorted": output ids non-decreasing}
    (provenance v3 forbids the column and requires the order: :func:`_check_microdata_order`)."""
    import numpy as np

    from mdp_core.problem.io import read_table
    from mdp_core.release.perturb import perturbed_microdata

    frame = read_table(path, required={"output_id": "int64"})
    out = frame["output_id"].to_numpy()
    if out.size and (out.min() < 0 or out.max() >= inst.n_outputs):
        return None, [f"microdata.parquet: output_id outside 0..{inst.n_outputs - 1}"]
    findings = []
    has_individual = "individual" in frame.columns
    if has_individual and not np.array_equal(frame["individual"].to_numpy(), np.arange(len(frame))):
        findings.append("microdata.parquet: individual is not 0..n-1 in order")
    want = perturbed_microdata(inst, out)
    if set(frame.columns) - {"individual"} != set(want.columns) - {"individual"}:
        findings.append(
            f"microdata.parquet: columns {sorted(frame.columns)} are not the outputs' {sorted(want.columns)}"
        )
    for col in sorted(set(frame.columns) & set(want.columns) - {"individual", "output_id"}):
        if not np.array_equal(frame[col].to_numpy(), want[col].to_numpy(), equal_nan=True):
            findings.append(f"microdata.parquet: column {col} is not the released output's public value")
    facts = {"rows": len(frame), "individual": has_individual, "sorted": bool(np.all(np.diff(out) >= 0))}
    return facts, findings


def _aggregates_facts(path: Path, inst: Any) -> tuple[Record | None, list[str]]:
    """Consistent non-negative integer counts (:func:`_count_findings`) and their noise. Facts: {"total",
    "eps_counts", "scales": {noisy level: its noise_scale}, "sensitivity": L1 sensitivity of the noisy
    levels together (2 per level, :data:`mdp_core.release.noise.MOVE_SENSITIVITY`)}."""
    from mdp_core.problem.io import read_table
    from mdp_core.release.noise import MOVE_SENSITIVITY

    f = read_table(path, required={"block": "int64", "n_members": "int64", "count": "int64", "eps_counts": "float64"})
    f = f.astype({"level": str, "label": str, "noise": str})
    total = f[f.level == "total"]
    if len(total) != 1 or total["noise"].iloc[0] != "none" or float(total["noise_scale"].iloc[0]) != 0.0:
        return None, ["aggregates.parquet: needs one total row, noise none, noise_scale 0"]
    findings = _count_findings(f, inst.n_outputs)
    if "ci_level" in f.columns:  # issue 41: each count's interval (older releases have none)
        from mdp_core.release.intervals import interval_findings

        findings += interval_findings(f)
    noisy = f[f.level != "total"]
    if (noisy["noise"] != "discrete_laplace").any():
        findings.append("aggregates.parquet: a noisy level's noise is not discrete_laplace")
    scales = {str(lv): sorted({float(s) for s in g["noise_scale"]}) for lv, g in noisy.groupby("level")}
    eps = sorted({float(e) for e in f["eps_counts"]})
    if len(eps) != 1 or any(len(s) != 1 for s in scales.values()):
        return None, findings + ["aggregates.parquet: eps_counts, or a level's noise_scale, is not one value"]
    facts = {
        "n_zones": int((f.level == "zone").sum()),
        "total": int(total["count"].iloc[0]),
        "eps_counts": eps[0],
        "scales": {lv: s[0] for lv, s in scales.items()},
        "sensitivity": MOVE_SENSITIVITY * len(scales),
    }
    return facts, findings


def _count_findings(f: Any, k: int) -> list[str]:
    """The count table ``f`` (a DataFrame with one total row) over K = ``k`` outputs: known levels only,
    outputs 0..K-1 labelled by their ids, counts >= 0, outputs and zones summing to the total, zones
    covering the K outputs."""
    import numpy as np

    levels = set(f["level"])
    findings = [f"aggregates.parquet: unknown level {lv}" for lv in sorted(levels - {"total", "zone", "output"})]
    n = int(f.loc[f.level == "total", "count"].iloc[0])
    outs, zones = f[f.level == "output"], f[f.level == "zone"]
    if not (np.array_equal(outs["block"].to_numpy(), np.arange(k)) and (outs["n_members"] == 1).all()):
        findings.append(f"aggregates.parquet: the output level is not blocks 0..{k - 1} of one output each")
    elif not (outs["label"] == outs["block"].astype(str)).all():
        findings.append("aggregates.parquet: output labels are not their output ids")
    if (f["count"] < 0).any():
        findings.append("aggregates.parquet: negative count")
    for name, part in (("output", outs), ("zone", zones)):
        if len(part) and int(part["count"].sum()) != n:
            findings.append(f"aggregates.parquet: {name} counts sum to {int(part['count'].sum())}, not the total {n}")
    if len(zones) and int(zones["n_members"].sum()) != k:
        findings.append(f"aggregates.parquet: zones hold {int(zones['n_members'].sum())} outputs, not K = {k}")
    return findings


def _plain(value: Any) -> Any:
    """A Parquet cell as strict JSON: NaN / None -> None, infinities -> "inf" / "-inf", numpy -> Python."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    return value


EVALUATION_FACTS = (
    "method n_records n_outputs n_edges epsilon eta distance_unit expected_loss verified realised_epsilon "
    "lower_bound gap dist_loss_mean adversary_error metric_epsilon".split()
)


def _evaluation_facts(path: Path, inst: Any) -> tuple[list[Record], list[str]]:
    """The rows of evaluation.parquet / utility_vs_eps.parquet (the columns the audit compares)."""
    from mdp_core.problem.io import read_table

    frame = read_table(path)
    if "method" not in frame.columns:
        return [], [f"{path.name}: no method column"]
    cols = [c for c in (*EVALUATION_FACTS, "factor") if c in frame.columns]
    return [{c: _plain(v) for c, v in zip(cols, row, strict=True)} for row in frame[cols].itertuples(index=False)], []


TABLE_FACTS: dict[str, Callable[[Path, Any], tuple[Any, list[str]]]] = {
    "microdata.parquet": _microdata_facts,
    "aggregates.parquet": _aggregates_facts,
    "evaluation.parquet": _evaluation_facts,
    "utility_vs_eps.parquet": _evaluation_facts,
}


def _check_content(d: Path, actual: dict[str, str]) -> tuple[Record | None, list[str]]:
    """Step 2: read and validate the instance, verify the mechanism, recompute its loss, check every Parquet
    table. Returns (facts or None when the instance or mechanism could not be read, findings). Facts:
    ``certificate`` (``Certificate.as_dict()``), ``summary``, ``instance_epsilon``, ``instance`` (epsilon,
    eta, distance_unit, n_records, n_outputs, n_edges), ``objective`` and one entry per :data:`TABLE_FACTS`
    file (None when absent or unreadable)."""
    from mdp_core.problem.io import read_instance, read_mechanism
    from mdp_core.release.report import loss_of
    from mdp_core.solvers.verify import objective, verify

    findings = _check_columns(d, actual)
    try:
        inst = read_instance(d / INSTANCE_DIR)
        z = read_mechanism(d / "mechanism.parquet", inst.n_records, inst.n_outputs)
        cert = verify(inst, z)
        graph = _graph_protection(inst, _stated_radius(d))
    except MdpError as exc:
        return None, [*findings, _first_line(exc)]
    facts: Record = {
        "certificate": cert.as_dict(),
        "summary": cert.summary(),
        "instance_epsilon": inst.epsilon,
        "instance": {
            "epsilon": inst.epsilon,
            "eta": inst.eta,
            "distance_unit": inst.distance_unit,
            "n_records": inst.n_records,
            "n_outputs": inst.n_outputs,
            "n_edges": inst.n_edges,
            "loss": loss_of(inst.provenance),
        },
        "objective": objective(inst, z),
        "components": graph["component_sizes"],
        "stretch": graph["stretch"],
        "stretch_within": graph["stretch_within"],
        "evaluation_markdown": None,
    }
    for name, read in TABLE_FACTS.items():
        facts[name] = None
        if name in actual:
            try:
                facts[name], found = read(d / name, inst)
            except (MdpError, KeyError, ValueError, TypeError) as exc:
                line = _first_line(exc)
                found = [line if name in line else f"{name}: {line}"]
            findings += found
    if "evaluation.parquet" in actual and facts["evaluation.parquet"] is not None:
        from mdp_core.release.report import evaluation_markdown

        facts["evaluation_markdown"] = evaluation_markdown(d / "evaluation.parquet")
    return facts, findings


def _graph_protection(inst: Any, radius: float | None = None) -> Record:
    """The released instance's mDP graph as the graph stage and the door measure it (the same
    :func:`mdp_core.release.protection.graph_protection` over the same records, edges and distances, with its
    defaults and the stated protection ``radius``): {"component_sizes": largest first, "stretch": worst D_G / d
    within a component (inf: unbounded), "stretch_within": the same over the pairs within the radius}. A stated
    stretch is compared with these; the file's own figure is never trusted."""
    from mdp_core.release.protection import graph_protection

    p = graph_protection(inst, inst.edges, inst.distances, radius=radius)
    return {"component_sizes": list(p.component_sizes), "stretch": p.stretch, "stretch_within": p.stretch_within}


def _stated_radius(d: Path) -> float | None:
    """The protection radius the provenance states (the pairs the within-radius stretch is taken over; a
    wrong one is a finding of :func:`_check_guarantee`, which compares it with the protection block's)."""
    prov, _ = _load_json(d / PROVENANCE)
    radius = _num(_obj(_obj(prov).get("protection")).get("protection_radius"))
    return radius if radius is not None and math.isfinite(radius) and radius > 0 else None


FACT_KEYS = (
    "certificate",
    "summary",
    "instance_epsilon",
    "instance",
    "objective",
    "components",
    "stretch",
    "stretch_within",
    "evaluation_markdown",
    *TABLE_FACTS,
)


# ----------------------------------------------------------------------------- steps 3-8: the claims
def _check_certificate(where: str, recorded: object, cert: Record) -> list[str]:
    """Every field of a recorded certificate vs the recomputed one (``Certificate.as_dict()``)."""
    if not isinstance(recorded, dict):
        return [f"{where}: no recorded certificate"]
    findings = [] if recorded.get("passed") is True else [f"{where}: the recorded certificate does not say passed"]
    for key in sorted(set(recorded) | set(cert)):
        if key not in cert:
            findings.append(f"{where}: certificate field {key} is not a field of the certificate")
        elif key not in recorded:
            findings.append(f"{where}: certificate field {key} is missing")
        elif key != "passed" and not _agrees(recorded[key], cert[key], EXACT, TINY):
            findings.append(
                f"{where}: certificate {key}={_show(recorded[key])} but the released files give {_show(cert[key])}"
            )
    return findings


def _check_certificates(manifest: dict, solve: dict, facts: Record) -> list[str]:
    cert = facts["certificate"]
    findings = (
        []
        if cert.get("passed") is True
        else [f"mechanism.parquet: fails verification against the instance: {facts['summary']}"]
    )
    findings += _check_certificate("manifest.json", _obj(manifest.get("privacy")).get("certificate"), cert)
    return findings + _check_certificate("solve.json", solve.get("certificate"), cert)


def _check_solve(solve: dict, actual: dict[str, str], facts: Record) -> list[str]:
    """solve.json: keys, mechanism sha256, N, K, objective = recomputed loss, bounds, gap, honest status."""
    inst, obj = facts["instance"], facts["objective"]
    findings = _keys("solve.json", solve, SOLVE_KEYS, required=False)
    if solve.get("mechanism_sha256") != actual["mechanism.parquet"]:
        findings.append("solve.json: mechanism_sha256 is not the released mechanism.parquet")
    for key in ("n_records", "n_outputs"):
        findings += _compare("solve.json", key, solve.get(key), inst[key])
    findings += _compare("solve.json", "objective", solve.get("objective"), obj, RECOMPUTED)
    findings += _compare("solve.json", "upper_bound", solve.get("upper_bound"), obj, RECOMPUTED)
    after = _obj(solve.get("repair")).get("objective_after")
    if after is not None:
        findings += _compare("solve.json", "repair objective_after", after, obj, RECOMPUTED)
    return findings + _check_bounds(solve, obj)


def _check_bounds(solve: dict, obj: float) -> list[str]:
    """lower bound <= objective, gap = max(objective - lower bound, 0), relative gap, "optimal" = gap closed
    (mdp_core.solvers.solve.Solution, mdp_core.solvers.result.honest_status)."""
    raw = solve.get("lower_bound")
    lb = _num(raw)
    if raw is not None and lb is None:
        return [f"solve.json: lower_bound {raw!r} is not a number"]
    tol = BOUND_TOLERANCE * max(1.0, abs(obj))
    findings: list[str] = []
    if lb is not None and lb > obj + tol:
        findings.append(f"solve.json: lower_bound {_show(lb)} exceeds the released mechanism's loss {_show(obj)}")
    gap = None if lb is None else max(obj - lb, 0.0)
    if not _agrees(solve.get("gap"), gap, RECOMPUTED, tol):
        findings.append(f"solve.json: gap {_show(solve.get('gap'))} but loss - lower_bound gives {_show(gap)}")
    rel = None if gap is None else gap / max(abs(obj), 1e-300)
    if "relative_gap" in solve and not _agrees(solve["relative_gap"], rel, RECOMPUTED, BOUND_TOLERANCE):
        findings.append(f"solve.json: relative_gap {_show(solve['relative_gap'])} but the bounds give {_show(rel)}")
    if solve.get("status") == "optimal":
        options = _obj(solve.get("options"))
        gap_abs, gap_rel = _num(options.get("gap_abs", DEFAULT_GAP[0])), _num(options.get("gap_rel", DEFAULT_GAP[1]))
        if lb is None or gap_abs is None or gap_rel is None:
            findings.append("solve.json: status optimal without a lower bound and gap options")
        elif not gap_closed(obj, lb, gap_abs, gap_rel):
            findings.append(
                f"solve.json: status optimal but the lower bound {_show(lb)} is not within gap_abs {gap_abs:g} / "
                f"gap_rel {gap_rel:g} of the loss {_show(obj)}"
            )
    return findings


def _check_manifest_solve(manifest: dict, solve: dict) -> list[str]:
    """The manifest's ``solve`` summary repeats solve.json."""
    summary = manifest.get("solve")
    if summary is None:
        return []
    if not isinstance(summary, dict):
        return ["manifest.json: solve is not an object"]
    findings = _keys("manifest.json solve", summary, frozenset({*MANIFEST_SOLVE_KEYS, "auto"}), required=False)
    for key in MANIFEST_SOLVE_KEYS:
        if key in summary:
            findings += _compare("manifest.json", f"solve {key}", summary[key], solve.get(key))
    if "auto" in summary:
        findings += _compare("manifest.json", "solve auto", summary["auto"], _obj(solve.get("extra")).get("auto"))
    return findings


def _version(prov: dict) -> int | None:
    """The provenance's version when it is one the audit knows (:data:`PROVENANCE_VERSIONS`), else None."""
    v = prov.get("version")
    ok = prov.get("format") == PROVENANCE_FORMAT and isinstance(v, int) and not isinstance(v, bool)
    return v if ok and v in PROVENANCE_VERSIONS else None


def _check_provenance(prov: dict, actual: dict[str, str], facts: Record) -> list[str]:
    """release_provenance.json: format, keys, the sha256s it names, its figures vs the tables and instance."""
    p = PROVENANCE
    findings: list[str] = []
    if prov.get("mechanism_sha256") != actual["mechanism.parquet"]:
        findings.append(f"{p}: microdata and aggregates were drawn from another mechanism (sha256 differs)")
    if prov.get("instance_json_sha256") != actual[f"{INSTANCE_DIR}/instance.json"]:
        findings.append(f"{p}: microdata and aggregates were drawn for another instance (sha256 differs)")
    for name in ("microdata.parquet", "aggregates.parquet"):
        if name in actual and prov.get(f"{name.split('.')[0]}_sha256") != actual[name]:
            findings.append(f"{name}: sha256 differs from the one {p} records")
    findings += [
        f"{p}: key {k} names a secret or a seed: not allowed in a published file" for k in _forbidden_keys(prov)
    ]
    version = _version(prov)
    if version is None:
        return findings + [
            f"{p}: not a {PROVENANCE_FORMAT} record of version {' or '.join(map(str, PROVENANCE_VERSIONS))}"
        ]
    findings += _check_counts(prov, facts) + _check_microdata_order(prov, facts)
    if version == 2:
        findings += _keys(p, prov, PROVENANCE_KEYS_V2)
        findings += _keys(f"{p} guarantee", _obj(prov.get("guarantee")), GUARANTEE_KEYS_V2)
        findings += _keys(f"{p} ledger", _obj(prov.get("ledger")), LEDGER_KEYS_V2)
        return findings + _check_guarantee_v2(prov, facts["instance"]) + _check_ledger_v2(prov, facts["instance"])
    findings += _keys(p, prov, PROVENANCE_KEYS | contract.PROVENANCE_KEYS_OPTIONAL, required=False)
    findings += _keys(p, {k: v for k, v in prov.items() if k in PROVENANCE_KEYS}, PROVENANCE_KEYS)
    g = _obj(prov.get("guarantee"))
    findings += _keys(f"{p} guarantee", g, GUARANTEE_KEYS | contract.GUARANTEE_KEYS_OPTIONAL, required=False)
    findings += _keys(f"{p} guarantee", {k: v for k, v in g.items() if k in GUARANTEE_KEYS}, GUARANTEE_KEYS)
    led = _obj(prov.get("ledger"))
    findings += _keys(f"{p} ledger", led, LEDGER_KEYS | contract.LEDGER_KEYS_OPTIONAL, required=False)
    findings += _keys(f"{p} ledger", {k: v for k, v in led.items() if k in LEDGER_KEYS}, LEDGER_KEYS)
    findings += _keys(f"{p} protection", _obj(prov.get("protection")), PROTECTION_KEYS)
    stretch = _stretch(prov, facts)
    within = _stretch_within(prov, facts, stretch)
    findings += _check_protection(prov, facts, stretch)
    findings += _check_within(prov, facts, within) + _check_door(prov, facts, stretch, within)
    return findings + _check_guarantee(prov, facts["instance"], stretch, within) + _check_ledger(prov, within)


def _check_door(prov: dict, facts: Record, stretch: float, within: float) -> list[str]:
    """The privacy door (:func:`mdp_core.release.door.plan_privacy`, the rules check and run apply) on the
    released figures: the stated settings and the recomputed mDP graph. A rule it refuses is a finding (a
    release the door would not have admitted), and so is a charge other than the door's. Releases stated
    before the within-radius stretch are charged at the whole graph's (:func:`_stretch_within`)."""
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy

    p, inst = _obj(prov.get("protection")), facts["instance"]
    radius, limit, cap = (_num(p.get(k)) for k in ("protection_radius", "max_distance", "max_stretch"))
    eps_counts, eps_prior = _num(prov.get("eps_counts")), _num(prov.get("eps_prior"))
    if None in (radius, limit, cap, eps_counts, eps_prior) or not math.isfinite(stretch):
        return []  # the figures' own checks report what is missing
    settings = Settings(
        epsilon=inst["epsilon"],
        eta=inst["eta"],
        protection_radius=radius,
        max_distance=limit,
        eps_counts=cast(float, eps_counts),
        eps_prior=eps_prior if prov.get("prior_source") == "dp" else None,
        max_stretch=cast(float, cap),
        allow_unprotected=bool(p.get("allow_unprotected")),
        population=None if prov.get("microdata_source") == "simulated" else str(prov.get("population")),
    )
    graph = GraphFacts(inst["n_records"], tuple(facts["components"]), stretch, inst["distance_unit"], within)
    plan = plan_privacy(settings, graph)
    findings = [f"{PROVENANCE}: the privacy door refuses this release: {why}" for why in plan.refusals]
    charge = _num(_obj(prov.get("ledger")).get("this_release"))
    if charge is not None and not _same_number(charge, float(plan.charge), RECOMPUTED):
        findings.append(
            f"{PROVENANCE} ledger: this_release {charge!r} but the privacy door charges {float(plan.charge)!r}"
        )
    return findings


def _stretch(prov: dict, facts: Record) -> float:
    """The stretch every v3 figure must follow: the one recomputed from the released instance (the stated
    ``protection.stretch`` only when it agrees with it within :data:`RECOMPUTED`, so that a figure written
    from it is compared with what was written, not with a last-digit difference)."""
    stated, recomputed = _num(_obj(prov.get("protection")).get("stretch")), facts["stretch"]
    return stated if stated is not None and _same_number(stated, recomputed, RECOMPUTED) else recomputed


def _stretch_within(prov: dict, facts: Record, stretch: float) -> float:
    """The stretch the release's charge pays: over the pairs within the protection radius (recomputed; the
    stated ``guarantee.stretch_within_radius`` only when it agrees within :data:`RECOMPUTED`), or the whole
    graph's for a release that states none (made before the within-radius stretch, charged at it)."""
    if "stretch_within_radius" not in _obj(prov.get("guarantee")):
        return stretch
    stated, recomputed = _num(_obj(prov.get("guarantee")).get("stretch_within_radius")), facts["stretch_within"]
    return stated if stated is not None and _same_number(stated, recomputed, RECOMPUTED) else recomputed


def _check_within(prov: dict, facts: Record, within: float) -> list[str]:
    """The stated stretch within the protection radius = the one recomputed from the instance (<= the stretch)."""
    g = _obj(prov.get("guarantee"))
    if "stretch_within_radius" not in g:
        return []
    return _compare(
        f"{PROVENANCE} guarantee",
        "stretch_within_radius",
        g.get("stretch_within_radius"),
        facts["stretch_within"],
        RECOMPUTED,
    )


def _check_microdata_order(prov: dict, facts: Record) -> list[str]:
    """Provenance v3: microdata.parquet has no ``individual`` column and its rows are sorted by output
    (non-decreasing output_id): nothing in it follows the secret table's input order."""
    micro = facts.get("microdata.parquet")
    if micro is None or prov.get("version") == 2:
        return []
    findings = []
    if micro.get("individual", True):
        findings.append("microdata.parquet: has an individual column (rows must carry nothing but the output)")
    if not micro.get("sorted", False):
        findings.append("microdata.parquet: rows are not sorted by output_id (they would follow the input order)")
    return findings


def _check_counts(prov: dict, facts: Record) -> list[str]:
    """n_individuals, eps_counts, counts_sensitivity, eps_prior and sources vs the microdata and aggregates."""
    p, findings = PROVENANCE, []
    micro, agg = facts.get("microdata.parquet"), facts.get("aggregates.parquet")
    if micro is not None:
        findings += _compare(p, "n_individuals", prov.get("n_individuals"), micro["rows"])
    if agg is not None:
        findings += _compare(p, "n_individuals", prov.get("n_individuals"), agg["total"])
        findings += _compare(p, "eps_counts", prov.get("eps_counts"), agg["eps_counts"])
        findings += _compare(p, "counts_sensitivity", prov.get("counts_sensitivity"), agg["sensitivity"])
        eps = _num(prov.get("eps_counts"))
        for level, scale in sorted(agg["scales"].items()):
            if eps is None or not _same_number(scale * eps, prov.get("counts_sensitivity"), RECOMPUTED):
                findings.append(
                    f"aggregates.parquet: {level} noise_scale {_show(scale)} x eps_counts {prov.get('eps_counts')} is "
                    f"not the counts_sensitivity {prov.get('counts_sensitivity')}"
                )
    eps_prior = _num(prov.get("eps_prior"))
    if prov.get("prior_source") not in PRIOR_SOURCES:
        findings.append(f"{p}: prior_source {prov.get('prior_source')} is not one of {sorted(PRIOR_SOURCES)}")
    elif eps_prior is None or eps_prior < 0 or (prov["prior_source"] == "dp") != (eps_prior > 0):
        findings.append(f"{p}: eps_prior {prov.get('eps_prior')} does not fit prior_source {prov['prior_source']}")
    if prov.get("microdata_source") not in MICRODATA_SOURCES:
        findings.append(
            f"{p}: microdata_source {prov.get('microdata_source')} is not one of {sorted(MICRODATA_SOURCES)}"
        )
    if not (isinstance(prov.get("draw_commitment"), str) and re.fullmatch(r"[0-9a-f]{64}", prov["draw_commitment"])):
        findings.append(f"{p}: draw_commitment is not a sha256 hex commitment")
    return findings


def _check_guarantee_v2(prov: dict, inst: Record) -> list[str]:
    """The guarantee: eps per unit and unit of the instance, additive eps = eps_counts + eps_prior, and the
    statement says exp(eps * d(r, r') + additive) in that unit."""
    where, g, add = f"{PROVENANCE} guarantee", _obj(prov.get("guarantee")), additive_epsilon(prov)
    findings = _compare(where, "epsilon_per_unit", g.get("epsilon_per_unit"), inst["epsilon"])
    findings += _compare(where, "distance_unit", g.get("distance_unit"), inst["distance_unit"])
    findings += _compare(where, "additive_epsilon", g.get("additive_epsilon"), add)
    statement = g.get("statement")
    if add is not None and not (
        isinstance(statement, str)
        and f"exp({inst['epsilon']:g} * d(r, r') + {add:g})" in statement
        and f"d in {inst['distance_unit']}" in statement
    ):
        findings.append(
            f"{where}: the statement does not say exp({inst['epsilon']:g} * d(r, r') + {add:g}), d in {inst['distance_unit']}"
        )
    return findings


def _check_ledger_v2(prov: dict, inst: Record) -> list[str]:
    """this_release = eps * eta + additive; this_release <= total_so_far <= max_total_epsilon (when set)."""
    where, led, add = f"{PROVENANCE} ledger", _obj(prov.get("ledger")), additive_epsilon(prov)
    if add is None:
        return []
    spend = inst["epsilon"] * inst["eta"] + add
    findings = _compare(where, "this_release", led.get("this_release"), spend, RECOMPUTED)
    total, cap, n = _num(led.get("total_so_far")), _num(led.get("max_total_epsilon")), led.get("releases_so_far")
    if total is None or total < spend * (1 - RECOMPUTED):
        findings.append(f"{where}: total_so_far {led.get('total_so_far')} is below this release's spend {_show(spend)}")
    elif led.get("max_total_epsilon") is not None and (cap is None or total > cap * (1 + RECOMPUTED)):
        findings.append(
            f"{where}: total_so_far {_show(total)} exceeds max_total_epsilon {led.get('max_total_epsilon')}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        findings.append(f"{where}: releases_so_far {n} is not a count >= 1")
    return findings


def _is_count(value: object, low: int = 0, high: float = math.inf) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_protection(prov: dict, facts: Record, true_stretch: float) -> list[str]:
    """Provenance v3 ``population`` and ``protection``: the components and the stretch of the released
    instance's mDP graph (recomputed from the instance's records, edges and distances: ``true_stretch``, see
    :func:`_stretch`), who is unprotected, the stretch against its limit, the snap distances."""
    where, p = f"{PROVENANCE} protection", _obj(prov.get("protection"))
    findings: list[str] = []
    population = prov.get("population")
    if not (isinstance(population, str) and POPULATION.fullmatch(population)):
        findings.append(f"{PROVENANCE}: population is not a population name ({POPULATION.pattern})")
    elif (prov.get("microdata_source") == "simulated") != population.startswith("simulated-"):
        findings.append(
            f"{PROVENANCE}: population {population} does not fit microdata_source {prov.get('microdata_source')}"
        )
    sizes = facts["components"]
    n_rec = facts["instance"]["n_records"]
    findings += _compare(where, "component_sizes", p.get("component_sizes"), sizes)
    findings += _compare(where, "n_components", p.get("n_components"), len(sizes))
    findings += _compare(where, "connected", p.get("connected"), len(sizes) == 1)
    findings += _compare(
        where, "records_outside_largest", p.get("records_outside_largest"), n_rec - max(sizes, default=0)
    )
    stretch, limit, radius = _num(p.get("stretch")), _num(p.get("max_stretch")), _num(p.get("protection_radius"))
    if stretch is None or not math.isfinite(stretch) or stretch <= 0:
        findings.append(f"{where}: stretch {p.get('stretch')} is not a finite positive number")
    elif not _same_number(stretch, true_stretch, RECOMPUTED):
        findings.append(
            f"{where}: stretch {_show(p.get('stretch'))} but the released instance's mDP graph gives "
            f"{_show(facts['stretch'])} (worst shortest path over metric distance in a component)"
        )
    if limit is None or limit <= 0:
        findings.append(f"{where}: max_stretch {p.get('max_stretch')} is not a positive number")
    if radius is None or not math.isfinite(radius) or radius <= 0:
        findings.append(f"{where}: protection_radius {p.get('protection_radius')} is not a finite positive number")
    n_ind = _num(prov.get("n_individuals"))
    unprotected = p.get("unprotected_individuals")  # null: a count of the secret table, not published
    if unprotected is not None and not _is_count(unprotected, 0, n_ind if n_ind is not None else math.inf):
        findings.append(f"{where}: unprotected_individuals {unprotected} is not a count of this table's individuals")
    elif len(sizes) == 1 and unprotected not in (0, None):
        findings.append(f"{where}: unprotected_individuals {unprotected} but the mDP graph is connected")
    if not isinstance(p.get("allow_unprotected"), bool):
        findings.append(f"{where}: allow_unprotected is not true or false")
    refused = len(sizes) > 1 or (limit is not None and true_stretch > limit)
    if refused and p.get("allow_unprotected") is not True:
        findings.append(
            f"{where}: {len(sizes)} component(s), stretch {p.get('stretch')} (max {p.get('max_stretch')}): released "
            "without allow_unprotected = true"
        )
    pair = p.get("worst_pair")
    if pair is not None and not (
        isinstance(pair, list) and len(pair) == 2 and all(_is_count(i, 0, n_rec - 1) for i in pair)
    ):
        findings.append(f"{where}: worst_pair is not two record ids of the instance")
    mean, most = p.get("snap_mean"), p.get("snap_max")
    if (mean is None) != (most is None):
        findings.append(f"{where}: snap_mean and snap_max must both be given or both be null")
    elif mean is not None:
        m, x = _num(mean), _num(most)
        if m is None or x is None or not 0 <= m <= x * (1 + RECOMPUTED) or not math.isfinite(x):
            findings.append(f"{where}: snap_mean {mean} / snap_max {most} are not distances with mean <= max")
    return findings


def _check_guarantee(prov: dict, inst: Record, true_stretch: float, within: float | None = None) -> list[str]:
    """Provenance v3 guarantee: eps per unit and unit of the instance, stretch = the recomputed one
    (``true_stretch``: :func:`_stretch`), radius = the protection's, metric eps = eps x stretch, additive =
    eps_counts + eps_prior, the statement's figures (from the recomputed stretch)."""
    where, g, p, add = (
        f"{PROVENANCE} guarantee",
        _obj(prov.get("guarantee")),
        _obj(prov.get("protection")),
        additive_epsilon(prov),
    )
    findings = _compare(where, "epsilon_per_unit", g.get("epsilon_per_unit"), inst["epsilon"])
    findings += _compare(where, "distance_unit", g.get("distance_unit"), inst["distance_unit"])
    findings += _compare(where, "additive_epsilon", g.get("additive_epsilon"), add)
    findings += _compare(where, "stretch", g.get("stretch"), true_stretch, RECOMPUTED)
    findings += _compare(where, "protection_radius", g.get("protection_radius"), p.get("protection_radius"))
    stretch, radius = true_stretch, _num(p.get("protection_radius"))
    if not math.isfinite(stretch) or radius is None or add is None:
        return findings
    metric = inst["epsilon"] * stretch
    findings += _compare(
        where, "metric_epsilon_per_unit (eps x stretch)", g.get("metric_epsilon_per_unit"), metric, RECOMPUTED
    )
    statement, unit = g.get("statement"), inst["distance_unit"]
    shown = stated_metric(inst["epsilon"], stretch)
    needed: tuple[str, ...] = (
        f"exp({shown} * d(r, r') + {add:g})",
        f"d in {unit}",
        f"{radius:g} {unit}",
        f"stretch {stretch:.6g}",
    )
    if within is not None and math.isfinite(within) and within < stretch:  # the within-radius factor, stated too
        needed += (f"exp({stated_metric(inst['epsilon'], within)} * d(r, r') + {add:g})",)
    missing = [n for n in needed if not (isinstance(statement, str) and n in statement)]
    if missing:
        findings.append(f"{where}: the statement does not say {'; '.join(missing)}")
    return findings


def _check_ledger(prov: dict, true_stretch: float) -> list[str]:
    """Provenance v3 ledger: population = the provenance's; this_release = eps x stretch x radius + additive
    (the recomputed stretch the charge pays, ``true_stretch``: :func:`_stretch_within`); this_release <= total_so_far <=
    max_total_epsilon (required for an agency population), left = cap - total; ledger_seq >= 1 and a sha256 head."""
    where, led, g = f"{PROVENANCE} ledger", _obj(prov.get("ledger")), _obj(prov.get("guarantee"))
    findings = _compare(where, "population", led.get("population"), prov.get("population"))
    eps, radius, add = (_num(g.get(k)) for k in ("epsilon_per_unit", "protection_radius", "additive_epsilon"))
    if eps is None or radius is None or add is None:
        return findings + [f"{where}: the guarantee's figures are missing: this release's charge cannot be checked"]
    if not (math.isfinite(true_stretch) and true_stretch >= 1.0):
        return findings + [
            f"{where}: the released mDP graph's stretch {_show(true_stretch)} is not a finite number >= 1: no charge "
            "covers it"
        ]
    try:
        spend = this_release(eps, true_stretch, radius, add)
    except MdpError as exc:
        return findings + [f"{where}: this release's charge cannot be computed ({_first_line(exc)})"]
    findings += _compare(
        where, "this_release (eps x stretch x radius + additive)", led.get("this_release"), spend, RECOMPUTED
    )
    total, cap = _num(led.get("total_so_far")), _num(led.get("max_total_epsilon"))
    if total is None or total < spend * (1 - RECOMPUTED):
        findings.append(
            f"{where}: total_so_far {led.get('total_so_far')} is below this release's charge {_show(spend)}"
        )
    if led.get("max_total_epsilon") is None:
        if prov.get("microdata_source") != "simulated":
            findings.append(f"{where}: no max_total_epsilon for an agency population")
        if led.get("left") is not None:
            findings.append(f"{where}: left {led.get('left')} without a max_total_epsilon")
    elif cap is None or total is None:
        findings.append(f"{where}: max_total_epsilon {led.get('max_total_epsilon')} is not a number")
    else:
        if total > cap * (1 + RECOMPUTED):
            findings.append(f"{where}: total_so_far {_show(total)} exceeds max_total_epsilon {_show(cap)}")
        if not _agrees(led.get("left"), cap - total, RECOMPUTED, RECOMPUTED * cap):
            findings.append(
                f"{where}: left {led.get('left')} but max_total_epsilon - total_so_far gives {_show(cap - total)}"
            )
    if not _is_count(led.get("ledger_seq"), 1):
        findings.append(f"{where}: ledger_seq {led.get('ledger_seq')} is not a count >= 1")
    if not (isinstance(led.get("ledger_head"), str) and re.fullmatch(r"[0-9a-f]{64}", led["ledger_head"])):
        findings.append(f"{where}: ledger_head is not a sha256 hex hash")
    return findings


def _check_privacy(manifest: dict, prov: dict, inst: Record) -> list[str]:
    """The manifest's privacy block: eps, eta, unit = the instance's; the other figures = the provenance's."""
    privacy = _obj(manifest.get("privacy"))
    version = _version(prov)
    allowed = PRIVACY_KEYS | (PRIVACY_KEYS_V3_OPTIONAL if version == 3 else frozenset())
    findings = _keys("manifest.json privacy", privacy, allowed, required=False)
    if version is not None:
        findings += [f"manifest.json privacy: missing key {k}" for k in sorted(PRIVACY_KEYS - set(privacy))]
    findings += [f"manifest.json: privacy key {k} names a secret or a seed" for k in _forbidden_keys(privacy)]
    for key, want in (("mechanism_epsilon", "epsilon"), ("eta", "eta"), ("distance_unit", "distance_unit")):
        if key in privacy and not _agrees(privacy[key], inst[want]):
            findings.append(
                f"manifest.json: privacy {key} {_show(privacy[key])} != instance {want} {_show(inst[want])}"
            )
    for key, source in PRIVACY_FROM_PROVENANCE.items():
        if key in privacy:
            findings += _compare("manifest.json", f"privacy {key}", privacy[key], prov.get(source))
    return findings


def _check_config(manifest: dict, prov: dict, solve: dict, inst: Record) -> list[str]:
    """The manifest's ``config`` (the flow's settings) states the released eps, eta, counts budget, prior,
    cap, microdata source, n and method."""
    if "config" not in manifest:
        return ["manifest.json: no config block"] if _version(prov) is not None else []
    cfg = _obj(manifest["config"])
    privacy, release = _obj(cfg.get("privacy")), _obj(cfg.get("release"))
    findings = [f"manifest.json: config release.{k} names a seed or a secret" for k in _forbidden_keys(release)]
    for key in ("epsilon", "eta"):
        if privacy.get(key) is not None and not _agrees(privacy[key], inst[key]):
            findings.append(
                f"manifest.json: config privacy.{key} {_show(privacy[key])} != instance {key} {_show(inst[key])}"
            )
    if "method" in _obj(cfg.get("solve")):
        findings += _compare("manifest.json", "config solve.method", cfg["solve"]["method"], solve.get("method"))
    if not release:
        return findings
    led = _obj(prov.get("ledger"))
    findings += _compare(
        "manifest.json", "config release.eps_counts", release.get("eps_counts"), prov.get("eps_counts")
    )
    if _version(prov) == 2:
        findings += _compare(
            "manifest.json",
            "config release.max_total_epsilon",
            release.get("max_total_epsilon"),
            led.get("max_total_epsilon"),
        )
    else:  # v3: the stored cap is enforced; a config may lower it, never raise it
        findings += _check_config_v3(cfg, prov)
    prior = release.get("prior", "dataset")
    source = prior if prior in ("dataset", "uniform", "dp") else "file"
    findings += _compare("manifest.json", "config release prior source", source, prov.get("prior_source"))
    if source == "dp":
        findings += _compare(
            "manifest.json", "config release.eps_prior", release.get("eps_prior"), prov.get("eps_prior")
        )
    simulated = release.get("microdata") is None
    findings += _compare(
        "manifest.json", "config microdata source", "simulated" if simulated else "file", prov.get("microdata_source")
    )
    if simulated and release.get("n_individuals") is not None:  # unset: the config's default number
        findings += _compare(
            "manifest.json", "config release.n_individuals", release["n_individuals"], prov.get("n_individuals")
        )
    return findings


def _check_config_v3(cfg: dict, prov: dict) -> list[str]:
    """A v3 config's population and protection settings = the provenance's; the ledger's cap is at most
    the configured one (a config lowers the stored cap, never raises it)."""
    privacy, release = _obj(cfg.get("privacy")), _obj(cfg.get("release"))
    protection, led = _obj(prov.get("protection")), _obj(prov.get("ledger"))
    findings: list[str] = []
    if release.get("population") is not None:
        findings += _compare(
            "manifest.json", "config release.population", release["population"], prov.get("population")
        )
    for key in ("protection_radius", "max_stretch", "allow_unprotected"):
        if privacy.get(key) is not None:
            findings += _compare("manifest.json", f"config privacy.{key}", privacy[key], protection.get(key))
    asked, cap = _num(release.get("max_total_epsilon")), _num(led.get("max_total_epsilon"))
    if release.get("max_total_epsilon") is not None and (asked is None or cap is None or cap > asked * (1 + EXACT)):
        findings.append(
            f"manifest.json: ledger max_total_epsilon {led.get('max_total_epsilon')} is not at most the configured "
            f"max_total_epsilon {release.get('max_total_epsilon')}"
        )
    return findings


def _check_evaluation(facts: Record, solve: dict, prov: dict) -> list[str]:
    """evaluation.parquet and utility_vs_eps.parquet restate the released mechanism's figures."""
    inst, cert, obj, method = facts["instance"], facts["certificate"], facts["objective"], solve.get("method")
    findings: list[str] = []
    rows = facts.get("evaluation.parquet")
    if rows is not None:
        for row in rows:  # every mechanism was evaluated on the released instance
            for key in ("epsilon", "eta", "distance_unit", "n_records", "n_outputs", "n_edges"):
                findings += _compare("evaluation.parquet", f"{row.get('method')} {key}", row.get(key), inst[key])
        mine = [r for r in rows if r.get("method") == method]
        if not mine:
            findings.append(f"evaluation.parquet: no row for the released method {method}")
        for row in mine[:1]:
            findings += _compare("evaluation.parquet", "expected_loss", row.get("expected_loss"), obj, RECOMPUTED)
            findings += _compare("evaluation.parquet", "verified", row.get("verified"), cert.get("passed"))
            findings += _compare(
                "evaluation.parquet",
                "realised_epsilon",
                row.get("realised_epsilon"),
                cert.get("max_realised_epsilon"),
                RECOMPUTED,
            )
            findings += _compare("evaluation.parquet", "lower_bound", row.get("lower_bound"), solve.get("lower_bound"))
            if not _agrees(row.get("gap"), solve.get("gap"), RECOMPUTED, BOUND_TOLERANCE * max(1.0, abs(obj))):
                findings.append(
                    f"evaluation.parquet: gap {_show(row.get('gap'))} but solve.json says {_show(solve.get('gap'))}"
                )
    within = facts.get("stretch_within")  # recomputed from the graph: the rate the release verifiably keeps there
    findings += _check_against_laplace(rows or [], method, _obj(prov.get("guarantee")), within)
    for row in facts.get("utility_vs_eps.parquet") or []:
        if not _same_number(row.get("epsilon"), inst["epsilon"] * (_num(row.get("factor")) or 0.0), EXACT):
            findings.append(
                f"utility_vs_eps.parquet: epsilon {row.get('epsilon')} is not factor {row.get('factor')} x {inst['epsilon']:g}"
            )
        elif row.get("method") == method and row.get("factor") == 1.0:
            findings += _compare(
                "utility_vs_eps.parquet", "released expected_loss", row.get("expected_loss"), obj, RECOMPUTED
            )
    return findings


def _check_against_laplace(
    rows: list[Record], method: object, guarantee: Record, stretch_within: object = None
) -> list[str]:
    """The comparison with planar Laplace (issue 40, :mod:`mdp_core.release.baseline`): its rows and the
    released one state one metric eps, a rate the release keeps: eps x the stretch within the protection radius
    (stated, or ``stretch_within`` recomputed from the graph: the rate the release promises there, what planar
    Laplace is compared at) or, in releases made before, eps x the stretch over any distance; the continuous
    mechanism's error is exactly D / eps for a whole D >= 1."""
    from mdp_core.release.baseline import CONTINUOUS, REMAP

    findings: list[str] = []
    compared = [r for r in rows if r.get("method") in (CONTINUOUS, REMAP)]
    released = [r for r in rows if r.get("method") == method and "metric_epsilon" in r][:1]
    stated = {_num(r.get("metric_epsilon")) for r in compared + released}
    if compared and len(stated) != 1:
        findings.append(
            f"evaluation.parquet: planar Laplace and the release state different eps {sorted(map(str, stated))}"
        )
    eps_unit = _num(guarantee.get("epsilon_per_unit"))
    stretches = (_num(x) for x in (guarantee.get("stretch_within_radius"), stretch_within, guarantee.get("stretch")))
    rates = [eps_unit * x for x in stretches if x is not None] if eps_unit is not None else []
    if compared and rates:
        if not any(_same_number(e, r, RECOMPUTED) for e in stated for r in rates):
            findings.append(
                f"evaluation.parquet: planar Laplace is compared at eps {sorted(map(str, stated))}, not at a rate "
                f"the guarantee states ({', '.join(f'{r:.6g}' for r in rates)})"
            )
    for row in (r for r in compared if r.get("method") == CONTINUOUS):
        eps, err = _num(row.get("metric_epsilon")), _num(row.get("dist_loss_mean"))
        dim = round(eps * err) if eps and err else 0
        if not (dim >= 1 and abs(eps * err - dim) <= 1e-9 * dim):  # type: ignore[operator]
            findings.append(f"evaluation.parquet: planar_laplace dist_loss_mean {err} is not D / eps at eps {eps}")
    return findings


def signed_claims(facts: Record, solve: dict, prov: dict) -> Record:
    """The value of every report claim (:data:`CLAIM_KEYS`) from the recomputed and checked records: the
    instance, the certificate and loss recomputed from the Parquet bytes, the counts' facts, solve.json
    (checked by step 4), the provenance (step 5) and the released method's evaluation row (step 7)."""
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
        "dist_loss_mean": row.get("dist_loss_mean"),
        "adversary_error": row.get("adversary_error"),
        "expected_loss": row.get("expected_loss"),
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
    findings += _check_report(d, actual, facts, solve, prov, signed)
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
    "COLUMNS",
    "CLAIM_KEYS",
]
