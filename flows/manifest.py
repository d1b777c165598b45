"""What every flow of this project does with a finished run: one manifest entry per stage, the run
manifest, and its publication to ``<store>/runs/<run_name>/`` (shared by the release and reproduce
flows, so both write the same manifest shape).

A manifest holds ``format``, ``version``, ``run_name``, ``flow_run_id``, ``created_at``, ``config``
(the flow's pydantic config as JSON, the secret table named by its role, never by its path:
:func:`public_config`), ``stages`` (:func:`stage_entry` per stage), ``code_versions``, the flow's own
fields, ``released_files`` ({file: sha256}) and ``run_dir`` (and ``out_dir`` when the run was also copied
to a folder; ``same_as`` when nothing new was published, see :func:`publish_run`).
"""

from __future__ import annotations

import datetime as _dt
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect.context import FlowRunContext
from pydantic import BaseModel

from artifacts.store import ArtifactRef, Store
from mdp_core.spec.contract import SIGNATURE_FILES

MANIFEST_VERSION = 1
# What a manifest's config says in place of the secret table's path: its role, never where it is (re-run with
# ``mdp-release run --from-manifest M --microdata PATH``).
SECRET_TABLE_ROLE = "secret table (file)"
Released = dict[str, tuple[ArtifactRef, str]]  # published file name -> (artifact, file name inside it)


def flow_run_id() -> str:
    """The current Prefect flow run's id ("local" outside a flow run)."""
    ctx = FlowRunContext.get()
    return str(ctx.flow_run.id) if ctx is not None and ctx.flow_run is not None else "local"


def run_name(when: _dt.datetime, run_id: str, label: str = "") -> str:
    """``<UTC time>-[<label>-]<last 8 characters of the run id>``, e.g. 20260101-030000-reproduce-1a2b3c4d."""
    # the LAST 8 hex digits: Prefect's run ids are uuid7, whose first 8 are a timestamp shared by
    # every run started within a minute (two scheduled runs finishing in one second collided)
    return f"{when:%Y%m%d-%H%M%S}-{label + '-' if label else ''}{run_id[-8:]}"


def stage_entry(ref: ArtifactRef, run_id: str, t0: float, started: float | None = None) -> dict[str, Any]:
    """A stage's manifest entry: its cache key, whether it was a cache hit, its artifact and file hashes,
    wall seconds since ``t0`` (``time.perf_counter()``) and compute seconds.

    A cache hit is an output produced by another run -- one that finished it before this run
    ``started`` (``time.time()``) when given, so a concurrent run's fresh output is not a hit.
    """
    other_run = ref.meta.get("produced_by") != run_id
    earlier = started is None or float(ref.meta.get("produced_at", 0.0)) < started
    return {
        "cache_key": ref.key,
        "cache_hit": other_run and earlier,
        "artifact": ref.path,
        "files": ref.files,
        "wall_seconds": round(time.perf_counter() - t0, 3),
        "compute_seconds": ref.meta.get("seconds"),
    }


def public_config(config: BaseModel) -> dict[str, Any]:
    """The config as a manifest publishes it: its JSON dump with ``release.microdata`` (the secret table's
    path, which may say whose table it is) replaced by :data:`SECRET_TABLE_ROLE`; everything else as run."""
    data = config.model_dump(mode="json")
    release = data.get("release")
    if isinstance(release, dict) and release.get("microdata") is not None:
        data["release"] = release | {"microdata": SECRET_TABLE_ROLE}
    return data


def new_manifest(
    fmt: str,
    name: str,
    run_id: str,
    created_at: _dt.datetime,
    config: BaseModel,
    stages: dict[str, dict[str, Any]],
    code_versions: dict[str, str],
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run manifest before publication: the common header, then the flow's own ``fields``."""
    return {
        "format": fmt,
        "version": MANIFEST_VERSION,
        "run_name": name,
        "flow_run_id": run_id,
        "created_at": created_at.isoformat(timespec="seconds"),
        "config": public_config(config),
        "stages": stages,
        "code_versions": code_versions,
        **(fields or {}),
    }


Publisher = Callable[[str, Released, dict[str, Any]], str | Path]


def _identity(manifest: dict[str, Any]) -> tuple[Any, Any]:
    """What makes two runs with the same released bytes the same release: the manifest format and the
    config, apart from ``[run]`` (how it ran: task runner, timeouts, retention)."""
    config = manifest.get("config")
    return manifest.get("format"), {k: v for k, v in config.items() if k != "run"} if isinstance(config, dict) else None


def publish_run(
    store: Store,
    manifest: dict[str, Any],
    released: Released,
    publish: Publisher | None = None,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Record ``released_files`` ({file: sha256}) in ``manifest``, publish the files and ``manifest.json``
    to ``runs/<run_name>/`` with ``publish(run_name, released, manifest)`` (default
    :meth:`Store.publish`; the release flow passes its verifying publisher) and, when ``out`` is
    given, copy them there too (with ``signature.json`` and ``public_key.pem``: the release flow's
    publisher, :func:`tasks.release.release`, signs the staged manifest before its door check). Returns
    the manifest with ``run_dir`` (and ``out_dir``).

    A run whose released files are byte for byte those of a published release of the same config (a
    fully cached re-run) publishes nothing: ``run_dir`` is that release's folder and ``same_as`` its name."""
    manifest["released_files"] = {file: ref.files[src] for file, (ref, src) in released.items()}
    same = store.same_release(manifest["released_files"], lambda other: _identity(other) == _identity(manifest))
    if same is not None:  # these exact bytes, from this config, are published already: nothing new
        run_dir = same
        manifest["same_as"] = same.name
    else:
        run_dir = Path((publish or store.publish)(manifest["run_name"], released, manifest))
    manifest["run_dir"] = str(run_dir)
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        for file in [*released, "manifest.json", *SIGNATURE_FILES]:  # the signature travels with the release
            (folder / file).parent.mkdir(parents=True, exist_ok=True)  # e.g. instance/instance.json
            if (run_dir / file).is_file():  # a release published before releases were signed has none
                shutil.copyfile(run_dir / file, folder / file)
        manifest["out_dir"] = str(folder.resolve())
    return manifest
