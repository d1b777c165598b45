"""Rule 6, one population by similarity (issue 49, :mod:`mdp_core.release.similarity`).

The same people written with %.15g or %.8f, with a row dropped or duplicated, one person moved 11 m, or
keyed by osmid are recognised as the population that already holds them (refused under a second name, in
``mdp-release check``'s door and at the claim); a genuinely different population of the same city is
accepted; the sketch lives under ``<store>/private/`` only (0600) and names nothing. Real Rome road data
from ``../shared/data`` (skipped when absent).
"""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from artifacts.private import PrivateStore
from mdp_core.release.similarity import SAME_SHARE, People, overlap, sketch

ROOT = Path(__file__).resolve().parents[1]
ROME = ROOT / ".." / "shared" / "data" / "rome_center"
needs_rome = pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data ../shared/data absent")
R_M = 6_371_008.8
FIRST, SECOND = "rome-residents", "rome-residents-again"


def rome_people(n: int, seed: int) -> pd.DataFrame:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.rome_people import people

    return people(ROME, n, seed)


def move_one(df: pd.DataFrame, metres: float) -> pd.DataFrame:
    out = df.copy()
    out.loc[0, "lat"] += np.rad2deg(metres / R_M)
    return out


def _write(df: pd.DataFrame, path: Path, fmt: str | None = None) -> Path:
    df.to_csv(path, index=False, float_format=fmt)
    return path


# ---------------------------------------------------------------------------------------------- the sketch
def test_versions_overlap_and_different_people_do_not():
    rng = np.random.default_rng(0)
    a = rng.uniform([41.88, 12.47], [41.92, 12.52], size=(800, 2))
    recs = rng.uniform([41.88, 12.47], [41.92, 12.52], size=(800, 2))
    key = b"\x01" * 32
    sk = sketch(People(a, recs, True), key)
    fresh = rng.uniform([41.88, 12.47], [41.92, 12.52], size=(1600, 2))
    padded = np.vstack([a, fresh, fresh + 0.001])  # hidden among 4x as many others: nearly all of it is there
    for b in (np.round(a, 8), a[1:], np.vstack([a, a[:1]]), padded):
        people = People(b, np.resize(recs, b.shape), True)
        assert overlap(people, key, sk).same, overlap(people, key, sk)
    other = People(fresh[:800], recs, True)
    assert overlap(other, key, sk).share < 0.05 and not overlap(other, key, sk).same
    assert overlap(People(a, recs, True), b"\x02" * 32, sk).share < 0.05  # another store's key: nothing in common
    few = People(fresh[:10], recs[:10], True)  # a small table is judged on its own people
    assert not overlap(few, key, sk).same


# ----------------------------------------------------------------------------------------- through the door
def _config(tmp_path: Path, table: Path, population: str) -> Path:
    cfg = tmp_path / f"{population}-{table.stem}.toml"
    cfg.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "road"\n'
        f'params = {{ nodes = "{ROME / "nodes.csv"}", edges = "{ROME / "edges.csv"}", n_records = 500, '
        'n_outputs = 60, loss = "distance" }\n'
        "[privacy]\nepsilon = 10.0\neta = 0.3\n"
        f'[release]\nmicrodata = "{table}"\npopulation = "{population}"\nmax_distance = 0.3\n'
    )
    return cfg


def _claim(tmp_path: Path, table: Path, population: str):
    """The claim a run makes at its door (after the approval): the table's people recorded for ``population``."""
    from flows.config import load_config
    from flows.door import read_secret_table
    from flows.plan import plan_run
    from mdp_core.problem.datasets.road import road

    cfg = load_config(_config(tmp_path, table, population))
    inst = road(**cfg.dataset.loader_params())
    _, people, _, _ = read_secret_table(plan_run(cfg), inst, 0.3)
    return PrivateStore(tmp_path / "store").claim_table(people, population)


def _rule6(tmp_path: Path, table: Path, population: str) -> list[str]:
    from flows.check import run_check

    return [r for r in run_check(_config(tmp_path, table, population)).reasons if "rule 6" in r]


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    if not (ROME / "nodes.csv").is_file():
        pytest.skip("shared Rome data ../shared/data absent")
    folder = tmp_path_factory.mktemp("agency")
    df = rome_people(1500, 21).assign(age=lambda d: np.arange(len(d)) % 90)
    path = _write(df, folder / "people.csv")
    assert _claim(folder, path, FIRST) is None
    return folder, df


@needs_rome
@pytest.mark.parametrize("version", ["%.15g", "%.8f", "dropped", "duplicated", "moved_11m", "by_osmid"])
def test_the_same_people_under_a_second_population_are_refused(first, version):
    folder, df = first
    path = folder / f"copy-{version.strip('%.')}.csv"
    if version.startswith("%"):
        _write(df.sample(frac=1.0, random_state=1), path, version)
    elif version == "dropped":
        _write(df.iloc[1:], path)
    elif version == "duplicated":
        _write(pd.concat([df, df.iloc[:1]]), path)
    elif version == "moved_11m":
        _write(move_one(df, 11.0), path)
    else:  # keyed by the osmid of each person's nearest road node of the instance
        from flows.config import load_config
        from mdp_core.problem import microdata
        from mdp_core.problem.datasets.road import road

        inst = road(**load_config(_config(folder, folder / "people.csv", FIRST)).dataset.loader_params())
        ids = microdata.locate(df, inst).record_ids
        _write(pd.DataFrame({"record": inst.records["osmid"].to_numpy()[ids]}), path)
    why = _rule6(folder, path, SECOND)
    assert len(why) == 1 and f"population {FIRST!r}" in why[0], why
    assert "RID" not in why[0] and f"{df['lat'].iloc[0]:.5f}" not in why[0]
    bare = why[0].replace("rule 6", "").replace("0.9", "")  # the rule's number and threshold: no share, no count
    assert "%" not in why[0] and re.search(r"\d", bare) is None, why[0]
    assert _claim(folder, path, SECOND)[0] == FIRST  # the claim refuses it too (two first runs)
    assert not _rule6(folder, path, FIRST)  # its own population: a version, admitted


@needs_rome
def test_a_different_population_is_accepted(first):
    folder, _ = first
    other = _write(rome_people(1500, 22), folder / "other.csv")
    assert not _rule6(folder, other, SECOND)
    assert _claim(folder, other, SECOND) is None
    assert not _rule6(folder, other, SECOND)  # and now it is that population's own


@needs_rome
def test_the_sketch_is_private_and_names_nothing(first):
    folder, df = first
    tables = folder / "store" / "private" / "tables"
    files = sorted(tables.glob("*.json"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    for f in files:
        text = f.read_text()
        assert FIRST not in f.name and f"{df['lat'].iloc[0]:.5f}" not in text and len(text) < 100_000
    assert not list((folder / "store").glob("*.json"))


def test_the_threshold_is_a_majority():
    assert SAME_SHARE == 0.5


# ------------------------------------------------------------------------------------------ versions over time
def test_a_folded_filter_is_the_filter_at_the_smaller_size():
    from mdp_core.release.similarity import _bloom, _fold

    tags = [i.to_bytes(4, "little") for i in range(500)]
    big, small = _bloom(b"k" * 32, b"cell", tags, 1 << 13), _bloom(b"k" * 32, b"cell", tags, 1 << 11)
    assert _fold(big, 1 << 11).tobytes() == small


def _people(points: np.ndarray, records: np.ndarray) -> People:
    from scipy.spatial import cKDTree

    return People(points, records[cKDTree(records).query(points)[1]], True)


@pytest.mark.slow  # a release's or a solve's seconds (docs/development.md: over ~3 s)
def test_monthly_versions_stay_one_population_for_two_years(tmp_path):
    """24 unattended monthly versions, each moving 1 % of the people, the first with 100 more than the rest (so
    its filters are twice as large): each is a version of the population's table, and its overlap with the
    sketch stays that of one month's change. The sketch kept the first version's larger filters and dropped
    every later one, so the overlap fell about 1 % a month (0.94 by month 6) and month 24's table, 79 % the
    first one's people, was no longer recognised (a person asked every month from then on)."""
    from flows.approval import VERSION_SHARE, table_is_version

    rng = np.random.default_rng(49)
    box = ([41.88, 12.47], [41.92, 12.52])
    records = rng.uniform(*box, size=(400, 2))
    table = rng.uniform(*box, size=(2800, 2))
    store = PrivateStore(tmp_path)
    assert store.claim_table(_people(table, records), FIRST) is None
    for month in range(1, 25):
        leave = 28 + (100 if month == 1 else 0)
        table = np.vstack([table[rng.permutation(len(table))[leave:]], rng.uniform(*box, size=(28, 2))])
        people = _people(table, records)
        found = store.own_overlap(people, FIRST)
        assert found is not None and min(found.new, found.old) >= 0.95, (month, found)
        assert table_is_version(tmp_path, people, FIRST) and VERSION_SHARE == 0.8
        assert store.claim_table(people, FIRST) is None


def test_a_version_half_the_size_keeps_the_other_people(tmp_path):
    """A version of 1,300 people after a population of 2,700 (filters of 4 KB against 8 KB): folding the
    population onto the version's filters set more than MAX_FILL of their bits, so the sketch became the version
    alone and the other 1,400 people were forgotten -- released as another population they were admitted (a fresh
    budget). The version is built at the population's size: they stay on record and are refused."""
    from mdp_core.release.similarity import MAX_FILL, _fill, _fold

    rng = np.random.default_rng(4949)
    box = ([41.88, 12.47], [41.92, 12.52])
    records = rng.uniform(*box, size=(400, 2))
    table = rng.uniform(*box, size=(2700, 2))
    store = PrivateStore(tmp_path)
    assert store.claim_table(_people(table, records), FIRST) is None
    version, others = table[:1300], table[1300:]
    assert store.claim_table(_people(version, records), FIRST) is None  # a version of the population's table
    own = store.own_overlap(_people(others, records), FIRST)
    assert own is not None and own.new > 0.99, own  # every person on record is still found
    refused = store.claim_table(_people(others, records), SECOND)
    assert refused is not None and refused[0] == FIRST and refused[1] > 0.99, refused
    # the premise: on its own the version's filters are half the population's, and the population's people
    # folded onto them set more than MAX_FILL of their bits (what made the merge start again from the version)
    small, full = (sketch(_people(p, records), b"k" * 32) for p in (version, table))
    assert 2 * len(small.records) == len(full.records)
    assert _fill(_fold(full.cells, len(small.cells))) > MAX_FILL
