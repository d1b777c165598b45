"""What every flow of this project does with a finished run: one manifest entry per stage, the run
manifest, and its publication to ``<store>/runs/<run_name>/`` (shared by the release and reproduce
flows, so both write the same manifest shape).

A manifest holds ``format``, ``version``, ``run_name``, ``flow_run_id``, ``created_at``, ``config``
(the flow's pydantic config as JSON, the secret table named by its role, never by its path:
:func:`public_config`), ``stages`` (:func:`stage_entry` per stage), ``code_versions``, the flow's own
fields, ``released_files`` ({file: sha256}) and ``run_dir`` (and ``out_dir`` when the run was also copied
to a folder; ``same_as`` when nothing new was published, see :func:`publish_run`).

One release, one folder (issue 41): a run whose released content is that of a published release of the same
config -- byte for byte, or apart from the parts the contract declares volatile (wall-clock ``seconds``
columns and keys: :attr:`mdp_core.declarations.contract.PublishedFile.volatile`) -- publishes nothing new
(:func:`same_content`), and ``runs/latest`` names the newest release by its manifest's ``created_at``
(:func:`newest_release`), never merely the last run.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect.context import FlowRunContext
from pydantic import BaseModel

from artifacts.store import ArtifactRef, Store
from mdp_core.declarations.contract import SIGNATURE_FILES, is_published, published
from mdp_core.runtime.files import file_sha256

MANIFEST_VERSION = 4  # 2 (2026-11-27): a release config's dataset loss defaults to distance (before: the loader's,
# travel); 3 (2026-11-28): a release's solve gap defaults to 1e-2 (before: 1e-3); flows.manifest_read.manifest_config
# re-runs an older manifest with the loss and the gap it was made with; 4 (2026-11-29): a release's manifest
# always carries its ``approval`` record (mode "none": nobody was asked), which the audit then requires. No version
# for ``[solve] all_pairs`` (issue 51): a manifest without the key predates it and is re-run with it off (the graph)
RELEASE_FORMAT = "mdp-release-manifest"  # the release flow's manifests (flows/release.py)
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


def public_config(config: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """The config (or its JSON dump) as a manifest publishes it: its JSON dump with ``release.microdata`` (the
    secret table's path, which may say whose table it is) replaced by :data:`SECRET_TABLE_ROLE`; everything
    else as run."""
    data = dict(config) if isinstance(config, dict) else config.model_dump(mode="json")
    release = data.get("release")
    if isinstance(release, dict) and release.get("microdata") is not None:
        data["release"] = release | {"microdata": SECRET_TABLE_ROLE}
    return data


def new_manifest(
    fmt: str,
    name: str,
    run_id: str,
    created_at: _dt.datetime,
    config: BaseModel | dict[str, Any],
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
    """What makes two runs with the same released content the same release: the manifest format and the
    config, apart from how and where it ran (``[run]``: task runner, timeouts, retention; ``store``: a
    ``--store`` naming the store the config already names, or the default one -- the release is looked
    for in that store anyway)."""
    config = manifest.get("config")
    kept = {k: v for k, v in config.items() if k not in ("run", "store")} if isinstance(config, dict) else None
    return manifest.get("format"), kept


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def _volatile(fmt: Any, names: Any) -> dict[str, frozenset[str]]:
    """{released file: its volatile columns / keys} for the files of a release manifest (``fmt``) that have
    any (:attr:`mdp_core.declarations.contract.PublishedFile.volatile`: evaluation.parquet's and trace.parquet's
    timing columns, solve.json's and report.md's ``seconds``); other flows' files have none."""
    if fmt != RELEASE_FORMAT:
        return {}
    found = {n: published(n).volatile for n in names if is_published(n)}
    return {n: v for n, v in found.items() if v}


def _candidates(store: Store) -> list[Path]:
    """The published release folders, ``runs/latest``'s first, then the others newest first."""
    latest = store.latest()
    return ([latest] if latest is not None else []) + [f for f in store.releases()[::-1] if f != latest]


def same_content(store: Store, manifest: dict[str, Any], released: Released) -> Path | None:
    """A published release of the same config (:func:`_identity`) whose released files are these, byte for
    byte apart from their volatile parts (:func:`_volatile`): the same names, the same sha256 for every file
    without volatile parts (microdata, aggregates, mechanism, instance, provenance, figures ...), and equal
    content once the volatile columns / keys are left out for the others (:func:`_same_apart_from`); the
    folder's files must still hash to what its manifest lists. None when there is none.

    A re-run that recomputed the evaluate stage (its solves' wall-clock ``seconds``) or the solve is then
    the release already published: nothing new, ``runs/latest`` unmoved."""
    digests: dict[str, str] = manifest["released_files"]
    volatile = _volatile(manifest.get("format"), digests)
    if not volatile:
        return None  # byte for byte only: Store.same_release answered already
    ours = {name: store.path(ref, src) for name, (ref, src) in released.items()}
    for folder in _candidates(store):
        other = _read(folder)
        theirs = other.get("released_files") if other is not None else None
        if other is None or not isinstance(theirs, dict) or set(theirs) != set(digests):
            continue
        if _identity(other) != _identity(manifest):
            continue
        if any(theirs[n] != d for n, d in digests.items() if n not in volatile):
            continue
        if any(not (folder / n).is_file() or file_sha256(folder / n) != d for n, d in theirs.items()):
            continue  # the folder no longer holds what its manifest lists
        if all(
            theirs[n] == digests[n] or _same_apart_from(n, ours, {m: folder / m for m in theirs}, cols)
            for n, cols in volatile.items()
        ):
            return folder
    return None


def _same_apart_from(name: str, ours: dict[str, Path], theirs: dict[str, Path], volatile: frozenset[str]) -> bool:
    """Released file ``name`` holds the same content in ``ours`` and ``theirs`` ({released name: path}) once
    its ``volatile`` columns (Parquet) or keys (JSON; report.md: its claims) are left out."""
    a, b = ours[name], theirs[name]
    if name.endswith(".parquet"):
        return _same_table(a, b, volatile)
    if name.endswith(".json"):
        try:
            return _drop_keys(json.loads(a.read_text(encoding="utf-8")), volatile) == _drop_keys(
                json.loads(b.read_text(encoding="utf-8")), volatile
            )
        except (OSError, ValueError):
            return False
    if name == "report.md":
        return _same_report(ours, theirs, volatile)
    return False


def _same_table(a: Path, b: Path, volatile: frozenset[str]) -> bool:
    """Two Parquet files hold the same table (columns, dtypes, values; NaN equal to NaN) without ``volatile``."""
    import pyarrow.parquet as pq

    try:
        ta, tb = pq.read_table(a).to_pandas(), pq.read_table(b).to_pandas()
    except Exception:  # noqa: BLE001 -- pyarrow raises several types for an unreadable file: not the same
        return False
    ta, tb = (t.drop(columns=[c for c in volatile if c in t.columns]) for t in (ta, tb))
    return list(ta.columns) == list(tb.columns) and bool(ta.equals(tb))


def _drop_keys(value: Any, keys: frozenset[str]) -> Any:
    """``value`` (parsed JSON) without the object keys ``keys``, at any depth."""
    if isinstance(value, dict):
        return {k: _drop_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_drop_keys(v, keys) for v in value]
    return value


def _same_report(ours: dict[str, Path], theirs: dict[str, Path], volatile: frozenset[str]) -> bool:
    """Two report.md are the same apart from their volatile claims: both are exactly the report rendered from
    their own claims, evaluation table and figures (:func:`mdp_core.release.report.render_report`, as the
    audit checks), and their claims are equal without the ``volatile`` keys. The evaluation tables and the
    figures are released files of their own, compared as such."""
    from mdp_core.release.audit import CLAIMS_BLOCK
    from mdp_core.release.report import evaluation_markdown, render_report

    figures = frozenset(n for n in ours if "/" not in n and n.endswith(".png"))
    claims = []
    for files in (ours, theirs):
        try:
            text = files["report.md"].read_text(encoding="utf-8")
            block = CLAIMS_BLOCK.findall(text)
            c = json.loads(block[0]) if len(block) == 1 else None
            if not isinstance(c, dict) or text != render_report(
                c, evaluation_markdown(files["evaluation.parquet"]), figures
            ):
                return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        claims.append(_drop_keys(c, volatile))
    return claims[0] == claims[1]


def newest_release(store: Store | str | Path, run_dir: str | Path) -> Path:
    """Where ``runs/latest`` points after a run that published, or found already published, ``run_dir``:
    the store's newest release by its manifest's ``created_at`` (when its run finished; the folder name,
    which starts with that time, breaks a tie), ``run_dir`` when none is newer. A cached re-run of an older
    release (last month's config) leaves ``latest`` on the newer one."""
    s = store if isinstance(store, Store) else Store(store)
    run_dir = Path(run_dir)
    mine = _read(run_dir)
    best, best_key = run_dir, (str((mine or {}).get("created_at", "")), run_dir.name)
    for folder in s.releases():
        other = _read(folder)
        if other is None or (mine is not None and other.get("format") != mine.get("format")):
            continue
        key = (str(other.get("created_at", "")), folder.name)
        if key > best_key:
            best, best_key = folder, key
    return best


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
    publisher, :func:`tasks.publish.publish`, signs the staged manifest before its door check). Returns
    the manifest with ``run_dir`` (and ``out_dir``).

    A run whose released files are those of a published release of the same config -- byte for byte (a fully
    cached re-run) or apart from their volatile timings (:func:`same_content`: a recomputed evaluate, a
    ``--store`` naming the same store) -- publishes nothing: ``run_dir`` is that release's folder and
    ``same_as`` its name."""
    manifest["released_files"] = {file: ref.files[src] for file, (ref, src) in released.items()}
    same = store.same_release(manifest["released_files"], lambda other: _identity(other) == _identity(manifest))
    if same is None:  # the same content apart from its wall-clock timings (a recomputed evaluate, solve)
        same = same_content(store, manifest, released)
    if same is not None:  # this content, from this config, is published already: nothing new
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
