"""Issue 39, finding 7 ("one privacy door"): the audit trusts no file's claim of the guarantee's metric factor,
every key of every published JSON file is declared in the release contract or is a finding, and a manifest
the store did not sign is a finding of ``mdp-release store``, never a head that blocks the population.

The releases are the real ones of ``tests/conftest.py``: ``released`` (the stage tasks' ``.fn``, real
HiGHS, published through the release task and its door) and a microdata population's release; every test
tampers with a copy (re-hashed and re-signed by conftest's helpers, so only the tampered claim is wrong).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import typing
from pathlib import Path

import pytest
from conftest import (
    APPROVALS,
    OTHER_KEY,
    POPULATION,
    build_release,
    claims_of,
    edit,
    findings,
    people_config,
    people_table,
    publish_release,
    read,
    rehash,
    release_config,
    run_stages,
)

from artifacts.private import PrivateStore
from artifacts.private_folder import LedgerError
from artifacts.published import published_heads, unsigned_releases
from artifacts.store import Store
from mdp_core.declarations import budget, contract
from mdp_core.problem.io import read_instance
from mdp_core.release import audit, report, signing
from mdp_core.release.protection import graph_protection


def rerender(run: Path, **changes: object) -> None:
    """report.md rendered from its claims with ``changes``, as the pipeline would have written it; rehashed."""
    claims = claims_of(run) | changes
    pngs = frozenset(p.name for p in run.glob("*.png"))
    md = report.render_report(claims, report.evaluation_markdown(run / "evaluation.parquet"), pngs)
    (run / "report.md").write_text(md)
    rehash(run, "report.md")


# ----------------------------------------------------------------------------- 1. the stretch is recomputed
def forge_stretch(run: Path, stretch: float, **protection: object) -> None:
    """A coherent forgery: ``stretch`` stated in the protection block and the guarantee (its metric epsilon
    and statement made with the pipeline's own budget.Guarantee.record), the charge and total recomputed from
    it (budget.this_release), the manifest's privacy block and the report's claims made to agree; re-signed."""
    prov = read(run, audit.PROVENANCE)
    g, led = prov["guarantee"], prov["ledger"]
    eps, radius, add = g["epsilon_per_unit"], g["protection_radius"], g["additive_epsilon"]
    charge = budget.this_release(eps, stretch, radius, add)
    prov["protection"] |= {"stretch": stretch, **protection}
    prov["guarantee"] = budget.Guarantee(eps, stretch, radius, add, g["distance_unit"], prov["eps_prior"] > 0).record()
    prov["ledger"] = led | {"this_release": charge, "total_so_far": led["total_so_far"] - led["this_release"] + charge}
    edit(run, audit.PROVENANCE, lambda p: p.update(prov))
    block = {k: prov[k] for k in ("guarantee", "ledger", "protection")}
    edit(run, "manifest.json", lambda m: m["privacy"].update(block))
    rerender(run, **block)


def true_stretch(run: Path) -> float:
    """The stretch of the released instance's mDP graph, computed here as the graph stage computes it."""
    inst = read_instance(run / "instance")
    return graph_protection(inst, inst.edges, inst.distances).stretch


def test_the_released_stretch_is_the_graph_stage_s(released):
    prov = read(released, audit.PROVENANCE)
    assert prov["protection"]["stretch"] == pytest.approx(true_stretch(released), rel=1e-12)
    assert prov["protection"]["stretch"] > 1.01  # a forged 1.0 is a real lie here
    assert audit.audit_release(released) == []


def test_a_coherent_stretch_forgery_is_a_finding(run):
    """stretch 1.0 stated where the instance gives more, with the metric epsilon, the statement, the charge,
    the total, the manifest and the report all consistent with the lie: before, nothing recomputed the
    stretch, so this audited clean."""
    real, charged = true_stretch(run), read(run, audit.PROVENANCE)["ledger"]["this_release"]
    forge_stretch(run, 1.0)
    # the lie charges no more (the charge pays the stretch within the radius, 1 here: every pair within it is
    # an edge; a forged guarantee without that figure is charged at the whole graph's stretch, which it lies about)
    assert read(run, audit.PROVENANCE)["ledger"]["this_release"] <= charged
    found = findings(
        run,
        f"{audit.PROVENANCE} protection: stretch 1.0 but the released instance's mDP graph gives {real!r}",
        f"{audit.PROVENANCE} guarantee: stretch 1.0 but the released files give {real!r}",
        "metric_epsilon_per_unit (eps x stretch)",
        f"{audit.PROVENANCE} ledger: this_release (eps x stretch x radius + additive)",
    )
    assert not any("report.md" in f for f in found)  # the report states the (checked) provenance: coherent


def test_a_stretch_under_its_limit_only_on_paper_is_refused(run):
    """A limit the true stretch exceeds, with a stated stretch under it: released without allow_unprotected."""
    real = true_stretch(run)
    forge_stretch(run, 1.0, max_stretch=(1.0 + real) / 2)
    findings(run, "released without allow_unprotected = true")


# ----------------------------------------------------------------------------- 2. every key is declared
@pytest.mark.parametrize(
    "name, change, needle",
    [
        ("manifest.json", lambda m: m["config"].update(seed=7), "manifest.json: key config.seed is not declared"),
        (
            "manifest.json",
            lambda m: m["config"]["release"].update(cap=1000.0),
            "manifest.json: key config.release.cap is not declared",
        ),
        (
            "manifest.json",
            lambda m: m["config"]["dataset"]["params"].update(secret_rows=3),
            "manifest.json: key config.dataset.params.secret_rows is not declared",
        ),
        (
            "manifest.json",
            lambda m: m["config"]["run"].update(dask_address={"token": "x"}),
            "manifest.json: config.run.dask_address holds an object where the release contract declares a value",
        ),
        ("manifest.json", lambda m: m.update(notes="x"), "manifest.json: key notes is not declared"),
        (
            "manifest.json",
            lambda m: m["stages"]["solve"].update(true_loss=0.1),
            "manifest.json: key stages.solve.true_loss is not declared",
        ),
        (
            "manifest.json",
            lambda m: m.update(package_versions={"numpy": "2", "leak": "x"}),
            "manifest.json: key package_versions.leak is not declared",
        ),
        ("solve.json", lambda s: s["options"].update(seed_draw=1), "solve.json: key options.seed_draw is not declared"),
        ("solve.json", lambda s: s["repair"].update(note="x"), "solve.json: key repair.note is not declared"),
        ("solve.json", lambda s: s["solver"].update(host="x"), "solve.json: key solver.host is not declared"),
    ],
)
def test_an_undeclared_key_is_a_finding(run, name, change, needle):
    edit(run, name, change)
    findings(run, needle)


def test_an_undeclared_key_of_instance_json_is_a_finding(run):
    name = f"{contract.INSTANCE_DIR}/instance.json"
    edit(run, name, lambda i: i.update(seed=12345) or i["provenance"].update(rows_secret=1))
    digest = hashlib.sha256((run / name).read_bytes()).hexdigest()
    edit(run, audit.PROVENANCE, lambda p: p.update(instance_json_sha256=digest))
    findings(run, f"{name}: key seed is not declared", f"{name}: key provenance.rows_secret is not declared")


def test_a_dropped_declared_file_is_a_finding(run):
    """report.md deleted and removed from the manifest's file list (and its stage's record): before, an
    optional file no one listed was simply not checked."""
    (run / "report.md").unlink()

    def drop(m: dict) -> None:
        del m["released_files"]["report.md"]
        del m["stages"]["evaluate"]["files"]["report.md"]

    edit(run, "manifest.json", drop)
    findings(run, "report.md: not listed in the manifest (a release must carry it)")


def test_a_file_its_stage_wrote_cannot_be_dropped(run):
    (run / "cbdp_error.parquet").unlink()
    edit(run, "manifest.json", lambda m: m["released_files"].pop("cbdp_error.parquet"))
    findings(run, "cbdp_error.parquet: the evaluate stage wrote it but the release does not list it")


def test_the_contract_declares_what_the_writers_write():
    """The declarations the audit reads agree with the code that writes the blocks (flows.config's models,
    flows.manifest.stage_entry, flows.release.PACKAGES, the certificate and the repair report)."""
    import dataclasses

    from flows import config as cfg
    from flows.release import PACKAGES
    from mdp_core.solvers.verify import Certificate, RepairReport

    def sections(model: typing.Any, path: str) -> dict[str, frozenset[str]]:
        out = {path: frozenset(model.model_fields)}
        for name, f in model.model_fields.items():
            sub = f.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields") and name != "dataset":
                out |= sections(sub, f"{path}.{name}")
        return out

    written = sections(cfg.ReleaseFlowConfig, "config") | {"config.dataset": frozenset({"kind", "params"})}
    assert written.keys() == contract.CONFIG_KEYS.keys()
    assert {k: v - contract.CONFIG_KEYS[k] for k, v in written.items() if v - contract.CONFIG_KEYS[k]} == {}
    assert {k: frozenset(m.model_fields) for k, m in cfg.DATASET_PARAMS.items()} == contract.DATASET_PARAMETER_KEYS
    assert tuple(PACKAGES) == contract.MANIFEST_PACKAGES
    assert {f.name for f in dataclasses.fields(Certificate)} == contract.CERTIFICATE_KEYS
    assert {f.name for f in dataclasses.fields(RepairReport)} == contract.REPAIR_KEYS


def test_every_key_of_a_real_release_is_declared(released):
    """The walker passes the pipeline's own release and reaches every block of its manifest."""
    assert audit._check_declared_keys(released, read(released, "manifest.json")) == []
    manifest = read(released, "manifest.json")
    blocks = contract.json_blocks("manifest.json", manifest["config"]["dataset"]["kind"])
    assert {"config", "config.release", "config.dataset.params", "stages.solve.files"} <= set(blocks)


def test_a_manifest_as_the_flow_writes_it_passes_the_door(tmp_path):
    """Every block of the flow's own manifest (flows.release._run_manifest: stage entries, code and package
    versions, the public config, started_at, refresh_from) is declared: the release task publishes it."""
    import time

    from flows import manifest as mf
    from flows.plan import plan_run
    from flows.release import PACKAGES, _run_manifest, stage_params
    from tasks import publish as publish_task
    from tasks.cache import package_versions

    store, refs = build_release(tmp_path / "store")
    cfg = release_config(store.root)
    started, t0 = time.time(), time.perf_counter()
    entries = {stage: mf.stage_entry(ref, "flow-run-1", t0, started) for stage, ref in refs.items()}
    fields = {"started_at": started, "refresh_from": None, "package_versions": package_versions(PACKAGES)}
    fields["approval"] = APPROVALS[refs["measure"].key]  # the run's approval record (nobody asked: mode none)
    manifest = _run_manifest(plan_run(cfg), store, refs, "flow-run-1", entries, fields, stage_params(cfg))
    released = publish_task.released_files(refs["solve"], refs["measure"], refs["evaluate"], refs["export"])
    manifest["released_files"] = {name: ref.files[src] for name, (ref, src) in released.items()}
    folder = Path(publish_task.publish.fn(str(store.root), manifest["run_name"], released, manifest))
    assert audit.audit_release(folder) == []
    # every top-level key, as the flow writes (the approval record always, since manifest version 4)
    assert set(read(folder, "manifest.json")) == contract.MANIFEST_KEYS | contract.MANIFEST_KEYS_OPTIONAL


# ----------------------------------------------------------------------------- 3. a head the store did not sign
@pytest.fixture()
def store_with_release(tmp_path) -> tuple[Path, Path, Path]:
    """A microdata population's real release published in a store (signed by the store's key): (store root,
    release folder, the people's table)."""
    table = tmp_path / "people.csv"
    people_table(table)
    root = tmp_path / "store"
    cfg = people_config(root, table)
    folder = publish_release(Store(root), run_stages(root, cfg), cfg=cfg)
    return root, folder, table


def plant(root: Path, genuine: Path, name: str, seq: int, key=None) -> Path:
    """A copy of the genuine release under ``runs/<name>/`` whose manifest commits to a head the ledger never
    had (``seq``), unsigned (``key`` None) or signed by another key."""
    folder = root / "runs" / name
    shutil.copytree(genuine, folder)
    manifest = read(folder, "manifest.json")
    manifest["privacy"]["ledger"] |= {"ledger_seq": seq, "ledger_head": hashlib.sha256(name.encode()).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    if key is None:
        (folder / signing.SIGNATURE).unlink()
    else:
        signing.sign_release(folder, key)
    return folder


def test_a_planted_head_is_a_finding_not_a_block(store_with_release, capsys):
    from flows.cli import main

    root, genuine, table = store_with_release
    heads = published_heads(root, POPULATION)
    assert len(heads) == 1
    plant(root, genuine, "planted-unsigned", 99)
    plant(root, genuine, "planted-other-key", 98, OTHER_KEY)
    assert published_heads(root, POPULATION) == heads  # the door reads only what the store signed
    PrivateStore(root).check_published(POPULATION, published_heads(root, POPULATION))  # before: LedgerError
    assert [name for name, _ in unsigned_releases(root)] == ["planted-other-key", "planted-unsigned"]

    assert main(["store", "--store", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["unsigned_releases"]
    assert {u["folder"] for u in out} == {"planted-other-key", "planted-unsigned"}
    assert main(["store", "--store", str(root)]) == 0
    text = capsys.readouterr().out
    assert "findings: 2 folder(s) in runs/ not signed by this store's key" in text
    assert "runs/planted-unsigned: signature.json: missing" in text
    assert "not the pinned agency key" in text  # planted-other-key, pinned to the store's own key
    assert audit.audit_release(root / "runs" / "planted-other-key")  # its audit, in the store, is a finding too

    # the population's next release (a new version of its table: a new draw, charged) is not refused
    changed = table.with_name("people-v2.csv")
    people_table(changed, seed=8)
    refs = run_stages(root, people_config(root, changed))
    assert Store(root).path(refs["measure"], audit.PROVENANCE).is_file()


def test_a_rollback_is_still_detected_through_signed_manifests(store_with_release):
    root, genuine, _ = store_with_release
    plant(root, genuine, "planted-unsigned", 99)
    heads = published_heads(root, POPULATION)
    ledger = sorted((root / "private" / "populations" / POPULATION / "ledger").glob("*.json"))
    ledger[-1].unlink()  # roll back the newest entry, whose head the genuine release committed to
    with pytest.raises(LedgerError, match=r"1 published ledger head\(s\) are not in the private ledger"):
        PrivateStore(root).check_published(POPULATION, heads)


def test_the_audit_applies_the_door_to_the_released_figures(run):
    """Issue 39: the audit runs the privacy door (mdp_core.release.door.plan_privacy) on the stated settings
    and the recomputed graph: a release whose max_distance lies above its protection radius (a person far
    away released as a record the guarantee does not speak for) is a finding, signed and coherent or not."""
    prov = read(run, audit.PROVENANCE)
    radius = prov["protection"]["protection_radius"]
    prov["protection"]["max_distance"] = 10 * radius
    edit(run, audit.PROVENANCE, lambda p: p.update(prov))
    edit(run, "manifest.json", lambda m: m["privacy"].update(protection=prov["protection"]))
    rerender(run, protection=prov["protection"])
    findings(run, f"{audit.PROVENANCE}: the privacy door refuses this release: max_distance = {10 * radius:g}")
