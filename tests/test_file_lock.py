"""The one exclusive lock of the store (:func:`mdp_core.runtime.files.exclusive_lock`): the ledger, the tables'
sketches, the policy envelopes and a release folder's approvals.json are each written under it. Two real
processes contend for it; the kernel's own table of locks (``/proc/locks``) shows the second one waiting."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mdp_core.runtime.files import exclusive_lock

CHILD = """
import sys
from pathlib import Path
from mdp_core.runtime.files import exclusive_lock
with exclusive_lock(sys.argv[1], folder=sys.argv[2] == "folder"):
    Path(sys.argv[3]).write_text("held", encoding="utf-8")
"""


def _wait_until_blocked(child: subprocess.Popen, inode: int) -> None:
    """Return once ``/proc/locks`` lists ``child`` waiting (``->``) for a flock of ``inode``; fail if it ends first."""
    deadline = time.monotonic() + 120  # a bound on a hang, not a measurement
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            words = line.split()
            if "->" in words and str(child.pid) in words and words[-3].endswith(f":{inode}"):
                return
        assert child.poll() is None, "the second process finished while the first held the lock"
        time.sleep(0.01)
    pytest.fail("the second process never waited for the lock")


@pytest.mark.skipif(not Path("/proc/locks").is_file(), reason="needs Linux's /proc/locks")
@pytest.mark.parametrize("folder", [False, True], ids=["lock-file", "folder"])
def test_second_process_waits_until_the_first_leaves(tmp_path: Path, folder: bool):
    path = tmp_path / "release" if folder else tmp_path / ".lock"
    if folder:
        path.mkdir()
    got = tmp_path / "got"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with exclusive_lock(path, folder=folder) as held:
        assert held == path
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), "folder" if folder else "file", str(got)], env=env
        )
        try:
            _wait_until_blocked(child, path.stat().st_ino)
            assert not got.exists()
        except BaseException:
            child.kill()
            raise
    assert child.wait(timeout=120) == 0
    assert got.read_text(encoding="utf-8") == "held"
    if not folder:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # created owner-only, left in place
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "got"])  # no file beside a folder


def test_released_when_the_block_raises(tmp_path: Path):
    path = tmp_path / ".lock"
    with pytest.raises(RuntimeError, match="inside"), exclusive_lock(path):
        raise RuntimeError("inside")
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again: would raise BlockingIOError if still held
    finally:
        os.close(fd)


def test_a_symlinked_lock_file_is_refused(tmp_path: Path):
    target = tmp_path / "elsewhere"
    link = tmp_path / ".lock"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link, refused") as caught, exclusive_lock(link):
        pytest.fail("the lock was taken through a symbolic link")
    assert caught.value.filename == str(link)
    assert not target.exists()  # nothing created where the link points


def test_a_missing_folder_is_a_clear_error(tmp_path: Path):
    with (
        pytest.raises(FileNotFoundError, match="cannot open this folder to lock it"),
        exclusive_lock(tmp_path / "absent", folder=True),
    ):
        pytest.fail("a missing folder was locked")
