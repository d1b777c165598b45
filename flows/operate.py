"""``mdp-release serve`` and ``mdp-release deploy``: scheduled releases.

* ``serve`` -- a long-running process (a Prefect ``Runner``, what ``flow.serve`` uses) that creates the
  deployment ``<release name>-serve`` with a schedule on the Prefect server and runs its flow runs
  itself. Ctrl-C or SIGTERM stops it: schedule paused, the runs still scheduled deleted (within seconds even
  when the server is gone: :func:`flows.run.bounded_stop`). It names its upcoming runs after the release
  (:func:`name_upcoming_runs`: Prefect's scheduler names them with random words) and says when a run lasts
  longer than the interval (:class:`Watch`).
* One release at a time: every run of a deployment (served or deployed) first takes the one slot of the
  deployment's Prefect *global concurrency limit* ``mdp-release-<deployment id>`` (:func:`flows.slot.one_run_at_a_time`;
  ``--limit`` slots for ``serve``, 1 otherwise) and holds it -- a lease its process renews -- to its end, an
  approval pause included; a tick that finds the slots taken ends **Cancelled** at once (:data:`SKIPPED`:
  skipped, never queued to start late) and names the run that holds it. Not Prefect's *deployment* concurrency
  limit: its slot is a lease tied to the run's Running state, which the server revokes when the run pauses for
  the officer (``RUNNING -> PAUSED``), so the engine's next renewal -- 225 s after the run started -- gets
  ``410 Gone`` and kills the paused run ("Concurrency lease renewal failed ... Terminating execution"), and the
  next tick starts beside it (issue 52). The global limit's lease is the run's own, renewed while it waits;
  a run killed with -9 frees it when the lease runs out (``PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION``,
  default 300 s, at least 60).
* ``deploy --pool NAME`` -- the deployment ``<release name>-<pool>`` on a *work pool* (created as a
  ``process`` pool if absent); a ``prefect worker start --pool NAME`` process (any machine that has this
  checkout and ``PREFECT_API_URL``) runs it. ``prefect.yaml`` in the repository root is the same route
  for ``prefect deploy``.

The config's paths were made absolute when it was read (see :func:`flows.config.load_config`) and the
config as written is the deployment's parameter (:func:`flows.config.to_parameter`: the keys the file
set, nothing else; the secret table's path as ``private-path:<tag>``, :func:`flows.door.sealed_config`; the
served or worker process validates it back to the same config), so a scheduled run writes to the same store as
``mdp-release run --config`` whatever the worker's working directory. Both need a Prefect server
(``mdp-release server start`` or ``PREFECT_API_URL``): a schedule lives on the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Any

from flows.slot import SKIPPED, _runs_of, set_slots
from mdp_core.errors import InputError


def _add_schedule_arguments(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument(
        "--cron", default=None, metavar="EXPR", help='cron schedule, e.g. "0 3 * * *" (03:00 every day, UTC)'
    )
    g.add_argument("--interval", type=float, default=None, metavar="SECONDS", help="run every SECONDS seconds")
    p.add_argument("--timezone", default="UTC", help="time zone of --cron (default UTC)")
    p.add_argument("--config", default=None, help="TOML config of the release (default: the built-in default release)")
    p.add_argument(
        "--name",
        default=None,
        help="deployment name (default: the release name and the route, e.g. grid-eps10-lp-serve for serve, "
        "grid-eps10-lp-releases for deploy --pool releases)",
    )


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    _add_schedule_arguments(p, required=True)
    p.add_argument(
        "--limit",
        type=int,
        default=1,
        help="flow runs at the same time (default 1); a tick that comes due while they run is skipped "
        "(Cancelled: 'skipped: another run of this deployment holds its slot ...'), not queued to run late",
    )


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", required=True, help="work pool name (created as a 'process' pool if it does not exist)")
    p.add_argument(
        "--pool-limit",
        type=int,
        default=1,
        metavar="N",
        help="concurrency limit of a pool this command creates (default 1; 0 = none)",
    )
    _add_schedule_arguments(p, required=False)


def _need_server() -> str:
    from flows.run import prepare_environment

    where = prepare_environment()
    if not os.environ.get("PREFECT_API_URL"):
        raise InputError(
            "a schedule lives on a Prefect server: run `mdp-release server start` (or set PREFECT_API_URL) first"
        )
    return where


def _deployment(args: argparse.Namespace, route: str) -> dict[str, Any]:
    """The deployment's name, parameters, tags, description and schedule (no Prefect deployment concurrency
    limit: the runs keep to one at a time themselves, :func:`flows.slot.one_run_at_a_time`). Its default name is the release
    name and the ``route`` ("serve", or deploy's pool name): ``serve`` and ``deploy`` of one config are two
    deployments, never one overwriting the other."""
    from flows.config import load_config, release_name, to_parameter
    from flows.door import sealed_config
    from flows.plan import run_tags

    if args.interval is not None and not args.interval > 0:
        raise InputError(f"--interval must be > 0, got {args.interval:g}")
    cfg = load_config(args.config)
    name = args.name or f"{release_name(cfg)}-{route}"
    schedule: dict[str, Any] = {}
    if args.cron:
        from prefect.schedules import Cron

        try:
            schedule = {"schedule": Cron(args.cron, timezone=args.timezone)}
        except Exception as exc:
            raise InputError(f"--cron {args.cron!r}: {exc}") from None
    elif args.interval is not None:
        schedule = {"interval": args.interval}
    return {
        "name": name,
        "parameters": {"config": to_parameter(sealed_config(cfg))},  # no secret path in Prefect
        "tags": ["mdp-release", *run_tags(cfg)],
        "description": f"mdp-release {name}: {args.config or 'the built-in default release'}",
        **schedule,
    }


def serve_from_cli(args: argparse.Namespace) -> int:
    where = _need_server()
    if args.limit < 1:
        raise InputError(f"--limit must be >= 1, got {args.limit}")
    dep = _deployment(args, "serve")
    when = f"cron {args.cron!r} ({args.timezone})" if args.cron else f"every {args.interval:g} s"
    print(
        f"mdp-release serve: {where}; deployment mdp-release/{dep['name']}, {when}; at most {args.limit} run(s) "
        "at a time, a tick due while they run is skipped; Ctrl-C or SIGTERM stops",
        file=sys.stderr,
        flush=True,
    )
    from prefect.runner import Runner

    from flows.config import as_config
    from flows.plan import run_title
    from flows.release import release_flow

    # What flow.serve does (a Runner with this one flow), with its shutdown done here: on Ctrl-C / SIGTERM
    # the runner stops (its schedule paused) and the deployment's runs still scheduled are deleted. One process
    # more than --limit: a tick due while the runs hold the deployment's slots starts on time and ends at once,
    # skipped (flows.slot.one_run_at_a_time); a tick held back meanwhile is skipped too once a newer one is due.
    runner = Runner(name=f"mdp-release-{dep['name']}", pause_on_shutdown=True, limit=args.limit + 1)
    for attempt in range(4):  # a busy server can answer 503 to the deployment's creation: try again
        try:
            deployment_id = runner.add_flow(release_flow, **dep)
            set_slots(deployment_id, args.limit)
            break
        except Exception as exc:
            if attempt == 3 or "503" not in str(exc):
                raise
            time.sleep(5)
    watch = Watch(deployment_id, run_title(as_config(dep["parameters"]["config"])), args.interval, args.limit)
    from flows.run import bounded_stop

    disarm = bounded_stop("mdp-release serve")  # a stop ends this process within seconds, server or not
    try:
        asyncio.run(_serve_until_stopped(runner, watch, deployment_id))
        dropped = asyncio.run(drop_scheduled_runs(deployment_id))
    finally:
        disarm()
    print(f"mdp-release serve: stopped; {dropped} scheduled run(s) of {dep['name']} removed", file=sys.stderr)
    return 0


async def _serve_until_stopped(runner: Any, watch: Watch | None = None, deployment_id: Any = None) -> None:
    """``runner.start()`` (and ``watch.run()``) until SIGTERM or SIGINT, then ``await runner.astop()`` --
    after pausing the deployment and deleting its scheduled runs (:func:`drop_scheduled_runs`, one sweep):
    the runner's poller picks runs up until ``astop`` has cancelled every run in progress (30 s for a run that
    does not end), and a tick it picked up meanwhile started, took the freed slot and waited for its officer.
    Runner.start installs a SIGTERM handler of its own that calls the synchronous ``stop`` inside the event
    loop ("coroutine 'Runner.astop' was never awaited", then ``sys.exit``); the loop's handlers set here replace
    it once start has begun. A signal also requests this process's stop (the watchdog of
    :func:`flows.run.bounded_stop` ends the process when the server does not answer)."""
    from mdp_core.runtime import control

    loop = asyncio.get_running_loop()
    started = asyncio.ensure_future(runner.start())
    watching = asyncio.ensure_future(watch.run()) if watch is not None else None
    await asyncio.sleep(0)  # start's first step (installing its handler) has run

    async def stop() -> None:
        while not runner.started and not started.done():  # a signal during start-up: stop once started
            await asyncio.sleep(0.1)
        if deployment_id is not None:
            with contextlib.suppress(Exception):  # a server that is gone: bounded_stop ends the process
                await drop_scheduled_runs(deployment_id, sweeps=1, due_within=60.0)
        if runner.started:
            await runner.astop()

    stopping: list[asyncio.Task[None]] = []

    def on_signal(sig: signal.Signals) -> None:
        control.end_if_due(sig)  # the watchdog gave up waiting for the server: the process ends here
        control.request_stop(f"{sig.name} received")
        stopping.append(loop.create_task(stop()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await started
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if watching is not None:
            watching.cancel()
    for task in stopping:
        await task


WATCH_EVERY = 3.0  # s between two looks at the deployment's runs


def scheduled_run_name(title: str, run: Any) -> str:
    """``<release name>-<config hash8>-<scheduled UTC time>-<id4>``: the name a run of the release gets when it
    starts (:func:`flows.plan.run_title`), with the time it is scheduled for."""
    import datetime as dt

    when = run.expected_start_time.astimezone(dt.UTC) if run.expected_start_time else dt.datetime.now(dt.UTC)
    return f"{title}-{when:%Y%m%d-%H%M%S}-{str(run.id)[-4:]}"


async def name_upcoming_runs(client: Any, deployment_id: Any, title: str, limit: int = 20) -> int:
    """Name the deployment's next ``limit`` scheduled runs after the release (:func:`scheduled_run_name`) through
    Prefect's ``update_flow_run``. Prefect 3.8.8's scheduler creates them named with two random words (a
    deployment has no run-name setting; the flow's ``flow_run_name`` runs only when a run starts). Returns how
    many it renamed."""
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    runs = await client.read_flow_runs(
        **_runs_of(deployment_id, StateType.SCHEDULED), sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=limit
    )
    renamed = 0
    for run in runs:
        if not run.name.startswith(f"{title}-"):
            await client.update_flow_run(run.id, name=scheduled_run_name(title, run))
            renamed += 1
    return renamed


class Watch:
    """What ``serve`` keeps an eye on while it runs, every :data:`WATCH_EVERY` s: it names the upcoming runs
    (:func:`name_upcoming_runs`) and says -- on its stderr and in the run's log in the UI -- when runs last
    longer than the interval: once when the first tick is skipped (the server cancelled its run with
    :data:`SKIPPED`: a run held the slot, from its pickup -- up to 10 s before its tick -- to its end), once per
    run still running an interval after its tick, and one line per skipped tick."""

    def __init__(self, deployment_id: Any, title: str, interval: float | None, limit: int = 1) -> None:
        import datetime as dt

        self.deployment_id, self.title, self.interval, self.limit = deployment_id, title, interval, limit
        self.since = dt.datetime.now(dt.UTC)
        self.warned: set[Any] = set()  # runs said to run longer than the interval (and "any" after a first skip)
        self.skipped: set[Any] = set()

    async def run(self) -> None:
        from prefect.client.orchestration import get_client

        failed = ""
        async with get_client() as client:
            while True:
                try:
                    await name_upcoming_runs(client, self.deployment_id, self.title)
                    await self.look(client)
                except Exception as exc:  # noqa: BLE001 -- a busy or absent server: look again next time
                    if type(exc).__name__ != failed:  # said once per kind of failure
                        failed = type(exc).__name__
                        print(f"mdp-release serve: could not look at the runs: {failed}: {exc}", file=sys.stderr)
                await asyncio.sleep(WATCH_EVERY)

    async def look(self, client: Any) -> None:
        """One look at the runs holding the deployment's slots (running, paused for the officer, or pending:
        picked up, about to start) and at the skipped ones, the newest 20."""
        import datetime as dt

        from prefect.client.schemas.objects import StateType
        from prefect.client.schemas.sorting import FlowRunSort

        runs = await client.read_flow_runs(
            **_runs_of(self.deployment_id, StateType.RUNNING, StateType.PAUSED, StateType.PENDING, StateType.CANCELLED),
            sort=FlowRunSort.EXPECTED_START_TIME_DESC,
            limit=20,
        )
        now = dt.datetime.now(dt.UTC)
        holding = [r for r in runs if r.state_type in (StateType.RUNNING, StateType.PAUSED, StateType.PENDING)]
        for r in holding:  # still running an interval after its tick: the next tick finds the slot taken
            took = (now - r.expected_start_time).total_seconds() if r.expected_start_time else 0.0
            if self.interval and took > self.interval and r.id not in self.warned:
                self.warned.add(r.id)
                await self.say(client, r.id, self.too_long(f"run {r.name} still runs {took:.0f} s after its tick"))
        holder = holding[0].id if holding else None
        for r in sorted(runs, key=lambda x: x.expected_start_time or now):
            recent = r.expected_start_time is not None and r.expected_start_time >= self.since
            message = r.state.message if r.state is not None else None
            skipped = r.state_type == StateType.CANCELLED and (message or "").startswith(SKIPPED)
            if not skipped or not recent or r.id in self.skipped:
                continue
            self.skipped.add(r.id)
            if "any" not in self.warned:
                self.warned.add("any")
                await self.say(client, holder, self.too_long("a run lasts from its pickup to its end"))
            held = (message or "").partition("(held by ")[2].partition(")")[0]  # the skipped run's own words
            names = [h.rsplit(" ", 1)[0] for h in held.split(", ")] if held else [x.name for x in holding]
            who = ", ".join(names) or "the previous run"
            when = r.expected_start_time.astimezone(dt.UTC)
            line = f"the tick of {when:%Y-%m-%d %H:%M:%S} UTC was skipped: {who} still held the slot"
            await self.say(client, holder, f"mdp-release serve: {line} (at most {self.limit} run(s) at a time)")

    def too_long(self, what: str) -> str:
        between = f"the interval of {self.interval:g} s" if self.interval else "the time between two ticks"
        return (
            f"mdp-release serve: warning: {what}, longer than {between}: the ticks due meanwhile are skipped "
            f"(each ends Cancelled, {SKIPPED!r}), not queued; serve with a longer --interval (or a --cron) than "
            "a run takes"
        )

    @staticmethod
    async def say(client: Any, flow_run_id: Any, line: str) -> None:
        """``line`` on serve's stderr and, when ``flow_run_id`` is given, as a warning in that run's log."""
        import datetime as dt
        import logging

        print(line, file=sys.stderr, flush=True)
        if flow_run_id is not None:
            from prefect.client.schemas.actions import LogCreate

            log = LogCreate(
                name="mdp_release.serve",
                level=logging.WARNING,
                message=line,
                timestamp=dt.datetime.now(dt.UTC),
                flow_run_id=flow_run_id,
            )
            await client.create_logs([log])


async def drop_scheduled_runs(deployment_id: Any, sweeps: int = 0, due_within: float | None = None) -> int:
    """Delete the deployment's flow runs that are still scheduled (also the late ones): nothing of a
    stopped ``serve`` stays behind to go Late (``sweeps``: at most this many reads, 0: until two reads a
    second apart find nothing; ``due_within``: only those due within this many seconds). Returns how many
    were deleted."""
    import datetime as dt

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    soon = None
    if due_within is not None:
        soon = FlowRunFilterExpectedStartTime(before_=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=due_within))
    deleted, quiet, reads = 0, 0, 0
    async with get_client() as client:
        # Paused here too (the runner pauses on shutdown, but not when it was stopped during start-up), so
        # the server's scheduler adds no more; an insertion it had already begun can land after the first
        # sweep: sweep until two reads a second apart find nothing.
        await client.pause_deployment(deployment_id)
        while quiet < 2 and not (sweeps and reads >= sweeps):
            reads += 1
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                    expected_start_time=soon,
                ),
                limit=200,
            )
            quiet = 0 if runs else quiet + 1
            for run in runs:
                await client.delete_flow_run(run.id)
                deleted += 1
            if quiet < 2 and not (sweeps and reads >= sweeps):
                await asyncio.sleep(1.0)
    return deleted


def ensure_pool(name: str, limit: int | None = 1) -> bool:
    """Create a ``process`` work pool called ``name`` unless it exists; True when created. Its
    concurrency limit (default 1) keeps a worker from running overdue releases side by side."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=name, type="process", concurrency_limit=limit))
            return True


def deploy_from_cli(args: argparse.Namespace) -> int:
    yours = "PREFECT_API_URL" in os.environ
    where = _need_server()
    print(f"mdp-release deploy: {where}", file=sys.stderr, flush=True)
    dep = _deployment(args, args.pool)
    from prefect import Flow
    from prefect import flow as _flow  # noqa: F401  (prefect imported after the environment is set)

    from flows import ROOT

    created = ensure_pool(args.pool, args.pool_limit or None)
    source: Any = Flow.from_source(source=str(ROOT), entrypoint="flows/release.py:release_flow")
    dep_id = source.deploy(
        work_pool_name=args.pool, build=False, push=False, print_next_steps=False, ignore_warnings=True, **dep
    )
    set_slots(dep_id, 1)  # one run at a time (flows.slot.one_run_at_a_time), approval pauses included
    print(
        f"deployment mdp-release/{dep['name']} ({dep_id}) on work pool {args.pool!r}"
        f"{' (created, type process)' if created else ''}; {where}"
    )
    print(f"start a worker to run it:  prefect worker start --pool {args.pool}")
    print(f"run it now:                prefect deployment run mdp-release/{dep['name']}")
    url = os.environ["PREFECT_API_URL"]
    if not yours and str(_profile_api_url() or "") != url:
        print(
            f"(both need PREFECT_API_URL={url}: `export PREFECT_API_URL={url}` in their shell, or once "
            "`mdp-release server start --set-profile`)"
        )
    return 0


def _profile_api_url() -> str | None:
    """PREFECT_API_URL in the active Prefect profile (None when it sets none)."""
    from prefect.settings import PREFECT_API_URL, load_current_profile

    value = load_current_profile().settings.get(PREFECT_API_URL)
    return None if value is None else str(value)
