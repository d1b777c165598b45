"""Provenance v3 (population, protection in the data's metric, the population ledger) and the report
rendered from its claims: every sentence edit is a finding (the tester's 13 edits all passed before).

The v3 folder is made here from a small real release (``tests/test_audit.py``'s pipeline, published
through the door) by :func:`to_v3`: microdata without the ``individual`` column and sorted by output,
the protection figures derived here from the instance (components by BFS, stretch = max graph distance /
metric distance by Floyd-Warshall), the guarantee and ledger from them, the report re-rendered, re-signed.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import build_release as build
from conftest import findings
from conftest import publish_release as publish
from test_audit_claims import claims_of, edit, edit_report, edit_table, read, rehash

from flows.config import DEFAULT_MAX_STRETCH
from mdp_core.declarations import budget
from mdp_core.problem.io import read_instance
from mdp_core.problem.metrics import pairwise
from mdp_core.release import audit, report

CAP = 100.0


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    store, refs = build(tmp_path_factory.mktemp("store"))
    return publish(store, refs)


def protection_of(run: Path) -> dict:
    """The protection block derived from the released instance, independently of the audit's code."""
    inst = read_instance(run / "instance")
    n = inst.n_records
    adj: dict[int, list[int]] = {i: [] for i in range(n)}
    graph = np.full((n, n), np.inf)
    np.fill_diagonal(graph, 0.0)
    for (i, j), d in zip(inst.edges, inst.distances, strict=True):
        adj[int(i)].append(int(j))
        adj[int(j)].append(int(i))
        graph[i, j] = graph[j, i] = d
    seen, sizes = set(), []
    for s in range(n):
        if s not in seen:
            stack, size = [s], 0
            seen.add(s)
            while stack:
                u = stack.pop()
                size += 1
                for v in adj[u]:
                    if v not in seen:
                        seen.add(v)
                        stack.append(v)
            sizes.append(size)
    for k in range(n):  # Floyd-Warshall
        graph = np.minimum(graph, graph[:, [k]] + graph[[k], :])
    pts = inst.record_points()
    metric = pairwise(inst.metric, pts, pts)
    ratio = np.where((metric > 0) & np.isfinite(graph), graph / np.where(metric > 0, metric, 1.0), 0.0)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    sizes.sort(reverse=True)
    return {
        "n_components": len(sizes),
        "component_sizes": sizes,
        "stretch": float(ratio.max()),
        "connected": len(sizes) == 1,
        "records_outside_largest": n - sizes[0],
        "worst_pair": [int(worst[0]), int(worst[1])],
        "protection_radius": inst.eta,
        "max_stretch": DEFAULT_MAX_STRETCH,
        "allow_unprotected": False,
        "unprotected_individuals": 0,
        "snap_mean": None,
        "snap_max": None,
        "max_distance": inst.eta,
    }


def rerender(run: Path, **changes: object) -> None:
    """report.md rendered again from its claims with ``changes`` (as the pipeline would have written it)."""
    claims = claims_of(run) | changes
    pngs = frozenset(p.name for p in run.glob("*.png"))
    (run / "report.md").write_text(
        report.render_report(claims, report.evaluation_markdown(run / "evaluation.parquet"), pngs)
    )
    rehash(run, "report.md")


def rewrite_table(run: Path, name: str, change) -> None:
    """``name`` replaced by ``change(frame)`` (re-hashed and re-signed)."""
    change(pq.read_table(run / name).to_pandas()).to_parquet(run / name, index=False)
    rehash(run, name)


def to_v3(run: Path) -> None:
    rewrite_table(
        run,
        "microdata.parquet",
        lambda f: f.drop(columns="individual", errors="ignore").sort_values(
            "output_id", kind="stable", ignore_index=True
        ),
    )
    prov = read(run, audit.PROVENANCE)
    inst = read(run, "instance/instance.json")
    protection = protection_of(run)
    eps, add = inst["epsilon"], prov["eps_counts"] + prov["eps_prior"]
    population = "simulated-" + prov["draw_commitment"][:16]
    charge = eps * protection["stretch"] * protection["protection_radius"] + add
    prov |= {
        "version": 3,
        "population": population,
        "protection": protection,
        "guarantee": budget.Guarantee(
            eps, protection["stretch"], protection["protection_radius"], add, inst["distance_unit"], False
        ).record(),
        "ledger": {
            "population": population,
            "this_release": charge,
            "total_so_far": charge,
            "max_total_epsilon": CAP,
            "left": CAP - charge,
            "ledger_seq": 2,
            "ledger_head": hashlib.sha256(b"head").hexdigest(),
        },
    }
    edit(run, audit.PROVENANCE, lambda p: p.update(prov))

    def manifest(m: dict) -> None:
        m["privacy"].update(guarantee=prov["guarantee"], ledger=prov["ledger"], population=population)
        m["privacy"]["protection"] = protection
        m["version"] = 3  # a release made before the approval record (manifest version 4) carried its plan
        m.pop("approval")

    edit(run, "manifest.json", manifest)
    rerender(  # approval None: a manifest of version 3 had no approval record (the report states none)
        run,
        guarantee=prov["guarantee"],
        ledger=prov["ledger"],
        protection=protection,
        population=population,
        approval=None,
    )


@pytest.fixture(scope="module")
def v3(released, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("v3") / "run"
    shutil.copytree(released, out)
    to_v3(out)
    return out


@pytest.fixture()
def run(v3, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(v3, out)
    return out


def test_v3_release_audits_clean_and_its_page_states_the_spend(v3):
    assert audit.audit_release(v3) == []
    prov = read(v3, audit.PROVENANCE)
    led, g, p = prov["ledger"], prov["guarantee"], prov["protection"]
    text = (v3 / "report.md").read_text()
    assert f"charged {led['this_release']:.6g} to population `{prov['population']}`'s budget" in text
    assert f"total so far {led['total_so_far']:.6g} of the cap {CAP:g}, {CAP - led['total_so_far']:.6g} left" in text
    assert f"stretch {p['stretch']:.4g}" in text and "The graph is connected" in text
    assert "*when individuals follow the stated prior*" in text
    assert f"exp({g['epsilon_per_unit'] * p['stretch']:g} * d(r, r')" in g["statement"]
    assert list(pq.read_schema(v3 / "microdata.parquet").names)[0] == "output_id"


def test_v2_release_of_the_pipeline_still_audits(released):
    assert read(released, audit.PROVENANCE)["version"] in audit.PROVENANCE_VERSIONS
    assert audit.audit_release(released) == []


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda p: p["guarantee"].update(metric_epsilon_per_unit=1.0), "metric_epsilon_per_unit (eps x stretch) 1.0"),
        (lambda p: p["ledger"].update(this_release=0.5), "this_release (eps x stretch x radius + additive) 0.5"),
        (lambda p: p["ledger"].update(left=50.0), "ledger: left 50.0 but max_total_epsilon - total_so_far"),
        (lambda p: p["ledger"].update(max_total_epsilon=1.0), "exceeds max_total_epsilon"),
        (lambda p: p["ledger"].update(ledger_head="x"), "ledger_head is not a sha256"),
        (lambda p: p["ledger"].update(population="other"), "ledger: population other but"),
        (lambda p: p["protection"].update(component_sizes=[19, 1]), "component_sizes [19, 1] but"),
        (lambda p: p["protection"].update(n_components=2), "n_components 2 but the released files give 1"),
        (lambda p: p["protection"].update(unprotected_individuals=3), "unprotected_individuals 3 but the mDP graph"),
        (lambda p: p["protection"].update(max_stretch=1.0), "released without allow_unprotected = true"),
        (lambda p: p["guarantee"].update(stretch=1.0), "guarantee: stretch 1.0 but"),
        (lambda p: p["guarantee"].update(statement="trust us"), "the statement does not say exp("),
        (lambda p: p.update(population="Rome Residents"), "population is not a population name"),
        (lambda p: p.pop("protection"), "missing key protection"),
    ],
)
def test_v3_provenance_checks(run, change, needle):
    edit(run, audit.PROVENANCE, change)
    findings(run, needle)


def test_v3_microdata_has_no_individual_column_and_is_sorted_by_output(run):
    edit_table(run, "microdata.parquet", lambda f: f.insert(0, "individual", np.arange(len(f))))
    findings(run, "microdata.parquet: has an individual column")
    rewrite_table(run, "microdata.parquet", lambda f: f.drop(columns="individual"))
    assert audit.audit_release(run) == []
    rewrite_table(run, "microdata.parquet", lambda f: f.sort_values("output_id", ascending=False, ignore_index=True))
    findings(run, "microdata.parquet: rows are not sorted by output_id")


def test_claims_reflect_population_stretch_and_budget(run):
    claims = claims_of(run)
    for key, value in (("population", "someone-else"), ("ledger", claims["ledger"] | {"left": 1.0})):
        rerender(run, **{key: value})
        findings(run, f"report.md: claims {key} ")
        rerender(run, **{key: claims[key]})
    assert audit.audit_release(run) == []


def test_every_line_edit_of_the_report_is_a_finding(run, tmp_path):
    """Each line of report.md (the officer's page and the appendix; not the claims block) edited in turn."""
    original = (run / "report.md").read_text()
    lines = original.split("\n")
    claims_line = next(i for i, line in enumerate(lines) if line.startswith("<!-- mdp-release-claims"))
    assert claims_line > 30
    for i in range(claims_line):
        changed = lines.copy()
        changed[i] = changed[i] + " (independently certified)" if changed[i] else "eps = 0.6"
        edit_report(run, lambda _: "\n".join(changed))  # noqa: B023
        found = findings(run)
        assert found == [f"report.md: {found[0].split(': ', 1)[1]}"] and f"line {i + 1} is not" in found[0], (i, found)
    edit_report(run, lambda _: original)
    assert audit.audit_release(run) == []


@pytest.mark.parametrize(
    "old, new",
    [
        ("PASS", "PASS (independently certified)"),
        ("eps = 3 per", "eps = 0.6 per"),
        ("of the cap 100", "of the cap 400"),
        ("expectation under the prior, not a bound", "bound"),
    ],
)
def test_the_testers_edits_are_findings(run, old, new):
    text = (run / "report.md").read_text()
    if old not in text:
        pytest.skip(f"{old!r} is not in this report")
    edit_report(run, lambda t: t.replace(old, new, 1))
    findings(run, "report.md: line ")


def test_realised_epsilon_is_shown_to_the_tolerance_it_was_checked_at(v3):
    claims = claims_of(v3)
    digits = math.ceil(-math.log10(claims["certificate_ratio_tol"]))
    shown = format(claims["max_realised_epsilon"], f".{digits}g")
    assert f"realised eps {shown} per km (checked to a relative tolerance of 1e-09)" in (v3 / "report.md").read_text()


def test_v3_keys_of_the_manifest_privacy_block(run):
    edit(run, "manifest.json", lambda m: m["privacy"].update(population="other"))
    findings(run, "manifest.json: privacy population")
    out = json.loads((run / "manifest.json").read_text())
    assert out["privacy"]["population"] == "other"
