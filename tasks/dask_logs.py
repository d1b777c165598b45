"""Worker log lines in the terminal of ``mdp-release run``: the Prefect task runs of a remote Dask
cluster (``[run] dask_address``) log on their workers, whose terminals are elsewhere.

:func:`forwarded_task_logs` registers :class:`TaskLogForwarder` on every worker of the cluster (a
worker plugin: a logging handler on ``prefect.task_runs``, level INFO and above) and subscribes to its
topic: each record travels as plain fields (time, level, task run name, message, worker) through the
scheduler's event stream and is printed here in Prefect's console format. Prefect configures its
logging again when a task run starts on a worker, removing the handler: every stage task puts it
back (:func:`tasks.common.reattach_log_forwarders`, called by :func:`tasks.common.logger`). The lines are printed, not
logged again, so the UI keeps exactly the copy the worker sent. (Distributed's own
``Client.forward_logging`` cannot carry Prefect's records: their UUID fields are not msgpack-serialisable.)
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

import distributed
from distributed.diagnostics.plugin import WorkerPlugin

from tasks.common import LOG_FORWARDERS, reattach_log_forwarders

TOPIC = "mdp-release-task-logs"
LOGGER = "prefect.task_runs"


class _Forward(logging.Handler):
    """On a worker: publish each record of ``LOGGER`` as an event of ``TOPIC``."""

    def __init__(self, worker: Any) -> None:
        super().__init__(logging.INFO)
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.worker.log_event(
                TOPIC,
                {
                    "time": record.created,
                    "level": record.levelname,
                    "task": str(getattr(record, "task_run_name", "") or ""),
                    "msg": record.getMessage(),
                    "worker": str(self.worker.address),
                },
            )
        except Exception:  # noqa: BLE001 -- logging must never break the task
            self.handleError(record)


class TaskLogForwarder(WorkerPlugin):
    """The worker plugin: :class:`_Forward` on ``LOGGER`` while registered."""

    def __init__(self) -> None:
        self.handler: _Forward | None = None

    def setup(self, worker: Any) -> None:
        self.handler = _Forward(worker)
        LOG_FORWARDERS.append((LOGGER, self.handler))
        reattach_log_forwarders()

    def teardown(self, worker: Any) -> None:
        if self.handler is not None:
            logging.getLogger(LOGGER).removeHandler(self.handler)
            LOG_FORWARDERS.remove((LOGGER, self.handler))


def format_line(fields: dict[str, Any]) -> str:
    """One forwarded record in Prefect's console format (plus the worker's address)."""
    at = float(fields.get("time", time.time()))
    clock = time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"
    who = f"Task run {fields['task']!r}" if fields.get("task") else LOGGER
    return f"{clock} | {fields.get('level', 'INFO'):<7} | {who} - {fields.get('msg', '')} [{fields.get('worker', '')}]"


@contextlib.contextmanager
def forwarded_task_logs(address: str, stream: TextIO) -> Iterator[None]:
    """While the block runs, print the task-run log lines of the cluster at ``address`` on ``stream``:
    as they come (a topic subscription), then the ones still in transit when the block ends (the
    scheduler's record of the topic: a worker's events reach the scheduler before its task's result)."""
    shown: set[tuple[Any, ...]] = set()
    lock = threading.Lock()

    def show(event: tuple[float, dict[str, Any]]) -> None:
        fields = event[1]
        key = (fields.get("time"), fields.get("worker"), fields.get("msg"))
        with lock:
            if key in shown:
                return
            shown.add(key)
        print(format_line(fields), file=stream, flush=True)

    client = distributed.Client(address, timeout="20s", set_as_default=False)
    try:
        client.subscribe_topic(TOPIC, show)
        client.register_plugin(TaskLogForwarder(), name=TOPIC)
        started = time.time()
        yield
        with contextlib.suppress(Exception):
            for event in client.get_events(TOPIC):
                if event[1].get("time", 0.0) >= started - 1.0:
                    show(event)
    finally:
        with contextlib.suppress(Exception):  # the cluster may be gone
            client.unsubscribe_topic(TOPIC)
            client.unregister_worker_plugin(TOPIC)
        client.close()
