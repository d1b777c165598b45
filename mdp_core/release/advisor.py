"""What ``mdp-release check`` predicts before a release is solved (issue 40): the solve's time on this machine
and the release's expected error, from the bench's measurements of the release class, each with its error.

The release class is what a road release config builds by default (``[dataset] kind = "road"``, the distance
loss, eta = the protection radius of 1 km, eps 10 per km, as many outputs as records), solved as a release
solves it (``auto``: row generation on the mechanism's support, ``gap_rel`` = ``RELEASE_GAP_REL`` = 1e-2).
``bench/release_class.py`` measured it on 2 cores (:data:`MEASURED`; bench/README.md). Two fits, by least
squares in logs:

* time: seconds = a x R^b over the full LP's privacy rows R = 2 E K (E: the mDP graph's edges, K: the
  outputs): the rows the row generation chooses from. Stated with the largest factor by which a measured run
  differed from the fit (``factor``): a range, not a promise (another machine, another load, another area);
* error: the release's expected distance per record over planar Laplace's at the same rate, remapped to the
  same outputs (both averaged with the instance's prior), as a ratio, linear in log R (it grows with the
  instance: 0.47 at N = 150, 0.71 at N = 500), stated with the largest miss on the runs; times the planar
  Laplace figure the check computes for this instance.

Outside the class (another kind or loss) nothing is predicted: the measurements say nothing there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Measured:
    """One ``bench/release_class.py`` line: the instance, its full-LP privacy rows (2 E K), the solve's wall
    ``seconds``, the release's expected distance per record and planar Laplace's remapped to its outputs (km)."""

    instance: str
    n_records: int
    n_outputs: int
    privacy_rows: int
    seconds: float
    release: float
    remap: float


# bench/release_class.py, 2026-11-28, 2 shared cores (the test suite running beside it), HiGHS 1.15.1
# (bench/README.md, "The release class")
MEASURED: tuple[Measured, ...] = (
    Measured("romeR150", 150, 150, 577800, 4.9, 0.07045258509734244, 0.14927205259348686),
    Measured("romeR250", 250, 250, 2822500, 42.6, 0.09719445709081956, 0.16394158202083758),
    Measured("romeR350", 350, 350, 6994400, 140.7, 0.10966762211478226, 0.171282404121741),
    Measured("romeR500", 500, 500, 21236000, 556.8, 0.12582333067435644, 0.17737789842753632),
)


@dataclass(frozen=True)
class Prediction:
    """``seconds`` predicted for the solve, within ``[seconds / factor, seconds * factor]`` on the measured runs;
    ``error`` the release's expected distance per record predicted from planar Laplace's remapped one, its
    range ``[error_low, error_high]``; ``runs`` the measurements behind both."""

    seconds: float
    factor: float
    error: float
    error_low: float
    error_high: float
    runs: int


def time_fit(points: tuple[Measured, ...] = MEASURED) -> tuple[float, float, float]:
    """(log a, b, factor) of seconds = a x R^b over ``points`` (least squares in logs; factor: exp of the
    largest absolute residual, >= 1). Needs two runs of different sizes."""
    x = np.log([p.privacy_rows for p in points])
    y = np.log([p.seconds for p in points])
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError("a time fit needs two measured runs of different sizes")
    b, log_a = np.polyfit(x, y, 1)
    factor = math.exp(float(np.max(np.abs(y - (log_a + b * x)))))
    return float(log_a), float(b), factor


def predict(privacy_rows: int, remap: float, points: tuple[Measured, ...] = MEASURED) -> Prediction | None:
    """The prediction for an instance of the release class with ``privacy_rows`` = 2 E K and planar Laplace's
    remapped expected distance ``remap`` at the release's rate; None without measurements to fit."""
    if len(points) < 2:
        return None
    log_a, b, factor = time_fit(points)
    x = np.log([p.privacy_rows for p in points])
    ratios = np.array([p.release / p.remap for p in points])
    slope, icept = np.polyfit(x, ratios, 1)
    miss = float(np.max(np.abs(ratios - (icept + slope * x))))
    ratio = float(icept + slope * math.log(privacy_rows))
    return Prediction(
        seconds=math.exp(log_a + b * math.log(privacy_rows)),
        factor=factor,
        error=ratio * remap,
        error_low=max(ratio - miss, 0.0) * remap,
        error_high=(ratio + miss) * remap,
        runs=len(points),
    )


def rows_within(seconds: float, points: tuple[Measured, ...] = MEASURED) -> float:
    """The privacy rows R whose predicted solve takes ``seconds`` (the time fit inverted)."""
    log_a, b, _ = time_fit(points)
    return math.exp((math.log(seconds) - log_a) / b)
