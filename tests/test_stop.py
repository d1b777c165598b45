"""Stopping a dense solve that HiGHS cannot interrupt itself: the solve runs in a killable child process
(mdp_core.runtime.isolate), so a stage timeout, a stop request and SIGTERM end it within seconds, even while
HiGHS is in its presolve (no interrupt check there).

The instance: the full LP of 300 Gaussian records (3-D N(0, 1), eta 2, eps 10), K = 100: 4,048,900
rows (4,048,600 privacy rows), one component. Dual simplex's first interrupt check comes 16-33 s into HiGHS's run(), and
the LP did not finish in 90 s (HiGHS 1.15.1, 2 shared cores; ``python bench/highs_phases.py`` measures
the phases). Before the fix a SIGTERM took 38-41 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import STOP_WITHIN, children, nothing_published, run_until_solving, wait_gone

from mdp_core.errors import Interrupted, StageTimeout
from mdp_core.problem.datasets import synthetic
from mdp_core.problem.io import write_instance
from mdp_core.runtime import control
from mdp_core.solvers.solve import ISOLATE_MIN_ROWS, solve

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dense():
    inst = synthetic(n_records=300, n_outputs=100, epsilon=10.0, seed=0)
    assert 2 * inst.n_edges * inst.n_outputs == 4_048_600 > ISOLATE_MIN_ROWS
    return inst


@pytest.mark.slow
def test_a_stage_timeout_ends_a_dense_solve_inside_presolve(dense):
    """5 s into the solve HiGHS is still in its preamble (first interrupt check at 33 s): the child
    process is killed, the stage raises StageTimeout within seconds, and no process is left."""
    before = children(os.getpid())
    t0 = time.monotonic()
    with control.scope(timeout=5.0, label="solve"), pytest.raises(StageTimeout) as info:
        solve(dense, "lp")
    took = time.monotonic() - t0
    assert 5.0 <= took < 5.0 + STOP_WITHIN, took
    assert "solve exceeded its timeout of 5 s" in str(info.value) and info.value.stage == "solve"
    assert not wait_gone(children(os.getpid()) - before, 5.0)


@pytest.mark.slow
def test_a_stop_request_from_another_thread_ends_a_dense_solve(dense):
    """The flow's UI-cancel watcher and the signal relay stop from another thread."""
    lines: list[str] = []
    asked: list[float] = []

    def stop() -> None:
        asked.append(time.monotonic())
        control.request_stop("operator pressed stop")

    timer = threading.Timer(8.0, stop)
    timer.start()
    try:
        with control.scope(label="solve") as token, pytest.raises(Interrupted) as info:
            solve(dense, "lp", progress=lines.append)
    finally:
        timer.cancel()
        control.clear_stop()
    assert time.monotonic() - asked[0] < STOP_WITHIN
    assert not isinstance(info.value, StageTimeout) and info.value.reason == "operator pressed stop"
    assert token.activity == "" or "lp component" in token.activity  # relayed from the child, if HiGHS got there


@pytest.mark.slow
def test_sigterm_ends_mdp_release_solve_and_its_solver_process(tmp_path, dense):
    """``mdp-release solve`` on the dense instance: SIGTERM 8 s in (the solver process is in HiGHS's
    preamble) ends the command and its solver process within seconds, and writes nothing."""
    write_instance(dense, tmp_path / "inst")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "solve", str(tmp_path / "inst"), "--method", "lp", "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "solving" in proc.stderr.readline()  # the instance is read; the solve starts
        time.sleep(8.0)
        workers = children(proc.pid)
        assert workers, "the solve runs in a child process"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_WITHIN)
        assert time.monotonic() - t0 < STOP_WITHIN
        assert not wait_gone(workers, STOP_WITHIN), "the solver process outlived the command"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.slow
@pytest.mark.flow
def test_sigterm_ends_a_release_run_within_seconds(prefect_server, tmp_path):
    """SIGTERM to ``mdp-release run`` 6 s into the dense solve: the run ends within seconds with a
    record naming the stage, its solver process is gone and nothing is published."""
    proc, lines, _ = run_until_solving(prefect_server, tmp_path)
    try:
        time.sleep(6.0)
        workers = children(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_WITHIN)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    assert took < STOP_WITHIN, (took, text[-3000:])
    assert proc.returncode != 0
    assert "solve stopped: SIGTERM received" in text, text[-3000:]
    assert not wait_gone(workers, STOP_WITHIN)
    nothing_published(tmp_path / "store")


@pytest.mark.slow
@pytest.mark.flow
def test_a_stage_timeout_ends_a_release_run_within_seconds(prefect_server, tmp_path):
    """``[run.timeouts] solve = 5``: the dense solve (> 90 s) ends TimedOut about 5 s after it started;
    the failure record names the stage; nothing is published."""
    proc, lines, started = run_until_solving(prefect_server, tmp_path, "[run.timeouts]\nsolve = 5\n")
    try:
        proc.wait(timeout=5.0 + STOP_WITHIN + 10.0)  # + the run's own teardown (failure hook, logs)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    assert proc.returncode == 1, text[-3000:]
    stopped = [ln for ln in lines if "solve exceeded its timeout of 5 s" in ln]
    assert stopped, text[-3000:]
    records = list((tmp_path / "store" / "runs").glob("*-failed/FAILED.txt"))
    assert len(records) == 1
    record = records[0].read_text()
    assert "solve exceeded its timeout of 5 s" in record, record
    nothing_published(tmp_path / "store")
