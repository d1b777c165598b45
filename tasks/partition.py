"""Stage ``partition``: split the mDP graph into balanced subsets (``mdp_core.problem.partition``).

params: {"method": a partitioner (mdp_core.declarations.methods.PARTITIONERS), "subsets": M, "seed": int}.
Writes partition.parquet (record_id, subset, role) and partition.json (the paper's Tables 1-2
balance statistics).
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from tasks.common import instance_with_graph, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    import numpy as np

    from mdp_core.problem.io import write_table
    from mdp_core.problem.partition import balance_stats
    from mdp_core.problem.partition import partition as make_partition
    from mdp_core.runtime.files import write_json

    inst = instance_with_graph(store, upstream["dataset"], upstream["graph"])
    part = make_partition(inst, params["method"], int(params["subsets"]), int(params["seed"]))
    write_table(
        w.file("partition.parquet"),
        {
            "record_id": np.arange(inst.n_records, dtype=np.int64),
            "subset": part.labels.astype(np.int64),
            "role": part.roles.astype(object),
        },
    )
    stats = balance_stats(inst, part)
    write_json(w.file("partition.json"), stats)
    w.meta.update(stats)


@task(name="partition")
def partition(store: str, params: dict[str, Any], dataset: ArtifactRef, graph: ArtifactRef) -> ArtifactRef:
    return run_stage("partition", __name__, store, params, {"dataset": dataset, "graph": graph}, _compute)
