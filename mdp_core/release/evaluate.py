"""Evaluation of a (certified) mechanism Z (N, K) on its instance: one flat row per mechanism.

Metrics (units in brackets; "cost" is the unit of ``instance.costs``, "dist" ``distance_unit``):
  * expected utility loss sum_i p_i sum_k c_ik z_ik [cost]; per-record loss L_i = sum_k c_ik z_ik,
    its 95 % quantile over records L_q (Imola et al. eq. 11, unweighted) and maximum [cost];
  * realised epsilon: max over neighbour pairs (both directions) and k of
    |ln z_ik - ln z_jk| / d_ij (:func:`mdp_core.solvers.verify.verify`) [1/dist];
  * eps_tight at delta (Imola et al. eq. 10, restricted to neighbour pairs): the smallest eps with
    Pr[M(i) in S] <= exp(eps d_ij) Pr[M(j) in S] + delta for all neighbour pairs and output sets S
    (:func:`eps_tight`) [1/dist];
  * Geo-Ind violation ratio and magnitude (Qiu et al. 2025, section 5.4): the share of directed
    (pair, k) entries with z_ik > exp(eps d_ij) z_jk (beyond the verifier's relative 1e-9) and the
    max / mean of z_ik - exp(eps d_ij) z_jk over them (:func:`geo_ind_violations`);
  * lower bounds: a method's own (e.g. Benders LB) [cost], the no-privacy bound
    sum_i p_i min_k c_ik [cost], and Imola et al.'s packing bound (Theorem 3) with k-center
    packings (:func:`packing_bound`), a bound on the worst record's expected *distance* loss
    max_i sum_k d(r_i, o_k) z_ik [dist] (compare with ``dist_loss_max``);
  * the adversary's expected inference error under the Bayes-optimal remap
    sum_k min_j sum_i p_i z_ik d(r_i, r_j) (:func:`adversary_error`) [dist];
  * problem sizes (N, K, E, full-LP rows / non-zeros) and the solve time;
  * against planar Laplace at the release's stated guarantee (:mod:`mdp_core.release.baseline`, rows
    ``planar_laplace``, ``planar_laplace_remap``, ``nearest_output``): ``metric_epsilon`` (eps x stretch per
    dist, the guarantee the row is compared at; the evaluate stage sets it on the released row),
    ``dist_loss_se`` (the standard error of ``dist_loss_mean``: 0 where it is an exact expectation) and
    ``mc_samples`` (Monte Carlo samples per record, where sampled).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from mdp_core.declarations import tables
from mdp_core.errors import InputError
from mdp_core.problem.graph import path_distances
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import pairwise
from mdp_core.solvers.mechanisms import record_output_distances
from mdp_core.solvers.verify import RATIO_TOL, check_mechanism, directed_pairs, log_ratio, objective, verify

DELTA = 1e-3
_DTYPES = {"int64": "Int64", "double": "float64", "bool": "boolean", "large_string": "string"}
Q = 0.95

COLUMNS = list(tables.EVALUATION.column_names)  # evaluation.parquet's, declared in mdp_core.declarations.tables


def record_losses(instance: Instance, z: np.ndarray) -> np.ndarray:
    """(N,) expected loss of each record, L_i = sum_k c_ik z_ik [cost]."""
    return np.einsum("ik,ik->i", instance.costs, check_mechanism(instance, z))


def no_privacy_bound(instance: Instance) -> float:
    """sum_i p_i min_k c_ik: no mechanism (private or not) has a lower expected loss [cost]."""
    return float(instance.prior @ instance.costs.min(axis=1))


def _tight_excess(instance: Instance, z: np.ndarray, eps: float) -> float:
    """max over directed neighbour pairs of sum_k (z_ik - exp(eps d_ij) z_jk)_+ (the delta needed)."""
    worst = 0.0
    for a, b, d in directed_pairs(instance):
        g = np.exp(np.minimum(eps * d, 700.0))[:, None]
        worst = max(worst, float(np.max(np.sum(np.maximum(z[a] - g * z[b], 0.0), axis=1), initial=0.0)))
    return worst


def eps_tight(instance: Instance, z: np.ndarray, delta: float = DELTA, rel_tol: float = 1e-7) -> float:
    """Smallest eps such that Z is (eps, delta)-mDP on the neighbour pairs (Imola et al. eq. 9-10).

    For a directed pair (i, j) the worst output set is S = {k : z_ik > e^{eps d_ij} z_jk}, so the
    condition is sum_k (z_ik - e^{eps d_ij} z_jk)_+ <= delta; the left side decreases in eps, so
    the answer is found by bisection (relative tolerance ``rel_tol``, rounded up). Returns inf when
    no eps suffices (mass > delta on outputs that a neighbour never produces), 0.0 without edges.
    """
    z = check_mechanism(instance, z)
    if not (0 <= delta < 1):
        raise InputError(f"delta must be in [0, 1), got {delta}")
    if instance.n_edges == 0 or _tight_excess(instance, z, 0.0) <= delta:
        return 0.0
    if _tight_excess(instance, z, np.inf) > delta:
        return float("inf")
    hi = max(instance.epsilon, 1.0 / max(float(instance.distances.min()), 1e-300))
    while _tight_excess(instance, z, hi) > delta:
        hi *= 2.0
        if not np.isfinite(hi):
            return float("inf")
    lo = 0.0
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if _tight_excess(instance, z, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return float(hi)


def geo_ind_violations(instance: Instance, z: np.ndarray, ratio_tol: float = RATIO_TOL) -> dict[str, float]:
    """Geo-Ind violation (GV) ratio and error (GVE) of Qiu et al. 2025, eqs. 34-35.

    Entries: every neighbour pair in both directions and every output k (2 E K of them). A
    violation fails the verifier's test in eps units, ln z_ik - ln z_jk > eps d_ij (1 + ratio_tol)
    (:func:`mdp_core.solvers.verify.log_ratio`; a positive z_ik opposite z_jk = 0 always counts). Returns
    gv_ratio (violations / entries), gv_count and the max / mean GVE = z_ik - exp(eps d_ij) z_jk over
    violations (0 when there are none).
    """
    z = check_mechanism(instance, z)
    count, total, gmax, gsum = 0, 0, 0.0, 0.0
    for a, b, d in directed_pairs(instance):
        g = np.exp(instance.epsilon * d)[:, None]
        err = z[a] - g * z[b]
        bad = (z[a] > 0) & (log_ratio(z[a], z[b]) > (instance.epsilon * d * (1.0 + ratio_tol))[:, None])
        count += int(bad.sum())
        total += bad.size
        if bad.any():
            gmax = max(gmax, float(err[bad].max()))
            gsum += float(err[bad].sum())
    return {
        "gv_ratio": count / total if total else 0.0,
        "gv_count": count,
        "gv_max": gmax,
        "gv_mean": gsum / count if count else 0.0,
    }


def k_center_order(points: np.ndarray, metric: str, n_centers: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy farthest-point (Gonzalez) k-center order.

    Starts at record 0; center t is the record farthest from centers 0..t-1. Returns the (m,)
    center ids and (m,) separations sep[t] = distance of center t to the earlier ones (sep[0] = inf),
    non-increasing: the first t centers are pairwise at least sep[t-1] apart.
    """
    n = points.shape[0]
    m = min(n_centers, n)
    centers = np.zeros(m, dtype=np.int64)
    sep = np.full(m, np.inf)
    dmin = pairwise(metric, points[:1], points)[0]
    for t in range(1, m):
        nxt = int(np.argmax(dmin))
        if dmin[nxt] <= 0:
            return centers[:t], sep[:t]
        centers[t], sep[t] = nxt, dmin[nxt]
        dmin = np.minimum(dmin, pairwise(metric, points[nxt : nxt + 1], points)[0])
    return centers, sep


def packing_bound(instance: Instance, max_centers: int = 200) -> dict[str, float]:
    """Imola et al. Theorem 3 with k-center packings, adapted to neighbour-threshold mDP.

    Any Z satisfying the instance's constraints satisfies z_ik <= exp(eps D_ij) z_jk for the
    mDP-graph path distance D (chain the edge constraints), i.e. eps-mDP w.r.t. D. For a set S of
    records pairwise more than 2r apart (in the record-output metric d) the output balls
    B(s, r) = {k : d(r_s, o_k) <= r} are disjoint, and the proof of Theorem 3 gives

        max_i sum_k d(r_i, o_k) z_ik >= r (1 - 1 / max_w N(w, S)),  N(w, S) = sum_s exp(-eps D(w, s)).

    S ranges over the first m greedy k-center records (m = 2..max_centers) with r just below half
    their separation; the best bound is returned with its m and r. Returns NaN when the instance
    has no coordinates.
    """
    try:
        pts = instance.record_points()
    except InputError:
        return {"packing_bound": float("nan"), "packing_centers": 0, "packing_radius": float("nan")}
    centers, sep = k_center_order(pts, instance.metric, max_centers)
    if centers.size < 2:
        return {"packing_bound": 0.0, "packing_centers": int(centers.size), "packing_radius": 0.0}
    dd = path_distances(instance.n_records, instance.edges, instance.distances, centers)  # (m, N)
    n_ws = np.cumsum(np.exp(-instance.epsilon * dd), axis=0)  # row t: N(w, first t+1 centers)
    radius = np.where(np.isfinite(sep), sep * 0.5 * (1 - 1e-9), 0.0)  # one center: no packing
    bounds = radius * np.maximum(0.0, 1.0 - 1.0 / n_ws.max(axis=1))
    best = int(np.argmax(bounds))
    return {"packing_bound": float(bounds[best]), "packing_centers": best + 1, "packing_radius": float(radius[best])}


def adversary_error(instance: Instance, z: np.ndarray, block: int = 512) -> float:
    """Expected inference error of the Bayes-optimal adversary [dist].

    Seeing output k, the posterior is proportional to p_i z_ik; the adversary guesses the record j
    minimising the expected distance sum_i p_i z_ik d(r_i, r_j). The error is
    sum_k min_j sum_i p_i z_ik d(r_i, r_j). NaN without record coordinates.
    """
    z = check_mechanism(instance, z)
    try:
        pts = instance.record_points()
    except InputError:
        return float("nan")
    w = instance.prior[:, None] * z  # (N, K) joint probability of (record, output)
    best = np.full(z.shape[1], np.inf)
    for s in range(0, pts.shape[0], block):
        d = pairwise(instance.metric, pts[s : s + block], pts)  # (b, N): guess j x true record i
        best = np.minimum(best, (d @ w).min(axis=0))
    return float(best.sum())


def _f(x: Any) -> float | None:
    return None if x is None else float(x)


def evaluate_mechanism(
    instance: Instance,
    z: np.ndarray,
    method: str,
    lower_bound: float | None = None,
    seconds: float | None = None,
    delta: float = DELTA,
    max_centers: int = 200,
) -> dict[str, Any]:
    """One flat evaluation row (keys = :data:`COLUMNS`; values int / float / str / bool / None).

    Infinite realised epsilon / eps_tight are float('inf'); metrics that need coordinates are NaN
    when the instance has none. ``lower_bound`` is the method's own proven bound [cost].
    """
    z = check_mechanism(instance, z)
    n, k, e = instance.n_records, instance.n_outputs, instance.n_edges
    losses = record_losses(instance, z)
    cert = verify(instance, z)
    exp_loss = objective(instance, z)
    try:
        dl = np.einsum("ik,ik->i", record_output_distances(instance), z)
        dist = {
            "dist_loss_mean": float(instance.prior @ dl),
            "dist_loss_q95": float(np.quantile(dl, Q)),
            "dist_loss_max": float(dl.max()),
        }
    except InputError:
        dist = dict.fromkeys(("dist_loss_mean", "dist_loss_q95", "dist_loss_max"), float("nan"))
    gap = None if lower_bound is None else max(exp_loss - lower_bound, 0.0)
    row = {
        "method": str(method),
        "n_records": n,
        "n_outputs": k,
        "n_edges": e,
        "lp_rows": 2 * e * k + n,
        "lp_nonzeros": 4 * e * k + n * k,
        "epsilon": instance.epsilon,
        "eta": instance.eta,
        "distance_unit": instance.distance_unit,
        "expected_loss": exp_loss,
        "loss_q95": float(np.quantile(losses, Q)),
        "loss_max": float(losses.max()),
        **dist,
        "verified": bool(cert.passed),
        "realised_epsilon": float(cert.max_realised_epsilon),
        "eps_tight": eps_tight(instance, z, delta),
        "eps_tight_delta": float(delta),
        **geo_ind_violations(instance, z),
        "lower_bound": _f(lower_bound),
        "gap": gap,
        "relative_gap": None if gap is None else gap / max(abs(exp_loss), 1e-300),
        "no_privacy_bound": no_privacy_bound(instance),
        **packing_bound(instance, max_centers),
        "adversary_error": adversary_error(instance, z),
        "metric_epsilon": None,  # the stated guarantee of a release: set by the evaluate stage
        "dist_loss_se": 0.0 if np.isfinite(dist["dist_loss_mean"]) else float("nan"),  # exact: sum over Z
        "mc_samples": None,
        "seconds": _f(seconds),
    }
    return {c: row[c] for c in COLUMNS}


def evaluation_table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows of :func:`evaluate_mechanism` as a DataFrame with the fixed column order :data:`COLUMNS`
    (one row per mechanism; unknown keys are an error, missing ones are null)."""
    rows = list(rows)
    for r in rows:
        extra = set(r) - set(COLUMNS)
        if extra:
            raise InputError(f"evaluation row has unknown column(s) {sorted(extra)}")
    df = pd.DataFrame(rows, columns=COLUMNS)
    for c in tables.EVALUATION.columns or ():  # the declared Arrow type's nullable pandas dtype (float: NaN is null)
        df[c.name] = df[c.name].astype(_DTYPES[str(c.dtype)])
    return df
