"""A config is what its author wrote, on every route it takes (issue 29, item 1).

The routes: a TOML file (``load_config``), a Prefect parameter (``to_parameter`` -> ``as_config``: serve,
deploy and batch), the full dump the API and the failure hook see, a run manifest (``new_manifest`` ->
``manifest_config``: ``run --from-manifest``), the serve/deploy deployment (``flows.operate._deployment``).
Every shipped example and generated configs (microdata ones included: the bug was that their parameter
carried the default ``n_individuals = 10000`` beside ``microdata`` and was rejected when re-validated) come
back equal, with the same ``config_hash``. No Prefect server is started here.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.config import (
    DEFAULT_MAX_STRETCH,
    ReleaseFlowConfig,
    as_config,
    config_hash,
    load_config,
    parse_config,
    release_name,
    release_name_of,
    store_root,
    to_parameter,
)
from flows.manifest_read import manifest_config
from mdp_core.errors import InputError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "flows" / "examples").glob("*.toml"))


# ----------------------------------------------------------------------------- a small TOML writer
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # ASCII strings: a JSON string is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def to_toml(data: dict[str, Any]) -> str:
    """``data`` (top-level scalars, sections of scalars / lists / inline tables) as TOML."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, body in data.items():
        if isinstance(body, dict):
            lines += [f"[{section}]", *(f"{k} = {_toml_value(v)}" for k, v in body.items())]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- generated configs
_pos = st.floats(0.05, 50.0, allow_nan=False, allow_infinity=False)


def _opt(key: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), strategy.map(lambda v: {key: v}))


def _merge(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


_simulated = _merge(st.just({"simulate": True}), _opt("n_individuals", st.integers(1, 50_000)))
_microdata = _merge(
    st.sampled_from(["/data/people.csv", "/data/agency/people.parquet"]).map(lambda p: {"microdata": p}),
    st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,20}\Z").map(lambda p: {"population": p}),
    _opt("max_total_epsilon", _pos),
    _opt("max_distance", _pos),
    _opt("prior", st.sampled_from(["dataset", "uniform", "dp"])),
    _opt("eps_prior", _pos),
)
_release = _merge(st.one_of(_simulated, _microdata), _opt("eps_counts", _pos))
_privacy = _merge(
    _opt("epsilon", _pos),
    _opt("eta", _pos),
    _opt("protection_radius", _pos),
    _opt("max_stretch", st.floats(1.0, 10.0)),
    _opt("allow_unprotected", st.booleans()),
)
_dataset = st.one_of(
    st.just({}),
    _merge(
        st.just({"kind": "grid"}),
        _opt(
            "params",
            _merge(_opt("rows", st.integers(2, 6)), _opt("cols", st.integers(2, 6)), _opt("seed", st.integers(0, 9))),
        ),
    ),
)
_solve = _merge(_opt("method", st.sampled_from(["auto", "lp", "exp"])), _opt("time_limit", _pos))
_run = _merge(
    _opt("keep_releases", st.integers(1, 9)),
    _opt("max_workers", st.integers(1, 4)),
    _opt("timeouts", _opt("solve", _pos)),
)
_evaluate = _merge(
    _opt("counts_seeds", st.integers(1, 20)), _opt("eps_factors", st.lists(_pos, min_size=1, max_size=3))
)


def _section(key: str, strategy: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), strategy.map(lambda v: {key: v}))


CONFIGS = _merge(
    _opt("name", st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,20}\Z")),
    _opt("store", st.sampled_from(["/tmp/mdp-routes/a", "/tmp/mdp-routes/b/store"])),
    _section("dataset", _dataset),
    _section("privacy", _privacy),
    _section("solve", _solve),
    st.just({}).flatmap(lambda _: _release.map(lambda r: {"release": r})),  # a config file has [release]
    _section("evaluate", _evaluate),
    _section("run", _run),
)


def _manifest_route(cfg: ReleaseFlowConfig, folder: Path) -> ReleaseFlowConfig:
    """Through a run manifest as the flow writes it (flows.manifest.new_manifest), read back by
    ``run --from-manifest [--microdata PATH]``'s :func:`flows.run.rerun_config` (a manifest names the secret
    table by its role: the operator gives its path again)."""
    from flows.manifest import new_manifest
    from flows.run import rerun_config

    m = new_manifest(
        "mdp-release-manifest", "20260101-000000-abcd1234", "abcd1234", _dt.datetime.now(_dt.UTC), cfg, {}, {}, {}
    )
    path = folder / "manifest.json"
    path.write_text(json.dumps(m, sort_keys=True))
    return rerun_config(path, cfg.release.microdata)


def _deployment_route(path: Path) -> dict[str, Any]:
    """The parameter ``mdp-release serve --config PATH`` gives its deployment (a secret table's path kept in
    its store's private part, the parameter naming it ``private-path:<tag>``: issue 49)."""
    from flows.operate import _deployment

    args = argparse.Namespace(config=str(path), interval=30.0, cron=None, timezone="UTC", name=None)
    return _deployment(args, "serve")["parameters"]["config"]


def _no_path(param: dict[str, Any]) -> dict[str, Any]:
    """``param`` with its secret table's path or ``private-path:<tag>`` left out."""
    release = {k: v for k, v in param.get("release", {}).items() if k != "microdata"}
    return param | {"release": release}


def _served(served: dict[str, Any]) -> ReleaseFlowConfig:
    """The serve / deploy parameter as the run reads it: the secret table's path resolved in its store."""
    from flows.door import SEALED_PATH, unsealed_config

    microdata = served.get("release", {}).get("microdata")
    assert microdata is None or microdata.startswith(SEALED_PATH)  # no path in Prefect
    return unsealed_config(as_config(served))


def _all_routes(cfg: ReleaseFlowConfig, folder: Path) -> dict[str, ReleaseFlowConfig]:
    """``cfg`` after each route (``cfg`` must have been read from a file, or be one a file can write)."""
    from prefect.utilities.schema_tools import validate

    from flows.release import release_flow

    param = to_parameter(cfg)
    # what Prefect checks a run's parameters with accepts the written keys
    assert validate({"config": param}, release_flow.parameters.model_dump()) == []
    toml = folder / "routed.toml"
    toml.write_text(to_toml(param))
    served = _deployment_route(toml)
    assert _no_path(served) == _no_path(param)  # the deployment's parameter is the written config, nothing added
    return {
        "parameter": as_config(json.loads(json.dumps(param))),
        "full dump (API, failure hook)": as_config(json.loads(json.dumps(cfg.model_dump(mode="json")))),
        "toml file": load_config(toml),
        "manifest (run --from-manifest)": _manifest_route(cfg, folder),
        "serve / deploy parameter": _served(served),
    }


WRITTEN_ROUTES = ("parameter", "toml file", "serve / deploy parameter")


def _check_routes(cfg: ReleaseFlowConfig, folder: Path) -> None:
    from flows import operate_ui

    h = config_hash(cfg)
    for route, back in _all_routes(cfg, folder).items():
        assert back == cfg, route
        assert config_hash(back) == h, route
        if route in WRITTEN_ROUTES:  # unset stays unset (a full dump records every value: equal, not "written")
            assert to_parameter(back) == to_parameter(cfg), route
    assert release_name_of(cfg.model_dump(mode="json")) == release_name(cfg)
    assert operate_ui.failure_target(cfg.model_dump(mode="json")) == (release_name(cfg), store_root(cfg))
    assert operate_ui.failure_target(to_parameter(cfg)) == (release_name(cfg), store_root(cfg))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_shipped_example_survives_every_route(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MDP_RELEASE_STORE", str(tmp_path / "default-store"))  # serve keeps a table's path there
    _check_routes(load_config(path), tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=CONFIGS)
def test_generated_configs_survive_every_route(data, tmp_path, monkeypatch):
    monkeypatch.setenv("MDP_RELEASE_STORE", str(tmp_path / "default-store"))  # serve keeps a table's path there
    cfg = parse_config(data)
    if "dataset" in data:  # a dataset section carries its kind (the schema's discriminator)
        data = data | {"dataset": {"kind": cfg.dataset.kind, **data["dataset"]}}
    assert to_parameter(cfg) == data  # exactly what was written, nothing else
    _check_routes(cfg, tmp_path)


def test_the_built_in_default_survives_every_route(tmp_path):
    cfg = ReleaseFlowConfig()
    assert to_parameter(cfg) == {} and cfg.release.simulate
    assert as_config({}) == cfg == as_config(None) == as_config(cfg.model_dump(mode="json"))
    assert _manifest_route(cfg, tmp_path) == cfg


def test_a_microdata_releases_serve_parameter_is_revalidated_to_the_same_config(tmp_path):
    """The reported bug: the parameter carried ``n_individuals = 10000`` beside ``microdata`` and every serve
    tick, deployed run, ``run --from-manifest`` and batch of a microdata config was rejected."""
    path = tmp_path / "agency.toml"
    path.write_text(
        'name = "agency"\nstore = "st"\n[release]\nmicrodata = "people.csv"\npopulation = "rome-residents"\n'
        "max_total_epsilon = 30.0\n"
    )
    cfg = load_config(path)
    param = _deployment_route(path)
    assert "n_individuals" not in param["release"] and "simulate" not in param["release"]
    assert _no_path(param) == {
        "name": "agency",
        "store": str(tmp_path / "st"),
        "release": {"population": "rome-residents", "max_total_epsilon": 30.0},
    }
    assert _served(param) == cfg and not as_config(param).release.simulate
    # the full dump a manifest / the API keeps: n_individuals is None now, and validation ignores fields_set
    full = cfg.model_dump(mode="json")
    assert full["release"]["n_individuals"] is None and as_config(full) == cfg
    assert _manifest_route(cfg, tmp_path) == cfg
    from flows.batch import _names

    assert _names([param, full, cfg]) == ["agency"]


def test_config_hash_is_the_meaning_not_what_was_written():
    """Defaults written out or left unset: one hash (caches and run names do not churn by route)."""
    written = parse_config(
        {
            "release": {"simulate": True, "n_individuals": 10_000, "eps_counts": 1.0},
            "privacy": {"max_stretch": DEFAULT_MAX_STRETCH, "allow_unprotected": False},
            "solve": {"method": "auto"},
        }
    )
    assert config_hash(written) == config_hash(ReleaseFlowConfig())
    assert to_parameter(written) != to_parameter(ReleaseFlowConfig())  # what was written differs
    assert config_hash(parse_config({"release": {"simulate": True, "n_individuals": 5}})) != config_hash(written)


def test_old_manifests_are_read_as_they_meant(tmp_path):
    """A manifest written before ``simulate`` existed: simulated without microdata; with microdata the old
    default ``n_individuals = 10000`` is dropped and the population it lacks is asked for."""
    old = ReleaseFlowConfig().model_dump(mode="json")
    for key in ("simulate", "population"):
        old["release"].pop(key)
    old["release"]["n_individuals"] = 10_000
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"format": "mdp-release-manifest", "config": old}))
    cfg = manifest_config(path)
    assert cfg.release.simulate and cfg.release.simulated_individuals == 10_000
    old["release"]["microdata"] = "/data/people.csv"
    path.write_text(json.dumps({"format": "mdp-release-manifest", "config": old}))
    with pytest.raises(InputError, match="population is required"):
        manifest_config(path)
    assert release_name_of(old) == "grid-eps10-auto"  # retention still knows whose it is


def test_failure_and_cancellation_records_land_in_the_releases_own_store(tmp_path, monkeypatch):
    """The failure hook of a microdata release (its parameter: the API's full dump) writes FAILED.txt and
    record.json into the release's store, not the default one; a cancelled run gets a record too."""
    from uuid import uuid4

    import prefect.artifacts
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Cancelled, Failed

    from flows import operate_ui

    made: list[dict[str, Any]] = []

    class Recorded:  # the UI artifact (a markdown artifact naming the run), kept here instead of sent to a server
        def __init__(self, **kw: Any) -> None:
            made.append(kw)

        def create(self, **kw: Any) -> None:
            pass

    monkeypatch.setattr(prefect.artifacts, "MarkdownArtifact", Recorded)
    monkeypatch.setenv("MDP_RELEASE_STORE", str(tmp_path / "default-store"))
    store = tmp_path / "agency-store"
    cfg = parse_config(
        {
            "name": "agency",
            "store": str(store),
            "release": {"microdata": "/data/p.csv", "population": "rome", "max_total_epsilon": 9.0},
        }
    )
    run = FlowRun(flow_id=uuid4(), name="agency-run", parameters={"config": cfg.model_dump(mode="json")})
    operate_ui.at_stage(str(run.id), "solve")
    folder = operate_ui.record_failure(run, Failed(message="boom", data=ValueError("solve: no feasible point")))
    assert folder is not None and folder.parent == store / "runs"
    assert (folder / "FAILED.txt").read_text().splitlines()[0] == "solve: ValueError: solve: no feasible point"
    rec = json.loads((folder / "record.json").read_text())
    assert rec["release"] == "agency" and rec["state"] == "failed" and rec["stage"] == "solve"
    assert made[-1]["key"] == "agency-failure"
    assert not (tmp_path / "default-store").exists()
    # the same run's second hook (crashed after failed): one record
    assert operate_ui.record_failure(run, Failed(message="again")) == folder

    run2 = FlowRun(flow_id=uuid4(), name="agency-run-2", parameters={"config": to_parameter(cfg)})
    operate_ui.at_stage(str(run2.id), "measure")
    folder2 = operate_ui.record_failure(run2, Cancelled(message="cancelled in the UI"), "cancelled")
    assert folder2 is not None and folder2.parent == store / "runs"
    assert (folder2 / "FAILED.txt").read_text().startswith("cancelled at measure: ")
    assert json.loads((folder2 / "record.json").read_text())["state"] == "cancelled"
    assert sorted(p.name for p in (store / "runs").iterdir()) == sorted([folder.name, folder2.name])
    # a parameter that is no valid config still names its store; retention groups the records by name
    bad = {"name": "agency", "store": str(store), "release": {"eps_counts": 1.0}}
    assert operate_ui.failure_target(bad) == ("agency", store)
    from artifacts.store import Store

    assert [Store.failure_release(f) for f in Store(store).failure_records()] == ["agency", "agency"]


def test_the_release_flow_has_failure_crash_and_cancellation_hooks():
    from flows.release import release_flow

    assert release_flow.on_failure_hooks and release_flow.on_crashed_hooks and release_flow.on_cancellation_hooks


def test_no_flow_heartbeat_only_in_ephemeral_mode(monkeypatch):
    """A run against a server keeps Prefect's heartbeat (automations mark runs whose heartbeats stop as
    crashed); only ephemeral mode switches it off."""
    import contextlib

    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.run import no_flow_heartbeat

    for var in ("PREFECT_API_URL", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"):
        monkeypatch.delenv(var, raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        with no_flow_heartbeat():
            from prefect.settings import get_current_settings

            assert get_current_settings().flows.heartbeat_frequency is None
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert isinstance(no_flow_heartbeat(), contextlib.nullcontext)
        with no_flow_heartbeat():
            assert PREFECT_FLOWS_HEARTBEAT_FREQUENCY.value() == 180


def test_own_flow_heartbeat_replaces_prefects_against_a_server(monkeypatch):
    """One release against a server: Prefect's engine heartbeat off (the run would wait for its thread) and
    the release's watcher told to send it at the same frequency; ephemeral mode: neither."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from flows.run import own_flow_heartbeat
    from tasks.progress import FLOW_HEARTBEAT

    for var in ("PREFECT_API_URL", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"):
        monkeypatch.delenv(var, raising=False)
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        with own_flow_heartbeat():
            assert get_current_settings().flows.heartbeat_frequency is None
            assert FLOW_HEARTBEAT.get() == 180
        assert get_current_settings().flows.heartbeat_frequency == 180 and FLOW_HEARTBEAT.get() is None
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        with own_flow_heartbeat():
            assert get_current_settings().flows.heartbeat_frequency is None
            assert FLOW_HEARTBEAT.get() is None
