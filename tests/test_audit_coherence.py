"""The audit checks that a release's files agree with one another (issue 49, :mod:`mdp_core.release.audit_coherence`):
before, intervals set to [count, count], every interval shifted by one, microdata with everyone at output 0 and
solve.json's repair figures passed (re-signed). Each edit is made to a copy of ``tests/conftest.py``'s release and
re-hashed and re-signed, so only the coherence check can catch it.

The histogram test's false-alarm rate is bounded by construction (<= ALPHA_COUNTS + ALPHA_DRAW = 0.1 %); here it is
measured on 200 simulated honest releases drawn through the release's own code (perturb.perturb,
postprocess.release_counts with noise.discrete_laplace): none may alarm beyond what the bound allows
(P(3 or more alarms in 200 at rate 0.1 %) < 0.2 %), and "everyone at output 0" and a shift of every person's
output by one are caught in each of their simulated releases.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import edit, edit_table, findings, read

from mdp_core.release import perturb
from mdp_core.release.audit_coherence import (
    FALSE_ALARM,
    histogram_test,
    misplaced_rows,
)
from mdp_core.release.noise import discrete_laplace
from mdp_core.release.postprocess import release_counts

NOISY = ["ci_low", "ci_high", "sim_low", "sim_high"]


def only(run, prefix: str, *needles: str) -> list[str]:
    out = findings(run, *needles)
    assert out and all(f.startswith(prefix) for f in out), out
    return out


# ----------------------------------------------------------------------------- the intervals
def test_the_released_intervals_are_placed_around_a_measurement(released):
    import pandas as pd

    table = pd.read_parquet(released / "aggregates.parquet")
    assert not misplaced_rows(table).any()


def test_zero_width_intervals_are_a_finding(run):
    def exact(f):
        for c in NOISY:
            f[c] = f["count"]

    edit_table(run, "aggregates.parquet", exact)
    only(run, "aggregates.parquet", "intervals are not placed around any measurement")


def shifted(f) -> None:
    """Every noisy row's four interval ends + 1 (the total's [n, n] kept)."""
    noisy = f["level"] != "total"
    for c in NOISY:
        f.loc[noisy, c] = f.loc[noisy, c] + 1


def some_row_without_a_measurement(f) -> bool:
    """Brute force with the release's own count_intervals, independently of the audit: is there a noisy row
    for which no integer measurement y gives both its per-count and its simultaneous interval?"""
    from mdp_core.release.intervals import count_intervals

    noisy = f[f["level"] != "total"]
    n, level, family = int(f.loc[f["level"] == "total", "count"].iloc[0]), float(f["ci_level"].iloc[0]), len(noisy)
    ys = np.arange(-3 * n - 1000, 4 * n + 1000)
    for _, row in noisy.iterrows():
        p = np.full(ys.shape, int(row["count"]))
        lo, hi = count_intervals(ys, p, float(row["noise_scale"]), n, level)
        s_lo, s_hi = count_intervals(ys, p, float(row["noise_scale"]), n, level, family)
        fits = (lo == row["ci_low"]) & (hi == row["ci_high"]) & (s_lo == row["sim_low"]) & (s_hi == row["sim_high"])
        if not fits.any():
            return True
    return False


def test_intervals_shifted_by_one_are_a_finding_where_clipping_placed_them(run):
    """In the release: the shift is a finding when a row's interval was placed by the clipping or the widening
    (the release's draw decides whether one was: the brute-force oracle says); otherwise each shifted row is the
    interval of the measurement y + 1, which no check of the table can tell from the published one."""
    import pandas as pd

    edit_table(run, "aggregates.parquet", shifted)
    if some_row_without_a_measurement(pd.read_parquet(run / "aggregates.parquet")):
        only(run, "aggregates.parquet", "intervals are not placed around any measurement")
    else:
        assert findings(run) == []


def test_intervals_shifted_by_one_are_misplaced_in_a_table_with_small_counts():
    """The release's own count table (release_counts, discrete Laplace) of cells with six empty ones: their
    measurements are clipped at 0 unless the noise exceeds t (each with probability <= 2.5 %), so a shift by
    one is caught; the unshifted table is placed exactly."""
    cells = np.array([0, 0, 0, 40, 0, 0, 0, 90, 25, 5], dtype=np.int64)
    table, _ = release_counts(cells, np.arange(10) % 2, EPS_COUNTS, discrete_laplace)
    assert not misplaced_rows(table).any() and not some_row_without_a_measurement(table)
    shifted(table)
    assert misplaced_rows(table).any() and some_row_without_a_measurement(table)  # the audit and the oracle agree


# ----------------------------------------------------------------------------- solve.json's repair
@pytest.mark.parametrize(
    "change, needle",
    [
        ({"applied": False, "max_mix": 0.004, "components_mixed": 1}, "not applied, but it states a mix"),
        ({"applied": True, "max_mix": 0.5, "components_mixed": 1}, "exceeds the solve's max_mix"),
        ({"applied": True, "max_mix": 0.001, "components_mixed": 0}, "but 0 component(s) mixed"),
        ({"applied": True, "max_mix": 0.001, "components_mixed": 7}, "not a flag, a number, a count"),
    ],
)
def test_repair_figures_that_contradict_the_mechanism_are_a_finding(run, change, needle):
    edit(run, "solve.json", lambda s: s["repair"].update(change))
    only(run, "solve.json", needle)


# ----------------------------------------------------------------------------- the microdata's histogram
def test_everyone_at_output_0_in_the_release_is_a_finding(run):
    def everyone_at_0(f):
        assert f["output_id"].iloc[0] == 0 and len(f) == read(run, "release_provenance.json")["n_individuals"]
        for col in f.columns:  # every row the first one's: output 0 and its public coordinates
            f[col] = f[col].iloc[0]

    edit_table(run, "microdata.parquet", everyone_at_0)
    only(run, "microdata.parquet", "output histogram is at L1 distance")


K, ZONES, N_PEOPLE, EPS, EPS_COUNTS = 20, 4, 2000, 3.0, 1.0


def line_mechanism(eps: float = EPS, k: int = K) -> np.ndarray:
    """The exponential mechanism on k points 1 apart (eps-mDP in |i - j|): Z_ij proportional to exp(-eps |i - j| / 2)."""
    d = np.abs(np.subtract.outer(np.arange(k), np.arange(k)))
    z = np.exp(-eps * d / 2)
    return z / z.sum(axis=1, keepdims=True)


def honest_release(rng: np.random.Generator, z: np.ndarray) -> tuple[np.ndarray, object]:
    """People on records (a random skewed population: half on a random record, the rest anywhere), their
    outputs drawn by the release's perturb, the counts of their records' cells measured and post-processed
    by the release's own release_counts (records are outputs: each record is its own cell)."""
    k = z.shape[0]
    peak = rng.integers(k)
    records = np.where(rng.random(N_PEOPLE) < 0.5, peak, rng.integers(0, k, N_PEOPLE)).astype(np.int64)
    outputs = perturb.perturb(z, records, rng)
    cells = np.bincount(records, minlength=k).astype(np.int64)
    table, _ = release_counts(cells, np.arange(k) % ZONES, EPS_COUNTS, discrete_laplace)
    return outputs, table


def test_histogram_test_false_alarm_rate_on_200_honest_releases_and_its_power():
    z, cell, rng = line_mechanism(), np.arange(K), np.random.default_rng(49)
    honest, at_0, shifted = [], [], []
    for i in range(200):
        outputs, table = honest_release(rng, z)
        honest.append(histogram_test(z, cell, outputs, table, 0.95))
        if i < 10:  # the forgeries, on the first releases
            at_0.append(histogram_test(z, cell, np.zeros_like(outputs), table, 0.95))
            shifted.append(histogram_test(z, cell, (outputs + 1) % K, table, 0.95))
    alarms = sum(d > tau for d, tau in honest)  # type: ignore[misc]
    ratio = max(d / tau for d, tau in honest)  # type: ignore[misc]
    print(f"honest: {alarms} alarm(s) in 200 (bound {FALSE_ALARM:.1%}), largest D / tau {ratio:.2f}")
    assert FALSE_ALARM == 1e-3 and alarms <= 2
    assert all(d > tau for d, tau in at_0), at_0  # type: ignore[misc]
    assert all(d > tau for d, tau in shifted), shifted  # type: ignore[misc]
