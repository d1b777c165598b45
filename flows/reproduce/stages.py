"""The reproduce flow's stages: one cached Prefect task per experiment (a Parquet table each) and the report.

Every stage is ``task(store, params, **upstream) -> ArtifactRef`` run through
:func:`tasks.common.run_stage` (cache key = code version + params + upstream content hashes).
``tasks.cache`` follows imports inside ``mdp_core``/``tasks``/``artifacts`` only, so the flow puts
:func:`stage_code_version` (this package's modules the stage runs, the project modules they import,
and ``published.json``) into every stage's params: editing the experiment code re-runs the stage.
params of the experiment stages:

  * ``rp-partition``: {"datasets": {name: DatasetSpec.as_dict()}, "n_records", "n_subsets", "seeds", "methods"}
    -> partition_runs.parquet (one row per instance x method), partition_summary.parquet (mean, 1.96 sd),
    partition_example.parquet (seed-0 k-m-DV partition in 2-D, for the map plot);
  * ``rp-utility``: {"datasets", "n_records", "n_outputs", "paper_eps", "seed", "methods"} -> utility.parquet;
  * ``rp-timing``: {"datasets", "n_records", "n_outputs", "n_subsets", "seed", "partitioners", "lp_solvers",
    "max_iterations", "gap_rel", "time_limit"} -> timing.parquet, benders_trace.parquet;
  * ``rp-scalability``: {"dataset", "sizes", "seed", "rs", "lp_time_limit"} -> scalability.parquet;
  * ``rp-cbdp``: {"dataset", "n_records", "n_outputs", "n_individuals", "eps_counts", "n_seeds", "seed"} -> cbdp.parquet.

A dataset whose experiment raises is recorded in ``errors.json`` of that stage (and in the report)
instead of failing the whole flow. ``rp-report`` reads all five and writes comparison.parquet,
reproduce_report.md and the PNGs.
"""

from __future__ import annotations

import functools
import hashlib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from flows.reproduce import compare, report
from flows.reproduce import experiments as ex
from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.problem.io import read_table, write_frame
from mdp_core.runtime.files import atomic_write, write_json
from tasks.cache import code_modules
from tasks.common import logger, run_stage

PACKAGE = Path(__file__).resolve().parent
# The modules of this package each stage runs (besides this one); the report also reads published.json.
STAGE_MODULES = {
    "rp-partition": ("flows.reproduce.experiments",),
    "rp-utility": ("flows.reproduce.experiments",),
    "rp-timing": ("flows.reproduce.experiments",),
    "rp-scalability": ("flows.reproduce.experiments",),
    "rp-cbdp": ("flows.reproduce.experiments",),
    "rp-report": ("flows.reproduce.experiments", "flows.reproduce.compare", "flows.reproduce.report"),
}


@functools.cache
def _modules(name: str) -> dict[str, Path]:
    return code_modules(name)


@functools.cache  # like tasks.cache.code_version: the sources are read once per process
def stage_code_version(stage: str) -> str:
    """sha256 over the sources of this module, the package modules ``stage`` runs and every project
    module they import (transitively, :func:`tasks.cache.code_modules`), and ``published.json``."""
    modules: dict[str, Path] = {}
    for name in (__name__, *STAGE_MODULES[stage]):
        modules |= _modules(name)
    h = hashlib.sha256()
    for name, path in sorted(modules.items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    if stage == "rp-report":
        h.update(b"published.json\0" + (PACKAGE / "published.json").read_bytes())
    return h.hexdigest()


EXPERIMENT_STAGES = ("rp-partition", "rp-utility", "rp-timing", "rp-scalability", "rp-cbdp")


def _specs(params: dict[str, Any]) -> dict[str, ex.DatasetSpec]:
    return {name: ex.DatasetSpec(**d) for name, d in params["datasets"].items()}


def _per_dataset(w: ObjectWriter, params: dict[str, Any], run: Callable[[ex.DatasetSpec], Any]) -> list[Any]:
    """run(spec) for every dataset; failures go to errors.json (and the log) instead of raising."""
    results: list[Any] = []
    errors: dict[str, str] = {}
    for name, spec in _specs(params).items():
        try:
            results.append(run(spec))
            logger().info("%s: %s done", w.stage, name)
        except Exception as exc:  # reported, not fatal: the other datasets still count
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            logger().warning("%s: %s failed: %s\n%s", w.stage, name, errors[name], traceback.format_exc(limit=-4))
    write_json(w.file("errors.json"), errors)
    w.meta["errors"] = errors
    return results


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _write(w: ObjectWriter, name: str, frame: pd.DataFrame) -> None:
    write_frame(w.file(name), frame.reset_index(drop=True))


# ----------------------------------------------------------------------------- experiment stages
def _partition(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> None:
    n, m = int(params["n_records"]), int(params["n_subsets"])
    seeds, methods = [int(s) for s in params["seeds"]], list(params["methods"])

    def run(spec: ex.DatasetSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
        return ex.partition_experiment(spec, n, m, seeds, methods), ex.partition_example(spec, n, m, seeds[0])

    res = _per_dataset(w, params, run)
    runs = _concat([r[0] for r in res])
    _write(w, "partition_runs.parquet", runs)
    _write(w, "partition_summary.parquet", ex.summarise_partitions(runs) if len(runs) else runs)
    _write(w, "partition_example.parquet", _concat([r[1] for r in res]))


def _utility(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> None:
    frames = _per_dataset(
        w,
        params,
        lambda spec: ex.utility_experiment(
            spec,
            int(params["n_records"]),
            int(params["n_outputs"]),
            params["paper_eps"],
            int(params["seed"]),
            tuple(params["methods"]),
            SolverOptions(time_limit=float(params.get("time_limit", 600.0))),
        ),
    )
    _write(w, "utility.parquet", _concat(frames))


def _timing(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> None:
    res = _per_dataset(
        w,
        params,
        lambda spec: ex.timing_experiment(
            spec,
            int(params["n_records"]),
            int(params["n_outputs"]),
            int(params["n_subsets"]),
            int(params["seed"]),
            tuple(params["partitioners"]),
            tuple(params["lp_solvers"]),
            int(params["max_iterations"]),
            float(params["gap_rel"]),
            float(params["time_limit"]),
        ),
    )
    _write(w, "timing.parquet", _concat([r[0] for r in res]))
    _write(w, "benders_trace.parquet", _concat([r[1] for r in res]))


def _scalability(
    w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]
) -> None:
    p = {"datasets": {"text": params["dataset"]}}
    frames = _per_dataset(
        w,
        p,
        lambda spec: ex.scalability_experiment(
            spec,
            [int(s) for s in params["sizes"]],
            int(params["seed"]),
            [int(r) for r in params["rs"]],
            float(params["lp_time_limit"]),
        ),
    )
    _write(w, "scalability.parquet", _concat(frames))


def _cbdp(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> None:
    p = {"datasets": {"counts": params["dataset"]}}

    def run(spec: ex.DatasetSpec) -> pd.DataFrame:
        inst = ex.build_instance(spec, int(params["n_records"]), int(params["n_outputs"]), int(params["seed"]))
        return ex.cbdp_experiment(
            inst,
            int(params["n_individuals"]),
            [float(e) for e in params["eps_counts"]],
            int(params["n_seeds"]),
            int(params["seed"]),
        )

    _write(w, "cbdp.parquet", _concat(_per_dataset(w, p, run)))


@task(name="rp-partition")
def partition_tables(store: str, params: dict[str, Any]) -> ArtifactRef:
    """Qiu 2024 Tables 1-2."""
    return run_stage("rp-partition", __name__, store, params, {}, _partition)


@task(name="rp-utility")
def utility_curves(store: str, params: dict[str, Any]) -> ArtifactRef:
    """Qiu 2024 Fig. 7 / appendix D.1."""
    return run_stage("rp-utility", __name__, store, params, {}, _utility)


@task(name="rp-timing")
def timing_table(store: str, params: dict[str, Any]) -> ArtifactRef:
    """Qiu 2024 Table 3 (+ Benders bound traces)."""
    return run_stage("rp-timing", __name__, store, params, {}, _timing)


@task(name="rp-scalability")
def scalability_table(store: str, params: dict[str, Any]) -> ArtifactRef:
    """Imola 2022 Table 2."""
    return run_stage("rp-scalability", __name__, store, params, {}, _scalability)


@task(name="rp-cbdp")
def cbdp_curve(store: str, params: dict[str, Any]) -> ArtifactRef:
    """Fioretto 2018 Fig. 5."""
    return run_stage("rp-cbdp", __name__, store, params, {}, _cbdp)


# ----------------------------------------------------------------------------- report
def _read(store: Store, ref: ArtifactRef | None, name: str) -> pd.DataFrame | None:
    if ref is None or name not in ref.files:
        return None
    df = read_table(store.path(ref, name))
    return df if len(df) else None


def _report(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> None:
    t = {
        "summary": _read(store, upstream.get("partition"), "partition_summary.parquet"),
        "example": _read(store, upstream.get("partition"), "partition_example.parquet"),
        "utility": _read(store, upstream.get("utility"), "utility.parquet"),
        "timing": _read(store, upstream.get("timing"), "timing.parquet"),
        "trace": _read(store, upstream.get("timing"), "benders_trace.parquet"),
        "scalability": _read(store, upstream.get("scalability"), "scalability.parquet"),
        "cbdp": _read(store, upstream.get("cbdp"), "cbdp.parquet"),
    }
    settings = dict(params["settings"])
    comparison = compare.compare_all(
        t["summary"], t["utility"], t["timing"], t["scalability"], t["cbdp"], datasets=settings.get("datasets")
    )
    write_frame(w.file("comparison.parquet"), comparison)
    figs = report.figures(t, w.file)
    errors: dict[str, dict[str, str]] = {
        s: ref.meta["errors"] for s, ref in upstream.items() if ref is not None and ref.meta.get("errors")
    }
    if errors:
        settings["differences"] = list(settings.get("differences", [])) + [
            {"topic": "failure", "text": f"experiment {s} failed on {name}: {msg}", "ours": {}, "paper": {}}
            for s, e in errors.items()
            for name, msg in e.items()
        ]
    md = report.report_markdown(settings, comparison, report.report_tables(t), figs)

    def write_md(path: Path) -> None:
        path.write_text(md, encoding="utf-8")

    atomic_write(w.file("reproduce_report.md"), write_md)
    w.meta.update(
        {
            "agrees": int((comparison["verdict"] == "agrees").sum()) if len(comparison) else 0,
            "differs": int((comparison["verdict"] == "differs").sum()) if len(comparison) else 0,
        }
    )


@task(name="rp-report")
def reproduce_report(
    store: str,
    params: dict[str, Any],
    partition: ArtifactRef | None = None,
    utility: ArtifactRef | None = None,
    timing: ArtifactRef | None = None,
    scalability: ArtifactRef | None = None,
    cbdp: ArtifactRef | None = None,
) -> ArtifactRef:
    """comparison.parquet + reproduce_report.md + PNGs from the experiment stages."""
    up = {"partition": partition, "utility": utility, "timing": timing, "scalability": scalability, "cbdp": cbdp}
    return run_stage("rp-report", __name__, store, params, up, _report)
