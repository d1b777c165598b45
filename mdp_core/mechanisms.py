"""Baseline mechanisms (closed form). Each returns an (N, K) row-stochastic matrix.

Every mechanism still goes through :func:`mdp_core.verify.certify` before release.
"""

from __future__ import annotations

import numpy as np

from mdp_core.instance import Instance
from mdp_core.metrics import pairwise


def record_output_distances(instance: Instance) -> np.ndarray:
    """(N, K) metric distances d(r_i, o_k) from the instance's coordinates, in ``distance_unit``."""
    return pairwise(instance.metric, instance.record_points(), instance.output_points())


def exponential(instance: Instance, distances: np.ndarray | None = None) -> np.ndarray:
    """Exponential mechanism z_ik proportional to exp(-eps * d(r_i, o_k) / 2) (Qiu 2024, app. D.1).

    For any records i, j and output k, |d(r_i, o_k) - d(r_j, o_k)| <= d(r_i, r_j) (triangle
    inequality), so the numerators differ by at most exp(eps d_ij / 2) and the normalisers by the
    same factor: z_ik / z_jk <= exp(eps d_ij). Computed in log space (row-wise max shift).

    Args:
        distances: optional (N, K) record-to-output distances; computed from coordinates if None.
    """
    d = record_output_distances(instance) if distances is None else np.asarray(distances, float)
    s = -0.5 * instance.epsilon * d
    s -= s.max(axis=1, keepdims=True)
    z = np.exp(s)
    return z / z.sum(axis=1, keepdims=True)
