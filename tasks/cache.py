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
(and of lazily referenced ``"module:function"`` strings, as in ``mdp_core.solve.METHODS``)
therefore invalidates that stage (Prefect's own TASK_SOURCE policy hashes only the task function's
text); editing a module the stage does not import does not.

:class:`StageCachePolicy` plugs this into Prefect. When the artifact behind a key is missing or fails
its hash check, the stale Prefect cache record is deleted so the task runs again instead of handing
out a reference to a broken file.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import importlib.metadata
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy

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


def _imports(name: str, path: Path) -> set[str]:
    """Project modules imported by module ``name`` (absolute and relative imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
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


@functools.lru_cache(maxsize=None)
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


@functools.lru_cache(maxsize=None)
def library_versions() -> dict[str, str]:
    return package_versions(NUMERIC_LIBRARIES)


def stage_key(stage: str, module: str, params: dict[str, Any], upstream: dict[str, ArtifactRef | None]) -> str:
    """The cache key of a stage execution (see module docstring). 64 hex characters."""
    return sha256_json(
        {
            "stage": stage,
            "code": code_version(module),
            "params": params,
            "upstream": {name: (ref.content_hash if ref is not None else None) for name, ref in sorted(upstream.items())},
            "libraries": library_versions(),
        }
    )


def split_inputs(inputs: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, ArtifactRef | None]]:
    """Task inputs -> (store root, params, upstream refs). Tasks take ``store``, ``params`` and refs."""
    upstream = {k: v for k, v in inputs.items() if isinstance(v, ArtifactRef) or (v is None and k not in ("store", "params"))}
    return str(inputs["store"]), dict(inputs.get("params") or {}), upstream


class StageCachePolicy(CachePolicy):
    """Prefect cache policy computing :func:`stage_key`; evicts records whose artifact is gone."""

    def __init__(self, stage: str, module: str) -> None:
        self.stage = stage
        self.module = module

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any) -> str:
        root, params, upstream = split_inputs(inputs)
        key = stage_key(self.stage, self.module, params, upstream)
        store = Store(root)
        if store.valid_ref(self.stage, key) is None and isinstance(self.key_storage, Path):
            # The Prefect record would hand back a ref to a missing/corrupt artifact: drop it.
            (self.key_storage / key).unlink(missing_ok=True)
        return key


def cached(task: Any, stage: str, store: Store, refresh: bool = False) -> Any:
    """``task`` configured for the pipeline: :class:`StageCachePolicy` with its key records and the
    persisted results under the store, ``refresh`` = ignore (and overwrite) cached results."""
    policy = StageCachePolicy(stage, task.fn.__module__).configure(key_storage=store.prefect_keys)
    return task.with_options(
        cache_policy=policy, persist_result=True, result_storage=store.prefect_results, refresh_cache=refresh
    )
