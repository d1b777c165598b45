"""Protection in the data's own metric: how far a certified mechanism's guarantee reaches.

Privacy contract
----------------
A certified mechanism Z (:func:`mdp_core.solvers.verify.verify`) satisfies, for every edge (i, j) of the mDP
graph G and every output k,  z_ik <= exp(eps d_ij (1 + 1e-9)) z_jk.  Chaining the inequality along a
shortest path i = v_0, v_1, ..., v_m = j of G gives, for every pair of records in one component,

    z_ik <= exp(eps (1 + 1e-9) D_G(i, j)) z_jk,     D_G = shortest-path length in G (weights d_ij),

(Qiu 2024, Property 3.2; Chatzikokolakis et al. 2013). Across components nothing is promised
(D_G = inf). In the data's own metric d the guarantee is therefore

    z_ik <= exp(eps * stretch * d(i, j)) z_jk,      stretch = max_{i != j, same component} D_G(i, j) / d(i, j),

the *dilation* of G as a spanner of the metric (Bordenabe, Chatzikokolakis & Palamidessi, "Optimal
geo-indistinguishable mechanisms for location privacy", CCS 2014, section 5: a mechanism built on a
t-spanner is (eps t)-geo-indistinguishable). stretch >= 1 (triangle inequality: D_G >= d) and equals
1 exactly on edges. We compute the dilation against a *lower bound* d_lower <= d
(:func:`metric_lower_bounds`), so the stretch reported here is >= the true dilation: the stated
guarantee eps * stretch can only be conservative.

Every pair certified (``all_pairs``, issue 51). A mechanism certified with
:attr:`mdp_core.declarations.solver_options.SolverOptions.all_pairs` meets z_ik <= exp(eps (1 + 1e-9) d(i, j)) z_jk
for every two records of one component, d the metric itself (:func:`mdp_core.solvers.verify.verify` checks every
such pair): its stretch is 1 by certificate, not by the graph. :func:`graph_protection` with ``all_pairs``
states exactly that (no paths computed), and only where d is known exactly (records with coordinates of the
metric; elsewhere the certificate cannot have been made either).

Lower bounds per metric (:func:`metric_lower_bounds`):
  * ``euclidean`` / ``haversine`` with record coordinates (``x0..`` / ``lat, lon``): the exact metric,
    the same formula (:mod:`mdp_core.problem.metrics`) the edge distances were computed with.
  * ``graph`` (distances given only as a table; no loader of :mod:`mdp_core.problem.datasets` produces it: the
    ``road`` kind measures haversine km between road nodes, so road instances take the exact branch
    above; ``graph`` instances come from a user's instance directory): the stored distance where the
    pair is stored (it *is* the metric there); with ``lat, lon`` record columns and distance unit
    ``km``, the great-circle distance (a path on the Earth's surface, e.g. a road, is no shorter);
    elsewhere 0, unless the caller asserts ``assume_complete=True``: every pair at distance <= eta is in
    the edge table (the instance format's definition of the mDP graph, which nothing can check for a
    table-only metric), and then eta. A pair with lower bound 0 in one component has stretch inf:
    without coordinates and without that assertion the guarantee in the metric is unbounded.
  * ``euclidean`` / ``haversine`` without coordinates: treated like ``graph`` (stored pairs only).

Cost. :func:`graph_protection` runs Dijkstra from every record of a component with two or more
records (scipy ``csgraph.dijkstra``) in row blocks of ``BLOCK_ENTRIES`` / N sources, comparing each
(block, N) slab of D_G with the same slab of lower bounds: peak memory about 6 x ``BLOCK_ENTRIES`` x 8
bytes (~100 MB) whatever N, plus the graph. Time is about N x (2E + N) / 3e8 s on one core. Measured
(exact; one core, machine shared): grid 20x25 eta 2 km (N = 500, E = 2.8k) 0.04 s; grid 100x100
(N = 10,000, E = 59k) 13 s; synthetic N(0,1) 3-D eta 2: N = 500 (E = 55k) 0.3 s, N = 1,000 (E = 214k)
1.1 s, N = 2,000 (E = 852k) 12 s, N = 5,000 (E = 5.3M) 164 s; Rome roads eta 2 km: N = 500 (E = 64k)
0.4 s, N = 1,000 (E = 259k) 3.0 s. When N x (2E + N) exceeds ``max_work`` (default :data:`MAX_WORK` =
6e9, about 20 s), the paths are taken in a subgraph H of G instead (:func:`sparsified_edges`): each
record's k shortest edges of G, with k the largest that keeps the work within ``max_work`` (at least
:data:`MIN_NEIGHBOURS`), plus a minimum spanning forest of G if those alone split a component. H is a
subgraph, so D_H >= D_G and the reported stretch is a valid *upper bound* on G's (``exact`` False in
:class:`Protection`). Measured: synthetic N = 2,000: exact 1.2354; H with k = 16, 32, 64, 128: 2.28,
1.61, 1.29, 1.2354 (equal from k = 128 on); N = 5,000 (k = 120, 371k edges): 1.4311 in 20 s, equal to
k = 240's.

Measured stretch (the default max_stretch, :data:`DEFAULT_MAX_STRETCH`, is set from these):
grid 10x20 and 20x25 eta 2 km (1 km cells) 1.082 (any seed); synthetic N(0,1) 3-D eta 2: N = 500 seeds
0-5 1.32, 1.69, 1.61, 1.42, 1.35, 1.42, N = 1,000 1.38, N = 2,000 1.24, N = 5,000 <= 1.43; Rome roads
(rome_center) eta 2 km N = 500 1.017, N = 1,000 1.008; Helsinki (flows/examples/helsinki-release.toml,
N = 120, eta 0.5 km) 1.18; Rome eta 0.5 km N = 500 2.96, N = 1,000 5.06; Rome eta 0.4 km N = 300
(bench romeB300) 6.41 and 2 components; GloVe text500 (bench) 4.14 and 281 components (304 records
outside the largest). A stretch above 2 means a pair of records is protected as if it were more than
twice as far apart as it is: the graph is too sparse for its eta (raise eta).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.spatial.distance import cdist

from mdp_core.errors import InputError
from mdp_core.problem.graph import adjacency, components
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import haversine_km

BLOCK_ENTRIES = 1 << 21  # float64 entries of one (rows, N) slab: 16 MB
MAX_WORK = 6e9  # N x (2E + N) above which graph_protection uses the sparsified subgraph (~20 s)
MIN_NEIGHBOURS = 64  # shortest edges kept per record in the sparsified subgraph, at least
DEFAULT_MAX_STRETCH = 2.0  # the recommended [privacy] max_stretch (measurements in the module docstring)


# ----------------------------------------------------------------------------- lower bounds
class _LowerBounds:
    """Precomputed state of :func:`metric_lower_bounds` for one instance (so blocks share it)."""

    def __init__(self, inst: Instance, assume_complete: bool = False) -> None:
        self.n = inst.n_records
        self.metric = inst.metric
        self.points: np.ndarray | None = None
        self.latlon: np.ndarray | None = None
        self.stored: sp.csr_matrix | None = None
        self.floor = 0.0
        cols = inst.coordinate_columns()
        exact = inst.metric in ("euclidean", "haversine") and cols and (inst.metric != "haversine" or len(cols) == 2)
        if exact:
            self.points = inst.record_points()
            self.kind = "exact"
            return
        self.kind = "stored"
        self.stored = adjacency(self.n, inst.edges, inst.distances)
        rec = inst.records
        if (
            inst.metric == "graph"
            and rec is not None
            and {"lat", "lon"} <= set(rec.columns)
            and inst.distance_unit == "km"
        ):
            from mdp_core.problem.metrics import check_points

            self.latlon = check_points("record lat/lon", rec[["lat", "lon"]].to_numpy(np.float64), "haversine")
            self.kind = "stored+great_circle"
        if assume_complete:
            self.floor = inst.eta
            self.kind += "+complete_within_eta"

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        if self.points is not None:
            p = self.points
            return haversine_km(p[rows], p) if self.metric == "haversine" else cdist(p[rows], p)
        out = np.full((rows.shape[0], self.n), self.floor)
        if self.latlon is not None:
            out = np.maximum(out, haversine_km(self.latlon[rows], self.latlon))
        assert self.stored is not None
        sub = self.stored[rows].tocoo()
        out[sub.row, sub.col] = np.maximum(out[sub.row, sub.col], sub.data)
        out[np.arange(rows.shape[0]), rows] = 0.0
        return out


def _rows(inst: Instance, rows: Any) -> np.ndarray:
    r = np.arange(inst.n_records, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
    if r.size and (r.min() < 0 or r.max() >= inst.n_records):
        raise InputError(f"rows out of range 0..{inst.n_records - 1}")
    return r


def metric_lower_bounds(inst: Instance, rows: Any, *, assume_complete: bool = False) -> np.ndarray:
    """(len(rows), N) float64: a value <= the metric distance d(i, j) for each i in ``rows`` and every j.

    Exact for euclidean / haversine records with coordinates; for table-only distances see the module
    docstring (``assume_complete``: assert that every pair within eta is stored, then eta elsewhere).
    The diagonal (j = i) is 0. Unit: ``inst.distance_unit``.
    """
    return _LowerBounds(inst, assume_complete)(_rows(inst, rows))


def lower_bound_kind(inst: Instance, *, assume_complete: bool = False) -> str:
    """How :func:`metric_lower_bounds` bounds d for ``inst``: "exact", "stored", "stored+great_circle",
    with "+complete_within_eta" when ``assume_complete``."""
    return _LowerBounds(inst, assume_complete).kind


# ----------------------------------------------------------------------------- the protection report
@dataclass(frozen=True)
class Protection:
    """How far the mDP graph's guarantee reaches in the data's metric (see the module docstring).

    Attributes:
        n_components: connected components of the mDP graph.
        component_sizes: their sizes, descending.
        labels: (N,) int64 component of each record (ordered by smallest member).
        stretch: max over pairs i != j in one component of D_G(i, j) / d_lower(i, j); 1.0 when no
            component has two records; inf when such a pair has d_lower = 0. An upper bound on the
            dilation (exact D_G when ``exact``, else paths of a subgraph, see the module docstring).
        worst_pair: (i, j, D_G(i, j), d_lower(i, j)) attaining ``stretch`` (None when no pair).
        connected: one component.
        records_outside_largest: N minus the largest component's size (unprotected from its members).
        exact: D_G computed in G itself (False: in the sparsified subgraph, an upper bound).
        lower_bound: how d was bounded (:func:`lower_bound_kind`).
        edges_used: undirected edges of the graph the paths were computed in.
        stretch_within: the stretch over the pairs within the protection radius asked for (the neighbour
            relation the budget is charged for: :func:`graph_protection`'s ``radius``); <= ``stretch``.
    """

    n_components: int
    component_sizes: tuple[int, ...]
    labels: np.ndarray
    stretch: float
    worst_pair: tuple[int, int, float, float] | None
    connected: bool
    records_outside_largest: int
    exact: bool = True
    lower_bound: str = "exact"
    edges_used: int = 0
    stretch_within: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary (plain ints/floats; an infinite float is the string "inf", as in
        :meth:`mdp_core.solvers.verify.Certificate.as_dict`; ``float("inf")`` reads it back). No labels."""
        wp = self.worst_pair
        return {
            "n_components": int(self.n_components),
            "component_sizes": [int(s) for s in self.component_sizes],
            "stretch": _json_float(self.stretch),
            "worst_pair": None
            if wp is None
            else {
                "i": int(wp[0]),
                "j": int(wp[1]),
                "path_distance": _json_float(wp[2]),
                "metric_distance": _json_float(wp[3]),
            },
            "connected": bool(self.connected),
            "records_outside_largest": int(self.records_outside_largest),
            "exact": bool(self.exact),
            "lower_bound": self.lower_bound,
            "edges_used": int(self.edges_used),
        }


def _json_float(x: float) -> float | str:
    x = float(x)
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def sparsified_edges(n: int, edges: np.ndarray, distances: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A subgraph H of G with G's components: each record's ``k`` shortest edges of G, plus a minimum
    spanning forest of G when those alone split a component. Returns (edges (E', 2) i < j sorted,
    distances (E',)). D_H >= D_G for every pair (fewer paths)."""
    a = adjacency(n, edges, distances)
    a.sort_indices()
    ip, col, dat = a.indptr, a.indices, a.data
    pick: list[np.ndarray] = []
    for r in range(n):  # one argpartition per record: O(E) in all
        lo, hi = int(ip[r]), int(ip[r + 1])
        if hi - lo <= k:
            pick.append(np.arange(lo, hi))
        else:
            pick.append(lo + np.argpartition(dat[lo:hi], k - 1)[:k])
    sel = np.concatenate(pick) if pick else np.zeros(0, np.int64)
    row = np.repeat(np.arange(n), np.diff(ip))[sel]
    i, j, d = row, col[sel], dat[sel]
    if components(n, np.column_stack([i, j]))[0] != components(n, edges)[0]:
        msf = csgraph.minimum_spanning_tree(a).tocoo()
        i, j, d = np.r_[i, msf.row], np.r_[j, msf.col], np.r_[d, msf.data]
    lo_, hi_ = np.minimum(i, j).astype(np.int64), np.maximum(i, j).astype(np.int64)
    _, first = np.unique(lo_ * n + hi_, return_index=True)  # sorted by (i, j), one copy per pair
    return np.column_stack([lo_[first], hi_[first]]), d[first]


def graph_protection(
    inst: Instance,
    edges: np.ndarray,
    distances: np.ndarray,
    *,
    max_work: float | None = MAX_WORK,
    assume_complete: bool = False,
    radius: float | None = None,
    all_pairs: bool = False,
) -> Protection:
    """The :class:`Protection` of the mDP graph (``edges`` (E, 2) i < j, ``distances`` (E,), in
    ``inst.distance_unit``) over ``inst``'s records, against :func:`metric_lower_bounds`. ``radius``: also
    the stretch over the pairs at most that far apart (``stretch_within``; pairs whose metric lower bound
    is <= the radius: every pair within it, so an upper bound); None: ``stretch_within`` = ``stretch``.

    ``max_work``: N x (2E + N) above which paths are taken in :func:`sparsified_edges`
    (an upper bound on the stretch; None: always exact). Memory and time: see the module docstring.
    ``all_pairs``: the mechanism is certified over every pair of a component in the metric (module docstring):
    stretch and stretch within the radius 1, no worst pair; InputError unless d is exact (coordinates).
    """
    n = inst.n_records
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    distances = np.asarray(distances, dtype=np.float64).reshape(-1)
    if edges.shape[0] != distances.shape[0]:
        raise InputError(f"{edges.shape[0]} edges but {distances.shape[0]} distances")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise InputError(f"edge endpoint out of range 0..{n - 1}")
    if distances.size and not (np.all(np.isfinite(distances)) and np.all(distances > 0)):
        raise InputError("edge distances must be finite and > 0")
    count, labels = components(n, edges)
    sizes = np.bincount(labels, minlength=count)
    exact = all_pairs or max_work is None or n * (2.0 * edges.shape[0] + n) <= max_work
    g_edges, g_dist = edges, distances
    if not exact:
        assert max_work is not None
        k = max(MIN_NEIGHBOURS, int((max_work / n - n) // (2.0 * n)))
        g_edges, g_dist = sparsified_edges(n, edges, distances, k)
    bounds = _LowerBounds(inst, assume_complete)
    if all_pairs and bounds.kind != "exact":
        raise InputError("every pair is certified only in a metric of the records' coordinates (all_pairs)")
    stretch, worst, within = 1.0, None, 1.0
    if sizes.max() >= 2 and not all_pairs:
        adj = adjacency(n, g_edges, g_dist)
        multi = np.flatnonzero(sizes[labels] >= 2)  # records with someone to be confused with
        step = max(1, BLOCK_ENTRIES // n)
        best = -1.0
        for s in range(0, multi.size, step):
            rows = multi[s : s + step]
            dg = csgraph.dijkstra(adj, directed=False, indices=rows)  # (b, n); inf across components
            dl = bounds(rows)
            same = np.isfinite(dg)
            same[np.arange(rows.size), rows] = False
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(same, dg / dl, -1.0)  # dl = 0 < dg: inf
            if radius is not None:
                within = max(within, float(np.where(dl <= radius, ratio, -1.0).max(initial=1.0)))
            flat = int(np.argmax(ratio))
            r, c = divmod(flat, n)
            if ratio[r, c] > best:
                best = float(ratio[r, c])
                worst = (int(rows[r]), int(c), float(dg[r, c]), float(dl[r, c]))
        stretch = best
    ordered = tuple(int(x) for x in np.sort(sizes)[::-1])
    return Protection(
        n_components=int(count),
        component_sizes=ordered,
        labels=labels,
        stretch=float(stretch),
        worst_pair=worst,
        connected=count == 1,
        records_outside_largest=int(n - ordered[0]),
        exact=bool(exact),
        lower_bound=bounds.kind,
        edges_used=int(g_edges.shape[0]),
        stretch_within=float(stretch) if radius is None else min(within, float(stretch)),
    )


# ----------------------------------------------------------------------------- realised guarantee
def metric_epsilon(inst: Instance, z: np.ndarray, rows: Any = None, *, assume_complete: bool = False) -> float:
    """The realised guarantee of Z (N, K) in the metric, per ``inst.distance_unit``:

        max over i in ``rows`` (None: all), j != i, k of |ln z_ik - ln z_jk| / d_lower(i, j),

    inf when one of z_ik, z_jk is 0 and the other not (or when d_lower = 0 < the log ratio); pairs
    with both 0 contribute nothing. For a certified Z this is <= eps (1 + 1e-9) x stretch.

    Computed as a Chebyshev distance between rows of ln Z (zeros set aside: rows with different
    supports are an infinite ratio), in (b, N) slabs of :data:`BLOCK_ENTRIES` entries; time ~ N^2 K.
    The logs are taken separately (absolute error ~1e-13), which is far below any eps * d of interest.
    """
    z = np.asarray(z, dtype=np.float64)
    n = inst.n_records
    if z.ndim != 2 or z.shape[0] != n:
        raise InputError(f"mechanism has shape {z.shape}, the instance has N = {n} records")
    if not np.all(np.isfinite(z)) or np.any(z < 0):
        raise InputError("mechanism has NaN, infinite or negative probabilities")
    r = _rows(inst, rows)
    support = z > 0
    _, pattern = np.unique(support, axis=0, return_inverse=True)
    pattern = pattern.reshape(-1)
    with np.errstate(divide="ignore"):
        logz = np.where(support, np.log(np.where(support, z, 1.0)), 0.0)
    bounds = _LowerBounds(inst, assume_complete)
    step = max(1, BLOCK_ENTRIES // n)
    worst = 0.0
    for s in range(0, r.size, step):
        rows_b = r[s : s + step]
        lr = cdist(logz[rows_b], logz, "chebyshev")
        lr[pattern[rows_b][:, None] != pattern[None, :]] = np.inf
        lr[np.arange(rows_b.size), rows_b] = 0.0
        dl = bounds(rows_b)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(lr > 0, lr / dl, 0.0)  # lr > 0 = dl: inf
        worst = max(worst, float(ratio.max(initial=0.0)))
    return worst
