"""The error a release gives people, snapping included (issue 50, mdp_core/release/people.py), against a direct
Monte Carlo over people drawn from the release's prior, written here without the module: people uniform over the
area's bounding box (a grid), or along the road network's streets read from its own CSV files, 20 m to a random
side of the straight line between the nodes an edge joins (a road release), each snapped to its nearest record
by a full distance matrix (no tree), those farther than max_distance dropped, then weighted so that each record's
cell carries its prior; the error of each person is
summed over the published mechanism's row from the person's own coordinates, and planar Laplace is drawn at the
person by Andres et al.'s own sampler (the inverse CDF of the radius through Lambert's W). Real releases: a road
release on real Rome streets (lat/lon, Voronoi cells within max_distance) and the grid release of conftest
(grid cells); each goes through every stage and the audit."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import publish_release, run_stages
from test_baseline import andres_noise

from mdp_core.problem.io import read_instance, read_mechanism, read_table
from mdp_core.problem.metrics import haversine_km
from mdp_core.release import audit, baseline, people
from mdp_core.runtime.files import read_json

ROME = Path(__file__).resolve().parents[2] / "shared" / "data" / "rome_center"
TOLERANCE = 0.03  # the report's figures within 3 % of the direct Monte Carlo


def _road_release(root: Path) -> Path:
    """A road release on real central-Rome streets: 120 nodes within 1.2 km of the centre, 30 outputs, eps 8 per km, eta 1 km, protection
    radius 1 km, people at most 0.4 km from their node, 300 simulated people."""
    from artifacts.store import Store
    from flows.config import parse_config

    cfg = parse_config(
        {
            "store": str(root),
            "dataset": {
                "kind": "road",
                "params": {
                    "nodes": str(ROME / "nodes.csv"),
                    "edges": str(ROME / "edges.csv"),
                    "center": [41.9025, 12.4965],
                    "radius_km": 1.2,
                    "n_records": 120,
                    "n_outputs": 30,
                    "seed": 5,
                },
            },
            "privacy": {"epsilon": 8.0, "eta": 1.0, "protection_radius": 1.0},
            "release": {"simulate": True, "n_individuals": 300, "max_distance": 0.4},
            "evaluate": {"eps_factors": [1.0], "baselines": []},
        }
    )
    refs = run_stages(root, cfg)
    return publish_release(Store(root), refs, cfg=cfg)


def _published(run: Path) -> tuple:
    """(instance, z (N, K), {method: evaluation row}, provenance) of a published release folder."""
    inst = read_instance(run / "instance")
    z = read_mechanism(run / "mechanism.parquet", inst.n_records, inst.n_outputs)
    table = read_table(run / "evaluation.parquet")
    rows = {m: table[table["method"] == m].iloc[0] for m in table["method"]}
    return inst, z, rows, read_json(run / "release_provenance.json")


def _prior_weights(nearest: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Weights of people uniform over the area so that each record's cell carries its prior: p_i / (people in i)."""
    count = np.bincount(nearest, minlength=prior.size)
    assert (count[prior > 0] > 0).all(), "a cell with prior mass got no person: sample more"
    return prior[nearest] / count[nearest]


def _direct(people_xy, records, outputs, z, dist) -> dict[str, np.ndarray]:
    """Per person of ``people_xy`` (M, 2) (uniform over the area's box; ``dist``(a, b) the metric's distance
    matrix): the nearest record, the snap to it, the release's expected error and the floor, from the person."""
    nearest, snap, release, floor = [], [], [], []
    for a in range(0, len(people_xy), 20_000):
        x = people_xy[a : a + 20_000]
        d_rec, d_out = dist(x, records), dist(x, outputs)
        j = d_rec.argmin(axis=1)
        nearest.append(j)
        snap.append(d_rec[np.arange(len(x)), j])
        release.append((z[j] * d_out).sum(axis=1))
        floor.append(d_out.min(axis=1))
    nearest, snap, release, floor = map(np.concatenate, (nearest, snap, release, floor))
    return {"nearest": nearest, "snap": snap, "release": release, "floor": floor}


def _check(inst, z, rows, limit: float, box_pts, dist, move, eps) -> dict[str, float]:
    """Compare the release's people's rows with the direct Monte Carlo (module docstring); the numbers."""
    rng = np.random.default_rng(7)
    rec, out = inst.record_points(), inst.output_points()
    got = _direct(box_pts, rec, out, z, dist)
    inside = got["snap"] <= limit
    w = _prior_weights(got["nearest"][inside], inst.prior)
    direct = {k: float(w @ got[k][inside]) for k in ("release", "snap", "floor")}
    # planar Laplace at the person: people drawn from the prior (by the weights), one Andres draw each
    drawn = rng.choice(np.flatnonzero(inside), size=60_000, p=w / w.sum())
    noisy = move(box_pts[drawn], andres_noise(eps, drawn.size, rng))
    remap = []
    for a in range(0, drawn.size, 20_000):
        k = dist(noisy[a : a + 20_000], out).argmin(axis=1)  # the nearest output to the noisy point
        remap.append(dist(box_pts[drawn[a : a + 20_000]], out)[np.arange(k.size), k])  # from the person
    direct["remap"] = float(np.concatenate(remap).mean())
    for key, method in (("release", people.RELEASE), ("snap", people.SNAP), ("floor", baseline.FLOOR)):
        assert rows[method]["dist_loss_mean"] == pytest.approx(direct[key], rel=TOLERANCE), key
    assert rows[baseline.REMAP]["dist_loss_mean"] == pytest.approx(direct["remap"], rel=TOLERANCE)
    assert rows[baseline.CONTINUOUS]["dist_loss_mean"] == 2 / eps
    return direct


def _along_streets(m: int) -> np.ndarray:
    """(m, 2) lat/lon people uniform along central Rome's streets (nodes.csv, edges.csv: each street once, the
    straight line between its nodes), 20 m to a random side of it."""
    nodes = pd.read_csv(ROME / "nodes.csv").set_index("osmid")
    edges = pd.read_csv(ROME / "edges.csv", usecols=["u", "v"])
    pairs = np.unique(np.sort(edges[["u", "v"]].to_numpy(), axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    a, b = nodes.loc[pairs[:, 0], ["y", "x"]].to_numpy(), nodes.loc[pairs[:, 1], ["y", "x"]].to_numpy()
    km = np.array([111.19492664455873, 111.19492664455873 * math.cos(math.radians(float(a[:, 0].mean())))])
    step = (b - a) * km  # (north, east) km
    length = np.linalg.norm(step, axis=1)
    rng = np.random.default_rng(11)
    s = rng.choice(length.size, size=m, p=length / length.sum())
    t = rng.uniform(size=(m, 1))
    side = rng.choice([-1.0, 1.0], size=(m, 1)) * people.STREET_OFFSET_KM
    normal = np.column_stack([step[s, 1], -step[s, 0]]) / length[s, None]  # (north, east) across the street
    return a[s] + t * (b[s] - a[s]) + side * normal / km


@pytest.mark.skipif(not ROME.is_dir(), reason=f"{ROME} is absent (real OSM data; see ../shared/data/README)")
def test_a_road_release_states_the_error_of_people_drawn_from_its_prior(tmp_path: Path) -> None:
    run = _road_release(tmp_path / "store")
    inst, z, rows, prov = _published(run)
    limit = float(prov["protection"]["max_distance"])
    g = prov["guarantee"]
    eps = g["epsilon_per_unit"] * g["stretch_within_radius"]

    def move(p: np.ndarray, noise: np.ndarray) -> np.ndarray:  # km east, north in the local plane
        ky, kx = 111.19492664455873, 111.19492664455873 * np.cos(np.radians(p[:, 0]))
        return np.column_stack([p[:, 0] + noise[:, 1] / ky, p[:, 1] + noise[:, 0] / kx])

    direct = _check(inst, z, rows, limit, _along_streets(400_000), haversine_km, move, eps)
    method = read_json(run / "solve.json")["method"]
    assert direct["snap"] > 0.05 and rows[people.RELEASE]["dist_loss_mean"] > rows[method]["dist_loss_mean"]
    page = (run / "report.md").read_text().split("# Appendix")[0]
    assert f"lies on average {rows[people.RELEASE]['dist_loss_mean']:.4g} km from where the person is" in page
    assert f"the move to the nearest record alone averages {rows[people.SNAP]['dist_loss_mean']:.4g} km" in page
    assert "people spread as the public prior" in page
    assert f"the streets nearer to it than to any other record, {people.STREET_OFFSET_KM * 1000:g} m to either" in page
    # the guarantee for people's coordinates: the records' factor at d + 2 x max_distance
    assert f"(d(p, p') + 2 x {limit:g})" in g["statement"]
    assert "Between two places a person could be, add twice the largest move to a record (0.4 km)" in page
    assert audit.audit_release(run) == []


def test_the_grid_release_states_the_error_of_people_in_its_grid_cells(released: Path) -> None:
    inst, z, rows, prov = _published(released)
    limit = float(prov["protection"]["max_distance"])
    g = prov["guarantee"]
    eps = g["epsilon_per_unit"] * g["stretch_within_radius"]
    half = 0.5 * float(read_json(released / "instance" / "instance.json")["provenance"]["parameters"]["cell_km"])
    rec = inst.record_points()  # km in the grid's plane
    rng = np.random.default_rng(13)
    box = rng.uniform(rec.min(axis=0) - half, rec.max(axis=0) + half, size=(300_000, 2))

    def dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))

    _check(inst, z, rows, limit, box, dist, lambda p, noise: p + noise, eps)
    from mdp_core.release.intervals import half_width

    agg = read_table(released / "aggregates.parquet")
    scale = float(agg.loc[agg["level"] == "output", "noise_scale"].iloc[0])
    page = (released / "report.md").read_text().split("# Appendix")[0]
    assert f"interval (ci_low, ci_high: about {half_width(0.95, scale)} people either side" in page
    # for whom: people spread as the prior, not this table's own people (not measured: bench/HISTORY.md)
    assert "people spread as the public prior" in page and "their own figure is not measured" in page
    # a person uniform in a square cell of side 2h is sqrt(2)/3 + ln(1 + sqrt(2))/3 times h from its centre
    assert rows[people.SNAP]["dist_loss_mean"] == pytest.approx(
        half * (math.sqrt(2) + math.log1p(math.sqrt(2))) / 3, rel=0.02
    )


def test_cells_are_uniform_in_the_voronoi_cells_within_max_distance() -> None:
    """The balls' mixture weighted by 1 / (records covering the point) is uniform in each cell, cut to the records'
    bounding box: each cell's mean snap against a brute force over uniform points of that box."""
    from mdp_core.problem.datasets.synthetic import synthetic

    inst = synthetic(n_records=80, n_outputs=10, dim=2, sigma=1.0, eta=0.5, epsilon=5.0)
    c = people.cells(inst, 0.3)
    mean, se2 = people.cell_means(c, people.release_values(inst, None, c)["snap"], inst.n_records)
    rec = inst.record_points()
    x = np.random.default_rng(3).uniform(rec.min(axis=0), rec.max(axis=0), size=(1_000_000, 2))
    d = np.sqrt(((x[:, None, :] - rec[None, :, :]) ** 2).sum(axis=2))
    j, dj = d.argmin(axis=1), d.min(axis=1)
    keep = dj <= 0.3
    brute = np.bincount(j[keep], dj[keep], minlength=80) / np.bincount(j[keep], minlength=80)
    assert float(inst.prior @ mean) == pytest.approx(float(inst.prior @ brute), rel=0.01)
    assert c.max_snap == 0.3 and c.empty == 0
    assert np.all(np.abs(mean - brute) <= 5 * np.sqrt(se2) + 0.003)


def test_without_snapping_people_are_their_records() -> None:
    """max_distance 0 (and text: people named by their word): the cell is the record, the error the records'."""
    from mdp_core.problem.datasets.synthetic import synthetic
    from mdp_core.solvers.mechanisms import exponential

    inst = synthetic(n_records=30, n_outputs=8, dim=2, eta=0.5, epsilon=5.0)
    z = exponential(inst)
    rows = {r["method"]: r for r in people.people_rows(inst, z, 5.0, people.cells(inst, 0.0))}
    from mdp_core.release.evaluate import evaluate_mechanism

    assert rows[people.RELEASE]["dist_loss_mean"] == pytest.approx(
        evaluate_mechanism(inst, z, "exp")["dist_loss_mean"], rel=1e-12
    )
    assert rows[people.SNAP]["dist_loss_mean"] == 0.0
    frame = pd.DataFrame(list(rows.values()))
    assert set(frame["method"]) == {people.RELEASE, people.SNAP, *baseline.METHODS}


def test_the_plain_words_use_the_rate_within_the_radius_for_records_and_add_the_snap_for_people() -> None:
    """Issue 50: the plain-words line read "change by at most a factor of 0.1 km apart: at most 15.6x" and used
    the rate beyond the radius; it now gives the factor at a few distances at the rate within the radius (records)
    and at d + 2 x max_distance (people), beyond the radius at the graph's stretch."""
    from mdp_core.release.report import _odds_sentence

    g = {"epsilon_per_unit": 10.0, "stretch_within_radius": 1.0, "stretch": 1.246, "protection_radius": 1.0}
    text = _odds_sentence(g | {"additive_epsilon": 1.0, "distance_unit": "km"}, 0.1)
    assert f"{math.exp(10 * 0.1 + 1):.3g}x at 0.1 km" in text and f"{math.exp(10 * 1.0 + 1):.3g}x at 1 km" in text
    assert f"{math.exp(10 * 0.3 + 1):.3g}x at 0.1 km" in text  # a person: 0.1 + 2 x 0.1 within the radius
    assert f"{math.exp(12.46 * 1.2 + 1):.3g}x at 1 km" in text  # 1.2 km: beyond the radius, eps x stretch
    assert "a factor of 0.1 km" not in text and "10 per km within the protection radius" in text


def test_run_prints_the_error_for_people(released: Path) -> None:
    """``mdp-release run``'s line (flows.run._print_people_error) reads the people's rows of evaluation.parquet."""
    from mdp_core.release.report import evaluation_markdown, people_error_line

    _, _, rows, _ = _published(released)
    method = read_json(released / "solve.json")["method"]
    line = people_error_line(evaluation_markdown(released / "evaluation.parquet"), method, "km")
    assert line is not None and line.startswith("expected error per person (people spread as the prior")
    assert f"{rows[people.RELEASE]['dist_loss_mean']:.4g} km" in line
    assert f"the snap to the record alone {rows[people.SNAP]['dist_loss_mean']:.4g}" in line
    assert people_error_line("| method |\n|---|\n| x |", method, "km") is None


def test_a_measured_people_error_is_stated_even_without_the_people_s_rows() -> None:
    """A charged eps_error buys a figure: the report's bullet and ``mdp-release run``'s line state it even when
    the evaluation has no people's rows (no coordinates to compare against planar Laplace); claims without the
    people_error key (a report made before issue 50) render as before."""
    from mdp_core.release.report import _people_error_sentence, people_error_line

    measured = {"epsilon": 0.5, "estimate": 0.321, "noise_scale": 0.012, "people_at": "records"}
    line = people_error_line("| method |\n|---|\n| x |", "x", "km", measured)
    assert line is not None and "DP-estimated at eps_error 0.5: 0.321 km +- 0.012" in line
    assert people_error_line("| method |\n|---|\n| x |", "x", "km") is None
    c = {"distance_unit": "km", "dist_loss_mean": 0.25, "count_noise_scale": 2.0, "n_individuals": 40}
    old = _people_error_sentence(c)
    assert "DP-estimated" not in old and old == _people_error_sentence(c | {"people_error": None})
    text = _people_error_sentence(c | {"people_error": measured})
    assert "own 40 people, DP-estimated at eps_error 0.5 (charged, in the guarantee): 0.321 km, +- 0.012" in text
    assert text.startswith(old.split(" Each published count")[0])


@pytest.mark.skipif(not ROME.is_dir(), reason=f"{ROME} is absent (real OSM data; see ../shared/data/README)")
def test_a_road_s_people_live_along_its_streets_read_again_as_they_were(tmp_path: Path) -> None:
    """The street model reads the network the instance's provenance names and hashes: every person lies within
    max_distance of their record and STREET_OFFSET_KM of a street; a network file changed since is refused
    (InputError: the evaluate stage then writes no people's rows), never silently replaced."""
    import shutil

    from mdp_core.errors import InputError
    from mdp_core.problem.datasets.road import road

    for name in ("nodes.csv", "edges.csv"):
        shutil.copy(ROME / name, tmp_path / name)
    inst = road(
        nodes=str(tmp_path / "nodes.csv"),
        edges=str(tmp_path / "edges.csv"),
        center=[41.9025, 12.4965],
        radius_km=0.8,
        n_records=40,
        n_outputs=10,
        eta=1.0,
        loss="distance",
    )
    assert people.along_streets(inst)
    c = people.cells(inst, 0.4)
    snap = people.release_values(inst, None, c)["snap"]
    assert c.record.size > 40 * 20 and c.empty == 0 and float(snap.max()) <= 0.4 + 1e-9
    streets = people.road_streets(inst)
    lat0 = math.radians(float(inst.record_points()[:, 0].mean()))
    km = np.array([111.19492664455873, 111.19492664455873 * math.cos(lat0)])
    a, b = streets[:, :2] * km, streets[:, 2:] * km
    x = (people._latlon(c.space[:2000]) * km)[:, None, :]
    t = np.clip(((x - a) * (b - a)).sum(axis=2) / ((b - a) ** 2).sum(axis=1).clip(1e-12), 0.0, 1.0)
    nearest = np.linalg.norm(x - (a + t[..., None] * (b - a)), axis=2).min(axis=1)
    # 20 m from their own street (nearer another one only at a corner)
    assert float(nearest.max()) <= people.STREET_OFFSET_KM + 1e-3
    assert float(np.median(nearest)) == pytest.approx(people.STREET_OFFSET_KM, abs=1e-3)
    with open(tmp_path / "edges.csv", "a", encoding="utf-8") as f:
        f.write("\n")
    with pytest.raises(InputError, match="absent or changed"):
        people.cells(inst, 0.4)


def _clustered_table(inst, limit: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A simulated secret table not spread as the prior: n people from 3 tight Gaussian clusters over the records'
    box, each snapped to its nearest record by a full distance matrix, those farther than ``limit`` dropped;
    (people (m, 2), their record (m,))."""
    rng = np.random.default_rng(seed)
    rec = inst.record_points()
    centres = rng.uniform(rec.min(axis=0), rec.max(axis=0), size=(3, 2))
    pts = centres[rng.integers(0, 3, size=n)] + rng.normal(scale=0.3, size=(n, 2))
    d = np.sqrt(((pts[:, None, :] - rec[None, :, :]) ** 2).sum(axis=2))
    keep = d.min(axis=1) <= limit
    return pts[keep], d.argmin(axis=1)[keep]


def _exact(true: np.ndarray, sensitivity: int, epsilon: float):
    """A measure without noise (the sum itself) that keeps the stated sensitivity: the estimator's arithmetic."""
    from mdp_core.release.noise import Measurement

    return Measurement(np.asarray(true, dtype=np.int64), sensitivity / epsilon, sensitivity, epsilon)


def test_the_dp_mean_error_of_a_table_s_own_people_against_a_direct_computation() -> None:
    """The table's own people (clustered, not spread as the prior): every person's error lies in the public
    range (triangle inequality from the published mechanism); without noise the estimate is their direct mean
    within half a step (relative to the bounds: (hi - lo) / 2^20); with OpenDP's discrete Laplace it is within 10 of
    its stated scales (fails with probability e^-10); one person replaced by any value -- outside [lo, hi] too,
    clipped -- changes the noised sum by at most the stated sensitivity."""
    from mdp_core.errors import InputError
    from mdp_core.problem.datasets.synthetic import synthetic
    from mdp_core.release.noise import discrete_laplace
    from mdp_core.solvers.mechanisms import exponential

    inst = synthetic(n_records=60, n_outputs=12, dim=2, sigma=1.0, eta=0.5, epsilon=4.0)
    z, limit = exponential(inst), 0.4
    pts, j = _clustered_table(inst, limit, 3000, seed=50)
    out = inst.output_points()
    d_out = np.sqrt(((pts[:, None, :] - out[None, :, :]) ** 2).sum(axis=2))
    errors = (z[j] * d_out).sum(axis=1)  # each person's expected error from where they are
    lo, hi = people.error_range(inst, z, limit)
    assert 0 <= lo <= errors.min() and errors.max() <= hi
    step = people.error_step(lo, hi)
    width = math.ceil((hi - lo) / step)
    assert width == people.ERROR_STEPS and step == (hi - lo) / 2**20
    est, scale = people.dp_mean_error(errors, lo, hi, 0.5, _exact)
    assert abs(est - errors.mean()) <= step / 2
    assert scale == pytest.approx(step * width / (0.5 * errors.size))
    est, scale = people.dp_mean_error(errors, lo, hi, 0.5, discrete_laplace)
    assert abs(est - errors.mean()) <= 10 * scale + step / 2
    sums = []
    for moved in (0.0, lo, hi, 10 * hi + 3.0):  # the first person replaced: below, at either end of, above the range
        other = errors.copy()
        other[0] = moved
        sums.append(people.dp_mean_error(other, lo, hi, 0.5, _exact)[0] * errors.size / step)
    assert max(sums) - min(sums) <= width + 1e-6 and max(sums) - min(sums) >= width - 1e-6  # clipped: exactly W
    with pytest.raises(InputError):
        people.dp_mean_error(errors, hi, lo, 0.5, _exact)
    with pytest.raises(InputError):
        people.dp_mean_error(np.array([]), lo, hi, 0.5, _exact)


def test_the_error_s_bounds_come_before_the_charge_and_its_measure_is_required() -> None:
    """Issue 50's review: with an "error" spend, plan_release computes the public bounds (before the measuring
    stage charges anything): people by lat/lon on an instance without lat/lon are refused there; make_release
    refuses a plan that charges the error without its measure (no fresh, unkept noise)."""
    from mdp_core.errors import InputError
    from mdp_core.problem.datasets.synthetic import synthetic
    from mdp_core.release import make
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy
    from mdp_core.release.noise import discrete_laplace
    from mdp_core.solvers.mechanisms import exponential

    inst = synthetic(n_records=30, n_outputs=8, dim=2, sigma=1.0, eta=3.0, epsilon=1.0)
    z = exponential(inst)
    graph, _ = GraphFacts.recomputed(inst, inst.eta)
    settings = Settings(epsilon=inst.epsilon, eta=inst.eta, max_distance=0.4, eps_error=0.5, max_stretch=100.0)
    privacy = plan_privacy(settings, graph)
    with pytest.raises(InputError, match="lat/lon"):
        make.plan_release(inst, z, privacy, geo=True)
    plan = make.plan_release(inst, z, privacy)
    assert plan.eps_error == 0.5 and plan.error_bounds == people.error_range(inst, z, 0.4)
    records, zone = np.arange(inst.n_records), np.zeros(inst.n_outputs, dtype=np.int64)
    with pytest.raises(InputError, match="give its measure"):
        make.make_release(inst, z, records, zone, plan, np.random.default_rng(0), discrete_laplace)
    rel = make.make_release(
        inst, z, records, zone, plan, np.random.default_rng(0), discrete_laplace, make.ErrorMeasure(None, _exact)
    )
    m = rel.people_error
    assert m is not None and (m["people_at"], m["lo"], m["hi"]) == ("records", *plan.error_bounds)


def _clustered_people(path: Path, n: int = 400, seed: int = 50) -> pd.DataFrame:
    """A secret table on conftest's 5 x 6 grid NOT spread as any prior: n people in two tight clusters, each a
    few hundred metres to one side of a record (the cells' far corners stay empty); written to ``path`` (CSV)."""
    from conftest import PEOPLE_GRID

    from mdp_core.problem.datasets.grid import grid

    params = PEOPLE_GRID["dataset"]["params"]
    inst = grid(params["rows"], params["cols"], n_outputs=None, seed=params["seed"])
    rng = np.random.default_rng(seed)
    rec = inst.records[["lat", "lon"]].to_numpy()
    home = rng.choice([3, 17], size=n, p=[0.7, 0.3])
    pts = rec[home] + np.array([0.003, 0.004]) + rng.normal(0, 0.0008, size=(n, 2))  # ~0.45 km north-east
    df = pd.DataFrame({"lat": pts[:, 0], "lon": pts[:, 1]})
    df.to_csv(path, index=False)
    return df


def test_a_dp_prior_release_measures_its_own_people_s_error_charged_and_stated(tmp_path: Path, capsys) -> None:
    """Issue 50, "a DP estimate of it, charged like any measurement": a real release with prior = "dp" of a
    clustered table (people far from where the prior would put them in their cells) publishes the DP mean of its
    people's own error (eps_error auto: 1 for 400 people), within 10 of its stated noise scales of a direct
    computation from the true coordinates (haversine, written here) and the published mechanism; the charge is in
    the private ledger, the guarantee's additive epsilon, its statement and the report; the audit is clean, and finds
    the block edited."""
    from conftest import edit, people_config, publish_release, run_stages

    from artifacts.private import PrivateStore
    from artifacts.store import Store

    df = _clustered_people(tmp_path / "people.csv")
    root = tmp_path / "store"
    cfg = people_config(root, tmp_path / "people.csv", prior="dp", eps_prior=0.25)
    refs = run_stages(root, cfg)
    run = publish_release(Store(root), refs, cfg=cfg)
    assert audit.audit_release(run) == []
    inst, z, _, prov = _published(run)
    m = prov["people_error"]
    assert prov["eps_error"] == m["epsilon"] == people.auto_error_epsilon(len(df)) == 1.0
    rec = inst.records[["lat", "lon"]].to_numpy()  # people by lat/lon: great-circle km, as they were mapped
    out = rec[inst.outputs["record_id"].to_numpy()]
    lat, lon = np.radians(df["lat"].to_numpy())[:, None], np.radians(df["lon"].to_numpy())[:, None]

    def km(points: np.ndarray) -> np.ndarray:  # great-circle km from each person to each of ``points`` (m, 2)
        la, lo = np.radians(points[None, :, 0]), np.radians(points[None, :, 1])
        h = np.sin((la - lat) / 2) ** 2 + np.cos(lat) * np.cos(la) * np.sin((lo - lon) / 2) ** 2
        return 2 * 6371.0088 * np.arcsin(np.sqrt(h))

    own = (z[km(rec).argmin(axis=1)] * km(out)).sum(axis=1)
    assert m["lo"] <= own.min() and own.max() <= m["hi"]
    assert m["noise_scale"] == pytest.approx(m["step"] * math.ceil((m["hi"] - m["lo"]) / m["step"]) / len(df))
    assert abs(m["estimate"] - own.mean()) <= 10 * m["noise_scale"] + m["step"]
    g = prov["guarantee"]
    assert g["additive_epsilon"] == pytest.approx(1.0 + 0.25 + 1.0) and "counts, prior and mean error" in g["statement"]
    charged = {e["detail"]["kind"]: e for e in PrivateStore(root).entries(prov["population"]) if e["kind"] == "charge"}
    assert set(charged) == {"perturb", "counts", "prior", "error"}
    page = (run / "report.md").read_text()
    assert f"For this table's own {len(df)} people, DP-estimated at eps_error 1" in page
    # the measured figure once, in the opening; then the prior-spread figure, in lower case after the colon
    assert page.count("DP-estimated at eps_error") == 1 and "For people spread as the prior: a released" in page
    assert "their own figure is not measured" not in page
    from mdp_core.release.report import evaluation_markdown, people_error_line

    method, evaluation = read_json(run / "solve.json")["method"], evaluation_markdown(run / "evaluation.parquet")
    line = people_error_line(evaluation, method, "km", m)
    assert line is not None and line.startswith("expected error for this table's people, DP-estimated at eps_error 1:")
    assert f"{m['estimate']:.4g} km +- {m['noise_scale']:.2g}" in line
    assert "+ eps_error 1 for the people's mean error" in page
    assert m["people_at"] == "lat_lon" and "measured in great-circle km from each person's lat/lon" in page
    # the audit recomputes the bounds from the published instance, mechanism and max_distance (great-circle: from
    # people_at), and holds the block to its charge: each edit below is a finding
    for change, finding in (
        ({"noise_scale": m["noise_scale"] / 10}, "people_error: noise_scale"),
        ({"lo": m["lo"] + 0.01 * (m["hi"] - m["lo"])}, "people_error: lo"),
        ({"hi": m["hi"] * 1.1}, "people_error: hi"),
        ({"step": m["step"] * 2}, "people_error: step"),
        ({"unit": "m"}, "people_error: unit"),
        ({"people_at": "nowhere"}, "people_error: people_at"),
        ({"epsilon": 0.5}, "people_error: epsilon 0.5"),
    ):
        edit(run, "release_provenance.json", lambda p, c=change: p.update(people_error=m | c))
        found = audit.audit_release(run)
        assert any(finding in f for f in found), [f[:300] for f in found]
    edit(run, "release_provenance.json", lambda p: p.update(people_error=m))
    edit(run, "manifest.json", lambda mf: mf["config"]["release"].update(eps_error=0.5))  # auto gave 1
    assert any("config release.eps_error" in f for f in audit.audit_release(run))
    # a re-run recomputing the measurement (its stored object gone, as --refresh recomputes) keeps the estimate
    # (the kept measurement of the same charge key) and charges nothing new
    shutil.rmtree(Store(root).object_dir("measure", refs["measure"].key))
    again = read_json(Store(root).path(run_stages(root, cfg)["measure"], "release_provenance.json"))
    assert again["people_error"] == m
    entries = [e for e in PrivateStore(root).entries(prov["population"]) if e["kind"] == "charge"]
    assert sorted(e["detail"]["kind"] for e in entries) == sorted(charged)
    # the ledger and the officer's summary name the charge "mean error", not a bare "error"
    from flows.approval import summary_markdown
    from flows.ledger_cli import _entries
    from flows.plan import plan_run
    from mdp_core.release.door import GraphFacts, plan_privacy

    assert _entries(root, prov["population"], False) == 0
    out = capsys.readouterr().out
    assert " mean error " in out and "+ mean error 1 =" in out and "+ error" not in out
    settings = plan_run(cfg).privacy.settings(2.0, 1.5, len(df))
    md = summary_markdown("x", plan_privacy(settings, GraphFacts(30, (30,), 1.0, "km")), None, "0" * 64, "")
    assert "mean error 1" in md and ", error " not in md


def test_a_public_prior_charges_nothing_for_the_people_s_error_and_a_bad_eps_error_is_refused(
    released: Path, tmp_path: Path
) -> None:
    """Without a DP prior the error is not measured unless asked (the conftest release: no eps_error in its
    provenance, the additive epsilon the counts' alone); eps_error set overrides auto, 0 turns it off; a bad value
    is refused when the config is read, before the door or any charge."""
    from conftest import people_config

    from flows.plan import plan_run
    from mdp_core.errors import InputError

    prov = read_json(released / "release_provenance.json")
    assert "eps_error" not in prov and "people_error" not in prov
    assert prov["guarantee"]["additive_epsilon"] == prov["eps_counts"]
    table = tmp_path / "people.csv"
    _clustered_people(table, n=20)
    root = tmp_path / "store"
    terms = lambda **r: plan_run(people_config(root, table, **r)).privacy  # noqa: E731
    assert terms().error_epsilon(20) is None and terms(eps_error=0.3).error_epsilon(20) == 0.3
    assert terms(prior="dp", eps_error=0).error_epsilon(20) is None
    # eps_error = 0 with a public prior is unset (not measured either way): the same config hash and release key
    from flows.config import config_hash
    from flows.plan import release_key

    unset, zero = people_config(root, table), people_config(root, table, eps_error=0)
    assert (config_hash(zero), release_key(zero)) == (config_hash(unset), release_key(unset))
    dp_zero, dp_auto = people_config(root, table, prior="dp", eps_error=0), people_config(root, table, prior="dp")
    assert release_key(dp_zero) != release_key(dp_auto)  # with a DP prior, 0 turns off what unset turns on
    assert terms(prior="dp", eps_error="auto").error_epsilon(20000) == 0.1 == people.auto_error_epsilon(20000)
    # auto: coarse fixed levels from public n alone, so a table's size rarely moves the charge
    sizes = (1, 1199, 1200, 2399, 2400, 5999, 6000, 10**6)
    assert [people.auto_error_epsilon(n) for n in sizes] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.1, 0.1]
    assert terms(prior="dp").error_epsilon(None) == people.ERROR_EPS_CAP
    for bad in (-0.1, float("nan"), "lots"):
        with pytest.raises(InputError, match="eps_error"):
            people_config(root, table, prior="dp", eps_error=bad)
    assert not (root / "private").exists()


def _as_main_rendered(run: Path) -> str:
    """report.md of ``run`` as the code before issue 50 rendered it: claims without ``people_error`` and no sentence
    about the table's own people (checked against main's renderer when this was written); written and rehashed."""
    import json
    import re

    from conftest import edit_report

    def old(text: str) -> str:
        claims = json.loads(re.search(r"<!-- mdp-release-claims (\{.*\}) -->", text).group(1))
        assert claims.pop("people_error") is None
        text = re.sub(
            r"<!-- mdp-release-claims \{.*\} -->",
            f"<!-- mdp-release-claims {json.dumps(claims, sort_keys=True)} -->",
            text,
        )
        sentence = re.search(r" This table's own people may stand nearer[^.]*\.", text)
        assert sentence is not None
        return text.replace(sentence.group(0), "")

    edit_report(run, old)
    return (run / "report.md").read_text()


def test_a_report_made_before_issue_50_re_renders_unchanged_and_audits_clean(run: Path) -> None:
    """Issue 50's review: the audit re-renders report.md from its claims; a report made before issue 50 (claims
    without ``people_error``, no sentence about the table's own people) renders as it was and audits clean; the
    new wording needs the key (a report made now always carries it, null when not measured)."""
    from conftest import claims_of

    from mdp_core.release.report import render_report

    assert (
        claims_of(run)["people_error"] is None and "their own figure is not measured" in (run / "report.md").read_text()
    )
    text = _as_main_rendered(run)
    assert "This table's own people" not in text
    assert audit.audit_release(run) == []
    figures = frozenset(p.name for p in run.glob("*.png"))
    evaluation = __import__("mdp_core.release.report", fromlist=["x"]).evaluation_markdown(run / "evaluation.parquet")
    assert render_report(claims_of(run), evaluation, figures) == text


def test_a_dp_prior_release_made_before_issue_50_audits_clean(tmp_path: Path) -> None:
    """A prior = "dp" release made before eps_error existed: no eps_error in its config or provenance (made here
    with eps_error = 0, then its config written as it was then): the audit accepts it (nothing measured, charged or
    claimed for the mean error)."""
    from conftest import edit, people_config

    from artifacts.store import Store

    _clustered_people(tmp_path / "people.csv", n=120)
    root = tmp_path / "store"
    cfg = people_config(root, tmp_path / "people.csv", prior="dp", eps_prior=0.25, eps_error=0)
    run = publish_release(Store(root), run_stages(root, cfg), cfg=cfg)
    prov = read_json(run / "release_provenance.json")
    assert "eps_error" not in prov and audit.audit_release(run) == []
    edit(run, "manifest.json", lambda m: m["config"]["release"].pop("eps_error"))  # re-signed by another key
    assert [f for f in audit.audit_release(run) if not f.startswith("public_key.pem")] == []
