"""Real releases (issue 18): the agency's microdata as a secret input, secret randomness kept in the
store's private part, DP counts of the true data, the ledger -- and attacks from the published files.

The pipeline runs through the stage tasks' ``.fn`` (real HiGHS, real OpenDP, real store, no Prefect
server); ``tests/test_flow.py`` runs the same through Prefect.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import N_PEOPLE, POPULATION, run_stages
from conftest import people_config as config
from conftest import people_table as people

from artifacts.draws import commitment
from artifacts.private import PrivateStore
from artifacts.store import Store
from mdp_core.errors import InputError
from mdp_core.problem import microdata
from mdp_core.problem.datasets import grid
from mdp_core.problem.io import read_instance, read_mechanism
from mdp_core.release import evaluate, perturb
from mdp_core.runtime.files import read_json
from tasks import measure


@pytest.fixture(scope="module")
def secret_table(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    path = tmp_path_factory.mktemp("agency") / "people.csv"
    return path, people(path)


@pytest.fixture(scope="module")
def first(tmp_path_factory, secret_table):
    root = tmp_path_factory.mktemp("store-a")
    cfg = config(root, secret_table[0])
    return root, cfg, run_stages(root, cfg)


def table_version(root: Path) -> str:
    """The version (the sealed rows' sha256, private) of the one table the store's population holds."""
    (version,) = [p.name for p in (root / "private" / "populations" / POPULATION / "versions").iterdir()]
    return version


def published(root: Path, refs: dict) -> dict[str, Path]:
    """Every file the release publishes (what tasks.publish.released_files lists), by name."""
    from tasks.publish import released_files

    s = Store(root)
    rel = released_files(refs["solve"], refs["measure"], refs["evaluate"], refs["export"])
    return {name: s.path(ref, src) for name, (ref, src) in rel.items()}


def true_cells(root: Path, refs: dict, table: pd.DataFrame) -> np.ndarray:
    inst = read_instance(Store(root).root / refs["export"].path)
    rec = microdata.map_individuals(table, inst, inst.eta).record_ids
    return np.bincount(microdata.cell_of_record(inst)[rec], minlength=inst.n_outputs)


def test_microdata_release_has_no_order_and_publishes_nothing_of_the_person(first, secret_table):
    root, cfg, refs = first
    files = published(root, refs)
    md = pd.read_parquet(files["microdata.parquet"])
    assert len(md) == N_PEOPLE and md["output_id"].is_monotonic_increasing
    assert set(md.columns) <= {"output_id", "output_record_id", "x0", "x1", "lat", "lon"}
    prov = read_json(files["release_provenance.json"])
    assert prov["microdata_source"] == "file" and prov["n_individuals"] == N_PEOPLE
    assert not any("seed" in k for k in prov) and len(prov["draw_commitment"]) == 64
    secret_ids = set(secret_table[1]["ssn"])
    for name, path in files.items():  # nothing of the person, no true record, no secret anywhere public
        data = path.read_bytes()
        assert b"123-45-" not in data, name
        assert PrivateStore(root).load(prov["draw_commitment"]).secret.hex().encode() not in data, name
    assert secret_ids  # (the check above is about these)


def test_aggregates_are_noisy_consistent_counts_of_the_true_data(first, secret_table):
    root, cfg, refs = first
    agg = pd.read_parquet(published(root, refs)["aggregates.parquet"])
    assert list(agg.columns) == [
        *("level", "block", "label", "n_members", "count", "eps_counts", "noise", "noise_scale"),
        *("ci_level", "ci_low", "ci_high", "sim_low", "sim_high"),
    ]
    assert ((agg.ci_low <= agg["count"]) & (agg["count"] <= agg.ci_high)).all() and (agg.ci_level == 0.95).all()
    assert agg["count"].dtype == np.int64 and (agg["count"] >= 0).all()
    outs = agg[agg.level == "output"].sort_values("block")["count"].to_numpy()
    total = int(agg[agg.level == "total"]["count"].iloc[0])
    assert total == N_PEOPLE and outs.sum() == total
    truth = true_cells(root, refs, secret_table[1])
    assert not np.array_equal(outs, truth)  # noisy ...
    assert np.abs(outs - truth).mean() < 3 * agg[agg.level == "output"]["noise_scale"].iloc[0]  # ... but close
    md = pd.read_parquet(published(root, refs)["microdata.parquet"])  # and not counts of the public microdata
    assert not np.array_equal(outs, np.bincount(md["output_id"], minlength=outs.size))


def test_private_part_is_owner_only(first):
    root = first[0]
    priv = root / "private"
    for p in [priv, *priv.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        if p.is_dir():
            assert mode == 0o700, p
        elif not p.name.startswith("."):
            assert mode == 0o600, p
    assert not (root / "runs").exists() or not any((root / "runs").rglob("draw.json"))


def test_cached_rerun_and_forced_recompute_give_the_same_bytes_and_spend_nothing(first):
    root, cfg, refs = first
    before = {n: p.read_bytes() for n, p in published(root, refs).items()}
    again = run_stages(root, cfg)
    assert {n: p.read_bytes() for n, p in published(root, again).items()} == before
    # a forced recomputation of the measure stage (its object deleted): the same draw, the same stored noise
    import shutil

    shutil.rmtree(Store(root).root / refs["measure"].path)
    redo = run_stages(root, cfg)
    assert {n: p.read_bytes() for n, p in published(root, redo).items()} == before
    prov = read_json(published(root, redo)["release_provenance.json"])
    stretch = prov["guarantee"]["stretch_within_radius"]  # the charge pays the stretch within the radius
    assert prov["ledger"]["this_release"] == pytest.approx(2 * stretch * 1.5 + 1)
    assert PrivateStore(root).budget(POPULATION).spent == pytest.approx(2 * stretch * 1.5 + 1)


def test_two_stores_draw_independently(first, secret_table, tmp_path):
    root, cfg, refs = first
    other = run_stages(tmp_path, config(tmp_path, secret_table[0]))
    a = pd.read_parquet(published(root, refs)["microdata.parquet"])["output_id"].to_numpy()
    b = pd.read_parquet(published(tmp_path, other)["microdata.parquet"])["output_id"].to_numpy()
    assert not np.array_equal(a, b)
    pa, pb = (read_json(published(r, x)["release_provenance.json"]) for r, x in ((root, refs), (tmp_path, other)))
    assert pa["draw_commitment"] != pb["draw_commitment"]


def test_new_draw_is_recorded_and_the_ledger_limit_refuses(secret_table, tmp_path):
    from artifacts.ledger import BudgetRefused

    probe = run_stages(tmp_path / "probe", config(tmp_path / "probe", secret_table[0]))
    one = read_json(published(tmp_path / "probe", probe)["release_provenance.json"])["ledger"]["this_release"]
    cfg = config(tmp_path, secret_table[0], max_total_epsilon=2.5 * one)
    run_stages(tmp_path, cfg)
    version = table_version(tmp_path)
    store = Store(tmp_path)
    old = measure.secret_draw(store, POPULATION, version)
    new = measure.secret_draw(store, POPULATION, version, new=True)
    assert new.commitment != old.commitment and new.index == old.index + 1
    run_stages(tmp_path, cfg)  # the current draw is now the new one: a second release, charged again
    assert PrivateStore(tmp_path).budget(POPULATION).spent == pytest.approx(2 * one)
    measure.secret_draw(store, POPULATION, version, new=True)
    with pytest.raises(BudgetRefused, match="cap"):
        run_stages(tmp_path, cfg)
    assert PrivateStore(tmp_path).budget(POPULATION).spent == pytest.approx(2 * one)  # refused: nothing recorded


def test_commitment_checks_and_unknown_draws(tmp_path):
    from artifacts.private_folder import LedgerError

    priv = PrivateStore(tmp_path)
    draw, made = priv.draw(POPULATION, "ab" * 32)
    assert made and commitment(draw.secret) == draw.commitment
    assert priv.draw(POPULATION, "ab" * 32) == (draw, False)
    with pytest.raises(InputError, match="reproduced only from the store"):
        measure.secret_draw(Store(tmp_path), POPULATION, "ab" * 32, commitment="cd" * 32)
    with pytest.raises(InputError, match="another version"):
        measure.secret_draw(Store(tmp_path), POPULATION, "ef" * 32, commitment=draw.commitment)
    rec = tmp_path / "private" / "draws" / draw.commitment / "draw.json"
    data = json.loads(rec.read_text())
    data["secret"] = "00" * 32
    rec.write_text(json.dumps(data))
    with pytest.raises(LedgerError, match="does not match its commitment"):
        priv.load(draw.commitment)


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ({"lat": [41.6645, 60.0], "lon": [12.2460, 25.0]}, r"some individual\(s\) lie farther than max_distance"),
        ({"lat": [41.6645, float("nan")], "lon": [12.2460, 12.2460]}, "NaN"),
        ({"record": [0, 99]}, "not in the instance"),
        ({"name": ["a"]}, "no usable columns"),
    ],
)
def test_bad_microdata_is_a_clear_error(tmp_path, rows, match):
    inst = grid(5, 6, n_outputs=None, seed=0)
    path = tmp_path / "people.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(InputError, match=match):
        microdata.map_individuals(microdata.read_microdata(path), inst, inst.eta)


def test_unreadable_and_empty_microdata(tmp_path):
    (tmp_path / "empty.csv").write_text("lat,lon\n")
    with pytest.raises(InputError, match="has no rows"):
        microdata.read_microdata(tmp_path / "empty.csv")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read"):
        microdata.read_microdata(tmp_path / "x.parquet")
    with pytest.raises(InputError, match="no such file"):
        microdata.read_microdata(tmp_path / "missing.csv")


def test_record_keys_and_vectors_map_exactly():
    inst = grid(5, 6, n_outputs=None, seed=0)
    by_key = microdata.map_individuals(pd.DataFrame({"record": [3, 0, 29]}), inst, 0.0)
    assert by_key.record_ids.tolist() == [3, 0, 29]
    pts = inst.records[["x0", "x1"]].to_numpy()[[5, 7]] + 0.01
    by_x = microdata.map_individuals(pd.DataFrame({"x0": pts[:, 0], "x1": pts[:, 1], "id": [1, 2]}), inst, 0.1)
    assert by_x.record_ids.tolist() == [5, 7] and by_x.max_distance == pytest.approx(0.01 * 2**0.5)


def test_attack_from_the_published_folder(first, secret_table):
    """A hostile tester with every published file: (1) try to regenerate the draws from any published
    number used as a seed; (2) reconstruct each person's true record. Neither may beat the Bayes
    adversary of the mechanism (the evaluation's adversary error) beyond sampling noise."""
    root, cfg, refs = first
    files = published(root, refs)
    inst = read_instance(files["instance/instance.json"].parent)
    z = read_mechanism(files["mechanism.parquet"], inst.n_records, inst.n_outputs)
    out = pd.read_parquet(files["microdata.parquet"])["output_id"].to_numpy()
    truth = microdata.map_individuals(secret_table[1], inst, inst.eta).record_ids
    d = inst.record_points()
    dist = np.linalg.norm(d[:, None, :] - d[None, :, :], axis=2)  # grid metric: euclidean km

    # candidate seeds: small integers and every number the published JSON files hold
    numbers: set[int] = set(range(200))
    for name in ("manifest.json", "release_provenance.json", "solve.json"):
        if name in files:
            text = files[name].read_text()
            numbers |= {int(tok, 16) % 2**63 for tok in __import__("re").findall(r"[0-9a-f]{16,64}", text)}
            numbers |= {abs(int(float(tok))) for tok in __import__("re").findall(r"\d+(?:\.\d+)?", text)[:500]}
    chance = float(np.sum(np.bincount(out, minlength=inst.n_outputs) ** 2) / out.size**2)
    best_match = 0.0
    for s in sorted(numbers)[:2000]:
        guess_out = perturb.perturb(z, truth, np.random.default_rng(s))  # even knowing the true records
        best_match = max(best_match, float(np.mean(guess_out == out)))
    # the perturbed outputs agree with a fresh draw only as often as two independent draws do
    same_draw = float(np.mean([np.sum(z[r] ** 2) for r in truth]))
    assert best_match < same_draw + 6 * np.sqrt(same_draw / out.size) + 0.02, (best_match, same_draw, chance)

    # reconstruction: the Bayes remap is optimal given the published files; measure it against the truth
    post = inst.prior[:, None] * z  # (N, K) joint
    remap = np.argmin(dist @ post, axis=0)  # per output, the record minimising expected distance
    err = dist[truth, remap[out]]
    bayes = evaluate.adversary_error(inst, z)
    # the secret table's empirical prior differs from the (DP/dataset) prior; allow sampling noise
    assert err.mean() >= bayes - 4 * err.std() / np.sqrt(err.size) - 0.25 * bayes, (err.mean(), bayes)


def test_secret_files_never_under_runs_or_objects(first):
    root, cfg, refs = first
    draw_hex = [p.parent.name for p in (root / "private" / "draws").glob("*/draw.json")]
    assert draw_hex
    secrets = [json.loads((root / "private" / "draws" / c / "draw.json").read_text())["secret"] for c in draw_hex]
    table = table_version(root)
    for p in (root / "objects").rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert table.encode() not in data, p  # not even the table's hash
            assert not any(s.encode() in data for s in secrets), p
    assert os.access(root / "private", os.R_OK)


def test_another_mechanism_on_the_same_draw_is_a_new_accounted_release_with_fresh_uniforms(secret_table, tmp_path):
    """Same people, same draw, another eps: its outputs must not reuse the first release's uniforms
    (two inverse-CDF samples from one u reveal more than both releases' budgets), and it is spent."""
    run_stages(tmp_path, config(tmp_path, secret_table[0]))
    cfg = config(tmp_path, secret_table[0])
    cfg = cfg.model_copy(update={"privacy": cfg.privacy.model_copy(update={"epsilon": 3.0})})
    refs = run_stages(tmp_path, cfg)
    prov = read_json(published(tmp_path, refs)["release_provenance.json"])
    stretch = prov["guarantee"]["stretch_within_radius"]  # the charge pays the stretch within the radius
    assert prov["ledger"]["total_so_far"] == pytest.approx((2 * stretch * 1.5 + 1) + (3 * stretch * 1.5 + 1))
    draw = PrivateStore(tmp_path).load(prov["draw_commitment"])
    assert not np.array_equal(draw.rng("perturb:a").random(8), draw.rng("perturb:b").random(8))
    np.testing.assert_array_equal(draw.rng("perturb:a").random(8), draw.rng("perturb:a").random(8))
