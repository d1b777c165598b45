"""Issue 41, one release, one folder: a run whose released content is a published release's -- byte for byte,
or apart from the wall-clock parts the contract declares volatile (``seconds`` columns and keys) -- publishes
nothing new, whatever ``--store`` or ``[run]`` say; content beyond the timings is a new release; ``runs/latest``
names the newest release by its manifest's time, not the last run (flows/manifest.py). Real stages through
their tasks' ``.fn`` (tests/conftest.py), a real store, no Prefect server."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import build_release, release_config, run_stages

from artifacts.store import ArtifactRef, Store
from flows import manifest as mf
from mdp_core.release.audit import CLAIMS_BLOCK
from mdp_core.release.report import evaluation_markdown, render_report
from tasks import publish as publish_task

T0 = dt.datetime(2026, 1, 1, 3, 0, 0, tzinfo=dt.UTC)


def _publish(store: Store, refs: dict, cfg, when: dt.datetime, run_id: str, evaluate: ArtifactRef | None = None):
    """What the release flow's publication does with the stages' outputs (manifest, then publish_run; the
    store's own publisher: the door's signature and audit are not what this file tests)."""
    released = publish_task.released_files(refs["solve"], refs["measure"], evaluate or refs["evaluate"], refs["export"])
    name = mf.run_name(when, run_id)
    manifest = mf.new_manifest(mf.RELEASE_FORMAT, name, run_id, when, cfg, {}, {})
    return mf.publish_run(store, manifest, released)


def _folders(store: Store) -> list[str]:
    return [p.name for p in store.releases()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Store, dict, Path]:
    """A store with one release published (module-wide: the tests publish more beside it)."""
    store, refs = build_release(tmp_path_factory.mktemp("store"))
    first = _publish(store, refs, release_config(store.root), T0, "0000aaaa")
    assert "same_as" not in first
    return store, refs, Path(first["run_dir"])


@pytest.mark.slow
def test_a_recomputed_evaluate_or_another_store_or_run_section_publishes_nothing_new(built) -> None:
    store, refs, first = built
    # The evaluate stage computed again (its objects deleted, as `store --prune-objects` or a lost disk would):
    # its solves' wall-clock seconds differ, so evaluation.parquet and report.md are other bytes.
    for stage in ("evaluate", "evaluate_point"):
        shutil.rmtree(store.root / "objects" / stage)
    again = run_stages(store.root, release_config(store.root))
    assert again["evaluate"].files["evaluation.parquet"] != refs["evaluate"].files["evaluation.parquet"]
    assert again["export"] == refs["export"] and again["measure"] == refs["measure"]
    m = _publish(store, again, release_config(store.root), T0 + dt.timedelta(days=1), "0000bbbb")
    assert m["same_as"] == first.name and Path(m["run_dir"]) == first
    # `--store` naming the store the config names, another [run] section: how it ran, not what it released
    cfg = release_config(store.root).model_copy(update={"store": None})
    cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"max_workers": 1, "keep_releases": 3})})
    m = _publish(store, again, cfg, T0 + dt.timedelta(days=2), "0000cccc")
    assert m["same_as"] == first.name
    assert _folders(store) == [first.name]


def _evaluation_variant(store: Store, ev: ArtifactRef, key: str, change) -> ArtifactRef:
    """A copy of the evaluate output ``ev`` (a new object of the store) whose evaluation.parquet and report's
    claims are ``change(frame, claims)``d in place, its report.md rendered again from them (as the stage does)."""
    src = store.root / ev.path
    with store.writer("evaluate", key) as w:
        for name in ev.files:
            shutil.copyfile(src / name, w.file(name))
        frame = pd.read_parquet(w.file("evaluation.parquet"))
        text = (src / "report.md").read_text(encoding="utf-8")
        claims = json.loads(CLAIMS_BLOCK.findall(text)[0])
        change(frame, claims)
        frame.to_parquet(w.file("evaluation.parquet"), index=False)
        figures = frozenset(n for n in ev.files if n.endswith(".png"))
        w.file("report.md").write_text(
            render_report(claims, evaluation_markdown(w.file("evaluation.parquet")), figures), encoding="utf-8"
        )
        w.meta.update(ev.meta)
    assert w.ref is not None
    return w.ref


def _slower(frame: pd.DataFrame, claims: dict) -> None:
    frame["seconds"] = frame["seconds"] * 3 + 1
    claims["seconds"] = 1234.5


def _other_loss(frame: pd.DataFrame, claims: dict) -> None:
    baseline = frame["method"] == "exp"
    assert baseline.sum() == 1
    frame.loc[baseline, "expected_loss"] = frame.loc[baseline, "expected_loss"] * 1.5


@pytest.mark.slow
def test_timings_are_the_only_parts_left_out(built) -> None:
    store, refs, first = built
    cfg = release_config(store.root)
    slower = _evaluation_variant(store, refs["evaluate"], "variant-slower", _slower)
    m = _publish(store, refs, cfg, T0 + dt.timedelta(days=3), "0000dddd", evaluate=slower)
    assert (
        m["released_files"]["report.md"]
        != json.loads((first / "manifest.json").read_text())["released_files"]["report.md"]
    )
    assert m["same_as"] == first.name  # other seconds, in the table and in the report's claims: the same release
    other = _evaluation_variant(store, refs["evaluate"], "variant-other", _other_loss)
    m = _publish(store, refs, cfg, T0 + dt.timedelta(days=4), "0000eeee", evaluate=other)
    assert "same_as" not in m  # a baseline's loss changed: a new release
    assert Path(m["run_dir"]).name in _folders(store)


def test_latest_names_the_newest_release_not_the_last_run(tmp_path) -> None:
    store = Store(tmp_path / "store")
    folders = {}
    for day, name in ((1, "older"), (2, "newer")):
        folder = store.root / "runs" / f"2026010{day}-000000-{name}"
        folder.mkdir(parents=True)
        created = (T0 + dt.timedelta(days=day)).isoformat(timespec="seconds")
        manifest = {"format": mf.RELEASE_FORMAT, "created_at": created, "config": {"name": name}}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        folders[name] = folder
    # a cached re-run of last month's release finds it published: latest stays on the newer release
    assert mf.newest_release(store, folders["older"]) == folders["newer"]
    assert mf.newest_release(store.root, folders["newer"]) == folders["newer"]
    other = store.root / "runs" / "20260109-000000-reproduce-abcd"  # another flow's folder: not a release of it
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"format": "mdp-reproduce-manifest", "created_at": "2027"}))
    assert mf.newest_release(store, folders["older"]) == folders["newer"]
