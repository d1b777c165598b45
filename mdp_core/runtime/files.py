"""File helpers that need no numerical library: atomic writes, deterministic JSON, sha256 of a file, and the
one exclusive ``flock`` every single-writer section of the store holds (:func:`exclusive_lock`).

Split from :mod:`mdp_core.problem.io` (which re-exports them) so the artifact store, the release flow and the
publication check can use them without importing numpy, pandas and pyarrow: a fully cached
``mdp-release run`` never needs those.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mdp_core.errors import InputError


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a unique temp file beside ``path``, fsync it, then rename onto ``path``.

    Readers never see a half-written file; concurrent writers of the same path each rename a
    complete file (last one wins). The temp file is removed if ``write`` raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    """Deterministic JSON (sorted keys, 2-space indent, trailing newline), written atomically."""
    text = json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def read_json(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable JSON ({exc})") from None


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def exclusive_lock(path: str | Path, *, folder: bool = False, mode: int = 0o600) -> Iterator[Path]:
    """Hold an exclusive ``flock`` of ``path`` for the ``with`` block; yields ``path``.

    Blocking: a second holder -- another process, or another open of the same path in this one -- waits until
    the first leaves the block. Released (unlocked, then closed) on exit, also when the block raises; the kernel
    releases it too when the holder dies. Advisory: it excludes only the code that takes it.

    ``path``: a lock file (its folder must exist), created with ``mode`` (default 0600: owner only) if missing,
    left in place after, and never opened through a symbolic link; or, with ``folder=True``, an existing folder,
    locked itself, nothing created (for a folder whose files are all published). An ``OSError`` of the same kind
    (same ``errno``) naming ``path`` and saying what could not be done when it cannot be opened.
    """
    path = Path(path)
    flags = os.O_RDONLY | os.O_DIRECTORY if folder else os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        kind = "folder" if folder else "lock file"
        why = "a symbolic link, refused" if exc.errno == errno.ELOOP and not folder else exc.strerror
        raise OSError(exc.errno, f"cannot open this {kind} to lock it ({why})", str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
