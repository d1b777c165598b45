"""``mdp-release ledger rename OLD NEW`` (issue 49: "a rename stays an explicit, recorded ledger command").

The population's budget (cap, spend, charges), its table versions and draws and its keyed sketch move to the new
name, recorded in both hash chains; the old name then refuses every new charge and names the new one; the renamed
population's next table is its own version, not "another population's"; a different population is still judged
by similarity. Real Rome road data from ``../shared/data`` for the door (skipped when absent).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from artifacts.ledger import BudgetRefused
from artifacts.private import PrivateStore
from artifacts.private_folder import LedgerError
from flows.cli import main
from mdp_core.errors import InputError
from mdp_core.release.similarity import People

OLD, NEW, OTHER = "rome-2025", "rome-residents", "rome-visitors"
VERSION = "ab" * 32


def k(i: int) -> str:
    """A charge key (64 hex)."""
    return f"{i:064x}"


def people(seed: int, n: int = 600) -> People:
    rng = np.random.default_rng(seed)
    box = ([41.88, 12.47], [41.92, 12.52])
    return People(rng.uniform(*box, size=(n, 2)), rng.uniform(*box, size=(n, 2)), True)


def moved(p: People, share: float) -> People:
    """Another month's version: ``share`` of the people replaced by others."""
    n = int(len(p.points) * share)
    fresh = people(99, n)
    return People(np.vstack([p.points[n:], fresh.points]), p.records, True)


def _renamed(tmp_path: Path) -> tuple[PrivateStore, People, object]:
    """OLD with a sketch, a draw and two charges under a cap of 5, renamed to NEW."""
    priv = PrivateStore(tmp_path)
    mine = people(1)
    assert priv.claim_table(mine, OLD) is None
    draw, _ = priv.draw(OLD, VERSION)
    priv.charge(OLD, k(1), 1.5, {"kind": "perturb"}, 5.0, True)
    priv.charge(OLD, k(2), 0.5, {"kind": "counts"}, None, True)
    before = priv.budget(OLD)
    after = priv.rename(OLD, NEW, "A. Officer", "the population's name follows the agency's register")
    assert (after.cap, after.spent, after.left, after.n_charges) == (before.cap, before.spent, before.left, 2)
    return priv, mine, draw


def test_a_rename_moves_the_budget_draws_and_sketch_and_is_recorded(tmp_path):
    priv, mine, draw = _renamed(tmp_path)
    old, new = priv.entries(OLD), priv.entries(NEW)  # both chains verify (hashed and MACed)
    assert old[-1]["kind"] == "rename" and old[-1]["detail"] == {"to": NEW} and old[-1]["by"] == "A. Officer"
    assert [e["kind"] for e in new] == ["genesis", "renamed-from"]
    carried = new[1]["detail"]
    assert carried["from"] == OLD and carried["from_seq"] == old[-1]["seq"]
    assert carried["from_head"] == priv.budget(OLD).head  # the old chain's last entry, by its hash
    assert carried["charges"] == [[k(1), 1.5], [k(2), 0.5]]
    (disclosed,) = priv.history(NEW, 1)  # published in the renamed population's releases
    assert disclosed["kind"] == "renamed-from" and disclosed["spent_before"] == 2.0 and disclosed["cap"] == 5.0
    same, made = priv.draw(NEW, VERSION)  # the same draw, now the new name's
    assert not made and same.commitment == draw.commitment and same.population == NEW
    assert priv.load(draw.commitment).population == NEW
    assert priv.charge(NEW, k(1), 1.5, {}, None, True) == (priv.budget(NEW), False)  # charged once, ever
    b, charged = priv.charge(NEW, k(3), 1.0, {}, None, True)  # the budget continues: 2 + 1 of the cap 5
    assert charged and b.spent == 3.0 and b.left == 2.0
    with pytest.raises(BudgetRefused, match="would bring"):
        priv.charge(NEW, k(4), 2.5, {}, None, True)
    assert priv.position(NEW, (k(2),))["seq"] == 1  # a carried charge sits at the rename
    assert priv.rename(OLD, NEW, "A. Officer", "again").seq == priv.budget(NEW).seq  # re-run: nothing new


def test_the_old_name_refuses_new_charges_and_points_to_the_new_one(tmp_path):
    priv, mine, _ = _renamed(tmp_path)
    for refused in (
        lambda: priv.charge(OLD, k(9), 0.1, {}, None, True),
        lambda: priv.precheck(OLD, {k(9): 0.1}, None, True),
        lambda: priv.set_cap(OLD, 4.0, "x", "y"),
        lambda: priv.rename(OLD, OTHER, "x", "y"),
    ):
        with pytest.raises(BudgetRefused, match=f"renamed to '{NEW}'.*population = '{NEW}'"):
            refused()
    assert priv.precheck(OLD, {k(1): 1.5}, None, True).spent == 2.0  # nothing new: a re-run measures nothing
    assert priv.claim_table(moved(mine, 0.01), OLD)[0] == NEW  # its people are NEW's now


def test_the_renamed_population_s_next_table_is_its_own_and_others_are_still_judged(tmp_path):
    priv, mine, _ = _renamed(tmp_path)
    nxt = moved(mine, 0.01)  # next month's table
    assert priv.similar_population(nxt, NEW) is None
    assert priv.claim_table(nxt, NEW) is None  # accepted as a version of the renamed population
    assert priv.own_overlap(nxt, NEW).same
    name, share = priv.claim_table(nxt, OTHER)  # the same people under a fresh name: refused, naming NEW
    assert name == NEW and share > 0.5
    assert priv.claim_table(people(7), OTHER) is None  # different people: a population of their own
    assert len(list((tmp_path / "private" / "tables").glob("*.json"))) == 2  # OLD's sketch moved, not copied


def test_a_rename_needs_an_old_ledger_and_a_fresh_name(tmp_path):
    priv = PrivateStore(tmp_path)
    with pytest.raises(InputError, match="no ledger"):
        priv.rename(OLD, NEW, "x", "y")
    priv.charge(OLD, k(1), 1.0, {}, 5.0, True)
    priv.charge(NEW, k(2), 1.0, {}, 5.0, True)
    with pytest.raises(InputError, match="already has a ledger"):
        priv.rename(OLD, NEW, "x", "y")
    with pytest.raises(InputError, match="--by"):
        priv.rename(OLD, OTHER, " ", "y")
    with pytest.raises(InputError, match="different name"):
        priv.rename(OLD, OLD, "x", "y")
    assert [e["kind"] for e in priv.entries(OLD)] == ["genesis", "cap", "charge"]  # nothing recorded


def test_the_command(tmp_path, capsys):
    priv = PrivateStore(tmp_path)
    priv.charge(OLD, k(1), 1.0, {}, 5.0, True)
    args = ["ledger", "--store", str(tmp_path), "rename", OLD, NEW, "--by", "A. Officer", "--why", "register"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["population"] == NEW and out["spent"] == 1.0 and out["cap"] == 5.0
    assert main(["ledger", "--store", str(tmp_path), "rename", NEW, OTHER, "--by", "", "--why", "w"]) == 2
    assert "--by" in capsys.readouterr().err


def test_the_overview_says_where_the_budget_went(tmp_path, capsys):
    _renamed(tmp_path)
    assert main(["ledger", "--store", str(tmp_path), "--json"]) == 0
    rows = {r["population"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[OLD]["status"] == f"renamed to {NEW}"
    assert rows[NEW]["status"] == "ok" and rows[NEW]["spent"] == 2.0 and rows[NEW]["cap"] == 5.0


# ----------------------------------------------------------------------------------------- through the door
def test_at_the_door_the_renamed_population_s_next_table_is_its_own(tmp_path, capsys):
    from test_population_similarity import ROME, _claim, _config, _rule6, _write, move_one, rome_people

    from flows.check import run_check

    if not (ROME / "nodes.csv").is_file():
        pytest.skip("shared Rome data ../shared/data absent")
    df = rome_people(1500, 31)
    first = _write(df, tmp_path / "people.csv")
    assert _claim(tmp_path, first, OLD) is None
    PrivateStore(tmp_path / "store").charge(OLD, k(1), 1.0, {}, 30.0, True)
    nxt = _write(move_one(df, 11.0), tmp_path / "next.csv")  # next month's table
    assert any(f"population {OLD!r}" in r for r in _rule6(tmp_path, nxt, NEW))  # before: "another population's"
    store = str(tmp_path / "store")
    assert main(["ledger", "--store", store, "rename", OLD, NEW, "--by", "A. Officer", "--why", "register"]) == 0
    assert not _rule6(tmp_path, nxt, NEW)  # after: a version of its own
    assert _claim(tmp_path, nxt, NEW) is None
    assert any(f"population {NEW!r}" in r for r in _rule6(tmp_path, nxt, OLD))  # the old name points to the new
    reasons = run_check(_config(tmp_path, nxt, OLD)).reasons
    assert any(f"renamed to {NEW!r}" in r for r in reasons), reasons  # and its ledger refuses any charge
    assert any(f"population {NEW!r}" in r for r in _rule6(tmp_path, nxt, OTHER))  # still judged by similarity
    other = _write(rome_people(1500, 32), tmp_path / "other.csv")
    assert not _rule6(tmp_path, other, OTHER)  # different people: a population of their own


def test_a_rolled_back_ledger_is_not_carried_to_a_new_name(tmp_path):
    from test_ledger import ledger_dir, publish

    priv = PrivateStore(tmp_path)
    for i in (1, 2):
        b, _ = priv.charge(OLD, k(i), 1.0, {}, 5.0, True)
    publish(tmp_path, "r1", b, pop=OLD)
    (ledger_dir(tmp_path, OLD) / f"{b.seq:08d}.json").unlink()  # the published last charge rolled back
    with pytest.raises(LedgerError, match="published ledger head"):
        priv.rename(OLD, NEW, "x", "y")
    assert priv.entries(NEW) == [] and priv.entries(OLD)[-1]["kind"] == "charge"  # nothing recorded or moved
