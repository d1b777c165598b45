"""Config validation: unknown keys, wrong types, out-of-range values, bad TOML -- one clear line each."""

from __future__ import annotations

import pytest

from flows.config import ReleaseFlowConfig, load_config, parse_config
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
        ({"release": {"n_individuals": 1.5}}, "release.n_individuals"),
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
    )
    cfg = load_config(p)
    assert cfg.privacy.epsilon == 5.0 and cfg.dataset.params == {"n_records": 30}
    assert cfg.store == str(tmp_path / "s")  # relative to the config file's folder


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
    )
    monkeypatch.chdir(tmp_path)
    cfg = load_config("conf/road.toml")
    assert cfg.store == str(conf / "out" / "store")
    assert cfg.dataset.params == {"nodes": str(conf / "nodes.csv"), "edges": str(conf / "edges.csv")}
    assert store_root(cfg) == conf / "out" / "store"
    # bundled data names are not paths
    p.write_text('[dataset]\nkind = "text"\nparams = { vectors = "glove-6b-50d" }\n')
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

    assert STAGE_NAMES == (
        "ingest",
        "graph",
        "prior",
        "partition",
        "export",
        "solve",
        "postprocess",
        "evaluate",
        "release",
    )
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
    from flows.release import stage_task

    assert tuple(TimeoutsConfig.model_fields) == STAGE_NAMES
    limits = {stage: 10.0 + i for i, stage in enumerate(STAGE_NAMES)}
    cfg = parse_config({"run": {"timeouts": limits}})
    store = Store(tmp_path / "store")
    assert {s: stage_task(s, cfg, store).timeout_seconds for s in STAGE_NAMES} == limits
    assert stage_task("evaluate_point", cfg, store).timeout_seconds == limits["evaluate"]
    assert stage_task("release", load_config(None), store).timeout_seconds is None  # unset: no limit
    assert stage_task("ingest", cfg, store).retries == 2 and stage_task("solve", cfg, store).retries == 0


def test_loader_and_method_declarations_read_from_source_match_the_imported_objects():
    """mdp_core.loaders / mdp_core.methods read signatures and option fields without importing the
    loaders and solvers (a cached run must not pay for numpy, scipy, HiGHS): they must be what inspect
    and dataclasses say of the imported objects."""
    import dataclasses
    import inspect

    from mdp_core import loaders, methods
    from mdp_core.datasets import registry
    from mdp_core.solve import options_class

    assert set(loaders.KINDS) == set(registry.LOADERS)
    for kind, loader in registry.LOADERS.items():
        sig = inspect.signature(loader).parameters
        assert loaders.parameters(kind) == {n: p.default for n, p in sig.items()}, kind
        assert loaders.parameter_annotations(kind) == {
            n: None if p.annotation is inspect.Parameter.empty else p.annotation for n, p in sig.items()
        }, kind
    for method in methods.REGISTRY:
        cls = options_class(method)
        want = None if cls is None else tuple(f.name for f in dataclasses.fields(cls))
        assert methods.option_names(method) == want, method


def test_partition_defaults_are_benders_own():
    """[partition] writes BendersOptions' defaults and help texts out (importing mdp_core.benders costs
    HiGHS, scipy and pandas); they must agree."""
    from flows.config import PartitionConfig
    from mdp_core import options as opts
    from mdp_core.benders import BendersOptions
    from mdp_core.partition import PARTITIONERS

    fields = PartitionConfig.model_fields
    assert fields["method"].default == opts.default(BendersOptions, "partition")
    assert fields["seed"].default == opts.default(BendersOptions, "seed")
    for ours, theirs in (("method", "partition"), ("subsets", "n_subsets"), ("seed", "seed")):
        assert fields[ours].description == opts.help_text(BendersOptions, theirs)
    assert set(PARTITIONERS) == set(fields["method"].annotation.__args__)


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
    road = parse_config({"dataset": {"kind": "road", "params": {"pbf": "helsinki", "radius_km": 2, "n_records": 50}}})
    assert road.dataset.params == {"pbf": "helsinki", "radius_km": 2, "n_records": 50}  # what was given, as given
    assert parse_config(road.model_dump(mode="json")) == road  # the deployment parameter round-trips

    schema = release_flow.parameters.model_dump()
    defs = schema["definitions"]
    arms = {ref["$ref"].rsplit("/", 1)[1] for ref in defs["DatasetConfig"]["oneOf"]}
    assert arms == {"GridDataset", "SyntheticDataset", "RoadDataset", "TextDataset", "PointsDataset"}
    assert defs["DatasetConfig"]["discriminator"]["propertyName"] == "kind"
    grid = defs["GridParams"]["properties"]
    assert grid["rows"] == {"default": 20, "title": "Rows", "type": "integer"}
    assert grid["cell_km"]["type"] == "number" and "epsilon" not in grid and "eta" not in grid
    assert defs["PointsParams"]["required"] == ["path"]
    assert set(defs["TextParams"]["properties"]) == set(DATASET_PARAMS["text"].model_fields)
    assert defs["RoadDataset"]["properties"]["kind"]["const"] == "road"
    # what Prefect checks a run's parameters with: our configs pass, wrong keys / types do not
    assert validate({"config": DEFAULT_CONFIG.model_dump(mode="json")}, schema) == []
    assert validate({"config": road.model_dump(mode="json")}, schema) == []
    assert validate({"config": {"dataset": {"kind": "road", "params": {"rows": 3}}}}, schema)
    assert validate({"config": {"dataset": {"kind": "grid", "params": {"rows": "x"}}}}, schema)
