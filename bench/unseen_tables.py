"""Two tables the project had not seen (issue 50's Done-when), written with their release configs: made-up people
only, each a seeded draw (the seeds are new: 5050 for the grid, 5051 for the vectors).

    python bench/unseen_tables.py OUT_DIR [--grid-seed 5050] [--vector-seed 5051]

* ``grid``: 5,000 residents over all of Rome, clustered (14 Gaussian neighbourhoods of 0.6-2.5 km around the
  city centre, spread 5 km, and 15 % spread evenly), on the grid kind's 16 x 20 cells of 1.5 km anchored at
  41.78 N 12.33 E (24 x 30 km: the ring road and beyond), as lat, lon (an agency's table; on the grid's own planar map); released with
  ``protection_radius = 3`` and eta unset, eps 2 per km, 320 outputs (every cell), ``prior = "dp"``;
* ``vectors``: a public universe of 300 vectors uniform in [0, 10]^3 (the points kind, Euclidean, seed + 1) and
  4,000 people drawn from a mixture of 6 Gaussians (sd 0.5-1.5), clipped to the cube; eps 1.5 per unit, eta 3,
  300 outputs (every vector), ``prior = "dp"``, ``max_distance`` 2.5.

Then ``mdp-release run --config OUT_DIR/grid.toml`` (and vectors.toml) and ``python bench/per_person.py RUN
OUT_DIR/grid-people.csv`` (bench/HISTORY.md, "Per person on a city grid and on vectors").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

GRID = (16, 20, 1.5)  # rows, cols, cell km
ANCHOR = (41.78, 12.33)  # the grid's south-west corner
KM_PER_DEG_LAT = 111.32  # as mdp_core.problem.datasets.grid


def grid_people(seed: int, n: int = 5000) -> pd.DataFrame:
    """(n,) people lat, lon on the grid's box, clustered around the centre (module docstring)."""
    rng = np.random.default_rng(seed)
    rows, cols, cell = GRID
    hi = np.array([cols * cell, rows * cell])
    centres = np.clip(rng.normal([14.0, 13.0], 5.0, size=(14, 2)), 1.0, hi - 1.0)
    spread = rng.uniform(0.6, 2.5, size=14)
    weight = rng.dirichlet(np.full(14, 2.0))
    k = rng.choice(14, size=n, p=weight)
    pts = centres[k] + rng.normal(size=(n, 2)) * spread[k, None]
    even = rng.uniform(size=n) < 0.15
    pts[even] = rng.uniform([0.0, 0.0], hi, size=(int(even.sum()), 2))
    pts = np.clip(pts, 1e-6, hi - 1e-6)
    lat = ANCHOR[0] + pts[:, 1] / KM_PER_DEG_LAT  # the grid's own planar map (mdp_core.problem.datasets.grid)
    lon = ANCHOR[1] + pts[:, 0] / (KM_PER_DEG_LAT * np.cos(np.radians(ANCHOR[0])))
    return pd.DataFrame({"person_id": np.arange(n), "lat": lat, "lon": lon})


def vector_tables(seed: int, vectors: int = 300, n: int = 4000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(universe of ``vectors`` public vectors uniform in a cube of 0.3 per unit^3, n people from a 6-Gaussian
    mixture), columns x0, x1, x2."""
    side = 10.0 * (vectors / 300) ** (1 / 3)  # 0.3 per unit^3
    uni = np.random.default_rng(seed + 1).uniform(0.0, side, size=(vectors, 3))
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.15 * side, 0.85 * side, size=(6, 3))
    sd = rng.uniform(0.5, 1.5, size=6)
    k = rng.choice(6, size=n, p=rng.dirichlet(np.full(6, 2.0)))
    pts = np.clip(centres[k] + rng.normal(size=(n, 3)) * sd[k, None], 0.0, side)
    cols = ["x0", "x1", "x2"]
    people = pd.DataFrame(pts, columns=cols)
    people.insert(0, "person_id", np.arange(n))
    return pd.DataFrame(uni, columns=cols), people


def _configs(out: Path, vectors: int) -> None:
    """The two release configs (paths relative to ``out``)."""
    rows, cols, cell = GRID
    common = 'eps_counts = 1.0\nprior = "dp"\neps_prior = 0.5\nmax_total_epsilon = 100.0\napproval = "none"\n'
    (out / "grid.toml").write_text(
        f'name = "rome-city-grid"\nstore = "store"\n[dataset]\nkind = "grid"\n[dataset.params]\nrows = {rows}\n'
        f"cols = {cols}\ncell_km = {cell}\nn_outputs = 320\nanchor_lat = {ANCHOR[0]}\nanchor_lon = {ANCHOR[1]}\n"
        "[privacy]\nepsilon = 2.0\nprotection_radius = 3.0\n"
        f'[release]\nmicrodata = "grid-people.csv"\npopulation = "rome-city"\nmax_distance = 1.1\n{common}'
        "[evaluate]\nbaselines = []\neps_factors = [1.0]\n"
    )
    (out / "vectors.toml").write_text(
        'name = "vectors3d"\nstore = "store"\n[dataset]\nkind = "points"\n[dataset.params]\n'
        f'path = "vector-universe.csv"\nn_outputs = {vectors}\n[privacy]\nepsilon = 1.5\neta = 3.0\n'
        f'[release]\nmicrodata = "vector-people.csv"\npopulation = "vectors3d"\nmax_distance = 2.5\n{common}'
        "[evaluate]\nbaselines = []\neps_factors = [1.0]\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--grid-seed", type=int, default=5050)
    ap.add_argument("--vector-seed", type=int, default=5051)
    ap.add_argument("--vectors", type=int, default=300)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    grid_people(args.grid_seed).to_csv(args.out / "grid-people.csv", index=False)
    universe, people = vector_tables(args.vector_seed, args.vectors)
    universe.to_csv(args.out / "vector-universe.csv", index=False)
    people.to_csv(args.out / "vector-people.csv", index=False)
    _configs(args.out, args.vectors)


if __name__ == "__main__":
    main()
