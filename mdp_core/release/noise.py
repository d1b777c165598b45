"""Exact discrete Laplace noise for integer counts, through OpenDP.

OpenDP's ``make_laplace`` on integer vectors samples the discrete Laplace (two-sided geometric)
distribution exactly (Canonne, Kamath and Steinke 2020, "The Discrete Gaussian for Differential
Privacy", Algorithm 2) from its own cryptographically secure randomness, and states the privacy of
the measurement itself (``map``): eps = sensitivity / scale for L1 sensitivity ``sensitivity``. A
floating-point Laplace, by contrast, leaks through the low bits of its output (Mironov 2012).

Neighbouring data here: one individual *moves* (the number of individuals n is public: it is the
number of released microdata rows). A count vector over a partition then changes in at most two
entries, by one each: L1 sensitivity 2 per partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdp_core.errors import InputError

MOVE_SENSITIVITY = 2  # L1 change of one partition's counts when one individual moves


@dataclass(frozen=True)
class Measurement:
    """Noisy integer counts: ``values`` (m,) int64, the ``scale`` of the discrete Laplace noise, and
    the ``epsilon`` OpenDP states for L1 input distance ``sensitivity``."""

    values: np.ndarray
    scale: float
    sensitivity: int
    epsilon: float


def discrete_laplace(true: np.ndarray, sensitivity: int, epsilon: float) -> Measurement:
    """``true`` (m,) non-negative integer counts plus discrete Laplace noise of scale sensitivity / epsilon.

    ``sensitivity``: L1 distance of ``true`` between neighbouring data sets (whole vector). Raises
    InputError for epsilon <= 0 or non-integer counts; checks that OpenDP's stated epsilon is within
    the budget.
    """
    import opendp.prelude as dp

    if not (np.isfinite(epsilon) and epsilon > 0):
        raise InputError(f"epsilon must be a finite number > 0, got {epsilon}")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise InputError(f"sensitivity must be a positive integer, got {sensitivity!r}")
    t = np.asarray(true)
    if t.ndim != 1 or (t.size and (t.dtype.kind not in "iu" or t.min() < 0)):
        raise InputError("counts must be a 1-D array of non-negative integers")
    dp.enable_features("contrib")
    scale = sensitivity / float(epsilon)
    meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale=scale)
    stated = float(meas.map(sensitivity))
    if stated > epsilon * (1 + 1e-9):
        raise InputError(f"OpenDP states epsilon {stated} for scale {scale}, above the budget {epsilon}")
    values = np.asarray(meas([int(v) for v in t]) if t.size else [], dtype=np.int64)
    return Measurement(values, scale, sensitivity, stated)


def mean_abs_error(scale: float) -> float:
    """E|X| for discrete Laplace noise of ``scale`` b (P(k) proportional to exp(-|k| / b)): 2q / (1 - q^2),
    q = exp(-1 / b). In counts; before post-processing (CBDP's consistency usually lowers it)."""
    if not scale > 0:
        return 0.0
    q = float(np.exp(-1.0 / scale))
    return 2.0 * q / (1.0 - q * q)


__all__ = ["MOVE_SENSITIVITY", "Measurement", "discrete_laplace", "mean_abs_error"]
