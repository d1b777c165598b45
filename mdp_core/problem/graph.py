"""The mDP graph (Qiu 2024, Definition 3.1): nodes are records, edges join neighbours (d_ij <= eta).

Edges are arrays ``(E, 2)`` with i < j plus ``(E,)`` distances, sorted by (i, j).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.spatial import cKDTree

from mdp_core.errors import InputError
from mdp_core.problem.metrics import EARTH_RADIUS_KM, check_points, haversine_rows_km, unit_sphere


def neighbour_edges(points: np.ndarray, metric: str, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """All pairs within distance eta.

    Uses a KD-tree (for haversine: on 3-D sphere points with the equivalent chord radius), then the
    exact metric distance of every candidate pair. Duplicate points (distance 0) are an error.

    Args:
        points: (N, D) coordinates; ``lat, lon`` in degrees for "haversine".
        metric: "euclidean" or "haversine" (km).
        eta: neighbour threshold in the metric's unit (> 0).
    Returns:
        edges (E, 2) int64 with i < j sorted, distances (E,) float64.
    """
    if not (np.isfinite(eta) and eta > 0):
        raise InputError(f"eta must be a finite number > 0, got {eta}")
    pts = check_points("points", points, metric)
    if metric == "haversine":
        tree_pts = unit_sphere(pts)
        radius = 2 * EARTH_RADIUS_KM * np.sin(min(eta / (2 * EARTH_RADIUS_KM), np.pi / 2)) * (1 + 1e-9)
    elif metric == "euclidean":
        tree_pts, radius = pts, eta * (1 + 1e-12)
    else:
        raise InputError(f"cannot build neighbour edges for metric {metric!r}")
    pairs = cKDTree(tree_pts).query_pairs(radius, output_type="ndarray").astype(np.int64)
    if pairs.shape[0] == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0)
    pairs.sort(axis=1)
    if metric == "euclidean":
        d = np.linalg.norm(pts[pairs[:, 0]] - pts[pairs[:, 1]], axis=1)
    else:
        d = haversine_rows_km(pts[pairs[:, 0]], pts[pairs[:, 1]])
    keep = d <= eta
    pairs, d = pairs[keep], d[keep]
    if np.any(d == 0):
        a, b = pairs[np.argmin(d)]
        raise InputError(f"records {a} and {b} are at distance 0 (duplicates): merge them and add their priors")
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return pairs[order], d[order]


def adjacency(n: int, edges: np.ndarray, distances: np.ndarray) -> sp.csr_matrix:
    """Symmetric (n, n) CSR matrix with d_ij at (i, j) and (j, i)."""
    i, j = edges[:, 0], edges[:, 1]
    return sp.csr_matrix((np.r_[distances, distances], (np.r_[i, j], np.r_[j, i])), shape=(n, n))


def components(n: int, edges: np.ndarray) -> tuple[int, np.ndarray]:
    """Connected components: (count, (n,) int label per record). Labels are ordered by smallest member."""
    a = sp.csr_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])), shape=(n, n))
    count, labels = csgraph.connected_components(a, directed=False)
    return int(count), labels.astype(np.int64)


def path_distances(n: int, edges: np.ndarray, distances: np.ndarray, sources: np.ndarray | None = None) -> np.ndarray:
    """Shortest-path distances D in the mDP graph (Property 3.2); inf between components.

    Returns (len(sources), n), or (n, n) when ``sources`` is None.
    """
    return csgraph.dijkstra(adjacency(n, edges, distances), directed=False, indices=sources)


@dataclass(frozen=True)
class Block:
    """One connected component of the mDP graph: ``members`` (n,) record ids (ascending),
    ``edge_ids`` (E',) rows of the instance's edge table inside it, ``local_edges`` (E', 2) those
    edges in local indices 0..n-1 (position in ``members``)."""

    index: int
    members: np.ndarray
    edge_ids: np.ndarray
    local_edges: np.ndarray


def component_blocks(n: int, edges: np.ndarray) -> tuple[int, np.ndarray, Iterator[Block]]:
    """(count, (count,) component sizes, iterator over the components as :class:`Block` s).

    Connected components are independent problems (Qiu 2024, Property 3.1); every per-component
    solver (lp, colgen) walks them with this.
    """
    count, labels = components(n, edges)
    sizes = np.bincount(labels, minlength=count)
    return count, sizes, _blocks(n, edges, count, labels, sizes)


def _blocks(n: int, edges: np.ndarray, count: int, labels: np.ndarray, sizes: np.ndarray) -> Iterator[Block]:
    order = np.argsort(labels, kind="stable")
    bounds = np.r_[0, np.cumsum(sizes)]
    edge_comp = labels[edges[:, 0]] if edges.shape[0] else np.zeros(0, np.int64)
    e_order = np.argsort(edge_comp, kind="stable")
    e_bounds = np.r_[0, np.cumsum(np.bincount(edge_comp, minlength=count))]
    local = np.empty(n, dtype=np.int64)
    for c in range(count):
        members = order[bounds[c] : bounds[c + 1]]
        local[members] = np.arange(members.shape[0])
        eidx = e_order[e_bounds[c] : e_bounds[c + 1]]
        yield Block(c, members, eidx, local[edges[eidx]])


def graph_eta(eta: float | None, dataset_eta: float, radius: float | None = None) -> float:
    """The mDP graph's eta (distance unit): ``eta`` when given, else the protection ``radius`` when one is given
    (every pair within the radius is an edge, stretch 1 there: the rate asked for is the rate charged, for every
    dataset kind, issue 50), else the dataset's own."""
    if eta is not None:
        return float(eta)
    return float(dataset_eta if radius is None else radius)
