"""CBDP post-processing (Fioretto et al. 2018): consistency, non-negativity, accuracy, baselines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from mdp_core.errors import InputError
from mdp_core.release import postprocess as pp
from mdp_core.release.noise import discrete_laplace


def indicator(labels: np.ndarray) -> sp.csr_matrix:
    """(n_blocks, n) 0/1 matrix: row j sums the elements of block j (the oracle of the level sums)."""
    n = labels.shape[0]
    return sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(int(labels.max()) + 1, n))


def sparse_example(seed: int = 0, u: int = 200, nonzero: int = 8):
    """A sparse universe: 200 cells in 10 zones, 8 non-empty cells."""
    rng = np.random.default_rng(seed)
    c = np.zeros(u, dtype=np.int64)
    c[rng.choice(u, nonzero, replace=False)] = rng.integers(5, 60, nonzero)
    return c, [np.arange(u), np.arange(u) // 20, np.zeros(u, dtype=np.int64)]


def assert_consistent(feats: pp.Features, x: list[np.ndarray]) -> None:
    """Every O2 constraint for every comparable pair holds exactly, and x >= 0."""
    for fine, coarse in feats.order:
        par = _block_parent(feats.labels[fine], feats.labels[coarse])
        summed = np.bincount(par, weights=x[fine], minlength=len(x[coarse]))
        np.testing.assert_array_equal(summed, x[coarse])
    for v in x:
        assert np.all(np.asarray(v) >= 0)


def _block_parent(fine: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    par = np.empty(int(fine.max()) + 1, dtype=np.int64)
    par[fine] = coarse
    return par


def test_partial_order_derived_from_partitions():
    u = 12
    a = np.arange(u) // 3  # 4 blocks
    b = np.arange(u) // 6  # 2 blocks, coarser than a
    crossing = np.arange(u) % 2  # not comparable with a or b
    feats = pp.make_features([np.arange(u), a, b, crossing, np.zeros(u)], u)
    assert set(feats.order) == {(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 4), (2, 4), (3, 4)}
    assert pp.refinement_chain(feats) == [4, 2, 1, 0]


def test_features_that_are_not_partitions_are_rejected():
    with pytest.raises(InputError, match="not a partition"):
        pp.make_features([np.arange(4), [[0, 1], [1, 2, 3]], np.zeros(4)], 4)  # overlap
    with pytest.raises(InputError, match="not a partition"):
        pp.make_features([np.arange(4), [[0, 1], [3]], np.zeros(4)], 4)  # element 2 missing
    with pytest.raises(InputError, match="singletons"):
        pp.make_features([np.arange(4) // 2, np.zeros(4)], 4)
    with pytest.raises(InputError, match="whole universe"):
        pp.make_features([np.arange(4), np.arange(4) // 2], 4)
    with pytest.raises(InputError, match="shape"):
        pp.make_features([np.arange(4), np.zeros(3)], 4)
    with pytest.raises(InputError, match="counts"):
        pp.cbdp(np.array([1, -1, 0]), [np.arange(3), np.zeros(3)], 1.0, 0)
    with pytest.raises(InputError, match="eps_counts"):
        pp.cbdp(np.array([1, 1, 0]), [np.arange(3), np.zeros(3)], 0.0, 0)
    # a list of blocks that is a partition is accepted and means the same as its label array
    f = pp.make_features([np.arange(4), [[2, 3], [0, 1]], np.zeros(4)], 4)
    np.testing.assert_array_equal(f.labels[1], [1, 1, 0, 0])


def test_cbdp_consistent_and_nonnegative_after_rounding():
    c, feats_in = sparse_example(1)
    crossing = np.arange(c.size) % 7  # a feature not nested with the zones (flat structure)
    feats = pp.make_features(feats_in + [crossing], c.size)
    for seed in range(5):
        res = pp.cbdp(c, feats, 0.1, seed)
        integer = res.extra["integer"]
        assert all(v.dtype.kind == "i" for v in integer)
        assert_consistent(feats, integer)
        for fine, coarse in feats.order:
            summed = np.bincount(_block_parent(feats.labels[fine], feats.labels[coarse]), weights=res.estimate[fine])
            np.testing.assert_allclose(summed, res.estimate[coarse], rtol=1e-12, atol=1e-9)
        assert min(v.min() for v in res.estimate) >= 0
        # chain features (total, zones, singletons) end at floor or ceil of the QP value
        for f in pp.refinement_chain(feats):
            assert np.all(np.abs(integer[f] - res.estimate[f]) < 1 + 1e-9)


def test_cbdp_beats_naive_laplace_on_sparse_data():
    """Fioretto et al. section 10: at eps_counts = 0.1 on sparse counts CBDP is more accurate."""
    c, feats_in = sparse_example(2)
    feats = pp.make_features(feats_in, c.size)
    true = [t.astype(float) for t in feats.aggregate(c)]
    cb, lap = [], []
    for seed in range(50):
        cb.append(pp.feature_errors(feats, pp.cbdp(c, feats, 0.1, seed).extra["integer"], true)["mae_singletons"])
        lap.append(pp.feature_errors(feats, pp.laplace_rounded(c, feats, 0.1, seed).estimate, true)["mae_singletons"])
    assert np.mean(cb) < np.mean(lap)
    assert np.mean(cb) < 0.6 * np.mean(lap)


@settings(max_examples=25, deadline=None)
@given(
    u=st.integers(2, 40),
    n_zones=st.integers(1, 6),
    density=st.floats(0.05, 1.0),
    eps=st.sampled_from([0.05, 0.3, 1.0, 5.0]),
    seed=st.integers(0, 10_000),
)
def test_theorem_8_3_bound(u, n_zones, density, eps, seed):
    """||x* - c||_{2,w} <= 2 ||c~ - c||_{2,w} for the QP optimum x* (weights 1/n_i)."""
    rng = np.random.default_rng(seed)
    c = np.where(rng.random(u) < density, rng.integers(0, 30, u), 0)
    feats = pp.make_features([np.arange(u), rng.integers(0, n_zones, u), rng.integers(0, 3, u), np.zeros(u)], u)
    res = pp.cbdp(c, feats, eps, seed)
    true = feats.aggregate(c)
    lhs = pp.weighted_l2(res.estimate, true)
    rhs = 2 * pp.weighted_l2(res.noisy, true)
    assert lhs <= rhs * (1 + 1e-6) + 1e-6
    # and x* is at least as close to the observations as the true counts (optimality step)
    assert pp.weighted_l2(res.estimate, res.noisy) <= pp.weighted_l2(true, res.noisy) * (1 + 1e-6) + 1e-6
    assert_consistent(feats, res.extra["integer"])


def test_qp_matches_projected_gradient_reference():
    """The HiGHS QP optimum agrees with an independent solver (scipy L-BFGS-B on y >= 0)."""
    from scipy.optimize import minimize

    c, feats_in = sparse_example(3, u=30, nonzero=6)
    feats = pp.make_features([np.arange(30), np.arange(30) // 5, np.zeros(30)], 30)
    rng = np.random.default_rng(4)
    noisy = pp.laplace_noise([t.astype(float) for t in feats.aggregate(c)], 0.2, rng)
    qp = pp.consistent_qp(feats, noisy)
    mats = [indicator(lab) for lab in feats.labels]
    w = [1.0 / s for s in feats.sizes]

    def f(y):
        r = [m @ y - t for m, t in zip(mats, noisy, strict=True)]
        return sum(wi * ri @ ri for wi, ri in zip(w, r, strict=True)), sum(
            2 * wi * (m.T @ ri) for wi, m, ri in zip(w, mats, r, strict=True)
        )

    ref = minimize(
        f,
        np.full(30, 1.0),
        jac=True,
        bounds=[(0, None)] * 30,
        method="L-BFGS-B",
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000},
    )
    assert f(qp.x[0])[0] <= ref.fun + 1e-6 * max(1.0, abs(ref.fun))
    np.testing.assert_allclose(qp.x[0], ref.x, atol=1e-3)


def test_tree_least_squares_is_the_weighted_least_squares_solution():
    """The two-pass tree estimate equals the GLS solution computed by dense linear algebra."""
    rng = np.random.default_rng(5)
    u = 12
    levels = [np.zeros(u, dtype=np.int64), np.arange(u) // 6, np.arange(u) // 2, np.arange(u)]
    var = np.array([3.0, 0.5, 2.0, 1.0])
    noisy = [rng.normal(size=int(lab.max()) + 1) * 5 for lab in levels]
    x = pp.tree_least_squares(levels, noisy, var)
    a = np.vstack([indicator(lab).toarray() for lab in levels])  # rows: every node; columns: leaves
    wts = np.concatenate([np.full(int(lab.max()) + 1, 1.0 / v) for lab, v in zip(levels, var, strict=True)])
    leaves = np.linalg.lstsq(a * np.sqrt(wts)[:, None], np.concatenate(noisy) * np.sqrt(wts), rcond=None)[0]
    for lab, xl in zip(levels, x, strict=True):
        np.testing.assert_allclose(xl, indicator(lab) @ leaves, atol=1e-10)


def test_hierarchical_baseline_consistent_without_nonnegativity():
    c, feats_in = sparse_example(6)
    feats = pp.make_features(feats_in, c.size)
    res = pp.hierarchical(c, feats, 0.1, 0)
    assert res.extra["levels"] == 3
    assert abs(sum(res.extra["level_eps"]) - 0.1) < 1e-12
    np.testing.assert_allclose(np.bincount(feats.labels[1], weights=res.estimate[0]), res.estimate[1], atol=1e-8)
    assert res.estimate[0].min() < 0  # no non-negativity: sparse data gives negative cells
    geo = pp.hierarchical(c, feats, 0.1, 0, budget="geometric")
    assert geo.extra["level_eps"][-1] > geo.extra["level_eps"][0]
    with pytest.raises(InputError):
        pp.hierarchical(c, feats, 0.1, 0, budget="nope")


def test_laplace_baseline_rounds_to_nonnegative_integers():
    c, feats_in = sparse_example(7)
    res = pp.laplace_rounded(c, feats_in, 0.1, 3)
    assert res.estimate[0].dtype.kind == "i" and res.estimate[0].min() >= 0
    np.testing.assert_array_equal(res.estimate[0], np.maximum(np.rint(res.noisy[0]), 0))
    # sparse data: the rounded Laplace total is biased far upwards
    assert res.estimate[2][0] > c.sum() + 100


def test_seeded_and_deterministic():
    c, feats_in = sparse_example(8)
    a, b = pp.cbdp(c, feats_in, 0.5, 11), pp.cbdp(c, feats_in, 0.5, 11)
    for x, y in zip(a.extra["integer"], b.extra["integer"], strict=True):
        np.testing.assert_array_equal(x, y)
    d = pp.cbdp(c, feats_in, 0.5, 12)
    assert not np.array_equal(a.noisy[0], d.noisy[0])


def _measure(true, sensitivity, eps):
    return discrete_laplace(true, sensitivity, eps)


def test_release_counts_of_true_data_schema_consistency_and_noise():
    rng = np.random.default_rng(9)
    k = 40
    cells = rng.integers(0, 60, k)
    zones = np.array(["north", "south", "east", "west"])[np.arange(k) % 4]
    df, meas = pp.release_counts(cells, zones, 1.0, _measure)
    assert list(df.columns) == pp.AGGREGATE_COLUMNS
    assert list(df["level"].unique()) == ["total", "zone", "output"]
    assert len(df) == 1 + 4 + k
    outs, zs, tot = (df[df.level == lv] for lv in ("output", "zone", "total"))
    assert df["count"].dtype == np.int64 and (df["count"] >= 0).all()
    assert tot["count"].iloc[0] == cells.sum()  # the total is n, public, released exactly
    assert outs["count"].sum() == cells.sum()
    zone_idx = np.unique(zones, return_inverse=True)[1]
    np.testing.assert_array_equal(np.bincount(zone_idx, weights=outs["count"].to_numpy()), zs["count"].to_numpy())
    assert not np.array_equal(outs["count"].to_numpy(), cells)  # noisy, not the true counts
    assert np.abs(outs["count"].to_numpy() - cells).mean() < 4 * meas.scale
    # noise scale: L1 sensitivity 2 per noisy level (one individual moves), two noisy levels
    assert meas.sensitivity == 4 and meas.scale == pytest.approx(4.0) and meas.epsilon <= 1.0 + 1e-12
    assert (outs.noise_scale * outs.eps_counts == 4.0).all() and tot.noise.iloc[0] == "none"
    no_zone, m2 = pp.release_counts(cells, None, 2.0, _measure)
    assert list(no_zone["level"].unique()) == ["total", "output"] and m2.sensitivity == 2 and m2.scale == 1.0
    with pytest.raises(InputError):
        pp.release_counts(np.array([1, -1]), None, 1.0, _measure)
    with pytest.raises(InputError):
        pp.release_counts(cells, zones, 0.0, _measure)


def test_release_counts_reuses_a_given_measurement_deterministically():
    cells = np.arange(10)
    fixed = pp.release_counts(cells, None, 1.0, _measure)[1]

    def replay(true, sensitivity, eps):
        return fixed

    a, _ = pp.release_counts(cells, None, 1.0, replay)
    b, _ = pp.release_counts(cells, None, 1.0, replay)
    pd.testing.assert_frame_equal(a, b)


def test_error_curve_shape_and_trend():
    c, feats_in = sparse_example(10)
    df = pp.error_curve(c, feats_in, [0.1, 1.0], n_seeds=5)
    assert list(df.columns) == ["eps_counts", "method", "mae_singletons", "mae_features", "weighted_l2", "n_repeats"]
    assert len(df) == 8
    cb = df[df.method == "cbdp"].set_index("eps_counts")
    assert cb.loc[1.0, "mae_singletons"] < cb.loc[0.1, "mae_singletons"]


def test_released_mdp_histogram_as_extra_observation():
    """Adding the released histogram (expectation Z^T h) to the QP sharpens the secret-count estimate."""
    from mdp_core.problem.datasets import grid
    from mdp_core.release import perturb
    from mdp_core.solvers.mechanisms import exponential

    inst = grid(6, 7, n_outputs=None, epsilon=6.0, eta=1.5, seed=0)
    z = exponential(inst)
    prior = np.zeros(42)
    prior[[3, 10, 11, 30]] = [0.4, 0.3, 0.2, 0.1]
    rec = perturb.draw_individuals(prior, 400, np.random.default_rng(1))
    h = np.bincount(rec, minlength=42)
    released = np.bincount(perturb.perturb(z, rec, np.random.default_rng(2)), minlength=42)
    feats = pp.make_features([np.arange(42), inst.records["row"].to_numpy(), np.zeros(42)], 42)
    true = [t.astype(float) for t in feats.aggregate(h)]
    b = 3 / 0.1  # Laplace scale of each of the k = 3 feature queries at eps_counts = 0.1
    obs = pp.mdp_histogram_observation(z, released, weight=(1 / 42) * 2 * b**2 / released.mean())
    plain, with_obs = [], []
    for seed in range(10):
        plain.append(pp.feature_errors(feats, pp.cbdp(h, feats, 0.1, seed).estimate, true)["mae_singletons"])
        res = pp.cbdp(h, feats, 0.1, seed, observations=[obs])
        with_obs.append(pp.feature_errors(feats, res.estimate, true)["mae_singletons"])
        assert_consistent(feats, res.extra["integer"])
    assert np.mean(with_obs) < 0.5 * np.mean(plain)
    with pytest.raises(InputError):
        pp.mdp_histogram_observation(z, released[:-1])


def test_hierarchical_keeps_each_count_on_its_own_element_when_zones_interleave():
    """Regression: the tree's finest level numbers blocks in tree order (zone by zone); with zones
    that interleave the elements, the leaves must still be mapped back element by element."""
    counts = np.array([40, 35, 50, 30, 45, 38, 32, 30])
    feats = [np.arange(8), np.array([0, 0, 0, 1, 1, 1, 1, 0]), np.zeros(8, dtype=np.int64)]
    est = pp.hierarchical(counts, feats, 1e6, seed=0).estimate[0]
    np.testing.assert_allclose(est, counts, atol=1e-3)


@settings(max_examples=25, deadline=None)
@given(
    cells=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    n_zones=st.integers(1, 5),
    eps=st.floats(0.05, 5.0),
)
def test_release_counts_invariants(cells, n_zones, eps):
    """Whatever the noise: non-negative integers, the total is n exactly, outputs sum to their zones."""
    c = np.asarray(cells, dtype=np.int64)
    zones = np.arange(c.size) % n_zones
    df, meas = pp.release_counts(c, zones, eps, _measure)
    assert df["count"].dtype == np.int64 and (df["count"] >= 0).all()
    outs = df[df.level == "output"].sort_values("block")["count"].to_numpy()
    assert int(df[df.level == "total"]["count"].iloc[0]) == c.sum() == outs.sum()
    if (df.level == "zone").any():
        zs = df[df.level == "zone"].sort_values("block")["count"].to_numpy()
        np.testing.assert_array_equal(np.bincount(zones, weights=outs).astype(np.int64), zs)
    assert meas.epsilon <= eps * (1 + 1e-9)
