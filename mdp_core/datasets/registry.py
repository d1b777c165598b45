"""Dataset kinds by name, with strict parameter checking: ``load("grid", {"rows": 10})``.

Used by the CLI (``mdp-release export``) and the pipeline's ingest stage (the config's
``[dataset]`` section), so both accept exactly the same parameters.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from mdp_core.datasets.grid import grid
from mdp_core.datasets.synthetic import synthetic
from mdp_core.errors import InputError
from mdp_core.instance import Instance

LOADERS: dict[str, Callable[..., Instance]] = {"grid": grid, "synthetic": synthetic}


def parameters(kind: str) -> dict[str, Any]:
    """The loader's parameters and their defaults (``inspect.Parameter.empty`` = required)."""
    if kind not in LOADERS:
        raise InputError(f"unknown dataset kind {kind!r}; choose one of {sorted(LOADERS)}")
    return {n: p.default for n, p in inspect.signature(LOADERS[kind]).parameters.items()}


def load(kind: str, params: dict[str, Any] | None = None) -> Instance:
    """Build an instance of dataset ``kind``; unknown or missing parameters are an InputError."""
    params = dict(params or {})
    known = parameters(kind)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InputError(f"dataset {kind!r}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    missing = [n for n, d in known.items() if d is inspect.Parameter.empty and n not in params]
    if missing:
        raise InputError(f"dataset {kind!r}: missing required parameter(s) {missing}")
    try:
        return LOADERS[kind](**params)
    except TypeError as exc:  # wrong parameter types surface here
        raise InputError(f"dataset {kind!r}: {exc}") from None
