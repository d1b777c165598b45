"""The agency's secret microdata: one row per individual, mapped to the instance's secret records.

Input (CSV or Parquet), one row per individual, in any order (the release keeps it), with one of:
  * ``lat``, ``lon`` (degrees) -- geographic instances (records with ``lat``/``lon``): each individual
    goes to the nearest record by haversine distance, in km;
  * ``x0..x{d-1}`` -- vector instances (records with ``x0..``, Euclidean metric): nearest record by
    Euclidean distance, in the instance's unit;
  * ``record`` -- a record key: the records' ``word`` (text instances), ``osmid`` (road nodes) or the
    record id 0..N-1, matched exactly.
Coordinates take precedence over ``record`` when both are given. Any other column (an internal id,
say) is allowed, read and never used or published. An individual farther than ``max_distance``
from every record, a key that names no record, NaN coordinates or an empty file is an InputError
that says how many and how far -- never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from mdp_core.datasets.points import read_frame
from mdp_core.errors import InputError
from mdp_core.instance import Instance
from mdp_core.metrics import EARTH_RADIUS_KM, unit_sphere

KEY_COLUMNS = ("word", "osmid")  # record keys a ``record`` column is matched against, in this order


@dataclass(frozen=True)
class Mapping:
    """Individuals mapped to records: ``record_ids`` (n,) int64 in 0..N-1 in file order; ``by`` the
    columns used; ``max_distance`` the largest individual-to-record distance (0 for keys), in
    ``unit``."""

    record_ids: np.ndarray
    by: str
    max_distance: float
    unit: str


def read_microdata(path: str | Path) -> pd.DataFrame:
    """The file as a DataFrame (``.csv`` / ``.parquet``); InputError if missing, unreadable or empty."""
    return read_frame(path, "microdata")


def _coords(df: pd.DataFrame, cols: list[str], what: str) -> np.ndarray:
    try:
        pts = df[cols].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"microdata: columns {cols} must be numbers") from None
    bad = ~np.all(np.isfinite(pts), axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise InputError(f"microdata: {int(bad.sum())} individual(s) have NaN or infinite {what} (rows {rows}...)")
    return pts


def _nearest(points: np.ndarray, records: np.ndarray, haversine: bool) -> tuple[np.ndarray, np.ndarray]:
    """(record index (n,), distance (n,)) of each point's nearest record: Euclidean, or haversine km."""
    if haversine:
        if np.any(np.abs(points[:, 0]) > 90) or np.any(np.abs(points[:, 1]) > 180):
            raise InputError("microdata: lat must lie in [-90, 90] and lon in [-180, 180]")
        tree = cKDTree(unit_sphere(records))
        chord, idx = tree.query(unit_sphere(points))
        dist = 2 * EARTH_RADIUS_KM * np.arcsin(np.clip(chord / (2 * EARTH_RADIUS_KM), 0.0, 1.0))
        return idx.astype(np.int64), dist
    dist, idx = cKDTree(records).query(points)
    return idx.astype(np.int64), np.asarray(dist, dtype=np.float64)


def _by_key(df: pd.DataFrame, inst: Instance) -> Mapping:
    keys = df["record"]
    if keys.isna().any():
        raise InputError(f"microdata: {int(keys.isna().sum())} individual(s) have no record key")
    recs = inst.records
    col = next((c for c in KEY_COLUMNS if recs is not None and c in recs.columns), None)
    if col is not None and recs is not None:
        table = pd.Index(recs[col].astype(str))
        ids = table.get_indexer(keys.astype(str))
    else:
        num = pd.to_numeric(keys, errors="coerce")
        whole = num.notna() & (num == np.floor(num)) & (num >= 0) & (num < inst.n_records)
        ids = np.where(whole, num.fillna(-1), -1).astype(np.int64)
        col = "record id"
    missing = ids < 0
    if missing.any():
        shown = ", ".join(repr(str(v)) for v in keys[missing].astype(str).unique()[:5])
        raise InputError(
            f"microdata: {int(missing.sum())} individual(s) name a record that is not in the instance "
            f"(matched against {col}; e.g. {shown})"
        )
    return Mapping(np.asarray(ids, dtype=np.int64), f"record ({col})", 0.0, inst.distance_unit)


def map_individuals(df: pd.DataFrame, inst: Instance, max_distance: float) -> Mapping:
    """Each individual's secret record (nearest under the instance's metric, or by key).

    ``max_distance`` (in the instance's ``distance_unit``; km for ``lat``/``lon``) bounds how far an
    individual may sit from its record. Raises InputError for anything unmappable.
    """
    if not (np.isfinite(max_distance) and max_distance >= 0):
        raise InputError(f"max_distance must be a finite number >= 0, got {max_distance}")
    recs = inst.records
    cols = set(df.columns)
    xcols = inst.coordinate_columns() if inst.metric == "euclidean" else []
    if {"lat", "lon"} <= cols and recs is not None and {"lat", "lon"} <= set(recs.columns):
        if inst.distance_unit != "km":
            raise InputError(f"microdata lat/lon: the instance's distances are in {inst.distance_unit}, not km")
        pts = _coords(df, ["lat", "lon"], "lat/lon")
        idx, dist = _nearest(pts, recs[["lat", "lon"]].to_numpy(dtype=np.float64), haversine=True)
        by, unit = "lat, lon (haversine)", "km"
    elif xcols and set(xcols) <= cols:
        pts = _coords(df, xcols, "coordinates")
        idx, dist = _nearest(pts, inst.record_points(), haversine=False)
        by, unit = f"{xcols[0]}..{xcols[-1]} (euclidean)", inst.distance_unit
    elif "record" in cols:
        return _by_key(df, inst)
    else:
        want = ["lat, lon"] if recs is not None and {"lat", "lon"} <= set(recs.columns) else []
        want += [f"x0..x{len(xcols) - 1}"] if xcols else []
        raise InputError(
            f"microdata: no usable columns; this instance takes {' or '.join(want + ['record'])} "
            f"(got {sorted(map(str, cols))[:8]})"
        )
    far = dist > max_distance
    if far.any():
        raise InputError(
            f"microdata: {int(far.sum())} of {dist.size} individual(s) lie farther than max_distance = "
            f"{max_distance:g} {unit} from every record (farthest {float(dist.max()):.4g} {unit}); "
            "check the coordinates or raise [release] max_distance"
        )
    return Mapping(idx, by, float(dist.max(initial=0.0)), unit)


def histogram(record_ids: np.ndarray, n_records: int) -> np.ndarray:
    """(N,) int64 number of individuals at each record."""
    return np.bincount(np.asarray(record_ids, dtype=np.int64), minlength=n_records).astype(np.int64)


def cell_of_record(inst: Instance) -> np.ndarray:
    """(N,) the output cell each record belongs to for the true-data counts: the output with the
    smallest utility loss c_ik (ties: the lowest k) -- the record's own output where outputs are
    records, the nearest output where the cost is a distance."""
    return np.argmin(inst.costs, axis=1).astype(np.int64)
