"""The advisor of ``mdp-release check`` (issue 40, mdp_core.release.advisor): its fits, its measurements, and the
prediction and proposal ``check`` prints for a road release."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mdp_core.release import advisor
from mdp_core.release.advisor import Measured

REPO = Path(__file__).resolve().parents[1]
ROME = REPO.parent / "shared" / "data" / "rome_center"
OLD_ETA = {"road": 1.0, "grid": 2.0}  # runs recorded without eps, eta (eps 10): their eta (Helsinki: 0.5)


def _run(rows: int, seconds: float, release: float = 0.1, remap: float = 0.2) -> Measured:
    return Measured("x", 1, 1, rows, seconds, release, remap)


def test_the_time_fit_recovers_a_power_law_and_states_its_worst_miss() -> None:
    exact = tuple(_run(r, 3e-6 * r**1.5) for r in (10**5, 10**6, 10**7))
    coef, factor = advisor.time_fit(exact)
    assert coef[1] == pytest.approx(1.5) and math.exp(coef[0]) == pytest.approx(3e-6) and factor == pytest.approx(1.0)
    noisy = (*exact[:2], _run(10**7, 2 * 3e-6 * (10**7) ** 1.5))  # the largest run twice as slow
    p = advisor.predict(10**7, 0.3, points=noisy)
    assert p.seconds is not None and p.runs == 3 and p.seconds / p.factor <= 2 * 3e-6 * 1e7**1.5 <= p.seconds * p.factor
    assert p.factor == pytest.approx(advisor.time_fit(noisy)[1] * advisor.LOAD_MARGIN)
    assert advisor.rows_within(p.seconds, noisy) == pytest.approx(1e7)
    with pytest.raises(ValueError, match="two measured runs"):
        advisor.time_fit(exact[:1])
    one = advisor.predict(10**6, 0.3, points=exact[:1])  # nothing to fit: the range only
    assert one.seconds is None and one.error is None and one.error_high == pytest.approx(0.303)


def test_an_uneven_prior_has_its_own_time_factor() -> None:
    """Issue 50: the Helsinki example (a DP prior) took 8 s where the uniform release class predicted 1.3 s; with
    runs of both priors the fit has a factor for the uneven one, and each run falls in its own range."""
    runs = tuple(_run(r, 1e-6 * r) for r in (10**5, 10**6, 10**7)) + tuple(
        Measured("u", 1, 1, r, 6e-6 * r, 0.1, 0.2, prior="uneven") for r in (10**5, 10**6)
    )
    coef, factor = advisor.time_fit(runs)
    assert math.exp(coef[2]) == pytest.approx(6.0) and factor == pytest.approx(1.0)
    assert advisor.predict(10**7, 0.3, points=runs, uneven=True).seconds == pytest.approx(60.0)
    assert advisor.predict(10**7, 0.3, points=runs).seconds == pytest.approx(10.0)
    assert advisor.rows_within(60.0, runs, uneven=True) == pytest.approx(1e7)


def test_the_error_per_person_is_the_kind_s_fitted_ratio_inside_the_range_every_release_keeps() -> None:
    """The point: the kind's ratio of the release to planar Laplace remapped, both at the person, fitted in log R
    (and the prior, and eps x eta when the runs vary them), times this instance's planar Laplace at the person,
    within the fit's worst miss x ERROR_MARGIN; all inside the range: the floor from the person up to planar Laplace
    at the records (x 1 + gap) plus the move, whatever the fit says (issue 50: a fit missed the Helsinki example by
    2x)."""

    def run(rows: float, ratio: float, rate: float = 10.0) -> Measured:
        return Measured("g", 1, 1, int(rows), 1.0, 0.1, 0.2, "grid", "uniform", ratio * 0.3, 0.3, rate)

    line = tuple(run(r, 0.5 * (r / 1e5) ** 0.05) for r in (1e5, 1e6, 1e7))
    p = advisor.predict(10**8, 0.2, kind="grid", points=line, remap_people=0.25)
    point = 0.5 * 1e3**0.05 * 0.25
    assert (p.error, p.error_low, p.error_high) == pytest.approx((point, 0.0, 0.202))
    assert (p.error_min, p.error_max) == pytest.approx((point / advisor.ERROR_MARGIN, point * advisor.ERROR_MARGIN))
    q = advisor.predict(10**8, 0.2, snap=0.12, floor=0.1, kind="grid", points=line, remap_people=0.4)
    assert (q.error, q.error_low, q.error_high) == pytest.approx((point / 0.25 * 0.4, 0.1, 0.322))
    high = advisor.predict(10**8, 0.2, snap=0.12, floor=0.1, kind="grid", points=line, remap_people=0.5)
    assert high.error == high.error_max == pytest.approx(0.322)  # clipped to what every release keeps
    # a lower rate (eps x eta) loses more to planar Laplace: the fit takes it when the runs vary it
    rated = line + tuple(run(r, 0.5 * (r / 1e5) ** 0.05 * 2**-0.1, 20.0) for r in (1e5, 1e6))
    at = {
        rate: advisor.predict(10**6, 9.0, kind="grid", points=rated, remap_people=1.0, rate=rate) for rate in (10, 20)
    }
    assert at[10.0].error == pytest.approx(0.5 * 10**0.05) and at[20.0].error == pytest.approx(0.5 * 10**0.05 / 2**0.1)
    # the Helsinki example: 0.141 km from the records, 0.157 per person, planar Laplace 0.184 remapped
    helsinki = advisor.predict(200_000, 0.184, snap=0.05, floor=0.06)
    assert helsinki.error_low <= 0.157 <= helsinki.error_high
    other = advisor.predict(10**6, 0.2, snap=0.7, floor=0.8, kind="words")  # no runs of that kind: no time, no point
    assert other.seconds is None and other.error is None and other.error_low <= 0.881 <= other.error_high
    assert advisor.predict(10**6, 0.2, kind=None).seconds is None  # another loss: nothing measured
    assert "no mechanism on them can match it" in (advisor.laplace_better(other, 1.2, 0.5) or "")
    assert advisor.laplace_better(high, 0.4, 0.1) is None
    assert "predicted to do better" in (advisor.laplace_better(q, 0.2, 0.1) or "")


def test_a_lower_rate_has_its_own_time_term() -> None:
    """Issue 50: a city grid at eps 2 per km and eta 3 km (eps x eta 6) took 60 s where grids at eps x eta 20 of
    the same size took 10: with runs at several rates the time fit has a term in log(eps x eta)."""
    runs = tuple(
        Measured("r", 1, 1, r, 1e-6 * r * (rate / 20) ** -1.5, 0.1, 0.2, "grid", rate=rate)
        for r in (10**5, 10**6, 10**7)
        for rate in (6.0, 20.0)
    )
    coef, factor = advisor.time_fit(runs)
    assert coef[2] == pytest.approx(-1.5) and factor == pytest.approx(1.0)
    p = advisor.predict(10**6, 0.3, kind="grid", points=runs, rate=6.0)
    assert p.seconds == pytest.approx((6 / 20) ** -1.5)
    assert advisor.rows_within(p.seconds, runs, kind="grid", rate=6.0) == pytest.approx(1e6)


def test_the_measurements_are_the_bench_s_lines_and_fall_in_their_own_ranges() -> None:
    """MEASURED is bench/release_class.py's and bench/advisor_runs.py's output as recorded in bench/README.md (one
    JSON line each); every measured solve lies within the range its kind's fit states."""
    text = (REPO / "bench" / "README.md").read_text()
    lines = [json.loads(x) for x in text.splitlines() if x.startswith('{"instance": "romeR')]
    runs = [json.loads(x) for x in text.splitlines() if x.startswith('{"run": ')]
    assert len(lines) >= 3 and len(runs) >= 4 and len(lines) + len(runs) == len(advisor.MEASURED)
    for m, line in zip(advisor.MEASURED, lines, strict=False):
        assert (m.instance, m.n_records, m.n_outputs, m.privacy_rows) == (
            line["instance"],
            line["N"],
            line["K"],
            line["privacy_rows"],
        )
        assert (m.seconds, m.release, m.remap) == (line["seconds"], line["release"], line["planar_laplace_remap"])
        assert m.release < m.remap  # the release class beats planar Laplace remapped to its outputs
    for m, run in zip(advisor.MEASURED[len(lines) :], runs, strict=True):
        assert (m.instance, m.kind, m.n_records, m.n_outputs, m.privacy_rows, m.seconds) == (
            run["run"],
            run["kind"],
            run["N"],
            run["K"],
            run["privacy_rows"],
            run["seconds"],
        )
        assert m.prior == ("uniform" if run["prior"] == "uniform" else "uneven")
        assert (m.release, m.remap, m.release_people, m.remap_people) == (
            run["release_records"],
            run["remap_records"],
            run["release_people"],
            run["remap_people"],
        )
        eta = run["eta"] if "eta" in run else 0.5 if m.instance == "helsinki" else OLD_ETA[m.kind]
        assert m.load == run["load"] and m.rate == pytest.approx(run.get("eps", 10.0) * eta)
    assert advisor.kinds() == {"road", "grid", "points"}
    moves = {(r["run"], r["prior"] != "uniform"): (r["snap"], r["floor"]) for r in runs}
    for m in advisor.MEASURED:
        snap, floor = moves.get((m.instance, m.prior != "uniform"), (0.0, 0.0))
        p = advisor.predict(
            m.privacy_rows,
            m.remap,
            snap,
            floor,
            kind=m.kind,
            uneven=m.prior != "uniform",
            rate=m.rate,
            remap_people=m.remap_people,
            load=m.load,
        )
        assert p.seconds is not None and p.seconds / p.factor <= m.seconds <= p.seconds * p.factor, m.instance
        if m.release_people is not None:
            assert p.error_min is not None and p.error_max is not None
            assert p.error_min <= m.release_people <= p.error_max, m.instance


@pytest.mark.skipif(not ROME.is_dir(), reason=f"{ROME} is absent (real OSM data; see ../shared/data/README)")
def test_check_predicts_a_road_release_and_proposes_a_smaller_one_when_it_is_long(tmp_path: Path) -> None:
    from flows.check import TOO_LONG_SECONDS, render, run_check

    def config(n: int) -> Path:
        path = tmp_path / f"r{n}.toml"
        path.write_text(
            f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "road"\n[dataset.params]\n'
            f'nodes = "{ROME / "nodes.csv"}"\nedges = "{ROME / "edges.csv"}"\nn_records = {n}\nn_outputs = {n}\n'
            "[privacy]\nepsilon = 10.0\nprotection_radius = 1.0\n[release]\nsimulate = true\n"
        )
        return path

    small = run_check(config(150))
    a = small.sections["advice"]
    assert a["privacy_rows"] == 2 * small.sections["graph"]["n_edges"] * 150
    rate = small.sections["against_laplace"]["metric_epsilon"] * small.sections["graph"]["eta"]
    p = advisor.predict(
        a["privacy_rows"], small.sections["against_laplace"]["planar_laplace_remap_records"], rate=rate, load=a["load"]
    )
    assert a["seconds"] == pytest.approx(p.seconds) and "proposed_records" not in a
    assert a["error_low"] <= a["error"] <= a["error_high"]
    assert "predicted: the solve takes about" in render(small) and "a fit of the runs" in render(small)
    big = run_check(config(1200))
    b = big.sections["advice"]
    assert b["seconds"] > TOO_LONG_SECONDS and 150 < b["proposed_records"] < 1200
    assert f"proposed: n_records = {b['proposed_records']}" in render(big)


def test_check_says_it_has_no_prediction_for_a_kind_without_runs(tmp_path: Path) -> None:
    """Issue 50: synthetic Gaussian vectors (the synthetic kind) have no measured runs: no time and no point, said
    plainly; the range every release with the distance loss keeps is still stated."""
    from flows.check import render, run_check

    config = tmp_path / "vectors.toml"
    config.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "synthetic"\n[dataset.params]\nn_records = 60\n'
        "n_outputs = 20\ndim = 2\n[privacy]\nepsilon = 5.0\neta = 0.5\n[release]\nsimulate = true\n"
    )
    rep = run_check(config)
    adv, text = rep.sections["advice"], render(rep)
    assert adv["seconds"] is None and adv["error"] is None and adv["error_low"] <= adv["error_high"]
    assert "no prediction of the solve's time for dataset kind 'synthetic'" in text


def test_check_predicts_a_vector_table_s_time_and_error_per_person(tmp_path: Path) -> None:
    """Issue 50: a table of vectors (the points kind, Euclidean) has measured runs (bench/advisor_runs.py, vec*):
    check predicts its solve's time and its error per person with a range inside the one every release keeps."""
    import numpy as np
    import pandas as pd

    from flows.check import render, run_check

    pts = np.random.default_rng(8).uniform(0.0, 6.0, size=(60, 3))
    pd.DataFrame(pts, columns=["x0", "x1", "x2"]).to_csv(tmp_path / "universe.csv", index=False)
    config = tmp_path / "vectors.toml"
    config.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "points"\n[dataset.params]\n'
        f'path = "{tmp_path / "universe.csv"}"\n[privacy]\nepsilon = 1.5\neta = 3.0\n[release]\nsimulate = true\n'
    )
    rep = run_check(config)
    adv, text = rep.sections["advice"], render(rep)
    assert adv["kind"] == "points" and adv["seconds"] > 0 and adv["runs"] >= 4
    assert adv["error_low"] <= adv["error_min"] <= adv["error"] <= adv["error_max"] <= adv["error_high"]
    assert "predicted: the solve takes about" in text and "a fit of the runs" in text


def test_check_says_it_has_no_prediction_for_another_loss(tmp_path: Path) -> None:
    """The range (planar Laplace at the records plus the move) and the runs hold for the distance loss only: a grid
    with the travel loss (LR-Geo's cost) gets neither a time nor an error, said plainly."""
    from flows.check import render, run_check

    config = tmp_path / "travel.toml"
    config.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "grid"\n[dataset.params]\nrows = 6\ncols = 6\n'
        'n_outputs = 10\nloss = "travel"\n[privacy]\nepsilon = 10.0\neta = 2.0\n[release]\nsimulate = true\n'
    )
    rep = run_check(config)
    assert rep.sections["advice"] == {"kind": "grid", "loss": "travel"}
    assert "no prediction of the solve's time or the release's error for loss 'travel'" in render(rep)


def test_the_rate_term_is_not_extrapolated_and_the_load_is_this_machines() -> None:
    """Review: with runs at two rates the slope may carry what else differs between them (for road, the city), so a
    rate beyond the measured ones is predicted as the nearest measured one; the load now is shared by this
    machine's cores, not those of the machine the runs were measured on."""
    runs = tuple(
        Measured("r", 1, 1, r, 1e-6 * r * (rate / 20) ** -1.5, 0.1, 0.2, "grid", rate=rate)
        for r in (10**5, 10**6, 10**7)
        for rate in (6.0, 20.0)
    )
    at = {rate: advisor.predict(10**6, 0.3, kind="grid", points=runs, rate=rate).seconds for rate in (1.0, 6.0, 20, 80)}
    assert at[1.0] == pytest.approx(at[6.0]) and at[80] == pytest.approx(at[20])
    assert at[6.0] > at[20]
    idle = advisor.predict(10**6, 0.3, kind="grid", points=runs, rate=6.0).seconds
    assert advisor.predict(10**6, 0.3, kind="grid", points=runs, rate=6.0, load=8.0, cores=2).seconds == pytest.approx(
        4 * idle
    )
    assert advisor.predict(10**6, 0.3, kind="grid", points=runs, rate=6.0, load=8.0, cores=8).seconds == pytest.approx(
        idle
    )
