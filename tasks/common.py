"""What every stage task shares: run a stage against the store, exactly once per cache key.

A stage task is ``task(store: str, params: dict, **upstream: ArtifactRef | None) -> ArtifactRef``.
:func:`run_stage` computes the stage key, returns the stored output if a valid one exists (a "store
hit": another run or process already computed it), and otherwise calls ``compute`` to write the
output files into a private directory that is renamed into place. The output's ``meta`` records
``produced_by`` (flow run id) and ``produced_at`` (unix time): a run counts an output as a cache hit
only when another run finished it before this run started (not a concurrent run).

Stopping: ``compute`` runs under a stop token (:func:`mdp_core.runtime.control.scope`) armed with the task's
``timeout_seconds``, so a solver deep inside HiGHS stops itself at the deadline (HiGHS's interrupt
callback) and the stage raises :class:`~mdp_core.errors.StageTimeout` (a ``TimeoutError``: Prefect
records TimedOut); :func:`mdp_core.runtime.control.request_stop` (SIGTERM, Ctrl-C, Cancel from Prefect) raises
:class:`~mdp_core.errors.Interrupted` -- in a task run of the release flow the task then *returns*
Prefect's ``Cancelled`` state (:func:`cancelled_state`: the run shows Cancelled, not a failed task with a
traceback) and the flow turns it back into ``Interrupted`` (:func:`stage_output`). When Prefect's own timeout of the task (the same ``timeout_seconds``)
lands first, it is turned into the same :class:`~mdp_core.errors.StageTimeout`, so the record names the
stage. Either way the private directory is deleted: nothing is written. Large solves run in a killable
child process (:mod:`mdp_core.runtime.isolate`), so the stop takes seconds even inside HiGHS's presolve.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from prefect import get_run_logger
from prefect.context import FlowRunContext, TaskRunContext
from prefect.states import State

from artifacts.store import ArtifactRef, ObjectWriter, Store, sha256_json
from mdp_core.errors import Interrupted, MdpError, StageTimeout
from mdp_core.runtime import control
from mdp_core.runtime.files import write_json
from tasks.cache import stage_key
from tasks.progress import Heartbeat, note

if TYPE_CHECKING:  # the stages import numpy / pandas / mdp_core.problem.io when they compute, never on a cache hit
    import numpy as np

    from mdp_core.problem.instance import Instance

Compute = Callable[[ObjectWriter, Store, dict[str, Any], dict[str, ArtifactRef | None]], None]


def current_run_id() -> str:
    ctx = FlowRunContext.get()
    return str(ctx.flow_run.id) if ctx is not None and ctx.flow_run is not None else "no-flow-run"


def _refreshing() -> bool:
    """True when the flow asked this task to ignore caches (``refresh_cache=True``)."""
    ctx = TaskRunContext.get()
    return bool(ctx is not None and getattr(ctx.task, "refresh_cache", False))


def stage_timeout() -> float | None:
    """The running task's ``timeout_seconds`` (None outside a task run or without a timeout)."""
    ctx = TaskRunContext.get()
    t = getattr(ctx.task, "timeout_seconds", None) if ctx is not None else None
    return float(t) if t else None


# Handlers that must stay on a logger although Prefect re-configures logging when a task run starts on a
# Dask worker: (logger name, handler). ``tasks.dask_logs``' worker plugin registers its forwarder here.
LOG_FORWARDERS: list[tuple[str, logging.Handler]] = []


def reattach_log_forwarders() -> None:
    """Put every registered forwarding handler back on its logger (a no-op when none is registered)."""
    for name, handler in LOG_FORWARDERS:
        lg = logging.getLogger(name)
        if handler not in lg.handlers:
            lg.addHandler(handler)


def logger():
    reattach_log_forwarders()  # on a Dask worker whose lines go to a remote terminal
    try:
        return get_run_logger()
    except Exception:  # called through .fn outside a run (tests)
        return logging.getLogger("mdp_release")


def run_stage(
    stage: str,
    module: str,
    store: str,
    params: dict[str, Any],
    upstream: dict[str, ArtifactRef | None],
    compute: Compute,
    private: bool = False,
) -> ArtifactRef:
    """Run ``compute`` for ``stage`` unless a valid output of its key is stored (module docstring).
    ``private``: the output is derived from the secret table and stays owner-only (0700 / 0600) in the store
    until the publish stage publishes copies of it; so is every output computed from a private upstream
    object (a DP prior -> the instance -> the mechanism; the measure output -> the evaluation)."""
    key = stage_key(stage, module, params, upstream)
    s = Store(store)
    # derived from the secret table, directly or through any upstream object: owner-only until published
    private = private or any(ref is not None and s.is_private(ref) for ref in upstream.values())
    force = _refreshing()
    hit = None if force else s.valid_ref(stage, key)
    if hit is not None:
        if private:
            s.make_private(hit)
        logger().info("%s: reusing stored output %s", stage, key[:12])
        return hit
    for name, ref in upstream.items():
        if ref is not None and not s.is_valid(ref):
            raise MdpError(
                f"{stage}: upstream artifact {name} ({ref.path}) is missing or corrupt; run again to recompute it"
            )
    t0 = time.perf_counter()
    token = control.current()
    try:
        with (
            s.writer(stage, key, force=force, private=private) as w,
            control.scope(stage_timeout(), label=stage) as token,  # the solver stops itself at the deadline
            Heartbeat(stage, logger(), token=token),  # a line at least every 5 s
        ):
            compute(w, s, params, upstream)
            w.meta.update(
                {
                    "seconds": round(time.perf_counter() - t0, 3),
                    "produced_by": current_run_id(),
                    "produced_at": time.time(),
                }
            )
    except Interrupted as exc:
        if isinstance(exc, StageTimeout) or not _stop_ends_cancelled():
            logger().error("%s; nothing was written", exc)
            raise
        logger().warning("%s; nothing was written", exc)  # asked for: no error, no traceback
        return cast(ArtifactRef, cancelled_state(exc))  # the task run ends Cancelled; see stage_output
    except asyncio.CancelledError as exc:  # Prefect's own task timeout, raised into this thread at the deadline
        limit = stage_timeout()
        if limit is None or time.perf_counter() - t0 < limit - 1.0:
            raise
        reason = f"{stage} exceeded its timeout of {limit:g} s"
        last = token.latest()
        err = StageTimeout(f"{stage} stopped: {reason}" + (f"; last: {last}" if last else ""), stage, reason, last)
        logger().error("%s; nothing was written", err)
        raise err from exc  # a TimeoutError: Prefect records TimedOut, with this message naming the stage
    assert w.ref is not None
    logger().info("%s: computed in %.2fs -> %s", stage, time.perf_counter() - t0, w.ref.path)
    return w.ref


# Flows that pass every stage task's return value through :func:`stage_output` (so a stopped stage may
# return its Cancelled state instead of raising); a stage of any other flow raises Interrupted as before.
STOP_ENDS_CANCELLED = frozenset({"mdp-release"})


def _stop_ends_cancelled() -> bool:
    """True inside a task run of a flow in :data:`STOP_ENDS_CANCELLED`."""
    task_ctx, flow_ctx = TaskRunContext.get(), FlowRunContext.get()
    flow = getattr(flow_ctx, "flow", None)
    return task_ctx is not None and getattr(flow, "name", None) in STOP_ENDS_CANCELLED


def cancelled_state(exc: Interrupted) -> State[Any]:
    """The final state of a stage task run stopped on request (Cancel from Prefect, SIGTERM, Ctrl-C):
    Prefect's ``Cancelled`` with the one-line stop message (stage, reason, last progress line) and no
    traceback -- a task returning a manual final state is how Prefect lets a task end Cancelled (its
    engine turns an exception into Failed). Nothing of the stopped stage is cached: the task run's cache
    transaction is told not to write its record (else the cache key would hold this empty result)."""
    from prefect.states import Cancelled
    from prefect.transactions import get_transaction

    txn = get_transaction()
    if txn is not None:
        txn.write_on_commit = False
    return Cancelled(message=f"{exc}; nothing was written")


def stage_output(stage: str, value: Any) -> ArtifactRef:
    """What a stage task returned, for a flow in :data:`STOP_ENDS_CANCELLED`: its :class:`ArtifactRef`;
    a stage stopped on request returns its Cancelled state (:func:`cancelled_state`), and this raises
    :class:`~mdp_core.errors.Interrupted` naming the stage, so nothing after it runs and the flow ends
    Cancelled (``flows.release.release_flow``)."""
    if isinstance(value, ArtifactRef):
        return value
    if isinstance(value, State) and value.is_cancelled():
        message = str(value.message or f"{stage} stopped").removesuffix("; nothing was written")
        raise Interrupted(message, stage=stage, reason=control.current().reason() or "stop requested")
    raise MdpError(f"{stage}: its task returned {type(value).__name__}, not an artifact reference")


def instance_of(store: Store, ref: ArtifactRef, epsilon: float | None = None) -> Instance:
    """Read the instance directory behind ``ref``."""
    from mdp_core.problem.io import read_instance

    return read_instance(store.root / ref.path, epsilon=epsilon)


def instance_with_graph(store: Store, dataset: ArtifactRef, graph: ArtifactRef, **changes: Any) -> Instance:
    """The ingested dataset with the edges of the ``graph`` stage (and eta from its graph.json)."""
    from mdp_core.problem.io import EDGE_SCHEMA, read_table
    from mdp_core.runtime.files import read_json

    inst = instance_of(store, dataset)
    edges = read_table(store.path(graph, "edges.parquet"), schema=EDGE_SCHEMA)
    return inst.replace(
        edges=edges[["i", "j"]].to_numpy(),
        distances=edges["distance"].to_numpy(),
        eta=float(read_json(store.path(graph, "graph.json"))["eta"]),
        **changes,
    )


# The privacy door's public figures of an instance, memoised beside its graph object: a hidden file (not one of
# the object's files: not in its ref, nor in its content hash), keyed by what the figures are computed from.
DOOR_FIGURES = ".door-figures.json"


def _figures_key(dataset: ArtifactRef, graph: ArtifactRef, code: tuple[str, ...]) -> str:
    """What the figures are computed from: both objects' content, the code (the modules ``code`` with everything
    they import, :func:`tasks.cache.code_version`) and the numerical libraries' versions."""
    from tasks.cache import code_version, library_versions

    return sha256_json(
        {
            "dataset": dataset.content_hash,
            "graph": graph.content_hash,
            "code": {m: code_version(m) for m in sorted({__name__, *code})},  # instance_with_graph: this module
            "libraries": library_versions(),
        }
    )


def _figures_memo(
    store: Store, dataset: ArtifactRef, graph: ArtifactRef, code: tuple[str, ...]
) -> tuple[str, dict[str, Any]] | None:
    """(key, the memo's entries for that key, {} when there are none); None when nothing may be memoised:
    nothing is kept beside an object derived from the secret table (owner-only)."""
    if store.is_private(dataset) or store.is_private(graph):
        return None
    key = _figures_key(dataset, graph, code)
    try:
        memo = json.loads(store.path(graph, DOOR_FIGURES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return key, {}
    ok = isinstance(memo, dict) and memo.get("key") == key and isinstance(memo.get("figures"), dict)
    return key, memo["figures"] if ok else {}


def door_figures(
    store: Store, dataset: ArtifactRef, graph: ArtifactRef, radius: float | None, code: tuple[str, ...]
) -> dict[str, Any] | None:
    """The privacy door's figures of the public instance (``dataset`` with the ``graph`` stage's edges,
    :func:`instance_with_graph`) at the protection ``radius`` (None: eta), as :func:`remember_door_figures`
    memoised them (:meth:`flows.door.Figures.as_dict`); None when there are none for these objects' content,
    the code computing them (``code``: its modules, and this one) and these libraries. Public figures only,
    trusted as the store's objects are (the stage that measures recomputes them from the instance)."""
    found = _figures_memo(store, dataset, graph, code)
    entry = found[1].get("eta" if radius is None else repr(float(radius))) if found is not None else None
    return entry if isinstance(entry, dict) else None


def remember_door_figures(
    store: Store,
    dataset: ArtifactRef,
    graph: ArtifactRef,
    radius: float | None,
    code: tuple[str, ...],
    figures: dict[str, Any],
) -> None:
    """Memoise ``figures`` (plain JSON values, computed from the instance at ``radius`` by ``code``) beside
    ``graph`` for :func:`door_figures` -- unless an object is derived from the secret table, or a figure is not
    a finite number (JSON has none: the next door computes them again)."""
    found = _figures_memo(store, dataset, graph, code)
    if found is None:
        return
    key, entries = found
    entries["eta" if radius is None else repr(float(radius))] = figures
    try:
        write_json(store.path(graph, DOOR_FIGURES), {"key": key, "figures": entries})
    except (OSError, ValueError):  # a store we may not write to, or a figure that is not finite
        pass


def output_zones(inst: Instance, labels: np.ndarray | None) -> np.ndarray:
    """(K,) zone of each output: the partition subset of the output's record, else one zone 0."""
    import numpy as np

    if labels is None or inst.outputs is None or "record_id" not in inst.outputs:
        return np.zeros(inst.n_outputs, dtype=np.int64)
    return np.asarray(labels, dtype=np.int64)[inst.outputs["record_id"].to_numpy()]


class Throttled:
    """Forward progress lines to the Prefect logger at most every ``every`` seconds."""

    def __init__(self, prefix: str, every: float = 2.0) -> None:
        self.prefix, self.every, self.last = prefix, every, 0.0
        self.log = logger()

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        speak = now - self.last >= self.every
        note(line, spoken=speak)  # a line not spoken here is spoken by the stage's heartbeat
        if speak:
            self.last = now
            self.log.info("%s: %s", self.prefix, line)
