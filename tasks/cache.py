"""Stage cache keys that really work across runs and processes.

A stage's cache key is sha256 over
  * the stage name and the stage's **code version**,
  * the stage's own parameters (JSON, sorted keys),
  * the **content hashes** of the upstream artifacts it reads (ArtifactRef.content_hash: the sha256 of
    every file, not its path or run),
  * the versions of the libraries that change numbers or bytes (numpy, scipy, highspy, pyarrow, pandas).

Code version: the sha256 of the source files of the stage's task module and of every module of this
project (``mdp_core``, ``tasks``, ``artifacts``) that it imports, transitively -- found by reading
``import`` statements with :mod:`ast`. Editing a helper deep inside ``mdp_core`` that a stage uses
(and of lazily referenced ``"module:function"`` strings, as in ``mdp_core.solvers.solve.METHODS``)
therefore invalidates that stage (Prefect's own TASK_SOURCE policy hashes only the task function's
text); editing a module the stage does not import does not.

:class:`StageCachePolicy` plugs this into Prefect and heals its records before Prefect reads them: a
cache-key record or persisted result that is missing, unreadable (truncated, not a pickle, ...) or
hands back a reference other than the valid stored artifact of that key (missing or corrupt file,
replaced ref.json) is deleted with a warning, so the task runs again -- and finds the stored output,
or recomputes it -- instead of crashing or handing out a reference to a broken file.

No pickle: task results are persisted by :class:`ArtifactRefSerializer` (Prefect serializer type
``"mdp-artifact-ref"``), plain JSON of :meth:`ArtifactRef.as_dict` read back by
:meth:`ArtifactRef.from_dict`, which builds nothing but an ArtifactRef (no class names, no imports).
Prefect deserialises a result with the serializer *named in its cache-key record*, so
:func:`heal_record` reads the record as plain JSON first and drops any record naming another
serializer (``pickle`` from an older version or a forged one) or a result file outside
``prefect/results/`` -- before Prefect would load it. A crafted file in the store therefore costs a
recomputation, never code execution.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.serializers import Serializer
from pydantic import Field

from artifacts.store import ArtifactRef, Store, sha256_json

PROJECT_PACKAGES = ("mdp_core", "tasks", "artifacts")
NUMERIC_LIBRARIES = ("numpy", "scipy", "highspy", "pyarrow", "pandas")


_LAZY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ROOT = Path(__file__).resolve().parents[1]  # the directory holding mdp_core/, tasks/, artifacts/


def _module_file(name: str) -> Path | None:
    """Source file of project module ``name`` (without importing it), or None if not a module."""
    base = _ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


_IMPORTS_CACHE = Path(os.environ.get("MDP_RELEASE_HOME", Path.home() / ".mdp-release")) / "imports-cache.json"
_imports_memo: dict[str, list[str]] | None = None


def _imports(name: str, path: Path) -> set[str]:
    """:func:`_parse_imports`, memoised by (module, sha256 of its source) in this process and on disk
    (``~/.mdp-release/imports-cache.json``): parsing ~100 modules cost 0.5-1.8 s of every cached rerun."""
    global _imports_memo
    if _imports_memo is None:
        try:
            _imports_memo = json.loads(_IMPORTS_CACHE.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _imports_memo = {}
    data = path.read_bytes()
    memo_key = f"{name}:{hashlib.sha256(data).hexdigest()}"
    hit = _imports_memo.get(memo_key)
    if isinstance(hit, list):
        return set(hit)
    found = _parse_imports(name, path, data.decode("utf-8"))
    _imports_memo[memo_key] = sorted(found)
    try:  # best effort, atomic: a concurrent writer's version is as good as ours
        _IMPORTS_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = _IMPORTS_CACHE.with_name(f".{_IMPORTS_CACHE.name}.{os.getpid()}")
        tmp.write_text(json.dumps(_imports_memo, sort_keys=True), encoding="utf-8")
        os.replace(tmp, _IMPORTS_CACHE)
    except OSError:
        pass
    return found


def _parse_imports(name: str, path: Path, text: str) -> set[str]:
    """Project modules imported by module ``name`` (absolute and relative imports)."""
    tree = ast.parse(text)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _LAZY.match(node.value):
            found.add(node.value.partition(":")[0])  # lazy "module:function" references (solve.METHODS)
    return {m for m in found if m.split(".")[0] in PROJECT_PACKAGES}


def code_modules(module: str) -> dict[str, Path]:
    """``module`` and every project module it imports, transitively: {name: source file}."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:  # "pkg.attr" imports: not a module
            continue
        seen[name] = path
        parent = name.rpartition(".")[0]
        if parent and parent not in seen:
            todo.append(parent)  # importing pkg.mod runs pkg/__init__.py
        todo.extend(_imports(name, path))
    return seen


@functools.cache
def code_version(module: str) -> str:
    """sha256 over the sources of :func:`code_modules` (name and bytes, sorted by name)."""
    h = hashlib.sha256()
    for name, path in sorted(code_modules(module).items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Installed version of each distribution ("absent" when not installed)."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@functools.cache
def library_versions() -> dict[str, str]:
    return package_versions(NUMERIC_LIBRARIES)


def stage_key(stage: str, module: str, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> str:
    """The cache key of a stage execution (see module docstring). 64 hex characters."""
    return sha256_json(
        {
            "stage": stage,
            "code": code_version(module),
            "params": params,
            "upstream": {
                name: (ref.content_hash if ref is not None else None) for name, ref in sorted(upstream.items())
            },
            "libraries": library_versions(),
        }
    )


def split_inputs(inputs: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, ArtifactRef | None]]:
    """Task inputs -> (store root, params, upstream refs). Tasks take ``store``, ``params`` and refs."""
    upstream = {
        k: v for k, v in inputs.items() if isinstance(v, ArtifactRef) or (v is None and k not in ("store", "params"))
    }
    return str(inputs["store"]), dict(inputs.get("params") or {}), upstream


class StageCachePolicy(CachePolicy):
    """Prefect cache policy computing :func:`stage_key`; evicts records whose artifact is gone."""

    def __init__(self, stage: str, module: str) -> None:
        self.stage = stage
        self.module = module

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any) -> str:
        root, params, upstream = split_inputs(inputs)
        key = stage_key(self.stage, self.module, params, upstream)
        if isinstance(self.key_storage, Path):
            problem = heal_record(self.key_storage / key, Store(root).valid_ref(self.stage, key))
            if problem:
                _log().warning(
                    "%s: Prefect cache record %s %s; dropped it, the stage runs again", self.stage, key[:12], problem
                )
        return key


def _log() -> logging.Logger:
    try:
        from prefect import get_run_logger

        return get_run_logger()  # type: ignore[return-value]
    except Exception:
        return logging.getLogger("mdp_release")


SERIALIZER_TYPE = "mdp-artifact-ref"
MAX_RESULT_BYTES = 1 << 20  # an ArtifactRef is a few kB; anything larger is not one of ours


class ArtifactRefSerializer(Serializer):
    """Prefect result serializer for stage results: JSON, and only an :class:`ArtifactRef` comes back.

    ``dumps``: ``{"artifact_ref": ref.as_dict()}``; a task's exception (Prefect persists failures too)
    becomes ``{"error": "<type>: <message>"}``, read back as a RuntimeError with that text. ``loads``
    rejects (ValueError) anything else. No object is ever built from a class name in the data.
    """

    type: str = Field(default=SERIALIZER_TYPE, frozen=True)

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, ArtifactRef):
            payload: dict[str, Any] = {"artifact_ref": obj.as_dict()}
        elif isinstance(obj, BaseException):
            payload = {"error": f"{type(obj).__name__}: {obj}"}
        else:
            raise TypeError(f"stage tasks return an ArtifactRef, not {type(obj).__name__}")
        return json.dumps(payload, sort_keys=True, allow_nan=False, default=str).encode()

    def loads(self, blob: bytes) -> Any:
        if len(blob) > MAX_RESULT_BYTES:
            raise ValueError(f"a stage result of {len(blob)} bytes is not an ArtifactRef")
        data = json.loads(blob.decode("utf-8"))
        if isinstance(data, dict) and set(data) == {"artifact_ref"}:
            return ArtifactRef.from_dict(data["artifact_ref"])
        if isinstance(data, dict) and set(data) == {"error"} and isinstance(data["error"], str):
            return RuntimeError(data["error"])
        raise ValueError("not a stage result (expected an artifact_ref or error object)")


def heal_record(record: Path, valid: ArtifactRef | None) -> str | None:
    """Delete the Prefect cache-key ``record`` (and its persisted result) unless it is ours and reads
    back, without pickle, as ``valid``, the stored artifact's ref; returns what was wrong (None: kept, or
    nothing there).

    Ours: a JSON object whose ``serializer`` is exactly ``{"type": "mdp-artifact-ref"}`` and whose
    ``storage_key`` is ``<store>/prefect/results/<same name>``. The record is parsed with :mod:`json`
    only (Prefect's own model would import the modules a forged serializer names).
    """
    if not record.exists():
        return None
    results = record.parent.parent / "results"
    result_path = results / record.name
    problem = None
    try:
        meta = json.loads(record.read_bytes())
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        if meta.get("serializer") != {"type": SERIALIZER_TYPE}:
            ser = meta.get("serializer")
            named = ser.get("type") if isinstance(ser, dict) else ser
            problem = f"names the serializer {str(named)[:40]!r}, not {SERIALIZER_TYPE!r} (never loaded)"
        elif not isinstance(meta.get("storage_key"), str) or os.path.realpath(meta["storage_key"]) != os.path.realpath(
            result_path
        ):
            problem = "names a result file other than its own under prefect/results (never loaded)"
        else:
            value = ArtifactRefSerializer().loads(result_path.read_bytes())
            if valid is None:
                problem = "points to an artifact that is missing or fails its hash check"
            elif not isinstance(value, ArtifactRef) or value.files != valid.files or value.path != valid.path:
                problem = "does not match the stored artifact"
    except Exception as exc:  # any unreadable record: a missing result file, truncated JSON, a forged shape
        problem = f"is unreadable ({type(exc).__name__})"
    if problem:
        record.unlink(missing_ok=True)
        if result_path.is_file() or result_path.is_symlink():
            result_path.unlink(missing_ok=True)
    return problem


def drop_failure_record(state: Any, keys: Path) -> None:
    """Delete the persisted result (the exception's text) of a failed task run and its metadata record:
    a rerun cannot reuse it, so it must not stay in the store."""
    meta = getattr(getattr(state, "data", None), "metadata", None)
    storage_key = getattr(meta, "storage_key", None)
    if storage_key:
        path = Path(storage_key)
        path.unlink(missing_ok=True)
        (keys / path.name).unlink(missing_ok=True)


def cached(task: Any, stage: str, store: Store, refresh: bool = False) -> Any:
    """``task`` configured for the pipeline: :class:`StageCachePolicy` with its key records and the
    persisted results (JSON, :class:`ArtifactRefSerializer`) under the store, ``refresh`` = ignore (and
    overwrite) cached results. A failed run leaves no persisted exception behind (:func:`drop_failure_record`)."""
    policy = StageCachePolicy(stage, task.fn.__module__).configure(key_storage=store.prefect_keys)
    keys = store.prefect_keys
    return task.with_options(
        cache_policy=policy,
        persist_result=True,
        result_storage=store.prefect_results,
        result_serializer=ArtifactRefSerializer(),
        refresh_cache=refresh,
        on_failure=[lambda _task, _run, state: drop_failure_record(state, keys)],
    )
