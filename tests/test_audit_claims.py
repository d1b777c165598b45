"""``mdp-release audit`` recomputes every claim (issue 18): each edit below passed as OK before; each
must now be a finding. The release is the one ``tests/test_audit.py`` builds and publishes (the stage
tasks' ``.fn``, real HiGHS, the door); every test tampers with a copy and re-hashes what it edits, so
only the claim itself is wrong.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import test_real_release
from conftest import run_stages
from test_audit import build, publish, resign

from artifacts.store import Store
from mdp_core.release import audit
from mdp_core.runtime.files import file_sha256


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    store, refs = build(tmp_path_factory.mktemp("store"))
    return publish(store, refs)


@pytest.fixture()
def run(released, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(released, out)
    return out


# ----------------------------------------------------------------------------- tampering helpers
def rehash(run: Path, name: str) -> None:
    """Record ``name``'s new sha256 wherever the release names it (provenance, then the manifest's
    released files and stage entry)."""
    stage, file = audit._stage_of(name)
    if name in ("microdata.parquet", "aggregates.parquet"):
        p = read(run, audit.PROVENANCE)
        p[f"{name.split('.')[0]}_sha256"] = file_sha256(run / name)
        write(run, audit.PROVENANCE, p)
    if name != "manifest.json":
        m = read(run, "manifest.json")
        m["released_files"][name] = m["stages"][stage]["files"][file] = file_sha256(run / name)
        (run / "manifest.json").write_text(json.dumps(m))
    resign(run)  # by a key that is not the agency's: no key is pinned for a copy outside the store


def read(run: Path, name: str) -> dict:
    return json.loads((run / name).read_text())


def write(run: Path, name: str, value: dict) -> None:
    (run / name).write_text(json.dumps(value))
    rehash(run, name)


def edit(run: Path, name: str, change: Callable[[dict], object]) -> None:
    value = read(run, name)
    change(value)
    write(run, name, value)


def edit_table(run: Path, name: str, change: Callable[[pd.DataFrame], object]) -> None:
    frame = pq.read_table(run / name).to_pandas()
    change(frame)
    frame.to_parquet(run / name, index=False)
    rehash(run, name)


def edit_report(run: Path, change: Callable[[str], str]) -> None:
    (run / "report.md").write_text(change((run / "report.md").read_text()))
    rehash(run, "report.md")


def claims_of(run: Path) -> dict:
    m = re.search(r"<!-- mdp-release-claims (\{.*\}) -->", (run / "report.md").read_text())
    assert m is not None
    return json.loads(m.group(1))


def set_claims(run: Path, claims: dict) -> None:
    edit_report(
        run,
        lambda t: re.sub(r"(<!-- mdp-release-claims )\{.*\}(?= -->)", lambda m: m.group(1) + json.dumps(claims), t),
    )


def findings(run: Path, *needles: str) -> list[str]:
    out = audit.audit_release(run)
    assert all("\n" not in f for f in out)
    for needle in needles:
        assert any(needle in f for f in out), (needle, out)
    return out


def test_published_release_audits_clean(released):
    assert audit.audit_release(released) == []
    prov = read(released, audit.PROVENANCE)
    keys = {2: audit.PROVENANCE_KEYS_V2, 3: audit.PROVENANCE_KEYS}
    assert prov["version"] in audit.PROVENANCE_VERSIONS and set(prov) == keys[prov["version"]]
    assert set(claims_of(released)) == audit.CLAIM_KEYS


def test_agency_microdata_with_a_dp_prior_and_a_cap_audits_clean(tmp_path):
    """The other branches of the contract: microdata from the agency's file, a DP prior (eps_prior > 0 in
    the guarantee, the ledger and the statement), a ledger cap -- published through the door, clean."""
    table = tmp_path / "people.csv"
    test_real_release.people(table)
    cfg = test_real_release.config(tmp_path / "store", table, prior="dp", eps_prior=0.25, max_total_epsilon=100.0)
    refs = run_stages(tmp_path / "store", cfg)
    run = publish(Store(tmp_path / "store"), refs, cfg=cfg)
    assert audit.audit_release(run) == []
    prov = read(run, audit.PROVENANCE)
    assert (prov["microdata_source"], prov["prior_source"], prov["eps_prior"]) == ("file", "dp", 0.25)
    assert prov["guarantee"]["additive_epsilon"] == 1.25 and prov["ledger"]["max_total_epsilon"] == 100.0
    edit(run, "manifest.json", lambda m: m["config"]["release"].update(eps_prior=0.5))
    findings(run, "manifest.json: config release.eps_prior 0.5 but the released files give 0.25")


# ----------------------------------------------------------------------------- the ten edits
def test_a_manifest_certificate_fields(run):
    edit(run, "manifest.json", lambda m: m["privacy"]["certificate"].update(epsilon=1.0, note="trust me"))
    findings(run, "manifest.json: certificate epsilon=1.0 but the released files give 3.0", "certificate field note")


def test_b_manifest_counts_epsilon(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(counts_epsilon=0.01))
    findings(run, "manifest.json: privacy counts_epsilon 0.01 but the released files give 1.0")


def test_b_counts_epsilon_must_match_the_noise_scale(run):
    """eps_counts edited consistently in the provenance, the manifest and the aggregates' column: the
    noise actually added (noise_scale) still says eps = sensitivity / scale."""
    edit_table(run, "aggregates.parquet", lambda f: f.__setitem__("eps_counts", 10.0))

    def prov(p: dict) -> None:
        p.update(eps_counts=10.0)
        p["guarantee"]["additive_epsilon"] = 10.0
        p["guarantee"]["statement"] = p["guarantee"]["statement"].replace("+ 1)", "+ 10)")
        p["ledger"] = {k: v + 9 if k in ("this_release", "total_so_far") else v for k, v in p["ledger"].items()}

    edit(run, audit.PROVENANCE, prov)
    p = read(run, audit.PROVENANCE)
    edit(
        run,
        "manifest.json",
        lambda m: m["privacy"].update(counts_epsilon=10.0, guarantee=p["guarantee"], ledger=p["ledger"]),
    )
    findings(
        run,
        "output noise_scale 4.0 x eps_counts 10.0 is not the counts_sensitivity 4",
        "report.md: claims counts_epsilon 1.0 but the released files give 10.0",
    )


def test_c_manifest_eta(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(eta=20.0))
    findings(run, "manifest.json: privacy eta 20.0 != instance eta 2.0")


def test_d_config_epsilon(run):
    edit(run, "manifest.json", lambda m: m["config"]["privacy"].update(epsilon=30.0))
    findings(run, "manifest.json: config privacy.epsilon 30.0 != instance epsilon 3.0")
    edit(run, "manifest.json", lambda m: m["config"]["privacy"].update(epsilon=3.0))
    edit(run, "manifest.json", lambda m: m["config"]["release"].update(eps_counts=0.1))
    findings(run, "manifest.json: config release.eps_counts 0.1 but the released files give 1.0")


def test_e_provenance_eps_counts(run):
    edit(run, audit.PROVENANCE, lambda p: p.update(eps_counts=0.5))
    findings(
        run,
        f"{audit.PROVENANCE}: eps_counts 0.5 but the released files give 1.0",
        "guarantee: additive_epsilon 1.0 but the released files give 0.5",
        "manifest.json: privacy counts_epsilon 1.0 but the released files give 0.5",
    )


def test_f_solve_objective(run):
    edit(run, "solve.json", lambda s: s.update(objective=s["objective"] * 0.9))
    findings(run, "solve.json: objective 0.474", "but the released files give 0.5270820819")


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda s: s.update(lower_bound=s["objective"] * 1.1), "solve.json: lower_bound 0.5797902901214866 exceeds"),
        (lambda s: s.update(lower_bound=s["objective"] * 0.5), "solve.json: gap 1.22"),
        (
            lambda s: s.update(lower_bound=s["objective"] * 0.5, gap=s["objective"] * 0.5, relative_gap=0.5),
            "solve.json: status optimal but the lower bound 0.2635410409643121 is not within gap_abs 0 / gap_rel 1e-06",
        ),
        (lambda s: s.update(upper_bound=0.1), "solve.json: upper_bound 0.1"),
        (lambda s: s.update(relative_gap=0.01), "solve.json: relative_gap 0.01"),
        (lambda s: s.update(lower_bound=None, gap=None, relative_gap=None), "status optimal without a lower bound"),
    ],
)
def test_g_solve_bounds(run, change, needle):
    edit(run, "solve.json", change)
    findings(run, needle)


def test_g_manifest_solve_summary(run):
    edit(run, "manifest.json", lambda m: m["solve"].update(gap=0.0, status="feasible"))
    findings(run, "manifest.json: solve gap 0.0 but", "manifest.json: solve status feasible but")


def test_h_solve_certificate(run):
    edit(run, "solve.json", lambda s: s["certificate"].update(max_realised_epsilon=2.5, n_violations=0, passed=True))
    findings(run, "solve.json: certificate max_realised_epsilon=2.5 but the released files give 3.0000000000001084")
    edit(run, "solve.json", lambda s: s["certificate"].pop("graph_check"))
    findings(run, "solve.json: certificate field graph_check is missing")


def test_i_manifest_mechanism_epsilon(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(mechanism_epsilon=30.0))
    findings(run, "manifest.json: privacy mechanism_epsilon 30.0 != instance epsilon 3.0")


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
            "counts_sensitivity 2 but the released files give 4",
        ),
        (audit.PROVENANCE, lambda p: p.update(n_individuals=199), "n_individuals 199 but the released files give 200"),
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
    findings(run, "aggregates.parquet: output counts sum to 201, not the total 200")


def shift(f: pd.DataFrame, column: str, level: str, deltas: dict[int, int]) -> None:
    """Add ``deltas`` {block: delta} to ``column`` of one level of the count table."""
    for block, delta in deltas.items():
        f.loc[(f.level == level) & (f.block == block), column] += delta


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda f: shift(f, "count", "output", {0: -f["count"].max() - 1, 1: f["count"].max() + 1}), "negative count"),
        (lambda f: shift(f, "n_members", "zone", {0: 1}), "aggregates.parquet: zones hold 7 outputs, not K = 6"),
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
        run, "aggregates.parquet", lambda f: f.__setitem__("count", np.where(f.level == "total", 201, f["count"]))
    )
    findings(run, "release_provenance.json: n_individuals 200 but the released files give 201")


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


def test_published_files_are_the_stage_outputs_the_manifest_records(run):
    edit(run, "manifest.json", lambda m: m["stages"]["postprocess"]["files"].update({"aggregates.parquet": "0" * 64}))
    findings(run, "aggregates.parquet: not the postprocess stage's output (sha256 differs)")
