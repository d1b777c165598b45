"""The batch flow: several releases as one flow run (``mdp-release run --config a.toml --config b.toml``).

A module of its own, so that a single release does not pay for decorating it (Prefect builds each flow's
parameter schema when the flow is defined: about 50 ms here).

No ``from __future__ import annotations`` (see flows/release.py: a served flow must see real annotations).
"""

from typing import Any

from prefect import flow

from flows.config import ReleaseFlowConfig, StageName, as_config
from flows.release import release_flow


@flow(name="mdp-release-batch", description="Several releases as one flow run; common stages computed once")
def batch_flow(
    configs: list[ReleaseFlowConfig], refresh_from: StageName | None = None, new_draw: bool = False
) -> list[dict[str, Any]]:
    """Run ``release_flow`` for each config (as subflow runs of this one), one after the other: stages
    the configs have in common (same key) are computed by the first and served from cache to the rest."""
    return [release_flow(config=as_config(c), refresh_from=refresh_from, new_draw=new_draw) for c in configs]
