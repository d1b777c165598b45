"""Run a long computation in a child process that a stop ends at once (:func:`run_killable`).

Why a process: HiGHS checks its interrupt callback (:mod:`mdp_core.solvers.highs`) only inside simplex and
interior-point iterations. Before the first iteration -- its model checks, presolve, the set-up of the
algorithm -- nothing can stop it, and a thread cannot be stopped from outside. Measured with HiGHS
1.15.1 on the full LP of a dense synthetic instance (N = 300, K = 100, eps 10, eta 2: 4.05 M rows, 8.1 M
non-zeros, 2 shared cores; ``python bench/highs_phases.py``): dual simplex's
first interrupt check came 33.1 s into ``run()`` on a busy machine (5.6 s of checks, then presolve 16 s
-- it removed nothing --, then 11 s of simplex set-up) and 15.6 s on a quieter one; interior point's
11.2 s; after that the checks came at least every 1.7 s. That preamble is where a SIGTERM waited 38-41 s.

:func:`run_killable` runs ``fn(*args, progress=..., **kwargs)`` in a spawned child process, in its own
process group, and waits for it while checking the caller's stop token (:mod:`mdp_core.runtime.control`) every
:data:`~mdp_core.runtime.control.POLL` s. Progress lines (with their numbers), the latest line and the solver's
activity travel back, so a stage's heartbeat and progress bar keep moving; the result, or the exception
the child raised, comes back as it is. When the token stops (SIGTERM, UI Cancel, a stage timeout) the
child is told (its own token stops: its HiGHS runs end at their next check, its Dask actors are
interrupted) and :data:`GRACE` s later its whole process group is killed, its own worker processes
included; then the caller's token raises :class:`~mdp_core.errors.Interrupted` /
:class:`~mdp_core.errors.StageTimeout` exactly as in process. The child kills its group itself when the
parent disappears (its pipe closes), so a parent killed by a signal leaves nothing running.

A daemonic process (a Dask worker, a multiprocessing pool worker) may not have children: there
:func:`available` is False and callers run the computation in process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from mdp_core.errors import SolverError
from mdp_core.runtime import control

GRACE = 2.0  # seconds a stopped child gets to stop itself before its process group is killed
ACTIVITY_EVERY = 1.0  # seconds between two activity updates sent by the child


def available() -> bool:
    """True when this process may start a child process (it is not daemonic)."""
    return not mp.current_process().daemon


def run_killable(
    fn: Callable[..., Any],
    *args: Any,
    progress: Callable[[str], None] | None = None,
    what: str = "the computation",
    **kwargs: Any,
) -> Any:
    """``fn(*args, progress=..., **kwargs)`` in a child process that the current stop token can kill
    (module docstring). ``fn``, the arguments and the result must be picklable (``fn`` a module-level
    function). ``what`` names the computation in messages. Raises what ``fn`` raised, or
    :class:`~mdp_core.errors.Interrupted` when stopped."""
    ctx = mp.get_context("spawn")
    down_r, down_w = ctx.Pipe(duplex=False)  # parent -> child: a stop reason
    up_r, up_w = ctx.Pipe(duplex=False)  # child -> parent: progress, then the answer
    proc = ctx.Process(
        target=_child, args=(down_r, up_w, fn, args, kwargs, progress is not None), name="mdp-solve", daemon=False
    )
    proc.start()
    down_r.close()
    up_w.close()
    token = control.current()
    stopped_at: float | None = None
    doing = ""  # the child's latest activity ("lp component 1/1: HiGHS simplex iteration 12 ...")
    try:
        while True:
            reason = token.reason()
            if reason is not None:
                if stopped_at is None:
                    stopped_at = time.monotonic()
                    _send(down_w, reason)
                elif time.monotonic() - stopped_at >= GRACE:
                    break
            ready = wait([up_r, proc.sentinel], control.POLL)
            if not ready:
                continue
            try:
                if up_r not in ready and not up_r.poll():  # the child ended (spawn keeps a copy of the pipe
                    raise EOFError  # until the child takes it: no end-of-file if it died before that)
                kind, payload = up_r.recv()
            except (EOFError, OSError):  # the child is gone without an answer
                if token.reason() is not None:
                    break
                proc.join(2.0)
                raise SolverError(f"{what}: its process ended without an answer (exit code {proc.exitcode})") from None
            if kind == "progress":
                if progress is not None:
                    progress(_unpack(payload))
            elif kind == "note":
                token.note(payload)
            elif kind == "activity":
                doing = payload
                token.set_activity(payload)
            elif token.reason() is not None:  # an answer after the stop: the stop wins
                break
            elif kind == "ok":
                return payload
            else:
                raise payload
    finally:
        _end(proc, down_w, up_r)
    token.check(f"{what} ({doing})" if doing else what)
    raise AssertionError("unreachable: the token was stopped")  # pragma: no cover


def _send(conn: Any, message: Any) -> None:
    try:
        conn.send(message)
    except OSError:  # the child is gone already
        pass


def _end(proc: Any, down_w: Any, up_r: Any) -> None:
    """Kill the child's process group (it and any worker processes it started; a child that answered
    has nothing left to do) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child made itself a group leader; not reaped yet
    except (ProcessLookupError, PermissionError, AttributeError):
        pass
    if proc.is_alive():  # killed before it became a group leader
        proc.kill()
    proc.join(5.0)
    down_w.close()
    up_r.close()


def _pack(line: str) -> tuple[str, dict[str, Any] | None]:
    """A progress line with its numbers (a :class:`~mdp_core.runtime.control.Progress` pickles as plain text)."""
    return str(line), (dict(vars(line)) if isinstance(line, control.Progress) else None)


def _unpack(packed: tuple[str, dict[str, Any] | None]) -> str:
    text, fields = packed
    if fields is None:
        return text
    line = str.__new__(control.Progress, text)
    vars(line).update(fields)
    return line


class _RelayToken(control.StopToken):
    """The child's token: its latest line and the solver's activity also go to the parent."""

    def __init__(self, send: Callable[[tuple[str, Any]], None]) -> None:
        super().__init__(label="")
        self._relay, self._sent_at = send, 0.0

    def note(self, line: str) -> None:
        super().note(line)
        self._relay(("note", str(line)))

    def set_activity(self, text: str) -> None:
        super().set_activity(text)
        now = time.monotonic()
        if now - self._sent_at >= ACTIVITY_EVERY:
            self._sent_at = now
            self._relay(("activity", text))


def _child(down: Any, up: Any, fn: Callable[..., Any], args: tuple, kwargs: dict, with_progress: bool) -> None:
    """The child process: its own process group, Ctrl-C left to the parent, a thread that obeys the
    parent (a stop reason) and ends the group when the parent is gone; then ``fn`` and its answer."""
    try:
        os.setpgrp()
    except (AttributeError, OSError):  # pragma: no cover - not POSIX
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lock = threading.Lock()

    def send(message: tuple[str, Any]) -> None:
        with lock:
            up.send(message)

    token = _RelayToken(send)

    def listen() -> None:
        while True:
            try:
                token.request(str(down.recv()))
            except (EOFError, OSError):  # the parent is gone (or done): end this group now
                os.killpg(os.getpgrp(), signal.SIGKILL)
                return

    threading.Thread(target=listen, name="mdp-parent-watch", daemon=True).start()
    relay = (lambda line: send(("progress", _pack(line)))) if with_progress else None
    with control.scope(token=token):
        try:
            answer: tuple[str, Any] = ("ok", fn(*args, progress=relay, **kwargs))
        except BaseException as exc:  # noqa: BLE001 -- every failure goes back to the parent
            answer = ("error", exc)
    try:
        send(answer)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:  # an answer that does not pickle
        send(("error", SolverError(f"{type(answer[1]).__name__}: {answer[1]} (unpicklable: {exc})")))
