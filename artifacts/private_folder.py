"""The private folder ``<store>/private/`` that the private rooms share (:mod:`artifacts.draws`,
:mod:`artifacts.ledger`, :mod:`artifacts.tables`; :class:`artifacts.private.PrivateStore` composes them):
its modes (folders 0700, files 0600, owner only, no symlinks: checked and repaired every time it is
opened), its atomic private writes, its MAC key (``store.key``), population names, and the error for a
private part that cannot be trusted."""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from mdp_core.errors import InputError, PrivacyError

DIR_MODE = 0o700
FILE_MODE = 0o600
KEY_BYTES = 32
POPULATION_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ENTRY_NAME = re.compile(r"^[0-9]{8}\.json$")
NEW_BUDGET_HINT = "mdp-release ledger new-budget --population {pop} --cap X --by WHO --why TEXT"


class LedgerError(PrivacyError):
    """A population's ledger cannot be trusted: an entry edited, inserted, reordered or deleted, a MAC
    that does not verify, a rollback or removal revealed by published heads, a missing store key."""


def check_population(name: str) -> str:
    """``name`` if it is a population name (``^[a-z0-9][a-z0-9._-]{0,62}$``: no path can escape the
    private folder), else InputError."""
    if not isinstance(name, str) or not POPULATION_PATTERN.match(name):
        raise InputError(
            f"population {name!r} is not a valid name: 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )
    return name


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON (sorted keys, no whitespace, no NaN): the bytes an entry's hash is taken of."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def json_bytes(obj: Any) -> bytes:
    """Readable JSON (sorted keys, indented, no NaN): the bytes of a private record."""
    return json.dumps(obj, sort_keys=True, indent=1, allow_nan=False).encode()


def mkdir_private(path: Path) -> Path:
    """Create ``path`` and the missing folders above it, each 0700."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(p, DIR_MODE)
    return path


def write_private(path: Path, data: bytes, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` (0600) atomically; ``exclusive``: only if ``path`` does not exist
    (returns False when it does). Returns True when written."""
    mkdir_private(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        os.replace(tmp, path)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def hex_id(name: str) -> str:
    """A hex id used as a path component: refuse anything else (no path can escape the private folder)."""
    if not name or not all(c in "0123456789abcdef" for c in name):
        raise InputError(f"not a hex id: {name[:80]!r}")
    return name


class PrivateFolder:
    """``<store>/private/``: its root, modes and key. The rooms (draws, ledger, tables) subclass it."""

    def __init__(self, store_root: str | Path) -> None:
        self.store_root = Path(store_root)
        self.root = self.store_root / "private"
        self._check_permissions()

    # ------------------------------------------------------------------------ permissions
    def _check_permissions(self) -> None:
        """Repair the modes under ``private/`` (folders 0700, files 0600); PrivacyError for a symlink,
        a special file, or a mode that cannot be repaired (another owner)."""
        try:
            st = self.root.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise PrivacyError(f"{self.root} is not a folder (a symlink or a file): refusing to use it")
        self._repair(self.root, st, DIR_MODE)
        for folder, dirs, files in os.walk(self.root, followlinks=False):
            for name in dirs + files:
                path = Path(folder) / name
                try:
                    st = path.lstat()
                except FileNotFoundError:  # a concurrent writer's temp file, renamed meanwhile
                    continue
                if stat.S_ISLNK(st.st_mode):
                    raise PrivacyError(
                        f"{path} is a symlink: the private store must hold only its own files; remove it"
                    )
                if stat.S_ISDIR(st.st_mode):
                    self._repair(path, st, DIR_MODE)
                elif stat.S_ISREG(st.st_mode):
                    self._repair(path, st, FILE_MODE)
                else:
                    raise PrivacyError(f"{path} is not a regular file or folder: refusing to use the private store")

    @staticmethod
    def _repair(path: Path, st: os.stat_result, mode: int) -> None:
        if stat.S_IMODE(st.st_mode) == mode and st.st_uid == os.getuid():
            return
        if st.st_uid != os.getuid():
            raise PrivacyError(f"{path} belongs to another user (uid {st.st_uid}): the private store must be ours")
        try:
            os.chmod(path, mode, follow_symlinks=False)
        except (OSError, NotImplementedError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not supported"
            raise PrivacyError(f"{path}: cannot restrict its permissions to {mode:o} ({why})") from None

    def _pop_dir(self, population: str) -> Path:
        return self.root / "populations" / check_population(population)

    def _key(self, create: bool = False) -> bytes:
        """The store key. Made (exclusively, from ``secrets``) when missing and no ledger exists yet, or
        when ``create`` (a new budget being started); otherwise a missing key is a LedgerError."""
        path = self.root / "store.key"
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            if not create and any(self._has_ledger(p) for p in self.populations()):
                raise LedgerError(
                    f"{path} is missing but ledgers exist: no entry can be verified; start a new budget for each "
                    f"population ({NEW_BUDGET_HINT.format(pop='P')})"
                ) from None
            write_private(path, secrets.token_bytes(KEY_BYTES), exclusive=True)
            key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise LedgerError(f"{path} is not a {KEY_BYTES}-byte key: the ledgers cannot be verified")
        return key

    def _has_ledger(self, population: str) -> bool:
        folder = self._pop_dir(population) / "ledger"
        return folder.is_dir() and any(ENTRY_NAME.match(p.name) for p in folder.iterdir())

    def populations(self) -> list[str]:
        """Populations with a folder in this store (draws or a ledger), sorted."""
        folder = self.root / "populations"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and POPULATION_PATTERN.match(p.name))
