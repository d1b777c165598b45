"""The door (publication re-verified from the exact bytes) and ``mdp-release audit`` (issue 11).

The pipeline runs through the stage tasks' ``.fn`` (real HiGHS, real store, no Prefect server) and is
published through ``tasks.publish.publish.fn`` -- the same code the flow's ``publish`` task runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import build_release as build
from conftest import publish_release as publish
from conftest import release_config as config
from conftest import resign

from artifacts.store import Store
from flows.cli import main
from flows.plan import plan_run
from flows.release import release_params
from mdp_core.errors import PrivacyError
from mdp_core.problem.io import _long, read_instance, write_instance, write_table
from mdp_core.release import audit
from mdp_core.runtime.files import file_sha256, read_json
from tasks import measure


def measure_params(store: Store, refs: dict) -> dict:
    """The measure stage's parameters as the flow makes them (the table's current secret draw)."""
    cfg = config(store.root)
    population, version = measure.simulated_table(
        {"instance": refs["export"].content_hash, "n": cfg.release.simulated_individuals}
    )
    inst = read_instance(store.root / refs["export"].path)
    plan = plan_run(cfg)
    door = plan.privacy.settings(inst.epsilon, inst.eta)
    return release_params(plan, measure.secret_draw(store, population, version), door)["measure"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def released(built):
    store, refs = built
    return publish(store, refs)


@pytest.fixture()
def copy(released, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(released, out)
    return out


def deterministic(n: int, k: int) -> np.ndarray:
    return np.eye(k)[np.arange(n) % k]


def replace_mechanism(path: Path, z: np.ndarray) -> None:
    write_table(path, _long(z) | {"prob": z.ravel()})


def set_listed_hash(run: Path, name: str) -> None:
    m = json.loads((run / "manifest.json").read_text())
    m["released_files"][name] = file_sha256(run / name)
    (run / "manifest.json").write_text(json.dumps(m))
    resign(run)


# ----------------------------------------------------------------------------- a clean release
def test_published_release_audits_clean(released, capsys):
    assert audit.audit_release(released) == []
    assert main(["audit", str(released)]) == 0
    assert "OK" in capsys.readouterr().out
    names = {str(p.relative_to(released)) for p in released.rglob("*") if p.is_file()}
    assert {
        "mechanism.parquet",
        "microdata.parquet",
        "aggregates.parquet",
        audit.PROVENANCE,
        "manifest.json",
        "instance/instance.json",
        "instance/edges.parquet",
        "instance/records.parquet",
    } <= names
    assert all((released / n).stat().st_mode & 0o777 == 0o644 for n in names)
    prov = json.loads((released / audit.PROVENANCE).read_text())
    assert prov["mechanism_sha256"] == file_sha256(released / "mechanism.parquet")


# ----------------------------------------------------------------------------- finding 1: the door
def test_issue11_finding1_tampered_solve_object_is_refused_at_the_door(built, tmp_path):
    """A solve object whose mechanism.parquet was replaced by a deterministic mechanism and whose
    ref.json hash was updated to match: (a) with the refs a cached flow still holds (old hashes, old
    microdata) and (b) with the refs a recomputing flow gets (new hash, microdata drawn from the
    tampered mechanism), publication is refused and nothing appears under runs/."""
    src_store, refs = built
    root = tmp_path / "store"
    shutil.copytree(src_store.root, root)
    store = Store(root)
    sol = refs["solve"]
    inst = read_instance(root / refs["export"].path)
    mech = store.path(sol, "mechanism.parquet")
    replace_mechanism(mech, deterministic(inst.n_records, inst.n_outputs))
    r = read_json(root / sol.path / "ref.json")
    r["files"]["mechanism.parquet"] = file_sha256(mech)
    (root / sol.path / "ref.json").write_text(json.dumps(r))

    with pytest.raises(PrivacyError, match="release refused") as exc:  # (a) refs with the old hashes
        publish(store, refs, "cached-refs")
    assert "\n" not in str(exc.value)
    tampered = store.valid_ref("solve", sol.key)  # (b) what a store hit now returns
    assert tampered is not None and tampered.files["mechanism.parquet"] == file_sha256(mech)
    with pytest.raises(PrivacyError, match="fails its mDP certificate at the moment of drawing"):
        measure.measure.fn(
            str(root), measure_params(store, refs), refs["export"], tampered, refs["graph"], refs["partition"]
        )  # (b) a recomputing flow never draws from it
    assert {p.name for p in (root / "runs").iterdir()} <= {"run-1"}  # run-1: the clean release published earlier


def test_audit_microdata_replaced(copy, capsys):
    (copy / "microdata.parquet").write_bytes((copy / "aggregates.parquet").read_bytes())
    findings = audit.audit_release(copy)
    assert any(f.startswith("microdata.parquet: sha256") for f in findings)
    assert main(["audit", str(copy)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[: len(findings)] == [f"{copy}: {f}" for f in findings]
    assert len(out) == len(findings) + 1 and "compare it with the agency's published key fingerprint" in out[-1]


def test_audit_mechanism_swapped_and_manifest_hash_updated(copy):
    inst = read_instance(copy / "instance")
    replace_mechanism(copy / "mechanism.parquet", deterministic(inst.n_records, inst.n_outputs))
    set_listed_hash(copy, "mechanism.parquet")
    text = "\n".join(audit.audit_release(copy))
    assert "fails verification" in text and "realised eps=inf" in text
    assert "drawn from another mechanism" in text and "solve.json: mechanism_sha256" in text


def test_audit_private_but_different_mechanism_is_still_caught(copy):
    """A uniform mechanism passes verification, but microdata, solve.json and the certificate name another."""
    inst = read_instance(copy / "instance")
    replace_mechanism(copy / "mechanism.parquet", np.full((inst.n_records, inst.n_outputs), 1 / inst.n_outputs))
    set_listed_hash(copy, "mechanism.parquet")
    text = "\n".join(audit.audit_release(copy))
    assert "fails verification" not in text and "drawn from another mechanism" in text


def test_issue11_finding4_audit_instance_edges_deleted(copy):
    """Edges of record 0 removed from the published instance, every hash recomputed: the metric check fails."""
    d = copy / "instance"
    inst = read_instance(d)
    keep = (inst.edges != 0).all(axis=1)
    write_instance(inst.replace(edges=inst.edges[keep], distances=inst.distances[keep]), d)
    m = json.loads((copy / "manifest.json").read_text())
    for name in ("instance.json", "edges.parquet"):
        m["released_files"][f"instance/{name}"] = file_sha256(d / name)
    m["stages"]["export"]["files"]["instance.json"] = file_sha256(d / "instance.json")
    (copy / "manifest.json").write_text(json.dumps(m))
    text = "\n".join(audit.audit_release(copy))
    assert f"{int((~keep).sum())} missing edge(s)" in text


@pytest.mark.parametrize(
    "damage, needle",
    [
        ("delete:microdata.parquet", "listed in the manifest but missing"),
        ("delete:instance/costs.parquet", "listed in the manifest but missing"),
        ("delete:manifest.json", "manifest.json: missing"),
        ("garbage:manifest.json", "unreadable JSON"),
        ("certificate", "does not say passed"),
        ("epsilon", "mechanism_epsilon"),
        ("provenance", "drawn from another mechanism"),
        ("unlist:release_provenance.json", "not listed in the manifest"),
    ],
)
def test_audit_findings(copy, damage, needle):
    what, _, name = damage.partition(":")
    m = json.loads((copy / "manifest.json").read_text())
    if what == "delete":
        (copy / name).unlink()
    elif what == "garbage":
        (copy / name).write_text("{")
    elif what == "certificate":
        m["privacy"]["certificate"]["passed"] = False
    elif what == "epsilon":
        m["privacy"]["mechanism_epsilon"] = 30.0
    elif what == "unlist":
        del m["released_files"][name]
    else:
        p = json.loads((copy / audit.PROVENANCE).read_text())
        p["mechanism_sha256"] = "0" * 64
        (copy / audit.PROVENANCE).write_text(json.dumps(p))
        m["released_files"][audit.PROVENANCE] = file_sha256(copy / audit.PROVENANCE)
    if what in ("certificate", "epsilon", "unlist", "provenance"):
        (copy / "manifest.json").write_text(json.dumps(m))
    findings = audit.audit_release(copy)
    assert any(needle in f for f in findings), findings
    assert all("\n" not in f for f in findings)


def test_audit_not_a_directory(tmp_path, capsys):
    assert main(["audit", str(tmp_path / "nope")]) == 1
    assert "no such release directory" in capsys.readouterr().out
