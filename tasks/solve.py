"""Stage ``solve``: the optimal (or baseline) mechanism, certified before it is written.

params: {"method": str, "solver": {...SolverOptions...}, "max_mix": float, "benders": {...}}.
Writes mechanism.parquet + solve.json (+ trace.parquet for Benders). ``partition`` is only passed
(and only part of the key) for Benders.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core.declarations.solver_options import MAX_MIX
from tasks.common import Throttled, instance_of, logger, run_stage, stage_timeout
from tasks.progress import ProgressArtifact, note, release_key


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    import numpy as np

    from mdp_core.declarations.solver_options import SolverOptions
    from mdp_core.problem.io import read_table, write_published
    from mdp_core.solvers.solve import solve as solve_instance
    from mdp_core.solvers.verify import write_mechanism

    inst = instance_of(store, upstream["instance"])
    method = params["method"]
    method_args: dict[str, Any] = dict(params.get("method_args", {}))
    if upstream.get("partition") is not None:
        part = read_table(store.path(upstream["partition"], "partition.parquet"), required={"subset": "int64"})
        method_args["labels"] = part["subset"].to_numpy(dtype=np.int64)
    log = Throttled(f"solve[{method}]")
    bar = ProgressArtifact(
        release_key("solve-progress"),
        f"solve[{method}] N={inst.n_records} K={inst.n_outputs}",
        max_iterations=method_args.get("max_iterations"),
        limit=stage_timeout(),  # elapsed / the stage timeout is a floor of the percentage
    )

    def progress(line: str) -> None:  # a mdp_core.runtime.control.Progress carries bounds, gap and time for the bar
        log(line)
        bar(line)
        if "fallback" in line.lower():
            logger().warning("solve[%s]: %s", method, line)

    logger().info(
        "solve[%s]: N=%d records, K=%d outputs, %d neighbour pairs, eps=%g",
        method,
        inst.n_records,
        inst.n_outputs,
        inst.n_edges,
        inst.epsilon,
    )
    note(f"{method} on N={inst.n_records}, K={inst.n_outputs}, |E|={inst.n_edges}")  # repeated by the heartbeat
    sol = solve_instance(
        inst,
        method,
        SolverOptions(**params.get("solver", {})),
        progress=progress,
        max_mix=float(params.get("max_mix", MAX_MIX)),
        **method_args,
    )
    info = sol.solve_info()
    for fb in (info.get("extra") or {}).get("fallbacks") or []:  # a second algorithm had to step in
        logger().warning("solve[%s]: solver fallback: %s", method, fb)
    bar.done(f"{sol.status}, objective {sol.objective:.9g}, lower bound {sol.lower_bound}")
    write_mechanism(inst, sol.z, w.dir, info)
    if sol.trace is not None:
        trace = {c: sol.trace[c].to_numpy() for c in sol.trace.columns}  # NaN stays NaN
        write_published(w.file("trace.parquet"), trace, "trace.parquet")
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
def solve(
    store: str, params: dict[str, Any], instance: ArtifactRef, partition: ArtifactRef | None = None
) -> ArtifactRef:
    return run_stage("solve", __name__, store, params, {"instance": instance, "partition": partition}, _compute)
