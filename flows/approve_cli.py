"""``mdp-release approve``: the officer's decision for a release run waiting for it (:mod:`flows.approval`).

  mdp-release approve RUN_ID --by WHO [--note TEXT] [--plan SHA] [--max-charge X] [--min-left Y]
                       [--max-runs N] [--until YYYY-MM-DD]
      show the paused run's plan (its summary and sha256) and approve it: it measures and releases
      (``--plan``: the plan's sha256, or its first 12+ hex digits, as the officer read it: refused when the
      run's plan differs; ``--max-charge`` / ``--min-left`` / ``--max-runs`` / ``--until``: an
      ``approval = "policy"`` release's envelope, by default this plan's charge, this plan's charge, 12 runs
      and no end date: :class:`flows.approval.PolicyApprovalInput`)
  mdp-release approve RUN_ID --by WHO --reject [--note TEXT]
      refuse it: the run ends Refused, nothing measured, nothing charged

Only a run that waits (Paused, with its approval summary) is asked: a Running or ended run is refused with
what it is. WHO is printable and not blank and the note plain text (:func:`flows.approval.plain_text`: no
control, zero-width or markup characters). The decision goes through Prefect's own input mechanism
(:func:`flows.approval.send_decision`: ``prefect.flow_runs.resume_flow_run`` with the input, which carries the
plan's sha256: the run refuses an approval of another plan), on the Prefect server the run talks to
(``PREFECT_API_URL``, the server of ``mdp-release server start`` or the profile's); then the command waits for
the run to take it (:func:`flows.approval.decision_taken`): a paused run whose process was killed never does,
and is set Crashed. Exit codes: 0 taken; 2 bad input, no server, a run that is not waiting, or that did not
take the decision (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import re

from flows.approval import decision_taken, end_date, flow_run_uuid, plain_text, send_decision, waiting_run
from mdp_core.errors import InputError

TAKE_WITHIN = 60.0  # s: the run polls for its decision every 10 s at most; a busy machine, the rest
WAIT_VARIABLE = "MDP_RELEASE_APPROVE_WAIT"  # seconds instead of TAKE_WITHIN (at least 10: the run's poll)


def take_within() -> float:
    """How long ``approve`` waits for the run to take its decision (s): ``$MDP_RELEASE_APPROVE_WAIT`` when set
    (a number >= 10: a shorter wait could set a live run Crashed before its next poll), else :data:`TAKE_WITHIN`."""
    raw = os.environ.get(WAIT_VARIABLE, "").strip()
    try:
        wait = float(raw) if raw else TAKE_WITHIN
    except ValueError:
        wait = float("nan")
    if not 10.0 <= wait < float("inf"):
        raise InputError(f"{WAIT_VARIABLE}={raw!r}: seconds, at least 10 (unset: {TAKE_WITHIN:g})")
    return wait


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``mdp-release approve RUN_ID --by WHO [--note T] [--max-charge X] [--min-left Y] | --reject``."""
    p.add_argument("run_id", metavar="RUN_ID", help="the paused flow run (the end of its `View at` line)")
    p.add_argument("--by", required=True, metavar="WHO", help="who decides (recorded in the manifest)")
    p.add_argument("--note", default="", metavar="TEXT", help="why, or a reference (recorded)")
    p.add_argument("--reject", action="store_true", help="refuse the release: nothing is measured or charged")
    p.add_argument("--plan", metavar="SHA", help="the plan's sha256 (or its first 12+ hex digits) you approve")
    p.add_argument("--max-charge", type=float, metavar="X", help="approval = policy: later runs charge at most X")
    p.add_argument(
        "--min-left", type=float, metavar="Y", help="approval = policy: and leave at least Y (default: this charge)"
    )
    p.add_argument("--max-runs", type=int, metavar="N", help="approval = policy: at most N unattended runs (12)")
    p.add_argument("--until", metavar="YYYY-MM-DD", help="approval = policy: no unattended run after this date")


def approve_from_cli(args: argparse.Namespace) -> int:
    """Send the decision to the paused run on the Prefect server (``PREFECT_API_URL``, the server of
    ``mdp-release server start`` or the profile's)."""
    from flows.run import healthy, prepare_environment

    try:
        by, note = plain_text(args.by, "--by", blank=False), plain_text(args.note, "--note")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    plan = (args.plan or "").strip().lower()
    if args.plan is not None and not re.fullmatch(r"[0-9a-f]{12,64}", plan):
        raise InputError("--plan is the plan's sha256 (its first 12 to 64 hex digits), as its summary shows it")
    given = {"max_charge": args.max_charge, "min_left": args.min_left, "max_runs": args.max_runs, "until": args.until}
    envelope = {k: v for k, v in given.items() if v is not None}
    if args.reject and envelope:
        raise InputError(
            "--max-charge / --min-left / --max-runs / --until describe what is approved: not with --reject"
        )
    if args.max_runs is not None and args.max_runs < 0:
        raise InputError("--max-runs is a number of runs: 0 or more")
    try:
        envelope |= {"until": end_date(args.until)} if args.until is not None else {}
    except ValueError as exc:
        raise InputError(f"--until: {exc}") from None
    flow_run_uuid(args.run_id)
    within = take_within()
    prepare_environment()
    from prefect.settings import get_current_settings

    url = os.environ.get("PREFECT_API_URL") or get_current_settings().api.url
    if not url or not healthy(url, timeout=5.0):
        raise InputError(
            "a paused run waits on a Prefect server: none answers (mdp-release server start, PREFECT_API_URL)"
        )
    waiting = waiting_run(args.run_id)
    print(f"flow run {waiting.name} ({args.run_id}) waits for your decision:")
    print("\n".join(f"  {line}" for line in waiting.summary))
    if plan and not waiting.sha.startswith(plan):
        raise InputError(f"--plan {plan[:12]}... is not this run's plan ({waiting.sha}): nothing was sent")
    send_decision(args.run_id, not args.reject, by, note, plan=waiting.sha, **envelope)
    if not decision_taken(args.run_id, within):
        raise InputError(
            f"flow run {args.run_id} did not take the decision within {within:g} s: its process is gone "
            "(killed while it waited); it is now Crashed, nothing was measured or charged"
        )
    verdict = (
        "rejected: the run ends Refused"
        if args.reject
        else f"approved plan {waiting.sha}: the run measures and releases"
    )
    print(f"flow run {args.run_id} {verdict} (by {by})")
    return 0
