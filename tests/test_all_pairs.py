"""Every pair in the metric (``SolverOptions.all_pairs``, issue 51): the verifier, the metric closure, the
repair, the exact LP over every pair and row generation's lazy rows agree.

The reference is the exact LP over every two records of a component (``lp`` with ``all_pairs``), solved
outright on small instances; every mechanism is checked by an independent brute-force test of every pair
(numpy, the full (N, N, K) array, which only small instances allow).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mdp_core.declarations.methods import RowgenOptions
from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, registry, synthetic
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.graph import components
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import pairwise
from mdp_core.release.protection import graph_protection, metric_epsilon
from mdp_core.solvers import rowgen
from mdp_core.solvers.mechanisms import column_majorant, smooth_to_mdp
from mdp_core.solvers.metric_pairs import MetricPairs
from mdp_core.solvers.result import Status
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import certify, objective, repair, verify, write_mechanism

ROME = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "rome_center"
needs_rome = pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data absent")
ALL = SolverOptions(all_pairs=True)


def worst_excess(inst: Instance, z: np.ndarray) -> float:
    """Brute force, independent of the library's scans: max over every ordered pair (i, j) of one component and
    every output of (ln z_ik - ln z_jk) / (eps d_ij) - 1 (inf for a zero opposite a non-zero; -1 when none)."""
    d = pairwise(inst.metric, inst.record_points(), inst.record_points())
    _, labels = components(inst.n_records, inst.edges)
    same = (labels[:, None] == labels[None, :]) & ~np.eye(inst.n_records, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        lz = np.log(z)
        diff = lz[:, None, :] - lz[None, :, :]
        diff = np.where(np.isnan(diff), 0.0, diff).max(axis=2)
        rel = np.where(same, diff / (inst.epsilon * d), -np.inf) - 1.0
    return float(rel.max(initial=-1.0))


def rome(n: int, k: int, seed: int = 0) -> Instance:
    """A small instance of the release class: Rome road nodes, distance loss, eta 1 km, eps 10 / km."""
    return registry.load(
        "road",
        dict(
            nodes=str(ROME / "nodes.csv"),
            edges=str(ROME / "edges.csv"),
            n_records=n,
            n_outputs=k,
            eta=1.0,
            epsilon=10.0,
            loss="distance",
            seed=seed,
        ),
    )


def skewed(inst: Instance, seed: int = 3) -> Instance:
    """``inst`` with a skewed prior, as a DP histogram of people gives: seeded lognormal weights (sigma 1.2)."""
    w = np.exp(np.random.default_rng(seed).normal(0.0, 1.2, inst.n_records))
    return inst.replace(prior=w / w.sum())


def triangle() -> Instance:
    """Three records: 0 -- 1 -- 2 joined by edges of 1 km, 0 and 2 at 1.732 km (beyond eta = 1.2): the graph's
    path between them is 2 km, so a graph-certified mechanism may spend eps x 2 km on the pair."""
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [1.5, np.sqrt(3) / 2]])
    return from_points(pts, "euclidean", 1.2, 2.0, pairwise("euclidean", pts, pts[:2]))


def test_the_verifier_finds_a_violation_in_a_far_pair_that_the_graph_check_misses():
    inst = triangle()
    assert inst.n_edges == 2
    col = np.exp(-2.0 * np.array([0.0, 1.0, 2.0]))  # tight on both edges, e^{2 eps} between 0 and 2
    z = np.column_stack([col / 4, 1.0 - col / 4])
    graph = verify(inst, z)
    every = verify(inst, z, all_pairs=True)
    assert worst_excess(inst, z) > 0
    assert graph.passed and graph.pairs == "graph"
    assert not every.passed and every.pairs == "all" and every.n_metric_pairs == 1
    assert every.n_violations >= 1 and set(every.worst_pair[:2]) == {0, 2}
    assert every.max_realised_epsilon > inst.epsilon * 1.1
    fixed, cert, rep = certify(inst, z, max_mix=1.0, all_pairs=True)
    assert cert.passed and rep.applied and worst_excess(inst, fixed) <= 1e-9


def test_the_metric_closure_is_the_brute_force_max_and_meets_every_pair():
    inst = synthetic(n_records=30, n_outputs=6, sigma=1.0, eta=0.8, epsilon=3.0, seed=4)
    rng = np.random.default_rng(0)
    z = rng.random((30, 6)) ** 4
    m, roots = MetricPairs.of(inst).majorant(z, roots=True)
    d = pairwise(inst.metric, inst.record_points(), inst.record_points())
    _, labels = components(inst.n_records, inst.edges)
    same = labels[:, None] == labels[None, :]
    want = np.max(np.where(same[:, :, None], np.log(z)[None, :, :] - inst.epsilon * d[:, :, None], -np.inf), axis=1)
    np.testing.assert_allclose(np.log(m), want, rtol=0, atol=1e-12)
    raised = m > z
    assert np.all(roots[~raised] == np.broadcast_to(np.arange(30)[:, None], z.shape)[~raised])
    r = roots[raised]
    assert not np.any(m[r, np.nonzero(raised)[1]] > z[r, np.nonzero(raised)[1]])  # roots are not raised
    assert worst_excess(inst, m) <= 1e-12
    smooth, _ = smooth_to_mdp(inst, z, metric=MetricPairs.of(inst))
    assert verify(inst, smooth, all_pairs=True).passed and worst_excess(inst, smooth) <= 1e-9


def test_repair_over_every_pair_passes_the_brute_force_check():
    inst = grid(5, 6, n_outputs=7, eta=1.5, epsilon=2.0)
    z = np.random.default_rng(1).random((30, 7))
    fixed, mix = repair(inst, z, all_pairs=True)
    assert worst_excess(inst, fixed) <= 1e-9 and verify(inst, fixed, all_pairs=True).passed
    graph_only, _ = repair(inst, z)
    assert verify(inst, graph_only).passed and mix.max() >= 0


@pytest.mark.parametrize(
    "inst",
    [
        pytest.param(grid(6, 6, n_outputs=10, eta=1.5, epsilon=2.0), id="grid"),
        pytest.param(skewed(grid(6, 6, n_outputs=10, eta=1.5, epsilon=2.0)), id="grid-skewed-prior"),
        pytest.param(synthetic(n_records=40, n_outputs=8, sigma=1.0, eta=1.0, epsilon=3.0, seed=1), id="components"),
        pytest.param(synthetic(n_records=50, n_outputs=10, eta=1.0, epsilon=4.0, seed=5), id="synthetic"),
    ],
)
def test_rowgen_over_every_pair_matches_the_exact_lp(inst):
    ref = solve(inst, "lp", ALL)
    graph = solve(inst, "lp")
    assert ref.certificate.pairs == "all" and ref.status == Status.OPTIMAL
    assert worst_excess(inst, ref.z) <= 1e-9
    assert ref.objective >= graph.lower_bound - 1e-12  # every pair is a tighter problem
    for args in ({}, {"support_tau": 1e-5}, {"lp_solver": "simplex"}):
        sol = solve(inst, "rowgen", ALL, gap_rel=1e-7, **args)
        assert sol.status == Status.OPTIMAL and sol.certificate.pairs == "all" and sol.extra["pairs"] == "all"
        assert worst_excess(inst, sol.z) <= 1e-9
        assert sol.lower_bound <= ref.objective * (1 + 1e-9) and ref.lower_bound <= sol.objective * (1 + 1e-9)
        assert sol.objective == pytest.approx(ref.objective, rel=2e-7)


@pytest.mark.slow
@needs_rome
def test_rome_release_class_every_pair_matches_the_exact_lp_and_states_eps():
    inst = rome(60, 30)
    ref = solve(inst, "lp", ALL)
    sol = solve(inst, "auto", ALL, gap_rel=1e-6)
    graph = solve(inst, "auto", gap_rel=1e-6)
    assert sol.extra["auto"]["method"] == "rowgen"
    assert sol.objective == pytest.approx(ref.objective, rel=2e-6)
    assert worst_excess(inst, sol.z) <= 1e-9 and worst_excess(inst, ref.z) <= 1e-9
    assert worst_excess(inst, graph.z) > 1e-6  # the graph-only mechanism spends more than eps on a far pair
    assert graph.objective <= sol.objective * (1 + 1e-6)


def test_auto_over_every_pair_uses_rowgen_and_the_rounds_add_far_rows():
    inst = grid(6, 6, n_outputs=10, eta=1.5, epsilon=2.0)
    sol = solve(inst, "auto", ALL, gap_rel=1e-6)
    assert sol.extra["auto"]["method"] == "rowgen" and "all_pairs" in sol.extra["auto"]["reason"]
    assert sol.extra["metric_rows_found"] > 0
    assert sol.extra["full_rows"] == 36 * 35 * 10


def test_far_rows_are_chosen_once_and_held_rows_are_skipped():
    inst = grid(5, 5, n_outputs=4, eta=1.5, epsilon=2.0)
    rows = rowgen._Rows.of(inst, all_pairs=True)
    z = np.zeros((25, 4))
    z[0, 0] = 1.0
    z[1:, 0], z[1:, 1:] = 1e-6, (1 - 1e-6) / 3  # record 0 alone on output 0: every far pair (0, j) breaks
    ei, ki = rowgen.far_violated(z, rows, 1e-12, 10**6)
    far = 24 - int((inst.edges == 0).any(axis=1).sum())  # one component: record 0's pairs that are not edges
    a, b = rows.pairs.a[ei], rows.pairs.b[ei]
    assert np.all(ei >= rows.n_edge) and np.all(a != b)
    assert np.sum((a == 0) & (ki == 0)) == far and np.sum((b == 0) & (ki > 0)) == 3 * far
    rows.hold(ei, ki)
    again, _ = rowgen.far_violated(z, rows, 1e-12, 10**6)
    assert again.size == 0
    few, _ = rowgen.far_violated(z * 1.0, rowgen._Rows.of(inst, all_pairs=True), 1e-12, 3)
    assert few.size == 3


@pytest.mark.slow  # a release's or a solve's seconds (docs/development.md: over ~3 s)
def test_far_rows_come_in_bulk_where_the_far_pairs_are_worth_the_gap():
    """far_count: a point that meets every edge but not every pair at a low rate (the graph-only optimum of a city
    grid, skewed prior) gets the bulk of far rows; a point private over every pair gets the few, unless no edge row
    is left (then only far rows can raise the bound); a gap target far above what the far pairs are worth, the few."""
    inst = skewed(grid(6, 7, n_outputs=42, eta=2.0, epsilon=2.0, cell_km=1.0, loss="distance"))
    metric = MetricPairs.of(inst)
    params = RowgenOptions(gap_rel=1e-2)
    bulk, few, limit = max(rowgen.FAR_ROWS_MIN, 20_000 // rowgen.FAR_ROWS_SHARE), rowgen.FAR_ROWS_FEW, 20_000
    graph = solve(inst, "lp").z
    every = solve(inst, "lp", ALL).z
    assert worst_excess(inst, graph) > 1e-3 and worst_excess(inst, every) <= 1e-9

    def count(z: np.ndarray, p: RowgenOptions, edges_violated: bool = True) -> int:
        return rowgen.far_count(inst, z, column_majorant(inst, z), metric, p, limit, edges_violated)

    worth = float(np.sum(inst.prior[:, None] * inst.costs * (metric.majorant(graph)[0] - graph)))
    assert worth > rowgen.FAR_COST_SHARE * 1e-2 * objective(inst, graph)  # the far pairs matter at a 1 % gap
    assert count(graph, params) == bulk
    assert count(every, params) == few
    assert count(every, params, edges_violated=False) == bulk
    assert count(graph, RowgenOptions(gap_rel=10 * worth / objective(inst, graph))) == few


def test_all_pairs_is_refused_where_it_cannot_be_certified(tmp_path):
    inst = grid(3, 3, n_outputs=3)
    with pytest.raises(InputError, match="all_pairs"):
        solve(inst, "colgen", ALL)
    table_only = Instance(inst.prior, inst.costs, inst.edges, inst.distances, inst.epsilon, inst.eta, metric="graph")
    with pytest.raises(InputError, match="coordinates"):
        solve(table_only, "lp", ALL)
    sol = solve(inst, "lp", ALL)
    info = write_mechanism(inst, sol.z, tmp_path, sol.solve_info())
    assert info["certificate"]["pairs"] == "all" and info["options"]["all_pairs"] is True
    assert info["certificate"]["n_metric_pairs"] == 9 * 8 // 2 - inst.n_edges


def test_baselines_are_certified_over_every_pair():
    inst = grid(4, 5, n_outputs=6, eta=1.5, epsilon=2.0)
    for method in ("exp", "laplace"):
        sol = solve(inst, method, ALL)
        assert sol.certificate.pairs == "all" and worst_excess(inst, sol.z) <= 1e-9


def test_protection_states_stretch_one_when_every_pair_is_certified():
    inst = triangle()
    graph = graph_protection(inst, inst.edges, inst.distances, radius=1.2)
    every = graph_protection(inst, inst.edges, inst.distances, radius=1.2, all_pairs=True)
    assert graph.stretch == pytest.approx(2.0 / np.sqrt(3))
    assert every.stretch == every.stretch_within == 1.0 and every.worst_pair is None and every.exact
    assert every.n_components == graph.n_components
    sol = solve(inst, "lp", ALL)
    assert metric_epsilon(inst, sol.z) <= inst.epsilon * every.stretch * (1 + 1e-9)
    table_only = Instance(inst.prior, inst.costs, inst.edges, inst.distances, inst.epsilon, inst.eta, metric="graph")
    with pytest.raises(InputError, match="all_pairs"):
        graph_protection(table_only, inst.edges, inst.distances, all_pairs=True)
