"""The private part of the store: the secret draws that protect individuals, their measurements, and
the privacy budget ledger. Nothing here is ever published; nothing under ``runs/`` comes from here
except the public commitment to a draw.

Layout under ``<store>/private/`` (folders 0700, files 0600, owner only):

  draws/<commitment>/draw.json          the draw: 32 secret bytes from OS entropy (``secrets``), the
                                        table it belongs to (sha256 of the secret microdata, or the
                                        id of a simulated table), when it was made
  draws/<commitment>/<name>.json        measurements made with that draw whose randomness is not a
                                        function of the secret (OpenDP's own secure noise: noisy
                                        counts, the DP prior), kept so a re-run reproduces them
  tables/<table>/<n>                    the table's n-th draw (n = 0, 1, ...): its commitment; the
                                        table's current draw is the highest n. Created exclusively
                                        (``os.link``), so two concurrent first runs agree on one draw
  ledger/<table>/<release>.json         one entry per distinct release of the table (idempotent)

The commitment is ``sha256("mdp-release draw v1" || secret)``: published, it binds the release to its
draw without revealing it (the secret is 256 uniform bits); an auditor handed ``draw.json`` checks it.
Everything the pipeline draws for individuals (simulated individuals, perturbed outputs) comes from
a numpy Generator seeded with the secret (:meth:`Draw.rng`), never from a configured value.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIR_MODE = 0o700
FILE_MODE = 0o600
DOMAIN = b"mdp-release draw v1"
SECRET_BYTES = 32


def commitment(secret: bytes) -> str:
    """Public commitment (64 hex) to a draw's ``secret`` bytes."""
    return hashlib.sha256(DOMAIN + secret).hexdigest()


@dataclass(frozen=True)
class Draw:
    """One secret draw: ``secret`` (32 bytes), its public ``commitment``, the ``table`` it protects
    and its ``index`` among that table's draws (0 = the first)."""

    secret: bytes
    commitment: str
    table: str
    index: int

    def rng(self, purpose: str):  # -> numpy.random.Generator (numpy imported lazily)
        """A numpy Generator for ``purpose`` (e.g. "perturb"), seeded with the secret: the same draw
        gives the same stream, different purposes independent streams."""
        import numpy as np

        words = np.frombuffer(hashlib.sha256(self.secret + purpose.encode()).digest(), dtype=np.uint32)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))

    def tag(self, value: str) -> str:
        """HMAC-SHA256 of ``value`` under the secret (64 hex): a stand-in for a secret value (the
        table's sha256) in cache keys, which reach published manifests, that cannot be confirmed by
        guessing the value."""
        return hmac.new(self.secret, value.encode(), hashlib.sha256).hexdigest()


def _mkdir(path: Path) -> Path:
    """Create ``path`` and the missing folders above it, each 0700."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(p, DIR_MODE)
    return path


def _write_private(path: Path, data: bytes, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` (0600) atomically; ``exclusive``: only if ``path`` does not exist
    (returns False when it does). Returns True when written."""
    _mkdir(path.parent)
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


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, indent=1).encode()


class PrivateStore:
    """``<store>/private/``: secret draws, their measurements and the budget ledger (module docstring)."""

    def __init__(self, store_root: str | Path) -> None:
        self.root = Path(store_root) / "private"

    # ---------------------------------------------------------------------------- draws
    def draw(self, table: str, new: bool = False) -> tuple[Draw, bool]:
        """The current draw of ``table`` (a sha256 hex), made from OS entropy if there is none yet or
        ``new`` (an explicit request for another draw: a second, independent perturbation of the same
        people, whose spend the ledger records). Returns (draw, made_now)."""
        _mkdir(self.root)
        folder = _mkdir(self.root / "tables" / _safe(table))
        while True:
            current = self._latest(folder)
            if current is not None and not new:
                return self.load(current[1]), False
            index = 0 if current is None else current[0] + 1
            secret = secrets.token_bytes(SECRET_BYTES)
            c = commitment(secret)
            record = {
                "secret": secret.hex(),
                "commitment": c,
                "table": table,
                "index": index,
                "created_at": time.time(),
            }
            _write_private(self.root / "draws" / c / "draw.json", _json_bytes(record))
            if _write_private(folder / str(index), c.encode(), exclusive=True):
                return Draw(secret, c, table, index), True
            (self.root / "draws" / c / "draw.json").unlink()  # another run made draw ``index`` first: use it
            (self.root / "draws" / c).rmdir()
            new = False

    @staticmethod
    def _latest(folder: Path) -> tuple[int, str] | None:
        found = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
        if not found:
            return None
        n = max(found)
        return n, (folder / str(n)).read_text(encoding="ascii").strip()

    def load(self, commitment_hex: str) -> Draw:
        """The draw with this public commitment; KeyError (with a clear message) when this store has
        no such draw (the private part of another store, or deleted)."""
        path = self.root / "draws" / _safe(commitment_hex) / "draw.json"
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyError(
                f"draw {commitment_hex[:12]} is not in this store's private part ({self.root}): a release can be "
                "reproduced only from the store that made it"
            ) from None
        secret = bytes.fromhex(rec["secret"])
        if commitment(secret) != commitment_hex:
            raise ValueError(f"{path}: the secret does not match its commitment (the private record was altered)")
        return Draw(secret, commitment_hex, rec["table"], int(rec["index"]))

    def measurement(self, draw: Draw, name: str) -> Any | None:
        """A stored measurement of ``draw`` (JSON value) or None."""
        path = self.root / "draws" / draw.commitment / f"{_safe(name)}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))["value"]
        except FileNotFoundError:
            return None

    def keep_measurement(self, draw: Draw, name: str, value: Any) -> Any:
        """Store ``value`` as measurement ``name`` of ``draw`` unless one exists; returns the stored one
        (a concurrent run's, if it was first: one measurement per draw and name, ever)."""
        path = self.root / "draws" / draw.commitment / f"{_safe(name)}.json"
        if not _write_private(path, _json_bytes({"value": value, "created_at": time.time()}), exclusive=True):
            return self.measurement(draw, name)
        return value

    # ---------------------------------------------------------------------------- ledger
    @contextmanager
    def _ledger_lock(self, table: str) -> Iterator[Path]:
        folder = _mkdir(self.root / "ledger" / _safe(table))
        fd = os.open(folder / ".lock", os.O_CREAT | os.O_RDWR, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield folder
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def entries(self, table: str) -> list[dict[str, Any]]:
        """The table's ledger entries, oldest first."""
        folder = self.root / "ledger" / _safe(table)
        if not folder.is_dir():
            return []
        out = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")]
        return sorted(out, key=lambda e: (e.get("created_at", 0.0), e.get("release", "")))

    def spend(self, table: str, release: str, entry: dict[str, Any], limit: float | None) -> dict[str, Any]:
        """Record ``entry`` (with ``epsilon``: this release's spend) for release id ``release`` of
        ``table`` unless recorded already (a re-run of the same release spends nothing). Refuses
        (ValueError, nothing recorded) when the total would exceed ``limit``. Returns
        {``this_release``, ``total_so_far``, ``releases_so_far``, ``max_total_epsilon``}."""
        with self._ledger_lock(table) as folder:
            path = folder / f"{_safe(release)}.json"
            existing = self.entries(table)
            if not path.exists():
                total = sum(float(e["epsilon"]) for e in existing) + float(entry["epsilon"])
                if limit is not None and total > limit * (1 + 1e-12):
                    raise ValueError(
                        f"release refused: it would bring this table's privacy spend to {total:.6g} "
                        f"(max_total_epsilon = {limit:g}; {len(existing)} earlier release(s) spent "
                        f"{total - float(entry['epsilon']):.6g})"
                    )
                _write_private(path, _json_bytes(entry | {"release": release, "created_at": time.time()}), True)
                existing = self.entries(table)
            mine = next(e for e in existing if e["release"] == release)
            upto = existing[: existing.index(mine) + 1]  # the total when this release was made
            return {
                "this_release": float(mine["epsilon"]),
                "total_so_far": float(sum(float(e["epsilon"]) for e in upto)),
                "releases_so_far": len(upto),
                "max_total_epsilon": limit,
            }


def _safe(name: str) -> str:
    """A hex id used as a path component: refuse anything else (no path can escape the private folder)."""
    if not name or not all(c in "0123456789abcdef" for c in name):
        raise ValueError(f"not a hex id: {name!r}")
    return name


__all__ = ["Draw", "PrivateStore", "commitment"]
