"""Stage cache keys that really work across runs and processes.

A stage's cache key is sha256 over
  * the stage name and the stage's **code version** (:func:`stage_code_version`),
  * the stage's own parameters (JSON, sorted keys),
  * the **content hashes** of the upstream artifacts it reads (ArtifactRef.content_hash: the sha256 of
    every file, not its path or run),
  * the versions of the libraries that change numbers or bytes (numpy, scipy, highspy, pyarrow, pandas).

Code version: exactly the code the stage runs, and every declaration it reads (issue 42).

1. The stage's task module and every project module (``mdp_core``, ``tasks``, ``artifacts``) it imports,
   transitively, found by reading ``import`` statements with :mod:`ast` (never by importing them): the
   sha256 of each module's **code**, ``ast.dump`` of its statements without line numbers and docstrings, so
   whitespace, comments and docstrings change no key. Editing a helper deep inside ``mdp_core`` that a stage
   uses invalidates that stage (Prefect's own TASK_SOURCE policy hashes only the task function's text);
   editing a module the stage does not import does not.
2. The **declaring modules** of the :data:`REGISTRIES` -- ``mdp_core.declarations.methods`` (``REGISTRY``: each
   :class:`~mdp_core.declarations.methods.Method`'s ``"module:function"`` and options) and
   ``mdp_core.declarations.dataset_kinds`` (``DECLARED``: each :class:`~mdp_core.declarations.dataset_kinds.Kind`'s loader, as
   in ``LOADER_PATHS``, and parameters) -- are not hashed whole. What is hashed of them: their **shared part**
   (the code of every statement but the registry's and the options classes only its entries use:
   ``Method``, ``GapOptions``, ``resolve``, ``PARTITIONERS``, ...), the **declaration of each entry the stage
   uses** (its fields; its options class and that class's bases: their declared fields -- types, defaults,
   help, bounds -- and the code of those declared in the declaring module), and the code of any entry's
   options class a module imports by name (``lp.py`` imports ``LpOptions``). A new entry with its own options
   class therefore changes no other entry's keys (tests/test_cache_checklist.py edits the source to show it).
3. The entries a stage **runs**, through the registry's dispatcher (``mdp_core.solvers.solve`` imports a
   method's module from its ``"module:function"``, ``mdp_core.problem.datasets.registry`` a kind's loader):
   that module and its options class's module, and everything they import (their own package's modules too:
   a loader may live outside ``mdp_core``), hashed like (1). The entries are read from the registries
   themselves, never from string literals in the source (``f"{_LOADERS}.points:points"`` is a kind's loader
   too).

Which entries a stage uses: those its parameters name (:attr:`Registry.named_by`: ingest's ``kind``,
solve's and evaluate_point's ``method``, evaluate's ``method`` and ``baselines``); every entry when one of
them ``delegates`` (``auto`` may run any method), when the stage names none, or when a module it runs reads
the registry as a whole -- any read of a registry view (a name whose value depends on the registry:
``REGISTRY``, ``BASELINES``, ``RECORD_KEYS``, ``public_record_columns``, ...) except the lookups by the
named entry listed in :attr:`Registry.entry_scoped` (``METHODS[method]`` in ``mdp_core.solvers.solve``, ...).
So a new or edited method or kind changes only the keys of the releases that use it -- and of the stages that
read every declaration (prior, measure: ``mdp_core.declarations.contract``'s allow-lists,
``mdp_core.problem.microdata``'s record keys) -- while any code a stage runs stays in its key. (Module
granularity stays: ``mdp_core.problem.datasets`` imports every built-in loader, so a built-in kind's ingest
key holds all of them; a loader outside it is in its own kind's key only.)
Rule for new code: a module that looks an entry up by a name other than the stage's own (or iterates a
registry) must not be listed in ``entry_scoped``; a stage naming entries by a new parameter needs it in
``named_by``; a loader or method module must not change other code when it is imported (the dispatcher of
kinds imports every loader, and only the used one is in the key). tests/test_cache_declarations.py shows which
keys move.

:func:`code_modules` / :func:`code_version` are the conservative form (every entry of every registry the
module reaches; declaring modules hashed whole): the reproduce flow (the manifest's ``code_versions`` are each stage's own).

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
import dataclasses
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.serializers import Serializer
from pydantic import Field

from artifacts.store import ArtifactRef, Store, sha256_json

PROJECT_PACKAGES = ("mdp_core", "tasks", "artifacts")
NUMERIC_LIBRARIES = ("numpy", "scipy", "highspy", "pyarrow", "pandas")


@dataclass(frozen=True)
class Registry:
    """A table of declarations whose entries name the code they run as ``"module:function"`` (module docstring).

    * ``module``, ``table``: the declaring module and its ``{name: entry}`` dict (an entry is a dataclass);
    * ``code``, ``options``: the entry's fields holding its ``"module:function"`` and its options class;
    * ``dispatcher``: the module that imports an entry's code from ``code``: a stage runs entries only through it;
    * ``named_by``: stage -> the parameters naming the entries it uses (a name or a list of names);
    * ``entry_scoped``: module -> the registry views it reads only at the entries the stage names (a lookup by
      that name, never an iteration, never another name). Every other read of a view uses every entry.
    """

    module: str
    table: str
    code: str
    options: str
    dispatcher: str
    named_by: Mapping[str, tuple[str, ...]]
    entry_scoped: Mapping[str, frozenset[str]]


METHOD_REGISTRY = Registry(
    "mdp_core.declarations.methods",
    "REGISTRY",
    code="function",
    options="options",
    dispatcher="mdp_core.solvers.solve",
    named_by={"solve": ("method",), "evaluate_point": ("method",), "evaluate": ("method", "baselines")},
    entry_scoped={
        "mdp_core.solvers.solve": frozenset({"REGISTRY", "BASELINES"}),  # METHODS[method], method in BASELINES
        "mdp_core.release.report_plots": frozenset({"REGISTRY"}),  # BOUND_PLOTS.get(the method that ran)
        # of the released method, a baseline, the one auto ran; REGISTRY[m].all_pairs of each point's method
        "tasks.evaluate": frozenset({"needs_partition", "REGISTRY"}),
    },
)
KIND_REGISTRY = Registry(
    "mdp_core.declarations.dataset_kinds",
    "DECLARED",
    code="loader",
    options="params",
    dispatcher="mdp_core.problem.datasets.registry",
    named_by={"ingest": ("kind",)},
    entry_scoped={  # load(kind): validate(kind, ...), FILE_PARAMETERS[kind], LOADERS[kind] (built from DECLARED)
        "mdp_core.problem.datasets.registry": frozenset(
            {"DECLARED", "FILE_PARAMETERS", "input_files", "parameters", "validate"}
        ),
        "tasks.ingest": frozenset({"with_release_defaults"}),  # with_release_defaults(kind, ...): the kind's own
    },
)
REGISTRIES: tuple[Registry, ...] = (METHOD_REGISTRY, KIND_REGISTRY)
_DECLARING = frozenset(r.module for r in REGISTRIES)
_ROOT = Path(__file__).resolve().parents[1]  # the directory holding mdp_core/, tasks/, artifacts/


@functools.cache
def _module_file(name: str) -> Path | None:
    """Source file of module ``name``, or None if not a module (``pkg.attr``), found without importing anything: a
    project module under the project root, another (a registered entry's own package) along ``sys.path``.
    Memoised per process (:func:`forget_code_versions`): every stage's closure asks for the same names."""
    top, _, rest = name.partition(".")
    where = _ROOT / top if top in PROJECT_PACKAGES else _top_level(top)
    if where is None or where.suffix == ".py":  # a top-level module has no submodules
        return where if where is not None and not rest else None
    base = where.joinpath(*rest.split(".")) if rest else where
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _top_level(top: str) -> Path | None:
    """The directory of top-level package ``top`` (or the file of module ``top``) that ``import`` would find along
    ``sys.path``; None when there is none. Memoised per process (:func:`forget_code_versions`)."""
    spec = importlib.machinery.PathFinder.find_spec(top)
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package (or a namespace package: no __init__.py)
        return Path(spec.origin).parent if spec.origin else Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None


@dataclass(frozen=True)
class _Source:
    """A module's source as the code version reads it: its top-level statements, docstrings dropped, each as
    ``ast.dump`` (no line numbers: whitespace and comments are not code), and what it imports and reads."""

    statements: tuple[tuple[str, frozenset[str], frozenset[str]], ...]  # (dump, names bound, names loaded)
    imports: frozenset[str]  # every module the source imports ("from m import x" gives m and m.x)
    reads: Mapping[str, frozenset[str]]  # declaring module -> the names read from it ("*": the module as a whole)

    @property
    def digest(self) -> bytes:
        """sha256 of the whole module's normalised code."""
        return hashlib.sha256("\n".join(d for d, _, _ in self.statements).encode()).digest()


# One parse at a time: CPython 3.11.7's AST constructor keeps its recursion depth in interpreter-wide state, so
# two threads in ast.parse at once (stages compute their keys in parallel) can fail with "AST constructor
# recursion depth mismatch" (cpython gh-106905, tests/test_cache.py). Each file is read once per process
# (:func:`forget_code_versions` reads them again) and each content parsed once.
_LOCK = threading.RLock()
_sources: dict[tuple[str, Path], _Source] = {}  # what this process read (forgotten by forget_code_versions)
_parses: dict[tuple[str, Path, bytes], _Source] = {}  # (module, file, sha256 of its bytes): kept


def _source(name: str, path: Path) -> _Source:
    """Module ``name`` read from ``path`` (:class:`_Source`), once per process (:func:`forget_code_versions`)."""
    with _LOCK:
        if (name, path) not in _sources:
            data = path.read_bytes()
            content = (name, path, hashlib.sha256(data).digest())
            if content not in _parses:
                tree = ast.parse(data, str(path))
                _drop_docstrings(tree)
                statements = tuple((ast.dump(s), frozenset(_defines(s)), frozenset(_loads(s))) for s in tree.body)
                _parses[content] = _Source(statements, *_parse_imports(name, path, tree))
            _sources[(name, path)] = _parses[content]
        return _sources[(name, path)]


def _drop_docstrings(tree: ast.AST) -> None:
    """Remove the docstring of the module and of every class and function in ``tree`` (in place)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:] or [ast.Pass()]


def _parse_imports(name: str, path: Path, tree: ast.Module) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Modules imported by module ``name`` (absolute and relative imports, anywhere in the module), and the
    names it reads from each declaring module (:func:`_declaration_reads`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    bound: list[tuple[str, str, str | None]] = []  # (module, name imported from it or "", the local name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
            bound += [(a.name, "", a.asname) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
            bound += [(base, a.name, a.asname or a.name) for a in node.names]
    return frozenset(found), _declaration_reads(tree, bound)


def _declaration_reads(tree: ast.AST, bound: list[tuple[str, str, str | None]]) -> dict[str, frozenset[str]]:
    """Declaring module -> the names a module reads from it: ``from D import x`` reads x; ``from pkg import D``
    / ``import D as d`` reads each ``d.x``, and "*" (everything) where ``d`` itself is used or ``import D``."""
    reads: dict[str, set[str]] = {}
    aliases: dict[str, str] = {}  # local name -> declaring module
    for module, attr, local in bound:
        if attr and module in _DECLARING:
            reads.setdefault(module, set()).add(attr)
        elif attr and f"{module}.{attr}" in _DECLARING and local:
            aliases[local] = f"{module}.{attr}"
        elif not attr and module in _DECLARING:
            if local:
                aliases[local] = module
            else:
                reads.setdefault(module, set()).add("*")
    attribute_bases: set[int] = set()
    for node in ast.walk(tree) if aliases else ():
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            reads.setdefault(aliases[node.value.id], set()).add(node.attr)
            attribute_bases.add(id(node.value))
    for node in ast.walk(tree) if aliases else ():
        if isinstance(node, ast.Name) and node.id in aliases and id(node) not in attribute_bases:
            reads.setdefault(aliases[node.id], set()).add("*")
    return {m: frozenset(n) for m, n in reads.items()}


def _closure(roots: tuple[str, ...]) -> dict[str, Path]:
    """``roots`` and every module they import, transitively, that is a project module or in a root's own
    top-level package: {name: source file}. Importing ``pkg.mod`` runs ``pkg/__init__.py``: parents are in."""
    packages = frozenset(PROJECT_PACKAGES) | {r.split(".")[0] for r in roots}
    seen: dict[str, Path] = {}
    for root in roots:
        seen |= _closure_of(root, packages)
    return seen


@functools.cache
def _closure_of(root: str, packages: frozenset[str]) -> dict[str, Path]:
    """:func:`_closure` of one root, memoised per process (:func:`forget_code_versions`); callers do not change
    the dict."""
    seen: dict[str, Path] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in packages:
            continue
        path = _module_file(name)
        if path is None:  # "pkg.attr" imports: not a module
            continue
        seen[name] = path
        parent = name.rpartition(".")[0]
        if parent and parent not in seen:
            todo.append(parent)
        todo.extend(_source(name, path).imports)
    return seen


# ----------------------------------------------------------------------------- declarations and the code run
def _defines(stmt: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def _loads(stmt: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _option_classes(reg: Registry, entry: Any) -> list[type]:
    """The entry's options class and its bases (``object`` aside)."""
    cls = getattr(entry, reg.options, None)
    return [c for c in cls.__mro__ if c is not object] if isinstance(cls, type) else []


@dataclass(frozen=True)
class _Declarations:
    """A declaring module read for the code version: its registry and what its source declares."""

    entries: Mapping[str, Any]  # the registry, in declaration order
    shared: bytes  # sha256 of its statements but the registry's and the classes cut out of it
    classes: Mapping[str, str]  # cut out: the options classes only entries use (name -> ast.dump)
    views: frozenset[str]  # the names whose value depends on the registry (REGISTRY, BASELINES, method, ...)


def _declarations(reg: Registry, path: Path) -> _Declarations:
    """The registry of ``reg`` and its declaring module's statements (:func:`_source`, as every hashed module)
    split: the shared part is every statement but the one binding the registry and the ``owned`` classes (the
    entries' options classes and their bases) that no other statement uses; those classes are cut out; the
    registry views are the names whose statements load the registry, transitively."""
    entries = dict(getattr(importlib.import_module(reg.module), reg.table))
    owned = {c.__name__ for e in entries.values() for c in _option_classes(reg, e) if c.__module__ == reg.module}
    facts = [f for f in _source(reg.module, path).statements if reg.table not in f[1]]
    classes = {next(iter(names)): dump for dump, names, _ in facts if dump.startswith("ClassDef(")}
    cut = owned & set(classes)
    while used := cut & set().union(*(loads for _, names, loads in facts if not names & cut)):
        cut -= used  # a class the shared part uses (GapOptions: Method checks it) stays in the shared part
    shared = hashlib.sha256("\n".join(d for d, names, _ in facts if not names & cut).encode()).digest()
    views = {reg.table}
    while grown := [
        names for _, names, loads in _source(reg.module, path).statements if names - views and loads & views
    ]:
        views |= set().union(*grown)
    return _Declarations(entries, shared, {c: classes[c] for c in sorted(cut)}, frozenset(views))


def _plain(value: Any) -> Any:
    """``value`` as JSON that is the same in every process (a class or function by its module and name; no
    object addresses)."""
    if isinstance(value, type) or callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', type(value).__name__)}"
    if isinstance(value, set | frozenset):
        return sorted(_plain(v) for v in value)
    if value is dataclasses.MISSING:
        return "<required>"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _fields(obj: Any) -> Any:
    """A dataclass (class or instance) as its fields: name, declared type, default (or factory), metadata."""
    if not dataclasses.is_dataclass(obj):
        return _plain(obj)
    out = {}
    for f in dataclasses.fields(obj):
        default = f.default_factory if f.default is dataclasses.MISSING else f.default
        value = default if isinstance(obj, type) else getattr(obj, f.name)
        out[f.name] = [_plain(f.type), _plain(value), {k: _plain(v) for k, v in sorted(f.metadata.items())}]
    return out


def _describe(reg: Registry, decl: _Declarations, name: str) -> Any:
    """What a stage reads of one entry: its fields and, for its options class and that class's bases, their
    declared fields (types, defaults, help, bounds) and, for those cut out of the shared part, their source."""
    entry = decl.entries.get(name)
    if entry is None:
        return None  # an unknown name: the stage fails, nothing is stored under its key
    return {
        "fields": _fields(entry),
        "options": [[_plain(c), _fields(c), decl.classes.get(c.__name__)] for c in _option_classes(reg, entry)],
    }


def _code_root(reg: Registry, entry: Any) -> str | None:
    """The module of an entry's ``"module:function"`` (or function)."""
    code = getattr(entry, reg.code, None)
    return code.partition(":")[0] if isinstance(code, str) else getattr(code, "__module__", None)


@dataclass(frozen=True)
class _Use:
    """What a stage uses of one registry: the entries whose declarations it reads and those it runs."""

    reg: Registry
    decl: _Declarations
    declared: list[str]
    run: list[str]
    classes: list[str]  # cut-out options classes a module imports by name (lp.py: LpOptions)


def _use(reg: Registry, decl: _Declarations, mods: dict[str, Path], names: tuple[str, ...] | None) -> _Use:
    """The entries of ``reg`` that the modules ``mods`` of a stage naming ``names`` (None: none, or
    conservative) read and run (module docstring)."""
    every = list(decl.entries)
    if names is not None and any(getattr(decl.entries.get(n), "delegates", False) for n in names):
        names = None  # a delegating entry (auto) may run any other
    reads = {(m, n) for m in mods if m != reg.module for n in _source(m, mods[m]).reads.get(reg.module, ())}
    views = {(m, n) for m, n in reads if n == "*" or n in decl.views}
    scoped = every if names is None else [n for n in every if n in names] + sorted(set(names) - set(every))
    whole = names is None or any(n not in reg.entry_scoped.get(m, ()) for m, n in views)
    declared = (every if whole else scoped) if views else []
    run = scoped if reg.dispatcher in mods else []
    classes = sorted({n for _, n in reads if n in decl.classes})
    return _Use(reg, decl, declared, run, classes)


def _plan(module: str, named: tuple[tuple[str, ...] | None, ...]) -> tuple[dict[str, Path], list[_Use]]:
    """The modules a stage of task module ``module`` runs and what it uses of each registry it reaches, with the
    entries ``named`` per registry (:func:`_named`). Grows until the entries' own modules add nothing."""
    roots = {module}
    while True:
        mods = _closure(tuple(sorted(roots)))
        uses = [
            _use(reg, _declarations(reg, mods[reg.module]), mods, names)
            for reg, names in zip(REGISTRIES, named, strict=True)
            if reg.module in mods
        ]
        more = set(roots)
        for u in uses:
            more |= {r for n in u.run if (r := _code_root(u.reg, u.decl.entries.get(n)))}
            more |= {c.__module__ for n in u.run for c in _option_classes(u.reg, u.decl.entries.get(n))}
        more = {m for m in more if m != "builtins"}
        if more <= roots:
            return mods, uses
        roots |= more


def _named(stage: str, params: Mapping[str, Any]) -> tuple[tuple[str, ...] | None, ...]:
    """Per registry, the entries the stage's ``params`` name (:attr:`Registry.named_by`), or None: it names none."""
    out: list[tuple[str, ...] | None] = []
    for reg in REGISTRIES:
        found: set[str] = set()
        for key in reg.named_by.get(stage, ()):
            value = params.get(key)
            found.update(
                [value] if isinstance(value, str) else map(str, value if isinstance(value, list | tuple) else ())
            )
        out.append(tuple(sorted(found)) if found else None)
    return tuple(out)


@functools.cache
def _code_version(module: str, named: tuple[tuple[str, ...] | None, ...]) -> str:
    mods, uses = _plan(module, named)
    shared = {u.reg.module: u.decl.shared for u in uses}
    h = hashlib.sha256()
    for name, path in sorted(mods.items()):
        h.update(name.encode() + b"\0" + shared.get(name, _source(name, path).digest) + b"\0")
    for u in uses:
        used = {
            "entries": [[n, _describe(u.reg, u.decl, n)] for n in u.declared],  # declaration order (RECORD_KEYS)
            "classes": {c: u.decl.classes[c] for c in u.classes},
        }
        h.update(u.reg.module.encode() + b"\0" + json.dumps(used, sort_keys=True).encode() + b"\0")
    return h.hexdigest()


def stage_code_version(stage: str, module: str, params: Mapping[str, Any]) -> str:
    """The code version of one execution of ``stage`` (task module ``module``) with ``params``: sha256 over the
    modules it runs and the declarations it reads, the entries it names only (module docstring). Computed once
    per process for each (module, entries named): :func:`forget_code_versions` after editing code in-process."""
    return _code_version(module, _named(stage, params))


def code_modules(module: str) -> dict[str, Path]:
    """``module`` and every module it may run, conservatively: every project module it imports, transitively,
    and, for each registry it reaches, every entry's module and what that imports: {name: source file}."""
    roots = {module}
    while True:
        seen = _closure(tuple(sorted(roots)))
        more = set(roots)
        for reg in REGISTRIES:
            if reg.module in seen:
                entries = getattr(importlib.import_module(reg.module), reg.table).values()
                more |= {r for e in entries if (r := _code_root(reg, e))}
                more |= {c.__module__ for e in entries for c in _option_classes(reg, e)} - {"builtins"}
        if more <= roots:
            return dict(seen)
        roots |= more


@functools.cache
def code_version(module: str) -> str:
    """sha256 over the code of :func:`code_modules` (name and :attr:`_Source.digest`, sorted by name): the
    conservative code version, independent of a stage's parameters (the reproduce flow)."""
    h = hashlib.sha256()
    for name, path in sorted(code_modules(module).items()):
        h.update(name.encode() + b"\0" + _source(name, path).digest + b"\0")
    return h.hexdigest()


def forget_code_versions(parses: bool = False) -> None:
    """Drop this process's memo of code versions: every file is read again (tests edit them); ``parses``: every
    source is parsed again too (by default one whose bytes were parsed before is not)."""
    _code_version.cache_clear()
    code_version.cache_clear()
    _closure_of.cache_clear()
    _top_level.cache_clear()
    _module_file.cache_clear()
    with _LOCK:
        _sources.clear()
        if parses:
            _parses.clear()


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
            "code": stage_code_version(stage, module, params),
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
