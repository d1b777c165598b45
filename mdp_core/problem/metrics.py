"""Distance functions. Haversine distances are in km on a sphere of radius 6371.0088 km."""

from __future__ import annotations

import numpy as np

from mdp_core.errors import InputError

EARTH_RADIUS_KM = 6371.0088


def _haversine(la1, lo1, la2, lo2):
    la1, lo1, la2, lo2 = map(np.radians, (la1, lo1, la2, lo2))
    h = np.sin((la2 - la1) / 2) ** 2 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def haversine_km(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise haversine distance in km: a (n, 2), b (m, 2) ``lat, lon`` degrees -> (n, m)."""
    return _haversine(a[:, 0][:, None], a[:, 1][:, None], b[:, 0][None, :], b[:, 1][None, :])


def haversine_rows_km(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise haversine distance in km: a, b (n, 2) ``lat, lon`` degrees -> (n,)."""
    return _haversine(a[:, 0], a[:, 1], b[:, 0], b[:, 1])


def euclidean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise Euclidean distance: a (n, D), b (m, D) -> (n, m).

    Computed from coordinate differences (scipy ``cdist``), not |a|^2 + |b|^2 - 2 a.b, which cancels
    catastrophically: a point's distance to itself must be exactly 0.
    """
    from scipy.spatial.distance import cdist  # here: reading an instance never pays for scipy.spatial (0.3 s)

    return cdist(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), "euclidean")


def pairwise(metric: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise distances under ``metric`` ("euclidean" or "haversine")."""
    if metric == "euclidean":
        return euclidean(np.asarray(a, float), np.asarray(b, float))
    if metric == "haversine":
        return haversine_km(np.asarray(a, float), np.asarray(b, float))
    raise InputError(f"no point-to-point distance for metric {metric!r}")


def unit_sphere(latlon: np.ndarray) -> np.ndarray:
    """(n, 2) lat/lon degrees -> (n, 3) points on the sphere of radius EARTH_RADIUS_KM (chord metric)."""
    la, lo = np.radians(latlon[:, 0]), np.radians(latlon[:, 1])
    return EARTH_RADIUS_KM * np.column_stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)])


def check_points(name: str, pts: np.ndarray, metric: str) -> np.ndarray:
    """Validate a (n, D) coordinate array: finite, 2-D, lat/lon in range for haversine."""
    pts = np.asarray(pts, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[0] == 0:
        raise InputError(f"{name}: expected a non-empty (n, D) array of coordinates, got shape {pts.shape}")
    if not np.all(np.isfinite(pts)):
        bad = int(np.sum(~np.all(np.isfinite(pts), axis=1)))
        raise InputError(f"{name}: {bad} row(s) have NaN or infinite coordinates")
    if metric == "haversine":
        if pts.shape[1] != 2:
            raise InputError(f"{name}: haversine needs (lat, lon) pairs, got {pts.shape[1]} columns")
        if np.any(np.abs(pts[:, 0]) > 90) or np.any(np.abs(pts[:, 1]) > 180):
            raise InputError(f"{name}: latitude must be in [-90, 90] and longitude in [-180, 180]")
    return pts
