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

Stopping (:mod:`mdp_core.runtime.control`): while :meth:`solve` waits for its workers it checks the caller's
stop token every :data:`~mdp_core.runtime.control.POLL` s. When it is stopped, :class:`ProcessExecutor`
terminates its worker processes and :class:`DaskExecutor` interrupts its actors (their HiGHS runs end
at the next interrupt check) and cancels their futures; then :class:`~mdp_core.errors.Interrupted` is
raised. :meth:`cancel` does the same from any thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from mdp_core.declarations.solver_options import EXECUTORS, Executor, Factory, Worker
from mdp_core.errors import InputError, Interrupted, SolverError
from mdp_core.runtime import control


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
    the CPU count) and stops it on :meth:`close` -- or, when this runs inside a task on a Dask worker,
    uses that worker's own cluster. Groups are balanced by weight exactly like
    :class:`ProcessExecutor`'s, so results do not depend on the backend.

    Inside a Dask task (the flow's Dask task runner) the executor *secedes* its thread from the
    worker's thread pool while it waits for its actors (:func:`distributed.secede`; it rejoins on
    :meth:`close`): the actors, queued on the same workers, get the slot the waiting task would
    otherwise hold. Without it a cluster of single-threaded workers deadlocks (every thread waiting
    for actors that cannot start; reproduced with 2 workers and 2 tasks).

    A lost worker (killed, out of memory) loses its actor: the group is rebuilt on a surviving worker
    from its specs and every request it had answered is replayed (deadlines lifted: they were met the
    first time), so its state, and the result, are the same as without the loss; then the request is
    sent again. Up to :attr:`retries` rebuilds per :meth:`solve`.
    """

    name = "dask"
    in_process = False
    retries = 3  # worker losses survived per solve call

    def __init__(self, scheduler: str | None = None, processes: int | None = None, timeout: float = 20.0) -> None:
        self.scheduler, self.processes, self.timeout = scheduler, processes, timeout
        self.client: Any = None
        self.cluster: Any = None
        self.own_client = True  # False: the Dask worker's client (not ours to close)
        self.seceded = False
        self.factory: Factory | None = None
        self.specs: list[Any] = []
        self.groups: list[list[int]] = []
        self.actors: list[Any] = []
        self.futures: list[Any] = []
        self.history: list[list[list[Any]]] = []  # per group: the request lists it answered, in order
        self.placed: list[str] = []  # per group: the address of its worker
        self.rebuilt = 0  # groups rebuilt after a lost worker, over this executor's life

    def _connect(self) -> None:
        try:
            import distributed
        except ImportError:  # pragma: no cover - dask is a dependency
            raise InputError("executor 'dask' needs dask.distributed: pip install 'dask[distributed]'") from None
        worker = _dask_worker()
        if worker is not None:  # inside a Dask task: free this thread's slot while waiting (class docstring)
            distributed.secede()
            self.seceded = True
        if worker is not None and (not self.scheduler or self.scheduler == worker.scheduler.address):
            self.client, self.own_client = distributed.get_client(), False
        elif self.scheduler:
            try:
                self.client = distributed.Client(self.scheduler, timeout=f"{self.timeout}s")
            except OSError as e:
                raise InputError(f"cannot reach the Dask scheduler {self.scheduler}: {e}") from None
        else:
            n = self.processes or max(1, os.cpu_count() or 1)
            with worker_environ():
                self.cluster = distributed.LocalCluster(  # dashboard on any free port: no clash on 8787
                    n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"
                )
            self.client = distributed.Client(self.cluster)

    def _workers(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])

    def _place(self, g: int, addr: str) -> Any:
        assert self.factory is not None
        if g < len(self.placed):
            self.placed[g] = addr
        else:
            self.placed.append(addr)
        # the specs go straight to their worker, not through the scheduler inside the task graph (at
        # N = 5,000 dense one group's specs are 450 MB; Dask warns of a "large graph" from a few MB)
        [specs] = self.client.scatter([[self.specs[i] for i in self.groups[g]]], workers=[addr], hash=False)
        return self.client.submit(_Group, self.factory, specs, actor=True, workers=[addr], pure=False)

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None:
        self._connect()
        addresses = self._workers()
        if not addresses:
            raise SolverError(f"the Dask cluster at {self.scheduler} has no workers")
        self.factory, self.specs = factory, list(specs)
        w = [1.0] * len(specs) if weights is None else weights
        self.groups = balanced_groups(w, min(len(addresses), len(specs)))
        self.placed = []
        self.futures = [self._place(g, addr) for g, addr in enumerate(addresses[: len(self.groups)])]
        self.actors = [self._wait(f, "starting Dask actors") for f in self.futures]
        self.history = [[] for _ in self.groups]

    def _wait(self, fut: Any, what: str, group: int | None = None) -> Any:
        """``fut.result()``, checking the stop token meanwhile (cancel and raise when stopped) and, for a
        ``group``'s request, that its worker is still there (an actor call on a killed worker never
        answers): :class:`_WorkerLost` when it is gone."""
        token = control.current()
        checked = time.monotonic()
        while not fut.done():
            if token.reason() is not None:
                self.cancel(token.reason() or "stopped")
                token.check(what)
            if group is not None and time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                if self.placed[group] not in self._workers():
                    raise _WorkerLost(self.placed[group])
            try:  # returns as soon as the answer is there (a plain sleep cost up to POLL per wait)
                fut.result(timeout=control.POLL)
            except TimeoutError:
                pass
        return fut.result()

    def _lost(self, g: int) -> bool:
        """True when group ``g``'s worker left the cluster (waits up to 10 s for the scheduler to notice)."""
        end = time.monotonic() + 10.0
        while time.monotonic() < end:
            if self.placed[g] not in self._workers():
                return True
            time.sleep(0.5)
        return False

    def _rebuild(self, g: int) -> None:
        """Group ``g`` again on a surviving worker: its specs, then every request it had answered."""
        addresses = self._workers()
        if not addresses:
            raise SolverError("every Dask worker was lost")
        addr = addresses[g % len(addresses)]
        self.futures[g] = self._place(g, addr)
        self.actors[g] = self._wait(self.futures[g], "rebuilding a lost Dask worker's actor")
        for requests in self.history[g]:
            self._wait(self.actors[g].solve([_no_deadline(r) for r in requests]), "replaying a lost worker's requests")

    def solve(self, requests: Sequence[Any]) -> list[Any]:
        parts = [[requests[i] for i in g] for g in self.groups]
        pending = [a.solve(p) for a, p in zip(self.actors, parts, strict=True)]
        out: list[Any] = [None] * len(requests)
        rebuilt = 0
        for g, group in enumerate(self.groups):
            while True:
                try:
                    got = self._wait(pending[g], "waiting for Dask workers", g)
                    break
                except Interrupted:
                    raise
                except Exception as e:  # a worker's exception, or its loss
                    if rebuilt >= self.retries or not (isinstance(e, _WorkerLost) or self._lost(g)):
                        raise SolverError(f"dask worker error: {type(e).__name__}: {e}") from None
                    rebuilt += 1
                    self.rebuilt += 1
                    self._rebuild(g)
                    pending[g] = self.actors[g].solve(parts[g])
            for i, r in zip(group, got, strict=True):
                out[i] = r
        for g, p in enumerate(parts):
            self.history[g].append(p)
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
        if self.client is not None and self.futures and not self.own_client:  # release the actors on a shared cluster
            try:
                self.client.cancel(self.futures, force=True)
            except Exception:  # noqa: BLE001
                pass
        self.actors, self.futures, self.history = [], [], []
        if self.client is not None and self.own_client:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.client = self.cluster = None
        if self.seceded:
            import distributed

            distributed.rejoin()
            self.seceded = False


class _WorkerLost(Exception):
    """The Dask worker holding a group's actor left the cluster."""


def _dask_worker() -> Any:
    """The Dask worker this code runs on (inside one of its tasks), or None."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def _no_deadline(request: Any) -> Any:
    """``request`` with its ``deadline`` field (if it has one) lifted, for a replay."""
    if dataclasses.is_dataclass(request) and not isinstance(request, type) and hasattr(request, "deadline"):
        return dataclasses.replace(request, deadline=math.inf)
    return request


@contextlib.contextmanager
def worker_environ() -> Iterator[None]:
    """Within it, the Dask worker processes a nanny starts (a ``LocalCluster`` created here) get Dask's
    own environment (``distributed.nanny.pre-spawn-environ``) without ``MALLOC_TRIM_THRESHOLD_``.

    Dask sets that variable (64 KiB) so that workers hand freed memory back sooner; setting it also
    fixes glibc's mmap threshold at 128 KiB, so every numpy temporary above that size is mapped and
    unmapped afresh, page faults included. Measured (bench/HISTORY.md, "The Lagrangian's subproblems on
    Dask"): the same 100 subproblem solves of synthetic N = 1,000 took 1.24-1.63 s per evaluation in such
    a process against 0.64-0.72 s without it (HiGHS's own share unchanged: the row checks and dual
    terms doubled). Workers of a cluster started elsewhere follow that cluster's configuration
    (docs/operating.md: ``dask worker --no-nanny`` inherits the shell's environment)."""
    import dask

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
        yield


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
