"""How the release flow runs its stages: each stage task's options (its ``[run.timeouts]`` limit, retries
on transient errors where a retry can help), the task runner of ``[run]`` (Prefect's thread pool or a Dask
cluster) and, with a remote Dask cluster, its workers' task logs in this terminal. Kept with the flow, apart
from what the UI shows (:mod:`flows.operate_ui`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flows.plan import Runner

# Errors a second attempt can cure: network and file-system hiccups (a dataset download, a busy
# disk). Solver failures, refused repairs and bad input are deterministic: no retries for those.
TRANSIENT = (ConnectionError, TimeoutError, OSError)
RETRIES = {"ingest": 2}  # only ingest touches the network (osmnx downloads)


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        state.result(raise_on_failure=True)
    except TRANSIENT as exc:
        from mdp_core.errors import MdpError

        return not isinstance(exc, MdpError) and not isinstance(exc, FileNotFoundError)
    except BaseException:
        return False
    return False


def task_options(stage: str, timeout: float | None) -> dict[str, Any]:
    """``with_options`` of a stage task: its ``timeout`` (s; None: no limit: its ``[run.timeouts]`` entry,
    :attr:`flows.plan.RunPlan.timeouts`); retries on transient errors only, and only where a retry can help
    (``RETRIES``)."""
    opts: dict[str, Any] = {"timeout_seconds": timeout}
    if RETRIES.get(stage):
        opts |= {"retries": RETRIES[stage], "retry_delay_seconds": 5, "retry_condition_fn": _retry_transient}
    return opts


def task_runner(run_cfg: Runner) -> Any:
    """The task runner of ``[run]`` (:attr:`flows.plan.RunPlan.runner`): Prefect's thread pool, or prefect-dask's DaskTaskRunner (a local
    Dask cluster of ``max_workers`` single-threaded worker processes, or the scheduler at
    ``dask_address``)."""
    if run_cfg.task_runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            from mdp_core.errors import InputError

            raise InputError("run.task_runner = 'dask' needs prefect-dask: pip install 'mdp-release[dask]'") from None
        if run_cfg.dask_address:
            return DaskTaskRunner(address=run_cfg.dask_address)
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": run_cfg.max_workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": ":0",  # any free port: never clash with another cluster on 8787
            }
        )
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=run_cfg.max_workers)


@contextlib.contextmanager
def dask_logs_in_terminal(address: str | None, stream: Any = None) -> Iterator[None]:
    """While the block runs, print on ``stream`` (default stderr) the log lines that Prefect task runs
    write on the Dask workers of the scheduler at ``address`` (:mod:`tasks.dask_logs`): a remote
    cluster, whose workers' terminals are not this one. ``None``: nothing to do (a local cluster's
    workers inherit this terminal)."""
    if not address:
        yield
        return
    from tasks.dask_logs import forwarded_task_logs  # imports distributed: only for a Dask task runner

    with forwarded_task_logs(address, stream if stream is not None else sys.stderr):
        yield
