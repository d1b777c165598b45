"""The artifact store: atomic stage outputs, hash verification, concurrent writers."""

from __future__ import annotations

import json
import threading

import pytest

from artifacts.store import Store


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


def test_prune_releases_keeps_the_newest_and_latest(tmp_path):
    s = Store(tmp_path)
    names = [f"2026010{i}-000000-{i:04d}" for i in range(1, 6)]
    for i, name in enumerate(names):
        _release(s, name, bytes([i]) * 4, {})
    (tmp_path / "runs" / "20260101-000000-0009-failed").mkdir()
    (tmp_path / "runs" / "latest").symlink_to(names[0])  # latest points at the oldest (a re-run of it)
    removed = s.prune_releases(2)
    assert sorted(p.name for p in removed) == names[1:3]
    assert [p.name for p in s.releases()] == [names[0], *names[3:]]
    assert s.latest() == tmp_path / "runs" / names[0]
    assert (tmp_path / "runs" / "20260101-000000-0009-failed").is_dir()  # failure records: their own count
    assert s.prune_releases(5) == []
