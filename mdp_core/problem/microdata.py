"""The agency's secret microdata: one row per individual, mapped to the instance's secret records.

Input (CSV or Parquet), one row per individual, in any order, with one of:
  * ``lat``, ``lon`` (degrees) -- geographic instances (records with ``lat``/``lon``): each individual
    goes to the nearest record by haversine distance, in km. Aliases (any letter case): ``latitude``
    -> ``lat``; ``longitude``, ``lng``, ``long`` -> ``lon``;
  * ``x0..x{d-1}`` -- vector instances (records with ``x0..``, Euclidean metric): nearest record by
    Euclidean distance, in the instance's unit;
  * ``record`` -- a record key: the records' ``word`` (text instances), ``osmid`` (road nodes) or the
    record id 0..N-1, matched exactly.
Recognised names are matched case-insensitively. Coordinates take precedence over ``record`` when both
are given. Any other column (an internal id, say) is allowed, read and never used, named or published.
A CSV file's delimiter (``,``, ``;``, tab or ``|``) is detected from its header line.

**Refusals, at once.** Anything that is not a regular file (a FIFO, a device such as /dev/urandom, a
directory, a symlink to one of those) is refused before it is opened (``os.stat`` after resolving
symlinks), and again on the opened descriptor (``fstat``, opened ``O_NONBLOCK | O_NOFOLLOW`` on the
resolved path: a file swapped between the two checks is refused, never waited on). Unreadable, empty,
binary, not-CSV, not-Parquet files, duplicated columns, a file with no recognised header, an individual
farther than ``max_distance`` from every record, a key that names no record, NaN or out-of-range
coordinates: an InputError -- never silently dropped.

**No secret in an error.** The table is secret: every message of this module names only column names
from the recognised set (``lat``, ``lon``, ``x<i>``, ``record``, or an alias of them) or counts of columns,
and counts -- never a cell value, a distance, a byte of the file, or a header that is not a recognised
name (a headerless file's "header" is a person). Errors reach the terminal, Prefect's database and
FAILED.txt, so an error about *which* people (1-based data rows, the header not counted) is a
:class:`~mdp_core.errors.SecretTableError`: its message says what is wrong (never how many) and points to
``mdp-release check --config FILE``; the counts and row numbers are only in its ``detail`` (``check``'s terminal, the
store's ``private/failures/``).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from mdp_core.declarations import dataset_kinds
from mdp_core.errors import InputError, SecretTableError
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, unit_sphere

# record keys a ``record`` column is matched against, in this order: each dataset kind's declared record_key
KEY_COLUMNS: tuple[str, ...] = dataset_kinds.RECORD_KEYS
ALIASES = {"latitude": "lat", "longitude": "lon", "lng": "lon", "long": "lon"}
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
SHOWN_ROWS = 10  # row numbers an error's detail or a description lists (the count is always complete)
CHECK_HINT = "`mdp-release check --config FILE` names the rows, on your terminal only"
EXPECTED = "expected lat/lon, x0.., or record"
_XCOL = re.compile(r"x\d+")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".txt", ".tsv")
_PARQUET_SUFFIXES = (".parquet", ".pq")


# ----------------------------------------------------------------------------- safe bytes
def _regular_fd(path: str | Path, what: str) -> int:
    """An O_RDONLY descriptor of the regular file behind ``path`` (symlinks resolved); InputError, never a
    wait, for anything else. Checked twice: ``os.stat`` of the resolved path before opening, ``fstat`` of
    the descriptor after (opened O_NONBLOCK | O_NOFOLLOW, so a FIFO swapped in between does not block and
    a symlink swapped in is refused)."""
    p = Path(path)
    try:
        real = os.path.realpath(p)
        st = os.stat(real)
    except FileNotFoundError:
        raise InputError(f"{what} file: no such file {p}") from None
    except OSError as exc:
        raise InputError(f"{what} file {p}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} file {p}: not a regular file (a FIFO, device, socket or folder): refused")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise InputError(f"{what} file {p}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{what} file {p}: not a regular file (it changed while opened): refused")
    return fd


def open_regular(path: str | Path, what: str = "microdata") -> bytes:
    """The bytes of the regular file ``path`` (symlinks to a regular file followed); InputError at once for
    a FIFO, device, socket, folder or unreadable file (never blocks; see :func:`_regular_fd`)."""
    fd = _regular_fd(path, what)
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(f"{what} file {Path(path)}: cannot be read ({exc.strerror or type(exc).__name__})") from None


def sha256_regular(path: str | Path, what: str = "microdata") -> str:
    """sha256 (hex) of the regular file ``path``, read in 1 MiB blocks with the refusals of
    :func:`open_regular` (the secret table's private version id; never published)."""
    fd = _regular_fd(path, what)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise InputError(f"{what} file {Path(path)}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    return h.hexdigest()


# ----------------------------------------------------------------------------- parsing
def canonical(name: object) -> str | None:
    """The recognised name (``lat``, ``lon``, ``x<i>``, ``record``) a header field stands for, or None."""
    n = str(name).strip().lower()
    n = ALIASES.get(n, n)
    return n if n in ("lat", "lon", "record") or _XCOL.fullmatch(n) else None


def rows_text(rows: np.ndarray) -> str:
    """``"data row(s) 3, 8 (1-based, header not counted)"`` for 0-based row indices; at most
    :data:`SHOWN_ROWS` listed."""
    rows = np.asarray(rows)
    shown = ", ".join(str(int(r) + 1) for r in rows[:SHOWN_ROWS])
    more = f" and {rows.size - SHOWN_ROWS} more" if rows.size > SHOWN_ROWS else ""
    return f"data row(s) {shown}{more} (1-based, header not counted)"


@dataclass(frozen=True)
class Table:
    """A microdata file read safely: ``frame`` with recognised columns renamed to their canonical names
    (other columns keep their stripped header: they are never named in a message); ``format`` "csv",
    "csv.gz" or "parquet"; ``delimiter`` the CSV delimiter detected (None: Parquet); ``encoding``;
    ``aliases`` {header as written: canonical name} for recognised headers written otherwise;
    ``recognised`` the canonical names present; ``n_other`` the number of other columns."""

    frame: pd.DataFrame
    format: str
    delimiter: str | None
    encoding: str | None
    aliases: dict[str, str] = field(default_factory=dict)
    recognised: tuple[str, ...] = ()
    n_other: int = 0


def _names(raw: list[str], what: str, name: str) -> tuple[list[str], dict[str, str], tuple[str, ...], int]:
    """(new column names, aliases, recognised, n_other) of a header; InputError for duplicated columns
    (named when recognised, else neither named nor counted: a headerless file's first row is a person's)."""
    canon = [canonical(c) for c in raw]
    new = [c if c is not None else str(r).strip() for c, r in zip(canon, raw, strict=True)]
    dup_known = sorted({c for c, k in Counter(c for c in canon if c is not None).items() if k > 1})
    if dup_known:
        raise InputError(f"{name}: the {what} table has duplicated column(s) {dup_known} (aliases count as the same)")
    others = [n for c, n in zip(canon, new, strict=True) if c is None]
    if len(set(others)) < len(others):
        raise InputError(f"{name}: the {what} table has duplicated column names outside {EXPECTED}")
    aliases = {str(r).strip(): c for c, r in zip(canon, raw, strict=True) if c is not None and str(r).strip() != c}
    recognised = tuple(c for c in canon if c is not None)
    return new, aliases, recognised, len(others)


def _delimiter(header: str) -> str:
    """The delimiter among :data:`DELIMITERS` that splits the header line into the most fields (ties: in
    that order); ``,`` for a one-column file."""
    best, most = ",", 1
    for d in DELIMITERS:
        n = len(next(csv.reader([header], delimiter=d), []))
        if n > most:
            best, most = d, n
    return best


def _parse_error(exc: Exception, name: str, what: str, fmt: str) -> InputError:
    """An InputError for a parser failure: its type and, for CSV, the data row it names -- never the
    parser's message (it may quote the file). For the secret table (``what`` "microdata") a
    :class:`SecretTableError` whose message says "in one malformed row" and whose detail names it."""
    m = re.search(r"line (\d+)", str(exc))
    row = int(m.group(1)) - 1 if m and fmt != "parquet" else None
    head = f"{name}: cannot read the {what} table as {fmt.upper()} ({type(exc).__name__}"
    detail = head + ("" if row is None else f" at data row {row} (1-based, header not counted)") + ")"
    if what != "microdata":
        return InputError(detail)
    return SecretTableError(head + ("" if row is None else f" in one malformed row; {CHECK_HINT}") + ")", detail)


def _read_csv(data: bytes, name: str, what: str, fmt: str) -> Table:
    if b"\x00" in data:
        raise InputError(f"{name}: not a CSV text file (it holds NUL bytes): cannot read the {what} table")
    encoding = "utf-8"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        encoding, text = "latin-1", data.decode("latin-1")  # a legacy export; recognised names are ASCII
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise InputError(f"{name}: the {what} table is empty (no header, no rows)")
    delim = _delimiter(lines[first])
    raw = next(csv.reader([lines[first]], delimiter=delim))
    new, aliases, recognised, n_other = _names(raw, what, name)
    dtype = {i: str for i, n in enumerate(new) if n == "record"}  # keys matched exactly, as text
    try:
        frame = pd.read_csv(
            io.StringIO(text),
            sep=delim,
            header=0,
            names=new,
            dtype=dtype or None,
            keep_default_na=False,
            na_values=[""],
            skip_blank_lines=True,
            engine="c",
        )
    except Exception as exc:  # pandas parser errors: never their message
        raise _parse_error(exc, name, what, "csv") from None
    return Table(frame, fmt, delim, encoding, aliases, recognised, n_other)


def _read_parquet(data: bytes, name: str, what: str) -> Table:
    if not (data[:4] == b"PAR1" and data[-4:] == b"PAR1"):
        raise InputError(f"{name}: not a Parquet file: cannot read the {what} table")
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(io.BytesIO(data))
        raw = [str(n) for n in pf.schema_arrow.names]
        new, aliases, recognised, n_other = _names(raw, what, name)
        frame = pf.read().rename_columns(new).to_pandas()
    except InputError:
        raise
    except Exception as exc:
        raise _parse_error(exc, name, what, "parquet") from None
    if "record" in frame.columns:  # keys as text, as from a CSV file (whole floats -- ids with gaps -- as ints)
        keys = frame["record"]
        if pd.api.types.is_float_dtype(keys) and bool((keys.dropna() % 1 == 0).all()):
            keys = keys.astype("Int64")
        frame["record"] = keys.astype("string").astype(object).where(keys.notna(), None)
    return Table(frame, "parquet", None, None, aliases, recognised, n_other)


def read_table(path: str | Path, what: str = "microdata") -> Table:
    """Read ``path`` safely (:func:`open_regular`) as CSV (``.csv``, ``.csv.gz``, ``.txt``, ``.tsv``) or
    Parquet (``.parquet``, ``.pq``; also a Parquet file under a CSV name, by its magic bytes). InputError,
    with no byte of the file in it, for anything unreadable, unsupported, empty or with duplicated columns."""
    p = _supported(path, what)
    return _parse(open_regular(p, what), p, what)


def read_microdata(path: str | Path) -> pd.DataFrame:
    """The file as a DataFrame (see :func:`read_table`): recognised columns under their canonical names
    (``lat``, ``lon``, ``x<i>``, ``record`` as text), the others as written."""
    return read_table(path).frame


def read_secret(path: str | Path) -> tuple[Table, str]:
    """The secret table at ``path`` read once: (its :class:`Table`, sha256 hex of the SAME bytes). Every
    refusal is a :class:`SecretTableError` whose public message names the file by its role (``[release]
    microdata``), never by its path (which reaches no log, state message or failure record); the path is in
    its ``detail`` (the terminal of ``mdp-release check``, the store's ``private/failures/``)."""
    p = Path(path)
    try:
        if not os.path.exists(p):
            raise InputError(f"microdata file: no such file {p}")
        p = _supported(path, "microdata")
        data = open_regular(p)
        return _parse(data, p), hashlib.sha256(data).hexdigest()
    except SecretTableError as exc:
        raise SecretTableError(_without_path(str(exc), p), exc.detail) from None
    except InputError as exc:
        raise SecretTableError(_without_path(str(exc), p), str(exc)) from None


SECRET_FILE = "the [release] microdata file"  # how a public message names the secret table's file


def _without_path(message: str, p: Path) -> str:
    """``message`` with the secret table's path (as given, resolved, its name) replaced by :data:`SECRET_FILE`."""
    message = message.replace(f"microdata file: no such file {p}", f"{SECRET_FILE} does not exist (no such file)")
    for name in sorted({str(p), os.path.realpath(p), p.name}, key=len, reverse=True):
        if name:
            message = message.replace(f"microdata file {name}", SECRET_FILE).replace(name, SECRET_FILE)
    return message


def _supported(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.name.lower().endswith(_CSV_SUFFIXES + _PARQUET_SUFFIXES):
        raise InputError(f"{p.name}: unsupported {what} file type (use .csv or .parquet)")
    return p


def _parse(data: bytes, p: Path, what: str = "microdata") -> Table:
    """The :class:`Table` of a file's bytes (Parquet by suffix or magic bytes, else CSV, gunzipped)."""
    name = str(p)
    if not data:
        raise InputError(f"{name}: the {what} file is empty (0 bytes)")
    if p.name.lower().endswith(_PARQUET_SUFFIXES) or data[:4] == b"PAR1":
        table = _read_parquet(data, name, what)
    else:
        fmt = "csv"
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as exc:
                raise InputError(f"{name}: cannot read the {what} table (broken gzip: {type(exc).__name__})") from None
            fmt = "csv.gz"
        table = _read_csv(data, name, what, fmt)
    if len(table.frame) == 0:
        raise InputError(f"{name}: the {what} table has no rows")
    return table


# ----------------------------------------------------------------------------- mapping to records
@dataclass(frozen=True)
class Mapping:
    """Individuals mapped to records: ``record_ids`` (n,) int64 in 0..N-1 in file order; ``by`` the
    columns used; ``max_distance`` the largest individual-to-record distance (0 for keys), in
    ``unit``; ``distances`` (n,) float64 each individual's distance to its record (secret)."""

    record_ids: np.ndarray
    by: str
    max_distance: float
    unit: str
    distances: np.ndarray | None = None


@dataclass(frozen=True)
class Located:
    """Each individual's nearest record before any limit: ``record_ids`` (n,) int64 (-1 where ``bad``),
    ``distances`` (n,) float64 in ``unit`` (NaN where ``bad``; 0 for keys), ``bad`` (n,) bool the rows
    that cannot be mapped, ``bad_reason`` what is wrong with them (a verb phrase, no value), ``by`` the
    columns used."""

    record_ids: np.ndarray
    distances: np.ndarray
    bad: np.ndarray
    bad_reason: str
    by: str
    unit: str


def canonical_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its recognised columns under their canonical names (``Latitude`` -> ``lat``);
    InputError for duplicated columns (see :func:`read_table`, which already did this for a file)."""
    raw = [str(c) for c in df.columns]
    new, _, _, _ = _names(raw, "microdata", "microdata")
    return df if new == raw else df.set_axis(new, axis=1)


def key_columns(columns: Any) -> tuple[str, list[str]]:
    """(kind, columns) of the key a frame's recognised columns give, instance-free: ("coordinates",
    ["lat", "lon"]), ("vector", ["x0", ...]) or ("record", ["record"]); InputError when none is
    recognised (a headerless file: its first row is a person) or ``lat``/``lon`` comes alone."""
    cols = [str(c) for c in columns]
    known = {c for c in cols if canonical(c) == c}
    if not known:
        raise InputError(
            f"microdata: no usable columns: no recognised header ({EXPECTED}; the file has {len(cols)} other "
            "column(s)); a file without a header line is refused (its first row would be read as the header)"
        )
    if {"lat", "lon"} <= known:
        return "coordinates", ["lat", "lon"]
    xs = sorted((c for c in known if _XCOL.fullmatch(c)), key=lambda c: int(c[1:]))
    if xs:
        return "vector", xs
    if "record" in known:
        return "record", ["record"]
    one = "lat" if "lat" in known else "lon"
    raise InputError(f"microdata: has {one!r} but not {'lon' if one == 'lat' else 'lat'!r} (nor x0.. or record)")


def _points(df: pd.DataFrame, cols: list[str], geo: bool) -> tuple[np.ndarray, np.ndarray]:
    """((n, d) float64 coordinates, (n,) bool rows with a NaN, non-numeric, infinite or (geo)
    out-of-range value)."""
    pts = np.column_stack([pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64) for c in cols])
    bad = ~np.all(np.isfinite(pts), axis=1)
    if geo:
        with np.errstate(invalid="ignore"):
            bad |= (np.abs(pts[:, 0]) > 90) | (np.abs(pts[:, 1]) > 180)
    return pts, bad


def _nearest(points: np.ndarray, records: np.ndarray, haversine: bool) -> tuple[np.ndarray, np.ndarray]:
    """(record index (n,), distance (n,)) of each point's nearest record: Euclidean, or haversine km."""
    if points.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    if haversine:
        tree = cKDTree(unit_sphere(records))
        chord, idx = tree.query(unit_sphere(points))
        dist = 2 * EARTH_RADIUS_KM * np.arcsin(np.clip(chord / (2 * EARTH_RADIUS_KM), 0.0, 1.0))
        return idx.astype(np.int64), dist
    dist, idx = cKDTree(records).query(points)
    return idx.astype(np.int64), np.asarray(dist, dtype=np.float64)


def _by_key(df: pd.DataFrame, inst: Instance) -> Located:
    keys = df["record"]
    missing = keys.isna().to_numpy()
    text = keys.astype(str).str.strip()
    recs = inst.records
    col = next((c for c in KEY_COLUMNS if recs is not None and c in recs.columns), None)
    if col is not None and recs is not None:
        ids = pd.Index(recs[col].astype(str)).get_indexer(text)
    else:
        num = pd.to_numeric(text, errors="coerce")
        whole = num.notna() & (num == np.floor(num)) & (num >= 0) & (num < inst.n_records)
        ids = np.where(whole, num.fillna(-1), -1).astype(np.int64)
        col = "record id"
    ids = np.where(missing, -1, np.asarray(ids, dtype=np.int64))
    bad = ids < 0
    reason = f"name a record that is not in the instance (matched against {col}) or none"
    return Located(ids, np.where(bad, np.nan, 0.0), bad, reason, f"record ({col})", inst.distance_unit)


def key_for(columns: Any, inst: Instance) -> list[str]:
    """The columns :func:`locate` maps a frame with ``columns`` (canonical names) by over ``inst``: ``["lat",
    "lon"]`` (geographic records), the instance's ``x0..`` (Euclidean records) or ``["record"]``, in that order
    of preference. InputError when the columns do not fit the instance at all."""
    cols = {str(c) for c in columns}
    kind, _ = key_columns(cols)
    recs = inst.records
    geo_records = recs is not None and {"lat", "lon"} <= set(recs.columns)
    xcols = inst.coordinate_columns() if inst.metric == "euclidean" else []
    if {"lat", "lon"} <= cols and geo_records:
        if inst.distance_unit != "km":
            raise InputError(f"microdata lat/lon: the instance's distances are in {inst.distance_unit}, not km")
        return ["lat", "lon"]
    if xcols and set(xcols) <= cols:
        return list(xcols)
    if "record" in cols:
        return ["record"]
    want = ["lat, lon"] if geo_records else []
    want += [f"x0..x{len(xcols) - 1}"] if xcols else []
    have = sorted(c for c in cols if canonical(c) == c)
    raise InputError(
        f"microdata: no usable columns; this instance takes {' or '.join(want + ['record'])} "
        f"(the file's recognised columns: {', '.join(have)}; key kind {kind})"
    )


def locate(df: pd.DataFrame, inst: Instance) -> Located:
    """Each individual's nearest record under the instance's metric (or by key), with the rows that cannot
    be mapped marked (not raised): what :func:`map_individuals` and ``mdp-release check`` build on.
    InputError when the columns do not fit the instance at all (:func:`key_for`)."""
    df = canonical_frame(df)
    cols = key_for(df.columns, inst)
    if cols == ["record"]:
        return _by_key(df, inst)
    if cols == ["lat", "lon"]:
        pts, bad = _points(df, cols, geo=True)
        records, haversine = inst.records[cols].to_numpy(dtype=np.float64), True  # type: ignore[index]
        by, unit, what = "lat, lon (haversine)", "km", "have NaN, non-numeric or out-of-range lat/lon"
    else:
        pts, bad = _points(df, cols, geo=False)
        records, haversine = inst.record_points(), False
        by, unit = f"{cols[0]}..{cols[-1]} (euclidean)", inst.distance_unit
        what = "have NaN or non-numeric coordinates"
    ids = np.full(len(df), -1, dtype=np.int64)
    dist = np.full(len(df), np.nan)
    ok = ~bad
    ids[ok], dist[ok] = _nearest(pts[ok], records, haversine)
    return Located(ids, dist, bad, what, by, unit)


# ----------------------------------------------------------------------------- the sealed rows
def sealed_rows(df: pd.DataFrame, inst: Instance) -> pd.DataFrame:
    """The secret table as the release sees it, canonical: only the columns :func:`locate` maps by over
    ``inst`` (:func:`key_for`), coordinates as float64 (non-numeric: NaN; -0.0 as 0.0), record keys as
    stripped text (missing: None), rows sorted by those columns. What the door validates and seals
    (``artifacts.private.PrivateStore.seal_table``); :func:`locate` of it maps the same people as of ``df``.
    The same people written otherwise (CSV or Parquet, reordered, other columns) give the same rows."""
    df = canonical_frame(df)
    cols = key_for(df.columns, inst)
    if cols == ["record"]:
        keys = df["record"]
        text = keys.astype(str).str.strip().astype(object).where(keys.notna(), None)
        out = pd.DataFrame({"record": pd.Series(text.to_numpy(dtype=object), dtype=object)})  # None stays None
        order = np.argsort(np.asarray([("" if v is None else "\x01" + v) for v in out["record"]]), kind="stable")
    else:
        pts = np.column_stack([pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64) for c in cols]) + 0.0
        out = pd.DataFrame({c: pts[:, i] for i, c in enumerate(cols)})
        order = np.lexsort(pts.T[::-1]) if len(out) else np.zeros(0, np.int64)
    return out.iloc[order].reset_index(drop=True)


def rows_sha256(rows: pd.DataFrame) -> str:
    """sha256 (hex) of :func:`sealed_rows`' canonical content: the column names, then each column's values
    (float64 little-endian bytes; keys as UTF-8, one NUL-terminated field each, a missing key as a lone
    0x01 byte). Secret (a hash of the true records): the snapshot's private name, never published."""
    h = hashlib.sha256(("mdp-release sealed rows v1\x00" + "\x00".join(map(str, rows.columns))).encode())
    h.update(len(rows).to_bytes(8, "little"))
    for c in rows.columns:
        if c == "record":
            h.update(b"".join(b"\x01\x00" if v is None else str(v).encode() + b"\x00" for v in rows[c]))
        else:
            h.update(np.ascontiguousarray(rows[c].to_numpy(dtype="<f8")).tobytes())
    return h.hexdigest()


def map_individuals(df: pd.DataFrame, inst: Instance, max_distance: float) -> Mapping:
    """Each individual's secret record (nearest under the instance's metric, or by key).

    ``max_distance`` (in the instance's ``distance_unit``; km for ``lat``/``lon``) bounds how far an
    individual may sit from its record. Raises :class:`SecretTableError` for anything unmappable: no count
    in its message, the counts and row numbers only in its ``detail``; InputError when the columns do not fit.
    """
    if not (np.isfinite(max_distance) and max_distance >= 0):
        raise InputError(f"max_distance must be a finite number >= 0, got {max_distance}")
    loc = locate(df, inst)
    n = loc.record_ids.size
    if loc.bad.any():
        rows = np.flatnonzero(loc.bad)
        what = f"microdata: {rows.size} of {n} individual(s) {loc.bad_reason}"  # counts: the detail only
        raise SecretTableError(
            f"microdata: some individual(s) {loc.bad_reason} ({CHECK_HINT})", f"{what}: {rows_text(rows)}"
        )
    far = loc.distances > max_distance
    if far.any():
        rows = np.flatnonzero(far)
        what = f"lie farther than max_distance = {max_distance:g} {loc.unit}"
        fix = "check the coordinates or raise [release] max_distance"
        raise SecretTableError(  # counts and rows: the detail only
            f"microdata: some individual(s) {what} from every record; {fix} ({CHECK_HINT}, with the distances)",
            f"microdata: {rows.size} of {n} individual(s) {what} from every record: {rows_text(rows)}; {fix}",
        )
    return Mapping(loc.record_ids, loc.by, float(loc.distances.max(initial=0.0)), loc.unit, loc.distances)


# ----------------------------------------------------------------------------- description (no instance)
def describe(path: str | Path) -> dict[str, Any]:
    """What the microdata file holds, without any value: ``rows``, ``format``, ``delimiter`` (its name:
    comma, semicolon, tab, pipe; None for Parquet), ``encoding``, ``columns`` (the recognised ones,
    canonical names), ``aliases`` {header as written: canonical}, ``other_columns`` (a count), ``key``
    ("coordinates" lat/lon, "vector" x0.., "record" ids), ``key_columns``, ``bad_rows`` {"count", "rows":
    the first :data:`SHOWN_ROWS` 1-based data rows with NaN / non-numeric / out-of-range coordinates or
    no key}. InputError (no value in it) for a file that cannot be read or has no recognised header."""
    return describe_table(read_table(path))


def describe_table(t: Table) -> dict[str, Any]:
    """:func:`describe` of a :class:`Table` already read."""
    kind, cols = key_columns(t.frame.columns)
    if kind == "record":
        bad = t.frame["record"].isna().to_numpy()
    else:
        _, bad = _points(t.frame, cols, geo=kind == "coordinates")
    rows = np.flatnonzero(bad)
    return {
        "rows": int(len(t.frame)),
        "format": t.format,
        "delimiter": None if t.delimiter is None else DELIMITERS[t.delimiter],
        "encoding": t.encoding,
        "columns": list(t.recognised),
        "aliases": dict(t.aliases),
        "other_columns": t.n_other,
        "key": kind,
        "key_columns": cols,
        "bad_rows": {"count": int(rows.size), "rows": [int(r) + 1 for r in rows[:SHOWN_ROWS]]},
    }


def histogram(record_ids: np.ndarray, n_records: int) -> np.ndarray:
    """(N,) int64 number of individuals at each record."""
    return np.bincount(np.asarray(record_ids, dtype=np.int64), minlength=n_records).astype(np.int64)


def cell_of_record(inst: Instance) -> np.ndarray:
    """(N,) the output cell each record belongs to for the true-data counts: the output with the
    smallest utility loss c_ik (ties: the lowest k) -- the record's own output where outputs are
    records, the nearest output where the cost is a distance."""
    return np.argmin(inst.costs, axis=1).astype(np.int64)
