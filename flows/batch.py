"""The batch flow: several releases as one flow run (``mdp-release run --config a.toml --config b.toml``).

A module of its own, so that a single release does not pay for decorating it (Prefect builds each flow's
parameter schema when the flow is defined: about 50 ms here).

No ``from __future__ import annotations`` (see flows/release.py: a served flow must see real annotations).
"""

from typing import Any, cast

from prefect import flow
from prefect.context import FlowRunContext
from prefect.states import Cancelled

from flows import operate_ui
from flows.config import ReleaseFlowConfig, StageName, as_config, release_name, release_name_of
from flows.plan import run_tags
from flows.release import release_flow, run_stamp
from mdp_core.errors import Interrupted, StageTimeout


def _names(configs: Any) -> list[str]:
    return sorted({release_name(as_config(c)) for c in configs or []})


def _batch_run_name() -> str:
    """``batch-<n>-<release names>-<UTC time>-<id4>``, e.g. batch-2-grid-eps10-lp+road-eps5-lp-20260101-030000-1a2b."""
    from prefect.runtime import flow_run

    try:
        configs = flow_run.parameters.get("configs") or []
        names = "+".join(_names(configs))[:80]
        return f"batch-{len(configs)}-{names}-{run_stamp()}"
    except Exception:  # never let naming fail a run
        return f"batch-{run_stamp()}"


def batch_markdown(manifests: list[dict[str, Any]]) -> str:
    rows = ["# Batch of releases", "", "| release | run | folder | privacy check |", "|---|---|---|---|"]
    for m in manifests:
        name = release_name_of(m["config"]) or "?"
        same = f" (same as {m['same_as']})" if m.get("same_as") else ""
        passed = "PASS" if m["privacy"]["certificate"].get("passed") else "FAIL"
        rows.append(f"| {name} | {m['run_name']} | `{m['run_dir']}`{same} | {passed} |")
    return "\n".join(rows) + "\n"


@flow(
    name="mdp-release-batch",
    description="Several releases as one flow run; common stages computed once",
    flow_run_name=_batch_run_name,
)
def batch_flow(
    configs: list[ReleaseFlowConfig], refresh_from: StageName | None = None, new_draw: bool = False
) -> list[dict[str, Any]]:
    """Run ``release_flow`` for each config (as subflow runs of this one), one after the other: stages
    the configs have in common (same key) are computed by the first and served from cache to the rest.
    The batch run is tagged ``batch`` plus every release's tags and gets a ``mdp-release-batch``
    artifact: each release's run, folder and privacy check."""
    cfgs = [as_config(c) for c in configs]
    operate_ui.tag_flow_run(FlowRunContext.get(), ["batch", *sorted({t for c in cfgs for t in run_tags(c)})])
    try:
        manifests = [release_flow(config=c, refresh_from=refresh_from, new_draw=new_draw) for c in cfgs]
    except Interrupted as exc:
        if isinstance(exc, StageTimeout):
            raise
        # stopped on request (Cancel from Prefect, SIGTERM): the batch ends Cancelled as its running release
        # did (the rest never started); the exception stays the state's data, so a caller gets it raised
        return cast(Any, Cancelled(message=str(exc), data=exc))
    try:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(
            key="mdp-release-batch",
            markdown=batch_markdown(manifests),
            description=f"mdp-release batch of {len(cfgs)}: where each release went",
        )
    except Exception as exc:  # cosmetic: never fail a batch for it
        operate_ui.log.warning("could not publish the batch artifact: %s", exc)
    return manifests
