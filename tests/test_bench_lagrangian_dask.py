"""bench/lagrangian_dask.py: the recorded Lagrangian ascent replayed on other executors gives bit-identical
bounds, its JSON lines parse, and the expected-wall table (LPT makespan + overhead) is monotone in the worker
count. Everything in this process on the serial executor (no worker processes, no cluster)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lgd() -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("bench.lagrangian_dask")


@pytest.mark.parametrize("lam_from", ["rowgen1", "cheapest"])
def test_replays_are_identical_and_the_table_is_monotone(lgd, capsys, lam_from) -> None:
    argv = ["--instance", "syn40k8", "--steps", "3", "--lam-from", lam_from, "--workers", "1,2"]
    returned = lgd.main([*argv, "--executor", "serial", "--inline", "--table-workers", "1,2,3,4,8,16"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == returned and len(lines) == 4  # the recorded run, two replays, the table
    record, *replays, last = lines
    assert record["executor"] == "serial" and (record["N"], record["K"]) == (40, 8)
    assert 2 <= record["evaluations"] <= 4 and len(record["bounds"]) == record["evaluations"]
    assert all(b <= record["target"] * (1 + 1e-9) for b in record["bounds"])  # lower bounds under an upper bound
    for row in replays:
        assert row["identical"] is True
        assert row["bounds"] == record["bounds"] and row["z_sha256"] == record["z_sha256"]
        assert row["evaluations"] == record["evaluations"] and len(row["eval_walls_s"]) == row["evaluations"]
        assert set(row["sub_seconds"]) == {"min", "median", "mean", "p90", "max"}
    tab = last["table"]
    assert [t["workers"] for t in tab] == [1, 2, 3, 4, 8, 16] and last["evaluations"] == record["evaluations"]
    walls = [t["expected_wall_s_per_eval"] for t in tab]
    assert all(a >= b for a, b in zip(walls, walls[1:], strict=False))
    assert [t["useful_workers"] for t in tab] == [1, 2, 3, 4, 8, 8]
    assert tab[-1]["lpt_s_per_eval"] == tab[-2]["lpt_s_per_eval"]  # K = 8 subproblems: no use beyond 8


def test_lpt_makespan(lgd) -> None:
    assert lgd.lpt_makespan([3, 3, 2, 2, 2], 2) == 7  # LPT, not the optimum (6)
    assert lgd.lpt_makespan([3, 3, 2, 2, 2], 3) == 5
    assert lgd.lpt_makespan([3, 3, 2, 2, 2], 1) == 12
    assert lgd.lpt_makespan([3, 3, 2, 2, 2], 64) == 3
    assert lgd.lpt_makespan([], 4) == 0.0
    # the executor's own groups weigh every output alike: one long subproblem shares a worker
    assert lgd.assigned_makespan([5, 1, 1, 1], 2) == 6 and lgd.lpt_makespan([5, 1, 1, 1], 2) == 5


def test_table_model(lgd) -> None:
    rng = np.random.default_rng(3)
    times = rng.lognormal(-3.0, 1.0, size=(4, 30))  # 4 evaluations, K = 30 subproblems
    memory = {"base_mb": 150.0, "pairs_mb": 10.0, "model_mb_per_output": 2.0}
    tab = lgd.table(times, 0.01, lgd.TABLE_WORKERS, memory)
    per_eval = [t["expected_wall_s_per_eval"] for t in tab]
    assert all(a >= b for a, b in zip(per_eval, per_eval[1:], strict=False))
    assert tab[0]["expected_wall_s_per_eval"] == pytest.approx(times.sum(axis=1).mean() + 0.01, abs=1e-4)
    assert tab[-1]["expected_wall_s_sequence"] == pytest.approx(times.max(axis=1).sum() + 4 * 0.01, abs=1e-3)
    assert tab[0]["worker_mb_est"] == 150 + 10 + 30 * 2 and tab[-1]["worker_mb_est"] == 150 + 10 + 2
    assert lgd.table(times, -1.0)[0]["expected_wall_s_per_eval"] == pytest.approx(times.sum(axis=1).mean(), abs=1e-4)
