"""Shared fixtures: small real instances (no mocks) and a helper to edit instance directories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mdp_core.datasets import grid, synthetic
from mdp_core.instance import Instance

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def path_instance(costs: np.ndarray, distances: list[float], epsilon: float, prior=None, eta: float | None = None) -> Instance:
    """Records 0..N-1 on a path (edges (i, i+1) with the given distances), costs (N, K)."""
    costs = np.asarray(costs, dtype=float)
    n = costs.shape[0]
    prior = np.full(n, 1.0 / n) if prior is None else np.asarray(prior, dtype=float)
    edges = np.column_stack([np.arange(n - 1), np.arange(1, n)])
    d = np.asarray(distances, dtype=float)
    return Instance(prior, costs, edges, d, epsilon, eta if eta is not None else float(d.max(initial=1.0)))


@pytest.fixture(scope="session")
def grid_small() -> Instance:
    """4 x 5 grid of 1 km cells, K = 6 outputs, eta = 2 km, eps = 10 / km (one component)."""
    return grid(4, 5, n_outputs=6)


@pytest.fixture(scope="session")
def synth_small() -> Instance:
    """12 Gaussian points in 3-D, K = 5, eta = 1.5: several components, some isolated records."""
    return synthetic(n_records=12, n_outputs=5, sigma=1.5, eta=1.5, epsilon=2.0, seed=3)


@pytest.fixture()
def instance_dir(tmp_path: Path, grid_small: Instance) -> Path:
    """A freshly written instance directory of ``grid_small``."""
    from mdp_core.io import write_instance

    out = tmp_path / "inst"
    write_instance(grid_small, out)
    return out
