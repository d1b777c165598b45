"""The reproduce flow: run the papers' experiment grids at a size that fits 2 cores and write one
report comparing our numbers with the published ones.

  reproduce_flow(ReproduceConfig())            default: about 10-15 minutes on 2 cores
  reproduce_flow(ReproduceConfig(quick=True))  tiny sizes for tests / CI: about a minute

Stages (each a cached Prefect task writing Parquet, see :mod:`flows.reproduce.stages`): rp-partition
(Qiu Tables 1-2), rp-utility (Fig. 7 / D.1), rp-timing (Table 3 + Benders bounds), rp-scalability
(Imola Table 2), rp-cbdp (Fioretto Fig. 5), rp-report (comparison.parquet, reproduce_report.md,
PNGs). The report and its tables and figures are published to ``<store>/runs/<run_name>/`` (and
copied to ``out`` when given) with a manifest, by the same code as the release flow
(:mod:`flows.manifest`).

No ``from __future__ import annotations``: Prefect must see the flow parameters' real (pydantic)
annotations when the flow is handed to another process.
"""

import datetime as _dt
import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow
from pydantic import BaseModel, ConfigDict, Field

from artifacts.store import ArtifactRef, Store
from flows import manifest as mf
from flows.reproduce import experiments as ex
from flows.reproduce import report
from flows.reproduce import stages as rp
from tasks.cache import cached

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
STAGES = ("rp-partition", "rp-utility", "rp-timing", "rp-scalability", "rp-cbdp", "rp-report")
_TASKS = {
    "rp-partition": rp.partition_tables,
    "rp-utility": rp.utility_curves,
    "rp-timing": rp.timing_table,
    "rp-scalability": rp.scalability_table,
    "rp-cbdp": rp.cbdp_curve,
    "rp-report": rp.reproduce_report,
}
# The tables each experiment stage publishes next to the report.
PUBLISHED_TABLES = {
    "rp-partition": ["partition_runs.parquet", "partition_summary.parquet"],
    "rp-utility": ["utility.parquet"],
    "rp-timing": ["timing.parquet", "benders_trace.parquet"],
    "rp-scalability": ["scalability.parquet"],
    "rp-cbdp": ["cbdp.parquet"],
}


class ReproduceConfig(BaseModel):
    """What the reproduce run depends on (sizes follow from ``quick``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    quick: bool = Field(False, description="tiny sizes (~1 minute) instead of the default (~10-15 minutes)")
    store: str = "artifacts/store"
    out: str | None = Field(None, description="also copy the report, tables and figures here")
    seed: int = Field(0, ge=0)
    data_dir: str | None = Field(None, description="real data folder (default ../shared/data next to the repo)")
    refresh: bool = Field(False, description="recompute every stage, ignoring caches")


def _sizes(quick: bool, s: int, ds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The parameters of every reproduction stage: a quick smoke run or the papers' sizes."""
    return _quick_sizes(s, ds) if quick else _paper_sizes(s, ds)


def _quick_sizes(s: int, ds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Small instances: a smoke run of every stage (``quick``)."""
    return {
        "rp-partition": {
            "datasets": ds,
            "n_records": 60,
            "n_subsets": 3,
            "seeds": [s],
            "methods": list(ex.PARTITIONERS),
        },
        "rp-utility": {
            "datasets": ds,
            "n_records": 30,
            "n_outputs": 30,
            "paper_eps": [2.0, 10.0],
            "seed": s,
            "methods": ["lp", "exp"],
        },
        "rp-timing": {
            "datasets": {"grid": ds["grid"]},
            "n_records": 30,
            "n_outputs": 30,
            "n_subsets": 3,
            "seed": s,
            "partitioners": ["kmdv"],
            "lp_solvers": ["simplex"],
            "max_iterations": 20,
            "gap_rel": 0.01,
            "time_limit": 10.0,
        },
        "rp-scalability": {
            "dataset": ds["text"],
            "sizes": [20, 40],
            "seed": s,
            "rs": [10, 5],
            "lp_time_limit": 20.0,
        },
        "rp-cbdp": {
            "dataset": ds["grid"],
            "n_records": 48,
            "n_outputs": 30,
            "n_individuals": 500,
            "eps_counts": [0.1, 1.0],
            "n_seeds": 2,
            "seed": s,
        },
    }


def _paper_sizes(s: int, ds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The sizes of the papers' experiments (Qiu 2024, Imola 2022, Fioretto 2019)."""
    return {
        "rp-partition": {
            "datasets": ds,
            "n_records": 500,
            "n_subsets": 25,
            "seeds": [s + i for i in range(5)],
            "methods": list(ex.PARTITIONERS),
        },
        "rp-utility": {
            "datasets": ds,
            "n_records": 100,
            "n_outputs": 100,
            "paper_eps": [2.0, 4.0, 6.0, 8.0, 10.0],
            "seed": s,
            "methods": ["lp", "exp"],
        },
        "rp-timing": {
            "datasets": ds,
            "n_records": 100,
            "n_outputs": 100,
            "n_subsets": 5,
            "seed": s,
            "partitioners": list(ex.PARTITIONERS),
            "lp_solvers": ["simplex", "ipm"],
            "max_iterations": 100,
            "gap_rel": 0.01,
            "time_limit": 20.0,
        },
        "rp-scalability": {
            "dataset": ds["text"],
            "sizes": [50, 100, 150, 200],
            "seed": s,
            "rs": [10, 5],
            "lp_time_limit": 60.0,
        },
        "rp-cbdp": {
            "dataset": ds["grid"],
            "n_records": 500,
            "n_outputs": 100,
            "n_individuals": 2000,
            "eps_counts": [0.01, 0.05, 0.1, 0.5, 1.0, 10.0],
            "n_seeds": 20,
            "seed": s,
        },
    }


def plan(cfg: ReproduceConfig) -> dict[str, dict[str, Any]]:
    """Each stage's parameters (its cache key besides upstream hashes) for this config; every stage's
    ``code`` is :func:`flows.reproduce.stages.stage_code_version`."""
    data_dir = Path(cfg.data_dir) if cfg.data_dir else DEFAULT_DATA_DIR
    specs = ex.dataset_specs(data_dir if data_dir.is_dir() else None)
    p = _sizes(cfg.quick, cfg.seed, {name: s.as_dict() for name, s in specs.items()})
    p["rp-report"] = {"settings": report.run_settings("quick" if cfg.quick else "default", cfg.seed, p, specs)}
    for stage in STAGES:
        p[stage]["code"] = rp.stage_code_version(stage)
    return p


@flow(name="mdp-reproduce", description="Run the papers' experiment grids and compare with the published numbers")
def reproduce_flow(config: ReproduceConfig = ReproduceConfig()) -> dict[str, Any]:
    """Run every experiment stage and the report; returns the manifest (also runs/<run_name>/manifest.json)."""
    store = Store(config.store)
    run_id = mf.flow_run_id()
    started = time.time()
    params = plan(config)
    entries: dict[str, dict[str, Any]] = {}
    refs: dict[str, ArtifactRef] = {}
    for stage in STAGES[:-1]:
        t0 = time.perf_counter()
        refs[stage] = cached(_TASKS[stage], stage, store, config.refresh)(str(store.root), params[stage])
        entries[stage] = mf.stage_entry(refs[stage], run_id, t0, started) | {
            "errors": refs[stage].meta.get("errors") or {}
        }
    t0 = time.perf_counter()
    rep = cached(_TASKS["rp-report"], "rp-report", store, config.refresh)(
        str(store.root),
        params["rp-report"],
        partition=refs["rp-partition"],
        utility=refs["rp-utility"],
        timing=refs["rp-timing"],
        scalability=refs["rp-scalability"],
        cbdp=refs["rp-cbdp"],
    )
    entries["rp-report"] = mf.stage_entry(rep, run_id, t0, started) | {"errors": {}}

    finished = _dt.datetime.now(_dt.UTC)
    manifest = mf.new_manifest(
        "mdp-reproduce-manifest",
        mf.run_name(finished, run_id, "reproduce"),
        run_id,
        finished,
        config,
        entries,
        {s: params[s]["code"] for s in STAGES},
        {"verdicts": {"agrees": rep.meta.get("agrees"), "differs": rep.meta.get("differs")}},
    )
    released: mf.Released = {name: (rep, name) for name in rep.files}
    for stage, names in PUBLISHED_TABLES.items():
        released |= {name: (refs[stage], name) for name in names if name in refs[stage].files}
    return mf.publish_run(store, manifest, released, out=config.out)


def reproduce_from_cli(args: Any, where: str = "") -> int:
    """``mdp-release reproduce [--quick] [--store DIR] [--out DIR] [--seed N] [--data-dir DIR] [--refresh]``.

    Call ``flows.run.prepare_environment()`` before importing this module (it picks the Prefect API).
    Prints the report path, each stage (ran / cached) and the verdict counts; returns the exit code.
    """
    cfg = ReproduceConfig(
        quick=bool(args.quick),
        store=str(args.store),
        out=args.out,
        seed=int(args.seed),
        data_dir=args.data_dir,
        refresh=bool(args.refresh),
    )
    print(
        f"mdp-release reproduce ({'quick' if cfg.quick else 'default'}): {where}; store {Path(cfg.store).resolve()}",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    m = reproduce_flow(config=cfg)
    folder = Path(m.get("out_dir") or m["run_dir"])
    print(f"report: {folder / 'reproduce_report.md'}")
    for name, st in m["stages"].items():
        err = f"  errors: {st['errors']}" if st["errors"] else ""
        print(f"  {name:<15} {'cached ' if st['cache_hit'] else 'ran    '} {st['wall_seconds']:>8.2f}s{err}")
    v = m["verdicts"]
    print(
        f"  {v['agrees']} comparisons agree with the papers, {v['differs']} differ (reasons in the report); "
        f"wall time {time.perf_counter() - t0:.1f}s"
    )
    return 0
