"""A release certified over every pair in the metric (a release's default, ``[solve] all_pairs`` unset; issue 51), end
to end: the
graph stage, the privacy door and the ledger at stretch 1 (eps x 1 x radius), the provenance's and report's one
rate, the audit verifying every pair; a mechanism certified on the graph only is refused by the measuring stage
when the plan claims every pair (nothing charged), and an edited certificate claiming every pair over such a
mechanism is caught by the audit.

The pipeline runs through the stage tasks' ``.fn`` (real HiGHS, real store, no Prefect server), as
``tests/conftest.py``'s :func:`run_stages`, on its 4 x 5 grid (lat, lon records: haversine km).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import edit, publish_release, stage_loop

from artifacts.private import PrivateStore
from artifacts.store import Store
from flows.approval import unattended
from flows.cli import main
from flows.config import parse_config
from flows.release import _TASKS, stage_params
from mdp_core.declarations.budget import this_release
from mdp_core.declarations.methods import REGISTRY
from mdp_core.errors import PrivacyError
from mdp_core.release import audit
from mdp_core.runtime.files import read_json
from tasks import evaluate

EPS, ETA = 3.0, 1.2  # per km; the grid's cells are ~1 km apart: the diagonals (~1.41 km) are not edges


def config(root: Path, all_pairs: bool | None = None, method: str = "lp"):
    """A 4 x 5 grid release (eps = 3 / km, eta = 1.2 km: the graph's stretch is above 1), the exact LP over
    every pair of a component in the metric (``all_pairs`` unset: the release's default), 200 simulated
    individuals, planar Laplace and constopt (which cannot certify every pair) among the baselines."""
    solve = {"method": method} | ({} if all_pairs is None else {"all_pairs": all_pairs})
    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 6, "seed": 2}},
            "privacy": {"epsilon": EPS, "eta": ETA},
            "solve": solve,
            "release": {"simulate": True, "n_individuals": 200},
            "evaluate": {"eps_factors": [1.0], "baselines": ["exp", "laplace", "constopt"]},
        }
    )


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict:
    """The stages of :func:`config` through the flow's own loop (``conftest.stage_loop``), with, just before its
    measurement, a measurement of a mechanism certified on the graph only (refused); and the published folder."""
    root = tmp_path_factory.mktemp("store")
    cfg, s = config(root), str(root)
    probe: dict = {}

    def before(stage: str, upstream: dict) -> None:
        if stage != "measure":
            return
        solve = params["solve"]
        graph_only = dict(solve, solver={k: v for k, v in solve["solver"].items() if k != "all_pairs"})
        probe["graph_only"] = sol = _TASKS["solve"].fn(s, graph_only, instance=upstream["instance"], partition=None)
        with pytest.raises(PrivacyError, match="every pair") as refused:
            _TASKS["measure"].fn(s, params["measure"], **(upstream | {"mechanism": sol}))
        probe["refused"] = str(refused.value)
        private = PrivateStore(root)
        probe["history"] = [e for pop in private.populations() for e in private.entries(pop) if e["kind"] == "charge"]

    params = stage_params(cfg)  # the loop adds the draw's (the measurement's) to them
    state = stage_loop(root, cfg, params, before=before)
    folder = publish_release(Store(s), state.refs, cfg=cfg, approval=state.approval or unattended(state.plan))
    return {"refs": state.refs, "plan": state.plan, "params": params, "folder": folder} | probe


def test_the_option_reaches_the_graph_stage_and_its_cache_key(tmp_path):
    """all_pairs is on by default for a method that can certify every pair, and a graph and solve stage parameter
    only when on (the opt-out's cache keys are those of a release before the option existed)."""
    for on in (config(tmp_path), config(tmp_path, True), config(tmp_path, method="auto")):
        params = stage_params(on)
        assert params["graph"]["all_pairs"] is True and params["solve"]["solver"]["all_pairs"] is True
    for off in (config(tmp_path, False), config(tmp_path, method="benders"), config(tmp_path, method="constopt")):
        params = stage_params(off)  # opted out, or a method that cannot certify every pair: the graph's edges
        assert "all_pairs" not in params["graph"] and "all_pairs" not in params["solve"]["solver"]


def test_one_rate_published_and_charged(release):
    refs, folder, plan = release["refs"], release["folder"], release["plan"]
    assert refs["graph"].meta["pairs"] == "all" and refs["graph"].meta["protection"]["stretch"] == 1.0
    assert refs["solve"].meta["certificate"]["pairs"] == "all" and refs["solve"].meta["certificate"]["passed"]
    assert release["graph_only"].meta["certificate"]["pairs"] == "graph"
    prov = read_json(folder / audit.PROVENANCE)
    g, led = prov["guarantee"], prov["ledger"]
    assert g["stretch"] == 1.0 and g.get("stretch_within_radius", 1.0) == 1.0
    assert g["metric_epsilon_per_unit"] == EPS and prov["protection"]["stretch"] == 1.0
    assert g["statement"].startswith(f"eps {EPS:g} per km for any two records")
    assert "no graph stretch" in g["statement"] and "farther apart" not in g["statement"]
    radius = g["protection_radius"]
    assert led["this_release"] == pytest.approx(this_release(EPS, 1.0, radius, g["additive_epsilon"]))
    assert plan.guarantee.all_pairs and plan.guarantee.stretch == 1.0
    report = (folder / "report.md").read_text()
    assert f"One rate: eps {EPS:g} per km for any two records" in report
    laplace = read_json(folder / "manifest.json")  # the comparison with planar Laplace at the one rate, eps
    assert laplace["privacy"]["guarantee"]["metric_epsilon_per_unit"] == EPS


def test_a_graph_only_mechanism_is_refused_before_any_charge(release):
    assert "certificate is over graph pairs" in release["refused"]
    assert release["history"] == []  # the refused measurement charged nothing (the ledger had no entry)


def test_the_comparisons_are_solved_without_all_pairs(release):
    specs = {s["method"]: s for s in evaluate.point_specs(release["params"]["evaluate"])}
    assert specs["constopt"]["solver"]["all_pairs"] is False  # a comparison, solved on the graph, not refused
    for name, spec in specs.items():  # a method that declares it keeps it; the others are solved without
        assert spec["solver"]["all_pairs"] == REGISTRY[name].all_pairs, name
    rows = pd.read_parquet(release["folder"] / "evaluation.parquet")
    assert {"lp", "exp", "constopt"} <= set(rows["method"])


def test_the_audit_passes(release):
    assert audit.audit_release(release["folder"]) == []
    assert main(["audit", str(release["folder"])]) == 0


@pytest.fixture(scope="module")
def opted_out(tmp_path_factory) -> Path:
    """The published folder of :func:`config` opted out (``all_pairs = false``: certified on the graph's edges)."""
    root = tmp_path_factory.mktemp("store")
    cfg = config(root, all_pairs=False)
    state = stage_loop(root, cfg)
    return publish_release(Store(str(root)), state.refs, cfg=cfg, approval=state.approval or unattended(state.plan))


def test_the_opt_out_states_eps_within_the_edges_and_the_stretch_beyond(opted_out):
    g = read_json(opted_out / audit.PROVENANCE)["guarantee"]
    assert g["stretch"] > 1.0 and g["stretch_within_radius"] == 1.0 and not g.get("all_pairs", False)
    assert g["metric_epsilon_per_unit"] == pytest.approx(EPS * g["stretch"])
    assert "farther apart" in g["statement"] and "for any two records" not in g["statement"].split(";")[0]
    assert f"x stretch {g['stretch']:.6g} of the mDP graph" in g["statement"]
    assert "One rate" not in (opted_out / "report.md").read_text()
    assert audit.audit_release(opted_out) == []


def test_a_certificate_claiming_every_pair_over_a_graph_only_mechanism_is_caught(opted_out: Path, tmp_path):
    """The opted-out release (certified on the graph's edges) with both recorded certificates edited to claim
    every pair: the audit verifies every pair, and the mechanism fails there."""
    run = tmp_path / "run"
    shutil.copytree(opted_out, run)
    assert audit.audit_release(run) == []

    def claim_all(cert: dict) -> None:
        assert cert["pairs"] == "graph"
        cert["pairs"] = "all"

    edit(run, "solve.json", lambda d: claim_all(d["certificate"]))
    edit(run, "manifest.json", lambda d: claim_all(d["privacy"]["certificate"]))
    findings = audit.audit_release(run)
    assert any(f.startswith("mechanism.parquet: fails verification") and "(all pairs)" in f for f in findings)
    assert any(f.startswith("manifest.json: certificate n_violations=0 but") for f in findings), findings
    assert main(["audit", str(run)]) == 1


def test_check_states_the_one_rate(tmp_path, capsys):
    """``mdp-release check`` states the door's guarantee: by default eps over any distance (stretch 1); opted out
    (``all_pairs = false``), eps within the graph's edges and eps x the graph's stretch beyond."""
    toml = tmp_path / "release.toml"
    toml.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "grid"\n'
        "params = {rows = 4, cols = 5, n_outputs = 6, seed = 2}\n"
        f'[privacy]\nepsilon = {EPS}\neta = {ETA}\n[solve]\nmethod = "lp"\n'
        "[release]\nsimulate = true\nn_individuals = 200\n"
    )
    main(["check", "--config", str(toml)])
    out = capsys.readouterr().out
    assert f"guarantee: eps {EPS:g} per km for any two records (one rate:" in out and "x stretch 1;" in out, out
    toml.write_text(toml.read_text().replace('method = "lp"\n', 'method = "lp"\nall_pairs = false\n'))
    main(["check", "--config", str(toml)])
    out = capsys.readouterr().out
    assert "for any two records" not in out and "in the data's metric over any distance (eps 3 x stretch" in out, out
