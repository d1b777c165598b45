"""bench/check_guarantee.py: the independent checker of a release's guarantee in the metric, run as a
subprocess on release folders written here with mdp_core.problem.io."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.io import write_instance, write_table
from mdp_core.problem.metrics import euclidean, haversine_km
from mdp_core.release.protection import graph_protection, metric_epsilon
from mdp_core.runtime.files import file_sha256, write_json
from mdp_core.solvers.lp import solve_lp
from mdp_core.solvers.verify import certify, write_mechanism

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "check_guarantee.py"


def _run(folder: Path, *args: str) -> tuple[int, dict | None, str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), *args], capture_output=True, text=True, timeout=120
    )
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else None, proc.stderr


def _release(folder: Path, inst, z: np.ndarray, stated: float | None, certified: bool = True) -> Path:
    write_instance(inst, folder / "instance")
    if certified:
        write_mechanism(inst, z, folder, {"method": "lp"})
    else:  # a mechanism the library would refuse to write
        n, k = z.shape
        write_table(
            folder / "mechanism.parquet",
            {"i": np.repeat(np.arange(n), k), "k": np.tile(np.arange(k), n), "prob": z.ravel()},
        )
    guarantee = {"epsilon_per_unit": inst.epsilon, "distance_unit": inst.distance_unit}
    if stated is not None:
        guarantee |= {"metric_epsilon_per_unit": stated, "stretch": stated / inst.epsilon}
    prov = {"mechanism_sha256": file_sha256(folder / "mechanism.parquet"), "guarantee": guarantee}
    write_json(folder / "release_provenance.json", prov)
    return folder


@pytest.fixture(scope="module")
def euclid():
    rng = np.random.default_rng(11)
    pts = rng.uniform(0, 4, size=(36, 2))
    out = np.arange(0, 36, 4)
    inst = from_points(pts, "euclidean", 1.3, 1.5, euclidean(pts, pts[out]), output_record_ids=out)
    z, cert, _ = certify(inst, solve_lp(inst).z)
    assert cert.passed
    return inst, z, graph_protection(inst, inst.edges, inst.distances)


def test_good_mechanism_passes_and_agrees_with_the_library(tmp_path, euclid):
    inst, z, prot = euclid
    stated = inst.epsilon * prot.stretch
    rc, out, err = _run(_release(tmp_path, inst, z, stated))
    assert rc == 0, err
    assert out["ok"] is True and out["stated"] == pytest.approx(stated) and out["pairs"] == 36 * 35 // 2
    assert out["lower_bound"] == "exact" and out["distance_unit"] == "km"
    assert out["worst_ratio"] <= stated * (1 + 1e-8)
    assert out["worst_ratio"] == pytest.approx(metric_epsilon(inst, z), rel=1e-9)  # two implementations agree


def test_understated_guarantee_fails(tmp_path, euclid):
    inst, z, _ = euclid
    rc, out, _ = _run(_release(tmp_path, inst, z, stated=inst.epsilon))  # eps alone: ignores the stretch
    assert rc == 1 and out["ok"] is False and out["worst_ratio"] > inst.epsilon


def test_bad_mechanism_fails(tmp_path, euclid):
    inst, z, prot = euclid
    bad = z.copy()
    bad[0] = 0.0
    bad[0, 0] = 1.0  # record 0 reported deterministically: a zero opposite its neighbours' non-zeros
    rc, out, _ = _run(_release(tmp_path, inst, bad, inst.epsilon * prot.stretch, certified=False))
    assert rc == 1 and out["ok"] is False and out["worst_ratio"] == "inf" and 0 in out["worst_pair"]


def test_stated_flag_for_old_provenance(tmp_path, euclid):
    inst, z, prot = euclid
    folder = _release(tmp_path, inst, z, stated=None)
    rc, _, err = _run(folder)
    assert rc == 2 and "--stated" in err
    rc, out, _ = _run(folder, "--stated", repr(inst.epsilon * prot.stretch))
    assert rc == 0 and out["ok"] is True


def test_tampered_instance_is_unreadable(tmp_path, euclid):
    inst, z, prot = euclid
    folder = _release(tmp_path, inst, z, inst.epsilon * prot.stretch)
    write_table(folder / "instance" / "edges.parquet", {"i": [0], "j": [1], "distance": [0.5]})
    rc, out, err = _run(folder)
    assert rc == 2 and out is None and "sha256" in err


def test_haversine_release(tmp_path):
    rng = np.random.default_rng(2)
    ll = np.column_stack([41.9 + rng.uniform(0, 0.03, 25), 12.5 + rng.uniform(0, 0.04, 25)])
    out = np.arange(0, 25, 5)
    inst = from_points(ll, "haversine", 1.0, 4.0, haversine_km(ll, ll[out]), output_record_ids=out)
    z, cert, _ = certify(inst, solve_lp(inst).z)
    prot = graph_protection(inst, inst.edges, inst.distances)
    assert cert.passed and prot.connected
    rc, res, err = _run(_release(tmp_path, inst, z, inst.epsilon * prot.stretch))
    assert rc == 0, err
    assert res["ok"] and res["worst_ratio"] == pytest.approx(metric_epsilon(inst, z), rel=1e-9)


def test_checker_imports_nothing_of_mdp_core():
    import ast

    tree = ast.parse(SCRIPT.read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert roots <= {"__future__", "argparse", "hashlib", "json", "math", "re", "sys", "pathlib", "typing"} | {
        "numpy",
        "pandas",
        "pyarrow",
        "scipy",
    }
