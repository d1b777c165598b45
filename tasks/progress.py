"""Progress a person can see: every computing stage says something at least every 5 s.

:class:`Heartbeat` wraps a stage's computation (``tasks.common.run_stage``). A background thread logs
``<stage>: running, 42 s elapsed; last: <latest progress line>`` to the Prefect run logger -- which
also prints to the terminal -- whenever the stage has been silent for ``every`` seconds (a solver deep
inside one HiGHS call, a big Parquet export). Progress lines the solvers emit (``Throttled``) are
noted here, so the heartbeat repeats the latest bounds and gap instead of going quiet.

:class:`ProgressArtifact` mirrors a long solve in the UI (``create_progress_artifact``): percent done
(components solved, or iterations) and the latest line (bounds, gap) as its description.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

EVERY = 5.0  # seconds of silence before the heartbeat speaks
_local = threading.local()


def current() -> Heartbeat | None:
    """The heartbeat of the stage running in this thread, if any."""
    return getattr(_local, "heartbeat", None)


def note(line: str) -> None:
    """Record a progress line of the current stage (resets its silence clock)."""
    hb = current()
    if hb is not None:
        hb.note(line)


class Heartbeat:
    def __init__(self, stage: str, log: Any, every: float = EVERY) -> None:
        self.stage, self.log, self.every = stage, log, every
        self.t0 = self.last = time.monotonic()
        self.line = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._prev: Heartbeat | None = None

    def note(self, line: str, spoken: bool = True) -> None:
        self.line = line
        if spoken:
            self.last = time.monotonic()

    def _beat(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            if now - self.last >= self.every:
                self.last = now
                tail = f"; last: {self.line}" if self.line else ""
                try:
                    self.log.info("%s: running, %.0f s elapsed%s", self.stage, now - self.t0, tail)
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
    """A Prefect progress artifact for one solve, updated at most every ``every`` seconds."""

    def __init__(self, key: str | None, title: str, max_iterations: int | None = None, every: float = EVERY) -> None:
        self.key, self.title, self.max_iterations, self.every = key, title, max_iterations, every
        self.id: Any = None
        self.last = 0.0
        self.percent = 0.0
        self.t0 = time.monotonic()
        try:
            from prefect.context import FlowRunContext, TaskRunContext

            if TaskRunContext.get() is None and FlowRunContext.get() is None:
                return  # not inside a run (tests through .fn): no artifact, and no ephemeral server for one
            from prefect.artifacts import create_progress_artifact

            self.id = create_progress_artifact(progress=0.0, key=key, description=f"{title}: started")
        except Exception as exc:  # outside a run (tests through .fn) or no API: no artifact
            logging.getLogger("mdp_release").debug("no progress artifact: %s", exc)

    def __call__(self, line: str) -> None:
        m = _COMPONENT.search(line)
        if m:
            self.percent = max(self.percent, 100.0 * int(m.group(1)) / max(int(m.group(2)), 1))
        else:
            m = _ITERATION.search(line)
            if m and self.max_iterations:
                self.percent = max(self.percent, min(99.0, 100.0 * int(m.group(1)) / self.max_iterations))
        now = time.monotonic()
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
