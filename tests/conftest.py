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
- ``fast``: everything else; ``pytest -m "not slow and not ops"`` (under 150 s on a quiet 2-core machine;
  ``--durations=30`` names the slowest). A fast or slow test that starts a server, a browser or a cluster
  anyway fails (:func:`_no_servers_outside_ops`): it must reveal it through one of the signs above, or be
  marked ``ops``.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdp_core.problem.datasets import grid, synthetic
from mdp_core.problem.instance import Instance

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "MPLBACKEND": "Agg"}
REPOSSESSOR_SECONDS = 5  # s: the session server revokes expired concurrency leases this often (Prefect's: 15)


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` on a free loopback port, ONE for the whole test session (every test
    module that needs a server uses this fixture): {"url": API URL, "home": its PREFECT_HOME}."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    # The scheduler looks for due deployments every 5 s instead of 60 s: scheduled-run tests finish sooner; so
    # does the repossessor for expired leases (REPOSSESSOR_SECONDS): a lease test waits less past its lease.
    # The UI must call this server's API (not the default port 4200); SQLite waits longer for its lock on
    # a busy 2-core machine instead of answering 503.
    env = (
        os.environ
        | QUIET
        | {
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
            "PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": str(REPOSSESSOR_SECONDS),
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


# {measure stage key: the approval record of the run that measured}: what the flow writes into the manifest
APPROVALS: dict[str, dict] = {}


def stage_loop(
    root,
    cfg,
    params: dict | None = None,
    *,
    until: str | None = None,
    before: Callable[[str, dict], object] | None = None,
):
    """The flow's own stage loop (:func:`flows.release.run_stages`: the door, the draw, every stage that runs for
    ``cfg`` in its declared place) into the store at ``root``, each stage through its task's ``.fn`` (no Prefect
    server) and the side runs (:data:`mdp_core.declarations.contract.SIDE_RUNS`) through
    ``tasks.evaluate.evaluate_point.fn`` with the arguments the flow's side runs give it, through step ``until``
    (None: every step). ``params``: {stage: parameters} (default :func:`flows.release.stage_params`; the loop adds
    the draw's). ``before(stage, upstream)`` runs before each stage with the keyword arguments its task is given
    (a test's edit or probe between two stages). Returns the loop's :class:`flows.release.StageRun`."""
    from artifacts.store import Store
    from flows import release
    from mdp_core.declarations import contract
    from mdp_core.declarations.methods import needs_partition
    from tasks import evaluate

    s = str(root)
    params = release.stage_params(cfg) if params is None else params

    def run(stage: str, **upstream):  # the declared task: a stage added to contract.STAGES runs too
        if before is not None:
            before(stage, upstream)
        return release.task_at(contract.stage(stage).task).fn(s, params[stage], **upstream)

    def side(refs: dict, stack) -> Callable[[], list]:  # flows.release._side_runs, run when collected
        def points() -> list:
            part = refs["partition"]
            return [
                evaluate.evaluate_point.fn(s, spec, refs["export"], part if needs_partition(spec["method"]) else None)
                for spec in evaluate.point_specs(params["evaluate"])
            ]

        return points

    return release.run_stages(cfg, Store(s), params, run, side=side, until=until)


def run_stages(root, cfg) -> dict:
    """Every stage of the release pipeline of config ``cfg`` through :func:`stage_loop` (the flow's own loop, the
    tasks' ``.fn``, no Prefect server) into the store at ``root``: {stage: ArtifactRef}. The approval record the
    flow would write into the manifest is kept in :data:`APPROVALS` (:func:`publish_release` reads it)."""
    from flows.approval import unattended

    state = stage_loop(root, cfg)
    APPROVALS[state.refs["measure"].key] = state.approval or unattended(state.plan)
    return state.refs


# ----------------------------------------------------------------------------- a released release
# The release every audit / signing test tampers with: the stage tasks' ``.fn`` (real HiGHS, real store, no
# Prefect server), published through ``tasks.publish.publish.fn`` -- the code the flow's ``publish`` runs.
def release_config(root: Path):
    """A 4 x 5 grid release (eps = 3 / km, eta = 2 km, K = 6, 2 subsets, 200 simulated individuals), opted out of
    every pair's certificate (``[solve] all_pairs = false``): certified on the mDP graph's edges, so its stretch is
    above 1 and the audit tests have a stretch to forge; tests/test_all_pairs_release.py publishes and audits the
    release default, every pair certified."""
    from flows.config import parse_config

    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 6, "seed": 2}},
            "privacy": {"epsilon": 3.0, "eta": 2.0},
            "solve": {"all_pairs": False},
            "partition": {"subsets": 2},
            "release": {"simulate": True, "n_individuals": 200},
            "evaluate": {"eps_factors": [1.0], "baselines": ["exp"]},
        }
    )


def build_release(root: Path) -> tuple:
    """Every stage of :func:`release_config` into the store at ``root``: (Store, {stage: ArtifactRef})."""
    from artifacts.store import Store

    return Store(root), run_stages(root, release_config(root))


def manifest_fields(store, refs: dict, sol, post, cfg=None) -> dict:
    """The manifest's ``config``, ``privacy`` and ``solve`` blocks as flows.release.release_flow writes them."""
    from flows.manifest import public_config
    from flows.release import release_fields
    from mdp_core.release import audit
    from mdp_core.runtime.files import read_json

    solve_info = read_json(store.path(sol, "solve.json"))
    inst_meta = read_json(store.path(refs["export"], "instance.json"))
    prov = read_json(store.path(post, audit.PROVENANCE))
    cfg = cfg or release_config(store.root)
    return {"config": public_config(cfg)} | release_fields(inst_meta, solve_info, prov)


def publish_release(
    store, refs: dict, run_name: str = "run-1", sol=None, post=None, cfg=None, approval: dict | None = None
) -> Path:
    """What the flow's publication does: manifest (as the flow writes it) + the release task; the release
    folder. ``cfg``: the config the stages ran with (default :func:`release_config`); ``approval``: the run's
    approval record (default: the one :func:`run_stages` kept for the measurement)."""
    from flows.manifest import MANIFEST_VERSION
    from mdp_core.declarations import contract
    from tasks import publish as publish_task

    sol, post = sol or refs["solve"], post or refs["measure"]
    outputs = refs | {"solve": sol, "measure": post}
    released = publish_task.released_files(**contract.stage("publish").upstream(cfg, outputs))  # as the flow's
    manifest = {
        "format": "mdp-release-manifest",
        "version": MANIFEST_VERSION,
        "run_name": run_name,
        "stages": {s: {"artifact": r.path, "files": r.files} for s, r in outputs.items()},
        **manifest_fields(store, refs, sol, post, cfg),
        "approval": approval or APPROVALS.get(post.key) or APPROVALS[refs["measure"].key],
        "released_files": {name: ref.files[src] for name, (ref, src) in released.items()},
    }
    return Path(publish_task.publish.fn(str(store.root), run_name, released, manifest))


@pytest.fixture(scope="session")
def released(tmp_path_factory) -> Path:
    """The published release folder of :func:`release_config`, one for the whole session (a dozen modules read
    it): never edit it or its store (:func:`run` is a copy to tamper with)."""
    return publish_release(*build_release(tmp_path_factory.mktemp("store")))


@pytest.fixture()
def run(released: Path, tmp_path: Path) -> Path:
    """A copy of :func:`released` outside any store, for one test to tamper with."""
    out = tmp_path / "run"
    shutil.copytree(released, out)
    return out


def _other_key():
    from mdp_core.release import signing

    return signing.Ed25519PrivateKey.generate()


# A key that is not the agency's: tampered copies (outside any store, so no key is pinned) are re-signed
# with it, so that each test sees the claim it tampers with, not only the broken signature.
OTHER_KEY = _other_key()


def resign(run: Path) -> None:
    """Sign the release folder ``run`` again, with :data:`OTHER_KEY`."""
    from mdp_core.release import signing

    signing.sign_release(run, OTHER_KEY)


def read(run: Path, name: str) -> dict:
    """The JSON file ``name`` of the release folder ``run``."""
    return json.loads((run / name).read_text())


def rehash(run: Path, name: str) -> None:
    """Record ``name``'s new sha256 wherever the release names it (provenance, then the manifest's
    released files and stage entry), and re-sign (:func:`resign`): only the claim itself is then wrong."""
    from mdp_core.release import audit
    from mdp_core.release.audit_files import _stage_of
    from mdp_core.runtime.files import file_sha256

    stage, file = _stage_of(name)
    if name in ("microdata.parquet", "aggregates.parquet"):
        p = read(run, audit.PROVENANCE)
        p[f"{name.split('.')[0]}_sha256"] = file_sha256(run / name)
        write(run, audit.PROVENANCE, p)
    if name != "manifest.json":
        m = read(run, "manifest.json")
        m["released_files"][name] = m["stages"][stage]["files"][file] = file_sha256(run / name)
        (run / "manifest.json").write_text(json.dumps(m))
    resign(run)


def write(run: Path, name: str, value: dict) -> None:
    """Replace the JSON file ``name`` of ``run`` by ``value`` and :func:`rehash` it."""
    (run / name).write_text(json.dumps(value))
    rehash(run, name)


def edit(run: Path, name: str, change: Callable[[dict], object]) -> None:
    """Apply ``change`` (in place) to the JSON file ``name`` of ``run``; rehashed."""
    value = read(run, name)
    change(value)
    write(run, name, value)


def edit_table(run: Path, name: str, change: Callable) -> None:
    """Apply ``change`` (in place, to a pandas DataFrame) to the Parquet file ``name`` of ``run``; rehashed."""
    import pyarrow.parquet as pq

    frame = pq.read_table(run / name).to_pandas()
    change(frame)
    frame.to_parquet(run / name, index=False)
    rehash(run, name)


def edit_report(run: Path, change: Callable[[str], str]) -> None:
    """Replace report.md of ``run`` by ``change(its text)``; rehashed."""
    (run / "report.md").write_text(change((run / "report.md").read_text()))
    rehash(run, "report.md")


def claims_of(run: Path) -> dict:
    """The machine-readable claims block of report.md."""
    m = re.search(r"<!-- mdp-release-claims (\{.*\}) -->", (run / "report.md").read_text())
    assert m is not None
    return json.loads(m.group(1))


# ----------------------------------------------------------------------------- a secret microdata table
N_PEOPLE = 400
POPULATION = "test-people"


def people_table(path: Path, seed: int = 7, n: int = N_PEOPLE):
    """A made-up secret table written to ``path`` (CSV) and returned: people near the cells of the 5 x 6 grid
    (lat, lon), with an internal id (ssn)."""
    import pandas as pd

    inst = grid(5, 6, n_outputs=None, seed=0)
    rng = np.random.default_rng(seed)
    home = rng.choice(inst.n_records, size=n, p=np.linspace(1, 3, inst.n_records) / np.linspace(1, 3, 30).sum())
    pts = inst.records[["lat", "lon"]].to_numpy()[home] + rng.normal(0, 0.0005, size=(n, 2))
    df = pd.DataFrame({"ssn": [f"123-45-{k:04d}" for k in range(n)], "lat": pts[:, 0], "lon": pts[:, 1]})
    df.to_csv(path, index=False)
    return df


PEOPLE_GRID = {  # the public universe of the people of people_table: its 5 x 6 grid, eps = 2 / km, eta = 1.5 km
    "dataset": {"kind": "grid", "params": {"rows": 5, "cols": 6, "n_outputs": 30, "seed": 0}},
    "privacy": {"epsilon": 2.0, "eta": 1.5},
}


def people_config(root: Path, table: Path, **release):
    """A release of :data:`PEOPLE_GRID` of the agency's table ``table`` (2 subsets, counts at eps 1, the
    exponential mechanism compared); ``release``: more ``[release]`` settings."""
    from flows.config import parse_config

    return parse_config(
        {
            "store": str(root),
            **PEOPLE_GRID,
            "partition": {"subsets": 2},
            "release": {"microdata": str(table), "population": POPULATION, "eps_counts": 1.0}
            | {"max_total_epsilon": 1000.0}
            | release,
            "evaluate": {"eps_factors": [1.0], "baselines": ["exp"], "counts_eps": [1.0], "counts_seeds": 2},
        }
    )


def to_toml(data: dict, prefix: str = "") -> str:
    """``data`` as a TOML document: its scalars and lists (JSON's spelling, TOML's too for numbers, strings,
    booleans and their lists; None left out), then each dict as a ``[table]``."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict) and v is not None]
    out = "\n".join(lines) + "\n"
    for k, v in data.items():
        if isinstance(v, dict):
            out += f"\n[{prefix}{k}]\n" + to_toml(v, f"{prefix}{k}.")
    return out


def people_toml(name: str, store: Path, table: Path | str = "people.csv", counts_seeds: int = 1, **release) -> str:
    """The config file of ``mdp-release run`` for release ``name`` of :data:`PEOPLE_GRID` of the agency's table
    ``table`` (relative: to the folder the command runs in), the exact LP, the counts at eps 1 and no baseline;
    ``release``: more ``[release]`` settings (its population ``<name>-people`` and a cap of 1000 unless given)."""
    release = {"microdata": str(table), "population": f"{name}-people", "max_total_epsilon": 1000.0} | release
    return to_toml(
        {"name": name, "store": str(store), **PEOPLE_GRID, "solve": {"method": "lp"}, "release": release}
        | {"evaluate": {"baselines": [], "counts_eps": [1.0], "counts_seeds": counts_seeds}}
    )


# ----------------------------------------------------------------------------- the mdp-release console script
MDP = str(Path(sys.executable).parent / "mdp-release")  # the console script, as a user runs it
PREFECT = str(Path(sys.executable).parent / "prefect")


def server_env(server: dict, home: Path, **more: str) -> dict[str, str]:
    """The environment of a command run against the session's Prefect ``server`` (:func:`prefect_server`):
    quiet, its API URL and home, ``MDP_RELEASE_HOME`` = ``home``, and ``more``."""
    env = os.environ | QUIET | {"PREFECT_API_URL": server["url"], "PREFECT_HOME": str(server["home"])}
    return env | {"MDP_RELEASE_HOME": str(home)} | more


def run_command(args: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """``args`` (e.g. ``[MDP, "run", ...]``) to its end in ``cwd``, output captured as text."""
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- stopping a dense solve
# (tests/test_stop.py, tests/test_cancel.py)
# seconds from the signal / deadline to the end: a hang guard, not a speed claim (a stop takes well under a second
# on a quiet machine, 11 s was seen at load 10); before the isolated solve a SIGTERM waited 38-41 s for HiGHS
STOP_WITHIN = 30.0


def children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (Linux /proc), but multiprocessing's resource tracker (one per process
    that used spawn, alive until that process ends)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = {int(x) for x in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += sorted(kids - out)
            out |= kids
    return {p for p in out if b"resource_tracker" not in cmdline(p)}


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: set[int], within: float) -> set[int]:
    end = time.monotonic() + within
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


# a long dense solve to interrupt: the graph's LP (all_pairs = false; every pair would make lp's full LP hold
# s (s - 1) K rows, about 9 M here)
DENSE_RUN_CONFIG = """
store = "{store}"
[dataset]
kind = "synthetic"
params = {{ n_records = 300, n_outputs = 100, seed = 0 }}
[privacy]
epsilon = 10.0
eta = 2.0
[solve]
method = "lp"
all_pairs = false
[release]
simulate = true
n_individuals = 300
[evaluate]
baselines = []
eps_factors = [1.0]
{extra}
"""


def run_until_solving(server, tmp_path: Path, extra: str = "") -> tuple[subprocess.Popen, list[str], float]:
    """``mdp-release run`` on the dense instance; returns once the solve stage has started (its first
    log line), with the stderr lines collected by a thread and the time the solve started."""
    cfg = tmp_path / "dense.toml"
    cfg.write_text(DENSE_RUN_CONFIG.format(store=tmp_path / "store", extra=extra))
    env = server_env(server, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "run", "--config", str(cfg)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for ln in proc.stderr:
            lines.append(ln)
            if "solve[lp]: N=300" in ln:
                started.set()

    threading.Thread(target=read, daemon=True).start()
    if not started.wait(120):
        proc.kill()
        raise AssertionError("the solve stage did not start:\n" + "".join(lines[-30:]))
    return proc, lines, time.monotonic()


def nothing_published(store: Path) -> None:
    """No release folder and no solve output: at most a stopped writer's temp folder, which the store's own
    debris rule removes (its process is gone: ``Store.clean_debris``, run at the start of every run)."""
    from artifacts.store import Store

    runs = [p.name for p in (store / "runs").iterdir()] if (store / "runs").exists() else []
    assert all(n.endswith("-failed") for n in runs), runs
    solve_dir = store / "objects" / "solve"
    if solve_dir.exists():
        Store(store).clean_debris()
    assert not solve_dir.exists() or not any(solve_dir.iterdir()), list(solve_dir.iterdir())


# ----------------------------------------------------------------------------- scheduled runs on the session's server
# (tests/test_operate.py, tests/test_operate_microdata.py)
def operate_env(server, tmp_path: Path) -> dict[str, str]:
    return (
        os.environ
        | QUIET
        | {
            "PREFECT_API_URL": server["url"],
            "PREFECT_HOME": str(server["home"]),
            "MDP_RELEASE_HOME": str(tmp_path),
            "PREFECT_RUNNER_POLL_FREQUENCY": "2",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
        }
    )


def api_post(server, path: str, body: dict) -> Any:
    """POST ``body`` to the Prefect server's REST API at ``path``; the decoded JSON answer.

    A busy 2-core machine can keep the server from answering for a while, and its database then answers
    503 Service Unavailable: those, timeouts and refused connections are retried with a growing pause. A
    4xx is the test's own mistake and raised at once.
    """
    req = urllib.request.Request(
        server["url"] + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    for attempt in range(6):
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code < 500 or attempt == 5:
                raise
        except (TimeoutError, OSError):
            if attempt == 5:
                raise
        time.sleep(1 + 2 * attempt)
    raise AssertionError("unreachable")


def runs_of(server, deployment: str) -> list[dict]:
    return api_post(server, "/flow_runs/filter", {"deployments": {"name": {"any_": [deployment]}}})


def start_logged(args: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def first_completed(server, procs: dict[str, subprocess.Popen], limit: float) -> dict[str, dict]:
    """{deployment: its first COMPLETED flow run} for every deployment of ``procs`` (its serving process),
    waiting at most ``limit`` s; a deployment's process is stopped once it has one (a failed or crashed run
    fails the test at once); every process is stopped on the way out."""
    done: dict[str, dict] = {}
    try:
        t0 = time.monotonic()
        while len(done) < len(procs) and time.monotonic() - t0 < limit:
            for dep in procs:
                if dep in done:
                    continue
                runs = runs_of(server, dep)
                failed = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
                assert not failed, f"{dep}: {failed[0]['state']['message']}"
                ok = [r for r in runs if r["state_type"] == "COMPLETED"]
                if ok:  # the first: it published (a later identical one publishes nothing new)
                    done[dep] = min(ok, key=lambda r: r["start_time"])
                    stop_group(procs[dep])  # one completed scheduled run is the proof: spare the machine
            time.sleep(3)
    finally:
        for p in procs.values():
            stop_group(p)
    return done


# ----------------------------------------------------------------------------- tiers (issue 31)
OPS_TIMEOUT = 900  # s: a test of the ops tier (real servers, scheduled runs, browsers); others: pyproject's 300 s
# What makes a test "ops", by kind: a regular expression over the source of the test, its fixtures and the
# test module's helpers and string constants they reach.
OPS_SIGNS: dict[str, re.Pattern[str]] = {
    "a Prefect server": re.compile(
        r"\bprefect_server\b|prefect_test_harness|[\"']server[\"'],\s*[\"']start[\"']|\bserver start\b"
    ),
    "a browser": re.compile(r"chromium|playwright|\bcdp\.|find_chromium"),
    "a Dask cluster": re.compile(r"LocalCluster|\bdistributed\b|DaskTaskRunner|\bdask_cluster\b"),
    "an mdp-release subprocess": re.compile(r"/mdp-release$|which\([\"']mdp-release[\"']\)", re.M),
}
# Tests measured over ~3 s (--durations=0 on the 2-core machine, seconds noted) in modules whose owners mark
# them explicitly: {node id prefix: seconds}. Remove an entry once its module carries ``@pytest.mark.slow``.
MEASURED_SLOW: dict[str, float] = {
    "test_docs.py::test_every_shell_command_works_as_written[README.md]": 155.0,
    "test_docs.py::test_every_shell_command_works_as_written[docs/methods.md]": 20.0,
    "test_docs.py::test_every_shell_command_works_as_written[docs/datasets.md]": 9.0,
    "test_rowgen.py::test_lagrangian_steps_keep_the_bound_valid_and_save_rounds": 14.7,  # [serial]; [process] 6.2
    # issue 53: the slowest of the fast tier, --durations=30 at load 10 on the 2 shared cores (about 2.5x a quiet
    # machine's seconds; the fast tier took 387 s there, 174 s of CPU)
    "test_rowgen.py::test_lagrangian_rows_match_the_lp_and_repeat_exactly": 19.3,
    "test_rowgen.py::test_loose_rounds_end_tight_match_the_lp_and_repeat_exactly": 17.1,
    "test_rowgen.py::test_deficit_share_rounds_reach_the_lp_optimum": 15.9,  # 7.7 and 4.6 the other two
    "test_rowgen.py::test_support_matches_the_lp_with_bounds_over_every_pair": 9.1,
    "test_rowgen.py::test_support_holds_fewer_columns_and_grows_only_where_needed": 6.0,
    "test_rowgen.py::test_property_loose_interior_point_bound_is_below_every_certified_mechanism": 5.0,
    "test_rowgen.py::test_interior_point_stops_at_a_tenth_of_the_requested_gap_and_the_bound_stays_valid": 4.8,
    "test_rowgen.py::test_lagrangian_bounds_are_reported_as_they_improve": 4.3,
    "test_real_release.py::test_new_draw_is_recorded_and_the_ledger_limit_refuses": 16.5,
    "test_real_release.py::test_another_mechanism_on_the_same_draw_is_a_new_accounted_release": 10.2,
    "test_verify.py::test_property_repair_always_verifies": 6.2,
    "test_verify.py::test_property_verify_flags_injected_ratio_violation": 5.2,
    "test_verify.py::test_property_repair_meets_the_exact_test_on_near_duplicates": 3.9,
    "test_private_facts.py::test_a_manifest_names_the_table_by_its_role_and_a_rerun_needs_its_path": 5.0,
    "test_advisor.py::test_check_predicts_a_road_release_and_proposes_a_smaller_one_when_it_is_long": 4.2,
    "test_lagrangian.py::test_identical_on_one_and_two_worker_processes": 3.6,
    # and at load 9-15 once the above were marked (fast tier 252 s there, 138 s of CPU)
    "test_cli.py::test_solve_heartbeat_says_what_highs_is_doing_during_a_silent_lp": 10.6,
    "test_colgen.py::test_process_executor_is_bit_identical_to_serial": 5.3,
    "test_audit_v3.py::test_every_line_edit_of_the_report_is_a_finding": 5.0,
    "test_check_guarantee.py::test_stated_flag_for_old_provenance": 4.8,
    "test_docs.py::test_every_shell_command_works_as_written[docs/operating.md]": 4.7,
    "test_check_guarantee.py::test_haversine_release": 3.1,
    "test_rowgen.py::test_a_stop_during_overlapped_rounds_ends_the_solve_within_seconds": 3.1,
    "test_benders.py::test_process_executor_matches_serial": 3.9,
    "test_guarantee_in_operation.py::test_versions_of_a_table_spend_from_one_population_budget": 3.3,
    "test_guarantee_in_operation.py::test_the_cap_is_kept_whatever_a_later_config_says": 3.1,
    # and at load 5 once those were (fast tier 281 s there, 162 s of CPU, 1,358 tests)
    "test_people_error.py::test_a_road_release_states_the_error_of_people_drawn_from_its_prior": 13.1,
    "test_people_error.py::test_cells_are_uniform_in_the_voronoi_cells_within_max_distance": 9.0,
    "test_audit_coherence.py::test_histogram_test_false_alarm_rate_on_200_honest_releases_and_its_power": 4.3,
    # and at load 14-19 (fast tier 741 s there, 166 s of CPU: about 4x a quiet machine's seconds)
    "test_ledger_rename.py::test_at_the_door_the_renamed_population_s_next_table_is_its_own": 19.3,
}


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


@functools.cache
def _source_of(obj: object) -> str:
    """The source of a function or class (a string constant: itself), read once per session."""
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
            if (
                code is not None
                and code.co_filename.startswith(tests_dir)
                and fixturedef.argname != "_no_servers_outside_ops"
            ):
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
    try:  # every Dask cluster (LocalCluster, in-process or not) is a SpecCluster (~0.2 s to import, once)
        from distributed.deploy.spec import SpecCluster
    except ImportError:  # without the dask extra no test can start one
        pass
    else:
        monkeypatch.setattr(SpecCluster, "__init__", lambda *a, **kw: refuse("a Dask cluster"))
    yield


TIER_SECONDS: dict[str, list[float]] = {}  # tier -> [seconds of setup + call + teardown, number of tests]


def _tier(keywords: object) -> str:
    return next((t for t in ("ops", "slow", "fast") if t in keywords), "fast")  # type: ignore[operator]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration to its test's tier (the ``when == "call"`` phase counts the test once)."""
    entry = TIER_SECONDS.setdefault(_tier(report.keywords), [0.0, 0])
    entry[0] += report.duration
    entry[1] += report.when == "call"


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """One line per tier: the seconds its tests took (setup + call + teardown) and how many ran."""
    if TIER_SECONDS:
        parts = [f"{t} {TIER_SECONDS[t][0]:.1f} s ({TIER_SECONDS[t][1]} tests)" for t in sorted(TIER_SECONDS)]
        terminalreporter.write_line("time by tier: " + ", ".join(parts))


def findings(run: Path, *needles: str) -> list[str]:
    """The audit's findings on the release folder ``run`` (one line each), asserting each needle is in one."""
    from mdp_core.release import audit

    out = audit.audit_release(run)
    assert all("\n" not in f for f in out)
    for needle in needles:
        assert any(needle in f for f in out), (needle, out)
    return out
