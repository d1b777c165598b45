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

# name -> (kind, loader params, max_distance, people: "helsinki" | "rome" | "clusters")
RUNS: dict[str, tuple[str, dict[str, Any], float, str]] = {
    "helsinki": ("road", {"pbf": "helsinki", "n_records": 120, "n_outputs": 40, "eta": 0.5}, 0.5, "helsinki"),
    "rome200x60": ("road", ROME_TABLES | {"n_records": 200, "n_outputs": 60, "eta": 1.0}, 0.7, "rome"),
    "rome300x100": ("road", ROME_TABLES | {"n_records": 300, "n_outputs": 100, "eta": 1.0}, 0.7, "rome"),
    "grid10x10": ("grid", {"rows": 10, "cols": 10, "n_outputs": 50, "eta": 2.0}, 0.75, "clusters"),
    "grid20x25": ("grid", {"rows": 20, "cols": 25, "n_outputs": 100, "eta": 2.0}, 0.75, "clusters"),
    "grid30x30": ("grid", {"rows": 30, "cols": 30, "n_outputs": 200, "eta": 2.0}, 0.75, "clusters"),
}


def _people(inst, which: str, seed: int) -> pd.DataFrame:
    """The made-up people of a run (lat, lon or x0, x1)."""
    if which == "helsinki":
        return pd.read_csv(REPO / "flows" / "examples" / "helsinki-people.csv")[["lat", "lon"]]
    if which == "rome":
        from rome_people import people as rome

        return rome(ROME, 1500, 4711)[["lat", "lon"]]
    rng = np.random.default_rng(seed)
    rec = inst.record_points()
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
    kind, params, limit, who = RUNS[name]
    inst = registry.load(kind, with_release_defaults(kind, params | {"epsilon": 10.0}))
    if prior == "dp":
        inst = inst.replace(prior=_dp_prior(inst, _people(inst, who, seed), limit, seed))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    sol = solve(inst, "auto", gap_rel=1e-2)  # in a child process, as a release's solve
    seconds = time.perf_counter() - t0
    rows = {r["method"]: r["dist_loss_mean"] for r in people.people_rows(inst, sol.z, 10.0, people.cells(inst, limit))}
    remap = {r["method"]: r for r in baseline.comparison_rows(inst, 10.0)}[baseline.REMAP]["dist_loss_mean"]
    dist = record_output_distances(inst)
    return {
        "run": name,
        "kind": kind,
        "prior": prior,
        "seed": seed,
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
