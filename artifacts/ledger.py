"""Each population's privacy-budget ledger (a room of the private part: :class:`artifacts.private.PrivateStore`):
charges made before each measurement, caps, new budgets, a hash chain that reveals tampering. What leaves it
is the ledger's head (sequence number and hash), which published manifests record.

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

*A rename* (:meth:`Ledger.rename_ledger`, ``mdp-release ledger rename``) changes nothing of this: the old
name's chain ends with a ``rename`` entry and refuses every new charge; the new name's chain begins with a
``renamed-from`` entry that carries the cap, the spend and the current budget's charge keys (and the hash of
the old chain's last entry), so the budget continues whole under the new name.

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
``privacy.ledger``: :func:`artifacts.published.published_heads`, :meth:`Ledger.check_published`) as long as one
manifest committing to a removed entry is still in this store's ``runs/``. Only manifests signed by the
store's own key count (while the store has no key, any valid signature on a folder made of the store's own
objects): a manifest planted in ``runs/`` commits to nothing, so it cannot block the population's releases,
in a fresh store either (:func:`artifacts.published.unsigned_releases` lists it).
**Not covered**: anyone holding the store key (they can forge entries), or anyone who can alter both
``private/`` and every published manifest of the population in ``runs/`` (copies published elsewhere are
not consulted); a rollback of entries no manifest committed to yet (charges of a release that was never
published).

Layout under ``<store>/private/``:

  populations/<pop>/ledger/<seq:08d>.json    the ledger entries, created exclusively under the
                                             population's lock (``populations/<pop>/.lock``, flock)
  populations/<pop>/void-<time>-<hex>/       a ledger that failed verification, moved aside (kept for
                                             inspection) when a new budget was started
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from artifacts.private_folder import (
    ENTRY_NAME,
    FILE_MODE,
    NEW_BUDGET_HINT,
    LedgerError,
    PrivateFolder,
    canonical_json,
    check_population,
    hex_id,
    json_bytes,
    mkdir_private,
    write_private,
)
from mdp_core.declarations import budget as exact
from mdp_core.errors import InputError, PrivacyError
from mdp_core.runtime.files import exclusive_lock

GENESIS_PREV = "0" * 64
KINDS = ("genesis", "cap", "lower", "raise", "charge", "new-budget", "rename", "renamed-from")


class BudgetRefused(PrivacyError):
    """A charge (or a planned release) would take a population above its cap, or no cap is stored or
    configured where one is required, or a cap raise was not explicitly allowed."""


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


def _entry_hash(entry: Mapping[str, Any]) -> str:
    """sha256 (64 hex) of the canonical JSON of ``entry`` without its ``mac``."""
    return hashlib.sha256(canonical_json({k: v for k, v in entry.items() if k != "mac"})).hexdigest()


def _check_epsilon(value: float, what: str, positive: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise InputError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, got {x!r}")
    return x


class Ledger(PrivateFolder):
    """The populations' ledgers in ``<store>/private/`` (module docstring: the privacy contract, tamper evidence)."""

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
            if not ENTRY_NAME.match(p.name):
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
            elif e["kind"] == "renamed-from":
                n = len(_carried(e))
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
        return {key for key, _ in _current_charges(chain)}

    def position(self, population: str, keys: Collection[str]) -> dict[str, Any] | None:
        """Where the latest charge of ``keys`` sits in the population's (verified) ledger, within the current
        budget: {"seq", "head" (that entry's hash), "spent", "cap"} as they stood right after it -- the same
        figures however often the release is recomputed. None when none of the keys is charged."""
        chain = self._verified(population)
        start = max((e["seq"] for e in chain if e["kind"] == "new-budget"), default=0)
        found = [
            e
            for e in chain[start:]
            if (e["kind"] == "charge" and e["key"] in keys)
            or (e["kind"] == "renamed-from" and any(k in keys for k, _ in _carried(e)))
        ]
        if not found:
            return None
        e = found[-1]
        return {"seq": int(e["seq"]), "head": _entry_hash(e), "spent": float(e["spent"]), "cap": e["cap"]}

    def history(self, population: str, upto_seq: int) -> list[dict[str, Any]]:
        """The budget's decisions up to entry ``upto_seq`` (the same however often a release is recomputed):
        every cap set, lowered or raised, every new budget and a rename that brought the budget here
        (``renamed-from``: its spend then carried over), with its time (UTC), who, why, the cap after it and what
        the population had been charged before it -- in this budget and across every budget of the store
        (``spent_all_budgets``). Published in every later release's provenance (issue 39: the people who
        sign see the whole history)."""
        chain = self._verified(population)[: int(upto_seq) + 1]
        out: list[dict[str, Any]] = []
        charges: list[float] = []
        before = 0.0
        for e in chain:
            if e["kind"] == "charge":
                charges.append(float(e["epsilon"]))
            elif e["kind"] == "renamed-from":  # the old name's current budget, carried: charged before the rename
                charges.extend(eps for _, eps in _carried(e))
                before = float(e["spent"])
            if e["kind"] in ("cap", "lower", "raise", "new-budget", "renamed-from"):
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
        folder = mkdir_private(self._pop_dir(population))
        with exclusive_lock(folder / ".lock", mode=FILE_MODE):
            yield folder

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
        if kind != "rename":
            _refuse_if_renamed(population, chain)
        if kind == "renamed-from":
            spent = float(exact.compose([eps for _, eps in fields["detail"]["charges"]]))
        else:
            spent = (
                0.0 if kind == "new-budget" else float(exact.compose([*_charges(chain), fields.get("epsilon", 0.0)]))
            )
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
        if not write_private(path, json_bytes(entry), exclusive=True):
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
        if new:
            _refuse_if_renamed(population, chain)
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
        hex_id(key)
        epsilon = _check_epsilon(epsilon, "epsilon of a charge")
        try:
            canonical_json(detail)
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
            _refuse_if_renamed(population, chain)
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

    def rename_ledger(self, old: str, new: str, by: str, why: str) -> Budget:
        """Move ``old``'s budget to the name ``new`` (``mdp-release ledger rename``), recorded with ``by``/``why``:
        ``old``'s chain ends with a ``rename`` entry (``detail.to``; it then refuses every new charge, naming
        ``new``) and ``new``'s chain begins with a ``renamed-from`` entry (``detail``: the old name, the rename
        entry's seq and hash, the current budget's charges as (key, epsilon)) carrying the cap and the spend, so the
        budget continues whole and a measurement already charged is not charged again. Both entries are hashed and
        MACed like any other. Re-running it after an interruption completes it; InputError when ``old`` has no
        ledger or ``new`` has one of its own, BudgetRefused when ``old`` was renamed to another name."""
        by, why = _who(by, why)
        if check_population(old) == check_population(new):
            raise InputError(f"population {old!r}: a rename needs a different name")
        first, second = sorted((old, new))
        with self._lock(first), self._lock(second):
            chain, target = self._verified(old), self._verified(new)
            if not chain:
                raise InputError(f"population {old!r} has no ledger in this store: nothing to rename")
            moved = renamed_to(chain)
            if moved is None:
                if target:
                    raise InputError(f"population {new!r} already has a ledger: a rename needs a name of its own")
                moved = self._append(old, chain, "rename", by, why, self._state(old, chain).cap, detail={"to": new})
            elif moved["detail"]["to"] != new:
                _refuse_if_renamed(old, chain)
            if not any(e["kind"] == "renamed-from" for e in target):
                charges = [[k, e] for k, e in _current_charges(chain)]
                detail = {"from": old, "from_seq": moved["seq"], "from_head": _entry_hash(moved), "charges": charges}
                self._append(new, target, "renamed-from", moved["by"], moved["why"], moved["cap"], detail=detail)
            return self._state(new, target)

    def start_new_budget(
        self, population: str, cap: float, by: str, why: str, acknowledged: Sequence[tuple[int, str]]
    ) -> Budget:
        """Start a fresh budget for ``population`` (spent 0, cap ``cap``), recorded with ``by``/``why`` and
        the published heads (seq, head) it ``acknowledged`` (those the ledger lacks stop being refusals).
        A ledger that does not verify is moved aside (``void-*``, kept) and a new chain begins; a missing
        store key is made anew (the other populations' ledgers then need a new budget too)."""
        cap = _check_epsilon(cap, "cap", positive=True)
        by, why = _who(by, why)
        acks = sorted({(int(s), hex_id(str(h))) for s, h in acknowledged})
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


def _current_charges(chain: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """(key, epsilon) of the current budget's charges (since the last new budget, or the charges a rename carried
    over), in ledger order."""
    out: list[tuple[str, float]] = []
    for e in chain:
        if e["kind"] == "new-budget":
            out = []
        elif e["kind"] == "renamed-from":
            out = _carried(e)
        elif e["kind"] == "charge":
            out.append((str(e["key"]), float(e["epsilon"])))
    return out


def _charges(chain: Sequence[Mapping[str, Any]]) -> list[float]:
    """The epsilons of the current budget's charges (:func:`_current_charges`), in ledger order."""
    return [eps for _, eps in _current_charges(chain)]


def _carried(entry: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The (charge key, epsilon) of the current budget a ``renamed-from`` entry carried over from the old name."""
    return [(str(k), float(e)) for k, e in entry["detail"]["charges"]]


def renamed_to(chain: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``rename`` entry of a verified chain (its population was renamed: ``detail.to``), or None."""
    return next((e for e in chain if e["kind"] == "rename"), None)


def _refuse_if_renamed(population: str, chain: Sequence[Mapping[str, Any]]) -> None:
    """BudgetRefused, naming the new name, when ``population`` was renamed (its chain ends its budget)."""
    moved = renamed_to(chain)
    if moved is not None:
        raise BudgetRefused(
            f"population {population!r} was renamed to {moved['detail']['to']!r} (ledger entry {moved['seq']}, by "
            f"{moved['by']}): its budget, draws and table are recorded under that name; set [release] population = "
            f"{moved['detail']['to']!r}"
        )


def _spent(chain: Sequence[Mapping[str, Any]]) -> exact.Epsilon:
    """The current budget's spend: its charges composed exactly (:func:`mdp_core.declarations.budget.compose`)."""
    return exact.compose(_charges(chain))


def _who(by: str, why: str) -> tuple[str, str]:
    by, why = str(by).strip(), str(why).strip()
    if not by or not why:
        raise InputError("a cap change or a new budget needs --by (who) and --why (the reason)")
    return by, why
