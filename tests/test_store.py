"""The artifact store: atomic stage outputs, hash verification, concurrent writers."""

from __future__ import annotations

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
