"""The registries are the only lists: every dataset kind's declaration (mdp_core.declarations.dataset_kinds.Kind)
matches its loader (parameters, defaults, the records.parquet columns it publishes, its record key), every
method's capability flags match what it does (a needs_partition method solves on a partition; a baseline
reports no bound), the config's choices come from the registry, and the docs list exactly the registered
kinds and methods. Instances are tiny and built offline (grid, synthetic, points, text on gensim's test
vectors, road and grid road costs on pyrosm's bundled test extract)."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from mdp_core.declarations import contract, dataset_kinds, methods
from mdp_core.declarations.options import REQUIRED, specs
from mdp_core.problem.datasets import registry
from mdp_core.problem.io import write_instance
from mdp_core.problem.microdata import KEY_COLUMNS

DOCS = Path(__file__).resolve().parents[1] / "docs"
COORDINATE = re.compile(dataset_kinds.COORDINATE_COLUMN)


def _points_file(tmp: Path) -> str:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"id": [f"p{i}" for i in range(30)], "lat": 41.89 + rng.uniform(0, 0.02, 30)})
    frame["lon"] = 12.49 + rng.uniform(0, 0.02, 30)
    frame = pd.concat([frame, frame.iloc[:2].assign(id=["dup0", "dup1"])])  # identical points: merged
    frame.to_csv(tmp / "pts.csv", index=False)
    return str(tmp / "pts.csv")


def _tiny(kind: str, tmp: Path) -> list[dict]:
    """Parameters of tiny offline instances of ``kind``, covering each optional column the loader adds."""
    if kind == "grid":
        pytest.importorskip("pyrosm")
        return [{"rows": 3, "cols": 4}, {"rows": 3, "cols": 3, "road_pbf": "test", "n_destinations": 4}]
    if kind == "synthetic":
        return [{"n_records": 12, "dim": 2}]
    if kind == "road":
        pytest.importorskip("pyrosm")
        return [{"pbf": "test", "n_records": 20, "n_outputs": 5, "eta": 0.3, "n_destinations": 4}]
    if kind == "text":
        return [{"vectors": "gensim-test", "n_records": 15}]
    if kind == "points":
        return [{"path": _points_file(tmp), "eta": 1.0}]
    raise AssertionError(f"no tiny instance for new dataset kind {kind!r}: add one here")


@pytest.mark.parametrize("kind", dataset_kinds.KINDS)
def test_loader_takes_exactly_its_declared_parameters(kind):
    decl = dataset_kinds.kind(kind)
    fn = registry.LOADERS[kind]
    assert fn is registry.loader(decl.loader)
    sig = inspect.signature(fn).parameters
    declared = {s.name: s.default for s in specs(decl.params)}
    assert list(sig) == list(declared), f"{decl.loader} parameters differ from {decl.params.__name__}"
    for name, p in sig.items():
        assert p.kind is p.POSITIONAL_OR_KEYWORD
        want = p.empty if declared[name] is REQUIRED else declared[name]
        assert p.default == want, f"{decl.loader}: {name} default {p.default!r} is not the declared {want!r}"


@pytest.mark.parametrize("kind", dataset_kinds.KINDS)
def test_published_record_columns_are_declared(kind, tmp_path):
    decl = dataset_kinds.kind(kind)
    seen: set[str] = set()
    loaded: set[str] = set()
    for i, params in enumerate(_tiny(kind, tmp_path)):
        inst = registry.load(kind, params)
        loaded |= set(inst.records.columns)
        write_instance(dataset_kinds.published_instance(inst), tmp_path / f"inst{i}")  # what the export stage writes
        seen |= set(pq.read_schema(tmp_path / f"inst{i}" / "records.parquet").names)
    allowed = dataset_kinds.BASE_RECORD_COLUMNS | decl.public_columns
    undeclared = sorted(c for c in seen if c not in allowed and not COORDINATE.fullmatch(c))
    assert not undeclared, f"{kind} publishes records.parquet columns it does not declare: {undeclared}"
    assert decl.public_columns <= seen, f"{kind} declares columns no tiny instance writes"
    assert decl.file_columns <= loaded - seen, f"{kind}: its user file's columns are not loaded, or published"
    assert seen <= dataset_kinds.public_record_columns() | {c for c in seen if COORDINATE.fullmatch(c)}


def test_public_record_columns_are_the_union_of_the_declarations():
    cols = dataset_kinds.public_record_columns()
    assert {c.name for c in contract.RECORD_COLUMNS} == cols  # the contract's typed columns: each declared one
    assert dataset_kinds.BASE_RECORD_COLUMNS <= cols
    for decl in dataset_kinds.DECLARED.values():
        assert decl.public_columns <= cols
        assert set(decl.file_parameters) <= {s.name for s in specs(decl.params)}
    assert not any(COORDINATE.fullmatch(c) for c in cols)


def test_record_keys_come_from_the_declarations():
    keys = {d.name: d.record_key for d in dataset_kinds.DECLARED.values() if d.record_key}
    decls = {name: dataset_kinds.kind(name) for name in keys}
    assert all(key in decls[name].public_columns | decls[name].file_columns for name, key in keys.items())
    assert set(KEY_COLUMNS) == set(keys.values()) and KEY_COLUMNS == dataset_kinds.RECORD_KEYS


def test_a_contradictory_kind_is_refused():
    with pytest.raises(TypeError, match="not parameters"):
        dataset_kinds.Kind("x", dataset_kinds.SyntheticParams, "m:f", file_parameters=("path",))
    with pytest.raises(TypeError, match="record key"):
        dataset_kinds.Kind("x", dataset_kinds.SyntheticParams, "m:f", record_key="word")


def test_method_flags_match_their_options():
    for name, m in methods.REGISTRY.items():
        fields = {s.name for s in specs(m.options)}
        assert ("labels" in fields) == m.needs_partition, name
        assert issubclass(m.options, methods.PartitionOptions) == m.needs_partition, name
        assert issubclass(m.options, methods.GapOptions) != m.baseline or m.delegates, name
    with pytest.raises(TypeError, match="PartitionOptions"):
        methods.Method("m:f", methods.LpOptions, "x", needs_partition=True)
    with pytest.raises(TypeError, match="no bound"):
        methods.Method("m:f", methods.LpOptions, "x", baseline=True)


@pytest.mark.parametrize("name", sorted(methods.PARTITIONED))
def test_a_partition_method_solves_on_the_partition(name):
    from mdp_core.problem.datasets.grid import grid
    from mdp_core.problem.partition import partition
    from mdp_core.solvers.solve import solve

    inst = grid(rows=3, cols=4, n_outputs=4, eta=1.5)
    labels = partition(inst, "kmdv", 2, 0).labels
    sol = solve(inst, name, labels=labels)
    assert sol.z.shape == (inst.n_records, inst.n_outputs)
    assert sol.lower_bound is not None


def test_config_baselines_and_partition_fields_come_from_the_registry():
    from flows import config

    assert typing.get_args(config.Baseline) == methods.COMPARABLE
    # every method that does not delegate, the baselines first, each group in registry order
    assert set(methods.COMPARABLE) == {n for n, m in methods.REGISTRY.items() if not m.delegates}
    first = [n for n in methods.METHOD_NAMES if n in methods.BASELINES]
    assert list(methods.COMPARABLE) == first + [
        n for n in methods.METHOD_NAMES if n in methods.COMPARABLE[len(first) :]
    ]
    partition_fields = {s.name for s in specs(methods.PartitionOptions)}
    for name, m in methods.REGISTRY.items():
        shown = {s.name for s in config.method_option_specs(name)}
        assert not (shown & partition_fields) if m.needs_partition else True, name


def test_evaluate_passes_labels_by_the_flag():
    import tasks.evaluate as ev

    src = inspect.getsource(ev)
    assert '"benders"' not in src and "needs_partition(" in src


def test_docs_list_exactly_the_registered_kinds_and_methods():
    table = (DOCS / "datasets.md").read_text()
    kinds = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert sorted(kinds) == sorted(dataset_kinds.KINDS)
    text = (DOCS / "methods.md").read_text()
    bullets = re.findall(r"^- `([a-z_]+)`", text, flags=re.M)
    baselines_line = next(line for line in text.splitlines() if line.startswith("- baselines "))
    baselines_line += text.split(baselines_line, 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`([a-z_]+)` \(", baselines_line)
    assert sorted(bullets) == sorted(n for n, m in methods.REGISTRY.items() if not m.baseline)
    assert sorted(named) == sorted(methods.BASELINES)
