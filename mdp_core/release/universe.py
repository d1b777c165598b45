"""Is the public universe built from the people? A statistical test, not an equality (issue 49).

A universe of records read from a user's file (``Kind.universe_files``: points, road nodes, grid road nodes)
may have been made of the secret table itself: the people's own locations jittered by a metre or ten,
rounded to 4 decimals, a subset of them, or all of them padded with made-up rows. Published, its records
would place those people to within the jitter. An equality test (people exactly at a record) misses every
one of these; this one compares how close the people lie to the records with what a universe independent
of them would give.

**The statistic.** At a scale ``delta`` (:data:`DELTA_KM` = 15 m for lat/lon in haversine km; for a
Euclidean universe :data:`DELTA_SPACING` x the median record-to-record nearest distance, the data having
no unit of its own), two shares are observed:

* ``p``: the share of people with a record within ``delta``;
* ``r``: the share of records with a person within ``delta``.

A universe independent of the people puts a record near a person at the rate its local density sets, and
that rate is unchanged when the people are moved by a few ``delta``: the null shares ``p0``, ``r0`` are the
same shares for the people shifted by a public, seeded offset (:data:`SHIFTS` draws; each person moved
:data:`SHIFT_MIN`-:data:`SHIFT_MAX` x ``delta`` in a random direction), averaged. A universe built from the
people has its records within the jitter of their people, and the shift takes that away. The excess
``max(p - p0, r - r0)`` estimates the share of the people (or of the records) that have a record (a person)
unexplained by density: refused when it is at least :data:`MIN_EXCESS` and its count is at least
:data:`MIN_Z` binomial standard deviations above the null's (so a handful of people never decides it).

Both directions matter: a subset of the people as the universe has every record at a person (``r`` near 1)
but few people at a record; the people padded with made-up rows have every person at a record (``p`` near
1). Measured (``bench/universe_rule.py``; docs/privacy.md, "The rules of the door"): 0 false refusals on 100
simulated honest Rome tables (people 20-30 m from the streets: excess <= -0.02), on the README's Helsinki
table (0.17) and on 20 tables geocoded onto the street centre line (0.33-0.45, the smallest margin); every
attack refused (people moved 1 m or 10 m, rounded to 4 decimals, half of them, padded: excess >= 0.68).
Not caught: copies that are a minority on both sides, or moved farther than about delta. Pure (numpy, scipy); deterministic (the shifts are seeded by a constant, so ``check`` and the run
agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

EARTH_RADIUS_KM = 6371.0088
DELTA_KM = 0.015  # the scale for lat/lon universes: 15 m
DELTA_SPACING = 0.25  # Euclidean universes: delta = this x the median record-to-record nearest distance
SHIFTS = 8  # null draws
SHIFT_MIN, SHIFT_MAX = 3.0, 6.0  # each person moved this many delta in the null
MIN_EXCESS = 0.5  # refused: most of the people (or of the records) too close to be chance
MIN_Z = 5.0  # ... and at least this many standard deviations above the null
SEED = 20260149  # public: the null's shifts (a constant: the same verdict for check and run)


@dataclass(frozen=True)
class UniverseTest:
    """The test's figures (counts and shares only, never a location): ``delta`` in the instance's unit,
    the observed shares ``people_near``/``records_near`` and their nulls, the excess and its z score."""

    n_people: int
    n_records: int
    delta: float
    people_near: float
    people_null: float
    records_near: float
    records_null: float

    @property
    def excess(self) -> float:
        """max(p - p0, r - r0): the share of people or records closer than the records' density explains."""
        return max(self.people_near - self.people_null, self.records_near - self.records_null)

    @property
    def z(self) -> float:
        """The larger direction's excess count over its binomial standard deviation under the null."""
        zs = []
        for obs, null, n in (
            (self.people_near, self.people_null, self.n_people),
            (self.records_near, self.records_null, self.n_records),
        ):
            sd = math.sqrt(max(n * null * (1.0 - null), 1.0))
            zs.append((obs - null) * n / sd)
        return max(zs)

    @property
    def built_from_people(self) -> bool:
        """The verdict: refused when the excess is at least MIN_EXCESS and MIN_Z deviations."""
        return self.excess >= MIN_EXCESS and self.z >= MIN_Z

    def reason(self) -> str:
        """Why it was refused, in counts and shares only (no location, no id)."""
        return (
            f"the public universe is built from the people (rule 5, the universe test at delta = {self.delta:.3g}): "
            f"{self.people_near:.0%} of the {self.n_people} people have a record within delta and "
            f"{self.records_near:.0%} of the {self.n_records} records a person, where a universe independent of "
            f"them gives {self.people_null:.0%} and {self.records_null:.0%} (excess {self.excess:.0%} >= "
            f"{MIN_EXCESS:.0%}, z = {self.z:.1f}): its records would publish the people's locations; build the "
            "universe from public data (a road network, a grid, a public list of places)"
        )


def _sphere(latlon: np.ndarray) -> np.ndarray:
    """(n, 3) points on the sphere of radius EARTH_RADIUS_KM: chords equal arcs to 1e-9 at these scales."""
    lat, lon = np.deg2rad(latlon[:, 0]), np.deg2rad(latlon[:, 1])
    return EARTH_RADIUS_KM * np.column_stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)])


def _shift(points: np.ndarray, geo: bool, delta: float, rng: np.random.Generator) -> np.ndarray:
    """``points`` each moved SHIFT_MIN..SHIFT_MAX x ``delta`` (km for geo) in a random direction."""
    n, d = points.shape
    size = np.asarray(rng.uniform(SHIFT_MIN, SHIFT_MAX, n)) * delta
    if geo:
        angle = rng.uniform(0.0, 2 * math.pi, n)
        lat = points[:, 0] + np.rad2deg(size * np.sin(angle) / EARTH_RADIUS_KM)
        coslat = np.maximum(np.cos(np.deg2rad(points[:, 0])), 1e-6)
        lon = points[:, 1] + np.rad2deg(size * np.cos(angle) / (EARTH_RADIUS_KM * coslat))
        return np.column_stack([np.clip(lat, -90.0, 90.0), lon])
    u = rng.standard_normal((n, d))
    u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    return points + u * size[:, None]


def _shares(people: np.ndarray, records: np.ndarray, rtree: cKDTree, delta: float) -> tuple[float, float]:
    """(share of people with a record within delta, share of records with a person within delta); inputs in
    the test's Euclidean space (sphere points for geo)."""
    dp, _ = rtree.query(people, distance_upper_bound=delta)
    dr, _ = cKDTree(people).query(records, distance_upper_bound=delta)
    return float(np.mean(dp <= delta)), float(np.mean(dr <= delta))


def delta_for(records: np.ndarray, geo: bool) -> float:
    """The test's scale: DELTA_KM for lat/lon records, else DELTA_SPACING x the median record-to-record
    nearest distance (the records' own spacing; a Euclidean universe has no unit to fix it in)."""
    if geo:
        return DELTA_KM
    uniq = np.unique(records, axis=0)
    if uniq.shape[0] < 2:
        return 0.0
    d, _ = cKDTree(uniq).query(uniq, k=2)
    return float(DELTA_SPACING * np.median(d[:, 1]))


def universe_test(people: np.ndarray, records: np.ndarray, geo: bool) -> UniverseTest:
    """The test of ``records`` (N, d) against ``people`` (n, d) (lat, lon degrees when ``geo``, else
    coordinates in the instance's unit; rows with a non-finite value are ignored). Pure, deterministic."""
    people = np.asarray(people, dtype=np.float64)
    records = np.asarray(records, dtype=np.float64)
    people = people[np.all(np.isfinite(people), axis=1)]
    records = records[np.all(np.isfinite(records), axis=1)]
    delta = delta_for(records, geo)
    if people.shape[0] == 0 or records.shape[0] == 0 or delta <= 0:
        return UniverseTest(people.shape[0], records.shape[0], delta, 0.0, 0.0, 0.0, 0.0)
    space = _sphere if geo else (lambda x: x)
    recs = space(records)
    rtree = cKDTree(recs)
    p, r = _shares(space(people), recs, rtree, delta)
    rng = np.random.default_rng(SEED)
    nulls = np.array([_shares(space(_shift(people, geo, delta, rng)), recs, rtree, delta) for _ in range(SHIFTS)])
    p0, r0 = (float(x) for x in nulls.mean(axis=0))
    return UniverseTest(people.shape[0], records.shape[0], delta, p, p0, r, r0)


__all__ = ["DELTA_KM", "MIN_EXCESS", "MIN_Z", "UniverseTest", "delta_for", "universe_test"]
