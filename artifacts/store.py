"""The artifact store: content-addressed stage outputs on the local filesystem.

Layout under the store root (see artifacts/README.md):

  objects/<stage>/<cache_key>/      one directory per computed stage output, immutable once renamed in
      <files>.parquet / .json / .png
      ref.json                      the ArtifactRef: stage, key, files {name: sha256}, schema version
  runs/<run_name>/manifest.json     one folder per flow run: manifest + copies of the released files
  prefect/keys, prefect/results     Prefect's cache-key records and persisted task results

A stage writes into ``objects/<stage>/.<key>.tmp-<pid>-<random>/`` and renames the directory onto
``objects/<stage>/<key>/``. Rename is atomic, so a reader sees all of an output or none of it; when
two runs compute the same key concurrently the first rename wins and the loser deletes its copy
(both hold the same bytes: stage outputs are deterministic functions of the key's inputs). A release
is staged in ``runs/.<run>.tmp-<pid>-<random>/``, checked there (``check``: the door,
:mod:`mdp_core.release.audit`) and renamed into place only if the check passes. Stored and released files
have mode 0644, except objects derived from the secret table (``writer(..., private=True)``: the DP
prior, the measure stage's output), whose folder is 0700 and files 0600 until published: the
published copies (:meth:`Store.publish`) are 0644.

Retention is per release name (:meth:`Store.prune_releases`): a release folder belongs to the name of
its manifest's config (``name_of``, given by the caller: :func:`flows.manifest_read.manifest_release_name`), a failure record to its ``record.json``'s
``release``; one release's ``keep_releases`` never touches another's folders. What retention prunes is
deleted before it returns, microdata included (:func:`delete_now`): no hidden copy stays behind.
:meth:`Store.usage` and :meth:`Store.prune_objects` are ``mdp-release store`` (flows/store_cli.py).

Replacing an output (``--refresh``, or an invalid leftover) never deletes a folder another run may be
reading:

* a forced rewrite whose content equals the existing valid output (same :attr:`ArtifactRef.content_hash`:
  every file but the volatile timing reports) keeps the existing folder and its files; only its
  ``ref.json`` is replaced (atomically) to record this computation's ``meta`` (who produced it, when);
* otherwise the old folder is renamed to ``objects/<stage>/.<key>.trash-<unix seconds>-<random>/`` and
  the new one renamed into place right after; the trash folder stays readable (open files and paths
  inside it keep working) and is deleted only once older than ``TRASH_SECONDS``. :meth:`Store.path`
  waits briefly when it finds an object folder missing, which covers the instant between the two renames.

Debris: a temp folder or file (``.<name>.tmp-<pid>-*``) is stale when its pid is gone, one without a
pid (``.<name>.*.tmp``) when older than ``STALE_SECONDS``, a trash entry of ``objects/`` when older than
``TRASH_SECONDS``, one of ``runs/`` (a release an older version's retention moved there, microdata
included) always. :meth:`Store.clean_debris` removes all stale entries of the store in one cheap pass
(call it at the start of a run); each writer also cleans its own stage folder.

The root itself is checked on construction (:func:`check_root`): a store at ``/``, at a home folder, or
inside a system folder is refused, since it would create ``objects/`` and ``runs/`` there.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mdp_core.errors import InputError
from mdp_core.runtime.files import file_sha256, write_json

REF_SCHEMA_VERSION = 1
DEFAULT_ROOT = "artifacts/store"
FILE_MODE = 0o644
PRIVATE_FILE_MODE = 0o600  # files of an object derived from the secret table (writer(private=True))
PRIVATE_DIR_MODE = 0o700  # its folder
STALE_SECONDS = 3600.0  # a temp entry without a pid older than this is a leftover
TRASH_SECONDS = 900.0  # a replaced object folder stays readable this long before it is deleted
_SETTLE_SECONDS = 0.2  # how long Store.path waits for an object folder caught between two renames

# Folders that never hold a store: the filesystem's own trees (the store may not be inside them) ...
SYSTEM_TREES: tuple[str, ...] = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc")
SYSTEM_TREES += ("/run", "/sbin", "/snap", "/sys", "/usr", "/var")
# ... except scratch space below these (a sub-folder, not the folder itself)
SCRATCH = ("/tmp", "/var/tmp")
# ... and folders that may hold a store below them but never are one (shared parents, mount points)
NOT_A_STORE = ("/", "/home", "/mnt", "/media", "/opt", "/srv", "/Users")


def check_root(root: Path) -> Path:
    """``root`` (absolute, symlinks resolved) if it is a sensible store root; InputError otherwise.

    Refused: ``/`` and the shared parents in :data:`NOT_A_STORE`, a home folder itself ($HOME,
    ``/root``, ``/home/<user>``), scratch folders themselves (``/tmp``, ``/var/tmp``), and anything at or
    inside :data:`SYSTEM_TREES` (except below ``/var/tmp``). A store creates ``objects/``, ``runs/``,
    ``prefect/`` and ``private/`` in its root, so these would litter (or, as root, damage) the system.
    """
    here = Path(os.path.realpath(root))
    text = str(here)
    try:
        homes = {os.path.realpath(Path.home())} - {"/"}
    except RuntimeError:  # no $HOME and no passwd entry
        homes = set()

    def inside(top: str) -> bool:
        return text == top or text.startswith(top.rstrip("/") + "/")

    why = None
    if text == "/":
        why = "the filesystem root"
    elif text in homes or text == "/root" or here.parent in (Path("/home"), Path("/Users")):
        why = "a home folder itself"
    elif text in NOT_A_STORE or text in SCRATCH:
        why = "a shared top-level folder"
    elif not any(inside(s) and text != s for s in SCRATCH) and any(inside(t) for t in SYSTEM_TREES):
        why = "inside a system folder"
    if why is not None:
        raise InputError(
            f"refusing the store root {text}: {why}, where a store would write objects/, runs/, prefect/ and "
            'private/; choose a dedicated folder such as ~/mdp-store (store = "...", --store or $MDP_RELEASE_STORE)'
        )
    return here


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2`` (Linux, glibc >= 2.28) or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the directories ``a`` and ``b`` (``renameat2(RENAME_EXCHANGE)``); False when this
    system or file system cannot (the caller then falls back to two renames)."""
    fn = _renameat2()
    if fn is None:
        return False
    return fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _is_debris(name: str) -> bool:
    """A temp or trash name of this store: ``.<x>.tmp-*``, ``.<x>.trash-*`` or ``.<x>.*.tmp`` (atomic_write)."""
    return name.startswith(".") and (".tmp-" in name or ".trash-" in name or name.endswith(".tmp"))


def _stale(path: Path, now: float, trash_seconds: float = TRASH_SECONDS) -> bool:
    """Whether debris entry ``path`` is a leftover (module docstring: the debris rule); a trash entry is
    one once older than ``trash_seconds`` (0: always)."""
    name = path.name
    if ".trash-" in name:
        if trash_seconds <= 0:
            return True
        stamp = name.rsplit(".trash-", 1)[1].split("-", 1)[0]
        if stamp.isdigit():  # the second it became trash (a pid in trash names of older versions: long past)
            return now - int(stamp) > trash_seconds
    elif ".tmp-" in name:
        tail = name.rsplit(".tmp-", 1)[1]
        pid = tail.split("-", 1)[0]
        if pid.isdigit() and "-" in tail:
            return int(pid) != os.getpid() and not _pid_alive(int(pid))
    try:
        return now - path.lstat().st_mtime > STALE_SECONDS
    except FileNotFoundError:
        return False


def clean_stale(folder: Path, trash_seconds: float = TRASH_SECONDS) -> list[Path]:
    """Delete temp / trash entries left in ``folder`` by killed runs or replacements (trash entries once
    older than ``trash_seconds``; 0: all of them); returns what was removed."""
    removed: list[Path] = []
    now = time.time()
    try:
        with os.scandir(folder) as it:
            entries = [Path(e.path) for e in it if _is_debris(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for p in entries:
        if _stale(p, now, trash_seconds):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def delete_now(folder: Path) -> bool:
    """Delete ``folder`` and everything in it before returning: first renamed to a hidden
    ``.<name>.trash-<unix seconds>-<random>`` beside it (it leaves every listing at once, never seen half
    deleted), then removed. False when it was gone already (another process pruned it). OSError, naming
    the folder left behind, when something in it cannot be deleted."""
    trash = folder.with_name(f".{folder.name}.trash-{int(time.time())}-{os.urandom(4).hex()}")
    try:
        os.replace(folder, trash)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise OSError(f"could not delete {folder}: {exc}") from exc
    shutil.rmtree(trash, ignore_errors=True)  # a concurrent clean_debris may delete parts of it meanwhile
    if os.path.lexists(trash):
        try:
            shutil.rmtree(trash)  # what stays: raise its real error
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise OSError(f"could not delete {trash} (was {folder.name}): {exc}; delete it by hand") from exc
    return True


@dataclass(frozen=True)
class ArtifactRef:
    """A pointer to one stage output: where it is and the sha256 of every file in it.

    This, never a DataFrame or array, is what Prefect tasks return and cache.
    """

    stage: str
    key: str
    path: str  # relative to the store root: objects/<stage>/<key>
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256
    schema_version: int = REF_SCHEMA_VERSION
    meta: dict[str, Any] = field(default_factory=dict)  # small JSON facts (seconds, status, ...)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArtifactRef:
        """The ref ``d`` describes (as :meth:`as_dict` writes it); ValueError on any other shape."""
        if not isinstance(d, dict) or set(d) != _REF_FIELDS:
            raise ValueError(f"not an ArtifactRef: keys {sorted(d) if isinstance(d, dict) else type(d).__name__}")
        files, meta = d["files"], d["meta"]
        if not (
            all(isinstance(d[k], str) for k in ("stage", "key", "path"))
            and isinstance(files, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
            and type(d["schema_version"]) is int
            and isinstance(meta, dict)
        ):
            raise ValueError("not an ArtifactRef: a field has the wrong type")
        return cls(d["stage"], d["key"], d["path"], dict(files), d["schema_version"], dict(meta))

    @property
    def content_hash(self) -> str:
        """sha256 over the sorted (file, sha256) pairs: what downstream cache keys depend on.

        Files listed in ``meta["volatile"]`` (run reports holding wall-clock timings, such as
        solve.json and trace.parquet) are left out: they differ between two computations of the
        same result, and nothing downstream depends on their timing fields.
        """
        volatile = set(self.meta.get("volatile", ()))
        return sha256_json(sorted((k, v) for k, v in self.files.items() if k not in volatile))


def _plain_name(name: str) -> bool:
    """A file name without a folder part: no separator, not ``.`` / ``..``, no NUL."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _read_in(folder_fd: int, name: str, digest: bool = False) -> bytes | str | None:
    """Bytes (``digest``: their sha256 hex) of the regular file ``name`` inside the open folder
    ``folder_fd``; None when it is absent, not a plain name, a symlink, a device or a FIFO. Reading
    through the folder's descriptor sees one folder even while it is being swapped away."""
    if not _plain_name(name):
        return None
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder_fd)
    except OSError:  # absent, or a symlink (O_NOFOLLOW: ELOOP)
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if not digest:
            return fh.read()
        h = hashlib.sha256()
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
        return h.hexdigest()


_REF_FIELDS = {"stage", "key", "path", "files", "schema_version", "meta"}


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


class Store:
    """A store rooted at a directory (created on first use)."""

    def __init__(self, root: str | Path = DEFAULT_ROOT) -> None:
        """InputError when ``root`` is ``/``, a home folder or a system folder (:func:`check_root`)."""
        self.root = check_root(Path(root).expanduser().resolve())

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -------------------------------------------------------------- locations
    def object_dir(self, stage: str, key: str) -> Path:
        return self.root / "objects" / stage / key

    def path(self, ref: ArtifactRef, name: str) -> Path:
        """Where file ``name`` of ``ref`` is. If the object folder is missing at this instant (a forced
        rewrite between its two renames) it waits up to ``_SETTLE_SECONDS`` for it to reappear."""
        folder = self.root / ref.path
        if not folder.is_dir():
            self._settle(folder)
        return folder / name

    @staticmethod
    def _replaced(folder: Path) -> bool:
        """Whether object ``folder`` has been replaced recently (a trash entry of its key exists)."""
        return any(folder.parent.glob(f".{folder.name}.trash-*"))

    @classmethod
    def _settle(cls, folder: Path) -> None:
        """Wait (at most ``_SETTLE_SECONDS``) for a missing object folder that is being replaced right now
        (:meth:`_replaced`) to be renamed into place."""
        if folder.is_dir() or not cls._replaced(folder):
            return
        deadline = time.monotonic() + _SETTLE_SECONDS
        while not folder.is_dir() and time.monotonic() < deadline:
            time.sleep(0.005)

    def run_dir(self, run_name: str) -> Path:
        return self.root / "runs" / run_name

    @property
    def prefect_keys(self) -> Path:
        return self.root / "prefect" / "keys"

    @property
    def prefect_results(self) -> Path:
        return self.root / "prefect" / "results"

    # ------------------------------------------------------------------ reads
    def is_private(self, ref: ArtifactRef) -> bool:
        """True when ``ref``'s folder is owner-only: an object derived from the secret table (``writer(...,
        private=True)``), whose descendants are private too (:func:`tasks.common.run_stage`)."""
        try:
            return stat.S_IMODE((self.root / ref.path).stat().st_mode) & 0o077 == 0
        except OSError:
            return False

    def make_private(self, ref: ArtifactRef) -> None:
        """Restrict an existing object to its owner (0700 folder, 0600 files): a cached object now known to
        derive from the secret table."""
        _restrict(self.root / ref.path)

    def load_ref(self, stage: str, key: str) -> ArtifactRef | None:
        """The ref stored for (stage, key), or None if absent / unreadable."""
        return self._checked(self.object_dir(stage, key), None, verify=False)

    def is_valid(self, ref: ArtifactRef) -> bool:
        """True when every file of ``ref`` is a regular file (no symlink) with its recorded sha256."""
        return self._checked(self.root / ref.path, ref, verify=True) is not None

    def valid_ref(self, stage: str, key: str) -> ArtifactRef | None:
        """The stored ref of (stage, key) if it names its own folder and every file checks out, else None.

        ref.json and the files are read through one descriptor of the folder, so a concurrent forced
        rewrite (which swaps the folder) cannot mix the two; a folder missing at that instant is waited
        for (:meth:`_settle`)."""
        ref = self._checked(self.object_dir(stage, key), None, verify=True)
        if ref is None or (ref.stage, ref.key, ref.path) != (stage, key, f"objects/{stage}/{key}"):
            return None
        return ref

    def _checked(self, folder: Path, ref: ArtifactRef | None, verify: bool) -> ArtifactRef | None:
        """``ref`` (None: the folder's own ref.json) if readable and, with ``verify``, every file of it
        hashes to its recorded sha256 -- all read through one open descriptor of ``folder``."""
        self._settle(folder)
        try:
            dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return None
        try:
            if ref is None:
                raw = _read_in(dfd, "ref.json")
                try:
                    ref = ArtifactRef.from_dict(json.loads(raw)) if isinstance(raw, bytes) else None
                except ValueError:
                    return None
            if ref is None or (verify and any(_read_in(dfd, n, True) != d for n, d in ref.files.items())):
                return None
            return ref
        finally:
            os.close(dfd)

    # ----------------------------------------------------------------- writes
    @contextmanager
    def writer(self, stage: str, key: str, force: bool = False, private: bool = False) -> Iterator[ObjectWriter]:
        """Write a stage output: ``with store.writer(stage, key) as w: ...; ref = w.ref``.

        Files go to a private temp directory; on success the directory is renamed into place and
        ``w.ref`` is set. If a valid output for the key exists (a concurrent run computed the same
        inputs), that one is kept and returned -- also when ``force`` (a requested recomputation) and
        the new content equals it. A forced, different output, or a fresh one replacing an invalid
        leftover, is swapped in; the old folder goes to trash (module docstring), never deleted at once.

        ``private``: an object derived from the secret table (the DP prior, the measure output): its
        folder is 0700 and its files 0600 (an existing output kept for the key is made so too), readable
        by the store's owner only until :meth:`publish` copies the released files as 0644.
        """
        final = self.object_dir(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final.parent)  # leftovers of killed runs of this stage
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-{os.getpid()}-", dir=final.parent))
        w = ObjectWriter(self, stage, key, tmp, private)
        try:
            yield w
            new = w.finish()
            for _ in range(100):
                present = final.exists()  # before the check: a folder that appears later is complete and valid
                existing = self.valid_ref(stage, key)
                if existing is not None and force and existing.content_hash == new.content_hash:
                    # recomputed, same content: keep the folder and its files, record this computation's meta
                    w.ref = replace(existing, meta=new.meta)
                    write_json(final / "ref.json", w.ref.as_dict())
                    os.chmod(final / "ref.json", PRIVATE_FILE_MODE if private else FILE_MODE)
                    shutil.rmtree(tmp, ignore_errors=True)
                    if private:
                        _restrict(final)
                    return
                if existing is not None and not force:
                    shutil.rmtree(tmp, ignore_errors=True)
                    w.ref = existing
                    if private:
                        _restrict(final)
                    return
                if present:  # invalid, or forced with different content: swap ours in, the old one to trash
                    trash = final.with_name(f".{key}.trash-{int(time.time())}-{os.urandom(4).hex()}")
                    if _exchange(tmp, final):  # atomic: at no instant is there no final folder
                        os.replace(tmp, trash)  # tmp now holds the old output
                        return
                    try:
                        os.replace(final, trash)
                    except FileNotFoundError:
                        pass
                try:
                    os.replace(tmp, final)
                    return
                except OSError:  # another writer renamed its copy in first: look again
                    force = False
                    time.sleep(0.01)
            raise RuntimeError(f"could not publish {stage}/{key}: the target kept changing")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            for empty in (final.parent, final.parent.parent):  # no empty objects/<stage>/ folders left behind
                try:
                    empty.rmdir()
                except OSError:
                    break
            raise

    def clean_debris(self) -> list[Path]:
        """Remove stale temp and trash entries (module docstring: the debris rule) from every
        ``objects/<stage>/``, ``runs/`` (every trash entry there, whatever its age: a pruned release) and
        the run folders in it, and ``private/`` with all its sub-folders. One directory scan per folder, a
        stat only per debris entry: a few ms on a store with hundreds of objects, so a run calls it at its
        start. Returns the removed paths."""
        removed = clean_stale(self.root / "runs", trash_seconds=0)
        folders: list[Path] = []
        for top in (self.root / "objects", self.root / "runs"):
            try:
                with os.scandir(top) as it:
                    folders += [Path(e.path) for e in it if e.is_dir(follow_symlinks=False) and not _is_debris(e.name)]
            except (FileNotFoundError, NotADirectoryError):
                pass
        private = self.root / "private"
        if private.is_dir():
            folders += [Path(d) for d, _, _ in os.walk(private)]
        for folder in folders:
            removed += clean_stale(folder)
        return removed

    def publish(
        self,
        run_name: str,
        refs: dict[str, tuple[ArtifactRef, str]],
        manifest: dict[str, Any],
        check: Callable[[Path], None] | None = None,
    ) -> Path:
        """Publish a release: copy the released files (``{name in the run: (ref, file)}``; names may
        contain one sub-folder, e.g. ``instance/edges.parquet``) and manifest.json into a staging
        folder, call ``check(staged_dir)`` (it raises to refuse), then rename it to runs/<run_name>/.

        A refused or failed publication leaves nothing under runs/. Files get mode 0644 (also the copies of
        a private object's files: publication is what makes them public).
        """
        final = self.run_dir(run_name)
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final.parent)
        if final.exists():
            raise FileExistsError(f"release folder {final} already exists")
        prefix = f".{run_name}.tmp-{os.getpid()}-"
        try:  # the folder is made inside the try: Prefect's task timeout raises asynchronously, anywhere
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
            for out_name, (ref, name) in refs.items():
                dst = tmp / out_name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.path(ref, name), dst)
            write_json(tmp / "manifest.json", manifest)
            for p in tmp.rglob("*"):
                os.chmod(p, 0o755 if p.is_dir() else FILE_MODE)
            os.chmod(tmp, 0o755)
            if check is not None:
                check(tmp)
            os.replace(tmp, final)
        except BaseException:
            for staged in final.parent.glob(glob.escape(prefix) + "*"):  # run names are unique: ours only
                shutil.rmtree(staged, ignore_errors=True)
            raise
        return final

    # --------------------------------------------------------------- releases
    def releases(self) -> list[Path]:
        """The published release folders under ``runs/`` (those holding a manifest.json), oldest first:
        by name, which starts with the UTC time of the run. Not ``latest``, failure records or debris."""
        runs = self.root / "runs"
        try:
            with os.scandir(runs) as it:
                names = [e.name for e in it if e.is_dir(follow_symlinks=False) and not _is_debris(e.name)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [runs / n for n in sorted(names) if not n.endswith("-failed") and (runs / n / "manifest.json").is_file()]

    def latest(self) -> Path | None:
        """The release folder ``runs/latest`` points to, or None."""
        link = self.root / "runs" / "latest"
        try:
            target = link.parent / os.readlink(link)
        except OSError:
            return None
        return target if target.is_dir() else None

    def same_release(
        self, released: dict[str, str], match: Callable[[dict[str, Any]], bool] = lambda manifest: True
    ) -> Path | None:
        """A published release with exactly these released files ({name: sha256}), whose manifest
        satisfies ``match`` (e.g. the same config) and whose files still hash to what it lists; None when
        there is none. ``runs/latest`` is looked at first, then the others, newest first."""
        latest = self.latest()
        folders = self.releases()[::-1]
        for folder in ([latest] if latest is not None else []) + [f for f in folders if f != latest]:
            try:
                other = json.loads((folder / "manifest.json").read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(other, dict) or other.get("released_files") != released:
                continue
            if not match(other) or any(
                file_sha256(folder / name) != digest if (folder / name).is_file() else True
                for name, digest in released.items()
            ):
                continue
            return folder
        return None

    def failure_records(self) -> list[Path]:
        """The failure records under ``runs/`` (``<time>-<id8>-failed/``), oldest first."""
        runs = self.root / "runs"
        return sorted(p for p in runs.glob("*-failed") if p.is_dir() and not p.is_symlink())

    @staticmethod
    def failure_release(folder: Path) -> str | None:
        """The release name a failure record belongs to (its ``record.json``), None when it does not say."""
        try:
            rec = json.loads((folder / "record.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        name = rec.get("release") if isinstance(rec, dict) else None
        return name if isinstance(name, str) else None

    def releases_by_name(self, name_of: NameOf) -> dict[str, list[Path]]:
        """The release folders (:meth:`releases`, oldest first) grouped by release name: the name of each
        manifest's config (``name_of``: :func:`flows.manifest_read.manifest_release_name` in the pipeline); a folder whose
        manifest names none is under ``"?"``."""
        groups: dict[str, list[Path]] = {}
        for folder in self.releases():
            m = _read_manifest(folder)
            groups.setdefault((name_of(m) if m is not None else None) or "?", []).append(folder)
        return groups

    def prune_releases(self, keep: int, name: str, name_of: NameOf) -> list[Path]:
        """Keep the newest ``keep`` release folders of release ``name`` (and the one ``runs/latest`` points
        to) and as many of its failure records; its older ones are deleted now, microdata included
        (:func:`delete_now`: no hidden copy stays; OSError naming a folder that could not be deleted).
        Nothing else is touched: another release's folders and records, records that name no release
        (older versions), public objects, ``private/``, and ``runs/latest`` itself. Returns the folders deleted
        (its release folders, then its failure records, oldest first): what the caller reports -- then the objects
        derived from the secret table that only the deleted releases used (:meth:`_drop_private_objects`: their
        microdata's copy in ``objects/measure/``, deleted now too)."""
        if keep < 1:
            raise InputError(f"keep_releases must be >= 1, got {keep}")
        latest = self.latest()
        mine = self.releases_by_name(name_of).get(name, [])
        failed = [f for f in self.failure_records() if self.failure_release(f) == name]
        removed: list[Path] = []
        used: set[str] = set()  # the objects the deleted releases' manifests name
        for group in (mine, failed):
            for folder in group[: max(len(group) - keep, 0)]:
                if latest is not None and folder.resolve() == latest.resolve():
                    continue
                refs = _stage_artifacts(_read_manifest(folder))
                if delete_now(folder):
                    removed.append(folder)
                    used |= refs
        return removed + self._drop_private_objects(used - self.referenced_objects())

    def _drop_private_objects(self, refs: set[str]) -> list[Path]:
        """Delete now (:func:`delete_now`) the objects ``refs`` (``objects/<stage>/<key>``) that are derived from
        the secret table (owner-only folders: the microdata of ``measure``, the DP prior): what a pruned release
        measured leaves the store with it (issue 52); public objects stay for :meth:`prune_objects`. Returns
        the folders deleted."""
        removed: list[Path] = []
        for ref in sorted(refs):
            parts = ref.split("/")
            if len(parts) != 3 or any(x in ("", ".", "..") or _is_debris(x) for x in parts):  # a forged manifest
                continue
            folder = self.root / ref
            try:
                private = stat.S_IMODE(folder.lstat().st_mode) & 0o077 == 0
            except FileNotFoundError:
                continue
            if private and folder.is_dir() and delete_now(folder):
                removed.append(folder)
        return removed

    # ------------------------------------------------------------- housekeeping
    def usage(self, name_of: NameOf) -> dict[str, Any]:
        """What the store holds (``mdp-release store``): per release name its release folders (``count``,
        ``newest`` folder name, ``bytes``) and failure records (``failures``); per stage its objects
        (``count``, ``bytes``); the bytes of ``private/`` and ``prefect/`` (Prefect's cache records)."""
        releases: dict[str, dict[str, Any]] = {}
        for name, folders in self.releases_by_name(name_of).items():
            releases[name] = {
                "count": len(folders),
                "newest": folders[-1].name,
                "bytes": sum(tree_bytes(f) for f in folders),
                "failures": 0,
            }
        for folder in self.failure_records():
            name = self.failure_release(folder) or "?"
            entry = releases.setdefault(name, {"count": 0, "newest": None, "bytes": 0, "failures": 0})
            entry["failures"] += 1
        objects: dict[str, dict[str, int]] = {}
        for stage, folders in sorted(self.object_folders().items()):
            objects[stage] = {"count": len(folders), "bytes": sum(tree_bytes(f) for f in folders)}
        latest = self.latest()
        return {
            "root": str(self.root),
            "releases": dict(sorted(releases.items())),
            "latest": latest.name if latest is not None else None,
            "objects": objects,
            "private_bytes": tree_bytes(self.root / "private"),
            "prefect_bytes": tree_bytes(self.root / "prefect"),
        }

    def object_folders(self) -> dict[str, list[Path]]:
        """Every object folder, per stage (no debris)."""
        out: dict[str, list[Path]] = {}
        top = self.root / "objects"
        try:
            stages = [Path(e.path) for e in os.scandir(top) if e.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return out
        for stage in stages:
            if _is_debris(stage.name):
                continue
            with os.scandir(stage) as it:
                out[stage.name] = sorted(
                    Path(e.path) for e in it if e.is_dir(follow_symlinks=False) and not _is_debris(e.name)
                )
        return out

    def referenced_objects(self) -> set[str]:
        """``objects/<stage>/<key>`` of every stage entry (``artifact``) of every release's manifest."""
        refs: set[str] = set()
        for folder in self.releases():
            refs |= _stage_artifacts(_read_manifest(folder))
        return refs

    def prune_objects(self, min_age: float = STALE_SECONDS) -> list[Path]:
        """Remove the objects no release's manifest references (:meth:`referenced_objects`): each is
        renamed to trash (a reader keeps working; a later run that wanted it as a cache hit recomputes
        it) and deleted by :meth:`clean_debris` once stale -- except an object derived from the secret
        table (an owner-only folder: the microdata, the DP prior), deleted now (:func:`delete_now`). Objects
        written less than ``min_age`` seconds ago are kept (a run in progress has not published its
        manifest yet). Never touches ``runs/``, ``private/`` or ``prefect/``. Returns the object folders
        removed."""
        keep = self.referenced_objects()
        now = time.time()
        removed: list[Path] = []
        for stage, folders in self.object_folders().items():
            for folder in folders:
                if f"objects/{stage}/{folder.name}" in keep:
                    continue
                try:
                    st = folder.lstat()
                except FileNotFoundError:
                    continue
                if now - st.st_mtime < min_age:
                    continue
                if stat.S_IMODE(st.st_mode) & 0o077 == 0:  # private (Store.is_private): no hidden copy
                    if delete_now(folder):
                        removed.append(folder)
                    continue
                try:
                    os.replace(folder, folder.with_name(f".{folder.name}.trash-{int(now)}-{os.urandom(4).hex()}"))
                except OSError:
                    continue
                removed.append(folder)
        return removed


NameOf = Callable[[dict[str, Any]], str | None]  # a manifest -> its release name


class ObjectWriter:
    """Collects the files of one stage output inside its temp directory."""

    def __init__(self, store: Store, stage: str, key: str, tmp: Path, private: bool = False) -> None:
        self.store, self.stage, self.key, self.dir = store, stage, key, tmp
        self.private = private  # 0700 / 0600 (derived from the secret table) instead of 0755 / 0644
        self.meta: dict[str, Any] = {}
        self.ref: ArtifactRef | None = None

    @property
    def ref_path(self) -> str:
        """Where the output will live once renamed (relative to the store root)."""
        return f"objects/{self.stage}/{self.key}"

    def file(self, name: str) -> Path:
        """Path to write ``name`` to (inside the temp directory)."""
        return self.dir / name

    def finish(self) -> ArtifactRef:
        files = {
            p.name: file_sha256(p)
            for p in sorted(self.dir.iterdir())
            if p.is_file() and p.name != "ref.json" and not p.name.startswith(".")
        }
        ref = ArtifactRef(self.stage, self.key, self.ref_path, files, REF_SCHEMA_VERSION, self.meta)
        write_json(self.dir / "ref.json", ref.as_dict())
        for p in self.dir.iterdir():
            if p.is_file():
                os.chmod(p, PRIVATE_FILE_MODE if self.private else FILE_MODE)
        os.chmod(self.dir, PRIVATE_DIR_MODE if self.private else 0o755)
        self.ref = ref
        return ref


def _restrict(folder: Path) -> None:
    """Make an object folder private: the folder 0700, its regular files 0600 (symlinks untouched)."""
    try:
        for p in folder.iterdir():
            if p.is_file() and not p.is_symlink():
                os.chmod(p, PRIVATE_FILE_MODE)
        os.chmod(folder, PRIVATE_DIR_MODE)
    except OSError:
        pass


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed; 0 when absent)."""
    total = 0
    if path.is_file() and not path.is_symlink():
        return path.lstat().st_size
    for folder, _, names in os.walk(path):
        for n in names:
            try:
                st = os.lstat(os.path.join(folder, n))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def _stage_artifacts(manifest: dict[str, Any] | None) -> set[str]:
    """``objects/<stage>/<key>`` of every stage entry (``artifact``) of ``manifest`` (none: empty)."""
    stages = manifest.get("stages") if manifest is not None else None
    if not isinstance(stages, dict):
        return set()
    arts = (entry.get("artifact") if isinstance(entry, dict) else None for entry in stages.values())
    return {a for a in arts if isinstance(a, str) and a.startswith("objects/")}


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None
