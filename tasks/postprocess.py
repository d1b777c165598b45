"""Stage ``postprocess``: perturb each individual of the secret microdata, and publish DP counts of the
true data made consistent by CBDP.

params: {"microdata": path | None, "table_tag": hex, "draw": commitment, "max_distance": float | None,
"n_individuals": int (simulated only), "eps_counts": float, "eps_prior": float, "prior_source": str,
"max_total_epsilon": float | None, "epsilon": float | None}.

Individuals: the agency's microdata file mapped to records (:mod:`mdp_core.microdata`), or -- without
one, a demo -- ``n_individuals`` simulated from the prior. Every draw that protects them comes from
the store's secret draw (:class:`artifacts.private.Draw`, OS entropy; ``params["draw"]`` is only its
public commitment): each individual's output from its record's row of the verified mechanism, and
the exact discrete Laplace noise (OpenDP) of the true-data counts per output cell / zone (the total
is n, public), which is kept in the private store so a re-run reproduces it. The cache key holds the
table's HMAC under the secret, never its hash. The release's spend is recorded in the private ledger
(once per distinct released content: a cached or forced re-run of the same release spends nothing) and
refused above ``max_total_epsilon``.

Files (all public): microdata.parquet (individual, output_id, output coordinates), aggregates.parquet
(:data:`mdp_core.postprocess.AGGREGATE_COLUMNS`), release_provenance.json (sha256 of the mechanism and
instance.json they were drawn from and of the two tables, the guarantee, the ledger, the draw's
commitment; checked at publication and by ``mdp-release audit``). No true record, true count or
secret is written outside ``<store>/private/``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prefect import task

from artifacts.private import Draw, PrivateStore
from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core.errors import InputError
from tasks.common import instance_of, output_zones, run_stage

PROVENANCE_VERSION = 2


def table_id(microdata: str | None, simulated: dict[str, Any]) -> str:
    """The private id of the secret table: sha256 of the microdata file, or of the simulated table's
    description. Never published (only :meth:`Draw.tag` of it reaches a cache key)."""
    from mdp_core.files import file_sha256

    if microdata is not None:
        try:
            return file_sha256(microdata)
        except OSError as exc:
            raise InputError(f"microdata file {microdata} is unreadable: {exc.strerror or exc}") from None
    return hashlib.sha256(json.dumps(["simulated", simulated], sort_keys=True).encode()).hexdigest()


def secret_draw(store: Store, table: str, new: bool = False, commitment: str | None = None) -> Draw:
    """The draw protecting ``table``: the one with ``commitment`` (a re-run of a published release), else
    the table's current draw (made from OS entropy on first use, or anew when ``new``)."""
    private = PrivateStore(store.root)
    if commitment is None:
        return private.draw(table, new=new)[0]
    try:
        draw = private.load(commitment)
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc).strip("'\"")) from None
    if draw.table != table:
        raise InputError(
            f"draw {commitment[:12]} belongs to another table: the microdata file changed since that release"
        )
    return draw


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def kept_measure(private: PrivateStore, draw: Draw, purpose: str):
    """A ``measure(true, sensitivity, eps)`` for :func:`mdp_core.postprocess.release_counts` that makes the
    OpenDP measurement once per (draw, purpose, true values, budget) and keeps it in the private store."""
    import numpy as np

    from mdp_core.noise import Measurement, discrete_laplace

    def measure(true: np.ndarray, sensitivity: int, eps: float) -> Measurement:
        name = _digest([purpose, np.asarray(true).tolist(), sensitivity, eps])
        stored = private.measurement(draw, name)
        if stored is None:
            m = discrete_laplace(true, sensitivity, eps)
            stored = private.keep_measurement(
                draw, name, {"values": m.values.tolist(), "scale": m.scale, "epsilon": m.epsilon}
            )
        return Measurement(
            np.asarray(stored["values"], dtype=np.int64), stored["scale"], sensitivity, stored["epsilon"]
        )

    return measure


def individuals(params: dict[str, Any], inst, draw: Draw):  # -> (n,) int64 record ids
    """Each individual's secret record: the microdata file mapped to records, or simulated from the prior."""
    from mdp_core import microdata, release

    path = params.get("microdata")
    if path is None:
        return release.draw_individuals(inst.prior, int(params["n_individuals"]), draw.rng("individuals"))
    if draw.tag(table_id(path, {})) != params["table_tag"]:
        raise InputError(f"microdata file {path} changed during the run; run again")
    limit = params.get("max_distance")
    return microdata.map_individuals(
        microdata.read_microdata(path), inst, inst.eta if limit is None else limit
    ).record_ids


def check_microdata(store: Store, params: dict[str, Any], instance: ArtifactRef) -> int:
    """Map the microdata file to the instance's records now -- before the solve, which may take long --
    so that a bad row is an error at once; returns the number of individuals. Nothing is written."""
    if params.get("microdata") is None:
        return int(params["n_individuals"])
    inst = instance_of(store, instance)
    return int(individuals(params, inst, PrivateStore(store.root).load(params["draw"])).shape[0])


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    import numpy as np

    from mdp_core import audit, release
    from mdp_core import postprocess as pp
    from mdp_core.io import read_mechanism, read_table, write_frame, write_json
    from mdp_core.microdata import cell_of_record

    inst = instance_of(store, upstream["instance"])
    z = read_mechanism(store.path(upstream["mechanism"], "mechanism.parquet"), inst.n_records, inst.n_outputs)
    private = PrivateStore(store.root)
    draw = private.load(params["draw"])
    records = individuals(params, inst, draw)
    # A stream per mechanism: two releases of the same draw through different mechanisms must not share
    # their uniforms (the pair of inverse-CDF outputs would pin u down and break composition); the same
    # mechanism and draw give the same outputs, which reveal nothing new.
    mech_sha = upstream["mechanism"].files["mechanism.parquet"]
    outputs = release.perturb(z, records, draw.rng(f"perturb:{mech_sha}"))
    write_frame(w.file("microdata.parquet"), release.perturbed_microdata(inst, outputs))
    labels = None
    if upstream.get("partition") is not None:
        labels = read_table(store.path(upstream["partition"], "partition.parquet"), required={"subset": "int64"})[
            "subset"
        ].to_numpy()
    zone = output_zones(inst, labels)
    cells = np.bincount(cell_of_record(inst)[records], minlength=inst.n_outputs).astype(np.int64)
    eps_counts = float(params["eps_counts"])
    table, meas = pp.release_counts(cells, zone, eps_counts, kept_measure(private, draw, "counts"))
    write_frame(w.file("aggregates.parquet"), table)

    eps_prior = float(params["eps_prior"]) if params["prior_source"] == "dp" else 0.0
    additive = eps_counts + eps_prior
    spend = inst.epsilon * inst.eta + additive
    # one ledger entry per distinct released content: re-publishing the same bytes (a cached or forced re-run,
    # or new code that draws the same) reveals nothing new and spends nothing
    from mdp_core.files import file_sha256

    release_id = _digest(
        [draw.commitment, *(file_sha256(w.file(f)) for f in ("microdata.parquet", "aggregates.parquet"))]
    )
    ledger = private.spend(
        draw.table,
        release_id,
        {
            "epsilon": spend,
            "mechanism_epsilon": inst.epsilon,
            "eta": inst.eta,
            "additive_epsilon": additive,
            "draw": draw.commitment,
        },
        params.get("max_total_epsilon"),
    )
    source = "simulated" if params.get("microdata") is None else "file"
    guarantee = {
        "epsilon_per_unit": inst.epsilon,
        "additive_epsilon": additive,
        "distance_unit": inst.distance_unit,
        "statement": (
            f"for any individual and any two records r, r' it could hold, the probability of every possible "
            f"release (microdata, counts{', prior' if eps_prior else ''}) changes by at most a factor "
            f"exp({inst.epsilon:g} * d(r, r') + {additive:g}), d in {inst.distance_unit} along the mDP graph "
            "(mDP of the mechanism, Chatzikokolakis et al. 2013, composed sequentially with the eps-DP counts"
            f"{' and prior' if eps_prior else ''}, Dwork and Roth 2014 Thm 3.14)"
        ),
    }
    write_json(
        w.file(audit.PROVENANCE),
        audit.provenance(
            store.path(upstream["mechanism"], "mechanism.parquet"),
            store.path(upstream["instance"], "instance.json"),
            w.file("microdata.parquet"),
            w.file("aggregates.parquet"),
            format="mdp-release-provenance",
            version=PROVENANCE_VERSION,
            n_individuals=int(records.shape[0]),
            microdata_source=source,
            eps_counts=eps_counts,
            counts_sensitivity=int(meas.sensitivity),
            eps_prior=eps_prior,
            prior_source=params["prior_source"],
            draw_commitment=draw.commitment,
            guarantee=guarantee,
            ledger=ledger,
        ),
    )
    w.meta.update(
        {
            "n_individuals": int(records.shape[0]),
            "eps_counts": eps_counts,
            "microdata_source": source,
            "ledger": ledger,
            "guarantee": guarantee,
        }
    )


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
