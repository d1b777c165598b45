"""Stage ``ingest``: load a dataset (``mdp_core.problem.datasets.registry``) into an instance directory.

params: {"kind": str, "params": {...loader parameters...}, "inputs": {path: sha256}} -- the input
files' hashes are in the params, so editing an input file changes the key and re-runs ingestion. The
loader parameters are a release config's ``dataset.params`` as written; unset ones take the kind's release
default (``loss = "distance"`` on grid and road, :data:`mdp_core.declarations.dataset_kinds.RELEASE_DEFAULTS`, part of
this stage's code version), else the loader's own.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from tasks.common import run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    from mdp_core.declarations.dataset_kinds import with_release_defaults
    from mdp_core.problem.datasets import registry
    from mdp_core.problem.io import write_instance

    inst = registry.load(params["kind"], with_release_defaults(params["kind"], params.get("params", {})))
    meta = write_instance(inst, w.dir)
    w.meta.update({"n_records": meta["n_records"], "n_outputs": meta["n_outputs"], "metric": meta["metric"]})


@task(name="ingest")
def ingest(store: str, params: dict[str, Any]) -> ArtifactRef:
    return run_stage("ingest", __name__, store, params, {}, _compute)
