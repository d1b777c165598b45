"""What the release flow tells an operator: flow-run tags, the release artifact in the Prefect UI, the
``runs/latest`` pointer, and the failure record (the task runner and the stages' options: :mod:`flows.runner`).

Artifact keys are per release name (``<name>-release``, ``<name>-evaluation``, ``<name>-report``,
``<name>-solve-progress``, ``<name>-failure``), so one key's history in the UI is one release's history;
a new version of a key is created only when its content changed (:func:`tasks.progress.publish_artifact`),
and a run that published nothing new (a cached ``serve`` tick) adds no release artifact, only one line
"nothing new published" in its logs. The release artifact states this run's spend (the population's
ledger after the run minus before it: :func:`ledger_snapshot`, :func:`run_spend`) and the budget left.

One more key per store and population, ``budget-<population>-<store8>`` (:func:`publish_budget`): its budget for the officer
-- each release's charge by what it paid for, every cap decision, what is left, what the next release like
the last costs, how many more fit -- written after a release published and after a refusal (with its
reason); once per population and budget a low-budget event for ``mdp-release notify``
(:func:`announce_budget`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from flows.ledger_cli import KIND_WORDS, epsilon_text  # the one rule of every view
from mdp_core.release.report_approval import PERSON as DECIDED  # the modes in which a person decided
from mdp_core.release.report_approval import markdown_text  # typed text (names, notes) shown literally

log = logging.getLogger("mdp_release")


def tag_flow_run(ctx: Any, tags: list[str]) -> None:
    """Add ``tags`` to the current flow run (the runs list then says dataset, method and release)."""
    if ctx is None or ctx.flow_run is None:
        return
    want = sorted(set(ctx.flow_run.tags or []) | set(tags))
    if want == sorted(ctx.flow_run.tags or []):
        return
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, tags=want)
    except Exception as exc:  # cosmetic: never fail a release for it
        log.warning("could not tag the flow run: %s", exc)


REFUSED_TAG = "refused"  # on every run that ends Refused: the UI's tag filter and automations see it


def tag_refused(flow_run_id: Any) -> None:
    """Add the tag :data:`REFUSED_TAG` to the flow run (Prefect's ``update_flow_run``, its tags as the server
    has them now): a run that ends ``Refused`` -- a Failed state under a custom name, which Prefect's state
    filters and some automations do not see (PrefectHQ/prefect 16402, 21566) -- is found by the runs list's
    tag filter, ``prefect flow-run ls``-style API filters (``tags: {all_: ["refused"]}``) and a tag trigger."""
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            tags = set(client.read_flow_run(flow_run_id).tags or [])
            if REFUSED_TAG not in tags:
                client.update_flow_run(flow_run_id, tags=sorted(tags | {REFUSED_TAG}))
    except Exception as exc:  # findability: never fail the refusal for it
        log.warning("could not tag the refused flow run: %s", exc)


def _link_latest(run_dir: Path) -> None:
    """``runs/latest`` -> the newest release folder (a relative symlink, replaced atomically)."""
    latest = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, latest)
    except OSError as exc:
        log.warning("could not update %s: %s", latest, exc)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.9g}"
    return "-" if v is None else str(v)


_eps = epsilon_text  # the one rule (flows.ledger_cli.epsilon_text)


def _tolerance(tol: float) -> str:
    """A relative tolerance as an operator writes it: ``1e-9`` (not ``1e-09``)."""
    text = f"{tol:g}"
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else text


def realised_eps_text(cert: dict[str, Any]) -> str:
    """The certificate's realised epsilon rounded to the relative tolerance it was checked at, e.g.
    ``10 (checked to 1e-9)`` for 10.000000000064 (a difference below the tolerance is no breach, and the
    digits below it are not shown; :func:`mdp_core.release.report.rounded_to_tolerance`)."""
    from mdp_core.release.report import rounded_to_tolerance

    value = cert.get("max_realised_epsilon")
    tol = cert.get("ratio_tol")
    if value is None:
        return "-"
    if not isinstance(tol, int | float) or tol <= 0:
        return _fmt(float(value))
    return f"{rounded_to_tolerance(float(value), float(tol))} (checked to {_tolerance(float(tol))})"


@dataclass(frozen=True)
class RunSpend:
    """What one run charged to its population's budget, from the private ledger read before the first
    stage (:func:`ledger_snapshot`) and after publication (:func:`run_spend`).

    ``spent``: epsilon charged by this run (0 when every measurement was paid before: a cached re-run;
    None when the ledger could not be read); ``total``: the population's spent after the run; ``cap``: its
    stored cap (None: no cap, a simulated population); ``left`` = cap - total (None without a cap)."""

    population: str
    spent: float | None
    total: float | None
    cap: float | None
    left: float | None


def ledger_snapshot(store_root: str | Path) -> dict[str, float] | None:
    """{population: spent} of every population of the store's private ledger (each chain verified), read
    before a release's first stage; None when it cannot be read (the release then refuses on its own)."""
    try:
        from artifacts.private import PrivateStore

        private = PrivateStore(store_root)
        return {p: private.budget(p).spent for p in private.populations()}
    except Exception as exc:  # a figure for the UI: the flow's own checks refuse a broken ledger
        log.warning("could not read the ledger before the release: %s", exc)
        return None


def run_spend(store_root: str | Path, population: str, before: dict[str, float] | None) -> RunSpend:
    """This run's spend on ``population``: its ledger's spent now minus ``before`` (:func:`ledger_snapshot`;
    a population absent from it had spent 0), with the cap and what is left."""
    try:
        from artifacts.private import PrivateStore

        budget = PrivateStore(store_root).budget(population)
    except Exception as exc:
        log.warning("could not read the ledger of %s: %s", population, exc)
        return RunSpend(population, None, None, None, None)
    spent = None if before is None else max(budget.spent - before.get(population, 0.0), 0.0)
    return RunSpend(population, spent, budget.spent, budget.cap, budget.left)


def _spend_rows(spend: RunSpend | None, privacy: dict[str, Any]) -> list[tuple[str, str]]:
    """The table rows on the budget: the population, this run's spend, the budget left, the release's charge."""
    led = privacy.get("ledger") or {}
    population = (spend.population if spend else None) or privacy.get("population") or led.get("population")
    simulated = privacy.get("microdata_source") == "simulated"
    who = "-" if population is None else f"`{population}`"
    rows = [("population", who + (" (SIMULATED individuals: no real person)" if simulated else ""))]
    if spend is None or spend.spent is None:
        rows.append(("this run spent", "unknown (the ledger could not be read before and after the run)"))
    elif spend.spent == 0:
        rows.append(("this run spent", "0 (nothing new was measured: every charge was paid before)"))
    else:
        rows.append(("this run spent", f"{_eps(spend.spent)} (charged to `{spend.population}` by this run)"))
    if spend is not None and spend.total is not None:
        if spend.cap is None:
            left = f"no cap (a simulated population); {_eps(spend.total)} spent in all"
        else:
            left = f"{_eps(cast(float, spend.left))} of the cap {_eps(spend.cap)} ({_eps(spend.total)} spent in all)"
        rows.append(("budget left", left))
    if isinstance(led.get("this_release"), int | float):
        rows.append(
            (
                "this release's charge",
                f"{_eps(float(led['this_release']))} (mechanism + counts + DP prior, each charged once, "
                "when first measured)",
            )
        )
    return rows


def approval_text(approval: dict[str, Any] | None) -> str:
    """The officer's approval of a release (the manifest's ``approval`` block, :mod:`flows.approval`) in one
    table cell: who, when, the mode, the plan's sha256 and the note, the typed text shown literally
    (:func:`mdp_core.release.report_approval.markdown_text`: never markup, a link or a cell break); "none asked"
    without a person's decision."""
    sha = f"plan sha256 `{approval.get('plan_sha256')}`" if approval and approval.get("plan_sha256") else ""
    if not approval or approval.get("mode") not in DECIDED:
        return "none asked (`approval = none`: the operator who started the run)" + (f", {sha}" if sha else "")
    note = markdown_text(approval.get("note") or "")
    who = markdown_text(approval.get("by") or "?")
    at = markdown_text(approval.get("at"))
    return f"**{who}**, {at} UTC (`{approval.get('mode')}`), {sha}" + (f"; note: {note}" if note else "; no note")


def release_markdown(run_dir: Path, manifest: dict[str, Any], name: str, spend: RunSpend | None = None) -> str:
    """The release artifact: the release folder (the one that holds these bytes: for a run that published
    nothing new, the earlier release's), this run's spend and the population's budget left (``spend``), the
    officer's approval (:func:`approval_text`),
    the certificate (realised epsilon rounded to its tolerance), the solve."""
    cert = manifest["privacy"]["certificate"]
    sv = manifest["solve"]
    privacy = manifest["privacy"]
    mpath = run_dir / "manifest.json"
    mhash = hashlib.sha256(mpath.read_bytes()).hexdigest() if mpath.is_file() else "-"
    same = manifest.get("same_as")
    rows = [
        (
            "release folder",
            f"`{run_dir}`" + (" (these exact bytes were published before: nothing new published)" if same else ""),
        ),
        *_spend_rows(spend, privacy),
        ("approval", approval_text(manifest.get("approval"))),
        ("manifest", f"`manifest.json` sha256 `{mhash}`"),
        ("privacy check", "**PASS**" if cert.get("passed") else "**FAIL**"),
        (
            "eps (mechanism, per " + str(privacy.get("distance_unit", "unit")) + ")",
            _fmt(privacy.get("mechanism_epsilon")),
        ),
        ("realised eps", realised_eps_text(cert)),
        ("eps_counts (true-data counts)", _fmt(privacy.get("counts_epsilon"))),
        ("prior", f"{_fmt(privacy.get('prior_source'))} (eps {_fmt(privacy.get('prior_epsilon'))})"),
        ("individuals", f"{_fmt(privacy.get('n_individuals'))} ({_fmt(privacy.get('microdata_source'))})"),
        ("guarantee", _fmt((privacy.get("guarantee") or {}).get("statement"))),
        ("method run", _fmt((sv.get("auto") or {}).get("method") or sv.get("method"))),
        ("status", _fmt(sv.get("status"))),
        ("objective (expected loss)", _fmt(sv.get("objective"))),
        ("lower bound", _fmt(sv.get("lower_bound"))),
        ("gap", _fmt(sv.get("gap"))),
        ("solve seconds", _fmt(sv.get("seconds"))),
        (
            "stages run / cached",
            f"{sum(not e['cache_hit'] for e in manifest['stages'].values())} / "
            f"{sum(bool(e['cache_hit']) for e in manifest['stages'].values())}",
        ),
    ]
    lines = [f"# Release `{name}`: `{run_dir.name}`", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "Released files: " + ", ".join(f"`{f}`" for f in sorted(manifest.get("released_files", {}))), ""]
    return "\n".join(lines)


def _run_log() -> Any:
    """The flow run's logger (its lines reach the run's logs in the UI), else this module's."""
    try:
        from prefect.logging import get_run_logger

        return get_run_logger()
    except Exception:
        return log


def after_release(
    store: Any,
    run_dir: Path,
    manifest: dict[str, Any],
    name: str,
    spent_before: dict[str, float] | None = None,
) -> bool:
    """After publication: point ``runs/latest`` at the store's newest release and publish the release artifact
    ``<name>-release`` with this run's spend (the population's ledger now minus ``spent_before``, from
    :func:`ledger_snapshot` before the first stage) and the budget left; then the population's budget
    artifact ``budget-<population>-<store8>`` and, once per budget, the low-budget warning (:func:`publish_budget`).

    A run that published nothing new (``manifest["same_as"]``: a cached tick) and spent nothing creates no
    artifact when the key's latest version already describes that release folder: one line "nothing new
    published" in the run's logs instead. Returns True when an artifact was created."""
    from artifacts.store import Store
    from flows.manifest import newest_release
    from tasks.progress import latest_artifact, publish_artifact

    run_dir = Path(run_dir)
    root = store.root if isinstance(store, Store) else Path(store)  # (a Path's own .root is "/")
    _link_latest(newest_release(root, run_dir))  # the newest release, not this run's (a cached older month)
    population = (manifest.get("privacy") or {}).get("population")
    spend = run_spend(root, population, spent_before) if population else None
    if population:
        publish_budget(root, population, name)
    key = f"{name}-release"
    later = bool(manifest.get("same_as")) and later_approval(root, run_dir, manifest)
    if manifest.get("same_as") and not later and (spend is None or not spend.spent):
        try:
            latest = latest_artifact(key)
        except Exception:
            latest = None
        if latest is not None and isinstance(latest.data, str) and f"`{run_dir}`" in latest.data:
            _run_log().info(
                "nothing new published: %s already holds these exact bytes; this run spent %s; no new release artifact",
                run_dir.name,
                "unknown" if spend is None or spend.spent is None else _eps(spend.spent),
            )
            return False
    try:
        return publish_artifact(
            "markdown",
            key,
            release_markdown(run_dir, manifest, name, spend),
            f"mdp-release {name}: where the release went, this run's spend, the budget left, the certificate",
        )
    except Exception as exc:
        log.warning("could not publish the release artifact: %s", exc)
        return False


def later_approval(root: Path, run_dir: Path, manifest: dict[str, Any]) -> bool:
    """A run that published nothing new (the same content as ``run_dir``) but whose plan a person approved again:
    the decision is appended to ``run_dir``'s approvals.json, signed with the store's key
    (:func:`mdp_core.release.approvals_log.append_approval`), and said in the run's log; returns whether it was."""
    from mdp_core.release import approvals_log, signing

    approval = manifest.get("approval") or {}
    if approval.get("mode") not in DECIDED:
        return False
    run_id = str(manifest.get("flow_run_id"))
    if not approvals_log.append_approval(run_dir, approval, run_id, signing.signing_key(root)):
        return False
    _run_log().info(
        "nothing new published: the approval by %s at %s of the same plan is recorded in %s/%s",
        approval.get("by"),
        approval.get("at"),
        run_dir.name,
        approvals_log.APPROVALS_FILE,
    )
    return True


# ----------------------------------------------------------------------------- the population's budget
RELEASE_FLOW = "mdp-release"  # the release flow's name (flows.release.release_flow)
BUDGET_EVENT = "mdp-release.budget.low"  # the event of a budget that no longer fits a release like the last
BUDGET_RESOURCE = "mdp-release.population."  # its resource: the population
EPOCH_LABEL = "mdp-release.budget-epoch"  # its resource label: the ledger entry that armed the warning
SENT_PREFIX = "mdp-release-budget-low-"  # Prefect variable per population: the warning already sent
_KINDS = {"perturb": "perturbation", "counts": "counts", "prior": "prior"}  # a charge's detail.kind, as shown


def population_slug(population: str) -> str:
    """A population name as a Prefect artifact key or variable name takes it (lowercase letters, digits,
    dashes): ``.`` and ``_`` become ``-``, and then a short hash of the name keeps two names apart."""
    slug = population.replace(".", "-").replace("_", "-")
    if slug == population:
        return slug
    return f"{slug}-{hashlib.sha256(population.encode()).hexdigest()[:6]}"


def budget_key(population: str, root: str | Path) -> str:
    """``budget-<population>-<store8>``: the key of the population's budget artifact in the store at ``root``
    (one history per store and population; ``store8``: the first 8 hex digits of the sha256 of the store's
    resolved path -- a scratch store's run no longer replaces the real store's view: issue 52)."""
    store8 = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:8]
    return f"budget-{population_slug(population)}-{store8}"


def _e(x: Any) -> str:
    return "-" if x is None else _eps(float(x))


def _status_text(population: str, row: dict[str, Any]) -> str:
    """The budget's state in one phrase: how many more releases like the last fit, or LOW / EXHAUSTED."""
    from mdp_core.release.door import SIMULATED_PREFIX

    if row.get("cap") is None:
        if population.startswith(SIMULATED_PREFIX):
            return "no cap (simulated people: no real person, no limit)"
        return "no cap stored yet (the first release sets it from `[release] max_total_epsilon`)"
    if row["status"] == "exhausted":
        return f"**EXHAUSTED**: nothing is left of the cap {_e(row['cap'])}; every new release will be refused"
    if row["status"] == "low":
        return (
            f"**LOW**: {_e(row['left'])} left; the next release like the last ({_e(row['last_cost'])}) would be "
            "refused -- lower its cost, or decide on the budget (`mdp-release ledger cap --raise`, or `new-budget`)"
        )
    if row.get("fits") is None:
        return f"ok: {_e(row.get('left'))} left; no release charged yet in this budget"
    return f"ok: {row['fits']} more release(s) like the last fit"


def _charge_rows(view: Any) -> list[str]:
    """The releases table: each release's charges by what they paid for, every budget, newest last."""
    kinds = list(_KINDS) + sorted({str(c["kind"]) for p in view.paid for c in p.charges} - set(_KINDS))
    head = ["#", "budget", "release", *(_KINDS.get(k) or KIND_WORDS.get(k) or k for k in kinds), "total"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    current = sum(e["kind"] == "new-budget" for e in view.entries)
    for p in view.paid:
        by_kind: dict[str, list[float]] = {}
        for c in p.charges:
            by_kind.setdefault(c["kind"], []).append(float(c["epsilon"]))
        cells = [" + ".join(_eps(x) for x in by_kind[k]) if k in by_kind else "-" for k in kinds]
        budget = f"{p.budget}" + (" (current)" if p.budget == current else "")
        lines.append(f"| {p.n} | {budget} | {p.label().split(' ', 1)[1]} | " + " | ".join(cells) + f" | {_e(p.cost)} |")
    return lines


def budget_markdown(view: Any, history: list[dict[str, Any]], refusal: str | None = None) -> str:
    """The population's budget artifact (``view``: :class:`flows.ledger_cli.BudgetView`; ``history``:
    :meth:`artifacts.private.PrivateStore.history`, the cap's decisions): the state (what is left, what
    the next release like the last costs, how many more fit, LOW / EXHAUSTED), the last refusal (its
    one-line reason, when this run was refused), every release's charges (perturbation, counts, prior)
    and every first cap, lowering, raise and new budget with who and why. Public figures only."""
    row, last = view.row, view.last
    rows = [
        ("status", _status_text(view.population, row)),
        ("cap", _e(row.get("cap"))),
        ("spent (this budget)", f"{_e(row.get('spent'))} in {row.get('releases', 0)} release(s)"),
        ("left", _e(row.get("left"))),
        ("last release", "-" if last is None else f"{last.label()}: {last.breakdown()}"),
        ("the next release like it costs", _e(row.get("last_cost"))),
        ("how many more fit", "-" if row.get("fits") is None else str(row["fits"])),
        ("ledger head", f"entry {row.get('ledger_seq')} `{str(row.get('ledger_head', ''))[:16]}`"),
    ]
    lines = [f"# Budget of population `{view.population}`", ""]
    if refusal:
        lines += [f"**Refused:** {refusal}", ""]
    lines += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), "", "## Releases and their charges", ""]
    lines += _charge_rows(view) if view.paid else ["No release has been charged yet."]
    lines += ["", "## The cap's decisions", ""]
    if history:
        lines += [
            "| entry | when (UTC) | decision | cap after | spent before | by | why |",
            "|---|---|---|---|---|---|---|",
        ]
        words = {"cap": "first cap", "lower": "lowered", "raise": "raised", "new-budget": "new budget (spent 0)"}
        for h in history:
            who, why = (" ".join(str(h[k]).split()).replace("|", "\\|") for k in ("by", "why"))
            decided = words.get(h["kind"], h["kind"])
            lines.append(
                f"| {h['seq']} | {h['at']} | {decided} | {_e(h['cap'])} | {_e(h['spent_before'])} | {who} | {why} |"
            )
    else:
        lines.append("No cap has been set.")
    return "\n".join([*lines, ""])


def _markdown_on_run(flow_run: Any, key: str, md: str, description: str) -> bool:
    """A markdown artifact ``key`` on the current run (a new version only when its content changed:
    :func:`tasks.progress.publish_artifact`), or -- a runner's hook after the run's process ended -- on
    ``flow_run`` by id. True when one was created."""
    from prefect.artifacts import MarkdownArtifact
    from prefect.context import FlowRunContext

    from tasks.progress import publish_artifact

    ctx = FlowRunContext.get()
    here = ctx is not None and ctx.flow_run is not None
    if flow_run is None or (here and str(ctx.flow_run.id) == str(flow_run.id)):  # type: ignore[union-attr]
        return publish_artifact("markdown", key, md, description)
    MarkdownArtifact(key=key, markdown=md, description=description, flow_run_id=flow_run.id).create(_sync=True)  # type: ignore[call-arg]
    return True


def publish_budget(
    root: str | Path, population: str, release: str, flow_run: Any = None, refusal: str | None = None
) -> Any:
    """After a release published or was refused: the artifact ``budget-<population>-<store8>`` (:func:`budget_markdown`)
    on the run, then the low-budget warning (:func:`announce_budget`). Returns the view
    (:class:`flows.ledger_cli.BudgetView`), None when the ledger could not be read (a warning: the
    release's own checks refuse a broken ledger)."""
    from artifacts.private import PrivateStore
    from flows.ledger_cli import read_budget_view

    try:
        priv = PrivateStore(root)
        view = read_budget_view(Path(root), priv, population)
        history = priv.history(population, int(view.row["ledger_seq"])) if view.entries else []
    except Exception as exc:
        log.warning("could not read the budget of %s: %s", population, exc)
        return None
    if flow_run is None:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        flow_run = ctx.flow_run if ctx is not None else None
    description = (
        f"mdp-release: the privacy budget of population {population} in one store: charges, cap decisions, what is left"
    )
    try:
        _markdown_on_run(flow_run, budget_key(population, root), budget_markdown(view, history, refusal), description)
    except Exception as exc:
        log.warning("could not publish the budget artifact: %s", exc)
    announce_budget(view, release, flow_run)
    return view


def budget_message(view: Any, release: str) -> tuple[str, str]:
    """(subject, body) of the low-budget warning: the population, what is left of the cap, what the next
    release like the last costs and what to decide. Public figures only."""
    row, pop = view.row, view.population
    if row["status"] == "exhausted":
        subject = f"mdp-release {release}: population {pop}'s budget is EXHAUSTED (cap {_e(row['cap'])})"
    else:
        subject = (
            f"mdp-release {release}: population {pop}'s budget is LOW: {_e(row['left'])} left of {_e(row['cap'])}, "
            f"the next release like the last costs {_e(row['last_cost'])}"
        )
    from flows.ledger_cli import outlook_line

    body = (
        f"Population {pop} (release {release}): {outlook_line(view).removeprefix(pop + ': ')}.\n"
        f"Spent {_e(row['spent'])} of the cap {_e(row['cap'])} in {row['releases']} release(s) of this budget.\n"
        f"Decide: mdp-release ledger cap --population {pop} --set X --raise --by WHO --why TEXT, or "
        f"mdp-release ledger new-budget --population {pop} --cap X --by WHO --why TEXT (mdp-release ledger shows it).\n"
    )
    return subject, body


def _sent_before(name: str, epoch: int) -> bool:
    """Whether the warning of ``epoch`` is recorded in the Prefect variable ``name`` (False when unreadable:
    a repeated warning beats a lost one; the automation's own bucket drops a repeat within the hour)."""
    from prefect.variables import Variable

    try:
        sent = Variable.get(name, default=None)
    except Exception as exc:
        log.debug("could not read variable %s: %s", name, exc)
        return False
    return isinstance(sent, dict) and sent.get("epoch") == epoch


def announce_budget(view: Any, release: str, flow_run: Any = None) -> bool:
    """Once per population and budget epoch (:func:`flows.ledger_cli.budget_epoch`: a raise or a new budget
    re-arms it), when the budget is ``low`` or ``exhausted``: emit the Prefect event :data:`BUDGET_EVENT`
    (resource ``mdp-release.population.<population>``; related: the flow run, the flow ``mdp-release``, the
    tag ``release:<release>``; the payload: the message of :func:`budget_message` and the figures), which
    the automations of ``mdp-release notify`` turn into a webhook message, and record it in the Prefect
    variable ``mdp-release-budget-low-<population>`` (where ``notify``'s state lives: the server). True
    when the event was emitted."""
    row = view.row
    if row.get("status") not in ("low", "exhausted"):
        return False
    name, epoch = SENT_PREFIX + population_slug(view.population), int(row["epoch"])
    if _sent_before(name, epoch):
        return False
    subject, body = budget_message(view, release)
    figures = {k: row.get(k) for k in ("cap", "spent", "left", "last_cost", "fits", "releases", "status")}
    related = [{"prefect.resource.id": f"prefect.tag.release:{release}", "prefect.resource.role": "tag"}]
    if flow_run is not None:
        run_id, flow_id = getattr(flow_run, "id", None), getattr(flow_run, "flow_id", None)
        related.append({"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"})
        if flow_id is not None:
            flow = {"prefect.resource.id": f"prefect.flow.{flow_id}", "prefect.resource.role": "flow"}
            related.append(flow | {"prefect.resource.name": RELEASE_FLOW})
    try:
        from prefect.events import emit_event
        from prefect.variables import Variable

        resource = {"prefect.resource.id": BUDGET_RESOURCE + view.population, "prefect.resource.name": view.population}
        resource |= {EPOCH_LABEL: str(epoch), "mdp-release.budget-status": str(row["status"])}
        payload = {"subject": subject, "body": body, "population": view.population, "epoch": epoch} | figures
        if emit_event(event=BUDGET_EVENT, resource=resource, related=related, payload=payload) is None:
            return False  # events are off (no Prefect API): nothing sent, nothing recorded
        record = {"population": view.population, "epoch": epoch, "release": release}
        Variable.set(
            name, record | figures | {"at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}, overwrite=True
        )
    except Exception as exc:
        log.warning("could not announce the low budget of %s: %s", view.population, exc)
        return False
    _run_log().warning("population %s: budget %s -- %s", view.population, str(row["status"]).upper(), subject)
    return True


_STAGES: dict[str, str] = {}  # flow run id -> the stage it is at (this process's runs)


# ----------------------------------------------------------------------------- a stop in words
CANCEL_WORDS = "cancelled from Prefect (Cancel in the UI, or `prefect flow-run cancel`)"


class _CancelledIsNotAnError(logging.Filter):
    """Prefect's task engine logs a task run's end in any state but Completed at ERROR ("Finished in state
    Cancelled(...)"): a stage stopped on request is a cancel, logged at WARNING (the run's log in the UI, the
    terminal)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith("Finished in state Cancelled"):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def cancels_at_warning() -> None:
    """Install :class:`_CancelledIsNotAnError` on Prefect's task-run logger (once per process)."""
    logger = logging.getLogger("prefect.task_runs")
    if not any(isinstance(f, _CancelledIsNotAnError) for f in logger.filters):
        logger.addFilter(_CancelledIsNotAnError())


def stop_words(flow_run_id: Any, message: str) -> str:
    """A stopped run's message as the operator reads it: a run whose process got SIGTERM because the run was
    cancelled from Prefect (its state on the server Cancelling or Cancelled: the runner or worker signals the
    process of a run cancelled in the UI) says :data:`CANCEL_WORDS`, not "SIGTERM received"; otherwise
    ``message`` as it is. One read of the run through Prefect's REST API (``GET /flow_runs/{id}``), no retries,
    1 s at most: with the server gone it answers at once (the client's own retries took 1.7 s then, and a stop
    with the server gone has 3 s to write its record)."""
    if "SIGTERM received" not in message or flow_run_id is None:
        return message
    try:
        import httpx
        from prefect.settings import PREFECT_API_KEY, PREFECT_API_URL

        key = PREFECT_API_KEY.value()
        reply = httpx.get(
            f"{str(PREFECT_API_URL.value()).rstrip('/')}/flow_runs/{flow_run_id}",
            headers={"Authorization": f"Bearer {key}"} if key else {},
            timeout=1.0,
        )
        state = reply.raise_for_status().json().get("state_type")
    except Exception as exc:  # noqa: BLE001 -- only words: the server may be gone
        log.debug("stop words of %s: %s", flow_run_id, exc)
        return message
    if state in ("CANCELLING", "CANCELLED"):
        return message.replace("SIGTERM received", CANCEL_WORDS)
    return message


def at_stage(run_id: str, stage: str) -> None:
    """Record that flow run ``run_id`` (of this process) is now at ``stage``: the failure record names it."""
    _STAGES[str(run_id)] = stage


def failure_exception(state: Any) -> BaseException | None:
    """The exception a failed or crashed state holds (None: it holds none)."""
    try:
        state.result(raise_on_failure=True)
    except BaseException as exc:  # the exception the flow failed with
        return exc
    return None


def one_line_reason(state: Any) -> str:
    """``<exception type>: <message>`` of a failed or crashed state, never empty: an exception without a
    message (a crash: ``CancelledError``) gets the state's message instead. The message is the public one
    (``str(exc)``): a :class:`~mdp_core.errors.SecretTableError`'s row numbers are not in it."""
    message = str(getattr(state, "message", None) or "").strip()
    exc = failure_exception(state)
    if exc is not None:
        text = f"{type(exc).__name__}: {str(exc).strip() or message or 'no message'}"
    else:
        text = message or "failed"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "failed")
    return first[:500]


def failure_target(raw: Any) -> tuple[str, Path | None]:
    """(release name, store root) of a flow run's ``config`` parameter, for its failure record: the
    release's own store, whatever form the parameter has (a model, the written keys, the API's full dump).
    A parameter that is no valid config still names its store when it has one (``store`` = a string), or
    the default store when it names none; None when even that is unknown (no record is written then:
    never one in another release's store)."""
    from artifacts.store import check_root
    from flows.config import as_config, default_store, release_name, release_name_of, store_root

    try:
        cfg = as_config(raw)
        return release_name(cfg), store_root(cfg)
    except Exception:
        pass
    name = release_name_of(raw) or "mdp-release"
    try:
        if isinstance(raw, dict) and isinstance(raw.get("store"), str) and raw["store"]:
            return name, check_root(Path(raw["store"]).expanduser().resolve())
        if raw is None or (isinstance(raw, dict) and raw.get("store") is None):
            return name, check_root(default_store())
    except Exception:
        pass
    return name, None


PRIVATE_FAILURES = ("private", "failures")  # under the store root: the operator's details of failures


def keep_private_detail(root: Path, record: str, text: str) -> Path | None:
    """Write ``text`` -- what only the operator may read about a failure, e.g. the row numbers of a
    :class:`~mdp_core.errors.SecretTableError` -- to ``<root>/private/failures/<record>.txt``: created
    exclusively 0600 in folders 0700 (the private part's modes, ``artifacts/private.py``), never through a
    symlink. Returns the file, or None when it could not be written (a warning: the public record stands)."""
    folder = root.joinpath(*PRIVATE_FAILURES)
    try:
        for p in (folder.parent, folder):
            p.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                raise OSError(f"{p} is not a folder of ours")
            os.chmod(p, 0o700)
        path = folder / f"{record}.txt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(text)
        return path
    except OSError as exc:
        log.warning("could not keep the failure's private detail: %s", exc)
        return None


def _write_record(runs: Path, folder: Path, lines: str, record: dict[str, Any]) -> None:
    """``FAILED.txt`` (``lines``) and ``record.json`` (0644) in a temp folder renamed to ``folder``."""
    import json
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-{os.getpid()}-", dir=runs))
    try:
        (tmp / "FAILED.txt").write_text(lines, encoding="utf-8")
        (tmp / "record.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
        os.chmod(tmp, 0o755)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _failure_artifact(flow_run: Any, name: str, kind: str, reason: str, folder: Path | None) -> None:
    """The markdown artifact ``<name>-failure`` on the flow run (Prefect's markdown artifact: it renders as
    markdown): :func:`prefect.artifacts.create_markdown_artifact` inside this run, else (a runner's hook
    after the run's process ended) a ``MarkdownArtifact`` naming the run."""
    from prefect.artifacts import MarkdownArtifact, create_markdown_artifact
    from prefect.context import FlowRunContext

    title = {"cancelled": "CANCELLED", "refused": "REFUSED"}.get(kind, "FAILED")
    md = f"# Release `{name}` {title}\n\n**Reason:** {reason}\n\nRecord: `{folder}/FAILED.txt`\n"
    key = f"{name}-failure"
    why = {"cancelled": "the run was cancelled", "refused": "the release was refused"}.get(kind, "the run failed")
    description = f"mdp-release {name}: why {why}"
    ctx = FlowRunContext.get()
    if ctx is not None and ctx.flow_run is not None and str(ctx.flow_run.id) == str(flow_run.id):
        create_markdown_artifact(markdown=md, key=key, description=description)
    else:
        artifact = MarkdownArtifact(key=key, markdown=md, description=description, flow_run_id=flow_run.id)
        artifact.create(_sync=True)  # type: ignore[call-arg]


def record_failure(flow_run: Any, state: Any, kind: str = "failed") -> Path | None:
    """The failure / cancellation hook's work, in the release's own store:
    ``<store>/runs/<time>-<id8>-failed/FAILED.txt`` (first line: the stage and the one-line reason, a
    cancelled or refused run's prefixed ``cancelled at`` / ``refused at``; then the run's name) beside ``record.json`` (release name,
    state, stage, reason, flow run), written into a temp folder and renamed into place (a reader sees all
    of it or nothing), once per flow run; and a markdown artifact ``<name>-failure`` on the run.

    The reason is the exception's type and message: messages of this project name stages, columns and
    public counts (never the secret table's: no count nor share of its people), never a secret value nor which people (the privacy errors' contract); nothing else of the run
    (parameters, inputs) is written. A :class:`~mdp_core.errors.SecretTableError`'s ``detail`` (the row
    numbers, the secret table's path) goes to ``<store>/private/failures/<record>.txt`` only (:func:`keep_private_detail`), which
    ``FAILED.txt`` names. ``kind``: "failed", "crashed", "cancelled" or "refused" (prefixed ``refused at``;
    the run tagged ``refused``, :func:`tag_refused`; then also the population's budget artifact and, once per budget, its low-budget warning:
    :func:`publish_budget`). A skipped tick (:class:`flows.slot.Skipped`: it did nothing) gets no record: its
    Cancelled state says why."""
    from flows.slot import Skipped
    from mdp_core.errors import SecretTableError

    if isinstance(state.data, Skipped):  # a skipped tick did nothing: its Cancelled state says why, no record
        return None
    stage = _STAGES.pop(str(flow_run.id), "before the first stage")
    reason = f"{kind + ' at ' if kind in ('cancelled', 'refused') else ''}{stage}: {one_line_reason(state)}"
    name, root = failure_target((flow_run.parameters or {}).get("config"))
    now = _dt.datetime.now(_dt.UTC)
    folder = None
    if root is None:
        log.warning("no store known for the failure record of %s: %s", flow_run.id, reason)
    else:
        runs = root / "runs"
        folder = runs / f"{now:%Y%m%d-%H%M%S}-{str(flow_run.id)[-8:]}-failed"
        try:
            runs.mkdir(parents=True, exist_ok=True)
            done = sorted(runs.glob(f"*-{str(flow_run.id)[-8:]}-failed"))
            if done:  # a second hook of the same run (failed and crashed): one record
                return done[0]
            lines = f"{reason}\nflow run {flow_run.name} ({flow_run.id}), {now.isoformat(timespec='seconds')}\n"
            record = {
                "format": "mdp-release-failure",
                "release": name,
                "state": kind,
                "stage": stage,
                "reason": reason,
                "flow_run_id": str(flow_run.id),
                "flow_run_name": str(flow_run.name),
                "at": now.isoformat(timespec="seconds"),
            }
            failed_with = failure_exception(state)
            if isinstance(failed_with, SecretTableError):
                detail = f"{stage}: SecretTableError: {failed_with.detail}\n{lines.splitlines()[1]}\n"
                kept = keep_private_detail(root, folder.name, detail)
                if kept is not None:
                    record["private_detail"] = str(kept.relative_to(root))
                    lines += f"the details (which people, which file): {kept} (owner only), or `mdp-release check`\n"
            _write_record(runs, folder, lines, record)
        except OSError as exc:
            log.warning("could not write the failure record: %s", exc)
            folder = None
    try:
        _failure_artifact(flow_run, name, kind, reason, folder)
    except Exception as exc:
        log.warning("could not publish the failure artifact: %s", exc)
    if kind == "refused":
        tag_refused(flow_run.id)
    population = _population_of((flow_run.parameters or {}).get("config")) if kind == "refused" else None
    if population and root is not None:  # the officer sees why: the budget beside the refusal
        publish_budget(root, population, name, flow_run, reason)
    return folder


def _population_of(raw: Any) -> str | None:
    """The population of a flow run's ``config`` parameter (None: simulated people, or no valid config)."""
    from flows.config import as_config

    try:
        return as_config(raw).release.population
    except Exception:
        return None
