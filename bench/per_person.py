"""A published release's expected error per person, snapping included, against planar Laplace -- for made-up
people only (issue 40's and 50's Done-when; `bench/rome_people.py` and `bench/unseen_tables.py` make them).
Independent of mdp_core: numpy, pandas and scipy read the published files and the people's table and recompute
everything.

    python bench/per_person.py RUN_DIR PEOPLE_CSV [--samples 400] [--seed 2026]

Each person is snapped to the nearest record as the release maps them: by great-circle distance when the table
has lat, lon (a road release, or a grid whose records also carry their centres' lat, lon), else by Euclidean
distance over the records' x0.. columns (vectors). Distances are then measured in the release's metric
(``instance/instance.json``): haversine km; or Euclidean over x0.. -- a grid's people given as lat, lon are put on
the grid's own plane (km east and north of its south-west corner ``anchor_sw``, 111.32 km per degree of latitude
and that times cos(anchor latitude) per degree of longitude, the grid's documented map). Printed, one JSON line
(the release's unit): ``release`` = mean over people of sum_k z_{r(p) k} d(p, o_k) (from the person's true
location to what is released); ``planar_laplace_remap`` = planar Laplace (D-dimensional: radius Gamma(D, 1 /
eps), a uniform direction) applied to the person's true location, the noisy point sent to the nearest output, the
distance from the person (Monte Carlo: ``--samples`` per person, ``_se`` its standard error); ``planar_laplace``
= D / eps; ``snap`` = the mean snap distance; ``floor`` = the mean distance to the nearest output; at the rate the
release promises within its protection radius (``guarantee.epsilon_per_unit`` x ``stretch_within_radius``) and,
with the suffix ``_any_distance``, at its rate over any distance (``metric_epsilon_per_unit``).
The people's table is secret for a real population: never run this on one (its output is about the people).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist

R_KM = 6371.0088
KM_PER_DEG_LAT = 111.32  # the grid kind's documented planar map


def unit(latlon: np.ndarray) -> np.ndarray:
    la, lo = np.radians(latlon[:, 0]), np.radians(latlon[:, 1])
    return np.column_stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)])


def haversine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, 2), (m, 2) lat/lon degrees -> (n, m) km."""
    la1, lo1 = np.radians(a[:, :1]), np.radians(a[:, 1:])
    la2, lo2 = np.radians(b[:, 0][None]), np.radians(b[:, 1][None])
    h = np.sin((la2 - la1) / 2) ** 2 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2
    return 2 * R_KM * np.arcsin(np.sqrt(np.clip(h, 0, 1)))


class Space:
    """The release's metric over its people, records and outputs: ``geo`` (lat/lon, haversine) or Euclidean
    coordinates; ``people``, ``records``, ``outputs`` (n, D) in it; ``snap`` (n,) each person's record."""

    def __init__(self, run: Path, people: pd.DataFrame) -> None:
        rec = pd.read_parquet(run / "instance" / "records.parquet").sort_values("record_id")
        out = pd.read_parquet(run / "instance" / "outputs.parquet").sort_values("output_id")
        meta = json.loads((run / "instance" / "instance.json").read_text())
        prov = meta.get("provenance")
        prov = ast.literal_eval(prov) if isinstance(prov, str) else (prov or {})
        self.geo = meta["metric"] == "haversine"
        xcols = sorted((c for c in rec.columns if re.fullmatch(r"x\d+", c)), key=lambda c: int(c[1:]))
        cols = ["lat", "lon"] if self.geo else xcols
        if "record_id" in out.columns and not set(cols) <= set(out.columns):
            out = out.merge(rec[["record_id", *cols]], on="record_id", how="left")
        self.records, self.outputs = rec[cols].to_numpy(float), out[cols].to_numpy(float)
        if {"lat", "lon"} <= set(people.columns) and {"lat", "lon"} <= set(rec.columns):
            latlon = people[["lat", "lon"]].to_numpy(float)
            _, self.snap = cKDTree(unit(rec[["lat", "lon"]].to_numpy(float))).query(unit(latlon))
            if self.geo:
                self.people = latlon
            else:  # a grid's people on its own plane
                lat0, lon0 = prov["parameters"]["anchor_sw"]
                kx = KM_PER_DEG_LAT * np.cos(np.radians(lat0))
                self.people = np.column_stack([(latlon[:, 1] - lon0) * kx, (latlon[:, 0] - lat0) * KM_PER_DEG_LAT])
        else:
            self.people = people[xcols].to_numpy(float)
            _, self.snap = cKDTree(self.records).query(self.people)
        self.dim = 2 if self.geo else len(xcols)

    def dist(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(n, m) distances in the release's metric."""
        return haversine(a, b) if self.geo else cdist(a, b)

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(n,) distances between the rows of ``a`` and ``b`` (n, D)."""
        if not self.geo:
            return np.linalg.norm(a - b, axis=1)
        la1, lo1, la2, lo2 = (np.radians(c) for c in (a[:, 0], a[:, 1], b[:, 0], b[:, 1]))
        h = np.sin((la2 - la1) / 2) ** 2 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2
        return 2 * R_KM * np.arcsin(np.sqrt(np.clip(h, 0, 1)))

    def move(self, pts: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Points moved by ``noise`` (n, D) in the metric's unit (lat/lon: on the local tangent plane, east, north)."""
        if not self.geo:
            return pts + noise
        kx = np.pi / 180 * R_KM * np.cos(np.radians(pts[:, 0]))
        return np.column_stack([pts[:, 0] + noise[:, 1] / (np.pi / 180 * R_KM), pts[:, 1] + noise[:, 0] / kx])

    def nearest_output(self, pts: np.ndarray) -> np.ndarray:
        """(n,) the index of each point's nearest output."""
        if self.geo:
            return cKDTree(unit(self.outputs)).query(unit(pts))[1]
        return cKDTree(self.outputs).query(pts)[1]


def remap(s: Space, eps: float, samples: int, rng: np.random.Generator) -> tuple[float, float]:
    """Planar Laplace at ``eps`` per unit around each person, sent to the nearest output: the mean distance from
    the person and its standard error."""
    n, dim = len(s.people), s.dim
    per = np.empty(n)
    var = np.empty(n)
    for a in range(0, n, 500):
        p = s.people[a : a + 500]
        m = len(p)
        direction = rng.normal(size=(m * samples, dim))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        noise = rng.gamma(dim, 1.0 / eps, size=(m * samples, 1)) * direction
        k = s.nearest_output(s.move(np.repeat(p, samples, axis=0), noise))
        d = s.dist(p, s.outputs)[np.repeat(np.arange(m), samples), k].reshape(m, samples)
        per[a : a + m], var[a : a + m] = d.mean(axis=1), d.var(axis=1, ddof=1)
    return float(per.mean()), float(np.sqrt((var / samples).sum()) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("people")
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    s = Space(args.run, pd.read_csv(args.people))
    mech = pd.read_parquet(args.run / "mechanism.parquet")
    g = json.loads((args.run / "release_provenance.json").read_text())["guarantee"]
    z = np.zeros((len(s.records), len(s.outputs)))
    z[mech["i"].to_numpy(), mech["k"].to_numpy()] = mech["prob"].to_numpy()
    d_po = s.dist(s.people, s.outputs)
    d_pr = s.pair(s.people, s.records[s.snap])
    line = {
        "run": args.run.resolve().name,
        "people": len(s.people),
        "records": len(s.records),
        "outputs": len(s.outputs),
        "snap": float(d_pr.mean()),
        "floor": float(d_po.min(axis=1).mean()),
        "release": float((z[s.snap] * d_po).sum(axis=1).mean()),
    }
    rng = np.random.default_rng(args.seed)
    within = g["epsilon_per_unit"] * g.get("stretch_within_radius", g["stretch"])
    for suffix, eps in (("", within), ("_any_distance", g["metric_epsilon_per_unit"])):
        mean, se = remap(s, eps, args.samples, rng)
        line |= {f"eps{suffix}": eps, f"planar_laplace{suffix}": s.dim / eps}
        line |= {f"planar_laplace_remap{suffix}": mean, f"planar_laplace_remap{suffix}_se": se}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
