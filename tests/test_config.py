"""Config validation: unknown keys, wrong types, out-of-range values, bad TOML -- one clear line each."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from flows.config import RELEASE_GAP_REL, ReleaseFlowConfig, load_config, parse_config
from mdp_core.declarations import contract
from mdp_core.errors import InputError


def test_default_config_is_valid_and_small():
    cfg = load_config(None)
    assert isinstance(cfg, ReleaseFlowConfig)
    assert cfg.dataset.kind == "grid" and cfg.privacy.epsilon is None  # the dataset's own eps


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"privacy": {"epsilon": 0}}, "privacy.epsilon"),
        ({"privacy": {"epsilon": -1.0}}, "greater than 0"),
        ({"privacy": {"eta": "2"}}, "privacy.eta"),
        ({"privacy": {"epsilon": float("nan")}}, "privacy.epsilon"),
        ({"solve": {"method": "magic"}}, "solve.method"),
        ({"solve": {"threads": -1}}, "solve.threads"),
        ({"partition": {"subsets": 0}}, "partition.subsets"),
        ({"bogus": 1}, "bogus: unknown key"),
        ({"privacy": {"epsilon": 1.0, "delta": 0.1}}, "privacy.delta: unknown key"),
        ({"dataset": {"kind": "grid", "params": {"rows": 3, "colz": 4}}}, "colz"),
        ({"dataset": {"kind": "grid", "params": {"epsilon": 3.0}}}, "[privacy]"),
        ({"release": {"simulate": True, "n_individuals": 1.5}}, "release.n_individuals"),
        ({"release": {"eps_counts": 1.0}}, "neither microdata nor simulate"),
        ({"release": {"microdata": "p.csv"}}, "population is required with microdata"),
        ({"release": {"microdata": "p.csv", "population": "x", "simulate": True}}, "both set"),
        ({"release": {"microdata": "p.csv", "population": "Rome People"}}, "release.population"),
        ({"release": {"microdata": "p.csv", "population": "rome", "n_individuals": 5}}, "n_individuals"),
        ({"release": {"simulate": True, "population": "rome"}}, "population is for microdata"),
        ({"privacy": {"max_stretch": 0.5}}, "privacy.max_stretch"),
        ({"privacy": {"protection_radius": 0.0}}, "privacy.protection_radius"),
        ({"privacy": {"epsilom": 1.0}}, "privacy.epsilom: unknown key (did you mean 'epsilon'?)"),
        ({"release": {"simulate": True, "n_individual": 3}}, "(did you mean 'n_individuals'?)"),
        ({"relase": {"simulate": True}}, "relase: unknown key (did you mean 'release'?)"),
        ({"run": {"timeouts": {"slove": 3}}}, "run.timeouts.slove: unknown key (did you mean 'solve'?)"),
    ],
)
def test_bad_config_values_are_named(data, fragment):
    with pytest.raises(InputError) as err:
        parse_config(data, "cfg.toml")
    assert fragment in str(err.value)
    assert str(err.value).startswith("cfg.toml:")
    assert "\n" not in str(err.value)


def test_toml_file_round_trip(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        'store = "s"\n[privacy]\nepsilon = 5\neta = 1.5\n[dataset]\nkind = "synthetic"\nparams = { n_records = 30 }\n'
        "[release]\nsimulate = true\n"
    )
    cfg = load_config(p)
    assert cfg.privacy.epsilon == 5.0 and cfg.dataset.params == {"n_records": 30}
    assert cfg.store == str(tmp_path / "s")  # relative to the config file's folder


def test_a_config_file_must_say_what_it_releases(tmp_path):
    """Forgetting ``microdata`` never publishes simulated people: a file without [release], or with neither
    key, is an error naming both; the built-in default (no --config) and the demo simulate explicitly."""
    from flows.config import DEFAULT_CONFIG

    p = tmp_path / "c.toml"
    p.write_text('name = "rome"\n[privacy]\nepsilon = 5.0\n')
    with pytest.raises(InputError, match="microdata = FILE .*simulate = true"):
        load_config(p)
    p.write_text('name = "rome"\n[release]\neps_counts = 1.0\n')
    with pytest.raises(InputError, match="neither microdata nor simulate"):
        load_config(p)
    assert (
        load_config(None).release.simulate and ReleaseFlowConfig().release.simulate and DEFAULT_CONFIG.release.simulate
    )
    assert load_config(None).release.simulated_individuals == 10_000
    p.write_text('[release]\nmicrodata = "p.csv"\npopulation = "rome-residents"\n')
    cfg = load_config(p)
    assert not cfg.release.simulate and cfg.release.simulated_individuals is None
    assert cfg.release.population == "rome-residents" and cfg.privacy.max_stretch >= 1


def test_unreadable_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[privacy\nepsilon = ")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(InputError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def test_config_paths_resolve_against_the_config_folder_not_the_working_directory(tmp_path, monkeypatch):
    from flows.config import store_root

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "nodes.csv").write_text("x")
    (conf / "edges.csv").write_text("x")
    p = conf / "road.toml"
    p.write_text(
        'store = "out/store"\n[dataset]\nkind = "road"\nparams = { nodes = "nodes.csv", edges = "edges.csv" }\n'
        "[release]\nsimulate = true\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = load_config("conf/road.toml")
    assert cfg.store == str(conf / "out" / "store")
    assert cfg.dataset.params == {"nodes": str(conf / "nodes.csv"), "edges": str(conf / "edges.csv")}
    assert store_root(cfg) == conf / "out" / "store"
    # bundled data names are not paths
    p.write_text('[dataset]\nkind = "text"\nparams = { vectors = "glove-6b-50d" }\n[release]\nsimulate = true\n')
    assert load_config(p).dataset.params["vectors"] == "glove-6b-50d"


def test_default_store_ignores_the_working_directory(tmp_path, monkeypatch):
    from flows.config import default_store, store_root

    monkeypatch.delenv("MDP_RELEASE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    root = store_root(ReleaseFlowConfig())
    assert root == default_store() and tmp_path not in root.parents
    monkeypatch.setenv("MDP_RELEASE_STORE", str(tmp_path / "mine"))
    assert store_root(ReleaseFlowConfig()) == tmp_path / "mine"


def test_stage_enum_names_and_run_section():
    from flows.config import STAGE_NAMES, config_hash, release_name
    from flows.release import release_flow

    assert STAGE_NAMES == contract.STAGE_NAMES  # the declared stages, in run order
    # the run form shows refresh_from as a drop-down of the stage names (a JSON-schema enum)
    schema = release_flow.parameters.model_dump()["properties"]["refresh_from"]
    assert list(STAGE_NAMES) in [a.get("enum") for a in schema.get("anyOf", [schema])]
    cfg = parse_config(
        {
            "privacy": {"epsilon": 10.0},
            "solve": {"method": "benders"},
            "run": {"task_runner": "dask", "timeouts": {"solve": 60}},
        }
    )
    assert release_name(cfg) == "grid-eps10-benders" and cfg.run.timeouts.solve == 60
    # how it runs is not what it computes: the same hash whatever the runner
    assert config_hash(cfg) == config_hash(cfg.model_copy(update={"run": ReleaseFlowConfig().run}))
    with pytest.raises(InputError, match="run.task_runner"):
        parse_config({"run": {"task_runner": "ray"}})
    with pytest.raises(InputError, match="name"):
        parse_config({"name": "Not A Key"})


def test_every_stage_timeout_is_applied_to_the_task_the_flow_runs(tmp_path):
    """[run.timeouts]: each key is a stage, and the task the flow runs for it (flows.release.stage_task,
    the publication included) carries that timeout; the evaluate stage's own solves take evaluate's."""
    from artifacts.store import Store
    from flows.config import STAGE_NAMES, TimeoutsConfig
    from flows.plan import plan_run
    from flows.release import stage_task

    assert tuple(TimeoutsConfig.model_fields) == STAGE_NAMES
    limits = {stage: 10.0 + i for i, stage in enumerate(STAGE_NAMES)}
    cfg = parse_config({"run": {"timeouts": limits}})
    store = Store(tmp_path / "store")
    assert {s: stage_task(s, plan_run(cfg), store).timeout_seconds for s in STAGE_NAMES} == limits
    assert stage_task("evaluate_point", plan_run(cfg), store).timeout_seconds == limits["evaluate"]
    assert stage_task("publish", plan_run(load_config(None)), store).timeout_seconds is None  # unset: no limit
    assert (
        stage_task("ingest", plan_run(cfg), store).retries == 2
        and stage_task("solve", plan_run(cfg), store).retries == 0
    )


def test_a_former_stage_name_still_works_in_a_config_and_on_the_command_line():
    """``postprocess`` was renamed ``measure`` (contract.FORMER_STAGE_NAMES): a config's ``[run.timeouts]`` and
    ``--refresh-from`` written with the former name mean the stage under its new one."""
    from flows.cli import build_parser

    for old, new in contract.FORMER_STAGE_NAMES.items():
        cfg = parse_config({"run": {"timeouts": {old: 42}}})
        assert getattr(cfg.run.timeouts, new) == 42 and contract.stage_name(old) == new
        assert build_parser().parse_args(["run", "--refresh-from", old]).refresh_from == new
    with pytest.raises(InputError, match="timeouts"):
        parse_config({"run": {"timeouts": {"no_such_stage": 1}}})


def test_declarations_import_no_numerical_library():
    """The declarations (methods, loaders, solver options) and the config built from them import no
    numpy, scipy, pandas or HiGHS: a fully cached run reads every option without paying for them."""
    import subprocess
    import sys

    code = (
        "import sys, mdp_core.declarations.methods, mdp_core.declarations.dataset_kinds, mdp_core.declarations.solver_options, flows.config; "
        "print(sorted(m for m in ('numpy', 'scipy', 'pandas', 'highspy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _solve_help_groups() -> dict[str, dict[str, Any]]:
    """``mdp-release solve``'s argument groups: title -> {flag: action}."""
    from flows.cli import build_parser

    sub = next(a for a in build_parser(["solve"])._actions if isinstance(a, argparse._SubParsersAction))
    return {
        g.title: {(a.option_strings or [a.dest])[0]: a for a in g._group_actions}
        for g in sub.choices["solve"]._action_groups
    }


def test_each_method_option_is_declared_once_and_read_everywhere():
    """One declaration per option (mdp_core.declarations.methods): the method's ``params`` annotation names that class,
    ``solve --help`` has exactly the declared flags, grouped by method, with the declared defaults, and the
    config's [solve] fields are the shared options plus every method's (unset: the method's default)."""
    import importlib

    from flows.config import PartitionConfig, SolveConfig, method_option_specs
    from mdp_core.declarations.methods import REGISTRY, BendersOptions, PartitionOptions
    from mdp_core.declarations.options import show, specs
    from mdp_core.declarations.solver_options import RepairOptions, SolverOptions
    from mdp_core.solvers.solve import options_class

    for name, m in REGISTRY.items():
        assert options_class(name) is m.options
        module, _, function = str(m.function).partition(":")
        mod = importlib.import_module(module)
        annotation = getattr(mod, function).__annotations__["params"]
        assert getattr(mod, annotation) is m.options, name  # the method receives the declared class

    common = [s for cls in (SolverOptions, RepairOptions) for s in specs(cls) if s.exposed]
    owners: dict[str, int] = {}
    for m in REGISTRY.values():
        for s in specs(m.options):
            owners[s.name] = owners.get(s.name, 0) + s.exposed
    groups = _solve_help_groups()
    flags = {f for title, g in groups.items() if title not in ("positional arguments", "options") for f in g}
    assert flags == {s.flag for s in common} | {
        s.flag for m in REGISTRY.values() for s in specs(m.options) if s.exposed
    }
    assert set(groups["solver options (every method)"]) == {s.flag for s in common}
    for name, m in REGISTRY.items():
        own = {s.flag: s for s in specs(m.options) if s.exposed and owners[s.name] == 1}
        group = groups.get(f"--method {name}: {m.help}", {})
        assert set(group) == set(own), name
        for flag, s in own.items():
            assert group[flag].help.endswith(f"(default: {show(s.default)})"), flag
    several = groups["options of several methods"]
    assert "colgen: default 200" not in several["--max-iterations"].help  # each method's own text and default
    assert "benders: master solves at most (default: 1000)" in several["--max-iterations"].help

    fields = SolveConfig.model_fields
    methods = {s.name for n in REGISTRY for s in method_option_specs(n)}
    assert set(fields) == {"method"} | {s.name for s in common} | methods
    for s in common:  # all_pairs: unset in a release, on for a method that can (flows.config.release_all_pairs)
        expected = None if s.default == float("inf") or s.name == "all_pairs" else s.default
        assert fields[s.name].default == expected, s.name
    assert all(fields[n].default is None for n in methods)  # unset: the chosen method's declared default
    declared = {s.key: s.default for s in specs(PartitionOptions)}
    assert declared == {k: f.default for k, f in PartitionConfig.model_fields.items()}
    assert set(PartitionOptions.__dataclass_fields__) <= set(BendersOptions.__dataclass_fields__)


def test_one_default_for_benders_subsets():
    """Benders' subsets: the same default for the method, the command line, the config and the docs."""
    from pathlib import Path

    from flows.config import PartitionConfig
    from mdp_core.declarations.methods import BendersOptions
    from mdp_core.declarations.options import default

    m = default(BendersOptions, "n_subsets")
    assert PartitionConfig.model_fields["subsets"].default == m == load_config(None).partition.subsets
    assert _solve_help_groups()["--method benders: partition + Benders decomposition (Qiu 2024)"][
        "--subsets"
    ].help.endswith(f"(default: {m})")
    docs = Path(__file__).resolve().parents[1] / "docs"
    assert f"the default is M = {m}" in (docs / "methods.md").read_text()
    assert f"| `subsets` | int | `{m}` |" in (docs / "configuration.md").read_text()


def test_solve_options_the_method_does_not_take_are_errors_and_the_rest_reach_it():
    cfg = parse_config({"solve": {"method": "benders", "max_iterations": 5, "executor": "serial", "time_limit": 60}})
    assert cfg.solve.method_args() == {
        "max_iterations": 5,
        "executor": "serial",
        "gap_rel": RELEASE_GAP_REL,
    }  # a release's gap
    assert cfg.solve.solver_settings() == {"solver": "simplex", "threads": 0, "time_limit": 60.0}  # benders: graph
    every = {"solver": "simplex", "threads": 0, "all_pairs": True}  # no time limit; every pair (issue 51)
    assert load_config(None).solve.solver_settings() == every
    with pytest.raises(InputError, match=r"max_iterations is not an option of method 'lp'"):
        parse_config({"solve": {"method": "lp", "max_iterations": 5}}, "c")
    with pytest.raises(InputError, match=r"solve.max_iterations: Input should be greater than or equal to 1"):
        parse_config({"solve": {"method": "colgen", "max_iterations": 0}}, "c")
    with pytest.raises(InputError, match=r"lambdas must be >= 0, got -1"):
        parse_config({"solve": {"method": "constopt", "lambdas": [0.1, -1.0]}}, "c")
    with pytest.raises(InputError, match=r"dataset.params: seed: Input should be greater than or equal to 0"):
        parse_config({"dataset": {"kind": "grid", "params": {"seed": -1}}}, "c")


def test_loaders_take_their_defaults_from_the_declarations():
    import inspect

    from mdp_core.declarations import dataset_kinds
    from mdp_core.declarations.options import REQUIRED
    from mdp_core.problem.datasets import registry

    assert set(dataset_kinds.KINDS) == set(registry.LOADERS)
    for kind, loader in registry.LOADERS.items():
        sig = inspect.signature(loader).parameters
        empty = inspect.Parameter.empty
        assert {n: REQUIRED if p.default is empty else p.default for n, p in sig.items()} == dataset_kinds.parameters(
            kind
        )


def test_dataset_params_are_typed_per_kind_in_config_and_run_form():
    """dataset.params is checked against the kind's loader (types, unknown and missing parameters), and
    the flow's parameter schema (Prefect's run form) shows each kind's fields with types and defaults,
    a union discriminated by kind that accepts what the config serialises to."""
    from prefect.utilities.schema_tools import validate

    from flows.config import DATASET_PARAMS
    from flows.release import DEFAULT_CONFIG, release_flow

    with pytest.raises(InputError, match=r"dataset.params: rows: Input should be a valid integer \(kind 'grid'\)"):
        parse_config({"dataset": {"kind": "grid", "params": {"rows": "3"}}}, "c")
    with pytest.raises(InputError, match="dataset.params: path: Field required"):
        parse_config({"dataset": {"kind": "points", "params": {}}}, "c")
    with pytest.raises(InputError, match=r"unknown parameter\(s\) \['rows'\] for kind 'road'"):
        parse_config({"dataset": {"kind": "road", "params": {"rows": 3}}}, "c")
    with pytest.raises(InputError, match="dataset.params: path: Field required"):  # not the default grid's rows
        parse_config({"dataset": {"kind": "points"}}, "c")
    assert parse_config({"dataset": {"kind": "road"}}).dataset.params == {}  # the loader's defaults
    assert parse_config({"dataset": {"kind": "grid"}}).dataset.params == parse_config({}).dataset.params
    road = parse_config({"dataset": {"kind": "road", "params": {"pbf": "helsinki", "radius_km": 2, "n_records": 50}}})
    assert road.dataset.params == {"pbf": "helsinki", "radius_km": 2, "n_records": 50}  # what was given, as given
    assert parse_config(road.model_dump(mode="json")) == road  # the deployment parameter round-trips

    schema = release_flow.parameters.model_dump()
    defs = schema["definitions"]
    arms = {ref["$ref"].rsplit("/", 1)[1] for ref in defs["DatasetConfig"]["oneOf"]}
    assert arms == {"GridDataset", "SyntheticDataset", "RoadDataset", "TextDataset", "PointsDataset"}
    assert defs["DatasetConfig"]["discriminator"]["propertyName"] == "kind"
    grid = defs["GridParams"]["properties"]
    assert grid["rows"] == {"default": 20, "title": "Rows", "type": "integer", "description": "number of cell rows"}
    assert grid["cell_km"]["type"] == "number" and "epsilon" not in grid and "eta" not in grid
    assert defs["PointsParams"]["required"] == ["path"]
    assert set(defs["TextParams"]["properties"]) == set(DATASET_PARAMS["text"].model_fields)
    assert defs["RoadDataset"]["properties"]["kind"]["const"] == "road"
    # what Prefect checks a run's parameters with: our configs pass, wrong keys / types do not
    assert validate({"config": DEFAULT_CONFIG.model_dump(mode="json")}, schema) == []
    assert validate({"config": road.model_dump(mode="json")}, schema) == []
    assert validate({"config": {"dataset": {"kind": "road", "params": {"rows": 3}}}}, schema)
    assert validate({"config": {"dataset": {"kind": "grid", "params": {"rows": "x"}}}}, schema)


def test_shipped_example_configs_load_and_are_the_ones_the_readme_runs():
    """flows/examples/*.toml (package data) are valid configs, and every ``--config X.toml`` the README and
    docs/*.md run is one of them (a.toml / b.toml: the batch placeholders)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shipped = sorted((root / "flows" / "examples").glob("*.toml"))
    assert {p.name for p in shipped} >= {"grid-release.toml", "helsinki-release.toml"}
    for path in shipped:
        assert load_config(str(path)).name, path
    text = "".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    named = set(re.findall(r"--config (\S+\.toml)", text)) - {"a.toml", "b.toml"}
    assert named == {f"flows/examples/{p.name}" for p in shipped}
