"""The release flow: ingest -> graph -> partition -> export -> solve -> postprocess -> evaluate -> release.

Every stage is a cached Prefect task (``tasks/``) whose key is built from its code version, its own
parameters and the content hashes of what it reads (:mod:`tasks.cache`), so a re-run recomputes only
the stages whose inputs or code changed. The last step publishes the released files and a manifest
to ``<store>/runs/<run_name>/``.
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.context import FlowRunContext

from artifacts.store import ArtifactRef, Store
from flows.config import ReleaseFlowConfig
from mdp_core.datasets import registry
from mdp_core.io import file_sha256, read_json
from tasks import evaluate, export, graph, ingest, partition, postprocess, solve
from tasks.cache import cached, code_version, package_versions

STAGES = ("ingest", "graph", "partition", "export", "solve", "postprocess", "evaluate")
_TASKS = {
    "ingest": ingest.ingest,
    "graph": graph.graph,
    "partition": partition.partition,
    "export": export.export,
    "solve": solve.solve,
    "postprocess": postprocess.postprocess,
    "evaluate": evaluate.evaluate,
}
PACKAGES = ("mdp-release", "prefect", "numpy", "scipy", "highspy", "pandas", "pyarrow", "osmnx", "gensim", "pydantic")


def stage_params(cfg: ReleaseFlowConfig) -> dict[str, dict[str, Any]]:
    """Each stage's own parameters (what goes into its cache key besides upstream hashes)."""
    inputs = {str(p): file_sha256(p) for p in registry.input_files(cfg.dataset.kind, cfg.dataset.params)}
    s = cfg.solve
    method_args: dict[str, Any] = {}
    if s.method in ("benders", "colgen"):
        method_args = {"gap_abs": s.gap_abs, "gap_rel": s.gap_rel, "max_iterations": s.max_iterations}
    return {
        "ingest": {"kind": cfg.dataset.kind, "params": cfg.dataset.params, "inputs": inputs},
        "graph": {"eta": cfg.privacy.eta},
        "partition": cfg.partition.model_dump(),
        "export": {"epsilon": cfg.privacy.epsilon},
        "solve": {
            "method": s.method,
            "solver": {"solver": s.solver, "threads": s.threads, "time_limit": s.time_limit},
            "max_mix": s.max_mix,
            "method_args": method_args,
        },
        "postprocess": cfg.release.model_dump(),
        "evaluate": cfg.evaluate.model_dump() | {
            "max_mix": s.max_mix,
            "method": s.method,
            "method_args": method_args,
            "solver": {"solver": s.solver, "threads": s.threads, "time_limit": s.time_limit},
        },
    }


@flow(name="mdp-release", description="Optimal mDP mechanism -> verified, reproducible release")
def release_flow(config: ReleaseFlowConfig = ReleaseFlowConfig(), refresh_from: str | None = None) -> dict[str, Any]:
    """Run the release pipeline; returns the run manifest (also written to runs/<run_name>/manifest.json).

    Args:
        config: the release configuration.
        refresh_from: recompute this stage and every later one, ignoring caches ("ingest" = all).
    """
    if refresh_from is not None and refresh_from not in STAGES:
        raise ValueError(f"refresh_from must be one of {STAGES}, got {refresh_from!r}")
    first_refresh = STAGES.index(refresh_from) if refresh_from else len(STAGES)
    store = Store(config.store)
    ctx = FlowRunContext.get()
    run_id = str(ctx.flow_run.id) if ctx and ctx.flow_run else "local"
    params = stage_params(config)
    entries: dict[str, dict[str, Any]] = {}

    def run(stage: str, **upstream: ArtifactRef | None) -> ArtifactRef:
        t0 = time.perf_counter()
        task = cached(_TASKS[stage], stage, store, STAGES.index(stage) >= first_refresh)
        ref = task(str(store.root), params[stage], **upstream)
        entries[stage] = {
            "cache_key": ref.key,
            "cache_hit": ref.meta.get("produced_by") != run_id,
            "artifact": ref.path,
            "files": ref.files,
            "wall_seconds": round(time.perf_counter() - t0, 3),
            "compute_seconds": ref.meta.get("seconds"),
        }
        return ref

    ds = run("ingest")
    g = run("graph", dataset=ds)
    part = run("partition", dataset=ds, graph=g)
    inst = run("export", dataset=ds, graph=g)
    sol = run("solve", instance=inst, partition=part if config.solve.method == "benders" else None)
    post = run("postprocess", instance=inst, mechanism=sol, partition=part)
    ev = run("evaluate", instance=inst, mechanism=sol, partition=part, postprocess=post)
    evaluate.publish_report(str(store.root), ev)

    finished = _dt.datetime.now(_dt.timezone.utc)
    run_name = f"{finished:%Y%m%d-%H%M%S}-{run_id[:8]}"
    solve_info = read_json(store.path(sol, "solve.json"))
    inst_meta = read_json(store.path(inst, "instance.json"))
    manifest = {
        "format": "mdp-release-manifest",
        "version": 1,
        "run_name": run_name,
        "flow_run_id": run_id,
        "created_at": finished.isoformat(timespec="seconds"),
        "config": config.model_dump(mode="json"),
        "refresh_from": refresh_from,
        "stages": entries,
        "code_versions": {s: code_version(_TASKS[s].fn.__module__) for s in STAGES},
        "package_versions": package_versions(PACKAGES),
        "privacy": {
            "mechanism_epsilon": inst_meta["epsilon"],
            "eta": inst_meta["eta"],
            "distance_unit": inst_meta["distance_unit"],
            "certificate": solve_info["certificate"],
            "counts_epsilon": config.release.eps_counts,
            "note": "the mechanism is eps-mDP per distance unit (each individual's released output); the aggregate "
            "counts are Laplace (eps_counts) + CBDP post-processing of counts of the released microdata, which is "
            "itself public: that extra noise protects the counts only where the microdata is withheld",
        },
        "solve": {k: solve_info.get(k) for k in ("method", "status", "objective", "lower_bound", "upper_bound", "gap", "iterations", "seconds")},
    }
    released = {
        "mechanism.parquet": (sol, "mechanism.parquet"),
        "solve.json": (sol, "solve.json"),
        "microdata.parquet": (post, "microdata.parquet"),
        "aggregates.parquet": (post, "aggregates.parquet"),
        "evaluation.parquet": (ev, "evaluation.parquet"),
        "report.md": (ev, "report.md"),
    }
    if "trace.parquet" in sol.files:
        released["trace.parquet"] = (sol, "trace.parquet")
    for name in ev.files:
        if name.endswith(".png") or name in ("utility_vs_eps.parquet", "cbdp_error.parquet"):
            released[name] = (ev, name)
    manifest["released_files"] = {name: ref.files[src] for name, (ref, src) in released.items()}
    run_dir = store.publish(run_name, released, manifest)
    manifest["run_dir"] = str(run_dir)
    return manifest


def manifest_config(path: str | Path) -> ReleaseFlowConfig:
    """The config recorded in a run manifest (to re-run a release)."""
    from flows.config import parse_config

    m = read_json(path)
    if m.get("format") != "mdp-release-manifest" or "config" not in m:
        from mdp_core.errors import InputError

        raise InputError(f"{path}: not an mdp-release run manifest")
    return parse_config(m["config"], f"{path}: config")
