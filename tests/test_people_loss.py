"""bench/people_loss.py (issue 51): the people loss is the report's per-person model, and a real solve on it.

The measurement behind "the people loss does not pay" (bench/HISTORY.md, "What people get: the people loss")
rests on two facts tested here on a real road instance (central Rome, 40 records): sum_i p_i sum_k z_ik c_ik
with the people costs equals mdp_core.release.people's ``release_per_person`` for any mechanism z, and each
cost is the cell's weighted mean distance, computed directly. The solve is real (HiGHS through rowgen).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from mdp_core.problem.datasets import registry
from mdp_core.problem.metrics import haversine_km
from mdp_core.release import people
from mdp_core.solvers.solve import solve

ROOT = Path(__file__).resolve().parents[1]
ROME = ROOT.parent / "shared" / "data" / "rome_center"
pytestmark = pytest.mark.skipif(not ROME.is_dir(), reason="shared Rome data ../shared/data/rome_center absent")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("bench.people_loss")


@pytest.fixture(scope="module")
def rome():
    params = dict(nodes=str(ROME / "nodes.csv"), edges=str(ROME / "edges.csv"), n_records=40, n_outputs=40)
    inst = registry.load("road", params | dict(eta=1.0, epsilon=10.0, loss="distance", seed=3))
    return inst, people.cells(inst, 1.0, per_record=16)


def test_people_costs_are_each_cells_mean_distance(bench, rome) -> None:
    inst, c = rome
    costs = bench.people_costs(inst, c)
    out = inst.output_points()
    latlon = people._latlon(c.space)
    for i in (0, 17, 39):
        mine = c.record == i
        direct = (c.weight[mine] @ haversine_km(latlon[mine], out)) / c.weight[mine].sum()
        np.testing.assert_allclose(costs[i], direct, rtol=1e-9, atol=1e-9)
    # the triangle inequality: |mean_x d(x, o_k) - d(r_i, o_k)| <= mean_x d(x, r_i), the cell's mean snap
    snap, _ = people.cell_means(c, people.release_values(inst, None, c)["snap"], inst.n_records)
    assert np.all(np.abs(costs - inst.costs) <= snap[:, None] + 1e-9)
    assert np.abs(costs - inst.costs).max() > 0.5 * snap.min() > 0  # the people loss is not the distance loss


def test_the_people_objective_is_the_reports_per_person_error(bench, rome) -> None:
    inst, c = rome
    costs = bench.people_costs(inst, c)
    z = np.random.default_rng(0).dirichlet(np.ones(inst.n_outputs), size=inst.n_records)
    mean, _ = people.cell_means(c, people.release_values(inst, z, c)["release"], inst.n_records)
    assert float(inst.prior @ (z * costs).sum(axis=1)) == pytest.approx(float(inst.prior @ mean), rel=1e-9)


def test_a_real_solve_on_the_people_loss_is_no_worse_per_person(bench, rome) -> None:
    inst, c = rome
    costs = bench.people_costs(inst, c)
    by_record = solve(inst, "rowgen", gap_rel=1e-6, support_tau=1e-5)
    by_people = solve(inst.replace(costs=costs), "rowgen", gap_rel=1e-6, support_tau=1e-5)
    per_person = [float(inst.prior @ (s.z * costs).sum(axis=1)) for s in (by_record, by_people)]
    assert per_person[1] <= per_person[0] * (1 + 1e-5)  # the LP optimises what people get
    assert by_people.lower_bound <= per_person[0] * (1 + 1e-6)  # so its bound caps any gain


def test_cell_medians_are_nearer_to_the_people_than_the_records(bench, rome) -> None:
    inst, c = rome
    latlon = people._latlon(c.space)

    def mean_distance(centre: np.ndarray) -> float:
        d = np.array([haversine_km(p[None], centre[r][None])[0, 0] for p, r in zip(latlon, c.record, strict=True)])
        return float(inst.prior @ people.cell_means(c, d, inst.n_records)[0])

    assert mean_distance(bench.cell_medians(inst, c)) < mean_distance(inst.record_points())
