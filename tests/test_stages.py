"""The flow runs its stages from their declaration (issue 42): ``mdp_core.declarations.contract.STAGES`` says what each
stage reads, which config section feeds its parameters and when it runs; ``flows.release.run_stages`` iterates
it, ``stage_params`` and the task table are derived. A stage added to a copy of the declaration runs in its
declared place with no edit to flows/release.py."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import release_config, run_stages
from prefect import task

from artifacts.store import ArtifactRef, Store
from flows import release
from flows.config import parse_config
from flows.plan import plan_run
from mdp_core.declarations import contract
from tasks import evaluate
from tasks import publish as publish_task

SMALL = {  # a 3 x 3 grid, simulated people, one evaluation point: the whole loop in about 2 s
    "dataset": {"kind": "grid", "params": {"rows": 3, "cols": 3, "n_outputs": 4, "seed": 2}},
    "privacy": {"epsilon": 3.0, "eta": 2.0},
    "release": {"simulate": True, "n_individuals": 50},
    "evaluate": {"baselines": [], "eps_factors": [0.5, 1.0], "counts_eps": [1.0], "counts_seeds": 1},
}
CALLS: list[str] = []


@task(name="approve")
def approve(store: str, params: dict[str, Any], instance: ArtifactRef) -> ArtifactRef:
    """A no-op stage: hands the instance on (what an officer's check of it would read)."""
    CALLS.append(f"approve {params}")
    return instance


def test_declared_reads_are_the_tasks_keywords() -> None:
    """Each cached stage reads exactly its task's upstream keywords; the publish stage, released_files'."""
    for st in contract.STAGES:
        if st.cached:
            keywords = list(inspect.signature(release.task_at(st.task).fn).parameters)[2:]  # after store, params
            assert set(st.inputs) == set(keywords), st.name
    assert set(contract.stage("publish").inputs) == set(inspect.signature(publish_task.released_files).parameters)


def test_reads_when_and_when() -> None:
    """A conditional read is None where its predicate fails; a stage that does not run gives its readers None."""
    solve, export = contract.stage("solve"), contract.stage("export")
    outputs = {"export": "inst", "partition": "part"}
    for method, partition in (("lp", None), ("benders", "part")):
        cfg = SimpleNamespace(solve=SimpleNamespace(method=method))
        assert solve.upstream(cfg, outputs) == {"instance": "inst", "partition": partition}
    assert export.upstream(None, {"ingest": "d", "graph": "g"}) == {"dataset": "d", "graph": "g", "prior": None}
    assert not contract.stage("prior").runs(SimpleNamespace(release=SimpleNamespace(prior_source="dataset")))
    with pytest.raises(ValueError, match="not an earlier stage"):
        contract.check_stages((contract.Stage("a", "", reads="x=b"), contract.Stage("b", "")))


def test_the_plan_follows_the_declaration() -> None:
    cfg = parse_config(SMALL)
    plan = release.stage_plan(cfg)
    ran = [s for s in plan if s in contract.STAGE_NAMES]
    assert ran == [s.name for s in contract.STAGES if s.cached and s.runs(cfg)]
    first_secret = next(s.name for s in contract.STAGES if s.reads_secret)
    before = contract.CACHED_STAGES[: contract.CACHED_STAGES.index(first_secret)]
    assert plan[: plan.index("door")] == [s for s in before if s in ran]  # before it, whether or not it runs
    assert plan[plan.index("draw") - 1] == contract.stage("measure").inputs["instance"]
    params = release.stage_params(
        cfg
    )  # before the loop: every stage that reads nothing secret (the others: at the draw)
    assert {s for s in ran if not contract.stage(s).reads_secret} <= params.keys()
    assert not any("draw" in params.get(s, {}) for s in ran)


def added_stage(monkeypatch, section: str = "privacy.epsilon") -> tuple[contract.Stage, ...]:
    """The add-a-stage checklist's declaration, in a copy of STAGES put in its place: ``approve`` (task
    :func:`approve`, reading the instance, parameters from ``section``), declared before ``solve``."""
    new = contract.Stage("approve", "a no-op check of the instance", task=f"{__name__}:approve")
    new = dataclasses.replace(new, reads="instance=export", params=section)
    at = contract.STAGE_NAMES.index("solve")
    stages = (*contract.STAGES[:at], new, *contract.STAGES[at:])
    contract.check_stages(stages)
    monkeypatch.setattr(contract, "STAGES", stages)
    CALLS.clear()
    return stages


@pytest.mark.parametrize(("section", "given"), [("privacy.epsilon", {"epsilon": 3.0}), ("", {})])
def test_an_added_stage_runs_in_its_declared_place(tmp_path, monkeypatch, section, given) -> None:
    """The add-a-stage checklist: a declaration (here in a copy of STAGES) and a task; the flow's loop runs it
    after the stages it reads, gives it its config section's parameters (none declared: ``{}``), and the stages
    after it run as before."""
    stages = added_stage(monkeypatch, section)
    cfg = parse_config({**SMALL, "store": str(tmp_path)})
    s = str(tmp_path)
    params = release.stage_params(cfg)
    assert given.items() <= params["approve"].items()  # its section's parameters (the export's own besides: its kind's
    assert params["approve"] == params["export"] if section else params["approve"] == {}  # file columns, flows.plan)
    seen: dict[str, dict[str, Any]] = {}

    def run(stage: str, **upstream: Any) -> ArtifactRef:
        seen[stage] = upstream
        CALLS.append(stage)
        return release.task_at(contract.stage(stage).task).fn(s, params[stage], **upstream)

    def side(refs: dict[str, ArtifactRef], stack: Any) -> Any:
        CALLS.append("points")
        specs = evaluate.point_specs(params["evaluate"])
        return lambda: [evaluate.evaluate_point.fn(s, p, refs["export"], None) for p in specs]

    state = release.run_stages(cfg, Store(s), params, run, side=side)
    expected = [n for n in release.stage_plan(cfg) if n in {st.name for st in stages} or n == "points"]
    assert (
        CALLS
        == expected[: expected.index("approve")]
        + ["approve", f"approve {params['approve']}"]
        + expected[expected.index("approve") + 1 :]
    )
    at = [st.name for st in stages].index("approve")  # between its declared neighbours, whatever runs between them
    assert CALLS.index(stages[at - 1].name) < CALLS.index("approve") < CALLS.index(stages[at + 1].name)
    assert seen["approve"] == {"instance": state.refs["export"]} and state.refs["approve"] == state.refs["export"]
    assert set(state.refs) == {st.name for st in stages if st.cached and st.runs(cfg)}
    assert state.draw is not None and "draw" in params["measure"]
    assert release.stage_task("approve", plan_run(cfg), Store(s)).name == "approve"


def test_simulated_people_with_a_public_prior_run_the_prior_stage_before_the_draw(tmp_path) -> None:
    """A uniform prior reads nothing secret: its parameters are known before the simulated people are drawn
    (after export), so the prior stage, declared before export, runs (it raised KeyError 'prior' before)."""
    cfg = parse_config({**SMALL, "store": str(tmp_path), "release": {**SMALL["release"], "prior": "uniform"}})
    s = str(tmp_path)
    params = release.stage_params(cfg)
    assert params["prior"] == {"source": "uniform"} and "prior" in release.stage_plan(cfg)

    def run(stage: str, **upstream: Any) -> ArtifactRef:
        return release.task_at(contract.stage(stage).task).fn(s, params[stage], **upstream)

    state = release.run_stages(cfg, Store(s), params, run, until="draw")
    assert "prior" in state.refs and state.draw is not None
    assert params["prior"] == {"source": "uniform"}  # the draw leaves a public prior's parameters as they were


def test_the_shared_fixtures_run_every_declared_stage_an_added_one_included(tmp_path, monkeypatch) -> None:
    """``conftest.run_stages`` -- behind the shared ``released`` fixture and every test that builds a release
    without a server -- is the flow's own loop: its outputs are exactly the declared cached stages that run for
    the config, a stage added by the checklist included."""
    stages = added_stage(monkeypatch)
    root = tmp_path / "store"
    cfg = release_config(root)
    refs = run_stages(root, cfg)
    assert set(refs) == {st.name for st in stages if st.cached and st.runs(cfg)}
    assert CALLS == [f"approve {release.stage_params(cfg)['approve']}"] and refs["approve"] == refs["export"]
