"""The scan of the store's published runs (``<store>/runs/*/manifest.json``): which folders this store signed,
and the ledger heads (:mod:`artifacts.ledger`) their manifests commit to, by which a rollback of a population's
ledger or a removed ``private/`` is revealed (:meth:`artifacts.ledger.Ledger.check_published`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from artifacts.private_folder import POPULATION_PATTERN, check_population
from mdp_core.errors import MdpError


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
