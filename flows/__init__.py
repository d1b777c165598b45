"""Prefect flows composing the tasks in ``tasks/`` (and the ``mdp-release`` CLI).

Importing ``flows`` changes nothing in the process: no environment variables, no module table
entries. Prefect's settings come from where Prefect documents them (environment, profile,
``prefect.toml``); the ``mdp-release`` command sets its quiet defaults in its own environment before it
imports Prefect (:func:`flows.run.quiet_defaults`).

Package names: the project's top-level packages are ``flows``, ``tasks``, ``mdp_core`` and
``artifacts``. ``python -m ...``, ``python -c ...`` and the REPL put the working directory first on
``sys.path``, so a folder there with one of those names (an ``artifacts/`` output folder, say) shadows
the installed package -- in that process and in the Dask worker processes it starts (they inherit its
``sys.path``). The ``mdp-release`` and ``prefect`` commands, ``dask worker`` and a script run by its path
do not put the working directory on ``sys.path``; for ``python -m`` / ``-c`` use ``python -P`` (or
``PYTHONSAFEPATH=1``, Python 3.11+), which leaves it off.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the folder holding flows/, tasks/, mdp_core/, artifacts/
