"""Partitioners (k-m-DV, k-m-rec, k-m-adj, BSC), roles and balance statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdp_core.errors import InputError
from mdp_core.problem import partition as P
from mdp_core.problem.datasets import grid, synthetic
from mdp_core.problem.graph import components
from mdp_core.problem.instance import Instance


@pytest.fixture(scope="module")
def g200() -> Instance:
    return grid(10, 20, 20, 10.0, 2.0, seed=0)


def _check(inst: Instance, part: P.Partition, m: int) -> None:
    n = inst.n_records
    assert part.labels.shape == (n,) and part.boundary.shape == (n,)
    assert 1 <= part.n_subsets <= m
    assert set(np.unique(part.labels)) == set(range(part.n_subsets))  # compact ids, none empty
    e = inst.edges
    cross = part.labels[e[:, 0]] != part.labels[e[:, 1]]
    # Definition 3.2, checked edge by edge: an internal record has no neighbour in another subset
    assert not np.any(cross & ~part.boundary[e[:, 0]])
    assert not np.any(cross & ~part.boundary[e[:, 1]])
    expect = np.zeros(n, bool)
    expect[e[cross].ravel()] = True
    assert np.array_equal(expect, part.boundary)


@pytest.mark.parametrize("method", P.PARTITIONERS)
def test_partitioners_on_grid(g200: Instance, method: str) -> None:
    part = P.partition(g200, method, 5, seed=0)
    _check(g200, part, 5)
    assert part.n_subsets == 5
    stats = P.balance_stats(g200, part)
    assert stats["n_subsets"] == 5 and stats["n_boundary"] == int(part.boundary.sum())
    assert 0 < stats["boundary_fraction"] < 1
    assert stats["internal_max"] >= stats["internal_mean"] > 0
    assert stats["mp_component_max"] >= stats["mp_component_mean"] >= 1


@pytest.mark.parametrize("method", P.PARTITIONERS)
def test_seeded_and_deterministic(g200: Instance, method: str) -> None:
    a = P.partition(g200, method, 6, seed=3)
    b = P.partition(g200, method, 6, seed=3)
    assert np.array_equal(a.labels, b.labels)


def test_grid_partitions_are_spatially_compact(g200: Instance) -> None:
    """On a 10 x 20 grid, M = 2 must cut across the long side: few cut edges, not a random split."""
    for method in P.PARTITIONERS:
        part = P.partition(g200, method, 2, seed=0)
        stats = P.balance_stats(g200, part)
        assert stats["cut_edges"] < 0.15 * g200.n_edges, (method, stats)
        sizes = np.bincount(part.labels)
        assert sizes.min() >= 0.2 * g200.n_records, (method, sizes)


def test_single_subset_has_no_boundary(g200: Instance) -> None:
    part = P.partition(g200, "kmdv", 1)
    assert part.n_subsets == 1 and not part.boundary.any()
    stats = P.balance_stats(g200, part)
    assert stats["n_boundary"] == 0 and stats["mp_components"] == 0
    assert stats["internal_max"] == g200.n_records


def test_balance_stats_hand_example() -> None:
    """Path 0-1-2-3-4-5 split {0,1,2} | {3,4,5}: boundary {2, 3}, one MP component of size 2."""
    inst = Instance(
        prior=np.full(6, 1 / 6),
        costs=np.ones((6, 2)),
        edges=np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]),
        distances=np.full(5, 1.0),
        epsilon=1.0,
        eta=1.0,
    )
    part = P.from_labels(inst, np.array([7, 7, 7, 9, 9, 9]))
    assert part.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert part.boundary.tolist() == [False, False, True, True, False, False]
    s = P.balance_stats(inst, part)
    assert (s["internal_mean"], s["internal_max"]) == (2.0, 2)
    assert (s["mp_components"], s["mp_component_mean"], s["mp_component_max"]) == (1, 2.0, 2)
    assert s["cut_edges"] == 1


def test_disconnected_graph_and_graph_metric() -> None:
    """Without coordinates k-m-DV uses path distances (inf between components made finite)."""
    inst = synthetic(80, 10, 3, 4.0, 10.0, 2.0, seed=1)  # sparse: many components
    count, _ = components(inst.n_records, inst.edges)
    assert count > 1
    bare = inst.replace(records=None, outputs=None, metric="graph")
    for method in ("kmdv", "kmadj", "bsc"):
        _check(bare, P.partition(bare, method, 4, seed=0), 4)
    with pytest.raises(InputError, match="coordinates"):
        P.partition(bare, "kmrec", 4)


def test_sketched_distance_vectors_match_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above DENSE_LIMIT k-m-DV runs on a JL sketch; its pairwise distances match the dense ones."""
    inst = grid(12, 12, 5, 10.0, 2.0, seed=0)
    rng = np.random.default_rng(0)
    dense = P.distance_vectors(inst, rng)
    monkeypatch.setattr(P, "DENSE_LIMIT", 10)
    monkeypatch.setattr(P, "JL_DIM", 512)
    sketch = P.distance_vectors(inst, np.random.default_rng(0))
    assert sketch.shape == (inst.n_records, 512)
    i, j = np.random.default_rng(1).integers(0, inst.n_records, size=(2, 300))
    keep = i != j
    dd = np.linalg.norm(dense[i] - dense[j], axis=1)[keep]
    ds = np.linalg.norm(sketch[i] - sketch[j], axis=1)[keep]
    assert np.median(np.abs(ds / dd - 1)) < 0.05
    _check(inst, P.partition(inst, "kmdv", 4, seed=0), 4)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"method": "metis"}, "partitioner"), ({"n_subsets": 0}, "n_subsets"), ({"n_subsets": 2.5}, "n_subsets")],
)
def test_bad_input(g200: Instance, kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        P.partition(g200, **kwargs)


def test_bad_labels(g200: Instance) -> None:
    with pytest.raises(InputError, match="shape"):
        P.from_labels(g200, np.zeros(3, dtype=int))
    with pytest.raises(InputError, match="integers"):
        P.from_labels(g200, np.zeros(g200.n_records))


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(0, 10_000), st.sampled_from(P.PARTITIONERS))
def test_roles_property(m: int, seed: int, method: str) -> None:
    inst = synthetic(40, 5, 2, 1.5, 10.0, 1.0, seed=seed % 7)
    _check(inst, P.partition(inst, method, m, seed=seed), m)
