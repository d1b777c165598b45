"""The PMO instance: one perturbation-matrix-optimisation problem.

Notation (Qiu 2024, section 2): secret records r_0..r_{N-1} with prior p (shape (N,), sums to 1);
perturbed outputs o_0..o_{K-1}; utility loss c_ik (shape (N, K)); the mDP graph with undirected
edges (i, j), i < j, weighted by the metric distance d_ij <= eta (the neighbour pairs). A mechanism
Z (shape (N, K)) is eps-mDP when z_ik <= exp(eps * d_ij) * z_jk for every edge in both directions
and every k, rows sum to 1 and Z >= 0. Distances, eta and 1/eps share one unit (``distance_unit``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mdp_core.errors import InputError
from mdp_core.problem.metrics import check_points

PRIOR_TOL = 1e-9
METRICS = ("euclidean", "haversine", "graph")


def _finite(name: str, a: np.ndarray) -> None:
    if not np.all(np.isfinite(a)):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise InputError(f"{name}: {bad} value(s) are NaN or infinite")


@dataclass(frozen=True, eq=False)
class Instance:
    """One PMO problem.

    Attributes:
        prior: (N,) float64, non-negative, sums to 1.
        costs: (N, K) float64, finite utility loss c_ik >= 0 (any unit; the objective is in that unit).
        edges: (E, 2) int64, undirected neighbour pairs with i < j, sorted, no duplicates.
        distances: (E,) float64, 0 < d_ij <= eta, in ``distance_unit``.
        epsilon: privacy budget per ``distance_unit`` (> 0).
        eta: neighbour threshold in ``distance_unit`` (> 0).
        metric: how distances were measured ("euclidean", "haversine", "graph").
        distance_unit: unit of ``distances`` and ``eta`` (e.g. "km").
        records: optional per-record columns (N rows; e.g. ``lat``, ``lon``, ``x0``.., ``label``).
        outputs: optional per-output columns (K rows; e.g. ``record_id`` when outputs are records).
        provenance: free-form JSON-able description of where the instance came from.
    """

    prior: np.ndarray
    costs: np.ndarray
    edges: np.ndarray
    distances: np.ndarray
    epsilon: float
    eta: float
    metric: str = "euclidean"
    distance_unit: str = "km"
    records: pd.DataFrame | None = None
    outputs: pd.DataFrame | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        obj = object.__setattr__
        obj(self, "prior", np.ascontiguousarray(self.prior, dtype=np.float64))
        obj(self, "costs", np.ascontiguousarray(self.costs, dtype=np.float64))
        edges = np.asarray(self.edges)
        if edges.size == 0:
            edges = np.zeros((0, 2), dtype=np.int64)
        obj(self, "edges", np.ascontiguousarray(edges, dtype=np.int64))
        obj(self, "distances", np.ascontiguousarray(self.distances, dtype=np.float64).reshape(-1))
        obj(self, "epsilon", float(self.epsilon))
        obj(self, "eta", float(self.eta))
        self.validate()

    # ------------------------------------------------------------------ sizes
    @property
    def n_records(self) -> int:
        return int(self.prior.shape[0])

    @property
    def n_outputs(self) -> int:
        return int(self.costs.shape[1])

    @property
    def n_edges(self) -> int:
        return int(self.edges.shape[0])

    def replace(self, **changes: Any) -> Instance:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise :class:`InputError` naming the first problem found."""
        if not (np.isfinite(self.epsilon) and self.epsilon > 0):
            raise InputError(f"epsilon must be a finite number > 0, got {self.epsilon}")
        if not (np.isfinite(self.eta) and self.eta > 0):
            raise InputError(f"eta must be a finite number > 0, got {self.eta}")
        if self.metric not in METRICS:
            raise InputError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.prior.ndim != 1 or self.prior.shape[0] == 0:
            raise InputError("prior must be a non-empty 1-D array (at least one record)")
        n = self.n_records
        _finite("prior", self.prior)
        if np.any(self.prior < 0):
            raise InputError(f"prior has {int(np.sum(self.prior < 0))} negative value(s)")
        if abs(float(self.prior.sum()) - 1.0) > PRIOR_TOL:
            raise InputError(f"prior must sum to 1 (within {PRIOR_TOL:g}), sums to {self.prior.sum():.12g}")
        if self.costs.ndim != 2 or self.costs.shape[0] != n or self.costs.shape[1] == 0:
            raise InputError(f"costs must have shape (N={n}, K>=1), got {self.costs.shape}")
        _finite("costs", self.costs)
        if np.any(self.costs < 0):  # a utility loss: the solvers' bounds and pricing assume c >= 0
            raise InputError(
                f"costs must be >= 0 (a utility loss), {int(np.sum(self.costs < 0))} value(s) are negative"
            )
        e = self.edges
        if e.ndim != 2 or e.shape[1] != 2:
            raise InputError(f"edges must have shape (E, 2), got {e.shape}")
        if self.distances.shape[0] != e.shape[0]:
            raise InputError(f"{e.shape[0]} edges but {self.distances.shape[0]} distances")
        if e.shape[0]:
            if e.min() < 0 or e.max() >= n:
                raise InputError(f"edge endpoint out of range 0..{n - 1}")
            if np.any(e[:, 0] == e[:, 1]):
                raise InputError("edges contain a self-loop (i == j)")
            if np.any(e[:, 0] > e[:, 1]):
                raise InputError("edges must be stored with i < j")
            key = e[:, 0] * n + e[:, 1]
            if np.unique(key).shape[0] != key.shape[0]:
                raise InputError("edges contain duplicate pairs")
            _finite("edge distances", self.distances)
            if np.any(self.distances <= 0):
                raise InputError(
                    "edge distances must be > 0 (records at distance 0 are the same point: merge them "
                    "and add their priors)"
                )
            if np.any(self.distances > self.eta * (1 + 1e-12)):
                bad = int(np.argmax(self.distances))
                raise InputError(
                    f"edge ({e[bad, 0]}, {e[bad, 1]}) has distance {self.distances[bad]:.6g} > eta={self.eta:g}"
                )
        if self.records is not None and len(self.records) != n:
            raise InputError(f"records table has {len(self.records)} rows, expected N={n}")
        if self.outputs is not None and len(self.outputs) != self.n_outputs:
            raise InputError(f"outputs table has {len(self.outputs)} rows, expected K={self.n_outputs}")
        if self.outputs is not None and "record_id" in self.outputs:
            rid = self.outputs["record_id"].to_numpy()
            if not np.issubdtype(rid.dtype, np.integer):
                raise InputError(f"outputs.record_id must be integers, got dtype {rid.dtype}")
            if rid.min() < 0 or rid.max() >= n:
                raise InputError("outputs.record_id out of range 0..N-1")

    # ------------------------------------------------------------ coordinates
    def coordinate_columns(self) -> list[str]:
        """Names of the record coordinate columns the metric uses (may be empty)."""
        if self.records is None:
            return []
        if self.metric == "haversine":
            return [c for c in ("lat", "lon") if c in self.records.columns]
        return sorted((c for c in self.records.columns if c[:1] == "x" and c[1:].isdigit()), key=lambda c: int(c[1:]))

    def record_points(self) -> np.ndarray:
        """(N, D) record coordinates (``lat, lon`` degrees for haversine, ``x0..`` otherwise)."""
        cols = self.coordinate_columns()
        if self.records is None or not cols or (self.metric == "haversine" and len(cols) != 2):
            raise InputError("this instance has no record coordinates (records.parquet lacks lat/lon or x0.. columns)")
        return check_points("record coordinates", self.records[cols].to_numpy(dtype=np.float64), self.metric)

    def output_points(self) -> np.ndarray:
        """(K, D) output coordinates, from ``outputs.record_id`` or the outputs' own coordinate columns."""
        if self.outputs is not None and "record_id" in self.outputs:
            return self.record_points()[self.outputs["record_id"].to_numpy()]
        cols = self.coordinate_columns()
        if self.outputs is None or not cols or not set(cols) <= set(self.outputs.columns):
            raise InputError("this instance has no output coordinates (outputs.parquet lacks record_id or coordinates)")
        return check_points("output coordinates", self.outputs[cols].to_numpy(dtype=np.float64), self.metric)
