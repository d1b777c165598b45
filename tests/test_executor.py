"""The executor backends (serial, process, dask) give bit-identical solves.

The Dask tests start a real ``dask.distributed`` cluster (a LocalCluster of worker processes) and
point Benders at its scheduler address, the way a user points a solve at a remote cluster.
"""

from __future__ import annotations

import numpy as np
import pytest

from mdp_core.datasets import grid
from mdp_core.errors import InputError
from mdp_core.executor import DaskExecutor, ProcessExecutor, SerialExecutor, make_executor
from mdp_core.solve import solve


class _Counter:
    """A stateful worker: remembers how many requests it answered."""

    def __init__(self, spec: int) -> None:
        self.spec, self.seen = spec, 0

    def __call__(self, request: int) -> tuple[int, int, int]:
        self.seen += 1
        return self.spec, request * self.spec, self.seen


def _requests(ex) -> list[list[tuple[int, int, int]]]:
    ex.start(_Counter, [1, 2, 3, 4, 5], weights=[5, 1, 1, 1, 1])
    try:
        return [ex.solve([10, 20, 30, 40, 50]), ex.solve([1, 1, 1, 1, 1])]
    finally:
        ex.close()


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.slow
def test_workers_keep_state_and_answer_in_request_order(dask_cluster):
    want = [
        [(s, r * s, 1) for s, r in zip(range(1, 6), (10, 20, 30, 40, 50), strict=True)],
        [(s, s, 2) for s in range(1, 6)],
    ]
    assert _requests(SerialExecutor()) == want
    assert _requests(ProcessExecutor(2)) == want
    assert _requests(DaskExecutor(dask_cluster.scheduler_address)) == want


def test_unknown_executor_is_an_input_error():
    with pytest.raises(InputError, match="executor must be one of"):
        make_executor("threads")


def test_unreachable_scheduler_is_an_input_error():
    ex = DaskExecutor("tcp://127.0.0.1:1", timeout=1.0)
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        ex.start(_Counter, [1])


@pytest.mark.slow
def test_benders_bit_identical_on_every_backend(dask_cluster):
    inst = grid(6, 8, 20, 10.0, 2.0, seed=1)
    runs = {
        name: solve(inst, "benders", n_subsets=3, executor=name, **extra)
        for name, extra in (("serial", {}), ("process", {}), ("dask", {"scheduler": dask_cluster.scheduler_address}))
    }
    ref = runs["serial"]
    for name, sol in runs.items():
        assert sol.extra.get("executor", name) == name
        np.testing.assert_array_equal(sol.z, ref.z, err_msg=name)
        assert sol.objective == ref.objective
        assert sol.lower_bound == ref.lower_bound
