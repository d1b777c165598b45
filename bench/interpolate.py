"""People between records (issue 50): the interpolated mechanism (:mod:`mdp_core.release.interpolate`) against
snapping and planar Laplace, per person, on the same tables.

    python bench/interpolate.py [--tables helsinki,rome300,grid144] [--ratios 2.2,2.5,3] [--pairs 10000] [--refine]

For each table, at the people's rate eps (the instance's eps per km):

* ``snap``: the records' mechanism solved at eps, each person moved to the nearest record (people's guarantee
  eps x (d + 2 x max_snap), ``snap_guarantee_at_0`` its factor's log for two people at the same point);
* ``interp_r<ratio>``: the records solved at eps_r = eps / (ratio x kappa x (1 + 2e-6)), the triangulation
  thinned until every triangle's L_T <= ratio x eps_r (:func:`~mdp_core.release.interpolate.thin`), so the
  certified rate L <= eps for any two coordinates of the area; ``unused`` the records left out of the mesh
  (``--refine``: when L < 0.97 eps, once more at eps_r x 0.99 eps / L, thinned to L <= eps: ``_refined``);
* ``planar_laplace`` (2 / eps) and ``planar_laplace_remap`` (to the nearest output) at the person's location.

Per-person errors (km, mean from where the person is): ``people`` -- spread as the prior, uniform in each
record's cell as :mod:`mdp_core.release.people` samples them (along the streets on a road network);
``table`` -- a simulated table of people (Helsinki: the example's 300 made-up people; Rome: bench/rome_people.py,
seed 4711, 2,000 people; grid: 2,000 uniform people, seed 7), each snapped to the nearest record within
max_distance. Then the independent pair check: ``--pairs`` pairs of the area's box (half independent, half
within 50 m), each p_x computed in full, no pair above L d + tolerance. One JSON line per (table, mechanism).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mdp_core.problem.datasets import registry  # noqa: E402
from mdp_core.problem.instance import Instance  # noqa: E402
from mdp_core.problem.metrics import EARTH_RADIUS_KM, haversine_km  # noqa: E402
from mdp_core.release import interpolate as ip  # noqa: E402
from mdp_core.release import people  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402

ROME = REPO.parent / "shared" / "data" / "rome_center"
TABLES: dict[str, tuple[str, dict[str, Any], float]] = {  # name -> (kind, loader parameters, max_distance km)
    "helsinki": ("road", dict(pbf="helsinki", n_records=120, n_outputs=40, epsilon=10.0, eta=0.5), 0.5),
    "rome300": (
        "road",
        dict(
            nodes=str(ROME / "nodes.csv"),
            edges=str(ROME / "edges.csv"),
            n_records=300,
            n_outputs=100,
            epsilon=10.0,
            eta=1.0,
            loss="distance",
        ),
        0.5,
    ),
    "grid144": ("grid", dict(rows=12, cols=12, n_outputs=48, epsilon=2.0), 0.5 * 2**0.5),
}


def latlon(space: np.ndarray) -> np.ndarray:
    """(n, 2) lat/lon degrees of points on the sphere of radius EARTH_RADIUS_KM (people's ``space``)."""
    lat = np.degrees(np.arcsin(np.clip(space[:, 2] / EARTH_RADIUS_KM, -1.0, 1.0)))
    return np.column_stack([lat, np.degrees(np.arctan2(space[:, 1], space[:, 0]))])


def dist(inst: Instance, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) metric distances (km) between coordinates a (n, 2) and b (m, 2)."""
    from scipy.spatial.distance import cdist

    return haversine_km(a, b) if inst.metric == "haversine" else cdist(a, b)


def table_people(name: str, inst: Instance, max_distance: float) -> np.ndarray:
    """(n, 2) a simulated table's people (coordinates), those within max_distance of a record."""
    if name == "helsinki":
        pts = pd.read_csv(REPO / "flows" / "examples" / "helsinki-people.csv")[["lat", "lon"]].to_numpy()
    elif name.startswith("rome"):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "people.csv"
            cmd = [sys.executable, str(REPO / "bench" / "rome_people.py"), "--seed", "4711", "--n", "2000"]
            subprocess.run([*cmd, "--data", str(ROME), "--out", str(out)], check=True, capture_output=True)
            pts = pd.read_csv(out)[["lat", "lon"]].to_numpy()
    else:
        rec = inst.record_points()
        pts = np.random.default_rng(7).uniform(rec.min(0) - 0.5, rec.max(0) + 0.5, size=(2000, 2))
    near = np.min(dist(inst, pts, inst.record_points()), axis=1) <= max_distance
    return pts[near]


def errors(inst: Instance, pts: np.ndarray, p: np.ndarray) -> np.ndarray:
    """(n,) expected distance from each person (n, 2) to the output drawn from their row p (n, K)."""
    return np.einsum("nk,nk->n", p, dist(inst, pts, inst.output_points()))


def snap_rows(inst: Instance, z: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """(n, K) the rows of the records nearest to each person (snapping)."""
    _, r = cKDTree(people.space_points(inst, inst.record_points())).query(people.space_points(inst, pts))
    return z[r]


def measure(inst: Instance, mesh: ip.Mesh | None, z: np.ndarray, cells: people.Cells, pts: np.ndarray) -> dict:
    """Per-person error for people spread as the prior (``cells``) and for the table ``pts``."""
    where = latlon(cells.space) if inst.metric == "haversine" else cells.space
    rows = (lambda x: snap_rows(inst, z, x)) if mesh is None else (lambda x: ip.mechanism(mesh, z, x))
    values = np.concatenate(
        [errors(inst, where[a : a + 4096], rows(where[a : a + 4096])) for a in range(0, len(where), 4096)]
    )
    mean, se2 = people.cell_means(cells, values, inst.n_records)
    return {
        "people": float(inst.prior @ mean),
        "people_se": float(np.sqrt((inst.prior**2) @ se2)),
        "table_error": float(errors(inst, pts, rows(pts)).mean()),
    }


def baselines(inst: Instance, cells: people.Cells, pts: np.ndarray, eps: float) -> dict:
    """Planar Laplace at eps from the person's location: continuous (2 / eps), remapped (people and table)."""
    mean, _ = people.cell_means(cells, people.remap_values(inst, cells, eps), inst.n_records)
    space = people.space_points(inst, pts)
    tc = people.Cells(space, np.zeros(len(pts), dtype=np.int64), np.ones(len(pts)), 1, 0.0, "table", 0)
    remap_table = people.remap_values(inst, tc, eps)
    return {
        "planar_laplace": 2.0 / eps,
        "planar_laplace_remap": float(inst.prior @ mean),
        "planar_laplace_remap_table": float(remap_table.mean()),
    }


def run_table(name: str, ratios: list[float], n_pairs: int, refine: bool) -> None:
    """Every JSON line of one table."""
    kind, params, max_distance = TABLES[name]
    inst = registry.load(kind, params)
    eps = inst.epsilon
    cells = people.cells(inst, max_distance)
    pts = table_people(name, inst, max_distance)
    head = {"table": name, "N": inst.n_records, "K": inst.n_outputs, "eps": eps, "max_distance": max_distance}
    head |= {"table_people": len(pts), "people_points": int(cells.record.size)}
    print(json.dumps(head | baselines(inst, cells, pts, eps) | {"mechanism": "planar_laplace"}), flush=True)
    t0 = time.perf_counter()
    z = solve(inst, "auto", gap_rel=1e-2).z
    line = head | {"mechanism": "snap", "eps_records": eps, "seconds": round(time.perf_counter() - t0, 1)}
    line |= {"max_snap": cells.max_snap, "snap_guarantee_at_0": 2 * eps * cells.max_snap}
    print(json.dumps(line | measure(inst, None, z, cells, pts)), flush=True)
    kappa = ip.plane(inst, max_distance).kappa
    for ratio in ratios:
        eps_r = eps / (ratio * kappa * (1 + 2 * ip.ROUNDING))
        rate = interpolated(inst, head, f"interp_r{ratio:g}", eps_r, max_distance, cells, pts, n_pairs)
        if refine and rate < 0.97 * eps:  # the rate did not bind: records at a higher rate, thinned to eps
            eps_r *= 0.99 * eps / rate
            interpolated(inst, head, f"interp_r{ratio:g}_refined", eps_r, max_distance, cells, pts, n_pairs)


def interpolated(
    inst: Instance,
    head: dict,
    name: str,
    eps_r: float,
    max_distance: float,
    cells: people.Cells,
    pts: np.ndarray,
    n_pairs: int,
) -> float:
    """The records solved at ``eps_r``, thinned until every L_T x kappa <= eps (the instance's), certified,
    checked on ``n_pairs`` pairs and measured: prints one line, returns the certified rate."""
    kappa = ip.plane(inst, max_distance).kappa
    sub = inst.replace(epsilon=eps_r)
    t0 = time.perf_counter()
    zr = solve(sub, "auto", gap_rel=1e-2).z
    mesh = ip.thin(sub, zr, max_distance, inst.epsilon / (kappa * (1 + 2 * ip.ROUNDING) * eps_r))
    cert = ip.certify(mesh, zr)
    a, b = ip.random_pairs(mesh.pl, n_pairs, np.random.default_rng(2050), 0.05)
    check = ip.pair_check(mesh, zr, cert, a, b)
    line = head | {"mechanism": name, "eps_records": eps_r, "certified_rate": cert.rate}
    line |= {"certified_within_eps": cert.rate <= inst.epsilon}
    line |= {"kappa": cert.kappa, "unused": mesh.unused, "dropped_outputs": cert.dropped_outputs}
    line |= {"pairs": check.pairs, "violations": check.violations, "max_excess": check.max_excess}
    line |= {"max_realised_rate": check.max_realised, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(line | measure(inst, mesh, zr, cells, pts)), flush=True)
    return cert.rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--ratios", default="2.2,2.5,3")
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--refine", action="store_true", help="re-solve once at a higher eps_r when L < 0.97 eps")
    args = ap.parse_args()
    for name in args.tables.split(","):
        run_table(name, [float(r) for r in args.ratios.split(",")], args.pairs, args.refine)


if __name__ == "__main__":
    main()
