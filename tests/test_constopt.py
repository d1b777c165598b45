"""ConstOPTMech (Imola et al. 2022, Algorithm 1 with I_NN,r) adapted to neighbour-threshold mDP."""

from __future__ import annotations

import numpy as np
import pytest

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, synthetic
from mdp_core.solvers import constopt
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import objective, verify


@pytest.fixture(scope="module")
def small():
    return grid(6, 7, n_outputs=15, epsilon=3.0, eta=1.5, seed=1)


def test_output_passes_verify_at_requested_eps(small):
    h, info = constopt.constopt(small, r=4)
    np.testing.assert_allclose(h.sum(axis=1), 1.0, atol=1e-12)
    cert = verify(small, h)
    # LP at eps / 2 then normalisation: private at eps up to the solver's ~1e-9 zeros
    assert cert.max_abs_violation < 1e-7
    sol = solve(small, "constopt", r=4)
    assert sol.certificate.passed and sol.certificate.epsilon == small.epsilon
    assert sol.repair.max_mix < 1e-6
    assert sol.extra["r"] == 4 and sol.extra["lp_epsilon"] == small.epsilon / 2
    assert [run["lambda"] for run in sol.extra["runs"]] == [0.001, 0.1, 1.0]
    assert sol.extra["lambda"] in (0.001, 0.1, 1.0)
    best = min(run["expected_loss"] for run in sol.extra["runs"])
    assert objective(small, h) == pytest.approx(best)
    lp = solve(small, "lp")
    assert lp.objective <= sol.objective + 1e-9


def test_lp_is_smaller_than_the_full_pmo(small):
    dist, _ = constopt.output_distances(small)
    nn = constopt.nearest_outputs(dist, 4)
    model, parts = constopt.build(small, dist, nn, 0.1)
    n, k, e = small.n_records, small.n_outputs, small.n_edges
    assert model.a.shape[1] == n * 4 + k
    assert n < model.a.shape[0] < n + 2 * e * k
    assert parts["free"].sum(axis=1).tolist() == [4] * n
    # fixed entries of one column decay exactly like exp(-eps/2 d) (the weighted exponential mechanism)
    col = 0
    fixed = ~parts["free"][:, col]
    ratio = parts["coef"][fixed, col] / np.exp(-small.epsilon / 2 * dist[fixed, col])
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_all_free_equals_the_optimal_mechanism_at_half_eps(small):
    """With r = K nothing is fixed: ConstOPTMech is the exact PMO optimum at eps / 2 (rows sum to 1
    at the optimum since the constraints are homogeneous), so the two objectives agree."""
    h, info = constopt.constopt(small, r=small.n_outputs, lambdas=[0.1])
    half = solve(small.replace(epsilon=small.epsilon / 2), "lp")
    assert objective(small, h) == pytest.approx(half.objective, rel=1e-6)


def test_outputs_without_coordinates_use_path_distances():
    inst = synthetic(40, 10, dim=2, sigma=1.5, epsilon=2.0, eta=1.0, seed=3)
    bare = inst.replace(records=None)
    dist, source = constopt.output_distances(bare)
    assert source == "mDP-graph path distances"
    rid = inst.outputs["record_id"].to_numpy()
    assert np.all(dist[rid, np.arange(10)] == 0)
    sol = solve(bare, "constopt", r=3)
    assert sol.certificate.passed


def test_bad_arguments(small):
    with pytest.raises(InputError):
        constopt.constopt(small, r=0)
    with pytest.raises(InputError):
        constopt.constopt(small, lambdas=[0.0])


def test_status_is_feasible_without_a_bound_even_far_from_the_optimum():
    """Issue 18: every ConstOPTMech LP solves to optimality, yet its mechanism is well above the PMO
    optimum (a restricted LP at eps / 2): it must say "feasible" and carry no lower bound."""
    inst = grid(6, 6, n_outputs=12, epsilon=2.0, eta=1.5, seed=4)
    sol = solve(inst, "constopt", r=3)
    assert all(run["status"] == "optimal" for run in sol.extra["runs"]) and sol.extra["lp_status"] == "optimal"
    assert sol.status == "feasible" and sol.lower_bound is None
    assert "not proven" in sol.extra["optimality"]
    lp = solve(inst, "lp")
    assert lp.status == "optimal" and sol.objective > lp.objective * 1.05  # the gap the old "optimal" hid
