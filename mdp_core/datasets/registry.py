"""Dataset kinds by name, with strict parameter checking: ``load("grid", {"rows": 10})``.

Used by the CLI (``mdp-release export``) and the pipeline's ingest stage (the config's
``[dataset]`` section), so both accept exactly the same parameters. :func:`input_files` names the
files a dataset reads, so the pipeline can put their content hash into its cache key.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdp_core.datasets import bundled
from mdp_core.datasets.grid import grid
from mdp_core.datasets.points import points
from mdp_core.datasets.road import road
from mdp_core.datasets.synthetic import synthetic
from mdp_core.datasets.text import text
from mdp_core.errors import InputError
from mdp_core.instance import Instance

LOADERS: dict[str, Callable[..., Instance]] = {
    "grid": grid,
    "synthetic": synthetic,
    "road": road,
    "text": text,
    "points": points,
}

# loader parameters that name input files
FILE_PARAMETERS: dict[str, tuple[str, ...]] = {
    "grid": ("road_nodes", "road_edges", "road_osm", "road_pbf"),
    "synthetic": (),
    "road": ("nodes", "edges", "osm", "pbf"),
    "text": ("vectors", "corpus"),
    "points": ("path", "outputs", "costs"),
}


def parameters(kind: str) -> dict[str, Any]:
    """The loader's parameters and their defaults (``inspect.Parameter.empty`` = required)."""
    if kind not in LOADERS:
        raise InputError(f"unknown dataset kind {kind!r}; choose one of {sorted(LOADERS)}")
    return {n: p.default for n, p in inspect.signature(LOADERS[kind]).parameters.items()}


def _check(kind: str, params: dict[str, Any]) -> None:
    known = parameters(kind)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InputError(f"dataset {kind!r}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    missing = [n for n, d in known.items() if d is inspect.Parameter.empty and n not in params]
    if missing:
        raise InputError(f"dataset {kind!r}: missing required parameter(s) {missing}")


def load(kind: str, params: dict[str, Any] | None = None) -> Instance:
    """Build an instance of dataset ``kind``; unknown or missing parameters are an InputError."""
    params = dict(params or {})
    _check(kind, params)
    params = {n: bundled.resolve(n, v) if n in FILE_PARAMETERS[kind] else v for n, v in params.items()}
    try:
        return LOADERS[kind](**params)
    except TypeError as exc:  # wrong parameter types surface here
        raise InputError(f"dataset {kind!r}: {exc}") from None


def input_files(kind: str, params: dict[str, Any] | None = None) -> list[Path]:
    """The input files dataset ``kind`` reads with ``params`` (sorted, existing; [] for generated data).

    Includes files a loader finds by itself: the GloVe package data for ``vectors="glove-6b-50d"``.
    A named file that does not exist is an InputError.
    """
    params = dict(params or {})
    _check(kind, params)
    if kind == "text" and params.get("vectors") == "glove-6b-50d":
        from mdp_core.datasets.text import glove_files

        params.pop("vectors")
        found = list(glove_files())
    else:
        found = []
    names = FILE_PARAMETERS[kind]
    paths = [Path(str(bundled.resolve(n, params[n]))) for n in names if params.get(n) is not None]
    for p in paths:
        if not p.is_file():
            raise InputError(f"dataset {kind!r}: input file {p} does not exist")
    return sorted(set(paths) | set(found))
