"""Synthetic Gaussian points (Qiu 2024 section 4.1 (4)): N points ~ N(0, sigma^2 I_dim), Euclidean
metric, cost c_ik = d(r_i, o_k), outputs a seeded subset of K records (all when K is None).

The loss is already the data's metric (the "distance" loss of the grid and road kinds, issue 40): no
``loss`` parameter."""

from __future__ import annotations

import numpy as np

from mdp_core.declarations.dataset_kinds import SyntheticParams
from mdp_core.errors import InputError
from mdp_core.problem.datasets.common import DEFAULT_OUTPUTS, choose_outputs, from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import euclidean


def synthetic(
    n_records: int = SyntheticParams.n_records,
    n_outputs: int | None = SyntheticParams.n_outputs,
    dim: int = SyntheticParams.dim,
    sigma: float = SyntheticParams.sigma,
    epsilon: float = SyntheticParams.epsilon,
    eta: float = SyntheticParams.eta,
    seed: int = SyntheticParams.seed,
) -> Instance:
    """Gaussian points; the paper uses 3-D N(0, 1) with eta = 2 and eps = 10 (its code: sigma = 4)."""
    if n_records < 1 or dim < 1:
        raise InputError(f"synthetic needs n_records >= 1 and dim >= 1, got {n_records}, {dim}")
    if not sigma > 0:
        raise InputError(f"sigma must be > 0, got {sigma}")
    rng = np.random.default_rng(seed)
    pts = rng.normal(0.0, sigma, size=(n_records, dim))
    if n_outputs is None:  # the default: DEFAULT_OUTPUTS (100) outputs, all records when fewer
        n_outputs = min(DEFAULT_OUTPUTS, n_records)
    outputs = choose_outputs(n_records, n_outputs, rng)
    return from_points(
        pts,
        "euclidean",
        eta,
        epsilon,
        euclidean(pts, pts[outputs]),
        output_record_ids=outputs,
        distance_unit="unit",
        provenance={
            "dataset": "synthetic",
            "generator": "mdp_core.problem.datasets.synthetic",
            "parameters": {"n_records": n_records, "n_outputs": n_outputs, "dim": dim, "sigma": sigma},
            "seed": seed,
        },
    )
