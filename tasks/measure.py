"""Stage ``measure``: where the secret table is measured -- perturb each individual of the secret microdata, and publish DP counts of the
true data made consistent by CBDP.

params: {"table": the sealed table's keyed handle | None, "population": str, "draw": commitment,
"max_distance": float | None, "n_individuals": int (simulated only), "eps_counts": float, "eps_prior": float,
"prior_source": str, "max_total_epsilon": float | None, "require_cap": bool, "protection_radius": float | None}.
Upstream: the instance, the mechanism, the partition and the graph (its ``protection``: the stretch).

Individuals: the agency's table as the privacy door sealed it (``<store>/private/sealed/``, never the file
again: :meth:`artifacts.private.PrivateStore.sealed_table`) mapped to records
(:mod:`mdp_core.problem.microdata`), or -- without one, a demo -- ``n_individuals`` simulated from the prior. Every draw that protects them comes from
the store's secret draw (:class:`artifacts.private.Draw`, OS entropy; ``params["draw"]`` is only its
public commitment): each individual's output from its record's row of the mechanism, and the exact
discrete Laplace noise (OpenDP) of the true-data counts per output cell / zone (the total is n, public),
kept in the private store so a re-run reproduces it. The cache key holds the sealed table's keyed handle
(an HMAC under the store key), never its path or hash.

Order, so that nothing is measured before the budget accepts it:
  1. the mechanism is certified from its bytes (:func:`mdp_core.release.make.plan_release`: exact tolerance,
     graph against the metric, every pair when the plan claims them): a mechanism planted in the store is never drawn from;
  2. the release's two measurements -- the perturbation (charge key: draw, mechanism sha256) and the
     counts (charge key: draw, instance, zones, eps_counts) -- are charged to the population's ledger
     (:meth:`artifacts.private.PrivateStore.charge`, refused above the population's cap);
  3. only then are the outputs drawn and the counts measured.
The object is private (0700 / 0600) until the publish stage publishes copies.

Files: microdata.parquet (output_id and the output's public coordinates, sorted by output: no row
order), aggregates.parquet (:data:`mdp_core.release.postprocess.AGGREGATE_COLUMNS`), release_provenance.json
(sha256 of the mechanism and instance.json they were drawn from and of the two tables, the population,
the protection the mDP graph gives, the guarantee, the ledger, the draw's commitment; checked at
publication and by ``mdp-release audit``). No true record, true count or secret is written outside
``<store>/private/``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from prefect import task

from artifacts.draws import Draw
from artifacts.ledger import Budget
from artifacts.private import PrivateStore
from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core.declarations import contract
from mdp_core.declarations.budget import compose
from mdp_core.errors import InputError, PrivacyError, SecretTableError
from mdp_core.release.door import SIMULATED_PREFIX, same_population
from tasks.common import instance_of, output_zones, run_stage

if TYPE_CHECKING:
    from mdp_core.release.similarity import People

PROVENANCE_VERSION = contract.PROVENANCE_VERSION  # mdp_core.declarations.contract: what this stage writes
T = TypeVar("T")


def simulated_table(description: dict[str, Any]) -> tuple[str, str]:
    """(population, version) of a simulated table: its id from the description (instance, n)."""
    version = hashlib.sha256(json.dumps(["simulated", description], sort_keys=True).encode()).hexdigest()
    return SIMULATED_PREFIX + version[:16], version


def secret_draw(store: Store, population: str, version: str, new: bool = False, commitment: str | None = None) -> Draw:
    """The draw protecting this version of the population's table: the one with ``commitment`` (a re-run of a
    published release), else the version's current draw (made from OS entropy on first use, or anew when
    ``new``). Refuses (LedgerError) when the store's published releases of the population are not all on
    record in its private ledger (a deleted or rolled-back private part)."""
    from artifacts.published import published_heads

    private = PrivateStore(store.root)
    private.check_published(population, published_heads(store.root, population))
    if commitment is None:
        return private.draw(population, version, new=new)[0]
    try:
        draw = private.load(commitment)
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc).strip("'\"")) from None
    if draw.population != population or draw.version != version:
        raise InputError(
            f"draw {commitment[:12]} belongs to another version of the table: its people changed since that "
            "release (or that release predates the sealed table: its version was the file's bytes)"
        )
    return draw


def digest(obj: Any) -> str:
    """sha256 (64 hex) of the canonical JSON of ``obj``: a charge key or a measurement name."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def charge_key(kind: str, draw: Draw, *determinants: Any) -> str:
    """The ledger key (64 hex) of one measurement of the secret table: the digest of everything that determines
    the measurement's output (its kind, the draw -- hence the table version -- and the public inputs). The same
    key means the same output, kept in the private store: charged once."""
    return digest([kind, draw.commitment, *determinants])


def kept_measure(private: PrivateStore, draw: Draw, name: str):
    """A ``measure(true, sensitivity, eps)`` for :func:`mdp_core.release.postprocess.release_counts` that makes the
    OpenDP measurement once per (draw, ``name``) and keeps it in the private store. ``name`` must be the
    measurement's charge key, charged before this is called."""
    import numpy as np

    from mdp_core.release.noise import Measurement, discrete_laplace

    def measure(true: np.ndarray, sensitivity: int, eps: float) -> Measurement:
        kept = name  # a hex id, as the private store's file names must be
        stored = private.measurement(draw, kept)
        if stored is None:
            m = discrete_laplace(true, sensitivity, eps)
            stored = private.keep_measurement(
                draw, kept, {"values": m.values.tolist(), "scale": m.scale, "epsilon": m.epsilon}
            )
        return Measurement(
            np.asarray(stored["values"], dtype=np.int64), stored["scale"], sensitivity, stored["epsilon"]
        )

    return measure


def check_radius(private: PrivateStore, population: str, radius: dict[str, Any]) -> None:
    """One population, one unit of account: every charge of its budget is at the same protection radius
    (``radius``: {"value", "unit"}), or totals would add eps x stretch x 2 km to eps x stretch x 1 m. The first
    charge fixes it; a release asking for another is refused (BudgetRefused), nothing charged."""
    from artifacts.ledger import BudgetRefused

    for e in reversed(private.entries(population)):
        if e.get("kind") == "new-budget":
            return
        held = (e.get("detail") or {}).get("radius") if e.get("kind") == "charge" else None
        if held is not None and held != radius:
            raise BudgetRefused(
                f"the budget of population {population!r} is kept at a protection radius of {held['value']:g} "
                f"{held['unit']}; this release asks for {radius['value']:g} {radius['unit']}: set [privacy] "
                f"protection_radius = {held['value']:g} (or start a new budget: mdp-release ledger new-budget)"
            )


def charge_all(
    private: PrivateStore, draw: Draw, params: dict[str, Any], charges: dict[str, tuple[str, float]]
) -> tuple[Budget, float]:  # (the budget after them, what this call added)
    """Check that all ``charges`` (key -> (kind, epsilon)) fit the population's cap, then record each; returns the
    budget after them and what this call added (0 for a re-run: every key already charged). Refused
    (BudgetRefused) before anything is recorded when they do not fit."""
    cap, require = params.get("max_total_epsilon"), bool(params.get("require_cap"))
    check_radius(private, draw.population, params["radius"])
    budget = private.precheck(draw.population, {key: eps for key, (_, eps) in charges.items()}, cap, require)
    added: list[float] = []
    for key, (kind, eps) in charges.items():
        detail = {"kind": kind, "draw": draw.commitment, "release": params.get("release_key")}
        detail["radius"] = params["radius"]
        budget, new = private.charge(draw.population, key, eps, detail, cap, require)
        added += [eps] if new else []
    return budget, float(compose(added))


def charge_then_measure(
    private: PrivateStore,
    draw: Draw,
    params: dict[str, Any],
    charges: dict[str, tuple[str, float]],
    measure: Callable[[], T],
) -> T:
    """The one door of a measurement of the secret table (Tumult's accountant is the model): admit and
    record all ``charges`` (:func:`charge_all`: refused, nothing recorded, above the cap), then -- only
    then -- run ``measure`` and return what it measured. No code path of the pipeline measures the secret
    table outside it (tests/test_guarantee_in_operation.py reads the source to hold that)."""
    charge_all(private, draw, params, charges)
    return measure()


def precheck_release(store: Store, draw: Draw, params: dict[str, Any], plan: dict[str, float]) -> Budget:
    """The early door: refuse (BudgetRefused) before anything is measured when the release's planned charges
    (kind -> epsilon: "perturb", "counts", "prior") would exceed the population's cap. A kind this release
    (same draw, same config: ``params["release_key"]``) has already charged counts 0, so a cached re-run
    near the cap is not refused; the exact charges are checked again when they are made."""
    private = PrivateStore(store.root)
    check_radius(private, draw.population, params["radius"])
    paid = {
        (c["detail"].get("kind"), c["detail"].get("release"), c["detail"].get("draw"))
        for c in private.entries(draw.population)
        if c.get("kind") == "charge"
    }
    planned = {
        digest(["plan", params.get("release_key"), draw.commitment, kind]): eps
        for kind, eps in plan.items()
        if (kind, params.get("release_key"), draw.commitment) not in paid
    }
    return private.precheck(draw.population, planned, params.get("max_total_epsilon"), bool(params.get("require_cap")))


def claim_table(store: Store, people: People | None, population: str) -> None:
    """One population by similarity: record the secret table's ``people`` (their keyed sketch,
    :mod:`mdp_core.release.similarity`) as a version of ``population``'s table in this store; PrivacyError,
    nothing charged, when they are most of another population's (the door refuses it earlier; this closes
    the race of two first runs)."""
    if people is None:
        raise ValueError("an agency's table without its people: the door did not read it")
    other = PrivateStore(store.root).claim_table(people, population)
    if other is not None:
        raise PrivacyError(f"release refused: {same_population(other[0])}")


def individuals(private: PrivateStore, params: dict[str, Any], inst, draw: Draw):  # -> (n,) int64 record ids
    """Each individual's secret record: the table the door sealed (the draw's version: the sealed rows' sha256,
    read back from ``private`` and checked against it and against ``params["table"]``, its keyed handle) mapped
    to records -- never the file, which may have changed since --, or simulated from the prior."""
    return located_individuals(private, params, inst, draw)[0]


def located_individuals(private: PrivateStore, params: dict[str, Any], inst, draw: Draw):  # -> (ids, points, geo)
    """:func:`individuals`, each one's own coordinates ((n, D) float64 in the columns they were mapped by, from the
    sealed rows: secret; None for people known only by their record: a key column, simulated people) and whether
    those are lat, lon."""
    from mdp_core.declarations.dataset_kinds import published_instance
    from mdp_core.problem import microdata
    from mdp_core.release import perturb

    handle = params.get("table")
    if handle is None:
        return perturb.draw_individuals(inst.prior, int(params["n_individuals"]), draw.rng("individuals")), None, False
    if private.table_handle(draw.version) != handle:
        raise InputError("the sealed table is not this draw's table; run the release again")
    rows = private.sealed_table(draw.version)
    limit = params.get("max_distance")
    try:
        # against the published records (the export's, or the prior stage's ingested instance without its file
        # columns): a key of the user's file is already a record id (flows.door)
        public = published_instance(inst)
        ids = microdata.map_individuals(rows, public, inst.eta if limit is None else float(limit)).record_ids
    except SecretTableError as exc:  # its rows are the sealed table's (sorted by its key), not the file's
        sealed = " (rows of the table as the door sealed it, sorted by its key; `mdp-release check` names the file's)"
        raise SecretTableError(str(exc), exc.detail + sealed) from None
    cols = [c for c in rows.columns if c != "record"]  # lat, lon; or the instance's x0..; or none (keys)
    return ids, (rows[cols].to_numpy(dtype="float64") if cols else None), cols == ["lat", "lon"]


def _zones(store: Store, inst, partition: ArtifactRef | None):  # -> (K,) int64
    from mdp_core.problem.io import read_table

    labels = None
    if partition is not None:
        path = store.path(partition, "partition.parquet")
        labels = read_table(path, required={"subset": "int64"})["subset"].to_numpy()
    return output_zones(inst, labels)


def every_pair(claimed: bool, certificate: Any) -> None:
    """PrivacyError (nothing charged) when the plan claims every pair certified (``[solve] all_pairs``) but the
    mechanism's certificate (the solve stage's :meth:`mdp_core.solvers.verify.Certificate.as_dict`) is not over
    every pair (``pairs`` "all"): the release would state one rate the solve did not certify."""
    pairs = certificate.get("pairs") if isinstance(certificate, dict) else None
    if claimed and pairs != "all":
        raise PrivacyError(
            f"the release claims every pair certified (all_pairs) but its mechanism's certificate is over "
            f"{pairs or 'unstated'} pairs; nothing is drawn or charged"
        )


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    """The release (:mod:`mdp_core.release.make`) with the store's secret draw and the population's ledger:
    plan (certify the mechanism), charge, then draw and measure; write the tables and the provenance."""
    # imported here, not at the top: a cache hit never runs this (and never pays for numpy, pandas, scipy)
    from mdp_core.problem.io import read_mechanism, write_published
    from mdp_core.release import audit, make
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy
    from mdp_core.runtime.files import read_json, write_json

    inst = instance_of(store, upstream["instance"])
    z = read_mechanism(store.path(upstream["mechanism"], "mechanism.parquet"), inst.n_records, inst.n_outputs)
    settings = Settings(**params["door"])
    if settings.all_pairs:  # the solve's own certificate (solve.json, beside the mechanism) must be over every pair
        every_pair(True, read_json(store.path(upstream["mechanism"], "solve.json")).get("certificate"))
    # from the instance itself, never a stage's file
    graph, prot = GraphFacts.recomputed(inst, settings.radius, settings.all_pairs)
    privacy = plan_privacy(settings, graph)  # the door's rules again, on what is drawn from
    limits = (settings.max_stretch, settings.allow_unprotected, privacy.max_distance)
    protection = make.published_protection(prot.as_dict(), privacy.radius, *limits)
    eps_prior = float(params["eps_prior"]) if params["prior_source"] == "dp" else 0.0
    private = PrivateStore(store.root)
    draw = private.load(params["draw"])
    records, points, geo = located_individuals(private, params, inst, draw)  # mapped, not measured: nothing charged
    # certifies z (every pair when the plan claims them), refuses a deterministic row or a refused plan; the
    # people's error's bounds -- all before any charge
    plan = make.plan_release(inst, z, privacy, geo)
    zone = _zones(store, inst, upstream.get("partition"))
    mech_sha, inst_sha = upstream["mechanism"].files["mechanism.parquet"], upstream["instance"].files["instance.json"]
    limit = params.get("max_distance")
    keys = {
        "perturb": charge_key("perturb", draw, mech_sha, inst_sha, limit),
        "counts": charge_key("counts", draw, inst_sha, zone.tolist(), plan.eps_counts, limit),
    }
    if settings.eps_error:  # the people's mean error: its own charge, measured from the sealed rows (issue 50)
        keys["error"] = charge_key("error", draw, mech_sha, inst_sha, limit, settings.eps_error)
    # A stream per (mechanism, instance): two releases of the same draw through different mechanisms, or the
    # same mechanism bytes over other records, must not share their uniforms (the pair of inverse-CDF outputs
    # would pin u down); they are two charges, and the same mechanism, instance and draw give the same outputs,
    # which reveal nothing new.
    rng = draw.rng(f"perturb:{mech_sha}:{inst_sha}")
    rel = charge_then_measure(  # charged first; then, and only then, drawn and measured (the error: its own key)
        private,
        draw,
        params,
        {keys[s.kind]: (s.kind, float(s.epsilon)) for s in plan.spends},
        lambda: make.make_release(
            *(inst, z, records, zone, plan, rng, kept_measure(private, draw, keys["counts"])),
            make.ErrorMeasure(points, kept_measure(private, draw, keys["error"])) if "error" in keys else None,
        ),
    )
    at = private.position(draw.population, tuple(keys.values()))
    assert at is not None  # just charged (or charged before)
    write_published(w.file("microdata.parquet"), rel.microdata, "microdata.parquet")
    write_published(w.file("aggregates.parquet"), rel.aggregates, "aggregates.parquet")
    ledger = make.published_ledger(draw.population, plan.guarantee.charge(), at)
    ledger["history"] = private.history(draw.population, at["seq"])  # caps, raises, new budgets: disclosed
    source = "simulated" if params.get("table") is None else "file"
    fields = make.provenance_fields(rel, plan, eps_prior, params["prior_source"], protection, ledger)
    fields |= {"population": draw.population, "microdata_source": source, "draw_commitment": draw.commitment}
    fields |= {"table": params.get("table")}  # the plan's "table" (flows.approval.plan_figures): keyed handle
    record = audit.provenance(
        store.path(upstream["mechanism"], "mechanism.parquet"),
        store.path(upstream["instance"], "instance.json"),
        w.file("microdata.parquet"),
        w.file("aggregates.parquet"),
        format="mdp-release-provenance",
        version=PROVENANCE_VERSION,
        **fields,
    )
    write_json(w.file(audit.PROVENANCE), record)
    w.meta.update(
        {"n_individuals": rel.n_individuals, "microdata_source": source, "population": draw.population}
        | {"eps_counts": plan.eps_counts, "ledger": ledger, "guarantee": record["guarantee"]}
    )


@task(name="measure")
def measure(
    store: str,
    params: dict[str, Any],
    instance: ArtifactRef,
    mechanism: ArtifactRef,
    graph: ArtifactRef,
    partition: ArtifactRef | None = None,
) -> ArtifactRef:
    return run_stage(
        "measure",
        __name__,
        store,
        params,
        {"instance": instance, "mechanism": mechanism, "graph": graph, "partition": partition},
        _compute,
        private=True,
    )
