"""Stage ``evaluate``: metrics of the released mechanism and of the baselines, plots, report.

params: {"baselines": [...], "max_mix": float, "method": str, "method_args": {...}, "solver": {...},
         "eps_factors": [...], "counts_eps": [...], "counts_seeds": int}.
The baselines and the eps sweep are solved by separate cached ``evaluate-point`` task runs (on the
flow's task runner); this stage reads their results (it never solves them itself) and writes:
evaluation.parquet (one row per mechanism, ``method`` column), utility_vs_eps.parquet (Qiu 2024 Fig. 7),
cbdp_error.parquet (CBDP vs Laplace vs hierarchical on the released microdata's counts: Fioretto Fig. 5),
planar Laplace at the release's stated guarantee (rows of evaluation.parquet and against_laplace.png; issue 40,
:mod:`mdp_core.release.baseline`), report.md (the officer's page, the technical appendix, the claims block: a
release's report is rendered from its claims by :func:`mdp_core.release.report.render_report`, so the audit can regenerate it) and PNG plots (released.png,
count_noise.png, bounds.png, partition.png for Benders, utility_vs_eps.png, cbdp_error.png; drawn by
:mod:`mdp_core.release.report`). The Prefect table and markdown artifacts are published by
:func:`publish_report` on every run.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core.declarations.methods import needs_partition
from mdp_core.declarations.solver_options import MAX_MIX
from mdp_core.errors import MdpError
from tasks.common import Throttled, instance_of, logger, output_zones, run_stage
from tasks.progress import note

if TYPE_CHECKING:  # numpy, pandas and the solvers are imported where a stage computes, never on a cache hit
    import numpy as np
    import pandas as pd


def _solve(inst, method: str, params: dict[str, Any], labels: np.ndarray | None, step: str = ""):
    """Solve ``inst`` with ``method`` (the released method gets its own arguments), or None if it does not apply."""
    from mdp_core.declarations.solver_options import SolverOptions
    from mdp_core.solvers.solve import solve as solve_instance

    released = method == params.get("method")
    args: dict[str, Any] = dict(params.get("method_args", {})) if released else {}
    if labels is not None and needs_partition(method):
        args["labels"] = labels
    t0 = time.perf_counter()
    # a baseline's lines say so ("evaluate[baseline laplace eps=10]: ... raw FAIL ..." is the baseline's own
    # raw sampling, before its repair, never the release's)
    name = method if released else f"baseline {method}"
    logger().info("evaluate: solving %s at eps=%g %s", name, inst.epsilon, step)
    note(f"solving {name} at eps={inst.epsilon:g}")  # the heartbeat repeats it while the solver is silent
    try:
        sol = solve_instance(
            inst,
            method,
            SolverOptions(**params.get("solver", {})),
            max_mix=float(params.get("max_mix", MAX_MIX)),
            progress=Throttled(f"evaluate[{name} eps={inst.epsilon:g}]"),
            **args,
        )
        logger().info(
            "evaluate: %s at eps=%g done in %.1fs, expected loss %.6g %s",
            name,
            inst.epsilon,
            time.perf_counter() - t0,
            sol.objective,
            step,
        )
        return sol
    except MdpError as exc:  # e.g. laplace on non-geo data, or a refused repair: reported, not fatal
        logger().warning("evaluate: %s at eps=%g skipped: %s", name, inst.epsilon, exc)
        return None


def comparison_solver(method: str, solver: dict[str, Any]) -> dict[str, Any]:
    """``solver`` (``SolverOptions`` settings) for ``method``: with ``all_pairs`` set, a method that cannot
    certify every pair (:attr:`mdp_core.declarations.methods.Method.all_pairs` False) is solved without it -- it
    is a comparison, not a release -- rather than refused; every other method, and any settings without
    ``all_pairs``, unchanged (so their points' cache keys stay)."""
    from mdp_core.declarations.methods import REGISTRY

    takes = method in REGISTRY and REGISTRY[method].all_pairs
    return solver | {"all_pairs": False} if solver.get("all_pairs") and not takes else solver


def point_specs(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The solves the evaluate stage needs besides the released mechanism, in report order: each
    baseline at eps, then every mechanism at eps * factor. Each is its own cached ``evaluate-point``
    task run (params below), so they run in parallel on the flow's task runner."""
    released = params.get("method")
    methods = [released] + [m for m in params.get("baselines", []) if m != released]
    pairs = [(m, 1.0) for m in methods[1:]] + [
        (m, f) for f in params.get("eps_factors", []) if f != 1.0 for m in methods
    ]
    return [
        {
            "method": m,
            "factor": float(f),
            "released": m == released,
            "solver": comparison_solver(m, params.get("solver", {})),
            "max_mix": float(params.get("max_mix", MAX_MIX)),
            "method_args": params.get("method_args", {}) if m == released else {},
        }
        for m, f in pairs
    ]


def _point(inst, spec: dict[str, Any], labels: np.ndarray | None, step: str = "") -> tuple[dict[str, Any], dict | None]:
    """Solve one evaluation point: (the utility-vs-eps entry, the evaluation row or None)."""
    from mdp_core.release import evaluate as ev

    scaled = inst if spec["factor"] == 1.0 else inst.replace(epsilon=inst.epsilon * spec["factor"])
    solve_params = {
        "method": spec["method"] if spec.get("released") else None,
        "method_args": spec.get("method_args", {}),
        "solver": spec.get("solver", {}),
        "max_mix": spec.get("max_mix", MAX_MIX),
    }
    sol = _solve(scaled, spec["method"], solve_params, labels, step)
    entry = {
        "factor": spec["factor"],
        "epsilon": scaled.epsilon,
        "method": spec["method"],
        "expected_loss": None if sol is None else sol.objective,
    }
    row = None
    if sol is not None and spec["factor"] == 1.0:
        row = ev.evaluate_mechanism(inst, sol.z, spec["method"], lower_bound=sol.lower_bound, seconds=sol.seconds)
    return entry, row


def _compute_point(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    import numpy as np
    import pandas as pd

    from mdp_core.problem.io import read_table, write_frame

    inst = instance_of(store, upstream["instance"])
    labels = None
    if upstream.get("partition") is not None:
        labels = read_table(store.path(upstream["partition"], "partition.parquet"))["subset"].to_numpy(dtype=np.int64)
    entry, row = _point(inst, params, labels)
    write_frame(w.file("point.parquet"), pd.DataFrame([entry]))
    if row is not None:
        write_frame(w.file("row.parquet"), pd.DataFrame([row]))
    w.meta.update({"method": params["method"], "factor": params["factor"], "expected_loss": entry["expected_loss"]})


def _read_point(store: Store, ref: ArtifactRef) -> tuple[dict[str, Any], dict | None]:
    from mdp_core.problem.io import read_table

    entry = read_table(store.path(ref, "point.parquet")).astype(object).to_dict(orient="records")[0]
    row = None
    if "row.parquet" in ref.files:
        frame = read_table(store.path(ref, "row.parquet")).astype(object)
        row = frame.where(frame.notna(), None).to_dict(orient="records")[0]
    if entry.get("expected_loss") is not None and entry["expected_loss"] != entry["expected_loss"]:  # NaN
        entry["expected_loss"] = None
    return entry, row


def _compute(
    w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict, points: list[ArtifactRef] | None = None
) -> None:
    import numpy as np

    from mdp_core.problem.io import read_mechanism, read_table, write_published
    from mdp_core.release import evaluate as ev
    from mdp_core.release import report
    from mdp_core.runtime.files import atomic_write, read_json

    inst = instance_of(store, upstream["instance"])
    mech = upstream["mechanism"]
    info = read_json(store.path(mech, "solve.json"))
    z = read_mechanism(store.path(mech, "mechanism.parquet"), inst.n_records, inst.n_outputs)
    released = info["method"]
    specs = point_specs(params | {"method": released})
    if points is None or len(points) != len(specs):
        raise MdpError(
            f"evaluate: needs the results of its {len(specs)} evaluate-point task runs (the flow runs them), "
            f"got {0 if points is None else len(points)}"
        )
    rows = [ev.evaluate_mechanism(inst, z, released, lower_bound=info.get("lower_bound"), seconds=info.get("seconds"))]
    sweep = [{"factor": 1.0, "epsilon": inst.epsilon, "method": released, "expected_loss": rows[0]["expected_loss"]}]
    for entry, row in (_read_point(store, ref) for ref in points):
        if entry["expected_loss"] is None:
            continue  # skipped (does not apply), logged by the point
        sweep.append(entry)
        if row is not None:
            rows.append(row)
    every = (info.get("certificate") or {}).get("pairs") == "all"  # the rate is for any two records (issue 51)
    figures = _against_laplace(store, upstream.get("measure"), inst, z, rows, w.file("against_laplace.png"), every)
    table = ev.evaluation_table(rows)
    write_published(w.file("evaluation.parquet"), table, "evaluation.parquet")
    w.meta["ui_table"] = ui_records(table)  # what publish_report shows in the UI on every run, without pandas

    utility, title = report.utility_curve(sweep, inst.distance_unit, w.file("utility_vs_eps.png"))
    write_published(w.file("utility_vs_eps.parquet"), utility, "utility_vs_eps.parquet")
    figures += [(title, "utility_vs_eps.png")] if title else []
    labels = None
    if upstream.get("partition") is not None:
        part = read_table(store.path(upstream["partition"], "partition.parquet"))
        labels = part["subset"].to_numpy(dtype=np.int64)
    post = upstream.get("measure")
    if post is not None and params.get("counts_eps"):
        out_ids = read_table(store.path(post, "microdata.parquet"))["output_id"].to_numpy()
        curve, title = report.count_error_curve(
            np.bincount(out_ids, minlength=inst.n_outputs),
            output_zones(inst, labels),
            params["counts_eps"],
            int(params.get("counts_seeds", 10)),
            w.file("cbdp_error.png"),
        )
        write_published(w.file("cbdp_error.parquet"), curve, "cbdp_error.parquet")
        figures.append((title, "cbdp_error.png"))
    method_run = ((info.get("extra") or {}).get("auto") or {}).get("method", released)
    if "trace.parquet" in mech.files:
        report.plot_bounds(read_table(store.path(mech, "trace.parquet")), w.file("bounds.png"), method_run)
        figures.append((f"Bounds per iteration ({method_run})", "bounds.png"))
    if labels is not None and needs_partition(method_run) and inst.coordinate_columns():
        report.plot_partition(
            inst.record_points(),
            labels,
            part["role"].to_numpy() == "boundary",
            w.file("partition.png"),
            lonlat=inst.metric == "haversine",
        )
        figures.append(("Partition of the mDP graph", "partition.png"))
    if post is not None:  # a release: report.md is a function of its claims (the audit regenerates it)
        claims = _release_claims(store, post, inst, info, rows[0], w) | _approval(params)
        shown = {p.name for p in w.dir.glob("*.png")}
        md = report.render_report(claims, report.evaluation_markdown(w.file("evaluation.parquet")), shown)
    else:
        md = report.technical_markdown(inst, info, table, figures)

    def _write_report(p: Path) -> None:
        p.write_text(md, encoding="utf-8")

    atomic_write(w.file("report.md"), _write_report)
    w.meta.update({"methods": list(table["method"])})


def _approval(params: dict[str, Any]) -> dict[str, Any]:
    """The officer's approval the report states (the flow's ``params["approval"]``:
    :func:`mdp_core.release.report_approval.approval_claim` of the manifest's record, issue 52); {} without one."""
    return {} if params.get("approval") is None else {"approval": params["approval"]}


def _against_laplace(
    store: Store, post: ArtifactRef | None, inst, z: np.ndarray, rows: list[dict], png: Path, every: bool = False
) -> list[tuple[str, str]]:
    """Issues 40 and 50, the honest comparison, for people: appends to ``rows`` (the released mechanism's first,
    measured from the records) the rows of :func:`mdp_core.release.people.people_rows` -- the release ``z`` from
    where people are (snapping included), the snap alone, planar Laplace applied at the person's own location
    (continuous, remapped to the outputs) and the outputs' floor, for people spread as the public prior in each
    record's cell of the released area (``max_distance`` of the provenance's protection, else eta; public
    geometry and a fixed public seed: the secret table is not read) -- sets the compared rate on the released
    row (``metric_epsilon``), draws the bar figure ``png``; returns [(its title, its name)] (none without
    coordinates; ``every``: the figure's title says the rate is for any two records, issue 51). The rate is what the
    release promises within its protection radius, eps x the stretch there
    (the provenance's ``guarantee``; :func:`mdp_core.release.baseline.compared_rate`): the requirement both
    mechanisms then meet. Without a guarantee (a run that releases nothing) eps x the stretch the graph stage
    measures (:func:`mdp_core.release.protection.graph_protection`, public records only)."""
    from mdp_core.errors import InputError
    from mdp_core.release import baseline, people, report
    from mdp_core.runtime.files import read_json

    prov = read_json(store.path(post, "release_provenance.json")) if post is not None else {}
    stated = baseline.compared_rate(prov.get("guarantee") or {})
    if stated is None:
        from mdp_core.release.protection import graph_protection

        stated = inst.epsilon * graph_protection(inst, inst.edges, inst.distances).stretch
    rows[0]["metric_epsilon"] = float(stated)
    limit = (prov.get("protection") or {}).get("max_distance")
    try:
        cells = people.cells(inst, float(inst.eta if limit is None else limit))
    except InputError:  # no coordinates: nothing to compare
        return []
    added = people.people_rows(inst, z, float(stated), cells)
    rows += added
    if not added or report.plot_against_laplace(rows, people.RELEASE, inst.distance_unit, png, every) is None:
        return []
    by = {r["method"]: r["dist_loss_mean"] for r in added}
    logger().info(
        "evaluate: expected error per person (people spread as the prior, snapping included) at the guarantee's "
        "%.4g per %s: release %.4g (from the records %.4g; the snap alone %.4g), planar Laplace at the person "
        "remapped %.4g, continuous %.4g, nearest output %.4g",
        float(stated),
        inst.distance_unit,
        by[people.RELEASE],
        rows[0]["dist_loss_mean"],
        by[people.SNAP],
        by[baseline.REMAP],
        by[baseline.CONTINUOUS],
        by[baseline.FLOOR],
    )
    return [(dict(report.PAGE_FIGURES)[png.name], png.name)]


def _release_claims(store: Store, post: ArtifactRef, inst, info: dict, row: dict, w: ObjectWriter) -> dict[str, Any]:
    """The claims the release's report is rendered from (:func:`mdp_core.release.report.release_claims`), and the
    officer's page's two plots -- released points over the mDP graph and count noise, from public files only
    (each captioned by :func:`mdp_core.release.report.figure_caption`)."""
    import numpy as np

    from mdp_core.errors import InputError
    from mdp_core.problem.io import read_table
    from mdp_core.release import report
    from mdp_core.runtime.files import read_json

    prov = read_json(store.path(post, "release_provenance.json"))
    agg = read_table(store.path(post, "aggregates.parquet"))
    out = read_table(store.path(post, "microdata.parquet"))["output_id"].to_numpy()
    scale = float(agg.loc[agg["level"] == "output", "noise_scale"].iloc[0])
    inst_meta = {
        "epsilon": inst.epsilon,
        "eta": inst.eta,
        "distance_unit": inst.distance_unit,
        "n_records": inst.n_records,
        "n_outputs": inst.n_outputs,
        "n_edges": inst.n_edges,
        "loss": report.loss_of(inst.provenance),  # the loss the mechanism minimises (issue 40)
    }
    try:
        report.plot_released_points(  # over the mDP graph's edges: the streets the instance has
            inst.output_points(),
            np.bincount(out, minlength=inst.n_outputs),
            w.file("released.png"),
            lonlat=inst.metric == "haversine",
            records=inst.record_points(),
            edges=inst.edges,
        )
    except InputError:  # outputs without coordinates (e.g. words): no map
        pass
    report.plot_noise(scale, w.file("count_noise.png"))
    return report.release_claims(inst_meta, info, prov, row, scale, int((agg["level"] == "zone").sum()))


# What the UI table shows first (the full table is evaluation.parquet).
UI_COLUMNS = [
    "method",
    "expected_loss",
    "lower_bound",
    "gap",
    "verified",
    "realised_epsilon",
    "epsilon",
    "seconds",
    "n_records",
    "n_outputs",
    "n_edges",
    "lp_rows",
    "loss_q95",
    "eps_tight",
    "adversary_error",
]


def _json_value(v: Any) -> Any:
    """A table cell as strict JSON: NaN / None -> None, infinities -> "inf" / "-inf", numpy scalars -> Python."""
    if v is None:
        return None
    if hasattr(v, "item"):  # a numpy scalar
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def ui_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of the evaluation table the UI shows (``UI_COLUMNS``), as strict JSON records."""
    cols = [c for c in UI_COLUMNS if c in table.columns]
    shown = table[cols].astype(object)
    shown = shown.where(shown.notna(), None)  # NaN, NA, NaT -> None
    return [{c: _json_value(v) for c, v in zip(cols, row, strict=True)} for row in shown.itertuples(index=False)]


def embed_images(md: str, folder, names) -> str:
    """``md`` with each ``](name.png)`` image link replaced by a base64 ``data:`` URI, so a browser
    shows the plot in the Prefect UI (which cannot load ``file://`` images)."""
    import base64

    for name in names:
        if name.endswith(".png"):
            data = base64.b64encode((folder / name).read_bytes()).decode("ascii")
            md = md.replace(f"]({name})", f"](data:image/png;base64,{data})")
    return md


def publish_report(store: str, evaluation: ArtifactRef, key: str = "mdp") -> None:
    """Prefect UI artifacts of this run's evaluation (``<key>-evaluation`` table, ``<key>-report``
    markdown with the plots embedded): called by the flow on every run, cached stage or not (a plain
    function, not a task: one task run less per release); each key gets a new version only when its
    content changed (:func:`tasks.progress.publish_artifact`: a cached re-run adds none)."""
    from tasks.progress import publish_artifact

    s = Store(store)
    records = evaluation.meta.get("ui_table")
    if not isinstance(records, list):  # an evaluation stored before the table went into its meta
        from mdp_core.problem.io import read_table

        records = ui_records(read_table(s.path(evaluation, "evaluation.parquet")))
    publish_artifact("table", f"{key}-evaluation", records, f"mdp-release {key}: mechanisms compared")
    md = s.path(evaluation, "report.md").read_text(encoding="utf-8")
    md = embed_images(md, s.root / evaluation.path, evaluation.files)
    publish_artifact("markdown", f"{key}-report", md, f"mdp-release {key}: evaluation report")


@task(name="evaluate-point")
def evaluate_point(
    store: str, params: dict[str, Any], instance: ArtifactRef, partition: ArtifactRef | None = None
) -> ArtifactRef:
    """One solve of the evaluate stage (a baseline, or one point of the utility-vs-eps sweep)."""
    return run_stage(
        "evaluate_point", __name__, store, params, {"instance": instance, "partition": partition}, _compute_point
    )


@task(name="evaluate")
def evaluate(
    store: str,
    params: dict[str, Any],
    instance: ArtifactRef,
    mechanism: ArtifactRef,
    partition: ArtifactRef | None = None,
    measure: ArtifactRef | None = None,
    points: list[ArtifactRef] | None = None,
) -> ArtifactRef:
    """``points``: the :func:`point_specs` solves, done by ``evaluate_point`` task runs (not part of the
    key: they are functions of the same inputs)."""
    upstream = {"instance": instance, "mechanism": mechanism, "partition": partition, "measure": measure}
    return run_stage("evaluate", __name__, store, params, upstream, lambda w, s, p, u: _compute(w, s, p, u, points))
