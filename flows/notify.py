"""``mdp-release notify``: an operator hears about a release that failed, was refused, or whose population's
budget runs low.

``mdp-release notify --release NAME --webhook URL`` puts two things on the Prefect server:

* a *Custom Webhook* notification block (:class:`prefect.blocks.notifications.CustomWebhookNotificationBlock`)
  named like the automation, that POSTs ``{"subject": ..., "body": ..., "text": subject + body}`` (JSON) to
  the webhook. The URL is kept in the block's *secret* values (it often is a credential, e.g. a chat
  service's incoming-webhook URL): the UI and the API show it masked;
* an *automation* (:class:`prefect.automations.Automation`) whose :class:`~prefect.automations.EventTrigger`
  fires on the event ``prefect.flow-run.<State>`` of a flow run of the flow ``mdp-release`` that carries
  the tag ``release:NAME`` (:func:`flows.plan.run_tags`; ``--release '*'``: any release), for each
  state of ``--states`` (default Failed, Refused, Crashed, Cancelled, TimedOut; ``--no-cancel-alerts``
  leaves Cancelled out), and on the low-budget event of a population that such a run finds low
  (``BudgetLow``: :func:`flows.operate_ui.announce_budget`, sent once per population and budget and
  recorded in a Prefect variable); and whose :class:`~prefect.automations.SendNotification` action sends
  the message through the block. The server renders and sends it (its event and automation services), so
  no process of ours needs to run. The trigger sends at most one message per flow run (and per budget)
  within :data:`DEDUP_WINDOW`: a run cancelled from the UI enters Cancelled twice, 50 s apart.

The message names the flow run, its state, the release, the state's message and a link to the run in the
UI -- nothing else: never the run's parameters (the config), never a value of the secret table. The state
messages of the release flow are value-free by design (errors name rows, columns and counts, never cell
values: ``mdp_core.errors``), so the message carries no secret value either. A refused release's subject
says REFUSED and the refusal's one line; a low budget's message gives the population's public figures
(cap, spent, left, the last release's cost), never a count of people.

Names: the automation and its block share one name, by default ``mdp-release-notify-<release>``
(``mdp-release-notify-all-releases`` for ``'*'``); re-running the command with the same name replaces
both (idempotent). ``--remove`` deletes both; ``--list`` shows the notifications this command made (their
automations' descriptions start with :data:`MARKER`).

Prefect's own documentation of the pieces: "Automations and triggers" (event triggers, ``match_related``,
the ``send-notification`` action and its Jinja templates with ``flow_run``) and the notification blocks'
reference, https://docs.prefect.io/v3/automate/events/automations-triggers.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import urllib.parse
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flows.operate_ui import BUDGET_EVENT, BUDGET_RESOURCE, EPOCH_LABEL, RELEASE_FLOW, SENT_PREFIX
from mdp_core.errors import InputError

FLOW_NAME = RELEASE_FLOW  # the release flow's name (flows.release.release_flow)
ALL = "*"  # --release '*': every release
BUDGET_LOW = "BudgetLow"  # not a Prefect state: the event BUDGET_EVENT (flows.operate_ui.announce_budget)
DEFAULT_STATES = ("Failed", "Refused", "Crashed", "Cancelled", "TimedOut", BUDGET_LOW)
CANCEL_STATES = ("Cancelled", "Cancelling")  # what --no-cancel-alerts leaves out
# Prefect's state names (a flow-run event is ``prefect.flow-run.<state name>``); Refused: the release flow's
# Failed state of a refused release (flows.release); BudgetLow: a population's budget no longer fits a
# release like its last
STATE_NAMES = (
    "Failed",
    "Refused",
    "Crashed",
    "Cancelled",
    "TimedOut",
    BUDGET_LOW,
    "Cancelling",
    "Completed",
    "Cached",
    "Late",
    "Paused",
    "Suspended",
    "AwaitingRetry",
    "Retrying",
    "Running",
    "Pending",
    "Scheduled",
    "AwaitingConcurrencySlot",
)
FLOW_RUN_EVENT = "prefect.flow-run."
# One message per flow run (and per population's budget epoch) within this window: a run cancelled from the
# UI enters Cancelled twice (its own stop, then the runner's), 50 s apart; the second says nothing new.
DEDUP_WINDOW = timedelta(hours=1)
MARKER = "mdp-release notify"  # how --list and --remove recognise the automations this module made
PREFIX = "mdp-release-notify-"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")  # a Prefect block name: lowercase, digits, dashes
RELEASE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")  # a release name (flows.config: ``name``)
URL_SECRET = "webhook_url"  # the block's secret value that holds the webhook URL


@dataclass(frozen=True)
class Notification:
    """What ``notify`` puts on the server.

    Attributes:
        name: the automation's and its notification block's name.
        release: the release name, or :data:`ALL`.
        webhook: the webhook URL (http or https).
        states: Prefect state names whose flow-run events fire the automation.
    """

    name: str
    release: str
    webhook: str
    states: tuple[str, ...] = DEFAULT_STATES


@dataclass(frozen=True)
class Existing:
    """A notification found on the server (``--list``): the webhook shown by :func:`redact` only."""

    name: str
    automation_id: str
    enabled: bool
    description: str
    states: tuple[str, ...]
    webhook: str  # redacted: scheme://host[:port]/...
    block_id: str | None


# ----------------------------------------------------------------------------- argument handling
def default_name(release: str) -> str:
    """``mdp-release-notify-<release>`` (``-all-releases`` for :data:`ALL`)."""
    return PREFIX + ("all-releases" if release == ALL else release)


def check_release(release: str) -> str:
    """``release`` if it is a release name (lowercase letters, digits, dashes; what ``flows.config``
    allows) or :data:`ALL`; else InputError."""
    if release == ALL or RELEASE_PATTERN.match(release):
        return release
    raise InputError(
        f"--release {release!r}: not a release name (lowercase letters, digits and dashes, as the config's "
        f"'name'), or '{ALL}' for every release"
    )


def check_name(name: str) -> str:
    """``name`` if Prefect can name a block so (lowercase letters, digits, dashes; <= 100); else InputError."""
    if NAME_PATTERN.match(name):
        return name
    raise InputError(f"--name {name!r}: use lowercase letters, digits and dashes (at most 100), e.g. {PREFIX}nightly")


def check_webhook(url: str) -> str:
    """``url`` if it is an absolute http(s) URL with a host; else InputError. The message never repeats
    the URL (a webhook URL is often a credential): it names what is wrong with it."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        raise InputError("--webhook: not a URL (want http://host[:port]/path or https://...)") from None
    if parts.scheme not in ("http", "https"):
        shown = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise InputError(f"--webhook: {shown}; want an http:// or https:// URL")
    if not parts.hostname:
        raise InputError("--webhook: the URL has no host; want http://host[:port]/path or https://...")
    return url.strip()


def redact(url: str) -> str:
    """``scheme://host[:port]/...``: where a webhook goes, without its path, query or user info (which may
    hold a token)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unreadable URL)"
    rest = "/..." if (parts.path not in ("", "/") or parts.query) else ""
    return f"{parts.scheme}://{host}{port}{rest}"


def parse_states(text: str) -> tuple[str, ...]:
    """``"failed, Crashed"`` -> ``("Failed", "Crashed")``: Prefect state names, any case, comma-separated,
    duplicates dropped; an unknown or empty one is an InputError naming it."""
    by_lower = {s.lower(): s for s in STATE_NAMES}
    out: list[str] = []
    for raw in text.split(","):
        word = raw.strip()
        if not word:
            raise InputError(f"--states {text!r}: an empty state name; give e.g. {','.join(DEFAULT_STATES)}")
        state = by_lower.get(word.lower().replace("_", "").replace(" ", "").replace("-", ""))
        if state is None:
            raise InputError(f"--states: unknown state {word!r}; one of {', '.join(STATE_NAMES)}")
        if state not in out:
            out.append(state)
    return tuple(out)


def add_notify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--release",
        default=None,
        metavar="NAME",
        help=f"the release name (its runs' tag release:NAME; the config's 'name'), or '{ALL}' for every release",
    )
    p.add_argument("--webhook", default=None, metavar="URL", help="the URL to POST the JSON message to")
    p.add_argument(
        "--name",
        default=None,
        metavar="AUTOMATION",
        help=f"the automation's and its block's name (default {PREFIX}<release>, {PREFIX}all-releases for '*')",
    )
    p.add_argument(
        "--states",
        "--events",
        dest="states",
        default=",".join(DEFAULT_STATES),
        metavar="LIST",
        help=f"comma-separated flow-run states that notify, and {BUDGET_LOW} for a population's budget that no "
        f"longer fits a release like its last (default {','.join(DEFAULT_STATES)})",
    )
    p.add_argument(
        "--no-cancel-alerts",
        action="store_true",
        help="no message for a cancelled run (an operator's own Cancel): leaves Cancelled and Cancelling out",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--remove", action="store_true", help="delete the automation and its block")
    g.add_argument("--list", action="store_true", help="show the notifications made by this command")


def notification_from_args(args: argparse.Namespace) -> Notification:
    """The :class:`Notification` the arguments of ``notify`` (create) describe; InputError for bad ones."""
    if args.release is None:
        raise InputError("notify needs --release NAME (or --release '*' for every release)")
    release = check_release(args.release)
    if args.webhook is None:
        raise InputError("notify needs --webhook URL (or --remove / --list)")
    states = parse_states(args.states)
    if getattr(args, "no_cancel_alerts", False):
        states = tuple(s for s in states if s not in CANCEL_STATES)
        if not states:
            raise InputError("--no-cancel-alerts leaves no state of --states to notify about")
    return Notification(
        name=check_name(args.name or default_name(release)),
        release=release,
        webhook=check_webhook(args.webhook),
        states=states,
    )


def _name_to_remove(args: argparse.Namespace) -> str:
    if args.webhook is not None:
        raise InputError("--remove takes no --webhook")
    if args.name:
        return check_name(args.name)
    if args.release is None:
        raise InputError("--remove needs --release NAME or --name AUTOMATION")
    return default_name(check_release(args.release))


# ----------------------------------------------------------------------------- what goes on the server
def event_name(state: str) -> str:
    """The Prefect event of a name of :data:`STATE_NAMES`: ``prefect.flow-run.<state>``, or
    :data:`~flows.operate_ui.BUDGET_EVENT` for :data:`BUDGET_LOW`."""
    return BUDGET_EVENT if state == BUDGET_LOW else FLOW_RUN_EVENT + state


def state_of_event(event: str) -> str:
    """The inverse of :func:`event_name`."""
    return BUDGET_LOW if event == BUDGET_EVENT else event.removeprefix(FLOW_RUN_EVENT)


def trigger_spec(n: Notification) -> dict[str, Any]:
    """The automation's event trigger (the keyword arguments of :class:`prefect.automations.EventTrigger`):
    reactive on ``prefect.flow-run.<state>`` events of flow runs (and, for :data:`BUDGET_LOW`, the
    low-budget events of populations, :func:`flows.operate_ui.announce_budget`) whose related flow is
    ``mdp-release`` and, unless :data:`ALL`, whose related tags include ``release:<release>``; at most
    once per flow run (and per population's budget epoch) within :data:`DEDUP_WINDOW` (``for_each`` the
    event's resource, ``within``): the second Cancelled of a run cancelled from the UI sends nothing."""
    related: list[dict[str, str]] = [{"prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME}]
    if n.release != ALL:
        related.append({"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.release:{n.release}"})
    resources: str | list[str] = FLOW_RUN_EVENT + "*"
    if BUDGET_LOW in n.states:
        resources = [FLOW_RUN_EVENT + "*", BUDGET_RESOURCE + "*"]
    return {
        "expect": {event_name(s) for s in n.states},
        "match": {"prefect.resource.id": resources},
        "match_related": related,
        "for_each": {"prefect.resource.id", EPOCH_LABEL},
        "posture": "Reactive",
        "threshold": 1,
        "within": DEDUP_WINDOW,
    }


def run_link(ui_url: str | None) -> str:
    """The template of the run's UI link: ``<UI>/runs/flow-run/<id>`` (Prefect's UI route), or the run's
    id alone when no UI URL is known."""
    if not ui_url:
        return "flow run id {{ flow_run.id }}"
    return ui_url.rstrip("/") + "/runs/flow-run/{{ flow_run.id }}"


# The only values a message shows (Jinja, rendered by the server with the triggering flow run): its name,
# state name, state message, id (the link) and the release name from its tags -- never its parameters.
_RELEASE_OF_RUN = "{% for t in flow_run.tags %}{% if t.startswith('release:') %}{{ t[8:] }}{% endif %}{% endfor %}"


def templates(n: Notification, ui_url: str | None) -> tuple[str, str]:
    """(subject, body) of the message (Jinja templates the server renders with the triggering ``event`` and
    its ``flow_run``): a refused release's subject says REFUSED and why (the state's message, the
    refusal's one line); a low budget's message is the event's (:func:`flows.operate_ui.budget_message`)."""
    release = _RELEASE_OF_RUN if n.release == ALL else n.release
    run = "flow run {{ flow_run.name }}"
    subject = (
        f"{{% if event.event == '{BUDGET_EVENT}' %}}{{{{ event.payload.subject }}}}"
        f"{{% elif event.event == '{FLOW_RUN_EVENT}Refused' %}}mdp-release {release}: release REFUSED ({run}): "
        "{{ event.resource['prefect.state-message'] | truncate(300) }}"
        f"{{% else %}}mdp-release {release}: {run} {{{{ flow_run.state.name }}}}{{% endif %}}"
    )
    body = (
        f"{{% if event.event == '{BUDGET_EVENT}' %}}{{{{ event.payload.body }}}}{{% else %}}"
        f"Release {release}: {run} of flow {FLOW_NAME} entered state "
        "{{ flow_run.state.name }}.\n"
        "Message: {{ flow_run.state.message }}\n{% endif %}"
        f"Run: {run_link(ui_url)}\n"
    )
    return subject, body


def description(n: Notification) -> str:
    """The automation's description: :data:`MARKER`, the release, the states (no URL)."""
    who = "every release" if n.release == ALL else f"release {n.release}"
    states = [s for s in n.states if s != BUDGET_LOW]
    text = f"{MARKER}: flow runs of {FLOW_NAME}, {who}, entering {', '.join(states) or 'no state'}"
    return text + ("; and their populations' low budgets, once per budget" if BUDGET_LOW in n.states else "")


def _block(n: Notification) -> Any:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    return CustomWebhookNotificationBlock(
        name=n.name,
        url="{{" + URL_SECRET + "}}",  # filled from the secret values when the server sends
        method="POST",
        json_data={"subject": "{{subject}}", "body": "{{body}}", "text": "{{subject}}\n{{body}}"},
        secrets={URL_SECRET: n.webhook},  # pydantic makes it a SecretDict
        timeout=10,
    )


@dataclass(frozen=True)
class Created:
    """What :func:`ensure` did: the ids on the server and whether the automation was new."""

    automation_id: str
    block_id: str
    replaced: bool


def ensure(n: Notification, ui_url: str | None = None) -> Created:
    """Create (or replace: same name) the notification block and the automation of ``n`` on the Prefect
    server the environment names (``PREFECT_API_URL``). ``ui_url``: the UI base for the run link (default:
    Prefect's ``PREFECT_UI_URL`` setting, derived from the API URL)."""
    from prefect.automations import Automation, EventTrigger, SendNotification
    from prefect.settings import get_current_settings

    ui = ui_url if ui_url is not None else get_current_settings().ui_url
    block_id = _block(n).save(n.name, overwrite=True)
    subject, body = templates(n, ui)
    want = Automation(
        name=n.name,
        description=description(n),
        enabled=True,
        trigger=EventTrigger(**trigger_spec(n)),
        actions=[SendNotification(block_document_id=block_id, subject=subject, body=body)],
    )
    old = _automations_named(n.name)
    if old:
        first, *extra = old
        want.id = first.id
        want.update()
        for a in extra:  # duplicates (two creations that raced): one automation per name
            a.delete()
        return Created(str(first.id), str(block_id), True)
    want.create()  # sets want.id
    return Created(str(want.id), str(block_id), False)


def _automations_named(name: str) -> list[Any]:
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(name)
    return [Automation(**a.model_dump()) for a in found if a.name == name]


def _block_ids(automation: Any) -> list[str]:
    return [str(a.block_document_id) for a in automation.actions if getattr(a, "type", "") == "send-notification"]


def remove(name: str) -> tuple[int, int]:
    """Delete the automation(s) called ``name`` and their notification blocks (and a block of that name
    left without automation). Returns (automations deleted, blocks deleted)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    autos = _automations_named(name)
    block_ids = {b for a in autos for b in _block_ids(a)}
    for a in autos:
        a.delete()
    blocks = 0
    with get_client(sync_client=True) as client:
        try:
            doc = client.read_block_document_by_name(name, block_type_slug="custom-webhook")
            block_ids.add(str(doc.id))
        except ObjectNotFound:
            pass
        for b in block_ids:
            try:
                client.delete_block_document(UUID(b))
                blocks += 1
            except ObjectNotFound:
                pass
    return len(autos), blocks


def existing() -> list[Existing]:
    """The notifications this command made (automations whose description starts with :data:`MARKER`),
    sorted by name; the webhook redacted (:func:`redact`)."""
    from uuid import UUID

    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    out: list[Existing] = []
    with get_client(sync_client=True) as client:
        autos = [Automation(**a.model_dump()) for a in client.read_automations()]
        for a in autos:
            if not (a.description or "").startswith(MARKER):
                continue
            ids = _block_ids(a)
            hook = "(no notification block)"
            if ids:
                try:
                    doc = client.read_block_document(UUID(ids[0]), include_secrets=True)
                    secrets = doc.data.get("secrets") or {}
                    url = secrets.get(URL_SECRET) if isinstance(secrets, dict) else None
                    hook = redact(str(url)) if url else "(no webhook URL)"
                except ObjectNotFound:
                    hook = "(its notification block is gone)"
            expect: set[str] = getattr(a.trigger, "expect", None) or set()
            states = tuple(sorted(state_of_event(e) for e in expect))
            out.append(Existing(a.name, str(a.id), a.enabled, a.description, states, hook, ids[0] if ids else None))
    return sorted(out, key=lambda e: e.name)


def budget_warnings() -> list[dict[str, Any]]:
    """The low-budget warnings sent, one per population (the Prefect variables
    ``mdp-release-budget-low-<population>`` that :func:`flows.operate_ui.announce_budget` records: population,
    budget epoch, release, status, figures, time), sorted by population."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        found = client.read_variables()
    sent = [v.value for v in found if v.name.startswith(SENT_PREFIX) and isinstance(v.value, dict)]
    return sorted(sent, key=lambda v: str(v.get("population")))


# ----------------------------------------------------------------------------- the command
def need_server() -> str:
    """The API URL of the Prefect server ``notify`` talks to (``PREFECT_API_URL``, the server of
    ``mdp-release server start``, or the Prefect profile's); InputError when there is none or it does not
    answer. An automation lives on a server: Prefect's ephemeral mode has none that stays."""
    from flows.run import healthy, prepare_environment

    prepare_environment()  # PREFECT_API_URL from `mdp-release server start` when it is not set
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        from prefect.settings import get_current_settings

        url = get_current_settings().api.url
    if not url:
        raise InputError(
            "notifications live on a Prefect server: run `mdp-release server start` (or set PREFECT_API_URL) first"
        )
    if not healthy(url, timeout=5.0):
        raise InputError(f"no Prefect server answers at {url}: start it (`mdp-release server start`) first")
    return url


def _left(x: Any) -> str:
    """What is left, at the one precision of every view (:func:`flows.ledger_cli.epsilon_text`)."""
    from flows.ledger_cli import epsilon_text

    return epsilon_text(x) if isinstance(x, (int, float)) else str(x)


def notify_from_cli(args: argparse.Namespace) -> int:
    # the arguments first: a bad one is an error before any server is asked
    if args.list:
        if args.release or args.webhook or args.name:
            raise InputError("--list takes no --release, --webhook or --name: it shows every notification")
    elif args.remove:
        name = _name_to_remove(args)
    else:
        n = notification_from_args(args)
    url = need_server()
    print(f"mdp-release notify: Prefect server {url}", file=sys.stderr, flush=True)
    if args.list:
        found = existing()
        if not found:
            print("no notifications (mdp-release notify --release NAME --webhook URL makes one)")
        for e in found:
            print(
                f"{e.name}: {'enabled' if e.enabled else 'PAUSED'}; {e.description.removeprefix(MARKER + ': ')}; "
                f"-> {e.webhook} (automation {e.automation_id})"
            )
        for w in budget_warnings():
            print(
                f"low-budget warning sent: population {w.get('population')} ({w.get('status')}, left {_left(w.get('left'))} "
                f"of cap {w.get('cap')}; budget epoch {w.get('epoch')}, release {w.get('release')}, {w.get('at')})"
            )
        return 0
    if args.remove:
        autos, blocks = remove(name)
        if not autos and not blocks:
            print(f"no notification named {name!r}: nothing to remove")
            return 0
        print(f"removed notification {name}: {autos} automation(s), {blocks} notification block(s)")
        return 0
    made = ensure(n)
    print(
        f"{'replaced' if made.replaced else 'created'} notification {n.name}: automation {made.automation_id} "
        f"(flow runs of {FLOW_NAME}, {'every release' if n.release == ALL else 'release ' + n.release}, "
        f"entering {', '.join(n.states)})"
    )
    print(f"  notification block custom-webhook/{n.name} ({made.block_id}) -> POST {redact(n.webhook)}")
    print(f"  remove both:  mdp-release notify --name {n.name} --remove")
    return 0
