"""The runs `mdp-release check`'s advisor is fitted on, across kinds, sizes and priors (issue 50): each instance
built as a release builds it (the kind's release defaults: the distance loss), its prior uniform or a DP
histogram of seeded made-up people (``max(count + Laplace(2 / eps_prior), 0) + 1``, as tasks/prior.py), solved as
a release solves it (``auto``, gap 1e-2), its error per person from public geometry (mdp_core.release.people).

    nice -n 10 python bench/advisor_runs.py [--runs helsinki,rome200x60,grid10x10,...] [--seed 0]

One JSON line per run: ``run, kind, prior, seed, N, K, edges, privacy_rows`` (2 E K), ``seconds`` (the solve's
wall, in its child process), ``status, rounds``, ``release_records`` (the mechanism's expected distance per
record), ``release_people`` (per person, snapping included), ``remap_records`` / ``remap_people`` (planar
Laplace at 10 / km remapped to the outputs, applied at the records / at the person), ``snap``, ``floor`` (the person's nearest output), ``load`` (the 1-minute load average before).
People: the Helsinki example's table; central Rome's (`bench/rome_people.py`, seed 4711, 1,500 people);
elsewhere Gaussian clusters around seeded records (10 clusters, spread a third of eta). The lines are
mdp_core/release/advisor.py's ``MEASURED`` (bench/README.md, "The advisor's runs").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from mdp_core.declarations.dataset_kinds import with_release_defaults  # noqa: E402
from mdp_core.problem.datasets import registry  # noqa: E402
from mdp_core.problem.microdata import histogram, map_individuals  # noqa: E402
from mdp_core.release import baseline, people  # noqa: E402
from mdp_core.solvers.mechanisms import record_output_distances  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402

ROME = REPO.parent / "shared" / "data" / "rome_center"
ROME_TABLES = {"nodes": str(ROME / "nodes.csv"), "edges": str(ROME / "edges.csv")}
EPS_PRIOR = 0.5

# name -> (kind, loader params, max_distance, people: "helsinki" | "rome" | "clusters" | "mixture", eps per unit)
RUNS: dict[str, tuple[str, dict[str, Any], float, str, float]] = {
    "helsinki": ("road", {"pbf": "helsinki", "n_records": 120, "n_outputs": 40, "eta": 0.5}, 0.5, "helsinki", 10.0),
    "rome200x60": ("road", ROME_TABLES | {"n_records": 200, "n_outputs": 60, "eta": 1.0}, 0.7, "rome", 10.0),
    "rome300x100": ("road", ROME_TABLES | {"n_records": 300, "n_outputs": 100, "eta": 1.0}, 0.7, "rome", 10.0),
    "grid10x10": ("grid", {"rows": 10, "cols": 10, "n_outputs": 50, "eta": 2.0}, 0.75, "clusters", 10.0),
    "grid20x25": ("grid", {"rows": 20, "cols": 25, "n_outputs": 100, "eta": 2.0}, 0.75, "clusters", 10.0),
    "grid30x30": ("grid", {"rows": 30, "cols": 30, "n_outputs": 200, "eta": 2.0}, 0.75, "clusters", 10.0),
    # city-wide grids at a low rate: 1.5 km cells, every cell an output, eta 3 km, eps 2 per km (issue 50)
    "city10x12": ("grid", {"rows": 10, "cols": 12, "cell_km": 1.5, "n_outputs": 120, "eta": 3.0}, 1.1, "clusters", 2.0),
    "city14x18": ("grid", {"rows": 14, "cols": 18, "cell_km": 1.5, "n_outputs": 252, "eta": 3.0}, 1.1, "clusters", 2.0),
    # vectors (the points kind, Euclidean): a seeded uniform universe in a cube of 0.3 vectors per unit^3
    "vec60": ("points", {"n_vectors": 60, "dim": 3, "n_outputs": 60, "eta": 3.0}, 2.5, "mixture", 1.5),
    "vec100": ("points", {"n_vectors": 100, "dim": 3, "n_outputs": 100, "eta": 3.0}, 2.5, "mixture", 1.5),
    "vec130": ("points", {"n_vectors": 130, "dim": 3, "n_outputs": 130, "eta": 3.0}, 2.5, "mixture", 1.5),
}
VECTOR_DENSITY = 0.3  # universe vectors per unit^3


def _universe(params: dict[str, Any], seed: int, where: Path) -> dict[str, Any]:
    """A vector run's loader params: its universe (``n_vectors`` uniform in a cube of :data:`VECTOR_DENSITY`,
    seeded) written to ``where`` as the points kind's ``path``."""
    n, dim = params["n_vectors"], params["dim"]
    side = (n / VECTOR_DENSITY) ** (1 / dim)
    pts = np.random.default_rng(seed + 1).uniform(0.0, side, size=(n, dim))
    path = where / f"universe-{n}-{dim}-{seed}.csv"
    pd.DataFrame(pts, columns=[f"x{j}" for j in range(dim)]).to_csv(path, index=False)
    rest = {k: v for k, v in params.items() if k not in ("n_vectors", "dim")}
    return rest | {"path": str(path)}


def _people(inst, which: str, seed: int) -> pd.DataFrame:
    """The made-up people of a run (lat, lon or x0, x1)."""
    if which == "helsinki":
        return pd.read_csv(REPO / "flows" / "examples" / "helsinki-people.csv")[["lat", "lon"]]
    if which == "rome":
        from rome_people import people as rome

        return rome(ROME, 1500, 4711)[["lat", "lon"]]
    rng = np.random.default_rng(seed)
    rec = inst.record_points()
    if which == "mixture":  # 6 Gaussians (sd 0.5-1.5) inside the universe's box
        lo, hi = rec.min(axis=0), rec.max(axis=0)
        mid = rng.uniform(lo + 0.15 * (hi - lo), hi - 0.15 * (hi - lo), size=(6, rec.shape[1]))
        k = rng.choice(6, size=2000, p=rng.dirichlet(np.full(6, 2.0)))
        pts = mid[k] + rng.normal(size=(2000, rec.shape[1])) * rng.uniform(0.5, 1.5, size=6)[k, None]
        return pd.DataFrame(np.clip(pts, lo, hi), columns=inst.coordinate_columns())
    centres = rec[rng.choice(rec.shape[0], size=10, replace=False)]
    pts = centres[rng.integers(0, 10, size=2000)] + rng.normal(scale=inst.eta / 3, size=(2000, rec.shape[1]))
    lo, hi = rec.min(axis=0), rec.max(axis=0)
    return pd.DataFrame(np.clip(pts, lo, hi), columns=inst.coordinate_columns())


def _dp_prior(inst, table: pd.DataFrame, max_distance: float, seed: int) -> np.ndarray:
    """A DP histogram of the people, post-processed as tasks/prior.py does (seeded here: a bench, not a release)."""
    ids = map_individuals(table, inst, max_distance).record_ids
    noisy = histogram(ids, inst.n_records) + np.random.default_rng(seed).laplace(
        scale=2 / EPS_PRIOR, size=inst.n_records
    )
    p = np.maximum(np.round(noisy), 0) + 1.0
    return p / p.sum()


def run(name: str, prior: str, seed: int) -> dict[str, Any]:
    """One run's line (module docstring)."""
    kind, params, limit, who, eps = RUNS[name]
    if kind == "points":
        params = _universe(params, seed, Path(tempfile.mkdtemp(prefix="advisor-runs-")))
    inst = registry.load(kind, with_release_defaults(kind, params | {"epsilon": eps}))
    if prior == "dp":
        inst = inst.replace(prior=_dp_prior(inst, _people(inst, who, seed), limit, seed))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    sol = solve(inst, "auto", gap_rel=1e-2)  # in a child process, as a release's solve
    seconds = time.perf_counter() - t0
    rows = {r["method"]: r["dist_loss_mean"] for r in people.people_rows(inst, sol.z, eps, people.cells(inst, limit))}
    remap = {r["method"]: r for r in baseline.comparison_rows(inst, eps)}[baseline.REMAP]["dist_loss_mean"]
    dist = record_output_distances(inst)
    return {
        "run": name,
        "kind": kind,
        "prior": prior,
        "seed": seed,
        "eps": eps,
        "eta": inst.eta,
        "N": inst.n_records,
        "K": inst.n_outputs,
        "edges": inst.n_edges,
        "privacy_rows": 2 * inst.n_edges * inst.n_outputs,
        "seconds": round(seconds, 1),
        "status": sol.status.value,
        "rounds": sol.iterations,
        "release_records": float(inst.prior @ np.einsum("ik,ik->i", sol.z, dist)),
        "release_people": rows[people.RELEASE],
        "remap_records": remap,
        "remap_people": rows[baseline.REMAP],
        "snap": rows[people.SNAP],
        "floor": rows[baseline.FLOOR],
        "load": round(load, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--priors", default="uniform,dp")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.runs.split(","):
        for prior in args.priors.split(","):
            print(json.dumps(run(name, prior, args.seed)), flush=True)


if __name__ == "__main__":
    main()
