"""``mdp-release store``: what a store holds, and removing the objects no release needs.

  mdp-release store [--store DIR | --config F] [--json]      releases per name, objects per stage, private part,
                                                             findings: release folders the store did not sign
  mdp-release store [--store DIR | --config F] --prune-objects   remove objects no release's manifest references

The store is ``--store``, else the one of ``--config``, else the default store
(:func:`flows.config.default_store`). Sizes are bytes of regular files. ``--prune-objects`` never touches
``runs/`` (releases, failure records), ``private/`` (draws, ledger: keep it as you keep the microdata) or
``prefect/``; an object removed is recomputed by the next run that needs it. Run it while no release is
running (objects written in the last hour are kept in any case: :meth:`artifacts.store.Store.prune_objects`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_store_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--store", default=None, help="the store root (default: the config's, else the default store)")
    g.add_argument("--config", default=None, help="TOML config whose store to show")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--prune-objects",
        action="store_true",
        help="remove the objects (cached stage outputs) that no release's manifest references; never runs/, "
        "private/ or prefect/",
    )


def _root(args: argparse.Namespace) -> Path:
    from flows.config import load_config, store_root

    if args.store:
        from artifacts.store import check_root

        return check_root(Path(args.store).expanduser().resolve())
    return store_root(load_config(args.config))


def human(n: int) -> str:
    """``n`` bytes as B / kB / MB / GB (powers of 1000)."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # unreachable


def summary_text(usage: dict[str, Any]) -> str:
    """The human summary of :meth:`artifacts.store.Store.usage`."""
    lines = [f"store {usage['root']}", "releases (per release name):"]
    if not usage["releases"]:
        lines.append("  none")
    for name, r in usage["releases"].items():
        latest = " (runs/latest)" if usage.get("latest") and usage["latest"] == r["newest"] else ""
        fails = f", {r['failures']} failure record(s)" if r["failures"] else ""
        lines.append(
            f"  {name:<32} {r['count']:>4} release(s), newest {r['newest'] or '-'}{latest}, {human(r['bytes'])}{fails}"
        )
    lines.append("objects (per stage):")
    if not usage["objects"]:
        lines.append("  none")
    for stage, o in usage["objects"].items():
        lines.append(f"  {stage:<32} {o['count']:>4} object(s), {human(o['bytes'])}")
    lines.append(f"private part (private/): {human(usage['private_bytes'])}")
    lines.append(f"Prefect cache records (prefect/): {human(usage['prefect_bytes'])}")
    unsigned = usage.get("unsigned_releases") or []
    if unsigned:
        lines.append(
            f"findings: {len(unsigned)} folder(s) in runs/ not signed by this store's key (planted or edited; "
            "their ledger heads are ignored, the audit of each says why):"
        )
        lines += [f"  runs/{u['folder']}: {u['finding']}" for u in unsigned]
    return "\n".join(lines)


def store_from_cli(args: argparse.Namespace) -> int:
    from artifacts.published import unsigned_releases
    from artifacts.store import Store, tree_bytes
    from flows.manifest_read import manifest_release_name

    store = Store(_root(args))
    pruned: list[Path] = []
    freed = 0
    if args.prune_objects:
        sizes = {p: tree_bytes(p) for ps in store.object_folders().values() for p in ps}
        pruned = store.prune_objects()
        freed = sum(sizes.get(p, 0) for p in pruned)
        store.clean_debris()
    usage = store.usage(manifest_release_name)
    usage["unsigned_releases"] = [{"folder": f, "finding": why} for f, why in unsigned_releases(store.root)]
    if args.prune_objects:
        usage["pruned_objects"] = [str(p.relative_to(store.root)) for p in pruned]
        usage["pruned_bytes"] = freed
    if args.json:
        print(json.dumps(usage, indent=2, sort_keys=True))
        return 0
    if args.prune_objects:
        print(
            f"removed {len(pruned)} object(s) no release references ({human(freed)}; those derived from the secret "
            "table deleted now, the others moved to trash, deleted by a run or this command once 15 minutes old)"
        )
    print(summary_text(usage))
    return 0
