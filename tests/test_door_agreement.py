"""Issue 39: ``mdp-release check`` and the run's door agree, verdict and charges, on generated configs; issue 53:
they decide on the same run plan (:func:`flows.plan.plan_run`).

The run goes through the flow's own loop (:func:`flows.release.run_stages`) with the stage tasks' ``.fn`` (real
ingest and graph stages, real private store) and stops at the first stage after the door; ``check`` builds the
instance its own way (the dataset loader and a neighbour search, no store). Both must reach the same verdict and the same charge.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import to_toml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifacts.store import Store
from flows.check import run_check
from flows.config import parse_config
from flows.release import _TASKS, run_stages, stage_params, stage_plan
from mdp_core.errors import InputError, PrivacyError
from mdp_core.problem.datasets import grid

POPULATIONS = ("residents-a", "residents-b", "simulated-x")


class _Stop(Exception):
    """The run got past the door."""


def _people(folder: Path) -> Path:
    inst = grid(4, 5, n_outputs=None, seed=0)
    rng = np.random.default_rng(3)
    home = rng.integers(0, inst.n_records, size=60)
    pts = inst.records[["lat", "lon"]].to_numpy()[home] + rng.normal(0, 0.002, size=(60, 2))
    path = folder / "people.csv"
    pd.DataFrame({"lat": pts[:, 0], "lon": pts[:, 1]}).to_csv(path, index=False)
    return path


configs = st.fixed_dictionaries(
    {
        "eta": st.sampled_from([0.05, 0.6, 1.2, 2.0]),
        "radius": st.sampled_from([None, 0.5, 1.2, 3.0]),
        "max_distance": st.sampled_from([None, 0.1, 1.0, 5.0]),
        "population": st.sampled_from(POPULATIONS),
        "allow_unprotected": st.booleans(),
        "simulate": st.booleans(),
        "cap": st.sampled_from([None, 3.0, 100.0]),
        "prior": st.sampled_from(["dataset", "dp"]),
        "max_stretch": st.sampled_from([1.0, 2.0]),
    }
)


def _config(root: Path, table: Path, c: dict) -> dict:
    privacy = {"epsilon": 2.0, "eta": c["eta"], "allow_unprotected": c["allow_unprotected"]}
    privacy |= {"max_stretch": c["max_stretch"]} | ({"protection_radius": c["radius"]} if c["radius"] else {})
    if c["simulate"]:
        release: dict = {"simulate": True, "n_individuals": 50}
    else:
        release = {"microdata": str(table), "population": c["population"], "prior": c["prior"], "eps_prior": 0.5}
        release |= {"max_total_epsilon": c["cap"]} if c["cap"] else {}
    release |= {"max_distance": c["max_distance"]} if c["max_distance"] is not None else {}
    return {
        "store": str(root),
        "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 20, "seed": 0}},
        "privacy": privacy,
        "release": release | {"eps_counts": 1.0},
    }


def _run_door(cfg, run_plans: list) -> tuple[bool, float | None, str]:
    """(past the door, its plan's charge, the refusal) of the run's own route; ``run_plans`` gets the run plan
    its door decided on (flows.plan.RunPlan)."""
    s = str(cfg.store)
    p = stage_params(cfg)
    plans = []
    steps = stage_plan(cfg)

    def run(stage: str, **upstream):
        if steps.index(stage) > steps.index("door"):
            raise _Stop
        return _TASKS[stage].fn(s, p[stage], **upstream)

    import flows.release as release

    original = release.plan_for

    def spy(config, inst):
        run_plans.append(config)
        door = original(config, inst)
        plans.append(door.plan)
        return door

    release.plan_for = spy
    try:
        run_stages(cfg, Store(s), p, run, until="draw")
    except _Stop:
        return True, float(plans[-1].charge), ""
    except (PrivacyError, InputError) as exc:
        return False, float(plans[-1].charge) if plans else None, str(exc)
    finally:
        release.plan_for = original
    raise AssertionError("the loop ran every stage up to the draw")


def _check(path: Path) -> tuple:
    """``mdp-release check``'s report, and the run plans its door decided on (flows.door.plan_for's)."""
    import flows.door as door

    seen: list = []
    original = door.plan_for

    def spy(plan, inst):
        seen.append(plan)
        return original(plan, inst)

    door.plan_for = spy
    try:
        return run_check(path), seen
    finally:
        door.plan_for = original


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(c=configs)
def test_check_and_run_agree(c: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table = _people(folder)
        for round_ in range(2):  # twice in one store: the second sees what the first claimed
            data = _config(folder / "store", table, c if round_ == 0 else c | {"population": "residents-a"})
            try:
                cfg = parse_config(data)
            except InputError:
                return  # an invalid config is refused before either route starts
            path = folder / f"release-{round_}.toml"
            path.write_text(to_toml(data))
            rep, checked = _check(path)
            run_plans: list = []
            accepted, charge, why = _run_door(cfg, run_plans)
            if checked and run_plans:  # both reached the door: on one plan (flows.plan.plan_run), field for field
                assert checked[-1] == run_plans[-1], c
            assert rep.accepted == accepted, (c, rep.reasons, why)
            if charge is not None and "budget" in rep.sections:
                assert rep.sections["budget"]["charge"] == charge, (c, rep.sections["budget"], charge)
            if not accepted:  # the run stops at its first refusal: one of check's reasons, word for word
                assert any(r.split(" (at most")[0] in why for r in rep.reasons), (rep.reasons, why)
