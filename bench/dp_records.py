#!/usr/bin/env python
"""Records placed where the people are, from a DP density of the table (issue 51, a measurement; no pipeline change).

    nice -n 10 python bench/dp_records.py [--n 250] [--tables 5111,5112] [--eps-density 0.5,1] [--cell-m 150]
        [--priors uniform,dp] [--no-baseline] [--dry] [--gap-rel 1e-2] [--draw 0]

For each made-up table (`bench/rome_people.py --seed S`, 2,000 people, 30 clusters) and a size N (= K):

* **baseline**: the release's records, the road dataset's default sample of N nodes (seed 0, distance loss, eta 1
  km, eps 10 / km, outputs = the records: `suite.load("romeR<N>")`, what a release builds), uniform prior. Its
  solve does not depend on the table: solved once, measured on every table.
* **dp**: a DP histogram of the people over a public partition of the plane, then records chosen from the noisy
  counts by a deterministic public post-processing:

  1. the partition: square cells of ``--cell-m`` metres on the local plane of the road data (``--cell-m 0``:
     one cell per road node, its Voronoi cell); each person counts in the cell of the road node nearest to them
     (great-circle), a function of that person's location alone;
  2. the noise: two-sided geometric (discrete Laplace) of scale 2 / eps_density per cell, i.e. the project's
     relation (`docs/privacy.md`, "Counts and DP prior": one individual's location changes, n public; L1
     sensitivity 2, as `tasks/prior.py` and `mdp_core.release.noise`), eps_density-DP; under add/remove-one
     (sensitivity 1) the same noise is (eps_density / 2)-DP. Seeded numpy noise (the distribution OpenDP samples;
     seeded so the run repeats: a release would draw it with OpenDP), seed [table seed, 1000 eps_density], with
     ``--draw D`` > 0 appended (another draw of the same noise);
  3. post-processing (public: the noisy counts and the road nodes only): each cell's max(noisy, 0) spread evenly
     over its road nodes, then a weighted k-median over the road nodes (the LSCC's distinct nodes, the release's
     candidates): greedy (each step the node that lowers sum_v w_v min_r d(v, r) most, ties to the lower
     osmid; with no gain left, the node farthest from the chosen ones), then Voronoi iterations (each record
     moved to its cluster's weighted medoid among the road nodes, in record order, until nothing moves or 20
     rounds);
  4. outputs = the records (K = N, as the release's default); prior ``uniform`` (1 / N) or ``dp``: the noisy
     mass of each record's cluster + 1, normalised (the pipeline's max(., 0) + 1 post-processing).

  The total budget is eps 10 / km (the mechanism) + eps_density (additive, sequential composition).

Each instance is solved as a release solves it (`auto`, ``--gap-rel``, distance loss, eps 10 / km, eta 1 km) in
this process. One JSON line per (records, prior, table): ``seconds`` and ``cpu_seconds`` (this process and its
children), ``rounds``, ``relative_gap``, ``edges``, ``per_record`` (the instance's objective under its prior) and
``per_record_uniform``, ``per_person`` (km, snapping included, from the true locations, haversine:
bench/per_person.py's ``release``), ``snap`` (mean km to the nearest record), ``eps_total``, ``load``.
``--dry``: the records and their snap distance only, no solve. Road data: ``../shared/data/rome_center``.
Results: bench/HISTORY.md, "Records where the people are".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from per_person import haversine, unit  # noqa: E402
from rome_people import DEFAULT_DATA, R_EARTH_M, people  # noqa: E402
from scipy.spatial import cKDTree  # noqa: E402
from suite import INSTANCES, load  # noqa: E402

from mdp_core.problem.datasets.common import from_points  # noqa: E402
from mdp_core.problem.datasets.road import road_graph  # noqa: E402
from mdp_core.problem.instance import Instance  # noqa: E402
from mdp_core.problem.metrics import haversine_km  # noqa: E402
from mdp_core.release.noise import MOVE_SENSITIVITY  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402


def road_nodes(data: Path) -> tuple[np.ndarray, np.ndarray]:
    """The release's candidate records: (M, 2) lat, lon and (M,) osmid of the largest strongly connected
    component's distinct nodes, in osmid order (as `mdp_core.problem.datasets.road` samples them)."""
    scc = road_graph(nodes=str(data / "nodes.csv"), edges=str(data / "edges.csv")).largest_scc()
    pts = np.column_stack([scc.lat, scc.lon])
    _, first = np.unique(pts, axis=0, return_index=True)
    keep = np.sort(first)
    return pts[keep], scc.osmid[keep]


def node_cells(nodes: np.ndarray, cell_m: float) -> np.ndarray:
    """(M,) the partition's cell of each road node, 0..C-1: squares of ``cell_m`` metres on the local plane
    (east, north of the nodes' mean), or each node its own cell when ``cell_m`` is 0. Public geometry."""
    if cell_m <= 0:
        return np.arange(len(nodes))
    lat0, lon0 = nodes.mean(axis=0)
    ky = np.deg2rad(1.0) * R_EARTH_M
    kx = ky * np.cos(np.deg2rad(lat0))
    ij = np.floor(np.column_stack([(nodes[:, 1] - lon0) * kx, (nodes[:, 0] - lat0) * ky]) / cell_m)
    return np.unique(ij, axis=0, return_inverse=True)[1].reshape(-1)


def noisy_counts(counts: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """(C,) counts + two-sided geometric noise of scale MOVE_SENSITIVITY / eps (P(x) ~ exp(-|x| eps / 2))."""
    q = 1.0 - np.exp(-eps / MOVE_SENSITIVITY)
    return counts + rng.geometric(q, counts.size) - rng.geometric(q, counts.size)


def greedy_kmedian(d: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """(n,) node indices: greedy weighted k-median of demand weights ``w`` (M,) over distances ``d`` (M, M) km,
    ties to the lower index; once no node lowers the cost, the node farthest from the chosen ones."""
    demand = np.flatnonzero(w > 0)
    dd, wd = d[demand], w[demand]
    cur = np.full(demand.size, d.max() + 1.0)
    chosen: list[int] = []
    taken = np.zeros(len(d), dtype=bool)
    for _ in range(n):
        gain = wd @ np.maximum(cur[:, None] - dd, 0.0)
        gain[taken] = -1.0
        best = int(np.argmax(gain))
        if gain[best] <= 0:
            far = d[:, chosen].min(axis=1) if chosen else np.zeros(len(d))
            far[taken] = -1.0
            best = int(np.argmax(far))
        chosen.append(best)
        taken[best] = True
        cur = np.minimum(cur, dd[:, best])
    return np.array(chosen)


def voronoi_refine(d: np.ndarray, w: np.ndarray, rec: np.ndarray, rounds: int = 20) -> np.ndarray:
    """Records moved, in record order, to their cluster's weighted medoid among the free nodes, until none
    moves (at most ``rounds``). d (M, M) km, w (M,) demand, rec (n,) node indices."""
    rec = rec.copy()
    for _ in range(rounds):
        label = d[:, rec].argmin(axis=1)
        moved = False
        for j in range(len(rec)):
            mine = (label == j) & (w > 0)
            if not mine.any():
                continue
            cost = w[mine] @ d[mine]
            cost[np.delete(rec, j)] = np.inf
            best = int(np.argmin(cost))
            if cost[best] < cost[rec[j]] - 1e-12:
                rec[j], moved = best, True
        if not moved:
            break
    return np.sort(rec)


def dp_records(
    nodes: np.ndarray, d: np.ndarray, cell: np.ndarray, table: np.ndarray, n: int, eps: float, seed: list[int]
):
    """(records (n,) node indices sorted, mass (n,) each record's cluster's noisy mass): the DP histogram of
    ``table`` (people (P, 2) lat/lon) over the cells, post-processed (module docstring, steps 1-3); ``seed``:
    the noise's seed sequence."""
    _, near = cKDTree(unit(nodes)).query(unit(table))
    counts = np.bincount(cell[near], minlength=cell.max() + 1)
    noisy = noisy_counts(counts, eps, np.random.default_rng(seed))
    size = np.bincount(cell)
    w = np.maximum(noisy, 0)[cell] / size[cell]
    rec = voronoi_refine(d, w, greedy_kmedian(d, w, n))
    mass = np.bincount(d[:, rec].argmin(axis=1), w, minlength=n)
    return rec, mass


def instance_on(nodes: np.ndarray, rec: np.ndarray, prior: np.ndarray | None, like: Instance) -> Instance:
    """The release-class instance (distance loss, ``like``'s eta and eps) on road nodes ``rec``, outputs = records."""
    pts = nodes[rec]
    return from_points(
        pts, "haversine", like.eta, like.epsilon, haversine_km(pts, pts), prior, output_record_ids=np.arange(len(rec))
    )


def measure(inst: Instance, tables: dict[int, np.ndarray], head: dict, gap_rel: float, dry: bool) -> None:
    """Solve ``inst`` as a release (`auto`) and print one JSON line per table (module docstring)."""
    rec, out = inst.record_points(), inst.output_points()
    head = head | {"N": inst.n_records, "K": inst.n_outputs, "edges": int(len(inst.edges))}
    sol = None
    if not dry:
        load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), _cpu()
        sol = solve(inst, "auto", gap_rel=gap_rel)
        head |= {
            "seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(_cpu() - c0, 1),
            "rounds": int(sol.iterations),
            "relative_gap": None if sol.gap is None else sol.gap / sol.objective,
            "per_record": float(inst.prior @ (sol.z * inst.costs).sum(axis=1)),
            "per_record_uniform": float((sol.z * inst.costs).sum(axis=1).mean()),
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
        }
    for seed, table in tables.items():
        if head.get("table") not in (None, seed):
            continue
        _, snap = cKDTree(unit(rec)).query(unit(table))
        line = head | {"table": seed, "snap": float(haversine(table, rec).min(axis=1).mean())}
        if sol is not None:
            line["per_person"] = float((sol.z[snap] * haversine(table, out)).sum(axis=1).mean())
        print(json.dumps(line), flush=True)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (a large solve runs in one)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=250, help="records = outputs")
    ap.add_argument("--tables", default="5111,5112", help="rome_people seeds (2,000 people, 30 clusters)")
    ap.add_argument("--eps-density", default="0.5,1")
    ap.add_argument("--cell-m", type=float, default=150.0, help="cell side in metres (0: one cell per road node)")
    ap.add_argument("--priors", default="uniform,dp")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--dry", action="store_true", help="records and snap only, no solve")
    ap.add_argument("--gap-rel", type=float, default=1e-2)
    ap.add_argument("--draw", type=int, default=0, help="another noise draw (0: seed [table, 1000 eps])")
    args = ap.parse_args()
    name = f"romeR{args.n}"
    INSTANCES.setdefault(name, (name, "road", dict(n_records=args.n, n_outputs=args.n, eta=1.0, epsilon=10.0)))
    INSTANCES[name][2]["loss"] = "distance"
    base = load(name)
    tables = {
        int(s): people(DEFAULT_DATA, 2000, int(s))[["lat", "lon"]].to_numpy(float) for s in args.tables.split(",")
    }
    head = {"records": "baseline", "prior": "uniform", "eps_density": 0.0, "eps_total": "10/km"}
    if not args.no_baseline:
        measure(base, tables, head, args.gap_rel, args.dry)
    nodes, _ = road_nodes(DEFAULT_DATA)
    d = haversine_km(nodes, nodes)
    cell = node_cells(nodes, args.cell_m)
    for seed, table in tables.items():
        for eps in (float(e) for e in args.eps_density.split(",")):
            draw = [seed, int(round(eps * 1000))] + ([args.draw] if args.draw else [])
            rec, mass = dp_records(nodes, d, cell, table, args.n, eps, draw)
            for prior in args.priors.split(","):
                p = None if prior == "uniform" else mass + 1.0
                head = {"records": "dp", "cell_m": args.cell_m, "cells": int(cell.max() + 1), "prior": prior}
                head |= {"eps_density": eps, "eps_total": f"10/km + {eps}", "table": seed, "draw": args.draw}
                measure(instance_on(nodes, rec, p, base), tables, head, args.gap_rel, args.dry)


if __name__ == "__main__":
    main()
