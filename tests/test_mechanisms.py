"""The exponential mechanism z_ik ~ exp(-eps d(r_i, o_k) / 2): formula, privacy, and LP <= EM."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, synthetic
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import euclidean, haversine_km
from mdp_core.solvers.mechanisms import (
    NEWTON_ROUNDS,
    column_majorant,
    exponential,
    record_output_distances,
    smooth_to_mdp,
)
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import objective, passes, verify


def reference_em(eps: float, d: np.ndarray) -> np.ndarray:
    """Straight from the definition, in extended precision (fine for the small eps * d used here)."""
    w = np.exp(-0.5 * eps * d.astype(np.longdouble))
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float64)


def test_formula_matches_definition(grid_small):
    pts = grid_small.records[["x0", "x1"]].to_numpy()
    d = cdist(pts, pts[grid_small.outputs["record_id"].to_numpy()])
    np.testing.assert_allclose(record_output_distances(grid_small), d, atol=1e-12)
    z = exponential(grid_small.replace(epsilon=0.8))
    np.testing.assert_allclose(z, reference_em(0.8, d), rtol=1e-12)


def test_record_output_distances_are_exact():
    """A record used as an output is at distance exactly 0 from itself, even far from the origin
    (|a|^2 + |b|^2 - 2 a.b would leave ~1e-5 here)."""
    pts = 1e4 + np.random.default_rng(0).random((30, 3))
    inst = from_points(pts, "euclidean", 0.5, 1.0, np.zeros((30, 4)), output_record_ids=[1, 5, 7, 29])
    d = record_output_distances(inst)
    assert np.all(d[[1, 5, 7, 29], np.arange(4)] == 0.0)
    np.testing.assert_allclose(d, np.linalg.norm(pts[:, None, :] - pts[None, [1, 5, 7, 29], :], axis=2), rtol=1e-13)


def test_two_points_by_hand():
    """Records at x = 0 and x = 1, both are outputs, eps = 2: row 0 is (1, e^-1) / (1 + e^-1)."""
    inst = from_points(np.array([[0.0], [1.0]]), "euclidean", 1.0, 2.0, np.zeros((2, 2)), output_record_ids=[0, 1])
    z = exponential(inst)
    a = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(z, [[a, 1 - a], [1 - a, a]], rtol=1e-14)


def test_explicit_distances_argument(synth_small):
    d = np.abs(np.random.default_rng(0).normal(size=(synth_small.n_records, synth_small.n_outputs)))
    np.testing.assert_allclose(exponential(synth_small, d), reference_em(synth_small.epsilon, d), rtol=1e-12)


def test_large_epsilon_does_not_underflow():
    inst = synthetic(n_records=12, n_outputs=5, sigma=10.0, eta=3.0, epsilon=1e4, seed=1)
    z = exponential(inst)
    assert np.all(np.isfinite(z)) and np.all(z >= 0)
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-15)
    # each record's nearest output gets (essentially) everything
    nearest = np.argmin(record_output_distances(inst), axis=1)
    np.testing.assert_allclose(z[np.arange(12), nearest], 1.0, atol=1e-12)


def test_outputs_with_their_own_coordinates():
    """Outputs that are not records: coordinates in outputs.parquet (x0, x1)."""
    rng = np.random.default_rng(4)
    rec, out = rng.random((6, 2)), rng.random((3, 2))
    base = from_points(rec, "euclidean", 0.5, 3.0, cdist(rec, out))
    inst = base.replace(outputs=pd.DataFrame({"x0": out[:, 0], "x1": out[:, 1]}))
    np.testing.assert_allclose(exponential(inst), reference_em(3.0, cdist(rec, out)), rtol=1e-12)


def test_haversine_instance():
    rng = np.random.default_rng(2)
    latlon = np.column_stack([41.9 + rng.random(10) * 0.05, 12.48 + rng.random(10) * 0.05])
    inst = from_points(latlon, "haversine", 3.0, 2.0, np.ones((10, 4)), output_record_ids=[0, 3, 5, 9])
    d = haversine_km(latlon, latlon[[0, 3, 5, 9]])
    np.testing.assert_allclose(exponential(inst), reference_em(2.0, d), rtol=1e-12)
    assert verify(inst, exponential(inst)).passed


def test_no_coordinates_is_an_input_error():
    inst = Instance([0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], [[0, 1]], [1.0], 1.0, 1.0)
    with pytest.raises(InputError, match="no record coordinates"):
        exponential(inst)


def test_nan_coordinates_are_an_input_error(grid_small):
    rec = grid_small.records.copy()
    rec.loc[3, "x1"] = np.nan
    with pytest.raises(InputError, match="record coordinates: 1 row"):
        exponential(grid_small.replace(records=rec))


def test_deterministic(grid_small):
    assert np.array_equal(exponential(grid_small), exponential(grid_small))


@settings(max_examples=50, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(2, 10),
    st.integers(1, 6),
    st.integers(1, 3),
    st.floats(0.01, 20.0),
)
def test_property_em_is_private_for_every_pair(seed, n, k, dim, eps):
    """With eta above the diameter every pair is a neighbour: the EM satisfies all N^2 K ratios."""
    rng = np.random.default_rng(seed)
    pts = rng.random((n, dim))
    outs = rng.random((k, dim)) * 1.5  # outputs anywhere, not only at records
    base = from_points(pts, "euclidean", 2.0, eps, cdist(pts, outs))
    inst = base.replace(outputs=pd.DataFrame({f"x{i}": outs[:, i] for i in range(dim)}))
    assert inst.n_edges == n * (n - 1) // 2
    z = exponential(inst)
    cert = verify(inst, z)
    assert cert.passed and cert.max_realised_epsilon <= eps * (1 + 1e-9)
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize(
    "inst",
    [
        grid(4, 5, n_outputs=6),
        grid(3, 4, n_outputs=None, epsilon=1.5, prior="random", seed=2),
        synthetic(n_records=12, n_outputs=5, sigma=1.5, eta=1.5, epsilon=2.0, seed=3),
        synthetic(n_records=15, n_outputs=15, dim=2, sigma=0.5, eta=0.8, epsilon=0.5, seed=9),
    ],
    ids=["grid4x5", "grid3x4", "synthetic-components", "synthetic-dense"],
)
def test_exact_lp_beats_exponential(inst):
    em = solve(inst, "exp")
    # honest status: a baseline without a lower bound never claims more than "feasible"
    assert em.status == "feasible" and not em.repair.applied and em.lower_bound is None
    assert em.extra["computation"] == "closed form"
    assert em.objective == pytest.approx(objective(inst, exponential(inst)), rel=1e-12)
    opt = solve(inst, "lp")
    assert opt.certificate.passed
    assert opt.objective <= em.objective + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 25), st.integers(1, 4), st.floats(0.1, 1.2), st.floats(0.5, 30.0), st.integers(0, 2**32 - 1))
def test_property_column_majorant_is_the_path_distance_closure(n, k, eta, eps, seed):
    """column_majorant(Z)_ik = max_j z_jk exp(-eps D_ij), D the graph's shortest-path distance: the
    smallest majorant in the privacy cone, computed here densely (Dijkstra) on random, often
    disconnected instances with zeros in Z."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    from mdp_core.solvers.mechanisms import column_majorant

    rng = np.random.default_rng(seed)
    inst = from_points(rng.random((n, 2)), "euclidean", eta, eps, rng.random((n, k)))
    z = rng.random((n, k)) * (rng.random((n, k)) < 0.6)
    e = inst.edges
    graph = csr_matrix((inst.distances, (e[:, 0], e[:, 1])), shape=(n, n))
    dist = shortest_path(graph, directed=False)  # inf between components
    want = np.max(z[None, :, :] * np.exp(-eps * dist)[:, :, None], axis=1)
    got = column_majorant(inst, z)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # blocks of a few (edge, output) entries: the same bytes as one block per sweep
    np.testing.assert_array_equal(column_majorant(inst, z, chunk=max(k, 3)), got)
    np.testing.assert_array_equal(column_majorant(inst, z, chunk=1 << 40), got)
    assert verify(inst, got).n_violations == 0  # every ratio holds (rows no longer sum to 1)
    # with roots: the same bytes, and every entry is its root's entry times exp(-eps D)
    from mdp_core.solvers.mechanisms import _majorant

    same, root = _majorant(inst, z, roots=True)
    np.testing.assert_array_equal(same, got)
    assert root is not None
    cols = np.arange(k)[None, :]
    raised = got > np.maximum(z, 0.0)
    np.testing.assert_array_equal(root[~raised], np.broadcast_to(np.arange(n)[:, None], z.shape)[~raised])
    assert not np.any(raised[root, cols])  # a root's entry was not raised
    np.testing.assert_allclose(got, got[root, cols] * np.exp(-eps * dist[np.arange(n)[:, None], root]), rtol=1e-12)


def test_planar_laplace_reports_feasible_without_a_bound():
    inst = grid(4, 5, n_outputs=6, epsilon=2.0)
    sol = solve(inst, "laplace", n_samples=2_000)
    assert sol.status == "feasible" and sol.lower_bound is None
    assert sol.extra["computation"].startswith("Monte Carlo estimate")
    assert "status_downgraded" not in sol.extra


def plain_alternation(inst: Instance, z: np.ndarray, max_rounds: int) -> tuple[np.ndarray, int]:
    """The former smooth_to_mdp: column_majorant and row normalisation until ``passes``."""
    cur = np.asarray(z, dtype=np.float64)
    for r in range(1, max_rounds + 1):
        m = column_majorant(inst, cur)
        cur = m / m.sum(axis=1, keepdims=True)
        if passes(inst, cur):
            return cur, r
    return cur, max_rounds


@st.composite
def noisy_mechanisms(draw) -> tuple[Instance, np.ndarray]:
    """Random point sets (near-duplicates, eps * eta from 1 to 30) and a mechanism estimate: the
    exponential mechanism with lognormal noise and zeros (as Monte Carlo estimates have), or each
    record's cheapest output (row generation's LP point before any privacy row)."""
    n = draw(st.integers(2, 25))
    k = draw(st.integers(1, min(6, n)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pts = rng.random((n, 2))
    if draw(st.booleans()) and n >= 3:
        pts[1] = pts[0] + draw(st.sampled_from([1e-6, 1e-4, 1e-2]))
    eta = draw(st.floats(0.3, 1.5))
    eps = draw(st.floats(1.0, 30.0)) / eta
    outs = np.sort(rng.choice(n, size=k, replace=False))
    inst = from_points(pts, "euclidean", eta, eps, euclidean(pts, pts[outs]), output_record_ids=outs)
    if draw(st.booleans()):
        z = np.eye(k)[inst.costs.argmin(axis=1)]
    else:
        z = exponential(inst) * rng.lognormal(0.0, draw(st.floats(0.0, 0.5)), (n, k))
        z[rng.random((n, k)) < draw(st.floats(0.0, 0.2))] = 0.0
        z[z.sum(axis=1) == 0] = 1.0
    return inst, z / z.sum(axis=1, keepdims=True)


@settings(max_examples=80, deadline=None)
@given(noisy_mechanisms())
def test_property_smooth_to_mdp_is_row_stochastic_deterministic_and_converges_where_the_alternation_does(case):
    """Rows sum to 1 and entries are >= 0 whatever happens; the same input gives the same bytes; the
    result passes verify whenever it is returned early, and whenever the former plain alternation
    passes within max_rounds - NEWTON_ROUNDS rounds (the fallback replays it step for step)."""
    inst, z = case
    out, rounds = smooth_to_mdp(inst, z)
    assert 1 <= rounds <= 50 and np.all(out >= 0) and np.max(np.abs(out.sum(axis=1) - 1.0)) <= 1e-12
    again, rounds2 = smooth_to_mdp(inst, z)
    assert rounds2 == rounds and again.tobytes() == out.tobytes()
    cert = verify(inst, out)
    assert cert.passed or rounds == 50, cert.summary()
    plain, plain_rounds = plain_alternation(inst, z, 50 - NEWTON_ROUNDS)
    if passes(inst, plain):
        assert cert.passed, (plain_rounds, cert.summary())
    replay, replay_rounds = smooth_to_mdp(inst, z, 50 - NEWTON_ROUNDS, newton_rounds=0)
    assert replay_rounds == plain_rounds and replay.tobytes() == plain.tobytes()


@pytest.mark.parametrize(
    "inst",
    [
        synthetic(n_records=120, n_outputs=30, epsilon=10.0, seed=1),
        synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0),
        grid(6, 8, n_outputs=20, epsilon=10.0),
    ],
    ids=["synthetic120", "synthetic60", "grid6x8"],
)
def test_closure_of_an_lp_point_takes_fewer_rounds_and_costs_no_more_than_the_alternation(inst):
    """Row generation's first LP point without privacy rows (each record's cheapest output): the
    Newton closure passes verify in fewer rounds than the plain alternation, at no higher cost."""
    z = np.eye(inst.n_outputs)[inst.costs.argmin(axis=1)]
    out, rounds = smooth_to_mdp(inst, z)
    plain, plain_rounds = plain_alternation(inst, z, 50)
    assert verify(inst, out).passed and passes(inst, plain)
    assert rounds < plain_rounds
    assert objective(inst, out) <= objective(inst, plain) * (1 + 1e-12)


def test_smooth_to_mdp_returns_a_feasible_mechanism_in_one_round():
    inst = synthetic(n_records=40, n_outputs=10, epsilon=5.0, seed=4)
    z = exponential(inst)
    out, rounds = smooth_to_mdp(inst, z)
    assert rounds == 1 and verify(inst, out).passed
    np.testing.assert_allclose(out, z, rtol=1e-14, atol=0)
