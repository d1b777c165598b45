"""``mdp-release run`` and ``mdp-release server``: run the release flow, with or without a Prefect server.

Where the flow runs (decided before Prefect is imported):
  1. ``PREFECT_API_URL`` set in the environment -> that server (e.g. a ``prefect server start`` of yours);
  2. else a server started by ``mdp-release server start`` that is still healthy -> that server;
  3. else whatever your Prefect profile says: its ``PREFECT_API_URL`` (``server start --set-profile``
     writes it there), or none -- Prefect's ephemeral mode, a temporary local server started by Prefect
     for the length of the run (several seconds of start-up, every run).
The quiet-offline settings (no telemetry) are applied unless you set them yourself (:func:`quiet_defaults`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_FILE = Path(os.environ.get("MDP_RELEASE_HOME", Path.home() / ".mdp-release")) / "server.json"
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


# ----------------------------------------------------------------------------- server
def healthy(url: str, timeout: float = 5.0) -> bool:
    """Whether the Prefect API at ``url`` answers its ``/health`` with 200 within ``timeout`` s. A port where nothing
    listens is refused at once; the timeout is for a server that is up but busy (at 1 s, a loaded machine's
    server read as down, and ``server start`` then tried a second server on its port)."""
    import urllib.request  # here: a run against a server it is given (PREFECT_API_URL) never asks (20 ms)

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


def _state() -> dict[str, Any]:
    try:
        state = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def saved_server() -> str | None:
    """The API URL of a server started by ``mdp-release server start`` that still answers."""
    url = _state().get("api_url")
    return url if url and healthy(url) else None


def _save(state: dict[str, Any]) -> None:
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps(state))


def start_server(host: str, port: int, timeout: float = 180.0) -> str:
    url = f"http://{host}:{port}/api"
    running = saved_server()
    if running and running != url:  # a second one would orphan it: `server stop` stops only the one it recorded
        from mdp_core.errors import InputError

        raise InputError(f"a server is already running at {running}: `mdp-release server stop` it first")
    if healthy(url):  # already up (yours, or ours): remember it, but never stop a server we did not start
        if saved_server() != url:
            _save({"api_url": url, "pid": None})
        return url
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    log = open(STATE_FILE.with_suffix(".log"), "ab")
    # the UI calls this server's API, also on a port other than 4200
    env = QUIET_ENV | {"PREFECT_UI_API_URL": url, "PREFECT_SERVER_UI_API_URL": url} | os.environ
    env.pop("PREFECT_API_URL", None)  # a server needs none (a profile's or yours pointing elsewhere is not it)
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
            _save({"api_url": url, "pid": proc.pid})
            return url
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"prefect server did not answer at {url} within {timeout:.0f}s")


def set_profile_api_url(url: str | None) -> str:
    """Write ``PREFECT_API_URL = url`` into the active Prefect profile (None: remove it) -- what ``prefect
    config set`` / ``unset`` do, through Prefect's public ``update_current_profile``. Returns the
    profile's name."""
    from prefect.settings import PREFECT_API_URL, update_current_profile

    return update_current_profile({PREFECT_API_URL: url}).name


def stop_server() -> bool:
    state = _state()
    if not state:
        return False
    STATE_FILE.unlink(missing_ok=True)
    if state.get("profile"):  # we wrote the profile's PREFECT_API_URL: take it back if it is still ours
        from prefect.settings import PREFECT_API_URL, load_current_profile

        if str(load_current_profile().settings.get(PREFECT_API_URL, "")) == state.get("api_url"):
            set_profile_api_url(None)
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
    p.add_argument(
        "--set-profile",
        action="store_true",
        help="start: also write PREFECT_API_URL into your active Prefect profile (as `prefect config set` "
        "does), so `prefect worker`, `prefect deploy` and the Python API find the server in every shell; "
        "`server stop` removes it again",
    )


def server_from_cli(args: argparse.Namespace) -> int:
    if args.action == "start":
        quiet_defaults()
        url = start_server(args.host, args.port)
        where = ""
        if args.set_profile:
            os.environ.pop("PREFECT_API_URL", None)  # the profile, not this shell's variable, gets written
            name = set_profile_api_url(url)
            _save(_state() | {"profile": name})
            where = f"; written to Prefect profile {name!r} (`mdp-release server stop` removes it)"
        print(
            f"Prefect server up at {url.removesuffix('/api')} (UI); mdp-release commands use it{where}", file=sys.stderr
        )
        if not args.set_profile:
            print(
                "prefect commands and the Python API need PREFECT_API_URL: eval the line below "
                '(`eval "$(mdp-release server start)"`) or use --set-profile',
                file=sys.stderr,
            )
        print(f"export PREFECT_API_URL={url}", flush=True)
        return 0
    if args.action == "stop":
        print("stopped" if stop_server() else "no server started by mdp-release")
        return 0
    found = os.environ.get("PREFECT_API_URL") or saved_server()
    if not found:
        print("no server: runs use Prefect's ephemeral mode (slower start-up)")
        return 1
    if not healthy(found):  # e.g. PREFECT_API_URL still exported after `server stop`
        print(f"no server answers at {found} (PREFECT_API_URL or the server mdp-release started)")
        return 1
    print(f"server: {found}")
    return 0


# ----------------------------------------------------------------------------- run
def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        action="append",
        help="TOML config (default: the built-in default release; examples in flows/examples/); repeat it to "
        "run several releases as one flow (batch) that shares their common cached stages",
    )
    p.add_argument(
        "--from-manifest",
        default=None,
        metavar="MANIFEST",
        help="re-run the release recorded in a run's manifest.json (the same config, microdata releases too)",
    )
    p.add_argument(
        "--microdata",
        default=None,
        metavar="PATH",
        help="with --from-manifest: the secret table the release was made from (a manifest names it by its role, "
        "never by its path); it must be the same bytes, or the recorded draw refuses it",
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
    from mdp_core.declarations import contract

    g.add_argument(
        "--refresh-from",
        default=None,
        metavar="STAGE",
        choices=list(STAGE_NAMES),
        type=contract.stage_name,  # a stage's former name (postprocess) still works
        help=f"recompute this stage and all later ones; STAGE is one of {', '.join(STAGE_NAMES)}",
    )
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")


def quiet_defaults() -> None:
    """The ``mdp-release`` command's Prefect defaults, in its own environment and before it imports Prefect
    (Prefect reads its settings from the environment, documented in its settings reference), unless you
    set them yourself (environment or Prefect profile win): no analytics, no telemetry, and a 120 s
    ephemeral-server start-up timeout (a first start on a fresh ``PREFECT_HOME`` exceeds the 20 s default).
    The Python API (``from flows.release import release_flow``) changes no setting."""
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)


def prepare_environment() -> str:
    """Apply the quiet defaults and pick the Prefect API; returns a description of where the flow runs."""
    quiet_defaults()
    if os.environ.get("PREFECT_API_URL"):
        return f"Prefect server {os.environ['PREFECT_API_URL']}"
    url = saved_server()
    if url:
        os.environ["PREFECT_API_URL"] = url
        return f"Prefect server {url} (started by mdp-release server start)"
    return (
        "Prefect's ephemeral mode or your profile's PREFECT_API_URL (`mdp-release server start` makes re-runs faster)"
    )


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


def rerun_config(manifest: str | Path, microdata: str | None = None) -> Any:
    """The config to re-run the release recorded in ``manifest`` (``run --from-manifest``): the manifest's
    config, with the secret table at ``microdata`` -- a manifest names the table by its role
    (:data:`flows.manifest.SECRET_TABLE_ROLE`), never by its path, so a microdata release needs it
    (InputError without it). A manifest written before that records a path: used unless ``microdata`` is
    given. The table's bytes are checked later, against the recorded draw (the same version or a refusal)."""
    from flows.manifest import SECRET_TABLE_ROLE
    from flows.manifest_read import manifest_config
    from mdp_core.errors import InputError

    cfg = manifest_config(manifest)
    recorded = cfg.release.microdata
    if recorded is None:
        if microdata is not None:
            raise InputError(f"{manifest}: its release is of simulated people: --microdata has no table to replace")
        return cfg
    if microdata is None:
        if recorded == SECRET_TABLE_ROLE:
            raise InputError(
                f"{manifest}: the manifest names the secret table by its role, not its path: give the table the "
                "release was made from with --microdata PATH"
            )
        return cfg
    return cfg.model_copy(update={"release": cfg.release.model_copy(update={"microdata": microdata})})


def run_from_cli(args: argparse.Namespace) -> int:
    from flows.config import load_config, store_root
    from flows.door import sealed_config
    from flows.manifest_read import manifest_draw
    from mdp_core.errors import InputError

    if args.from_manifest and args.config:
        raise InputError("give --config or --from-manifest, not both")
    microdata = getattr(args, "microdata", None)
    if microdata is not None and not args.from_manifest:
        raise InputError("--microdata is for --from-manifest (a config names its own table: [release] microdata)")
    if microdata is not None:
        microdata = str(Path(microdata).expanduser().resolve())
    # The configs first (no Prefect needed): a bad one fails before any server starts.
    paths = args.config or [None]
    cfgs = [rerun_config(args.from_manifest, microdata)] if args.from_manifest else [load_config(p) for p in paths]
    if args.store:
        cfgs = [c.model_copy(update={"store": str(Path(args.store).expanduser().resolve())}) for c in cfgs]
    for c in cfgs:  # a store root that is no place for a store (/, a home folder): refused before Prefect starts
        store_root(c)
    cfgs = [sealed_config(c) for c in cfgs]  # the secret table's path stays in the store's private part
    refresh_from: Any = "ingest" if args.refresh else args.refresh_from  # a StageName (argparse checked it)
    # a re-run of a published release uses its draw (from this store's private part); otherwise the table's own
    draw = manifest_draw(args.from_manifest) if args.from_manifest else None
    if draw is not None and args.new_draw:
        raise InputError("--new-draw makes a new release: not with --from-manifest, which reproduces one")
    where = prepare_environment()  # before Prefect is imported
    stores = sorted({str(store_root(c)) for c in cfgs})
    print(f"mdp-release run: {where}; store {', '.join(stores)}", file=sys.stderr, flush=True)
    with long_lived_imports():  # the heap frozen until the run ends (after_run)
        import flows.release  # noqa: F401 -- Prefect configures its logging on import: before quiet_console_errors

    try:
        quiet_console_errors(getattr(args, "debug", False))
        from mdp_core.runtime.control import install_signal_handlers

        restore = (
            install_signal_handlers()
        )  # SIGTERM / Ctrl-C: the running solve stops within seconds, nothing is published
        disarm = bounded_stop("mdp-release")  # ... and the process ends within seconds even when the server is gone
        try:
            return _run_flows(args, cfgs, refresh_from, draw)
        finally:
            disarm()
            restore()  # this process's own handlers again (an in-process caller keeps its Ctrl-C)
    finally:
        after_run()


@contextlib.contextmanager
def long_lived_imports() -> Iterator[None]:
    """Import modules whose objects live until the process ends (Prefect, pydantic's schemas: most of a run's
    heap) without Python's cyclic garbage collector walking them: no collection while they load (0.1 s of a
    cached run's collections, which free nothing of them), and frozen (``gc.freeze``: left out of every later
    collection) until :func:`after_run`."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def after_run() -> None:
    """The collector as it was for an in-process caller (the heap :func:`long_lived_imports` froze, unfrozen),
    and at the process's exit the heap frozen again, first of the exit handlers: the interpreter's last
    collections then skip it (0.35-0.8 s of every run's exit, measured), while every exit handler still runs
    (Prefect's log and event workers drain, its clients close). What they would have freed, the process gives
    back to the system when it ends."""
    gc.unfreeze()
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


STOP_BOUND = 60.0  # s: the longest a stopped run may take to end (its stage, records, final state)
DEAD_API_GRACE = 3.0  # s: after a stop, once the Prefect API does not answer (the stop itself takes 1-3 s)


def api_url() -> str | None:
    """The Prefect API this process talks to: ``PREFECT_API_URL`` (environment, the server ``mdp-release server
    start`` started, your profile); None in Prefect's ephemeral mode."""
    from prefect.settings import get_current_settings

    url = os.environ.get("PREFECT_API_URL") or get_current_settings().api.url
    return str(url) if url else None


def bounded_stop(command: str) -> Any:
    """After SIGTERM / Ctrl-C / a Cancel, the process ends within :data:`STOP_BOUND` seconds, and within
    :data:`DEAD_API_GRACE` seconds once the Prefect server does not answer (:func:`answers`): Prefect's client
    retries every call to a dead API for about a minute (5 attempts, exponential back-off), and a stopped run
    makes several (its failure artifact, its final state, its logs), which kept a SIGTERM'd run alive for
    4 minutes. Then one line on stderr (``<command>: error: ...``) and the process ends (exit status 143,
    :func:`mdp_core.runtime.control.stop_watchdog`); the run's record in the store is written by then (the
    stop took 1-3 s), its end is not recorded on the server. Returns ``disarm``."""
    from mdp_core.runtime.control import stop_watchdog

    url = api_url()

    def message(reason: str, waited: float, dead: bool) -> str:
        why = (
            f"Prefect's server {url} does not answer (its client would retry for minutes)"
            if dead
            else f"the stopped run did not end within {STOP_BOUND:g} s"
        )
        return (
            f"{command}: error: {reason}; {why}: ending now, {waited:.0f} s after the stop "
            "(the run's end is not recorded on the server)"
        )

    return stop_watchdog(
        STOP_BOUND, hopeless=(lambda: not answers(url)) if url else None, grace=DEAD_API_GRACE, message=message
    )


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether anything answers at the Prefect API ``url`` (its ``/health``): any HTTP response counts -- a busy
    server's 503, Prefect Cloud's 401 to a request without a key --; a refused connection or no answer within
    ``timeout`` seconds does not."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # URLError (refused, unreachable), a timeout, a malformed URL
        return False


def _run_flows(args: argparse.Namespace, cfgs: list[Any], refresh_from: Any, draw: Any) -> int:
    """The flow run(s) of :func:`run_from_cli` and what it prints; the exit code."""
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
    from prefect import tags

    from flows.plan import run_tags
    from flows.release import release_flow

    # The run is created with its release's tags (as a deployment's runs are): the server attaches a run's tags
    # to its state events from its first state on, so `mdp-release notify --release NAME` hears this run fail.
    with own_flow_heartbeat(), tags(*run_tags(cfgs[0])):
        manifest = release_flow(config=cfgs[0], refresh_from=refresh_from, new_draw=args.new_draw, draw=draw)
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    _print_manifest(manifest)
    print(f"  flow wall time {wall:.1f}s")
    return 0


def no_flow_heartbeat() -> contextlib.AbstractContextManager[Any]:
    """For ``mdp-release run`` of a batch: no flow-run heartbeat in Prefect's *ephemeral* mode only.

    Prefect's heartbeat (an event every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` = 180 s) is what its
    automations use to find crashed runs: a run whose heartbeats stop is marked Crashed. It costs 0.5-1 s
    of every run (the thread sleeps in 1 s steps and the engine joins it when the run ends). So it is kept
    whenever a server can watch the run -- ``PREFECT_API_URL`` set (environment, ``mdp-release server
    start``, a profile) -- and switched off only in ephemeral mode, whose temporary server ends with the run
    and runs no automation. A heartbeat frequency you configured yourself is never changed. One release
    sends its heartbeats itself instead (:func:`own_flow_heartbeat`)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    if _heartbeat_configured() or _watched():
        return contextlib.nullcontext()
    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


@contextlib.contextmanager
def own_flow_heartbeat() -> Iterator[None]:
    """For ``mdp-release run`` of one release: the flow-run heartbeat sent by the release's own thread.

    Against a server (``PREFECT_API_URL`` set), Prefect's engine heartbeat is switched off for the run and
    the release's cancellation watcher sends the same ``prefect.flow-run.heartbeat`` event at the same
    frequency (:data:`tasks.progress.FLOW_HEARTBEAT`, :func:`tasks.progress.watch_cancellation`), so
    automations that mark a run Crashed when its heartbeats stop see no difference, and the run does not
    wait for the engine's heartbeat thread at its end (it sleeps in 1 s steps: 0.35-0.55 s of a 2.3 s
    cached re-run). In ephemeral mode no heartbeat at all (:func:`no_flow_heartbeat`); a heartbeat you
    switched off (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` unset to nothing in a profile) stays off."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    from tasks.progress import FLOW_HEARTBEAT

    every = get_current_settings().flows.heartbeat_frequency
    if not _watched() or every is None:
        with no_flow_heartbeat():
            yield
        return
    token = FLOW_HEARTBEAT.set(int(every))
    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield
    finally:
        FLOW_HEARTBEAT.reset(token)


def _heartbeat_configured() -> bool:
    """A flow-run heartbeat frequency set by the user (environment or profile)."""
    from prefect.settings import get_current_settings

    return "heartbeat_frequency" in get_current_settings().flows.model_fields_set or any(
        os.environ.get(v) for v in ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")
    )


def _watched() -> bool:
    """A Prefect server watches the run (``PREFECT_API_URL`` in the environment or the settings)."""
    from prefect.settings import get_current_settings

    return bool(os.environ.get("PREFECT_API_URL") or get_current_settings().api.url)


def _proven(solve: dict) -> str:
    """The suffix ' (within x % of the optimum, proven)' from the solve's objective and proven lower bound; '' without
    one ("optimal" means within the requested gap, not exactly optimal)."""
    obj, lb = solve.get("objective"), solve.get("lower_bound")
    if not isinstance(obj, (int, float)) or not isinstance(lb, (int, float)) or obj <= 0:
        return ""
    return f" (within {100 * max(obj - lb, 0.0) / obj:.3g} % of the optimum, proven)"


def _print_people_error(manifest: dict) -> None:
    """The release's expected error per person beside planar Laplace's (issue 50), from its evaluation.parquet; the
    table's own people's DP-measured figure first when its provenance has one."""
    from mdp_core.declarations.contract import PROVENANCE
    from mdp_core.release.report import evaluation_markdown, people_error_line
    from mdp_core.runtime.files import read_json

    path, prov = Path(manifest["run_dir"]) / "evaluation.parquet", Path(manifest["run_dir"]) / PROVENANCE
    unit = (manifest["privacy"].get("guarantee") or {}).get("distance_unit", "unit")
    measured = read_json(prov).get("people_error") if prov.is_file() else None
    method = manifest["solve"]["method"]
    line = people_error_line(evaluation_markdown(path), method, unit, measured) if path.is_file() else None
    if line:
        print(f"  {line}")


def _print_manifest(manifest: dict) -> None:
    cert = manifest["privacy"]["certificate"]
    same = (
        f": the same content as release {manifest['same_as']} (timings aside), nothing new published"
        if manifest.get("same_as")
        else ""
    )
    print(f"release {manifest['run_name']}{same} -> {manifest['run_dir']}")
    for name, st in manifest["stages"].items():
        print(
            f"  {name:<12} {'cached ' if st['cache_hit'] else 'ran    '} {st['wall_seconds']:>8.2f}s  {st['cache_key'][:12]}"
        )
    sv = manifest["solve"]
    from flows.operate_ui import realised_eps_text

    print(
        f"  mechanism: {sv['method']} {sv['status']}{_proven(sv)}, expected loss {sv['objective']:.6g}, "
        f"certificate {'PASS' if cert['passed'] else 'FAIL'} (realised eps {realised_eps_text(cert)})"
    )
    privacy = manifest["privacy"]
    g, led = privacy.get("guarantee") or {}, privacy.get("ledger") or {}
    if "metric_epsilon_per_unit" in g:
        unit = g["distance_unit"]
        who = "SIMULATED people (a demo)" if privacy.get("microdata_source") == "simulated" else "population"
        cap = led.get("max_total_epsilon")
        left = f"{led['left']:.4g} left of the cap {cap:g}" if cap is not None else "no cap"
        within = g["epsilon_per_unit"] * g.get("stretch_within_radius", g["stretch"])
        rate = (  # stretch 1: one rate for every pair (all edges, or every pair certified: issue 51)
            f"eps {within:.4g} per {unit} in the data's metric for any two records"
            if g["stretch"] <= 1.0
            else f"eps {within:.4g} per {unit} in the data's metric for records within {g['protection_radius']:g} "
            f"{unit} (the protection radius), {g['metric_epsilon_per_unit']:.4g} farther apart"
        )
        print(
            f"  guarantee: {rate} "
            f"(eps {g['epsilon_per_unit']:g} x stretch {g['stretch']:.4g}) + {g['additive_epsilon']:g} for the counts"
            f"{' and prior' if privacy.get('prior_epsilon') else ''}"
            f"{' and the mean error' if 'mean error' in str(g.get('statement')) else ''}; {who} "
            f"{led.get('population')}: charged {led['this_release']:.4g} (eps x stretch x {g['protection_radius']:g} "
            f"{unit} + the additive part); at that "
            f"release: total {led['total_so_far']:.4g}, {left} (now: mdp-release ledger)"
        )
    _print_people_error(manifest)
