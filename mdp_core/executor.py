"""Independent solves through one small interface: stateful per-key workers.

A caller describes each unit of work by a picklable *spec* (e.g. one Benders subproblem's arrays)
and a module-level *factory* that builds a worker from it (a live HiGHS model, say). The executor

    start(factory, specs, weights=None)   build one worker per spec (where the backend runs them)
    solve(requests) -> results            requests[i] goes to the worker of specs[i]; results come
                                          back in request order
    close()                               stop the workers

Workers keep their state between ``solve`` calls (warm-started models), so only the small
requests and results travel. Backends: :class:`SerialExecutor` (this process, in order) and
:class:`ProcessExecutor` (persistent spawned processes, each owning a fixed, size-balanced group of
workers). A result depends only on its worker's spec and the requests it has seen, never on the
backend or the number of processes: factories, specs, requests and results are picklable, and a
worker never talks to another. :class:`DaskExecutor` runs the same groups as Dask actors on a
``dask.distributed`` cluster: a :class:`~distributed.LocalCluster` it starts, or any scheduler
address (``tcp://host:8786``), so a solve scales out by pointing it at a cluster.

Time limits travel inside requests as absolute wall-clock deadlines (``time.time()``), so a worker
that solves several requests one after the other leaves the later ones only what is left.

Stopping (:mod:`mdp_core.control`): while :meth:`solve` waits for its workers it checks the caller's
stop token every :data:`~mdp_core.control.POLL` s. When it is stopped, :class:`ProcessExecutor`
terminates its worker processes and :class:`DaskExecutor` interrupts its actors (their HiGHS runs end
at the next interrupt check) and cancels their futures; then :class:`~mdp_core.errors.Interrupted` is
raised. :meth:`cancel` does the same from any thread.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mdp_core import control
from mdp_core.errors import InputError, Interrupted, SolverError

Worker = Callable[[Any], Any]  # request -> result, stateful
Factory = Callable[[Any], Worker]  # spec -> worker; must be picklable (a module-level function or class)
EXECUTORS = ("auto", "serial", "process", "dask")


class Executor(Protocol):
    """Runs requests on stateful workers, one worker per spec; results in request order."""

    name: str

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None: ...

    def solve(self, requests: Sequence[Any]) -> list[Any]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """Every worker in this process, requests answered one after the other."""

    name = "serial"
    in_process = True  # workers share this process (and its HiGHS thread pool)

    def __init__(self) -> None:
        self.workers: list[Worker] = []

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None:
        self.workers = [factory(s) for s in specs]

    def solve(self, requests: Sequence[Any]) -> list[Any]:
        if len(requests) != len(self.workers):
            raise InputError(f"{len(requests)} requests for {len(self.workers)} workers")
        return [w(r) for w, r in zip(self.workers, requests, strict=True)]

    def close(self) -> None:
        self.workers = []


def _serve(conn: Any, factory: Factory) -> None:
    """Process loop: receive the specs, build the workers once, then answer request lists until None."""
    try:
        specs = conn.recv()
        ex = SerialExecutor()
        ex.start(factory, specs)
        conn.send(("ready", None))
        while True:
            msg = conn.recv()
            if msg is None:
                break
            try:
                conn.send(("ok", ex.solve(msg)))
            except Exception as e:  # report, keep the process alive for a clean shutdown
                conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def balanced_groups(weights: Sequence[float], n_groups: int) -> list[list[int]]:
    """Indices split into at most ``n_groups`` non-empty groups, longest-processing-time first."""
    import numpy as np  # here, not at the top: the config imports this module for EXECUTORS

    groups: list[list[int]] = [[] for _ in range(max(1, n_groups))]
    load = np.zeros(len(groups))
    w = np.asarray(weights, dtype=float)
    for i in np.argsort(-w, kind="stable"):
        g = int(np.argmin(load))
        groups[g].append(int(i))
        load[g] += w[i]
    return [g for g in groups if g]


class ProcessExecutor:
    """Persistent worker processes (spawn), each owning a fixed, size-balanced group of workers.

    ``start`` returns at once: the processes import and build while the caller works; the first
    ``solve`` waits for them. The specs travel over each process's pipe from a thread, after the
    process started (a pipe blocks beyond 64 KB until the child reads, i.e. after its imports).
    """

    name = "process"
    in_process = False

    def __init__(self, processes: int | None = None) -> None:
        self.processes = processes or max(1, (os.cpu_count() or 1))
        self.groups: list[list[int]] = []
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.senders: list[threading.Thread] = []
        self.ready = False

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None:
        ctx = mp.get_context("spawn")
        w = [1.0] * len(specs) if weights is None else weights
        self.groups = balanced_groups(w, min(self.processes, len(specs)))
        for _ in self.groups:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(child, factory), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
        for g, c in zip(self.groups, self.conns, strict=True):
            t = threading.Thread(target=c.send, args=([specs[i] for i in g],), daemon=True)
            t.start()
            self.senders.append(t)

    def _recv(self, c: Any, what: str) -> tuple[str, Any]:
        """The next message on ``c``, checking the stop token while waiting (cancel and raise when stopped)."""
        token = control.current()
        try:
            while not c.poll(control.POLL):
                if token.reason() is not None:
                    break
            if token.reason() is None:
                return c.recv()
        except (EOFError, OSError) as e:  # the process died: a stop (SIGINT reaches the workers too) or a crash
            if token.reason() is None:
                raise SolverError(f"a worker process died while {what}: {type(e).__name__}") from None
        self.cancel()
        token.check(what)
        raise Interrupted(f"stopped while {what}")  # pragma: no cover - check() raised

    def _await_ready(self) -> None:
        if not self.ready:
            for t in self.senders:
                while t.is_alive():
                    t.join(control.POLL)
                    if control.current().reason() is not None:
                        self.cancel()
                        control.check("starting worker processes")
            for c in self.conns:
                tag, payload = self._recv(c, "starting worker processes")
                if tag != "ready":
                    raise SolverError(f"worker process failed to start: {payload}")
            self.ready = True

    def solve(self, requests: Sequence[Any]) -> list[Any]:
        self._await_ready()
        for g, c in zip(self.groups, self.conns, strict=True):
            c.send([requests[i] for i in g])
        out: list[Any] = [None] * len(requests)
        errors = []
        for g, c in zip(self.groups, self.conns, strict=True):
            tag, payload = self._recv(c, "waiting for worker processes")
            if tag != "ok":
                errors.append(payload)
                continue
            for i, r in zip(g, payload, strict=True):
                out[i] = r
        if errors:
            raise SolverError(f"worker error: {errors[0]}")
        return out

    def cancel(self) -> None:
        """Terminate every worker process now (SIGTERM, then SIGKILL after 2 s) and forget them."""
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        end = time.monotonic() + 2.0
        for p in self.procs:
            p.join(max(0.0, end - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.procs, self.conns, self.senders, self.ready = [], [], [], False

    def close(self) -> None:
        if control.current().reason() is not None:  # stopping: no graceful shutdown of busy workers
            self.cancel()
            return
        try:  # let workers finish starting before they are told to stop (no broken pipe on their side)
            if self.conns:
                self._await_ready()
        except (SolverError, OSError, EOFError, Interrupted):
            pass
        for c in self.conns:
            try:
                c.send(None)
                c.close()
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.procs, self.conns, self.senders = [], [], []


class _Group:
    """A Dask actor: one group of workers living in one Dask worker process."""

    def __init__(self, factory: Factory, specs: list[Any]) -> None:
        self.ex = SerialExecutor()
        self.ex.start(factory, specs)
        self.token = control.StopToken(label="dask worker group")

    def solve(self, requests: list[Any]) -> list[Any]:
        with control.scope(token=self.token):  # HiGHS runs in this actor thread obey self.token
            self.token.check("a Dask worker group")
            return self.ex.solve(requests)

    async def interrupt(self, reason: str) -> None:
        """Stop this group's running and future solves (a coroutine: runs on the worker's event loop,
        not queued behind the solve holding the actor thread)."""
        self.token.request(reason)


class DaskExecutor:
    """Worker groups as Dask actors (``dask.distributed``), one group per Dask worker.

    ``scheduler``: a scheduler address (``tcp://host:8786``) to use an existing cluster; None starts
    a :class:`distributed.LocalCluster` with ``processes`` single-threaded worker processes (default:
    the CPU count) and stops it on :meth:`close`. Groups are balanced by weight exactly like
    :class:`ProcessExecutor`'s, so results do not depend on the backend.
    """

    name = "dask"
    in_process = False

    def __init__(self, scheduler: str | None = None, processes: int | None = None, timeout: float = 20.0) -> None:
        self.scheduler, self.processes, self.timeout = scheduler, processes, timeout
        self.client: Any = None
        self.cluster: Any = None
        self.groups: list[list[int]] = []
        self.actors: list[Any] = []
        self.futures: list[Any] = []

    def _connect(self) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - dask is a dependency
            raise InputError("executor 'dask' needs dask.distributed: pip install 'dask[distributed]'") from None
        if self.scheduler:
            try:
                self.client = Client(self.scheduler, timeout=f"{self.timeout}s")
            except OSError as e:
                raise InputError(f"cannot reach the Dask scheduler {self.scheduler}: {e}") from None
        else:
            n = self.processes or max(1, os.cpu_count() or 1)
            self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            self.client = Client(self.cluster)

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None:
        self._connect()
        addresses = sorted(self.client.scheduler_info()["workers"])
        if not addresses:
            raise SolverError(f"the Dask cluster at {self.scheduler} has no workers")
        w = [1.0] * len(specs) if weights is None else weights
        self.groups = balanced_groups(w, min(len(addresses), len(specs)))
        futures = [
            self.client.submit(_Group, factory, [specs[i] for i in g], actor=True, workers=[addr], pure=False)
            for g, addr in zip(self.groups, addresses, strict=False)
        ]
        self.futures = futures
        self.actors = [f.result() for f in futures]

    def solve(self, requests: Sequence[Any]) -> list[Any]:
        pending = [a.solve([requests[i] for i in g]) for a, g in zip(self.actors, self.groups, strict=True)]
        token = control.current()
        while not all(f.done() for f in pending):
            if token.reason() is not None:
                self.cancel(token.reason() or "stopped")
                token.check("waiting for Dask workers")
            time.sleep(control.POLL)
        out: list[Any] = [None] * len(requests)
        for g, fut in zip(self.groups, pending, strict=True):
            try:
                got = fut.result()
            except Exception as e:  # a worker's exception, re-raised here
                raise SolverError(f"dask worker error: {type(e).__name__}: {e}") from None
            for i, r in zip(g, got, strict=True):
                out[i] = r
        return out

    def cancel(self, reason: str = "cancelled") -> None:
        """Interrupt every actor's solve (HiGHS stops at its next interrupt check) and cancel their futures."""
        sent = []
        for a in self.actors:
            try:
                sent.append(a.interrupt(reason))  # an ActorFuture, at once
            except Exception:  # noqa: BLE001 -- a lost worker: nothing left to interrupt
                pass
        for f in sent:  # delivered before the actors are released by the cancel below
            try:
                f.result(timeout=2.0)
            except Exception:  # noqa: BLE001
                pass
        if self.client is not None and self.futures:
            try:
                self.client.cancel(self.futures, force=True)
            except Exception:  # noqa: BLE001 -- the cluster may be gone already
                pass
        self.actors, self.futures = [], []

    def close(self) -> None:
        if self.actors and control.current().reason() is not None:
            self.cancel(control.current().reason() or "stopped")
        self.actors, self.futures = [], []
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.client = self.cluster = None


def make_executor(executor: str | Executor, parallel_pays: bool = False, scheduler: str | None = None) -> Executor:
    """ "serial", "process", "dask" (``scheduler`` address, or a local cluster), "auto" (processes
    when ``parallel_pays`` and there are >= 2 CPUs) or an :class:`Executor` (returned as it is)."""
    if not isinstance(executor, str):
        return executor
    if executor == "auto":
        executor = "process" if parallel_pays and (os.cpu_count() or 1) >= 2 else "serial"
    if executor == "serial":
        return SerialExecutor()
    if executor == "process":
        return ProcessExecutor()
    if executor == "dask":
        return DaskExecutor(scheduler)
    raise InputError(f"executor must be one of {EXECUTORS} or an Executor object, got {executor!r}")
