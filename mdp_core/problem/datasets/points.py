"""User data: a CSV or Parquet table of points.

Records file (``path``):
  * coordinates: ``lat``, ``lon`` columns (degrees; metric haversine, km), or numeric vector columns
    (metric Euclidean, unit "unit"): ``columns`` if given, else every numeric column except ``id``
    and ``weight``;
  * ``id`` (optional): unique record ids (default: the row number 0..N-1), used only to read the cost
    file: never kept in the instance, so never published (issue 49: a universe file's own ids may be
    anybody's); the instance's record ids are generated (``record_id`` 0..N-1 after merging);
  * ``weight`` (optional): the prior, normalised here (non-negative, positive total).
Outputs file (``outputs``, optional): the same coordinate columns, optional unique ``id``; default:
the records, or a seeded subset of ``n_outputs`` of them.
Cost file (``costs``, optional): columns ``record_id``, ``output_id``, ``cost`` (ids as in the
``id`` columns or row numbers; output ids are record ids when outputs are the records), one row per
pair, every pair present; default: the metric distance d(r_i, o_k) -- the data's metric, the "distance"
loss of the grid and road kinds (issue 40); a cost file is the way to any other loss.

Records with identical coordinates are merged into one (weights added; their cost rows averaged with
the weights, which gives the same expected loss because an mDP mechanism must treat points at
distance 0 identically); identical outputs are merged likewise (cost columns averaged). Every
malformed input raises InputError with one line; nothing is written by this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from mdp_core.declarations.dataset_kinds import PointsParams
from mdp_core.errors import InputError
from mdp_core.problem.datasets.common import choose_outputs, coordinate_frame, first_occurrence_groups, from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import check_points, haversine_km
from mdp_core.runtime.files import file_sha256

RESERVED = ("id", "weight")


def read_frame(path: str | Path, what: str) -> pd.DataFrame:
    """Read a CSV (``.csv``, ``.csv.gz``, ``.txt``) or Parquet (``.parquet``, ``.pq``) table."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} file: no such file {p}")
    name = p.name.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            frame = pd.read_parquet(p)
        elif name.endswith((".csv", ".csv.gz", ".txt")):
            frame = pd.read_csv(p)
        else:
            raise InputError(f"{p.name}: unsupported {what} file type (use .csv or .parquet)")
    except InputError:
        raise
    except Exception as exc:  # pandas / pyarrow parser errors
        raise InputError(f"{p.name}: cannot read the {what} table ({type(exc).__name__}: {exc})") from None
    if len(frame) == 0:
        raise InputError(f"{p.name}: the {what} table has no rows")
    return frame


def _numeric(frame: pd.DataFrame, cols: list[str], name: str) -> np.ndarray:
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise InputError(f"{name}: missing column(s) {missing}")
    out = np.column_stack([pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64) for c in cols])
    bad = ~np.isfinite(out)
    if bad.any():
        col = cols[int(np.flatnonzero(bad.any(axis=0))[0])]
        raise InputError(
            f"{name}: column {col!r} has {int(bad.any(axis=1).sum())} row(s) with NaN, infinite or non-numeric values"
        )
    return out


def _ids(frame: pd.DataFrame, name: str) -> np.ndarray:
    if "id" not in frame.columns:
        return np.arange(len(frame), dtype=np.int64)
    ids = frame["id"]
    if ids.isna().any():
        raise InputError(f"{name}: column 'id' has {int(ids.isna().sum())} missing value(s)")
    dup = ids[ids.duplicated()]
    if len(dup):
        raise InputError(f"{name}: duplicate id(s) {dup.unique()[:5].tolist()}")
    return ids.to_numpy()


def _coordinates(frame: pd.DataFrame, columns: Any, name: str) -> tuple[str, list[str], np.ndarray]:
    """(metric, column names, (n, D) coordinates) of a points table."""
    has = [c for c in ("lat", "lon") if c in frame.columns]
    if columns is None and has:
        if len(has) == 1:
            raise InputError(f"{name}: has {has[0]!r} but not {'lon' if has[0] == 'lat' else 'lat'!r}")
        pts = _numeric(frame, ["lat", "lon"], name)
        return "haversine", ["lat", "lon"], check_points(name, pts, "haversine")
    if columns is None:
        cols = [c for c in frame.columns if c not in RESERVED and pd.api.types.is_numeric_dtype(frame[c])]
        for c in frame.columns:  # a text column holding some numbers is a broken coordinate column
            if c not in RESERVED and c not in cols and pd.to_numeric(frame[c], errors="coerce").notna().any():
                raise InputError(f"{name}: column {c!r} mixes numbers and text (fix it, or choose coordinate columns)")
        if not cols:
            raise InputError(f"{name}: no lat/lon columns and no numeric coordinate columns")
    else:
        cols = columns.replace(",", " ").split() if isinstance(columns, str) else [str(c) for c in columns]
        if not cols:
            raise InputError("columns is an empty list")
    return "euclidean", cols, _numeric(frame, cols, name)


def _averager(groups: np.ndarray, weights: np.ndarray) -> sp.csr_matrix:
    """(G, n) matrix whose row g averages the members of group g with ``weights`` (plain mean if they sum to 0)."""
    g = int(groups.max()) + 1
    tot = np.bincount(groups, weights=weights, minlength=g)
    w = np.where(tot[groups] > 0, weights, 1.0)
    tot = np.bincount(groups, weights=w, minlength=g)
    return sp.csr_matrix((w / tot[groups], (groups, np.arange(groups.size))), shape=(g, groups.size))


def _cost_matrix(path: str, rec_ids: np.ndarray, out_ids: np.ndarray) -> np.ndarray:
    """(n, m) costs from a long table (record_id, output_id, cost); rows naming unknown outputs are an error."""
    frame = read_frame(path, "cost")
    for c in ("record_id", "output_id", "cost"):
        if c not in frame.columns:
            raise InputError(f"{Path(path).name}: missing column {c!r} (need record_id, output_id, cost)")
    cost = _numeric(frame, ["cost"], Path(path).name)[:, 0]
    r = pd.Index(rec_ids).get_indexer(frame["record_id"].to_numpy())
    o = pd.Index(out_ids).get_indexer(frame["output_id"].to_numpy())
    if np.any(r < 0) or np.any(o < 0):
        side, bad = (
            ("record_id", frame["record_id"][r < 0]) if np.any(r < 0) else ("output_id", frame["output_id"][o < 0])
        )
        raise InputError(f"{Path(path).name}: unknown {side} value(s) {bad.unique()[:5].tolist()}")
    key = r * out_ids.size + o
    if np.unique(key).size != key.size:
        raise InputError(f"{Path(path).name}: duplicate (record_id, output_id) pairs")
    if key.size != rec_ids.size * out_ids.size:
        raise InputError(
            f"{Path(path).name}: has {key.size} pairs, needs every record x output pair "
            f"({rec_ids.size} x {out_ids.size} = {rec_ids.size * out_ids.size})"
        )
    out = np.empty(rec_ids.size * out_ids.size)
    out[key] = cost
    return out.reshape(rec_ids.size, out_ids.size)


def _record_weights(frame: pd.DataFrame, name: str) -> np.ndarray:
    """(n,) prior weights from the optional ``weight`` column (1 each without it); non-negative, positive total."""
    weights = np.ones(len(frame)) if "weight" not in frame.columns else _numeric(frame, ["weight"], name)[:, 0]
    if np.any(weights < 0):
        raise InputError(f"{name}: column 'weight' has {int(np.sum(weights < 0))} negative value(s)")
    if weights.sum() <= 0:
        raise InputError(f"{name}: column 'weight' sums to zero (the prior needs a positive total)")
    return weights


def _read_costs(path: str, rec_ids: np.ndarray, out_ids: np.ndarray, files: dict[str, str]) -> np.ndarray:
    """(n, m) costs of a long cost table (:func:`_cost_matrix`); adds its sha256 to ``files``."""
    c = _cost_matrix(path, rec_ids, out_ids)
    files[str(path)] = file_sha256(path)
    return c


def _merge_identical(
    pts: np.ndarray, opts: np.ndarray | None, weights: np.ndarray, costs: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Merge records (n, D) and outputs (m, D; None: the outputs are the records) at identical coordinates.

    Returns (record group (n,), first record of each group (G,), first output of each output group,
    merged prior (G,) = summed weights, costs (n, m) averaged to (G, output groups) or None).
    """
    rg, rfirst = first_occurrence_groups(pts)
    og, ofirst = (rg, rfirst) if opts is None else first_occurrence_groups(opts)
    prior = np.bincount(rg, weights=weights)
    if costs is not None:
        costs = _averager(rg, weights) @ costs @ _averager(og, np.ones(og.size)).T
    return rg, rfirst, ofirst, prior, costs


def _read_outputs(
    outputs: str, n_outputs: int | None, metric: str, cols: list[str], files: dict[str, str]
) -> tuple[np.ndarray, np.ndarray]:
    """((m, D) output coordinates, (m,) output ids) of an outputs table; adds its sha256 to ``files``."""
    if n_outputs is not None:
        raise InputError("give either an outputs file or n_outputs, not both")
    oname = Path(outputs).name
    oframe = read_frame(outputs, "outputs")
    if metric == "haversine" and not {"lat", "lon"} <= set(oframe.columns):
        raise InputError(f"{oname}: the records have lat/lon, so the outputs need lat and lon columns")
    _, _, opts = _coordinates(oframe, cols if metric == "euclidean" else None, oname)
    out_ids = _ids(oframe, oname)
    files[str(outputs)] = file_sha256(outputs)
    return opts, out_ids


def _points_provenance(
    files: dict[str, str], parameters: dict[str, Any], merged_records: int, merged_outputs: int, seed: int
) -> dict[str, Any]:
    """The instance provenance: the input files' sha256, the parameters and how many rows were merged."""
    return {
        "dataset": "points",
        "generator": "mdp_core.problem.datasets.points",
        "source": {"kind": "user_points", "files": files},
        "parameters": parameters | {"merged_records": merged_records, "merged_outputs": merged_outputs},
        "seed": seed,
    }


def points(
    path: str,
    outputs: str | None = PointsParams.outputs,
    costs: str | None = PointsParams.costs,
    columns: Any = PointsParams.columns,
    n_outputs: int | None = PointsParams.n_outputs,
    epsilon: float = PointsParams.epsilon,
    eta: float = PointsParams.eta,
    seed: int = PointsParams.seed,
) -> Instance:
    """Instance from a user points table; see the module docstring.

    Args:
        path: records CSV/Parquet; outputs: optional outputs table; costs: optional long cost table.
        columns: vector coordinate column names (list or comma-separated); default as described above.
        n_outputs: K outputs as a seeded subset of the records (only without an outputs file).
        epsilon: privacy budget per distance unit (km for lat/lon); eta: neighbour threshold (same unit).
    Returns:
        Instance with records ``lat, lon`` or ``x0..`` and ``n_merged`` (the file's ids and other columns are
        not kept: the published ids are the generated ``record_id``).
    """
    name = Path(path).name
    frame = read_frame(path, "points")
    metric, cols, pts = _coordinates(frame, columns, name)
    ids = _ids(frame, name)
    weights = _record_weights(frame, name)
    files = {str(path): file_sha256(path)}
    rng = np.random.default_rng(seed)
    opts, out_ids = (pts, ids) if outputs is None else _read_outputs(outputs, n_outputs, metric, cols, files)
    c = None if costs is None else _read_costs(costs, ids, out_ids, files)

    rg, rfirst, ofirst, prior, c = _merge_identical(pts, None if outputs is None else opts, weights, c)
    mpts, mopts = pts[rfirst], opts[ofirst]
    out_record_ids = None
    if outputs is None:  # outputs: all merged records or a seeded subset of them
        out_record_ids = choose_outputs(mpts.shape[0], n_outputs, rng)
        mopts, c = mpts[out_record_ids], None if c is None else c[:, out_record_ids]
    if c is None:  # cdist: exact differences, so a point reported as itself costs exactly 0
        c = haversine_km(mpts, mopts) if metric == "haversine" else cdist(mpts, mopts)
    inst = from_points(
        mpts,
        metric,
        eta,
        epsilon,
        np.asarray(c),
        prior=prior,
        output_record_ids=out_record_ids,
        extra_columns={"n_merged": np.bincount(rg).astype(np.int64)},
        distance_unit="km" if metric == "haversine" else "unit",
        provenance=_points_provenance(
            files,
            {"columns": cols, "metric": metric, "n_outputs": n_outputs, "cost": "file" if costs else "distance"},
            int(pts.shape[0] - mpts.shape[0]),
            int(opts.shape[0] - ofirst.size) if outputs is not None else 0,
            seed,
        ),
    )
    if outputs is None:
        return inst
    return inst.replace(outputs=coordinate_frame(mopts, metric))
