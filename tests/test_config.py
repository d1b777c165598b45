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

    assert STAGE_NAMES == ("ingest", "graph", "partition", "export", "solve", "postprocess", "evaluate", "release")
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
