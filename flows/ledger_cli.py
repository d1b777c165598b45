"""``mdp-release ledger``: read and operate the populations' privacy-budget ledgers
(:mod:`artifacts.private`: the privacy contract, the hash chain, the cap rules).

  mdp-release ledger [--store DIR | --config FILE] [--population P] [--json]
      every population of the store: published releases, charges, spent, cap, left, and whether its
      ledger verifies and holds every head its published releases committed to; with --population,
      that population's entries
  mdp-release ledger cap --population P --set X --by WHO --why TEXT [--raise]
      set, lower or (with --raise only) raise the population's cap; recorded in the chain
  mdp-release ledger new-budget --population P --cap X --by WHO --why TEXT
      start a fresh budget (spent 0), acknowledging the published heads found in the store's runs/:
      the explicit, recorded way out of a refusal after a rollback or a lost private/ folder

Exit codes: 0 ok; 2 bad input, a refusal, or a ledger that does not verify (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mdp_core.errors import InputError, PrivacyError


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every form takes (in a sub-action: SUPPRESS defaults, so they do not override values
    given before the action's name)."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    where = p.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="DIR", help="the artifact store (default: the default store)", **d)
    where.add_argument("--config", metavar="FILE", help="a release config: its store", **d)
    p.add_argument("--population", metavar="P", help="one population (its entries, or the one to change)", **d)
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of a table", **d)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ledger`` sub-command's arguments and its actions ``cap`` and ``new-budget``."""
    _common(p, suppress=False)
    sub = p.add_subparsers(
        dest="ledger_action",
        metavar="ACTION",
        help="optional; without one: show the budgets (or --population's entries)",
    )
    c = sub.add_parser("cap", help="set, lower or (--raise) raise a population's cap")
    _common(c, suppress=True)
    c.add_argument("--set", dest="cap_value", metavar="X", type=float, required=True, help="the new cap (epsilon)")
    c.add_argument("--by", required=True, help="who decides (recorded)")
    c.add_argument("--why", required=True, help="why (recorded)")
    c.add_argument("--raise", dest="allow_raise", action="store_true", help="allow a cap above the stored one")
    n = sub.add_parser("new-budget", help="start a fresh budget, acknowledging the published heads")
    _common(n, suppress=True)
    n.add_argument("--cap", dest="cap_value", metavar="X", type=float, required=True, help="the new budget's cap")
    n.add_argument("--by", required=True, help="who decides (recorded)")
    n.add_argument("--why", required=True, help="why (recorded)")


def resolve_store(args: argparse.Namespace) -> Path:
    """``--store`` (checked like any store root), else the store of ``--config``, else the default store."""
    from artifacts.store import check_root
    from flows.config import load_config, store_root

    if getattr(args, "store", None):
        return check_root(Path(args.store).expanduser().resolve())
    return store_root(load_config(getattr(args, "config", None)))


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _when(t: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "?"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _overview(root: Path, as_json: bool) -> int:
    from artifacts.private import PrivateStore, published_populations

    priv = PrivateStore(root)
    published = published_populations(root)
    out: list[dict[str, Any]] = []
    bad = 0
    for pop in sorted(set(priv.populations()) | set(published)):
        heads = published.get(pop, [])
        row: dict[str, Any] = {"population": pop, "releases": len(heads), "status": "ok"}
        try:
            row |= priv.budget(pop).as_dict()
            priv.check_published(pop, heads)
        except PrivacyError as exc:
            row["status"] = "REFUSED"
            print(f"mdp-release ledger: error: {exc}", file=sys.stderr)
            bad += 1
        out.append(row)
    if as_json:
        print(json.dumps(out, indent=1))
    elif not out:
        print(f"no population in {root}")
    else:
        rows = [["population", "releases", "charges", "spent", "cap", "left", "status"]]
        rows += [
            [
                r["population"],
                str(r["releases"]),
                str(r.get("n_charges", "?")),
                _fmt(r.get("spent")),
                _fmt(r.get("cap")),
                _fmt(r.get("left")),
                r["status"],
            ]
            for r in out
        ]
        print(_table(rows))
    return 2 if bad else 0


def _entries(root: Path, population: str, as_json: bool) -> int:
    from artifacts.private import PrivateStore, published_heads

    priv = PrivateStore(root)
    entries = priv.entries(population)
    budget = priv.budget(population)
    heads = published_heads(root, population)
    if as_json:
        print(json.dumps({"budget": budget.as_dict(), "published_heads": heads, "entries": entries}, indent=1))
    elif not entries:
        print(f"population {population}: no ledger in {root}")
    else:
        rows = [["seq", "when", "kind", "epsilon", "spent", "cap", "by", "why"]]
        for e in entries:
            eps = _fmt(e.get("epsilon")) if e["kind"] == "charge" else ""
            rows.append(
                [
                    str(e["seq"]),
                    _when(e.get("created_at")),
                    e["kind"],
                    eps,
                    _fmt(e.get("spent")),
                    _fmt(e.get("cap")),
                    str(e.get("by", "")),
                    str(e.get("why", "")),
                ]
            )
        print(_table(rows))
        print(
            f"population {population}: spent {_fmt(budget.spent)} of cap {_fmt(budget.cap)} (left {_fmt(budget.left)}), "
            f"{budget.n_charges} charge(s); head {budget.seq} {budget.head[:16]}; {len(heads)} published release(s)"
        )
    priv.check_published(population, heads)
    return 0


def _print_budget(b: Any, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(b.as_dict(), indent=1))
    else:
        print(f"population {b.population}: {what}; cap {_fmt(b.cap)}, spent {_fmt(b.spent)}, left {_fmt(b.left)}")
        for note in b.notes:
            print(f"note: {note}")


def _need_population(args: argparse.Namespace) -> str:
    from artifacts.private import check_population

    pop = getattr(args, "population", None)
    if not pop:
        raise InputError(f"ledger {args.ledger_action} needs --population P")
    return check_population(pop)


def cmd_ledger(args: argparse.Namespace) -> int:
    """Run ``mdp-release ledger``; 0 ok, 2 bad input / refusal / a ledger that does not verify."""
    from artifacts.private import PrivateStore, check_population, published_heads

    as_json = bool(getattr(args, "json", False))
    action = getattr(args, "ledger_action", None)
    try:
        root = resolve_store(args)
        if action == "cap":
            pop = _need_population(args)
            b = PrivateStore(root).set_cap(pop, args.cap_value, args.by, args.why, allow_raise=args.allow_raise)
            _print_budget(b, as_json, "cap set")
            return 0
        if action == "new-budget":
            pop = _need_population(args)
            heads = published_heads(root, pop)
            b = PrivateStore(root).start_new_budget(pop, args.cap_value, args.by, args.why, heads)
            _print_budget(b, as_json, f"new budget started ({len(heads)} published head(s) acknowledged)")
            return 0
        if getattr(args, "population", None):
            return _entries(root, check_population(args.population), as_json)
        return _overview(root, as_json)
    except (InputError, PrivacyError) as exc:
        print(f"mdp-release ledger: error: {exc}", file=sys.stderr)
        return 2
