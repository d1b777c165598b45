"""Wall time of `mdp-release run` (the default release), first run and cached re-runs, per Prefect mode.

First run, then ``--repeat`` fully cached re-runs (default 5), in Prefect's ephemeral mode and
against a running Prefect server. Prints one
JSON line per run and one summary line per mode with the median of the cached re-runs.

    python bench/bench_pipeline.py [--config FILE] [--modes ephemeral,server] [--repeat 5]

Each run is a fresh OS process (what a user experiences), timed from process start to exit.
The server mode starts a private `prefect server` on a free loopback port for the benchmark.
Each mode has its own store in its temporary folder (``--store``): the first run computes and publishes,
the re-runs are fully cached re-runs of that release, whatever the repository's own store holds (a release
published there by an earlier version of the code would make every re-run compare tables: ``same_content``).
Python's bytecode is cached there too (``PYTHONPYCACHEPREFIX``, as an installed package has its ``.pyc``),
even when ``PYTHONDONTWRITEBYTECODE`` is set; ``--no-bytecode`` keeps the environment's setting (every run
then compiles the project's sources again: about 0.1 s more per run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_pipeline.py` puts bench/, not the repo root, on sys.path
    sys.path.insert(0, str(REPO))

from flows.run import healthy  # noqa: E402

QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MPLBACKEND": "Agg",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cwd: Path, env: dict, config: str | None) -> float:
    args = [sys.executable, "-m", "flows.cli", "run", "--store", str(cwd / "store")]
    args += ["--config", config] if config else []
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed:\n{proc.stderr[-3000:]}")
    return wall


def _environment(work: Path, bytecode: bool) -> dict[str, str]:
    """The runs' environment: quiet Prefect, its home and mdp-release's in ``work``, no server of the caller's;
    ``bytecode``: compiled once into ``work/pycache``, as an installed package has its ``.pyc``."""
    env = (
        os.environ
        | QUIET
        | {"PREFECT_HOME": str(work / "prefect-home"), "MDP_RELEASE_HOME": str(work), "PYTHONPATH": str(REPO)}
    )
    env.pop("PREFECT_API_URL", None)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--modes", default="ephemeral,server")
    ap.add_argument("--repeat", type=int, default=5, help="cached re-runs per mode (the median is reported)")
    ap.add_argument("--no-bytecode", action="store_true", help="no bytecode cache of its own (the environment decides)")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"bench-{mode}-"))
        env = _environment(work, bytecode=not args.no_bytecode)
        server = None
        if mode == "server":
            port = _free_port()
            url = f"http://127.0.0.1:{port}/api"
            server = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            t0 = time.perf_counter()
            while not healthy(url):
                time.sleep(0.5)
            print(
                json.dumps(
                    {
                        "bench": "pipeline",
                        "mode": mode,
                        "step": "server_start",
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                ),
                flush=True,
            )
            env["PREFECT_API_URL"] = url
        try:
            cached = []
            for i in range(1 + args.repeat):
                step = "first_run" if i == 0 else "cached_run"
                wall = _run(work, env, args.config)
                if i:
                    cached.append(wall)
                print(
                    json.dumps(
                        {
                            "bench": "pipeline",
                            "mode": mode,
                            "step": step,
                            "seconds": round(wall, 2),
                            "config": args.config or "default",
                            "bytecode": not args.no_bytecode,
                        }
                    ),
                    flush=True,
                )
            if cached:
                summary = {
                    "bench": "pipeline",
                    "mode": mode,
                    "step": "cached_median",
                    "runs": len(cached),
                    "seconds": round(statistics.median(cached), 2),
                    "min": round(min(cached), 2),
                    "max": round(max(cached), 2),
                    "config": args.config or "default",
                    "bytecode": not args.no_bytecode,
                }
                print(json.dumps(summary), flush=True)
        finally:
            if server is not None:
                os.killpg(server.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
