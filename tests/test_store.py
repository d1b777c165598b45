"""The artifact store: atomic stage outputs, hash verification, concurrent writers."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from artifacts.store import Store
from flows.manifest_read import manifest_release_name


def _write(store: Store, key: str, payload: bytes):
    with store.writer("stage", key) as w:
        w.file("a.bin").write_bytes(payload)
        w.meta["n"] = len(payload)
    return w.ref


def test_write_then_valid_ref(tmp_path):
    s = Store(tmp_path)
    ref = _write(s, "k1", b"hello")
    assert ref.path == "objects/stage/k1" and set(ref.files) == {"a.bin"}
    assert s.valid_ref("stage", "k1") == ref
    assert (tmp_path / "objects/stage/k1/ref.json").is_file()


def test_corrupt_or_missing_file_is_invalid_and_rewritable(tmp_path):
    s = Store(tmp_path)
    ref = _write(s, "k1", b"hello")
    s.path(ref, "a.bin").write_bytes(b"tampered")
    assert s.valid_ref("stage", "k1") is None
    s.path(ref, "a.bin").unlink()
    assert s.valid_ref("stage", "k1") is None
    again = _write(s, "k1", b"hello")
    assert again.files == ref.files and s.valid_ref("stage", "k1") is not None


def test_failed_write_leaves_nothing(tmp_path):
    s = Store(tmp_path)
    with pytest.raises(RuntimeError):
        with s.writer("stage", "k2") as w:
            w.file("a.bin").write_bytes(b"partial")
            raise RuntimeError("crash mid-stage")
    stage_dir = tmp_path / "objects" / "stage"
    assert not stage_dir.exists() or list(stage_dir.iterdir()) == []


def test_concurrent_writers_of_one_key(tmp_path):
    s = Store(tmp_path)
    refs, errors = [], []

    def work():
        try:
            refs.append(_write(s, "same", b"x" * 100_000))
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    for _ in range(5):  # several rounds: the races are timing-dependent
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert len({tuple(sorted(r.files.items())) for r in refs}) == 1
    assert s.valid_ref("stage", "same") is not None
    leftovers = [p.name for p in (tmp_path / "objects" / "stage").iterdir() if p.name != "same"]
    assert leftovers == []


def test_content_hash_ignores_location(tmp_path):
    a = _write(Store(tmp_path / "a"), "k", b"data")
    b = _write(Store(tmp_path / "b"), "other-key", b"data")
    assert a.content_hash == b.content_hash


def test_forced_write_keeps_an_equal_output_and_swaps_a_different_one(tmp_path):
    """--refresh never deletes a folder another run may read: equal content keeps the existing folder and
    files (ref.json records the new computation), different content is swapped in and the old folder
    stays (as trash) until it is stale."""
    s = Store(tmp_path)
    first = _write(s, "k", b"same")
    inode = (tmp_path / first.path).stat().st_ino
    file_inode = s.path(first, "a.bin").stat().st_ino
    with s.writer("stage", "k", force=True) as w:
        w.file("a.bin").write_bytes(b"same")
        w.meta["n"] = -1
    assert (tmp_path / first.path).stat().st_ino == inode and s.path(first, "a.bin").stat().st_ino == file_inode
    assert w.ref.files == first.files and w.ref.meta["n"] == -1 == s.valid_ref("stage", "k").meta["n"]  # new meta
    stage = tmp_path / "objects" / "stage"
    assert sorted(p.name for p in stage.iterdir()) == ["k"]
    held = open(s.path(first, "a.bin"), "rb")  # a reader of the old output, mid-read
    with s.writer("stage", "k", force=True) as w:
        w.file("a.bin").write_bytes(b"different")
        w.meta["n"] = -3
    assert w.ref.meta["n"] == -3 and s.valid_ref("stage", "k").meta["n"] == -3
    assert s.path(w.ref, "a.bin").read_bytes() == b"different"
    (trash,) = [p for p in stage.iterdir() if p.name != "k"]
    assert trash.name.startswith(".k.trash-") and (trash / "a.bin").read_bytes() == b"same"
    assert held.read() == b"same"
    held.close()
    assert s.clean_debris() == [] and trash.exists()  # fresh trash: kept
    with s.writer("stage", "k") as w2:  # not forced: the existing valid output is kept
        w2.file("a.bin").write_bytes(b"same")
        w2.meta["n"] = -2
    assert w2.ref.meta["n"] == -3 and w2.ref.files != first.files


# ----------------------------------------------------------------------------- issue 11: leftovers, modes, the door
def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has this pid now (pids are not reused this fast)


def test_temp_folders_of_killed_runs_are_cleaned_by_the_next_writer(tmp_path):
    import os

    s = Store(tmp_path)
    _write(s, "k0", b"x")
    stage = tmp_path / "objects" / "stage"
    dead = stage / f".k1.tmp-{_dead_pid()}-abcd1234"
    dead.mkdir()
    (dead / "half.parquet").write_bytes(b"partial")
    trash = stage / f".k0.trash-{_dead_pid()}-ffff0000"
    trash.mkdir()
    live = stage / f".k2.tmp-{os.getppid()}-0000aaaa"  # a live writer (our parent process): kept
    live.mkdir()
    _write(s, "k3", b"y")
    names = sorted(p.name for p in stage.iterdir())
    assert names == sorted(["k0", "k3", live.name])


def test_stored_and_released_files_are_0644(tmp_path):
    s = Store(tmp_path)
    ref = _write(s, "k", b"data")
    for p in (tmp_path / ref.path).iterdir():
        assert p.stat().st_mode & 0o777 == 0o644, p
    run = s.publish("r1", {"a.bin": (ref, "a.bin"), "sub/a.bin": (ref, "a.bin")}, {"x": 1})
    for p in run.rglob("*"):
        assert p.stat().st_mode & 0o777 == (0o755 if p.is_dir() else 0o644), p


def test_publish_refused_by_the_check_leaves_nothing(tmp_path):
    s = Store(tmp_path)
    ref = _write(s, "k", b"data")
    seen = []

    def refuse(staged):
        seen.append(sorted(p.name for p in staged.iterdir()))
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        s.publish("r1", {"a.bin": (ref, "a.bin")}, {"x": 1}, check=refuse)
    assert seen == [["a.bin", "manifest.json"]]
    assert list((tmp_path / "runs").iterdir()) == []


def test_publish_interrupted_right_after_staging_leaves_nothing(tmp_path, monkeypatch):
    """Prefect's task timeout raises asynchronously, so it can land between the staging folder's creation
    and anything that would remember it (the CI saw one left behind by a 1 ms release timeout)."""
    import tempfile

    s = Store(tmp_path)
    ref = _write(s, "k", b"data")
    real = tempfile.mkdtemp

    def made_then_timed_out(*args, **kwargs):
        real(*args, **kwargs)
        raise TimeoutError("task run timed out")

    monkeypatch.setattr(tempfile, "mkdtemp", made_then_timed_out)
    with pytest.raises(TimeoutError):
        s.publish("r1", {"a.bin": (ref, "a.bin")}, {"x": 1})
    assert list((tmp_path / "runs").iterdir()) == []


def test_failed_first_write_leaves_no_empty_stage_folder(tmp_path):
    s = Store(tmp_path)
    with pytest.raises(ValueError):
        with s.writer("fresh", "k"):
            raise ValueError("bad input")
    assert not (tmp_path / "objects").exists()


def _release(s: Store, name: str, payload: bytes, config: dict) -> None:
    ref = _write(s, payload.hex()[:16], payload)
    s.publish(name, {"a.bin": (ref, "a.bin")}, {"released_files": {"a.bin": ref.files["a.bin"]}, "config": config})


def test_same_release_finds_identical_bytes_of_the_same_config_only(tmp_path):
    s = Store(tmp_path)
    _release(s, "20260101-000000-aaaa", b"one", {"name": "x"})
    _release(s, "20260102-000000-bbbb", b"two", {"name": "x"})
    one = {
        "a.bin": json.loads((tmp_path / "runs" / "20260101-000000-aaaa" / "manifest.json").read_text())[
            "released_files"
        ]["a.bin"]
    }
    same_config = lambda m: m["config"] == {"name": "x"}  # noqa: E731
    assert s.same_release(one, same_config) == tmp_path / "runs" / "20260101-000000-aaaa"
    assert s.same_release(one, lambda m: m["config"] == {"name": "y"}) is None  # another config
    assert s.same_release({"a.bin": "0" * 64}, same_config) is None  # other bytes
    (tmp_path / "runs" / "20260101-000000-aaaa" / "a.bin").chmod(0o644)
    (tmp_path / "runs" / "20260101-000000-aaaa" / "a.bin").write_bytes(b"tampered")
    assert s.same_release(one, same_config) is None  # the folder no longer holds those bytes


def _failure(s: Store, name: str, release: str | None) -> None:
    folder = s.root / "runs" / name
    folder.mkdir(parents=True)
    (folder / "FAILED.txt").write_text("solve: boom\n")
    if release is not None:
        (folder / "record.json").write_text(json.dumps({"release": release}))


def test_prune_releases_keeps_the_newest_and_latest(tmp_path):
    s = Store(tmp_path)
    names = [f"2026010{i}-000000-{i:04d}" for i in range(1, 6)]
    for i, name in enumerate(names):
        _release(s, name, bytes([i]) * 4, {"name": "x"})
    _failure(s, "20260101-000000-0009-failed", "x")
    (tmp_path / "runs" / "latest").symlink_to(names[0])  # latest points at the oldest (a re-run of it)
    removed = s.prune_releases(2, "x", manifest_release_name)
    assert sorted(p.name for p in removed) == names[1:3]
    assert [p.name for p in s.releases()] == [names[0], *names[3:]]
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]  # deleted, not hidden
    assert s.latest() == tmp_path / "runs" / names[0]
    assert (tmp_path / "runs" / "20260101-000000-0009-failed").is_dir()  # failure records: their own count
    assert s.prune_releases(5, "x", manifest_release_name) == []


def _microdata_release(s: Store, name: str, payload: bytes) -> None:
    """A release of ``x`` publishing a (private) microdata object, as the measure stage writes it."""
    with s.writer("measure", payload.hex(), private=True) as w:
        w.file("microdata.parquet").write_bytes(payload)
    files = {"microdata.parquet": w.ref.files["microdata.parquet"]}
    s.publish(
        name, {"microdata.parquet": (w.ref, "microdata.parquet")}, {"released_files": files, "config": {"name": "x"}}
    )


def _copies(root, payload: bytes) -> list[str]:
    """Every file under ``root`` holding ``payload`` (hidden folders included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.read_bytes() == payload)


def test_retention_deletes_what_it_prunes_microdata_included(tmp_path):
    """Retention leaves no hidden copy: the pruned release folders, their microdata with them, are gone
    from runs/ (no ``runs/.<name>.trash-*`` either) when prune_releases returns, and it returns them."""
    s = Store(tmp_path)
    names = [f"2026010{i}-000000-{i:04d}" for i in range(1, 5)]
    for i, name in enumerate(names):
        _microdata_release(s, name, b"people-" + bytes([i]))
    fails = [f"2026010{i}-000000-00{i}0-failed" for i in range(1, 4)]
    for f in fails:
        _failure(s, f, "x")
    removed = s.prune_releases(2, "x", manifest_release_name)
    assert [p.name for p in removed] == [*names[:2], fails[0]]
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == sorted([*names[2:], *fails[1:]])  # nothing hidden, nothing left over
    for i in range(2):
        assert _copies(tmp_path / "runs", b"people-" + bytes([i])) == []
    assert _copies(tmp_path / "runs", b"people-" + bytes([3])) == [f"{names[3]}/microdata.parquet"]


def test_retention_deletes_the_microdata_objects_only_pruned_releases_used(tmp_path):
    """Issue 52: ``keep_releases`` pruned three months' folders and said so, but their microdata copies stayed in
    ``objects/measure/`` (and ``store --prune-objects`` kept them for an hour). Now the owner-only objects that
    only the pruned releases' manifests name are deleted with them and returned; an object a kept release
    still names stays, public objects stay (for ``--prune-objects``), a forged path is never followed."""
    s = Store(tmp_path)
    names = [f"2026010{i}-000000-{i:04d}" for i in range(1, 5)]
    for i, name in enumerate(names):
        payload = b"people-" + bytes([min(i, 2)])  # the 3rd and 4th release measured the same (a cached re-run)
        with s.writer("measure", payload.hex(), private=True) as w:
            w.file("microdata.parquet").write_bytes(payload)
        public = _write(s, f"pub{i}", b"public-" + bytes([i]))
        stages = {"measure": {"artifact": w.ref.path}, "stage": {"artifact": public.path}}
        if i == 0:
            stages["evil"] = {"artifact": "objects/../private"}
        files = {"microdata.parquet": w.ref.files["microdata.parquet"]}
        manifest = {"released_files": files, "stages": stages, "config": {"name": "x"}}
        s.publish(name, {"microdata.parquet": (w.ref, "microdata.parquet")}, manifest)
    (tmp_path / "private").mkdir(mode=0o700)
    removed = s.prune_releases(1, "x", manifest_release_name)
    assert [p.name for p in removed] == [*names[:3], b"people-\x00".hex(), b"people-\x01".hex()]
    for i in range(2):
        assert _copies(tmp_path, b"people-" + bytes([i])) == []  # no copy anywhere, objects included
    kept = b"people-\x02".hex()  # the 3rd release's object: the kept 4th release names it too
    assert _copies(tmp_path, b"people-\x02") == [
        f"objects/measure/{kept}/microdata.parquet",
        f"runs/{names[3]}/microdata.parquet",
    ]
    assert (tmp_path / "private").is_dir() and len(list((tmp_path / "objects" / "stage").iterdir())) == 4


def test_prune_objects_deletes_secret_derived_objects_now(tmp_path):
    """``store --prune-objects``: an unreferenced object derived from the secret table (owner-only folder)
    is deleted at once, not left in a hidden trash folder; a public one goes to trash as before."""
    s = Store(tmp_path)
    with s.writer("measure", "m", private=True) as w:
        w.file("microdata.parquet").write_bytes(b"people")
    public = _write(s, "pub", b"public")
    past = time.time() - 7200
    for ref in (w.ref, public):
        os.utime(tmp_path / ref.path, (past, past))
    assert sorted(p.name for p in s.prune_objects()) == ["m", "pub"]
    assert _copies(tmp_path, b"people") == []
    assert [p.name.startswith(".pub.trash-") for p in (tmp_path / "objects" / "stage").iterdir()] == [True]


def test_clean_debris_deletes_release_trash_of_any_age(tmp_path):
    """A ``runs/.<name>.trash-*`` folder an older version's retention left (microdata inside) is deleted
    by the next clean_debris however fresh; object trash keeps its grace period."""
    s = Store(tmp_path)
    old_style = tmp_path / "runs" / f".20260101-000000-0001.trash-{int(time.time())}-abcd0123"
    old_style.mkdir(parents=True)
    (old_style / "microdata.parquet").write_bytes(b"people")
    _write(s, "k", b"a")
    with s.writer("stage", "k", force=True) as w:  # replaced: the old folder goes to object trash
        w.file("a.bin").write_bytes(b"b")
    assert s.clean_debris() == [old_style]
    assert _copies(tmp_path, b"people") == [] and _copies(tmp_path / "objects", b"a") != []


def test_keep_releases_never_touches_another_releases_folders(tmp_path):
    """Retention is per release name: two releases share a store; keeping 1 of "a" removes only a's older
    folders and failure records -- b's releases and records, a record naming no release, objects and
    private/ all stay, and runs/latest (pointing at b's) is not moved."""
    s = Store(tmp_path)
    a = [f"2026010{i}-000000-a{i:03d}" for i in range(1, 4)]
    b = [f"2026010{i}-000001-b{i:03d}" for i in range(1, 4)]
    for i, (na, nb) in enumerate(zip(a, b, strict=True)):
        _release(s, na, b"a" + bytes([i]), {"name": "a"})
        _release(s, nb, b"b" + bytes([i]), {"name": "b"})
    _failure(s, "20260101-000000-fa01-failed", "a")
    _failure(s, "20260102-000000-fa02-failed", "a")
    _failure(s, "20260101-000000-fb01-failed", "b")
    _failure(s, "20260101-000000-f001-failed", None)  # an older version's record: names no release
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "store.key").write_bytes(b"k" * 32)
    (tmp_path / "runs" / "latest").symlink_to(b[0])
    objects_before = sorted(p.name for ps in s.object_folders().values() for p in ps)
    removed = s.prune_releases(1, "a", manifest_release_name)
    assert sorted(p.name for p in removed) == sorted([*a[:2], "20260101-000000-fa01-failed"])
    left = sorted(p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
    assert left == sorted(
        [a[2], *b, "20260102-000000-fa02-failed", "20260101-000000-fb01-failed"]
        + ["20260101-000000-f001-failed", "latest"]
    )
    assert os.readlink(tmp_path / "runs" / "latest") == b[0]
    assert sorted(p.name for ps in s.object_folders().values() for p in ps) == objects_before
    assert (tmp_path / "private" / "store.key").read_bytes() == b"k" * 32
    assert s.releases_by_name(manifest_release_name) == {
        "a": [tmp_path / "runs" / a[2]],
        "b": [tmp_path / "runs" / n for n in b],
    }
    # a derived name (no `name` in the config) groups as flows.config.release_name derives it
    _release(s, "20260201-000000-c001", b"c", {"dataset": {"kind": "grid"}, "solve": {"method": "lp"}})
    assert "grid-eps10-lp" in s.releases_by_name(manifest_release_name)
    with pytest.raises(Exception, match="keep_releases"):
        s.prune_releases(0, "a", manifest_release_name)


def test_writer_private_objects_are_0700_0600_until_published(tmp_path):
    """``writer(private=True)`` (objects derived from the secret table): folder 0700, files 0600, also
    when an existing output is kept or an equal one recomputed; the published copies are 0644."""
    s = Store(tmp_path)
    with s.writer("measure", "k", private=True) as w:
        w.file("microdata.parquet").write_bytes(b"secret-derived")
    folder = tmp_path / w.ref.path
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()} == {
        "microdata.parquet": 0o600,
        "ref.json": 0o600,
    }
    assert s.valid_ref("measure", "k") == w.ref
    for force in (False, True):  # kept / recomputed equal: still private
        with s.writer("measure", "k", force=force, private=True) as w2:
            w2.file("microdata.parquet").write_bytes(b"secret-derived")
        assert folder.stat().st_mode & 0o777 == 0o700
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    # an output written before objects were private is made private when a private writer keeps it
    plain = _write(s, "old", b"x")
    with s.writer("stage", "old", private=True) as w3:
        w3.file("a.bin").write_bytes(b"x")
    assert w3.ref == plain and (tmp_path / plain.path).stat().st_mode & 0o777 == 0o700
    run = s.publish("r1", {"microdata.parquet": (w.ref, "microdata.parquet")}, {"x": 1})
    assert (run / "microdata.parquet").stat().st_mode & 0o777 == 0o644
    assert (run / "microdata.parquet").read_bytes() == b"secret-derived"


def test_prune_objects_removes_only_unreferenced_old_objects(tmp_path):
    s = Store(tmp_path)
    used = _write(s, "used", b"u")
    old = _write(s, "old", b"o")
    fresh = _write(s, "fresh", b"f")
    s.publish(
        "20260101-000000-aaaa",
        {"a.bin": (used, "a.bin")},
        {"config": {"name": "x"}, "stages": {"stage": {"artifact": used.path}}},
    )
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "draw.json").write_text("{}")
    past = time.time() - 7200
    for ref in (used, old):
        os.utime(tmp_path / ref.path, (past, past))
    removed = s.prune_objects()
    assert [p.name for p in removed] == ["old"]  # referenced: kept; written in the last hour: kept
    assert s.valid_ref("stage", "used") is not None and s.valid_ref("stage", "fresh") == fresh
    assert s.valid_ref("stage", "old") is None
    assert (tmp_path / "private" / "draw.json").is_file() and (tmp_path / "runs" / "20260101-000000-aaaa").is_dir()


def test_store_command_shows_releases_objects_and_private_part(tmp_path, capsys):
    from flows.cli import main

    s = Store(tmp_path / "st")
    _release(s, "20260101-000000-a001", b"a1", {"name": "a"})
    _release(s, "20260102-000000-a002", b"a2", {"name": "a"})
    _release(s, "20260101-000000-b001", b"b1", {"name": "b"})
    _failure(s, "20260103-000000-fa01-failed", "a")
    (s.root / "private").mkdir()
    (s.root / "private" / "k").write_bytes(b"k" * 32)
    assert main(["store", "--store", str(s.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["releases"]["a"] == {
        "count": 2,
        "newest": "20260102-000000-a002",
        "bytes": out["releases"]["a"]["bytes"],
        "failures": 1,
    }
    assert out["releases"]["b"]["count"] == 1 and out["releases"]["a"]["bytes"] > 0
    assert out["objects"]["stage"]["count"] == 3 and out["private_bytes"] == 32
    assert main(["store", "--store", str(s.root)]) == 0
    text = capsys.readouterr().out
    assert "a " in text and "2 release(s), newest 20260102-000000-a002" in text and "1 failure record(s)" in text
    assert "private part (private/): 32 B" in text and "stage" in text
    assert main(["store", "--store", str(s.root), "--prune-objects", "--json"]) == 0
    # none is referenced (these manifests list no stages), but all were written in the last hour: kept
    assert json.loads(capsys.readouterr().out)["pruned_objects"] == []
