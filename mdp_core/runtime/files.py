"""File helpers that need no numerical library: atomic writes, deterministic JSON, sha256 of a file.

Split from :mod:`mdp_core.problem.io` (which re-exports them) so the artifact store, the release flow and the
publication check can use them without importing numpy, pandas and pyarrow: a fully cached
``mdp-release run`` never needs those.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
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
