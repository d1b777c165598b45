"""``mdp-release key``: the store's release-signing key (:mod:`mdp_core.release.signing`).

  mdp-release key [--store DIR | --config FILE] [--json]
      the fingerprint of the key this store signs with (publish it: auditors pin it) and its recorded
      rotations
  mdp-release key rotate --by WHO --why TEXT [--store DIR | --config FILE]
      mint a new signing key for the store, move the old one (if any) to private/signing/retired/, and
      record who, when, why and the old and new fingerprints in <store>/keys/rotations.json: the explicit,
      recorded way out of a refusal after the key was lost (a store that has signed releases never mints
      a new key on its own)

Exit codes: 0 ok; 2 bad input or a refused key file (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    """``--store`` / ``--config`` / ``--json`` (in the sub-action: SUPPRESS defaults, so values given before
    the action's name stand)."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    where = p.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="DIR", help="the artifact store (default: the default store)", **d)
    where.add_argument("--config", metavar="FILE", help="a release config: its store", **d)
    p.add_argument("--json", action="store_true", help="JSON on stdout", **d)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``key`` sub-command's arguments and its action ``rotate``."""
    _common(p, suppress=False)
    sub = p.add_subparsers(dest="key_action", metavar="ACTION", help="optional; without one: show the key")
    r = sub.add_parser("rotate", help="mint a new signing key for the store and record the rotation")
    _common(r, suppress=True)
    r.add_argument("--by", required=True, help="who decides (recorded)")
    r.add_argument("--why", required=True, help="why (recorded)")


def key_from_cli(args: argparse.Namespace) -> int:
    from flows.ledger_cli import resolve_store
    from mdp_core.release import signing

    root = resolve_store(args)
    if getattr(args, "key_action", None) == "rotate":
        entry = signing.rotate_key(root, args.by, args.why)
        if args.json:
            print(json.dumps(entry, indent=2, sort_keys=True))
            return 0
        old = entry["old_fingerprint"] or "-"
        print(f"new signing key {entry['new_fingerprint']} (publish this fingerprint: auditors pin it)")
        print(f"  replaces {old} ({entry['old_key']}); recorded in {root.joinpath(*signing.ROTATIONS)}")
        return 0
    current = signing.agency_fingerprint(root)
    recorded = signing.rotations(root)
    if args.json:
        print(json.dumps({"store": str(root), "fingerprint": current, "rotations": recorded}, indent=2))
        return 0
    env = " (named by MDP_RELEASE_SIGNING_KEY)" if signing.key_file(root) != root.joinpath(*signing.KEY_PATH) else ""
    print(f"signing key: {current or 'none yet (made by the first release)'}{env}")
    for e in recorded:
        print(
            f"  rotated {e.get('at')} by {e.get('by')}: {e.get('old_fingerprint') or '-'} -> {e.get('new_fingerprint')}"
        )
        print(f"    why: {e.get('why')}")
    return 0
