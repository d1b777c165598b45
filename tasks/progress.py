"""Progress a person can see, and a stop a person can ask for.

:class:`Heartbeat` wraps a stage's computation (``tasks.common.run_stage``). A background thread logs to
the Prefect run logger -- which also prints to the terminal -- whenever the stage has been silent for
``every`` seconds, and says what changed: a progress line the throttled log did not print yet
(``solve: rowgen round 3: gap 0.96% (target 0.1%), LB 0.4171 UB 0.4211, 412 s``), else what the solver
is doing now (the HiGHS iteration, from the stage's stop token) and how long ago the last line came.

:class:`ProgressArtifact` mirrors a long solve in the UI (``create_progress_artifact``): percent done =
max(the proven gap's way from its first value down to the target, on a log scale; elapsed / time limit;
components solved) from :class:`mdp_core.runtime.control.Progress` lines, and the latest line as description.
Inside a round it moves too: the stage's heartbeat hands it what the solver is doing now ("rowgen round 2
LP (1200 rows): HiGHS interior point iteration 12 ...", :mod:`mdp_core.solvers.highs`), and the iterations of the
running LP, against the iteration count of the previous LP, advance the bar through the share of it the
round is expected to take (:func:`round_slot`, :func:`lp_share`, :func:`within_round`), and where nothing
better measures the work the clock does: elapsed time against the round's expected time (the prediction, or
the previous round's length: :func:`time_share`), twice a second from the heartbeat. It never moves
backwards within a stage; 100 % only when the solve returns.

:func:`publish_artifact` creates a Prefect artifact under a stable key only when its content differs
from the key's latest version: a cached re-run adds nothing to the UI.

Stopping: :func:`request_stop` and :func:`install_signal_handlers` (SIGTERM / SIGINT) are
:mod:`mdp_core.runtime.control`'s; :func:`watch_cancellation` polls a flow run's state through Prefect's client
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

from mdp_core.runtime.control import (  # re-exported: what a flow calls to stop its stages
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
    "lp_share",
    "note",
    "publish_artifact",
    "release_key",
    "request_stop",
    "round_slot",
    "time_share",
    "watch_cancellation",
    "within_round",
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
        self._watchers: list[Callable[[str], None]] = []
        self._tickers: list[Callable[[float], None]] = []
        self._seen_activity = -math.inf

    def watch(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(activity)`` from the heartbeat's thread (about twice a second) whenever the stage's
        token reports a new solver activity (:meth:`mdp_core.runtime.control.StopToken.set_activity`)."""
        self._watchers.append(fn)

    def tick(self, fn: Callable[[float], None]) -> None:
        """Call ``fn(time.monotonic())`` from the heartbeat's thread about twice a second, whatever the solver
        reports (a progress bar's elapsed-time floor: :meth:`ProgressArtifact.tick`)."""
        self._tickers.append(fn)

    def _tell_watchers(self) -> None:
        for tick in self._tickers:
            try:
                tick(time.monotonic())
            except Exception:  # a progress bar must never break a stage
                pass
        tok = self.token
        if tok is None or not self._watchers or not tok.activity or tok.activity_at <= self._seen_activity:
            return
        self._seen_activity = tok.activity_at
        for fn in self._watchers:
            try:
                fn(tok.activity)
            except Exception:  # a progress bar must never break a stage
                pass

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
            self._tell_watchers()
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
        ctx = contextvars.copy_context()  # the run's Prefect context: a watcher may update an artifact
        self._thread = threading.Thread(target=ctx.run, args=(self._beat,), name=f"heartbeat-{self.stage}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        _local.heartbeat = self._prev


_COMPONENT = re.compile(r"component (\d+)/(\d+)")
_ITERATION = re.compile(r"iteration (\d+)")
# what mdp_core.solvers.highs reports while an LP runs: "<what>: HiGHS interior point iteration 12 (3 s into this LP)"
_ACTIVITY = re.compile(r"^(?P<what>.*?)HiGHS (?P<kind>interior point|simplex) iteration (?P<n>\d+)")

# Iterations the first LP of a solve is guessed to take, before any LP of it has finished: HiGHS's interior
# point method (IPX) ends the LPs of this project in some 20-60 iterations; simplex counts grow with the
# model (rows x columns), so its guess is only where the bar starts creeping (lp_share past "expected").
FIRST_LP_ITERATIONS = {"interior point": 30, "simplex": 5000}
# The share of the bar (percent) the first round is guessed to take, before any round has finished: the
# first LP of a decomposition is its longest (a fresh factorisation, the most rows added at once), and a
# one-shot LP ("lp") is the whole solve.
FIRST_ROUND_SLOT = 45.0
# Seconds the first round is guessed to take when nobody predicted it (``ProgressArtifact(expected=...)``): the
# bar's elapsed-time floor inside a round is time_share(elapsed, expected) of the round's slot, so the first
# round shows half of FIRST_ROUND_SLOT at this age (a 3-minute first round passes 10 % after 20 s); later rounds
# expect the previous one's length.
FIRST_ROUND_SECONDS = 60.0
MIN_SLOT = 1.0  # percent: a round that moved the bar less still lets the next one visibly move
CEILING = 99.0  # percent before the solve returns (a closed gap still has certification ahead)


def lp_share(n: int, expected: float) -> float:
    """The share in [0, 1) of a running LP done after ``n`` iterations when about ``expected`` are expected
    (the previous LP's count): linear up to 0.9 at ``n = expected``, then creeping towards 1 as
    ``0.9 + 0.1 (1 - expected / n)`` (an LP longer than expected keeps moving, never reaching its end)."""
    if n <= 0:
        return 0.0
    e = max(float(expected), 1.0)
    if n <= e:
        return 0.9 * n / e
    return 0.9 + 0.1 * (1.0 - e / n)


def round_slot(base: float, last_increment: float | None) -> float:
    """The percent of the bar the round starting at ``base`` percent is expected to take: the previous
    round's increment (``last_increment``; None for the first round: :data:`FIRST_ROUND_SLOT`), at least
    :data:`MIN_SLOT` and at most half of what is left below :data:`CEILING` (so an estimate never reaches
    the end: only the solve's own lines and its return do)."""
    room = max(CEILING - base, 0.0) / 2.0
    want = FIRST_ROUND_SLOT if last_increment is None else max(last_increment, MIN_SLOT)
    return max(min(want, room), 0.0)


def time_share(elapsed: float, expected: float) -> float:
    """The share in [0, 1) of a round done after ``elapsed`` s when it is expected to take ``expected`` s (the
    prediction, or the previous round's length): ``elapsed / (elapsed + expected)`` -- a half at the expected
    time, creeping towards 1 after it, never reaching it. Where nothing better measures the work (a first LP
    whose solver reports no iterations yet), the bar moves with the clock."""
    if elapsed <= 0:
        return 0.0
    return elapsed / (elapsed + max(expected, 1e-9))


def within_round(base: float, slot: float, share: float) -> float:
    """Percent shown inside a round: ``base`` (the bar when the round began) + ``share`` (:func:`lp_share`)
    of its ``slot`` (:func:`round_slot`)."""
    return base + slot * min(max(share, 0.0), 1.0)


class ProgressArtifact:
    """A Prefect progress artifact for one solve, updated at most every ``every`` seconds.

    ``limit``: seconds the solve may take (the stage timeout), counted from construction; the elapsed
    share of it is a floor of the percentage. Constructed inside a stage (``tasks.common.run_stage``), it
    watches the stage's heartbeat for the solver's activity (:meth:`activity`): the bar then moves inside a
    round with the running LP's iterations (module docstring)."""

    def __init__(
        self,
        key: str | None,
        title: str,
        max_iterations: int | None = None,
        every: float = EVERY,
        limit: float | None = None,
        expected: float | None = None,
    ) -> None:
        self.key, self.title, self.max_iterations, self.every, self.limit = key, title, max_iterations, every, limit
        self.id: Any = None
        self.last = 0.0
        self.percent = 0.0
        self.first_gap = math.inf  # the first finite relative gap: 0 % on the log scale
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._send = threading.Lock()  # one update in flight; none after done() (the heartbeat's thread races it)
        self.finished = False
        self.base = 0.0  # percent when the current round began
        self.last_increment: float | None = None  # percent the previous round moved the bar (None: first round)
        self.slot = round_slot(0.0, None)
        self.lp_what = ""  # the running LP ("rowgen round 2 LP (1200 rows): ")
        self.lp_count = 0  # its iterations so far
        self.expected: dict[str, float] = {k: float(v) for k, v in FIRST_LP_ITERATIONS.items()}
        self.round_t0 = self.t0  # when the current round began, and how long it is expected to take (s)
        self.round_seconds = float(expected) if expected else FIRST_ROUND_SECONDS
        self.latest = "started"
        hb = current()
        if hb is not None:
            hb.watch(self.activity)
            hb.tick(self.tick)
        try:
            from prefect.context import FlowRunContext, TaskRunContext

            if TaskRunContext.get() is None and FlowRunContext.get() is None:
                return  # not inside a run (tests through .fn): no artifact, and no ephemeral server for one
            from prefect.artifacts import create_progress_artifact

            # progress: percent, 0-100 (Prefect's scale, which the UI shows as is), here and in every update
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

    def ends_a_round(self, line: str) -> bool:
        """Whether ``line`` measures the work (the end of a round): a :class:`Progress` (bounds, gap), "component
        i/n", or "iteration i" of ``max_iterations``. Any other line is a note (``auto: rowgen (...)``, the
        method's choice, a fallback): it becomes the description, and the round goes on -- a note taken for a
        round's end made the first round's slot its first seconds' share (a 3-minute Rome solve's bar crept
        to 4.6 % through its 74 s first round, issue 52)."""
        return (
            isinstance(line, Progress)
            or _COMPONENT.search(line) is not None
            or (bool(self.max_iterations) and _ITERATION.search(line) is not None)
        )

    def __call__(self, line: str) -> None:
        """A progress line of the solve: the end of a round (:meth:`ends_a_round`) moves the bar to what it
        proves, never back, and the next round's slot is what this one moved; a note is only described."""
        now = time.monotonic()
        if not self.ends_a_round(line):
            with self._lock:
                self.latest = str(line)
            self._maybe_update(now, line)
            return
        with self._lock:
            done = self.fraction(line, now)
            # 100 % only when the solve returns (done()): a closed gap still has certification ahead
            self.percent = max(self.percent, min(CEILING, 100.0 * done))
            self.last_increment = self.percent - self.base
            self.base = self.percent
            self.slot = round_slot(self.base, self.last_increment)
            self.round_seconds, self.round_t0 = max(now - self.round_t0, 1.0), now  # the next round: as long
            self.latest = str(line)
        self._maybe_update(now, line)

    def tick(self, now: float) -> None:
        """The clock (the heartbeat's thread, twice a second): the bar moves to :func:`within_round` of the
        round's :func:`time_share` (elapsed against the round's expected time), never back, below
        :data:`CEILING`. Nothing once this process is asked to stop: the stopping stage must not wait behind an
        update the clock sends to a Prefect server that may be gone (its client retries for a minute)."""
        from mdp_core.runtime.control import PROCESS

        if PROCESS.reason() is not None:
            return
        with self._lock:
            if self.finished:
                return
            inside = within_round(self.base, self.slot, time_share(now - self.round_t0, self.round_seconds))
            self.percent = max(self.percent, min(CEILING, inside))
        self._maybe_update(now, self.latest)

    def activity(self, text: str) -> None:
        """What the solver does now (``...HiGHS interior point iteration 12 ...``): a new LP (another
        ``what``, or the count fell: a retry) makes the previous LP's count the expected one; the bar
        moves to :func:`within_round` of the running LP's :func:`lp_share`, never back."""
        m = _ACTIVITY.search(text)
        if m is None:
            return
        now = time.monotonic()
        what, kind, n = m.group("what"), m.group("kind"), int(m.group("n"))
        with self._lock:
            if what != self.lp_what or n < self.lp_count:  # another LP
                if self.lp_count > 0:
                    self.expected[kind] = float(self.lp_count)
                self.lp_what, self.lp_count = what, 0
            self.lp_count = max(self.lp_count, n)
            inside = within_round(self.base, self.slot, lp_share(self.lp_count, self.expected[kind]))
            floor = 100.0 * min((now - self.t0) / self.limit, 1.0) if self.limit else 0.0
            self.percent = max(self.percent, min(CEILING, max(inside, floor)))
            self.latest = text
        self._maybe_update(now, text)

    def _maybe_update(self, now: float, line: str) -> None:
        if self.id is not None and now - self.last >= self.every:
            self.last = now
            self._update(self.percent, f"{self.title}: {now - self.t0:.0f} s; {line}")

    def done(self, summary: str) -> None:
        """The solve returned: the artifact at 100 %, and no later update (from the heartbeat) moves it."""
        if self.id is not None:
            self._update(100.0, f"{self.title}: done in {time.monotonic() - self.t0:.0f} s; {summary}", final=True)
        self.finished = True

    def _update(self, percent: float, description: str, final: bool = False) -> None:
        """Send one update (one at a time); the final one waits at most 2 s behind an update in flight (to a
        server that may be gone) and is then dropped: the stage's end never waits on the bar."""
        if not self._send.acquire(timeout=2.0 if final else -1):
            self.finished = True
            return
        try:
            if self.finished:
                return
            self.finished = final
            self._send_update(percent, description)
        finally:
            self._send.release()

    def _send_update(self, percent: float, description: str) -> None:
        """Send ``percent`` (0-100, never a fraction: Prefect shows 0.9 as 0.9 %) to the artifact."""
        try:
            from prefect.artifacts import update_progress_artifact

            update_progress_artifact(self.id, progress=percent, description=description[:1000])
        except Exception:
            pass


def _same_data(kind: str, stored: Any, data: str) -> bool:
    """Whether an artifact's stored ``data`` is ``data`` (a table's JSON compared parsed)."""
    import json

    if kind == "table":
        try:
            return (json.loads(stored) if isinstance(stored, str) else stored) == json.loads(data)
        except (TypeError, ValueError):
            return False
    return isinstance(stored, str) and stored == data


def latest_artifact(key: str) -> Any | None:
    """The latest version of the artifact ``key`` on the Prefect API (a ``prefect.client.schemas.objects.
    ArtifactCollection``: ``data``, ``description``, ``type``, ``flow_run_id``), None when there is none."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(key=ArtifactCollectionFilterKey(any_=[key])), limit=1
        )
    return found[0] if found else None


def publish_artifact(kind: str, key: str, content: Any, description: str) -> bool:
    """Create a new version of the ``kind`` ("markdown": ``content`` a str; "table": a list of records)
    artifact ``key`` on the current run unless the key's latest version holds exactly this content and
    description: one artifact per key and content, so a cached re-run adds none. True when one was
    created. Outside a Prefect run nothing is created (False); an API that cannot be read: created."""
    import json

    from prefect.artifacts import TableArtifact, create_markdown_artifact, create_table_artifact
    from prefect.context import FlowRunContext, TaskRunContext

    if kind not in ("markdown", "table"):
        raise ValueError(f"publish_artifact: kind must be 'markdown' or 'table', got {kind!r}")
    if TaskRunContext.get() is None and FlowRunContext.get() is None:
        return False
    data = content if kind == "markdown" else json.dumps(TableArtifact._sanitize(content))
    try:
        latest = latest_artifact(key)
    except Exception as exc:  # an old API or a busy server: publish (a duplicate beats a missing artifact)
        logging.getLogger("mdp_release").debug("could not read artifact %s: %s", key, exc)
        latest = None
    if latest is not None and latest.type == kind and latest.description == description:
        if _same_data(kind, latest.data, data):
            return False
    if kind == "markdown":
        create_markdown_artifact(markdown=content, key=key, description=description)
    else:
        create_table_artifact(table=content, key=key, description=description)
    return True


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


FLOW_HEARTBEAT: contextvars.ContextVar[int | None] = contextvars.ContextVar("mdp_flow_heartbeat", default=None)
"""Seconds between the flow-run heartbeats a release's cancellation watcher sends itself
(:func:`watch_cancellation`); None (the default): none, Prefect's engine sends them (or nobody, in ephemeral
mode). Set by ``mdp-release run`` (:func:`flows.run.own_flow_heartbeat`) together with Prefect's own heartbeat
switched off."""


def own_heartbeat(flow_run: Any, flow_name: str) -> tuple[int, dict[str, str], list[dict[str, str]]] | None:
    """The ``heartbeat`` argument of :func:`watch_cancellation` for ``flow_run``: (seconds, resource, related)
    when :data:`FLOW_HEARTBEAT` is set (``mdp-release run`` against a server), else None. A function, not the
    context variable itself, for the flow to call: Prefect's runner pickles a served flow's function by value
    with the globals it names, and a ``ContextVar`` cannot be pickled."""
    every = FLOW_HEARTBEAT.get()
    return None if every is None else (every, *heartbeat_event(flow_run, flow_name))


def heartbeat_event(flow_run: Any, flow_name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The resource and related resources of a ``prefect.flow-run.heartbeat`` event for ``flow_run`` (a
    Prefect ``FlowRun``): the same resource id, name and related flow, deployment and tags as the event
    Prefect's engine sends, which its automations (a crashed run is one whose heartbeats stopped) match."""
    from prefect import __version__ as prefect_version

    resource = {
        "prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
        "prefect.resource.name": flow_run.name or "",
        "prefect.version": prefect_version,
    }
    related = []
    if flow_run.flow_id:
        related.append(
            {
                "prefect.resource.id": f"prefect.flow.{flow_run.flow_id}",
                "prefect.resource.role": "flow",
                "prefect.resource.name": flow_name,
            }
        )
    if flow_run.deployment_id:
        related.append(
            {
                "prefect.resource.id": f"prefect.deployment.{flow_run.deployment_id}",
                "prefect.resource.role": "deployment",
            }
        )
    related += [
        {"prefect.resource.id": f"prefect.tag.{t}", "prefect.resource.role": "tag"} for t in sorted(flow_run.tags or [])
    ]
    return resource, related


def watch_cancellation(
    flow_run_id: Any,
    every: float = 2.0,
    reason: str = "the flow run was cancelled",
    heartbeat: tuple[int, dict[str, str], list[dict[str, str]]] | None = None,
) -> Callable[[], None]:
    """Poll the flow run ``flow_run_id`` and the flow runs it is a subflow of (a batch's release: its
    batch run) every ``every`` s from a daemon thread (Prefect's public client, ``read_flow_run`` /
    ``read_task_run``) and :func:`request_stop` once one of them is CANCELLING or CANCELLED (Cancel in the
    UI, ``prefect flow-run cancel ID``, the API's ``set_flow_run_state``). The stop then ends the running
    stage within seconds; the release flow ends the run Cancelled. Call it in the flow (or after the flow
    run exists), with the caller's Prefect settings: the thread runs in a copy of the caller's context.
    Returns a function that stops the watcher (call it when the flow returns).

    ``heartbeat`` = (seconds, resource, related) (:func:`heartbeat_event`): the same thread also sends the
    run's ``prefect.flow-run.heartbeat`` event (Prefect's public ``emit_event``) at once and every
    ``seconds``, in place of the engine's. Why: Prefect's engine joins its heartbeat thread when a run ends,
    and that thread sleeps in 1 s steps, so every run lasted at least about 1 s (a fully cached re-run waited
    0.35-0.55 s for it); this thread stops at once."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    halt = threading.Event()
    stopping = {StateType.CANCELLING, StateType.CANCELLED}

    def lineage(client: Any) -> list[Any]:
        """This run and its parents (a subflow's parent task run names the parent flow run)."""
        ids: list[Any] = []
        run_id = flow_run_id
        while run_id is not None and len(ids) < 10:
            ids.append(run_id)
            parent_task = client.read_flow_run(run_id).parent_task_run_id
            run_id = client.read_task_run(parent_task).flow_run_id if parent_task is not None else None
        return ids

    def beat(log: logging.Logger) -> None:
        if heartbeat is None or time.monotonic() < due[0]:
            return
        due[0] = time.monotonic() + heartbeat[0]
        try:
            from prefect.events import emit_event

            emit_event(event="prefect.flow-run.heartbeat", resource=heartbeat[1], related=heartbeat[2])
        except Exception as exc:  # a heartbeat must never break the run
            log.debug("heartbeat of %s: %s", flow_run_id, exc)

    due = [0.0]

    def loop() -> None:
        log = logging.getLogger("mdp_release")
        beat(log)
        with get_client(sync_client=True) as client:
            ids, resolved = [flow_run_id], False
            while not halt.wait(every):
                beat(log)
                try:
                    if not resolved:  # once (a parent's task run may not be recorded yet: then next time)
                        ids, resolved = lineage(client), True
                except Exception as exc:
                    log.debug("cancel watcher: parents of %s: %s", flow_run_id, exc)
                for run_id in ids:
                    try:
                        state = client.read_flow_run(run_id).state
                    except Exception as exc:  # the API may be busy: try again next time
                        log.debug("cancel watcher: %s", exc)
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
