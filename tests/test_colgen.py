"""Column generation for the PMO LP: same optimum as the full LP, valid bounds, exact cone columns,
and bit-identical results whatever executor runs the pricing LPs."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import path_instance
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, synthetic
from mdp_core.problem.graph import path_distances
from mdp_core.problem.instance import Instance
from mdp_core.runtime.executor import ProcessExecutor
from mdp_core.solvers import colgen, lp
from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import MAX_LOG_RATIO, certify, objective, verify


def check_against_lp(inst: Instance, gap_rel: float = 1e-6) -> colgen.ColgenResult:
    """colgen agrees with the full LP within the gap; every trace row brackets the LP optimum."""
    ref = lp.solve_lp(inst)
    assert ref.status == "optimal"
    opt = ref.objective
    res = colgen.colgen(inst, gap_rel=gap_rel)
    slack = 1e-9 * max(abs(opt), 1.0)  # HiGHS's own "optimal" sits within ~1e-9 of the optimum
    tr = res.trace
    assert len(tr) == res.iterations >= (1 if inst.n_edges else 0)
    assert np.all(tr.lower_bound <= opt + slack)  # the proven bound
    assert np.all(tr.upper_bound >= opt - slack)
    assert np.all(np.diff(tr.lower_bound) >= -1e-15)  # best bound so far: never decreases
    # the pricing bound uses HiGHS's pricing optima (warm-started: off by up to ~1e-6 relative)
    assert np.all(tr.pricing_bound <= opt + 2e-6 * abs(opt) + slack)
    assert res.lower_bound <= opt + slack
    assert abs(res.upper_bound - opt) <= gap_rel * abs(opt) + slack
    if res.status == "optimal":
        assert res.upper_bound - res.lower_bound <= gap_rel * abs(res.upper_bound) + 1e-12
    else:  # the proven bound stalled just short of gap_rel: no improving column, even from scratch
        assert res.status == "feasible", res.extra
        assert res.upper_bound - res.lower_bound <= 10 * gap_rel * abs(res.upper_bound)
    assert res.upper_bound == pytest.approx(objective(inst, res.z), abs=1e-12)
    z, cert, _ = certify(inst, res.z)
    assert cert.passed
    assert objective(inst, z) == pytest.approx(opt, rel=gap_rel, abs=slack)
    return res


@pytest.mark.parametrize(
    ("rows", "cols", "k", "eps"),
    [(4, 5, 6, 10.0), (4, 5, 6, 2.0), (5, 6, 8, 10.0), (5, 6, 8, 2.0)],
)
def test_grid_matches_full_lp(rows, cols, k, eps):
    res = check_against_lp(grid(rows, cols, n_outputs=k, epsilon=eps))
    assert res.extra["n_components"] == 1


def test_dense_synthetic_matches_full_lp():
    """3-D N(0,1) points with eta = 2: a dense mDP graph (most pairs are neighbours)."""
    inst = synthetic(n_records=30, n_outputs=10, epsilon=10.0, seed=1)
    assert inst.n_edges > 0.4 * 30 * 29 / 2
    check_against_lp(inst)


def test_disconnected_synthetic_matches_full_lp(synth_small):
    """Several components and isolated records (sigma 1.5, eta 1.5)."""
    res = check_against_lp(synth_small)
    assert res.extra["n_components"] > 2
    from mdp_core.problem.graph import components

    _, labels = components(synth_small.n_records, synth_small.edges)
    isolated = np.bincount(labels) == 1
    assert isolated.any()
    for i in np.flatnonzero(isolated[labels]):  # isolated records report their cheapest output
        assert res.z[i, np.argmin(synth_small.costs[i])] == 1.0


def test_two_records_hand_derivation():
    """Two records at distance 1, eps 1, 0/1 loss, uniform prior: OPT = 1 / (1 + e) (test_lp derivation)."""
    inst = path_instance([[0.0, 1.0], [1.0, 0.0]], [1.0], 1.0)
    res = colgen.colgen(inst)
    assert res.status == "optimal"
    assert res.upper_bound == pytest.approx(1 / (1 + np.e), abs=1e-9)
    assert res.lower_bound == pytest.approx(1 / (1 + np.e), abs=1e-9)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 9),
    k=st.integers(1, 5),
    eps=st.floats(0.2, 12.0),
    seed=st.integers(0, 10_000),
)
@example(n=7, k=5, eps=0.5, seed=9)  # optimum = one output for all: a degenerate master (colgen.purge)
def test_random_instances_match_full_lp(n, k, eps, seed):
    """Random points on a line (a path-like graph with chords), random costs and prior."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 3, n))
    x += np.arange(n) * 1e-3  # distinct points
    i, j = np.triu_indices(n, 1)
    d = x[j] - x[i]
    keep = d <= 1.0
    prior = rng.dirichlet(np.ones(n))
    inst = Instance(prior, rng.uniform(0, 5, (n, k)), np.column_stack([i, j])[keep], d[keep], eps, 1.0)
    check_against_lp(inst)


def test_columns_are_exactly_in_the_cone():
    """close() and the seeds satisfy every privacy row (capped at e^30) exactly, with no zeros."""
    inst = grid(5, 6, n_outputs=4, epsilon=40.0)  # eps * d up to 80: exercises the cap
    n = inst.n_records
    dist = colgen.capped_path_distances(n, inst.edges, inst.distances, inst.epsilon)
    decay = np.exp(-inst.epsilon * dist)
    cols, owner = colgen.seed_columns(inst.costs, decay, 2)
    rng = np.random.default_rng(0)
    closed = np.column_stack([colgen.close(rng.exponential(size=n) * (rng.random(n) < 0.3), decay) for _ in range(5)])
    a, _ = pr.all_rows(pr.pairs(inst.edges, inst.distances, inst.epsilon), n, 1)
    for v in (cols, closed):
        assert np.all(v > 0)
        lhs = a @ v  # x_a - g x_b: must be <= 0 up to round-off
        assert lhs.max() <= 1e-12 * np.abs(v).max()
    assert cols.shape[1] == inst.n_outputs + 2 * n and np.bincount(owner).sum() == cols.shape[1]


def test_lazy_pricing_matches_pricing_over_every_row():
    """A pricing worker holds only the rows its solutions violated, yet reaches the optimum of the
    pricing LP over every cone row (solved afresh by HiGHS), at several dual points in a row."""
    from mdp_core.declarations.methods import ColgenOptions
    from mdp_core.problem.graph import component_blocks
    from mdp_core.solvers import highs

    inst = synthetic(n_records=60, n_outputs=4, epsilon=10.0, seed=3)
    _, _, blocks = component_blocks(inst.n_records, inst.edges)
    block = max(blocks, key=lambda b: b.members.size)
    options = highs.SolverOptions(solver="simplex")
    comp = colgen._new_component(inst, block, inst.prior[:, None] * inst.costs, options, ColgenOptions())
    n = comp.c.shape[0]
    spec = comp.specs()[1]
    worker = colgen.PricingWorker(spec, options)
    every = comp.cone.rows(np.arange(comp.cone.pairs.size))
    rng = np.random.default_rng(0)
    for _ in range(3):
        u = rng.uniform(0, 2 * comp.c.max(), n)
        got = worker.price(colgen.PriceRequest(u, u, 0.0, float("inf")))
        full = highs.solve_model(
            highs.LpModel(
                c=spec.cost - u,
                a=sp.vstack([every, sp.csr_matrix(np.ones((1, n)))]).tocsc(),
                row_lower=np.r_[np.full(every.shape[0], -np.inf), 1.0],
                row_upper=np.r_[np.zeros(every.shape[0]), 1.0],
                col_lower=np.zeros(n),
                col_upper=np.full(n, np.inf),
            ),
            options,
        )
        assert got.objective == pytest.approx(full.objective, rel=1e-7, abs=1e-10)
        # the Lagrangian terms come from the held rows only, yet give the pricing optimum:
        # min_i (c - u + A^T lam)_i bounds it from below for any lam >= 0, tightly at optimal duals
        assert got.terms is not None and got.terms.capped is None
        lagrangian = float(np.min(spec.cost - u + got.terms.exact))
        assert full.objective - 1e-7 * abs(full.objective) <= lagrangian + 1e-12
        assert lagrangian <= full.objective + 1e-12
    assert 0 < worker.held.sum() < 0.6 * comp.cone.pairs.size


def test_implied_edges_are_implied():
    """On the grid the 2 km edges are implied by two 1 km steps; no other edge is."""
    inst = grid(4, 5, n_outputs=3)
    n = inst.n_records
    paths = path_distances(n, inst.edges, np.minimum(inst.distances, MAX_LOG_RATIO / inst.epsilon))
    implied = colgen.implied_edges(inst.edges, inst.distances, paths, inst.epsilon)
    assert np.array_equal(implied, np.isclose(inst.distances, 2.0))


def test_solve_certifies_and_reports():
    inst = grid(5, 6, n_outputs=8, epsilon=10.0)
    messages: list[str] = []
    sol = solve(inst, "colgen", progress=messages.append)
    assert sol.certificate.passed and verify(inst, sol.z).passed
    assert sol.status == "optimal"
    ref = solve(inst, "lp")
    assert sol.objective == pytest.approx(ref.objective, rel=1e-6)
    assert sol.lower_bound is not None and sol.lower_bound <= ref.objective + 1e-9
    assert len(messages) == sol.iterations == len(sol.trace)
    assert list(sol.trace.columns) == colgen.TRACE_COLUMNS


def test_ipm_master_and_no_smoothing_reach_the_same_optimum():
    inst = grid(5, 6, n_outputs=8, epsilon=2.0)
    opt = lp.solve_lp(inst).objective
    for kwargs in ({"master_solver": "ipm"}, {"smoothing": 0.0}):
        res = colgen.colgen(inst, **kwargs)
        assert res.status == "optimal"
        assert res.lower_bound <= opt + 1e-9 and res.upper_bound == pytest.approx(opt, rel=1e-6)


def test_iteration_and_time_limits_return_feasible_mechanisms():
    inst = grid(6, 6, n_outputs=10, epsilon=2.0)
    res = colgen.colgen(inst, max_iterations=1)
    assert res.status == "iteration_limit" and res.iterations == 1
    z, cert, rep = certify(inst, res.z)
    assert cert.passed and rep.max_mix <= 1e-6
    assert res.lower_bound <= lp.solve_lp(inst).objective <= res.upper_bound + 1e-9
    res = colgen.colgen(inst, lp.SolverOptions(time_limit=1e-3))
    assert res.status == "time_limit"
    assert certify(inst, res.z)[1].passed


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"gap_rel": -1.0}, "gap"),
        ({"max_iterations": 0}, "max_iterations"),
        ({"seeds_per_record": -1}, "seeds"),
        ({"tol": float("nan")}, "tol"),
        ({"smoothing": 1.0}, "smoothing"),
        ({"master_solver": "pdlp"}, "master_solver"),
        ({"executor": "threads"}, "executor"),
    ],
)
def test_bad_arguments(kwargs, word):
    with pytest.raises(InputError, match=word):
        colgen.colgen(grid(3, 3, n_outputs=2), **kwargs)


OBJECTIVE_COLUMNS = [c for c in colgen.TRACE_COLUMNS if not c.endswith("_seconds")]


def assert_same_run(got: colgen.ColgenResult, ref: colgen.ColgenResult) -> None:
    """Bit-identical mechanism, bounds and trace (every column but the timings)."""
    np.testing.assert_array_equal(got.z, ref.z)
    assert (got.status, got.iterations) == (ref.status, ref.iterations)
    assert (got.lower_bound, got.pricing_bound, got.upper_bound) == (
        ref.lower_bound,
        ref.pricing_bound,
        ref.upper_bound,
    )
    assert got.trace[OBJECTIVE_COLUMNS].equals(ref.trace[OBJECTIVE_COLUMNS])


def test_process_executor_is_bit_identical_to_serial():
    """Two worker processes (several components, so several workers per process and idle ones in a
    round) give exactly the serial run: workers are independent and deterministic."""
    inst = synthetic(n_records=40, n_outputs=6, sigma=1.5, eta=1.5, epsilon=2.0, seed=3)
    ref = colgen.colgen(inst, executor="serial")
    assert ref.extra["n_components"] > 2 and ref.iterations > 5 and ref.status == "optimal"
    got = colgen.colgen(inst, executor=ProcessExecutor(2))
    assert (ref.extra["executor"], got.extra["executor"]) == ("serial", "process")
    assert got.extra["pricing_workers"] == ref.extra["pricing_workers"] > 2 * inst.n_outputs
    assert_same_run(got, ref)


def test_auto_executor_stays_serial_below_the_work_threshold():
    res = colgen.colgen(grid(5, 6, n_outputs=8, epsilon=10.0))  # executor="auto"
    assert res.extra["executor"] == "serial"
    assert colgen.make_executor("auto", colgen.PROCESS_MIN_WORK - 1, 100).name == "serial"
    assert colgen.make_executor("auto", 10 * colgen.PROCESS_MIN_WORK, 1).name == "serial"  # one worker
    want = "process" if (os.cpu_count() or 1) >= 2 else "serial"
    assert colgen.make_executor("auto", colgen.PROCESS_MIN_WORK, 2).name == want  # not started


@pytest.mark.slow
def test_dask_executor_is_bit_identical_to_serial():
    """A real LocalCluster (starts in ~2 s here), reached by its address as a remote one would be."""
    distributed = pytest.importorskip("distributed")
    inst = grid(6, 8, 20, 10.0, 2.0, seed=1)
    ref = colgen.colgen(inst, executor="serial")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    try:
        sol = solve(inst, "colgen", executor="dask", scheduler=cluster.scheduler_address)
        got = colgen.colgen(inst, executor="dask", scheduler=cluster.scheduler_address)
    finally:
        cluster.close()
    assert sol.extra["executor"] == got.extra["executor"] == "dask"
    assert sol.lower_bound == ref.lower_bound and sol.trace[OBJECTIVE_COLUMNS].equals(ref.trace[OBJECTIVE_COLUMNS])
    assert_same_run(got, ref)
