"""Stage ``publish``: publish a run -- only what passes the door check.

Not cached: every flow run publishes its own ``runs/<run_name>/``. The released files, the instance
the mechanism was certified against (``instance/``) and the manifest are staged in a temp folder, the
final manifest.json is signed there with the agency's Ed25519 key (:mod:`mdp_core.release.signing`:
``signature.json`` + ``public_key.pem``; the manifest lists every released file's sha256, so the
signature covers the release) and the folder is re-checked by :func:`mdp_core.release.audit.check_publication`
against that key (the signature, then the exact bytes: every file's
sha256 against the manifest, the mechanism verified against the instance, the certificate recorded
in the manifest, microdata / aggregates drawn from this mechanism). Any discrepancy raises
PrivacyError and nothing is published; otherwise the folder is renamed into place. Every publication is
verified in full: no record of content "already verified" is trusted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from artifacts.store import ArtifactRef, Store
from mdp_core.declarations import contract
from mdp_core.release import audit, signing
from tasks.common import logger


def released_files(
    mechanism: ArtifactRef, measure: ArtifactRef, evaluate: ArtifactRef, instance: ArtifactRef
) -> dict[str, tuple[ArtifactRef, str]]:
    """{name in the run folder: (stage output, file name)} of everything a release publishes: each file the
    contract declares as listed (:data:`mdp_core.declarations.contract.PUBLISHED`), from its stage's output --
    a required one always, an optional one (trace, evaluation files, figures) when the stage wrote it."""
    outputs = {"solve": mechanism, "measure": measure, "evaluate": evaluate, "export": instance}
    released: dict[str, tuple[ArtifactRef, str]] = {}
    for f in contract.PUBLISHED:
        ref = outputs.get(f.stage)
        if not f.listed or ref is None:
            continue
        if "*" in f.path:  # the figures: every file of the stage's output the pattern matches
            released |= {name: (ref, name) for name in sorted(ref.files) if f.matches(name)}
        elif f.required or f.file in ref.files:
            released[f.path] = (ref, f.file)
    return released


def sign_and_check(store: Store, staged: Path) -> None:
    """Sign the staged folder's final manifest.json with the agency key (created on first use), then the
    door: the staged release must audit clean, signed by exactly that key (PrivacyError otherwise)."""
    key = signing.signing_key(store.root)
    signing.sign_release(staged, key)
    audit.check_publication(staged, public_key=signing.fingerprint(key.public_key()))


@task(name="publish", cache_policy=NO_CACHE, persist_result=False)
def publish(store: str, run_name: str, released: dict[str, tuple[ArtifactRef, str]], manifest: dict[str, Any]) -> str:
    """Stage, check at the door, publish ``runs/<run_name>/``; returns its path. ``manifest`` must
    list ``released_files`` {name: sha256}; PrivacyError (nothing published) on any discrepancy."""
    s = Store(store)
    run_dir = s.publish(run_name, released, manifest, check=lambda staged: sign_and_check(s, staged))
    logger().info("publish: %s passed the door check -> %s", run_name, run_dir)
    return str(run_dir)
