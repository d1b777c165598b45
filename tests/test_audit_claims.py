"""``mdp-release audit`` recomputes every claim (issue 18): each edit below passed as OK before; each
must now be a finding. The release is the one ``tests/conftest.py`` builds and publishes (``released``) (the stage
tasks' ``.fn``, real HiGHS, the door); every test tampers with a copy and re-hashes what it edits, so
only the claim itself is wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import (
    claims_of,
    edit,
    edit_report,
    edit_table,
    findings,
    people_config,
    people_table,
    publish_release,
    read,
    rehash,  # noqa: F401 -- tests/test_audit_v3.py imports it from here until it imports conftest's
    release_config,
    run_stages,
    write,
)

from artifacts.store import Store
from mdp_core.declarations import contract
from mdp_core.problem.io import read_instance, read_mechanism
from mdp_core.release import audit
from mdp_core.runtime.files import file_sha256
from mdp_core.solvers.verify import objective, verify

CFG = release_config(Path("."))  # the released release's settings (conftest.release_config)
EPS, ETA = CFG.privacy.epsilon, CFG.privacy.eta
N, EPS_COUNTS = CFG.release.n_individuals, CFG.release.eps_counts
K = CFG.dataset.params["n_outputs"]


def loss_and_ratio(run: Path) -> tuple[float, float]:
    """The released mechanism's expected loss and its worst realised ratio (epsilon), recomputed here from
    the released instance and mechanism.parquet: what "the released files give"."""
    inst = read_instance(run / "instance")
    z = read_mechanism(run / "mechanism.parquet", inst.n_records, inst.n_outputs)
    return objective(inst, z), verify(inst, z).max_realised_epsilon


def set_claims(run: Path, claims: dict) -> None:
    edit_report(
        run,
        lambda t: re.sub(r"(<!-- mdp-release-claims )\{.*\}(?= -->)", lambda m: m.group(1) + json.dumps(claims), t),
    )


def test_published_release_audits_clean(released):
    assert audit.audit_release(released) == []
    prov = read(released, audit.PROVENANCE)
    keys = {2: audit.PROVENANCE_KEYS_V2, 3: audit.PROVENANCE_KEYS | {"table"}}  # table: issue 49
    assert prov["version"] in audit.PROVENANCE_VERSIONS and set(prov) == keys[prov["version"]]
    assert set(claims_of(released)) == audit.CLAIM_KEYS


def test_agency_microdata_with_a_dp_prior_and_a_cap_audits_clean(tmp_path):
    """The other branches of the contract: microdata from the agency's file, a DP prior (eps_prior > 0 in
    the guarantee, the ledger and the statement), a ledger cap -- published through the door, clean."""
    table = tmp_path / "people.csv"
    people_table(table)
    cfg = people_config(tmp_path / "store", table, prior="dp", eps_prior=0.25, max_total_epsilon=100.0)
    refs = run_stages(tmp_path / "store", cfg)
    run = publish_release(Store(tmp_path / "store"), refs, cfg=cfg)
    assert audit.audit_release(run) == []
    prov = read(run, audit.PROVENANCE)
    assert (prov["microdata_source"], prov["prior_source"], prov["eps_prior"]) == ("file", "dp", 0.25)
    assert (
        prov["guarantee"]["additive_epsilon"] == 0.25 + cfg.release.eps_counts + prov["eps_error"]  # issue 50: auto
        and prov["ledger"]["max_total_epsilon"] == 100.0
    )
    edit(run, "manifest.json", lambda m: m["config"]["release"].update(eps_prior=0.5))
    findings(run, "manifest.json: config release.eps_prior 0.5 but the released files give 0.25")


# ----------------------------------------------------------------------------- the ten edits
def test_a_manifest_certificate_fields(run):
    edit(run, "manifest.json", lambda m: m["privacy"]["certificate"].update(epsilon=1.0, note="trust me"))
    findings(
        run, f"manifest.json: certificate epsilon=1.0 but the released files give {EPS!r}", "certificate field note"
    )


def test_b_manifest_counts_epsilon(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(counts_epsilon=0.01))
    findings(run, f"manifest.json: privacy counts_epsilon 0.01 but the released files give {EPS_COUNTS!r}")


def test_b_counts_epsilon_must_match_the_noise_scale(run):
    """eps_counts edited consistently in the provenance, the manifest and the aggregates' column: the
    noise actually added (noise_scale) still says eps = sensitivity / scale."""
    sensitivity = read(run, audit.PROVENANCE)["counts_sensitivity"]
    edit_table(run, "aggregates.parquet", lambda f: f.__setitem__("eps_counts", 10.0))

    def prov(p: dict) -> None:
        p.update(eps_counts=10.0)
        p["guarantee"]["additive_epsilon"] = 10.0
        p["guarantee"]["statement"] = p["guarantee"]["statement"].replace(f"+ {EPS_COUNTS:g})", "+ 10)")
        more = 10.0 - EPS_COUNTS
        p["ledger"] = {k: v + more if k in ("this_release", "total_so_far") else v for k, v in p["ledger"].items()}

    edit(run, audit.PROVENANCE, prov)
    p = read(run, audit.PROVENANCE)
    edit(
        run,
        "manifest.json",
        lambda m: m["privacy"].update(counts_epsilon=10.0, guarantee=p["guarantee"], ledger=p["ledger"]),
    )
    findings(
        run,
        f"output noise_scale {sensitivity / EPS_COUNTS!r} x eps_counts 10.0 is not the counts_sensitivity {sensitivity}",
        f"report.md: claims counts_epsilon {EPS_COUNTS!r} but the released files give 10.0",
    )


def test_c_manifest_eta(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(eta=20.0))
    findings(run, f"manifest.json: privacy eta 20.0 != instance eta {ETA!r}")


def test_d_config_epsilon(run):
    edit(run, "manifest.json", lambda m: m["config"]["privacy"].update(epsilon=30.0))
    findings(run, f"manifest.json: config privacy.epsilon 30.0 != instance epsilon {EPS!r}")
    edit(run, "manifest.json", lambda m: m["config"]["privacy"].update(epsilon=EPS))
    edit(run, "manifest.json", lambda m: m["config"]["release"].update(eps_counts=0.1))
    findings(run, f"manifest.json: config release.eps_counts 0.1 but the released files give {EPS_COUNTS!r}")


def test_e_provenance_eps_counts(run):
    edit(run, audit.PROVENANCE, lambda p: p.update(eps_counts=0.5))
    findings(
        run,
        f"{audit.PROVENANCE}: eps_counts 0.5 but the released files give {EPS_COUNTS!r}",
        f"guarantee: additive_epsilon {EPS_COUNTS!r} but the released files give 0.5",
        f"manifest.json: privacy counts_epsilon {EPS_COUNTS!r} but the released files give 0.5",
    )


def test_f_solve_objective(run):
    recorded = read(run, "solve.json")["objective"] * 0.9
    edit(run, "solve.json", lambda s: s.update(objective=recorded))
    findings(run, f"solve.json: objective {recorded!r} but the released files give {loss_and_ratio(run)[0]!r}")


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            lambda s: s.update(lower_bound=s["objective"] * 1.1),
            lambda s: f"solve.json: lower_bound {s['objective'] * 1.1!r} exceeds",
        ),
        (
            lambda s: s.update(lower_bound=s["objective"] * 0.5),
            lambda s: f"solve.json: gap {s['gap']!r} but loss - lower_bound gives",
        ),
        (
            lambda s: s.update(lower_bound=s["objective"] * 0.5, gap=s["objective"] * 0.5, relative_gap=0.5),
            lambda s: (
                f"solve.json: status optimal but the lower bound {s['objective'] * 0.5!r} is not within gap_abs "
                f"{s['options'].get('gap_abs', audit.DEFAULT_GAP[0]):g} / gap_rel "
                f"{s['options'].get('gap_rel', audit.DEFAULT_GAP[1]):g}"
            ),
        ),
        (lambda s: s.update(upper_bound=0.1), lambda s: "solve.json: upper_bound 0.1"),
        (lambda s: s.update(relative_gap=0.01), lambda s: "solve.json: relative_gap 0.01"),
        (
            lambda s: s.update(lower_bound=None, gap=None, relative_gap=None),
            lambda s: "status optimal without a lower bound",
        ),
    ],
)
def test_g_solve_bounds(run, change, needle):
    """``needle``: the finding, from the solve.json as released (before ``change``)."""
    expected = needle(read(run, "solve.json"))
    edit(run, "solve.json", change)
    findings(run, expected)


def test_g_manifest_solve_summary(run):
    edit(run, "manifest.json", lambda m: m["solve"].update(gap=0.0, status="feasible"))
    findings(run, "manifest.json: solve gap 0.0 but", "manifest.json: solve status feasible but")


def test_h_solve_certificate(run):
    edit(run, "solve.json", lambda s: s["certificate"].update(max_realised_epsilon=2.5, n_violations=0, passed=True))
    findings(
        run, f"solve.json: certificate max_realised_epsilon=2.5 but the released files give {loss_and_ratio(run)[1]!r}"
    )
    edit(run, "solve.json", lambda s: s["certificate"].pop("graph_check"))
    findings(run, "solve.json: certificate field graph_check is missing")


def test_i_manifest_mechanism_epsilon(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(mechanism_epsilon=30.0))
    findings(run, f"manifest.json: privacy mechanism_epsilon 30.0 != instance epsilon {EPS!r}")


@pytest.mark.parametrize(
    "name, change, needle",
    [
        ("manifest.json", lambda m: m["privacy"]["ledger"].update(this_release=1.0), "manifest.json: privacy ledger"),
        ("manifest.json", lambda m: m["privacy"]["guarantee"].update(epsilon_per_unit=1.0), "privacy guarantee"),
        (audit.PROVENANCE, lambda p: p["ledger"].update(this_release=1.0), "ledger: this_release (eps x stretch"),
        (audit.PROVENANCE, lambda p: p["ledger"].update(total_so_far=2.0), "total_so_far 2.0 is below"),
        (audit.PROVENANCE, lambda p: p["ledger"].update(max_total_epsilon=5.0), "exceeds max_total_epsilon"),
        (audit.PROVENANCE, lambda p: p["ledger"].update(releases_so_far=0), "key releases_so_far is not allowed"),
        (audit.PROVENANCE, lambda p: p["guarantee"].update(additive_epsilon=0.0), "additive_epsilon 0.0 but"),
        (audit.PROVENANCE, lambda p: p["guarantee"].update(epsilon_per_unit=1.0), "epsilon_per_unit 1.0 but"),
        (audit.PROVENANCE, lambda p: p["guarantee"].update(distance_unit="m"), "distance_unit m but"),
        (
            audit.PROVENANCE,
            lambda p: p["guarantee"].update(statement=p["guarantee"]["statement"].replace("exp(", "exp(0.1 + ")),
            "the statement does not say",
        ),
        (audit.PROVENANCE, lambda p: p.update(eps_prior=0.5), "eps_prior 0.5 does not fit prior_source dataset"),
        (
            audit.PROVENANCE,
            lambda p: p.update(counts_sensitivity=2),
            "counts_sensitivity 2 but the released files give",
        ),
        (
            audit.PROVENANCE,
            lambda p: p.update(n_individuals=N - 1),
            f"n_individuals {N - 1} but the released files give {N}",
        ),
        (audit.PROVENANCE, lambda p: p.update(draw_commitment="00"), "draw_commitment is not a sha256"),
        (audit.PROVENANCE, lambda p: p.update(version=1), "not a mdp-release-provenance record of version 2 or 3"),
    ],
)
def test_j_guarantee_and_ledger(run, name, change, needle):
    edit(run, name, change)
    findings(run, needle)


# ----------------------------------------------------------------------------- tables restate the claims
def test_aggregates_must_be_consistent(run):
    edit_table(
        run, "aggregates.parquet", lambda f: f.__setitem__("count", f["count"] + (f.level == "output") * (f.block == 0))
    )
    findings(run, f"aggregates.parquet: output counts sum to {N + 1}, not the total {N}")


def shift(f: pd.DataFrame, column: str, level: str, deltas: dict[int, int]) -> None:
    """Add ``deltas`` {block: delta} to ``column`` of one level of the count table."""
    for block, delta in deltas.items():
        f.loc[(f.level == level) & (f.block == block), column] += delta


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda f: shift(f, "count", "output", {0: -f["count"].max() - 1, 1: f["count"].max() + 1}), "negative count"),
        (
            lambda f: shift(f, "n_members", "zone", {0: 1}),
            f"aggregates.parquet: zones hold {K + 1} outputs, not K = {K}",
        ),
        (lambda f: f.__setitem__("noise", "none"), "a noisy level's noise is not discrete_laplace"),
        (lambda f: f.__setitem__("label", "x"), "output labels are not their output ids"),
        (lambda f: shift(f, "noise_scale", "zone", {0: 1.0}), "a level's noise_scale, is not one value"),
        (lambda f: shift(f, "noise_scale", "total", {0: 1.0}), "needs one total row"),
    ],
)
def test_aggregates_table(run, change, needle):
    edit_table(run, "aggregates.parquet", change)
    findings(run, needle)


def test_aggregates_total_must_be_n(run):
    edit_table(
        run, "aggregates.parquet", lambda f: f.__setitem__("count", np.where(f.level == "total", N + 1, f["count"]))
    )
    findings(run, f"{audit.PROVENANCE}: n_individuals {N} but the released files give {N + 1}")


def test_microdata_coordinates_are_the_outputs(run):
    """A released row carrying other coordinates than its output's (e.g. the true location) is refused."""
    edit_table(run, "microdata.parquet", lambda f: f.__setitem__("lat", f["lat"] + 1e-6))
    findings(run, "microdata.parquet: column lat is not the released output's public value")


def test_evaluation_must_restate_the_release(run):
    edit_table(run, "evaluation.parquet", lambda f: f.__setitem__("expected_loss", f["expected_loss"] * 0.5))
    findings(run, "evaluation.parquet: expected_loss")
    edit_table(run, "evaluation.parquet", lambda f: f.__setitem__("method", "other"))
    findings(run, "evaluation.parquet: no row for the released method auto")


# ----------------------------------------------------------------------------- report.md claims
@pytest.mark.parametrize(
    "key, value",
    [
        ("epsilon", 1.0),
        ("eta", 20.0),
        ("counts_epsilon", 0.01),
        ("additive_epsilon", 0.5),
        ("n_zones", 7),
        ("ledger", {"total_so_far": 1.0}),
        ("adversary_error", 0.01),
        ("certificate_ratio_tol", 0.1),
        ("n_individuals", 2000),
        ("objective", 0.4),
        ("lower_bound", 0.3),
        ("gap", 0.0001),
        ("max_realised_epsilon", 1.0),
        ("certificate_passed", False),
        ("method", "lp"),
        ("distance_unit", "m"),
        ("prior_epsilon", 0.1),
    ],
)
def test_report_claims(run, key, value):
    set_claims(run, claims_of(run) | {key: value})
    findings(run, f"report.md: claims {key} ")


def test_report_claims_unknown_missing_or_doubled(run):
    set_claims(run, claims_of(run) | {"delta": 0.0})
    findings(run, "report.md: claim delta is not a claim the audit checks")
    edit_report(run, lambda t: re.sub(r"<!-- mdp-release-claims .*? -->", "", t))
    findings(run, "report.md: no mdp-release-claims block")
    edit_report(run, lambda t: t + f"\n<!-- mdp-release-claims {json.dumps({'epsilon': 3.0})} -->\n" * 2)
    findings(run, "report.md: 2 mdp-release-claims blocks")


# ----------------------------------------------------------------------------- private and public never mix
@pytest.mark.parametrize(
    "name, column",
    [
        ("aggregates.parquet", "true_count"),
        ("aggregates.parquet", "noisy"),
        ("microdata.parquet", "record_id"),
        ("microdata.parquet", "home_lat"),
        ("evaluation.parquet", "seed"),
        ("utility_vs_eps.parquet", "secret_hint"),
        ("mechanism.parquet", "note"),
        ("instance/records.parquet", "true_record"),
    ],
)
def test_columns_outside_the_allow_list(run, name, column):
    edit_table(run, name, lambda f: f.__setitem__(column, 1))
    if name.startswith("instance/"):  # keep the instance's own table hashes right
        meta = read(run, "instance/instance.json")
        meta["tables"][name.split("/")[1]] = file_sha256(run / name)
        write(run, "instance/instance.json", meta)
    findings(run, f"{name}: column {column} is not allowed in a published file")


@pytest.mark.parametrize(
    "name, key, needle",
    [
        (audit.PROVENANCE, "seed", "key seed names a secret or a seed"),
        (audit.PROVENANCE, "draw_secret", "key draw_secret names a secret or a seed"),
        (audit.PROVENANCE, "note", "key note is not allowed in a published file"),
        ("solve.json", "rng_seed", "solve.json: key rng_seed is not allowed in a published file"),
    ],
)
def test_keys_outside_the_allow_list(run, name, key, needle):
    edit(run, name, lambda v: v.update({key: 1}))
    findings(run, needle)


def test_nested_secret_in_the_provenance(run):
    edit(run, audit.PROVENANCE, lambda p: p["ledger"].update(secret="ab"))
    findings(run, "key ledger.secret names a secret or a seed", "ledger: key secret is not allowed")


def test_only_listed_files_in_the_folder(run):
    (run / "draw.json").write_text("{}")
    (run / "instance" / "true_records.parquet").write_bytes(b"")
    findings(
        run,
        "draw.json: in the release folder but not listed in the manifest",
        "instance/true_records.parquet: in the release folder but not listed",
    )


def test_only_publishable_files_listed(run):
    (run / "secret.json").write_text("{}")
    edit(run, "manifest.json", lambda m: m["released_files"].update({"secret.json": file_sha256(run / "secret.json")}))
    findings(run, "secret.json: not a file a release publishes")


def test_allow_lists_cover_what_the_pipeline_writes():
    """The allow-lists name every column the writers can produce (they are kept apart so that the audit
    imports no solver); a new column in a writer must be added here deliberately."""
    from mdp_core.release import evaluate, postprocess, report
    from mdp_core.solvers import benders, colgen, rowgen

    assert set(evaluate.COLUMNS) == audit.COLUMNS["evaluation.parquet"]
    assert tuple(postprocess.AGGREGATE_COLUMNS) == audit.AGGREGATE_COLUMNS
    assert set(postprocess.CURVE_COLUMNS) == audit.COLUMNS["cbdp_error.parquet"]
    traces = set(benders._TRACE_COLUMNS) | set(colgen.TRACE_COLUMNS) | set(rowgen.TRACE_COLUMNS)
    assert traces == audit.COLUMNS["trace.parquet"]
    assert report.CLAIMS_TAG == audit.CLAIMS_TAG


def test_a_manifest_naming_a_stage_by_its_former_name_audits_as_before(run):
    """A release published before ``postprocess`` was renamed ``measure`` names it so in its manifest: the
    audit reads the stage under its former name (clean as it was; a tampered output is still found)."""

    def rename(m: dict) -> None:
        for block in ("stages", "code_versions"):
            if block in m:
                m[block] = {_former(k): v for k, v in m[block].items()}

    edit(run, "manifest.json", rename)
    assert "postprocess" in read(run, "manifest.json")["stages"] and findings(run) == []
    edit(run, "manifest.json", lambda m: m["stages"]["postprocess"]["files"].update({"aggregates.parquet": "0" * 64}))
    findings(run, "aggregates.parquet: not the measure stage's output (sha256 differs)")


def _former(name: str) -> str:
    """A stage's former name (its current one when it has none)."""
    return next((old for old, new in contract.FORMER_STAGE_NAMES.items() if new == name), name)


def test_published_files_are_the_stage_outputs_the_manifest_records(run):
    edit(run, "manifest.json", lambda m: m["stages"]["measure"]["files"].update({"aggregates.parquet": "0" * 64}))
    findings(run, "aggregates.parquet: not the measure stage's output (sha256 differs)")
