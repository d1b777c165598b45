"""A mechanism for people's own coordinates, interpolated between records (issue 50).

A certified mechanism Z (N, K) protects *records*: z_ik <= exp(eps d(i, j)) z_jk. A person snapped to the
nearest record gets eps x (d + 2 x max_distance) (docs/privacy.md, "the snapping term"). This module gives every
coordinate x of the area its own row p_x, a geometric (log-convex) mixture of the rows of the records around x,
as anchor-interpolation mechanisms do (AIPO, arXiv 2601.09946), and a certificate L from the published mechanism
and public geometry only such that for ANY two coordinates x, x' of the area and every output y

    p_x(y) <= exp(L d(x, x')) p_x'(y),   d the instance's metric (km for lat/lon).

Construction (every coordinate in km of a local plane, :class:`Plane`):

1. The records' Delaunay triangulation (scipy.spatial.Delaunay). A person at x inside the records' convex hull
   has barycentric weights w(x) over its triangle's three records; outside the hull x is first sent to its
   Euclidean projection onto the hull (1-Lipschitz: it raises no rate).
2. p_x(y) = prod_i z_{a_i y}^{w_i(x)} / Z(x) over the outputs y of the rows' common support S (the outputs
   every record's row gives a positive probability; any other output is never released for people).
3. On a triangle T, log p_x(y) = F_T(x, y) - log Z(x) with F_T affine in x, gradient g_y (the gradient of the
   linear interpolant of f_i(y) = ln z_{a_i y} over T's vertices), so grad_x log p_x(y) = g_y - E_{p_x}[g] and
   |grad_x log p_x(y)| <= L_T = sup_{x in T} |g_y - E_{p_x}[g]|, bounded above by max_{y, y'} |g_y - g_y'|
   (E_{p_x}[g] lies in the convex hull of the g's) and by a lattice of T with a Lipschitz slack
   (:func:`triangle_rate`).
   F is continuous across the triangles' shared edges, so along the straight segment from x to x' (inside the
   convex hull) log p_x(y) is continuous and piecewise C^1: |ln p_x(y) - ln p_x'(y)| <= (max_T L_T) |X - X'|.
4. The plane's distortion kappa: |X - X'| <= kappa d(x, x') for any two coordinates of the area's box
   (:func:`plane`), so L = kappa x max_T L_T (x 1 + :data:`ROUNDING`, the floating-point margin).

The proof, the handling of the support and the measured cost: docs/privacy.md, "A mechanism for people's
coordinates". Pure numpy/scipy: no Prefect, no secret (the mechanism and the records' coordinates are public).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import Delaunay
from scipy.spatial.distance import cdist

from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, haversine_rows_km

ROUNDING = 1e-6  # relative margin on the certified rate for the floating-point evaluation of the g's
LOG_TOL = 1e-9  # absolute tolerance on a log ratio for evaluating p_x in floating point (the pair check's)
MARGIN = 0.05  # the lattice bound's slack, at most this share of D_T (finer lattices up to LATTICE_MAX)
LATTICE_MAX = 400  # subdivisions of a triangle's side at most (the slack is then whatever it is, still a bound)
LATTICE_CHUNK = 2048  # lattice points per block of triangle_rate (memory: 2048 x |S| floats a block)
_CHUNK = 1 << 22  # (point, output) entries evaluated at once
KM_PER_RAD = EARTH_RADIUS_KM  # km of a meridian per radian of latitude


@dataclass(frozen=True)
class Plane:
    """Local planar km coordinates of an area. ``haversine``: lat/lon degrees mapped to (east, north) km by
    X = R c0 (lon - lon0), Y = R (lat - lat0) (radians; c0 = the cosine of the area's pole-most latitude),
    else the coordinates themselves (2-D euclidean). ``low``, ``high`` (2,): the area's box in the instance's
    coordinates (lat, lon or x0, x1); ``kappa`` >= 1: |X - X'| <= kappa d(x, x') for any two points of it."""

    haversine: bool
    origin: np.ndarray
    c0: float
    kappa: float
    low: np.ndarray
    high: np.ndarray


def plane(instance: Instance, max_distance: float) -> Plane:
    """The plane of the area a release accepts people in: the records' bounding box widened by ``max_distance``
    (every point within max_distance of a record lies in it). For lat/lon, with t half the box's largest span
    in radians: great-circle d = 2R asin(sqrt(h)) >= 2R sqrt(h), h >= sin^2(dlat/2) + c0^2 sin^2(dlon/2) and
    sin s >= s (1 - t^2/6) for 0 <= s <= t give d >= (1 - t^2/6) |X - X'|: kappa = 1 / (1 - t^2/6).
    InputError unless the records have 2-D coordinates (lat/lon, or x0, x1 with the euclidean metric)."""
    rec = instance.record_points()
    if rec.shape[1] != 2 or instance.metric not in ("haversine", "euclidean"):
        raise InputError("interpolation between records needs 2-D coordinates (lat/lon or x0, x1 euclidean)")
    if not (math.isfinite(max_distance) and max_distance >= 0):
        raise InputError(f"max_distance must be a finite number >= 0, got {max_distance}")
    lo, hi = rec.min(axis=0), rec.max(axis=0)
    if instance.metric == "euclidean":
        return Plane(False, np.zeros(2), 1.0, 1.0, lo - max_distance, hi + max_distance)
    dlat = math.degrees(max_distance / KM_PER_RAD)
    lat_lo, lat_hi = lo[0] - dlat, hi[0] + dlat
    c0 = math.cos(math.radians(max(abs(lat_lo), abs(lat_hi))))
    if lat_lo <= -90 or lat_hi >= 90 or c0 <= 0:
        raise InputError("the area reaches a pole: no local plane")
    dlon = math.degrees(2 * math.asin(min(1.0, math.sin(max_distance / (2 * KM_PER_RAD)) / c0)))
    low, high = np.array([lat_lo, lo[1] - dlon]), np.array([lat_hi, hi[1] + dlon])
    t = 0.5 * math.radians(float(np.max(high - low)))
    if t >= 1.0 or high[1] - low[1] >= 180:
        raise InputError("the area spans too much of the globe for a local plane")
    return Plane(True, 0.5 * (low + high), c0, 1.0 / (1.0 - t * t / 6.0), low, high)


def to_plane(pl: Plane, points: np.ndarray) -> np.ndarray:
    """(n, 2) planar km of ``points`` (n, 2) in the instance's coordinates."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if not pl.haversine:
        return p.copy()
    d = np.radians(p - pl.origin)
    return np.column_stack([KM_PER_RAD * pl.c0 * d[:, 1], KM_PER_RAD * d[:, 0]])


def distance(pl: Plane, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n,) distances in the instance's metric between the rows of ``a`` and ``b`` (n, 2) (km for lat/lon)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return haversine_rows_km(a, b) if pl.haversine else np.linalg.norm(a - b, axis=1)


@dataclass(frozen=True)
class Mesh:
    """The records' Delaunay triangulation in the plane ``pl``: ``xy`` (N, 2) the records' planar km,
    ``simplices`` (T, 3) record indices, ``inverse`` (T, 2, 2) each triangle's barycentric map (w_0, w_1 =
    inverse @ (X - xy[simplices[:, 2]]), w_2 = 1 - w_0 - w_1), ``hull`` (H, 2) record indices of the hull's
    edges, ``hull_triangle`` (H,) the triangle each edge bounds, ``unused`` the records no triangle has."""

    pl: Plane
    xy: np.ndarray
    tri: Delaunay
    simplices: np.ndarray
    inverse: np.ndarray
    hull: np.ndarray
    hull_triangle: np.ndarray
    unused: int


def triangulate(instance: Instance, max_distance: float, keep: np.ndarray | None = None) -> Mesh:
    """The :class:`Mesh` of the records ``keep`` (record indices; default all), InputError with fewer than 3
    records, all on one line, or a flat triangle."""
    pl = plane(instance, max_distance)
    xy = to_plane(pl, instance.record_points())
    keep = np.arange(xy.shape[0]) if keep is None else np.unique(np.asarray(keep, dtype=np.int64))
    if keep.size < 3:
        raise InputError("interpolation needs at least 3 records")
    try:
        tri = Delaunay(xy[keep])
    except Exception as exc:  # scipy's QhullError: every record on one line
        raise InputError(f"the records cannot be triangulated ({type(exc).__name__}): are they on one line?") from exc
    s = keep[np.asarray(tri.simplices, dtype=np.int64)]
    m = np.stack([xy[s[:, 0]] - xy[s[:, 2]], xy[s[:, 1]] - xy[s[:, 2]]], axis=2)  # columns: edge vectors
    det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
    if np.any(det == 0):
        raise InputError("the triangulation has a flat triangle")
    inv = (
        np.stack([np.stack([m[:, 1, 1], -m[:, 0, 1]], 1), np.stack([-m[:, 1, 0], m[:, 0, 0]], 1)], 1)
        / det[:, None, None]
    )
    t_idx, opp = np.nonzero(np.asarray(tri.neighbors) == -1)  # facet opposite vertex opp of triangle t: on the hull
    edge = np.ones((t_idx.size, 3), dtype=bool)
    edge[np.arange(t_idx.size), opp] = False
    hull = s[t_idx][edge].reshape(-1, 2)
    unused = xy.shape[0] - np.unique(s).size  # records dropped by ``keep`` or by Qhull (a duplicate point)
    return Mesh(pl, xy, tri, s, inv, hull, t_idx.astype(np.int64), int(unused))


def _largest_angle(xy: np.ndarray) -> int:
    """Which corner (0-2) of the triangle ``xy`` (3, 2) has the largest angle (faces the longest side)."""
    side = [float(np.linalg.norm(xy[(c + 1) % 3] - xy[(c + 2) % 3])) for c in range(3)]
    return int(np.argmax(side))


def thin(instance: Instance, z: np.ndarray, max_distance: float, ratio: float) -> Mesh:
    """A :class:`Mesh` over a subset of the records: from all of them, drop the record at the largest angle of
    the triangle of the largest L_T (a sliver's middle record, or one of a needle's two close records) until
    max_T L_T <= ``ratio`` x the records' eps (``instance.epsilon``), or 3 records are left. Public: the choice
    reads the mechanism and the records' coordinates only; any subset gives a valid certificate (:func:`certify`)."""
    f, _ = log_rows(z)
    mesh = triangulate(instance, max_distance)
    known: dict[tuple[int, ...], float] = {}
    while True:
        rates = triangle_rates(mesh, f, known)
        t = int(np.argmax(rates))
        kept = np.unique(mesh.simplices)
        if rates[t] <= ratio * instance.epsilon or kept.size <= 3:
            return mesh
        corners = mesh.simplices[t]
        drop = corners[_largest_angle(mesh.xy[corners])]
        try:
            mesh = triangulate(instance, max_distance, kept[kept != drop])
        except InputError:
            return mesh


def locate(mesh: Mesh, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n,) the triangle and (n, 3) the barycentric weights (of its ``simplices`` row) of ``points`` (n, 2) in
    the instance's coordinates, a point outside the hull first sent to its projection onto the hull."""
    xy = to_plane(mesh.pl, points)
    # brute force where the directed walk fails: a point inside the hull is never sent to its boundary
    t = np.asarray(mesh.tri.find_simplex(xy, bruteforce=True), dtype=np.int64)
    w = np.zeros((xy.shape[0], 3))
    inside = t >= 0
    ti = t[inside]
    local = np.einsum("tij,tj->ti", mesh.inverse[ti], xy[inside] - mesh.xy[mesh.simplices[ti, 2]])
    w[inside] = np.column_stack([local, 1.0 - local.sum(axis=1)])
    out = np.flatnonzero(~inside)
    if out.size:
        t[out], w[out] = _project(mesh, xy[out])
    return t, w


def _project(mesh: Mesh, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nearest point of the hull's boundary to each planar point (n, 2) outside it: its triangle (n,) and
    barycentric weights (n, 3) (1 - s and s on the hull edge's two records, 0 on the third)."""
    a, b = mesh.xy[mesh.hull[:, 0]], mesh.xy[mesh.hull[:, 1]]
    ab = b - a
    s = np.clip(((xy[:, None, :] - a[None]) * ab[None]).sum(axis=2) / (ab * ab).sum(axis=1)[None], 0.0, 1.0)
    near = a[None] + s[:, :, None] * ab[None]
    e = np.argmin(((xy[:, None, :] - near) ** 2).sum(axis=2), axis=1)
    t = mesh.hull_triangle[e]
    w = np.zeros((xy.shape[0], 3))
    se = s[np.arange(xy.shape[0]), e]
    for end, weight in ((0, 1.0 - se), (1, se)):
        col = np.argmax(mesh.simplices[t] == mesh.hull[e, end][:, None], axis=1)
        w[np.arange(xy.shape[0]), col] = weight
    return t, w


@dataclass(frozen=True)
class Certificate:
    """What :func:`certify` proves: ``rate`` L (per unit of the instance's metric, km for lat/lon):
    p_x(y) <= exp(L d(x, x')) p_x'(y) for any two points x, x' of the area's box and every output y of
    ``support``; ``planar_rate`` max_T L_T per planar km (x 1 + ROUNDING), ``kappa`` the plane's distortion,
    ``worst_triangle`` the triangle of the largest L_T, ``dropped_outputs`` outputs outside the support (never
    released for people), ``tolerance`` the absolute log tolerance of evaluating p_x (:data:`LOG_TOL`)."""

    rate: float
    planar_rate: float
    kappa: float
    worst_triangle: int
    support: np.ndarray
    dropped_outputs: int
    tolerance: float = LOG_TOL


def log_rows(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, |S|) ln z on the rows' common support S (the outputs every row gives a positive probability) and
    (|S|,) S's output indices. InputError when S is empty."""
    z = np.asarray(z, dtype=np.float64)
    support = np.flatnonzero(np.all(z > 0, axis=0))
    if support.size == 0:
        raise InputError("the records' rows share no output with a positive probability")
    return np.log(z[:, support]), support


def _lattice(m: int) -> np.ndarray:
    """(P, 3) the barycentric lattice {(i, j, m - i - j) / m}: the corners of T's m^2 sub-triangles."""
    i, j = np.meshgrid(np.arange(m + 1), np.arange(m + 1), indexing="ij")
    keep = i + j <= m
    w = np.column_stack([i[keep], j[keep]]) / m
    return np.column_stack([w, 1.0 - w.sum(axis=1)])


def triangle_rate(f3: np.ndarray, inverse: np.ndarray, corners: np.ndarray) -> float:
    """L_T per planar km for one triangle: ``f3`` (3, |S|) ln z at its records, ``inverse`` (2, 2) its
    barycentric map, ``corners`` (3, 2) planar km. sup_{x in T} max_y |g_y - E_{p_x} g|, bounded two ways:
    by D = max_{y, y'} |g_y - g_y'| (E_{p_x} g is in the g's convex hull), and by its value on a lattice of
    T plus (D^2 / 4) x (T's longest side / m): E_{p_x} g has Jacobian Cov_{p_x}(g), whose operator norm is
    max_u Var(u.g) <= D^2 / 4 (Popoviciu), and every point of T is within longest / m of a lattice point."""
    g = np.outer(f3[0] - f3[2], inverse[0]) + np.outer(f3[1] - f3[2], inverse[1])  # (|S|, 2)
    diam = float(cdist(g, g).max())
    longest = max(float(np.linalg.norm(corners[a] - corners[b])) for a, b in ((0, 1), (1, 2), (0, 2)))
    m = int(min(LATTICE_MAX, max(1, math.ceil(diam * longest / (4 * MARGIN)))))
    lattice, sampled, g2 = _lattice(m), 0.0, (g * g).sum(axis=1)
    for at in range(0, lattice.shape[0], LATTICE_CHUNK):  # (chunk, |S|) at a time: bounded memory at any m
        big = lattice[at : at + LATTICE_CHUNK] @ f3
        p = np.exp(big - big.max(axis=1, keepdims=True))
        mean = (p @ g) / p.sum(axis=1, keepdims=True)  # (chunk, 2) E_{p_x} g at the lattice points
        sq = g2[None, :] - 2 * (mean @ g.T) + (mean * mean).sum(axis=1)[:, None]  # |g_y - mean|^2
        sampled = max(sampled, float(np.sqrt(np.maximum(sq, 0.0)).max()))
    return min(diam, sampled + diam * diam / 4 * longest / m)


def triangle_rates(mesh: Mesh, f: np.ndarray, known: dict[tuple[int, ...], float] | None = None) -> np.ndarray:
    """(T,) L_T per planar km of every triangle (:func:`triangle_rate`), ``f`` (N, |S|) ln z on the support;
    ``known``: L_T already computed, by sorted record triple (read and filled)."""
    known = {} if known is None else known
    out = np.empty(mesh.simplices.shape[0])
    for t, tri in enumerate(mesh.simplices):
        key = tuple(sorted(int(v) for v in tri))
        if key not in known:
            known[key] = triangle_rate(f[tri], mesh.inverse[t], mesh.xy[tri])
        out[t] = known[key]
    return out


def certify(mesh: Mesh, z: np.ndarray) -> Certificate:
    """The certificate of the interpolated mechanism of ``z`` (N, K) on ``mesh`` (module docstring, step 3-4)."""
    f, support = log_rows(z)
    rates = triangle_rates(mesh, f)
    planar = float(rates.max()) * (1.0 + ROUNDING)
    return Certificate(
        rate=planar * mesh.pl.kappa,
        planar_rate=planar,
        kappa=mesh.pl.kappa,
        worst_triangle=int(np.argmax(rates)),
        support=support,
        dropped_outputs=int(z.shape[1] - support.size),
    )


def log_mechanism(mesh: Mesh, f: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(n, |S|) ln p_x(y) for ``points`` (n, 2) in the instance's coordinates, ``f`` (N, |S|) ln z on the
    support (:func:`log_rows`): ln p_x = sum_i w_i(x) f_i - logsumexp(sum_i w_i(x) f_i)."""
    t, w = locate(mesh, points)
    out = np.empty((t.size, f.shape[1]))
    step = max(1, _CHUNK // max(f.shape[1], 1))
    for a in range(0, t.size, step):
        s, ww = mesh.simplices[t[a : a + step]], w[a : a + step]
        big = np.einsum("nm,nmy->ny", ww, f[s])
        top = big.max(axis=1, keepdims=True)
        out[a : a + step] = big - top - np.log(np.exp(big - top).sum(axis=1, keepdims=True))
    return out


def mechanism(mesh: Mesh, z: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(n, K) p_x(y) for ``points`` (n, 2): the interpolated rows, 0 outside the rows' common support."""
    f, support = log_rows(z)
    p = np.zeros((np.asarray(points).reshape(-1, 2).shape[0], np.asarray(z).shape[1]))
    p[:, support] = np.exp(log_mechanism(mesh, f, points))
    return p


def random_pairs(pl: Plane, n: int, rng: np.random.Generator, near: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` pairs of points (n, 2) x 2 of the area's box: the first half independent and uniform, the second
    a uniform point and another within ``near`` of it on each coordinate axis (clipped to the box): short
    distances are where a rate is tight."""
    a = rng.uniform(pl.low, pl.high, size=(n, 2))
    b = rng.uniform(pl.low, pl.high, size=(n, 2))
    half = n // 2
    step = near if not pl.haversine else math.degrees(near / KM_PER_RAD)
    scale = np.array([1.0, 1.0 / pl.c0]) if pl.haversine else np.ones(2)
    b[half:] = np.clip(a[half:] + rng.uniform(-step, step, size=(n - half, 2)) * scale, pl.low, pl.high)
    return a, b


@dataclass(frozen=True)
class PairCheck:
    """The pair check's verdict: ``pairs`` checked, ``violations`` (pairs with max_y |ln p_x(y) - ln p_x'(y)|
    > rate d + tolerance), ``max_excess`` the largest max_y |...| - rate d, ``max_realised`` the largest
    max_y |...| / d (per unit: the rate the pairs show, <= the certified one)."""

    pairs: int
    violations: int
    max_excess: float
    max_realised: float


def pair_check(mesh: Mesh, z: np.ndarray, cert: Certificate, a: np.ndarray, b: np.ndarray) -> PairCheck:
    """Every pair (a_m, b_m) ((n, 2) each, the instance's coordinates): p_x, p_x' computed in full, their largest
    log ratio against ``cert.rate`` x d(a_m, b_m) + ``cert.tolerance``."""
    f, _ = log_rows(z)
    d = distance(mesh.pl, a, b)
    worst = np.abs(log_mechanism(mesh, f, a) - log_mechanism(mesh, f, b)).max(axis=1)
    excess = worst - cert.rate * d
    realised = np.where(d > 0, worst / np.where(d > 0, d, 1.0), 0.0)
    return PairCheck(int(d.size), int(np.sum(excess > cert.tolerance)), float(excess.max()), float(realised.max()))
