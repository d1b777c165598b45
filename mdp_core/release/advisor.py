"""What ``mdp-release check`` predicts before a release is solved (issues 40, 50): the solve's time on this machine
and the release's expected error per person, each with its range, from runs measured in the bench.

The runs (:data:`MEASURED`) are releases as a release builds and solves them (the kind's release defaults: the
distance loss; ``auto``, ``gap_rel`` = ``RELEASE_GAP_REL`` = 1e-2) on 2 shared cores: ``bench/release_class.py``
(road, central Rome, uniform prior, N = K = 150-500) and ``bench/advisor_runs.py`` (road: the Helsinki example and
central Rome; grids of 100-900 cells at eps 10 per km and city grids of 1.5 km cells at eps 2; vectors in 3-D,
the points kind; each with a uniform prior and with a DP histogram of seeded made-up people). Per dataset kind
with runs of two sizes at least (:func:`kinds`), on the regressors 1, log R, [prior uneven], [log(eps x eta)]
(the last two when the kind's runs vary them; :func:`_design`):

* time: log seconds on an idle machine (each run's over :func:`load_share` of the load average before it; a
  prediction is scaled by the load now), by least squares (:func:`time_fit`), over the full LP's privacy rows
  R = 2 E K (E: the mDP graph's edges, K: the outputs) -- the rows row generation chooses from --, whether the
  prior is uneven (a DP histogram or a file: the LPs are harder, more rounds; the Helsinki example took 8 s where
  the uniform release class predicted 1.3 s) and eps x eta (a lower rate flattens the mechanism: a larger
  support, slower LPs). Stated within [t / factor, t x factor], factor the largest miss of a measured run times
  :data:`LOAD_MARGIN` (the load average before a solve is not the load during it: the Helsinki example's solve
  took 8 s in one run and 52 s in the next, at load 8);
* error per person: log of the release's over planar Laplace's remapped to the same outputs, both applied where
  the person is (people spread as the prior in the records' cells, :mod:`mdp_core.release.people`), by least
  squares on the same regressors (:func:`error_fit`), times the figure ``check`` computes for this instance;
  stated within the fit's largest miss times :data:`ERROR_MARGIN`, and with an uneven prior times
  :func:`prior_spread` (``check`` computes its figure before a DP prior is drawn: the runs' DP priors moved it by
  up to 12 %).

Both error ranges are clipped to the one every release with the distance loss must fall in (:func:`predict`: the
floor from the person; planar Laplace remapped at the records plus the move to the record). Kinds without runs
(words, synthetic) get that range and no time or point: the measurements say nothing there, and ``check`` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LOAD_MARGIN = 3.0  # the time range's allowance for the machine's load beyond the measured runs' own misses
CORES = 2  # the cores of the machine the runs were measured on
ERROR_MARGIN = 1.05  # the error range's allowance beyond the runs' own misses (another table, another prior draw)


@dataclass(frozen=True)
class Measured:
    """One bench line: the instance, its full-LP privacy rows (2 E K), the solve's wall ``seconds``, the release's
    expected distance per record and planar Laplace's remapped to its outputs at the records (``release``,
    ``remap``); the dataset ``kind``, whether the ``prior`` was ``"uniform"`` or ``"uneven"``, and per person
    (people spread as the prior in the records' cells) the release's and planar Laplace's remapped figures
    (``release_people``, ``remap_people``; None when the run did not measure them), and ``rate`` eps x eta (the
    privacy loss between two neighbours at eta apart: the lower, the flatter the mechanism, the larger its support
    and the slower its LP), ``load`` the machine's 1-minute load average before the solve (None: not recorded,
    taken as idle). Distances in the kind's unit."""

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
    rate: float = 10.0
    load: float | None = None


# bench/release_class.py, 2026-11-28, 2 shared cores (the test suite running beside it), HiGHS 1.15.1
# (bench/README.md, "The release class")
MEASURED: tuple[Measured, ...] = (
    Measured("romeR150", 150, 150, 577800, 4.9, 0.07045258509734244, 0.14927205259348686),
    Measured("romeR250", 250, 250, 2822500, 42.6, 0.09719445709081956, 0.16394158202083758),
    Measured("romeR350", 350, 350, 6994400, 140.7, 0.10966762211478226, 0.171282404121741),
    Measured("romeR500", 500, 500, 21236000, 556.8, 0.12582333067435644, 0.17737789842753632),
) + tuple(  # bench/advisor_runs.py --seed 0, 2026-11-29 (bench/README.md, "The advisor's runs")
    Measured(n, r, k, rows, sec, rel, rem, kind, prior, rp, remp, rate, load)
    for n, kind, prior, r, k, rows, sec, rel, rem, rp, remp, rate, load in (
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
            5.0,
            9.2,
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
            5.0,
            10.49,
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
            10.0,
            10.76,
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
            10.0,
            11.61,
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
            20.0,
            11.32,
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
            20.0,
            11.32,
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
            20.0,
            11.32,
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
            20.0,
            11.42,
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
            20.0,
            11.17,
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
            20.0,
            10.99,
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
            10.0,
            11.01,
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
            10.0,
            11.77,
        ),
        (
            "city10x12",
            "grid",
            "uniform",
            120,
            120,
            146880,
            26.2,
            0.33270802603556904,
            0.8165103418433316,
            0.808507187236784,
            1.1030477877066138,
            6.0,
            8.56,
        ),
        (
            "city10x12",
            "grid",
            "uneven",
            120,
            120,
            146880,
            23.2,
            0.3156365287654939,
            0.7936579431201475,
            0.7963110059090031,
            1.0879290893177254,
            6.0,
            9.59,
        ),
        (
            "city14x18",
            "grid",
            "uniform",
            252,
            252,
            682416,
            247.6,
            0.34550231561104955,
            0.8411008503256747,
            0.8173606302164564,
            1.1195034943785533,
            6.0,
            11.03,
        ),
        (
            "city14x18",
            "grid",
            "uneven",
            252,
            252,
            682416,
            141.7,
            0.3343884791385343,
            0.8272977654085963,
            0.8110240645695815,
            1.1135014146243423,
            6.0,
            13.35,
        ),
        (
            "vec60",
            "points",
            "uniform",
            60,
            60,
            61080,
            12.1,
            0.8696600783495397,
            1.491536398544157,
            1.3792047043131288,
            1.7334688890885528,
            4.5,
            10.88,
        ),
        (
            "vec60",
            "points",
            "uneven",
            60,
            60,
            61080,
            17.3,
            0.7850497520213823,
            1.500505301390008,
            1.3652614027173249,
            1.7710678248584368,
            4.5,
            11.14,
        ),
        (
            "vec100",
            "points",
            "uniform",
            100,
            100,
            189400,
            182.0,
            0.9117985128441279,
            1.5915688994199075,
            1.4174894385841075,
            1.8138152204340885,
            4.5,
            15.08,
        ),
        (
            "vec100",
            "points",
            "uneven",
            100,
            100,
            189400,
            158.5,
            0.8394794154350991,
            1.6338196868706254,
            1.3816199307112342,
            1.8511197055570943,
            4.5,
            13.3,
        ),
        (
            "vec130",
            "points",
            "uniform",
            130,
            130,
            348400,
            145.8,
            0.9363170232007523,
            1.636079409321963,
            1.4437304240138193,
            1.8647925390814917,
            4.5,
            4.72,
        ),
        (
            "vec130",
            "points",
            "uneven",
            130,
            130,
            348400,
            148.8,
            0.8430046856910549,
            1.6631868164585266,
            1.409543050555924,
            1.9161489234608584,
            4.5,
            6.72,
        ),
    )
)


@dataclass(frozen=True)
class Prediction:
    """``seconds`` predicted for the solve, within ``[seconds / factor, seconds * factor]`` (None: no prediction,
    no measured runs of the kind); ``error`` the release's expected distance per person (None without runs of
    the kind), within ``[error_min, error_max]`` (the error fit's worst miss over the kind's runs times
    :data:`ERROR_MARGIN`, and :func:`prior_spread` for an uneven prior, inside the range below), and within ``[error_low, error_high]`` for every kind with the
    distance loss (issue 50: the floor from the person, and planar Laplace remapped at the records -- a mechanism
    the optimum cannot lose to beyond its gap -- plus the move to the record, by the triangle inequality); ``runs``
    the measurements behind the fits."""

    seconds: float | None
    factor: float
    error: float | None
    error_low: float
    error_high: float
    runs: int
    error_min: float | None = None
    error_max: float | None = None


def kinds(points: tuple[Measured, ...] = MEASURED) -> frozenset[str]:
    """The dataset kinds with runs of two sizes at least: those the advisor predicts for."""
    sizes: dict[str, set[int]] = {}
    for p in points:
        sizes.setdefault(p.kind, set()).add(p.privacy_rows)
    return frozenset(k for k, v in sizes.items() if len(v) >= 2)


def _design(points: tuple[Measured, ...]) -> np.ndarray:
    """(n, 2 to 4) the fits' regressors: 1, log R, [prior uneven] when both priors were measured, log(eps x eta)
    when the runs have more than one."""
    x = [np.ones(len(points)), np.log([p.privacy_rows for p in points])]
    uneven = np.array([p.prior != "uniform" for p in points], dtype=np.float64)
    if 0 < uneven.sum() < len(points):
        x.append(uneven)
    if _rated(points):
        x.append(np.log([p.rate for p in points]))
    return np.column_stack(x)


def _rated(points: tuple[Measured, ...]) -> bool:
    """Whether the fits take log(eps x eta) as a regressor: with two measured rates at least. With two, the slope
    may also carry whatever else differs between the two settings (for road, the city), so :func:`_row` never
    extrapolates it beyond the measured rates."""
    return len({p.rate for p in points}) >= 2


def _row(points: tuple[Measured, ...], privacy_rows: float, uneven: bool, rate: float | None) -> np.ndarray:
    """The regressors of an instance (:func:`_design`'s columns for these runs); an instance with no privacy row
    (no two records within eta) at R = 1; no rate given: the runs' median."""
    x = [1.0, math.log(max(privacy_rows, 1))]
    if 0 < sum(p.prior != "uniform" for p in points) < len(points):
        x.append(float(uneven))
    if _rated(points):  # clamped to the measured rates: no extrapolation of the slope
        rates = [p.rate for p in points]
        x.append(math.log(min(max(rate, min(rates)), max(rates)) if rate else float(np.median(rates))))
    return np.array(x)


def load_share(load: float | None, cores: int = CORES) -> float:
    """How many times slower a solve runs at the 1-minute ``load`` average than on an idle machine of ``cores``
    cores: the load over the cores once it exceeds them (each runnable process's share), 1 below (None: idle)."""
    return max(1.0, float(load) / max(cores, 1)) if load is not None and math.isfinite(load) else 1.0


def time_fit(points: tuple[Measured, ...] = MEASURED) -> tuple[np.ndarray, float]:
    """(coefficients (log a, b[, log g][, c]), factor) of log idle seconds = log a + b log R [+ log g x uneven]
    [+ c log(eps x eta)] over ``points`` (each run's seconds over its :func:`load_share`; least squares; factor:
    exp of the largest absolute residual, >= 1). Needs two runs of different sizes."""
    if len({p.privacy_rows for p in points}) < 2:
        raise ValueError("a time fit needs two measured runs of different sizes")
    x, y = _design(points), np.log([p.seconds / load_share(p.load) for p in points])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    return coef, math.exp(float(np.max(np.abs(y - x @ coef))))


def error_fit(points: tuple[Measured, ...]) -> tuple[np.ndarray, float, tuple[Measured, ...]] | None:
    """(coefficients, factor, the runs used) of log(release / planar Laplace remapped, both per person) over the
    runs that measured them, on :func:`_design`'s regressors (least squares; factor: exp of the largest absolute
    residual); None with fewer runs than regressors + 1."""
    mine = tuple(p for p in points if p.release_people and p.remap_people)
    if not mine:
        return None
    x = _design(mine)
    if len(mine) <= x.shape[1]:
        return None
    y = np.log([p.release_people / p.remap_people for p in mine])  # type: ignore[operator]
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    return coef, math.exp(float(np.max(np.abs(y - x @ coef)))), mine


def prior_spread(points: tuple[Measured, ...] = MEASURED) -> float:
    """How far an uneven prior moved the figure ``check`` computes before it is drawn: exp of the largest
    |log(planar Laplace remapped at the person, uneven prior / uniform prior)| over the runs measured with both
    priors (1 with none). ``check`` sees a DP prior's instance with the dataset's prior, not the draw."""
    at: dict[str, dict[str, float]] = {}
    for p in points:
        if p.remap_people:
            at.setdefault(p.instance, {})[p.prior] = p.remap_people
    logs = [abs(math.log(v["uneven"] / v["uniform"])) for v in at.values() if {"uneven", "uniform"} <= v.keys()]
    return math.exp(max(logs, default=0.0))


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
    rate: float | None = None,
    load: float | None = None,
    cores: int = CORES,
) -> Prediction:
    """The prediction for an instance of dataset ``kind`` with ``privacy_rows`` = 2 E K, planar Laplace's expected
    distance remapped at the records ``remap`` at the release's rate, the people's mean move to their record
    ``snap``, the floor from the person ``floor`` and planar Laplace remapped at the person ``remap_people`` (each
    for people spread as the prior), the prior ``uneven`` (not uniform), ``rate`` its eps x eta (None: the runs'
    median, clamped to the runs' rates), ``load`` the load average now of the machine of ``cores`` cores (the time
    scaled by :func:`load_share`; None: idle). The
    range holds for every kind with the distance loss: the optimal mechanism's error from the records is at most
    planar Laplace's remapped one (a feasible mechanism) times (1 + ``gap``), and a person's error is at most that
    plus their move to the record (triangle inequality), at least the floor. For a kind with runs (:func:`kinds`;
    None: none) the time (:func:`time_fit`), and the point: the kind's fitted ratio of the release to planar
    Laplace remapped, at the person (:func:`error_fit`), times ``remap_people``, with its own range, inside the
    range every release keeps."""
    low, high = float(floor), float(remap) * (1 + gap) + float(snap)
    mine = tuple(p for p in points if p.kind == kind)
    if kind not in kinds(points):
        return Prediction(None, 1.0, None, low, high, len(mine))
    coef, factor = time_fit(mine)
    seconds = math.exp(float(coef @ _row(mine, privacy_rows, uneven, rate))) * load_share(load, cores)
    fit = error_fit(mine)
    if fit is None or remap_people is None:
        return Prediction(seconds, factor * LOAD_MARGIN, None, low, high, len(mine))
    e_coef, e_factor, used = fit
    point = math.exp(float(e_coef @ _row(used, privacy_rows, uneven, rate))) * remap_people
    spread = e_factor * ERROR_MARGIN * (prior_spread(points) if uneven else 1.0)

    def clip(x: float) -> float:
        return min(max(x, low), high)

    return Prediction(
        seconds,
        factor * LOAD_MARGIN,
        clip(point),
        low,
        high,
        len(mine),
        clip(point / spread),
        clip(point * spread),
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


def rows_within(
    seconds: float,
    points: tuple[Measured, ...] = MEASURED,
    kind: str = "road",
    uneven: bool = False,
    rate: float | None = None,
    load: float | None = None,
) -> float:
    """The privacy rows R whose predicted solve of ``kind`` at ``load`` takes ``seconds`` (the time fit inverted)."""
    mine = tuple(p for p in points if p.kind == kind)
    coef, _ = time_fit(mine)
    idle = seconds / load_share(load)
    return math.exp((math.log(idle) - float(coef @ _row(mine, 1, uneven, rate))) / coef[1])
