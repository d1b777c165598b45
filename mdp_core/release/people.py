"""The error a release gives people, snapping included, from public geometry only (issue 50).

A person is not a record: the microdata stage maps each person to the nearest record (at most ``max_distance``
away, :func:`mdp_core.problem.microdata.map_individuals`) and the mechanism perturbs that record. What a person
gets is the distance from *where they are* to what is released. This module computes it for people spread as
the release's public prior: a person belongs to record i with probability p_i (the prior, published in
``instance/records.parquet``) and is uniform in record i's **cell**, the points of the released area that would
be snapped to record i:

* ``grid``: the grid cell (the square of side ``cell_km`` around the cell centre), within ``max_distance`` of
  its centre;
* ``text``: the record itself (people are named by their word: no snapping);
* ``road``: the streets of its road network (public: the files the instance's provenance names, read again,
  :func:`road_streets`) nearer to record i than to any other record and within ``max_distance`` of it, people
  uniform along them, :data:`STREET_OFFSET_KM` to either side of the centre line (people live on streets, not
  in the blocks, parks and river between them: over the cells' area the figure overstated the true people's
  error by 12-27 %, bench/README.md, "People along the streets");
* every other kind (the agency's points, vectors; a road without streets near its records): the points nearer
  to record i than to any other record (its Voronoi cell) and within ``max_distance`` of it (the release
  refuses anyone farther), inside the records' bounding box (people are where the universe is; an axis the
  records span less than 2 ``max_distance`` of is not cut): no public geometry says better where people are.

Each cell is sampled by a fixed public seed (:data:`PEOPLE_SEED`; no privacy randomness, nothing about a
person): a grid cell uniformly; a Voronoi cell by drawing uniform points in the ball of radius ``max_distance``
around every record (lat/lon: the tangent disc, mapped onto the sphere as planar Laplace is), each landing in
the cell of its nearest record with the weight 1 / (the number of records within ``max_distance`` of it): the
balls' mixture density is proportional to that number, so the weighted points of each cell are uniform in it.
A cell no point lands in (a sliver) is represented by its record. Streets are integrated, not sampled: each
street is cut into pieces of :data:`STREET_STEP_KM` (longer on a map too large for :data:`PEOPLE_BUDGET`), each
piece's midpoint standing for its length.

Per person (x in cell i, every figure in the metric, km for geo data, and averaged over x in the cell, then
with the prior over cells):

* the release: sum_k z_ik d(x, o_k) (``release_per_person``);
* the snap: d(x, r_i) (``snap_to_record``), the part of the error the person's move to the record adds;
* planar Laplace applied at x itself at the compared rate (continuous: exactly D / eps; remapped: the noisy
  point sent to the nearest output, d(x, that output), sampled with the same public seed);
* the floor: min_k d(x, o_k), no mechanism releasing these outputs does better even knowing x.

The figure holds for people spread as the prior (within each cell uniformly); for the agency's actual people it
is an estimate. Weighting the cells by the release's own published counts does not make it theirs: on three road
releases (two made-up Rome tables, Helsinki's) the figure stayed 5-8 % off their people's own even with their
*true* per-record counts, the rest being where people stand within their cells, which no public geometry or
released count says (bench/HISTORY.md,
"The table's own people"). The figure for the table's people is a measurement of their locations:
:func:`dp_mean_error` is that measurement, eps-DP for one person's change (n public), from the public bounds
:func:`error_range`; :func:`measured_error` is what a release publishes (``[release] eps_error``: charged by the
measuring stage before it is made, composed into the guarantee; docs/privacy.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.spatial import cKDTree

from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, unit_sphere

if TYPE_CHECKING:
    from mdp_core.release.postprocess import Measure

PEOPLE_SEED = 2050  # public and fixed: where sampled people stand in their cells (no person's data)
PEOPLE_BUDGET = 1 << 25  # person-to-output distances evaluated in all (the per-record samples follow)
PEOPLE_MIN, PEOPLE_MAX = 16, 256  # sampled people per record: at least, at most
RELEASE, SNAP = "release_per_person", "snap_to_record"  # the rows evaluation.parquet gains
_CHUNK = 1 << 22  # distances per block
STREET_STEP_KM = 0.01  # people along the streets: one point per piece of at most this length (more on a large map)
STREET_OFFSET_KM = 0.02  # ... on either side of the street's centre line (a building's front, not the roadway)
ERROR_STEPS = 2**20  # a person's error is summed in whole steps of (hi - lo) / this (:func:`error_step`)
PEOPLE_AT = ("lat_lon", "coordinates", "records")  # where each person's error is measured from (:func:`measured_error`)
ERROR_TARGET = 0.01  # eps_error = "auto": the noise on the mean at most this share of the figure ...
ERROR_WIDTH_RATIO = 6.0  # ... taking (hi - lo) / figure as this (3.3-5.6 on eight tables: bench/HISTORY.md)
ERROR_LEVELS = (0.1, 0.25, 0.5, 1.0)  # ... at the smallest of these fixed levels reaching it (the last: the cap)
ERROR_EPS_CAP = ERROR_LEVELS[-1]


@dataclass(frozen=True)
class Cells:
    """People sampled in each record's cell: ``space`` (M, D') their coordinates in the metric's space (points
    on the sphere of radius EARTH_RADIUS_KM for lat/lon, the coordinates otherwise), ``record`` (M,) the record
    each is snapped to, ``weight`` (M,) > 0 (uniform within a cell once normalised), ``per_record`` the points
    drawn per record, ``max_snap`` the bound on any person's snap distance from the cells' public geometry
    (``max_distance``, or the grid's half-diagonal when smaller; 0 without snapping), ``shape`` what a cell is
    (words), ``empty`` the cells no point landed in (represented by their record)."""

    space: np.ndarray
    record: np.ndarray
    weight: np.ndarray
    per_record: int
    max_snap: float
    shape: str
    empty: int


def space_points(instance: Instance, points: np.ndarray) -> np.ndarray:
    """(n, D') coordinates of ``points`` (n, D) in the metric's space: 3-D on the sphere for lat/lon."""
    return unit_sphere(points) if instance.metric == "haversine" else np.asarray(points, dtype=np.float64)


def metric_distance(instance: Instance, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) distances in the instance's metric between space points ``a`` (n, D') and ``b`` (m, D')
    (great-circle km from the chord for lat/lon)."""
    from scipy.spatial.distance import cdist

    d = cdist(a, b)
    if instance.metric == "haversine":
        return 2 * EARTH_RADIUS_KM * np.arcsin(np.clip(d / (2 * EARTH_RADIUS_KM), 0.0, 1.0))
    return d


def _chord(instance: Instance, radius: float) -> float:
    """The space distance of a metric radius (the chord of an arc on the sphere)."""
    if instance.metric == "haversine":
        return 2 * EARTH_RADIUS_KM * math.sin(min(radius, math.pi * EARTH_RADIUS_KM) / (2 * EARTH_RADIUS_KM))
    return radius


def per_record_samples(n_records: int, n_outputs: int) -> int:
    """People sampled per record: :data:`PEOPLE_BUDGET` distances spread over N x K, within its bounds."""
    return int(min(PEOPLE_MAX, max(PEOPLE_MIN, PEOPLE_BUDGET // max(n_records * n_outputs, 1))))


def _ball(instance: Instance, centres: np.ndarray, radius: float, s: int, rng: np.random.Generator) -> np.ndarray:
    """(n, s, D') points uniform in the ball of ``radius`` around each centre (n, D) (lat/lon: the tangent
    disc, mapped onto the sphere by the azimuthal equidistant map)."""
    from mdp_core.release.baseline import on_sphere

    n = centres.shape[0]
    if instance.metric == "haversine":
        r = radius * np.sqrt(rng.uniform(size=(n, s, 1)))
        t = rng.uniform(0.0, 2 * math.pi, size=(n, s, 1))
        return on_sphere(centres, np.concatenate([r * np.cos(t), r * np.sin(t)], axis=2))
    dim = centres.shape[1]
    u = rng.normal(size=(n, s, dim))
    u /= np.linalg.norm(u, axis=2, keepdims=True)
    return centres[:, None, :] + radius * rng.uniform(size=(n, s, 1)) ** (1.0 / dim) * u


def _grid_cells(instance: Instance, max_distance: float, s: int, rng: np.random.Generator) -> Cells:
    """Uniform points in each grid cell (side ``cell_km``, from the instance's provenance), within max_distance."""
    half = 0.5 * float(instance.provenance["parameters"]["cell_km"])
    rec = instance.record_points()
    pts = rec[:, None, :] + rng.uniform(-half, half, size=(rec.shape[0], s, 2))
    owner = np.repeat(np.arange(rec.shape[0]), s)
    flat = pts.reshape(-1, 2)
    keep = np.linalg.norm(flat - rec[owner], axis=1) <= max_distance
    shape = f"the grid cell ({2 * half:g} x {2 * half:g} {instance.distance_unit})"
    if max_distance < half * math.sqrt(2):
        shape += f" within max_distance {max_distance:g} {instance.distance_unit} of its centre"
    return _fill(
        flat[keep], owner[keep], np.ones(int(keep.sum())), rec, s, min(max_distance, half * math.sqrt(2)), shape
    )


def _voronoi_cells(instance: Instance, max_distance: float, s: int, rng: np.random.Generator) -> Cells:
    """The balls' mixture, each point weighted by 1 / (records within max_distance): uniform in each cell; cut to
    the records' bounding box (:func:`_in_extent`)."""
    rec = instance.record_points()
    rec_space = space_points(instance, rec)
    tree = cKDTree(rec_space)
    pts = _ball(instance, rec, max_distance, s, rng).reshape(-1, rec_space.shape[1])
    inside = _in_extent(instance, pts, rec, max_distance)
    pts = pts[inside]
    _, owner = tree.query(pts)
    covering = tree.query_ball_point(pts, _chord(instance, max_distance) * (1 + 1e-12), return_length=True)
    weight = 1.0 / np.maximum(np.asarray(covering, dtype=np.float64), 1.0)
    shape = (
        f"the points nearer to the record than to any other, within max_distance {max_distance:g} "
        f"{instance.distance_unit}, inside the records' bounding box"
    )
    return _fill(pts, np.asarray(owner, dtype=np.int64), weight, rec_space, s, max_distance, shape)


def _in_extent(instance: Instance, pts: np.ndarray, rec: np.ndarray, max_distance: float) -> np.ndarray:
    """(M,) whether each space point ``pts`` (M, D') lies in the records' (N, D) bounding box, on every axis the
    records span at least 2 max_distance of (lat/lon: degrees; an axis narrower than that is not cut). People are
    where the universe is: a cell on its edge reaching max_distance beyond it overstated the people's snap by 14 %
    on a cube of vectors (bench/HISTORY.md, "Per person on a city grid and on vectors")."""
    at = _latlon(pts) if instance.metric == "haversine" else pts
    lo, hi = rec.min(axis=0), rec.max(axis=0)
    width = hi - lo
    if instance.metric == "haversine":  # degrees to km: latitude, longitude at the records' mean latitude
        width = width * np.array([111.2, 111.2 * math.cos(math.radians(float(rec[:, 0].mean())))])
    cut = width >= 2 * max_distance
    return np.all((at[:, cut] >= lo[cut]) & (at[:, cut] <= hi[cut]), axis=1)


def _fill(
    pts: np.ndarray,
    owner: np.ndarray,
    weight: np.ndarray,
    rec: np.ndarray,
    s: int,
    max_snap: float,
    shape: str,
) -> Cells:
    """:class:`Cells` of sampled points, each empty cell represented by its record (``rec``: records in the
    same coordinates as ``pts``)."""
    n = rec.shape[0]
    empty = np.flatnonzero(np.bincount(owner, minlength=n) == 0)
    pts = np.vstack([pts, rec[empty]])
    owner = np.concatenate([owner, empty])
    weight = np.concatenate([weight, np.ones(empty.size)])
    return Cells(pts, owner.astype(np.int64), weight, s, float(max_snap), shape, int(empty.size))


def along_streets(instance: Instance) -> bool:
    """Whether the instance's people live along its road network's streets: a road dataset (lat/lon records)."""
    prov = instance.provenance if isinstance(instance.provenance, dict) else {}
    return prov.get("dataset") == "road" and instance.metric == "haversine"


def _tables_graph(paths: list[str]) -> Any:
    """The road graph of an osmnx nodes and edges table pair, in either order (the provenance keeps no order)."""
    from mdp_core.problem.datasets.road import road_graph

    try:
        return road_graph(nodes=paths[0], edges=paths[-1])
    except InputError:
        return road_graph(nodes=paths[-1], edges=paths[0])


def road_streets(instance: Instance) -> np.ndarray:
    """(S, 4) the streets of a road instance's network, as straight segments between the graph's nodes, each
    once whatever its direction: lat1, lon1, lat2, lon2 degrees. Public data: the network its provenance's
    ``source`` names, read again (each file checked against the sha256 recorded there; a download is asked
    again, from osmnx's cache when it has it). InputError when the network cannot be read as it was."""
    from mdp_core.problem.datasets.road import road_graph
    from mdp_core.runtime.files import file_sha256

    src = instance.provenance.get("source") or {}
    files = dict(src.get("files") or {})
    for path, digest in files.items():
        try:
            same = file_sha256(path) == digest
        except OSError:
            same = False
        if not same:
            raise InputError(f"the road network's file {path} is absent or changed since the instance was built")
    paths, kind, network = list(files), src.get("kind"), src.get("network_type", "driving")
    if kind == "osmnx_tables" and paths:
        g = _tables_graph(paths)
    elif kind == "osm_xml" and paths:
        g = road_graph(osm=paths[0])
    elif kind == "osm_pbf" and paths:
        g = road_graph(pbf=paths[0], network_type=network)
    elif kind == "osmnx_download":
        g = road_graph(bbox=src.get("bbox"), network_type=network)
    else:
        raise InputError(f"the road network's source {kind!r} is not one the people's streets can be read from")
    pairs = np.unique(np.column_stack([np.minimum(g.u, g.v), np.maximum(g.u, g.v)]), axis=0)
    a, b = pairs[:, 0], pairs[:, 1]
    return np.column_stack([g.lat[a], g.lon[a], g.lat[b], g.lon[b]])


def _street_points(streets: np.ndarray, length: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """(M, 2) lat/lon midpoints of the streets cut into pieces of at most ``step`` km, and (M,) their lengths."""
    parts = np.maximum(1, np.ceil(length / step)).astype(np.int64)
    idx = np.repeat(np.arange(parts.size), parts)
    j = np.arange(idx.size) - np.repeat(np.cumsum(parts) - parts, parts)
    t = ((j + 0.5) / parts[idx])[:, None]
    a, b = streets[idx, :2], streets[idx, 2:]
    return a + t * (b - a), (length / parts)[idx]


def _street_cells(
    instance: Instance, max_distance: float, streets: np.ndarray, per_record: int | None = None
) -> Cells | None:
    """People along the streets in each record's cell: the midpoints of the streets' pieces (weight: the piece's
    length), moved :data:`STREET_OFFSET_KM` to either side of the street (half the weight each), kept within
    max_distance of their nearest record (``per_record``: about that many points per record, in longer pieces).
    None when no street lies within max_distance of a record."""
    from mdp_core.release.baseline import on_sphere

    rec_space = space_points(instance, instance.record_points())
    tree = cKDTree(rec_space)
    streets = np.asarray(streets, dtype=np.float64).reshape(-1, 4)
    length = _row_distance(instance, space_points(instance, streets[:, :2]), space_points(instance, streets[:, 2:]))
    mid, _ = tree.query(space_points(instance, 0.5 * (streets[:, :2] + streets[:, 2:])))
    near = (length > 0) & (mid <= max_distance + 0.5 * length + STREET_OFFSET_KM)
    if not near.any():
        return None
    streets, length = streets[near], length[near]
    step = max(STREET_STEP_KM, float(length.sum()) * 2 * instance.n_outputs / PEOPLE_BUDGET)
    if per_record is not None:
        step = max(step, float(length.sum()) * 2 / (per_record * instance.n_records))
    pts, w = _street_points(streets, length, step)
    idx = np.repeat(np.arange(length.size), np.maximum(1, np.ceil(length / step)).astype(np.int64))
    lat = np.radians(pts[:, 0])
    along = np.column_stack(  # (east, north) of the street's direction, km up to a common factor
        [(streets[idx, 3] - streets[idx, 1]) * np.cos(lat), streets[idx, 2] - streets[idx, 0]]
    )
    normal = np.column_stack([-along[:, 1], along[:, 0]]) / np.linalg.norm(along, axis=1, keepdims=True)
    sides = STREET_OFFSET_KM * np.stack([normal, -normal], axis=1)  # (M, 2 sides, 2)
    space = on_sphere(pts, sides).reshape(-1, 3)
    weight = np.repeat(0.5 * w, 2)
    _, owner = tree.query(space)
    keep = _row_distance(instance, space, rec_space[owner]) <= max_distance
    shape = (
        f"the streets of the road network ({STREET_OFFSET_KM * 1000:g} m to either side of their centre line) "
        f"nearer to the record than to any other, within max_distance {max_distance:g} {instance.distance_unit}"
    )
    per = max(1, int(keep.sum()) // max(instance.n_records, 1))
    return _fill(space[keep], owner[keep].astype(np.int64), weight[keep], rec_space, per, max_distance, shape)


def cells(
    instance: Instance,
    max_distance: float,
    per_record: int | None = None,
    seed: int = PEOPLE_SEED,
    streets: np.ndarray | None = None,
) -> Cells:
    """People sampled in every record's cell of the released area (module docstring), ``per_record`` drawn per
    record (default :func:`per_record_samples`), with the fixed public ``seed``. ``max_distance`` [dist]: the
    release's bound on a person's distance to their record (unset in a config: eta). ``streets`` (S, 4) lat/lon
    segments: people live along them rather than over the cells' area (default for a road instance: its network's
    streets, :func:`road_streets`)."""
    if not (math.isfinite(max_distance) and max_distance >= 0):
        raise InputError(f"max_distance must be a finite number >= 0, got {max_distance}")
    rec = instance.record_points()  # InputError without coordinates
    s = per_record_samples(instance.n_records, instance.n_outputs) if per_record is None else int(per_record)
    rng = np.random.default_rng(seed)
    kind = instance.provenance.get("dataset") if isinstance(instance.provenance, dict) else None
    if kind == "text" or max_distance == 0:
        n = rec.shape[0]
        return Cells(space_points(instance, rec), np.arange(n), np.ones(n), 1, 0.0, "the record itself", 0)
    params = instance.provenance.get("parameters") if isinstance(instance.provenance, dict) else None
    if instance.metric == "haversine" and (streets is not None or along_streets(instance)):
        along = _street_cells(
            instance, max_distance, road_streets(instance) if streets is None else streets, per_record
        )
        if along is not None:
            return along
    if kind == "grid" and instance.metric == "euclidean" and rec.shape[1] == 2 and "cell_km" in (params or {}):
        return _grid_cells(instance, max_distance, s, rng)
    return _voronoi_cells(instance, max_distance, s, rng)


def cell_means(c: Cells, values: np.ndarray, n_records: int) -> tuple[np.ndarray, np.ndarray]:
    """(N,) each cell's weighted mean of ``values`` (M,) (a person uniform in the cell) and (N,) its squared
    standard error (weighted variance / effective sample size)."""
    w = np.bincount(c.record, c.weight, minlength=n_records)
    mean = np.bincount(c.record, c.weight * values, minlength=n_records) / w
    var = np.bincount(c.record, c.weight * (values - mean[c.record]) ** 2, minlength=n_records) / w
    n_eff = w * w / np.bincount(c.record, c.weight * c.weight, minlength=n_records)
    return mean, var / n_eff


def release_values(instance: Instance, z: np.ndarray | None, c: Cells) -> dict[str, np.ndarray]:
    """Per sampled person (M,): ``release`` sum_k z_rk d(x, o_k) (r: the person's record), ``snap`` d(x, r),
    ``floor`` min_k d(x, o_k); ``z`` (N, K) the mechanism (None: no ``release``)."""
    out_space = space_points(instance, instance.output_points())
    rec_space = space_points(instance, instance.record_points())
    m = c.record.size
    got = {"snap": np.empty(m), "floor": np.empty(m)} | ({} if z is None else {"release": np.empty(m)})
    step = max(1, _CHUNK // max(instance.n_outputs, 1))
    for a in range(0, m, step):
        x, r = c.space[a : a + step], c.record[a : a + step]
        d = metric_distance(instance, x, out_space)
        got["floor"][a : a + step] = d.min(axis=1)
        got["snap"][a : a + step] = _row_distance(instance, x, rec_space[r])
        if z is not None:
            got["release"][a : a + step] = np.einsum("mk,mk->m", z[r], d)
    return got


def _row_distance(instance: Instance, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n,) metric distances between the rows of two (n, D') space arrays."""
    d = np.linalg.norm(a - b, axis=1)
    if instance.metric == "haversine":
        return 2 * EARTH_RADIUS_KM * np.arcsin(np.clip(d / (2 * EARTH_RADIUS_KM), 0.0, 1.0))
    return d


def _latlon(space: np.ndarray) -> np.ndarray:
    """(n, 2) lat/lon degrees of points on the sphere of radius EARTH_RADIUS_KM."""
    lat = np.degrees(np.arcsin(np.clip(space[:, 2] / EARTH_RADIUS_KM, -1.0, 1.0)))
    return np.column_stack([lat, np.degrees(np.arctan2(space[:, 1], space[:, 0]))])


def remap_values(instance: Instance, c: Cells, metric_epsilon: float, seed: int = PEOPLE_SEED) -> np.ndarray:
    """(M,) planar Laplace at ``metric_epsilon`` per unit applied at each sampled person's own location, the noisy
    point sent to the nearest output: its distance from the person (one draw per sampled person, public seed)."""
    from mdp_core.release.baseline import continuous_error, noise_dimension, on_sphere
    from mdp_core.solvers.mechanisms import laplace_noise

    dim = noise_dimension(instance)
    continuous_error(dim, metric_epsilon)  # the same checks
    out_space = space_points(instance, instance.output_points())
    tree = cKDTree(out_space)
    rng = np.random.default_rng(seed + 1)
    noise = laplace_noise(dim, metric_epsilon, c.record.size, rng)
    if instance.metric == "haversine":
        moved = on_sphere(_latlon(c.space), noise[:, None, :])[:, 0, :]
    else:
        moved = c.space + noise
    _, k = tree.query(moved)
    return _row_distance(instance, c.space, out_space[k])


def people_rows(instance: Instance, z: np.ndarray | None, metric_epsilon: float, c: Cells) -> list[dict]:
    """The rows of evaluation.parquet for people spread as the prior in the cells ``c`` (keys of
    mdp_core.release.evaluate.COLUMNS): :data:`RELEASE` (the mechanism ``z`` (N, K) from the person's location,
    snapping included; none when ``z`` is None), :data:`SNAP` (the distance from the person to their record),
    and planar Laplace at the person's own location at ``metric_epsilon`` per unit (``planar_laplace``:
    D / eps exactly; ``planar_laplace_remap``: sent to the nearest output) and ``nearest_output`` (the floor
    from the person). ``dist_loss_mean``: the prior-weighted mean over cells of each cell's mean;
    ``dist_loss_q95`` / ``dist_loss_max``: over the cells' means; ``dist_loss_se``: the sampling's standard
    error; ``mc_samples``: people sampled per record. Empty when the rate is not a finite eps > 0."""
    from mdp_core.release.baseline import CONTINUOUS, FLOOR, REMAP, _row, continuous_error, noise_dimension

    if not (math.isfinite(metric_epsilon) and metric_epsilon > 0):
        return []
    n, p = instance.n_records, instance.prior
    values = release_values(instance, z, c)
    values["remap"] = remap_values(instance, c, metric_epsilon)

    def row(method: str, key: str, rate: float) -> dict:
        mean, se2 = cell_means(c, values[key], n)
        return _row(
            instance, method, rate, mean, dist_loss_se=float(math.sqrt(float((p * p) @ se2))), mc_samples=c.per_record
        )

    exact = continuous_error(noise_dimension(instance), metric_epsilon)
    rows = [row(RELEASE, "release", metric_epsilon)] if z is not None else []
    rows += [row(SNAP, "snap", math.inf)]
    rows += [_row(instance, CONTINUOUS, metric_epsilon, np.full(n, exact), dist_loss_mean=exact)]
    return rows + [row(REMAP, "remap", metric_epsilon), row(FLOOR, "floor", math.inf)]


def _error_space(instance: Instance, geo: bool) -> tuple[np.ndarray, np.ndarray, Callable[..., np.ndarray]]:
    """(records (N, D'), outputs (K, D'), distance(a, b) -> (n, m)) of the metric a person's error is measured in:
    the instance's own, or -- ``geo``: people given by lat/lon on an instance whose metric is another (a grid's
    km coordinates) -- great-circle km between the records' and outputs' lat/lon, the metric they were mapped by."""
    if not geo or instance.metric == "haversine":
        rec = space_points(instance, instance.record_points())
        out = space_points(instance, instance.output_points())
        return rec, out, lambda a, b: metric_distance(instance, a, b)
    recs, outs = instance.records, instance.outputs
    if recs is None or not {"lat", "lon"} <= set(recs.columns):
        raise InputError("people given by lat/lon need records with lat/lon columns")
    ll = recs[["lat", "lon"]].to_numpy(dtype=np.float64)
    if outs is not None and "record_id" in outs:
        out_ll = ll[outs["record_id"].to_numpy()]
    elif outs is not None and {"lat", "lon"} <= set(outs.columns):
        out_ll = outs[["lat", "lon"]].to_numpy(dtype=np.float64)
    else:
        raise InputError("people given by lat/lon need outputs with lat/lon (or record_id)")

    def great_circle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        from scipy.spatial.distance import cdist

        return 2 * EARTH_RADIUS_KM * np.arcsin(np.clip(cdist(a, b) / (2 * EARTH_RADIUS_KM), 0.0, 1.0))

    return unit_sphere(ll), unit_sphere(out_ll), great_circle


def error_range(instance: Instance, z: np.ndarray, max_distance: float, geo: bool = False) -> tuple[float, float]:
    """Public bounds [lo, hi] on any admitted person's expected release error e(p) = sum_k z_rk d(p, o_k), r the
    person's record, d(p, r) <= ``max_distance`` (the release refuses anyone farther): by the triangle inequality
    |d(p, o_k) - d(r, o_k)| <= d(p, r), so e(p) lies within ``max_distance`` of E_r = sum_k z_rk d(r, o_k); lo =
    max(0, min_r E_r - max_distance), hi = max_r E_r + max_distance. ``z`` (N, K); from the published mechanism
    and public coordinates only; ``geo``: in great-circle km over lat/lon (:func:`_error_space`)."""
    if not (math.isfinite(max_distance) and max_distance >= 0):
        raise InputError(f"max_distance must be a finite number >= 0, got {max_distance}")
    rec, out, dist = _error_space(instance, geo)
    per_record = np.einsum("ik,ik->i", np.asarray(z, dtype=np.float64), dist(rec, out))
    return max(0.0, float(per_record.min()) - max_distance), float(per_record.max()) + max_distance


def error_step(lo: float, hi: float) -> float:
    """The step [the metric's unit] a person's error is summed in: (hi - lo) / :data:`ERROR_STEPS` (exact in binary
    floating point, so the sensitivity ceil((hi - lo) / step) is ERROR_STEPS), relative to the public bounds and so
    right in any unit; 1 when hi = lo (every error is lo)."""
    return (hi - lo) / ERROR_STEPS if hi > lo else 1.0


def dp_mean_error(errors: np.ndarray, lo: float, hi: float, epsilon: float, measure: Measure) -> tuple[float, float]:
    """An eps-DP estimate of the mean of ``errors`` (n,) [unit], each a person's error in [``lo``, ``hi``]
    (:func:`error_range`; clipped to it), n public: the sum of the errors in whole steps s = :func:`error_step`
    above lo, plus discrete Laplace noise (``measure``: the caller's, e.g. the secret draw's kept
    :func:`mdp_core.release.noise.discrete_laplace`) at L1 sensitivity W = ceil((hi - lo) / s) -- one person's
    record and location changing moves one term within [0, W] (the counts' neighbour relation, docs/privacy.md) --
    divided by n. Returns (the estimate, the noise's scale on the mean [unit]: s W / (eps n)); rounding to steps
    moves the mean by at most s / 2."""
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim != 1 or e.size == 0 or not np.all(np.isfinite(e)):
        raise InputError("the people's errors must be a non-empty 1-D array of finite numbers")
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
        raise InputError(f"the bounds must satisfy 0 <= lo <= hi, got {lo}, {hi}")
    step = error_step(lo, hi)
    width = max(1, math.ceil((hi - lo) / step))
    total = int(np.rint((np.clip(e, lo, hi) - lo) / step).astype(np.int64).sum())
    noisy = measure(np.array([total], dtype=np.int64), width, float(epsilon))
    return lo + step * float(noisy.values[0]) / e.size, step * float(noisy.scale) / e.size


def auto_error_epsilon(n_people: int) -> float:
    """``eps_error = "auto"``: the budget of :func:`dp_mean_error` for ``n_people`` (public under the counts'
    relation), sized before the mechanism exists, so from n alone: the smallest of the coarse levels
    :data:`ERROR_LEVELS` whose noise on the mean, W / (eps n) with W = hi - lo, is at most :data:`ERROR_TARGET` of
    the figure when W is :data:`ERROR_WIDTH_RATIO` times it (measured 3.3-5.6 on eight tables, bench/HISTORY.md "The
    table's own people"): n >= 6000 -> 0.1, >= 2400 -> 0.25, >= 1200 -> 0.5, else 1. Fixed levels, so a table's size
    rarely moves the charge. The scale the release gets is published beside it."""
    if n_people < 1:
        raise InputError(f"eps_error = auto needs at least one person, got {n_people}")
    need = ERROR_WIDTH_RATIO / ERROR_TARGET  # eps x n must reach this (600)
    return next((e for e in ERROR_LEVELS if n_people * e >= need * (1 - 1e-12)), ERROR_LEVELS[-1])


def people_errors(
    instance: Instance, z: np.ndarray, records: np.ndarray, points: np.ndarray | None, geo: bool = False
) -> np.ndarray:
    """(n,) each person's expected release error e(p) = sum_k z_{r(p)k} d(p, o_k) [the metric's unit]: ``records``
    (n,) their records, ``points`` (n, D) their own coordinates (``geo``: lat, lon degrees, great-circle km;
    else the instance's columns); None (people known only by their record: keys, simulated people) puts each at
    their record. Secret."""
    rec_ids = np.asarray(records, dtype=np.int64)
    zz = np.asarray(z, dtype=np.float64)
    rec, out, dist = _error_space(instance, geo)
    if points is None:  # each record's error once, then per person
        return np.einsum("ik,ik->i", zz, dist(rec, out))[rec_ids]
    pts = np.asarray(points, dtype=np.float64)
    at = unit_sphere(pts) if geo else space_points(instance, pts)
    errors = np.empty(rec_ids.size)
    step = max(1, _CHUNK // max(out.shape[0], 1))
    for a in range(0, rec_ids.size, step):
        b = min(rec_ids.size, a + step)
        errors[a:b] = np.einsum("ik,ik->i", zz[rec_ids[a:b]], dist(at[a:b], out))
    return errors


def measured_error(
    instance: Instance,
    z: np.ndarray,
    records: np.ndarray,
    points: np.ndarray | None,
    bounds: tuple[float, float],
    epsilon: float,
    measure: Measure,
    geo: bool = False,
) -> dict[str, Any]:
    """The release's ``people_error`` provenance block: :func:`dp_mean_error` of the table's people's errors
    (:func:`people_errors`) in the public ``bounds`` (:func:`error_range`, computed before the charge) at
    ``epsilon`` (``measure``: the caller's noise, drawn from the secret draw's store). Published: the estimate, its
    noise scale, eps, the bounds, the step and unit, and ``people_at`` (:data:`PEOPLE_AT`: "lat_lon", great-circle
    km from each person's lat/lon; "coordinates", the instance's metric from theirs; "records", people known only
    by their record, at it), so the bounds are recomputable; nothing else of the people. Call it only once
    ``epsilon`` is charged. ``geo``: ``points`` are lat, lon (the metric the people were mapped by)."""
    lo, hi = bounds
    errors = people_errors(instance, z, records, points, geo)
    estimate, scale = dp_mean_error(errors, lo, hi, epsilon, measure)
    return {
        "estimate": estimate,
        "noise_scale": scale,
        "epsilon": float(epsilon),
        "lo": lo,
        "hi": hi,
        "step": error_step(lo, hi),
        "unit": instance.distance_unit,
        "people_at": "records" if points is None else ("lat_lon" if geo else "coordinates"),
    }
