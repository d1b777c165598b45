"""Shared fixtures (small real instances, no mocks; the session's Prefect server; a released release and
its tampering helpers; the ``mdp-release`` subprocess runner) and the suite's tiers.

Tiers (issue 31), marked here from what a test uses, never by hand-kept lists of modules:

- ``ops``: the test needs a Prefect server (the ``prefect_server`` fixture, ``prefect_test_harness``, a
  ``prefect server start`` subprocess), a browser (chromium / playwright / ``tests/cdp.py``), a Dask cluster
  (``LocalCluster``, ``distributed``, ``DaskTaskRunner``) or runs the ``mdp-release`` console script in a
  subprocess. Found in the test function, its fixtures and the module's helpers they call (names resolved
  transitively in the test module). Per-test timeout 900 s.
- ``slow``: measured over about 3 s on the 2-core development machine (``--durations=0``): an explicit
  ``@pytest.mark.slow`` in the test module, or :data:`MEASURED_SLOW` below for modules whose owners have
  not marked them yet. Per-test timeout 300 s (``timeout`` in pyproject.toml).
- ``fast``: everything else; ``pytest -m "not slow and not ops"`` (under 2 minutes). A fast or slow test
  that starts a server, a browser or a cluster anyway fails (:func:`_no_servers_outside_ops`): it must
  reveal it through one of the signs above, or be marked ``ops``.
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from mdp_core.problem.datasets import grid, synthetic
from mdp_core.problem.instance import Instance

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "MPLBACKEND": "Agg"}


def path_instance(
    costs: np.ndarray, distances: list[float], epsilon: float, prior=None, eta: float | None = None
) -> Instance:
    """Records 0..N-1 on a path (edges (i, i+1) with the given distances), costs (N, K)."""
    costs = np.asarray(costs, dtype=float)
    n = costs.shape[0]
    prior = np.full(n, 1.0 / n) if prior is None else np.asarray(prior, dtype=float)
    edges = np.column_stack([np.arange(n - 1), np.arange(1, n)])
    d = np.asarray(distances, dtype=float)
    return Instance(prior, costs, edges, d, epsilon, eta if eta is not None else float(d.max(initial=1.0)))


@pytest.fixture(scope="session")
def grid_small() -> Instance:
    """4 x 5 grid of 1 km cells, K = 6 outputs, eta = 2 km, eps = 10 / km (one component)."""
    return grid(4, 5, n_outputs=6)


@pytest.fixture(scope="session")
def synth_small() -> Instance:
    """12 Gaussian points in 3-D, K = 5, eta = 1.5: several components, some isolated records."""
    return synthetic(n_records=12, n_outputs=5, sigma=1.5, eta=1.5, epsilon=2.0, seed=3)


@pytest.fixture()
def instance_dir(tmp_path: Path, grid_small: Instance) -> Path:
    """A freshly written instance directory of ``grid_small``."""
    from mdp_core.problem.io import write_instance

    out = tmp_path / "inst"
    write_instance(grid_small, out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` on a free loopback port, ONE for the whole test session (every test
    module that needs a server uses this fixture): {"url": API URL, "home": its PREFECT_HOME}."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    # The scheduler looks for due deployments every 5 s instead of 60 s: scheduled-run tests finish sooner.
    # The UI must call this server's API (not the default port 4200); SQLite waits longer for its lock on
    # a busy 2-core machine instead of answering 503.
    env = (
        os.environ
        | QUIET
        | {
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
            "PREFECT_UI_API_URL": url,
            "PREFECT_SERVER_UI_API_URL": url,
            "PREFECT_SERVER_DATABASE_TIMEOUT": "60",
            "PREFECT_SERVER_DATABASE_CONNECTION_TIMEOUT": "30",
        }
    )
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    t0 = time.monotonic()
    from flows.run import healthy

    while not healthy(url):
        if proc.poll() is not None or time.monotonic() - t0 > 180:
            proc.kill()
            pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield {"url": url, "home": home}
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def run_stages(root, cfg) -> dict:
    """Every stage of the release pipeline of config ``cfg`` through ``task.fn`` (no Prefect server) into the
    store at ``root``, in the flow's own order (:func:`flows.release.prepare` up to the draw): {stage: ArtifactRef}."""
    from artifacts.store import Store
    from flows.release import _TASKS, prepare, stage_params
    from tasks import evaluate

    s = str(root)
    p = stage_params(cfg)

    def run(stage: str, **upstream):
        return _TASKS[stage].fn(s, p[stage], **upstream)

    refs, _ = prepare(cfg, Store(s), p, run)
    refs["solve"] = run("solve", instance=refs["export"], partition=None)
    refs["postprocess"] = run(
        "postprocess",
        instance=refs["export"],
        mechanism=refs["solve"],
        graph=refs["graph"],
        partition=refs["partition"],
    )
    points = [  # the evaluate stage's own solves, as the flow runs them (evaluate-point task runs)
        evaluate.evaluate_point.fn(s, spec, refs["export"], refs["partition"] if spec["method"] == "benders" else None)
        for spec in evaluate.point_specs(p["evaluate"])
    ]
    refs["evaluate"] = run(
        "evaluate",
        instance=refs["export"],
        mechanism=refs["solve"],
        partition=refs["partition"],
        postprocess=refs["postprocess"],
        points=points,
    )
    return refs


# ----------------------------------------------------------------------------- tiers (issue 31)
OPS_TIMEOUT = 900  # s: a test of the ops tier (real servers, scheduled runs, browsers); others: pyproject's 300 s
# What makes a test "ops", by kind: a regular expression over the source of the test, its fixtures and the
# test module's helpers and string constants they reach.
OPS_SIGNS: dict[str, re.Pattern[str]] = {
    "a Prefect server": re.compile(r"\bprefect_server\b|prefect_test_harness|[\"']server[\"'],\s*[\"']start[\"']|\bserver start\b"),
    "a browser": re.compile(r"chromium|playwright|\bcdp\.|find_chromium"),
    "a Dask cluster": re.compile(r"LocalCluster|\bdistributed\b|DaskTaskRunner|\bdask_cluster\b"),
    "an mdp-release subprocess": re.compile(r"/mdp-release$|which\([\"']mdp-release[\"']\)", re.M),
}
# Tests measured over ~3 s (--durations=0 on the 2-core machine, seconds noted) in modules whose owners mark
# them explicitly: {node id prefix: seconds}. Remove an entry once its module carries ``@pytest.mark.slow``.
MEASURED_SLOW: dict[str, float] = {}


def _reached(func: Callable, seen: dict[int, object]) -> None:
    """Add ``func`` and what it names in its own test module (functions, classes, string constants),
    transitively, to ``seen`` (id -> object)."""
    if id(func) in seen:
        return
    seen[id(func)] = func
    code = getattr(func, "__code__", None)
    module = getattr(func, "__globals__", {})
    if code is None:
        return
    names: set[str] = set()
    stack = [code]
    while stack:  # nested functions, lambdas and comprehensions
        c = stack.pop()
        names |= set(c.co_names)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    tests_dir = str(Path(__file__).parent)
    for name in names:
        value = module.get(name)
        if isinstance(value, str):
            seen.setdefault(id(value), value)
        elif isinstance(value, types.FunctionType) and value.__code__.co_filename.startswith(tests_dir):
            _reached(value, seen)


def _source_of(obj: object) -> str:
    if isinstance(obj, str):
        return obj
    try:
        return inspect.getsource(obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def ops_reasons(item: pytest.Item) -> list[str]:
    """What a collected test uses that puts it in the ops tier (empty: none)."""
    funcs: dict[int, object] = {}
    fixturedefs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    tests_dir = str(Path(__file__).parent)
    for defs in fixturedefs.values():
        for fixturedef in defs:
            func = inspect.unwrap(fixturedef.func)
            code = getattr(func, "__code__", None)
            if code is not None and code.co_filename.startswith(tests_dir) and fixturedef.argname != "_no_servers_outside_ops":
                _reached(func, funcs)
    if isinstance(item, pytest.Function):
        _reached(item.function, funcs)
    text = "\n".join(_source_of(f) for f in funcs.values())
    return [kind for kind, sign in OPS_SIGNS.items() if sign.search(text)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test ``ops`` / ``slow`` (see the module docstring); ``fast`` is what is neither."""
    for item in items:
        if ops_reasons(item):
            item.add_marker(pytest.mark.ops)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(OPS_TIMEOUT))
        if any(item.nodeid.startswith(f"tests/{prefix}") for prefix in MEASURED_SLOW):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("ops") is None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


SERVER_PROCESS = re.compile(r"uvicorn|prefect\.server|\bserver start\b|chrom|playwright|distributed|dask-")


@pytest.fixture(autouse=True)
def _no_servers_outside_ops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test outside the ops tier that starts a Prefect server (``prefect server start``, the ephemeral or
    test-harness uvicorn), a browser or a Dask cluster fails, naming what it started."""
    if request.node.get_closest_marker("ops") is not None:
        yield
        return

    def refuse(what: str) -> None:
        pytest.fail(f"{request.node.nodeid} starts {what} but is not in the ops tier (see tests/conftest.py)")

    popen_init = subprocess.Popen.__init__

    def guarded(self, args, *a, **kw):  # type: ignore[no-untyped-def]
        line = " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)
        if SERVER_PROCESS.search(line):
            refuse(f"the process {line[:120]!r}")
        popen_init(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
    spec = sys.modules.get("distributed.deploy.spec")
    before = len(spec.SpecCluster._instances) if spec else 0
    yield
    spec = sys.modules.get("distributed.deploy.spec")
    if spec is not None and len(spec.SpecCluster._instances) > before:
        refuse("a Dask cluster")
