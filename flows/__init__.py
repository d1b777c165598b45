"""Prefect flows composing the tasks in ``tasks/`` (and the ``mdp-release`` CLI).

Importing ``flows`` (the CLI, ``from flows.release import release_flow``, a Prefect worker loading
the flow) does two things first:

* binds the project's top-level packages (``artifacts``, ``mdp_core``, ``tasks``) to this checkout,
  so a folder of the same name in the working directory (an ``artifacts/`` output folder, say) cannot
  shadow them when Python puts the working directory first on ``sys.path`` (``python -m flows.cli``);
* applies quiet offline Prefect defaults (no telemetry, a long ephemeral start-up timeout), unless you
  set those variables yourself -- for the Python API as much as for the CLI.
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


def _bind_project_packages() -> None:
    for name in ("artifacts", "mdp_core", "tasks"):
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
