"""The officer's approval: a person lets a release measure the people, after the privacy door admitted its
plan and before its first charge (issue 41).

``[release] approval`` (:func:`flows.config.approval_mode`):

- ``required``: the run publishes the officer's summary of the plan (a markdown
  artifact ``<release name>-approval``: what will be released, the guarantee, this release's charge, the
  population's budget, its history and what is left, the plan's sha256) and pauses through Prefect's own
  input mechanism (:func:`prefect.flow_runs.pause_flow_run` with ``wait_for_input``): the UI's *Resume*
  form, or ``mdp-release approve RUN_ID --by WHO [--note T] | --reject`` (:mod:`flows.approve_cli`, through
  :func:`send_decision`: Prefect's :func:`prefect.flow_runs.resume_flow_run` with the input). Approved: the
  approval record ``{mode, by, at, note, plan_sha256, plan}`` (``plan``: :func:`plan_figures`) goes to the
  manifest (a run nobody was asked about: :func:`unattended`). Rejected, or no decision within
  ``[release] approval_timeout`` seconds: :class:`NotApproved` (a PrivacyError: the run ends Refused),
  nothing measured, nothing charged.
- ``policy`` (unset, with microdata, in a deployed or scheduled run): a scheduled release runs unattended while
  it stays inside the envelope a person approved once (``<store>/approvals/<release name>.json``: the same
  population, the same guarantee figures, a table that is the one approved or a version of the population's
  table (:func:`table_is_version`), the population's current draw (``--new-draw`` is outside), a charge at
  most ``max_charge`` and the budget left after it at least ``min_left`` as every view shows them, at most
  ``max_runs`` unattended runs (each counted under a lock: :func:`take_run`), none after ``until``), and
  waits for a person otherwise; approving a policy release's run (re)records its envelope (the form's
  ``max_charge`` / ``min_left`` / ``max_runs`` / ``until``, prefilled with this plan's charge, this plan's
  charge -- the last release's worth of the budget is never spent unattended --, :data:`DEFAULT_RUNS` and
  none).
- ``none`` (unset, with ``simulate = true``, or with microdata in a run an operator starts in a terminal, who
  approves it by starting it after ``mdp-release check``): nobody is asked.

The approval is the flow's gate: only a Prefect flow run can wait for a person. The stages called directly
(:func:`flows.release.run_stages` outside a flow run, as the tests do) and the library
(:mod:`mdp_core.release.make`) have nobody to ask and do not wait (a warning says so). Prefect's open-source
server has no user accounts: whoever can reach its API can approve, and ``by`` is the name they give.
Everything shown or recorded here is public (the plan's figures, the published budget history): never a
count or a value of the secret table.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import logging
import re
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.input import RunInput
from pydantic import Field, ValidationError, field_validator

from flows.plan import Approval
from mdp_core.declarations.budget import Budget, Epsilon, round_up
from mdp_core.errors import InputError, Interrupted, PrivacyError
from mdp_core.release.door import PrivacyPlan
from mdp_core.release.plan_hash import figures_sha256

APPROVALS = "approvals"  # <store>/approvals/<release name>.json: a policy release's approved envelope
ENVELOPE_FORMAT = "mdp-release-approval-envelope"
GUARANTEE_FIGURES = ("epsilon_per_unit", "stretch", "protection_radius", "additive_epsilon", "distance_unit")
RECEIVED = "Decision received"  # the approval artifact's first words once the run has taken the decision
DEFAULT_RUNS = 12  # unattended runs an approved envelope admits unless the officer says otherwise (a year, monthly)
VERSION_SHARE = 0.8  # a version of the population's table, unattended: this share of its people and of theirs in common
POLL = 2  # s between the paused run's looks for its decision (and for the resume a stop sends: see _Deadline)
GRACE = 60  # s: Prefect's own pause deadline is this much later than ours (ours resumes the run first)
log = logging.getLogger("mdp_release")


MARKUP = frozenset("<>`[]|")  # what would make a name or a note markup (HTML, code, links, table cells) where shown
NOT_TEXT = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})  # Unicode categories: controls, zero-width, bidi


def plain_text(text: str, what: str, blank: bool = True) -> str:
    """``text`` stripped, when it is plain printable text: ValueError naming ``what`` and the refused characters
    (controls, zero-width and bidi formatting -- Unicode categories :data:`NOT_TEXT` -- and the markup
    characters :data:`MARKUP`), or when it is blank and ``blank`` is False. A name or a note is signed into the
    release and shown in markdown: what a reader sees must be what was typed."""
    import unicodedata

    bad = sorted({c for c in text if c in MARKUP or unicodedata.category(c) in NOT_TEXT})
    if bad:
        shown = ", ".join(f"U+{ord(c):04X}" + (f" {c!r}" if c in MARKUP else "") for c in bad)
        raise ValueError(f"{what} must be plain printable text (no control, zero-width or markup characters): {shown}")
    if not blank and not text.strip():
        raise ValueError(f"{what} must not be blank")
    return text.strip()


class ApprovalInput(RunInput):
    """The officer's decision (Prefect's Resume form; ``mdp-release approve``): who (a printable, non-blank
    name), a plain-text note and the sha256 of the plan approved (prefilled with this run's: an approval of
    another plan is refused)."""

    approve: bool = Field(description="true: measure and release as planned; false: refuse (nothing is measured)")
    name: str = Field(min_length=1, description="who decides (recorded in the manifest): printable, not blank")
    note: str = Field("", description="why, or a reference (recorded in the manifest): plain text")
    plan: str = Field("", description="the sha256 of the plan you approve (prefilled: this run's plan)")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return plain_text(value, "the name", blank=False)

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        return plain_text(value, "the note")


class PolicyApprovalInput(ApprovalInput):
    """A policy release's decision: approving also records the envelope later runs may stay inside (at most
    ``max_runs`` unattended runs, none after ``until``; ``min_left`` None: this release's charge)."""

    max_charge: float = Field(ge=0, description="the envelope: a later run may charge at most this much")
    min_left: float | None = Field(
        None, ge=0, description="the envelope: and leave at least this much of the budget (default: this charge)"
    )
    max_runs: int = Field(DEFAULT_RUNS, ge=0, description="the envelope: at most this many unattended runs")
    until: str = Field("", description="the envelope: no unattended run after this date (YYYY-MM-DD, UTC)")

    @field_validator("until")
    @classmethod
    def _until(cls, value: str) -> str:
        return end_date(value)


def end_date(value: str) -> str:
    """``value`` as an ISO date (YYYY-MM-DD; "" none): ValueError otherwise."""
    if not value.strip():
        return ""
    try:
        return _dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise ValueError(f"the envelope's end date must be YYYY-MM-DD, not {value!r}") from None


class NotApproved(PrivacyError):
    """The officer rejected the release, or nobody decided in time: nothing was measured or charged."""


@dataclass(frozen=True)
class BudgetView:
    """The population's budget as this release would find it (read only): the cap that applies (the stored
    one, or the config's for a first cap: :meth:`artifacts.private.PrivateStore.effective_cap`), spent, left now and after this release's whole charge
    (None without a cap), and the budget's published history of decisions."""

    population: str
    cap: float | None
    cap_note: str
    spent: float
    left: Fraction | None
    left_after: Fraction | None
    history: tuple[dict[str, Any], ...]


# ---------------------------------------------------------------------------------------- the plan
def plan_figures(plan: PrivacyPlan) -> dict[str, Any]:
    """The admitted plan's public figures: population, radius, max_distance, the guarantee (with its
    statement), each planned charge and the whole charge (exact, rounded up), the door's settings and the
    sealed table's keyed handle (``table``: what the officer approves is what is measured)."""
    return {
        "population": plan.population,
        "radius": plan.radius,
        "max_distance": plan.max_distance,
        "guarantee": plan.guarantee.record(),
        "charges": plan.charges(),
        "charge": round_up(plan.charge.value),
        "settings": plan.settings.as_params(),
        "table": plan.table,  # the sealed table's keyed handle (None: simulated people); release_provenance.json's
    }


def plan_sha256(plan: PrivacyPlan) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace) of :func:`plan_figures`
    (:func:`mdp_core.release.plan_hash.figures_sha256`, the one the audit recomputes)."""
    return figures_sha256(plan_figures(plan))


def budget_view(root: str | Path, plan: PrivacyPlan, config_cap: float | None) -> BudgetView | None:
    """The population's budget before this release (None: simulated people, no budget to show). Read only:
    the ledger is verified (LedgerError otherwise), nothing is written. A config cap that differs from the
    stored one is ignored, and the cap's note says so."""
    if plan.population is None:
        return None
    from artifacts.private import PrivateStore

    private = PrivateStore(root)
    now = private.budget(plan.population)
    cap, _, notes = PrivateStore.effective_cap(plan.population, now.cap, config_cap)
    note = "the ledger's" if now.cap is not None else "set by this release's max_total_epsilon"
    if notes:
        note += f"; this release's max_total_epsilon {config_cap:g} is ignored"
    left = Budget.of(cap).left(now.spent)
    after = None if left is None else left - plan.charge.value
    history = tuple(private.history(plan.population, now.seq)) if now.seq >= 0 else ()
    return BudgetView(plan.population, cap, note, now.spent, left, after, history)


def _eps(x: Fraction | float | None) -> str:
    """:func:`flows.ledger_cli.epsilon_text` (the one rule), "none" for None."""
    from flows.ledger_cli import epsilon_text

    return "none" if x is None else epsilon_text(x)


def _cell(text: Any) -> str:
    """Free text (who, why) as one table cell, shown literally (never markup, a link or a cell break)."""
    from mdp_core.release.report_approval import markdown_text

    return markdown_text(text)


def summary_markdown(name: str, plan: PrivacyPlan, view: BudgetView | None, sha: str, how: str) -> str:
    """The officer's summary of the plan (public figures only), ending with ``how`` to decide."""
    g = plan.guarantee
    from flows.ledger_cli import KIND_WORDS

    charges = ", ".join(f"{KIND_WORDS.get(k, k)} {_eps(v)}" for k, v in plan.charges().items())
    who = f"population `{plan.population}`" if plan.population else "SIMULATED people (nobody's data)"
    lines = [
        f"# Release `{name}` waits for your approval",
        "",
        f"**What will be released:** {who}: each person's record perturbed by the certified eps-mDP mechanism "
        f"(`microdata.parquet`), the noisy counts per output, zone and total (`aggregates.parquet`), the "
        "mechanism and its public instance, the evaluation; signed. Nothing is measured before you approve.",
        "",
        f"**Guarantee:** {g.statement()}.",
        "",
        f"**This release's charge:** {_eps(plan.charge.value)} ({charges}; protection radius "
        f"{plan.radius:g} {g.distance_unit}); a charge this draw already paid costs nothing again.",
    ]
    if view is None:
        lines += ["", "**Budget:** simulated people have no cap."]
    else:
        lines += [
            "",
            f"**Budget of `{view.population}`:** cap {_eps(view.cap)} ({view.cap_note}), spent {_eps(view.spent)}, "
            f"left {_eps(view.left)}; after this release at least {_eps(view.left_after)} left. Its history:",
            "",
            "| seq | decision | at (UTC) | by | why | cap after | spent before | spent, all budgets |",
            "|---|---|---|---|---|---|---|---|",
            *([] if view.history else ["| - | no decision on this budget yet | | | | | | |"]),
            *(
                f"| {h['seq']} | {h['kind']} | {h['at']} | {_cell(h['by'])} | {_cell(h['why'])} | {_eps(h['cap'])} | "
                f"{_eps(h['spent_before'])} | {_eps(h['spent_all_budgets'])} |"
                for h in view.history
            ),
        ]
    lines += ["", f"**Plan sha256:** `{sha}`", "", how, ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- the envelope
def envelope_path(root: str | Path, name: str) -> Path:
    return Path(root) / APPROVALS / f"{name}.json"


def read_envelope(root: str | Path, name: str) -> dict[str, Any] | None:
    """The approved envelope of release ``name`` (None: none yet). InputError when it is unreadable."""
    path = envelope_path(root, name)
    if not path.exists():
        return None
    from mdp_core.runtime.files import read_json

    data = read_json(path)
    if data.get("format") != ENVELOPE_FORMAT:
        raise InputError(f"{path}: not an approval envelope (format {data.get('format')!r})")
    return data


def write_envelope(root: str | Path, name: str, plan: PrivacyPlan, answer: PolicyApprovalInput, at: str) -> Path:
    """Record the envelope a person approved for release ``name`` (owner-only file, written atomically under
    the approvals' lock; no unattended run used yet). ``min_left`` None: this release's charge as shown."""
    from mdp_core.runtime.files import write_json

    floor = answer.min_left if answer.min_left is not None else float(_eps(plan.charge.value))
    record = {
        "format": ENVELOPE_FORMAT,
        "version": 2,
        "release": name,
        "population": plan.population,
        "table": plan.table,  # the sealed table's keyed handle it was approved with
        "guarantee": {k: plan.guarantee.record()[k] for k in GUARANTEE_FIGURES},
        "max_charge": float(answer.max_charge),
        "min_left": float(floor),
        "max_runs": int(answer.max_runs),
        "runs_used": 0,
        "until": answer.until or None,
        "by": answer.name,
        "at": at,
        "note": answer.note,
        "plan_sha256": plan_sha256(plan),
    }
    with _locked(root):
        return write_json(envelope_path(root, name), record)


def _locked(root: str | Path) -> AbstractContextManager[Path]:
    """The approvals' lock (``<store>/approvals/.lock``, 0600, the folder made owner-only): one writer of envelopes."""
    from mdp_core.runtime.files import exclusive_lock

    folder = Path(root) / APPROVALS
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return exclusive_lock(folder / ".lock")


def take_run(root: str | Path, name: str, approved_at: Any) -> dict[str, Any] | None:
    """Count one unattended run against release ``name``'s envelope, under the approvals' lock: the envelope as
    counted (``runs_used`` one more), or None when its runs were used up meanwhile or it was approved anew
    (``at`` changed). A run let through counts whether or not it then charges (it may still be refused)."""
    from mdp_core.runtime.files import write_json

    with _locked(root):
        envelope = read_envelope(root, name)
        if envelope is None or envelope.get("at") != approved_at or _runs_left(envelope) <= 0:
            return None
        envelope["runs_used"] = int(envelope.get("runs_used", 0)) + 1
        write_json(envelope_path(root, name), envelope)
        return envelope


def _runs_left(envelope: dict[str, Any]) -> int:
    """Unattended runs the envelope still admits (an envelope recorded without ``max_runs``: none)."""
    return int(envelope.get("max_runs", 0)) - int(envelope.get("runs_used", 0))


def table_is_version(root: str | Path, people: Any, population: str | None) -> bool:
    """Whether ``people`` (the sealed table's, :class:`mdp_core.release.similarity.People`) are a version of
    ``population``'s table: at least :data:`VERSION_SHARE` of them among the population's people on record and
    of the population's among them (:meth:`artifacts.private.PrivateStore.own_overlap`; a month's version moves
    about 1 %; stricter than the door's 0.5 for one population, since below it a person decides, not the door).
    False without people or without a table on record. Read only; the share is never shown."""
    if people is None or population is None:
        return False
    from artifacts.private import PrivateStore

    found = PrivateStore(root).own_overlap(people, population)
    return found is not None and min(found.new, found.old) >= VERSION_SHARE


def outside_envelope(
    envelope: dict[str, Any] | None,
    plan: PrivacyPlan,
    view: BudgetView | None,
    *,
    version: bool = False,
    new_draw: bool = False,
    today: _dt.date | None = None,
) -> list[str]:
    """Why the plan is outside the approved ``envelope`` (empty: inside): a fresh secret draw (``new_draw``);
    its unattended runs used up, or ``today`` (UTC) after its end date; a table other than the one approved
    that is not a ``version`` of the population's (:func:`table_is_version`); another population or guarantee;
    exact arithmetic on the charge and what it leaves as every view shows them
    (:func:`flows.ledger_cli.epsilon_text`: an envelope of 6.5 admits the charge 6.500000005 that reads 6.5);
    the population's cap is enforced exactly by the ledger."""
    if envelope is None:
        return ["no envelope has been approved for this release yet"]
    why = ["a fresh secret draw (--new-draw) is outside every envelope"] if new_draw else []
    if _runs_left(envelope) <= 0:
        why.append(
            f"the envelope's unattended runs are used ({envelope.get('runs_used', 0)} of {envelope.get('max_runs', 0)})"
        )
    until = envelope.get("until")
    if until and (today or _dt.datetime.now(_dt.UTC).date()) > _dt.date.fromisoformat(str(until)):
        why.append(f"the envelope ended on {until}")
    if plan.table != envelope.get("table") and not version:
        why.append(f"the table is not recognised as a version of population {plan.population!r}'s table")
    if envelope.get("population") != plan.population:
        why.append(f"population {plan.population!r}, the envelope's is {envelope.get('population')!r}")
    figures = {k: plan.guarantee.record()[k] for k in GUARANTEE_FIGURES}
    if envelope.get("guarantee") != figures:
        changed = [k for k in GUARANTEE_FIGURES if (envelope.get("guarantee") or {}).get(k) != figures[k]]
        why.append(f"the guarantee's {', '.join(changed)} differ from the envelope's")
    ceiling = Epsilon.of(float(envelope.get("max_charge", 0.0)), "max_charge").value
    if Fraction(_eps(plan.charge.value)) > ceiling:  # the charge as every view shows it (the cap: exact)
        why.append(f"the charge {_eps(plan.charge.value)} is above the envelope's {_eps(ceiling)}")
    floor = Epsilon.of(float(envelope.get("min_left", 0.0)), "min_left").value
    left = None if view is None else view.left_after
    if floor > 0 and left is None:
        why.append(f"the population has no cap, the envelope keeps {_eps(floor)} of it left")
    elif floor > 0 and left is not None and Fraction(_eps(left)) < floor:
        why.append(f"it would leave {_eps(left)} of the budget, the envelope keeps {_eps(floor)}")
    return why


# ---------------------------------------------------------------------------------------- the hook
def wait_for_approval(
    approval: Approval, store: Any, plan: PrivacyPlan, people: Any = None, new_draw: bool = False
) -> dict[str, Any] | None:
    """The officer's approval (``approval``: the run plan's, :attr:`flows.plan.RunPlan.approval`) of the
    admitted ``plan`` before its first charge (module docstring): the
    approval record {mode, by, at, note, plan_sha256, plan} for the manifest, or None (``approval = none``, or
    not in a flow run). NotApproved when rejected or not decided in time (nothing measured or charged).
    ``people``: the sealed table's (secret, memory only: a policy's table must be a version of the
    population's); ``new_draw``: the run asks for a fresh secret draw (outside every envelope)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    in_flow = ctx is not None and ctx.flow_run is not None
    flow_run = ctx.flow_run if ctx is not None else None
    mode = approval.mode(deployed=getattr(flow_run, "deployment_id", None) is not None)
    _say_which_cap(approval, store, plan)
    if mode == "none":
        return None
    name, sha = approval.release, plan_sha256(plan)
    view = budget_view(store.root, plan, approval.max_total_epsilon) if in_flow or mode == "policy" else None
    why: list[str] = []
    if mode == "policy":
        within, why = _policy(store.root, name, plan, view, people, new_draw)
        if within is not None:
            return _within_policy(within, sha) | {"plan": plan_figures(plan)}
        _logger().info("approval = policy: a person decides: %s", "; ".join(why))
    if ctx is None or ctx.flow_run is None:
        _logger().warning("approval = %s: not a Prefect flow run (the stages called directly): nobody to ask", mode)
        return None
    answer = _ask(approval, str(ctx.flow_run.id), plan, view, sha, policy=mode == "policy", reasons=why)
    at = _now()
    if isinstance(answer, PolicyApprovalInput):
        write_envelope(store.root, name, plan, answer, at)
    _logger().info("release %s approved by %s (plan sha256 %s)", name, answer.name, sha)
    return {
        "mode": mode,
        "by": answer.name,
        "at": at,
        "note": answer.note,
        "plan_sha256": sha,
        "plan": plan_figures(plan),
    }


def unattended(plan: PrivacyPlan | None) -> dict[str, Any]:
    """The approval record of a run nobody was asked about (``approval = none``, or the stages called outside a
    flow run): mode "none", the plan's figures and hash (the audit checks them like an approved plan's)."""
    if plan is None:
        return {"mode": "none", "by": None, "at": None, "note": None}
    return {
        "mode": "none",
        "by": None,
        "at": None,
        "note": None,
        "plan_sha256": plan_sha256(plan),
        "plan": plan_figures(plan),
    }


def _say_which_cap(approval: Approval, store: Any, plan: PrivacyPlan) -> None:
    """A warning in the run's log when the config's ``max_total_epsilon`` differs from the population's stored
    cap: the stored one applies (:meth:`artifacts.private.PrivateStore.effective_cap`). Read only."""
    config_cap = approval.max_total_epsilon
    if plan.population is None or config_cap is None:
        return
    from artifacts.private import PrivateStore

    stored = PrivateStore(store.root).budget(plan.population).cap
    for note in PrivateStore.effective_cap(plan.population, stored, config_cap)[2]:
        _logger().warning("cap: %s", note)


def _policy(
    root: str | Path, name: str, plan: PrivacyPlan, view: BudgetView | None, people: Any, new_draw: bool
) -> tuple[dict[str, Any] | None, list[str]]:
    """A policy release: (the envelope, counted one run: :func:`take_run`, when the plan is inside it, else
    None; why it is outside)."""
    envelope = read_envelope(root, name)
    same = envelope is not None and plan.table == envelope.get("table")
    version = same or (envelope is not None and not new_draw and table_is_version(root, people, plan.population))
    why = outside_envelope(envelope, plan, view, version=version, new_draw=new_draw)
    if why or envelope is None:
        return None, why
    counted = take_run(root, name, envelope.get("at"))
    return counted, [] if counted is not None else ["the envelope's unattended runs were used meanwhile"]


def _within_policy(envelope: dict[str, Any], sha: str) -> dict[str, Any]:
    """The approval record of a run inside the approved envelope: by whom and when it was approved, and which
    of its unattended runs this is."""
    note = (
        f"unattended run {envelope.get('runs_used')} of {envelope.get('max_runs')}, within the envelope approved "
        f"for plan {str(envelope.get('plan_sha256'))[:12]} (charge at most {envelope.get('max_charge')}, at least "
        f"{envelope.get('min_left')} left" + (f", until {envelope['until']}" if envelope.get("until") else "") + ")"
    )
    note += f": {envelope['note']}" if envelope.get("note") else ""
    _logger().info("approval = policy: inside the envelope %s approved at %s", envelope.get("by"), envelope.get("at"))
    return {
        "mode": "policy",
        "by": str(envelope.get("by")),
        "at": str(envelope.get("at")),
        "note": note,
        "plan_sha256": sha,
    }


def _ask(
    approval: Approval,
    run_id: str,
    plan: PrivacyPlan,
    view: BudgetView | None,
    sha: str,
    policy: bool,
    reasons: list[str] | None = None,
) -> ApprovalInput:
    """Publish the officer's summary (with ``reasons``: why a policy release asks: the envelope's conditions it fails),
    pause the run for the decision (Prefect's Resume form or :func:`send_decision`) and return the approving
    answer; NotApproved otherwise."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.exceptions import FlowPauseTimeout
    from prefect.flow_runs import pause_flow_run

    from flows import operate_ui

    name, timeout = approval.release, approval.timeout
    how = (
        (f"**Why you are asked:** {'; '.join(reasons)}.\n\n" if reasons else "")
        + f"**To decide** (within {timeout} s, else the run ends Refused): *Resume* on the run's page, or "
        f"`mdp-release approve {run_id} --by WHO [--note TEXT]` (`--reject` to refuse)."
    )
    md = summary_markdown(name, plan, view, sha, how)
    create_markdown_artifact(markdown=md, key=f"{name}-approval", description=f"mdp-release {name}: approve the plan")
    operate_ui.at_stage(run_id, "the officer's approval")
    _logger().warning("release %s waits for approval: mdp-release approve %s --by WHO (or --reject)", name, run_id)
    shown = float(_eps(plan.charge.value))
    defaults: dict[str, Any] = {"max_charge": shown, "min_left": shown, "max_runs": DEFAULT_RUNS} if policy else {}
    form = (PolicyApprovalInput if policy else ApprovalInput).with_initial_data(description=md, plan=sha, **defaults)
    deadline = _Deadline(run_id, timeout)
    try:
        answer = pause_flow_run(wait_for_input=form, timeout=timeout + GRACE, poll_interval=POLL, key="approval")
    except FlowPauseTimeout:
        _stopped_while_waiting()  # cancelled meanwhile: Interrupted, the run ends Cancelled
        raise NotApproved(_refusal(name, f"nobody decided within {timeout} s")) from None
    except ValidationError as exc:  # the UI's form lets any string through: the decision is not a valid one
        why = "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in exc.errors())
        raise NotApproved(_refusal(name, f"the decision was not valid ({why})")) from None
    finally:
        deadline.cancel()
    if deadline.fired == "stop":
        _stopped_while_waiting()  # Interrupted: the run ends Cancelled, nothing measured
    if deadline.fired:
        raise NotApproved(_refusal(name, f"nobody decided within {timeout} s"))
    received = f"{'approved' if answer.approve else 'rejected'} by {answer.name} at {_now()}"
    create_markdown_artifact(markdown=f"{RECEIVED}: {received}\n\n{md}", key=f"{name}-approval")  # approve waits for it
    if not answer.approve:
        why = f"rejected by {answer.name}" + (f" ({answer.note})" if answer.note else "")
        raise NotApproved(_refusal(name, why))
    if answer.plan.strip().lower() != sha:
        raise NotApproved(_refusal(name, f"{answer.name} approved plan {answer.plan[:12]!r}, this run's is {sha[:12]}"))
    return answer


def _stopped_while_waiting() -> None:
    """Raise :class:`~mdp_core.errors.Interrupted` when this process was asked to stop while the run waited for its
    officer (SIGTERM from ``serve`` stopping or a worker, Ctrl-C, a Cancel from Prefect), in words that say so:
    ``stopped while waiting for the officer's approval: SIGTERM received; nothing was measured, nothing was
    charged`` -- nothing was solving (the generic stop read "solve stopped: ..., during the officer's approval").
    A deadline keeps its :class:`~mdp_core.errors.StageTimeout`."""
    from mdp_core.runtime import control

    token = control.current()
    reason = token.reason()
    if reason is None:
        return
    if token.timed_out():
        token.check("the officer's approval")
    raise Interrupted(
        f"stopped while waiting for the officer's approval: {reason}; nothing was measured, nothing was charged",
        stage="the officer's approval",
        reason=reason,
    )


def _refusal(name: str, why: str) -> str:
    return f"release {name} refused: not approved, {why}; nothing was measured, nothing was charged"


class _Deadline:
    """While the run waits: at ``timeout`` s, resume the paused run ``run_id`` with a refusal (before Prefect's
    own pause deadline, which would end the run Failed under its own name), ``fired`` = "timeout"; on a stop
    request of this process (SIGTERM from ``serve``'s shutdown or a worker, Ctrl-C: :mod:`mdp_core.runtime.control`)
    at once, ``fired`` = "stop" -- Prefect's pause polls the server and never looks at signals, so without it a
    paused run outlived its runner's SIGTERM by the runner's 30 s grace. Each only when the resume took effect."""

    def __init__(self, run_id: str, timeout: int) -> None:
        self.fired = ""
        self._done = threading.Event()
        self._end = time.monotonic() + timeout
        ctx = contextvars.copy_context()  # the flow's Prefect settings (its API)
        self._thread = threading.Thread(target=ctx.run, args=(self._watch, run_id), daemon=True, name="approval-wait")
        self._thread.start()

    def _watch(self, run_id: str) -> None:
        from mdp_core.runtime import control

        while not self._done.wait(0.2):
            stop = control.PROCESS.reason()
            if stop is None and time.monotonic() < self._end:
                continue
            why = (
                ("stop", "mdp-release (stopped)", stop)
                if stop
                else ("timeout", "mdp-release (no decision in time)", "")
            )
            try:
                send_decision(run_id, False, why[1], why[2] or "approval_timeout reached")
                self.fired = why[0]
            except Exception as exc:  # decided meanwhile (not paused any more), or cancelled
                log.debug("approval wait of %s: %s", run_id, exc)
            return

    def cancel(self) -> None:
        """Stop watching, or wait for a resume it is sending (then ``fired`` is final)."""
        self._done.set()
        self._thread.join(timeout=60)


def _logger() -> Any:
    """The flow run's logger (its log in the UI), or this module's outside a flow run."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return log


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------- the terminal
def send_decision(
    run_id: str, approve: bool, by: str, note: str = "", plan: str = "", **envelope: float | int | str
) -> None:
    """Resume the paused run ``run_id`` with the decision (Prefect's :func:`prefect.flow_runs.resume_flow_run`
    with the input; ``plan``: the sha256 of the plan approved; ``envelope``: a policy release's ``max_charge``
    / ``min_left`` / ``max_runs`` / ``until``). InputError when the run is not waiting for an approval or the
    server refuses the input."""
    from prefect.exceptions import FlowPauseTimeout, NotPausedError, ObjectNotFound
    from prefect.flow_runs import resume_flow_run

    uid = flow_run_uuid(run_id)
    payload = {"approve": approve, "name": by, "note": note, "plan": plan, **envelope}
    try:
        resume_flow_run(uid, run_input=payload)
    except NotPausedError:
        raise InputError(
            f"flow run {run_id} is not waiting for an approval (decided, timed out or not paused)"
        ) from None
    except ObjectNotFound:
        raise InputError(f"no flow run {run_id} on this Prefect server") from None
    except (FlowPauseTimeout, RuntimeError) as exc:
        raise InputError(f"flow run {run_id}: the server refused the decision: {exc}") from None


@dataclass(frozen=True)
class Waiting:
    """What ``mdp-release approve`` shows of a run waiting for its officer: its name, the summary's lines
    and the plan's sha256 (from the run's approval artifact)."""

    name: str
    summary: tuple[str, ...]
    sha: str


def waiting_run(run_id: str) -> Waiting:
    """The run ``run_id`` when it waits for an approval (Paused, with its approval summary); InputError
    saying what it is otherwise (not found, Running -- decided already, or killed while it ran --, ended)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.exceptions import ObjectNotFound

    uid = flow_run_uuid(run_id)
    with get_client(sync_client=True) as client:
        try:
            run = client.read_flow_run(uid)
        except ObjectNotFound:
            raise InputError(f"no flow run {run_id} on this Prefect server") from None
        if run.state_type != StateType.PAUSED:
            hint = {
                StateType.RUNNING: "running: decided already, or its process was killed (kill -9) while it ran",
                StateType.CRASHED: "crashed: its process is gone",
            }.get(run.state_type or StateType.SCHEDULED, "not paused")
            raise InputError(f"flow run {run_id} is not waiting for an approval: it is {run.state_name} ({hint})")
        md = _approval_markdown(client, uid)
    found = re.search(r"Plan sha256:\*\* `([0-9a-f]{64})`", md or "")
    if md is None or found is None:
        raise InputError(f"flow run {run_id} is paused but not for an officer's approval (no approval summary)")
    summary = tuple(ln for ln in md.splitlines() if ln.startswith(("# ", "**")) and not ln.startswith("**To decide"))
    return Waiting(run.name, summary, found.group(1))


def _approval_markdown(client: Any, flow_run_id: UUID) -> str | None:
    """The latest approval artifact of the flow run (None: none)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.client.schemas.sorting import ArtifactSort

    arts = client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])),
        sort=ArtifactSort.CREATED_DESC,
    )
    mds = [a.data for a in arts if (a.key or "").endswith("-approval") and isinstance(a.data, str)]
    return mds[0] if mds else None


def decision_taken(run_id: str, within: float) -> bool:
    """Whether the run took the decision sent to it (its approval artifact starts with :data:`RECEIVED`)
    within ``within`` s; if not, its process is gone (a paused run killed with -9 stays Paused on the server):
    the run is set Crashed, saying so."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    uid, end = flow_run_uuid(run_id), time.monotonic() + within
    with get_client(sync_client=True) as client:
        while time.monotonic() < end:
            if (_approval_markdown(client, uid) or "").startswith(RECEIVED):
                return True
            time.sleep(1.0)
        why = f"its process did not take the officer's decision within {within:g} s: gone (killed?) while it waited"
        client.set_flow_run_state(uid, Crashed(message=why + "; nothing was measured, nothing was charged"), force=True)
    return False


def flow_run_uuid(run_id: str) -> UUID:
    """``run_id`` as a flow run's UUID; InputError otherwise."""
    try:
        return UUID(run_id)
    except ValueError:
        raise InputError(
            f"{run_id!r} is not a flow run id (the end of the run's `View at .../flow-run/ID` line)"
        ) from None


__all__ = [
    "ApprovalInput",
    "NotApproved",
    "PolicyApprovalInput",
    "budget_view",
    "outside_envelope",
    "plan_figures",
    "plan_sha256",
    "send_decision",
    "summary_markdown",
    "wait_for_approval",
]
