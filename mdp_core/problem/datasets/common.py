"""Shared construction: points + metric + eta/eps + costs -> Instance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mdp_core.errors import InputError
from mdp_core.problem.graph import neighbour_edges
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import check_points


def coordinate_frame(points: np.ndarray, metric: str) -> pd.DataFrame:
    """Coordinate columns for records.parquet: ``lat, lon`` (haversine) or ``x0..x{D-1}``."""
    if metric == "haversine":
        return pd.DataFrame({"lat": points[:, 0], "lon": points[:, 1]})
    return pd.DataFrame({f"x{d}": points[:, d] for d in range(points.shape[1])})


DEFAULT_OUTPUTS = 100  # grid / synthetic: K when n_outputs is not given (all records when fewer)


def choose_outputs(n: int, k: int | None, rng: np.random.Generator) -> np.ndarray:
    """Sorted record ids used as outputs: all records when k is None or k == n, else a seeded subset.

    A k above the number of records n is an error, never silently clamped (the provenance would
    record a K the instance does not have).
    """
    if k is None or (k == n and not isinstance(k, bool)):
        return np.arange(n, dtype=np.int64)
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise InputError(f"n_outputs must be an integer >= 1, got {k!r}")
    if k > n:
        raise InputError(f"n_outputs={k} exceeds the number of records N={n} (outputs are a subset of the records)")
    return np.sort(rng.choice(n, size=int(k), replace=False)).astype(np.int64)


def first_occurrence_groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group the identical rows of ``rows`` (n, D): (label (n,) int64 in 0..G-1, groups numbered by
    first occurrence; (G,) index of each group's first row, ascending)."""
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[inverse.reshape(-1)], np.sort(first)


def normalise_prior(weights: np.ndarray | None, n: int) -> np.ndarray:
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError("weights must be N finite, non-negative numbers")
    total = w.sum()
    if total <= 0:
        raise InputError("weights have zero total")
    return w / total


def destination_costs(d_rt: np.ndarray, d_ot: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """c_ik = sum_t w_t |d_rt[i, t] - d_ot[k, t]|: (N, T), (K, T), (T,) -> (N, K), chunked over i."""
    n = d_rt.shape[0]
    out = np.empty((n, d_ot.shape[0]))
    step = max(1, (1 << 24) // max(d_ot.size, 1))
    for s in range(0, n, step):
        out[s : s + step] = np.abs(d_rt[s : s + step, None, :] - d_ot[None, :, :]) @ weights
    return out


def from_points(
    points: np.ndarray,
    metric: str,
    eta: float,
    epsilon: float,
    costs: np.ndarray,
    prior: np.ndarray | None = None,
    output_record_ids: np.ndarray | None = None,
    extra_columns: dict[str, np.ndarray] | None = None,
    provenance: dict[str, Any] | None = None,
    distance_unit: str = "km",
) -> Instance:
    """Build an instance whose mDP graph joins records within ``eta`` under ``metric``.

    Args:
        points: (N, D) coordinates (``lat, lon`` degrees for haversine).
        costs: (N, K) utility loss.
        prior: (N,) weights (normalised here) or None for uniform.
        output_record_ids: (K,) record id of each output, or None when outputs are not records.
    """
    pts = check_points("points", points, metric)
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise InputError(f"epsilon must be a finite number > 0, got {epsilon}")
    edges, dist = neighbour_edges(pts, metric, eta)
    records = coordinate_frame(pts, metric)
    for name, col in (extra_columns or {}).items():
        records[name] = col
    outputs = None
    if output_record_ids is not None:
        outputs = pd.DataFrame({"record_id": np.asarray(output_record_ids, dtype=np.int64)})
    return Instance(
        prior=normalise_prior(prior, pts.shape[0]),
        costs=costs,
        edges=edges,
        distances=dist,
        epsilon=epsilon,
        eta=eta,
        metric=metric,
        distance_unit=distance_unit,
        records=records,
        outputs=outputs,
        provenance=provenance or {},
    )
