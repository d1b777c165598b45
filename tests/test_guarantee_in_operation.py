"""The guarantee in real operation (issue 28): each numbered finding of the hostile tester as a test.

The pipeline runs through the stage tasks' ``.fn`` in the flow's own order (``conftest.run_stages`` ->
:func:`flows.release.prepare`): real HiGHS, real OpenDP, a real store, no Prefect server.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_stages, to_toml

from artifacts.ledger import BudgetRefused
from artifacts.private import PrivateStore
from artifacts.private_folder import LedgerError
from artifacts.store import Store
from flows.config import parse_config
from mdp_core.errors import PrivacyError, SecretTableError
from mdp_core.problem.datasets import grid
from mdp_core.runtime.files import read_json

N_PEOPLE = 120
POPULATION = "test-residents"


def people(n: int = N_PEOPLE, seed: int = 11) -> pd.DataFrame:
    """Made-up secret people near the cells of the 4 x 5 grid (lat, lon) with an internal id."""
    inst = grid(4, 5, n_outputs=None, seed=0)
    rng = np.random.default_rng(seed)
    home = rng.integers(0, inst.n_records, size=n)
    pts = inst.records[["lat", "lon"]].to_numpy()[home] + rng.normal(0, 0.0004, size=(n, 2))
    return pd.DataFrame({"person": [f"p{k:05d}" for k in range(n)], "lat": pts[:, 0], "lon": pts[:, 1]})


def config(root: Path, table: Path, privacy: dict | None = None, solve: dict | None = None, **release):
    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 20, "seed": 0}},
            "privacy": {"epsilon": 2.0, "eta": 1.5} | (privacy or {}),
            "solve": solve or {},
            "release": {"microdata": str(table), "population": POPULATION, "eps_counts": 1.0} | release,
            "evaluate": {"eps_factors": [1.0], "baselines": ["exp"], "counts_eps": [1.0], "counts_seeds": 1},
        }
    )


def provenance(root: Path, refs: dict) -> dict:
    return read_json(Store(root).path(refs["measure"], "release_provenance.json"))


def publish_heads(root: Path, refs: dict, name: str) -> None:
    """What a publication commits about the ledger (the manifest's privacy.ledger), without the rest, signed
    with the store's key as tasks.publish signs (an unsigned manifest commits to nothing)."""
    from mdp_core.release import signing

    folder = root / "runs" / name
    folder.mkdir(parents=True)
    stages = {stage: {"artifact": ref.path} for stage, ref in refs.items()}  # made of the store's objects
    (folder / "manifest.json").write_text(
        json.dumps({"privacy": {"ledger": provenance(root, refs)["ledger"]}, "stages": stages})
    )
    signing.sign_release(folder, signing.signing_key(root))


def versions(folder: Path, df: pd.DataFrame) -> list[Path]:
    """Five versions of the same people's table: one row changed, reordered, an extra column, no trailing
    newline, Parquet."""
    out = []
    changed = df.copy()
    changed.loc[3, "lat"] += 0.0002
    out.append(folder / "v1-changed.csv")
    changed.to_csv(out[-1], index=False)
    out.append(folder / "v2-reordered.csv")
    df.sample(frac=1.0, random_state=3).to_csv(out[-1], index=False)
    out.append(folder / "v3-extra-column.csv")
    df.assign(age=np.arange(len(df)) % 90).to_csv(out[-1], index=False)
    out.append(folder / "v4-no-newline.csv")
    out[-1].write_text(df.to_csv(index=False).rstrip("\n"))
    out.append(folder / "v5.parquet")
    df.to_parquet(out[-1], index=False)
    return out


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    folder = tmp_path_factory.mktemp("agency")
    df = people()
    df.to_csv(folder / "people.csv", index=False)
    return folder / "people.csv", df


def test_versions_of_a_table_spend_from_one_population_budget(table, tmp_path):
    """Item 1: a monthly update (a change of the people) is a new release of the same people, charged again;
    the same people reordered, with another column or re-encoded are the same sealed table (issue 49: the
    version is the sealed rows'), the same draw and the same measurements: nothing new, nothing charged."""
    path, df = table
    first = run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=1000.0))
    charge = provenance(tmp_path, first)["ledger"]["this_release"]
    assert charge > 0
    changed, *same = versions(tmp_path / "..", df)
    led = provenance(tmp_path, run_stages(tmp_path, config(tmp_path, changed)))["ledger"]
    assert led["population"] == POPULATION and led["this_release"] == pytest.approx(charge)
    assert led["total_so_far"] == pytest.approx(2 * charge)  # a fresh draw per version: charged again
    assert led["max_total_epsilon"] == 1000.0  # the cap kept in the private store, not in this config
    for version in same:
        refs = run_stages(tmp_path, config(tmp_path, version))
        assert provenance(tmp_path, refs)["draw_commitment"] == provenance(tmp_path, first)["draw_commitment"]
    assert PrivateStore(tmp_path).budget(POPULATION).spent == pytest.approx(2 * charge)


def test_the_cap_is_kept_whatever_a_later_config_says(table, tmp_path):
    """Items 1 and 2: the cap refuses the release that would exceed it, with or without max_total_epsilon."""
    path, df = table
    probe = run_stages(tmp_path / "probe", config(tmp_path / "probe", path, max_total_epsilon=1000.0))
    charge = provenance(tmp_path / "probe", probe)["ledger"]["this_release"]
    root = tmp_path / "store"
    cap = 2.5 * charge
    run_stages(root, config(root, path, max_total_epsilon=cap))
    v = versions(tmp_path, df)
    run_stages(root, config(root, v[0]))  # no cap in this config: the stored one holds
    spent = PrivateStore(root).budget(POPULATION).spent
    third = tmp_path / "v6-another-change.parquet"
    df.assign(lat=df["lat"].where(df.index != 5, df["lat"] + 0.0003)).to_parquet(third, index=False)
    for cfg in (config(root, third), config(root, third, max_total_epsilon=100 * cap)):
        with pytest.raises(BudgetRefused):
            run_stages(root, cfg)
    assert PrivateStore(root).budget(POPULATION).spent == pytest.approx(spent)  # refused: nothing charged
    assert PrivateStore(root).budget(POPULATION).cap == pytest.approx(cap)


def test_a_refused_release_measures_nothing(table, tmp_path):
    """Item 6: a release over the cap has not measured the DP prior (nor anything else) before it is refused."""
    path, _ = table
    with pytest.raises(BudgetRefused):
        run_stages(tmp_path, config(tmp_path, path, prior="dp", eps_prior=0.9, max_total_epsilon=0.5))
    objects = tmp_path / "objects"
    assert not (objects / "prior").exists() or not any((objects / "prior").iterdir())
    assert not (objects / "measure").exists() or not any((objects / "measure").iterdir())
    assert PrivateStore(tmp_path).budget(POPULATION).spent == 0.0


def test_an_edited_or_rolled_back_ledger_is_a_refusal(table, tmp_path):
    """Item 2: an edited entry, a deleted entry, a deleted private part with releases on record."""
    path, df = table
    refs = run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=1000.0))
    publish_heads(tmp_path, refs, "release-1")
    ledger = sorted((tmp_path / "private").rglob("ledger/*.json"))
    charges = [p for p in ledger if json.loads(p.read_text()).get("kind") == "charge"]
    entry = json.loads(charges[-1].read_text())
    saved = charges[-1].read_bytes()
    charges[-1].write_text(json.dumps(entry | {"epsilon": 0.001}))
    with pytest.raises(LedgerError):
        run_stages(tmp_path, config(tmp_path, versions(tmp_path, df)[0]))
    charges[-1].write_bytes(saved)
    charges[-1].unlink()  # roll back the newest entry: its head was published
    with pytest.raises(LedgerError):
        run_stages(tmp_path, config(tmp_path, path))
    shutil.rmtree(tmp_path / "private")  # the whole private part: releases of the population are on record
    with pytest.raises(LedgerError, match="new-budget"):
        run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=1000.0))


def test_loosened_private_permissions_are_repaired(table, tmp_path):
    path, _ = table
    run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=1000.0))
    priv = tmp_path / "private"
    for p in priv.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(priv, 0o755)
    PrivateStore(tmp_path)
    for p in [priv, *priv.rglob("*")]:
        assert stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600), p


def test_a_disconnected_graph_is_refused_unless_allowed(table, tmp_path):
    """Items 3 and 4 (issue 28), and issue 39's finding 3: a tiny eta leaves every record alone in its component
    (every mechanism row would be deterministic): refused, and refused with allow_unprotected too -- nothing
    charged, no population created."""
    path, _ = table
    tiny = {"epsilon": 60.0, "eta": 0.05, "protection_radius": 1.0}
    with pytest.raises(PrivacyError, match="components"):
        run_stages(tmp_path, config(tmp_path, path, privacy=tiny, max_total_epsilon=1000.0, max_distance=1.0))
    assert not (tmp_path / "private").exists() or PrivateStore(tmp_path).populations() == []
    allowed = tiny | {"allow_unprotected": True}
    with pytest.raises(PrivacyError, match="alone in their component"):
        run_stages(tmp_path, config(tmp_path, path, privacy=allowed, max_total_epsilon=1000.0, max_distance=1.0))
    assert not (tmp_path / "private").exists() or PrivateStore(tmp_path).populations() == []


def test_the_guarantee_is_stated_in_the_metric(table, tmp_path):
    """Item 4: eps x stretch per unit of the data's own metric; the ledger charges eps x stretch x radius."""
    path, _ = table
    refs = run_stages(tmp_path, config(tmp_path, path, privacy={"protection_radius": 2.0}, max_total_epsilon=100.0))
    prov = provenance(tmp_path, refs)
    g, led = prov["guarantee"], prov["ledger"]
    assert g["stretch"] >= 1.0 and g["metric_epsilon_per_unit"] == pytest.approx(2.0 * g["stretch"])
    # the charge pays the stretch over the pairs within the radius (2 km > eta 1.5 km: between 1 and the stretch)
    assert 1.0 <= g["stretch_within_radius"] <= g["stretch"]
    assert led["this_release"] == pytest.approx(2.0 * g["stretch_within_radius"] * 2.0 + 1.0)


def test_one_population_one_protection_radius(table, tmp_path):
    """A tiny radius would make every release nearly free, and totals at different radii add different units:
    a radius below eta is refused, and a population's later releases keep its first radius."""
    path, df = table
    with pytest.raises(PrivacyError, match="below eta"):
        run_stages(tmp_path, config(tmp_path, path, privacy={"protection_radius": 1e-6}, max_total_epsilon=100.0))
    run_stages(tmp_path, config(tmp_path, path, privacy={"protection_radius": 2.0}, max_total_epsilon=100.0))
    spent = PrivateStore(tmp_path).budget(POPULATION).spent
    with pytest.raises(BudgetRefused, match="protection radius of 2 km"):
        run_stages(tmp_path, config(tmp_path, versions(tmp_path, df)[0], privacy={"protection_radius": 3.0}))
    assert PrivateStore(tmp_path).budget(POPULATION).spent == spent


def test_a_rerun_spends_nothing_and_is_not_refused_after_the_cap_was_lowered(table, tmp_path):
    """A cached or reproduced release measures nothing new: lowering the cap below what was spent must not stop
    it (a serve tick, run --from-manifest)."""
    path, _ = table
    cfg = config(tmp_path, path, max_total_epsilon=100.0)
    run_stages(tmp_path, cfg)
    priv = PrivateStore(tmp_path)
    spent = priv.budget(POPULATION).spent
    priv.set_cap(POPULATION, spent / 2, "officer", "lowered after the release")
    shutil.rmtree(Store(tmp_path).root / "objects" / "measure")  # recomputed: the same charges
    run_stages(tmp_path, cfg)
    assert PrivateStore(tmp_path).budget(POPULATION).spent == spent


def test_a_planted_mechanism_is_never_drawn_from(table, tmp_path):
    """Item 6: a mechanism replaced in objects/solve, its hash re-fixed in ref.json, fails the certificate at
    the moment of drawing: nothing is drawn, nothing charged, no measure object is written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mdp_core.problem.io import read_mechanism
    from mdp_core.runtime.files import file_sha256

    path, df = table
    refs = run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=1000.0))
    store = Store(tmp_path)
    mech = store.path(refs["solve"], "mechanism.parquet")
    meta = read_json(store.path(refs["export"], "instance.json"))
    z = read_mechanism(mech, int(meta["n_records"]), int(meta["n_outputs"]))
    planted = np.zeros_like(z)
    planted[:, 0] = 1.0  # deterministic
    planted[0] = z[0]
    n, k = planted.shape
    cols = {"i": np.repeat(np.arange(n), k), "k": np.tile(np.arange(k), n), "prob": planted.ravel()}
    pq.write_table(pa.table(cols, schema=pq.read_schema(mech)), mech)  # the forger's bytes, schema kept
    ref_json = store.root / refs["solve"].path / "ref.json"
    ref = json.loads(ref_json.read_text())
    ref["files"]["mechanism.parquet"] = file_sha256(mech)
    ref_json.write_text(json.dumps(ref))
    spent = PrivateStore(tmp_path).budget(POPULATION).spent
    before = set((store.root / "objects" / "measure").iterdir())
    with pytest.raises(PrivacyError, match="certificate"):
        run_stages(tmp_path, config(tmp_path, versions(tmp_path, df)[0]))
    assert PrivateStore(tmp_path).budget(POPULATION).spent == pytest.approx(spent)
    assert set((store.root / "objects" / "measure").iterdir()) == before


def test_objects_derived_from_secrets_are_owner_only(table, tmp_path):
    """Item 6: the measure object, a DP prior and everything computed from them are 0700/0600 until
    published."""
    path, _ = table
    refs = run_stages(tmp_path, config(tmp_path, path, prior="dp", eps_prior=0.5, max_total_epsilon=1000.0))
    store = Store(tmp_path)
    for stage in ("measure", "prior"):
        folder = store.root / refs[stage].path
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, stage
        for f in folder.iterdir():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    for stage in ("export", "solve", "evaluate"):  # computed from a private object: private too
        assert stat.S_IMODE((store.root / refs[stage].path).stat().st_mode) == 0o700, stage
    public = store.root / refs["graph"].path  # the public records' graph
    assert stat.S_IMODE((public / "graph.json").stat().st_mode) == 0o644


def test_published_rows_reveal_no_input_order(table, tmp_path):
    """Item 5: sorted by latitude, the input order must not show in the released rows."""
    path, df = table
    by_lat = tmp_path / "by-lat.csv"
    df.sort_values("lat").to_csv(by_lat, index=False)
    refs = run_stages(tmp_path, config(tmp_path, by_lat, max_total_epsilon=1000.0))
    md = pd.read_parquet(Store(tmp_path).path(refs["measure"], "microdata.parquet"))
    assert "individual" not in md.columns
    assert md["output_id"].is_monotonic_increasing  # a function of the outputs alone


ROME = Path(__file__).resolve().parents[2] / "shared" / "data" / "rome_center"


@pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data ../shared/data/rome_center absent")
def test_eps_60_eta_0_05_on_rome_roads_is_refused(tmp_path):
    """Item 3 as the tester ran it: eps 60 / km, eta 0.05 km on central Rome's roads gives an mDP graph with
    almost no edges (every mechanism row deterministic): refused before any draw, whatever the cap."""
    nodes = pd.read_csv(ROME / "nodes.csv")
    rng = np.random.default_rng(5)
    pick = nodes.sample(200, random_state=5)
    df = pd.DataFrame({"lat": pick["y"] + rng.normal(0, 1e-5, 200), "lon": pick["x"] + rng.normal(0, 1e-5, 200)})
    df.to_csv(tmp_path / "residents.csv", index=False)
    cfg = parse_config(
        {
            "store": str(tmp_path / "store"),
            "dataset": {
                "kind": "road",
                "params": {"nodes": str(ROME / "nodes.csv"), "edges": str(ROME / "edges.csv"), "n_records": 150},
            },
            "privacy": {"epsilon": 60.0, "eta": 0.05},
            "release": {
                "microdata": str(tmp_path / "residents.csv"),
                "population": "rome-residents",
                "max_distance": 2.0,
                "max_total_epsilon": 1000.0,
            },
        }
    )
    with pytest.raises(PrivacyError, match="components"):
        run_stages(tmp_path / "store", cfg)
    assert not (tmp_path / "store" / "private").exists() or PrivateStore(tmp_path / "store").populations() == []


# ------------------------------------------------------------------------ issue 39: one privacy door
def _nothing_charged(root: Path) -> bool:
    return not (root / "private").exists() or all(
        PrivateStore(root).budget(p).spent == 0 and PrivateStore(root).budget(p).cap is None
        for p in PrivateStore(root).populations()
    )


def _check(tmp_path: Path, cfg) -> object:
    """``mdp-release check`` of ``cfg`` (written as a TOML file)."""
    from flows.check import run_check

    path = tmp_path / f"check-{abs(hash(cfg.model_dump_json())) % 10**8}.toml"
    path.write_text(to_toml(cfg.model_dump(mode="json", exclude_none=True, exclude={"run", "evaluate", "solve"})))
    return run_check(path)


def test_the_secret_table_is_not_the_public_universe(table, tmp_path):
    """Finding 1: a points universe built from the microdata file itself (the same bytes), or from a copy of
    the people's coordinates, is refused by check and run; nothing is charged, nothing published."""
    path, df = table
    copy = tmp_path / "universe.csv"
    df[["lat", "lon"]].to_csv(copy, index=False)
    for universe in (path, copy):
        cfg = config(tmp_path, path, max_total_epsilon=100.0).model_copy(
            update={"dataset": parse_config({"dataset": {"kind": "points", "params": {"path": str(universe)}}}).dataset}
        )
        rep = _check(tmp_path, cfg)
        assert not rep.accepted and any("public universe" in r for r in rep.reasons), rep.reasons
        with pytest.raises(PrivacyError, match="public universe"):
            run_stages(tmp_path, cfg)
        assert _nothing_charged(tmp_path) and not (tmp_path / "runs").exists()


def test_one_table_belongs_to_one_population(table, tmp_path):
    """Finding 2: the same people released under a second population name (the same bytes, or reordered as
    Parquet) are refused, naming the first population; its budget is untouched."""
    path, df = table
    run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=100.0))
    spent = PrivateStore(tmp_path).budget(POPULATION).spent
    reordered = tmp_path / "reordered.parquet"
    df.sample(frac=1.0, random_state=5).to_parquet(reordered, index=False)
    for other in (path, reordered):
        cfg = config(tmp_path, other, max_total_epsilon=100.0, population="test-residents-b")
        rep = _check(tmp_path, cfg)
        assert not rep.accepted and any(f"population {POPULATION!r}" in r for r in rep.reasons), rep.reasons
        with pytest.raises(PrivacyError, match=f"of its people with population {POPULATION!r}"):
            run_stages(tmp_path, cfg)
    assert PrivateStore(tmp_path).populations() == [POPULATION]
    assert PrivateStore(tmp_path).budget(POPULATION).spent == spent


def test_a_bad_table_spends_nothing_and_sets_no_cap(table, tmp_path):
    """Finding 4: a table with an unreadable row and a DP prior is refused before the prior is charged or a
    cap is set; a real table under a ``simulated-`` name is refused by check and run alike."""
    _, df = table
    bad = df.copy().astype({"lat": object})
    bad.loc[7, "lat"] = "not a number"
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    cfg = config(tmp_path, path, max_total_epsilon=40.0, prior="dp", eps_prior=0.5)
    assert not _check(tmp_path, cfg).accepted
    with pytest.raises(SecretTableError, match="non-numeric"):  # a bad file: a failure, no row named
        run_stages(tmp_path, cfg)
    assert _nothing_charged(tmp_path)
    good = tmp_path / "good.csv"
    df.to_csv(good, index=False)
    sim = config(tmp_path, good, max_total_epsilon=40.0, population="simulated-people")
    assert any("reserved for simulated" in r for r in _check(tmp_path, sim).reasons)
    with pytest.raises(PrivacyError, match="reserved for simulated"):
        run_stages(tmp_path, sim)
    assert _nothing_charged(tmp_path)


def test_check_and_run_agree_on_the_radius_and_max_distance(table, tmp_path):
    """Finding 5: a radius below eta, and max_distance above the radius, are refused by check and run alike."""
    path, _ = table
    for privacy, release in (({"protection_radius": 1.0}, {}), ({}, {"max_distance": 1000.0})):
        cfg = config(tmp_path, path, privacy=privacy, max_total_epsilon=100.0, **release)
        rep = _check(tmp_path, cfg)
        assert not rep.accepted
        with pytest.raises(PrivacyError) as err:
            run_stages(tmp_path, cfg)
        assert all(r in str(err.value) for r in rep.reasons), (rep.reasons, str(err.value))
    assert _nothing_charged(tmp_path)


def test_the_budget_history_is_published(table, tmp_path):
    """Finding 6: after a new budget and a raise, the next release's provenance and officer's summary say
    what was spent before, when, by whom and why."""
    path, df = table
    run_stages(tmp_path, config(tmp_path, path, max_total_epsilon=12.0))
    before = PrivateStore(tmp_path).budget(POPULATION).spent
    PrivateStore(tmp_path).start_new_budget(POPULATION, 12.0, "officer-a", "new year", [])
    PrivateStore(tmp_path).set_cap(POPULATION, 50.0, "officer-b", "council decision", allow_raise=True)
    refs = run_stages(tmp_path, config(tmp_path, versions(tmp_path, df)[0]))
    history = provenance(tmp_path, refs)["ledger"]["history"]
    kinds = [(e["kind"], e["by"], e["why"]) for e in history]
    assert kinds[-2:] == [("new-budget", "officer-a", "new year"), ("raise", "officer-b", "council decision")]
    assert history[-2]["spent_before"] == pytest.approx(before) and history[-2]["spent_all_budgets"] == before
    report = Store(tmp_path).path(refs["evaluate"], "report.md").read_text()
    assert "Budget history" in report and "council decision" in report and "officer-a" in report


def test_the_door_refuses_singletons_whatever_allow_unprotected_says():
    """Finding 3, the rule itself: components of two or more records may be allowed; a record alone never."""
    from mdp_core.release.door import GraphFacts, Settings, plan_privacy

    s = Settings(epsilon=2.0, eta=1.0, allow_unprotected=True)
    assert plan_privacy(s, GraphFacts(4, (2, 2), 1.0, "km")).accepted
    assert not plan_privacy(s, GraphFacts(3, (2, 1), 1.0, "km")).accepted
    assert not plan_privacy(Settings(epsilon=2.0, eta=1.0), GraphFacts(4, (2, 2), 1.0, "km")).accepted


# Functions of mdp_core.release that take a random generator but measure nothing secret (issue 53's widening).
NOT_MEASURING = {"draw_individuals": "draws simulated people from the public prior; it reads no table"}


def _measuring_names() -> set[str]:
    """The public functions of ``mdp_core/release`` that measure: each takes a numpy Generator, a ``Measure`` or
    returns a ``Measurement`` (read from their annotations), less :data:`NOT_MEASURING`."""
    import ast

    names: set[str] = set()
    for path in sorted((Path(__file__).resolve().parents[1] / "mdp_core" / "release").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                args = node.args.args + node.args.kwonlyargs
                notes = [ast.unparse(a.annotation) for a in args if a.annotation is not None]
                notes.append(ast.unparse(node.returns) if node.returns is not None else "")
                if any("Generator" in n or n == "Measure" for n in notes[:-1]) or "Measurement" in notes[-1]:
                    names.add(node.name)
    return names - set(NOT_MEASURING)


def test_nothing_measures_the_secret_table_outside_the_door():
    """Issues 39 and 53: every measurement of the secret table in the pipeline (the perturbation, the counts, the DP
    prior) is made inside ``charge_then_measure``, which charges first; read from the source of every module
    above ``mdp_core`` (tasks/, flows/, artifacts/) that can reach the secret draw (imports ``artifacts.draws`` or
    ``artifacts.private``). The measuring functions are read from ``mdp_core/release``'s annotations, so a new
    one is covered by being written."""
    import ast

    measuring = _measuring_names()
    assert {"make_release", "discrete_laplace", "perturb", "release_counts"} <= measuring, measuring
    measuring.add("kept_measure")  # tasks.measure's keeper of the counts' measurement
    root = Path(__file__).resolve().parents[1]
    outside, inside = [], 0
    for path in sorted(p for d in ("tasks", "flows", "artifacts") for p in (root / d).rglob("*.py")):
        text = path.read_text()
        if "artifacts.draws" not in text and "artifacts.private" not in text and path.name != "measure.py":
            continue  # no secret draw reachable: e.g. the papers' reproductions on public synthetic data
        tree = ast.parse(text)
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "charge_then_measure":
                for arg in node.args[4:] + [k.value for k in node.keywords if k.arg == "measure"]:
                    guarded |= {id(n) for n in ast.walk(arg)}
            if isinstance(node, ast.FunctionDef) and node.name == "kept_measure":  # a measure, made only when called
                guarded |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in measuring:
                    if id(node) in guarded:
                        inside += 1
                    else:
                        outside.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert not outside, outside
    assert inside >= 2  # the release (perturbation and counts) and the DP prior


def test_the_charge_pays_the_stretch_within_the_radius(table, tmp_path):
    """Issue 40's first cause: a move within the protection radius is what the budget is charged for, so the
    charge pays the stretch over the pairs within the radius (1 when the radius is eta: every such pair is an
    edge), not the whole graph's. Checked on the released mechanism: every pair within the radius realises at
    most eps x d. A release opted out of every pair's certificate (``all_pairs = false``): by default the stretch
    is 1 everywhere (tests/test_all_pairs_release.py)."""
    from mdp_core.problem.io import read_instance, read_mechanism
    from mdp_core.problem.metrics import pairwise

    path, _ = table
    refs = run_stages(tmp_path, config(tmp_path, path, solve={"all_pairs": False}, max_total_epsilon=100.0))
    g, led = provenance(tmp_path, refs)["guarantee"], provenance(tmp_path, refs)["ledger"]
    assert g["stretch"] > 1.0 and g["stretch_within_radius"] == 1.0 and g["protection_radius"] == 1.5
    assert led["this_release"] == pytest.approx(2.0 * 1.0 * 1.5 + 1.0, rel=2e-9)
    assert "at most 1.5 km apart" in g["statement"]
    store = Store(tmp_path)
    inst = read_instance(store.root / refs["export"].path)
    z = read_mechanism(store.path(refs["solve"], "mechanism.parquet"), inst.n_records, inst.n_outputs)
    pts = inst.record_points()
    d = pairwise(inst.metric, pts, pts)
    i, j = np.nonzero((d <= 1.5) & (d > 0))
    ratio = np.abs(np.log(z[i]) - np.log(z[j])).max(axis=1)
    assert (ratio <= 2.0 * d[i, j] * (1 + 1e-9)).all()
