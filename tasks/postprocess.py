"""Stage ``postprocess``: sample the released microdata and publish consistent aggregate counts.

params: {"n_individuals": int, "eps_counts": float, "seed": int}.
Individuals are drawn (seeded) from the prior, each perturbed with its row of the verified
mechanism; aggregate counts of the perturbed outputs (per output / per zone / total, zones = the
partition subsets of the outputs' records) get Laplace noise with a separate budget eps_counts and
CBDP consistency post-processing (``mdp_core.postprocess``).

Files: microdata.parquet (released: individual, output_id, output coordinates), aggregates.parquet
(released counts; ``true_count`` there counts the released microdata, which is public),
secret_individuals.parquet (NOT released: each individual's true record, kept for evaluation),
release_provenance.json (released: sha256 of the mechanism and instance.json they were drawn from, and
of microdata.parquet / aggregates.parquet; checked at publication and by ``mdp-release audit``).
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.store import ArtifactRef, ObjectWriter, Store
from tasks.common import instance_of, output_zones, run_stage


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    import numpy as np

    from mdp_core import audit, release
    from mdp_core import postprocess as pp
    from mdp_core.io import read_mechanism, read_table, write_frame, write_json, write_table

    inst = instance_of(store, upstream["instance"])
    z = read_mechanism(store.path(upstream["mechanism"], "mechanism.parquet"), inst.n_records, inst.n_outputs)
    seed = int(params["seed"])
    records = release.draw_individuals(inst.prior, int(params["n_individuals"]), seed)
    outputs = release.perturb(z, records, seed + 1)
    ids = np.arange(records.shape[0], dtype=np.int64)
    write_frame(w.file("microdata.parquet"), release.perturbed_microdata(inst, outputs))
    write_table(w.file("secret_individuals.parquet"), {"individual": ids, "record_id": records.astype(np.int64)})
    labels = None
    if upstream.get("partition") is not None:
        labels = read_table(store.path(upstream["partition"], "partition.parquet"), required={"subset": "int64"})[
            "subset"
        ]
    zone = output_zones(inst, None if labels is None else labels.to_numpy())
    table = pp.aggregate_counts(outputs, zone, inst.n_outputs, float(params["eps_counts"]), seed + 2)
    write_frame(w.file("aggregates.parquet"), table)
    # Which mechanism (and instance) these were drawn from: checked when the release is published / audited.
    write_json(
        w.file(audit.PROVENANCE),
        audit.provenance(
            store.path(upstream["mechanism"], "mechanism.parquet"),
            store.path(upstream["instance"], "instance.json"),
            w.file("microdata.parquet"),
            w.file("aggregates.parquet"),
            n_individuals=int(records.shape[0]),
            eps_counts=float(params["eps_counts"]),
            seed=seed,
        ),
    )
    w.meta.update({"n_individuals": int(records.shape[0]), "eps_counts": float(params["eps_counts"])})


@task(name="postprocess")
def postprocess(
    store: str,
    params: dict[str, Any],
    instance: ArtifactRef,
    mechanism: ArtifactRef,
    partition: ArtifactRef | None = None,
) -> ArtifactRef:
    return run_stage(
        "postprocess",
        __name__,
        store,
        params,
        {"instance": instance, "mechanism": mechanism, "partition": partition},
        _compute,
    )
