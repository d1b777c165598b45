"""The audit's readers of releases made before populations (:mod:`mdp_core.release.audit`, provenance v2):
the guarantee and the ledger as that format stated them."""

from __future__ import annotations

from mdp_core.declarations.budget import additive_epsilon
from mdp_core.release.audit_common import (
    PROVENANCE,
    RECOMPUTED,
    Record,
    _compare,
    _num,
    _obj,
    _show,
)


def _check_guarantee_v2(prov: dict, inst: Record) -> list[str]:
    """The guarantee: eps per unit and unit of the instance, additive eps = eps_counts + eps_prior, and the
    statement says exp(eps * d(r, r') + additive) in that unit."""
    where, g, add = f"{PROVENANCE} guarantee", _obj(prov.get("guarantee")), additive_epsilon(prov)
    findings = _compare(where, "epsilon_per_unit", g.get("epsilon_per_unit"), inst["epsilon"])
    findings += _compare(where, "distance_unit", g.get("distance_unit"), inst["distance_unit"])
    findings += _compare(where, "additive_epsilon", g.get("additive_epsilon"), add)
    statement = g.get("statement")
    if add is not None and not (
        isinstance(statement, str)
        and f"exp({inst['epsilon']:g} * d(r, r') + {add:g})" in statement
        and f"d in {inst['distance_unit']}" in statement
    ):
        findings.append(
            f"{where}: the statement does not say exp({inst['epsilon']:g} * d(r, r') + {add:g}), d in {inst['distance_unit']}"
        )
    return findings


def _check_ledger_v2(prov: dict, inst: Record) -> list[str]:
    """this_release = eps * eta + additive; this_release <= total_so_far <= max_total_epsilon (when set)."""
    where, led, add = f"{PROVENANCE} ledger", _obj(prov.get("ledger")), additive_epsilon(prov)
    if add is None:
        return []
    spend = inst["epsilon"] * inst["eta"] + add
    findings = _compare(where, "this_release", led.get("this_release"), spend, RECOMPUTED)
    total, cap, n = _num(led.get("total_so_far")), _num(led.get("max_total_epsilon")), led.get("releases_so_far")
    if total is None or total < spend * (1 - RECOMPUTED):
        findings.append(f"{where}: total_so_far {led.get('total_so_far')} is below this release's spend {_show(spend)}")
    elif led.get("max_total_epsilon") is not None and (cap is None or total > cap * (1 + RECOMPUTED)):
        findings.append(
            f"{where}: total_so_far {_show(total)} exceeds max_total_epsilon {led.get('max_total_epsilon')}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        findings.append(f"{where}: releases_so_far {n} is not a count >= 1")
    return findings
