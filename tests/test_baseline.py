"""Against planar Laplace at the release's stated guarantee (issue 40, mdp_core/release/baseline.py): the closed
forms, the Monte Carlo against an independent brute force (Andres et al.'s own sampler: the inverse CDF of
the radius through Lambert's W, nearest outputs by a full distance matrix), the release's error against a
direct sum over Z, and the evaluate stage writing all of it into a real release that audits clean."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, special

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.io import read_instance, read_mechanism, read_table
from mdp_core.problem.metrics import EARTH_RADIUS_KM, haversine_km, haversine_rows_km, unit_sphere
from mdp_core.release import audit, baseline, people, report
from mdp_core.runtime.files import read_json


def plane_instance(prior=(0.5, 0.3, 0.2, 0.0), eps: float = 2.0) -> Instance:
    """Four records in the plane (km), three outputs (two at records, one elsewhere), eta 1.5."""
    x = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.2]])
    out = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, -0.5]])
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    edges = np.array([(i, j) for i in range(4) for j in range(i + 1, 4) if d[i, j] <= 1.5])
    return Instance(
        prior=np.array(prior),
        costs=np.linalg.norm(x[:, None] - out[None], axis=2),
        edges=edges,
        distances=d[edges[:, 0], edges[:, 1]],
        epsilon=eps,
        eta=1.5,
        records=pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1]}),
        outputs=pd.DataFrame({"x0": out[:, 0], "x1": out[:, 1]}),
    )


def andres_noise(eps: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2) planar Laplace noise by Andres et al. 2013's own recipe: angle uniform, radius by the inverse of
    its CDF C(r) = 1 - (1 + eps r) e^{-eps r}: r = -(W_{-1}((p - 1) / e) + 1) / eps."""
    theta = rng.uniform(0.0, 2 * math.pi, n)
    p = rng.uniform(0.0, 1.0, n)
    r = -(special.lambertw((p - 1) / math.e, k=-1).real + 1) / eps
    return np.column_stack([r * np.cos(theta), r * np.sin(theta)])


def brute_force(
    rec: np.ndarray, out: np.ndarray, dist, move, eps: float, n: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per record: the mean and standard error of d(record, nearest output of the moved point), ``n`` samples,
    every distance to every output computed (``dist``(points, outputs) -> matrix), no tree."""
    rng = np.random.default_rng(seed)
    means, ses = [], []
    for r in rec:
        moved = move(r, andres_noise(eps, n, rng))
        chosen = np.argmin(dist(moved, out), axis=1)
        err = dist(r[None], out)[0][chosen]
        means.append(err.mean())
        ses.append(err.std(ddof=1) / math.sqrt(n))
    return np.array(means), np.array(ses)


# ----------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("dim", [1, 2, 3, 50])
def test_the_continuous_error_is_d_over_eps_by_quadrature(dim: int) -> None:
    eps = 2.5
    top = integrate.quad(lambda r: r**dim * math.exp(-eps * r), 0, math.inf)[0]
    bottom = integrate.quad(lambda r: r ** (dim - 1) * math.exp(-eps * r), 0, math.inf)[0]
    assert baseline.continuous_error(dim, eps) == dim / eps
    assert baseline.continuous_error(dim, eps) == pytest.approx(top / bottom, rel=1e-8)


def test_the_planar_noise_has_mean_radius_2_over_eps_as_andres_sampler() -> None:
    from mdp_core.solvers.mechanisms import laplace_noise

    eps, n = 3.0, 400_000
    ours = np.linalg.norm(laplace_noise(2, eps, n, np.random.default_rng(1)), axis=1)
    theirs = np.linalg.norm(andres_noise(eps, n, np.random.default_rng(2)), axis=1)
    se = math.sqrt(2 * 3 / eps**2 / n)  # Var of Gamma(2, 1/eps) = 2 / eps^2, two samples
    assert abs(ours.mean() - theirs.mean()) < 5 * se and abs(ours.mean() - 2 / eps) < 5 * se


def test_samples_per_record_and_bad_inputs() -> None:
    assert baseline.samples_per_record(20) == -(-baseline.MC_TOTAL // 20)
    assert baseline.samples_per_record(10**7) == baseline.MC_MIN
    with pytest.raises(InputError, match="finite eps"):
        baseline.continuous_error(2, math.inf)
    assert baseline.comparison_rows(plane_instance(), math.inf) == []
    assert baseline.comparison_rows(plane_instance(), 0.0) == []


def test_no_coordinates_no_rows() -> None:
    inst = Instance(np.full(3, 1 / 3), np.ones((3, 2)), np.array([[0, 1], [1, 2]]), np.ones(2), 1.0, 1.0)
    assert baseline.comparison_rows(inst, 1.0) == []


# ----------------------------------------------------------------------------- the Monte Carlo, brute force
def test_remap_in_the_plane_matches_a_brute_force_monte_carlo() -> None:
    inst = plane_instance()
    eps = 1.7
    rows = {r["method"]: r for r in baseline.comparison_rows(inst, eps)}
    rec, out = inst.record_points(), inst.output_points()
    means, ses = brute_force(
        rec, out, lambda a, b: np.linalg.norm(a[:, None] - b[None], axis=2), lambda r, z: r + z, eps, 200_000, 5
    )
    remap = rows[baseline.REMAP]
    brute, brute_se = float(inst.prior @ means), float(math.sqrt(inst.prior**2 @ ses**2))
    assert remap["mc_samples"] == baseline.samples_per_record(4)
    assert 0 < remap["dist_loss_se"] < 0.01
    assert abs(remap["dist_loss_mean"] - brute) < 4 * math.hypot(remap["dist_loss_se"], brute_se)
    # the floor and the closed form, exactly
    floor = np.linalg.norm(rec[:, None] - out[None], axis=2).min(axis=1)
    assert rows[baseline.FLOOR]["dist_loss_mean"] == pytest.approx(float(inst.prior @ floor), rel=1e-12)
    assert rows[baseline.FLOOR]["metric_epsilon"] == math.inf and rows[baseline.FLOOR]["dist_loss_max"] == floor.max()
    assert rows[baseline.CONTINUOUS]["dist_loss_mean"] == 2 / eps and rows[baseline.CONTINUOUS]["dist_loss_se"] == 0
    # at a huge eps the noise vanishes: the remap is the floor
    still = {r["method"]: r for r in baseline.comparison_rows(inst, 1e6)}
    assert still[baseline.REMAP]["dist_loss_mean"] == pytest.approx(still[baseline.FLOOR]["dist_loss_mean"], abs=1e-5)


def _equirectangular(r: np.ndarray, z: np.ndarray) -> np.ndarray:
    """An independent (first-order) tangent plane: east/north km -> lat/lon degrees around ``r``."""
    lat = r[0] + np.degrees(z[:, 1] / EARTH_RADIUS_KM)
    lon = r[1] + np.degrees(z[:, 0] / (EARTH_RADIUS_KM * math.cos(math.radians(r[0]))))
    return np.column_stack([lat, lon])


def test_remap_on_lat_lon_matches_a_brute_force_in_km() -> None:
    cells = grid(3, 4, n_outputs=4, seed=1)  # 1 km cells of Rome: their lat/lon, measured on the sphere
    assert cells.records is not None and cells.outputs is not None
    latlon = cells.records[["lat", "lon"]].to_numpy()
    outputs = cells.outputs["record_id"].to_numpy()
    costs = haversine_km(latlon, latlon[outputs])
    inst = from_points(latlon, "haversine", 1.5, 2.0, costs, output_record_ids=outputs)
    assert inst.metric == "haversine"
    eps = 1.3
    remap = next(r for r in baseline.comparison_rows(inst, eps) if r["method"] == baseline.REMAP)
    means, ses = brute_force(
        inst.record_points(), inst.output_points(), haversine_km, _equirectangular, eps, 100_000, 9
    )
    brute, brute_se = float(inst.prior @ means), float(math.sqrt(inst.prior**2 @ ses**2))
    assert inst.distance_unit == "km" and remap["distance_unit"] == "km"
    assert abs(remap["dist_loss_mean"] - brute) < 4 * math.hypot(remap["dist_loss_se"], brute_se)


def test_the_tangent_plane_maps_rho_km_to_rho_km_on_the_ground() -> None:
    rec = np.array([[41.9, 12.5], [60.17, 24.94], [-33.9, 151.2]])
    noise = np.array([[[3.0, 4.0], [0.0, 2.0], [-7.0, 0.0]]] * 3)  # east, north km
    pts = baseline.on_sphere(rec, noise)
    lat = np.degrees(np.arcsin(pts[..., 2] / EARTH_RADIUS_KM))
    lon = np.degrees(np.arctan2(pts[..., 1], pts[..., 0]))
    moved = np.stack([lat, lon], axis=2)
    for i in range(3):
        np.testing.assert_allclose(haversine_rows_km(np.repeat(rec[i : i + 1], 3, 0), moved[i]), [5.0, 2.0, 7.0])
        assert moved[i, 1, 0] > rec[i, 0] and moved[i, 1, 1] == pytest.approx(rec[i, 1])  # due north
        assert moved[i, 2, 1] < rec[i, 1]  # due west
    np.testing.assert_allclose(np.linalg.norm(pts, axis=2), EARTH_RADIUS_KM)
    np.testing.assert_allclose(unit_sphere(rec), baseline.on_sphere(rec, np.zeros((3, 1, 2)))[:, 0], atol=1e-6)


def test_the_baseline_is_deterministic_and_its_seed_public() -> None:
    inst = plane_instance()
    assert baseline.comparison_rows(inst, 2.0) == baseline.comparison_rows(inst, 2.0)
    other = baseline.comparison_rows(inst, 2.0, seed=baseline.PUBLIC_SEED + 1)
    assert other[1]["dist_loss_mean"] != baseline.comparison_rows(inst, 2.0)[1]["dist_loss_mean"]


# ----------------------------------------------------------------------------- the report's sentence
def _numbers(release: float, remap: float, se: float, cont: float = 1.0) -> dict:
    return {"release": release, "metric_epsilon": 2.0, "continuous": cont, "remap": remap, "remap_se": se}


def test_the_verdict_says_which_is_better_and_by_how_much() -> None:
    better = report.laplace_verdict(_numbers(0.5, 1.0, 0.001))
    assert better.startswith("50 % below planar Laplace sent to the same outputs (the release is better)")
    assert "and 50 % below continuous" in better
    worse = report.laplace_verdict(_numbers(1.5, 1.0, 0.001))
    assert worse.startswith("50 % above") and "(planar Laplace is better)" in worse and "50 % above continuous" in worse
    assert report.laplace_verdict(_numbers(1.0, 1.001, 0.001)).startswith("the same as planar Laplace")


def test_the_sentence_reads_the_evaluation_table(tmp_path) -> None:
    from mdp_core.release import evaluate as ev
    from mdp_core.solvers.mechanisms import exponential

    inst = plane_instance()
    released = ev.evaluate_mechanism(inst, exponential(inst), "exp") | {"metric_epsilon": 2.0}
    table = ev.evaluation_table([released, *baseline.comparison_rows(inst, 2.0)])
    c = {"dist_loss_mean": released["dist_loss_mean"], "distance_unit": "km", "n_outputs": 3}
    a = report.against_laplace(c, report.markdown_table(table))
    assert a is not None and a["continuous"] == 1.0 and a["metric_epsilon"] == 2.0 and a["samples"] > 0
    text = report.laplace_sentence(c | {"against_laplace": a})
    assert text and "At the same guarantee, 2 per km for two records within the protection radius" in text
    assert "exactly 2 / 2" in text and "public prior" in text and "farther apart" not in text
    g = {"protection_radius": 1.0, "metric_epsilon_per_unit": 2.5}  # a graph whose stretch over any distance is 1.25
    text = report.laplace_sentence(c | {"against_laplace": a, "guarantee": g})
    assert text and "radius (1 km: what the release was asked for and is charged at); farther apart planar " in text
    assert "Laplace keeps 2 per km and this release states 2.5 per km (eps x the mDP graph's stretch)" in text
    assert report.against_laplace(c, report.markdown_table(table.iloc[:1])) is None  # no rows: no sentence
    rows = table.to_dict(orient="records")
    assert report.plot_against_laplace(rows, "exp", "km", tmp_path / "a.png") == tmp_path / "a.png"
    assert report.plot_against_laplace(rows[:1], "exp", "km", tmp_path / "b.png") is None
    assert not (tmp_path / "b.png").exists()


# ----------------------------------------------------------------------------- the evaluate stage, a real release
def test_the_evaluate_stage_writes_the_comparison_into_the_release(released) -> None:
    inst = read_instance(released / "instance")
    z = read_mechanism(released / "mechanism.parquet", inst.n_records, inst.n_outputs)
    table = read_table(released / "evaluation.parquet")
    rows = {m: table[table["method"] == m].iloc[0] for m in table["method"]}
    guarantee = read_json(released / "release_provenance.json")["guarantee"]
    stated = guarantee["epsilon_per_unit"] * guarantee["stretch_within_radius"]  # the rate within the radius
    method = read_json(released / "solve.json")["method"]
    rec, out = inst.record_points(), inst.output_points()  # the grid: km in the plane (euclidean)
    assert inst.metric == "euclidean" and inst.distance_unit == "km"
    direct = sum(  # the release's expected error per person, a direct sum over Z, averaged with the prior
        inst.prior[i] * sum(z[i, k] * math.dist(rec[i], out[k]) for k in range(z.shape[1])) for i in range(z.shape[0])
    )
    assert rows[method]["dist_loss_mean"] == pytest.approx(direct, rel=1e-12)
    assert rows[method]["metric_epsilon"] == stated and rows[method]["dist_loss_se"] == 0
    limit = read_json(released / "release_provenance.json")["protection"]["max_distance"]
    # people spread as the prior in each record's cell, the public seed: the same numbers (issue 50)
    again = {r["method"]: r for r in people.people_rows(inst, z, stated, people.cells(inst, limit))}
    for m in (*baseline.METHODS, people.RELEASE, people.SNAP):
        assert rows[m]["metric_epsilon"] == again[m]["metric_epsilon"] and rows[m]["epsilon"] == inst.epsilon
        for col in ("dist_loss_mean", "dist_loss_q95", "dist_loss_max", "dist_loss_se"):
            assert rows[m][col] == again[m][col], (m, col)
    assert rows[baseline.CONTINUOUS]["dist_loss_mean"] == 2 / stated
    # from where people are the error is larger than from the records, by at most the largest snap
    assert rows[method]["dist_loss_mean"] < rows[people.RELEASE]["dist_loss_mean"]
    assert (
        rows[people.RELEASE]["dist_loss_mean"] <= rows[method]["dist_loss_mean"] + rows[people.SNAP]["dist_loss_mean"]
    )
    md = (released / "report.md").read_text()
    page = md.split("# Appendix")[0]
    assert "- **Against planar Laplace.** At the same rate" in page
    assert f"This release: {rows[people.RELEASE]['dist_loss_mean']:.4g} km" in page
    assert f"from the records themselves the error is {rows[method]['dist_loss_mean']:.4g} km" in page
    assert "![Against planar Laplace at the same guarantee](against_laplace.png)" in page
    assert (released / "against_laplace.png").stat().st_size > 0
    assert audit.audit_release(released) == []


def test_the_audit_finds_planar_laplace_compared_at_a_rate_the_release_does_not_keep(released, tmp_path) -> None:
    """The comparison's rate is one the release keeps (eps x the stretch within the protection radius, or over
    any distance): the same table restated at a 10 % weaker rate (the figures consistent with it) is a finding."""
    import shutil

    from conftest import edit_table

    run = tmp_path / "run"
    shutil.copytree(released, run)
    method = read_json(run / "solve.json")["method"]

    def weaker(frame: pd.DataFrame) -> None:
        mine = frame["method"].isin([method, baseline.CONTINUOUS, baseline.REMAP])
        frame.loc[mine, "metric_epsilon"] *= 1.1
        cont = frame["method"] == baseline.CONTINUOUS
        frame.loc[cont, "dist_loss_mean"] = 2 / frame.loc[cont, "metric_epsilon"]

    edit_table(run, "evaluation.parquet", weaker)
    found = [f for f in audit.audit_release(run) if f.startswith("evaluation.parquet")]
    assert len(found) == 1 and "planar Laplace is compared at eps" in found[0] and "not at a rate" in found[0]
