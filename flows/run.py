"""``mdp-release run`` and ``mdp-release server``: run the release flow, with or without a Prefect server.

Where the flow runs (decided before Prefect is imported):
  1. ``PREFECT_API_URL`` set -> that server (e.g. a ``prefect server start`` you run yourself);
  2. else a server started by ``mdp-release server start`` that is still healthy -> that server;
  3. else Prefect's ephemeral mode: a temporary local server for this run (:class:`TemporaryServer`,
     5-8 s of start-up on a small machine, every run).
The quiet-offline settings (no telemetry) are applied unless you set them yourself.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from flows import QUIET_ENV

STATE_FILE = Path(os.environ.get("MDP_RELEASE_HOME", Path.home() / ".mdp-release")) / "server.json"


# ----------------------------------------------------------------------------- server
def healthy(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


def saved_server() -> str | None:
    """The API URL of a server started by ``mdp-release server start`` that still answers."""
    try:
        state = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return None
    url = state.get("api_url")
    return url if url and healthy(url) else None


def start_server(host: str, port: int, timeout: float = 180.0) -> str:
    url = f"http://{host}:{port}/api"
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    if healthy(url):  # already up (yours, or ours): remember it, but never stop a server we did not start
        if saved_server() != url:
            STATE_FILE.write_text(json.dumps({"api_url": url, "pid": None}))
        return url
    log = open(STATE_FILE.with_suffix(".log"), "ab")
    # the UI calls this server's API, also on a port other than 4200
    env = QUIET_ENV | {"PREFECT_UI_API_URL": url, "PREFECT_SERVER_UI_API_URL": url} | os.environ
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(
                f"prefect server exited with code {proc.returncode}; see {STATE_FILE.with_suffix('.log')}"
            )
        if healthy(url):
            STATE_FILE.write_text(json.dumps({"api_url": url, "pid": proc.pid}))
            return url
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"prefect server did not answer at {url} within {timeout:.0f}s")


def stop_server() -> bool:
    try:
        state = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return False
    STATE_FILE.unlink(missing_ok=True)
    if state.get("pid") is None:
        return False  # a server someone else started: forget it, leave it running
    try:
        os.killpg(int(state["pid"]), signal.SIGTERM)
    except (ProcessLookupError, KeyError, ValueError, PermissionError, TypeError):
        pass
    return True


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4200)


def server_from_cli(args: argparse.Namespace) -> int:
    if args.action == "start":
        url = start_server(args.host, args.port)
        print(f"Prefect server up at {url.removesuffix('/api')} (UI) -- mdp-release run will use it")
        return 0
    if args.action == "stop":
        print("stopped" if stop_server() else "no server started by mdp-release")
        return 0
    found = os.environ.get("PREFECT_API_URL") or saved_server()
    print(f"server: {found}" if found else "no server: runs use Prefect's ephemeral mode (5-8 s start-up)")
    return 0 if found else 1


# ----------------------------------------------------------------------------- run
def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        action="append",
        help="TOML config (default: the built-in default release); repeat it to run several releases "
        "as one flow (batch) that shares their common cached stages",
    )
    p.add_argument(
        "--from-manifest",
        default=None,
        metavar="MANIFEST",
        help="re-run the release recorded in a run's manifest.json (same config)",
    )
    p.add_argument("--store", default=None, help="artifact store root (overrides the config's 'store')")
    p.add_argument(
        "--new-draw",
        action="store_true",
        help="perturb the same people again with a fresh secret draw (an independent second release: its "
        "spend is added to the table's privacy ledger); default: the table's current draw, so a re-run "
        "publishes the same outputs and spends nothing",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--refresh", action="store_true", help="recompute every stage, ignoring caches")
    from flows.config import STAGE_NAMES

    g.add_argument(
        "--refresh-from",
        default=None,
        metavar="STAGE",
        choices=list(STAGE_NAMES),
        help=f"recompute this stage and all later ones; STAGE is one of {', '.join(STAGE_NAMES)}",
    )
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")


def prepare_environment() -> str:
    """Apply quiet defaults and pick the Prefect API; returns a description of where the flow runs."""
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    if os.environ.get("PREFECT_API_URL"):
        return f"Prefect server {os.environ['PREFECT_API_URL']}"
    url = saved_server()
    if url:
        os.environ["PREFECT_API_URL"] = url
        return f"Prefect server {url} (started by mdp-release server start)"
    TemporaryServer.current().start()
    return "Prefect ephemeral mode (temporary local server, 5-8 s start-up; `mdp-release server start` avoids it)"


class TemporaryServer:
    """Prefect's ephemeral mode, started before Prefect is imported.

    Without ``PREFECT_API_URL`` Prefect starts a temporary server on the first API call: it imports its
    whole server package in *this* process (2.9 s measured) only to spawn a subprocess that imports it
    again and serves (4-5 s), one after the other. This starts that same subprocess -- Prefect's own
    command (``SubprocessASGIServer`` in ``prefect.server.api.server``, prefect 3.8.8): uvicorn, the
    ephemeral app factory, the SQLite database under ``PREFECT_HOME``, no UI -- as the first thing
    ``mdp-release run`` does, and points ``PREFECT_API_URL`` at it. Its start-up then overlaps this
    process's imports, and this process never imports the server. :meth:`wait` blocks until it answers
    (``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``); :meth:`stop` (at exit) ends it, after Prefect
    has flushed its logs and events to it.
    """

    _current: TemporaryServer | None = None

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.url: str | None = None

    @classmethod
    def current(cls) -> TemporaryServer:
        if cls._current is None:
            cls._current = cls()
        return cls._current

    @staticmethod
    def _free_port() -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def _spawn(self) -> None:
        import importlib.util

        spec = importlib.util.find_spec("prefect")  # where it is, without running its __init__ (1 s)
        if spec is None or spec.origin is None:
            raise RuntimeError("prefect is not installed")
        self.port = self._free_port()
        env = os.environ | {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        env.pop("PREFECT_API_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(spec.origin).parents[1])]
            + ["--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port)]
            + ["--log-level", "error", "--lifespan", "on"],
            env=env,
            stdin=subprocess.DEVNULL,
        )

    def start(self) -> str:
        """Spawn the server (once) and point ``PREFECT_API_URL`` at it; returns the API URL."""
        if self.url is None:
            self._spawn()
            self.url = f"http://127.0.0.1:{self.port}/api"
            os.environ["PREFECT_API_URL"] = self.url
            os.environ.setdefault("PREFECT_UI_URL", "")  # it serves no UI: no "View at" links to nowhere
            atexit.register(self.stop)  # registered before Prefect's exit handlers: runs after them
        return self.url

    def wait(self) -> None:
        """Block until the server answers /health (a new port if it could not bind its own)."""
        if self.proc is None:
            return
        timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS") or 120)
        t0, attempts = time.monotonic(), 1
        while not healthy(f"http://127.0.0.1:{self.port}/api", timeout=2.0):
            code = self.proc.poll()
            if code is not None:  # it exited: the port was taken meanwhile, or a real failure
                if attempts >= 3:
                    raise RuntimeError(f"the temporary Prefect server exited with code {code}")
                attempts += 1
                self._spawn()
                self.url = os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{self.port}/api"
            elif time.monotonic() - t0 > timeout:
                self.stop()
                raise RuntimeError(
                    f"the temporary Prefect server did not answer within {timeout:.0f} s "
                    "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for_server() -> None:
    """Before the first Prefect API call: wait for the temporary server, if this process started one."""
    if TemporaryServer._current is not None:
        TemporaryServer._current.wait()


class _NoErrorsOnConsole(logging.Filter):
    """Keeps ERROR records (Prefect's failure tracebacks) off the terminal; they still reach the
    Prefect log (the API handler is separate). ``mdp-release`` prints the one-line error itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def quiet_console_errors(debug: bool) -> None:
    """Unless ``debug``: filter ERROR records out of Prefect's console handlers (call after Prefect
    configured logging, i.e. after importing the flow)."""
    if debug:
        return
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)]
    for lg in loggers:
        for h in getattr(lg, "handlers", []):
            if isinstance(h, PrefectConsoleHandler) and not any(isinstance(f, _NoErrorsOnConsole) for f in h.filters):
                h.addFilter(_NoErrorsOnConsole())


def run_from_cli(args: argparse.Namespace) -> int:
    from flows.config import load_config, manifest_config, manifest_draw, store_root

    if args.from_manifest and args.config:
        from mdp_core.errors import InputError

        raise InputError("give --config or --from-manifest, not both")
    # The configs first (no Prefect needed): a bad one fails before any server starts.
    paths = args.config or [None]
    cfgs = [manifest_config(args.from_manifest)] if args.from_manifest else [load_config(p) for p in paths]
    if args.store:
        cfgs = [c.model_copy(update={"store": str(Path(args.store).expanduser().resolve())}) for c in cfgs]
    for c in cfgs:  # a store root that is no place for a store (/, a home folder): refused before Prefect starts
        store_root(c)
    refresh_from: Any = "ingest" if args.refresh else args.refresh_from  # a StageName (argparse checked it)
    # a re-run of a published release uses its draw (from this store's private part); otherwise the table's own
    draw = manifest_draw(args.from_manifest) if args.from_manifest else None
    if draw is not None and args.new_draw:
        from mdp_core.errors import InputError

        raise InputError("--new-draw makes a new release: not with --from-manifest, which reproduces one")
    where = prepare_environment()  # before Prefect is imported (a temporary server starts now, in parallel)
    from flows.release import release_flow

    quiet_console_errors(getattr(args, "debug", False))
    stores = sorted({str(store_root(c)) for c in cfgs})
    print(f"mdp-release run: {where}; store {', '.join(stores)}", file=sys.stderr, flush=True)
    wait_for_server()
    from mdp_core.control import install_signal_handlers

    install_signal_handlers()  # SIGTERM / Ctrl-C: the running solve stops within seconds, nothing is published
    t0 = time.perf_counter()
    if len(cfgs) > 1:
        from flows.batch import batch_flow

        with no_flow_heartbeat():
            manifests = batch_flow(configs=cfgs, refresh_from=refresh_from, new_draw=args.new_draw)
        if args.json:
            print(json.dumps(manifests, indent=2, sort_keys=True))
            return 0
        for m in manifests:
            _print_manifest(m)
        print(f"  batch of {len(manifests)} releases, flow wall time {time.perf_counter() - t0:.1f}s")
        return 0
    with no_flow_heartbeat():
        manifest = release_flow(config=cfgs[0], refresh_from=refresh_from, new_draw=args.new_draw, draw=draw)
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    _print_manifest(manifest)
    print(f"  flow wall time {wall:.1f}s")
    exit_fast_after_success()
    return 0


def no_flow_heartbeat() -> contextlib.AbstractContextManager[Any]:
    """For ``mdp-release run``: no flow-run heartbeat, unless you configured one (PREFECT_FLOWS_HEARTBEAT_FREQUENCY
    in the environment, a profile or prefect.toml). Prefect's heartbeat thread (an event every 180 s, for
    automations that detect crashed runs) sleeps in 1 s steps and the engine joins it when the run ends:
    0.5-1 s of every run (measured: a flow of 8 cached tasks took 1.2 s with it, 0.4 s without), a third of
    a cached re-run. A run in your terminal reports its own crash; served and deployed runs keep it."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    configured = get_current_settings().flows.model_fields_set
    if "heartbeat_frequency" in configured or any(
        os.environ.get(v) for v in ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")
    ):
        return contextlib.nullcontext()
    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def exit_fast_after_success() -> None:
    """After a successful ``mdp-release run`` against a server: at exit, drain Prefect's log and event
    workers (so the UI has every line), stop the temporary server if this run started one, and end the
    process at once. Python's ordinary teardown of Prefect's background threads and clients costs about
    1 s (measured), a third of a cached re-run. Only as the command itself (never inside another program,
    e.g. pytest); MDP_RELEASE_SLOW_EXIT=1 turns it off."""
    if not os.environ.get("PREFECT_API_URL") or os.environ.get("MDP_RELEASE_SLOW_EXIT"):
        return
    if Path(sys.argv[0]).name not in ("mdp-release", "cli.py"):
        return

    def _exit() -> None:
        try:
            from prefect.events.worker import EventsWorker
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=10)
            EventsWorker.drain_all(timeout=10)
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            return  # the ordinary teardown will do it
        if TemporaryServer._current is not None:
            TemporaryServer._current.stop()  # after the drain: the logs and events reached it
        os._exit(0)

    atexit.register(_exit)  # runs before Prefect's own exit handlers (last registered, first run)


def _print_manifest(manifest: dict) -> None:
    cert = manifest["privacy"]["certificate"]
    print(f"release {manifest['run_name']} -> {manifest['run_dir']}")
    for name, st in manifest["stages"].items():
        print(
            f"  {name:<12} {'cached ' if st['cache_hit'] else 'ran    '} {st['wall_seconds']:>8.2f}s  {st['cache_key'][:12]}"
        )
    sv = manifest["solve"]
    print(
        f"  mechanism: {sv['method']} {sv['status']}, expected loss {sv['objective']:.6g}, "
        f"privacy {'PASS' if cert['passed'] else 'FAIL'} (realised eps {cert['max_realised_epsilon']})"
    )
