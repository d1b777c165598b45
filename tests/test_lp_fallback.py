"""When dual simplex breaks down the exact LP must still return a certified optimum, by falling back to
interior point (``mdp_core.solvers.highs.run_robust`` with ``SWITCH_ALGORITHM``), and say so.

The 10 x 20 grid at eps = 2 / km broke HiGHS 1.11's dual simplex numerically (model status "Not Set" after
~30 s; ratio chains reach e^40 across the grid); the HiGHS installed today solves it by simplex alone, so
the fallback itself is exercised by a breakdown forced for real (a simplex iteration limit of 1 on a small
grid: HiGHS stops with status iteration_limit, and interior point must answer with the same optimum)."""

from __future__ import annotations

import re
import time

import pytest

from mdp_core.problem.datasets import grid
from mdp_core.solvers import highs, lp
from mdp_core.solvers.solve import solve


def test_a_simplex_breakdown_falls_back_to_interior_point_with_the_same_optimum():
    inst = grid(6, 8, n_outputs=20, epsilon=2.0, eta=2.0, seed=0)
    model = lp.build_pmo(inst.prior[:, None] * inst.costs, inst.edges, inst.distances, inst.epsilon)
    options = highs.SolverOptions()

    def fresh():
        h = highs.new_highs(options, 120)
        highs.pass_model(h, model)
        return h

    reference = highs.run(fresh())
    assert reference.status == highs.Status.OPTIMAL and reference.fallback is None
    broken = fresh()
    broken.setOptionValue("simplex_iteration_limit", 1)  # dual simplex cannot finish: a real breakdown
    accept = frozenset({highs.Status.OPTIMAL})
    deadline = time.perf_counter() + 120
    sol = highs.run_robust(broken, highs.SWITCH_ALGORITHM, accept=accept, solver="simplex", deadline=deadline)
    assert sol.status == highs.Status.OPTIMAL
    assert sol.fallback == "ipm after simplex failed (iteration_limit)"
    assert sol.objective == pytest.approx(reference.objective, rel=1e-7)
    # without a retry the breakdown is the answer: the fallback is what made it optimal
    again = fresh()
    again.setOptionValue("simplex_iteration_limit", 1)
    assert highs.run_robust(again, (), accept=accept, solver="simplex").status != highs.Status.OPTIMAL


@pytest.mark.slow
def test_eps2_grid_solves_certified_and_names_any_fallback():
    inst = grid(10, 20, n_outputs=100, epsilon=2.0, eta=2.0, seed=0)
    sol = solve(inst, "lp")
    assert sol.status == "optimal" and sol.certificate.passed
    assert sol.lower_bound is not None and sol.lower_bound <= sol.objective + 1e-12
    assert sol.gap <= 1e-6 * sol.objective
    # a fallback, when one answered, names its component (the grid is one) and the failed status
    assert sol.extra["n_components"] == 1
    for fallback in sol.extra["fallbacks"]:
        assert re.fullmatch(r"component 1: (ipm after simplex failed \(.+\)|retry.* after .+)", fallback), fallback
