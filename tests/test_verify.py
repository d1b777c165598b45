"""verify (certificate), repair (exact, by mixing with the uniform row) and certify (the release gate)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import path_instance
from hypothesis import given, settings
from hypothesis import strategies as st

from mdp_core.errors import InputError, PrivacyError
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.instance import Instance
from mdp_core.solvers import verify as V
from mdp_core.solvers.lp import solve_lp
from mdp_core.solvers.mechanisms import exponential


def two_records(eps: float) -> Instance:
    return path_instance([[0.0, 1.0], [1.0, 0.0]], [1.0], eps)


# ----------------------------------------------------------------------------- certificate values
def test_realised_epsilon_by_hand():
    """z = [[.6, .4], [.4, .6]], d = 1: the largest log ratio is ln(.6/.4) = ln 1.5 = 0.405465."""
    z = np.array([[0.6, 0.4], [0.4, 0.6]])
    ok = V.verify(two_records(0.5), z)
    assert ok.passed and ok.n_violations == 0
    assert ok.max_realised_epsilon == pytest.approx(math.log(1.5), rel=1e-12)
    assert ok.max_ratio_excess == pytest.approx(math.log(1.5) - 0.5, rel=1e-12)
    bad = V.verify(two_records(0.3), z)
    # violated directed entries: (0 -> 1, k = 0) and (1 -> 0, k = 1)
    assert not bad.passed and bad.n_violations == 2 and bad.n_infinite == 0
    assert bad.max_abs_violation == pytest.approx(0.6 - math.exp(0.3) * 0.4, rel=1e-12)
    assert bad.worst_pair in ((0, 1, 0), (1, 0, 1))
    assert "FAIL" in bad.summary() and "worst (i, j, k)" in bad.summary()


def test_zero_opposite_nonzero_is_infinite():
    z = np.array([[1.0, 0.0], [0.5, 0.5]])
    cert = V.verify(two_records(50.0), z)  # any finite epsilon fails
    assert not cert.passed and math.isinf(cert.max_realised_epsilon)
    assert cert.n_infinite == 1 and cert.n_violations == 1 and cert.worst_pair == (1, 0, 1)
    assert cert.as_dict()["max_realised_epsilon"] == "inf"
    json.dumps(cert.as_dict(), allow_nan=False)


def test_zero_opposite_zero_is_fine():
    z = np.array([[1.0, 0.0], [1.0, 0.0]])
    cert = V.verify(two_records(0.1), z)
    assert cert.passed and cert.max_realised_epsilon == 0.0


def test_ratio_tolerance_boundary():
    """Exactly at exp(eps d) passes; 1e-6 beyond fails; within ratio_tol passes."""
    g = math.exp(0.7)
    inst = two_records(0.7)
    at = np.array([[g / (1 + g), 1 / (1 + g)], [1 / (1 + g), g / (1 + g)]])
    assert V.verify(inst, at).passed
    x = g * (1 + 1e-6)
    beyond = np.array([[x / (1 + x), 1 / (1 + x)], [1 / (1 + x), x / (1 + x)]])
    assert V.verify(inst, beyond).n_violations == 2
    assert V.verify(inst, beyond, ratio_tol=1e-5).passed


def test_negative_entries_and_row_sums():
    inst = two_records(5.0)
    z = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert V.verify(inst, z).passed
    assert V.verify(inst, z + [[1e-12, -1e-12], [0, 0]]).passed  # row sum kept, tiny ratio change
    neg = np.array([[1.0 + 1e-12, -1e-12], [0.5, 0.5]])
    assert V.verify(inst, neg).n_negative == 1 and not V.verify(inst, neg).passed
    off = z * [[1.0], [1.0 + 2e-9]]
    cert = V.verify(inst, off)
    assert not cert.passed and cert.max_row_sum_error == pytest.approx(2e-9, rel=1e-6)


def test_bad_shapes_and_values_are_input_errors(grid_small):
    with pytest.raises(InputError, match="shape"):
        V.verify(grid_small, np.ones((3, 3)) / 3)
    z = np.full((grid_small.n_records, grid_small.n_outputs), 1 / grid_small.n_outputs)
    z[0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        V.verify(grid_small, z)


def test_no_edges():
    inst = Instance([0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], np.zeros((0, 2)), np.zeros(0), 1.0, 1.0)
    cert = V.verify(inst, np.eye(2))
    assert cert.passed and cert.n_pairs == 0 and cert.max_ratio_excess == 0.0


def test_chunking_does_not_change_the_certificate(grid_small, monkeypatch):
    rng = np.random.default_rng(1)
    z = rng.random((grid_small.n_records, grid_small.n_outputs)) ** 8
    inst = grid_small.replace(epsilon=0.5)
    whole = V.verify(inst, z)
    monkeypatch.setattr(V, "CHUNK", 7)  # 1 directed pair (6 outputs) per chunk
    assert V.verify(inst, z) == whole


# ----------------------------------------------------------------------------- properties
@st.composite
def instance_and_valid_z(draw):
    """A random small instance and a mechanism that satisfies it (certified LP or exponential)."""
    n = draw(st.integers(2, 8))
    k = draw(st.integers(2, min(5, n)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    pts = rng.random((n, 2))
    outs = np.sort(rng.choice(n, size=k, replace=False))
    inst = from_points(
        pts,
        "euclidean",
        draw(st.floats(0.3, 1.5)),
        draw(st.floats(0.2, 6.0)),
        rng.random((n, k)),
        prior=rng.dirichlet(np.ones(n)),
        output_record_ids=outs,
    )
    if draw(st.booleans()):
        z, _, _ = V.certify(inst, solve_lp(inst).z)
    else:
        z = exponential(inst)
    return inst, z, rng


@settings(max_examples=60, deadline=None)
@given(instance_and_valid_z(), st.floats(1e-6, 10.0), st.booleans())
def test_property_verify_flags_injected_ratio_violation(data, excess, to_zero):
    """Pick a neighbour pair (a, b) and an output k with z_ak > 0; lower z_bk to z_ak / (g (1 + excess))
    (or to 0) and move the removed mass to another output of row b. Rows still sum to 1 and Z >= 0,
    so the one thing wrong is the ratio z_ak / z_bk > g (1 + excess): verify must flag it."""
    inst, z, rng = data
    if inst.n_edges == 0:
        return
    z = z.copy()
    e = int(rng.integers(inst.n_edges))
    a, b = inst.edges[e] if rng.random() < 0.5 else inst.edges[e][::-1]
    g = math.exp(inst.epsilon * inst.distances[e])
    k = int(np.argmax(z[a]))
    other = (k + 1) % inst.n_outputs
    new = 0.0 if to_zero else z[a, k] / (g * (1 + excess))
    assert new < z[b, k]  # z was private, so this is a strict decrease
    z[b, other] += z[b, k] - new
    z[b, k] = new
    cert = V.verify(inst, z)
    assert not cert.passed and cert.n_violations >= 1
    assert not V.passes(inst, z) and V.passes(inst, data[1])  # the cheap test agrees both ways
    assert cert.n_negative == 0 and cert.max_row_sum_error < 1e-12
    assert cert.max_ratio_excess >= math.log1p(min(excess, 1e300)) * (1 - 1e-6)
    assert cert.max_realised_epsilon > inst.epsilon
    if to_zero:
        assert cert.n_infinite >= 1 and math.isinf(cert.max_realised_epsilon)


@settings(max_examples=40, deadline=None)
@given(instance_and_valid_z(), st.sampled_from(["negative", "row_sum"]))
def test_property_verify_flags_injected_stochasticity_violation(data, kind):
    inst, z, rng = data
    z = z.copy()
    i = int(rng.integers(inst.n_records))
    if kind == "negative":
        z[i, 0] -= z[i, 0] + 1e-9
        z[i, 1] += 1e-9 + z[i, 0] + 1e-9
        assert V.verify(inst, z).n_negative >= 1
    else:
        z[i] *= 1 + 1e-7
        assert V.verify(inst, z).max_row_sum_error > 1e-9
    assert not V.verify(inst, z).passed and not V.passes(inst, z)


@st.composite
def instance_and_any_z(draw):
    """A random instance and an arbitrary non-negative (N, K) matrix (zeros, zero rows, unnormalised)."""
    n = draw(st.integers(2, 9))
    k = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pts = rng.random((n, 2))
    inst = from_points(pts, "euclidean", draw(st.floats(0.05, 1.5)), draw(st.floats(1e-3, 30.0)), rng.random((n, k)))
    z = rng.random((n, k)) * (rng.random((n, k)) < draw(st.floats(0.1, 1.0)))
    z *= draw(st.sampled_from([1e-12, 1.0, 1e6]))
    return inst, z


@settings(max_examples=100, deadline=None)
@given(instance_and_any_z())
def test_property_repair_always_verifies(data):
    inst, z = data
    assert V.passes(inst, z) == V.verify(inst, z, check_graph=False).passed
    fixed, t_c = V.repair(inst, z)
    cert = V.verify(inst, fixed)
    assert V.passes(inst, fixed)
    assert cert.passed and cert.n_violations == 0 and cert.n_infinite == 0 and cert.n_negative == 0
    assert cert.max_ratio_excess <= 1e-12 and cert.max_abs_violation == 0.0
    np.testing.assert_allclose(fixed.sum(axis=1), 1.0, atol=1e-12)
    assert np.all((t_c >= 0) & (t_c <= 1))


def test_repair_keeps_private_components_and_mixes_only_violating_ones():
    """Two components: {0, 1} private (only normalised), {2, 3} not (mixed with the uniform row)."""
    inst = Instance(np.full(4, 0.25), np.ones((4, 2)), np.array([[0, 1], [2, 3]]), np.ones(2), 1.0, 1.0)
    z = np.array([[0.6, 0.4], [0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    fixed, t_c = V.repair(inst, z)
    np.testing.assert_array_equal(fixed[:2], z[:2])
    assert t_c[0] == 0.0 and 0 < t_c[1] < 1
    # v = 1 (1 vs 0), g = e, K = 2 -> t = 1 / (1 + (e - 1)/2) = 2 / (1 + e), up to the 1e-9 safety margin
    assert t_c[1] == pytest.approx(2 / (1 + math.e), rel=1e-8)
    assert V.verify(inst, fixed).passed


@pytest.mark.parametrize("eps", [40.0, 2000.0])
def test_repair_with_huge_ratio_bounds(eps):
    """exp(eps d) overflows at eps d > 709: the repair must still mix (t > 0) and verify must pass."""
    inst = two_records(eps)
    fixed, t_c = V.repair(inst, np.array([[1.0, 0.0], [0.0, 1.0]]))
    assert 0 < t_c[0] < 1e-10
    cert = V.verify(inst, fixed)
    assert cert.passed and np.all(fixed > 0) and cert.max_realised_epsilon <= V.MAX_LOG_RATIO + 1e-6


def test_repair_normalises_rows_and_fills_empty_rows():
    inst = two_records(1.0)
    fixed, t_c = V.repair(inst, np.array([[0.0, 0.0], [2.0, 2.0]]))
    np.testing.assert_allclose(fixed, 0.5)
    assert t_c.tolist() == [0.0]


# ----------------------------------------------------------------------------- certify
def test_certify_returns_passing_z_unchanged(grid_small):
    z = exponential(grid_small)
    out, cert, rep = V.certify(grid_small, z)
    assert out is z or np.array_equal(out, z)
    assert cert.passed and not rep.applied and rep.max_mix == 0.0


def test_certify_repairs_raw_lp_output(grid_small):
    raw = solve_lp(grid_small).z
    out, cert, rep = V.certify(grid_small, raw)
    assert cert.passed and V.verify(grid_small, out).passed
    if rep.applied:  # raw simplex output usually has zeros opposite tiny non-zeros
        assert 0 < rep.max_mix <= 1e-2
        assert rep.objective_after == pytest.approx(rep.objective_before, abs=1e-6)


def test_certify_refuses_far_from_private(grid_small):
    """One record reports output 1, all others output 0. At eps = 0.5 / km the repair needs
    t = 1 / (1 + (e^0.5 - 1) / 6) = 0.90 of uniform noise (> max_mix = 0.01): refused."""
    grid_small = grid_small.replace(epsilon=0.5)
    z = np.zeros((grid_small.n_records, grid_small.n_outputs))
    z[:, 0] = 1.0
    z[0] = [0.0, 1.0] + [0.0] * (grid_small.n_outputs - 2)
    with pytest.raises(PrivacyError, match="max_mix"):
        V.certify(grid_small, z)
    out, cert, rep = V.certify(grid_small, z, max_mix=1.0)
    assert cert.passed and rep.applied and rep.components_mixed == 1
    assert rep.max_mix == pytest.approx(1 / (1 + math.expm1(0.5) / 6), rel=1e-6)


# ----------------------------------------------------------------------------- exact tolerance (issue 11)
def test_issue11_finding2_tolerance_is_relative_in_eps_units():
    """d = 1e-10, eps = 1: a ratio of e^{5e-10} (realised eps 5) is within the old additive 1e-9
    ratio tolerance but 5x the budget: it must fail; e^{eps d (1 + 1e-10)} passes, e^{eps d (1 + 1e-8)} fails."""
    d = 1e-10
    inst = path_instance([[0.0, 1.0], [1.0, 0.0]], [d], 1.0)
    for factor, ok in ((5.0, False), (9.0, False), (1.01, False), (0.99, True), (0.0, True)):
        x = math.expm1(factor * d)  # z_0 = (.5 (1 + x), .5 (1 - x)), z_1 = (.5, .5): log ratios ~ +-factor * d
        z = np.array([[0.5 * (1 + x), 0.5 * (1 - x)], [0.5, 0.5]])
        cert = V.verify(inst, z)
        assert cert.passed is ok, (factor, cert.summary())
        if not ok:
            assert cert.max_realised_epsilon > 1.0 + 1e-9


def test_issue11_finding2_lp_on_near_duplicate_points_is_certified_exactly():
    """A real LP solve on points with 5 near-duplicate pairs (d = 1e-10): the released Z has realised
    eps <= eps (1 + 1e-9) (the old gate released realised eps 1.0000044 at eps = 1)."""
    from mdp_core.problem.metrics import euclidean

    rng = np.random.default_rng(0)
    base = rng.random((10, 2))
    pts = np.r_[base, base[:5] + [1e-10, 0.0]]
    inst = from_points(pts, "euclidean", 0.5, 1.0, euclidean(pts, pts[:8]))
    z, cert, rep = V.certify(inst, solve_lp(inst).z)
    assert cert.passed and cert.max_realised_epsilon <= 1.0 + 1e-9
    assert rep.max_mix < 1e-6 and rep.objective_after == pytest.approx(rep.objective_before, abs=1e-6)


@st.composite
def near_duplicate_instance(draw):
    """Points with near-duplicates (d down to 1e-12), eps d up to 50, K from 1, N from 1."""
    n_base = draw(st.integers(1, 6))
    n_dup = draw(st.integers(0, n_base))
    k = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.random((n_base, 2)) * draw(st.sampled_from([1.0, 10.0]))
    shift = draw(st.sampled_from([1e-12, 1e-10, 1e-7, 1e-4]))
    pts = np.r_[base, base[:n_dup] + rng.choice([-1.0, 1.0], size=(n_dup, 2)) * shift]
    eta = float(np.sqrt(2) * max(pts.max() - pts.min(), 1e-3) + 1.0)  # usually one component
    eps = draw(st.sampled_from([1e-3, 1.0, 5.0, 50.0 / eta]))
    inst = from_points(pts, "euclidean", eta, eps, rng.random((pts.shape[0], k)))
    z = rng.random((pts.shape[0], k)) * (rng.random((pts.shape[0], k)) < draw(st.floats(0.2, 1.0)))
    return inst, z


@settings(max_examples=150, deadline=None)
@given(near_duplicate_instance())
def test_property_repair_meets_the_exact_test_on_near_duplicates(data):
    inst, z = data
    assert V.passes(inst, z) == V.verify(inst, z, check_graph=False).passed
    fixed, t_c = V.repair(inst, z)
    cert = V.verify(inst, fixed)
    assert V.passes(inst, fixed)
    assert cert.passed, cert.summary()
    assert cert.max_realised_epsilon <= inst.epsilon * (1 + V.RATIO_TOL)
    assert cert.n_negative == 0 and cert.max_row_sum_error <= 1e-12
    assert np.all((t_c >= 0) & (t_c <= 2))


@settings(max_examples=60, deadline=None)
@given(near_duplicate_instance())
def test_property_certify_output_passes_or_refuses(data):
    inst, z = data
    try:
        out, cert, _ = V.certify(inst, z, max_mix=1.0)
    except PrivacyError:  # only when the repair exceeds max_mix = 1 (unification + mixing)
        return
    assert cert.passed and V.verify(inst, out).passed


def test_single_record_and_single_output():
    one = Instance([1.0], [[3.0, 1.0]], np.zeros((0, 2)), np.zeros(0), 1.0, 1.0)
    assert V.verify(one, np.array([[0.2, 0.8]])).passed
    k1 = path_instance([[1.0], [2.0], [0.5]], [1e-12, 0.3], 50.0)
    fixed, _ = V.repair(k1, np.array([[0.0], [5.0], [1.0]]))
    assert np.array_equal(fixed, np.ones((3, 1))) and V.verify(k1, fixed).passed


# ----------------------------------------------------------------------------- graph vs metric (issue 11)
def test_issue11_finding4_deleted_edges_fail_against_the_metric(grid_small):
    """Edges of record 0 removed from an instance with coordinates: the certificate must fail, even
    for a Z that satisfies every remaining edge (realised eps against the metric: inf)."""
    keep = (grid_small.edges != 0).all(axis=1)
    cut = grid_small.replace(edges=grid_small.edges[keep], distances=grid_small.distances[keep])
    z = np.tile(exponential(grid_small)[1], (grid_small.n_records, 1))
    z[0] = np.eye(grid_small.n_outputs)[0]  # record 0 now reveals itself
    assert V.verify(cut, z, check_graph=False).passed  # the edge table alone is satisfied
    cert = V.verify(cut, z)
    assert not cert.passed and cert.graph_check == "metric" and cert.missing_edges == int((~keep).sum())
    with pytest.raises(PrivacyError, match="missing neighbour pair"):
        V.certify(cut, z)


def test_wrong_stored_distance_fails(grid_small):
    d = grid_small.distances.copy()
    d[3] *= 1 + 1e-6
    cert = V.verify(grid_small.replace(distances=np.minimum(d, grid_small.eta)), exponential(grid_small))
    assert not cert.passed and cert.distance_mismatches == 1 and cert.missing_edges == 0


def test_haversine_graph_check_and_skip_note():
    from mdp_core.problem.datasets.common import from_points as fp

    rng = np.random.default_rng(4)
    pts = np.c_[41.9 + rng.random(30) * 0.05, 12.5 + rng.random(30) * 0.05]
    inst = fp(pts, "haversine", 1.0, 2.0, rng.random((30, 3)), output_record_ids=np.arange(3))
    z = exponential(inst)
    cert = V.verify(inst, z)
    assert cert.passed and cert.graph_check == "metric"
    keep = np.ones(inst.n_edges, bool)
    keep[5] = False
    cert = V.verify(inst.replace(edges=inst.edges[keep], distances=inst.distances[keep]), z)
    assert not cert.passed and cert.missing_edges == 1
    bare = two_records(1.0)  # no coordinates: skipped, with the reason in the certificate
    c = V.verify(bare, np.full((2, 2), 0.5))
    assert c.passed and c.graph_check.startswith("skipped") and c.as_dict()["graph_check"].startswith("skipped")
