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
* every other kind (road nodes, the agency's points, vectors): the points nearer to record i than to any other
  record (its Voronoi cell) and within ``max_distance`` of it (the release refuses anyone farther).

Each cell is sampled by a fixed public seed (:data:`PEOPLE_SEED`; no privacy randomness, nothing about a
person): a grid cell uniformly; a Voronoi cell by drawing uniform points in the ball of radius ``max_distance``
around every record (lat/lon: the tangent disc, mapped onto the sphere as planar Laplace is), each landing in
the cell of its nearest record with the weight 1 / (the number of records within ``max_distance`` of it): the
balls' mixture density is proportional to that number, so the weighted points of each cell are uniform in it.
A cell no point lands in (a sliver) is represented by its record.

Per person (x in cell i, every figure in the metric, km for geo data, and averaged over x in the cell, then
with the prior over cells):

* the release: sum_k z_ik d(x, o_k) (``release_per_person``);
* the snap: d(x, r_i) (``snap_to_record``), the part of the error the person's move to the record adds;
* planar Laplace applied at x itself at the compared rate (continuous: exactly D / eps; remapped: the noisy
  point sent to the nearest output, d(x, that output), sampled with the same public seed);
* the floor: min_k d(x, o_k), no mechanism releasing these outputs does better even knowing x.

The figure holds for people spread as the prior (within each cell uniformly); for the agency's actual people it
is an estimate (a DP measurement of it would be charged like any other).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, unit_sphere

PEOPLE_SEED = 2050  # public and fixed: where sampled people stand in their cells (no person's data)
PEOPLE_BUDGET = 1 << 25  # person-to-output distances evaluated in all (the per-record samples follow)
PEOPLE_MIN, PEOPLE_MAX = 16, 256  # sampled people per record: at least, at most
RELEASE, SNAP = "release_per_person", "snap_to_record"  # the rows evaluation.parquet gains
_CHUNK = 1 << 22  # distances per block


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
    """The balls' mixture, each point weighted by 1 / (records within max_distance): uniform in each cell."""
    rec = instance.record_points()
    rec_space = space_points(instance, rec)
    tree = cKDTree(rec_space)
    pts = _ball(instance, rec, max_distance, s, rng).reshape(-1, rec_space.shape[1])
    _, owner = tree.query(pts)
    covering = tree.query_ball_point(pts, _chord(instance, max_distance) * (1 + 1e-12), return_length=True)
    weight = 1.0 / np.maximum(np.asarray(covering, dtype=np.float64), 1.0)
    shape = f"the points nearer to the record than to any other, within max_distance {max_distance:g} {instance.distance_unit}"
    return _fill(pts, np.asarray(owner, dtype=np.int64), weight, rec_space, s, max_distance, shape)


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


def cells(instance: Instance, max_distance: float, per_record: int | None = None, seed: int = PEOPLE_SEED) -> Cells:
    """People sampled in every record's cell of the released area (module docstring), ``per_record`` drawn per
    record (default :func:`per_record_samples`), with the fixed public ``seed``. ``max_distance`` [dist]: the
    release's bound on a person's distance to their record (unset in a config: eta)."""
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
