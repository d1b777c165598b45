"""Stages of the reproduce flow: one cached stage per experiment (a Parquet table each) and the report.

Every stage is ``task(store, params, **upstream) -> ArtifactRef`` run through
:func:`tasks.common.run_stage` (cache key = code version of this module and of ``mdp_core``
modules it imports + params + upstream content hashes). params of the experiment stages:

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

import traceback
from typing import Any, Callable

import numpy as np
import pandas as pd
from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core import experiments as ex
from mdp_core import partition as part_mod
from mdp_core import report
from mdp_core.io import atomic_write, read_table, write_frame, write_json
from mdp_core.lp import SolverOptions
from tasks.common import logger, run_stage

EXPERIMENT_STAGES = ("rp-partition", "rp-utility", "rp-timing", "rp-scalability", "rp-cbdp")


def _specs(params: dict[str, Any]) -> dict[str, ex.DatasetSpec]:
    return {name: ex.DatasetSpec(**d) for name, d in params["datasets"].items()}


def _per_dataset(w: ObjectWriter, params: dict[str, Any], run: Callable[[ex.DatasetSpec], Any]) -> list[Any]:
    """run(spec) for every dataset; failures go to errors.json (and the log) instead of raising."""
    results, errors = [], {}
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
def projection_2d(points: np.ndarray, metric: str) -> np.ndarray:
    """(N, 2) plotting coordinates: (lon, lat) for haversine, the points for 2-D, else the first 2 PCs."""
    pts = np.asarray(points, dtype=float)
    if metric == "haversine":
        return pts[:, ::-1]
    if pts.shape[1] <= 2:
        return pts
    centred = pts - pts.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T


def _partition(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    n, m = int(params["n_records"]), int(params["n_subsets"])
    seeds, methods = [int(s) for s in params["seeds"]], list(params["methods"])

    def run(spec: ex.DatasetSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
        runs = ex.partition_experiment(spec, n, m, seeds, methods)
        inst = ex.build_instance(spec, n, 100, seeds[0])
        p = part_mod.partition(inst, "kmdv", m, seeds[0])
        xy = projection_2d(inst.record_points(), inst.metric)
        example = pd.DataFrame({"dataset": spec.name, "px": xy[:, 0], "py": xy[:, 1],
                                "subset": p.labels, "boundary": p.boundary})
        return runs, example

    res = _per_dataset(w, params, run)
    runs = _concat([r[0] for r in res])
    _write(w, "partition_runs.parquet", runs)
    _write(w, "partition_summary.parquet", ex.summarise_partitions(runs) if len(runs) else runs)
    _write(w, "partition_example.parquet", _concat([r[1] for r in res]))


def _utility(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    frames = _per_dataset(w, params, lambda spec: ex.utility_experiment(
        spec, int(params["n_records"]), int(params["n_outputs"]), params["paper_eps"], int(params["seed"]),
        tuple(params["methods"]), SolverOptions(time_limit=float(params.get("time_limit", 600.0)))))
    _write(w, "utility.parquet", _concat(frames))


def _timing(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    res = _per_dataset(w, params, lambda spec: ex.timing_experiment(
        spec, int(params["n_records"]), int(params["n_outputs"]), int(params["n_subsets"]), int(params["seed"]),
        tuple(params["partitioners"]), tuple(params["lp_solvers"]), int(params["max_iterations"]),
        float(params["gap_rel"]), float(params["time_limit"])))
    _write(w, "timing.parquet", _concat([r[0] for r in res]))
    _write(w, "benders_trace.parquet", _concat([r[1] for r in res]))


def _scalability(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    p = {"datasets": {"text": params["dataset"]}}
    frames = _per_dataset(w, p, lambda spec: ex.scalability_experiment(
        spec, [int(s) for s in params["sizes"]], int(params["seed"]), [int(r) for r in params["rs"]],
        float(params["lp_time_limit"])))
    _write(w, "scalability.parquet", _concat(frames))


def _cbdp(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    p = {"datasets": {"counts": params["dataset"]}}

    def run(spec: ex.DatasetSpec) -> pd.DataFrame:
        inst = ex.build_instance(spec, int(params["n_records"]), int(params["n_outputs"]), int(params["seed"]))
        return ex.cbdp_experiment(inst, int(params["n_individuals"]), [float(e) for e in params["eps_counts"]],
                                  int(params["n_seeds"]), int(params["seed"]))

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


def _figures(w: ObjectWriter, t: dict[str, pd.DataFrame | None]) -> list[tuple[str, str]]:
    figs: list[tuple[str, str]] = []
    u = t.get("utility")
    if u is not None:
        for ds, g in u.groupby("dataset", sort=False):
            piv = g.pivot_table(index="paper_eps", columns="method", values="expected_loss")
            name = f"utility_{ds}.png"
            report.plot_lines(piv.index.to_list(), {m: piv[m].to_list() for m in piv.columns}, "eps (paper units, at eta = 2)",
                              "expected utility loss", f"{ds}: utility vs eps (Qiu Fig. 7)", w.file(name), logy=True)
            figs.append((f"Utility vs eps, {ds} (Qiu 2024 Fig. 7)", name))
    tr = t.get("trace")
    if tr is not None:
        for ds, gd in tr.groupby("dataset", sort=False):
            parts = list(dict.fromkeys(gd["partitioner"]))
            p = "kmdv" if "kmdv" in parts else parts[0]  # one plot per dataset: k-m-DV when it ran
            g = gd[gd["partitioner"] == p]
            name = f"bounds_{ds}_{p}.png"
            report.plot_bounds(g, w.file(name))
            figs.append((f"Benders bounds per iteration, {ds}, {p} (Qiu 2024 Figs. 17-20)", name))
    ex_ = t.get("example")
    if ex_ is not None:
        for ds, g in ex_.groupby("dataset", sort=False):
            name = f"partition_{ds}.png"
            report.plot_partition(g[["px", "py"]].to_numpy(), g["subset"].to_numpy(), g["boundary"].to_numpy(bool), w.file(name))
            figs.append((f"k-m-DV partition, {ds} (2-D: lon/lat or first two principal components)", name))
    c = t.get("cbdp")
    if c is not None:
        piv = c.pivot_table(index="eps_counts", columns="method", values="mae_features")
        report.plot_lines(np.log10(piv.index.to_numpy(float)).tolist(), {m: piv[m].to_list() for m in piv.columns},
                          "log10 eps_counts", "mean abs. error per count (over features)",
                          "count release error (Fioretto Fig. 5)", w.file("cbdp.png"), logy=True)
        figs.append(("Count-release error vs eps_counts (Fioretto 2018 Fig. 5)", "cbdp.png"))
    return figs


def _report(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    t = {
        "summary": _read(store, upstream.get("partition"), "partition_summary.parquet"),
        "example": _read(store, upstream.get("partition"), "partition_example.parquet"),
        "utility": _read(store, upstream.get("utility"), "utility.parquet"),
        "timing": _read(store, upstream.get("timing"), "timing.parquet"),
        "trace": _read(store, upstream.get("timing"), "benders_trace.parquet"),
        "scalability": _read(store, upstream.get("scalability"), "scalability.parquet"),
        "cbdp": _read(store, upstream.get("cbdp"), "cbdp.parquet"),
    }
    comparison = ex.compare_all(t["summary"], t["utility"], t["timing"], t["scalability"], t["cbdp"])
    write_frame(w.file("comparison.parquet"), comparison)
    figs = _figures(w, t)
    tables: dict[str, pd.DataFrame] = {}
    if t["summary"] is not None:
        cols = ["dataset", "method", "n_instances"] + [c for s in ex.PARTITION_STATS for c in (s, f"{s}_hw")]
        tables["Qiu 2024 Tables 1-2: partition balance (records; mean, 1.96 sd)"] = t["summary"][cols]
    if t["utility"] is not None:
        tables["Qiu 2024 appendix D.1: % expected loss below ExpMech"] = ex.utility_gain(t["utility"])
        tables["Qiu 2024 Fig. 7: expected utility loss"] = t["utility"][
            ["dataset", "paper_eps", "epsilon", "eta", "method", "expected_loss", "status", "seconds"]]
    if t["timing"] is not None:
        tables["Qiu 2024 Table 3: computation time (s, this machine)"] = t["timing"][
            ["dataset", "method", "status", "seconds", "iterations", "objective", "lower_bound", "relative_gap",
             "boundary_fraction", "feasibility_cuts", "optimality_cuts", "n_records", "n_outputs", "error"]]
    if t["scalability"] is not None:
        tables["Imola 2022 Table 2 style: method, N, seconds, LP non-zeros"] = t["scalability"]
    if t["cbdp"] is not None:
        tables["Fioretto 2018: baseline error / CBDP error"] = ex.cbdp_factors(t["cbdp"])
    errors = {s: ref.meta.get("errors") for s, ref in upstream.items() if ref is not None and ref.meta.get("errors")}
    settings = dict(params["settings"])
    if errors:
        settings["differences"] = list(settings.get("differences", [])) + [
            f"experiment {s} failed on {name}: {msg}" for s, e in errors.items() for name, msg in e.items()]
    md = ex.report_markdown(settings, comparison, tables, figs)
    atomic_write(w.file("reproduce_report.md"), lambda p: p.write_text(md, encoding="utf-8"))
    w.meta.update({"agrees": int((comparison["verdict"] == "agrees").sum()) if len(comparison) else 0,
                   "differs": int((comparison["verdict"] == "differs").sum()) if len(comparison) else 0})


@task(name="rp-report")
def reproduce_report(
    store: str, params: dict[str, Any], partition: ArtifactRef | None = None, utility: ArtifactRef | None = None,
    timing: ArtifactRef | None = None, scalability: ArtifactRef | None = None, cbdp: ArtifactRef | None = None,
) -> ArtifactRef:
    """comparison.parquet + reproduce_report.md + PNGs from the experiment stages."""
    up = {"partition": partition, "utility": utility, "timing": timing, "scalability": scalability, "cbdp": cbdp}
    return run_stage("rp-report", __name__, store, params, up, _report)
