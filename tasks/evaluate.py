"""Stage ``evaluate``: metrics of the released mechanism and of the baselines, plots, report.

params: {"baselines": [...], "max_mix": float, "method": str, "method_args": {...}, "solver": {...},
         "eps_factors": [...], "counts_eps": [...], "counts_seeds": int}.
Files: evaluation.parquet (one row per mechanism, ``method`` column), utility_vs_eps.parquet (each
mechanism re-solved at eps * factor: Qiu 2024 Fig. 7), cbdp_error.parquet (CBDP vs Laplace vs
hierarchical error of the released counts per eps_counts: Fioretto Fig. 5), report.md and PNG plots
(bounds.png for Benders, partition.png, utility_vs_eps.png, cbdp_error.png). The Prefect table and
markdown artifacts are published by :func:`publish_report` on every run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core import evaluate as ev
from mdp_core import report
from mdp_core.errors import MdpError
from mdp_core.io import atomic_write, read_json, read_mechanism, read_table, write_frame
from mdp_core.lp import SolverOptions
from mdp_core.postprocess import error_curve
from mdp_core.solve import solve as solve_instance
from tasks.common import instance_of, logger, output_zones, run_stage


def _solve(inst, method: str, params: dict[str, Any], labels: np.ndarray | None):
    """Solve ``inst`` with ``method`` (the released method gets its own arguments), or None if it does not apply."""
    args: dict[str, Any] = dict(params.get("method_args", {})) if method == params.get("method") else {}
    if method == "benders" and labels is not None:
        args["labels"] = labels
    try:
        return solve_instance(inst, method, SolverOptions(**params.get("solver", {})), max_mix=float(params.get("max_mix", 1e-2)), **args)
    except MdpError as exc:  # e.g. laplace on non-geo data, or a refused repair: reported, not fatal
        logger().warning("evaluate: %s at eps=%g skipped: %s", method, inst.epsilon, exc)
        return None


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    inst = instance_of(store, upstream["instance"])
    mech = upstream["mechanism"]
    info = read_json(store.path(mech, "solve.json"))
    z = read_mechanism(store.path(mech, "mechanism.parquet"), inst.n_records, inst.n_outputs)
    labels = None
    if upstream.get("partition") is not None:
        labels = read_table(store.path(upstream["partition"], "partition.parquet"))["subset"].to_numpy(dtype=np.int64)
    released = info["method"]
    rows = [ev.evaluate_mechanism(inst, z, released, lower_bound=info.get("lower_bound"), seconds=info.get("seconds"))]
    methods = [released] + [m for m in params.get("baselines", []) if m != released]
    sweep = [{"factor": 1.0, "epsilon": inst.epsilon, "method": released, "expected_loss": rows[0]["expected_loss"]}]
    for method in methods[1:]:
        sol = _solve(inst, method, params, labels)
        if sol is not None:
            rows.append(ev.evaluate_mechanism(inst, sol.z, method, lower_bound=sol.lower_bound, seconds=sol.seconds))
            sweep.append({"factor": 1.0, "epsilon": inst.epsilon, "method": method, "expected_loss": sol.objective})
    table = ev.evaluation_table(rows)
    write_frame(w.file("evaluation.parquet"), table)

    for f in params.get("eps_factors", []):
        if f == 1.0:
            continue
        scaled = inst.replace(epsilon=inst.epsilon * f)
        for method in methods:
            sol = _solve(scaled, method, params, labels)
            if sol is not None:
                sweep.append({"factor": f, "epsilon": scaled.epsilon, "method": method, "expected_loss": sol.objective})
    figures: list[tuple[str, str]] = []
    utility = pd.DataFrame(sweep).sort_values(["method", "epsilon"], kind="stable").reset_index(drop=True)
    write_frame(w.file("utility_vs_eps.parquet"), utility)
    if utility["epsilon"].nunique() > 1:
        series = {m: g.set_index("epsilon")["expected_loss"] for m, g in utility.groupby("method", sort=True)}
        eps_grid = sorted(utility["epsilon"].unique())
        report.plot_lines(eps_grid, {m: [s.get(e, np.nan) for e in eps_grid] for m, s in series.items()},
                          f"epsilon (per {inst.distance_unit})", "expected utility loss",
                          "Utility vs privacy budget", w.file("utility_vs_eps.png"))
        figures.append(("Utility vs epsilon (Qiu 2024 Fig. 7)", "utility_vs_eps.png"))

    if upstream.get("postprocess") is not None and params.get("counts_eps"):
        out_ids = read_table(store.path(upstream["postprocess"], "microdata.parquet"))["output_id"].to_numpy()
        counts = np.bincount(out_ids, minlength=inst.n_outputs)
        zones = output_zones(inst, labels)
        feats = [np.arange(inst.n_outputs)] + ([zones] if np.unique(zones).size > 1 else []) + [np.zeros(inst.n_outputs, np.int64)]
        curve = error_curve(counts, feats, params["counts_eps"], n_seeds=int(params.get("counts_seeds", 10)), seed=0)
        write_frame(w.file("cbdp_error.parquet"), curve)
        piv = curve.pivot(index="eps_counts", columns="method", values="mae_singletons")
        report.plot_lines(list(piv.index), {m: list(piv[m]) for m in piv.columns}, "eps_counts",
                          "mean abs. error per output count", "Released counts: CBDP vs baselines",
                          w.file("cbdp_error.png"), logy=True)
        figures.append(("Count error vs eps_counts (Fioretto Fig. 5)", "cbdp_error.png"))

    if "trace.parquet" in mech.files:
        trace = read_table(store.path(mech, "trace.parquet"))
        report.plot_bounds(trace, w.file("bounds.png"))
        figures.append(("Benders bounds per iteration", "bounds.png"))
    if labels is not None and inst.coordinate_columns():
        part = read_table(store.path(upstream["partition"], "partition.parquet"))
        report.plot_partition(
            inst.record_points(), labels, part["role"].to_numpy() == "boundary",
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


# What the UI table shows first (the full table is evaluation.parquet).
UI_COLUMNS = [
    "method", "expected_loss", "lower_bound", "gap", "verified", "realised_epsilon", "epsilon", "seconds",
    "n_records", "n_outputs", "n_edges", "lp_rows", "loss_q95", "eps_tight", "adversary_error",
]


def publish_report(store: str, evaluation: ArtifactRef) -> None:
    """Prefect UI artifacts of this run's evaluation: called by the flow on every run, cached stage or
    not (a plain function, not a task: one task run less per release)."""
    s = Store(store)
    table = read_table(s.path(evaluation, "evaluation.parquet"))
    table = table[[c for c in UI_COLUMNS if c in table.columns]]
    records = table.astype(object).where(table.notna(), None).to_dict(orient="records")
    create_table_artifact(key="mdp-evaluation", table=records, description="mdp-release: mechanisms compared")
    md = s.path(evaluation, "report.md").read_text(encoding="utf-8")
    for name in evaluation.files:
        if name.endswith(".png"):
            md = md.replace(f"]({name})", f"]({s.path(evaluation, name).as_uri()})")
    create_markdown_artifact(key="mdp-report", markdown=md, description="mdp-release: evaluation report")


@task(name="evaluate")
def evaluate(
    store: str,
    params: dict[str, Any],
    instance: ArtifactRef,
    mechanism: ArtifactRef,
    partition: ArtifactRef | None = None,
    postprocess: ArtifactRef | None = None,
) -> ArtifactRef:
    upstream = {"instance": instance, "mechanism": mechanism, "partition": partition, "postprocess": postprocess}
    return run_stage("evaluate", __name__, store, params, upstream, _compute)
