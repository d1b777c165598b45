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
    assert list(stage_dir.iterdir()) == []


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


def test_forced_write_replaces_a_valid_output(tmp_path):
    s = Store(tmp_path)
    first = _write(s, "k", b"same")
    with s.writer("stage", "k", force=True) as w:
        w.file("a.bin").write_bytes(b"same")
        w.meta["n"] = -1
    assert w.ref.meta["n"] == -1 and s.valid_ref("stage", "k").meta["n"] == -1
    with s.writer("stage", "k") as w2:  # not forced: the existing valid output is kept
        w2.file("a.bin").write_bytes(b"same")
        w2.meta["n"] = -2
    assert w2.ref.meta["n"] == -1 and first.files == w2.ref.files
