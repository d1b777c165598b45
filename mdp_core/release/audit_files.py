"""The audit's steps 1 and 2 (:mod:`mdp_core.release.audit`): the listed files, the folder, the stages that
wrote them, and the content of every Parquet table (a pure function of the released bytes: the facts the
later steps compare the claims with)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdp_core.declarations import contract
from mdp_core.errors import MdpError
from mdp_core.release import audit_coherence as coherence
from mdp_core.release.approvals_log import APPROVALS_FILE
from mdp_core.release.audit_common import (
    _LISTED,
    COLUMNS,
    COORDINATE,
    INSTANCE_DIR,
    NAME_EXCEPTIONS,
    ORDERED,
    PROVENANCE,
    REQUIRED,
    SIGNATURE_FILES,
    WITH_COORDINATES,
    Record,
    _first_line,
    _forbidden,
    _load_json,
    _num,
    _obj,
)
from mdp_core.runtime.files import file_sha256


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
        beside = ("manifest.json", *SIGNATURE_FILES, APPROVALS_FILE)  # approvals.json: audit_approval checks it
        if (p.is_file() or p.is_symlink()) and name not in beside and name not in listed:
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
        findings += coherence.interval_findings(f)  # placed around a measurement (issue 49)
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
    from mdp_core.release.people import error_range
    from mdp_core.release.report import loss_of
    from mdp_core.solvers.verify import objective, verify

    findings = _check_columns(d, actual)
    try:
        inst = read_instance(d / INSTANCE_DIR)
        z = read_mechanism(d / "mechanism.parquet", inst.n_records, inst.n_outputs)
        every = _claims_every_pair(d)  # verified over every pair when the release's certificate claims them
        cert = verify(inst, z, all_pairs=every)
        graph = _graph_protection(inst, _stated_radius(d), every)
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
        # the public bounds of the people's error (issue 50): (max_distance, great-circle?) -> (lo, hi)
        "error_range": lambda limit, geo: error_range(inst, z, limit, geo),
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
    findings += coherence.histogram_findings(d, inst, z, facts)  # the microdata against the counts (issue 49)
    if "evaluation.parquet" in actual and facts["evaluation.parquet"] is not None:
        from mdp_core.release.report import evaluation_markdown

        facts["evaluation_markdown"] = evaluation_markdown(d / "evaluation.parquet")
    return facts, findings


def _graph_protection(inst: Any, radius: float | None = None, all_pairs: bool = False) -> Record:
    """The released instance's mDP graph as the graph stage and the door measure it (the same
    :func:`mdp_core.release.protection.graph_protection` over the same records, edges and distances, with its
    defaults and the stated protection ``radius``): {"component_sizes": largest first, "stretch": worst D_G / d
    within a component (inf: unbounded), "stretch_within": the same over the pairs within the radius}. A stated
    stretch is compared with these; the file's own figure is never trusted. ``all_pairs``: the mechanism was
    verified over every pair of a component in the metric (:func:`_claims_every_pair`): stretch 1 by certificate."""
    from mdp_core.release.protection import graph_protection

    p = graph_protection(inst, inst.edges, inst.distances, radius=radius, all_pairs=all_pairs)
    return {"component_sizes": list(p.component_sizes), "stretch": p.stretch, "stretch_within": p.stretch_within}


def _claims_every_pair(d: Path) -> bool:
    """Whether a certificate the release records (manifest.json's ``privacy.certificate``, solve.json's
    ``certificate``) claims every pair of a component certified in the metric (``pairs`` "all", issue 51): the
    audit then verifies the mechanism over every such pair, so a claim the mechanism does not meet is a finding
    (the recorded certificate's fields against the recomputed one), and takes the stretch as 1."""
    manifest, _ = _load_json(d / "manifest.json")
    solve, _ = _load_json(d / "solve.json")
    recorded = (_obj(_obj(manifest).get("privacy")).get("certificate"), _obj(solve).get("certificate"))
    return any(_obj(c).get("pairs") == "all" for c in recorded)


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
