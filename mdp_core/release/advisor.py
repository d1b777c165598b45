"""What ``mdp-release check`` predicts before a release is solved (issues 40, 50): the solve's time on this machine
and the release's expected error per person, each with its range, from runs measured in the bench.

The runs (:data:`MEASURED`) are releases as a release builds and solves them (the kind's release defaults: the
distance loss; ``auto``, ``gap_rel`` = ``RELEASE_GAP_REL`` = 1e-2) on 2 shared cores: ``bench/release_class.py``
(road, central Rome, uniform prior, N = K = 150-500) and ``bench/advisor_runs.py`` (road: the Helsinki example and
central Rome; grids of 100-900 cells; each with a uniform prior and with a DP histogram of seeded made-up people).
Per dataset kind with runs of two sizes at least (:func:`kinds`):

* time: seconds = a x R^b x g^[prior uneven], by least squares in logs, over the full LP's privacy rows
  R = 2 E K (E: the mDP graph's edges, K: the outputs) -- the rows row generation chooses from -- and whether the
  prior is uneven (a DP histogram or a file: the LPs are harder, more rounds; the Helsinki example took 8 s where
  the uniform release class predicted 1.3 s). Stated within [t / factor, t x factor], factor the largest miss of
  a measured run times :data:`LOAD_MARGIN` (the machine's load moves a solve several times on 2 shared cores:
  the Helsinki example's solve took 8 s in one run and 52 s in the next, at load 8);
* error per person: the release's over planar Laplace's remapped to the same outputs, both applied where the
  person is (people spread as the prior in the records' cells, :mod:`mdp_core.release.people`), the median of
  the kind's measured ratios, times the figure ``check`` computes for this instance.

The range stated for the error is not the fit's: it is the one every release with the distance loss must fall in
(:func:`predict`: the floor from the person; planar Laplace remapped at the records plus the move to the
record). Kinds without runs (points, vectors, words, synthetic) get the range and no time or point: the
measurements say nothing there, and ``check`` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LOAD_MARGIN = 2.0  # the time range's allowance for the machine's load beyond the measured runs' own misses


@dataclass(frozen=True)
class Measured:
    """One bench line: the instance, its full-LP privacy rows (2 E K), the solve's wall ``seconds``, the release's
    expected distance per record and planar Laplace's remapped to its outputs at the records (``release``,
    ``remap``); the dataset ``kind``, whether the ``prior`` was ``"uniform"`` or ``"uneven"``, and per person
    (people spread as the prior in the records' cells) the release's and planar Laplace's remapped figures
    (``release_people``, ``remap_people``; None when the run did not measure them). Distances in the kind's unit."""

    instance: str
    n_records: int
    n_outputs: int
    privacy_rows: int
    seconds: float
    release: float
    remap: float
    kind: str = "road"
    prior: str = "uniform"
    release_people: float | None = None
    remap_people: float | None = None


# bench/release_class.py, 2026-11-28, 2 shared cores (the test suite running beside it), HiGHS 1.15.1
# (bench/README.md, "The release class")
MEASURED: tuple[Measured, ...] = (
    Measured("romeR150", 150, 150, 577800, 4.9, 0.07045258509734244, 0.14927205259348686),
    Measured("romeR250", 250, 250, 2822500, 42.6, 0.09719445709081956, 0.16394158202083758),
    Measured("romeR350", 350, 350, 6994400, 140.7, 0.10966762211478226, 0.171282404121741),
    Measured("romeR500", 500, 500, 21236000, 556.8, 0.12582333067435644, 0.17737789842753632),
) + tuple(  # bench/advisor_runs.py --seed 0, 2026-11-29 (bench/README.md, "The advisor's runs")
    Measured(n, r, k, rows, sec, rel, rem, kind, prior, rp, remp)
    for n, kind, prior, r, k, rows, sec, rel, rem, rp, remp in (
        (
            "helsinki",
            "road",
            "uniform",
            120,
            40,
            207200,
            37.0,
            0.1418173736927244,
            0.17677654658169012,
            0.1613239050173536,
            0.18406550159067897,
        ),
        (
            "helsinki",
            "road",
            "uneven",
            120,
            40,
            207200,
            60.2,
            0.13797496618584748,
            0.1735347158549382,
            0.16072533385594406,
            0.18421801317868583,
        ),
        (
            "rome200x60",
            "road",
            "uniform",
            200,
            60,
            400920,
            16.4,
            0.19385241519970212,
            0.24477677820796526,
            0.2532594782716237,
            0.28778274518745983,
        ),
        (
            "rome200x60",
            "road",
            "uneven",
            200,
            60,
            400920,
            20.3,
            0.22997355732345737,
            0.28048242099494586,
            0.29333093558293355,
            0.3224624141407614,
        ),
        (
            "grid10x10",
            "grid",
            "uniform",
            100,
            50,
            50200,
            0.2,
            0.5042572667424957,
            0.5169047818171075,
            0.7185437780187042,
            0.6600553094497681,
        ),
        (
            "grid10x10",
            "grid",
            "uneven",
            100,
            50,
            50200,
            0.2,
            0.39977162320545595,
            0.41215769501255245,
            0.6459173724957089,
            0.5922147418376106,
        ),
        (
            "grid20x25",
            "grid",
            "uniform",
            500,
            100,
            555400,
            7.8,
            1.0478379026662044,
            1.0594521953980485,
            1.152829341177332,
            1.1096745619906447,
        ),
        (
            "grid20x25",
            "grid",
            "uneven",
            500,
            100,
            555400,
            12.0,
            1.0003132493311229,
            1.0101000601957932,
            1.114772277022753,
            1.0677464133620709,
        ),
        (
            "grid30x30",
            "grid",
            "uniform",
            900,
            200,
            2040800,
            18.2,
            0.9982815602019189,
            1.009368804797047,
            1.1119041239910237,
            1.0565538916684116,
        ),
        (
            "grid30x30",
            "grid",
            "uneven",
            900,
            200,
            2040800,
            25.8,
            1.007785759329614,
            1.019087881926927,
            1.1169570039076018,
            1.0582152773271283,
        ),
        (
            "rome300x100",
            "road",
            "uniform",
            300,
            100,
            1463200,
            38.2,
            0.17870727833309571,
            0.2282149470393108,
            0.22451968897706967,
            0.25709319665371605,
        ),
        (
            "rome300x100",
            "road",
            "uneven",
            300,
            100,
            1463200,
            68.8,
            0.18118401154782024,
            0.232057962032944,
            0.23699162154029163,
            0.26533093553709725,
        ),
    )
)


@dataclass(frozen=True)
class Prediction:
    """``seconds`` predicted for the solve, within ``[seconds / factor, seconds * factor]`` (None: no prediction,
    no measured runs of the kind); ``error`` the release's expected distance per person (None without runs of
    the kind), within ``[error_low, error_high]`` for every kind with the distance loss (issue 50: the floor from
    the person, and planar Laplace remapped at the records -- a mechanism the optimum cannot lose to beyond its
    gap -- plus the move to the record, by the triangle inequality); ``runs`` the measurements behind the fits."""

    seconds: float | None
    factor: float
    error: float | None
    error_low: float
    error_high: float
    runs: int


def kinds(points: tuple[Measured, ...] = MEASURED) -> frozenset[str]:
    """The dataset kinds with runs of two sizes at least: those the advisor predicts for."""
    sizes: dict[str, set[int]] = {}
    for p in points:
        sizes.setdefault(p.kind, set()).add(p.privacy_rows)
    return frozenset(k for k, v in sizes.items() if len(v) >= 2)


def _design(points: tuple[Measured, ...]) -> np.ndarray:
    """(n, 2 or 3) the time fit's regressors: 1, log R, and [prior uneven] when both priors were measured."""
    x = [np.ones(len(points)), np.log([p.privacy_rows for p in points])]
    uneven = np.array([p.prior != "uniform" for p in points], dtype=np.float64)
    if 0 < uneven.sum() < len(points):
        x.append(uneven)
    return np.column_stack(x)


def time_fit(points: tuple[Measured, ...] = MEASURED) -> tuple[np.ndarray, float]:
    """(coefficients (log a, b[, log g]), factor) of log seconds = log a + b log R [+ log g x uneven] over
    ``points`` (least squares; factor: exp of the largest absolute residual, >= 1). Needs two runs of different
    sizes."""
    if len({p.privacy_rows for p in points}) < 2:
        raise ValueError("a time fit needs two measured runs of different sizes")
    x, y = _design(points), np.log([p.seconds for p in points])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    return coef, math.exp(float(np.max(np.abs(y - x @ coef))))


def _seconds(coef: np.ndarray, privacy_rows: float, uneven: bool) -> float:
    """The fitted seconds at R = ``privacy_rows`` (the prior's term when the fit has one); an instance with no
    privacy row (no two records within eta) is fitted at R = 1."""
    log_t = coef[0] + coef[1] * math.log(max(privacy_rows, 1)) + (coef[2] if coef.size > 2 and uneven else 0.0)
    return math.exp(float(log_t))


def predict(
    privacy_rows: int,
    remap: float,
    snap: float = 0.0,
    floor: float = 0.0,
    kind: str | None = "road",
    gap: float = 1e-2,
    points: tuple[Measured, ...] = MEASURED,
    uneven: bool = False,
    remap_people: float | None = None,
) -> Prediction:
    """The prediction for an instance of dataset ``kind`` with ``privacy_rows`` = 2 E K, planar Laplace's expected
    distance remapped at the records ``remap`` at the release's rate, the people's mean move to their record
    ``snap``, the floor from the person ``floor`` and planar Laplace remapped at the person ``remap_people`` (each
    for people spread as the prior), the prior ``uneven`` (not uniform). The range holds for every kind with the
    distance loss: the optimal mechanism's error from the records is at most planar Laplace's remapped one (a
    feasible mechanism) times (1 + ``gap``), and a person's error is at most that plus their move to the record
    (triangle inequality), at least the floor. For a kind with runs (:func:`kinds`; None: none) the time, and the
    point: the kind's median measured ratio of the release to planar Laplace remapped, at the person, times
    ``remap_people``, inside the range."""
    low, high = float(floor), float(remap) * (1 + gap) + float(snap)
    mine = tuple(p for p in points if p.kind == kind)
    if kind not in kinds(points):
        return Prediction(None, 1.0, None, low, high, len(mine))
    coef, factor = time_fit(mine)
    ratios = [p.release_people / p.remap_people for p in mine if p.release_people and p.remap_people]
    error = None
    if ratios and remap_people is not None:
        error = min(max(float(np.median(ratios)) * remap_people, low), high)
    return Prediction(_seconds(coef, privacy_rows, uneven), factor * LOAD_MARGIN, error, low, high, len(mine))


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


def rows_within(
    seconds: float, points: tuple[Measured, ...] = MEASURED, kind: str = "road", uneven: bool = False
) -> float:
    """The privacy rows R whose predicted solve of ``kind`` takes ``seconds`` (the time fit inverted)."""
    coef, _ = time_fit(tuple(p for p in points if p.kind == kind))
    shift = coef[2] if coef.size > 2 and uneven else 0.0
    return math.exp((math.log(seconds) - coef[0] - shift) / coef[1])
