"""The secret draws that protect individuals, and the measurements kept with them (a room of the private part:
:class:`artifacts.private.PrivateStore`).

Layout under ``<store>/private/``:

  draws/<commitment>/draw.json               a draw: 32 secret bytes from OS entropy, its population,
                                             the table version (sha256 of its sealed rows), its index
  draws/<commitment>/<name>.json             measurements kept with the draw (OpenDP's noisy counts,
                                             the DP prior), so a re-run reproduces them
  populations/<pop>/versions/<version>/<n>   the commitment of the version's n-th draw (n = 0, 1, ...;
                                             the current draw is the highest n), created exclusively
                                             (``os.link``): two concurrent first runs agree on one draw

The commitment is ``sha256("mdp-release draw v1" || secret)``: published, it binds the release to its
draw without revealing it (the secret is 256 uniform bits); an auditor handed ``draw.json`` checks it.
Everything the pipeline draws for individuals comes from a numpy Generator seeded with the secret
(:meth:`Draw.rng`), never from a configured value. A population's rename (:meth:`Draws.move_draws`) moves its
versions' folder and rewrites each draw record's population; the secret and its commitment stay.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from artifacts.private_folder import (
    LedgerError,
    PrivateFolder,
    check_population,
    hex_id,
    json_bytes,
    mkdir_private,
    write_private,
)
from mdp_core.errors import InputError

if TYPE_CHECKING:
    import numpy as np

DOMAIN = b"mdp-release draw v1"
SECRET_BYTES = 32


def commitment(secret: bytes) -> str:
    """Public commitment (64 hex) to a draw's ``secret`` bytes."""
    return hashlib.sha256(DOMAIN + secret).hexdigest()


_commitment_of = commitment  # :meth:`PrivateStore.load` names its argument ``commitment``


@dataclass(frozen=True)
class Draw:
    """One secret draw: ``secret`` (32 bytes), its public ``commitment`` (64 hex), the ``population``
    it protects, the table ``version`` it belongs to (sha256 of its sealed rows: private, never
    published) and its ``index`` among that version's draws (0 = the first)."""

    secret: bytes
    commitment: str
    population: str
    version: str
    index: int

    def rng(self, purpose: str) -> np.random.Generator:
        """A numpy Generator for ``purpose`` (e.g. "perturb"), seeded with the secret: the same draw
        gives the same stream, different purposes independent streams."""
        import numpy as np  # lazily: a cache hit never pays for numpy

        words = np.frombuffer(hashlib.sha256(self.secret + purpose.encode()).digest(), dtype=np.uint32)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))

    def tag(self, value: str) -> str:
        """HMAC-SHA256 of ``value`` under the secret (64 hex): a stand-in for a secret value (the
        table's sha256) in cache keys, which reach published manifests, that cannot be confirmed by
        guessing the value."""
        return hmac.new(self.secret, value.encode(), hashlib.sha256).hexdigest()


class Draws(PrivateFolder):
    """The draws of ``<store>/private/`` (module docstring: layout, commitments)."""

    def draw(self, population: str, version: str, new: bool = False) -> tuple[Draw, bool]:
        """The current draw of ``version`` (sha256 hex of the sealed rows) of ``population``, made from
        OS entropy if there is none yet or ``new`` (an explicit request for another, independent draw of
        the same people: its measurements are charged to the ledger like any other). Returns
        (draw, made_now)."""
        check_population(population)
        folder = mkdir_private(self.root / "populations" / population / "versions" / hex_id(version))
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
                "population": population,
                "version": version,
                "index": index,
                "created_at": time.time(),
            }
            write_private(self.root / "draws" / c / "draw.json", json_bytes(record))
            if write_private(folder / str(index), c.encode(), exclusive=True):
                return Draw(secret, c, population, version, index), True
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

    def load(self, commitment: str) -> Draw:
        """The draw with this public commitment; KeyError (with a clear message) when this store has
        no such draw (the private part of another store, or deleted); LedgerError when its record does
        not match its commitment."""
        path = self.root / "draws" / hex_id(commitment) / "draw.json"
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyError(
                f"draw {commitment[:12]} is not in this store's private part ({self.root}): a release can be "
                "reproduced only from the store that made it"
            ) from None
        secret = bytes.fromhex(rec["secret"])
        if not hmac.compare_digest(_commitment_of(secret), commitment):
            raise LedgerError(f"{path}: the secret does not match its commitment (the private record was altered)")
        # records of older versions name the table's sha256 ``table`` and have no population
        return Draw(
            secret,
            commitment,
            str(rec.get("population", "")),
            str(rec.get("version", rec.get("table"))),
            int(rec["index"]),
        )

    def measurement(self, draw: Draw, name: str) -> Any | None:
        """A stored measurement of ``draw`` (JSON value) or None."""
        path = self.root / "draws" / hex_id(draw.commitment) / f"{hex_id(name)}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))["value"]
        except FileNotFoundError:
            return None

    def keep_measurement(self, draw: Draw, name: str, value: Any) -> Any:
        """Store ``value`` as measurement ``name`` of ``draw`` unless one exists; returns the stored one
        (a concurrent run's, if it was first: one measurement per draw and name, ever)."""
        path = self.root / "draws" / hex_id(draw.commitment) / f"{hex_id(name)}.json"
        if not write_private(path, json_bytes({"value": value, "created_at": time.time()}), exclusive=True):
            return self.measurement(draw, name)
        return value

    def move_draws(self, old: str, new: str) -> int:
        """Move ``old``'s table versions and their draws to the population ``new`` (a ledger rename): the folder
        ``populations/<old>/versions`` becomes ``new``'s (refused when ``new`` has versions of its own) and every
        draw record under it names ``new``. Idempotent (a second call finishes an interrupted one). Returns the
        number of draw records now naming ``new``."""
        src = self.root / "populations" / check_population(old) / "versions"
        dst = self.root / "populations" / check_population(new) / "versions"
        if src.is_dir():
            if dst.exists():
                raise InputError(f"population {new!r} already has draws of its own: a rename needs a name of its own")
            mkdir_private(dst.parent)
            os.rename(src, dst)
        n = 0
        for pointer in sorted(dst.glob("*/*")) if dst.is_dir() else []:
            if not pointer.name.isdigit():
                continue
            path = self.root / "draws" / hex_id(pointer.read_text(encoding="ascii").strip()) / "draw.json"
            rec = json.loads(path.read_text(encoding="utf-8"))
            if rec.get("population") != new:
                write_private(path, json_bytes(rec | {"population": new}))
            n += 1
        return n
