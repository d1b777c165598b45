"""The import contract: mdp_core's layers, no cycles, one canonical path for every name.

Read from the source files (``ast``), so every import counts, including those inside functions:

- ``mdp_core`` layers, bottom to top: ``errors`` < ``declarations`` < ``runtime`` < ``problem`` < ``solvers`` <
  ``release``. A module imports from its own layer or below, never above (docs/architecture.md).
- ``mdp_core.declarations`` and ``mdp_core.errors`` import no numerical library (declarations stay free to read).
- ``mdp_core`` imports neither Prefect nor the project's ``tasks``, ``flows`` or ``artifacts``.
- The project's module graph (mdp_core, tasks, flows, artifacts) has no cycle.
- No re-exported names: ``from X import name`` takes ``name`` from the module that defines it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mdp_core", "tasks", "flows", "artifacts")
LAYERS = (
    "mdp_core.errors",
    "mdp_core.declarations",
    "mdp_core.runtime",
    "mdp_core.problem",
    "mdp_core.solvers",
    "mdp_core.release",
)
NUMERICAL = {"numpy", "scipy", "pandas", "pyarrow", "highspy", "opendp", "gensim", "osmnx", "matplotlib", "geopandas"}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "store" in path.relative_to(ROOT).parts[:2] and pkg == "artifacts":
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import statement of the file."""
    tree = _tree(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found += [(base, a.name, node.lineno) for a in node.names]
    return found


def _target(module: str, name: str | None) -> str:
    """The project module an import statement loads (``from pkg import mod`` loads ``pkg.mod``)."""
    if name and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    return module


def _layer(module: str) -> int | None:
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return None


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for module, imported, _ in _imports(name, path):
            target = _target(module, imported)
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def test_layers_import_only_downwards() -> None:
    bad = []
    for name, path in MODULES.items():
        own = _layer(name)
        if own is None:
            continue
        for module, imported, line in _imports(name, path):
            target = _target(module, imported)
            top = target.split(".")[0]
            if top in {"prefect", "tasks", "flows", "artifacts"}:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} (mdp_core is the pure library)")
            layer = _layer(target)
            if layer is not None and layer > own:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}, a higher layer than {LAYERS[own]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("layer", ["mdp_core.errors", "mdp_core.declarations"])
def test_declarations_import_no_numerical_library(layer: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for name, path in MODULES.items()
        if _layer(name) == LAYERS.index(layer)
        for module, _, line in _imports(name, path)
        if module.split(".")[0] in NUMERICAL
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    graph = _edges()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The parsed source of ``path`` (each file parsed once per session)."""
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def _defined(path: Path) -> set[str]:
    """Names a module defines itself: functions, classes, assignments (not imports)."""
    tree = _tree(path)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If | ast.Try):  # names defined under a guard
            names |= {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
            names |= {
                t.id for n in ast.walk(node) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
            }
    return names


def test_no_re_exported_names() -> None:
    """``from mdp_core.x import name`` (anywhere in the project or its tests) names the module that defines
    ``name``: one canonical import path for every name."""
    files = dict(MODULES)
    files |= {f"tests.{p.stem}": p for p in sorted((ROOT / "tests").glob("*.py"))}
    files |= {f"bench.{p.stem}": p for p in sorted((ROOT / "bench").glob("*.py"))}
    bad = []
    for name, path in files.items():
        for module, imported, line in _imports(name, path):
            if not module.startswith("mdp_core") or imported is None or module not in MODULES:
                continue
            if f"{module}.{imported}" in MODULES or imported == "*":
                continue
            if imported not in _defined(MODULES[module]):
                bad.append(f"{path.relative_to(ROOT)}:{line} takes {imported} from {module}, which does not define it")
    assert not bad, "\n".join(bad)


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines() -> None:
    """Every function (``def``, nested ones too) of mdp_core, tasks, flows, artifacts and bench spans at most
    80 lines, from its ``def`` (decorators excluded) to its last line."""
    bad = []
    for path in [*MODULES.values(), *sorted((ROOT / "bench").rglob("*.py"))]:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {lines} lines")
    assert not bad, "\n".join(bad)


CONFIG_TYPES = {"ReleaseFlowConfig", "ReleaseConfig", "PrivacyConfig", "RunConfig", "EvaluateConfig", "DatasetConfig"}


def test_below_flows_no_function_takes_the_release_config() -> None:
    """Issue 39: the config is resolved once in ``flows/`` (the privacy door's plan, the stages' parameters);
    below it (tasks, mdp_core, artifacts) no module imports ``flows`` and no function takes a config object."""
    found = []
    for name, path in MODULES.items():
        if name.split(".")[0] == "flows":
            continue
        found += [
            f"{name}:{line} imports {mod}" for mod, _, line in _imports(name, path) if mod.split(".")[0] == "flows"
        ]
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                for a in args:
                    text = ast.unparse(a.annotation) if a.annotation is not None else ""
                    if any(t in text for t in CONFIG_TYPES):
                        found.append(f"{name}:{node.lineno} {node.name}({a.arg}: {text})")
    assert not found, found
