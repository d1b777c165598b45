"""Stage ``export``: the constraint export -- the Parquet instance directory that is solved.

params: {"epsilon": float | None (None: the dataset's own epsilon), "drop_columns": [str] (optional: the dataset kind's
``file_columns``, a user's universe file's ids, never published; flows.plan)}. Records, outputs and costs come from
``dataset``, the edges from ``graph``, the prior from ``prior`` when given (the ``prior`` stage: uniform, a public file or a DP
histogram of the microdata), else from the dataset.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from tasks.common import instance_with_graph, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    from mdp_core.problem.io import read_table, write_instance

    changes: dict[str, Any] = {} if params.get("epsilon") is None else {"epsilon": float(params["epsilon"])}
    if upstream.get("prior") is not None:
        changes["prior"] = read_table(store.path(upstream["prior"], "prior.parquet"))["prior"].to_numpy()
    inst = instance_with_graph(store, upstream["dataset"], upstream["graph"], **changes)
    records = inst.records
    drop = [c for c in params.get("drop_columns", ()) if records is not None and c in records.columns]
    if records is not None and drop:  # the published records: never a user's universe file's ids (issue 49)
        inst = inst.replace(records=records.drop(columns=drop))
    meta = write_instance(inst, w.dir)
    w.meta.update({k: meta[k] for k in ("n_records", "n_outputs", "n_edges", "epsilon", "eta")})


@task(name="export")
def export(
    store: str, params: dict[str, Any], dataset: ArtifactRef, graph: ArtifactRef, prior: ArtifactRef | None = None
) -> ArtifactRef:
    return run_stage("export", __name__, store, params, {"dataset": dataset, "graph": graph, "prior": prior}, _compute)
