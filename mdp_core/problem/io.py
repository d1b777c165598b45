"""The on-disk formats: the Parquet instance directory ("constraint export") and mechanisms.

Instance directory (schema version 1), readable with pandas / DuckDB alone:

  records.parquet   record_id int64 (0..N-1, in order), prior float64 (sums to 1), optional columns
                    (``lat``/``lon`` degrees, ``x0``.. coordinates, ``label``, ...)
  outputs.parquet   output_id int64 (0..K-1, in order), optional ``record_id`` int64 and coordinates
  edges.parquet     i int64, j int64 (i < j, sorted), distance float64 (0 < d <= eta) -- the mDP graph
  costs.parquet     i int64, k int64, cost float64 -- all N*K entries, sorted by (i, k)
  instance.json     format, schema_version, epsilon, eta, distance_unit, metric, n_records,
                    n_outputs, n_edges, tables {file: sha256}, provenance {...}

Mechanism: ``mechanism.parquet`` (i int64, k int64, prob float64; all N*K rows sorted by (i, k))
next to ``solve.json`` (method, status, objective, bounds, gap, iterations, seconds, solver, ...).

Every file is written atomically (unique temp file in the same directory, fsync, rename), and
``instance.json`` last: it names the content hash of every table, so a reader detects a missing,
truncated or modified table. Parquet files carry no timestamps: the same data gives the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mdp_core.declarations import tables
from mdp_core.declarations.tables import PublishedFile
from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance

# the helpers that need no numerical library live in mdp_core.runtime.files (re-exported here)
from mdp_core.runtime.files import atomic_write, file_sha256, read_json, write_json  # noqa: F401

FORMAT = "mdp-instance"
SCHEMA_VERSION = 1
TABLES = tables.INSTANCE_TABLES  # in the order instance.json lists them
_PANDAS = {"int64": "int64", "double": "float64", "bool": "bool"}  # Arrow type -> the dtype read_table checks


def _schema(decl: PublishedFile) -> dict[str, str]:
    """The pandas dtypes :func:`read_table` checks of a declared all-numeric table (its declared columns)."""
    return {c.name: _PANDAS[str(c.dtype)] for c in decl.columns or ()}


EDGE_SCHEMA = _schema(tables.EDGES)
COST_SCHEMA = _schema(tables.COSTS)
MECHANISM_SCHEMA = _schema(tables.MECHANISM)
Columns = Mapping[str, np.ndarray | list | pd.Series]


def _arrow(values: np.ndarray | list | pd.Series) -> pa.Array:
    """A column as Arrow: a Series through pandas (a null stays null, NaN of a float Series is null), else as is."""
    return pa.Array.from_pandas(values) if isinstance(values, pd.Series) else pa.array(values)


def _write(path: str | Path, arrays: Mapping[str, pa.Array]) -> Path:
    """Parquet without pandas metadata or timestamps (zstd): the same columns give the same bytes."""
    table = pa.table(dict(arrays))
    return atomic_write(path, lambda p: pq.write_table(table, p, compression="zstd"))


def write_table(path: str | Path, columns: Columns) -> Path:
    """Write columns (in the given order) as Parquet without pandas metadata or timestamps. A table a release
    publishes is written by :func:`write_published` instead (its declared columns and Arrow types)."""
    return _write(path, {k: _arrow(v) for k, v in columns.items()})


def write_frame(path: str | Path, frame: pd.DataFrame) -> Path:
    return write_table(path, {c: frame[c] for c in frame.columns})


def _declared_order(decl: PublishedFile, given: list[str]) -> list[str]:
    """The columns to write, checked against ``decl``: every given column declared (or, in a table with
    coordinates, ``x0, x1, ...``); a table of ``all_columns`` has each declared column, written in declared order;
    another (a method's trace, a kind's records) any subset, in the given order."""
    declared = set(decl.column_names)
    undeclared = [c for c in given if c not in declared and not (decl.coordinates and tables.COORDINATE.fullmatch(c))]
    if undeclared:
        raise InputError(
            f"{decl.path}: undeclared column(s) {undeclared} (declared: {', '.join(decl.column_names)}); "
            "a published column is declared first, in mdp_core/declarations/tables.py"
        )
    if not decl.all_columns:
        return given
    missing = [c for c in decl.column_names if c not in given]
    if missing:
        raise InputError(f"{decl.path}: missing declared column(s) {missing}")
    return list(decl.column_names)


def write_published(path: str | Path, data: pd.DataFrame | Columns, name: str | PublishedFile) -> Path:
    """Write the published Parquet table ``name`` (:func:`mdp_core.declarations.tables.table`, e.g.
    ``"evaluation.parquet"``, or its declaration: :func:`mdp_core.declarations.contract.published` for
    ``instance/records.parquet``) from a frame or columns: checked against its declared columns
    (:func:`_declared_order`: an undeclared or missing column is an InputError), each cast to its declared Arrow
    type (text: ``large_string`` even from a numpy object array; a coordinate: ``double``; a column declared
    ``any`` as given; a lossy cast, e.g. 1.5 to int64, is an InputError), deterministic like :func:`write_table`."""
    decl = name if isinstance(name, PublishedFile) else tables.table(name)
    if decl.columns is None:
        raise InputError(f"{decl.path}: not a Parquet table")
    source = {c: data[c] for c in data.columns} if isinstance(data, pd.DataFrame) else dict(data)
    types = {c.name: c.dtype for c in decl.columns}
    arrays = {}
    for col in _declared_order(decl, list(source)):
        arr, dtype = _arrow(source[col]), types.get(col, "double")  # not declared: a coordinate
        if dtype is not None and str(arr.type) != dtype:
            try:
                arr = arr.cast(pa.type_for_alias(dtype))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InputError(f"{decl.path}: column {col!r} ({arr.type}) is not a {dtype}: {exc}") from None
        arrays[col] = arr
    return _write(path, arrays)


def read_table(
    path: str | Path, schema: dict[str, str] | None = None, required: dict[str, str] | None = None
) -> pd.DataFrame:
    """Read a Parquet table; ``schema`` = exact columns and dtypes, ``required`` = at least these."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        frame = pq.read_table(path).to_pandas()
    except Exception as exc:  # pyarrow raises several types for truncated / non-Parquet files
        raise InputError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    want = schema or required or {}
    missing = [c for c in want if c not in frame.columns]
    if missing:
        raise InputError(f"{path.name}: missing column(s) {missing}")
    if schema is not None:
        extra = [c for c in frame.columns if c not in schema]
        if extra:
            raise InputError(f"{path.name}: unexpected column(s) {extra}; expected exactly {list(schema)}")
    for col, dtype in want.items():
        if str(frame[col].dtype) != dtype:
            raise InputError(f"{path.name}: column {col!r} has type {frame[col].dtype}, expected {dtype}")
        if dtype == "float64" and not np.all(np.isfinite(frame[col].to_numpy())):
            raise InputError(f"{path.name}: column {col!r} contains NaN or infinite values")
    return frame


def _ids(name: str, ids: np.ndarray, n: int, what: str) -> None:
    if ids.shape[0] != n or not np.array_equal(ids, np.arange(n)):
        if np.unique(ids).shape[0] != ids.shape[0]:
            raise InputError(f"{name}: duplicate {what} values")
        raise InputError(f"{name}: {what} must be 0..{n - 1} in order")


def _dense(name: str, frame: pd.DataFrame, n: int, k: int, row: str, col: str, val: str) -> np.ndarray:
    """Turn a complete long table (row, col, val) into an (n, k) array, with clear errors."""
    r = frame[row].to_numpy()
    c = frame[col].to_numpy()
    if r.size and (r.min() < 0 or r.max() >= n or c.min() < 0 or c.max() >= k):
        raise InputError(f"{name}: ids out of range (expected {row} in 0..{n - 1}, {col} in 0..{k - 1})")
    key = r * k + c
    if np.unique(key).shape[0] != key.shape[0]:
        raise InputError(f"{name}: duplicate ({row}, {col}) entries")
    if key.shape[0] != n * k:
        raise InputError(f"{name}: has {key.shape[0]} entries, needs all N*K = {n}*{k} = {n * k}")
    out = np.empty(n * k)
    out[key] = frame[val].to_numpy()
    return out.reshape(n, k)


def _long(z: np.ndarray) -> dict[str, np.ndarray]:
    n, k = z.shape
    return {"i": np.repeat(np.arange(n, dtype=np.int64), k), "k": np.tile(np.arange(k, dtype=np.int64), n)}


# ----------------------------------------------------------------------------- instances
def write_instance(instance: Instance, out_dir: str | Path) -> dict:
    """Write ``instance`` as an instance directory; returns the instance.json content."""
    out = Path(out_dir)
    n, k = instance.n_records, instance.n_outputs
    rec = {"record_id": np.arange(n, dtype=np.int64), "prior": instance.prior}
    if instance.records is not None:
        rec |= {c: instance.records[c] for c in instance.records.columns if c not in rec}  # Series: keeps NA
    outs = {"output_id": np.arange(k, dtype=np.int64)}
    if instance.outputs is not None:
        outs |= {c: instance.outputs[c] for c in instance.outputs.columns if c not in outs}
    write_table(out / "records.parquet", rec)
    write_table(out / "outputs.parquet", outs)
    edges = {"i": instance.edges[:, 0], "j": instance.edges[:, 1], "distance": instance.distances}
    write_published(out / "edges.parquet", edges, tables.EDGES)
    write_published(out / "costs.parquet", _long(instance.costs) | {"cost": instance.costs.ravel()}, tables.COSTS)
    meta = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "epsilon": instance.epsilon,
        "eta": instance.eta,
        "distance_unit": instance.distance_unit,
        "metric": instance.metric,
        "n_records": n,
        "n_outputs": k,
        "n_edges": instance.n_edges,
        "tables": {t: file_sha256(out / t) for t in TABLES},
        "provenance": instance.provenance,
    }
    write_json(out / "instance.json", meta)
    return meta


@overload
def _json_number(d: Path, meta: dict, key: str, kind: type[int]) -> int: ...
@overload
def _json_number(d: Path, meta: dict, key: str, kind: type[float]) -> float: ...
def _json_number(d: Path, meta: dict, key: str, kind: type[int] | type[float]) -> float | int:
    """``meta[key]`` as ``kind`` (int or float); InputError naming the key when it is not a number."""
    v = meta[key]
    if isinstance(v, bool) or not isinstance(v, int if kind is int else (int, float)):
        raise InputError(
            f"{d / 'instance.json'}: {key} must be {'an integer' if kind is int else 'a number'}, got {v!r}"
        )
    return kind(v)


def _confined(d: Path, table: object) -> None:
    """InputError unless ``table`` (a name listed in instance.json ``tables``) is a plain file name of a
    file inside ``d`` itself: no folder part, no ``..``, not absolute, not a symlink leading out of ``d``."""
    where = d / "instance.json"
    if (
        not isinstance(table, str)
        or not table
        or table in (".", "..")
        or "/" in table
        or "\\" in table
        or "\0" in table
        or Path(table).is_absolute()
    ):
        raise InputError(f"{where}: table name {table!r} is not a plain file name inside the instance folder")
    path = d / table
    if path.is_symlink() and Path(os.path.realpath(path)).parent != Path(os.path.realpath(d)):
        raise InputError(f"{where}: table {table!r} is a symlink leading out of the instance folder")


def read_instance(in_dir: str | Path, epsilon: float | None = None) -> Instance:
    """Read and fully validate an instance directory (optionally overriding epsilon)."""
    d = Path(in_dir)
    if not d.is_dir():
        raise InputError(f"{d}: no such instance directory")
    meta = read_json(d / "instance.json")
    if not isinstance(meta, dict):
        raise InputError(f"{d / 'instance.json'}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT or meta.get("schema_version") != SCHEMA_VERSION:
        raise InputError(
            f"{d / 'instance.json'}: not an {FORMAT} v{SCHEMA_VERSION} file "
            f"(format={meta.get('format')!r}, schema_version={meta.get('schema_version')!r})"
        )
    for key in ("epsilon", "eta", "metric", "distance_unit", "n_records", "n_outputs", "tables"):
        if key not in meta:
            raise InputError(f"{d / 'instance.json'}: missing key {key!r}")
    if not isinstance(meta["tables"], dict):
        raise InputError(f"{d / 'instance.json'}: 'tables' must map file names to sha256 digests")
    unlisted = [t for t in TABLES if t not in meta["tables"]]
    if unlisted:
        raise InputError(f"{d / 'instance.json'}: 'tables' lacks the sha256 of {unlisted}")
    for table, digest in meta["tables"].items():
        _confined(d, table)
        if not (d / table).is_file():
            raise InputError(f"{d / table}: no such file (listed in instance.json)")
        if file_sha256(d / table) != digest:
            raise InputError(f"{d / table}: content does not match the sha256 in instance.json (modified or truncated)")
    n, k = _json_number(d, meta, "n_records", int), _json_number(d, meta, "n_outputs", int)
    eps = _json_number(d, meta, "epsilon", float) if epsilon is None else epsilon
    eta = _json_number(d, meta, "eta", float)
    records = read_table(d / "records.parquet", required={"record_id": "int64", "prior": "float64"})
    _ids("records.parquet", records["record_id"].to_numpy(), n, "record_id")
    outputs = read_table(d / "outputs.parquet", required={"output_id": "int64"})
    _ids("outputs.parquet", outputs["output_id"].to_numpy(), k, "output_id")
    edges = read_table(d / "edges.parquet", schema=EDGE_SCHEMA)
    costs = read_table(d / "costs.parquet", schema=COST_SCHEMA)
    extra_rec = records.drop(columns=["record_id", "prior"])
    extra_out = outputs.drop(columns=["output_id"])
    return Instance(
        prior=records["prior"].to_numpy(),
        costs=_dense("costs.parquet", costs, n, k, "i", "k", "cost"),
        edges=edges[["i", "j"]].to_numpy(),
        distances=edges["distance"].to_numpy(),
        epsilon=eps,
        eta=eta,
        metric=meta["metric"],
        distance_unit=meta["distance_unit"],
        records=extra_rec if len(extra_rec.columns) else None,
        outputs=extra_out if len(extra_out.columns) else None,
        provenance=meta.get("provenance", {}),
    )


# ----------------------------------------------------------------------------- mechanisms
def write_mechanism_table(z: np.ndarray, path: str | Path) -> None:
    """Write an (N, K) mechanism as mechanism.parquet's long table (i, k, prob), atomically. Unchecked: the
    one caller that publishes is :func:`mdp_core.solvers.verify.write_mechanism`, which verifies first."""
    write_published(path, _long(z) | {"prob": np.asarray(z, dtype=np.float64).ravel()}, tables.MECHANISM)


def read_mechanism(path: str | Path, n_records: int | None = None, n_outputs: int | None = None) -> np.ndarray:
    """Read mechanism.parquet into an (N, K) array (N, K inferred from the ids when not given)."""
    frame = read_table(path, schema=MECHANISM_SCHEMA)
    if frame.empty:
        raise InputError(f"{path}: empty mechanism table")
    n = int(frame["i"].max()) + 1 if n_records is None else n_records
    k = int(frame["k"].max()) + 1 if n_outputs is None else n_outputs
    return _dense(Path(path).name, frame, n, k, "i", "k", "prob")
