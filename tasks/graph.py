"""Stage ``graph``: the mDP graph (neighbour pairs within eta) of the ingested records.

params: {"eta": float | None} (None: the dataset's own eta), "protection_radius" when eta is unset, and
"all_pairs": true with ``[solve] all_pairs`` (the mechanism is certified over every pair of a component in the
metric: the protection's stretch is then 1 by certificate, not by the graph; issue 51). Records with coordinates get a KD-tree neighbour search under the dataset's
metric; a dataset without coordinates keeps its own edges with distance <= eta.

graph.json (and the output's meta) also hold ``protection``: :meth:`mdp_core.release.protection.Protection.as_dict`
of this graph over the records (components, component sizes, the stretch D_G / d against the data's own
metric and its worst pair, :func:`mdp_core.release.protection.graph_protection`). Public data only: the records
are the public universe of the release, never the secret table.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from tasks.common import instance_of, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    from mdp_core.problem.graph import graph_eta, neighbour_edges
    from mdp_core.problem.io import write_table
    from mdp_core.release.protection import graph_protection
    from mdp_core.runtime.files import write_json

    inst = instance_of(store, upstream["dataset"])
    eta = graph_eta(params.get("eta"), inst.eta, params.get("protection_radius"))
    if inst.coordinate_columns():
        edges, dist = neighbour_edges(inst.record_points(), inst.metric, eta)
    else:
        keep = inst.distances <= eta
        edges, dist = inst.edges[keep], inst.distances[keep]
    write_table(w.file("edges.parquet"), {"i": edges[:, 0], "j": edges[:, 1], "distance": dist})
    every = bool(params.get("all_pairs", False))  # every pair certified in the metric: stretch 1 (issue 51)
    protection = graph_protection(inst, edges, dist, all_pairs=every)  # components, sizes, stretch (public records)
    stats = {
        "eta": eta,
        "n_records": inst.n_records,
        "n_edges": int(edges.shape[0]),
        "mean_degree": 2.0 * edges.shape[0] / inst.n_records,
        "n_components": protection.n_components,
        "largest_component": protection.component_sizes[0],
        "protection": protection.as_dict(),
        "pairs": "all" if every else "graph",
    }
    write_json(w.file("graph.json"), stats)
    w.meta.update(stats)


@task(name="graph")
def graph(store: str, params: dict[str, Any], dataset: ArtifactRef) -> ArtifactRef:
    return run_stage("graph", __name__, store, params, {"dataset": dataset}, _compute)
