"""Stage ``solve``: the optimal (or baseline) mechanism, certified before it is written.

params: {"method": str, "solver": {...SolverOptions...}, "max_mix": float, "benders": {...}}.
Writes mechanism.parquet + solve.json (+ trace.parquet for Benders). ``partition`` is only passed
(and only part of the key) for Benders.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core.io import read_table, write_mechanism, write_table
from mdp_core.lp import SolverOptions
from mdp_core.solve import solve as solve_instance
from tasks.common import Throttled, instance_of, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    inst = instance_of(store, upstream["instance"])
    method = params["method"]
    method_args: dict[str, Any] = dict(params.get("method_args", {}))
    if upstream.get("partition") is not None:
        part = read_table(store.path(upstream["partition"], "partition.parquet"), required={"subset": "int64"})
        method_args["labels"] = part["subset"].to_numpy(dtype=np.int64)
    sol = solve_instance(
        inst,
        method,
        SolverOptions(**params.get("solver", {})),
        progress=Throttled(f"solve[{method}]"),
        max_mix=float(params.get("max_mix", 1e-2)),
        **method_args,
    )
    write_mechanism(inst, sol.z, w.dir, sol.solve_info())
    if sol.trace is not None:
        write_table(w.file("trace.parquet"), {c: sol.trace[c].to_numpy() for c in sol.trace.columns})
    w.meta.update(
        {
            "volatile": ["solve.json", "trace.parquet"],  # timings: not part of the content hash
            "method": method,
            "status": sol.status,
            "objective": sol.objective,
            "lower_bound": sol.lower_bound,
            "iterations": sol.iterations,
            "certificate": sol.certificate.as_dict(),
        }
    )


@task(name="solve")
def solve(store: str, params: dict[str, Any], instance: ArtifactRef, partition: ArtifactRef | None = None) -> ArtifactRef:
    return run_stage("solve", __name__, store, params, {"instance": instance, "partition": partition}, _compute)
