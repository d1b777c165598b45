"""Planar Laplace baseline: Monte Carlo estimate, smoothing onto the mDP constraints, certification."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, special

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.instance import Instance
from mdp_core.solvers import mechanisms as mech
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import verify


def test_noise_radius_and_direction():
    rng = np.random.default_rng(0)
    x = mech.laplace_noise(2, 2.0, 200_000, rng)
    r = np.linalg.norm(x, axis=1)
    assert r.mean() == pytest.approx(2 / 2.0, rel=0.01)  # Gamma(2, 1/eps) has mean 2 / eps
    assert abs(np.mean(np.arctan2(x[:, 1], x[:, 0]))) < 0.02  # uniform angle, mean 0


def test_monte_carlo_matches_the_analytic_half_plane_probability():
    """Two outputs at x = 0 and x = 2: the record at 0 reports output 1 iff its noise has x > 1.

    For density (eps^2 / 2 pi) exp(-eps |v|), P(v_x > m) = (1 / pi) int_{eps m}^inf t K_1(t) dt.
    """
    eps, n = 1.5, 200_000
    inst = Instance(
        prior=np.array([0.5, 0.5]),
        costs=np.array([[0.0, 2.0], [2.0, 0.0]]),
        edges=np.array([[0, 1]]),
        distances=np.array([2.0]),
        epsilon=eps,
        eta=2.0,
        records=pd.DataFrame({"x0": [0.0, 2.0], "x1": [0.0, 0.0]}),
        outputs=pd.DataFrame({"record_id": [0, 1]}),
    )
    z, info = mech.planar_laplace(inst, n_samples=n, seed=3)
    exact = integrate.quad(lambda t: t * special.k1(t), eps * 1.0, np.inf)[0] / np.pi
    se = np.sqrt(exact * (1 - exact) / n)
    assert abs(z[0, 1] - exact) < 5 * se
    assert abs(z[1, 0] - exact) < 5 * se
    assert info["n_samples"] == n and info["noise_dim"] == 2


def test_laplace_method_is_certified_without_uniform_mixing():
    inst = grid(8, 9, n_outputs=20, epsilon=1.0, eta=2.0, seed=2)
    z, _ = mech.planar_laplace(inst, n_samples=5_000, seed=1)
    assert not verify(inst, z).passed  # sampling noise: the raw estimate violates constraints
    sol = solve(inst, "laplace", n_samples=5_000, seed=1)
    assert sol.certificate.passed
    assert sol.repair.max_mix < 0.01
    assert sol.extra["n_samples"] == 5_000 and sol.extra["raw_violations"] > 0
    assert sol.extra["smoothing_mean_tv"] < 0.05  # smoothing moves the estimate little
    again = solve(inst, "laplace", n_samples=5_000, seed=1)
    np.testing.assert_array_equal(sol.z, again.z)
    exp = solve(inst, "exp")
    lp = solve(inst, "lp")
    assert lp.objective <= sol.objective + 1e-9  # the LP optimum is a lower bound for any baseline
    assert sol.objective < exp.objective  # on the grid, planar Laplace beats the exponential mechanism


def test_smooth_to_mdp_fixes_a_perturbed_private_matrix():
    inst = grid(5, 5, n_outputs=None, epsilon=2.0, eta=1.5, seed=0)
    rng = np.random.default_rng(4)
    z = mech.exponential(inst) * rng.uniform(0.8, 1.2, size=(25, 25))
    z[rng.random(z.shape) < 0.05] = 0.0
    z /= z.sum(axis=1, keepdims=True)
    assert not verify(inst, z).passed
    fixed, rounds = mech.smooth_to_mdp(inst, z)
    assert verify(inst, fixed).passed and rounds >= 1
    maj = mech.column_majorant(inst, z)
    assert np.all(maj >= z)


def test_haversine_instance_and_bad_input():
    rng = np.random.default_rng(5)
    pts = np.column_stack([41.9 + rng.uniform(0, 0.03, 30), 12.5 + rng.uniform(0, 0.04, 30)])
    inst = from_points(pts, "haversine", 1.0, 3.0, np.zeros((30, 30)) + 1.0, output_record_ids=np.arange(30))
    inst = inst.replace(costs=mech.record_output_distances(inst))
    sol = solve(inst, "laplace", n_samples=3_000, seed=0)
    assert sol.certificate.passed and sol.extra["space"].startswith("equirectangular")
    with pytest.raises(InputError):
        mech.planar_laplace(inst, n_samples=0)


ROME_NODES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "rome_center" / "nodes.csv"


@pytest.mark.skipif(not ROME_NODES.is_file(), reason="shared Rome data ../shared/data/rome_center absent")
def test_real_rome_nodes_laplace_vs_lp():
    """80 real road nodes of central Rome (haversine km), eps = 4 / km, eta = 0.4 km."""
    nodes = pd.read_csv(ROME_NODES)
    pts = nodes[["y", "x"]].drop_duplicates().sample(80, random_state=0).to_numpy()
    inst = from_points(pts, "haversine", 0.4, 4.0, np.ones((80, 80)), output_record_ids=np.arange(80))
    inst = inst.replace(costs=mech.record_output_distances(inst))
    lap = solve(inst, "laplace", n_samples=4_000, seed=0)
    assert lap.certificate.passed and lap.repair.max_mix < 0.01
    lp = solve(inst, "lp")
    assert lp.objective <= lap.objective + 1e-9
