"""Long solves that can be stopped: a stop request, a deadline or a signal ends a real HiGHS solve within
seconds (mdp_core.runtime.control, HiGHS's interrupt callback), executors terminate their workers, and a
stopped stage writes nothing.

The long instance: the full PMO LP of 150 Gaussian records, K = 40 (372,640 privacy rows). Solved to
the end it took 76 s here (dual simplex; IPM alike); every test stops it after 2-6 s (above
mdp_core.solvers.solve.ISOLATE_MIN_ROWS: it runs in a killable child process, mdp_core.runtime.isolate).
The tests assert the outcome (stopped: the exception, nothing written), not how fast or at which phase: a
stop takes well under a second on a quiet machine, many at load 10. An unstopped solve ends without the
exception; where it would raise anyway (SIGINT, a sleeping worker), :data:`HANG_GUARD` tells the two apart.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from artifacts.store import Store
from mdp_core.errors import Interrupted, StageTimeout
from mdp_core.problem.datasets import synthetic
from mdp_core.problem.io import write_instance
from mdp_core.runtime import control
from mdp_core.runtime.executor import DaskExecutor, ProcessExecutor
from mdp_core.solvers.solve import solve
from tasks import solve as solve_task
from tasks.progress import ProgressArtifact

HANG_GUARD = 60.0  # seconds: below the unstopped solve (76 s quiet) and the workers' 120 s sleeps


@pytest.fixture(scope="module")
def long_lp():
    return synthetic(n_records=150, n_outputs=40, epsilon=10.0, seed=0)


@pytest.mark.slow  # 6.2 s measured (--durations=0, 2 shared cores)
def test_stop_request_from_another_thread_ends_a_long_solve(long_lp):
    timer = threading.Timer(6.0, control.request_stop, args=("operator pressed stop",))  # inside HiGHS by then
    timer.start()
    try:
        with control.scope(label="solve"), pytest.raises(Interrupted) as info:
            solve(long_lp, "lp")  # unstopped, it returns a solution
    finally:
        timer.cancel()
        control.clear_stop()
    err = info.value
    assert not isinstance(err, StageTimeout)
    assert err.stage == "solve" and err.reason == "operator pressed stop"
    assert "solve stopped: operator pressed stop" in str(err)  # not which phase it reached: that is a race


@pytest.mark.slow  # 3.3 s measured (--durations=0, 2 shared cores)
def test_a_3_s_deadline_stops_the_solve_with_a_timeout(long_lp):
    t0 = time.monotonic()
    with control.scope(timeout=3.0, label="solve"), pytest.raises(StageTimeout) as info:
        solve(long_lp, "lp")
    assert time.monotonic() - t0 >= 3.0  # not before its deadline
    assert isinstance(info.value, TimeoutError)  # Prefect records TimedOut, the CLI says "timed out"
    assert "solve exceeded its timeout of 3 s" in str(info.value)


def test_sigint_inside_highs_is_raised_after_the_run_stops(long_lp):
    """KeyboardInterrupt lands in the interrupt callback: HiGHS would swallow it as a "Solve error";
    the adapter stops the run and re-raises it."""
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    # Python's own Ctrl-C handler, whatever an earlier test of this process left installed (the
    # command line's stop handlers, say), so that SIGINT means KeyboardInterrupt here
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    control.clear_stop()
    timer = threading.Timer(2.0, signal.pthread_kill, args=(main, signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            solve(long_lp, "lp")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
    assert time.monotonic() - t0 < HANG_GUARD, f"not stopped; SIGINT handler before the test: {before!r}"


@pytest.mark.slow  # 3.2 s measured (--durations=0, 2 shared cores)
def test_a_stopped_stage_writes_nothing(tmp_path, long_lp):
    store = Store(tmp_path)
    with store.writer("export", "k" * 64) as w:
        write_instance(long_lp, w.dir)
    with control.scope(timeout=3.0, label="solve"), pytest.raises(StageTimeout):
        solve_task.solve.fn(str(tmp_path), {"method": "lp"}, w.ref)
    solve_dir = tmp_path / "objects" / "solve"
    assert not solve_dir.exists() or not any(solve_dir.iterdir())  # no object, no temp folder left


def test_progress_moves_over_rowgen_rounds():
    inst = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)
    lines: list[str] = []
    sol = solve(inst, "rowgen", progress=lines.append, neighbours=1, rows_per_round=300, gap_rel=1e-6)
    assert len(lines) == sol.iterations >= 3
    assert all(isinstance(ln, control.Progress) for ln in lines)
    bar = ProgressArtifact(None, "solve")  # no flow run: no artifact, the percentage is still computed
    percents = []
    for ln in lines:
        bar(ln)
        percents.append(bar.percent)
    assert percents == sorted(percents) and percents[-1] > percents[0], percents
    assert 0.0 <= percents[0] < 99.0 and percents[-1] == 99.0  # gap closed; 100 only when certified
    first = lines[0]
    assert first.startswith("rowgen round 1: gap ") and "(target 0.0001%), LB " in first and " UB " in first
    assert lines[-1].gap <= 1e-6
    bar.done("optimal")
    assert bar.percent == 99.0  # done() sets the artifact to 100; percent is what lines proved


def test_progress_includes_elapsed_share_of_the_time_limit():
    bar = ProgressArtifact(None, "solve")
    bar(control.Progress("rowgen", "round 1", lower=1.0, upper=2.0, gap_rel=1e-3, elapsed=6.0, time_limit=60.0))
    assert bar.percent == pytest.approx(10.0)  # the gap has not moved yet: elapsed / time limit
    bar(control.Progress("rowgen", "round 2", lower=1.9, upper=2.0, gap_rel=1e-3, elapsed=7.0, time_limit=60.0))
    # gap 50 % -> 5 % with target 0.1 %: log(10) / log(500) of the way, more than 7 / 60
    assert bar.percent == pytest.approx(100 * 0.3705, abs=0.1)
    bar(control.Progress("rowgen", "round 3", lower=1.9, upper=2.0, gap_rel=1e-3, elapsed=45.0, time_limit=60.0))
    assert bar.percent == pytest.approx(75.0)  # stuck gap, the clock moves on


class _Sleeper:
    """A worker that sleeps ``request`` seconds, obeying the stop token of its thread."""

    def __init__(self, spec: int) -> None:
        self.spec = spec

    def __call__(self, request: float) -> int:
        control.current().sleep(request)
        return os.getpid()


@pytest.mark.slow  # 5.1 s measured (--durations=0, 2 shared cores)
def test_stopping_a_process_executor_terminates_its_workers():
    ex = ProcessExecutor(2)
    ex.start(_Sleeper, [1, 2])
    try:
        pids = ex.solve([0.0, 0.0])
        procs = list(ex.procs)
        assert sorted(pids) == sorted(p.pid for p in procs) and len(set(pids)) == 2
        with control.scope(label="solve") as token:
            timer = threading.Timer(1.0, token.request, args=("cancelled",))
            timer.start()
            t0 = time.monotonic()
            with pytest.raises(Interrupted, match="waiting for worker processes"):
                ex.solve([120.0, 120.0])
        assert time.monotonic() - t0 < HANG_GUARD  # the sleeps were interrupted, not waited out
        assert not any(p.is_alive() for p in procs)
        assert ex.procs == []
    finally:
        ex.close()


@pytest.mark.slow
def test_stopping_a_dask_executor_interrupts_its_actors():
    pytest.importorskip("distributed")
    ex = DaskExecutor(processes=1)
    try:
        ex.start(_Sleeper, [1, 2])
        with control.scope(label="solve") as token:
            timer = threading.Timer(1.0, token.request, args=("cancelled",))
            timer.start()
            t0 = time.monotonic()
            with pytest.raises(Interrupted, match="waiting for Dask workers"):
                ex.solve([120.0, 120.0])
            assert time.monotonic() - t0 < HANG_GUARD  # the sleeps were interrupted, not waited out
        assert ex.actors == []
    finally:
        t1 = time.monotonic()
        ex.close()
        assert time.monotonic() - t1 < HANG_GUARD  # the actors' sleeps were interrupted: the cluster stops


@pytest.mark.slow
def test_a_flow_run_times_out_or_is_cancelled_within_seconds(prefect_server, tmp_path, long_lp):
    """Through a real Prefect server: a stage with ``timeout_seconds=3`` ends TimedOut, and Cancel on the
    flow run (the UI's "Cancel": state CANCELLING) stops the running stage through
    :func:`tasks.progress.watch_cancellation`; neither writes a solve output."""
    import contextvars

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelling

    from tasks.progress import watch_cancellation

    store = Store(tmp_path)
    with store.writer("export", "k" * 64) as w:
        write_instance(long_lp, w.dir)
    ref, root = w.ref, str(tmp_path)
    seen: dict[str, object] = {}

    @flow
    def timed() -> None:
        t0 = time.monotonic()
        state = solve_task.solve.with_options(timeout_seconds=3)(root, {"method": "lp"}, ref, return_state=True)
        seen["timed"] = (state.name, str(state.message), time.monotonic() - t0)

    @flow
    def cancelled() -> None:
        run_id = FlowRunContext.get().flow_run.id
        stop_watching = watch_cancellation(run_id, every=0.5)

        def cancel() -> None:
            with get_client(sync_client=True) as client:
                client.set_flow_run_state(run_id, Cancelling(), force=True)
            seen["cancel_at"] = time.monotonic()

        timer = threading.Thread(target=contextvars.copy_context().run, args=(lambda: (time.sleep(3.0), cancel()),))
        timer.start()
        try:
            state = solve_task.solve(root, {"method": "lp"}, ref, return_state=True)
            seen["cancelled"] = (state.name, str(state.message), time.monotonic())
        finally:
            timer.join()
            stop_watching()

    with temporary_settings(updates={PREFECT_API_URL: prefect_server["url"]}):
        timed(return_state=True)
        try:
            cancelled(return_state=True)
        finally:
            control.clear_stop()
    name, message, took = seen["timed"]
    assert name == "TimedOut" and took >= 3.0, (name, message, took)
    name, message, _ = seen["cancelled"]
    assert name != "Completed" and "the flow run was cancelled" in message, (name, message)
    solve_dir = tmp_path / "objects" / "solve"
    assert not solve_dir.exists() or not any(solve_dir.iterdir())


def test_background_work_obeys_the_starting_threads_token_and_re_raises_its_errors(long_lp):
    from mdp_core.solvers import highs, lp

    def boom() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        control.Background(boom).result()
    model = lp.build_pmo(long_lp.prior[:, None] * long_lp.costs, long_lp.edges, long_lp.distances, long_lp.epsilon)
    with control.scope(label="solve") as tok:
        job = control.Background(lambda: highs.solve_model(model, highs.SolverOptions()))
        threading.Timer(2.0, tok.request, args=("operator pressed stop",)).start()
        with pytest.raises(Interrupted, match="operator pressed stop"):
            job.result()  # the waiting thread's token
    with pytest.raises(Interrupted, match="operator pressed stop"):  # the HiGHS run in the thread stopped too
        job.result()  # unstopped, it returns the solution


def test_a_child_tokens_activity_and_lines_reach_the_solve_subprocess_relay() -> None:
    """rowgen solves its later rounds under a child token (mdp_core.solvers.rowgen._start_lp); in the solve
    subprocess the stage's token is the relay to the parent process, so the child's activity must go through the
    relay's own set_activity (it went around it: a release's heartbeat said "round 1 LP iteration 41" for 30 min)."""
    from mdp_core.runtime.isolate import _RelayToken

    sent: list[tuple[str, object]] = []
    relay = _RelayToken(sent.append)
    child = control.StopToken(parent=control.StopToken(parent=relay))
    child.set_activity("rowgen round 4 LP: HiGHS interior point iteration 3")
    child.note("rowgen round 4: gap 0.2%")
    assert sent == [
        ("activity", "rowgen round 4 LP: HiGHS interior point iteration 3"),
        ("note", "rowgen round 4: gap 0.2%"),
    ]
    assert relay.activity == child.activity and relay.last == child.last == "rowgen round 4: gap 0.2%"
