"""Grid map (Qiu 2024; LR-Geo road-path costs on the shared Rome centre graph) and synthetic Gaussian points."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, registry, synthetic
from mdp_core.problem.datasets.road import road_graph
from mdp_core.problem.io import read_instance, write_instance

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ROME_NODES = DATA / "rome_center" / "nodes.csv"
ROME_EDGES = DATA / "rome_center" / "edges.csv"


def test_grid_defaults_are_the_paper_setting():
    g = grid()
    assert (g.n_records, g.n_outputs, g.eta, g.epsilon) == (500, 100, 2.0, 10.0)
    xy = g.records[["x0", "x1"]].to_numpy()
    # neighbours: every pair of cell centres within 2 km, exact distances
    want = {
        (a, b): float(np.hypot(*(xy[a] - xy[b])))
        for a, b in itertools.combinations(range(500), 2)
        if np.hypot(*(xy[a] - xy[b])) <= 2.0
    }
    assert g.n_edges == len(want)
    for (a, b), d in zip(map(tuple, g.edges), g.distances, strict=True):
        assert d == pytest.approx(want[(a, b)], rel=1e-12)
    assert g.provenance["parameters"]["anchor_sw"] == [41.66, 12.24]
    assert "cost_distance" not in g.provenance["parameters"]  # default provenance unchanged
    assert g.records["lat"].min() == pytest.approx(41.66 + 0.5 / 111.32)


def test_grid_costs_independent_loop():
    g = grid(4, 5, n_outputs=6, n_destinations=7, seed=2)
    xy = g.records[["x0", "x1"]].to_numpy()
    out = g.outputs["record_id"].to_numpy()
    # recover the destinations: the seeded draw after the outputs, as documented
    rng = np.random.default_rng(2)
    rng.choice(20, size=6, replace=False)
    dest = rng.choice(20, size=7, replace=False)
    for i, k in [(0, 0), (7, 3), (19, 5)]:
        want = np.mean([abs(np.hypot(*(xy[i] - xy[t])) - np.hypot(*(xy[out[k]] - xy[t]))) for t in dest])
        assert g.costs[i, k] == pytest.approx(want, rel=1e-12)


@pytest.mark.skipif(not ROME_NODES.is_file(), reason="shared Rome data ../shared/data/rome_center absent")
def test_grid_lr_geo_road_costs(tmp_path):
    g = grid(
        rows=8,
        cols=10,
        cell_km=0.4,
        n_outputs=20,
        n_destinations=15,
        eta=1.0,
        road_nodes=str(ROME_NODES),
        road_edges=str(ROME_EDGES),
        seed=1,
    )
    assert g.provenance["parameters"]["cost_distance"] == "road_path"
    assert g.metric == "euclidean"
    nodes = pd.read_csv(ROME_NODES).set_index("osmid")
    scc = road_graph(str(ROME_NODES), str(ROME_EDGES)).largest_scc()
    # snapping: the nearest LSCC node by brute force
    lat, lon = g.records["lat"].to_numpy(), g.records["lon"].to_numpy()
    for i in (0, 37, 79):
        d2 = (scc.lat - lat[i]) ** 2 + ((scc.lon - lon[i]) * np.cos(np.radians(lat[i]))) ** 2
        assert g.records["road_osmid"][i] == scc.osmid[np.argmin(d2)]
    # costs: networkx Dijkstra between the snapped nodes
    e = pd.read_csv(ROME_EDGES, usecols=["u", "v", "length"])
    G = nx.MultiDiGraph()
    G.add_weighted_edges_from(e.itertuples(index=False), weight="length")
    rng = np.random.default_rng(1)
    rng.choice(80, size=20, replace=False)
    dest = rng.choice(80, size=15, replace=False)
    osm = g.records["road_osmid"].to_numpy()
    out = g.outputs["record_id"].to_numpy()
    for i, k in [(0, 0), (44, 9), (79, 19)]:
        pi = nx.single_source_dijkstra_path_length(G, int(osm[i]), weight="length")
        pk = nx.single_source_dijkstra_path_length(G, int(osm[out[k]]), weight="length")
        want = np.mean([abs(pi[osm[t]] - pk[osm[t]]) for t in dest]) / 1000
        assert g.costs[i, k] == pytest.approx(want, rel=1e-9)
    assert nodes.loc[osm, "y"].between(41.88, 41.93).all()
    write_instance(g, tmp_path / "g")
    np.testing.assert_array_equal(read_instance(tmp_path / "g").costs, g.costs)


def test_grid_errors():
    with pytest.raises(InputError, match="rows, cols"):
        grid(rows=0)
    with pytest.raises(InputError, match="prior"):
        grid(prior="zipf")
    with pytest.raises(InputError, match="no such file"):
        grid(road_osm="/nonexistent/x.osm")


def test_synthetic_paper_setting(tmp_path):
    s = synthetic(n_records=300, n_outputs=40, dim=3, sigma=4.0, seed=5)
    pts = s.records[["x0", "x1", "x2"]].to_numpy()
    np.testing.assert_array_equal(pts, np.random.default_rng(5).normal(0.0, 4.0, size=(300, 3)))
    out = s.outputs["record_id"].to_numpy()
    np.testing.assert_allclose(s.costs, np.linalg.norm(pts[:, None] - pts[out][None], axis=2), rtol=1e-12, atol=1e-12)
    brute = sum(np.linalg.norm(pts[a] - pts[b]) <= 2.0 for a, b in itertools.combinations(range(300), 2))
    assert s.n_edges == brute
    write_instance(s, tmp_path / "s")
    back = read_instance(tmp_path / "s")
    np.testing.assert_array_equal(back.edges, s.edges)
    np.testing.assert_array_equal(back.costs, s.costs)


def test_synthetic_self_cost_is_exactly_zero():
    """A record reported as itself costs exactly 0 (distances from coordinate differences, no cancellation)."""
    s = synthetic(n_records=300, n_outputs=40, sigma=4.0, seed=5)
    out = s.outputs["record_id"].to_numpy()
    assert np.all(s.costs[out, np.arange(40)] == 0.0)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 40), dim=st.integers(1, 5), seed=st.integers(0, 1000))
def test_synthetic_properties(n, dim, seed):
    a = synthetic(n_records=n, n_outputs=None, dim=dim, seed=seed)
    b = synthetic(n_records=n, n_outputs=None, dim=dim, seed=seed)
    np.testing.assert_array_equal(a.costs, b.costs)
    assert a.costs.shape == (n, n) and np.all(np.diag(a.costs) == 0.0)
    assert np.all(a.distances <= a.eta) and np.all(a.distances > 0)


def test_synthetic_errors_and_registry():
    with pytest.raises(InputError, match="n_records"):
        synthetic(n_records=0)
    with pytest.raises(InputError, match="sigma"):
        synthetic(sigma=0)
    with pytest.raises(InputError, match="unknown parameter"):
        registry.load("synthetic", {"rows": 3})
    assert registry.input_files("synthetic", {"n_records": 5}) == []
    assert registry.input_files("grid", {}) == []
    if ROME_NODES.is_file():
        assert registry.input_files("grid", {"road_nodes": str(ROME_NODES), "road_edges": str(ROME_EDGES)}) == sorted(
            [ROME_NODES, ROME_EDGES]
        )
