"""The policy envelope binds the table, the draw and the number of runs (issue 49, item 4).

After one person approved a policy release, an unattended run may measure only a version of the
population's table (its keyed sketch: a next month's table with 1 % of its people moved is inside; an
unrelated table, or another population's, is outside), never a fresh draw (``--new-draw``), at most
``max_runs`` times, not after ``until``, and leaves by default one release's charge of the budget. Real
sketches under a real store (no server: the hook outside a flow run returns the envelope's record when the
plan is inside, None when a person would be asked).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from conftest import POPULATION
from pydantic import ValidationError

from artifacts.private import PrivateStore
from artifacts.store import Store
from flows.approval import (
    DEFAULT_RUNS,
    PolicyApprovalInput,
    budget_view,
    outside_envelope,
    read_envelope,
    table_is_version,
    wait_for_approval,
    write_envelope,
)
from flows.config import parse_config, release_name
from flows.ledger_cli import epsilon_text
from flows.plan import plan_run
from mdp_core.release.door import GraphFacts, Settings, plan_privacy
from mdp_core.release.similarity import People

GRID = {"kind": "grid", "params": {"rows": 5, "cols": 6, "n_outputs": 30, "seed": 0}}
BOX = ([41.88, 12.47], [41.92, 12.52])  # Rome's centre (lat, lon degrees)
N = 800


def _config(root: Path):
    release = {"microdata": str(root / "people.csv"), "population": POPULATION, "max_total_epsilon": 100.0}
    return parse_config({"store": str(root / "store"), "dataset": GRID, "release": release | {"approval": "policy"}})


def _plan(table: str | None = "handle-1", population: str = POPULATION):
    settings = Settings(epsilon=2.0, eta=1.5, eps_counts=1.0, population=population)
    plan = plan_privacy(settings, GraphFacts(30, (30,), 1.25, "km")).admit()
    return dataclasses.replace(plan, table=table)


def _people(points: np.ndarray) -> People:
    return People(points, points.copy(), True)


def _table(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(*BOX, size=(N, 2))


def next_month(points: np.ndarray, share: float = 0.01, metres: float = 200.0) -> np.ndarray:
    """A month's version: ``share`` of the people moved ``metres`` north (far beyond a cell)."""
    out = points.copy()
    out[: int(share * len(out)), 0] += np.rad2deg(metres / 6_371_008.8)
    return out


def _approve(store: Store, config, plan, **envelope) -> dict:
    answer = PolicyApprovalInput(approve=True, name="A. Officer", note="monthly", max_charge=50.0, **envelope)
    write_envelope(store.root, release_name(config), plan, answer, dt.datetime.now(dt.UTC).isoformat())
    found = read_envelope(store.root, release_name(config))
    assert found is not None
    return found


def test_a_next_months_version_is_inside_and_an_unrelated_or_another_populations_table_is_outside(tmp_path):
    store, config = Store(tmp_path / "store"), _config(tmp_path)
    first = _table(1)
    assert PrivateStore(store.root).claim_table(_people(first), POPULATION) is None  # the approved run's claim
    _approve(store, config, _plan("handle-1"))
    month = next_month(first)
    assert table_is_version(store.root, _people(month), POPULATION)
    assert table_is_version(store.root, _people(next_month(first, share=0.1)), POPULATION)  # 10 % moved: inside
    assert not table_is_version(store.root, _people(next_month(first, share=0.3)), POPULATION)  # 30 %: a person
    record = wait_for_approval(plan_run(config).approval, store, _plan("handle-2"), _people(month))
    assert record is not None and record["mode"] == "policy" and "run 1 of 12" in record["note"]
    unrelated = _table(2)
    assert not table_is_version(store.root, _people(unrelated), POPULATION)
    assert (
        wait_for_approval(plan_run(config).approval, store, _plan("handle-3"), _people(unrelated)) is None
    )  # a person decides
    others = _table(3)
    assert PrivateStore(store.root).claim_table(_people(others), "others") is None
    assert not table_is_version(store.root, _people(others), POPULATION)
    envelope = read_envelope(store.root, release_name(config))
    view = budget_view(store.root, _plan(), 100.0)
    (why,) = outside_envelope(envelope, _plan("handle-4"), view, version=False)
    assert why == f"the table is not recognised as a version of population {POPULATION!r}'s table"
    assert "0." not in why  # the share is never shown
    assert (
        wait_for_approval(plan_run(config).approval, store, _plan("handle-4"), None) is None
    )  # no people to compare: outside
    half = np.vstack([first[: N // 2], unrelated[: N // 2]])  # half of the population's people, half others
    assert not table_is_version(store.root, _people(half), POPULATION)
    assert not table_is_version(store.root, _people(first[: N // 2]), POPULATION)  # half of its people only
    assert (read_envelope(store.root, release_name(config)) or {})["runs_used"] == 1  # refusals use no run


def test_a_new_draw_is_outside_even_with_the_approved_table(tmp_path):
    store, config = Store(tmp_path / "store"), _config(tmp_path)
    people = _people(_table(1))
    PrivateStore(store.root).claim_table(people, POPULATION)
    envelope = _approve(store, config, _plan())
    view = budget_view(store.root, _plan(), 100.0)
    assert outside_envelope(envelope, _plan(), view) == []
    assert outside_envelope(envelope, _plan(), view, new_draw=True) == [
        "a fresh secret draw (--new-draw) is outside every envelope"
    ]
    assert wait_for_approval(plan_run(config).approval, store, _plan(), people, new_draw=True) is None
    assert wait_for_approval(plan_run(config).approval, store, _plan(), people) is not None


def test_the_unattended_runs_are_counted_and_a_new_approval_counts_afresh(tmp_path):
    store, config = Store(tmp_path / "store"), _config(tmp_path)
    _approve(store, config, _plan(), max_runs=2)
    notes = [(wait_for_approval(plan_run(config).approval, store, _plan()) or {}).get("note", "") for _ in range(2)]
    assert "run 1 of 2" in notes[0] and "run 2 of 2" in notes[1]
    assert wait_for_approval(plan_run(config).approval, store, _plan()) is None  # used up: a person decides
    envelope = read_envelope(store.root, release_name(config))
    assert envelope is not None and envelope["runs_used"] == 2
    (why,) = outside_envelope(envelope, _plan(), budget_view(store.root, _plan(), 100.0))
    assert why == "the envelope's unattended runs are used (2 of 2)"
    _approve(store, config, _plan())  # a person approved again: the default number of runs, none used
    assert (read_envelope(store.root, release_name(config)) or {})["max_runs"] == DEFAULT_RUNS
    assert wait_for_approval(plan_run(config).approval, store, _plan()) is not None
    assert (read_envelope(store.root, release_name(config)) or {})["runs_used"] == 1
    old = dict(envelope, max_runs=None, runs_used=None)  # an envelope of the format before: bounds no runs
    old.pop("max_runs"), old.pop("runs_used")
    assert "the envelope's unattended runs are used (0 of 0)" in outside_envelope(old, _plan(), None)


def test_an_envelope_past_its_end_date_is_outside(tmp_path):
    store, config = Store(tmp_path / "store"), _config(tmp_path)
    envelope = _approve(store, config, _plan(), until="2026-12-31")
    view = budget_view(store.root, _plan(), 100.0)
    assert envelope["until"] == "2026-12-31"
    assert outside_envelope(envelope, _plan(), view, today=dt.date(2026, 12, 31)) == []  # the last day is in
    (why,) = outside_envelope(envelope, _plan(), view, today=dt.date(2027, 1, 1))
    assert why == "the envelope ended on 2026-12-31"
    _approve(store, config, _plan(), until="2000-01-01")
    assert wait_for_approval(plan_run(config).approval, store, _plan()) is None
    with pytest.raises(ValidationError, match="YYYY-MM-DD"):
        PolicyApprovalInput(approve=True, name="A", max_charge=1.0, until="31/12/2026")


def test_by_default_one_releases_charge_of_the_budget_is_never_spent_unattended(tmp_path):
    store, config = Store(tmp_path / "store"), _config(tmp_path)
    plan = _plan()
    envelope = _approve(store, config, plan)
    charge = float(epsilon_text(plan.charge.value))
    assert envelope["min_left"] == charge > 0 and envelope["max_runs"] == DEFAULT_RUNS and envelope["until"] is None
    roomy = budget_view(store.root, plan, config_cap=3 * charge)  # leaves two charges: inside
    assert outside_envelope(envelope, plan, roomy) == []
    last = budget_view(store.root, plan, config_cap=1.5 * charge)  # would leave half a charge: a person decides
    (why,) = outside_envelope(envelope, plan, last)
    assert why.startswith("it would leave ") and why.endswith(f"the envelope keeps {epsilon_text(charge)}")
    explicit = _approve(store, config, plan, min_left=0.0)  # a person may say 0: their decision, recorded
    assert explicit["min_left"] == 0.0 and outside_envelope(explicit, plan, last) == []
