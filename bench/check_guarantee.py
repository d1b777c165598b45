#!/usr/bin/env python
"""Independent check of a published release's guarantee in the data's own metric.

    python bench/check_guarantee.py RUN_DIR [--stated X] [--rtol 1e-8] [--assume-complete]

Reads, from a published release folder (``<store>/runs/<run>/``): ``instance/instance.json``,
``instance/records.parquet``, ``instance/edges.parquet`` (each table against the sha256 that
instance.json lists), ``mechanism.parquet`` (i, k, prob; against ``mechanism_sha256`` of the
provenance when it names one) and ``release_provenance.json``, whose ``guarantee`` states
``metric_epsilon_per_unit`` (= eps x stretch) and ``distance_unit``. ``--stated X`` gives (or
overrides) the stated figure, for releases whose provenance predates those keys.

It recomputes, for every pair of records i != j, the realised worst log ratio over the metric distance

    max_k |ln z_ik - ln z_jk| / d(i, j)     (inf when exactly one of z_ik, z_jk is 0)

and checks worst <= stated x (1 + rtol). The distances are its own implementation, from the records'
coordinates (a lower bound d_lower <= d, so the check can only be stricter):
  * metric ``euclidean``: Euclidean distance of the ``x0, x1, ...`` columns (exact);
  * metric ``haversine``: great-circle km on a sphere of radius 6371.0088 km of ``lat, lon`` (exact);
  * metric ``graph`` (or no coordinates): the stored edge distance on stored pairs; with ``lat, lon`` and
    unit km also the great-circle distance (no path on the Earth is shorter); elsewhere 0 -- unless
    ``--assume-complete`` asserts that every pair within eta is stored, then eta. A pair with bound 0
    and different rows is an infinite ratio: the release states nothing checkable for it.

Prints ONE JSON line: {"pairs", "worst_ratio", "stated", "ok", "worst_pair", "distance_unit",
"lower_bound"} ("inf" for an infinite ratio) and exits 0 when ok, 1 when not, 2 when the folder cannot be
read (message on stderr). Imports numpy, pandas, pyarrow and scipy only: nothing of mdp_core, so a bug
there cannot hide here. Memory: blocks of about 2M float64 entries per (rows, N) slab.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from scipy.spatial.distance import cdist

EARTH_RADIUS_KM = 6371.0088  # the instance format's haversine sphere
BLOCK = 1 << 21


class Unreadable(Exception):
    """The folder is not a readable release (exit 2)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Unreadable(f"{path}: unreadable JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise Unreadable(f"{path}: not a JSON object")
    return value


def _table(path: Path) -> pd.DataFrame:
    try:
        return pq.read_table(path).to_pandas()
    except Exception as exc:  # pyarrow raises several types
        raise Unreadable(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None


def _instance(run: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    d = run / "instance"
    meta = _json(d / "instance.json")
    tables = meta.get("tables")
    if not isinstance(tables, dict):
        raise Unreadable(f"{d / 'instance.json'}: no 'tables' map of sha256 digests")
    for name in ("records.parquet", "edges.parquet"):
        if name not in tables or not (d / name).is_file():
            raise Unreadable(f"{d / name}: missing or not listed in instance.json")
        if _sha256(d / name) != tables[name]:
            raise Unreadable(f"{d / name}: content does not match the sha256 in instance.json")
    records, edges = _table(d / "records.parquet"), _table(d / "edges.parquet")
    n = meta.get("n_records")
    if not isinstance(n, int) or len(records) != n or not np.array_equal(records["record_id"].to_numpy(), np.arange(n)):
        raise Unreadable(f"{d / 'records.parquet'}: record_id is not 0..n_records-1")
    return meta, records, edges


def _mechanism(run: Path, n: int, k: int, provenance: dict[str, Any]) -> np.ndarray:
    path = run / "mechanism.parquet"
    if not path.is_file():
        raise Unreadable(f"{path}: no such file")
    want = provenance.get("mechanism_sha256")
    if want is not None and _sha256(path) != want:
        raise Unreadable(f"{path}: content does not match mechanism_sha256 of release_provenance.json")
    f = _table(path)
    if set(f.columns) != {"i", "k", "prob"} or len(f) != n * k:
        raise Unreadable(f"{path}: expected columns i, k, prob and N*K = {n * k} rows")
    i, kk, p = f["i"].to_numpy(np.int64), f["k"].to_numpy(np.int64), f["prob"].to_numpy(np.float64)
    if i.min() < 0 or i.max() >= n or kk.min() < 0 or kk.max() >= k or np.unique(i * k + kk).size != n * k:
        raise Unreadable(f"{path}: ids out of range or duplicated")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise Unreadable(f"{path}: probabilities must be finite and >= 0")
    z = np.empty(n * k)
    z[i * k + kk] = p
    return z.reshape(n, k)


def _great_circle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, 2), (m, 2) lat/lon degrees -> (n, m) km (haversine formula)."""
    la1, lo1 = np.radians(a[:, :1]), np.radians(a[:, 1:2])
    la2, lo2 = np.radians(b[:, 0])[None, :], np.radians(b[:, 1])[None, :]
    h = np.sin((la2 - la1) / 2) ** 2 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


class Distances:
    """d_lower(rows, all) from the instance tables (see the module docstring)."""

    def __init__(self, meta: dict[str, Any], records: pd.DataFrame, edges: pd.DataFrame, assume_complete: bool):
        self.n = len(records)
        self.metric = meta.get("metric")
        unit = meta.get("distance_unit")
        xcols = sorted((c for c in records.columns if re.fullmatch(r"x\d+", str(c))), key=lambda c: int(c[1:]))
        has_ll = {"lat", "lon"} <= set(records.columns)
        self.pts: np.ndarray | None = None
        self.ll: np.ndarray | None = None
        if self.metric == "euclidean" and xcols:
            self.pts, self.kind = records[xcols].to_numpy(np.float64), "exact"
        elif self.metric == "haversine" and has_ll:
            self.ll, self.kind = records[["lat", "lon"]].to_numpy(np.float64), "exact"
        else:
            self.kind = "stored"
            if self.metric == "graph" and has_ll and unit == "km":
                self.ll, self.kind = records[["lat", "lon"]].to_numpy(np.float64), "stored+great_circle"
        if self.pts is not None and not np.all(np.isfinite(self.pts)):
            raise Unreadable("records.parquet: non-finite coordinates")
        if self.ll is not None and not np.all(np.isfinite(self.ll)):
            raise Unreadable("records.parquet: non-finite lat/lon")
        self.floor = 0.0
        if assume_complete and self.kind != "exact":
            self.floor = float(meta["eta"])
            self.kind += "+complete_within_eta"
        i, j = edges["i"].to_numpy(np.int64), edges["j"].to_numpy(np.int64)
        dist = edges["distance"].to_numpy(np.float64)
        if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= self.n):
            raise Unreadable("edges.parquet: endpoints out of range")
        self.a, self.b, self.d = np.r_[i, j], np.r_[j, i], np.r_[dist, dist]
        order = np.argsort(self.a, kind="stable")
        self.a, self.b, self.d = self.a[order], self.b[order], self.d[order]

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        if self.kind == "exact":
            if self.pts is not None:
                return cdist(self.pts[rows], self.pts)
            assert self.ll is not None
            return _great_circle(self.ll[rows], self.ll)
        out = np.full((rows.size, self.n), self.floor)
        if self.ll is not None:
            out = np.maximum(out, _great_circle(self.ll[rows], self.ll))
        lo = np.searchsorted(self.a, rows[0])
        hi = np.searchsorted(self.a, rows[-1], side="right")  # rows are consecutive ascending ids
        a, b, d = self.a[lo:hi], self.b[lo:hi], self.d[lo:hi]
        r = a - rows[0]
        out[r, b] = np.maximum(out[r, b], d)
        out[np.arange(rows.size), rows] = 0.0
        return out


def worst_ratio(z: np.ndarray, dist: Distances) -> tuple[float, tuple[int, int] | None]:
    """max over i != j, k of |ln z_ik - ln z_jk| / d_lower(i, j), and the pair attaining it."""
    n = z.shape[0]
    support = z > 0
    _, pattern = np.unique(support, axis=0, return_inverse=True)
    pattern = pattern.reshape(-1)
    logz = np.zeros_like(z)
    logz[support] = np.log(z[support])
    step = max(1, BLOCK // max(n, 1))
    best, pair = 0.0, None
    for s in range(0, n, step):
        rows = np.arange(s, min(n, s + step))
        lr = cdist(logz[rows], logz, "chebyshev")
        lr[pattern[rows][:, None] != pattern[None, :]] = np.inf  # a zero opposite a non-zero
        lr[np.arange(rows.size), rows] = 0.0
        dl = dist(rows)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(lr > 0, lr / dl, 0.0)
        r, c = divmod(int(np.argmax(ratio)), n)
        if ratio[r, c] > best or pair is None and ratio[r, c] > 0:
            best, pair = float(ratio[r, c]), (int(rows[r]), int(c))
    return best, pair


def _stated(provenance: dict[str, Any], override: float | None, unit: Any) -> float:
    if override is not None:
        return override
    g = provenance.get("guarantee")
    value = g.get("metric_epsilon_per_unit") if isinstance(g, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unreadable("release_provenance.json: no guarantee.metric_epsilon_per_unit (pass --stated X)")
    if g.get("distance_unit") != unit:  # type: ignore[union-attr]
        raise Unreadable("release_provenance.json: guarantee.distance_unit differs from the instance's")
    return float(value)


def check(run_dir: str | Path, stated: float | None = None, rtol: float = 1e-8, assume_complete: bool = False) -> dict:
    """The JSON record printed by :func:`main` (raises :class:`Unreadable`)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise Unreadable(f"{run}: no such folder")
    meta, records, edges = _instance(run)
    prov_path = run / "release_provenance.json"
    provenance = _json(prov_path) if prov_path.is_file() else {}
    n, k = int(meta["n_records"]), int(meta.get("n_outputs", 0))
    claim = _stated(provenance, stated, meta.get("distance_unit"))
    z = _mechanism(run, n, k, provenance)
    dist = Distances(meta, records, edges, assume_complete)
    worst, pair = worst_ratio(z, dist)
    ok = bool(worst <= claim * (1 + rtol))
    return {
        "pairs": n * (n - 1) // 2,
        "worst_ratio": worst if math.isfinite(worst) else "inf",
        "stated": claim,
        "ok": ok,
        "worst_pair": None if pair is None else list(pair),
        "distance_unit": meta.get("distance_unit"),
        "lower_bound": dist.kind,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("run_dir", help="a published release folder (instance/ + mechanism.parquet)")
    ap.add_argument("--stated", type=float, default=None, help="the stated eps per unit in the metric")
    ap.add_argument("--rtol", type=float, default=1e-8, help="relative tolerance on the stated figure")
    ap.add_argument("--assume-complete", action="store_true", help="every pair within eta is stored")
    args = ap.parse_args(argv)
    try:
        out = check(args.run_dir, args.stated, args.rtol, args.assume_complete)
    except Unreadable as exc:
        print(f"check_guarantee: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, allow_nan=False))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
