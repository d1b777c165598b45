"""auto's distributed path: column generation on a configured Dask cluster when the single-machine
method would not fit in the memory budget; never without a cluster."""

from __future__ import annotations

import pytest

from mdp_core.problem.datasets import synthetic
from mdp_core.solvers import auto
from mdp_core.solvers.solve import solve


@pytest.fixture(scope="module")
def dense():
    return synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)


def test_the_memory_estimate_lies_above_every_measured_peak(dense):
    f = auto.features(dense)
    rows = 2 * dense.n_edges * dense.n_outputs
    assert auto.memory_estimate("rowgen", f) == pytest.approx(0.7 + 4.0 * rows / 1e9)
    assert auto.memory_estimate("lp", f) == pytest.approx(1650.0 * f["largest_component_rows"] / 1e9)
    # the measurements behind the numbers (GB at full-LP rows): rowgen 0.75 at 52.5 M, 1.33 at 169 M,
    # 3.6 at 1,065 M (session 10: three rounds, the last stopped by its time limit); the full LP 9.7 at 5.9 M
    fake = {"n_edges": 0, "n_outputs": 1, "largest_component_rows": 5.9e6}
    for rows, peak in ((52.5e6, 0.75), (169e6, 1.33), (1065e6, 3.6)):
        assert auto.memory_estimate("rowgen", fake | {"n_edges": rows / 2}) >= peak
    assert auto.memory_estimate("lp", fake) == pytest.approx(9.7, rel=0.05)


def test_auto_goes_to_the_cluster_only_with_one_and_only_when_the_machine_is_too_small(dense):
    addr = "tcp://10.0.0.1:8786"
    here = auto.choose(dense, auto.AutoOptions())[0]
    name, reason, f = auto.choose(dense, auto.AutoOptions(scheduler=addr, memory_limit=1e-6))
    assert name == "colgen" and addr in reason and f["memory_estimate_gb"] > f["memory_budget_gb"] == 1e-6
    assert auto.choose(dense, auto.AutoOptions(memory_limit=1e-6))[0] == here  # no cluster: one machine
    assert auto.choose(dense, auto.AutoOptions(scheduler=addr, memory_limit=1000.0))[0] == here  # it fits
    assert auto.choose(dense, auto.AutoOptions(scheduler=addr))[0] == here  # default budget: this machine


def test_with_a_cluster_auto_puts_rowgens_lagrangian_there_and_nothing_without(dense):
    addr = "tcp://10.0.0.1:8786"
    name, reason, _ = auto.choose(dense, auto.AutoOptions(scheduler=addr, dense_degree=1.0))
    assert name == "rowgen" and "Lagrangian" in reason and addr in reason
    opts = auto.delegated("rowgen", auto.AutoOptions(scheduler=addr))
    assert opts == {"lagrangian_steps": auto.LAGRANGIAN_STEPS, "lagrangian_executor": "dask", "scheduler": addr}
    assert auto.delegated("rowgen", auto.AutoOptions()) == {} == auto.delegated("lp", auto.AutoOptions(scheduler=addr))
    assert "Lagrangian" not in auto.choose(dense, auto.AutoOptions(dense_degree=1.0))[1]


@pytest.mark.slow
def test_auto_solves_on_the_cluster_and_agrees_with_one_machine(dense):
    distributed = pytest.importorskip("distributed")
    here = solve(dense, "auto")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        there = solve(dense, "auto", scheduler=c.scheduler_address, memory_limit=1e-6)
    assert there.extra["auto"]["method"] == "colgen" and there.extra.get("executor") == "dask"
    assert here.extra["auto"]["method"] in ("lp", "rowgen")
    assert there.certificate.passed and abs(there.objective - here.objective) <= 1e-6 * abs(here.objective)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        lag = solve(dense, "auto", scheduler=c.scheduler_address, dense_degree=1.0, gap_rel=1e-6)
    assert lag.extra["auto"]["method"] == "rowgen" and lag.extra["lagrangian"]  # its subproblems ran there
    assert lag.certificate.passed and abs(lag.objective - here.objective) <= 1e-5 * abs(here.objective)
