"""Facts about this package read from its source with :mod:`ast`, without importing the module.

The dataset loaders and the solve methods import numpy, pandas, scipy and HiGHS (0.5-1 s). The config,
the command line and a fully cached release only need their *declarations* -- a loader's parameters and
defaults, the fields of a method's options dataclass -- which are plain in the source:

* :func:`signature` -- (name, annotation text, default) of a function's parameters (literal defaults);
* :func:`annotation` -- the annotation text of one parameter;
* :func:`dataclass_fields` -- the field names of a dataclass, its bases' first (followed through
  ``from module import Name`` within the package).

Tests check each against ``inspect`` / ``dataclasses`` on the imported objects (tests/test_config.py).
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]  # the folder holding mdp_core/
REQUIRED = inspect.Parameter.empty  # the default of a parameter that has none


@functools.cache
def tree(module: str) -> ast.Module:
    """The parsed source of project module ``module`` (``mdp_core.datasets.grid``)."""
    base = _ROOT.joinpath(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _function(module: str, name: str) -> ast.FunctionDef:
    node = next((n for n in tree(module).body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise LookupError(f"{module}: no function {name}()")
    return node


def signature(module: str, name: str) -> tuple[tuple[str, str | None, Any], ...]:
    """(parameter, annotation text or None, default or :data:`REQUIRED`) of ``module.name``, in order.
    Defaults must be literals (numbers, strings, None, tuples, ...): anything else is an error."""
    a = _function(module, name).args
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = list(zip(positional, defaults, strict=True)) + list(zip(a.kwonlyargs, a.kw_defaults, strict=True))
    out = []
    for arg, default in pairs:
        try:
            value = REQUIRED if default is None else ast.literal_eval(default)
        except ValueError:
            raise LookupError(
                f"{module}.{name}({arg.arg}=...): not a literal default (read without importing)"
            ) from None
        out.append((arg.arg, None if arg.annotation is None else ast.unparse(arg.annotation), value))
    return tuple(out)


def annotation(module: str, function: str, parameter: str) -> str | None:
    """The annotation text of ``parameter`` of ``module.function`` (None: no such parameter / annotation)."""
    return next((a for n, a, _ in signature(module, function) if n == parameter), None)


def dataclass_fields(module: str, name: str) -> tuple[str, ...]:
    """The field names of dataclass ``name`` defined in (or imported by name into) ``module``: its bases'
    fields first, then its own annotated class attributes (``ClassVar`` ones excluded), like
    ``dataclasses.fields``. A base or a class outside the package is an error."""
    body = tree(module).body
    cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:  # imported: from mdp_core.x import Name
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mdp_core"):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return dataclass_fields(node.module, alias.name)
        raise LookupError(f"{module}: no class {name}")
    fields: list[str] = []
    for base in cls.bases:
        if not isinstance(base, ast.Name):
            raise LookupError(f"{module}.{name}: base {ast.unparse(base)} is not a plain name")
        fields += [f for f in dataclass_fields(module, base.id) if f not in fields]
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" not in ast.unparse(stmt.annotation) and stmt.target.id not in fields:
                fields.append(stmt.target.id)
    return tuple(fields)
