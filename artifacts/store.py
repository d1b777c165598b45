"""The artifact store: content-addressed stage outputs on the local filesystem.

Layout under the store root (see artifacts/README.md):

  objects/<stage>/<cache_key>/      one directory per computed stage output, immutable once renamed in
      <files>.parquet / .json / .png
      ref.json                      the ArtifactRef: stage, key, files {name: sha256}, schema version
  runs/<run_name>/manifest.json     one folder per flow run: manifest + copies of the released files
  prefect/keys, prefect/results     Prefect's cache-key records and persisted task results
  verified/<key>.json               certificates of released content the door already verified
                                    (mdp_core.audit.VerifiedMemo: keyed by the bytes' sha256s)

A stage writes into ``objects/<stage>/.<key>.tmp-<pid>-<random>/`` and renames the directory onto
``objects/<stage>/<key>/``. Rename is atomic, so a reader sees all of an output or none of it; when
two runs compute the same key concurrently the first rename wins and the loser deletes its copy
(both hold the same bytes: stage outputs are deterministic functions of the key's inputs). Temp and
trash folders left by a killed run (its pid is gone, or older than STALE_SECONDS for folders without
a pid) are deleted by the next writer of the same stage. A release is staged in
``runs/.<run>.tmp-<pid>-<random>/``, checked there (``check``: the door, :mod:`mdp_core.audit`) and
renamed into place only if the check passes. Stored and released files have mode 0644.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mdp_core.files import file_sha256, read_json, write_json

REF_SCHEMA_VERSION = 1
DEFAULT_ROOT = "artifacts/store"
FILE_MODE = 0o644
STALE_SECONDS = 3600.0  # a temp folder without a live owner pid older than this is a leftover


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _stale(path: Path) -> bool:
    """A ``.<name>.tmp-<pid>-<hex>`` / ``.<name>.trash-<pid>-<hex>`` folder whose writer is gone."""
    tail = path.name.rsplit(".tmp-", 1)[-1] if ".tmp-" in path.name else path.name.rsplit(".trash-", 1)[-1]
    pid = tail.split("-", 1)[0]
    if pid.isdigit() and "-" in tail:
        return int(pid) != os.getpid() and not _pid_alive(int(pid))
    try:
        return time.time() - path.stat().st_mtime > STALE_SECONDS
    except FileNotFoundError:
        return False


def clean_stale(folder: Path) -> list[Path]:
    """Delete temp / trash entries left in ``folder`` by killed runs; returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return removed
    for p in entries:
        if p.name.startswith(".") and (".tmp-" in p.name or ".trash-" in p.name) and _stale(p):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


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
        return cls(**d)

    @property
    def content_hash(self) -> str:
        """sha256 over the sorted (file, sha256) pairs: what downstream cache keys depend on.

        Files listed in ``meta["volatile"]`` (run reports holding wall-clock timings, such as
        solve.json and trace.parquet) are left out: they differ between two computations of the
        same result, and nothing downstream depends on their timing fields.
        """
        volatile = set(self.meta.get("volatile", ()))
        return sha256_json(sorted((k, v) for k, v in self.files.items() if k not in volatile))


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


class Store:
    """A store rooted at a directory (created on first use)."""

    def __init__(self, root: str | Path = DEFAULT_ROOT) -> None:
        self.root = Path(root).expanduser().resolve()

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -------------------------------------------------------------- locations
    def object_dir(self, stage: str, key: str) -> Path:
        return self.root / "objects" / stage / key

    def path(self, ref: ArtifactRef, name: str) -> Path:
        return self.root / ref.path / name

    def run_dir(self, run_name: str) -> Path:
        return self.root / "runs" / run_name

    @property
    def prefect_keys(self) -> Path:
        return self.root / "prefect" / "keys"

    @property
    def prefect_results(self) -> Path:
        return self.root / "prefect" / "results"

    @property
    def verified(self) -> Path:
        """The door's memo of verified release content (:class:`mdp_core.audit.VerifiedMemo`)."""
        return self.root / "verified"

    # ------------------------------------------------------------------ reads
    def load_ref(self, stage: str, key: str) -> ArtifactRef | None:
        """The ref stored for (stage, key), or None if absent / unreadable."""
        p = self.object_dir(stage, key) / "ref.json"
        if not p.is_file():
            return None
        try:
            return ArtifactRef.from_dict(read_json(p))
        except Exception:
            return None

    def is_valid(self, ref: ArtifactRef) -> bool:
        """True when every file of ``ref`` exists with its recorded sha256."""
        base = self.root / ref.path
        for name, digest in ref.files.items():
            p = base / name
            if not p.is_file() or file_sha256(p) != digest:
                return False
        return True

    def valid_ref(self, stage: str, key: str) -> ArtifactRef | None:
        ref = self.load_ref(stage, key)
        return ref if ref is not None and self.is_valid(ref) else None

    # ----------------------------------------------------------------- writes
    @contextmanager
    def writer(self, stage: str, key: str, force: bool = False) -> Iterator[ObjectWriter]:
        """Write a stage output: ``with store.writer(stage, key) as w: ...; ref = w.ref``.

        Files go to a private temp directory; on success the directory is renamed into place and
        ``w.ref`` is set. If a valid output for the key appeared meanwhile (a concurrent run computed
        the same inputs), that one is kept and returned, unless ``force`` (a requested recomputation),
        which replaces it. An invalid leftover (deleted or corrupted file) is always replaced.
        """
        final = self.object_dir(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final.parent)  # leftovers of killed runs of this stage
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-{os.getpid()}-", dir=final.parent))
        w = ObjectWriter(self, stage, key, tmp)
        try:
            yield w
            w.finish()
            for _ in range(100):
                existing = None if force else self.valid_ref(stage, key)
                if existing is not None:
                    shutil.rmtree(tmp, ignore_errors=True)
                    w.ref = existing
                    return
                if final.exists():
                    trash = final.with_name(f".{key}.trash-{os.getpid()}-{os.urandom(4).hex()}")
                    try:
                        os.replace(final, trash)
                        shutil.rmtree(trash, ignore_errors=True)
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

        A refused or failed publication leaves nothing under runs/. Files get mode 0644.
        """
        final = self.run_dir(run_name)
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final.parent)
        if final.exists():
            raise FileExistsError(f"release folder {final} already exists")
        tmp = Path(tempfile.mkdtemp(prefix=f".{run_name}.tmp-{os.getpid()}-", dir=final.parent))
        try:
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
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final


class ObjectWriter:
    """Collects the files of one stage output inside its temp directory."""

    def __init__(self, store: Store, stage: str, key: str, tmp: Path) -> None:
        self.store, self.stage, self.key, self.dir = store, stage, key, tmp
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
                os.chmod(p, FILE_MODE)
        os.chmod(self.dir, 0o755)
        self.ref = ref
        return ref
