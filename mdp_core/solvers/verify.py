"""Privacy verification, exact repair, and the release gate.

A mechanism Z (N, K) is accepted (:func:`verify`) when
  * every entry is >= 0 and every row sums to 1 within ``row_tol`` (default 1e-9);
  * for every neighbour pair (i, j) (both directions) and every output k
        ln z_ik - ln z_jk <= eps * d_ij * (1 + tol),   tol = ``ratio_tol`` = 1e-9 (relative),
    i.e. the realised epsilon |ln z_ik - ln z_jk| / d_ij is at most eps (1 + 1e-9): the tolerance is in
    eps units, so it scales with d (an additive tolerance on the ratio would certify eps many times the
    budget on short edges). A zero opposite a non-zero is an infinite log ratio: a violation whatever
    the tolerance. Log ratios are evaluated accurately: ln(1 + (z_ik - z_jk) / z_jk) (``log1p``; the
    subtraction is exact by Sterbenz's lemma) when the two entries are within a factor 2, else
    ln z_ik - ln z_jk (then the ratio is >= ln 2 and absolute log errors ~1e-13 are far below the
    tolerance);
  * with ``all_pairs`` (:attr:`mdp_core.declarations.solver_options.SolverOptions.all_pairs`), the same test for
    every two records of one component of the mDP graph, d_ij their metric distance (:func:`metric_findings`:
    slabs of records, a pair expanded over the K outputs only when the Chebyshev distance of its log rows
    exceeds eps d_ij (1 + tol) - 1e-11, then tested with the accurate log ratio; never an N x N x K array);
  * when the records carry coordinates of the instance's metric (``lat``/``lon`` with haversine,
    ``x0..`` with euclidean), the edge table is the metric's neighbour graph: every pair at metric
    distance <= eta is an edge (recomputed with a KD-tree, :func:`mdp_core.problem.graph.neighbour_edges`) and
    every stored distance equals the metric distance within a relative 1e-9 (:func:`graph_findings`).
    Instances without such coordinates skip this check, and the certificate says so.

LP solvers meet constraints only to ~1e-7 and routinely leave zeros opposite tiny non-zeros, so raw
solver output almost never passes. :func:`repair` fixes that exactly (proof in its docstring) and
:func:`certify` is the gate every released mechanism goes through: verify, else repair and verify
again, else raise :class:`PrivacyError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist

from mdp_core.errors import InputError, PrivacyError
from mdp_core.problem.graph import components, neighbour_edges
from mdp_core.problem.instance import Instance
from mdp_core.problem.io import write_mechanism_table
from mdp_core.problem.metrics import haversine_rows_km
from mdp_core.runtime.files import file_sha256, write_json
from mdp_core.solvers.metric_pairs import MetricPairs

ROW_TOL = 1e-9
RATIO_TOL = 1e-9  # relative tolerance in eps units: ln z_ik - ln z_jk <= eps d_ij (1 + RATIO_TOL)
DISTANCE_TOL = 1e-9  # relative: a stored edge distance must equal the metric distance this closely
CHUNK = 1 << 21  # (pair, output) entries examined at once
# Ratio bounds exp(eps d) above e^30 (~1e13) are replaced by e^30 in the LP and in the repair. That
# only tightens z_ik <= exp(eps d) z_jk, so every Z meeting the capped rows is eps-mDP; it keeps the
# LP coefficients below HiGHS's large_matrix_value (1e15, i.e. eps d <= 34.5, else passModel fails)
# and exp() finite (eps d > 709 overflows). The optimum moves by at most about K e^-30 max|c|.
MAX_LOG_RATIO = 30.0
# Records joined by edges with eps d below this are "near-duplicates": the repair gives them one
# common row (their prior-weighted mean), since in floating point no mixing weight short of 1 can
# bring two different rows within a log ratio of ~1e-12 of each other (see :func:`repair`).
UNIFY_LOG_RATIO = 1e-5
# A pair beyond the mDP graph's edges is tested exactly (log_ratio) when its plain log difference is within
# this of the bound: plain logs of entries >= 1e-300 are accurate to ~1e-13 absolute (metric_findings).
SCAN_SLACK = 1e-11


@dataclass
class Certificate:
    """What :func:`verify` found. ``passed`` is the verdict; the rest is the evidence."""

    passed: bool
    epsilon: float
    max_realised_epsilon: float  # max over pairs, k of |ln z_ik - ln z_jk| / d_ij (inf if 0 vs > 0)
    max_ratio_excess: float  # max of ln z_ik - ln z_jk - eps d_ij (<= ratio_tol * eps d_ij to pass)
    max_abs_violation: float  # max of z_ik - exp(eps d_ij) z_jk (0 when all hold)
    worst_pair: tuple[int, int, int] | None  # (i, j, k) with the largest relative excess
    n_pairs: int  # undirected neighbour pairs checked
    n_violations: int  # directed (pair, k) entries beyond the tolerance
    n_infinite: int  # directed (pair, k) entries with z_ik > 0 = z_jk
    n_negative: int
    max_row_sum_error: float
    row_tol: float = ROW_TOL
    ratio_tol: float = RATIO_TOL
    graph_check: str = "skipped: not requested"  # "metric" or "skipped: <why>"
    missing_edges: int = 0  # metric neighbour pairs (d <= eta) absent from the edge table
    distance_mismatches: int = 0  # edges whose stored distance differs from the metric (relative 1e-9)
    pairs: str = "graph"  # "graph": the mDP graph's edges; "all": every two records of a component, in the metric
    n_metric_pairs: int = 0  # with pairs "all": undirected pairs of one component beyond the edges, checked too

    def as_dict(self) -> dict:
        d = asdict(self)
        d["worst_pair"] = None if self.worst_pair is None else list(self.worst_pair)
        return {k: _json_float(v) if isinstance(v, float) else v for k, v in d.items()}

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        graph = (
            f", graph vs metric: {self.missing_edges} missing edge(s), {self.distance_mismatches} wrong distance(s)"
            if self.graph_check == "metric"
            else f", graph {self.graph_check}"
        )
        over = f"{self.n_pairs} pairs" + (
            f" + {self.n_metric_pairs} beyond eta (all pairs)" if self.pairs == "all" else ""
        )
        return (
            f"{verdict}: eps={self.epsilon:g}, realised eps={self.max_realised_epsilon:.12g}, "
            f"violations={self.n_violations} ({self.n_infinite} infinite) over {over}, "
            f"max abs violation={self.max_abs_violation:.3g}, max row-sum error={self.max_row_sum_error:.3g}, "
            f"negative entries={self.n_negative}{graph}"
            + (f", worst (i, j, k)={self.worst_pair}" if self.worst_pair and self.n_violations else "")
        )


def _json_float(x: float) -> float | str | None:
    """JSON has no inf/nan: write them as the strings "inf" / "-inf", nan as null."""
    if np.isnan(x):
        return None
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def check_mechanism(instance: Instance, z: np.ndarray) -> np.ndarray:
    """Z as a float64 (N, K) array of finite numbers, or InputError."""
    z = np.asarray(z, dtype=np.float64)
    if z.shape != (instance.n_records, instance.n_outputs):
        raise InputError(f"mechanism has shape {z.shape}, instance needs ({instance.n_records}, {instance.n_outputs})")
    if not np.all(np.isfinite(z)):
        raise InputError("mechanism contains NaN or infinite probabilities")
    return z


def directed_pairs(instance: Instance) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(a, b, d) for both directions of every edge, in chunks of about CHUNK (pair, k) entries."""
    e, d = instance.edges, instance.distances
    a, b, dd = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]], np.r_[d, d]
    step = max(1, CHUNK // max(instance.n_outputs, 1))
    for s in range(0, a.shape[0], step):
        yield a[s : s + step], b[s : s + step], dd[s : s + step]


def log_ratio(za: np.ndarray, zb: np.ndarray) -> np.ndarray:
    """ln(za / zb) elementwise for za, zb >= 0, accurate to a few ulps of the result near 0.

    0 where both are 0, +inf where za > 0 = zb, -inf where za = 0 < zb. Within a factor 2 the value
    is log1p((za - zb) / zb), whose subtraction is exact (Sterbenz), so a log ratio of 1e-12 is not
    lost in the rounding of ln za and ln zb (~1e-16 |ln z| each).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        near = (za <= 2 * zb) & (zb <= 2 * za) & (zb > 0)
        out = np.where(near, np.log1p((za - zb) / np.where(near, zb, 1.0)), np.log(za) - np.log(zb))
    return np.where((za <= 0) & (zb <= 0), 0.0, out)


@dataclass
class GraphFindings:
    """The edge table against the metric of the record coordinates (:func:`graph_findings`)."""

    check: str  # "metric", or "skipped: <reason>"
    missing: np.ndarray  # (M, 2) int64 neighbour pairs (i < j, d <= eta) not in the edge table
    missing_distance: np.ndarray  # (M,) their metric distances
    mismatched: np.ndarray  # (W,) indices of edges whose stored distance differs from the metric
    metric_distance: np.ndarray  # (E,) metric distance of every stored edge (empty when skipped)


def graph_findings(instance: Instance) -> GraphFindings:
    """Recompute the neighbour graph from the record coordinates and compare it with the edge table.

    Runs when the metric is "euclidean" (coordinates ``x0..``) or "haversine" (``lat``, ``lon``) and
    the records carry them; the pairs within eta come from a KD-tree (haversine: 3-D chord radius),
    O(N log N + pairs), never N^2. Otherwise the check is skipped with the reason.
    """
    empty = np.zeros((0, 2), np.int64)
    skipped = lambda why: GraphFindings(f"skipped: {why}", empty, np.zeros(0), np.zeros(0, np.int64), np.zeros(0))  # noqa: E731
    if instance.metric not in ("euclidean", "haversine"):
        return skipped(f"metric {instance.metric!r} is not coordinate based")
    cols = instance.coordinate_columns()
    if not cols or (instance.metric == "haversine" and len(cols) != 2):
        return skipped("records carry no coordinates of the metric")
    pts = instance.record_points()
    want, want_d = neighbour_edges(pts, instance.metric, instance.eta)  # InputError on duplicate points
    e = instance.edges
    n = instance.n_records
    have = e[:, 0] * n + e[:, 1]
    wkey = want[:, 0] * n + want[:, 1]
    miss = ~np.isin(wkey, have)
    a, b = pts[e[:, 0]], pts[e[:, 1]]
    if instance.metric == "euclidean":
        metric_d = np.linalg.norm(a - b, axis=1)
    else:
        metric_d = haversine_rows_km(a, b)
    wrong = np.abs(instance.distances - metric_d) > DISTANCE_TOL * metric_d
    return GraphFindings("metric", want[miss], want_d[miss], np.flatnonzero(wrong), metric_d)


@dataclass
class Findings:
    """What one scan of the privacy rows found (:func:`edge_findings`, :func:`metric_findings`)."""

    n_pairs: int = 0  # undirected pairs scanned
    max_eps: float = 0.0  # max of ln z_ik - ln z_jk over d_ij
    max_excess: float = -np.inf  # max of ln z_ik - ln z_jk - eps d_ij
    max_abs: float = 0.0  # max of z_ik - exp(eps d_ij) z_jk
    worst_rel: float = -np.inf  # max of (ln z_ik - ln z_jk) / (eps d_ij)
    worst: tuple[int, int, int] | None = None  # its (i, j, k)
    n_viol: int = 0  # directed (pair, k) entries beyond the tolerance
    n_inf: int = 0  # ... with z_ik > 0 = z_jk

    def merge(self, other: Findings) -> Findings:
        """The findings of both scans together."""
        first = self if self.worst_rel >= other.worst_rel else other
        return Findings(
            self.n_pairs + other.n_pairs,
            max(self.max_eps, other.max_eps),
            max(self.max_excess, other.max_excess),
            max(self.max_abs, other.max_abs),
            first.worst_rel,
            first.worst,
            self.n_viol + other.n_viol,
            self.n_inf + other.n_inf,
        )


def _scan(found: Findings, a: np.ndarray, b: np.ndarray, d: np.ndarray, z: np.ndarray, eps: float, tol: float) -> None:
    """Add to ``found`` the directed pairs (a, b) (m,) at distances ``d`` (m,), every output, tested accurately
    (:func:`log_ratio`; ``z`` (N, K), eps per unit, ``tol`` the relative ratio tolerance)."""
    zp = np.maximum(z, 0.0)
    za, zb = zp[a], zp[b]
    bound = eps * d[:, None]
    abs_v = z[a] - np.exp(np.minimum(bound, 700.0)) * z[b]  # finite: no inf * 0
    found.max_abs = max(found.max_abs, float(abs_v.max(initial=0.0)))
    diff = log_ratio(za, zb)  # +inf where za > 0 = zb
    found.n_inf += int(np.sum(np.isposinf(diff)))
    found.n_viol += int(np.sum(diff > bound * (1.0 + tol)))
    if diff.size == 0:
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        found.max_eps = max(found.max_eps, float(np.max(diff / d[:, None])))
        found.max_excess = max(found.max_excess, float((diff - bound).max()))
        rel = diff / bound  # the test: rel <= 1 + ratio_tol
    idx = int(np.nanargmax(rel)) if not np.all(np.isnan(rel)) else 0
    if rel.flat[idx] > found.worst_rel:
        found.worst_rel = float(rel.flat[idx])
        r, k = divmod(idx, z.shape[1])
        found.worst = (int(a[r]), int(b[r]), int(k))


def edge_findings(instance: Instance, z: np.ndarray, ratio_tol: float = RATIO_TOL) -> Findings:
    """Every edge of the mDP graph, both directions, every output (chunks of :data:`CHUNK` entries)."""
    found = Findings(n_pairs=instance.n_edges)
    for a, b, d in directed_pairs(instance):
        _scan(found, a, b, d, z, instance.epsilon, ratio_tol)
    if instance.n_edges == 0:
        found.max_excess = 0.0
    return found


def _log_rows(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ln Z with zeros as 0, (N,) id of each row's zero pattern): two rows of different patterns are an
    infinite log ratio on some output (a zero opposite a non-zero)."""
    positive = z > 0
    _, pattern = np.unique(positive, axis=0, return_inverse=True)
    with np.errstate(divide="ignore"):
        return np.where(positive, np.log(np.where(positive, z, 1.0)), 0.0), pattern.reshape(-1)


def metric_findings(
    instance: Instance,
    z: np.ndarray,
    ratio_tol: float = RATIO_TOL,
    first: bool = False,
    pairs: MetricPairs | None = None,
) -> Findings:
    """Every two records of one component that are not an edge, in the metric (module docstring), both
    directions, every output. A pair is tested exactly only when the Chebyshev distance of its log rows
    exceeds eps d (1 + tol) - :data:`SCAN_SLACK` (rows of different zero patterns: always); every other pair
    holds with a margin above the plain logs' error. ``first``: stop at the first slab with a violation."""
    z = check_mechanism(instance, z)
    mp = pairs or MetricPairs.of(instance)
    eps = instance.epsilon
    logz, pattern = _log_rows(np.maximum(z, 0.0))
    found = Findings(n_pairs=mp.count() - instance.n_edges)
    for slab in mp.slabs(1):
        cheb = cdist(logz[slab.rows], logz, "chebyshev")
        cheb[pattern[slab.rows][:, None] != pattern[None, :]] = np.inf
        far = slab.same & ~slab.edge
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(far & (cheb > 0), cheb / slab.d, 0.0)  # d = 0 < cheb: inf
        found.max_eps = max(found.max_eps, float(ratio.max(initial=0.0)))
        ii, jj = np.nonzero(far & (cheb > eps * slab.d * (1.0 + ratio_tol) - SCAN_SLACK))
        found.max_excess = max(found.max_excess, float(np.where(far, cheb - eps * slab.d, -np.inf).max()))
        if ii.size:
            _scan(found, slab.rows[ii], jj, slab.d[ii, jj], z, eps, ratio_tol)
        if first and found.n_viol:
            break
    return found


def verify(
    instance: Instance,
    z: np.ndarray,
    row_tol: float = ROW_TOL,
    ratio_tol: float = RATIO_TOL,
    check_graph: bool = True,
    all_pairs: bool = False,
) -> Certificate:
    """Check Z against every constraint of ``instance`` (and, if ``check_graph``, the graph against
    the metric of the record coordinates); never modifies Z. ``all_pairs``: every two records of one
    component in the metric too (:func:`metric_findings`; InputError without coordinates of the metric)."""
    z = check_mechanism(instance, z)
    n_neg = int(np.sum(z < 0))
    row_err = float(np.max(np.abs(z.sum(axis=1) - 1.0)))
    found = edge_findings(instance, z, ratio_tol)
    far = metric_findings(instance, z, ratio_tol) if all_pairs else None
    if far is not None:
        found = found.merge(far)
    g = graph_findings(instance) if check_graph else None
    missing = 0 if g is None else int(g.missing.shape[0])
    mismatched = 0 if g is None else int(g.mismatched.shape[0])
    passed = n_neg == 0 and row_err <= row_tol and found.n_viol == 0 and missing == 0 and mismatched == 0
    return Certificate(
        passed=passed,
        epsilon=instance.epsilon,
        max_realised_epsilon=found.max_eps,
        max_ratio_excess=found.max_excess,
        max_abs_violation=max(found.max_abs, 0.0),
        worst_pair=found.worst,
        n_pairs=instance.n_edges,
        n_violations=found.n_viol,
        n_infinite=found.n_inf,
        n_negative=n_neg,
        max_row_sum_error=row_err,
        row_tol=row_tol,
        ratio_tol=ratio_tol,
        graph_check="skipped: not requested" if g is None else g.check,
        missing_edges=missing,
        distance_mismatches=mismatched,
        pairs="all" if all_pairs else "graph",
        n_metric_pairs=0 if far is None else far.n_pairs,
    )


def passes(
    instance: Instance, z: np.ndarray, row_tol: float = ROW_TOL, ratio_tol: float = RATIO_TOL, all_pairs: bool = False
) -> bool:
    """``verify(instance, z, row_tol, ratio_tol, check_graph=False, all_pairs=all_pairs).passed``, without the
    evidence: the same tests, stopping at the first chunk with a violation (a cheap convergence test)."""
    z = check_mechanism(instance, z)
    if np.any(z < 0) or (z.size and float(np.max(np.abs(z.sum(axis=1) - 1.0))) > row_tol):
        return False
    eps = instance.epsilon
    if any(
        np.any(log_ratio(z[a], z[b]) > eps * d[:, None] * (1.0 + ratio_tol)) for a, b, d in directed_pairs(instance)
    ):
        return False
    return not all_pairs or metric_findings(instance, z, ratio_tol, first=True).n_viol == 0


@dataclass
class RepairReport:
    applied: bool
    max_mix: float  # the largest repair size t_C (mixing weight + near-duplicate unification) of any component
    components_mixed: int
    objective_before: float
    objective_after: float

    def as_dict(self) -> dict:
        return asdict(self)


def near_duplicate_groups(instance: Instance) -> tuple[int, np.ndarray]:
    """Connected components of the edges with eps d_ij < UNIFY_LOG_RATIO: (count, (N,) labels)."""
    tiny = instance.epsilon * instance.distances < UNIFY_LOG_RATIO
    return components(instance.n_records, instance.edges[tiny])


def repair(instance: Instance, z: np.ndarray, all_pairs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Make Z pass :func:`verify` by unifying near-duplicate rows and mixing with the uniform row.

    Steps:
      (1) clip negative entries to 0 and divide each row by its sum (an all-zero row becomes uniform);
      (2) near-duplicates: in every group G of records joined by edges with eps d_ij < UNIFY_LOG_RATIO
          (:func:`near_duplicate_groups`; singletons untouched) replace each row by the group's
          prior-weighted mean row (plain mean if the group's prior is 0). Rows of one group are then
          bit-identical, so their log ratios are exactly 0 <= eps d_ij, now and after step (3), which
          applies the same float operations to identical rows;
      (3) in each connected component C of the mDP graph replace every row z_i, i in C, by
          z'_i = (1 - t) z_i + t u with u = (1/K, ..., 1/K) and
              t = max over directed pairs (i, j) in C and k with v > 0 of  v / (v + (g - 1) / K),
              v = z_ik - g z_jk,  g = exp(c_ij),  c_ij = min(eps d_ij, MAX_LOG_RATIO) (1 - RATIO_TOL / 2),
          (g - 1 computed as expm1(c_ij), no cancellation) and t = min(t, 1).

    Proof (exact arithmetic). Rows stay distributions: (1 - t) * 1 + t * K / K = 1, all terms >= 0.
    For a pair (i, j) in C and output k,
        z'_ik - g z'_jk = (1 - t) (z_ik - g z_jk) + t (1 - g) / K = (1 - t) v - t (g - 1) / K.
    If v <= 0 this is <= 0 for every t in [0, 1] since g > 1. If v > 0 it is <= 0 iff
    t (v + (g - 1)/K) >= v, i.e. t >= v / (v + (g - 1)/K), which t satisfies by construction. So
    ln z'_ik - ln z'_jk <= c_ij <= eps d_ij (1 - RATIO_TOL / 2), also when the cap applies.
    Components share no edge, so mixing each with its own t leaves the others untouched; and t < 1
    always (v <= 1, (g - 1)/K > 0), so the repair exists for every input.

    With ``all_pairs`` step (3)'s t is the maximum over every directed pair (i, j) of one component, d_ij
    their metric distance (:func:`_metric_need`): the proof above uses nothing of a pair but g > 1, so every
    pair of C then meets its row. Pairs beyond the edges have eps d_ij > 0 and no near-duplicate group; one
    whose eps d_ij is tiny needs t near 1, which :func:`certify`'s ``max_mix`` refuses.

    Floating point. Every repaired entry carries a relative rounding error of a few ulps (~1e-15 in
    the log ratio). The target c_ij leaves a margin of 1.5 RATIO_TOL eps d_ij to the verifier's bound
    eps d_ij (1 + RATIO_TOL); for the pairs mixed here eps d_ij >= UNIFY_LOG_RATIO = 1e-5, so the
    margin is >= 1.5e-14, 10x the rounding. Edges shorter than that are inside a group of step (2):
    identical rows, log ratio exactly 0. :func:`certify` verifies the result again regardless.

    Returns:
        (repaired Z (N, K), (n_components,) repair size per component: mixing weight t plus the largest
        total-variation change of step (2) in that component; 0 = the component was only normalised).
    """
    z = check_mechanism(instance, z).copy()
    k = z.shape[1]
    np.maximum(z, 0.0, out=z)
    s = z.sum(axis=1)
    zero = s <= 0
    z[zero] = 1.0 / k
    s[zero] = 1.0
    z /= s[:, None]
    count, labels = components(instance.n_records, instance.edges)
    unify = np.zeros(count)
    n_groups, group = near_duplicate_groups(instance)
    if n_groups < instance.n_records:
        w = instance.prior.copy()
        total = np.bincount(group, weights=w, minlength=n_groups)
        w = np.where(total[group] > 0, w, 1.0)  # a group of prior 0: plain mean
        total = np.bincount(group, weights=w, minlength=n_groups)
        mean = np.zeros((n_groups, k))
        np.add.at(mean, group, z * w[:, None])
        mean /= total[:, None]
        sizes = np.bincount(group, minlength=n_groups)
        multi = sizes[group] > 1
        tv = np.where(multi, 0.5 * np.abs(z - mean[group]).sum(axis=1), 0.0)
        z = np.where(multi[:, None], mean[group], z)
        np.maximum.at(unify, labels, tv)
    need = np.zeros(count)
    eps = instance.epsilon
    for a, b, d in directed_pairs(instance):
        c = (np.minimum(eps * d, MAX_LOG_RATIO) * (1.0 - RATIO_TOL / 2))[:, None]
        v = z[a] - np.exp(c) * z[b]
        with np.errstate(divide="ignore", invalid="ignore"):  # the masked-out v <= 0 branch may divide by 0
            t = np.where(v > 0, v / (v + np.expm1(c) / k), 0.0).max(axis=1)
        np.maximum.at(need, labels[a], t)
    if all_pairs:
        _metric_need(instance, z, labels, need)
    t_c = np.minimum(need, 1.0)
    t_row = t_c[labels][:, None]
    z = np.where(t_row > 0, (1.0 - t_row) * z + t_row / k, z)
    return z, t_c + unify


def _metric_need(instance: Instance, z: np.ndarray, labels: np.ndarray, need: np.ndarray) -> None:
    """Raise ``need`` (per component) to :func:`repair`'s t over the pairs of one component that are not edges
    (z (N, K) normalised; slabs of :class:`mdp_core.solvers.metric_pairs.MetricPairs`). A pair can have v > 0
    only when the Chebyshev distance of its log rows exceeds c_ij (zeros: different patterns), so only those
    are expanded over the outputs."""
    mp = MetricPairs.of(instance)
    k = z.shape[1]
    logz, pattern = _log_rows(z)
    for slab in mp.slabs(1):
        c = np.minimum(instance.epsilon * slab.d, MAX_LOG_RATIO) * (1.0 - RATIO_TOL / 2)
        cheb = cdist(logz[slab.rows], logz, "chebyshev")
        cheb[pattern[slab.rows][:, None] != pattern[None, :]] = np.inf
        ii, jj = np.nonzero(slab.same & ~slab.edge & (cheb > c - SCAN_SLACK))
        step = max(1, CHUNK // max(k, 1))
        for s in range(0, ii.size, step):
            i, j = ii[s : s + step], jj[s : s + step]
            a, cc = slab.rows[i], c[i, j][:, None]
            v = z[a] - np.exp(cc) * z[j]
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(v > 0, v / (v + np.expm1(cc) / k), 0.0).max(axis=1)
            np.maximum.at(need, labels[a], t)


def objective(instance: Instance, z: np.ndarray) -> float:
    """Expected utility loss sum_i p_i sum_k c_ik z_ik (in the cost unit)."""
    return float(np.sum(instance.prior[:, None] * instance.costs * z))


def certify(
    instance: Instance, z: np.ndarray, max_mix: float = 1e-2, all_pairs: bool = False
) -> tuple[np.ndarray, Certificate, RepairReport]:
    """The release gate: return a Z that passes :func:`verify`, or raise :class:`PrivacyError`.

    A Z that already passes is returned unchanged. Otherwise it is repaired (:func:`repair`) and
    verified again. ``max_mix`` bounds the repair size (mixing weight plus near-duplicate
    unification, see :func:`repair`): a solver answer that needs more than that share of uniform
    noise is far from a solution (time limit, numerical failure) and is refused
    rather than silently degraded. ``all_pairs``: verified and repaired over every two records of one
    component in the metric (:func:`verify`, :func:`repair`), the certificate then says ``pairs`` "all".
    """
    z = check_mechanism(instance, z)
    before = objective(instance, z)
    cert = verify(instance, z, all_pairs=all_pairs)
    if cert.passed:
        return z, cert, RepairReport(False, 0.0, 0, before, before)
    if cert.missing_edges or cert.distance_mismatches:
        raise PrivacyError(
            f"the instance's edge table does not match the metric of its record coordinates "
            f"({cert.missing_edges} missing neighbour pair(s), {cert.distance_mismatches} wrong distance(s)); "
            "no mechanism for it can be certified"
        )
    fixed, t_c = repair(instance, z, all_pairs)
    if t_c.max(initial=0.0) > max_mix:
        raise PrivacyError(
            f"mechanism violates mDP ({cert.summary()}) and repairing it would change rows by {t_c.max():.3g} "
            f"(uniform noise + near-duplicate unification > max_mix={max_mix:g}); refusing to release it"
        )
    cert2 = verify(instance, fixed, all_pairs=all_pairs)
    if not cert2.passed:
        raise PrivacyError(f"mechanism still violates mDP after repair: {cert2.summary()}")
    report = RepairReport(True, float(t_c.max(initial=0.0)), int(np.sum(t_c > 0)), before, objective(instance, fixed))
    return fixed, cert2, report


def write_mechanism(instance: Instance, z: np.ndarray, out_dir: str | Path, solve_info: dict) -> dict:
    """Write a mechanism after verifying it; refuses (PrivacyError) to write one that fails.

    ``solve_info`` is written to solve.json together with the certificate and the mechanism hash. The
    mechanism is verified over every pair of a component in the metric when its solve asked for it
    (``solve_info["options"]["all_pairs"]``, :class:`mdp_core.declarations.solver_options.SolverOptions`).
    """
    options = solve_info.get("options")
    every = isinstance(options, dict) and bool(options.get("all_pairs", False))
    cert = verify(instance, z, all_pairs=every)
    if not cert.passed:
        raise PrivacyError(f"refusing to write an unverified mechanism: {cert.summary()}")
    try:  # check solve.json can be written before writing anything (no mechanism without its solve.json)
        json.dumps(solve_info, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"solve info is not strict JSON ({exc}); nothing written") from None
    out = Path(out_dir)
    write_mechanism_table(z, out / "mechanism.parquet")
    info = dict(solve_info) | {
        "certificate": cert.as_dict(),
        "mechanism_sha256": file_sha256(out / "mechanism.parquet"),
        "n_records": instance.n_records,
        "n_outputs": instance.n_outputs,
    }
    write_json(out / "solve.json", info)
    return info
