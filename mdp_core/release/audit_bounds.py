"""The audit's solver claims (:mod:`mdp_core.release.audit`, steps 3, 4 and 7): the certificates, solve.json's
objective, bounds, gap and status, the manifest's solve summary, and evaluation.parquet / utility_vs_eps.parquet."""

from __future__ import annotations

from mdp_core.release.audit_coherence import repair_findings
from mdp_core.release.audit_common import (
    DEFAULT_GAP,
    EXACT,
    MANIFEST_SOLVE_KEYS,
    RECOMPUTED,
    SOLVE_KEYS,
    TINY,
    Record,
    _agrees,
    _compare,
    _keys,
    _num,
    _obj,
    _same_number,
    _show,
)
from mdp_core.solvers.result import BOUND_TOLERANCE, gap_closed


# ----------------------------------------------------------------------------- steps 3-8: the claims
def _check_certificate(where: str, recorded: object, cert: Record) -> list[str]:
    """Every field of a recorded certificate vs the recomputed one (``Certificate.as_dict()``)."""
    if not isinstance(recorded, dict):
        return [f"{where}: no recorded certificate"]
    findings = [] if recorded.get("passed") is True else [f"{where}: the recorded certificate does not say passed"]
    for key in sorted(set(recorded) | set(cert)):
        if key not in cert:
            findings.append(f"{where}: certificate field {key} is not a field of the certificate")
        elif key not in recorded:
            findings.append(f"{where}: certificate field {key} is missing")
        elif key != "passed" and not _agrees(recorded[key], cert[key], EXACT, TINY):
            findings.append(
                f"{where}: certificate {key}={_show(recorded[key])} but the released files give {_show(cert[key])}"
            )
    return findings


def _check_certificates(manifest: dict, solve: dict, facts: Record) -> list[str]:
    cert = facts["certificate"]
    findings = (
        []
        if cert.get("passed") is True
        else [f"mechanism.parquet: fails verification against the instance: {facts['summary']}"]
    )
    findings += _check_certificate("manifest.json", _obj(manifest.get("privacy")).get("certificate"), cert)
    return findings + _check_certificate("solve.json", solve.get("certificate"), cert)


def _check_solve(solve: dict, actual: dict[str, str], facts: Record) -> list[str]:
    """solve.json: keys, mechanism sha256, N, K, objective = recomputed loss, bounds, gap, honest status."""
    inst, obj = facts["instance"], facts["objective"]
    findings = _keys("solve.json", solve, SOLVE_KEYS, required=False)
    if solve.get("mechanism_sha256") != actual["mechanism.parquet"]:
        findings.append("solve.json: mechanism_sha256 is not the released mechanism.parquet")
    for key in ("n_records", "n_outputs"):
        findings += _compare("solve.json", key, solve.get(key), inst[key])
    findings += _compare("solve.json", "objective", solve.get("objective"), obj, RECOMPUTED)
    findings += _compare("solve.json", "upper_bound", solve.get("upper_bound"), obj, RECOMPUTED)
    after = _obj(solve.get("repair")).get("objective_after")
    if after is not None:
        findings += _compare("solve.json", "repair objective_after", after, obj, RECOMPUTED)
    findings += repair_findings(solve, len(facts["components"]))  # the repair figures (issue 49)
    return findings + _check_bounds(solve, obj)


def _check_bounds(solve: dict, obj: float) -> list[str]:
    """lower bound <= objective, gap = max(objective - lower bound, 0), relative gap, "optimal" = gap closed
    (mdp_core.solvers.solve.Solution, mdp_core.solvers.result.honest_status)."""
    raw = solve.get("lower_bound")
    lb = _num(raw)
    if raw is not None and lb is None:
        return [f"solve.json: lower_bound {raw!r} is not a number"]
    tol = BOUND_TOLERANCE * max(1.0, abs(obj))
    findings: list[str] = []
    if lb is not None and lb > obj + tol:
        findings.append(f"solve.json: lower_bound {_show(lb)} exceeds the released mechanism's loss {_show(obj)}")
    gap = None if lb is None else max(obj - lb, 0.0)
    if not _agrees(solve.get("gap"), gap, RECOMPUTED, tol):
        findings.append(f"solve.json: gap {_show(solve.get('gap'))} but loss - lower_bound gives {_show(gap)}")
    rel = None if gap is None else gap / max(abs(obj), 1e-300)
    if "relative_gap" in solve and not _agrees(solve["relative_gap"], rel, RECOMPUTED, BOUND_TOLERANCE):
        findings.append(f"solve.json: relative_gap {_show(solve['relative_gap'])} but the bounds give {_show(rel)}")
    if solve.get("status") == "optimal":
        options = _obj(solve.get("options"))
        gap_abs, gap_rel = _num(options.get("gap_abs", DEFAULT_GAP[0])), _num(options.get("gap_rel", DEFAULT_GAP[1]))
        if lb is None or gap_abs is None or gap_rel is None:
            findings.append("solve.json: status optimal without a lower bound and gap options")
        elif not gap_closed(obj, lb, gap_abs, gap_rel):
            findings.append(
                f"solve.json: status optimal but the lower bound {_show(lb)} is not within gap_abs {gap_abs:g} / "
                f"gap_rel {gap_rel:g} of the loss {_show(obj)}"
            )
    return findings


def _check_manifest_solve(manifest: dict, solve: dict) -> list[str]:
    """The manifest's ``solve`` summary repeats solve.json."""
    summary = manifest.get("solve")
    if summary is None:
        return []
    if not isinstance(summary, dict):
        return ["manifest.json: solve is not an object"]
    findings = _keys("manifest.json solve", summary, frozenset({*MANIFEST_SOLVE_KEYS, "auto"}), required=False)
    for key in MANIFEST_SOLVE_KEYS:
        if key in summary:
            findings += _compare("manifest.json", f"solve {key}", summary[key], solve.get(key))
    if "auto" in summary:
        findings += _compare("manifest.json", "solve auto", summary["auto"], _obj(solve.get("extra")).get("auto"))
    return findings


def _check_evaluation(facts: Record, solve: dict, prov: dict) -> list[str]:
    """evaluation.parquet and utility_vs_eps.parquet restate the released mechanism's figures."""
    inst, cert, obj, method = facts["instance"], facts["certificate"], facts["objective"], solve.get("method")
    findings: list[str] = []
    rows = facts.get("evaluation.parquet")
    if rows is not None:
        for row in rows:  # every mechanism was evaluated on the released instance
            for key in ("epsilon", "eta", "distance_unit", "n_records", "n_outputs", "n_edges"):
                findings += _compare("evaluation.parquet", f"{row.get('method')} {key}", row.get(key), inst[key])
        mine = [r for r in rows if r.get("method") == method]
        if not mine:
            findings.append(f"evaluation.parquet: no row for the released method {method}")
        for row in mine[:1]:
            findings += _compare("evaluation.parquet", "expected_loss", row.get("expected_loss"), obj, RECOMPUTED)
            findings += _compare("evaluation.parquet", "verified", row.get("verified"), cert.get("passed"))
            findings += _compare(
                "evaluation.parquet",
                "realised_epsilon",
                row.get("realised_epsilon"),
                cert.get("max_realised_epsilon"),
                RECOMPUTED,
            )
            findings += _compare("evaluation.parquet", "lower_bound", row.get("lower_bound"), solve.get("lower_bound"))
            if not _agrees(row.get("gap"), solve.get("gap"), RECOMPUTED, BOUND_TOLERANCE * max(1.0, abs(obj))):
                findings.append(
                    f"evaluation.parquet: gap {_show(row.get('gap'))} but solve.json says {_show(solve.get('gap'))}"
                )
    within = facts.get("stretch_within")  # recomputed from the graph: the rate the release verifiably keeps there
    findings += _check_against_laplace(rows or [], method, _obj(prov.get("guarantee")), within)
    for row in facts.get("utility_vs_eps.parquet") or []:
        if not _same_number(row.get("epsilon"), inst["epsilon"] * (_num(row.get("factor")) or 0.0), EXACT):
            findings.append(
                f"utility_vs_eps.parquet: epsilon {row.get('epsilon')} is not factor {row.get('factor')} x {inst['epsilon']:g}"
            )
        elif row.get("method") == method and row.get("factor") == 1.0:
            findings += _compare(
                "utility_vs_eps.parquet", "released expected_loss", row.get("expected_loss"), obj, RECOMPUTED
            )
    return findings


def _check_against_laplace(
    rows: list[Record], method: object, guarantee: Record, stretch_within: object = None
) -> list[str]:
    """The comparison with planar Laplace (issue 40, :mod:`mdp_core.release.baseline`): its rows and the
    released one state one metric eps, a rate the release keeps: eps x the stretch within the protection radius
    (stated, or ``stretch_within`` recomputed from the graph: the rate the release promises there, what planar
    Laplace is compared at) or, in releases made before, eps x the stretch over any distance; the continuous
    mechanism's error is exactly D / eps for a whole D >= 1."""
    from mdp_core.release.baseline import CONTINUOUS, REMAP

    findings: list[str] = []
    compared = [r for r in rows if r.get("method") in (CONTINUOUS, REMAP)]
    released = [r for r in rows if r.get("method") == method and "metric_epsilon" in r][:1]
    stated = {_num(r.get("metric_epsilon")) for r in compared + released}
    if compared and len(stated) != 1:
        findings.append(
            f"evaluation.parquet: planar Laplace and the release state different eps {sorted(map(str, stated))}"
        )
    eps_unit = _num(guarantee.get("epsilon_per_unit"))
    stretches = (_num(x) for x in (guarantee.get("stretch_within_radius"), stretch_within, guarantee.get("stretch")))
    rates = [eps_unit * x for x in stretches if x is not None] if eps_unit is not None else []
    if compared and rates:
        if not any(_same_number(e, r, RECOMPUTED) for e in stated for r in rates):
            findings.append(
                f"evaluation.parquet: planar Laplace is compared at eps {sorted(map(str, stated))}, not at a rate "
                f"the guarantee states ({', '.join(f'{r:.6g}' for r in rates)})"
            )
    for row in (r for r in compared if r.get("method") == CONTINUOUS):
        eps, err = _num(row.get("metric_epsilon")), _num(row.get("dist_loss_mean"))
        dim = round(eps * err) if eps and err else 0
        if not (dim >= 1 and abs(eps * err - dim) <= 1e-9 * dim):  # type: ignore[operator]
            findings.append(f"evaluation.parquet: planar_laplace dist_loss_mean {err} is not D / eps at eps {eps}")
    return findings
