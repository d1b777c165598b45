"""Issue 42: the privacy door of a release without a secret table decides on the public instance's figures
(:class:`flows.door.Figures`) memoised beside its graph object (``tasks.common.door_figures``) instead of loading
the instance on every cached re-run.

The door over the memo decides exactly as the door over the instance (:func:`flows.door.plan_for`, both ways):
the same plan, the same refusals, on the first run (which writes the memo) and on the re-run (which reads it and
loads no instance); the memo holds public figures only, is keyed by what they are computed from, and is never
kept beside an object derived from the secret table nor used for a release of real people.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import flows.release as release
from artifacts.store import Store
from flows.config import parse_config
from flows.door import Figures, plan_for
from flows.plan import plan_run
from flows.release import _TASKS, run_stages, stage_params
from mdp_core.errors import PrivacyError
from mdp_core.problem.datasets import grid
from tasks.common import DOOR_FIGURES, door_figures, instance_with_graph

# (eta, protection_radius, max_stretch, allow_unprotected, epsilon[, all_pairs]) -> admitted: admitted and refused
# doors (all_pairs unset: the release's default, every pair certified, stretch 1)
CASES = [
    ((2.0, None, 2.0, False, 2.0), True),
    ((1.2, 3.0, 2.0, False, None), True),  # a wider radius, epsilon from the dataset
    ((1.2, 3.0, 1.0, False, 2.0), True),  # every pair certified: stretch 1, within any max_stretch
    ((1.2, 3.0, 1.0, False, 2.0, False), False),  # opted out: the graph's stretch 1.414 above max_stretch
    ((1.2, 3.0, 1.0, True, 2.0, False), True),  # ... allowed
    ((0.05, None, 2.0, True, 2.0), False),  # every record alone, whatever allow_unprotected says
    ((2.0, 1.0, 2.0, False, 2.0), False),  # radius below eta
]


def _config(
    root: Path,
    eta: float,
    radius: float | None,
    max_stretch: float,
    allow: bool,
    eps: float | None,
    all_pairs: bool | None = None,
    **release,
):
    privacy: dict[str, Any] = {"eta": eta, "max_stretch": max_stretch, "allow_unprotected": allow}
    privacy |= {"protection_radius": radius} if radius is not None else {}
    privacy |= {"epsilon": eps} if eps is not None else {}
    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 20, "seed": 0}},
            "privacy": privacy,
            "solve": {} if all_pairs is None else {"all_pairs": all_pairs},
            "release": release or {"simulate": True, "n_individuals": 50},
        }
    )


def _door(cfg, monkeypatch) -> tuple[Any, list[str]]:
    """(the door's plan, or the PrivacyError it refused with; what it read: "instance" (instance_with_graph) and
    what plan_for decided on, "plan_for(instance)" or "plan_for(figures)")."""
    store, params = Store(cfg.store), stage_params(cfg)
    loaded: list[str] = []

    def spy(c, i):
        loaded.append("plan_for(figures)" if isinstance(i, Figures) else "plan_for(instance)")
        return plan_for(c, i)

    monkeypatch.setattr(release, "plan_for", spy)
    monkeypatch.setattr(
        release, "instance_with_graph", lambda *a, **k: loaded.append("instance") or instance_with_graph(*a, **k)
    )

    def run(stage: str, **upstream):
        return _TASKS[stage].fn(str(store.root), params[stage], **upstream)

    try:
        return run_stages(cfg, store, params, run, until="door").plan, loaded
    except PrivacyError as exc:
        return exc, loaded


def _direct(cfg) -> Any:
    """plan_for over the instance, as the door decided before the memo: the plan or its refusal."""
    store = Store(cfg.store)
    refs = {s: Store(cfg.store).load_ref(s, k) for s, k in _keys(store).items()}
    door = plan_for(plan_run(cfg), instance_with_graph(store, refs["ingest"], refs["graph"]))
    try:
        return door.plan.admit()
    except PrivacyError as exc:
        return exc


def _keys(store: Store) -> dict[str, str]:
    return {s: next((store.root / "objects" / s).iterdir()).name for s in ("ingest", "graph")}


def _memo(store: Store) -> Path:
    return store.root / "objects" / "graph" / _keys(store)["graph"] / DOOR_FIGURES


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    return a == b


@pytest.mark.parametrize("case, admitted", CASES)
def test_the_memo_decides_as_the_instance_does(case, admitted, tmp_path, monkeypatch):
    cfg = _config(tmp_path / "store", *case)
    first, loaded = _door(cfg, monkeypatch)
    assert isinstance(first, PrivacyError) != admitted
    assert loaded == ["instance", "plan_for(instance)"]  # no memo yet: the door reads the instance
    assert _memo(Store(cfg.store)).is_file()
    again, loaded = _door(cfg, monkeypatch)
    assert loaded == ["plan_for(figures)"]  # the re-run's door loads no instance
    assert _same(first, again) and _same(again, _direct(cfg))
    if admitted:
        assert first.accepted and first.charges() == _direct(cfg).charges()


def test_the_memo_holds_public_figures_keyed_by_their_sources(tmp_path, monkeypatch):
    cfg = _config(tmp_path / "store", 1.2, 3.0, 2.0, False, 2.0)
    _door(cfg, monkeypatch)
    store = Store(cfg.store)
    memo = json.loads(_memo(store).read_text())
    assert set(memo) == {"key", "figures"} and set(memo["figures"]) == {"3.0"}
    assert set(memo["figures"]["3.0"]) == {"epsilon", "eta", "radius", "graph"}
    graph_keys = {"n_records", "component_sizes", "stretch", "distance_unit", "stretch_within", "all_pairs"}
    assert set(memo["figures"]["3.0"]["graph"]) == graph_keys
    graph = store.load_ref("graph", _keys(store)["graph"])
    assert DOOR_FIGURES not in graph.files and store.is_valid(graph)  # not one of the object's files
    # another radius is another entry
    other = _config(tmp_path / "store", 1.2, 2.5, 2.0, False, 2.0)
    _, loaded = _door(other, monkeypatch)
    assert loaded == ["instance", "plan_for(instance)"]
    assert set(json.loads(_memo(store).read_text())["figures"]) == {"2.5", "3.0"}
    # figures of other sources (another key: other objects, code or libraries) are not used, nor malformed ones
    memo = json.loads(_memo(store).read_text())
    dataset = store.load_ref("ingest", _keys(store)["ingest"])
    assert door_figures(store, dataset, graph, 3.0, ("flows.door",)) == memo["figures"]["3.0"]
    _memo(store).write_text(json.dumps(memo | {"key": "0" * 64}))
    assert door_figures(store, dataset, graph, 3.0, ("flows.door",)) is None
    _, loaded = _door(cfg, monkeypatch)
    assert loaded == ["instance", "plan_for(instance)"]  # read the instance again, and memoised it again
    assert json.loads(_memo(store).read_text())["key"] == memo["key"]
    broken = json.loads(_memo(store).read_text())
    del broken["figures"]["3.0"]["graph"]["stretch"]
    _memo(store).write_text(json.dumps(broken))
    _, loaded = _door(cfg, monkeypatch)
    assert loaded == ["instance", "plan_for(instance)"]


def test_no_memo_beside_a_private_object(tmp_path, monkeypatch):
    cfg = _config(tmp_path / "store", 2.0, None, 2.0, False, 2.0)
    store, params = Store(cfg.store), stage_params(cfg)
    ingest = _TASKS["ingest"].fn(str(store.root), params["ingest"])
    store.make_private(ingest)  # as if derived from a secret table: nothing may be kept beside its graph
    for _ in range(2):
        _, loaded = _door(cfg, monkeypatch)
        assert loaded == ["instance", "plan_for(instance)"]
    assert not _memo(store).exists()


def test_a_release_of_real_people_never_uses_the_memo(tmp_path, monkeypatch):
    inst = grid(4, 5, n_outputs=None, seed=0)
    rng = np.random.default_rng(3)
    pts = inst.records[["lat", "lon"]].to_numpy()[rng.integers(0, inst.n_records, 60)] + rng.normal(0, 0.002, (60, 2))
    table = tmp_path / "people.csv"
    pd.DataFrame({"lat": pts[:, 0], "lon": pts[:, 1]}).to_csv(table, index=False)
    cfg = _config(tmp_path / "store", 2.0, None, 2.0, False, 2.0, microdata=str(table), population="residents")
    for _ in range(2):
        _, loaded = _door(cfg, monkeypatch)
        assert loaded == ["instance", "plan_for(instance)"]
    assert not _memo(Store(cfg.store)).exists()
