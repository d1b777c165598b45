"""The loss a release optimises (issue 40, "the analyst's loss"): ``loss = "distance"`` (the data's metric
between record and output) or ``"travel"`` (LR-Geo's travel-distance estimation cost) on the road and grid
kinds; "travel" stays the loaders' default (the papers' instances), "distance" is a release config's; the
instance provenance and the report name it; changing it changes the ingest stage's parameters."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from conftest import claims_of, edit_report, findings

from mdp_core.errors import InputError
from mdp_core.problem.datasets.grid import grid
from mdp_core.problem.datasets.road import road
from mdp_core.release import report

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ROME_NODES = DATA / "rome_center" / "nodes.csv"
ROME_EDGES = DATA / "rome_center" / "edges.csv"
needs_rome = pytest.mark.skipif(not ROME_NODES.is_file(), reason="shared Rome data ../shared/data/rome_center absent")
ROME = {"nodes": str(ROME_NODES), "edges": str(ROME_EDGES), "n_records": 60, "n_outputs": 15, "eta": 0.5, "seed": 3}


def hav_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Independent haversine (math module, the library's sphere radius 6371.0088 km)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(h))


@needs_rome
def test_road_distance_loss_is_the_haversine_km_from_record_to_output():
    inst = road(**ROME, loss="distance")
    lat, lon = inst.records["lat"].to_numpy(), inst.records["lon"].to_numpy()
    out = inst.outputs["record_id"].to_numpy()
    want = np.array([[hav_km(lat[i], lon[i], lat[o], lon[o]) for o in out] for i in range(inst.n_records)])
    np.testing.assert_allclose(inst.costs, want, rtol=1e-9, atol=1e-12)
    assert np.all(inst.costs[out, np.arange(out.size)] == 0.0)  # a record reported as itself costs nothing
    # the same records and outputs as the travel instance: only the loss differs
    travel = road(**ROME)
    np.testing.assert_array_equal(inst.records["osmid"], travel.records["osmid"])
    np.testing.assert_array_equal(out, travel.outputs["record_id"])
    np.testing.assert_array_equal(inst.edges, travel.edges)
    prov = inst.provenance
    assert prov["cost"].startswith("loss distance:") and "haversine km" in prov["cost"]
    assert prov["parameters"]["loss"] == "distance" and "destinations" not in prov["parameters"]
    assert report.loss_of(prov) == prov["cost"]
    with pytest.raises(InputError, match="destinations and destination_weights are for loss = 'travel'"):
        road(**ROME, loss="distance", destinations=[25388130])


@needs_rome
def test_road_travel_loss_is_todays_cost_and_the_loaders_default():
    inst = road(**ROME, loss="travel")
    np.testing.assert_array_equal(inst.costs, road(**ROME).costs)  # the loader's default: the papers' instances
    prov = inst.provenance
    assert prov["cost"] == "loss travel: sum_t p_t |pd(r_i,t) - pd(o_k,t)|, pd = shortest street path, km"
    assert prov["parameters"]["loss"] == "travel" and len(prov["parameters"]["destinations"]) == 100
    # c_ik = sum_t p_t |pd(r_i, t) - pd(o_k, t)|, recomputed with networkx Dijkstra (edge 'length', metres)
    e = pd.read_csv(ROME_EDGES, usecols=["u", "v", "length"])
    g = nx.MultiDiGraph()
    g.add_weighted_edges_from(e.itertuples(index=False), weight="length")
    dest, w = prov["parameters"]["destinations"], prov["parameters"]["destination_weights"]
    osmid, out = inst.records["osmid"].to_numpy(), inst.outputs["record_id"].to_numpy()
    for i, k in [(0, 0), (17, 3), (59, 14)]:
        pr = nx.single_source_dijkstra_path_length(g, int(osmid[i]), weight="length")
        po = nx.single_source_dijkstra_path_length(g, int(osmid[out[k]]), weight="length")
        want = sum(wt * abs(pr[t] - po[t]) for t, wt in zip(dest, w, strict=True)) / 1000.0
        assert inst.costs[i, k] == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_grid_distance_loss_is_the_centre_distance():
    inst = grid(rows=4, cols=5, n_outputs=6, seed=2, prior="random", loss="distance")
    xy = inst.records[["x0", "x1"]].to_numpy()
    out = inst.outputs["record_id"].to_numpy()
    want = np.hypot(xy[:, None, 0] - xy[None, out, 0], xy[:, None, 1] - xy[None, out, 1])
    np.testing.assert_allclose(inst.costs, want, rtol=1e-12, atol=1e-12)
    travel = grid(rows=4, cols=5, n_outputs=6, seed=2, prior="random")
    np.testing.assert_array_equal(inst.prior, travel.prior)  # the same seeded draws with either loss
    assert not np.allclose(travel.costs, inst.costs)
    assert inst.provenance["cost"].startswith("loss distance:") and travel.provenance["cost"].startswith("loss travel:")
    assert travel.provenance["parameters"]["loss"] == "travel"


def test_an_unknown_loss_is_an_error_naming_it():
    from flows.config import parse_config

    with pytest.raises(InputError, match=r"dataset\.params: loss: Input should be 'distance' or 'travel'"):
        parse_config({"dataset": {"kind": "road", "params": {"pbf": "helsinki", "loss": "km"}}}, "c")
    with pytest.raises(InputError, match=r"loss must be one of \['distance', 'travel'\], got 'km'"):
        road(pbf="nowhere.pbf", loss="km")  # before any file is read
    with pytest.raises(InputError, match=r"loss must be one of"):
        grid(rows=2, cols=2, loss="euclid")


def test_a_release_config_optimises_distance_unless_it_names_travel(tmp_path):
    """A release config's ``dataset.params`` stay what was written; the ingest stage loads them with the kind's
    release default (loss "distance") where unset, and ``mdp-release check`` loads what the ingest stage loads."""
    from flows.config import DATASET_PARAMS, DEFAULT_CONFIG, parse_config
    from flows.release import stage_params
    from mdp_core.problem.io import read_instance
    from tasks.ingest import ingest

    rel = {"simulate": True}
    road_cfg = parse_config({"dataset": {"kind": "road", "params": {"pbf": "helsinki"}}, "release": rel})
    assert road_cfg.dataset.params == {"pbf": "helsinki"}  # what was written
    assert road_cfg.dataset.loader_params() == {"pbf": "helsinki", "loss": "distance"}
    assert DEFAULT_CONFIG.dataset.loader_params()["loss"] == "distance"  # the built-in (grid) release too
    synthetic = parse_config({"dataset": {"kind": "synthetic", "params": {}}, "release": rel})
    assert synthetic.dataset.loader_params() == {}  # no loss parameter: its cost is already the distance
    # the run form and the configuration reference show the release's default; the loaders keep their own
    assert DATASET_PARAMS["road"].model_fields["loss"].default == "distance"
    assert DATASET_PARAMS["grid"].model_fields["loss"].default == "distance"
    assert inspect.signature(road).parameters["loss"].default == "travel"
    assert inspect.signature(grid).parameters["loss"].default == "travel"

    def ingested(params: dict) -> object:
        cfg = parse_config({"store": str(tmp_path), "dataset": {"kind": "grid", "params": params}, "release": rel})
        ref = ingest.fn(str(tmp_path), stage_params(cfg)["ingest"])
        return read_instance(tmp_path / ref.path)

    small = {"rows": 3, "cols": 4, "n_outputs": 4}
    unset, travel = ingested(small), ingested(small | {"loss": "travel"})
    assert (
        unset.provenance["cost"].startswith("loss distance:") and unset.provenance["parameters"]["loss"] == "distance"
    )
    assert travel.provenance["cost"].startswith("loss travel:")
    np.testing.assert_array_equal(travel.costs, grid(3, 4, n_outputs=4).costs)
    np.testing.assert_array_equal(unset.costs, grid(3, 4, n_outputs=4, loss="distance").costs)


def test_the_loss_is_in_the_ingest_key(tmp_path, monkeypatch):
    """Changing the loss re-ingests: a written loss is in the ingest stage's parameters, the kind's release
    default in its code version (that kind's declaration only)."""
    import dataclasses

    from flows.config import parse_config
    from flows.release import stage_params
    from mdp_core.declarations import dataset_kinds
    from tasks.cache import forget_code_versions, stage_key

    def key(params: dict) -> str:
        cfg = parse_config({"dataset": {"kind": "grid", "params": params}, "release": {"simulate": True}})
        forget_code_versions()
        return stage_key("ingest", "tasks.ingest", stage_params(cfg)["ingest"], {})

    small = {"rows": 3, "cols": 4}
    unset, distance, travel = key(small), key(small | {"loss": "distance"}), key(small | {"loss": "travel"})
    assert len({unset, distance, travel}) == 3
    road_kind = dataset_kinds.DECLARED["road"]
    monkeypatch.setitem(dataset_kinds.DECLARED, "road", dataclasses.replace(road_kind, release_defaults=()))
    assert key(small) == unset  # another kind's release default: not this ingest's
    grid_kind = dataset_kinds.DECLARED["grid"]
    monkeypatch.setitem(dataset_kinds.DECLARED, "grid", dataclasses.replace(grid_kind, release_defaults=()))
    assert key(small) != unset  # this kind's: a new key
    forget_code_versions()


def test_the_report_names_the_loss_and_the_audit_checks_it(run):
    """The conftest release (a grid release config: loss distance by default) states its loss on the officer's
    page and in the appendix, as a claim the audit recomputes from the released instance."""
    claims = claims_of(run)
    assert claims["loss"].startswith("loss distance:")
    text = (run / "report.md").read_text()
    assert f"- **Loss optimised.** {claims['loss']}." in text and f"Loss c_ik: {claims['loss']}." in text
    assert findings(run) == []
    edit_report(run, lambda t: t.replace("loss distance:", "loss travel:"))
    findings(run, "report.md: claims loss ")


def test_a_report_written_before_the_loss_claim_renders_without_it():
    assert report.loss_sentence({"distance_unit": "km"}) is None
    assert report.loss_of({"dataset": "synthetic"}) is None
    line = report.loss_sentence({"loss": "loss distance: d", "distance_unit": "km"})
    assert line is not None and line.startswith("- **Loss optimised.** loss distance: d.")
