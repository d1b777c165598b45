"""``mdp-release serve`` and ``mdp-release deploy``: scheduled releases.

* ``serve`` -- a long-running process (a Prefect ``Runner``, what ``flow.serve`` uses) that creates the
  deployment ``<release name>-serve`` with a schedule on the Prefect server and runs its flow runs
  itself. Ctrl-C or SIGTERM stops it: schedule paused, the runs still scheduled deleted.
* ``deploy --pool NAME`` -- the deployment ``<release name>-<pool>`` on a *work pool* (created as a
  ``process`` pool if absent); a ``prefect worker start --pool NAME`` process (any machine that has this
  checkout and ``PREFECT_API_URL``) runs it. ``prefect.yaml`` in the repository root is the same route
  for ``prefect deploy``.

The config's paths were made absolute when it was read (see :func:`flows.config.load_config`) and the
config as written is the deployment's parameter (:func:`flows.config.to_parameter`: the keys the file
set, nothing else; the served or worker process validates it back to the same config), so a scheduled run writes to the same store as
``mdp-release run --config`` whatever the worker's working directory. Both need a Prefect server
(``mdp-release server start`` or ``PREFECT_API_URL``): a schedule lives on the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from typing import Any

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
    p.add_argument("--limit", type=int, default=1, help="flow runs at the same time (default 1)")


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
    """The deployment's name, parameters, tags, description and schedule. Its default name is the release
    name and the ``route`` ("serve", or deploy's pool name): ``serve`` and ``deploy`` of one config are two
    deployments, never one overwriting the other."""
    from flows.config import load_config, release_name, to_parameter
    from flows.release import run_tags

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
        "parameters": {"config": to_parameter(cfg)},
        "tags": ["mdp-release", *run_tags(cfg)],
        "description": f"mdp-release {name}: {args.config or 'the built-in default release'}",
        **schedule,
    }


def serve_from_cli(args: argparse.Namespace) -> int:
    where = _need_server()
    dep = _deployment(args, "serve")
    when = f"cron {args.cron!r} ({args.timezone})" if args.cron else f"every {args.interval:g} s"
    print(
        f"mdp-release serve: {where}; deployment mdp-release/{dep['name']}, {when}; Ctrl-C or SIGTERM stops",
        file=sys.stderr,
        flush=True,
    )
    from prefect.runner import Runner

    from flows.release import release_flow

    # What flow.serve does (a Runner with this one flow), with its shutdown done here: on Ctrl-C / SIGTERM
    # the runner stops (its schedule paused) and the deployment's runs still scheduled are deleted.
    runner = Runner(name=f"mdp-release-{dep['name']}", pause_on_shutdown=True, limit=args.limit)
    for attempt in range(4):  # a busy server can answer 503 to the deployment's creation: try again
        try:
            deployment_id = runner.add_flow(release_flow, **dep)
            break
        except Exception as exc:
            if attempt == 3 or "503" not in str(exc):
                raise
            time.sleep(5)
    asyncio.run(_serve_until_stopped(runner))
    dropped = asyncio.run(drop_scheduled_runs(deployment_id))
    print(f"mdp-release serve: stopped; {dropped} scheduled run(s) of {dep['name']} removed", file=sys.stderr)
    return 0


async def _serve_until_stopped(runner: Any) -> None:
    """``runner.start()`` until SIGTERM or SIGINT, then ``await runner.astop()``. Runner.start installs
    a SIGTERM handler of its own that calls the synchronous ``stop`` inside the event loop ("coroutine
    'Runner.astop' was never awaited", then ``sys.exit``); the loop's handlers set here replace it once
    start has begun."""
    loop = asyncio.get_running_loop()
    started = asyncio.ensure_future(runner.start())
    await asyncio.sleep(0)  # start's first step (installing its handler) has run

    async def stop() -> None:
        while not runner.started and not started.done():  # a signal during start-up: stop once started
            await asyncio.sleep(0.1)
        if runner.started:
            await runner.astop()

    stopping: list[asyncio.Task[None]] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stopping.append(loop.create_task(stop())))
    try:
        await started
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    for task in stopping:
        await task


async def drop_scheduled_runs(deployment_id: Any) -> int:
    """Delete the deployment's flow runs that are still scheduled (also the late ones): nothing of a
    stopped ``serve`` stays behind to go Late. Returns how many were deleted."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    deleted, quiet = 0, 0
    async with get_client() as client:
        # Paused here too (the runner pauses on shutdown, but not when it was stopped during start-up), so
        # the server's scheduler adds no more; an insertion it had already begun can land after the first
        # sweep: sweep until two reads a second apart find nothing.
        await client.pause_deployment(deployment_id)
        while quiet < 2:
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
                ),
                limit=200,
            )
            quiet = 0 if runs else quiet + 1
            for run in runs:
                await client.delete_flow_run(run.id)
                deleted += 1
            if quiet < 2:
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
