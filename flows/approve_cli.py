"""``mdp-release approve``: the officer's decision for a release run waiting for it (:mod:`flows.approval`).

  mdp-release approve RUN_ID --by WHO [--note TEXT] [--max-charge X] [--min-left Y]
      approve the paused run's plan: it measures and releases (``--max-charge`` / ``--min-left``: an
      ``approval = "policy"`` release's envelope for later runs)
  mdp-release approve RUN_ID --by WHO --reject [--note TEXT]
      refuse it: the run ends Refused, nothing measured, nothing charged

The decision goes through Prefect's own input mechanism (:func:`flows.approval.send_decision`:
``prefect.flow_runs.resume_flow_run`` with the input) on the Prefect server the run talks to
(``PREFECT_API_URL``, the server of ``mdp-release server start`` or the profile's). Exit codes: 0 sent;
2 bad input, no server, or a run that is not waiting for an approval (one line on stderr).
"""

from __future__ import annotations

import argparse
import os

from flows.approval import flow_run_uuid, send_decision
from mdp_core.errors import InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``mdp-release approve RUN_ID --by WHO [--note T] [--max-charge X] [--min-left Y] | --reject``."""
    p.add_argument("run_id", metavar="RUN_ID", help="the paused flow run (the end of its `View at` line)")
    p.add_argument("--by", required=True, metavar="WHO", help="who decides (recorded in the manifest)")
    p.add_argument("--note", default="", metavar="TEXT", help="why, or a reference (recorded)")
    p.add_argument("--reject", action="store_true", help="refuse the release: nothing is measured or charged")
    p.add_argument("--max-charge", type=float, metavar="X", help="approval = policy: later runs charge at most X")
    p.add_argument("--min-left", type=float, metavar="Y", help="approval = policy: and leave at least Y of the budget")


def approve_from_cli(args: argparse.Namespace) -> int:
    """Send the decision to the paused run on the Prefect server (``PREFECT_API_URL``, the server of
    ``mdp-release server start`` or the profile's)."""
    from flows.run import healthy, prepare_environment

    if not args.by.strip():
        raise InputError("--by names who decides: it is recorded in the manifest")
    if args.reject and (args.max_charge is not None or args.min_left is not None):
        raise InputError("--max-charge / --min-left describe what is approved: not with --reject")
    envelope = {k: v for k, v in (("max_charge", args.max_charge), ("min_left", args.min_left)) if v is not None}
    flow_run_uuid(args.run_id)
    prepare_environment()
    from prefect.settings import get_current_settings

    url = os.environ.get("PREFECT_API_URL") or get_current_settings().api.url
    if not url or not healthy(url, timeout=5.0):
        raise InputError(
            "a paused run waits on a Prefect server: none answers (mdp-release server start, PREFECT_API_URL)"
        )
    send_decision(args.run_id, not args.reject, args.by.strip(), args.note, **envelope)
    verdict = "rejected: the run ends Refused" if args.reject else "approved: the run measures and releases"
    print(f"flow run {args.run_id} {verdict} (by {args.by.strip()})")
    return 0
