"""Table ownership (a room of the private part: :class:`artifacts.private.PrivateStore`): the secret table as
the privacy door sealed it, its path behind a flow run's public handle, and each population's keyed sketch of
its people, by which a table is claimed as a version of one population's (the door's rule 6).

Layout under ``<store>/private/``:

  tables/<HMAC(key, pop)>.json               the population's keyed sketch of its people (Bloom filters
                                             of HMAC tags: :mod:`mdp_core.release.similarity`), merged
                                             over its versions under ``tables/.lock``: the door's rule 6
  sealed/<sha256>.parquet                    the secret table as the privacy door read it (canonical rows:
                                             :func:`mdp_core.problem.microdata.sealed_rows`), named by their
                                             sha256 (the table's version); public handle: its HMAC tag
  paths/<tag>.json                           the secret table's path behind a flow run's ``private-path:<tag>``
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from artifacts.private_folder import (
    FILE_MODE,
    LedgerError,
    PrivateFolder,
    check_population,
    hex_id,
    json_bytes,
    mkdir_private,
    write_private,
)
from mdp_core.errors import InputError
from mdp_core.runtime.files import exclusive_lock

if TYPE_CHECKING:
    from mdp_core.release.similarity import Overlap, People, Sketch


class Tables(PrivateFolder):
    """The sealed tables, their paths and the populations' sketches in ``<store>/private/`` (module docstring)."""

    def _sketch_path(self, population: str) -> Path:
        """``tables/<HMAC(store key, population)>.json``: the population's keyed sketch (the name reveals nothing)."""
        name = hmac.new(self._key(), b"population:" + check_population(population).encode(), hashlib.sha256)
        return self.root / "tables" / f"{name.hexdigest()}.json"

    def _sketches(self) -> list[tuple[str, Sketch]]:
        """Every population's (name, sketch) in this store (unreadable files skipped: a sketch only refuses)."""
        from mdp_core.release.similarity import Sketch

        out = []
        for path in sorted((self.root / "tables").glob("*.json")):
            try:
                d = json.loads(path.read_text(encoding="utf-8"))
                out.append((check_population(str(d["population"])), Sketch.parse(d["sketch"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    def similar_population(self, people: People, population: str | None) -> tuple[str, float] | None:
        """(population, share) of the other population of this store whose people ``people`` share most
        (:func:`mdp_core.release.similarity.overlap`, above its threshold), or None. Read only: nothing is
        created when the store has no key yet (then no population has a sketch)."""
        from mdp_core.release.similarity import overlap

        if not (self.root / "store.key").is_file():
            return None
        key, best = self._key(), None
        for name, sk in self._sketches():
            if name == population:
                continue
            found = overlap(people, key, sk)
            if found.same and (best is None or found.share > best[1]):
                best = (name, found.share)
        return best

    def claim_table(self, people: People, population: str) -> tuple[str, float] | None:
        """Record ``people`` as a version of ``population``'s table (its sketch merged with theirs), unless they
        are another population's: then that (population, share), nothing recorded. Under the tables' lock (two
        first runs of one table cannot both claim it)."""
        from mdp_core.release.similarity import sketch

        check_population(population)
        with exclusive_lock(mkdir_private(self.root / "tables") / ".lock", mode=FILE_MODE):
            self._key()  # made now if missing (no ledger yet): the sketch is keyed
            other = self.similar_population(people, population)
            if other is not None:
                return other
            old = dict(self._sketches()).get(population)
            # at least the population's size: merging a smaller version never folds its people away
            mine = sketch(people, self._key(), 0 if old is None else len(old.records))
            merged: Sketch = mine if old is None else old.merged(mine)
            write_private(
                self._sketch_path(population), json_bytes({"population": population, "sketch": merged.as_dict()})
            )
            return None

    def own_overlap(self, people: People, population: str) -> Overlap | None:
        """How much ``people`` have in common with ``population``'s own sketch (the versions of its table on
        record: :func:`mdp_core.release.similarity.overlap`), None when it has none yet. Read only (a policy
        release's envelope admits only a version of the population's table: :func:`flows.approval.outside_envelope`)."""
        from mdp_core.release.similarity import overlap

        if not (self.root / "store.key").is_file():
            return None
        own = dict(self._sketches()).get(check_population(population))
        return None if own is None else overlap(people, self._key(), own)

    # ------------------------------------------------------------- the sealed table (the door's snapshot)
    def _keyed(self, purpose: bytes, value: str) -> str:
        """HMAC-SHA256 (64 hex) of ``value`` under the store key, for ``purpose``: a public stand-in for a secret
        value that nobody without the key can confirm a guess of."""
        return hmac.new(self._key(), purpose + b"\x00" + value.encode(), hashlib.sha256).hexdigest()

    def table_handle(self, sha256: str) -> str:
        """The sealed table's public handle: the keyed tag (:meth:`_keyed`) of its rows' sha256 (published in
        the plan figures and ``release_provenance.json`` as ``table``; the stages' parameters carry it)."""
        return self._keyed(b"mdp-release sealed table v1", hex_id(sha256))

    def _sealed_path(self, sha256: str) -> Path:
        return self.root / "sealed" / f"{hex_id(sha256)}.parquet"

    def seal_table(self, rows: Any) -> tuple[str, str]:
        """Write the door's snapshot of the secret table: ``rows`` (:func:`mdp_core.problem.microdata.sealed_rows`,
        canonical) as ``sealed/<sha256 of the rows>.parquet``, atomically, 0600, content-addressed (written once:
        the same rows are the same file). Returns (the rows' sha256: the table's version, private; its handle,
        public: :meth:`table_handle`)."""
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        from mdp_core.problem.microdata import rows_sha256

        sha = rows_sha256(rows)
        path = self._sealed_path(sha)
        if not path.is_file():
            types = {c: pa.large_string() if c == "record" else pa.float64() for c in rows.columns}
            table = pa.table({c: pa.array(rows[c].tolist(), type=t) for c, t in types.items()})
            buf = io.BytesIO()
            pq.write_table(table, buf)
            write_private(path, buf.getvalue(), exclusive=True)
        self.sealed_table(sha)  # read back: what later steps will read is what was sealed
        return sha, self.table_handle(sha)

    def sealed_table(self, sha256: str) -> Any:
        """The sealed rows (a DataFrame) whose sha256 is ``sha256``, checked against it (LedgerError for a
        snapshot altered or swapped under ``private/``; InputError when this store has none)."""
        import pyarrow.parquet as pq

        from mdp_core.problem.microdata import rows_sha256

        path = self._sealed_path(sha256)  # its name is a hash of the people: never in a message
        where = self.root / "sealed"
        if not path.is_file():
            raise InputError(f"this draw's sealed table is not in {where}: run the release again")
        rows = pq.read_table(path).to_pandas()
        if "record" in rows.columns:
            rows["record"] = rows["record"].astype(object).where(rows["record"].notna(), None)
        if not hmac.compare_digest(rows_sha256(rows), sha256):
            raise LedgerError(f"a sealed table in {where} does not match its name (altered in the private part)")
        return rows

    def register_table_path(self, path: str | Path) -> str:
        """Keep the secret table's path (absolute) under ``paths/``, named by its keyed tag; returns that tag,
        the path's public stand-in in a flow run's parameters (:func:`flows.door.sealed_parameter`)."""
        real = str(Path(path).expanduser().resolve())
        handle = self._keyed(b"mdp-release table path v1", real)
        target = self.root / "paths" / f"{handle}.json"
        if not target.is_file():
            write_private(target, json_bytes({"path": real}))
        return handle

    def table_path(self, handle: str) -> str:
        """The path :meth:`register_table_path` kept under ``handle``; InputError when this store has none."""
        try:
            return str(json.loads((self.root / "paths" / f"{hex_id(handle)}.json").read_text(encoding="utf-8"))["path"])
        except FileNotFoundError:
            raise InputError(
                f"the secret table's handle {handle[:12]} is not in this store's private part ({self.root}): "
                "start the release with `mdp-release run --config FILE` (or serve / deploy) on this store"
            ) from None

    def move_sketch(self, old: str, new: str) -> bool:
        """Move ``old``'s keyed sketch to the population ``new`` (a ledger rename; merged into ``new``'s if it has
        one), under the tables' lock, so that ``new``'s next table is judged its own version and nobody's else.
        Idempotent. Returns True when a sketch was moved."""
        check_population(old)
        check_population(new)
        with exclusive_lock(mkdir_private(self.root / "tables") / ".lock", mode=FILE_MODE):
            if not (self.root / "store.key").is_file():
                return False
            sketches = dict(self._sketches())
            if old not in sketches:
                return False
            merged = sketches[old] if new not in sketches else sketches[new].merged(sketches[old])
            write_private(self._sketch_path(new), json_bytes({"population": new, "sketch": merged.as_dict()}))
            self._sketch_path(old).unlink()
            return True
