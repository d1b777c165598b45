"""The grid-map dataset of Qiu 2024 (section 4.1 (2), appendix D.1).

A rows x cols grid of ``cell_km`` square cells anchored at the south-west corner of the paper's Rome
box (SW 41.66, 12.24; NE 42.10, 12.81). Records are the cells (centres); the metric is the Euclidean
distance between centres in km; outputs are K cells (seeded subset); the utility loss, by ``loss``:

* ``"travel"`` (the loader's default, the papers' instances):

    c_ik = sum_t p_t |d(r_i, t) - d(o_k, t)|

  over ``n_destinations`` destination cells t drawn (seeded) with uniform weights p_t, where d is the
  Euclidean distance between cell centres (km), or, when a road graph is given (the LR-Geo paper, Qiu
  2025 section 5.1), the shortest street-path length (km) between the road nodes nearest to the cell
  centres;
* ``"distance"`` (a release config's default, issue 40): c_ik = the Euclidean distance (km) between the
  centres of cell i and output cell k, the metric of the mDP graph and of the evaluation (a road graph
  then only anchors the grid and snaps the cells: no street paths are computed).

The mDP graph always uses the Euclidean centre distance. The destination cells are drawn with either loss,
so the seeded ``prior = "random"`` weights are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mdp_core.declarations.dataset_kinds import GridParams
from mdp_core.errors import InputError
from mdp_core.problem.datasets.common import DEFAULT_OUTPUTS, choose_outputs, destination_costs, from_points
from mdp_core.problem.datasets.road import RoadGraph, check_loss, road_graph
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import euclidean

ROME_SW = (41.66, 12.24)
ROME_NE = (42.10, 12.81)
KM_PER_DEG_LAT = 111.32


def _check_grid_parameters(rows: int, cols: int, cell_km: float, n_destinations: int, prior: str) -> None:
    """InputError unless rows, cols, n_destinations are integers >= 1, cell_km > 0 and prior is known."""
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


def _road_lscc(nodes: str | None, edges: str | None, osm: str | None, pbf: str | None) -> RoadGraph | None:
    """The largest strongly connected component of the given street graph (None when no file is given)."""
    if all(v is None for v in (nodes, edges, osm, pbf)):
        return None
    return road_graph(nodes, edges, osm, pbf).largest_scc()


def _grid_cost(loss: str, road: RoadGraph | None) -> str:
    """The instance provenance's "cost" (what c_ik is): it names the loss."""
    if loss == "distance":
        return "loss distance: d(r_i, o_k), Euclidean km between cell centres (the data's metric)"
    d = "Euclidean km between cell centres" if road is None else "street path km between the cells' road nodes"
    return f"loss travel: sum_t p_t |d(r_i,t) - d(o_k,t)|, d = {d}"


def _grid_provenance(parameters: dict[str, Any], road: RoadGraph | None, seed: int, loss: str) -> dict[str, Any]:
    """The instance provenance; with a road graph (and loss travel), the road-path cost and the graph's source."""
    road_path = road is not None and loss == "travel"
    return {
        "dataset": "grid",
        "generator": "mdp_core.problem.datasets.grid",
        "parameters": parameters | ({"cost_distance": "road_path"} if road_path else {}),
        **({} if road is None else {"source": road.source}),
        "seed": seed,
        "cost": _grid_cost(loss, road),
    }


def _grid_anchor(road: RoadGraph | None, anchor_lat: float | None, anchor_lon: float | None) -> tuple[float, float]:
    """The grid's south-west corner (lat, lon) in degrees: given, else the road LSCC's or the Rome box's."""
    default_anchor = ROME_SW if road is None else (float(road.lat.min()), float(road.lon.min()))
    anchor = (
        default_anchor[0] if anchor_lat is None else float(anchor_lat),
        default_anchor[1] if anchor_lon is None else float(anchor_lon),
    )
    if not (abs(anchor[0]) < 90 and abs(anchor[1]) <= 180):
        raise InputError(f"anchor must be a valid latitude/longitude, got {anchor}")
    return anchor


def _cell_centres(
    rows: int, cols: int, cell_km: float, anchor: tuple[float, float]
) -> tuple[np.ndarray, dict[str, Any]]:
    """((N, 2) cell centres x, y in km from the SW corner, record columns lat, lon (degrees), row, col)."""
    r, c = np.divmod(np.arange(rows * cols), cols)
    xy = np.column_stack([(c + 0.5) * cell_km, (r + 0.5) * cell_km])
    latlon = grid_latlon(xy, anchor)
    return xy, {"lat": latlon[:, 0], "lon": latlon[:, 1], "row": r.astype(np.int64), "col": c.astype(np.int64)}


def grid_latlon(xy: np.ndarray, anchor: tuple[float, float]) -> np.ndarray:
    """(n, 2) lat, lon (degrees) of the (n, 2) points ``xy`` (x0 east, x1 north, km from the grid's south-west
    corner ``anchor`` (lat, lon degrees)): the grid's own map from its km to degrees (an equirectangular
    projection at the anchor's latitude), the one its cell centres' lat, lon come from."""
    xy = np.asarray(xy, dtype=np.float64)
    lat = anchor[0] + xy[:, 1] / KM_PER_DEG_LAT
    lon = anchor[1] + xy[:, 0] / (KM_PER_DEG_LAT * np.cos(np.radians(anchor[0])))
    return np.column_stack([lat, lon])


def _destination_distances(
    xy: np.ndarray, latlon: np.ndarray, dest: np.ndarray, road: RoadGraph | None, paths: bool = True
) -> tuple[np.ndarray | None, dict[str, Any]]:
    """(N, T) km from every cell to each destination cell (Euclidean, or street path between the
    cells' nearest road nodes; None when not ``paths``: no street paths computed) and the extra record
    columns the road snap adds (none without road)."""
    if road is None:
        return euclidean(xy, xy[dest]), {}
    node, snap = road.nearest(latlon)
    # the snapped node's id and coordinates are the road file's: kept for the door, never published (file_columns)
    snapped = {"road_osmid": road.osmid[node], "road_lat": road.lat[node], "road_lon": road.lon[node], "snap_km": snap}
    if not paths:
        return None, snapped
    return road.km_to(node[dest])[:, node].T, snapped  # (N, T) street km from cell i's node to cell t's node


def grid(
    rows: int = GridParams.rows,
    cols: int = GridParams.cols,
    n_outputs: int | None = GridParams.n_outputs,
    epsilon: float = GridParams.epsilon,
    eta: float = GridParams.eta,
    cell_km: float = GridParams.cell_km,
    n_destinations: int = GridParams.n_destinations,
    prior: str = GridParams.prior,
    seed: int = GridParams.seed,
    road_nodes: str | None = GridParams.road_nodes,
    road_edges: str | None = GridParams.road_edges,
    road_osm: str | None = GridParams.road_osm,
    road_pbf: str | None = GridParams.road_pbf,
    anchor_lat: float | None = GridParams.anchor_lat,
    anchor_lon: float | None = GridParams.anchor_lon,
    loss: str = GridParams.loss,
) -> Instance:
    """The paper's grid map (default 20 x 25 = 500 cells, K = 100, eta = 2 km, eps = 10 / km).

    ``prior``: "uniform" or "random" (seeded Dirichlet(1) weights).
    ``road_nodes`` + ``road_edges`` (osmnx export), ``road_osm`` (OSM XML) or ``road_pbf``: a street
    graph for the LR-Geo road-path cost (see the module docstring); records then carry
    ``road_osmid``, ``road_lat``, ``road_lon`` (nearest node of the largest strongly connected component: the
    road file's, never published) and ``snap_km``.
    ``anchor_lat``, ``anchor_lon``: the grid's south-west corner in degrees (default: the Rome box's
    SW corner, or the south-west corner of the road graph's LSCC when a road graph is given).
    ``loss``: "travel" (default: the destination cost) or "distance" (Euclidean centre distance), see the
    module docstring.
    """
    _check_grid_parameters(rows, cols, cell_km, n_destinations, prior)
    check_loss(loss)
    road = _road_lscc(road_nodes, road_edges, road_osm, road_pbf)
    anchor = _grid_anchor(road, anchor_lat, anchor_lon)
    rng = np.random.default_rng(seed)
    xy, cells = _cell_centres(rows, cols, cell_km, anchor)
    n = xy.shape[0]
    if n_outputs is None:  # the default: DEFAULT_OUTPUTS (100) outputs, all records when fewer
        n_outputs = min(DEFAULT_OUTPUTS, n)
    outputs = choose_outputs(n, n_outputs, rng)
    dest = rng.choice(n, size=min(n_destinations, n), replace=False)  # (T,) destination cells
    latlon = np.column_stack([cells["lat"], cells["lon"]])
    if loss == "travel":
        d_rt, snapped = _destination_distances(xy, latlon, dest, road)
        assert d_rt is not None  # paths computed
        costs = destination_costs(d_rt, d_rt[outputs], np.full(dest.shape[0], 1.0 / dest.shape[0]))  # uniform p_t
    else:
        _, snapped = _destination_distances(xy, latlon, dest, road, paths=False)
        costs = euclidean(xy, xy[outputs])  # the metric of the mDP graph and of the evaluation
    weights = rng.dirichlet(np.ones(n)) if prior == "random" else None
    parameters = {
        "rows": rows,
        "cols": cols,
        "n_outputs": n_outputs,
        "cell_km": cell_km,
        "n_destinations": n_destinations,
        "prior": prior,
        "anchor_sw": list(anchor),
        "loss": loss,
    }
    return from_points(
        xy,
        "euclidean",
        eta,
        epsilon,
        costs,
        prior=weights,
        output_record_ids=outputs,
        extra_columns=cells | snapped,
        provenance=_grid_provenance(parameters, road, seed, loss),
    )
