"""Issue 42, "writers read the contract": every published table is written from its declared columns and Arrow
types (mdp_core.problem.io.write_published), and no module keeps its own copy of a declared column list."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from mdp_core.declarations import contract, tables
from mdp_core.errors import InputError
from mdp_core.problem import io
from mdp_core.release import evaluate, postprocess
from mdp_core.solvers import benders, colgen, rowgen

ROOT = Path(__file__).resolve().parents[1]
DECLARING = {ROOT / "mdp_core" / "declarations" / "contract.py", ROOT / "mdp_core" / "declarations" / "tables.py"}


def _types(path: Path) -> dict[str, str]:
    return {f.name: str(f.type) for f in pq.read_schema(path)}


def test_object_text_is_written_as_the_declared_large_string(tmp_path: Path) -> None:
    methods = np.array(["lp", "laplace"], dtype=object)  # the trap: pyarrow makes an object array `string`
    cols = {"factor": [1.0, 2.0], "epsilon": [0.5, 1.0], "method": methods, "expected_loss": [0.1, 0.2]}
    io.write_published(tmp_path / "u.parquet", cols, "utility_vs_eps.parquet")
    assert _types(tmp_path / "u.parquet") == {
        c.name: c.dtype for c in contract.published("utility_vs_eps.parquet").columns or ()
    }
    frame = pd.DataFrame({"method": methods, "epsilon": [0.5, 1.0], "factor": [1, 2], "expected_loss": [0.1, 0.2]})
    io.write_published(tmp_path / "f.parquet", frame, "utility_vs_eps.parquet")  # declared order, declared types
    assert pq.read_schema(tmp_path / "f.parquet").names == list(
        contract.published("utility_vs_eps.parquet").column_names
    )
    assert _types(tmp_path / "f.parquet") == _types(tmp_path / "u.parquet")


def test_same_content_same_bytes(tmp_path: Path) -> None:
    frame = pd.DataFrame({"i": [0, 0], "k": [0, 1], "prob": [0.5, 0.5]})
    for name in ("a", "b"):
        io.write_published(tmp_path / name, frame, "mechanism.parquet")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_an_undeclared_or_missing_column_is_refused(tmp_path: Path) -> None:
    cols = {"factor": [1.0], "epsilon": [0.5], "method": ["lp"], "expected_loss": [0.1]}
    with pytest.raises(InputError, match="undeclared column.*'true_loss'"):
        io.write_published(tmp_path / "u.parquet", cols | {"true_loss": [0.0]}, "utility_vs_eps.parquet")
    with pytest.raises(InputError, match="missing declared column.*'method'"):
        io.write_published(
            tmp_path / "u.parquet", {k: v for k, v in cols.items() if k != "method"}, "utility_vs_eps.parquet"
        )
    with pytest.raises(InputError, match="is not a int64"):
        io.write_published(tmp_path / "m.parquet", {"i": [0.5], "k": [0], "prob": [1.0]}, "mechanism.parquet")
    assert not list(tmp_path.iterdir())
    with pytest.raises(KeyError):
        io.write_published(tmp_path / "x.parquet", cols, "secret.parquet")


def test_a_subset_table_keeps_its_order_and_its_coordinates(tmp_path: Path) -> None:
    trace = {c: np.arange(2, dtype=np.float64) for c in tables.TRACE_COLUMNS["colgen"]}
    io.write_published(tmp_path / "t.parquet", trace, "trace.parquet")
    types = _types(tmp_path / "t.parquet")
    assert list(types) == list(colgen.TRACE_COLUMNS) and types["iteration"] == "int64"
    io.write_published(tmp_path / "o.parquet", {"output_id": np.arange(2), "x0": [0, 1]}, "instance/outputs.parquet")
    assert _types(tmp_path / "o.parquet") == {"output_id": "int64", "x0": "double"}


def test_the_modules_read_their_columns_from_the_contract() -> None:
    assert tuple(evaluate.COLUMNS) == contract.published("evaluation.parquet").column_names
    assert tuple(postprocess.AGGREGATE_COLUMNS) == contract.published("aggregates.parquet").column_names
    assert tuple(postprocess.CURVE_COLUMNS) == contract.published("cbdp_error.parquet").column_names
    solvers = {"rowgen": rowgen.TRACE_COLUMNS, "colgen": colgen.TRACE_COLUMNS, "benders": benders._TRACE_COLUMNS}
    assert {m: tuple(c) for m, c in solvers.items()} == tables.TRACE_COLUMNS
    assert set().union(*tables.TRACE_COLUMNS.values()) == set(contract.published("trace.parquet").column_names)
    assert io.TABLES == contract.INSTANCE_TABLES
    for decl in tables.PARQUET:
        assert contract.published(decl.path) is decl


def _declared_sets() -> dict[frozenset[str], str]:
    out = {frozenset(f.column_names): f.path for f in contract.PUBLISHED if f.columns}
    out |= {frozenset(c): f"trace.parquet ({m})" for m, c in tables.TRACE_COLUMNS.items()}
    out[frozenset(contract.INSTANCE_TABLES)] = "instance.json tables"
    out[frozenset(contract.AGGREGATE_COLUMNS_BEFORE_41)] = "aggregates.parquet before issue 41"
    return out


def _string_lists(tree: ast.AST) -> list[tuple[int, frozenset[str]]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple | ast.Set) and len(node.elts) > 1:
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                found.append((node.lineno, frozenset(e.value for e in node.elts)))  # type: ignore[attr-defined]
    return found


def test_no_module_keeps_a_second_column_list() -> None:
    declared = _declared_sets()
    copies = []
    for top in ("mdp_core", "tasks", "flows"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path in DECLARING:
                continue
            for line, names in _string_lists(ast.parse(path.read_text(), str(path))):
                if names in declared:
                    copies.append(f"{path.relative_to(ROOT)}:{line}: the columns of {declared[names]}")
    assert not copies, "read them from mdp_core.declarations.contract / tables instead:\n" + "\n".join(copies)


def test_the_scan_finds_a_copy() -> None:
    names = contract.published("cbdp_error.parquet").column_names
    tree = ast.parse(f"CURVE = {list(names)!r}\n")
    assert any(found in _declared_sets() for _, found in _string_lists(tree))
