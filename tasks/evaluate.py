"""Stage ``evaluate``: metrics of the released mechanism and of the baselines, plots, report.

params: {"baselines": [...methods...], "max_mix": float}.
Files: evaluation.parquet (one row per mechanism, ``method`` column), report.md, bounds.png (Benders),
partition.png. Publishes a Prefect table artifact and a markdown artifact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core import evaluate as ev
from mdp_core import report
from mdp_core.io import atomic_write, read_json, read_mechanism, read_table, write_frame
from mdp_core.solve import solve as solve_instance
from tasks.common import instance_of, logger, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    inst = instance_of(store, upstream["instance"])
    mech = upstream["mechanism"]
    info = read_json(store.path(mech, "solve.json"))
    z = read_mechanism(store.path(mech, "mechanism.parquet"), inst.n_records, inst.n_outputs)
    rows = [ev.evaluate_mechanism(inst, z, info["method"], lower_bound=info.get("lower_bound"), seconds=info.get("seconds"))]
    for method in params.get("baselines", []):
        if method == info["method"]:
            continue
        try:
            sol = solve_instance(inst, method, max_mix=float(params.get("max_mix", 1e-2)))
        except Exception as exc:  # a baseline that does not apply (e.g. laplace on text) is reported, not fatal
            logger().warning("evaluate: baseline %s skipped: %s", method, exc)
            continue
        rows.append(ev.evaluate_mechanism(inst, sol.z, method, lower_bound=sol.lower_bound, seconds=sol.seconds))
    table = ev.evaluation_table(rows)
    write_frame(w.file("evaluation.parquet"), table)

    figures: list[tuple[str, str]] = []
    if "trace.parquet" in mech.files:
        trace = read_table(store.path(mech, "trace.parquet"))
        report.plot_bounds(trace, w.file("bounds.png"))
        figures.append(("Benders bounds per iteration", "bounds.png"))
    if upstream.get("partition") is not None and inst.coordinate_columns():
        part = read_table(store.path(upstream["partition"], "partition.parquet"))
        report.plot_partition(
            inst.record_points(), part["subset"].to_numpy(), part["role"].to_numpy() == "boundary",
            w.file("partition.png"), lonlat=inst.metric == "haversine",
        )
        figures.append(("Partition of the mDP graph", "partition.png"))
    md = _markdown(inst, info, table, figures)
    atomic_write(w.file("report.md"), lambda p: p.write_text(md, encoding="utf-8"))
    w.meta.update({"methods": list(table["method"])})


def _markdown(inst, info: dict, table: pd.DataFrame, figures: list[tuple[str, str]]) -> str:
    cert = info["certificate"]
    lines = [
        "# mdp-release evaluation",
        "",
        f"N = {inst.n_records} records, K = {inst.n_outputs} outputs, |E| = {inst.n_edges} neighbour pairs, "
        f"eps = {inst.epsilon:g} per {inst.distance_unit}, eta = {inst.eta:g} {inst.distance_unit}.",
        "",
        f"Released mechanism: **{info['method']}** ({info['status']}), expected loss {info['objective']:.6g}, "
        f"lower bound {info.get('lower_bound')}, gap {info.get('gap')}, {info['iterations']} iterations, "
        f"{info['seconds']} s.",
        f"Privacy certificate: {'PASS' if cert['passed'] else 'FAIL'}, realised eps {cert['max_realised_epsilon']}, "
        f"{cert['n_violations']} violations over {cert['n_pairs']} pairs.",
        "",
        report.markdown_table(table),
        "",
    ]
    for title, name in figures:
        lines += [f"## {title}", "", f"![{title}]({name})", ""]
    return "\n".join(lines)


@task(name="publish-report", cache_policy=NO_CACHE)
def publish_report(store: str, evaluation: ArtifactRef) -> None:
    """Prefect UI artifacts of this run's evaluation (every run, cached stage or not)."""
    s = Store(store)
    table = read_table(s.path(evaluation, "evaluation.parquet"))
    records = table.astype(object).where(table.notna(), None).to_dict(orient="records")
    create_table_artifact(key="mdp-evaluation", table=records, description="mdp-release: mechanisms compared")
    md = s.path(evaluation, "report.md").read_text(encoding="utf-8")
    for name in evaluation.files:
        if name.endswith(".png"):
            md = md.replace(f"]({name})", f"]({s.path(evaluation, name).as_uri()})")
    create_markdown_artifact(key="mdp-report", markdown=md, description="mdp-release: evaluation report")


@task(name="evaluate")
def evaluate(
    store: str, params: dict[str, Any], instance: ArtifactRef, mechanism: ArtifactRef, partition: ArtifactRef | None = None
) -> ArtifactRef:
    return run_stage(
        "evaluate", __name__, store, params, {"instance": instance, "mechanism": mechanism, "partition": partition}, _compute
    )
