"""Shared fixtures: small real instances (no mocks) and a helper to edit instance directories."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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
