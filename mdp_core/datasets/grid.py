"""The grid-map dataset of Qiu 2024 (section 4.1 (2), appendix D.1).

A rows x cols grid of ``cell_km`` square cells anchored at the south-west corner of the paper's Rome
box (SW 41.66, 12.24; NE 42.10, 12.81). Records are the cells (centres); the metric is the Euclidean
distance between centres in km; outputs are K cells (seeded subset); the utility loss is

    c_ik = sum_t p_t |d(r_i, t) - d(o_k, t)|

over ``n_destinations`` destination cells t drawn (seeded) with uniform weights p_t, where d is the
Euclidean distance between cell centres (km), or, when a road graph is given (the LR-Geo paper, Qiu
2025 section 5.1), the shortest street-path length (km) between the road nodes nearest to the cell
centres. The mDP graph always uses the Euclidean centre distance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mdp_core.datasets.common import DEFAULT_OUTPUTS, choose_outputs, from_points
from mdp_core.errors import InputError
from mdp_core.instance import Instance
from mdp_core.metrics import euclidean

ROME_SW = (41.66, 12.24)
ROME_NE = (42.10, 12.81)
KM_PER_DEG_LAT = 111.32


def destination_costs(d_rt: np.ndarray, d_ot: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """c_ik = sum_t w_t |d_rt[i, t] - d_ot[k, t]|: (N, T), (K, T), (T,) -> (N, K), chunked over i."""
    n = d_rt.shape[0]
    out = np.empty((n, d_ot.shape[0]))
    step = max(1, (1 << 24) // max(d_ot.size, 1))
    for s in range(0, n, step):
        out[s : s + step] = np.abs(d_rt[s : s + step, None, :] - d_ot[None, :, :]) @ weights
    return out


def grid(
    rows: int = 20,
    cols: int = 25,
    n_outputs: int | None = None,
    epsilon: float = 10.0,
    eta: float = 2.0,
    cell_km: float = 1.0,
    n_destinations: int = 100,
    prior: str = "uniform",
    seed: int = 0,
    road_nodes: str | None = None,
    road_edges: str | None = None,
    road_osm: str | None = None,
    road_pbf: str | None = None,
    anchor_lat: float | None = None,
    anchor_lon: float | None = None,
) -> Instance:
    """The paper's grid map (default 20 x 25 = 500 cells, K = 100, eta = 2 km, eps = 10 / km).

    ``prior``: "uniform" or "random" (seeded Dirichlet(1) weights).
    ``road_nodes`` + ``road_edges`` (osmnx export), ``road_osm`` (OSM XML) or ``road_pbf``: a street
    graph for the LR-Geo road-path cost (see the module docstring); records then carry
    ``road_osmid`` (nearest node of the largest strongly connected component) and ``snap_km``.
    ``anchor_lat``, ``anchor_lon``: the grid's south-west corner in degrees (default: the Rome box's
    SW corner, or the south-west corner of the road graph's LSCC when a road graph is given).
    """
    for name, v in (("rows", rows), ("cols", cols), ("n_destinations", n_destinations)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InputError(f"{name} must be an integer, got {v!r}")
    if rows < 1 or cols < 1:
        raise InputError(f"grid needs rows, cols >= 1, got {rows} x {cols}")
    if not cell_km > 0:
        raise InputError(f"cell_km must be > 0, got {cell_km}")
    if n_destinations < 1:
        raise InputError(f"n_destinations must be >= 1, got {n_destinations}")
    if prior not in ("uniform", "random"):
        raise InputError(f"prior must be 'uniform' or 'random', got {prior!r}")
    road = None
    if any(v is not None for v in (road_nodes, road_edges, road_osm, road_pbf)):
        from mdp_core.datasets.road import road_graph

        road = road_graph(road_nodes, road_edges, road_osm, road_pbf).largest_scc()
    default_anchor = ROME_SW if road is None else (float(road.lat.min()), float(road.lon.min()))
    anchor = (
        default_anchor[0] if anchor_lat is None else float(anchor_lat),
        default_anchor[1] if anchor_lon is None else float(anchor_lon),
    )
    if not (abs(anchor[0]) < 90 and abs(anchor[1]) <= 180):
        raise InputError(f"anchor must be a valid latitude/longitude, got {anchor}")
    rng = np.random.default_rng(seed)
    r, c = np.divmod(np.arange(rows * cols), cols)
    xy = np.column_stack([(c + 0.5) * cell_km, (r + 0.5) * cell_km])
    n = xy.shape[0]
    if n_outputs is None:  # the default: DEFAULT_OUTPUTS (100) outputs, all records when fewer
        n_outputs = min(DEFAULT_OUTPUTS, n)
    outputs = choose_outputs(n, n_outputs, rng)
    dest = rng.choice(n, size=min(n_destinations, n), replace=False)
    w = np.full(dest.shape[0], 1.0 / dest.shape[0])
    lat = anchor[0] + xy[:, 1] / KM_PER_DEG_LAT
    lon = anchor[1] + xy[:, 0] / (KM_PER_DEG_LAT * np.cos(np.radians(anchor[0])))
    extra: dict[str, Any] = {"lat": lat, "lon": lon, "row": r.astype(np.int64), "col": c.astype(np.int64)}
    if road is None:
        d_rt = euclidean(xy, xy[dest])
    else:
        node, snap = road.nearest(np.column_stack([lat, lon]))
        d_rt = road.km_to(node[dest])[:, node].T  # (N, T) street km from cell i's node to cell t's node
        extra |= {"road_osmid": road.osmid[node], "snap_km": snap}
    costs = destination_costs(d_rt, d_rt[outputs], w)
    weights = rng.dirichlet(np.ones(n)) if prior == "random" else None
    return from_points(
        xy,
        "euclidean",
        eta,
        epsilon,
        costs,
        prior=weights,
        output_record_ids=outputs,
        extra_columns=extra,
        provenance={
            "dataset": "grid",
            "generator": "mdp_core.datasets.grid",
            "parameters": {
                "rows": rows, "cols": cols, "n_outputs": n_outputs, "cell_km": cell_km,
                "n_destinations": n_destinations, "prior": prior, "anchor_sw": list(anchor),
            } | ({} if road is None else {"cost_distance": "road_path"}),
            **({} if road is None else {"source": road.source}),
            "seed": seed,
        },
    )
