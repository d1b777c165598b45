"""One run of a deployment at a time, an approval pause included (issue 52): the deployment's Prefect global
concurrency limit ``mdp-release-<deployment id>``, held by each run for its whole length (:func:`one_run_at_a_time`,
entered by :func:`flows.release.release_flow`; created by ``serve`` / ``deploy``, :func:`set_slots`). Why not
Prefect's deployment concurrency limit: docs/operating.md, "A run longer than the interval"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from mdp_core.errors import Interrupted

SKIPPED = "skipped: another run of this deployment holds its slot"  # a skipped tick's Cancelled message starts so
STOPPING = "skipped: the deployment is paused (its serve stopping, or paused by hand)"
LATE_AFTER = 60.0  # s after its time: a tick started later than this, with a newer one due, is skipped
LEASE_FLOOR = 60.0  # s: the shortest lease Prefect's API grants


def slot_name(deployment_id: Any) -> str:
    """The name of the Prefect global concurrency limit that keeps a deployment's runs one at a time."""
    return f"mdp-release-{deployment_id}"


class Skipped(Interrupted):
    """A scheduled run that found its deployment's slots taken: it did nothing and ends Cancelled."""


def set_slots(deployment_id: Any, limit: int) -> str:
    """Create (or set) the deployment's global concurrency limit (:func:`slot_name`) to ``limit`` slots."""
    from prefect.client.orchestration import get_client

    name = slot_name(deployment_id)
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, limit)
    return name


def _free_slot(client: Any, name: str) -> bool:
    """Whether the global concurrency limit ``name`` has a free slot now; created with 1 slot when absent (a
    deployment made by ``prefect deploy`` from prefect.yaml, or a limit deleted by hand). A look before
    acquiring: Prefect's acquisition service logs a refused one (423) as an ERROR with a traceback."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        limit = client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
        except ObjectAlreadyExists:  # another run created it meanwhile
            pass
        return True
    return bool(limit.active_slots < limit.limit)


def lease_seconds() -> float:
    """The slot's lease (s): Prefect's deployment concurrency lease setting
    (``PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION``, default 300), at least
    :data:`LEASE_FLOOR`. The run's process renews it every three quarters of it; a killed run's slot is free
    again when it runs out."""
    from prefect.settings import get_current_settings

    return max(LEASE_FLOOR, float(get_current_settings().server.concurrency.initial_deployment_lease_duration))


@contextlib.contextmanager
def one_run_at_a_time(ctx: Any) -> Iterator[None]:
    """Hold the deployment's slot (:func:`slot_name`) for the whole of the flow run of ``ctx`` (a Prefect
    ``FlowRunContext``), an approval pause included: Prefect's public ``concurrency`` context manager with a
    lease this process renews (a failed renewal is logged, never ends the run). A run with no deployment
    (``mdp-release run``, the tests' direct calls): nothing to hold. Raises :class:`Skipped` (the run ends
    Cancelled, :data:`SKIPPED`, naming the holder) when the slots are taken: a tick is skipped, not queued; and
    when a newer tick is already due (:func:`_superseded`: a tick held back by a busy runner never runs late); and
    (:data:`STOPPING`) when the deployment is paused: ``serve`` pauses it first when it stops, and a tick its
    runner had already picked up then took the slot the cancelled run freed and waited for its officer."""
    flow_run = getattr(ctx, "flow_run", None)
    if flow_run is None or flow_run.deployment_id is None:
        yield
        return
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
    from prefect.concurrency.sync import concurrency

    name = slot_name(flow_run.deployment_id)
    with get_client(sync_client=True) as client:
        if client.read_deployment(flow_run.deployment_id).paused:  # `serve` stopping: no run starts now
            raise Skipped(f"{STOPPING}; nothing was done", reason="skipped")
        late = _superseded(client, flow_run)
        free = not late and _free_slot(client, name)
    if late:
        raise Skipped(f"{SKIPPED} (a newer tick is already due: it runs instead); nothing was done", reason="skipped")
    if not free:
        raise Skipped(f"{SKIPPED} ({_holders(flow_run)}); nothing was done", reason="skipped")
    holder = ConcurrencyLeaseHolder(type="flow_run", id=flow_run.id)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(
                concurrency(
                    name,
                    max_retries=0,
                    lease_duration=lease_seconds(),
                    strict=True,
                    holder=holder,
                    raise_on_lease_renewal_failure=False,
                )
            )
        except ConcurrencySlotAcquisitionError as exc:
            if "423" not in str(exc) and "Locked" not in str(exc):
                raise
            raise Skipped(f"{SKIPPED} ({_holders(flow_run)}); nothing was done", reason="skipped") from None
        yield


def _holders(flow_run: Any) -> str:
    """The deployment's runs that hold its slot, in words: its other running or paused runs that started before
    this one, oldest first (a tick being skipped is Running for a moment too, but started later)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    try:
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs(
                **_runs_of(flow_run.deployment_id, StateType.RUNNING, StateType.PAUSED),
                sort=FlowRunSort.START_TIME_ASC,
                limit=5,
            )
    except Exception:  # noqa: BLE001 -- only words for the message
        return "held"
    mine = flow_run.start_time
    held = [
        f"{r.name} {r.state_name}"
        for r in runs
        if r.id != flow_run.id and (mine is None or r.start_time is None or r.start_time < mine)
    ]
    return "held by " + ", ".join(held[:3]) if held else "held"


def _superseded(client: Any, flow_run: Any) -> bool:
    """Whether a newer tick of the deployment is already due and ``flow_run``, a scheduled tick, starts more than
    :data:`LATE_AFTER` s after its time (a busy runner or worker held it back): the newer tick runs, this one
    is skipped, never run late. (A process takes seconds to start: a tick on time is never superseded.)"""
    import datetime as dt

    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
    )

    mine, now = flow_run.expected_start_time, dt.datetime.now(dt.UTC)
    if not flow_run.auto_scheduled or mine is None or (now - mine).total_seconds() < LATE_AFTER:
        return False
    newer = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[flow_run.deployment_id])),
        flow_run_filter=FlowRunFilter(
            expected_start_time=FlowRunFilterExpectedStartTime(after_=mine + dt.timedelta(microseconds=1), before_=now)
        ),
        limit=1,
    )
    return bool(newer)


def _runs_of(deployment_id: Any, *states: Any) -> dict[str, Any]:
    """``read_flow_runs`` filters: the deployment's runs in ``states`` (StateType)."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )

    return {
        "deployment_filter": DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        "flow_run_filter": FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=list(states)))),
    }
