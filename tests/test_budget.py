"""Exact privacy arithmetic (mdp_core.declarations.budget) and the release as a library call (mdp_core.release.make)."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdp_core.declarations.budget import (
    Budget,
    Epsilon,
    Guarantee,
    Spend,
    additive_epsilon,
    compose,
    mechanism_epsilon,
    round_up,
    stated_metric,
    this_release,
)
from mdp_core.errors import InputError, PrivacyError

EPS = st.floats(min_value=0.0, max_value=100.0, allow_nan=False, allow_infinity=False)


def test_a_cap_of_0_3_admits_0_1_plus_0_2() -> None:
    assert compose([0.1, 0.2]) == Epsilon.of(0.3)
    assert Budget.of(0.3).admits([0.1], [0.2])
    assert Budget.of(0.3).admits(0.1, Spend.of("counts", 0.2))
    assert Budget.of(0.3).left([0.1, 0.2]) == 0


def test_refused_above_the_cap_by_any_amount() -> None:
    assert not Budget.of(0.3).admits([0.1, 0.2], [1e-300])
    assert not Budget.of(1.0).admits([0.5], [0.5000000000000001])
    assert Budget.of(None).admits([1e9], [1e9])  # no cap: the caller decides whether one is required


def test_epsilon_is_exact_and_refuses_what_is_not_a_budget() -> None:
    assert Epsilon.of(0.1).value == Fraction(1, 10)
    assert Epsilon.of(Fraction(1, 3)).value == Fraction(1, 3)
    assert float(Epsilon.of(0.1)) == 0.1
    for bad in (float("nan"), float("inf"), -0.5, True, "0.1"):
        with pytest.raises(InputError):
            Epsilon.of(bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(EPS, max_size=12), st.randoms())
def test_compose_is_order_independent_and_the_exact_sum(eps: list[float], rnd) -> None:
    shuffled = list(eps)
    rnd.shuffle(shuffled)
    exact = sum((Fraction(repr(x)) for x in eps), Fraction(0))
    assert compose(eps).value == exact
    assert compose(shuffled) == compose(eps)
    assert compose([Spend.of("x", e) for e in eps]) == compose(eps)


@settings(max_examples=200, deadline=None)
@given(EPS, EPS, EPS)
def test_admits_is_exact_comparison(cap: float, a: float, b: float) -> None:
    assert Budget.of(cap).admits([a], [b]) == (Fraction(repr(a)) + Fraction(repr(b)) <= Fraction(repr(cap)))


def test_the_statement_and_the_record() -> None:
    g = Guarantee(0.5, 1.25, 2.0, 1.5, "km", True)
    text = g.statement()
    assert f"exp({stated_metric(0.5, 1.25)} * d(r, r') + 1.5)" in text
    assert "d in km" in text and "stretch 1.25" in text and "up to 2 km apart" in text
    assert "counts, prior" in text and "Dwork and Roth 2014 Thm 3.16" in text
    assert g.record()["metric_epsilon_per_unit"] == 0.625
    assert g.charge() == this_release(0.5, 1.25, 2.0, 1.5) == pytest.approx(0.5 * 1.25 * 2.0 + 1.5, rel=2e-9)
    assert g.charge() >= 0.5 * 1.25 * 2.0 * (1 + 1e-9) + 1.5  # the tolerance, rounded up
    assert "prior" not in Guarantee(0.5, 1.0, 2.0, 1.0, "m", False).statement().split("(microdata")[1][:20]


def test_stated_metric_never_below_what_is_proven() -> None:
    for eps, stretch in ((1.0, 1.0), (0.123456789, 1.7), (10.0, 3.3333333)):
        assert float(stated_metric(eps, stretch)) >= eps * stretch


def test_additive_and_mechanism_charge() -> None:
    assert additive_epsilon({"eps_counts": 0.1, "eps_prior": 0.2}) == 0.3  # exact, not 0.30000000000000004
    assert additive_epsilon({"eps_counts": 1.0}) is None
    assert additive_epsilon({"eps_counts": True, "eps_prior": 0.0}) is None
    charge = mechanism_epsilon(0.5, 2.0, 3.0)  # 3 x (1 + 1e-9): the certificate's tolerance, rounded up
    assert Fraction(repr(charge)) >= Fraction(3) * (1 + Fraction(1, 10**9)) and charge < 3.0 + 4e-9
    for eps, stretch, radius in [(0.1, 1.2345678901234567, 0.3), (10.0, 1.718, 1.0), (7.0, 1.0, 0.7)]:
        exact = Fraction(repr(eps)) * Fraction(stretch) * Fraction(repr(radius)) * (1 + Fraction(1, 10**9))
        got = mechanism_epsilon(eps, stretch, radius)
        assert Fraction(repr(got)) >= exact and got == round_up(exact)  # never below the exact product
    for bad in (0.5, float("inf"), float("nan")):
        with pytest.raises(PrivacyError):
            mechanism_epsilon(1.0, bad, 1.0)


def test_spec_budget_imports_nothing_numerical() -> None:
    code = (
        "import sys, mdp_core.declarations.budget; "
        "bad = [m for m in ('numpy', 'scipy', 'pandas', 'prefect') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_library_makes_a_release_without_prefect(grid_small) -> None:
    """plan (certify, spends), the caller's budget check, then draw and measure: no store, no Prefect."""
    code = """
import sys
import numpy as np
from mdp_core.problem.datasets import grid
from mdp_core.release.door import GraphFacts, Settings, plan_privacy
from mdp_core.release.make import make_release, plan_release
from mdp_core.declarations.budget import Budget, compose

inst = grid(4, 5, n_outputs=6)
z = np.full((inst.n_records, inst.n_outputs), 1.0 / inst.n_outputs)  # equal rows: certified for any eps
door = plan_privacy(Settings(epsilon=inst.epsilon, eta=inst.eta), GraphFacts.recomputed(inst)[0])
plan = plan_release(inst, z, door)
assert [s.kind for s in plan.spends] == ["perturb", "counts"]
assert float(compose(plan.spends)) == plan.guarantee.charge()
assert Budget.of(plan.guarantee.charge()).admits([], plan.spends)
assert not Budget.of(1.0).admits([], plan.spends)
rng = np.random.default_rng(0)
records = rng.integers(0, inst.n_records, 50)
rel = make_release(inst, z, records, np.zeros(inst.n_outputs, dtype=np.int64), plan, rng)
assert rel.n_individuals == 50 and len(rel.microdata) == 50 and rel.counts_sensitivity == 2
assert "prefect" not in sys.modules
print(plan.guarantee.statement())
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "exp(" in out and "d in km" in out


def test_the_library_refuses_an_uncertified_mechanism(grid_small) -> None:
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy
    from mdp_core.release.make import plan_release

    z = np.zeros((grid_small.n_records, grid_small.n_outputs))
    z[:, 0] = 1.0
    z[0] = 0.0
    z[0, 1] = 1.0  # record 0 never reaches output 0, its neighbours always do: no finite eps
    door = plan_privacy(Settings(epsilon=grid_small.epsilon, eta=grid_small.eta), GraphFacts.recomputed(grid_small)[0])
    with pytest.raises(PrivacyError, match="fails its mDP certificate"):
        plan_release(grid_small, z, door)


def test_plan_release_certifies_every_pair_when_the_plan_claims_them() -> None:
    """Three records 0 -- 1 -- 2 (edges of 1 km, 0 and 2 at 1.732 km): a mechanism tight on both edges spends
    eps x 2 km between 0 and 2. It passes the graph's certificate, so a plan over the graph admits it; a plan
    claiming every pair (all_pairs) refuses it, even after a graph-only certify of the same array."""
    from mdp_core.problem.datasets.common import from_points
    from mdp_core.problem.metrics import pairwise
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy
    from mdp_core.release.make import certify, plan_release

    pts = np.array([[0.0, 0.0], [1.0, 0.0], [1.5, np.sqrt(3) / 2]])
    inst = from_points(pts, "euclidean", 1.2, 2.0, pairwise("euclidean", pts, pts[:2]))
    col = np.exp(-2.0 * np.array([0.0, 1.0, 2.0]))
    z = np.column_stack([col / 4, 1.0 - col / 4])
    graph = plan_privacy(Settings(epsilon=2.0, eta=1.2), GraphFacts.recomputed(inst)[0])
    every = plan_privacy(Settings(epsilon=2.0, eta=1.2, all_pairs=True), GraphFacts.recomputed(inst, all_pairs=True)[0])
    certify(inst, z)  # passes over the graph
    assert plan_release(inst, z, graph).guarantee == graph.guarantee
    with pytest.raises(PrivacyError, match="fails its mDP certificate"):
        plan_release(inst, z, every)
