"""``mdp-release ledger``: read and operate the populations' privacy-budget ledgers
(:mod:`artifacts.ledger`: the privacy contract, the hash chain, the cap rules).

  mdp-release ledger [--store DIR | --config FILE] [--population P] [--json]
      every population of the store: the releases its current budget has paid for (counted from the
      ledger's charges, not from runs/), how many of them are still published in runs/, charges, spent,
      cap, left, what the last release cost, how many more releases of that cost fit, and a status: ok,
      low (the next release like the last one would be refused), exhausted (nothing left) or REFUSED
      (the ledger does not verify or lacks a head its published releases committed to); with
      --population, that population's entries, each charge with what it paid for (perturbation, counts,
      prior) and the release and run it belongs to
  mdp-release ledger cap --population P --set X --by WHO --why TEXT [--raise]
      set, lower or (with --raise only) raise the population's cap; recorded in the chain
  mdp-release ledger new-budget --population P --cap X --by WHO --why TEXT
      start a fresh budget (spent 0), acknowledging the published heads found in the store's runs/:
      the explicit, recorded way out of a refusal after a rollback or a lost private/ folder
  mdp-release ledger rename OLD NEW --by WHO --why TEXT
      the population OLD is called NEW from now on: its budget (cap, spend, charges), table versions, draws
      and keyed sketch move to NEW, recorded in both chains; OLD then refuses every new charge, naming NEW

Exit codes: 0 ok; 2 bad input, a refusal, or a ledger that does not verify (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdp_core.declarations.budget import Epsilon, compose
from mdp_core.errors import InputError, PrivacyError

KIND_WORDS = {"error": "mean error"}  # a charge's detail.kind, shown in words where the bare kind misleads (issue 50)


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
    """The ``ledger`` sub-command's arguments and its actions ``cap``, ``new-budget`` and ``rename``."""
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
    r = sub.add_parser("rename", help="move a population's budget, draws and table to a new name (recorded)")
    _common(r, suppress=True)
    r.add_argument("old", metavar="OLD", help="the population's name now")
    r.add_argument("new", metavar="NEW", help="its name from now on (a name no population of the store has)")
    r.add_argument("--by", required=True, help="who decides (recorded)")
    r.add_argument("--why", required=True, help="why (recorded)")


def resolve_store(args: argparse.Namespace) -> Path:
    """``--store`` (checked like any store root), else the store of ``--config``, else the default store."""
    from artifacts.store import check_root
    from flows.config import load_config, store_root

    if getattr(args, "store", None):
        return check_root(Path(args.store).expanduser().resolve())
    return store_root(load_config(getattr(args, "config", None)))


def epsilon_text(v: Any) -> str:
    """An epsilon (a charge, a cap, what is left) as a person reads, types and compares it: 6 significant
    digits (``6.5``, ``0.00123457``; a Fraction or a float). The one rule of every view -- the officer's
    summary and form, the envelope's comparison, ``ledger``, ``notify``, the UI's artifacts (issue 52): a
    charge of 6.500000005 (the certificate's 1e-9 tolerance) reads 6.5 everywhere, and an envelope of 6.5
    admits it (:func:`flows.approval.outside_envelope`); the ledger's cap stays exact."""
    return f"{float(v):.6g}"


def _fmt(x: float | None) -> str:
    """An epsilon at the one precision of every view (:func:`epsilon_text`); "-" for None."""
    return "-" if x is None else epsilon_text(x)


def _when(t: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "?"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


# ------------------------------------------------------------------------------- releases and the forecast
@dataclass
class Paid:
    """One release as the ledger's charges state it: the charges of one (release key, draw) -- the ``detail``
    :func:`tasks.measure.charge_all` records -- within one budget (``budget``: 0 before any new-budget
    entry, one more after each). A charge without that detail (written by hand or by an older version) is
    a release of its own. ``runs``: the folders of runs/ whose manifest commits to one of its charges."""

    n: int  # its place in the ledger, 1 first
    budget: int
    release: str | None
    draw: str | None
    charges: list[dict[str, Any]] = field(default_factory=list)  # {"seq", "kind", "epsilon"}, ledger order
    runs: list[str] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        """Whether its charges include the perturbation: a whole release, not one abandoned after its DP prior
        (charges that name no kind, "?", are taken as whole releases: only a prior's charge says it is partial)."""
        return any(c["kind"] in ("perturb", "?") for c in self.charges)

    @property
    def cost(self) -> Epsilon:
        """Its charges composed exactly (:func:`mdp_core.declarations.budget.compose`)."""
        return compose(c["epsilon"] for c in self.charges)

    def label(self) -> str:
        """``#3 (run <folder>)``, else ``#3 (release <12 hex> draw <12 hex>, not in runs/)``: the config's
        release key and the draw's public commitment."""
        if self.runs:
            return f"#{self.n} (run {', '.join(self.runs)})"
        return f"#{self.n} (release {(self.release or '?')[:12]} draw {(self.draw or '?')[:12]}, not in runs/)"

    def breakdown(self) -> str:
        """``perturb 5.42 + counts 1 + prior 0.5 = 6.92``."""
        parts = " + ".join(f"{KIND_WORDS.get(c['kind'], c['kind'])} {_fmt(c['epsilon'])}" for c in self.charges)
        return f"{parts} = {_fmt(float(self.cost))}" if len(self.charges) > 1 else parts

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "budget": self.budget,
            "release": self.release,
            "draw": self.draw,
            "runs": self.runs,
            "charges": self.charges,
            "cost": float(self.cost),
        }


def runs_by_seq(root: Path, population: str) -> dict[int, list[str]]:
    """{ledger seq: names of the folders of ``<root>/runs/`` whose manifest commits to that entry of
    ``population``'s ledger} (``privacy.ledger.ledger_seq``: a release's last charge); unreadable or older
    manifests are skipped, hidden folders never read."""
    out: dict[int, list[str]] = {}
    for path in sorted(Path(root, "runs").glob("*/manifest.json")):
        if path.parent.name.startswith(".") or path.parent.is_symlink():
            continue
        try:
            led = json.loads(path.read_text(encoding="utf-8"))["privacy"]["ledger"]
            if led["population"] == population:
                out.setdefault(int(led["ledger_seq"]), []).append(path.parent.name)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def paid_releases(entries: list[dict[str, Any]], runs: dict[int, list[str]]) -> list[Paid]:
    """The releases the ledger's charges paid for, in the order of their first charge (:class:`Paid`)."""
    groups: dict[tuple[Any, ...], Paid] = {}
    budget = 0
    for e in entries:
        if e["kind"] == "new-budget":
            budget += 1
        if e["kind"] != "charge":
            continue
        d = _detail(e)
        rel, draw = d.get("release"), d.get("draw")
        key = (budget, rel, draw) if rel or draw else (budget, "charge", e["seq"])
        if key not in groups:
            groups[key] = Paid(len(groups) + 1, budget, _str(rel), _str(draw))
        paid = groups[key]
        paid.charges.append({"seq": e["seq"], "kind": str(d.get("kind") or "?"), "epsilon": float(e["epsilon"])})
        paid.runs = sorted(set(paid.runs) | set(runs.get(int(e["seq"]), [])))
    return list(groups.values())


def _detail(entry: dict[str, Any]) -> dict[str, Any]:
    d = entry.get("detail")
    return d if isinstance(d, dict) else {}


def _str(x: Any) -> str | None:
    return None if x is None else str(x)


def forecast(entries: list[dict[str, Any]], paid: list[Paid]) -> dict[str, Any]:
    """The current budget's outlook, in exact arithmetic: ``releases`` it paid for, the ``last_release``
    (the one charged last), ``last_cost``: the cost of a whole release like it (the last one charged whose charges
    include the perturbation, in this budget or an earlier one: a run abandoned after its DP prior's charge keeps
    that charge but is not what the next release costs, issue 50), ``fits``: how many more releases of that cost
    fit, floor((cap - spent) / last_cost) (None without a cap, a whole release or a cost), and ``status``:
    ``ok``, ``low`` (the next release like the last one would be refused) or ``exhausted`` (nothing left)."""
    current = sum(e["kind"] == "new-budget" for e in entries)
    mine = [p for p in paid if p.budget == current]
    cap = entries[-1].get("cap") if entries else None
    last = max(mine, key=lambda p: p.charges[-1]["seq"]) if mine else None
    wholes = sorted((p for p in paid if p.whole), key=lambda p: (p.budget == current, p.charges[-1]["seq"]))
    basis = wholes[-1] if wholes else None
    left = None if cap is None else Epsilon.of(float(cap)).value - compose(p.cost for p in mine).value
    fits: int | None = None
    if left is not None and last is not None and basis is not None and basis.cost.value > 0:
        fits = max(math.floor(left / basis.cost.value), 0)
    status = "ok"
    if left is not None and left <= 0:
        status = "exhausted"
    elif fits == 0:
        status = "low"
    return {
        "releases": len(mine),
        "last_release": None if last is None else last.as_dict(),
        "last_cost": None if last is None or basis is None else float(basis.cost),
        "fits": fits,
        "status": status,
    }


def budget_epoch(entries: list[dict[str, Any]]) -> int:
    """The seq of the entry that opened the current outlook: the last first cap, raise, new budget or rename
    (-1: none). A low-budget warning is given once per population and epoch: a raise or a new budget re-arms it,
    a lowering does not."""
    opening = ("cap", "raise", "new-budget", "renamed-from")
    return max((int(e["seq"]) for e in entries if e["kind"] in opening), default=-1)


@dataclass(frozen=True)
class BudgetView:
    """A population's budget as the ledger states it, for the operator (``mdp-release ledger``) and the
    officer (the ``budget-<population>-<store8>`` artifact in the UI): ``row`` = the verified budget
    (:meth:`artifacts.private.Budget.as_dict`) | :func:`forecast` | ``published`` (its release folders in
    runs/) and ``epoch`` (:func:`budget_epoch`); ``paid``: every release its charges paid for, every budget
    (:func:`paid_releases`); ``entries``: the verified ledger. Public figures only: epsilons, caps, who and
    why of each decision, run folder names and commitments -- nothing of the secret table."""

    population: str
    row: dict[str, Any]
    paid: list[Paid]
    entries: list[dict[str, Any]]

    @property
    def last(self) -> Paid | None:
        """The release charged last in the current budget (None: none yet)."""
        last = self.row.get("last_release")
        return None if last is None else self.paid[last["n"] - 1]


def budget_view(
    population: str, entries: list[dict[str, Any]], runs: dict[int, list[str]], budget: dict[str, Any]
) -> BudgetView:
    """The pure part of :func:`read_budget_view`: the view of ``entries`` (verified), ``runs`` (from
    :func:`runs_by_seq`) and ``budget`` (the budget's ``as_dict``)."""
    paid = paid_releases(entries, runs)
    published = sum(len(v) for v in runs.values())
    row = {"population": population, "published": published} | budget | forecast(entries, paid)
    moved = next((e for e in entries if e["kind"] == "rename"), None)
    if moved is not None:  # its budget lives under the new name: no outlook here
        row["status"] = f"renamed to {moved['detail']['to']}"
    return BudgetView(population, row | {"epoch": budget_epoch(entries)}, paid, entries)


def read_budget_view(root: Path, priv: Any, population: str) -> BudgetView:
    """:func:`budget_view` of ``population`` in the store at ``root`` (``priv``: its
    :class:`artifacts.private.PrivateStore`); LedgerError when its ledger does not verify."""
    entries = priv.entries(population)
    return budget_view(population, entries, runs_by_seq(root, population), priv.budget(population).as_dict())


def outlook_line(view: BudgetView) -> str:
    """One line on the last release, what it cost, what is left and what that means (``ok``: how many more
    of that cost fit; ``low`` / ``exhausted``: the next one like it would be refused)."""
    pop, row, last = view.population, view.row, view.last
    if last is None:
        return f"{pop}: no release charged in the current budget; left {_fmt(row.get('left'))}"
    head = f"{pop}: last release {last.label()} cost {last.breakdown()}; left {_fmt(row.get('left'))}"
    if not last.whole and row.get("last_cost") is not None:  # abandoned after its prior: a whole one costs more
        head += f" (it stopped before its perturbation; a whole release costs {_fmt(row['last_cost'])})"
    if row["fits"] is None:
        return f"{head}; no cap" if row.get("cap") is None else head
    if row["status"] == "ok":
        return f"{head}: {row['fits']} more release(s) of that cost fit"
    return (
        f"{head}: {row['status'].upper()} -- the next release like it ({_fmt(row['last_cost'])}) would be "
        "refused; lower its cost, or decide on the budget (mdp-release ledger cap --raise, or new-budget)"
    )


def _population_row(root: Path, priv: Any, pop: str, heads: list[tuple[int, str]], row: dict[str, Any]) -> BudgetView:
    """Fill ``row``, the overview's row of ``pop``; returns its view. PrivacyError (``row`` holding what
    could be read) when its ledger does not verify or lacks a published head."""
    view = read_budget_view(root, priv, pop)
    row |= {k: v for k, v in view.row.items() if k != "epoch"}
    priv.check_published(pop, heads)
    return view


def _overview(root: Path, as_json: bool) -> int:
    from artifacts.private import PrivateStore
    from artifacts.published import published_populations

    priv = PrivateStore(root)
    published = published_populations(root)
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    bad = 0
    for pop in sorted(set(priv.populations()) | set(published)):
        row: dict[str, Any] = {"population": pop}
        try:
            notes.append(outlook_line(_population_row(root, priv, pop, published.get(pop, []), row)))
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
        head = ["population", "releases", "published", "charges", "spent", "cap", "left", "last cost", "fits"]
        rows = [[*head, "status"]]
        for r in out:
            fits = "-" if r.get("fits") is None else str(r["fits"])
            cells = [str(r.get("releases", "?")), str(r.get("published", "?")), str(r.get("n_charges", "?"))]
            cells += [_fmt(r.get(k)) for k in ("spent", "cap", "left", "last_cost")]
            rows.append([r["population"], *cells, fits, r["status"]])
        print(_table(rows))
        print("\n".join(notes))
    return 2 if bad else 0


def _entry_rows(entries: list[dict[str, Any]], paid: list[Paid]) -> list[list[str]]:
    """The entries table: each charge with what it paid for (its ``detail.kind``) and the release (and
    run) it belongs to."""
    of = {int(c["seq"]): p for p in paid for c in p.charges}
    rows = [["seq", "when", "kind", "what", "epsilon", "spent", "cap", "paid for", "by", "why"]]
    for e in entries:
        charge = e["kind"] == "charge"
        d = _detail(e) if charge else {}
        release = of.get(int(e["seq"]))
        rows.append(
            [
                str(e["seq"]),
                _when(e.get("created_at")),
                e["kind"],
                KIND_WORDS.get(str(d.get("kind")), str(d.get("kind") or "?")) if charge else "",
                _fmt(e.get("epsilon")) if charge else "",
                _fmt(e.get("spent")),
                _fmt(e.get("cap")),
                release.label() if release is not None else "",
                str(e.get("by", "")),
                str(e.get("why", "")),
            ]
        )
    return rows


def _entries(root: Path, population: str, as_json: bool) -> int:
    from artifacts.private import PrivateStore
    from artifacts.published import published_heads

    priv = PrivateStore(root)
    view = read_budget_view(root, priv, population)
    entries, paid = view.entries, view.paid
    budget = priv.budget(population)
    heads = published_heads(root, population)
    outlook = forecast(entries, paid)
    if as_json:
        data = {"budget": budget.as_dict(), "forecast": outlook, "releases": [p.as_dict() for p in paid]}
        print(json.dumps(data | {"published_heads": heads, "entries": entries}, indent=1))
    elif not entries:
        print(f"population {population}: no ledger in {root}")
    else:
        print(_table(_entry_rows(entries, paid)))
        print(
            f"population {population}: spent {_fmt(budget.spent)} of cap {_fmt(budget.cap)} (left {_fmt(budget.left)}), "
            f"{budget.n_charges} charge(s) for {outlook['releases']} release(s); head {budget.seq} {budget.head[:16]}; "
            f"{len(heads)} published head(s)"
        )
        print(outlook_line(view))
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
    from artifacts.private_folder import check_population

    pop = getattr(args, "population", None)
    if not pop:
        raise InputError(f"ledger {args.ledger_action} needs --population P")
    return check_population(pop)


def cmd_ledger(args: argparse.Namespace) -> int:
    """Run ``mdp-release ledger``; 0 ok, 2 bad input / refusal / a ledger that does not verify."""
    from artifacts.private import PrivateStore
    from artifacts.private_folder import check_population
    from artifacts.published import published_heads

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
        if action == "rename":
            b = PrivateStore(root).rename(args.old, args.new, args.by, args.why)
            _print_budget(b, as_json, f"renamed from {args.old}")
            return 0
        if getattr(args, "population", None):
            return _entries(root, check_population(args.population), as_json)
        return _overview(root, as_json)
    except (InputError, PrivacyError) as exc:
        print(f"mdp-release ledger: error: {exc}", file=sys.stderr)
        return 2
