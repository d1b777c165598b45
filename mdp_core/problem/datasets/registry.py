"""Dataset kinds by name, with strict parameter checking: ``load("grid", {"rows": 10})``.

Used by the CLI (``mdp-release export``) and the pipeline's ingest stage (the config's
``[dataset]`` section), so both accept exactly the same parameters. :func:`input_files` names the
files a dataset reads, so the pipeline can put their content hash into its cache key.

What needs no loader (the kinds, their declared parameters and defaults, the file parameters, the input
files) is in :mod:`mdp_core.declarations.dataset_kinds`, which imports no loader; this module re-exports it and imports
each declared kind's loader from its ``"module:function"`` path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from mdp_core.declarations.dataset_kinds import DECLARED, FILE_PARAMETERS, input_files, parameters, resolve, validate
from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance


def loader(path: str) -> Callable[..., Instance]:
    """The loader function named ``"module:function"`` (a :class:`mdp_core.declarations.dataset_kinds.Kind`'s ``loader``)."""
    module, _, name = path.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise TypeError(f"dataset loader {path!r}: {module} has no function {name!r}")
    return fn


# kind -> loader, imported from each declaration's "module:function" (no second list)
LOADERS: dict[str, Callable[..., Instance]] = {k.name: loader(k.loader) for k in DECLARED.values()}

__all__ = ["FILE_PARAMETERS", "LOADERS", "input_files", "load", "parameters"]


def load(kind: str, params: dict[str, Any] | None = None) -> Instance:
    """Build an instance of dataset ``kind``; unknown, missing or invalid parameters (their declarations in
    :mod:`mdp_core.declarations.dataset_kinds`) are an InputError."""
    params = dict(params or {})
    validate(kind, params)
    params = {n: resolve(n, v) if n in FILE_PARAMETERS[kind] else v for n, v in params.items()}
    try:
        return LOADERS[kind](**params)
    except TypeError as exc:  # wrong parameter types surface here
        raise InputError(f"dataset {kind!r}: {exc}") from None
