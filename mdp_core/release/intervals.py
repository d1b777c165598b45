"""Exact intervals for the published DP counts (issue 41), from public quantities only.

**The noise.** A count c (an integer in [0, n], n the public total) is measured once as y = c + X, X discrete
Laplace (two-sided geometric) of scale s > 0, independent of the data (:func:`mdp_core.release.noise.
discrete_laplace`, OpenDP): P(X = k) = (1 - q) / (1 + q) q^|k|, q = exp(-1 / s). For an integer t >= 0,

    P(X > t) = (1 - q) / (1 + q) sum_{k > t} q^k = (1 - q) / (1 + q) q^(t+1) / (1 - q) = q^(t+1) / (1 + q),

so by symmetry the two-sided tail is P(|X| > t) = 2 q^(t+1) / (1 + q) = 2 exp(-(t + 1) / s) / (1 + exp(-1 / s))
(:func:`tail`; tests/test_intervals.py checks it against the pmf summed by brute force).
:func:`half_width` is the smallest integer t >= 0 with P(|X| > t) <= 1 - level (the Laplace quantile).

**The interval** (:func:`count_intervals`) of a count with noisy measurement y and published (post-processed)
count p in [0, n] is

    [min(L, p), max(U, p)],   L = max(y - t, 0),   U = min(y + t, n).

*Claim: it contains c with probability >= level, whatever the post-processing made of p.* Proof: on the event
E = {|X| <= t}, c = y - X lies in [y - t, y + t]; c lies in [0, n] always (it counts some of the n people), so
on E, c is in [L, U], a subset of the interval. Hence P(c in interval) >= P(E) = 1 - P(|X| > t) >= level. The
published p only widens [L, U] (so that the interval always contains the published count); the proof never
uses what p is. Coverage is not far above the level either: [L, U] holds c exactly on E, with probability
1 - P(|X| > t) < level + P(|X| = t) when t >= 1 (t is minimal), P(|X| = t) = 2 (1 - q) q^t / (1 + q); the widening adds
coverage only on the complement of E (probability <= 1 - level), when c lies between [L, U] and p.

*Simultaneous* (``family`` = m counts): t_m is :func:`half_width` at level 1 - (1 - level) / m (Bonferroni);
by the union bound P(some count is outside its interval) <= sum_j P(|X_j| > t_m) <= m (1 - level) / m, so all
m intervals hold their counts together with probability >= level. No independence is needed (with OpenDP's
independent noise, Sidak's level^(1/m) would be marginally narrower).

**Privacy.** The interval is a function of y, p, s, n, the level and m only; p is itself a function of the
measurements and n; s, n, the level and m are public. It is a post-processing of the eps_counts-DP measurement
(Dwork and Roth 2014, Prop. 2.1): publishing it costs no budget and reveals nothing beyond that measurement. It
does reveal y itself in most cells (y = low + t when neither the clipping nor the widening acted): that is the
measurement the ledger already charged, never the true count.

Floating point: :func:`half_width` compares log P(|X| > t) with log((1 - level) / m) - 1e-9, a margin far above
the rounding error of either side, so rounding can only make t larger (in a near tie, an interval one step
wider), never an interval that covers less than the level.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import numpy as np

from mdp_core.errors import InputError

_LOG_MARGIN = 1e-9  # in log space: far above the rounding error of log_tail, so t is never too small


def _check_scale(scale: float) -> float:
    s = float(scale)
    if not (math.isfinite(s) and s >= 0):
        raise InputError(f"the noise scale must be a finite number >= 0, got {scale}")
    return s


def check_level(level: float) -> float:
    """``level`` as a float strictly between 0 and 1 (InputError otherwise)."""
    lv = float(level)
    if not (math.isfinite(lv) and 0 < lv < 1):
        raise InputError(f"the interval level must be strictly between 0 and 1, got {level}")
    return lv


def log_tail(t: int, scale: float) -> float:
    """log P(|X| > t) for discrete Laplace X of ``scale`` s > 0: log 2 - (t + 1) / s - log(1 + exp(-1 / s))."""
    s = _check_scale(scale)
    if s == 0:
        return -math.inf
    return math.log(2.0) - (t + 1) / s - math.log1p(math.exp(-1.0 / s))


def tail(t: int, scale: float) -> float:
    """P(|X| > t) = 2 exp(-(t + 1) / s) / (1 + exp(-1 / s)) for discrete Laplace X of ``scale`` s (0: no noise)."""
    return math.exp(log_tail(t, scale))


def half_width(level: float, scale: float, family: int = 1) -> int:
    """The smallest integer t >= 0 with P(|X| > t) <= (1 - ``level``) / ``family`` for discrete Laplace X of
    ``scale`` (0 for scale 0: no noise), up to the module's conservative floating-point margin (t can only come
    out larger). ``family`` > 1: the Bonferroni half-width of ``family`` simultaneous intervals."""
    lv, s = check_level(level), _check_scale(scale)
    if isinstance(family, bool) or not isinstance(family, int) or family < 1:
        raise InputError(f"family must be a positive integer, got {family!r}")
    if s == 0:
        return 0
    bound = math.log1p(-lv) - math.log(family) - _LOG_MARGIN  # log of the allowed tail, made smaller
    # log_tail(t) <= bound  <=>  t + 1 >= s (log 2 - log1p(q) - bound); start just below and step up
    t = max(0, math.floor(s * (math.log(2.0) - math.log1p(math.exp(-1.0 / s)) - bound)) - 3)
    while log_tail(t, s) > bound:
        t += 1
    return t


def _int_vector(values: np.ndarray, name: str) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim != 1 or (v.size and v.dtype.kind not in "iu"):
        raise InputError(f"{name} must be a 1-D array of integers")
    return v.astype(np.int64)


def count_intervals(
    noisy: np.ndarray,
    published: np.ndarray,
    scale: float,
    total: int,
    level: float = 0.95,
    family: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [low, high] (two (m,) int64 arrays) for m counts, at ``level`` (module docstring: proof).

    Args (public quantities only, never a true count):
        noisy: (m,) the DP measurement y = c + X of the counts (discrete Laplace of ``scale``, independent).
        published: (m,) the released counts (any post-processing of the measurement, in [0, ``total``]).
        scale: the noise scale s (0: the counts are exact).
        total: n, the public total: every count lies in [0, n].
        level: the coverage, per count (``family`` 1) or of the ``family`` counts together (Bonferroni).
    Each count is in its interval with probability >= ``level`` (all ``family`` of them together when
    ``family`` > 1); low <= published <= high and 0 <= low <= high <= total always.
    """
    y, p = _int_vector(noisy, "noisy"), _int_vector(published, "published")
    if y.shape != p.shape:
        raise InputError(f"noisy and published counts differ in shape: {y.shape} and {p.shape}")
    n = int(total)
    if n < 0 or (p.size and (p.min() < 0 or p.max() > n)):
        raise InputError("published counts must lie in [0, total]")
    t = half_width(level, scale, family)
    low = np.minimum(np.maximum(y - t, 0), p)
    high = np.maximum(np.minimum(y + t, n), p)
    return low.astype(np.int64), high.astype(np.int64)


def interval_findings(table: Any) -> list[str]:
    """What an auditor can check of the published intervals from aggregates.parquet alone (``table``: its rows,
    a DataFrame with the count, noise_scale and interval columns and one ``total`` row): one ci_level in (0, 1);
    0 <= sim_low <= ci_low <= count <= ci_high <= sim_high <= n; the total's intervals [n, n]; and where neither
    the clipping nor the widening acted (0 < low < count < high < n, so low = y - t and high = y + t), the
    width 2 t of the stated level at the row's noise_scale (sim: the Bonferroni t over the noisy rows)."""
    levels = sorted({float(v) for v in table["ci_level"]})
    if len(levels) != 1 or not 0 < levels[0] < 1:
        return ["aggregates.parquet: ci_level is not one value strictly between 0 and 1"]
    total = table["level"] == "total"
    n = int(table.loc[total, "count"].iloc[0])
    cols = {c: table[c].to_numpy(dtype=np.int64) for c in ("sim_low", "ci_low", "count", "ci_high", "sim_high")}
    chain = [np.zeros_like(cols["count"]), *cols.values(), np.full_like(cols["count"], n)]
    findings = []
    if not all((a <= b).all() for a, b in pairwise(chain)):
        findings.append("aggregates.parquet: not 0 <= sim_low <= ci_low <= count <= ci_high <= sim_high <= total")
    if not all((table.loc[total, c] == n).all() for c in ("ci_low", "ci_high", "sim_low", "sim_high")):
        findings.append("aggregates.parquet: the total's intervals are not [total, total]")
    family = int((~total).sum())
    for low, high, fam in (("ci_low", "ci_high", 1), ("sim_low", "sim_high", family)):
        c, lo, hi = cols["count"], cols[low], cols[high]
        free = (~total).to_numpy() & (0 < lo) & (lo < c) & (c < hi) & (hi < n)
        scales = table["noise_scale"].to_numpy(dtype=np.float64)[free]
        want = np.array([2 * half_width(levels[0], s, fam) for s in scales], dtype=np.int64)
        if not np.array_equal(hi[free] - lo[free], want):
            findings.append(f"aggregates.parquet: a {low[:-4]} interval's width is not that of ci_level and its noise")
    return findings


__all__ = ["check_level", "count_intervals", "half_width", "interval_findings", "log_tail", "tail"]
