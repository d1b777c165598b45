"""A published release's expected error per person, snapping included, against planar Laplace -- for made-up
people only (issue 40's Done-when; `bench/rome_people.py` makes them). Independent of mdp_core: numpy, pandas
and scipy read the published files and the people's table and recompute everything.

    python bench/per_person.py RUN_DIR PEOPLE_CSV [--samples 400] [--seed 2026]

Each person is snapped to the nearest record (great-circle distance), as the release maps them. Printed, one
JSON line (km): ``release`` = mean over people of sum_k z_{r(p) k} d(p, o_k) (from the person's true location
to what is released); ``planar_laplace_remap`` = planar Laplace applied to the person's true location, the
noisy point sent to the nearest output, the distance from the person (Monte Carlo: ``--samples`` per person,
``_se`` its standard error); ``planar_laplace`` = 2 / eps; ``snap`` = the mean snap distance; at the rate the
release promises within its protection radius (``guarantee.epsilon_per_unit`` x ``stretch_within_radius``)
and, with the suffix ``_any_distance``, at its rate over any distance (``metric_epsilon_per_unit``).
The people's table is secret for a real population: never run this on one (its output is about the people).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

R_KM = 6371.0088


def unit(latlon: np.ndarray) -> np.ndarray:
    la, lo = np.radians(latlon[:, 0]), np.radians(latlon[:, 1])
    return np.column_stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)])


def haversine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, 2), (m, 2) lat/lon degrees -> (n, m) km."""
    la1, lo1 = np.radians(a[:, :1]), np.radians(a[:, 1:])
    la2, lo2 = np.radians(b[:, 0][None]), np.radians(b[:, 1][None])
    h = np.sin((la2 - la1) / 2) ** 2 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2
    return 2 * R_KM * np.arcsin(np.sqrt(np.clip(h, 0, 1)))


def remap(people: np.ndarray, outputs: np.ndarray, eps: float, samples: int, rng: np.random.Generator):
    """Planar Laplace at ``eps`` per km around each person (local tangent plane), sent to the nearest output:
    the mean distance from the person and its standard error."""
    n = len(people)
    r = rng.gamma(2.0, 1.0 / eps, size=(n, samples))
    th = rng.uniform(0, 2 * np.pi, size=(n, samples))
    kx = np.pi / 180 * R_KM * np.cos(np.radians(people[:, 0]))[:, None]
    ky = np.pi / 180 * R_KM
    lat, lon = people[:, :1] + r * np.sin(th) / ky, people[:, 1:] + r * np.cos(th) / kx
    _, k = cKDTree(unit(outputs)).query(unit(np.column_stack([lat.ravel(), lon.ravel()])))
    d = haversine(people, outputs)[np.repeat(np.arange(n), samples), k].reshape(n, samples)
    per = d.mean(axis=1)
    return float(per.mean()), float(np.sqrt((d.var(axis=1, ddof=1) / samples).sum()) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("people")
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rec = pd.read_parquet(args.run / "instance" / "records.parquet").sort_values("record_id")
    out = pd.read_parquet(args.run / "instance" / "outputs.parquet").sort_values("output_id")
    out = out.merge(rec[["record_id", "lat", "lon"]], on="record_id", how="left", suffixes=("_o", ""))
    mech = pd.read_parquet(args.run / "mechanism.parquet")
    g = json.loads((args.run / "release_provenance.json").read_text())["guarantee"]
    records, outputs = rec[["lat", "lon"]].to_numpy(), out[["lat", "lon"]].to_numpy()
    z = np.zeros((len(records), len(outputs)))
    z[mech["i"].to_numpy(), mech["k"].to_numpy()] = mech["prob"].to_numpy()
    people = pd.read_csv(args.people)[["lat", "lon"]].to_numpy()
    _, snap = cKDTree(unit(records)).query(unit(people))
    d_po = haversine(people, outputs)
    line = {
        "run": args.run.name,
        "people": len(people),
        "records": len(records),
        "outputs": len(outputs),
        "snap": float(haversine(people, records)[np.arange(len(people)), snap].mean()),
        "release": float((z[snap] * d_po).sum(axis=1).mean()),
    }
    rng = np.random.default_rng(args.seed)
    within = g["epsilon_per_unit"] * g.get("stretch_within_radius", g["stretch"])
    for suffix, eps in (("", within), ("_any_distance", g["metric_epsilon_per_unit"])):
        mean, se = remap(people, outputs, eps, args.samples, rng)
        line |= {f"eps{suffix}": eps, f"planar_laplace{suffix}": 2 / eps}
        line |= {f"planar_laplace_remap{suffix}": mean, f"planar_laplace_remap{suffix}_se": se}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
