"""The private part of the store: the secret draws that protect individuals, their kept measurements,
and each population's privacy-budget ledger. Nothing here is ever published; what leaves it is the
public commitment to a draw and the ledger's head (sequence number and hash), which published
manifests record.

The privacy contract
--------------------
*Who is protected, against whom.* Each individual of a **population** (the set of people whose records
a microdata table holds, across every version of that table: ``[release] population``), against anyone
who sees every release this store publishes for it, including someone who knows every other record.
Not against anyone who can read ``<store>/private/`` (it holds the secrets and the key).

*Neighbour relation.* Two collections of the population's tables (all versions at once) are neighbours
when they differ only in the records of one individual, each of that individual's records moved to
a record within ``protection_radius`` of it in the data's metric (for the noisy counts and the DP prior:
any change of that one individual's record, the replace-one relation of eps-DP).

*Guarantee.* Every measurement of a secret table is charged to its population's ledger **before** it is
made, with an epsilon that bounds its privacy loss under that relation (mechanism: eps x stretch x
protection_radius; counts: eps_counts; DP prior: eps_prior), idempotently per *charge key* (a
measurement fully determined by its key and kept, so making it again reveals nothing new). A charge
that would take the population's total above its **cap** is refused and the measurement not made. By
basic sequential composition (Dwork & Roth 2014, Thm 3.16; for the mDP part Chatzikokolakis et al. 2013
and Koufogiannis et al. 2015) the joint distribution of everything published from the measurements of
one budget changes by at most a factor exp(cap) between neighbours. For records farther apart than the
radius, the mechanism's part grows as eps x stretch x d (the per-release ``guarantee``).

*What the budget does not cover.* It is per store: another store holding the same population keeps its
own ledger. Measurements made outside this store's pipeline are not charged. ``start_new_budget``
(``mdp-release ledger new-budget``) starts a fresh total on an operator's recorded decision: the
guarantee then holds per budget, not across budgets.

Tamper evidence
---------------
The ledger of a population is a hash chain: entry ``n`` holds ``prev`` = the hash of entry ``n - 1``
(``"0" * 64`` for entry 0); an entry's hash is the sha256 of its canonical JSON without ``mac``, and
``mac`` = HMAC-SHA256(store key, entry hash). Every read verifies the whole chain (contiguous seqs from
0, prev links, MACs, the population field); a failure is a :class:`LedgerError` and nothing is charged.
This detects an edited, inserted, reordered or deleted (not last) entry made by anyone **without the
store key** (a hand edit, a script, a partial restore of a backup, someone with write but not read access).
Deleting the last entries (a rollback) or all of ``private/`` (key included) leaves a valid, shorter or
empty chain: it is detected through the heads that published manifests commit to (``runs/*/manifest.json``
``privacy.ledger``: :func:`published_heads`, :meth:`PrivateStore.check_published`) as long as one
manifest committing to a removed entry is still in this store's ``runs/``. Only manifests signed by the
store's own key count (while the store has no key, any valid signature on a folder made of the store's own
objects): a manifest planted in ``runs/`` commits to nothing, so it cannot block the population's releases,
in a fresh store either (:func:`unsigned_releases` lists it).
**Not covered**: anyone holding the store key (they can forge entries), or anyone who can alter both
``private/`` and every published manifest of the population in ``runs/`` (copies published elsewhere are
not consulted); a rollback of entries no manifest committed to yet (charges of a release that was never
published).

Layout under ``<store>/private/`` (folders 0700, files 0600, owner only, no symlinks; checked and
repaired every time a :class:`PrivateStore` is opened):

  store.key                                  32 random bytes (``secrets``): the ledger's MAC key
  draws/<commitment>/draw.json               a draw: 32 secret bytes from OS entropy, its population,
                                             the table version (sha256 of its sealed rows), its index
  draws/<commitment>/<name>.json             measurements kept with the draw (OpenDP's noisy counts,
                                             the DP prior), so a re-run reproduces them
  populations/<pop>/versions/<version>/<n>   the commitment of the version's n-th draw (n = 0, 1, ...;
                                             the current draw is the highest n), created exclusively
                                             (``os.link``): two concurrent first runs agree on one draw
  populations/<pop>/ledger/<seq:08d>.json    the ledger entries, created exclusively under the
                                             population's lock (``populations/<pop>/.lock``, flock)
  populations/<pop>/void-<time>-<hex>/       a ledger that failed verification, moved aside (kept for
                                             inspection) when a new budget was started
  tables/<HMAC(key, pop)>.json               the population's keyed sketch of its people (Bloom filters
                                             of HMAC tags: :mod:`mdp_core.release.similarity`), merged
                                             over its versions under ``tables/.lock``: the door's rule 6
  sealed/<sha256>.parquet                    the secret table as the privacy door read it (canonical rows:
                                             :func:`mdp_core.problem.microdata.sealed_rows`), named by their
                                             sha256 (the table's version); public handle: its HMAC tag
  paths/<tag>.json                           the secret table's path behind a flow run's ``private-path:<tag>``

The commitment is ``sha256("mdp-release draw v1" || secret)``: published, it binds the release to its
draw without revealing it (the secret is 256 uniform bits); an auditor handed ``draw.json`` checks it.
Everything the pipeline draws for individuals comes from a numpy Generator seeded with the secret
(:meth:`Draw.rng`), never from a configured value.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdp_core.declarations import budget as exact
from mdp_core.errors import InputError, MdpError, PrivacyError

if TYPE_CHECKING:
    import numpy as np

    from mdp_core.release.similarity import Overlap, People, Sketch

DIR_MODE = 0o700
FILE_MODE = 0o600
DOMAIN = b"mdp-release draw v1"
SECRET_BYTES = 32
KEY_BYTES = 32
POPULATION_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
GENESIS_PREV = "0" * 64
KINDS = ("genesis", "cap", "lower", "raise", "charge", "new-budget")
_ENTRY_NAME = re.compile(r"^[0-9]{8}\.json$")
NEW_BUDGET_HINT = "mdp-release ledger new-budget --population {pop} --cap X --by WHO --why TEXT"


class LedgerError(PrivacyError):
    """A population's ledger cannot be trusted: an entry edited, inserted, reordered or deleted, a MAC
    that does not verify, a rollback or removal revealed by published heads, a missing store key."""


class BudgetRefused(PrivacyError):
    """A charge (or a planned release) would take a population above its cap, or no cap is stored or
    configured where one is required, or a cap raise was not explicitly allowed."""


def commitment(secret: bytes) -> str:
    """Public commitment (64 hex) to a draw's ``secret`` bytes."""
    return hashlib.sha256(DOMAIN + secret).hexdigest()


_commitment_of = commitment  # :meth:`PrivateStore.load` names its argument ``commitment``


def check_population(name: str) -> str:
    """``name`` if it is a population name (``^[a-z0-9][a-z0-9._-]{0,62}$``: no path can escape the
    private folder), else InputError."""
    if not isinstance(name, str) or not POPULATION_PATTERN.match(name):
        raise InputError(
            f"population {name!r} is not a valid name: 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )
    return name


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


def charge_key(draw: Draw, what: str, params: Mapping[str, Any]) -> str:
    """A charge key (64 hex): sha256 of the canonical JSON of (draw commitment, ``what`` e.g. "prior",
    "counts", "perturb", ``params``). A measurement fully determined by its key and kept is charged once."""
    return hashlib.sha256(_canonical([draw.commitment, what, dict(params)])).hexdigest()


@dataclass(frozen=True)
class Budget:
    """A population's budget as its verified ledger states it.

    ``cap``: the stored cap (None: none yet); ``spent``: the charges' epsilons since the ledger began or the
    last new budget, composed exactly (:func:`mdp_core.declarations.budget.compose`) and rounded once to a float;
    ``left`` = cap - spent (exact, then rounded) (None without a cap; may be negative
    after a lowering); ``n_charges``: charges in the current budget; ``seq``/``head``: index and hash
    (64 hex) of the last entry (-1 and ``"0" * 64`` for an empty ledger), what a published manifest
    commits to; ``notes``: remarks for the operator (e.g. a config asking a higher cap than stored)."""

    population: str
    cap: float | None
    spent: float
    left: float | None
    n_charges: int
    seq: int
    head: str
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON form (provenance, ``mdp-release ledger --json``)."""
        return {
            "population": self.population,
            "cap": self.cap,
            "spent": self.spent,
            "left": self.left,
            "n_charges": self.n_charges,
            "ledger_seq": self.seq,
            "ledger_head": self.head,
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------------- files
def _canonical(obj: Any) -> bytes:
    """Canonical JSON (sorted keys, no whitespace, no NaN): the bytes an entry's hash is taken of."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, indent=1, allow_nan=False).encode()


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


def _safe(name: str) -> str:
    """A hex id used as a path component: refuse anything else (no path can escape the private folder)."""
    if not name or not all(c in "0123456789abcdef" for c in name):
        raise InputError(f"not a hex id: {name[:80]!r}")
    return name


def _entry_hash(entry: Mapping[str, Any]) -> str:
    """sha256 (64 hex) of the canonical JSON of ``entry`` without its ``mac``."""
    return hashlib.sha256(_canonical({k: v for k, v in entry.items() if k != "mac"})).hexdigest()


def _check_epsilon(value: float, what: str, positive: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise InputError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, got {x!r}")
    return x


# ------------------------------------------------------------------------------------------- store
class PrivateStore:
    """``<store>/private/``: secret draws, their measurements and the populations' ledgers (module
    docstring: layout, privacy contract, tamper evidence)."""

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

    # ---------------------------------------------------------------------------- draws
    def draw(self, population: str, version: str, new: bool = False) -> tuple[Draw, bool]:
        """The current draw of ``version`` (sha256 hex of the sealed rows) of ``population``, made from
        OS entropy if there is none yet or ``new`` (an explicit request for another, independent draw of
        the same people: its measurements are charged to the ledger like any other). Returns
        (draw, made_now)."""
        check_population(population)
        folder = _mkdir(self.root / "populations" / population / "versions" / _safe(version))
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
            _write_private(self.root / "draws" / c / "draw.json", _json_bytes(record))
            if _write_private(folder / str(index), c.encode(), exclusive=True):
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
        path = self.root / "draws" / _safe(commitment) / "draw.json"
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
        path = self.root / "draws" / _safe(draw.commitment) / f"{_safe(name)}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))["value"]
        except FileNotFoundError:
            return None

    def keep_measurement(self, draw: Draw, name: str, value: Any) -> Any:
        """Store ``value`` as measurement ``name`` of ``draw`` unless one exists; returns the stored one
        (a concurrent run's, if it was first: one measurement per draw and name, ever)."""
        path = self.root / "draws" / _safe(draw.commitment) / f"{_safe(name)}.json"
        if not _write_private(path, _json_bytes({"value": value, "created_at": time.time()}), exclusive=True):
            return self.measurement(draw, name)
        return value

    # ---------------------------------------------------------------------------- ledger: reading
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
            _write_private(path, secrets.token_bytes(KEY_BYTES), exclusive=True)
            key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise LedgerError(f"{path} is not a {KEY_BYTES}-byte key: the ledgers cannot be verified")
        return key

    def _has_ledger(self, population: str) -> bool:
        folder = self._pop_dir(population) / "ledger"
        return folder.is_dir() and any(_ENTRY_NAME.match(p.name) for p in folder.iterdir())

    def populations(self) -> list[str]:
        """Populations with a folder in this store (draws or a ledger), sorted."""
        folder = self.root / "populations"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and POPULATION_PATTERN.match(p.name))

    def entries(self, population: str) -> list[dict[str, Any]]:
        """The population's ledger entries, seq 0 first, after verifying the whole chain (LedgerError
        otherwise). An empty list when it has no ledger."""
        return self._verified(population)

    def _verified(self, population: str) -> list[dict[str, Any]]:
        folder = self._pop_dir(population) / "ledger"
        if not folder.is_dir():
            return []
        names: list[str] = []
        for p in folder.iterdir():
            if p.name.startswith("."):  # temp files of writers (debris), never entries
                continue
            if not _ENTRY_NAME.match(p.name):
                raise LedgerError(f"population {population!r}: unexpected file {p.name!r} in its ledger")
            names.append(p.name)
        names.sort()
        if not names:
            return []
        key = self._key()
        seqs = [int(n[:8]) for n in names]
        if seqs != list(range(len(seqs))):
            gap = next(i for i, s in enumerate(seqs) if s != i)
            raise LedgerError(
                f"population {population!r}: ledger entry {gap} is missing (entries found: {len(seqs)}, "
                f"last seq {seqs[-1]}): an entry was deleted; {NEW_BUDGET_HINT.format(pop=population)} "
                "records the decision to start again"
            )
        out: list[dict[str, Any]] = []
        prev = GENESIS_PREV
        for seq, name in enumerate(names):
            where = f"population {population!r}: ledger entry {seq}"
            try:
                entry = json.loads((folder / name).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                raise LedgerError(f"{where} is unreadable (altered or truncated)") from None
            if not isinstance(entry, dict):
                raise LedgerError(f"{where} is not an entry (altered)")
            h = _entry_hash(entry)
            mac = hmac.new(key, bytes.fromhex(h), hashlib.sha256).hexdigest()
            if not hmac.compare_digest(str(entry.get("mac", "")), mac):
                raise LedgerError(
                    f"{where}: its MAC does not verify (edited, or written without this store's key); "
                    f"{NEW_BUDGET_HINT.format(pop=population)} records the decision to start again"
                )
            if entry.get("seq") != seq or entry.get("prev") != prev or entry.get("population") != population:
                raise LedgerError(
                    f"{where}: its seq, prev link or population does not fit the chain (moved or reordered)"
                )
            if entry.get("kind") not in KINDS or (seq == 0) != (entry.get("kind") == "genesis"):
                raise LedgerError(f"{where}: unexpected kind {entry.get('kind')!r}")
            prev = h
            out.append(entry)
        return out

    @staticmethod
    def _state(population: str, chain: list[dict[str, Any]], notes: Sequence[str] = ()) -> Budget:
        """The budget a verified chain states (the current budget: since the last new-budget entry)."""
        cap: float | None = None
        n = 0
        for e in chain:
            if e["kind"] == "new-budget":
                n = 0
            elif e["kind"] == "charge":
                n += 1
            cap = None if e.get("cap") is None else float(e["cap"])
        spent = _spent(chain)
        left = exact.Budget.of(cap).left(spent)
        head = _entry_hash(chain[-1]) if chain else GENESIS_PREV
        return Budget(
            population=population,
            cap=cap,
            spent=float(spent),
            left=None if left is None else float(left),
            n_charges=n,
            seq=len(chain) - 1,
            head=head,
            notes=tuple(notes),
        )

    @staticmethod
    def _charged(chain: list[dict[str, Any]]) -> set[str]:
        """Charge keys of the current budget (a key charged before the last new budget is charged again)."""
        keys: set[str] = set()
        for e in chain:
            if e["kind"] == "new-budget":
                keys = set()
            elif e["kind"] == "charge":
                keys.add(str(e["key"]))
        return keys

    def position(self, population: str, keys: Collection[str]) -> dict[str, Any] | None:
        """Where the latest charge of ``keys`` sits in the population's (verified) ledger, within the current
        budget: {"seq", "head" (that entry's hash), "spent", "cap"} as they stood right after it -- the same
        figures however often the release is recomputed. None when none of the keys is charged."""
        chain = self._verified(population)
        start = max((e["seq"] for e in chain if e["kind"] == "new-budget"), default=0)
        found = [e for e in chain[start:] if e["kind"] == "charge" and e["key"] in keys]
        if not found:
            return None
        e = found[-1]
        return {"seq": int(e["seq"]), "head": _entry_hash(e), "spent": float(e["spent"]), "cap": e["cap"]}

    def history(self, population: str, upto_seq: int) -> list[dict[str, Any]]:
        """The budget's decisions up to entry ``upto_seq`` (the same however often a release is recomputed):
        every cap set, lowered or raised and every new budget, with its time (UTC), who, why, the cap after it
        and what the population had been charged before it -- in this budget and across every budget of the
        store (``spent_all_budgets``). Published in every later release's provenance (issue 39: the people who
        sign see the whole history)."""
        chain = self._verified(population)[: int(upto_seq) + 1]
        out: list[dict[str, Any]] = []
        charges: list[float] = []
        before = 0.0
        for e in chain:
            if e["kind"] == "charge":
                charges.append(float(e["epsilon"]))
            elif e["kind"] in ("cap", "lower", "raise", "new-budget"):
                out.append(
                    {
                        "seq": int(e["seq"]),
                        "kind": e["kind"],
                        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(e["created_at"]))),
                        "by": e["by"],
                        "why": e["why"],
                        "cap": e["cap"],
                        "spent_before": before,
                        "spent_all_budgets": float(exact.compose(charges)),
                    }
                )
            before = float(e["spent"]) if e.get("spent") is not None else before
        return out

    def budget(self, population: str) -> Budget:
        """The population's budget after verifying its whole chain (LedgerError if it does not verify)."""
        return self._state(population, self._verified(population))

    # ---------------------------------------------------------------------------- ledger: writing
    @contextmanager
    def _lock(self, population: str) -> Iterator[Path]:
        """The population's folder, under its exclusive flock (every ledger write holds it)."""
        folder = _mkdir(self._pop_dir(population))
        fd = os.open(folder / ".lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield folder
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _append(
        self,
        population: str,
        chain: list[dict[str, Any]],
        kind: str,
        by: str,
        why: str,
        cap: float | None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Append one entry (under the lock, after verification of ``chain``); appends a genesis first
        to an empty chain. Returns the entry; ``chain`` is extended in place."""
        if not chain and kind != "genesis":
            self._append(population, chain, "genesis", "mdp-release", "ledger created", None)
        state = self._state(population, chain)
        spent = 0.0 if kind == "new-budget" else float(exact.compose([*_charges(chain), fields.get("epsilon", 0.0)]))
        entry: dict[str, Any] = {
            "seq": len(chain),
            "prev": state.head,
            "kind": kind,
            "population": population,
            "created_at": time.time(),
            "by": by,
            "why": why,
            "epsilon": 0.0,
            "key": None,
            "detail": {},
            "cap": cap,
            "spent": spent,
        } | fields
        h = _entry_hash(entry)
        entry["mac"] = hmac.new(self._key(create=kind == "new-budget"), bytes.fromhex(h), hashlib.sha256).hexdigest()
        path = self._pop_dir(population) / "ledger" / f"{entry['seq']:08d}.json"
        if not _write_private(path, _json_bytes(entry), exclusive=True):
            raise LedgerError(
                f"population {population!r}: ledger entry {entry['seq']} appeared while locked (a writer bypassing the lock)"
            )
        chain.append(entry)
        return entry

    @staticmethod
    def effective_cap(
        population: str, stored: float | None, config_cap: float | None
    ) -> tuple[float | None, str | None, list[str]]:
        """(cap to enforce, entry kind to record it or None, notes) under the cap rule: the first cap comes from
        the config; after that the stored cap is the truth (set, lowered and raised only by ``mdp-release ledger
        cap``, recorded with who and why), and a config ``max_total_epsilon`` that differs from it, lower or
        higher, is ignored with a note naming both numbers (issue 52: after ``ledger cap --raise`` the config's
        old figure silently won)."""
        if config_cap is None:
            return stored, None, []
        if stored is None:
            return config_cap, "cap", []
        if config_cap != stored:
            return (
                stored,
                None,
                [
                    f"population {population!r}: the ledger's stored cap {stored:.10g} applies; the config's "
                    f"max_total_epsilon {config_cap:.10g} is ignored (the stored cap is the truth: change it with "
                    "mdp-release ledger cap --population P --set X [--raise] --by WHO --why TEXT, and remove "
                    "max_total_epsilon from the config)"
                ],
            )
        return stored, None, []

    def precheck(
        self, population: str, planned: Mapping[str, float], config_cap: float | None, require_cap: bool
    ) -> Budget:
        """Refuse (BudgetRefused) a release whose planned charges (charge key -> epsilon; keys already
        charged in the current budget cost 0) would take the population above its cap (the cap
        :meth:`charge` would enforce with this ``config_cap``; exact arithmetic), or when there is no
        cap while ``require_cap``. Writes nothing. Returns the budget with that cap and the current spend."""
        if config_cap is not None:
            config_cap = _check_epsilon(config_cap, "max_total_epsilon", positive=True)
        chain = self._verified(population)
        state = self._state(population, chain)
        cap, _, notes = self.effective_cap(population, state.cap, config_cap)
        charged = self._charged(chain)
        new = {k: _check_epsilon(e, f"planned charge {k[:12]}") for k, e in planned.items() if k not in charged}
        spent = _charges(chain)
        self.refuse_unless_fits(population, cap, spent, list(new.values()), require_cap)
        left = exact.Budget.of(cap).left(spent)
        return Budget(
            population,
            cap,
            state.spent,
            None if left is None else float(left),
            state.n_charges,
            state.seq,
            state.head,
            tuple(notes),
        )

    @staticmethod
    def refuse_unless_fits(
        population: str, cap: float | None, spent: Sequence[float], new: Sequence[float], require_cap: bool = True
    ) -> None:
        """BudgetRefused when the ``new`` charges (epsilons) on top of the ``spent`` ones do not fit ``cap``
        (:meth:`mdp_core.declarations.budget.Budget.admits`: exact arithmetic, no slack), or without a cap while
        ``require_cap``. Nothing new: never refused (a re-run measures nothing new, whatever the cap now)."""
        if not new:
            return
        if cap is None:
            if require_cap:
                raise BudgetRefused(
                    f"population {population!r} has no privacy cap: set [release] max_total_epsilon for its first "
                    "release (or mdp-release ledger cap --population P --set X --by WHO --why TEXT)"
                )
            return
        if not exact.Budget.of(cap).admits(spent, new):
            total, so_far = exact.compose([*spent, *new]), exact.compose(spent)
            raise BudgetRefused(
                f"release refused: it would bring the privacy spend of population {population!r} to {total} "
                f"(cap {cap:g}; spent so far {so_far}; {len(new)} new charge(s)); nothing was measured. To fit, "
                "lower this release's charge (eps, the protection radius, eps_counts or eps_prior: mdp-release check "
                "shows it), or decide on the budget (mdp-release ledger cap --raise, or new-budget, with --by and --why)"
            )

    def charge(
        self,
        population: str,
        key: str,
        epsilon: float,
        detail: dict[str, Any],
        config_cap: float | None,
        require_cap: bool,
    ) -> tuple[Budget, bool]:
        """Charge ``epsilon`` to ``population`` for the measurement identified by ``key`` (64 hex), before
        it is made. Under the population's lock: verify the chain, apply the cap rule (:meth:`effective_cap`:
        the first cap from ``config_cap``, then the stored one; a config that differs is noted), refuse
        (BudgetRefused, nothing written) above the cap or without a cap while ``require_cap``, append the
        charge. Idempotent per key within the current budget: returns (budget, False) when already
        charged (nothing written), (budget, True) when charged now. ``detail``: JSON, no secret values."""
        _safe(key)
        epsilon = _check_epsilon(epsilon, "epsilon of a charge")
        try:
            _canonical(detail)
        except (TypeError, ValueError):
            raise InputError(f"the detail of charge {key[:12]} is not JSON (numbers, strings, lists, dicts)") from None
        if config_cap is not None:
            config_cap = _check_epsilon(config_cap, "max_total_epsilon", positive=True)
        with self._lock(population):
            chain = self._verified(population)
            state = self._state(population, chain)
            cap, kind, notes = self.effective_cap(population, state.cap, config_cap)
            if key in self._charged(chain):
                return self._state(population, chain, notes), False
            self.refuse_unless_fits(population, cap, _charges(chain), [epsilon], require_cap)
            if kind is not None:  # the first cap
                self._append(population, chain, kind, "config", "first cap, from the config's max_total_epsilon", cap)
            self._append(
                population,
                chain,
                "charge",
                "release",
                "measurement",
                cap,
                epsilon=epsilon,
                key=key,
                detail=dict(detail),
            )
            return self._state(population, chain, notes), True

    def set_cap(self, population: str, cap: float, by: str, why: str, allow_raise: bool = False) -> Budget:
        """Set the population's cap (recorded with ``by`` and ``why``): a first cap, a lowering, or a raise
        (only with ``allow_raise``; else BudgetRefused). The same cap records nothing."""
        cap = _check_epsilon(cap, "cap", positive=True)
        by, why = _who(by, why)
        with self._lock(population):
            chain = self._verified(population)
            stored = self._state(population, chain).cap
            if stored is None:
                kind = "cap"
            elif cap < stored:
                kind = "lower"
            elif cap > stored:
                if not allow_raise:
                    raise BudgetRefused(
                        f"population {population!r}: {cap:g} is above the stored cap {stored:g}; a raise must be "
                        "explicit (--raise)"
                    )
                kind = "raise"
            else:
                return self._state(population, chain)
            self._append(population, chain, kind, by, why, cap)
            return self._state(population, chain)

    def start_new_budget(
        self, population: str, cap: float, by: str, why: str, acknowledged: Sequence[tuple[int, str]]
    ) -> Budget:
        """Start a fresh budget for ``population`` (spent 0, cap ``cap``), recorded with ``by``/``why`` and
        the published heads (seq, head) it ``acknowledged`` (those the ledger lacks stop being refusals).
        A ledger that does not verify is moved aside (``void-*``, kept) and a new chain begins; a missing
        store key is made anew (the other populations' ledgers then need a new budget too)."""
        cap = _check_epsilon(cap, "cap", positive=True)
        by, why = _who(by, why)
        acks = sorted({(int(s), _safe(str(h))) for s, h in acknowledged})
        with self._lock(population) as folder:
            voided: dict[str, Any] | None = None
            self._key(create=True)
            try:
                chain = self._verified(population)
            except LedgerError as exc:
                name = f"void-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
                os.rename(folder / "ledger", folder / name)
                voided = {"folder": name, "reason": str(exc)}
                chain = []
            self._append(
                population, chain, "new-budget", by, why, cap, acknowledged=[[s, h] for s, h in acks], voided=voided
            )
            return self._state(population, chain)

    # ------------------------------------------------------- tables: one population, by similarity
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
        folder = _mkdir(self.root / "tables")
        fd = os.open(folder / ".lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._key()  # made now if missing (no ledger yet): the sketch is keyed
            other = self.similar_population(people, population)
            if other is not None:
                return other
            mine = sketch(people, self._key())
            old = dict(self._sketches()).get(population)
            merged: Sketch = mine if old is None else old.merged(mine)
            _write_private(
                self._sketch_path(population), _json_bytes({"population": population, "sketch": merged.as_dict()})
            )
            return None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

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
        return self._keyed(b"mdp-release sealed table v1", _safe(sha256))

    def _sealed_path(self, sha256: str) -> Path:
        return self.root / "sealed" / f"{_safe(sha256)}.parquet"

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
            _write_private(path, buf.getvalue(), exclusive=True)
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
            _write_private(target, _json_bytes({"path": real}))
        return handle

    def table_path(self, handle: str) -> str:
        """The path :meth:`register_table_path` kept under ``handle``; InputError when this store has none."""
        try:
            return str(json.loads((self.root / "paths" / f"{_safe(handle)}.json").read_text(encoding="utf-8"))["path"])
        except FileNotFoundError:
            raise InputError(
                f"the secret table's handle {handle[:12]} is not in this store's private part ({self.root}): "
                "start the release with `mdp-release run --config FILE` (or serve / deploy) on this store"
            ) from None

    def check_published(self, population: str, heads: Sequence[tuple[int, str]]) -> None:
        """LedgerError unless every published head (seq, head) of ``population`` is the entry of its chain
        with that seq and hash, or was acknowledged by a new-budget entry (the ledger was rolled back,
        an entry deleted, or ``private/`` removed since that release was published)."""
        if not heads:
            return
        chain = self._verified(population)
        hint = NEW_BUDGET_HINT.format(pop=population)
        if not chain:
            raise LedgerError(
                f"population {population!r} has {len(heads)} published release head(s) but no private ledger "
                f"(private/ removed or replaced?): refusing to start its budget from zero; {hint} records that decision"
            )
        hashes = [_entry_hash(e) for e in chain]
        acked = {(int(s), str(h)) for e in chain if e["kind"] == "new-budget" for s, h in e.get("acknowledged") or []}
        missing = sorted(
            {(int(s), str(h)) for s, h in heads}
            - acked
            - {(s, h) for s, h in ((int(s), str(h)) for s, h in heads) if 0 <= s < len(hashes) and hashes[s] == h}
        )
        if missing:
            seqs = ", ".join(str(s) for s, _ in missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise LedgerError(
                f"population {population!r}: {len(missing)} published ledger head(s) are not in the private ledger "
                f"(seq {seqs}; the ledger has {len(chain)} entries): it was rolled back or replaced; {hint} "
                "records the decision to start again"
            )


def _charges(chain: Sequence[Mapping[str, Any]]) -> list[float]:
    """The epsilons of the current budget's charges (since the last new-budget entry), in ledger order."""
    out: list[float] = []
    for e in chain:
        if e["kind"] == "new-budget":
            out = []
        elif e["kind"] == "charge":
            out.append(float(e["epsilon"]))
    return out


def _spent(chain: Sequence[Mapping[str, Any]]) -> exact.Epsilon:
    """The current budget's spend: its charges composed exactly (:func:`mdp_core.declarations.budget.compose`)."""
    return exact.compose(_charges(chain))


def _who(by: str, why: str) -> tuple[str, str]:
    by, why = str(by).strip(), str(why).strip()
    if not by or not why:
        raise InputError("a cap change or a new budget needs --by (who) and --why (the reason)")
    return by, why


def _release_folders(store_root: str | Path) -> list[Path]:
    """The folders under ``<store>/runs/`` holding a manifest.json, by name: not symlinks (``runs/latest``
    names a folder listed anyway) nor dot-folders (a publication being staged, trash)."""
    runs = Path(store_root, "runs")
    if not runs.is_dir():
        return []
    return sorted(
        p
        for p in runs.iterdir()
        if not p.name.startswith(".") and not p.is_symlink() and (p / "manifest.json").is_file()
    )


def _signature_check(store_root: str | Path) -> Callable[[Path], str | None]:
    """``check(folder)``: None when the folder's manifest.json carries a valid Ed25519 signature by this
    store's signing key (:func:`mdp_core.release.signing.agency_fingerprint`), else the first finding. A store
    whose key is missing or refused (``private/`` removed or replaced) has nothing to pin: then a valid
    signature counts on a folder made of this store's own objects (:func:`mdp_core.release.signing.made_here`),
    so that a release published before the loss still reveals a rollback, while a folder planted in a fresh
    store (its own key, no objects here) is a finding of ``mdp-release store``, never a block (issue 49)."""
    from mdp_core.release import signing

    try:
        pin = signing.agency_fingerprint(store_root)
    except MdpError:
        pin = None

    def check(folder: Path) -> str | None:
        found = signing.verify_release(folder, pin).findings
        if not found and pin is None and not signing.made_here(store_root, folder):
            return "signed by a key this store does not hold, and made of none of its objects (planted?)"
        return found[0] if found else None

    return check


def unsigned_releases(store_root: str | Path) -> list[tuple[str, str]]:
    """(folder name, why) of every folder under ``runs/`` whose manifest this store did not sign (no
    signature, a signature that does not verify, another key's): a planted or edited release. Its ledger head
    is not a published head (:func:`published_heads`); ``mdp-release store`` reports it."""
    check = _signature_check(store_root)
    return [(folder.name, why) for folder in _release_folders(store_root) if (why := check(folder)) is not None]


def _published(store_root: str | Path) -> dict[str, list[tuple[int, str]]]:
    """{population: sorted published (seq, head)} from the ``privacy.ledger`` of the manifests under
    ``<store>/runs/`` that this store signed (:func:`_signature_check`: a planted, unsigned or forged
    manifest commits to nothing); manifests without it (older releases) and unreadable ones are ignored."""
    out: dict[str, set[tuple[int, str]]] = {}
    check = _signature_check(store_root)
    for folder in _release_folders(store_root):
        try:
            led = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["privacy"]["ledger"]
            pop, seq, head = led["population"], int(led["ledger_seq"]), str(led["ledger_head"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not (isinstance(pop, str) and POPULATION_PATTERN.match(pop) and re.fullmatch(r"[0-9a-f]{64}", head)):
            continue
        if check(folder) is None:
            out.setdefault(pop, set()).add((seq, head))
    return {p: sorted(h) for p, h in sorted(out.items())}


def published_heads(store_root: str | Path, population: str) -> list[tuple[int, str]]:
    """The ledger heads (seq, head) that the published manifests of ``population`` this store signed commit
    to, sorted (a manifest the store did not sign is a finding of ``mdp-release store``, not a head)."""
    return _published(store_root).get(check_population(population), [])


def published_populations(store_root: str | Path) -> dict[str, list[tuple[int, str]]]:
    """Every population named by a published manifest with its heads (see :func:`published_heads`)."""
    return _published(store_root)


__all__ = [
    "Budget",
    "BudgetRefused",
    "Draw",
    "LedgerError",
    "PrivateStore",
    "charge_key",
    "check_population",
    "commitment",
    "published_heads",
    "published_populations",
    "unsigned_releases",
]
