"""Prefect flows composing the tasks in ``tasks/`` (and the ``mdp-release`` CLI).

Importing ``flows`` (the CLI, ``from flows.release import release_flow``, a Prefect worker loading
the flow) does two things first:

* binds the project's top-level packages (``artifacts``, ``mdp_core``, ``tasks``) to this checkout,
  so a folder of the same name in the working directory (an ``artifacts/`` output folder, say) cannot
  shadow them when Python puts the working directory first on ``sys.path`` (``python -m flows.cli``);
* applies quiet offline Prefect defaults (no telemetry, a long ephemeral start-up timeout), unless you
  set those variables yourself -- for the Python API as much as for the CLI;
* makes every Dask worker this process starts (prefect-dask's local cluster for ``[run] task_runner =
  "dask"``, ``mdp_core.executor.DaskExecutor``'s) import ``flows`` first -- Dask's worker preload,
  ``distributed.worker.preload`` -- so the workers bind the same packages: they are fresh processes
  that import ``tasks.evaluate``, ``artifacts.store``, ``mdp_core...`` by name with the working
  directory on ``sys.path``, and a package-named folder there (``artifacts/__init__.py``) broke them
  (the run hung). A preload you configure yourself is kept; workers of a remote cluster need
  ``dask worker --preload flows`` (or ``DASK_DISTRIBUTED__WORKER__PRELOAD='["flows"]'``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the folder holding flows/, tasks/, mdp_core/, artifacts/

QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "MPLBACKEND": "Agg",
}


def apply_quiet_defaults() -> None:
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)


DASK_PRELOAD_ENV = "DASK_DISTRIBUTED__WORKER__PRELOAD"


def preload_flows_in_dask_workers() -> None:
    """Dask workers started from here import ``flows`` on start-up (module docstring). Through the
    environment: read by dask when it is imported here and in child processes, at no import cost now."""
    if DASK_PRELOAD_ENV in os.environ:
        return  # yours
    os.environ[DASK_PRELOAD_ENV] = '["flows"]'
    dask = sys.modules.get("dask")
    if dask is not None and hasattr(dask, "config"):  # dask was imported first: it read the environment already
        preload = list(dask.config.get("distributed.worker.preload", []) or [])
        if "flows" not in preload:
            dask.config.set({"distributed.worker.preload": [*preload, "flows"]})


def _bind_project_packages() -> None:
    for name in ("mdp_core", "artifacts", "tasks"):  # in dependency order: artifacts.store imports mdp_core
        init = ROOT / name / "__init__.py"
        mod = sys.modules.get(name)
        if mod is not None or not init.is_file():
            continue  # already imported from elsewhere on purpose (or not a checkout): leave it
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise


apply_quiet_defaults()
_bind_project_packages()
preload_flows_in_dask_workers()
