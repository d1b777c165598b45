"""Dataset loaders. Each returns a validated :class:`~mdp_core.instance.Instance` whose
``provenance`` records the generator / source file hash, its parameters and the seed.

Built in (no download): :func:`grid` (the Qiu 2024 Rome grid map) and :func:`synthetic`
(Gaussian points).
"""

from mdp_core.datasets.common import from_points
from mdp_core.datasets.grid import grid
from mdp_core.datasets.synthetic import synthetic

__all__ = ["from_points", "grid", "synthetic"]
