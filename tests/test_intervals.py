"""The intervals of the published counts (issue 41, :mod:`mdp_core.release.intervals`): the discrete Laplace
tail against the pmf summed by brute force, the half-width's minimality, public inputs only, and coverage by
simulation with OpenDP's noise -- of the measurement's interval (exactly its stated probability) and of the
published ones (:func:`mdp_core.release.postprocess.release_counts`, 1,200 releases of a small table)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from mdp_core.errors import InputError
from mdp_core.release import intervals as iv
from mdp_core.release.noise import discrete_laplace
from mdp_core.release.postprocess import AGGREGATE_COLUMNS, release_counts

SCALES = (0.3, 1.0, 2.0, 2.5, 4.0, 7.3, 20.0)
LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99, 0.999)


def brute_tail(t: int, scale: float, cutoff: int = 20_000) -> float:
    """P(|X| > t): the unnormalised pmf exp(-|k| / s) summed over |k| <= cutoff, its tail over t < |k| <= cutoff."""
    k = np.arange(-cutoff, cutoff + 1)
    w = np.exp(-np.abs(k) / scale)
    return float(w[np.abs(k) > t].sum() / w.sum())


def sigmas(p: float, draws: int, z: float = 4.0) -> float:
    """z binomial standard deviations of a proportion p estimated from ``draws`` independent draws."""
    return z * math.sqrt(p * (1 - p) / draws)


# ----------------------------------------------------------------------------- the quantile
@pytest.mark.parametrize("scale", SCALES)
def test_tail_is_the_pmf_summed_by_brute_force(scale: float) -> None:
    for t in range(0, 60):
        want = brute_tail(t, scale)
        if want < 1e-280:
            break
        assert iv.tail(t, scale) == pytest.approx(want, rel=1e-9)
        assert math.exp(iv.log_tail(t, scale)) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("scale", SCALES)
def test_half_width_is_the_smallest_that_holds_the_level(scale: float) -> None:
    for level in LEVELS:
        for family in (1, 14, 1000):
            alpha = (1 - level) / family
            t = iv.half_width(level, scale, family)
            assert brute_tail(t, scale) <= alpha
            assert t == 0 or brute_tail(t - 1, scale) > alpha


def test_half_width_of_exact_counts_and_bad_arguments() -> None:
    assert iv.half_width(0.999, 0.0) == 0 and iv.tail(0, 0.0) == 0.0
    assert iv.half_width(0.95, 4.0) == 12  # 1 - tail: 0.9564 at 12, 0.9440 at 11
    for level in (0.0, 1.0, -0.1, float("nan"), float("inf")):
        with pytest.raises(InputError, match="level"):
            iv.half_width(level, 4.0)
    for scale in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="scale"):
            iv.half_width(0.95, scale)
    for family in (0, -3, True, 2.0):
        with pytest.raises(InputError, match="family"):
            iv.half_width(0.95, 4.0, family)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the interval
def test_the_interval_needs_only_public_inputs() -> None:
    """The measurement, the published counts, the noise scale, the public total, the level and the family:
    no true count, no secret, no seed."""
    params = inspect.signature(iv.count_intervals).parameters
    assert list(params) == ["noisy", "published", "scale", "total", "level", "family"]
    assert params["level"].default == 0.95 and params["family"].default == 1
    assert inspect.signature(release_counts).parameters["ci_level"].default == 0.95
    assert not any(bad in p for p in params for bad in ("true", "secret", "seed", "cell"))
    assert AGGREGATE_COLUMNS[-5:] == ["ci_level", "ci_low", "ci_high", "sim_low", "sim_high"]


def test_interval_bounds_hold_the_published_count_and_the_clipped_measurement_interval() -> None:
    rng = np.random.default_rng(4)
    n, scale = 50, 3.0
    y = rng.integers(-30, 80, 5_000)
    p = rng.integers(0, n + 1, y.size)
    t = iv.half_width(0.9, scale)
    low, high = iv.count_intervals(y, p, scale, n, 0.9)
    assert low.dtype == high.dtype == np.int64
    assert (0 <= low).all() and (low <= p).all() and (p <= high).all() and (high <= n).all()
    inside = np.maximum(y - t, 0) <= np.minimum(y + t, n)  # the clipped measurement interval is not empty
    assert (low[inside] <= np.maximum(y - t, 0)[inside]).all() and (high >= np.minimum(y + t, n)).all()
    s_low, s_high = iv.count_intervals(y, p, scale, n, 0.9, family=100)
    assert (s_low <= low).all() and (s_high >= high).all()
    exact_low, exact_high = iv.count_intervals(np.array([7, 0]), np.array([7, 0]), 0.0, 10)
    assert exact_low.tolist() == [7, 0] and exact_high.tolist() == [7, 0]


def test_interval_refuses_bad_inputs_without_echoing_counts() -> None:
    y, p = np.array([5, 123457]), np.array([5, 123456])
    cases = [
        (lambda: iv.count_intervals(y, p[:1], 1.0, 200_000), "shape"),
        (lambda: iv.count_intervals(y, p, 1.0, 100), r"\[0, total\]"),
        (lambda: iv.count_intervals(y.astype(float), p, 1.0, 200_000), "integers"),
        (lambda: iv.count_intervals(y, p, 1.0, 200_000, level=1.0), "level"),
        (lambda: iv.count_intervals(y, p, 1.0, 200_000, family=0), "family"),
    ]
    for call, match in cases:
        with pytest.raises(InputError, match=match) as err:
            call()
        assert "12345" not in str(err.value)


def test_a_released_tables_intervals_audit_clean_and_tampering_is_found() -> None:
    """:func:`mdp_core.release.intervals.interval_findings` (what an auditor checks from the file alone)."""
    cells = np.array([40, 55, 31, 70, 12, 48, 60, 25], dtype=np.int64)
    table, _ = release_counts(cells, np.array([0, 0, 1, 1, 2, 2, 3, 3]), 1.0, discrete_laplace)
    assert iv.interval_findings(table) == []
    for column, change, finding in [
        ("ci_level", lambda f: 0.9, "width is not"),
        ("ci_level", lambda f: np.where(f.level == "zone", 0.9, 0.95), "one value"),
        ("ci_level", lambda f: 1.0, "one value"),
        ("ci_high", lambda f: f.ci_high + 1, "width is not"),
        ("sim_high", lambda f: f.sim_high - 1, "width is not"),
        ("ci_low", lambda f: f["count"] + 1, "sim_low <= ci_low <= count"),
        ("sim_low", lambda f: np.where(f.level == "total", 0, f.sim_low), "total's intervals"),
    ]:
        bad = table.copy()
        bad[column] = change(bad)
        assert any(finding in x for x in iv.interval_findings(bad)), (column, finding)


# ----------------------------------------------------------------------------- coverage by simulation
def test_the_measurements_interval_covers_with_its_exact_probability() -> None:
    """60,000 counts measured by OpenDP: the clipped interval around the measurement holds the true count with
    probability exactly 1 - P(|X| > t), which lies in [level, level + P(|X| = t)); tested within 4 binomial
    sigmas. The published count is the clipped measurement: inside that interval whenever it is not empty
    (y >= -t), so the widening never acts on a covered count, and with counts >= 20 > t an empty one (y < -t)
    misses anyway: the coverage is exactly that of the measurement's interval. (Near 0 the clipping and the
    widening cover more: an empty clipped interval widens to [0, p], which holds a true 0.)"""
    level, eps, sens = 0.95, 1.0, 4
    true = np.tile(np.array([20, 21, 25, 31, 40, 60]), 10_000)
    n = 1_000  # any public upper bound of the counts
    meas = discrete_laplace(true, sens, eps)
    published = np.clip(meas.values, 0, n)
    low, high = iv.count_intervals(meas.values, published, meas.scale, n, level)
    coverage = float(((low <= true) & (true <= high)).mean())
    t = iv.half_width(level, meas.scale)
    exact = 1 - iv.tail(t, meas.scale)
    assert level <= exact < level + (iv.tail(t - 1, meas.scale) - iv.tail(t, meas.scale))
    assert abs(coverage - exact) <= sigmas(exact, true.size)


@pytest.mark.slow
def test_published_intervals_cover_the_true_counts_in_1200_releases() -> None:
    """1,200 releases (OpenDP noise, CBDP post-processing) of a 10-cell, 4-zone table of 31 people at
    eps_counts 1 (scale 4). Per count: the published interval's coverage >= level - 4 sigma (1,200 draws); the
    intervals around the measurements cover with their exact probability 1 - P(|X| > t) (0.956; pooled over
    the 14 noisy counts, independent noise: within 4 sigma); the published ones contain them, so cover at
    least as often, and on average at most level + (1 - level) / 2 (0.975: the widening to the published
    count helps mostly empty cells). Simultaneously: all 14 counts inside their sim interval in >= level - 4
    sigma of the releases, and the measurement's Bonferroni intervals jointly with their exact probability."""
    level, releases = 0.95, 1_200
    cells = np.array([3, 0, 5, 1, 0, 2, 7, 0, 12, 1], dtype=np.int64)
    zones = np.array([0, 0, 1, 1, 1, 2, 2, 2, 3, 3])
    by_zone = np.bincount(zones, weights=cells).astype(np.int64)
    table_truth = np.concatenate([[cells.sum()], by_zone, cells])  # the table's row order: total, zones, outputs
    meas_truth = np.concatenate([cells, by_zone])  # the measurement's order: outputs, zones
    n, m = int(cells.sum()), meas_truth.size
    published: list[np.ndarray] = []  # per release, per table row: the true count in [ci_low, ci_high]
    raw: list[np.ndarray] = []  # per release, per measured count: in the measurement's clipped interval
    joint: list[bool] = []  # per release: every count in [sim_low, sim_high]
    raw_joint: list[bool] = []  # per release: every count in the measurement's clipped Bonferroni interval
    for r in range(releases):
        table, meas = release_counts(cells, zones, 1.0, discrete_laplace, ci_level=level)
        assert (table["ci_level"] == level).all() and (r % 20 or iv.interval_findings(table) == [])
        published.append(((table.ci_low <= table_truth) & (table_truth <= table.ci_high)).to_numpy())
        joint.append(bool(((table.sim_low <= table_truth) & (table_truth <= table.sim_high)).all()))
        y = meas.values
        t, t_m = iv.half_width(level, meas.scale), iv.half_width(level, meas.scale, m)
        raw.append((np.maximum(y - t, 0) <= meas_truth) & (meas_truth <= np.minimum(y + t, n)))
        raw_joint.append(bool(((np.maximum(y - t_m, 0) <= meas_truth) & (meas_truth <= np.minimum(y + t_m, n))).all()))
    cover, scale = np.array(published)[:, 1:], 4.0  # the total (row 0) is exact
    assert np.array(published)[:, 0].all()
    assert (cover.mean(axis=0) >= level - sigmas(level, releases)).all()
    exact = 1 - iv.tail(iv.half_width(level, scale), scale)
    assert abs(np.mean(raw) - exact) <= sigmas(exact, releases * m)
    assert cover.mean() >= np.mean(raw) and cover.mean() <= level + (1 - level) / 2
    assert np.mean(joint) >= level - sigmas(level, releases)
    exact_joint = (1 - iv.tail(iv.half_width(level, scale, m), scale)) ** m  # independent noise
    assert exact_joint >= level and abs(np.mean(raw_joint) - exact_joint) <= sigmas(exact_joint, releases)
