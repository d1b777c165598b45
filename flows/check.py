"""``mdp-release check --config F [--json]``: would this release be accepted? Answered in about a second,
without Prefect, a store or a solve.

It validates the config (:func:`flows.config.load_config`), builds the dataset's instance directly (the
ingest stage's :func:`mdp_core.problem.datasets.registry.load`, then the graph stage's neighbour search at the
configured eta), and, with ``[release] microdata``, reads the secret table (:func:`mdp_core.problem.microdata.
read_table`), maps each person to a record as the release will (:func:`mdp_core.problem.microdata.locate`), decides
at the run's own privacy door on the run's own plan (:func:`flows.plan.plan_run`, what ``mdp-release run`` computes
first: check and run agree by construction) and reports:

* the file: rows, format, delimiter, recognised columns, kind of key, bad rows (row numbers);
* people farther than ``max_distance`` from every record (count and row numbers, the first 10);
* snap distances (person to record: mean, 95th percentile, max) -- aggregates of the secret table: they
  are printed to the operator's terminal only and never written to a file by this command;
* the mDP graph's components at the configured eta (sizes; people at records outside the largest) and its
  stretch against ``max_stretch`` (refused as the release refuses them, unless ``allow_unprotected``);
* the population's budget in the config's store (read only): what this release would charge against what is
  spent and the cap;
* what may refuse the run only after its solve (:mod:`mdp_core.release.solve_risk`): records so far from
  their neighbours (eps x spacing) that their rows may be deterministic, a repair above ``max_mix``, each
  a warning with its figure (``after_solve``);
* a suggested instance: the smallest eta that connects the records (:func:`connecting_eta`) and the
  smallest max_distance that covers every person (none when that is beyond the protection radius: a hint then
  points at the rows outside the area), and hints on ``n_records`` / ``n_outputs``;
* planar Laplace applied where people are, for people spread as the prior in the records' cells
  (:mod:`mdp_core.release.people`), and the advisor (:mod:`mdp_core.release.advisor`): the range the release's
  error per person must fall in, for every kind; the solve's time and a point estimate only for the measured
  release class (road data, the distance loss), and it says so elsewhere; whether planar Laplace does better.

Exit 0 when the release would be accepted, 2 with the reasons otherwise. Nothing in the output is a
cell value of the table: counts, row numbers (1-based data rows), column names from the recognised set
and distance statistics only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdp_core.declarations.solver_options import MAX_MIX
from mdp_core.errors import InputError

if TYPE_CHECKING:
    from flows.plan import RunPlan

SECRET_NOTE = (
    "snap-distance statistics are aggregates of the secret table: shown on this terminal only, never "
    "written to a file (do not redirect this output to a shared place)"
)


@dataclass
class Report:
    """What ``check`` found; ``reasons`` non-empty means the release would be refused (exit 2)."""

    config: str
    reasons: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return not self.reasons

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "accepted": self.accepted, "reasons": self.reasons, "hints": self.hints} | (
            self.sections
        )


def round_up(x: float, digits: int = 3) -> float:
    """``x`` rounded up to ``digits`` significant digits (so a suggestion never falls below the value)."""
    if not (math.isfinite(x) and x > 0):
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    value = round(math.ceil(x / step - 1e-9) * step, 12)
    return value if value >= x else round(value + step, 12)


def connecting_eta(points: Any, metric: str) -> float:
    """The smallest eta whose mDP graph on the records ``points`` ((N, D); ``lat, lon`` degrees for
    "haversine", km) is connected: the largest edge b* of a minimum spanning tree (MST) of the complete
    graph weighted by the metric distance.

    Proof: for eta >= b* the MST is a subgraph of the eta-graph, which is therefore connected; for eta < b*,
    deleting the MST's heaviest edge e splits the records into two sides, and every pair across that cut
    is at distance >= w(e) = b* (else swapping it for e would give a lighter spanning tree), hence > eta,
    so the eta-graph has no edge across the cut and is disconnected.

    Computed exactly without the N^2 matrix: the MST of a connected k-nearest-neighbour graph (k doubled
    until connected) has a largest edge u >= b*; every edge of the full MST weighs <= b* <= u, so the MST of
    the graph of all pairs within u (:func:`mdp_core.problem.graph.neighbour_edges`) has the same largest edge b*.
    """
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse import csgraph
    from scipy.spatial import cKDTree

    from mdp_core.problem.graph import neighbour_edges
    from mdp_core.problem.metrics import EARTH_RADIUS_KM, unit_sphere

    pts = np.asarray(points, dtype=np.float64)
    n = pts.shape[0]
    if n <= 1:
        return 0.0
    tree_pts = unit_sphere(pts) if metric == "haversine" else pts
    tree = cKDTree(tree_pts)
    k = min(n - 1, 8)
    while True:
        dist, idx = tree.query(tree_pts, k=k + 1)
        i, j, w = np.repeat(np.arange(n), k), idx[:, 1:].ravel(), dist[:, 1:].ravel()
        if metric == "haversine":
            w = 2 * EARTH_RADIUS_KM * np.arcsin(np.clip(w / (2 * EARTH_RADIUS_KM), 0.0, 1.0))
        g = sp.csr_matrix((np.maximum(w, 1e-300), (i, j)), shape=(n, n))
        if csgraph.connected_components(g, directed=False)[0] == 1 or k == n - 1:
            break
        k = min(n - 1, 2 * k)
    upper = float(csgraph.minimum_spanning_tree(g).data.max())
    edges, d = neighbour_edges(pts, metric, upper * (1 + 1e-9))
    full = sp.csr_matrix((np.maximum(d, 1e-300), (edges[:, 0], edges[:, 1])), shape=(n, n))
    return float(csgraph.minimum_spanning_tree(full).data.max())


def _edges_connecting_eta(n: int, edges: Any, distances: Any) -> float:
    """:func:`connecting_eta` for an instance without coordinates: over its own edge list (inf when even
    all of them leave it disconnected)."""
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse import csgraph

    if n <= 1:
        return 0.0
    g = sp.csr_matrix((np.maximum(distances, 1e-300), (edges[:, 0], edges[:, 1])), shape=(n, n))
    if csgraph.connected_components(g, directed=False)[0] != 1:
        return math.inf
    return float(csgraph.minimum_spanning_tree(g).data.max())


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def run_check(config: str | Path) -> Report:
    """The check of the release configured in ``config`` (see the module docstring)."""
    from flows.config import load_config
    from mdp_core.declarations.dataset_kinds import parameters

    t0 = time.perf_counter()
    rep = Report(str(config))
    try:
        cfg = load_config(config)
    except InputError as exc:
        rep.reasons.append(f"config: {exc}")
        return rep
    table = _check_file(rep, cfg.release)
    built = _check_instance(rep, cfg)
    if built is None:
        return rep
    inst, labels, largest = built
    suggested: dict[str, Any] = {"eta": round_up(rep.sections["graph"]["connecting_eta"])}
    if not math.isfinite(suggested["eta"]):
        suggested["eta"] = None
    if table is not None:
        _check_mapping(rep, table, inst, labels, largest, suggested)
        _out_of_area(rep, suggested, float(cfg.privacy.protection_radius or rep.sections["privacy"]["eta"]))
    if suggested.get("eta") is not None and cfg.release.max_distance is None and "max_distance" in suggested:
        # max_distance defaults to eta: one eta must both connect the records and cover every person
        suggested["eta_if_max_distance_unset"] = max(suggested["eta"], suggested["max_distance"])
    rep.sections["suggested"] = suggested
    run = _run_plan(rep, cfg)
    plan = _check_door(rep, run, inst, table is not None) if run is not None else None
    if run is not None and plan is not None:
        _check_budget(rep, run, plan)
        _against_laplace(rep, inst, plan)
        _advise(rep, cfg, inst)
        _after_solve(rep, cfg, inst)
    unit = inst.distance_unit
    _hints(rep, cfg.dataset.kind, cfg.dataset.params, parameters(cfg.dataset.kind), inst, unit)
    rep.sections["seconds"] = round(time.perf_counter() - t0, 3)
    return rep


def _run_plan(rep: Report, cfg: Any) -> RunPlan | None:
    """The run's plan of ``cfg`` (:func:`flows.plan.plan_run`, what ``mdp-release run`` computes first: the door
    and the budget below decide on it), or None when it cannot be made (a reason: the store root, a file)."""
    from flows.plan import plan_run

    try:
        return plan_run(cfg)
    except (InputError, OSError) as exc:
        rep.reasons.append(str(exc))
        return None


def _check_door(rep: Report, run: RunPlan, inst: Any, has_table: bool) -> Any:
    """The privacy door's verdict (:func:`flows.door.plan_for` of the run's plan, the run's own): its refusals are
    the check's; returns the plan, or None when the secret table could not be read (already a reason)."""
    from flows.door import plan_for

    if run.privacy.microdata is not None and not has_table:
        return None
    try:
        door = plan_for(run, inst)
    except InputError as exc:
        rep.reasons.append(str(exc))
        return None
    rep.reasons.extend(door.plan.reasons)
    # the table's figures behind the refusals (the door's messages carry none); rows and counts: _check_mapping
    rep.hints.extend(d for d in door.plan.details if not d.startswith("microdata:"))
    g = door.plan.guarantee
    rep.sections["privacy"] |= {"protection_radius": g.protection_radius, "stretch_within_radius": g.radius_stretch}
    if g.all_pairs:  # every pair certified in the metric ([solve] all_pairs): one rate, stretch 1 (issue 51)
        rep.sections["privacy"] |= {
            "stretch": g.stretch,
            "metric_epsilon": g.epsilon_per_unit * g.stretch,
            "all_pairs": True,
        }
    return door.plan


def _check_file(rep: Report, r: Any) -> Any:
    """The secret table's description and bad rows (``rep``); returns the read table, or None."""
    import numpy as np

    if r.microdata is None:
        rep.sections["simulated"] = {"n_individuals": r.simulated_individuals}
        return None
    from mdp_core.problem import microdata

    try:
        table = microdata.read_table(r.microdata)
    except InputError as exc:  # on this terminal only: with the row (SecretTableError.detail)
        rep.reasons.append(str(getattr(exc, "detail", exc)))
        return None
    rep.sections["microdata"] = microdata.describe_table(table)
    bad = rep.sections["microdata"]["bad_rows"]
    if bad["count"]:
        rep.hints.append(
            f"microdata: {bad['count']} row(s) with NaN, non-numeric or out-of-range coordinates or no "
            f"key: {microdata.rows_text(np.asarray(bad['rows']) - 1)}"
            + (f" ({bad['count']} in all)" if bad["count"] > len(bad["rows"]) else "")
        )
    return table


def _check_instance(rep: Report, cfg: Any) -> tuple[Any, Any, int] | None:
    """The instance as the ingest and graph stages build it, its mDP graph's components and stretch
    (:func:`mdp_core.release.protection.graph_protection`), refused as the release refuses them; returns (instance,
    component labels, the largest component's label), or None when the dataset does not load."""
    import numpy as np

    from mdp_core.problem.datasets import registry
    from mdp_core.problem.graph import components, neighbour_edges
    from mdp_core.release.protection import graph_protection

    t1 = time.perf_counter()
    try:
        inst = registry.load(cfg.dataset.kind, cfg.dataset.loader_params())  # what the ingest stage loads
    except InputError as exc:
        rep.reasons.append(f"dataset: {exc}")
        return None
    from mdp_core.problem.graph import graph_eta

    eta = graph_eta(cfg.privacy.eta, inst.eta, cfg.privacy.protection_radius)  # as the graph stage does
    epsilon = float(cfg.privacy.epsilon if cfg.privacy.epsilon is not None else inst.epsilon)
    r, unit = cfg.release, inst.distance_unit
    if inst.coordinate_columns():
        pts = inst.record_points()
        edges, dist = neighbour_edges(pts, inst.metric, eta)
        b_star = connecting_eta(pts, inst.metric)
    else:
        keep = inst.distances <= eta
        edges, dist = inst.edges[keep], inst.distances[keep]
        b_star = _edges_connecting_eta(inst.n_records, inst.edges, inst.distances)
    count, labels = components(inst.n_records, edges)
    sizes = np.bincount(labels, minlength=count)
    prot = graph_protection(inst.replace(edges=edges, distances=dist, eta=eta), edges, dist)
    rep.sections["dataset"] = {
        "kind": cfg.dataset.kind,
        "n_records": inst.n_records,
        "n_outputs": inst.n_outputs,
        "metric": inst.metric,
        "distance_unit": unit,
        "seconds": round(time.perf_counter() - t1, 3),
    }
    rep.sections["privacy"] = {
        "epsilon": epsilon,
        "eta": eta,
        "max_distance": float(r.max_distance if r.max_distance is not None else eta),
        "max_distance_is_eta": r.max_distance is None,
        "stretch": prot.stretch,
        "max_stretch": cfg.privacy.max_stretch,
        "metric_epsilon": epsilon * prot.stretch,
    }
    rep.sections["graph"] = {
        "eta": eta,
        "n_edges": int(edges.shape[0]),
        "components": int(count),
        "sizes": sorted((int(s) for s in sizes), reverse=True)[:10],
        "connecting_eta": b_star,
    }
    return inst.replace(edges=edges, distances=dist, eta=eta), labels, int(np.argmax(sizes))


def _check_mapping(rep: Report, table: Any, inst: Any, labels: Any, largest: int, suggested: dict[str, Any]) -> None:
    """People mapped to records as the release maps them: too far, unmappable, snap distances (terminal only)."""
    import numpy as np

    from mdp_core.problem import microdata

    unit, max_distance = inst.distance_unit, rep.sections["privacy"]["max_distance"]
    try:
        loc = microdata.locate(table.frame, inst)
    except InputError as exc:
        rep.reasons.append(str(getattr(exc, "detail", exc)))
        return
    ok = ~loc.bad
    d = loc.distances[ok]
    far = np.flatnonzero(ok & (np.nan_to_num(loc.distances, nan=0.0) > max_distance))
    mapping: dict[str, Any] = {
        "by": loc.by,
        "mapped": int(ok.sum()),
        "unmappable": {"count": int(loc.bad.sum()), "rows": [int(i) + 1 for i in np.flatnonzero(loc.bad)[:10]]},
        "far": {"count": int(far.size), "rows": [int(i) + 1 for i in far[:10]]},
        "records_occupied": int(np.unique(loc.record_ids[ok]).size),
    }
    if d.size and not loc.by.startswith("record"):
        mapping["snap_distance"] = {
            "unit": unit,
            "mean": float(d.mean()),
            "p95": float(np.percentile(d, 95)),
            "max": float(d.max()),
            "note": SECRET_NOTE,
        }
        suggested["max_distance"] = round_up(float(d.max()))
    if d.size:
        rep.sections["graph"]["individuals_outside_largest"] = int((labels[loc.record_ids[ok]] != largest).sum())
    rep.sections["mapping"] = mapping
    if loc.bad.any() and not rep.sections.get("microdata", {}).get("bad_rows", {}).get("count"):
        rep.hints.append(
            f"microdata: {int(loc.bad.sum())} individual(s) {loc.bad_reason}: {microdata.rows_text(np.flatnonzero(loc.bad))}"
        )
    if far.size:
        rep.hints.append(
            f"microdata: {far.size} of {loc.record_ids.size} individual(s) lie farther than max_distance = "
            f"{max_distance:g} {unit} from every record: {microdata.rows_text(far)}"
        )


def _out_of_area(rep: Report, suggested: dict[str, Any], radius: float) -> None:
    """A person beyond the protection radius from every record is outside the released area (a wrong row, or an
    area that does not cover the table), not a reason to raise max_distance and the radius -- and the charge with
    it (issue 50): the suggestion is dropped and a hint points at the rows instead (terminal only)."""
    farthest = suggested.get("max_distance")
    if farthest is None or farthest <= radius:
        return
    del suggested["max_distance"]
    unit = rep.sections["dataset"]["distance_unit"]
    rep.hints.append(
        f"microdata: a person lies up to {farthest:g} {unit} from every record, beyond the protection radius "
        f"{radius:g} {unit}: outside the released area. Check the rows farther than max_distance (listed above) or "
        "the instance's area, rather than raising max_distance and the radius (the charge grows with the radius)"
    )


def _against_laplace(rep: Report, inst: Any, plan: Any) -> None:
    """What an analyst would write instead (issue 40): planar Laplace at the guarantee this release states for
    two records within its protection radius (eps x the stretch there per unit: the requirement the release is
    asked for and charged at, which planar Laplace at that rate meets too; the report's comparison,
    :func:`mdp_core.release.baseline.compared_rate`), continuous and remapped to these
    outputs, beside the outputs' own floor (each person to their nearest output, no privacy: no mechanism on
    these outputs can do better) and the snap to the record, for people spread as the instance's public prior
    in each record's cell within max_distance (:mod:`mdp_core.release.people`, as the report). When the floor alone is above planar Laplace's whole error the
    outputs are too coarse to win: a hint says how many would bring the floor to a quarter of it (the floor
    falls as K^(-1/D) for K outputs spread over D dimensions)."""
    from mdp_core.release import baseline, people

    g = plan.guarantee
    eps = g.epsilon_per_unit * g.radius_stretch
    try:  # for people spread as the prior in each record's cell (issue 50), as the report computes it
        cells = people.cells(inst, rep.sections["privacy"]["max_distance"], per_record=32)
        rows = {r["method"]: r for r in people.people_rows(inst, None, eps, cells)}
        at_records = {r["method"]: r for r in baseline.comparison_rows(inst, eps, samples=64)}[baseline.REMAP]
        dim = baseline.noise_dimension(inst)
    except (InputError, ValueError):
        return
    if not rows:
        return
    unit = inst.distance_unit
    pl, remap, floor = (rows[m]["dist_loss_mean"] for m in (baseline.CONTINUOUS, baseline.REMAP, baseline.FLOOR))
    rep.sections["against_laplace"] = {
        "metric_epsilon": eps,
        "planar_laplace": pl,
        "planar_laplace_remap": remap,
        "nearest_output": floor,
        "planar_laplace_remap_records": at_records["dist_loss_mean"],
        "snap": rows[people.SNAP]["dist_loss_mean"],
        "max_snap": cells.max_snap,
        "unit": unit,
    }
    if floor >= pl / 2:
        k = inst.n_outputs * (floor / (pl / 4)) ** dim
        rep.hints.append(
            f"outputs too coarse to beat planar Laplace: each person's nearest of the {inst.n_outputs} outputs is "
            f"{floor:.3g} {unit} away on average (no privacy at all), against planar Laplace's whole error "
            f"{pl:.3g} {unit} at eps {eps:.4g} per {unit}; about {math.ceil(k):,} outputs would bring that floor to "
            f"a quarter of it (more outputs: a larger LP), or release with planar Laplace"
        )


ADVISED_SECONDS = 600.0  # a proposal aims at a 10-minute solve when the predicted one is over 15 minutes
TOO_LONG_SECONDS = 900.0


def _advise(rep: Report, cfg: Any, inst: Any) -> None:
    """The advisor (issues 40, 50, :mod:`mdp_core.release.advisor`): for every kind, the range the release's
    expected error per person must fall in (the floor from the person; planar Laplace remapped at the records,
    which the optimal mechanism cannot lose to beyond its gap, plus the move to the record) and whether planar
    Laplace at the person does better; for the kinds it has measured runs of (road and grid, the distance loss;
    the prior uniform or uneven: a DP histogram, a file) also the solve's predicted time and a point prediction;
    elsewhere it says it has no prediction. Over 15
    minutes, a proposal of records and outputs for a 10-minute solve (the privacy rows 2 E K grow about as N^3
    when K = N: E as N^2 over one area)."""
    from mdp_core.release import advisor

    a = rep.sections.get("against_laplace")
    if not a:
        return
    rows = 2 * rep.sections["graph"]["n_edges"] * inst.n_outputs
    loss = cfg.dataset.loader_params().get("loss", "distance")
    if loss != "distance":  # the ranges and the runs are for the distance loss: nothing to say of another
        rep.sections["advice"] = {"kind": cfg.dataset.kind, "loss": loss}
        return
    kind = cfg.dataset.kind
    spread = float(inst.prior.max() - inst.prior.min())
    uneven = cfg.release.prior not in ("uniform", "dataset") or spread > 1e-12 * float(inst.prior.max())
    rate = a["metric_epsilon"] * rep.sections["graph"]["eta"]  # eps x eta: the fits' regressor
    load = os.getloadavg()[0]  # the solve's time scales with the machine's load (advisor.load_share)
    p = advisor.predict(
        rows,
        a["planar_laplace_remap_records"],
        a["snap"],
        a["nearest_output"],
        kind,
        uneven=uneven,
        remap_people=a["planar_laplace_remap"],
        rate=rate,
        load=load,
        cores=os.cpu_count() or 1,
    )
    advice: dict[str, Any] = {
        "kind": cfg.dataset.kind,
        "seconds": p.seconds,
        "factor": p.factor,
        "error": p.error,
        "error_low": p.error_low,
        "error_high": p.error_high,
        "error_min": p.error_min,
        "error_max": p.error_max,
        "runs": p.runs,
        "load": load,
        "privacy_rows": rows,
        "laplace_better": advisor.laplace_better(p, a["planar_laplace_remap"], a["planar_laplace"]),
    }
    if p.seconds is not None and p.seconds > TOO_LONG_SECONDS:
        scale = (advisor.rows_within(ADVISED_SECONDS, kind=kind, uneven=uneven, rate=rate, load=load) / rows) ** (1 / 3)
        advice["proposed_records"] = max(2, int(inst.n_records * scale))
        advice["proposed_outputs"] = max(2, int(inst.n_outputs * scale))
    rep.sections["advice"] = advice


def _after_solve(rep: Report, cfg: Any, inst: Any) -> None:
    """What may refuse the run only after its solve (:mod:`mdp_core.release.solve_risk`: deterministic rows, a
    repair above max_mix), with its figures: ``after_solve`` and one warning each (the verdict stays the door's)."""
    from mdp_core.release.solve_risk import risk_lines, solve_risks

    max_mix = float(cfg.solve.repair_settings().get("max_mix", MAX_MIX))
    tolerance = float(cfg.solve.solver_options().primal_tolerance)
    risks = solve_risks(inst, rep.sections["privacy"]["epsilon"], max_mix, tolerance)
    rep.sections["after_solve"] = risks | {"warnings": risk_lines(risks, inst.distance_unit)}


def _check_budget(rep: Report, run: RunPlan, plan: Any) -> None:
    """The population's budget in the run plan's store (read only; nothing is created): what the release
    would charge (the door's plan: eps x stretch x protection radius + counts + prior + the people's mean error) against what is left."""
    r, root = run.privacy, run.store_root
    charge = float(plan.charge)
    budget: dict[str, Any] = {"population": r.population, "charge": charge}
    rep.sections["budget"] = budget
    if r.microdata is None or r.population is None:  # simulated people (a table has its population)
        return
    import hashlib

    from artifacts.private import PrivateStore
    from artifacts.published import published_heads
    from mdp_core.errors import PrivacyError

    heads = published_heads(root, r.population)
    if not (root / "private").is_dir():
        if heads:
            rep.reasons.append(
                f"population {r.population!r} has {len(heads)} published release(s) in {root} but no private ledger: "
                "the run would refuse (mdp-release ledger new-budget records a decision to start again)"
            )
        else:
            try:  # the ledger's own rule on an empty ledger (nothing is created)
                PrivateStore.refuse_unless_fits(r.population, r.max_total_epsilon, [], list(plan.charges().values()))
            except PrivacyError as exc:
                rep.reasons.append(str(exc))
        budget |= {"spent": 0.0, "cap": r.max_total_epsilon}
        return
    probes = {  # keys never charged, one a kind as the run plans them: the whole charge is new
        hashlib.sha256(f"mdp-release check {kind}".encode()).hexdigest(): eps for kind, eps in plan.charges().items()
    }
    try:
        private = PrivateStore(root)
        private.check_published(r.population, heads)
        now = private.budget(r.population)
        budget |= {"spent": now.spent, "cap": now.cap if now.cap is not None else r.max_total_epsilon}
        private.precheck(r.population, probes, r.max_total_epsilon, True)  # the run's own rules
    except PrivacyError as exc:
        rep.reasons.append(f"{exc} (at most: a re-run of an earlier release costs less)")


def _hints(rep: Report, kind: str, given: dict[str, Any], declared: dict[str, Any], inst: Any, unit: str) -> None:
    m = rep.sections.get("mapping")
    if "n_records" in declared:
        n = inst.n_records
        if m and m["far"]["count"]:
            rep.hints.append(
                f"n_records = {n}: more records (dataset.params.n_records) sit closer to the people and shorten "
                "their snap distances; a larger max_distance accepts them as they are (coarser records)"
            )
        elif m:
            rep.hints.append(f"n_records = {n}: the people occupy {m['records_occupied']} of the {n} records")
    if "n_outputs" in declared:
        k = inst.n_outputs
        rep.hints.append(
            f"n_outputs = {k}: the LP has N x K = {inst.n_records * k:,} variables; fewer outputs solve faster, "
            "more give finer released locations"
        )


def render(rep: Report) -> str:
    """The report as text lines for the terminal."""
    s = rep.sections
    out = [f"mdp-release check: {rep.config}"]
    u = _render_instance(s, out)
    _render_data(s, out)
    _render_graph(s, u, out)
    _render_laplace(s, out)
    _render_advice(s, out)
    _render_suggested(s, u, out)
    out += [f"hint: {h}" for h in rep.hints]
    out += [f"warning: {w}" for w in s.get("after_solve", {}).get("warnings", [])]
    if rep.accepted:
        out.append(f"accepted: this release would be accepted (checked in {s.get('seconds', 0):.2f} s)")
    else:
        out += [f"refused: {why}" for why in rep.reasons]
    return "\n".join(out)


def _render_instance(s: dict[str, Any], out: list[str]) -> str:
    """Append the instance and privacy lines; return the distance unit ("" without a dataset section)."""
    if "dataset" in s:
        ds, pv = s["dataset"], s["privacy"]
        u = ds["distance_unit"]
        out.append(
            f"instance: {ds['kind']}, {ds['n_records']} records, {ds['n_outputs']} outputs, {ds['metric']} ({u}); "
            f"built in {ds['seconds']:.2f} s"
        )
        out.append(
            f"privacy: epsilon = {pv['epsilon']:g} per {u}, eta = {pv['eta']:g} {u}, max_distance = "
            f"{pv['max_distance']:g} {u}" + (" (unset: eta)" if pv["max_distance_is_eta"] else "")
        )
    else:
        u = ""
    return u


def _render_data(s: dict[str, Any], out: list[str]) -> None:
    """Append the microdata (or simulated) and mapping lines."""
    if "microdata" in s:
        md = s["microdata"]
        delim = f", {md['delimiter']}-delimited" if md["delimiter"] else ""
        alias = f"; aliases {md['aliases']}" if md["aliases"] else ""
        out.append(
            f"microdata: {md['rows']} rows, {md['format']}{delim}; key {md['key']} ({', '.join(md['key_columns'])}); "
            f"recognised columns {md['columns']}{alias}; {md['other_columns']} other column(s), not used"
        )
    if "simulated" in s:
        out.append(f"microdata: none ({s['simulated']['n_individuals']} simulated individuals, a demonstration)")
    if "mapping" in s:
        mp = s["mapping"]
        out.append(
            f"mapping ({mp['by']}): {mp['mapped']} mapped to {mp['records_occupied']} records; "
            f"{mp['far']['count']} farther than max_distance"
            + (f" (data rows {', '.join(map(str, mp['far']['rows']))})" if mp["far"]["count"] else "")
        )
        if "snap_distance" in mp:
            sd = mp["snap_distance"]
            out.append(
                f"snap distance ({sd['unit']}): mean {_fmt(sd['mean'])}, 95th pct {_fmt(sd['p95'])}, "
                f"max {_fmt(sd['max'])}  [{SECRET_NOTE}]"
            )


def _render_graph(s: dict[str, Any], u: str, out: list[str]) -> None:
    """Append the mDP graph, guarantee and budget lines."""
    if "graph" in s:
        g = s["graph"]
        extra = (
            f"; {g['individuals_outside_largest']} individual(s) at records outside the largest"
            if g["components"] > 1 and "individuals_outside_largest" in g
            else ""
        )
        out.append(
            f"mDP graph at eta = {g['eta']:g} {u}: {g['n_edges']} edges, {g['components']} component(s) "
            f"(sizes {g['sizes']}{', ...' if g['components'] > 10 else ''}){extra}"
        )
    if s.get("privacy", {}).get("all_pairs"):
        pv = s["privacy"]
        out.append(
            f"guarantee: eps {pv['metric_epsilon']:.4g} per {u} for any two records (one rate: every pair of a "
            f"component certified in the data's metric, eps {pv['epsilon']:g} x stretch {pv['stretch']:.4g}; charged "
            f"within the protection radius {pv['protection_radius']:g} {u}; opt out: [solve] all_pairs = false)"
        )
    elif "stretch" in s.get("privacy", {}):
        pv = s["privacy"]
        within = ""
        if "stretch_within_radius" in pv:
            within = (
                f"eps {pv['epsilon'] * pv['stretch_within_radius']:.4g} per {u} for records within the protection "
                f"radius {pv['protection_radius']:g} {u} (stretch {pv['stretch_within_radius']:.4g} there: what the "
                "budget is charged at); "
            )
        out.append(
            f"guarantee: {within}eps {pv['metric_epsilon']:.4g} per {u} in the data's metric over any distance (eps "
            f"{pv['epsilon']:g} x stretch {pv['stretch']:.4g}; max_stretch {pv['max_stretch']:g})"
        )
    if s.get("budget", {}).get("population"):
        b = s["budget"]
        cap = "no cap yet" if b.get("cap") is None else f"cap {b['cap']:g}"
        out.append(
            f"budget: population {b['population']}: this release charges {b['charge']:.4g}; spent so far "
            f"{b.get('spent', 0.0):.4g}, {cap}"
        )


def _render_laplace(s: dict[str, Any], out: list[str]) -> None:
    """Append the comparison with planar Laplace (its expected errors; the release's own after the solve)."""
    if "against_laplace" in s:
        a, u = s["against_laplace"], s["against_laplace"]["unit"]
        rate = "for any two records" if s.get("privacy", {}).get("all_pairs") else "within the protection radius"
        out.append(
            f"against planar Laplace at eps {a['metric_epsilon']:.4g} per {u} (this release's guarantee {rate}), "
            f"applied where the person is: continuous {a['planar_laplace']:.3g} {u}, remapped to "
            f"these outputs {a['planar_laplace_remap']:.3g} {u}; the outputs' own floor (no privacy) "
            f"{a['nearest_output']:.3g} {u}; the move to a record alone {a.get('snap', 0.0):.3g} {u} on average "
            "(people spread as the prior in the records' cells) -- the release's expected error per person is in its "
            "report after the solve"
        )


def _render_advice(s: dict[str, Any], out: list[str]) -> None:
    """Append the advisor's prediction (and proposal) when it made one."""
    from mdp_core.release import advisor

    if "advice" not in s:
        return
    a, u, pl = s["advice"], s["against_laplace"]["unit"], s["against_laplace"]
    if "loss" in a:
        out.append(
            f"predicted: no prediction of the solve's time or the release's error for loss {a['loss']!r} (the "
            "advisor's ranges and measured runs are for the distance loss)"
        )
        return
    if a["seconds"] is None:
        time = (
            f"predicted: no prediction of the solve's time for dataset kind {a['kind']!r} (the advisor has measured "
            f"runs of {' and '.join(sorted(advisor.kinds()))} releases with the distance loss only: bench/advisor_runs.py)"
        )
    else:
        time = (
            f"predicted: the solve takes about {a['seconds'] / 60:.3g} min on 2 cores at load {a['load']:.3g} (between "
            f"{a['seconds'] / a['factor'] / 60:.2g} and {a['seconds'] * a['factor'] / 60:.2g} min: a fit of "
            f"{a['runs']} measured {a['kind']} runs and the machine's load, bench/advisor_runs.py)"
        )
    point = (
        ""
        if a["error"] is None
        else f"about {a['error']:.3g} {u} ({a['error_min']:.3g}-{a['error_max']:.3g}: a fit of the runs), "
    )
    out.append(
        f"{time}; the release's expected error per person {point}between {a['error_low']:.3g} and "
        f"{a['error_high']:.3g} {u} (the floor from the person; planar Laplace remapped at the records plus the move "
        f"to a record, {pl['snap']:.3g} {u} on average), against planar Laplace at the person: "
        f"{pl['planar_laplace_remap']:.3g} {u} remapped to these outputs, {pl['planar_laplace']:.3g} {u} continuous"
    )
    if a.get("laplace_better"):
        out.append(f"advice: {a['laplace_better']}")
    if "proposed_records" in a:
        out.append(
            f"proposed: n_records = {a['proposed_records']} and n_outputs = {a['proposed_outputs']} "
            f"([dataset] params) for a solve of about {ADVISED_SECONDS / 60:.0f} min; or accept the wait"
        )


def _render_suggested(s: dict[str, Any], u: str, out: list[str]) -> None:
    """Append the suggested eta / max_distance line."""
    if "suggested" in s:
        sg = s["suggested"]
        parts = []
        if sg.get("eta") is not None:
            parts.append(f"eta >= {sg['eta']:g} {u} connects every record (largest MST edge)")
        if sg.get("max_distance") is not None:
            parts.append(f"max_distance >= {sg['max_distance']:g} {u} covers every person")
        if sg.get("eta_if_max_distance_unset") is not None:
            parts.append(f"with max_distance unset (= eta): eta >= {sg['eta_if_max_distance_unset']:g} {u}")
        if parts:
            out.append("suggested: " + "; ".join(parts))


CHECK_HELP = (
    "check a release config (and its microdata) in about a second, without Prefect: exit 0 if the release "
    "would be accepted, 2 with the reasons. Prints counts, row numbers and snap-distance statistics -- "
    "aggregates of the secret table, for the operator's terminal only: never redirect them to a file"
)


def add_check_arguments(p: argparse.ArgumentParser) -> None:
    p.description = CHECK_HELP + "."
    p.add_argument("--config", required=True, help="the release config (TOML)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON on stdout (it holds the snap-distance aggregates: terminal only)",
    )


def check_from_cli(args: argparse.Namespace) -> int:
    rep = run_check(args.config)
    if args.json:
        print(json.dumps(rep.as_dict(), indent=2, default=str))
    else:
        print(render(rep))
    sys.stdout.flush()
    return 0 if rep.accepted else 2
