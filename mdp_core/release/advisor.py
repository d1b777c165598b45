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
  instance: 0.47 at N = 150, 0.71 at N = 500); times the planar Laplace figure the check computes for this
  instance, then combined with the people's move to their record (issue 50: the error is per person).

The fits missed runs outside the bench (the Helsinki example: 0.073 predicted, 0.141 measured from the records),
so the range stated is not the fit's: it is the one every release must fall in, for every kind (:func:`predict`:
the floor from the person, planar Laplace at the records plus the move). Outside the class (another kind or
loss) neither the time nor a point is predicted: the measurements say nothing there, and ``check`` says so.
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
    """``seconds`` predicted for the solve, within ``[seconds / factor, seconds * factor]`` on the measured runs
    (None: no prediction, outside the measured class); ``error`` the release's expected distance per person (None
    outside the class), within ``[error_low, error_high]`` for every kind (issue 50: the floor from the person, and
    planar Laplace remapped at the records -- a mechanism the optimum cannot lose to beyond its gap -- plus the
    move to the record, by the triangle inequality); ``runs`` the measurements behind the fits."""

    seconds: float | None
    factor: float
    error: float | None
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


def predict(
    privacy_rows: int,
    remap: float,
    snap: float = 0.0,
    floor: float = 0.0,
    measured: bool = True,
    gap: float = 1e-2,
    points: tuple[Measured, ...] = MEASURED,
) -> Prediction:
    """The prediction for an instance with ``privacy_rows`` = 2 E K, planar Laplace's expected distance remapped at
    the records ``remap`` at the release's rate, the people's mean move to their record ``snap`` and the floor from
    the person ``floor`` (each for people spread as the prior). The range holds for every kind: the optimal
    mechanism's error from the records is at most planar Laplace's remapped one (a feasible mechanism) times
    (1 + ``gap``), and a person's error is at most that plus their move to the record (triangle inequality), at
    least the floor. Inside the measured class (``measured``, with two runs to fit) the time and a point estimate:
    the fitted ratio to planar Laplace at the records, combined with the move as sqrt(a^2 + snap^2) (directions
    independent), inside the range."""
    low, high = float(floor), float(remap) * (1 + gap) + float(snap)
    if not measured or len(points) < 2:
        return Prediction(None, 1.0, None, low, high, len(points))
    log_a, b, factor = time_fit(points)
    x = np.log([p.privacy_rows for p in points])
    ratios = np.array([p.release / p.remap for p in points])
    slope, icept = np.polyfit(x, ratios, 1)
    records = float(icept + slope * math.log(privacy_rows)) * remap
    return Prediction(
        seconds=math.exp(log_a + b * math.log(privacy_rows)),
        factor=factor,
        error=min(max(math.hypot(records, snap), low), high),
        error_low=low,
        error_high=high,
        runs=len(points),
    )


def laplace_better(p: Prediction, remap: float, continuous: float) -> str | None:
    """What to say when planar Laplace at the requested rate, applied where the person is, would do better than the
    release can (below the range's low end) or is predicted to (below the point estimate); None otherwise."""
    if continuous < p.error_low:
        return (
            f"continuous planar Laplace at this rate ({continuous:.3g}) is below the floor of these outputs "
            f"({p.error_low:.3g}): no mechanism on them can match it; more outputs, or planar Laplace"
        )
    if remap < p.error_low:
        return f"planar Laplace remapped to these outputs ({remap:.3g}) is below what the release can reach"
    if p.error is not None and remap < p.error:
        return (
            f"planar Laplace at the person, remapped to these outputs ({remap:.3g}), is predicted to do better than "
            f"the release ({p.error:.3g}): a smaller max_distance (finer records) or planar Laplace"
        )
    return None


def rows_within(seconds: float, points: tuple[Measured, ...] = MEASURED) -> float:
    """The privacy rows R whose predicted solve takes ``seconds`` (the time fit inverted)."""
    log_a, b, _ = time_fit(points)
    return math.exp((math.log(seconds) - log_a) / b)
