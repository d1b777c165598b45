"""The shared privacy rows and Lagrangian bound (mdp_core.solvers.privacy_rows) against independent LP solves."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.verify import MAX_LOG_RATIO


def test_rows_balanced_capped_and_numbered():
    """Row j = s (z[a, k] - g z[b, k]), s = 1/sqrt(g); g capped at e^MAX_LOG_RATIO; (pair, k) C order."""
    edges, dist = np.array([[0, 1], [1, 2]]), np.array([1.0, 4.0])
    p = pr.pairs(edges, dist, 10.0)  # eps d = 10 and 40 (capped)
    assert p.a.tolist() == [0, 1, 1, 2] and p.b.tolist() == [1, 2, 0, 1]
    assert p.capped.tolist() == [False, True, False, True]
    np.testing.assert_allclose(p.g, np.exp([10.0, MAX_LOG_RATIO, 10.0, MAX_LOG_RATIO]))
    a, capped = pr.all_rows(p, 3, 2)
    assert a.shape == (8, 6) and capped.tolist() == [False, False, True, True, False, False, True, True]
    dense = a.toarray()
    for j in range(8):
        e, k = divmod(j, 2)
        row = np.zeros(6)
        row[p.a[e] * 2 + k] = 1.0
        row[p.b[e] * 2 + k] = -p.g[e]
        np.testing.assert_allclose(dense[j], row / np.sqrt(p.g[e]), rtol=1e-15)
    raw, _ = pr.all_rows(p, 3, 2, balanced=False)
    assert sorted(set(raw.data.round(6))) == sorted({1.0, *(-p.g).round(6)})


def test_rows_drop_records_outside_the_model():
    """cols = -1 drops a record's term; the two sides built with complementary maps add up to the row."""
    p = pr.pairs(np.array([[0, 1], [1, 2]]), np.array([0.5, 0.7]), 3.0)
    ei, ki = np.repeat(np.arange(p.size), 2), np.tile(np.arange(2), p.size)
    left = pr.rows(p, ei, ki, np.array([0, -1, 4]), 6)
    right = pr.rows(p, ei, ki, np.array([-1, 2, -1]), 6)
    full = pr.rows(p, ei, ki, np.arange(3) * 2, 6)
    assert left.nnz + right.nnz == full.nnz == 2 * ei.size
    np.testing.assert_array_equal((left + right).toarray(), full.toarray())


def test_min_sum_and_stack():
    costs = np.array([[1.0, 2.0], [0.5, 0.1]])
    assert pr.min_sum(costs, np.zeros(4)) == pytest.approx(1.1)
    assert pr.min_sum(costs, np.array([[1.0, -0.5], [0.0, 1.0]])) == pytest.approx(1.5 + 0.5)
    t = pr.stack([pr.Terms(np.ones(2)), pr.Terms(np.zeros(2), np.ones(2))])
    assert t.exact.tolist() == [[1.0, 0.0], [1.0, 0.0]] and t.capped is not None
    assert t.capped.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    assert pr.stack([pr.Terms(np.ones(2))]).capped is None


def _lp(weighted: np.ndarray, a: sp.spmatrix) -> tuple[float, np.ndarray]:
    """min weighted . z s.t. a z <= 0, rows of z distributions, z >= 0 (scipy's HiGHS, tight tolerances):
    (optimum, duals of the a rows)."""
    n, k = weighted.shape
    unit = sp.kron(sp.eye(n), np.ones((1, k)))
    res = linprog(
        weighted.ravel(),
        A_ub=a,
        b_ub=np.zeros(a.shape[0]),
        A_eq=unit,
        b_eq=np.ones(n),
        bounds=(0, None),
        method="highs",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    assert res.status == 0
    return float(res.fun), np.asarray(res.ineqlin.marginals)


@st.composite
def instances(draw, max_eps_d: float):
    """A random connected graph on 2..6 records, K 1..4, costs >= 0, eps d up to ``max_eps_d``."""
    n = draw(st.integers(2, 6))
    k = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    chain = np.c_[np.arange(n - 1), np.arange(1, n)]
    extra = np.array([(i, j) for i in range(n) for j in range(i + 2, n) if rng.random() < 0.4]).reshape(-1, 2)
    edges = np.r_[chain, extra].astype(np.int64)
    eps = draw(st.floats(0.5, 3.0))
    dist = rng.uniform(0.05, max_eps_d / eps, edges.shape[0])
    weighted = rng.dirichlet(np.ones(n))[:, None] * rng.uniform(0, 5, (n, k))
    return weighted, edges, dist, eps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_eps_d=45.0), st.integers(0, 2**32 - 1))
def test_property_bound_below_lp_optimum_with_real_cap(case, seed):
    """eps d up to 45 (rows above 30 capped): for random multipliers lam >= 0 and for the LP's own
    duals the bound is <= the capped LP's optimum (>= the exact one)."""
    weighted, edges, dist, eps = case
    n, k = weighted.shape
    a, capped = pr.all_rows(pr.pairs(edges, dist, eps), n, k)
    opt, duals = _lp(weighted, a)
    rng = np.random.default_rng(seed)
    for y in (duals, -rng.exponential(rng.choice([1e-3, 1.0, 1e3]), a.shape[0]), np.zeros(a.shape[0])):
        assert pr.lagrangian_bound(weighted, pr.dual_terms(a, capped, y)) <= opt + 1e-9 * max(1.0, opt)
    if not capped.any():  # and tight with the optimal duals
        assert pr.lagrangian_bound(weighted, pr.dual_terms(a, capped, duals)) >= opt - 1e-7 * max(1.0, opt)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],  # one cap for all examples
)
@given(instances(max_eps_d=6.0), st.integers(0, 2**32 - 1))
def test_property_capped_rule_against_the_exact_lp(monkeypatch_cap, case, seed):
    """With the cap lowered to 2.5 (G = e^2.5, so w = K / G is large enough to matter) the bound from
    the *capped* LP's optimal duals and from random multipliers stays below the *exact* (uncapped)
    LP's optimum: the capped-row rule of the module docstring, checked where it can fail."""
    weighted, edges, dist, eps = case
    n, k = weighted.shape
    exact_rows, _ = pr.all_rows(pr.Pairs(*_exact_pairs(edges, dist, eps)), n, k)
    exact_opt, _ = _lp(weighted, exact_rows)
    a, capped = pr.all_rows(pr.pairs(edges, dist, eps), n, k)
    _, duals = _lp(weighted, a)
    rng = np.random.default_rng(seed)
    for y in (duals, -rng.exponential(rng.choice([1e-2, 1.0, 1e2]), a.shape[0])):
        assert pr.lagrangian_bound(weighted, pr.dual_terms(a, capped, y)) <= exact_opt + 1e-9


def _exact_pairs(edges: np.ndarray, dist: np.ndarray, eps: float) -> tuple[np.ndarray, ...]:
    a, b = np.r_[edges[:, 0], edges[:, 1]], np.r_[edges[:, 1], edges[:, 0]]
    logr = eps * np.r_[dist, dist]
    return a, b, np.exp(logr), np.zeros(a.size, dtype=bool)


@pytest.fixture
def monkeypatch_cap(monkeypatch):
    monkeypatch.setattr(pr, "MAX_LOG_RATIO", 2.5)


def test_capped_multipliers_need_the_rule(monkeypatch_cap):
    """Without the rule the capped LP's own dual bound exceeds the exact optimum (so the property test
    above can fail); with it, it does not. Two records, one output each cheap for the other."""
    weighted = np.array([[0.0, 1.0], [1.0, 0.0]])
    edges, dist, eps = np.array([[0, 1]]), np.array([5.0]), 1.0  # eps d = 5 > cap 2.5
    exact_rows, _ = pr.all_rows(pr.Pairs(*_exact_pairs(edges, dist, eps)), 2, 2)
    exact_opt, _ = _lp(weighted, exact_rows)
    a, capped = pr.all_rows(pr.pairs(edges, dist, eps), 2, 2)
    cap_opt, duals = _lp(weighted, a)
    terms = pr.dual_terms(a, capped, duals)
    assert terms.capped is not None
    naive = pr.min_sum(weighted, terms.exact + terms.capped)
    assert naive == pytest.approx(cap_opt, abs=1e-9) and naive > exact_opt + 1e-3
    assert pr.lagrangian_bound(weighted, terms) <= exact_opt + 1e-12
    assert pr.uncap(naive, weighted) <= exact_opt + 1e-12
