"""The release as a library call: perturb each individual of a secret table through a certified mechanism and
measure the DP counts of the true data, with the guarantee it states and the spends it must be charged.

No store, no ledger, no Prefect: the caller (``tasks/measure.py`` in the pipeline, or a user of the
library alone) keeps the secret draw and the budget. Two calls, so that nothing is measured before the budget
accepts (the release's privacy contract: :mod:`mdp_core.declarations.budget`, ``docs/privacy.md``):

  1. :func:`plan_release` certifies the mechanism from the array about to be drawn from
     (:func:`mdp_core.solvers.verify.verify`, exact tolerance, graph against the metric, every pair when the plan
     claims them: PrivacyError, nothing drawn, when it fails) and returns the :class:`Plan` of the privacy door's verdict
     (:func:`mdp_core.release.door.plan_privacy`): the :class:`~mdp_core.declarations.budget.Guarantee` and the two
     spends -- "perturb" (eps x stretch x protection radius, exact) and "counts" (eps_counts);
  2. the caller charges ``plan.spends`` (a ledger, or :meth:`mdp_core.declarations.budget.Budget.admits`);
  3. :func:`make_release` draws each individual's output from its record's row (``rng``: a secret stream,
     e.g. :meth:`artifacts.private.Draw.rng`) and measures the counts (``measure``: exact discrete Laplace,
     kept by the caller so a re-run reproduces it); :func:`provenance_fields` gives the provenance record.

Example (a library user, no ledger)::

    privacy = plan_privacy(Settings(epsilon=10.0, eta=0.5), GraphFacts.recomputed(inst)[0])
    plan = plan_release(inst, z, privacy)
    if not Budget.of(cap).admits(spent, plan.spends): raise ...
    rel = make_release(inst, z, records, zone, plan, rng)   # rel.microdata, rel.aggregates: DataFrames
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mdp_core.declarations.budget import Budget, Guarantee, Spend
from mdp_core.errors import InputError, PrivacyError
from mdp_core.problem.instance import Instance
from mdp_core.problem.microdata import cell_of_record
from mdp_core.release import perturb
from mdp_core.release.door import PrivacyPlan, refuse_deterministic
from mdp_core.release.noise import discrete_laplace
from mdp_core.release.postprocess import Measure, release_counts
from mdp_core.solvers.verify import verify


@dataclass(frozen=True)
class Plan:
    """What a release promises and costs, known before anything is drawn: its ``guarantee`` and its
    ``spends`` (("perturb", eps x stretch x radius), ("counts", eps_counts), and ("error", eps_error) when the
    people's mean error is measured); the DP prior, if any, is charged by the stage that measures it and enters
    only the guarantee's additive epsilon."""

    guarantee: Guarantee
    eps_counts: float
    spends: tuple[Spend, ...]
    error_bounds: tuple[float, float] | None = None  # the people's error's public [lo, hi] (with an "error" spend)
    error_geo: bool = False  # ... measured in great-circle km from the people's lat/lon

    def spend(self, kind: str) -> Spend:
        """The spend of ``kind`` ("perturb", "counts" or "error")."""
        return next(s for s in self.spends if s.kind == kind)

    @property
    def eps_error(self) -> float:
        """The budget of the people's mean-error measurement (0: not measured)."""
        return next((float(s.epsilon) for s in self.spends if s.kind == "error"), 0.0)


@dataclass(frozen=True)
class ErrorMeasure:
    """How :func:`make_release` measures the people's mean error (:func:`mdp_core.release.people.measured_error`):
    their own coordinates ``points`` ((n, D) in the instance's columns, or lat, lon when the plan's ``error_geo``:
    the columns they were mapped by; None: at their records) and the noise ``measure`` (the caller's, from its
    secret draw: no default, no fresh noise)."""

    points: np.ndarray | None
    measure: Measure


@dataclass(frozen=True)
class Release:
    """The released tables: ``microdata`` (output_id and the output's public coordinates, sorted by output),
    ``aggregates`` (:data:`mdp_core.release.postprocess.AGGREGATE_COLUMNS`), the counts' L1
    ``counts_sensitivity``, ``n_individuals`` and ``people_error`` (the DP mean of the people's error:
    :func:`mdp_core.release.people.measured_error`; None: not measured)."""

    microdata: pd.DataFrame
    aggregates: pd.DataFrame
    counts_sensitivity: int
    n_individuals: int
    people_error: dict[str, Any] | None = None


def certify(inst: Instance, z: np.ndarray, all_pairs: bool = False) -> None:
    """PrivacyError unless ``z`` (N, K) passes its mDP certificate against ``inst`` (exact tolerance;
    ``all_pairs``: over every two records of a component at their metric distance, issue 51)."""
    cert = verify(inst, z, all_pairs=all_pairs)
    if not cert.passed:
        raise PrivacyError(
            "the mechanism stored for this release fails its mDP certificate at the moment of drawing "
            f"({cert.n_violations} violation(s), max row-sum error {cert.max_row_sum_error:.3g}); nothing is drawn"
        )


def plan_release(inst: Instance, z: np.ndarray, privacy: PrivacyPlan, geo: bool = False) -> Plan:
    """Certify ``z`` (over every pair when the plan claims them, ``privacy.settings.all_pairs``), always, from the
    array about to be drawn from, and take the release's guarantee and spends from the privacy door's plan
    (:func:`mdp_core.release.door.plan_privacy`: PrivacyError when it refuses); a deterministic row of ``z``
    is refused too. The DP prior, if any, is charged by the stage that measures it. With an "error" spend, the
    public bounds of the people's error (:func:`mdp_core.release.people.error_range`, in great-circle km when
    ``geo``: people by lat/lon) are computed here, before anything is charged: an instance without usable
    coordinates is refused (InputError) with nothing charged."""
    from mdp_core.release.people import error_range

    certify(inst, z, privacy.settings.all_pairs)
    privacy.admit()
    refuse_deterministic(z)
    spends = tuple(s for s in privacy.spends if s.kind in ("perturb", "counts", "error"))
    bounds = None
    if any(s.kind == "error" for s in spends):
        limit = privacy.guarantee.max_snap
        bounds = error_range(inst, z, limit if limit is not None else inst.eta, geo)
    return Plan(privacy.guarantee, float(privacy.spend("counts").epsilon), spends, bounds, geo and bounds is not None)


def make_release(
    inst: Instance,
    z: np.ndarray,
    records: np.ndarray,
    zone: np.ndarray,
    plan: Plan,
    rng: np.random.Generator,
    measure: Measure = discrete_laplace,
    error: ErrorMeasure | None = None,
) -> Release:
    """Draw and measure, once ``plan.spends`` are charged: each individual's output from row
    ``records[n]`` ((n,) int64 secret record ids) of ``z`` with ``rng``, the counts per output cell and
    per zone (``zone``: (K,) labels) by ``measure`` at ``plan.eps_counts``, and -- when the plan has an "error"
    spend -- the people's mean error (``error``: their coordinates and its noise) at its epsilon."""
    from mdp_core.release.people import measured_error

    outputs = perturb.perturb(z, records, rng)
    cells = np.bincount(cell_of_record(inst)[records], minlength=inst.n_outputs).astype(np.int64)
    table, meas = release_counts(cells, zone, plan.eps_counts, measure)
    mean = None
    if plan.eps_error:
        if error is None or plan.error_bounds is None or (plan.error_geo and error.points is None):
            raise InputError("the plan charges the people's mean error: give its measure (ErrorMeasure) and bounds")
        args = (error.points, plan.error_bounds, plan.eps_error, error.measure, plan.error_geo)
        mean = measured_error(inst, z, records, *args)
    microdata = perturb.perturbed_microdata(inst, outputs)
    return Release(microdata, table, int(meas.sensitivity), int(records.shape[0]), mean)


def published_protection(
    graph_protection: Mapping[str, Any],
    radius: float,
    max_stretch: float,
    allow_unprotected: bool,
    max_distance: float,
) -> dict[str, Any]:
    """The provenance's ``protection`` block: the graph stage's figures (public: the records are) and the
    release's settings. Counts and distances of the secret table's people are not published (no DP): null;
    the bound every individual was checked against (``max_distance``) is."""
    pair = graph_protection.get("worst_pair") or {}
    return {
        "n_components": int(graph_protection["n_components"]),
        "component_sizes": [int(x) for x in graph_protection["component_sizes"]],
        "stretch": float(graph_protection["stretch"]),
        "connected": bool(graph_protection["connected"]),
        "records_outside_largest": int(graph_protection["records_outside_largest"]),
        "worst_pair": [int(pair["i"]), int(pair["j"])] if "i" in pair else None,
        "protection_radius": radius,
        "max_stretch": float(max_stretch),
        "allow_unprotected": bool(allow_unprotected),
        "unprotected_individuals": None,
        "snap_mean": None,
        "snap_max": None,
        "max_distance": float(max_distance),
    }


def published_ledger(population: str, charge: float, at: Mapping[str, Any]) -> dict[str, Any]:
    """The provenance's ``ledger`` block: this release's ``charge`` and the population's ledger as it stood
    right after the release's last charge (``at``: {"seq", "head", "spent", "cap"}, e.g.
    :meth:`artifacts.private.PrivateStore.position`), the same on every recomputation."""
    left = Budget.of(at["cap"]).left(float(at["spent"]))  # exact, then rounded once
    return {
        "population": population,
        "this_release": charge,
        "total_so_far": at["spent"],
        "max_total_epsilon": at["cap"],
        "left": None if left is None else float(left),
        "ledger_seq": at["seq"],
        "ledger_head": at["head"],
    }


def provenance_fields(
    release: Release,
    plan: Plan,
    eps_prior: float,
    prior_source: str,
    protection: Mapping[str, Any],
    ledger: Mapping[str, Any],
) -> dict[str, Any]:
    """The provenance record's figures of a release (beside the files' sha256s, the format and version, and
    the caller's population, microdata_source and draw_commitment); ``eps_error`` and ``people_error`` only when
    the people's mean error was measured (a release without it keeps the provenance it had)."""
    return {
        "n_individuals": release.n_individuals,
        "eps_counts": plan.eps_counts,
        "counts_sensitivity": release.counts_sensitivity,
        "eps_prior": eps_prior,
        "prior_source": prior_source,
        "protection": dict(protection),
        "guarantee": plan.guarantee.record(),
        "ledger": dict(ledger),
    } | ({"eps_error": plan.eps_error, "people_error": release.people_error} if release.people_error else {})


__all__ = [
    "ErrorMeasure",
    "Plan",
    "Release",
    "certify",
    "make_release",
    "plan_release",
    "provenance_fields",
    "published_ledger",
    "published_protection",
]
