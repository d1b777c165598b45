"""mdp_core.release.protection: lower bounds of the metric, the mDP graph's stretch, the realised guarantee in
the metric, and the graph stage's ``protection`` record."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from mdp_core.errors import InputError
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.datasets.grid import grid
from mdp_core.problem.graph import path_distances
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import euclidean, haversine_km
from mdp_core.release.protection import (
    Protection,
    graph_protection,
    lower_bound_kind,
    metric_epsilon,
    metric_lower_bounds,
    sparsified_edges,
)
from mdp_core.solvers.lp import solve_lp
from mdp_core.solvers.verify import certify, verify


def _points_instance(pts: np.ndarray, eta: float, eps: float = 2.0, k: int | None = None) -> Instance:
    n = pts.shape[0]
    out = np.arange(n) if k is None else np.linspace(0, n - 1, k).astype(np.int64)
    return from_points(pts, "euclidean", eta, eps, euclidean(pts, pts[out]), output_record_ids=out)


def test_grid_with_four_neighbour_edges_has_stretch_sqrt2():
    """Unit cells, eta = 1: edges join the 4 neighbours only (a diagonal is sqrt 2 > 1). Every edge has
    length 1 and a path moves one unit along one axis per edge, so D_G(i, j) = |a| + |b| (Manhattan),
    for offsets (a, b), while d = sqrt(a^2 + b^2). By Cauchy-Schwarz (|a| + |b|)^2 <= 2 (a^2 + b^2),
    equality iff |a| = |b|: the stretch is exactly sqrt 2, attained by a diagonal pair."""
    inst = grid(rows=5, cols=6, cell_km=1.0, eta=1.0, n_outputs=6, n_destinations=3)
    assert inst.n_edges == 5 * 5 + 4 * 6  # horizontal + vertical neighbours, no diagonals
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.stretch == pytest.approx(math.sqrt(2), rel=1e-12)
    i, j, dg, d = p.worst_pair
    rc = inst.records[["row", "col"]].to_numpy()
    a, b = rc[j] - rc[i]
    assert abs(a) == abs(b) != 0 and dg == pytest.approx(2 * abs(a)) and d == pytest.approx(math.sqrt(2) * abs(a))
    assert p.connected and p.n_components == 1 and p.records_outside_largest == 0 and p.exact


def test_random_points_paths_are_never_shorter_than_the_metric():
    rng = np.random.default_rng(7)
    pts = rng.uniform(0, 5, size=(120, 2))
    inst = _points_instance(pts, eta=1.2, k=10)
    dl = metric_lower_bounds(inst, np.arange(inst.n_records))
    assert np.allclose(dl, euclidean(pts, pts), rtol=0, atol=0)  # exact from coordinates
    dg = path_distances(inst.n_records, inst.edges, inst.distances)
    finite = np.isfinite(dg) & ~np.eye(inst.n_records, dtype=bool)
    assert np.all(dg[finite] >= dl[finite] * (1 - 1e-12))
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.stretch >= 1.0
    assert p.stretch == pytest.approx(np.max(dg[finite] / dl[finite]), rel=1e-12)
    # the sparsified subgraph (forced by a tiny work budget) only gives an upper bound
    sub = graph_protection(inst, inst.edges, inst.distances, max_work=1.0)
    assert not sub.exact and sub.stretch >= p.stretch * (1 - 1e-12) and sub.n_components == p.n_components


def test_sparsified_subgraph_keeps_the_components():
    rng = np.random.default_rng(3)
    pts = np.r_[rng.uniform(0, 3, (60, 2)), rng.uniform(10, 13, (40, 2))]
    inst = _points_instance(pts, eta=1.5, k=5)
    e, d = sparsified_edges(inst.n_records, inst.edges, inst.distances, 1)
    key = set(map(tuple, inst.edges.tolist()))
    assert set(map(tuple, e.tolist())) <= key and e.shape[0] < inst.n_edges
    p = graph_protection(inst, inst.edges, inst.distances)
    q = graph_protection(inst, e, d)
    assert q.n_components == p.n_components and np.array_equal(q.labels, p.labels)


def test_disconnected_instance_reports_who_is_unprotected():
    rng = np.random.default_rng(1)
    pts = np.r_[rng.uniform(0, 2, (30, 2)), rng.uniform(50, 51, (12, 2)), [[100.0, 100.0]]]
    inst = _points_instance(pts, eta=1.5, k=6)
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.n_components == 3 and not p.connected
    assert p.component_sizes == (30, 12, 1) and p.records_outside_largest == 13
    assert p.labels.shape == (43,) and len(set(p.labels[30:42].tolist())) == 1 and p.labels[0] != p.labels[30]
    i, j, _, _ = p.worst_pair
    assert p.labels[i] == p.labels[j]  # the stretch is within components
    d = p.as_dict()
    json.dumps(d, allow_nan=False)
    assert "labels" not in d and d["connected"] is False and d["records_outside_largest"] == 13
    assert all(type(v) in (int, float, bool, str, list, dict, type(None)) for v in d.values())


def test_lone_records_have_stretch_one():
    inst = _points_instance(np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]]), eta=1.0)
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.stretch == 1.0 and p.worst_pair is None and p.n_components == 3


def test_metric_epsilon_of_exact_lp_mechanism_is_within_eps_times_stretch():
    rng = np.random.default_rng(5)
    pts = rng.uniform(0, 4, size=(40, 2))
    inst = _points_instance(pts, eta=1.3, eps=1.5, k=8)
    z, cert, _ = certify(inst, solve_lp(inst).z)
    assert cert.passed
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.connected and p.stretch > 1.0
    me = metric_epsilon(inst, z)
    assert me <= inst.epsilon * p.stretch * (1 + 1e-6)
    # on the edges alone the realised eps is the certificate's; the metric figure covers them too
    assert me >= cert.max_realised_epsilon * (1 - 1e-9)
    assert metric_epsilon(inst, z, rows=[0, 1]) <= me


def test_metric_epsilon_is_infinite_for_a_deterministic_mechanism_on_a_disconnected_graph():
    pts = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0], [5.0, 5.0]])
    inst = _points_instance(pts, eta=1.0)
    z = np.eye(4)  # each record reported as itself: no edge, so the certificate holds vacuously
    assert inst.n_edges == 0 and verify(inst, z).passed
    assert metric_epsilon(inst, z) == math.inf
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.n_components == 4 and p.records_outside_largest == 3
    assert metric_epsilon(inst, np.full((4, 4), 0.25)) == 0.0  # identical rows: nothing to tell apart


def test_haversine_lower_bounds_are_exact():
    ll = np.array([[41.9, 12.5], [41.91, 12.5], [41.9, 12.52], [41.95, 12.45]])
    inst = from_points(ll, "haversine", 2.0, 10.0, haversine_km(ll, ll), output_record_ids=np.arange(4))
    assert lower_bound_kind(inst) == "exact"
    assert np.array_equal(metric_lower_bounds(inst, [1, 3]), haversine_km(ll[[1, 3]], ll))


def _table_metric(with_latlon: bool) -> Instance:
    """A path 0 - 1 - 2 in a table-only ("graph") metric, eta = 1."""
    recs = pd.DataFrame({"lat": [0.0, 0.0, 0.0], "lon": [0.0, 0.005, 0.01]}) if with_latlon else None
    return Instance(
        prior=np.full(3, 1 / 3),
        costs=np.ones((3, 2)),
        edges=np.array([[0, 1], [1, 2]]),
        distances=np.array([0.9, 0.8]),
        epsilon=1.0,
        eta=1.0,
        metric="graph",
        records=recs,
    )


def test_table_metric_without_coordinates_bounds_only_what_is_stored():
    inst = _table_metric(False)
    assert lower_bound_kind(inst) == "stored"
    dl = metric_lower_bounds(inst, [0])
    assert dl.tolist() == [[0.0, 0.9, 0.0]]  # (0, 2) is not stored: nothing provable
    p = graph_protection(inst, inst.edges, inst.distances)
    assert p.stretch == math.inf and p.worst_pair[:2] == (0, 2)
    assert p.as_dict()["stretch"] == "inf" and float(p.as_dict()["stretch"]) == math.inf
    json.dumps(p.as_dict(), allow_nan=False)
    # asserting the edge table holds every pair within eta: unstored pairs are > eta
    q = graph_protection(inst, inst.edges, inst.distances, assume_complete=True)
    assert q.stretch == pytest.approx(1.7 / 1.0) and q.lower_bound == "stored+complete_within_eta"


def test_table_metric_in_km_with_lat_lon_uses_the_great_circle():
    inst = _table_metric(True)
    assert lower_bound_kind(inst) == "stored+great_circle"
    gc = haversine_km(np.array([[0.0, 0.0]]), np.array([[0.0, 0.01]]))[0, 0]
    dl = metric_lower_bounds(inst, [0])
    assert dl[0, 2] == pytest.approx(gc) and dl[0, 1] == 0.9  # stored beats the (shorter) great circle
    assert graph_protection(inst, inst.edges, inst.distances).stretch == pytest.approx(1.7 / gc)


def test_bad_input_is_an_input_error():
    inst = _table_metric(False)
    with pytest.raises(InputError, match="out of range"):
        metric_lower_bounds(inst, [3])
    with pytest.raises(InputError, match="shape"):
        metric_epsilon(inst, np.ones((2, 2)))
    with pytest.raises(InputError, match="out of range"):
        graph_protection(inst, np.array([[0, 5]]), np.array([1.0]))


def test_protection_is_frozen():
    p = graph_protection(_table_metric(False), np.zeros((0, 2)), np.zeros(0))
    assert isinstance(p, Protection) and p.n_components == 3
    with pytest.raises(AttributeError):
        p.stretch = 2.0  # type: ignore[misc]


def test_graph_stage_records_protection(tmp_path):
    from artifacts.store import Store
    from flows.config import parse_config
    from flows.release import stage_params
    from tasks import graph, ingest

    # by default every pair is certified in the metric (stretch 1); opted out, the graph's own stretch: sqrt(2)
    for solve, stretch in (({}, 1.0), ({"all_pairs": False}, math.sqrt(2))):
        cfg = parse_config(
            {
                "store": str(tmp_path),
                "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 8, "cell_km": 1.0}},
                "privacy": {"epsilon": 3.0, "eta": 1.0},
                "solve": solve,
                "release": {"simulate": True, "n_individuals": 10},
            }
        )
        p = stage_params(cfg)
        ref = graph.graph.fn(str(tmp_path), p["graph"], ingest.ingest.fn(str(tmp_path), p["ingest"]))
        stats = json.loads(Store(tmp_path).path(ref, "graph.json").read_text())
        prot = stats["protection"]
        assert prot["stretch"] == pytest.approx(stretch) and prot["connected"] is True
        assert prot["component_sizes"] == [20] and stats["n_components"] == 1 and stats["largest_component"] == 20
        assert ref.meta["protection"] == prot and ref.meta["pairs"] == ("graph" if solve else "all")
