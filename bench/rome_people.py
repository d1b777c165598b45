#!/usr/bin/env python
"""Made-up residents of central Rome near its streets: a secret table for a release experiment (issue 40).

    python bench/rome_people.py --seed 4711 --n 2000 --out /tmp/rome2000/people.csv \
        [--data /work/shared/data/rome_center] [--clusters 30]

Reads the real road network of ``rome_center`` (``nodes.csv``: osmid, y = lat, x = lon; ``edges.csv``:
osmnx edges with a WKT ``geometry``; see ``../shared/data/README.md``) and draws people clustered as
people are:

* ``--clusters`` centres among the road nodes (uniform, without replacement), each with a size weight
  (log-normal: a few big neighbourhoods, many small ones) and a spread (a Gaussian scale of 80-350 m);
* each person picks a cluster by weight, a target point around its centre (Gaussian, that spread), the
  street segment nearest the target (among the edges' segments), a uniform point along that segment,
  then steps 20-30 m perpendicular to the street, on a random side; a point that lands nearer than 20 m
  to another street (a corner, a narrow block) is drawn again, so every person is 20-30 m from the
  nearest street segment.

Deterministic given ``--seed`` (numpy's PCG64); writes ``person_id, lat, lon`` (6 decimals, as the
Helsinki example table) to ``--out`` (default outside the repository). The road data is only read:
never copy it, or the generated table, into the repository.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

R_EARTH_M = 6_371_008.8
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "rome_center"
_COORD = re.compile(r"(-?\d+(?:\.\d+)?)\s+(-?\d+(?:\.\d+)?)")


def _segments(edges: pd.DataFrame, lat0: float, lon0: float) -> np.ndarray:
    """Every straight piece of every edge geometry, as (x1, y1, x2, y2) metres in a local plane.

    Both directions of a two-way street give the same pieces: duplicates are dropped."""
    kx = np.deg2rad(1.0) * R_EARTH_M * np.cos(np.deg2rad(lat0))
    ky = np.deg2rad(1.0) * R_EARTH_M
    pieces = []
    for wkt in edges["geometry"].dropna():
        pts = np.array([(float(a), float(b)) for a, b in _COORD.findall(wkt)])  # (lon, lat)
        if len(pts) < 2:
            continue
        xy = np.column_stack([(pts[:, 0] - lon0) * kx, (pts[:, 1] - lat0) * ky])
        pieces.append(np.hstack([xy[:-1], xy[1:]]))
    seg = np.vstack(pieces)
    key = np.where((seg[:, 0] < seg[:, 2])[:, None], seg, seg[:, [2, 3, 0, 1]])  # direction-free
    _, keep = np.unique(np.round(key, 3), axis=0, return_index=True)
    seg = seg[np.sort(keep)]
    length = np.hypot(seg[:, 2] - seg[:, 0], seg[:, 3] - seg[:, 1])
    return seg[length > 0.5]


def _split(seg: np.ndarray, step: float) -> np.ndarray:
    """The segments cut into pieces of at most `step` metres."""
    length = np.hypot(seg[:, 2] - seg[:, 0], seg[:, 3] - seg[:, 1])
    parts = np.maximum(1, np.ceil(length / step).astype(int))
    idx = np.repeat(np.arange(len(seg)), parts)
    j = np.concatenate([np.arange(p) for p in parts])
    f0 = (j / parts[idx])[:, None]
    f1 = ((j + 1) / parts[idx])[:, None]
    a, b = seg[idx, :2], seg[idx, 2:]
    return np.hstack([a + f0 * (b - a), a + f1 * (b - a)])


def _street_distance(xy: np.ndarray, fine: np.ndarray, tree: cKDTree, reach: float = 25.0) -> np.ndarray:
    """Distance (m) from each point to the nearest street, exact below 20 m (inf when none within reach - 5)."""
    out = np.full(len(xy), np.inf)
    for i, cand in enumerate(tree.query_ball_point(xy, r=reach)):
        if not cand:
            continue
        a, b = fine[cand, :2], fine[cand, 2:]
        ab = b - a
        t = np.clip(((xy[i] - a) * ab).sum(1) / (ab * ab).sum(1), 0, 1)
        out[i] = np.hypot(*(a + t[:, None] * ab - xy[i]).T).min()
    return out


def _draw(
    rng: np.random.Generator,
    n: int,
    centres: np.ndarray,
    weight: np.ndarray,
    spread: np.ndarray,
    seg: np.ndarray,
    tree: cKDTree,
) -> np.ndarray:
    """n points (local metres): a cluster, a street piece near a target around it, 20-30 m off the street."""
    clusters = len(centres)
    which = rng.choice(clusters, size=n, p=weight / weight.sum())
    target = centres[which] + rng.normal(size=(n, 2)) * spread[which, None]
    # the nearest segment by midpoint among the 8 nearest midpoints, then by true point-segment distance
    _, cand = tree.query(target, k=8)
    a, b = seg[cand][..., :2], seg[cand][..., 2:]
    ab = b - a
    t = np.clip(np.einsum("nkc,nkc->nk", target[:, None, :] - a, ab) / np.einsum("nkc,nkc->nk", ab, ab), 0, 1)
    dist = np.linalg.norm(a + t[..., None] * ab - target[:, None, :], axis=2)
    chosen = cand[np.arange(n), dist.argmin(axis=1)]

    s = seg[chosen]
    u = rng.uniform(size=n)
    on_street = s[:, :2] + u[:, None] * (s[:, 2:] - s[:, :2])
    direction = (s[:, 2:] - s[:, :2]) / np.hypot(s[:, 2] - s[:, 0], s[:, 3] - s[:, 1])[:, None]
    normal = np.column_stack([-direction[:, 1], direction[:, 0]])
    offset = rng.uniform(20.0, 30.0, size=n) * rng.choice([-1.0, 1.0], size=n)
    return on_street + offset[:, None] * normal


def people(data: Path, n: int, seed: int, clusters: int = 30) -> pd.DataFrame:
    """n people (person_id, lat, lon), clustered around `clusters` road nodes, 20-30 m from a street."""
    nodes = pd.read_csv(data / "nodes.csv")
    edges = pd.read_csv(data / "edges.csv", usecols=["u", "v", "geometry"])
    lat0, lon0 = float(nodes["y"].mean()), float(nodes["x"].mean())
    kx = np.deg2rad(1.0) * R_EARTH_M * np.cos(np.deg2rad(lat0))
    ky = np.deg2rad(1.0) * R_EARTH_M
    seg = _segments(edges, lat0, lon0)
    mid = 0.5 * (seg[:, :2] + seg[:, 2:])
    tree = cKDTree(mid)

    rng = np.random.default_rng(seed)
    centre_rows = rng.choice(len(nodes), size=clusters, replace=False)
    centres = np.column_stack(
        [
            (nodes["x"].to_numpy()[centre_rows] - lon0) * kx,
            (nodes["y"].to_numpy()[centre_rows] - lat0) * ky,
        ]
    )
    weight = rng.lognormal(mean=0.0, sigma=0.8, size=clusters)
    spread = rng.uniform(80.0, 350.0, size=clusters)

    fine = _split(seg, 10.0)
    fine_tree = cKDTree(0.5 * (fine[:, :2] + fine[:, 2:]))
    kept: list[np.ndarray] = []
    while sum(len(k) for k in kept) < n:
        xy = _draw(rng, n, centres, weight, spread, seg, tree)
        # a point offset from its own street may lie nearer another one (a corner, a narrow block):
        # only people 20-30 m from every street are kept (the offset bounds the distance by 30 m)
        kept.append(xy[_street_distance(xy, fine, fine_tree) >= 20.0])
    xy = np.vstack(kept)[:n]

    return pd.DataFrame(
        {
            "person_id": [f"P{i:04d}" for i in range(n)],
            "lat": np.round(lat0 + xy[:, 1] / ky, 6),
            "lon": np.round(lon0 + xy[:, 0] / kx, 6),
        }
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True, help="random seed (the table is a function of it)")
    ap.add_argument("--n", type=int, default=2000, help="number of people (default 2000)")
    ap.add_argument("--clusters", type=int, default=30, help="number of cluster centres (default 30)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with nodes.csv and edges.csv")
    ap.add_argument("--out", type=Path, default=Path("/tmp/rome2000/people.csv"), help="CSV to write")
    args = ap.parse_args(argv)
    table = people(args.data, args.n, args.seed, args.clusters)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(f"{len(table)} people -> {args.out}")


if __name__ == "__main__":
    main()
