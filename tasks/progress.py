"""Progress a person can see, and a stop a person can ask for.

:class:`Heartbeat` wraps a stage's computation (``tasks.common.run_stage``). A background thread logs to
the Prefect run logger -- which also prints to the terminal -- whenever the stage has been silent for
``every`` seconds, and says what changed: a progress line the throttled log did not print yet
(``solve: rowgen round 3: gap 0.96% (target 0.1%), LB 0.4171 UB 0.4211, 412 s``), else what the solver
is doing now (the HiGHS iteration, from the stage's stop token) and how long ago the last line came.

:class:`ProgressArtifact` mirrors a long solve in the UI (``create_progress_artifact``): percent done =
max(the proven gap's way from its first value down to the target, on a log scale; elapsed / time limit;
components solved) from :class:`mdp_core.control.Progress` lines, and the latest line as description.

Stopping: :func:`request_stop` and :func:`install_signal_handlers` (SIGTERM / SIGINT) are
:mod:`mdp_core.control`'s; :func:`watch_cancellation` polls a flow run's state through Prefect's client
and requests the stop when the UI cancelled it.
"""

from __future__ import annotations

import contextvars
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from mdp_core.control import (  # re-exported: what a flow calls to stop its stages
    Progress,
    StopToken,
    clear_stop,
    gap_fraction,
    install_signal_handlers,
    request_stop,
)

__all__ = [
    "EVERY",
    "Heartbeat",
    "ProgressArtifact",
    "clear_stop",
    "current",
    "install_signal_handlers",
    "note",
    "release_key",
    "request_stop",
    "watch_cancellation",
]

EVERY = 5.0  # seconds of silence before the heartbeat speaks
_local = threading.local()


def current() -> Heartbeat | None:
    """The heartbeat of the stage running in this thread, if any."""
    return getattr(_local, "heartbeat", None)


def note(line: str, spoken: bool = True) -> None:
    """Record a progress line of the current stage; ``spoken``: it was logged (resets the silence clock)."""
    hb = current()
    if hb is not None:
        hb.note(line, spoken)


class Heartbeat:
    """Speaks for a stage silent for ``every`` s (module docstring). ``token``: the stage's stop token,
    whose ``activity`` (what HiGHS is doing now) the heartbeat reports."""

    def __init__(self, stage: str, log: Any, every: float = EVERY, token: StopToken | None = None) -> None:
        self.stage, self.log, self.every, self.token = stage, log, every, token
        self.t0 = self.last = self.changed = time.monotonic()
        self.line = self.said = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._prev: Heartbeat | None = None

    def note(self, line: str, spoken: bool = True) -> None:
        now = time.monotonic()
        if line != self.line:
            self.line, self.changed = line, now
        if spoken:
            self.last, self.said = now, line

    def message(self, now: float) -> str:
        """What the heartbeat says at ``now``: the unsaid latest line, else activity and silence."""
        elapsed = now - self.t0
        if self.line and self.line != self.said:
            self.said = self.line
            return f"{self.stage}: {self.line} ({elapsed:.0f} s elapsed)"
        parts = [f"{self.stage}: running, {elapsed:.0f} s elapsed"]
        tok = self.token
        if tok is not None and tok.activity and tok.activity_at >= self.changed:
            parts.append(f"now: {tok.activity}")
        if self.line:
            parts.append(f"no new progress for {now - self.changed:.0f} s; last: {self.line}")
        return "; ".join(parts)

    def _beat(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            if now - self.last >= self.every:
                self.last = now
                try:
                    self.log.info("%s", self.message(now))
                except Exception:  # logging must never break a stage
                    pass

    def __enter__(self) -> Heartbeat:
        self._prev = current()
        _local.heartbeat = self
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.stage}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        _local.heartbeat = self._prev


_COMPONENT = re.compile(r"component (\d+)/(\d+)")
_ITERATION = re.compile(r"iteration (\d+)")


class ProgressArtifact:
    """A Prefect progress artifact for one solve, updated at most every ``every`` seconds.

    ``limit``: seconds the solve may take (the stage timeout), counted from construction; the elapsed
    share of it is a floor of the percentage."""

    def __init__(
        self,
        key: str | None,
        title: str,
        max_iterations: int | None = None,
        every: float = EVERY,
        limit: float | None = None,
    ) -> None:
        self.key, self.title, self.max_iterations, self.every, self.limit = key, title, max_iterations, every, limit
        self.id: Any = None
        self.last = 0.0
        self.percent = 0.0
        self.first_gap = math.inf  # the first finite relative gap: 0 % on the log scale
        self.t0 = time.monotonic()
        try:
            from prefect.context import FlowRunContext, TaskRunContext

            if TaskRunContext.get() is None and FlowRunContext.get() is None:
                return  # not inside a run (tests through .fn): no artifact, and no ephemeral server for one
            from prefect.artifacts import create_progress_artifact

            self.id = create_progress_artifact(progress=0.0, key=key, description=f"{title}: started")
        except Exception as exc:  # outside a run (tests through .fn) or no API: no artifact
            logging.getLogger("mdp_release").debug("no progress artifact: %s", exc)

    def fraction(self, line: str, now: float) -> float:
        """Work done in [0, 1] by ``line``: a :class:`Progress`'s fraction, gap (log scale) and elapsed
        time; otherwise "component i/n" or "iteration i" of ``max_iterations``."""
        done = 0.0
        if isinstance(line, Progress):
            gap = line.gap
            if math.isfinite(gap) and not math.isfinite(self.first_gap):
                self.first_gap = gap
            done = line.fraction if line.fraction is not None else gap_fraction(self.first_gap, gap, line.target)
            if math.isfinite(line.time_limit):
                done = max(done, line.elapsed / line.time_limit)
        elif m := _COMPONENT.search(line):
            done = int(m.group(1)) / max(int(m.group(2)), 1)
        elif (m := _ITERATION.search(line)) and self.max_iterations:
            done = int(m.group(1)) / self.max_iterations
        if self.limit:
            done = max(done, (now - self.t0) / self.limit)
        return min(done, 1.0)

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        done = self.fraction(line, now)
        # 100 % only when the solve returns (done()): a closed gap still has certification ahead
        self.percent = max(self.percent, min(99.0, 100.0 * done))
        if self.id is not None and now - self.last >= self.every:
            self.last = now
            self._update(self.percent, f"{self.title}: {now - self.t0:.0f} s; {line}")

    def done(self, summary: str) -> None:
        if self.id is not None:
            self._update(100.0, f"{self.title}: done in {time.monotonic() - self.t0:.0f} s; {summary}")

    def _update(self, percent: float, description: str) -> None:
        try:
            from prefect.artifacts import update_progress_artifact

            update_progress_artifact(self.id, progress=percent, description=description[:1000])
        except Exception:
            pass


def release_key(suffix: str) -> str | None:
    """``<release name>-<suffix>`` from the ``release:<name>`` tag of the running task, else None."""
    try:
        from prefect.context import TaskRunContext

        ctx = TaskRunContext.get()
        tags = set(ctx.task_run.tags or []) if ctx is not None else set()
    except Exception:
        return None
    names = sorted(t.split(":", 1)[1] for t in tags if t.startswith("release:"))
    return f"{names[0]}-{suffix}" if names else None


def watch_cancellation(
    flow_run_id: Any, every: float = 2.0, reason: str = "the flow run was cancelled"
) -> Callable[[], None]:
    """Poll the flow run ``flow_run_id`` every ``every`` s from a daemon thread (Prefect's public client,
    ``read_flow_run``) and :func:`request_stop` once its state is CANCELLING or CANCELLED (Cancel in the
    UI, ``prefect flow-run cancel``). Call it in the flow (or after the flow run exists), with the
    caller's Prefect settings: the thread runs in a copy of the caller's context. Returns a function that
    stops the watcher (call it when the flow returns)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    halt = threading.Event()
    stopping = {StateType.CANCELLING, StateType.CANCELLED}

    def loop() -> None:
        with get_client(sync_client=True) as client:
            while not halt.wait(every):
                try:
                    state = client.read_flow_run(flow_run_id).state
                except Exception as exc:  # the API may be busy: try again next time
                    logging.getLogger("mdp_release").debug("cancel watcher: %s", exc)
                    continue
                if state is not None and state.type in stopping:
                    request_stop(f"{reason} ({state.name})")
                    return

    ctx = contextvars.copy_context()
    thread = threading.Thread(target=ctx.run, args=(loop,), name="mdp-cancel-watcher", daemon=True)
    thread.start()

    def stop() -> None:
        halt.set()
        thread.join(timeout=every + 5.0)

    return stop
