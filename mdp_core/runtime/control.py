"""Watch and stop a long solve: one cooperative stop token, and progress lines that carry the bounds.

Stopping. A :class:`StopToken` is asked to stop (:meth:`StopToken.request`: SIGTERM, SIGINT, UI Cancel)
or has a deadline (a stage timeout). Every HiGHS run obeys the token of the thread it runs in through
HiGHS's user-interrupt callback (:mod:`mdp_core.solvers.highs`, checked many times a second inside simplex
and interior point), the decomposition methods check it between rounds, and the executors terminate
their worker processes / interrupt their Dask actors. A stopped computation raises
:class:`~mdp_core.errors.Interrupted` (:class:`~mdp_core.errors.StageTimeout` when the deadline passed),
whose message names the stage, the reason and the last progress line; nothing half-done is written
(the task layer writes only when the computation returns).

Tokens nest per thread: :func:`scope` pushes a child of the current token (a stage's deadline); a
child is stopped when it or any parent is. The root, :data:`PROCESS`, stops everything in this process:
:func:`request_stop` (safe in a signal handler: it only assigns attributes) and
:func:`install_signal_handlers` are what a command line or a flow calls.

Ending. A stop ends a run within seconds when the process can report its end; when it cannot (a Prefect
server that is gone: its client retries each call for a minute), :func:`stop_watchdog` bounds the wait: once a
stop was requested it ends the process after ``grace`` seconds when ``hopeless()`` holds, and after ``bound``
seconds in any case -- a message on stderr, this process's child processes terminated, then the default
action of SIGTERM (exit status 143), raised by the signal handler in the main thread (:func:`end_if_due`).

Watching. :class:`Progress` is a ``str`` (so every existing ``progress(line)`` callback keeps working)
that also carries the numbers: round, lower and upper bound, the requested gap, elapsed seconds and the
time limit. ``tasks.progress`` turns them into a moving percentage and a heartbeat that says what changed.
This module imports nothing heavy (no numpy, no highspy).
"""

from __future__ import annotations

import contextvars
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

from mdp_core.errors import Interrupted, StageTimeout

POLL = 0.1  # seconds between checks while waiting on something that cannot be interrupted


class StopToken:
    """A stop request and/or a deadline (``time.monotonic()`` seconds), inherited from ``parent``.

    ``label`` names what the token guards (a stage: "solve"); ``timeout`` is the deadline's length in
    seconds, for messages. ``last`` is the latest progress line and ``activity`` what the solver is
    doing right now ("interior point iteration 12"); both are read by heartbeats and error messages.
    """

    def __init__(
        self, deadline: float = math.inf, label: str = "", parent: StopToken | None = None, timeout: float | None = None
    ) -> None:
        self.deadline, self.label, self.parent, self.timeout = deadline, label, parent, timeout
        self._reason: str | None = None
        self.last = ""
        self.activity = ""
        self.activity_at = time.monotonic()

    def request(self, reason: str = "stop requested") -> None:
        """Ask everything under this token to stop (idempotent; the first reason is kept)."""
        if self._reason is None:
            self._reason = reason

    def clear(self) -> None:
        """Forget a stop request (a new run in the same process)."""
        self._reason = None

    def reason(self) -> str | None:
        """Why this token is stopped (its own request, its deadline, a parent's), or None."""
        tok: StopToken | None = self
        while tok is not None:
            if tok._reason is not None:
                return tok._reason
            if time.monotonic() >= tok.deadline:
                span = f"{tok.timeout:g} s" if tok.timeout is not None else "its deadline"
                return f"{tok.label or 'the computation'} exceeded its timeout of {span}"
            tok = tok.parent
        return None

    def timed_out(self) -> bool:
        """True when the stop comes from a deadline (not from a request)."""
        tok: StopToken | None = self
        while tok is not None:
            if tok._reason is not None:
                return False
            if time.monotonic() >= tok.deadline:
                return True
            tok = tok.parent
        return False

    @property
    def stage(self) -> str:
        """The innermost label: the stage this token guards ("" outside any stage)."""
        tok: StopToken | None = self
        while tok is not None and not tok.label:
            tok = tok.parent
        return tok.label if tok is not None else ""

    def check(self, where: str = "") -> None:
        """Raise :class:`Interrupted` (:class:`StageTimeout` for a deadline) when stopped.

        ``where``: what was going on ("rowgen round 4 LP"); the message adds the last progress line."""
        reason = self.reason()
        if reason is None:
            return
        stage = self.stage or "solve"
        last = self.latest()
        msg = (
            f"{stage} stopped: {reason}" + (f", during {where}" if where else "") + (f"; last: {last}" if last else "")
        )
        err = StageTimeout if self.timed_out() else Interrupted
        raise err(msg, stage=stage, reason=reason, state=last)

    def latest(self) -> str:
        """The most recent progress line of this token or its parents."""
        tok: StopToken | None = self
        while tok is not None and not tok.last:
            tok = tok.parent
        return tok.last if tok is not None else ""

    def note(self, line: str) -> None:
        """Record a progress line here and in every parent (the stage's heartbeat reads its own token), through
        each parent's own ``note`` (a subclass's, e.g. the solve subprocess's relay to its parent process)."""
        self.last = line
        if self.parent is not None:
            self.parent.note(line)

    def set_activity(self, text: str) -> None:
        """Record what the solver does right now, here and in every parent (through their own ``set_activity``:
        rowgen's later rounds run under a child token, whose activity must reach the relay as round 1's does)."""
        self.activity, self.activity_at = text, time.monotonic()
        if self.parent is not None:
            self.parent.set_activity(text)

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking every :data:`POLL` s; True when stopped meanwhile."""
        end = time.monotonic() + seconds
        while self.reason() is None:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL, left))
        return True


PROCESS = StopToken()  # the root: stops every computation in this process
_local = threading.local()


def current() -> StopToken:
    """The innermost token of this thread (:data:`PROCESS` outside any :func:`scope`)."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else PROCESS


@contextmanager
def scope(timeout: float | None = None, label: str = "", token: StopToken | None = None) -> Iterator[StopToken]:
    """Run the block under a child token of :func:`current` (or under ``token``, re-parented): stopped by
    the parent, by its own :meth:`~StopToken.request`, or ``timeout`` seconds from now."""
    parent = current()
    if token is None:
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        token = StopToken(deadline, label, parent, timeout)
    elif token is not parent:
        token.parent = parent
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(token)
    try:
        yield token
    finally:
        stack.pop()


T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` computed in a daemon thread under the starting thread's current token (or ``token``):
    HiGHS runs in it obey that token, :func:`check` and :func:`report` in it see it. Context variables
    (a Prefect run's logger) are copied. :meth:`result` waits, checking the *waiting* thread's token.

    A daemon thread, so a process that stops does not wait for it (a stopped HiGHS run in it ends at
    its next interrupt check; numpy work runs to its end unless the process exits)."""

    def __init__(self, fn: Callable[[], T], token: StopToken | None = None, name: str = "mdp-background") -> None:
        self.token = token if token is not None else current()
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        ctx = contextvars.copy_context()

        def target() -> None:
            _local.stack = [self.token]
            try:
                self._value = ctx.run(fn)
            except BaseException as exc:  # noqa: BLE001 -- re-raised by result() in the waiting thread
                self._error = exc
            finally:
                self._done.set()

        threading.Thread(target=target, name=name, daemon=True).start()

    def result(self, where: str = "") -> T:
        """Wait for ``fn``'s value (re-raising its exception); raise :class:`Interrupted` when the waiting
        thread's token stops first."""
        while not self._done.wait(POLL):
            check(where)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def check(where: str = "") -> None:
    """:meth:`StopToken.check` of the current token (between rounds of an iterative method)."""
    current().check(where)


def request_stop(reason: str = "stop requested") -> None:
    """Stop every computation of this process (signal-handler safe). Running HiGHS solves end at their
    next interrupt check; the stage raises :class:`Interrupted`."""
    PROCESS.request(reason)


def clear_stop() -> None:
    """Forget a :func:`request_stop` (before a new run in the same process)."""
    PROCESS.clear()


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Callable[[], None]:
    """SIGTERM / SIGINT -> :func:`request_stop` (call from the main thread). A second SIGINT raises
    KeyboardInterrupt as usual (a forced stop); a signal after :func:`stop_watchdog` gave up ends the process
    (:func:`end_if_due`). Returns a function restoring the previous handlers."""
    previous: dict[int, Any] = {}

    interrupts = [0]

    def handler(signum: int, frame: Any) -> None:
        end_if_due(signum)  # the stop watchdog gave up waiting: the process ends here
        if signum == signal.SIGINT:
            interrupts[0] += 1
            if interrupts[0] > 1:
                raise KeyboardInterrupt
        if PROCESS.reason() is None:
            request_stop(f"{signal.Signals(signum).name} received")

    for s in signals:
        previous[s] = signal.signal(s, handler)
    # A Python-level handler runs only when the main thread executes bytecode -- not while it waits for a
    # solver running in C++ (HiGHS), which may take minutes. CPython's C-level handler also writes the
    # signal number to the wakeup fd: a thread reading it requests the stop at once, and HiGHS's interrupt
    # callback (any thread) sees it.
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    wanted = {int(s) for s in signals}

    def relay() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for b in data:
                if b in wanted and PROCESS.reason() is None:
                    request_stop(f"{signal.Signals(b).name} received")

    threading.Thread(target=relay, name="mdp-signal-relay", daemon=True).start()

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)  # the relay reads end-of-file and ends
        os.close(read_fd)

    return restore


_DUE: list[str] = []  # set once by the stop watchdog when it gives up waiting: the message it printed
END_SIGNAL = signal.SIGTERM  # what the watchdog ends the process with: exit status 128 + 15


def end_if_due(signum: int = END_SIGNAL) -> None:
    """In a signal handler (the main thread): when :func:`stop_watchdog` gave up waiting, end the process by
    ``signum``'s default action -- what the signal does without a handler -- else return at once."""
    if not _DUE:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def terminate_children(wait: float = 1.0) -> None:
    """SIGTERM to this process's child processes (Linux ``/proc``; nothing elsewhere), SIGKILL to those
    still there ``wait`` seconds later. A solver's child process group also ends by itself when its parent
    is gone (:mod:`mdp_core.runtime.isolate`)."""
    kids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        try:
            kids |= {int(x) for x in (task / "children").read_text().split()}
        except (OSError, ValueError):
            continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in sorted(kids):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                kids.discard(pid)
        end = time.monotonic() + wait
        while kids and time.monotonic() < end:
            kids = {pid for pid in kids if Path(f"/proc/{pid}").exists() and not _zombie(pid)}
            time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def stop_watchdog(
    bound: float,
    hopeless: Callable[[], bool] | None = None,
    grace: float = 3.0,
    message: Callable[[str, float, bool], str] | None = None,
) -> Callable[[], None]:
    """Bound the end of this process after a stop request of :data:`PROCESS` (SIGTERM, Ctrl-C, a Cancel).

    A daemon thread waits for the request, then: once ``hopeless()`` (polled every 0.5 s, in that thread)
    held twice in a row and ``grace`` seconds have passed -- nothing that would end the process sooner can
    happen, e.g. its API server is gone --, or after ``bound`` seconds in any case, it writes
    ``message(reason, seconds waited, hopeless)`` on stderr, terminates the child processes
    (:func:`terminate_children`) and sends :data:`END_SIGNAL` to the process: the handler of
    :func:`install_signal_handlers` (or the signal's default action) ends it; SIGKILL 5 s later if it did not.
    Returns ``disarm`` (an in-process caller disarms it before going on)."""
    disarmed = threading.Event()

    def watch() -> None:
        while PROCESS.reason() is None:
            if disarmed.wait(2 * POLL):
                return
        reason, t0, strikes = PROCESS.reason() or "stop requested", time.monotonic(), 0
        while not disarmed.wait(0.5):
            waited = time.monotonic() - t0
            strikes = strikes + 1 if hopeless is not None and hopeless() else 0
            if (strikes >= 2 and waited >= grace) or waited >= bound:
                break
        else:
            return
        if disarmed.is_set():
            return
        text = message(reason, waited, strikes >= 2) if message is not None else f"{reason}: ending now"
        _DUE.append(text)
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        terminate_children()
        os.kill(os.getpid(), END_SIGNAL)
        time.sleep(5.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="mdp-stop-watchdog", daemon=True).start()
    return disarmed.set


def report(progress: Callable[[str], None] | None, line: str) -> None:
    """Note ``line`` as the current token's latest state and pass it to ``progress`` (if any)."""
    current().note(line)
    if progress is not None:
        progress(line)


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


class Progress(str):
    """A progress line that carries its numbers (bounds in the instance's cost unit, seconds).

    Text: ``rowgen round 3: gap 0.96% (target 0.1%), LB 0.4171 UB 0.4211, 412 s; <detail>``; the bounds
    are ``lb`` and ``ub`` (``lower`` / ``upper`` stay str's methods).
    ``target`` is the relative gap that stops the method (gap_rel, or gap_abs / |UB| if larger);
    ``fraction`` a known fraction of the work done (components solved), else None.
    """

    method: str
    step: str
    lb: float  # not "lower" / "upper": str has those methods
    ub: float
    target: float
    elapsed: float
    time_limit: float
    fraction: float | None

    def __new__(
        cls,
        method: str,
        step: str,
        *,
        lower: float = -math.inf,
        upper: float = math.inf,
        gap_abs: float = 0.0,
        gap_rel: float = 0.0,
        elapsed: float = 0.0,
        time_limit: float = math.inf,
        fraction: float | None = None,
        detail: str = "",
    ) -> Progress:
        target = max(gap_rel, gap_abs / abs(upper)) if math.isfinite(upper) and upper != 0 else gap_rel
        parts = [f"{method} {step}:"]
        gap = _relative_gap(lower, upper)
        if math.isfinite(gap):
            parts.append(f"gap {_pct(gap)} (target {_pct(target)}), LB {lower:.10g} UB {upper:.10g},")
        elif math.isfinite(upper):
            parts.append(f"UB {upper:.10g}, no lower bound yet,")
        limit = f" of {time_limit:.0f} s" if math.isfinite(time_limit) else ""
        text = " ".join(parts) + f" {elapsed:.0f} s{limit}" + (f"; {detail}" if detail else "")
        self = super().__new__(cls, text)
        self.method, self.step, self.lb, self.ub = method, step, lower, upper
        self.target, self.elapsed, self.time_limit, self.fraction = target, elapsed, time_limit, fraction
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (log records, processes) as the plain line
        return (str, (str(self),))

    @property
    def gap(self) -> float:
        """(UB - LB) / |UB| (inf without both bounds)."""
        return _relative_gap(self.lb, self.ub)


def _relative_gap(lower: float, upper: float) -> float:
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return math.inf
    return max(upper - lower, 0.0) / max(abs(upper), 1e-300)


def gap_fraction(first: float, gap: float, target: float) -> float:
    """Progress of a gap from ``first`` down to ``target`` on a log scale, in [0, 1] (1: closed)."""
    if gap <= target:
        return 1.0
    if not (math.isfinite(first) and math.isfinite(gap)) or first <= target:
        return 0.0
    lo = max(target, 1e-12)
    return min(max(math.log(first / gap) / math.log(first / lo), 0.0), 1.0)
