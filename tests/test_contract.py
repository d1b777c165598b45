"""The release contract (mdp_core.declarations.contract) against the writers and the audit (issue 31).

A real small release is built with the project's own stages (``conftest.run_stages``) and published through
the release task (``test_audit.publish``): every file of the folder must be declared, and each published
file's Parquet columns, Arrow types and JSON keys must be exactly the declared ones -- a writer that adds,
drops or retypes a column, or a declaration that drifts, fails here. The audit's allow-lists are views of
the same declarations.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import publish_release as publish
from conftest import release_config as config
from conftest import run_stages
from test_audit import set_listed_hash

from artifacts.store import Store
from flows.config import STAGE_NAMES, TimeoutsConfig, parse_config
from flows.release import _TASKS, SOLVE_SUMMARY
from mdp_core.declarations import contract
from mdp_core.release import audit
from mdp_core.release.audit_files import _stage_of


@pytest.fixture(scope="module")
def lp_release(released: Path) -> Path:
    """The session's published release (conftest.release_config), solved by lp (no trace)."""
    return released


@pytest.fixture(scope="module")
def rowgen_release(tmp_path_factory) -> Path:
    """The same release solved by rowgen: with trace.parquet."""
    root = tmp_path_factory.mktemp("store-rowgen")
    cfg = parse_config(config(root).model_dump(mode="json") | {"solve": {"method": "rowgen"}})
    return publish(Store(root), run_stages(root, cfg), cfg=cfg)


@pytest.fixture(params=["lp_release", "rowgen_release"])
def release(request) -> Path:
    return request.getfixturevalue(request.param)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- writers = declarations
def test_every_file_of_a_release_is_declared(release: Path) -> None:
    names = _files(release)
    assert [n for n in names if not contract.is_published(n)] == []
    required = {f.path for f in contract.PUBLISHED if f.required}
    assert required <= set(names)
    listed = json.loads((release / "manifest.json").read_text())["released_files"]  # tasks.publish.released_files
    assert set(listed) == {n for n in names if contract.published(n).listed}


def test_parquet_columns_and_arrow_types_are_the_declared_ones(release: Path) -> None:
    bad: list[str] = []
    for name in (n for n in _files(release) if n.endswith(".parquet")):
        decl = contract.published(name)
        assert decl.columns is not None, f"{name}: declared without columns"
        schema = pq.read_schema(release / name)
        types = {f.name: str(f.type) for f in schema}
        declared = {c.name: c.dtype for c in decl.columns}
        for col, dtype in types.items():
            if decl.coordinates and contract.COORDINATE.fullmatch(col):
                bad += [] if dtype == "double" else [f"{name}: coordinate {col} is {dtype}"]
            elif col not in declared:
                bad.append(f"{name}: column {col} is written but not declared")
            elif declared[col] is not None and declared[col] != dtype:
                bad.append(f"{name}: column {col} is {dtype}, declared {declared[col]}")
        if decl.all_columns and set(declared) != set(types):
            bad.append(f"{name}: declared {sorted(set(declared) - set(types))} are not written")
        if decl.ordered:
            assert tuple(schema.names) == decl.column_names, name
    assert bad == []


def test_json_keys_are_the_declared_ones(release: Path) -> None:
    for name in (n for n in _files(release) if n.endswith(".json")):
        decl = contract.published(name)
        assert decl.keys is not None, f"{name}: declared without keys"
        value = json.loads((release / name).read_text())
        if name == "manifest.json":  # test_audit.publish writes the flow's manifest blocks but not its header
            assert set(value) <= decl.keys and {"privacy", "solve", "released_files"} <= set(value)
        elif name == "release_provenance.json":  # the people's mean error only when measured (eps_error)
            assert set(value) in (decl.keys, decl.keys - {"eps_error", "people_error"}), name
        else:
            assert set(value) == decl.keys, name
        for key, keys in decl.nested.items():
            assert set(value[key]) == keys, f"{name} {key}"


def test_solve_summary_and_provenance_version(release: Path) -> None:
    manifest = json.loads((release / "manifest.json").read_text())
    assert set(manifest["solve"]) == {*contract.MANIFEST_SOLVE_KEYS, "auto"}
    assert set(contract.MANIFEST_SOLVE_KEYS) <= contract.SOLVE_KEYS
    prov = json.loads((release / contract.PROVENANCE).read_text())
    assert (prov["format"], prov["version"]) == (contract.PROVENANCE_FORMAT, contract.PROVENANCE_VERSION)
    assert set(manifest["privacy"]) == contract.PRIVACY_KEYS | contract.PRIVACY_KEYS_V3_OPTIONAL


def test_declarations_are_consistent() -> None:
    assert len({f.path for f in contract.PUBLISHED}) == len(contract.PUBLISHED)
    for f in contract.PUBLISHED:
        assert f.stage in contract.STAGE_NAMES, f.path
        assert not (f.columns is not None and f.keys is not None), f.path
        names = set(f.column_names) | (f.keys or set())
        if f.path != "report.md":  # report.md's volatile figure is a key of its claims block
            assert f.volatile <= names, f.path
        with_forbidden = {n for n in f.column_names if any(x in n.lower() for x in contract.FORBIDDEN)}
        assert with_forbidden == set(f.name_exceptions), f.path
    assert {c.dtype for f in contract.PUBLISHED for c in f.columns or ()} - {None} <= {
        "int64",
        "double",
        "large_string",
        "bool",
    }
    with pytest.raises(KeyError):
        contract.published("secret.parquet")
    assert contract.published("figure.png").stage == "evaluate"
    assert not contract.is_published("sub/figure.png")


# ----------------------------------------------------------------------------- the stages, declared once
def test_stages_are_read_from_the_contract() -> None:
    assert STAGE_NAMES == contract.STAGE_NAMES
    assert tuple(TimeoutsConfig.model_fields) == contract.STAGE_NAMES
    assert contract.CACHED_STAGES == tuple(_TASKS)
    assert contract.STAGE_NAMES[-1] == "publish" and not contract.stage("publish").cached
    assert {s.name for s in contract.STAGES if s.reads_secret} == {"prior", "measure"}
    assert SOLVE_SUMMARY == contract.MANIFEST_SOLVE_KEYS


# ----------------------------------------------------------------------------- the audit's lists are views
def test_audit_lists_are_derived_from_the_contract() -> None:
    listed = [f for f in contract.PUBLISHED if f.listed]
    assert audit.REQUIRED == tuple(f.path for f in listed if f.required)
    assert audit.PUBLISHED == {f.path for f in listed if "*" not in f.path}
    assert audit.COLUMNS == {f.path: frozenset(f.column_names) for f in listed if f.columns is not None}
    assert audit.AGGREGATE_COLUMNS == contract.published("aggregates.parquet").column_names
    assert audit.PROVENANCE_KEYS == contract.PROVENANCE_KEYS and audit.SOLVE_KEYS == contract.SOLVE_KEYS
    assert audit.PRIOR_SOURCES == set(contract.PRIOR_SOURCES)
    assert set(audit.SIGNATURE_FILES) == {f.path for f in contract.PUBLISHED if not f.listed} - {"manifest.json"}
    for f in listed:
        if "*" not in f.path:
            assert _stage_of(f.path) == (f.stage, f.file)


def test_an_undeclared_column_is_a_finding(lp_release: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lp_release, run)
    table = pq.read_table(run / "cbdp_error.parquet")
    pq.write_table(table.append_column("note", pa.array(["x"] * table.num_rows)), run / "cbdp_error.parquet")
    set_listed_hash(run, "cbdp_error.parquet")
    assert "cbdp_error.parquet: column note is not allowed in a published file" in audit.audit_release(run)


def test_an_undeclared_file_is_a_finding(lp_release: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lp_release, run)
    (run / "notes.txt").write_text("x")
    m = json.loads((run / "manifest.json").read_text())
    m["released_files"]["notes.txt"] = ""
    (run / "manifest.json").write_text(json.dumps(m))
    set_listed_hash(run, "notes.txt")
    assert "notes.txt: not a file a release publishes (listed in the manifest)" in audit.audit_release(run)


def test_every_stage_declares_its_task() -> None:
    """Issue 42: the flow takes each stage's task from its declaration (``Stage.task``), and the task is named
    after its stage (its ``[run.timeouts]`` key, its cache-key stage)."""
    import importlib

    for st in contract.STAGES:
        module, _, attr = st.task.partition(":")
        task = getattr(importlib.import_module(module), attr)
        assert task.name == st.name, st
        if st.cached:
            assert _TASKS[st.name] is task
