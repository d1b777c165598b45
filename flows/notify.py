"""``mdp-release notify``: an operator hears about a release that failed.

``mdp-release notify --release NAME --webhook URL`` puts two things on the Prefect server:

* a *Custom Webhook* notification block (:class:`prefect.blocks.notifications.CustomWebhookNotificationBlock`)
  named like the automation, that POSTs ``{"subject": ..., "body": ..., "text": subject + body}`` (JSON) to
  the webhook. The URL is kept in the block's *secret* values (it often is a credential, e.g. a chat
  service's incoming-webhook URL): the UI and the API show it masked;
* an *automation* (:class:`prefect.automations.Automation`) whose :class:`~prefect.automations.EventTrigger`
  fires on the event ``prefect.flow-run.<State>`` of a flow run of the flow ``mdp-release`` that carries
  the tag ``release:NAME`` (:func:`flows.release.run_tags`; ``--release '*'``: any release), for each
  state of ``--states`` (default Failed, Crashed, Cancelled, TimedOut), and whose
  :class:`~prefect.automations.SendNotification` action sends the message through the block. The
  server renders and sends it (its event and automation services), so no process of ours needs to run.

The message names the flow run, its state, the release, the state's message and a link to the run in the
UI -- nothing else: never the run's parameters (the config), never a value of the secret table. The state
messages of the release flow are value-free by design (errors name rows, columns and counts, never cell
values: ``mdp_core.errors``), so the message carries no secret value either.

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
from typing import Any

from mdp_core.errors import InputError

FLOW_NAME = "mdp-release"  # the release flow's name (flows.release.release_flow)
ALL = "*"  # --release '*': every release
DEFAULT_STATES = ("Failed", "Crashed", "Cancelled", "TimedOut")
# Prefect's state names (a flow-run event is ``prefect.flow-run.<state name>``)
STATE_NAMES = (
    "Failed",
    "Crashed",
    "Cancelled",
    "TimedOut",
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
        state = by_lower.get(word.lower().replace("_", "").replace(" ", ""))
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
        default=",".join(DEFAULT_STATES),
        metavar="LIST",
        help=f"comma-separated flow-run states that notify (default {','.join(DEFAULT_STATES)})",
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
    return Notification(
        name=check_name(args.name or default_name(release)),
        release=release,
        webhook=check_webhook(args.webhook),
        states=parse_states(args.states),
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
def trigger_spec(n: Notification) -> dict[str, Any]:
    """The automation's event trigger (the keyword arguments of :class:`prefect.automations.EventTrigger`):
    reactive, once per matching event, on ``prefect.flow-run.<state>`` events of flow runs whose related
    flow is ``mdp-release`` and, unless :data:`ALL`, whose related tags include ``release:<release>``."""
    related: list[dict[str, str]] = [{"prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME}]
    if n.release != ALL:
        related.append({"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.release:{n.release}"})
    return {
        "expect": {f"prefect.flow-run.{s}" for s in n.states},
        "match": {"prefect.resource.id": "prefect.flow-run.*"},
        "match_related": related,
        "posture": "Reactive",
        "threshold": 1,
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
    """(subject, body) of the message (Jinja templates the server renders with ``flow_run``)."""
    release = _RELEASE_OF_RUN if n.release == ALL else n.release
    subject = f"mdp-release {release}: flow run {{{{ flow_run.name }}}} {{{{ flow_run.state.name }}}}"
    body = (
        f"Release {release}: flow run {{{{ flow_run.name }}}} of flow {FLOW_NAME} entered state "
        "{{ flow_run.state.name }}.\n"
        "Message: {{ flow_run.state.message }}\n"
        f"Run: {run_link(ui_url)}\n"
    )
    return subject, body


def description(n: Notification) -> str:
    """The automation's description: :data:`MARKER`, the release, the states (no URL)."""
    who = "every release" if n.release == ALL else f"release {n.release}"
    return f"{MARKER}: flow runs of {FLOW_NAME}, {who}, entering {', '.join(n.states)}"


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
            states = tuple(sorted(e.removeprefix("prefect.flow-run.") for e in expect))
            out.append(Existing(a.name, str(a.id), a.enabled, a.description, states, hook, ids[0] if ids else None))
    return sorted(out, key=lambda e: e.name)


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
