"""The audit's privacy claims (:mod:`mdp_core.release.audit`, steps 5 and 6): release_provenance.json (format
v3: population, protection, guarantee, ledger, the privacy door on the released figures; v2 through
:mod:`mdp_core.release.audit_legacy`), the manifest's privacy block and its config."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, cast

from mdp_core.declarations import contract
from mdp_core.declarations.budget import additive_epsilon, stated_metric, this_release
from mdp_core.errors import MdpError

if TYPE_CHECKING:
    from mdp_core.release.door import PrivacyPlan
from mdp_core.release.audit_common import (
    EXACT,
    GUARANTEE_KEYS,
    GUARANTEE_KEYS_V2,
    INSTANCE_DIR,
    LEDGER_KEYS,
    LEDGER_KEYS_V2,
    MICRODATA_SOURCES,
    POPULATION,
    PRIOR_SOURCES,
    PRIVACY_FROM_PROVENANCE,
    PRIVACY_KEYS,
    PRIVACY_KEYS_V3_OPTIONAL,
    PROTECTION_KEYS,
    PROVENANCE,
    PROVENANCE_FORMAT,
    PROVENANCE_KEYS,
    PROVENANCE_KEYS_V2,
    PROVENANCE_VERSIONS,
    RECOMPUTED,
    Record,
    _agrees,
    _compare,
    _first_line,
    _forbidden_keys,
    _is_count,
    _keys,
    _num,
    _obj,
    _same_number,
    _show,
)
from mdp_core.release.audit_legacy import (
    _check_guarantee_v2,
    _check_ledger_v2,
)


def _version(prov: dict) -> int | None:
    """The provenance's version when it is one the audit knows (:data:`PROVENANCE_VERSIONS`), else None."""
    v = prov.get("version")
    ok = prov.get("format") == PROVENANCE_FORMAT and isinstance(v, int) and not isinstance(v, bool)
    return v if ok and v in PROVENANCE_VERSIONS else None


def _check_provenance(prov: dict, actual: dict[str, str], facts: Record) -> list[str]:
    """release_provenance.json: format, keys, the sha256s it names, its figures vs the tables and instance."""
    p = PROVENANCE
    findings: list[str] = []
    if prov.get("mechanism_sha256") != actual["mechanism.parquet"]:
        findings.append(f"{p}: microdata and aggregates were drawn from another mechanism (sha256 differs)")
    if prov.get("instance_json_sha256") != actual[f"{INSTANCE_DIR}/instance.json"]:
        findings.append(f"{p}: microdata and aggregates were drawn for another instance (sha256 differs)")
    for name in ("microdata.parquet", "aggregates.parquet"):
        if name in actual and prov.get(f"{name.split('.')[0]}_sha256") != actual[name]:
            findings.append(f"{name}: sha256 differs from the one {p} records")
    findings += [
        f"{p}: key {k} names a secret or a seed: not allowed in a published file" for k in _forbidden_keys(prov)
    ]
    version = _version(prov)
    if version is None:
        return findings + [
            f"{p}: not a {PROVENANCE_FORMAT} record of version {' or '.join(map(str, PROVENANCE_VERSIONS))}"
        ]
    findings += _check_counts(prov, facts) + _check_microdata_order(prov, facts)
    if version == 2:
        findings += _keys(p, prov, PROVENANCE_KEYS_V2)
        findings += _keys(f"{p} guarantee", _obj(prov.get("guarantee")), GUARANTEE_KEYS_V2)
        findings += _keys(f"{p} ledger", _obj(prov.get("ledger")), LEDGER_KEYS_V2)
        return findings + _check_guarantee_v2(prov, facts["instance"]) + _check_ledger_v2(prov, facts["instance"])
    findings += _keys(p, prov, PROVENANCE_KEYS | contract.PROVENANCE_KEYS_OPTIONAL, required=False)
    findings += _keys(p, {k: v for k, v in prov.items() if k in PROVENANCE_KEYS}, PROVENANCE_KEYS)
    g = _obj(prov.get("guarantee"))
    findings += _keys(f"{p} guarantee", g, GUARANTEE_KEYS | contract.GUARANTEE_KEYS_OPTIONAL, required=False)
    findings += _keys(f"{p} guarantee", {k: v for k, v in g.items() if k in GUARANTEE_KEYS}, GUARANTEE_KEYS)
    led = _obj(prov.get("ledger"))
    findings += _keys(f"{p} ledger", led, LEDGER_KEYS | contract.LEDGER_KEYS_OPTIONAL, required=False)
    findings += _keys(f"{p} ledger", {k: v for k, v in led.items() if k in LEDGER_KEYS}, LEDGER_KEYS)
    findings += _keys(f"{p} protection", _obj(prov.get("protection")), PROTECTION_KEYS)
    stretch = _stretch(prov, facts)
    within = _stretch_within(prov, facts, stretch)
    findings += _check_protection(prov, facts, stretch)
    findings += _check_within(prov, facts, within) + _check_door(prov, facts, stretch, within)
    return findings + _check_guarantee(prov, facts["instance"], stretch, within) + _check_ledger(prov, within)


def _check_door(prov: dict, facts: Record, stretch: float, within: float) -> list[str]:
    """The privacy door (:func:`mdp_core.release.door.plan_privacy`, the rules check and run apply) on the
    released figures: the stated settings and the recomputed mDP graph (:func:`door_plan`). A rule it refuses is
    a finding (a release the door would not have admitted), and so is a charge other than the door's. Releases
    stated before the within-radius stretch are charged at the whole graph's (:func:`_stretch_within`)."""
    plan = door_plan(prov, facts, stretch, within)
    if plan is None:
        return []  # the figures' own checks report what is missing
    findings = [f"{PROVENANCE}: the privacy door refuses this release: {why}" for why in plan.refusals]
    charge = _num(_obj(prov.get("ledger")).get("this_release"))
    if charge is not None and not _same_number(charge, float(plan.charge), RECOMPUTED):
        findings.append(
            f"{PROVENANCE} ledger: this_release {charge!r} but the privacy door charges {float(plan.charge)!r}"
        )
    return findings


def door_plan(prov: dict, facts: Record, stretch: float, within: float) -> PrivacyPlan | None:
    """The privacy door's plan (:class:`mdp_core.release.door.PrivacyPlan`) for the released figures: the
    provenance's settings and the mDP graph recomputed from the instance (``stretch``, ``within``:
    :func:`_stretch`, :func:`_stretch_within`); None when a figure it needs is missing or not finite."""
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy

    p, inst = _obj(prov.get("protection")), facts["instance"]
    radius, limit, cap = (_num(p.get(k)) for k in ("protection_radius", "max_distance", "max_stretch"))
    eps_counts, eps_prior = _num(prov.get("eps_counts")), _num(prov.get("eps_prior"))
    if None in (radius, limit, cap, eps_counts, eps_prior) or not math.isfinite(stretch):
        return None
    settings = Settings(
        epsilon=inst["epsilon"],
        eta=inst["eta"],
        protection_radius=radius,
        max_distance=limit,
        eps_counts=cast(float, eps_counts),
        eps_prior=eps_prior if prov.get("prior_source") == "dp" else None,
        eps_error=_num(prov.get("eps_error")) or None,
        max_stretch=cast(float, cap),
        allow_unprotected=bool(p.get("allow_unprotected")),
        population=None if prov.get("microdata_source") == "simulated" else str(prov.get("population")),
    )
    graph = GraphFacts(inst["n_records"], tuple(facts["components"]), stretch, inst["distance_unit"], within)
    return plan_privacy(settings, graph)


def _stretch(prov: dict, facts: Record) -> float:
    """The stretch every v3 figure must follow: the one recomputed from the released instance (the stated
    ``protection.stretch`` only when it agrees with it within :data:`RECOMPUTED`, so that a figure written
    from it is compared with what was written, not with a last-digit difference)."""
    stated, recomputed = _num(_obj(prov.get("protection")).get("stretch")), facts["stretch"]
    return stated if stated is not None and _same_number(stated, recomputed, RECOMPUTED) else recomputed


def _stretch_within(prov: dict, facts: Record, stretch: float) -> float:
    """The stretch the release's charge pays: over the pairs within the protection radius (recomputed; the
    stated ``guarantee.stretch_within_radius`` only when it agrees within :data:`RECOMPUTED`), or the whole
    graph's for a release that states none (made before the within-radius stretch, charged at it)."""
    if "stretch_within_radius" not in _obj(prov.get("guarantee")):
        return stretch
    stated, recomputed = _num(_obj(prov.get("guarantee")).get("stretch_within_radius")), facts["stretch_within"]
    return stated if stated is not None and _same_number(stated, recomputed, RECOMPUTED) else recomputed


def _check_within(prov: dict, facts: Record, within: float) -> list[str]:
    """The stated stretch within the protection radius = the one recomputed from the instance (<= the stretch)."""
    g = _obj(prov.get("guarantee"))
    if "stretch_within_radius" not in g:
        return []
    return _compare(
        f"{PROVENANCE} guarantee",
        "stretch_within_radius",
        g.get("stretch_within_radius"),
        facts["stretch_within"],
        RECOMPUTED,
    )


def _check_microdata_order(prov: dict, facts: Record) -> list[str]:
    """Provenance v3: microdata.parquet has no ``individual`` column and its rows are sorted by output
    (non-decreasing output_id): nothing in it follows the secret table's input order."""
    micro = facts.get("microdata.parquet")
    if micro is None or prov.get("version") == 2:
        return []
    findings = []
    if micro.get("individual", True):
        findings.append("microdata.parquet: has an individual column (rows must carry nothing but the output)")
    if not micro.get("sorted", False):
        findings.append("microdata.parquet: rows are not sorted by output_id (they would follow the input order)")
    return findings


def _check_counts(prov: dict, facts: Record) -> list[str]:
    """n_individuals, eps_counts, counts_sensitivity, eps_prior and sources vs the microdata and aggregates."""
    p, findings = PROVENANCE, []
    micro, agg = facts.get("microdata.parquet"), facts.get("aggregates.parquet")
    if micro is not None:
        findings += _compare(p, "n_individuals", prov.get("n_individuals"), micro["rows"])
    if agg is not None:
        findings += _compare(p, "n_individuals", prov.get("n_individuals"), agg["total"])
        findings += _compare(p, "eps_counts", prov.get("eps_counts"), agg["eps_counts"])
        findings += _compare(p, "counts_sensitivity", prov.get("counts_sensitivity"), agg["sensitivity"])
        eps = _num(prov.get("eps_counts"))
        for level, scale in sorted(agg["scales"].items()):
            if eps is None or not _same_number(scale * eps, prov.get("counts_sensitivity"), RECOMPUTED):
                findings.append(
                    f"aggregates.parquet: {level} noise_scale {_show(scale)} x eps_counts {prov.get('eps_counts')} is "
                    f"not the counts_sensitivity {prov.get('counts_sensitivity')}"
                )
    eps_prior = _num(prov.get("eps_prior"))
    if prov.get("prior_source") not in PRIOR_SOURCES:
        findings.append(f"{p}: prior_source {prov.get('prior_source')} is not one of {sorted(PRIOR_SOURCES)}")
    elif eps_prior is None or eps_prior < 0 or (prov["prior_source"] == "dp") != (eps_prior > 0):
        findings.append(f"{p}: eps_prior {prov.get('eps_prior')} does not fit prior_source {prov['prior_source']}")
    findings += _check_people_error(prov, facts)
    if prov.get("microdata_source") not in MICRODATA_SOURCES:
        findings.append(
            f"{p}: microdata_source {prov.get('microdata_source')} is not one of {sorted(MICRODATA_SOURCES)}"
        )
    if not (isinstance(prov.get("draw_commitment"), str) and re.fullmatch(r"[0-9a-f]{64}", prov["draw_commitment"])):
        findings.append(f"{p}: draw_commitment is not a sha256 hex commitment")
    return findings


def _check_people_error(prov: dict, facts: Record) -> list[str]:
    """The DP mean of the people's error (issue 50): absent or null with eps_error 0; else its keys, its epsilon =
    eps_error, its unit the instance's, its bounds [lo, hi] = :func:`mdp_core.release.people.error_range` of the
    published instance and mechanism at protection.max_distance (the instance's eta without one), in great-circle
    km when ``people_at`` is "lat_lon"; its step (hi - lo) / ERROR_STEPS and its noise scale = step x ceil((hi -
    lo) / step) / (eps_error x n_individuals)."""
    from mdp_core.release.people import PEOPLE_AT, error_step

    where, block, eps = f"{PROVENANCE} people_error", prov.get("people_error"), _num(prov.get("eps_error", 0.0))
    if eps is None or eps < 0:
        return [f"{PROVENANCE}: eps_error {prov.get('eps_error')} is not a number >= 0"]
    if block is None:
        return [] if eps == 0 else [f"{where}: missing, but eps_error {eps:g} was charged for it"]
    b = _obj(block)
    findings = _keys(where, b, contract.PEOPLE_ERROR_KEYS)
    findings += _compare(where, "epsilon", b.get("epsilon"), eps)
    findings += _compare(where, "unit", b.get("unit"), facts["instance"]["distance_unit"])
    if b.get("people_at") not in PEOPLE_AT:
        return findings + [f"{where}: people_at {_show(b.get('people_at'))} is not one of {list(PEOPLE_AT)}"]
    limit = _num(_obj(prov.get("protection")).get("max_distance"))
    try:
        lo, hi = facts["error_range"](facts["instance"]["eta"] if limit is None else limit, b["people_at"] == "lat_lon")
    except MdpError as exc:
        return findings + [f"{where}: its bounds cannot be recomputed: {_first_line(exc)}"]
    findings += _compare(where, "lo", b.get("lo"), lo, RECOMPUTED) + _compare(where, "hi", b.get("hi"), hi, RECOMPUTED)
    step, scale, n = error_step(lo, hi), _num(b.get("noise_scale")), _num(prov.get("n_individuals"))
    findings += _compare(where, "step", b.get("step"), step, RECOMPUTED)
    if n is None or not n > 0 < eps:
        return findings + [f"{where}: n_individuals or eps_error is not a positive number"]
    width = max(1, math.ceil((hi - lo) / step))
    findings += _compare(where, "noise_scale", scale, step * width / (eps * n), RECOMPUTED)
    return findings


def _check_protection(prov: dict, facts: Record, true_stretch: float) -> list[str]:
    """Provenance v3 ``population`` and ``protection``: the components and the stretch of the released
    instance's mDP graph (recomputed from the instance's records, edges and distances: ``true_stretch``, see
    :func:`_stretch`), who is unprotected, the stretch against its limit, the snap distances."""
    where, p = f"{PROVENANCE} protection", _obj(prov.get("protection"))
    findings: list[str] = []
    population = prov.get("population")
    if not (isinstance(population, str) and POPULATION.fullmatch(population)):
        findings.append(f"{PROVENANCE}: population is not a population name ({POPULATION.pattern})")
    elif (prov.get("microdata_source") == "simulated") != population.startswith("simulated-"):
        findings.append(
            f"{PROVENANCE}: population {population} does not fit microdata_source {prov.get('microdata_source')}"
        )
    sizes = facts["components"]
    n_rec = facts["instance"]["n_records"]
    findings += _compare(where, "component_sizes", p.get("component_sizes"), sizes)
    findings += _compare(where, "n_components", p.get("n_components"), len(sizes))
    findings += _compare(where, "connected", p.get("connected"), len(sizes) == 1)
    findings += _compare(
        where, "records_outside_largest", p.get("records_outside_largest"), n_rec - max(sizes, default=0)
    )
    stretch, limit, radius = _num(p.get("stretch")), _num(p.get("max_stretch")), _num(p.get("protection_radius"))
    if stretch is None or not math.isfinite(stretch) or stretch <= 0:
        findings.append(f"{where}: stretch {p.get('stretch')} is not a finite positive number")
    elif not _same_number(stretch, true_stretch, RECOMPUTED):
        findings.append(
            f"{where}: stretch {_show(p.get('stretch'))} but the released instance's mDP graph gives "
            f"{_show(facts['stretch'])} (worst shortest path over metric distance in a component)"
        )
    if limit is None or limit <= 0:
        findings.append(f"{where}: max_stretch {p.get('max_stretch')} is not a positive number")
    if radius is None or not math.isfinite(radius) or radius <= 0:
        findings.append(f"{where}: protection_radius {p.get('protection_radius')} is not a finite positive number")
    n_ind = _num(prov.get("n_individuals"))
    unprotected = p.get("unprotected_individuals")  # null: a count of the secret table, not published
    if unprotected is not None and not _is_count(unprotected, 0, n_ind if n_ind is not None else math.inf):
        findings.append(f"{where}: unprotected_individuals {unprotected} is not a count of this table's individuals")
    elif len(sizes) == 1 and unprotected not in (0, None):
        findings.append(f"{where}: unprotected_individuals {unprotected} but the mDP graph is connected")
    if not isinstance(p.get("allow_unprotected"), bool):
        findings.append(f"{where}: allow_unprotected is not true or false")
    refused = len(sizes) > 1 or (limit is not None and true_stretch > limit)
    if refused and p.get("allow_unprotected") is not True:
        findings.append(
            f"{where}: {len(sizes)} component(s), stretch {p.get('stretch')} (max {p.get('max_stretch')}): released "
            "without allow_unprotected = true"
        )
    pair = p.get("worst_pair")
    if pair is not None and not (
        isinstance(pair, list) and len(pair) == 2 and all(_is_count(i, 0, n_rec - 1) for i in pair)
    ):
        findings.append(f"{where}: worst_pair is not two record ids of the instance")
    mean, most = p.get("snap_mean"), p.get("snap_max")
    if (mean is None) != (most is None):
        findings.append(f"{where}: snap_mean and snap_max must both be given or both be null")
    elif mean is not None:
        m, x = _num(mean), _num(most)
        if m is None or x is None or not 0 <= m <= x * (1 + RECOMPUTED) or not math.isfinite(x):
            findings.append(f"{where}: snap_mean {mean} / snap_max {most} are not distances with mean <= max")
    return findings


def _check_guarantee(prov: dict, inst: Record, true_stretch: float, within: float | None = None) -> list[str]:
    """Provenance v3 guarantee: eps per unit and unit of the instance, stretch = the recomputed one
    (``true_stretch``: :func:`_stretch`), radius = the protection's, metric eps = eps x stretch, additive =
    eps_counts + eps_prior, the statement's figures (from the recomputed stretch)."""
    where, g, p, add = (
        f"{PROVENANCE} guarantee",
        _obj(prov.get("guarantee")),
        _obj(prov.get("protection")),
        additive_epsilon(prov),
    )
    findings = _compare(where, "epsilon_per_unit", g.get("epsilon_per_unit"), inst["epsilon"])
    findings += _compare(where, "distance_unit", g.get("distance_unit"), inst["distance_unit"])
    findings += _compare(where, "additive_epsilon", g.get("additive_epsilon"), add)
    findings += _compare(where, "stretch", g.get("stretch"), true_stretch, RECOMPUTED)
    findings += _compare(where, "protection_radius", g.get("protection_radius"), p.get("protection_radius"))
    stretch, radius = true_stretch, _num(p.get("protection_radius"))
    if not math.isfinite(stretch) or radius is None or add is None:
        return findings
    metric = inst["epsilon"] * stretch
    findings += _compare(
        where, "metric_epsilon_per_unit (eps x stretch)", g.get("metric_epsilon_per_unit"), metric, RECOMPUTED
    )
    statement, unit = g.get("statement"), inst["distance_unit"]
    shown = stated_metric(inst["epsilon"], stretch)
    needed: tuple[str, ...] = (
        f"exp({shown} * d(r, r') + {add:g})",
        f"d in {unit}",
        f"{radius:g} {unit}",
        f"stretch {stretch:.6g}",
    )
    if within is not None and math.isfinite(within) and within < stretch:  # the within-radius factor, stated too
        needed += (f"exp({stated_metric(inst['epsilon'], within)} * d(r, r') + {add:g})",)
    missing = [n for n in needed if not (isinstance(statement, str) and n in statement)]
    if missing:
        findings.append(f"{where}: the statement does not say {'; '.join(missing)}")
    return findings


def _check_ledger(prov: dict, true_stretch: float) -> list[str]:
    """Provenance v3 ledger: population = the provenance's; this_release = eps x stretch x radius + additive
    (the recomputed stretch the charge pays, ``true_stretch``: :func:`_stretch_within`); this_release <= total_so_far <=
    max_total_epsilon (required for an agency population), left = cap - total; ledger_seq >= 1 and a sha256 head."""
    where, led, g = f"{PROVENANCE} ledger", _obj(prov.get("ledger")), _obj(prov.get("guarantee"))
    findings = _compare(where, "population", led.get("population"), prov.get("population"))
    eps, radius, add = (_num(g.get(k)) for k in ("epsilon_per_unit", "protection_radius", "additive_epsilon"))
    if eps is None or radius is None or add is None:
        return findings + [f"{where}: the guarantee's figures are missing: this release's charge cannot be checked"]
    if not (math.isfinite(true_stretch) and true_stretch >= 1.0):
        return findings + [
            f"{where}: the released mDP graph's stretch {_show(true_stretch)} is not a finite number >= 1: no charge "
            "covers it"
        ]
    try:
        spend = this_release(eps, true_stretch, radius, add)
    except MdpError as exc:
        return findings + [f"{where}: this release's charge cannot be computed ({_first_line(exc)})"]
    findings += _compare(
        where, "this_release (eps x stretch x radius + additive)", led.get("this_release"), spend, RECOMPUTED
    )
    total, cap = _num(led.get("total_so_far")), _num(led.get("max_total_epsilon"))
    if total is None or total < spend * (1 - RECOMPUTED):
        findings.append(
            f"{where}: total_so_far {led.get('total_so_far')} is below this release's charge {_show(spend)}"
        )
    if led.get("max_total_epsilon") is None:
        if prov.get("microdata_source") != "simulated":
            findings.append(f"{where}: no max_total_epsilon for an agency population")
        if led.get("left") is not None:
            findings.append(f"{where}: left {led.get('left')} without a max_total_epsilon")
    elif cap is None or total is None:
        findings.append(f"{where}: max_total_epsilon {led.get('max_total_epsilon')} is not a number")
    else:
        if total > cap * (1 + RECOMPUTED):
            findings.append(f"{where}: total_so_far {_show(total)} exceeds max_total_epsilon {_show(cap)}")
        if not _agrees(led.get("left"), cap - total, RECOMPUTED, RECOMPUTED * cap):
            findings.append(
                f"{where}: left {led.get('left')} but max_total_epsilon - total_so_far gives {_show(cap - total)}"
            )
    if not _is_count(led.get("ledger_seq"), 1):
        findings.append(f"{where}: ledger_seq {led.get('ledger_seq')} is not a count >= 1")
    if not (isinstance(led.get("ledger_head"), str) and re.fullmatch(r"[0-9a-f]{64}", led["ledger_head"])):
        findings.append(f"{where}: ledger_head is not a sha256 hex hash")
    return findings


def _check_privacy(manifest: dict, prov: dict, inst: Record) -> list[str]:
    """The manifest's privacy block: eps, eta, unit = the instance's; the other figures = the provenance's."""
    privacy = _obj(manifest.get("privacy"))
    version = _version(prov)
    allowed = PRIVACY_KEYS | (PRIVACY_KEYS_V3_OPTIONAL if version == 3 else frozenset())
    findings = _keys("manifest.json privacy", privacy, allowed, required=False)
    if version is not None:
        findings += [f"manifest.json privacy: missing key {k}" for k in sorted(PRIVACY_KEYS - set(privacy))]
    findings += [f"manifest.json: privacy key {k} names a secret or a seed" for k in _forbidden_keys(privacy)]
    for key, want in (("mechanism_epsilon", "epsilon"), ("eta", "eta"), ("distance_unit", "distance_unit")):
        if key in privacy and not _agrees(privacy[key], inst[want]):
            findings.append(
                f"manifest.json: privacy {key} {_show(privacy[key])} != instance {want} {_show(inst[want])}"
            )
    for key, source in PRIVACY_FROM_PROVENANCE.items():
        if key in privacy:
            findings += _compare("manifest.json", f"privacy {key}", privacy[key], prov.get(source))
    return findings


def _check_config(manifest: dict, prov: dict, solve: dict, inst: Record) -> list[str]:
    """The manifest's ``config`` (the flow's settings) states the released eps, eta, counts budget, prior,
    cap, microdata source, n and method."""
    if "config" not in manifest:
        return ["manifest.json: no config block"] if _version(prov) is not None else []
    cfg = _obj(manifest["config"])
    privacy, release = _obj(cfg.get("privacy")), _obj(cfg.get("release"))
    findings = [f"manifest.json: config release.{k} names a seed or a secret" for k in _forbidden_keys(release)]
    for key in ("epsilon", "eta"):
        if privacy.get(key) is not None and not _agrees(privacy[key], inst[key]):
            findings.append(
                f"manifest.json: config privacy.{key} {_show(privacy[key])} != instance {key} {_show(inst[key])}"
            )
    if "method" in _obj(cfg.get("solve")):
        findings += _compare("manifest.json", "config solve.method", cfg["solve"]["method"], solve.get("method"))
    if not release:
        return findings
    led = _obj(prov.get("ledger"))
    findings += _compare(
        "manifest.json", "config release.eps_counts", release.get("eps_counts"), prov.get("eps_counts")
    )
    if _version(prov) == 2:
        findings += _compare(
            "manifest.json",
            "config release.max_total_epsilon",
            release.get("max_total_epsilon"),
            led.get("max_total_epsilon"),
        )
    else:  # v3: the stored cap is enforced; a config may lower it, never raise it
        findings += _check_config_v3(cfg, prov)
    prior = release.get("prior", "dataset")
    source = prior if prior in ("dataset", "uniform", "dp") else "file"
    findings += _compare("manifest.json", "config release prior source", source, prov.get("prior_source"))
    if source == "dp":
        findings += _compare(
            "manifest.json", "config release.eps_prior", release.get("eps_prior"), prov.get("eps_prior")
        )
    findings += _check_config_error(release, prov, source)
    simulated = release.get("microdata") is None
    findings += _compare(
        "manifest.json", "config microdata source", "simulated" if simulated else "file", prov.get("microdata_source")
    )
    if simulated and release.get("n_individuals") is not None:  # unset: the config's default number
        findings += _compare(
            "manifest.json", "config release.n_individuals", release["n_individuals"], prov.get("n_individuals")
        )
    return findings


def _check_config_error(release: dict, prov: dict, prior_source: str) -> list[str]:
    """The config's ``eps_error`` (issue 50) = the provenance's: set, equal (0: not measured, absent); unset,
    the auto level of the published n with a DP prior (:func:`mdp_core.release.people.auto_error_epsilon`) -- or
    absent, a DP-prior release made before issue 50 (nothing measured, nothing charged for it, nothing claimed) --,
    absent otherwise."""
    from mdp_core.release.people import auto_error_epsilon

    stated, n = prov.get("eps_error"), _num(prov.get("n_individuals"))
    if release.get("eps_error") is None and prior_source == "dp" and "eps_error" not in prov:
        return []
    if release.get("eps_error") is not None:
        want = _num(release["eps_error"])
    elif prior_source == "dp" and n is not None and n >= 1:
        want = auto_error_epsilon(int(n))
    else:
        want = None if prior_source == "dp" else 0.0
    if want is None:
        return ["manifest.json: config release eps_error: auto, but n_individuals is not a count"]
    if want == 0 and stated is None:  # not measured: the provenance has no eps_error
        return []
    return _compare("manifest.json", "config release.eps_error", stated, want)


def _check_config_v3(cfg: dict, prov: dict) -> list[str]:
    """A v3 config's population and protection settings = the provenance's; the ledger's cap is at most
    the configured one (a config lowers the stored cap, never raises it)."""
    privacy, release = _obj(cfg.get("privacy")), _obj(cfg.get("release"))
    protection, led = _obj(prov.get("protection")), _obj(prov.get("ledger"))
    findings: list[str] = []
    if release.get("population") is not None:
        findings += _compare(
            "manifest.json", "config release.population", release["population"], prov.get("population")
        )
    for key in ("protection_radius", "max_stretch", "allow_unprotected"):
        if privacy.get(key) is not None:
            findings += _compare("manifest.json", f"config privacy.{key}", privacy[key], protection.get(key))
    asked, cap = _num(release.get("max_total_epsilon")), _num(led.get("max_total_epsilon"))
    if release.get("max_total_epsilon") is not None and (asked is None or cap is None or cap > asked * (1 + EXACT)):
        findings.append(
            f"manifest.json: ledger max_total_epsilon {led.get('max_total_epsilon')} is not at most the configured "
            f"max_total_epsilon {release.get('max_total_epsilon')}"
        )
    return findings
