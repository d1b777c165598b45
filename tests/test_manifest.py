"""flows/manifest.py: the stage entries, manifest and publication every flow shares (real store, no Prefect run)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from artifacts.store import ArtifactRef, Store
from flows import manifest as mf


class _Config(BaseModel):
    size: int = 3


def _artifact(store: Store, stage: str, text: str, produced_by: str, produced_at: float) -> ArtifactRef:
    with store.writer(stage, f"{stage}-key") as w:
        w.file("table.txt").write_text(text)
        w.meta.update({"produced_by": produced_by, "produced_at": produced_at, "seconds": 0.5})
    assert w.ref is not None
    return w.ref


def test_stage_entry_counts_only_earlier_runs_as_cache_hits(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    started = time.time()
    ours = _artifact(store, "a", "x", "run-1", started + 1)
    earlier = _artifact(store, "b", "y", "run-0", started - 10)
    concurrent = _artifact(store, "c", "z", "run-2", started + 1)
    t0 = time.perf_counter()
    assert mf.stage_entry(ours, "run-1", t0, started)["cache_hit"] is False
    assert mf.stage_entry(earlier, "run-1", t0, started)["cache_hit"] is True
    assert mf.stage_entry(concurrent, "run-1", t0, started)["cache_hit"] is False
    assert mf.stage_entry(concurrent, "run-1", t0)["cache_hit"] is True  # no start time: any other run
    entry = mf.stage_entry(earlier, "run-1", t0)
    assert entry["cache_key"] == earlier.key and entry["files"] == earlier.files
    assert entry["compute_seconds"] == 0.5 and entry["wall_seconds"] >= 0


def test_publish_run_writes_manifest_and_copies(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    ref = _artifact(store, "a", "hello", "run-1", time.time())
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    name = mf.run_name(when, "abcdef123456", "demo")
    assert name == "20260102-030405-demo-ef123456"  # the run id's last 8: uuid7's first 8 are a timestamp
    manifest = mf.new_manifest(
        "demo-manifest", name, "abcdef123456", when, _Config(), {"a": {}}, {"a": "v1"}, {"extra": 1}
    )
    out = mf.publish_run(store, manifest, {"published.txt": (ref, "table.txt")}, out=tmp_path / "out")
    run_dir = store.run_dir(name)
    assert out["run_dir"] == str(run_dir) and out["out_dir"] == str((tmp_path / "out").resolve())
    for folder in (run_dir, tmp_path / "out"):
        assert (folder / "published.txt").read_text() == "hello"
        written = json.loads((folder / "manifest.json").read_text())
        assert written["format"] == "demo-manifest" and written["version"] == mf.MANIFEST_VERSION
        assert written["config"] == {"size": 3} and written["extra"] == 1
        assert written["released_files"] == {"published.txt": ref.files["table.txt"]}
        assert written["created_at"] == "2026-01-02T03:04:05+00:00"


def test_publish_run_uses_the_given_publisher(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    ref = _artifact(store, "a", "hello", "run-1", time.time())
    calls = []

    def publisher(name: str, released: mf.Released, manifest: dict) -> Path:
        calls.append((name, sorted(released), manifest["released_files"]))
        return store.publish(name, released, manifest)

    manifest = mf.new_manifest("m", "run", "id", dt.datetime.now(dt.UTC), _Config(), {}, {})
    mf.publish_run(store, manifest, {"f.txt": (ref, "table.txt")}, publish=publisher)
    assert calls == [("run", ["f.txt"], {"f.txt": ref.files["table.txt"]})]


@pytest.mark.parametrize(("version", "loss"), [(1, "travel"), (2, None)])
def test_a_version_1_manifest_re_runs_with_the_loss_it_was_made_with(tmp_path, version, loss) -> None:
    """Before manifest version 2 a grid or road release config left the loss to the loader (travel); re-running
    such a manifest must give the same bytes, so the loss is pinned. A version-2 manifest is read as written."""
    from flows.config import parse_config
    from flows.manifest import public_config
    from flows.manifest_read import manifest_config

    cfg = parse_config(
        {"dataset": {"kind": "grid", "params": {"rows": 3, "cols": 3, "n_outputs": 4}}, "release": {"simulate": True}}
    )
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"format": "mdp-release-manifest", "version": version, "config": public_config(cfg)}))
    params = manifest_config(path).dataset.params
    assert params.get("loss") == loss and {k: v for k, v in params.items() if k != "loss"} == cfg.dataset.params
    given = parse_config(
        {
            "dataset": {"kind": "grid", "params": {"rows": 3, "cols": 3, "loss": "distance"}},
            "release": {"simulate": True},
        }
    )
    path.write_text(json.dumps({"format": "mdp-release-manifest", "version": version, "config": public_config(given)}))
    assert manifest_config(path).dataset.params["loss"] == "distance"  # a loss the config named is kept


@pytest.mark.parametrize(("version", "gap"), [(1, 1e-6), (2, 1e-3), (3, 1e-2)])
def test_a_release_solves_to_one_percent_and_an_older_manifest_to_its_own_gap(tmp_path, version, gap):
    from flows.config import RELEASE_GAP_REL, parse_config
    from flows.manifest import public_config
    from flows.manifest_read import manifest_config

    cfg = parse_config({"release": {"simulate": True}})
    assert (
        cfg.solve.gap_rel is None
        and cfg.solve.method_args() == {"gap_rel": RELEASE_GAP_REL}
        and RELEASE_GAP_REL == 1e-2
    )
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"format": "mdp-release-manifest", "version": version, "config": public_config(cfg)}))
    assert manifest_config(path).solve.method_args()["gap_rel"] == gap
    named = parse_config({"release": {"simulate": True}, "solve": {"method": "rowgen", "gap_rel": 1e-5}})
    assert named.solve.method_args() == {"gap_rel": 1e-5}
    assert parse_config({"release": {"simulate": True}, "solve": {"method": "exp"}}).solve.method_args() == {}


def test_a_manifest_from_before_all_pairs_re_runs_on_the_graph_and_a_recorded_null_stays_on(tmp_path) -> None:
    """A manifest written before ``[solve] all_pairs`` existed (no such key) was certified on the mDP graph's
    edges: re-running it must not take the every-pair release default (another mechanism, another charge key).
    A recorded null (session 25's default and today's: on where the method can) keeps its meaning."""
    from flows.config import parse_config
    from flows.manifest import public_config
    from flows.manifest_read import manifest_config

    path = tmp_path / "manifest.json"
    minimal = {"release": {"simulate": True}, "solve": {"method": "rowgen"}}  # an old manifest's minimal config
    path.write_text(json.dumps({"format": "mdp-release-manifest", "version": 4, "config": minimal}))
    off = parse_config({"release": {"simulate": True}, "solve": {"method": "rowgen", "all_pairs": False}})
    assert manifest_config(path).solve.solver_settings() == off.solve.solver_settings()
    assert "all_pairs" not in off.solve.solver_settings()  # the solve's key of a release before the option
    path.write_text(
        json.dumps({"format": "mdp-release-manifest", "version": 4, "config": {"release": {"simulate": True}}})
    )
    assert manifest_config(path).solve.all_pairs is False  # no [solve] at all: before the option too
    now = parse_config({"release": {"simulate": True}, "solve": {"method": "rowgen"}})
    dumped = public_config(now)
    assert dumped["solve"]["all_pairs"] is None and now.solve.solver_settings()["all_pairs"] is True
    path.write_text(json.dumps({"format": "mdp-release-manifest", "version": 4, "config": dumped}))
    assert manifest_config(path).solve.solver_settings() == now.solve.solver_settings()  # null: on, as it ran
