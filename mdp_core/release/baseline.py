"""Against planar Laplace: what an analyst would write instead, at the release's guarantee (issue 40).

A release states its guarantee in the data's own metric (:class:`mdp_core.declarations.budget.Guarantee`): for two
records within the protection radius, eps x the stretch there per unit (1 when every such pair is an edge of
the mDP graph: the eps the user asked for); farther apart, eps x the graph's stretch. The comparison is at the
first (:func:`compared_rate`): the requirement the release was asked for and is charged at, which planar
Laplace at that rate meets too (and keeps at every distance, where the release's own bound is eps x the
graph's stretch: the report says so). Planar Laplace at the weaker rate over any distance would break the
requirement within the radius. At that rate an analyst would write planar Laplace (Andres et al.,
"Geo-indistinguishability", CCS 2013) in a few lines of numpy: add noise of density proportional to
exp(-eps_m ||x||) to the record, in the record's own coordinates (for lat/lon: the local tangent plane in km, mapped onto the sphere by the azimuthal equidistant map, so a
displacement of rho km in the plane is a great-circle distance of rho km; for D-dimensional Euclidean
records: the D-dimensional generalisation, whose radius is Gamma(D, 1 / eps_m) -- for D = 2 exactly planar
Laplace). Its guarantee is exp(eps_m d(r, r')) for every two records, at any distance.

This module computes, in the metric (km for geo data, the instance's distance unit otherwise), each record's
expected distance from its record to what is released, for three mechanisms beside the release:

* ``planar_laplace``: the continuous mechanism; its expected displacement is exactly D / eps_m (the mean
  of Gamma(D, 1 / eps_m)): a closed form, the same for every record, no sampling;
* ``planar_laplace_remap``: the noisy point sent to the nearest of the release's outputs (post-processing,
  so the guarantee is kept); expected distance from the record to the chosen output, by Monte Carlo with
  the fixed public seed :data:`PUBLIC_SEED` and :func:`samples_per_record` independent samples per record,
  with its standard error;
* ``nearest_output``: each record to its nearest output (no privacy): the floor of any mechanism that
  releases these outputs.

These are figures *from the record*. A release's report states them from where people are, snapping included
(issue 50: :mod:`mdp_core.release.people`, which writes these rows for people in each record's cell); ``mdp-release
check`` still uses :func:`comparison_rows` at the records for its advisor's bound. The release's own figure,
sum_k z_ik d(r_i, o_k), is exact (``dist_loss_mean`` of
:func:`mdp_core.release.evaluate.evaluate_mechanism`). Every figure is averaged with the instance's prior,
which is public (published in ``instance/records.parquet``); the people's own histogram is secret and is
never read here. Everything is a function of public inputs only: the fixed seed draws no person's output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, unit_sphere
from mdp_core.solvers.mechanisms import laplace_noise, record_output_distances

PUBLIC_SEED = 2013  # public and fixed: the baseline's noise depends on public inputs only (never a person's draw)
MC_TOTAL = 1 << 18  # Monte Carlo samples in all, spread over the records
MC_MIN = 256  # samples per record at least
Q = 0.95  # the per-record quantile (as mdp_core.release.evaluate.Q)
CONTINUOUS, REMAP, FLOOR = "planar_laplace", "planar_laplace_remap", "nearest_output"
METHODS = (CONTINUOUS, REMAP, FLOOR)  # the rows this module adds to evaluation.parquet, in order


@dataclass(frozen=True)
class RemapEstimate:
    """Monte Carlo of planar Laplace remapped to the nearest output: per record ``mean`` (N,) and ``sd`` (N,)
    (sample standard deviation) of the distance from the record to the chosen output, ``samples`` per record."""

    mean: np.ndarray
    sd: np.ndarray
    samples: int

    def weighted(self, prior: np.ndarray) -> tuple[float, float]:
        """(sum_i p_i mean_i, its standard error sqrt(sum_i p_i^2 sd_i^2 / samples)): the records' samples
        are independent."""
        p = np.asarray(prior, dtype=np.float64)
        return float(p @ self.mean), float(math.sqrt(float((p * p) @ (self.sd * self.sd)) / self.samples))


def noise_dimension(instance: Instance) -> int:
    """D of the Laplace noise: 2 for lat/lon (the tangent plane), the number of coordinates otherwise."""
    if instance.metric == "haversine":
        return 2
    return int(instance.record_points().shape[1])


def continuous_error(dimension: int, metric_epsilon: float) -> float:
    """Expected displacement of the D-dimensional Laplace mechanism at ``metric_epsilon`` per unit: D / eps
    (its radius is Gamma(D, 1 / eps); D = 2: planar Laplace's 2 / eps)."""
    if dimension < 1 or not (math.isfinite(metric_epsilon) and metric_epsilon > 0):
        raise InputError(f"need a dimension >= 1 and a finite eps > 0, got {dimension} and {metric_epsilon}")
    return dimension / metric_epsilon


def samples_per_record(n_records: int, total: int = MC_TOTAL, minimum: int = MC_MIN) -> int:
    """Monte Carlo samples per record: ``total`` spread over the records, at least ``minimum``."""
    return max(int(minimum), -(-int(total) // max(int(n_records), 1)))


def _tangent_frame(latlon: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, 3) unit vectors at each lat/lon point: up (the point), east, north."""
    la, lo = np.radians(latlon[:, 0]), np.radians(latlon[:, 1])
    up = np.column_stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)])
    east = np.column_stack([-np.sin(lo), np.cos(lo), np.zeros_like(lo)])
    north = np.column_stack([-np.sin(la) * np.cos(lo), -np.sin(la) * np.sin(lo), np.cos(la)])
    return up, east, north


def on_sphere(latlon: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """(b, S, 3) points on the sphere of radius EARTH_RADIUS_KM: each record of ``latlon`` (b, 2) moved by
    ``noise`` (b, S, 2) = (east, north) km in its tangent plane, by the azimuthal equidistant map (a
    displacement of rho km is a great-circle distance of rho km, in the direction it points)."""
    up, east, north = _tangent_frame(latlon)
    rho = np.linalg.norm(noise, axis=2, keepdims=True)
    delta = rho / EARTH_RADIUS_KM
    with np.errstate(invalid="ignore", divide="ignore"):
        along = np.where(rho > 0, np.sin(delta) / rho, 1.0 / EARTH_RADIUS_KM)  # sin(delta) / rho, rho -> 0
    tangent = noise[..., :1] * east[:, None, :] + noise[..., 1:] * north[:, None, :]
    return EARTH_RADIUS_KM * (np.cos(delta) * up[:, None, :] + along * tangent)


def remap_error(
    instance: Instance,
    metric_epsilon: float,
    samples: int | None = None,
    seed: int = PUBLIC_SEED,
    chunk: int = 1 << 17,
) -> RemapEstimate:
    """Planar Laplace at ``metric_epsilon`` per unit remapped to the nearest output: each record's expected
    distance to the output chosen, by Monte Carlo (``samples`` independent draws per record, default
    :func:`samples_per_record`; the fixed public ``seed``). The nearest output is the nearest in the metric
    (for lat/lon: by great-circle distance, through the chord on the sphere, which orders the same)."""
    rec = instance.record_points()
    dist = record_output_distances(instance)  # (N, K) in the metric
    dim = noise_dimension(instance)
    continuous_error(dim, metric_epsilon)  # the same checks
    s = samples_per_record(instance.n_records) if samples is None else int(samples)
    if s < 2:
        raise InputError(f"the Monte Carlo needs at least 2 samples per record, got {s}")
    haversine = instance.metric == "haversine"
    tree = cKDTree(unit_sphere(instance.output_points()) if haversine else instance.output_points())
    rng = np.random.default_rng(seed)
    mean, sd = np.empty(rec.shape[0]), np.empty(rec.shape[0])
    step = max(1, chunk // s)
    for a in range(0, rec.shape[0], step):
        block = rec[a : a + step]
        noise = laplace_noise(dim, metric_epsilon, block.shape[0] * s, rng).reshape(block.shape[0], s, dim)
        points = on_sphere(block, noise) if haversine else block[:, None, :] + noise
        _, idx = tree.query(points.reshape(-1, points.shape[2]))
        err = np.take_along_axis(dist[a : a + step], idx.reshape(block.shape[0], s), axis=1)
        mean[a : a + step], sd[a : a + step] = err.mean(axis=1), err.std(axis=1, ddof=1)
    return RemapEstimate(mean, sd, s)


def nearest_output_error(instance: Instance) -> np.ndarray:
    """(N,) each record's distance to its nearest output: the floor of any mechanism releasing these outputs."""
    return record_output_distances(instance).min(axis=1)


def compared_rate(guarantee: dict[str, Any]) -> float | None:
    """The rate (eps per unit, in the data's metric) planar Laplace is compared at: what the release promises
    for two records within its protection radius, eps x the stretch there (``stretch_within_radius``; releases
    made before it: the stretch over any distance). Both mechanisms then meet the requirement the release was
    asked for and is charged at; farther apart planar Laplace keeps this rate, the release states eps x the
    graph's stretch (the report says so). None without the figures."""
    eps, stretch = guarantee.get("epsilon_per_unit"), guarantee.get("stretch_within_radius", guarantee.get("stretch"))
    return None if eps is None or stretch is None else float(eps) * float(stretch)


def _row(instance: Instance, method: str, metric_epsilon: float, per_record: np.ndarray, **more: Any) -> dict:
    """One evaluation row (keys of mdp_core.release.evaluate.COLUMNS) of a per-record expected error."""
    return {
        "method": method,
        "n_records": instance.n_records,
        "n_outputs": instance.n_outputs,
        "n_edges": instance.n_edges,
        "epsilon": instance.epsilon,
        "eta": instance.eta,
        "distance_unit": instance.distance_unit,
        "metric_epsilon": float(metric_epsilon),
        "dist_loss_mean": float(instance.prior @ per_record),
        "dist_loss_q95": float(np.quantile(per_record, Q)),
        "dist_loss_max": float(per_record.max()),
        "dist_loss_se": 0.0,
        **more,
    }


def comparison_rows(
    instance: Instance, metric_epsilon: float, samples: int | None = None, seed: int = PUBLIC_SEED
) -> list[dict[str, Any]]:
    """The rows :data:`METHODS` of evaluation.parquet at the rate ``metric_epsilon`` per unit (:func:`compared_rate`)
    (``dist_loss_*``: the prior-weighted mean, the 95 % quantile and the maximum over records of each
    record's expected distance; ``dist_loss_se``: the mean's standard error, 0 where it is exact;
    ``mc_samples``: Monte Carlo samples per record; ``metric_epsilon`` of ``nearest_output``: inf, no
    privacy). ``epsilon``, ``eta`` and the sizes are the instance's (every row is evaluated on it). Empty when
    the instance has no coordinates or the stated guarantee is not a finite eps > 0 (nothing to compare)."""
    if not (math.isfinite(metric_epsilon) and metric_epsilon > 0):
        return []
    try:
        dim = noise_dimension(instance)
        floor = nearest_output_error(instance)
    except InputError:
        return []
    remap = remap_error(instance, metric_epsilon, samples, seed)
    _, se = remap.weighted(instance.prior)
    exact = continuous_error(dim, metric_epsilon)  # the same for every record; the mean exact, not summed
    return [
        _row(instance, CONTINUOUS, metric_epsilon, np.full(instance.n_records, exact), dist_loss_mean=exact),
        _row(instance, REMAP, metric_epsilon, remap.mean, dist_loss_se=se, mc_samples=remap.samples),
        _row(instance, FLOOR, math.inf, floor),
    ]
