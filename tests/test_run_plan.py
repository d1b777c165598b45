"""Issue 53: the run plan (:func:`flows.plan.plan_run`) is all a run takes from its config.

Where the config still goes, following ``release_flow``'s ``config`` (the functions it is handed to; the
config models' own methods in ``flows/config.py`` -- ``solver_settings``, ``graph_params``, ... -- not counted):

1. ``flows.release.release_flow`` (the flow's parameter; ``_flow_run_name`` reads the same parameter, for
   ``run_title``; the failure hooks read it for the release's name and store: ``flows.operate_ui.failure_target``)
2. ``flows.config.as_config``
3. ``flows.door.unsealed_config`` (the secret table's ``private-path:<tag>`` resolved in the run's store)
4. ``flows.plan.plan_run``
5. ``flows.config.release_name``
6. ``flows.config.effective_epsilon``
7. ``flows.config.store_root``
8. ``flows.config.approval_mode``
9. ``flows.config.config_hash``
10. ``flows.plan.run_title``
11. ``flows.plan.run_tags``
12. ``flows.plan.stage_plan``
13. ``mdp_core.declarations.contract.Stage.runs``
14. ``mdp_core.declarations.contract._prior_released`` (a stage's ``when``)
15. ``mdp_core.declarations.contract.Stage.upstream`` (each stage's reads, named by stage, into the plan)
16. ``mdp_core.declarations.contract._method_needs_partition`` (a read's ``reads_when``)
17. ``flows.plan.stage_params``
18. ``flows.plan.section_params``
19. ``flows.plan._dataset_section``
20. ``flows.plan._solve_section``
21. ``flows.plan._evaluate_section``
22. ``flows.plan.SECTION_PARAMS`` (its two lambdas: ``release``, ``privacy.eta``)
23. ``flows.plan.all_pairs``
24. ``flows.plan.public_prior_params``
25. ``flows.plan.release_key``

Below that, everything takes the plan or its fields: the stage loop (``run_stages``, ``_door``, ``_secret``,
``_side_runs``, ``stage_task``, ``_run_manifest``: ``flows/release.py``), the door (``flows/door.py``:
``plan_for``, ``read_secret_table``), the officer's approval (``flows/approval.py``: ``plan.approval``), the task
runner (``flows/runner.py``: ``plan.timeouts``, ``plan.runner``), the manifest (``plan.config_json``), retention
(``plan.keep_releases``) and ``mdp-release check``'s door and budget (``flows/check.py``). Two routes hand a
config in on purpose: ``flows.release.run_stages`` plans a config it is given
(:func:`flows.plan.as_plan`: the tests' shared fixtures call it with one), and the batch flow
(``flows.batch.batch_flow``, a flow entry point) tags its run with every release's ``run_tags``.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from flows.config import as_config, parse_config, to_parameter
from flows.door import plan_for, sealed_config, unsealed_config
from flows.plan import RunPlan, plan_run, run_title
from mdp_core.problem.datasets import grid

ROOT = Path(__file__).resolve().parents[1]
CONFIG_TYPES = {"ReleaseFlowConfig", "ReleaseConfig", "PrivacyConfig", "RunConfig", "EvaluateConfig", "DatasetConfig"}
# Where a function may take the config: its parsing (flows/config.py), the plan (flows/plan.py) and the flows'
# entry points (the flows' parameters, the secret table's path sealed into / resolved out of a flow run's).
CONFIG_ROOMS = {"flows/config.py", "flows/plan.py"}
ENTRY_POINTS = {
    "flows/release.py": {"release_flow"},
    "flows/batch.py": {"batch_flow"},
    "flows/door.py": {"sealed_config", "unsealed_config"},
}
GRID = {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 20, "seed": 0}}


def _takes_config() -> dict[str, set[str]]:
    """{file: names of its functions with a parameter annotated with a config type} over the project."""
    found: dict[str, set[str]] = {}
    for pkg in ("flows", "tasks", "artifacts", "mdp_core"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel.startswith("artifacts/store/"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg]
                    texts = [ast.unparse(a.annotation) for a in args if a is not None and a.annotation is not None]
                    if any(t in text for text in texts for t in CONFIG_TYPES):
                        found.setdefault(rel, set()).add(node.name)
    return found


def test_no_function_below_the_flow_takes_the_config() -> None:
    """Below the flows' entry points and the config's own rooms, no function is annotated with a config type
    (module docstring: the places the config still reaches)."""
    found = {f: names for f, names in _takes_config().items() if f not in CONFIG_ROOMS}
    assert found == ENTRY_POINTS


def _config(tmp_path: Path, **release) -> dict:
    base = {"simulate": True, "n_individuals": 40}
    return {"store": str(tmp_path / "store"), "dataset": GRID, "release": release or base}


def _table(tmp_path: Path) -> Path:
    inst = grid(4, 5, n_outputs=None, seed=0)
    pts = inst.records[["lat", "lon"]].to_numpy()[:12]
    path = tmp_path / "people.csv"
    path.write_text("lat,lon\n" + "".join(f"{a},{b}\n" for a, b in pts))
    return path


def test_plan_run_is_pure(tmp_path: Path) -> None:
    """Planning reads no store (it creates nothing) and gives the same plan twice; the plan is frozen."""
    cfg = parse_config(_config(tmp_path))
    plan = plan_run(cfg)
    assert plan == plan_run(cfg) and not (tmp_path / "store").exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.release_name = "other"  # type: ignore[misc]
    params = plan.params()
    params["solve"]["method"] = "changed"
    assert plan.stage_params["solve"]["method"] != "changed"  # a run's copy, not the plan's


def test_the_run_plans_what_check_plans(tmp_path: Path) -> None:
    """The plan a flow run makes from its parameter (the config sealed, as ``mdp-release run`` / ``serve`` /
    ``deploy`` pass it, then unsealed in the run's process: :func:`flows.release.release_flow`) is the plan
    ``mdp-release check`` makes from the file (:func:`flows.plan.plan_run` of the config as loaded): equal,
    field for field, for simulated people and for a secret table."""
    table = _table(tmp_path)
    for data in (
        _config(tmp_path),
        _config(tmp_path, microdata=str(table), population="residents", max_total_epsilon=50.0),
    ):
        cfg = parse_config(data)
        checked = plan_run(cfg)
        parameter = to_parameter(sealed_config(cfg))  # what Prefect holds: no path to the secret table
        assert "people.csv" not in str(parameter)
        run = plan_run(unsealed_config(as_config(parameter)))
        assert isinstance(run, RunPlan) and run == checked
        assert run_title(as_config(parameter)) == run.title  # the flow run's name (its parameter's) is the plan's


def test_the_door_decides_on_the_plan(tmp_path: Path) -> None:
    """flows.door.plan_for reads the plan's privacy terms: a plan with a larger protection radius is charged
    more, on the same instance (the door reads nothing of the config)."""
    inst = grid(4, 5, n_outputs=20, seed=0)  # with its mDP graph's edges at its eta
    plan = plan_run(parse_config(_config(tmp_path)))
    wider = dataclasses.replace(
        plan, privacy=dataclasses.replace(plan.privacy, protection_radius=2 * float(inst.eta), allow_unprotected=True)
    )
    charge, wider_charge = plan_for(plan, inst).plan.charge, plan_for(wider, inst).plan.charge
    assert wider_charge > charge
