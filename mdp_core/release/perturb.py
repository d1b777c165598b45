"""The measure stage's perturbation: secret microdata (individuals at secret records) -> perturbed microdata.

Each individual sits at a secret record i; the release draws its perturbed output k from row i of
the verified mechanism Z (shape (N, K)). The draws take a numpy Generator: in a release it is seeded
with the store's secret draw (:meth:`artifacts.private.Draw.rng`), never with a configured or published
value; experiments and tests pass their own. Vectorised; the same inputs and stream give the same outputs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance

CHUNK = 1 << 22  # (individual, output) entries compared at once


def _check_rng(rng: np.random.Generator) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise InputError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    return rng


def draw_individuals(prior: np.ndarray, n_individuals: int, rng: np.random.Generator) -> np.ndarray:
    """Secret record ids of ``n_individuals`` individuals drawn i.i.d. from ``prior`` (N,).

    Returns (n_individuals,) int64 in 0..N-1. For the built-in datasets, whose microdata is not
    given (demos), this is the simulated secret table.
    """
    p = np.asarray(prior, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1) > 1e-9:
        raise InputError("prior must be a non-empty 1-D array of non-negative numbers summing to 1")
    if isinstance(n_individuals, bool) or not isinstance(n_individuals, (int, np.integer)) or n_individuals < 0:
        raise InputError(f"n_individuals must be a non-negative integer, got {n_individuals!r}")
    return _check_rng(rng).choice(p.size, size=int(n_individuals), p=p / p.sum()).astype(np.int64)


def perturb(z: np.ndarray, record_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each individual's output id, drawn from row ``record_ids[n]`` of the mechanism Z (N, K).

    Inverse-CDF sampling with one uniform u_n per individual: output = number of entries of the
    row's normalised cumulative sum that are <= u_n. An output with probability 0 is never drawn
    (its cumulative value equals its predecessor's), and u < 1 = the last cumulative value keeps
    the index below K. Returns (n,) int64 in 0..K-1.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] == 0:
        raise InputError(f"mechanism must be a non-empty (N, K) matrix, got shape {z.shape}")
    if not np.all(np.isfinite(z)) or np.any(z < 0):
        raise InputError("mechanism has negative, NaN or infinite entries")
    rows = z.sum(axis=1)
    if np.any(np.abs(rows - 1.0) > 1e-6):
        raise InputError(f"mechanism rows must sum to 1 (worst row sums to {rows[np.argmax(np.abs(rows - 1))]:.9g})")
    rec = np.asarray(record_ids)
    if rec.ndim != 1 or (rec.size and (rec.dtype.kind not in "iu" or rec.min() < 0 or rec.max() >= z.shape[0])):
        raise InputError(f"record_ids must be a 1-D array of integers in 0..{z.shape[0] - 1}")
    u = _check_rng(rng).random(rec.size)
    cdf = np.cumsum(z, axis=1)
    cdf /= cdf[:, -1:]  # last entry exactly 1.0
    out = np.empty(rec.size, dtype=np.int64)
    step = max(1, CHUNK // z.shape[1])
    for s in range(0, rec.size, step):
        r, uu = rec[s : s + step], u[s : s + step]
        out[s : s + step] = np.sum(cdf[r] <= uu[:, None], axis=1)
    return out


def perturbed_microdata(instance: Instance, output_ids: np.ndarray) -> pd.DataFrame:
    """The table meant to leave the agency: one row per individual with its perturbed output.

    Columns: ``output_id`` and, when the instance has output coordinates, those coordinates (``lat,
    lon`` or ``x0..``) plus ``output_record_id`` when outputs are records (and then ``lat, lon`` too
    if the records have them). Rows are sorted by ``output_id``: every column is a function of the
    output, so the table is the multiset of outputs and nothing in it -- neither a row's position nor
    any column -- depends on the input file's order (a table sorted by latitude once leaked it).
    Secret record ids are deliberately not included.
    """
    out = np.asarray(output_ids, dtype=np.int64)
    if out.ndim != 1 or (out.size and (out.min() < 0 or out.max() >= instance.n_outputs)):
        raise InputError(f"output_ids must be a 1-D array of integers in 0..{instance.n_outputs - 1}")
    out = np.sort(out, kind="stable")
    df = pd.DataFrame({"output_id": out})
    if instance.outputs is not None and "record_id" in instance.outputs:
        rid = instance.outputs["record_id"].to_numpy(dtype=np.int64)[out]
        df["output_record_id"] = rid
        if instance.records is not None and {"lat", "lon"} <= set(instance.records.columns):
            df["lat"] = instance.records["lat"].to_numpy(dtype=np.float64)[rid]
            df["lon"] = instance.records["lon"].to_numpy(dtype=np.float64)[rid]
    try:
        pts = instance.output_points()
    except InputError:
        return df
    for j, name in enumerate(instance.coordinate_columns()):
        df[name] = pts[out, j]
    return df
