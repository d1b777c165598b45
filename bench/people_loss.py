"""The "people" loss and outputs at the cells' medians against the "distance" loss (issue 51): what people get.

    nice -n 10 python bench/people_loss.py [--instance romeR250] [--tables 5111,5112] [--max-distance 1.0]
        [--gap-rel 1e-2] [--losses distance,people] [--outputs records|medians|both]

The distance loss is c_ik = d(r_i, o_k), the error of the record. The people loss (:func:`people_costs`) is
c_ik = the mean over the people of record i's cell (:func:`mdp_core.release.people.cells`: the streets nearer to
record i than to any other, within ``--max-distance``; public geometry) of d(x, o_k): sum_i p_i sum_k z_ik c_ik
is then the per-person error, snapping included, of people spread as the prior (the report's
``release_per_person``), and an LP with these costs minimises it. The privacy rows are the same, so is the
guarantee. ``--outputs medians`` moves each output to its record's cell's geometric median (:func:`cell_medians`,
public geometry); ``both`` keeps the records' outputs and adds the medians (K doubles). Each loss is solved as a
release solves the metric loss (rowgen on the support, ``support_tau`` 1e-5, at ``--gap-rel``), one after the
other, in this process.

One JSON line per loss: ``seconds``, ``rounds``, ``relative_gap``, ``lower_bound`` (of the loss solved),
``model`` (the per-person error of the people spread as the prior, the certified mechanism: release_per_person),
``record`` (sum_i p_i sum_k z_ik d(r_i, o_k)) and, per made-up table (``bench/rome_people.py --seed S``, 2,000
people, made in memory), ``true_S``: the mean over its people of sum_k z_{r(p) k} d(p, o_k), r(p) the nearest
record by great-circle distance (bench/per_person.py's method), and ``snap_S``. ``load``: the 1-minute load
average before and after the solve. Road instances read ``../shared/data/rome_center``. Results:
bench/HISTORY.md, "What people get: the people loss".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.spatial import cKDTree

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from per_person import haversine, unit  # noqa: E402
from rome_people import DEFAULT_DATA, people  # noqa: E402
from suite import load  # noqa: E402

from mdp_core.problem.instance import Instance  # noqa: E402
from mdp_core.problem.metrics import haversine_rows_km, pairwise  # noqa: E402
from mdp_core.release import people as people_model  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402

_CHUNK = 1 << 22  # person-to-output distances per block


def people_costs(instance: Instance, c: people_model.Cells) -> np.ndarray:
    """(N, K) c_ik = the weighted mean over the people of cell i (``c``) of d(x, o_k), in the metric's unit."""
    n = instance.n_records
    total = np.bincount(c.record, c.weight, minlength=n)
    mean = sp.csr_matrix((c.weight / total[c.record], (c.record, np.arange(c.record.size))), shape=(n, c.record.size))
    out = people_model.space_points(instance, instance.output_points())
    costs = np.zeros((n, instance.n_outputs))
    step = max(1, _CHUNK // max(instance.n_outputs, 1))
    for a in range(0, c.record.size, step):
        costs += mean[:, a : a + step] @ people_model.metric_distance(instance, c.space[a : a + step], out)
    return costs


def cell_medians(instance: Instance, c: people_model.Cells, iterations: int = 50) -> np.ndarray:
    """(N, 2) lat, lon of each cell's people-weighted geometric median (Weiszfeld's iteration from the weighted
    centroid in the 3-D chord space, projected back onto the sphere): the point nearest on average to the
    cell's people. Road (haversine) instances only."""
    n = instance.n_records

    def mean(v: np.ndarray) -> np.ndarray:
        total = np.bincount(c.record, v, minlength=n)
        return (
            np.column_stack([np.bincount(c.record, v * c.space[:, j], minlength=n) for j in range(3)])
            / (total[:, None])
        )

    m = mean(c.weight)
    for _ in range(iterations):
        m = mean(c.weight / np.maximum(np.linalg.norm(c.space - m[c.record], axis=1), 1e-9))
    m = m / np.linalg.norm(m, axis=1, keepdims=True)
    return np.column_stack([np.degrees(np.arcsin(np.clip(m[:, 2], -1, 1))), np.degrees(np.arctan2(m[:, 1], m[:, 0]))])


def true_error(inst: Instance, z: np.ndarray, table: np.ndarray) -> tuple[float, float]:
    """(release, snap) km per person of ``table`` (n, 2) lat/lon: snapped to the nearest record (great-circle)."""
    rec, out = inst.record_points(), inst.output_points()
    _, snap = cKDTree(unit(rec)).query(unit(table))
    release = float((z[snap] * haversine(table, out)).sum(axis=1).mean())
    return release, float(haversine_rows_km(table, rec[snap]).mean())


def with_outputs(inst: Instance, c: people_model.Cells, outputs: str) -> Instance:
    """The instance with its outputs at the records (as built), at their cells' medians, or both."""
    if outputs == "records":
        return inst
    med = cell_medians(inst, c)[inst.outputs["record_id"].to_numpy()]
    if outputs == "both":
        med = np.vstack([inst.output_points(), med])
    frame = pd.DataFrame({"lat": med[:, 0], "lon": med[:, 1]})
    return inst.replace(outputs=frame, costs=pairwise(inst.metric, inst.record_points(), med))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="romeR250")
    ap.add_argument("--tables", default="5111,5112")
    ap.add_argument("--max-distance", type=float, default=1.0)
    ap.add_argument("--gap-rel", type=float, default=1e-2)
    ap.add_argument("--losses", default="distance,people")
    ap.add_argument("--outputs", default="records", choices=("records", "medians", "both"))
    args = ap.parse_args()
    inst = load(args.instance)
    t0 = time.perf_counter()
    c = people_model.cells(inst, args.max_distance)
    inst = with_outputs(inst, c, args.outputs)
    cost = people_costs(inst, c)
    build = time.perf_counter() - t0
    tables = {s: people(DEFAULT_DATA, 2000, int(s))[["lat", "lon"]].to_numpy(float) for s in args.tables.split(",")}
    for loss in args.losses.split(","):
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        sol = solve(
            inst if loss == "distance" else inst.replace(costs=cost), "rowgen", gap_rel=args.gap_rel, support_tau=1e-5
        )
        line = {
            "instance": args.instance,
            "loss": loss,
            "outputs": args.outputs,
            "N": inst.n_records,
            "K": inst.n_outputs,
            "max_distance": args.max_distance,
            "people_points": int(c.record.size),
            "people_cost_seconds": round(build, 1),
            "seconds": round(time.perf_counter() - t0, 1),
            "rounds": sol.iterations,
            "relative_gap": None if sol.gap is None else sol.gap / sol.objective,
            "lower_bound": sol.lower_bound,
            "model": float(inst.prior @ (sol.z * cost).sum(axis=1)),
            "record": float(inst.prior @ (sol.z * inst.costs).sum(axis=1)),
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
        }
        for s, table in tables.items():
            line[f"true_{s}"], line[f"snap_{s}"] = true_error(inst, sol.z, table)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
