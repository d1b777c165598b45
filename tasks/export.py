"""Stage ``export``: the constraint export -- the Parquet instance directory that is solved.

params: {"epsilon": float | None} (None: the dataset's own epsilon). Records, outputs and costs come from ``dataset``, the
edges from ``graph`` (the records without the dataset kind's ``file_columns``: a user's file's ids are never
published), the prior from ``prior`` when given (the ``prior`` stage: uniform, a public file or a DP
histogram of the microdata), else from the dataset.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from tasks.common import instance_with_graph, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    from mdp_core.declarations.dataset_kinds import published_instance
    from mdp_core.problem.io import read_table, write_instance

    changes: dict[str, Any] = {} if params.get("epsilon") is None else {"epsilon": float(params["epsilon"])}
    if upstream.get("prior") is not None:
        changes["prior"] = read_table(store.path(upstream["prior"], "prior.parquet"))["prior"].to_numpy()
    # the published records: never a user's universe file's ids (Kind.file_columns, issue 49)
    inst = published_instance(instance_with_graph(store, upstream["dataset"], upstream["graph"], **changes))
    meta = write_instance(inst, w.dir)
    w.meta.update({k: meta[k] for k in ("n_records", "n_outputs", "n_edges", "epsilon", "eta")})


@task(name="export")
def export(
    store: str, params: dict[str, Any], dataset: ArtifactRef, graph: ArtifactRef, prior: ArtifactRef | None = None
) -> ArtifactRef:
    return run_stage("export", __name__, store, params, {"dataset": dataset, "graph": graph, "prior": prior}, _compute)
