"""Constraint-based DP post-processing of count tables (Fioretto et al. 2018, sections 7-10).

The universe U is a finite set (e.g. the K mechanism outputs); the data are the counts
``counts[u]`` (how many released individuals fall on u). A *feature* is a partition of U, given as a
label array of shape (|U|,) (element u belongs to block ``labels[u]``; labels are compressed to
0..n_i-1 in sorted label order) or as a list of index arrays (checked to be a partition).
Feature 0 must be the singletons, and one feature must be the whole universe (the paper's F1, F2).

CBDP (:func:`cbdp`):
  1. Laplace mechanism on every feature query with budget eps / k (sensitivity 1: each feature is
     a partition, so one individual changes exactly one count of each feature by 1), seeded;
  2. the Figure 3 QP: minimise sum_i (1/n_i) sum_j (x_ij - noisy_ij)^2 subject to the consistency
     constraints O2 for every comparable pair F_i' < F_i and x >= 0, solved by HiGHS (convex QP,
     diagonal Hessian, sparse constraints);
  3. integer rounding that keeps every consistency constraint and non-negativity
     (:func:`round_consistent`).
The whole mechanism is eps-DP (Theorem 8.1); steps 2-3 are post-processing. Optionally, already
public linear observations of the singleton counts join the QP (:class:`Observation`, e.g. the
released mDP histogram, whose expectation is Z^T h: :func:`mdp_histogram_observation`).

Baselines: :func:`laplace_rounded` (Laplace on the singleton counts with the whole budget, rounded
to the nearest non-negative integer) and :func:`hierarchical` (Hay et al.: a tree of the same
features, budget split over its levels, weighted least-squares consistency, no non-negativity).

Flow helpers: :func:`release_counts` (the aggregates.parquet table) and :func:`error_curve`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from mdp_core.declarations import tables
from mdp_core.errors import InputError, SolverError
from mdp_core.release.intervals import check_level, count_intervals
from mdp_core.release.noise import MOVE_SENSITIVITY, Measurement
from mdp_core.solvers import highs
from mdp_core.solvers.result import Status

FeatureSpec = np.ndarray | Sequence[np.ndarray]


# --------------------------------------------------------------------------------------- features
def as_labels(feature: FeatureSpec, n: int, name: str = "feature") -> np.ndarray:
    """A feature as (n,) int64 block labels 0..n_blocks-1 (sorted by original label).

    Accepts a label array of length n (any sortable labels; every label array is a partition) or a
    list of index arrays, which must be disjoint, non-empty and cover 0..n-1.
    """
    if isinstance(feature, np.ndarray) or (
        isinstance(feature, Sequence) and len(feature) == n and all(np.ndim(b) == 0 for b in feature)
    ):
        lab = np.asarray(feature)
        if lab.shape != (n,):
            raise InputError(f"{name}: label array must have shape ({n},), got {lab.shape}")
        if lab.dtype.kind == "f" and not np.all(np.isfinite(lab)):
            raise InputError(f"{name}: labels contain NaN or infinite values")
        if lab.dtype.kind == "O" and pd.isna(lab).any():
            raise InputError(f"{name}: labels contain missing values")
        return np.unique(lab, return_inverse=True)[1].astype(np.int64).reshape(n)
    blocks = [np.asarray(b, dtype=np.int64).reshape(-1) for b in feature]
    if any(b.size == 0 for b in blocks):
        raise InputError(f"{name} is not a partition: it has an empty block")
    idx = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InputError(f"{name} is not a partition: element index out of range 0..{n - 1}")
    seen = np.bincount(idx, minlength=n)
    if np.any(seen > 1):
        raise InputError(f"{name} is not a partition: element {int(np.argmax(seen > 1))} is in {seen.max()} blocks")
    if np.any(seen == 0):
        raise InputError(f"{name} is not a partition: element {int(np.argmin(seen))} is in no block")
    lab = np.empty(n, dtype=np.int64)
    lab[idx] = np.repeat(np.arange(len(blocks)), [b.size for b in blocks])
    return lab


def refines(fine: np.ndarray, coarse: np.ndarray) -> bool:
    """True when every block of ``fine`` lies inside one block of ``coarse`` (fine <= coarse)."""
    n_fine = int(fine.max()) + 1
    parent = np.full(n_fine, -1, dtype=np.int64)
    parent[fine] = coarse
    return bool(np.array_equal(parent[fine], coarse))


def partial_order(labels: list[np.ndarray]) -> list[tuple[int, int]]:
    """All comparable pairs (i', i), i' != i, with F_i' a sub-feature of F_i (F_i' refines F_i).

    Two identical partitions refine each other and appear in both orders.
    """
    return [(a, b) for a in range(len(labels)) for b in range(len(labels)) if a != b and refines(labels[a], labels[b])]


@dataclass
class Features:
    """Validated features over a universe of size n. ``labels[0]`` is the singletons."""

    labels: list[np.ndarray]
    names: list[str]
    order: list[tuple[int, int]]  # comparable pairs (fine, coarse)

    @property
    def sizes(self) -> list[int]:
        return [int(lab.max()) + 1 for lab in self.labels]

    def aggregate(self, singleton_values: np.ndarray) -> list[np.ndarray]:
        """Sum (n,) singleton values into every feature's blocks: list of (n_i,) arrays."""
        v = np.asarray(singleton_values)
        return [
            np.bincount(lab, weights=v, minlength=s).astype(v.dtype, copy=False)
            for lab, s in zip(self.labels, self.sizes, strict=True)
        ]


def make_features(features: Sequence[FeatureSpec], n: int, names: Sequence[str] | None = None) -> Features:
    """Validate features (partitions of 0..n-1), the first the singletons, one the whole universe."""
    if n < 1:
        raise InputError(f"the universe must have at least one element, got {n}")
    if len(features) < 1:
        raise InputError("at least one feature (the singletons) is required")
    names = list(names) if names is not None else [f"F{i + 1}" for i in range(len(features))]
    if len(names) != len(features):
        raise InputError(f"{len(features)} features but {len(names)} names")
    labels = [as_labels(f, n, f"feature {i} ({names[i]})") for i, f in enumerate(features)]
    if int(labels[0].max()) + 1 != n:
        raise InputError("the first feature must be the singletons (one block per universe element)")
    if not any(int(lab.max()) == 0 for lab in labels):
        raise InputError("one feature must be the whole universe (a single block)")
    return Features(labels, names, partial_order(labels))


def _check_counts(counts: np.ndarray) -> np.ndarray:
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0:
        raise InputError(f"counts must be a non-empty 1-D array, got shape {c.shape}")
    if not np.all(np.isfinite(c)) or np.any(c < 0) or np.any(c != np.round(c)):
        raise InputError("counts must be finite non-negative integers")
    return c.astype(np.int64)


def _check_eps(eps: float, name: str = "eps_counts") -> float:
    if not (np.isfinite(eps) and eps > 0):
        raise InputError(f"{name} must be a finite number > 0, got {eps}")
    return float(eps)


# -------------------------------------------------------------------------------------------- QP
@dataclass
class QpResult:
    x: list[np.ndarray]  # per feature (n_i,) post-processed counts (exactly consistent, >= 0)
    status: str
    seconds: float
    max_residual: float  # largest consistency violation of the raw HiGHS answer
    min_raw: float  # most negative raw HiGHS value (clipped to 0)


@dataclass
class Observation:
    """Extra public linear observation of the singleton counts y: ``values`` ~ ``matrix`` @ y.

    matrix: (m, |U|) sparse or dense; values: (m,); weight: objective weight of each of the m
    squared residuals (default 1/m, like a feature). Using already-public data costs no budget.
    """

    matrix: sp.spmatrix | np.ndarray
    values: np.ndarray
    weight: float | None = None


def mdp_histogram_observation(z: np.ndarray, released_counts: np.ndarray, weight: float | None = None) -> Observation:
    """The released mDP histogram as an observation of the secret record histogram h.

    Universe = the N secret records; ``released_counts`` (K,) = how many individuals were released
    on each output; its expectation is Z^T h (Z (N, K) the released mechanism). ``weight`` None
    means 1/K (the paper's per-feature weighting); an inverse-variance choice is
    (1/N) * 2 b^2 / mean(released_counts), with b = k / eps_counts the Laplace scale of the
    singleton queries (the released counts' variance is at most their mean).
    """
    z = np.asarray(z, dtype=np.float64)
    v = np.asarray(released_counts, dtype=np.float64)
    if z.ndim != 2 or v.shape != (z.shape[1],):
        raise InputError(f"released_counts must have shape ({z.shape[1] if z.ndim == 2 else '?'},), got {v.shape}")
    return Observation(sp.csr_matrix(z.T), v, weight)


def _observation_matrices(observations: Sequence[Observation], n: int) -> list[sp.coo_matrix]:
    """Each observation's matrix as COO (m, n), n = |U| singletons; InputError on a shape mismatch."""
    obs_mats = []
    for o in observations:
        m = sp.coo_matrix(o.matrix)
        if m.shape[1] != n or np.shape(o.values) != (m.shape[0],):
            raise InputError(
                f"observation matrix must be (m, {n}) with m values, got {m.shape} and {np.shape(o.values)}"
            )
        obs_mats.append(m)
    return obs_mats


def _qp_weights_and_targets(
    sizes: list[int], noisy: list[np.ndarray], observations: Sequence[Observation], obs_mats: list[sp.coo_matrix]
) -> tuple[np.ndarray, np.ndarray]:
    """(weights (n_var,), targets (n_var,)): 1/n_i and the noisy counts per feature block, then each
    observation's weight (default 1/m) and values."""
    w = np.concatenate(
        [np.full(s, 1.0 / s) for s in sizes]
        + [
            np.full(m.shape[0], o.weight if o.weight is not None else 1.0 / max(m.shape[0], 1))
            for m, o in zip(obs_mats, observations, strict=True)
        ]
    )
    target = np.concatenate(
        [np.asarray(v, dtype=np.float64) for v in noisy]
        + [np.asarray(o.values, dtype=np.float64) for o in observations]
    )
    return w, target


def _consistency_matrix(feats: Features, obs_mats: list[sp.coo_matrix], offsets: np.ndarray) -> sp.csc_matrix:
    """Equality rows (n_rows, n_var), all = 0: x_ij - sum_{u in block j} y_u for every non-singleton
    feature i, then v - matrix @ y for every observation; ``offsets`` = first variable of each block."""
    sizes = feats.sizes
    n = sizes[0]
    rows, cols, vals, n_rows = [], [], [], 0
    for i in range(1, len(sizes)):
        lab = feats.labels[i]
        rows += [n_rows + np.arange(sizes[i]), n_rows + lab]
        cols += [offsets[i] + np.arange(sizes[i]), np.arange(n)]
        vals += [np.ones(sizes[i]), -np.ones(n)]
        n_rows += sizes[i]
    for j, m in enumerate(obs_mats):
        off = offsets[len(sizes) + j]
        rows += [n_rows + np.arange(m.shape[0]), n_rows + m.row]
        cols += [off + np.arange(m.shape[0]), m.col]
        vals += [np.ones(m.shape[0]), -m.data]
        n_rows += m.shape[0]
    a = sp.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))) if vals else ([], ([], [])),
        shape=(n_rows, int(offsets[-1])),
    )
    a.sort_indices()
    return a


def _solve_weighted_qp(
    w: np.ndarray, target: np.ndarray, a: sp.csc_matrix, fixed: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """min sum_v w_v (x_v - target_v)^2 s.t. a @ x = 0, x >= 0 with HiGHS: (raw x (n_var,), seconds).
    ``fixed`` (n_var,) bool: those variables are held at their target exactly."""
    n_rows, n_var = a.shape
    # Scale so that the largest weight is 1 and the targets are O(1) (HiGHS tolerances are absolute).
    scale = max(float(np.max(np.abs(target))), 1.0)
    wmax = float(w.max())
    lower, upper = np.zeros(n_var), np.full(n_var, np.inf)
    if fixed is not None:
        lower[fixed] = upper[fixed] = target[fixed] / scale
    model = highs.LpModel(
        c=-2.0 * (w / wmax) * (target / scale),
        a=a,
        row_lower=np.zeros(n_rows),
        row_upper=np.zeros(n_rows),
        col_lower=lower,
        col_upper=upper,
        hessian_diag=2.0 * w / wmax,
    )
    t0 = time.perf_counter()
    h = highs.quiet_highs()
    try:
        highs.pass_model(h, model)
    except SolverError as exc:
        raise SolverError(f"CBDP QP: {exc}") from None
    sol = highs.run(h)
    if sol.status != Status.OPTIMAL or sol.x.shape[0] == 0:
        raise SolverError(f"CBDP QP not solved: HiGHS status {sol.detail}")
    raw = sol.x * scale
    return raw, time.perf_counter() - t0


def consistent_qp(
    feats: Features,
    noisy: list[np.ndarray],
    observations: Sequence[Observation] = (),
    fixed: Mapping[int, np.ndarray] | None = None,
) -> QpResult:
    """Solve Figure 3 with HiGHS: min sum_i (1/n_i) ||x_i - noisy_i||^2, O2 consistency, x >= 0.

    Variables x_i for every feature (the singletons y = x_0 first). Because F_0 (singletons)
    refines every feature, the O2 constraints of all comparable pairs are equivalent to
    x_ij = sum_{u in block j of F_i} y_u for every non-singleton feature i (each O2 constraint of a
    pair (i', i) is the difference of two of these, and these are O2 constraints of the pairs
    (0, i)); these are linearly independent (each has its own x_ij), which suits the QP solver.
    The Hessian is diagonal (2 / n_i). The answer is then made exactly consistent and non-negative
    by clipping y at 0 and recomputing every x_i = A_i y (a change of the order of the solver
    tolerance, reported as ``max_residual`` / ``min_raw``).

    ``observations`` (optional) add terms weight * ||v - values||^2 with auxiliary variables
    v = matrix @ y (one equality row each), keeping the Hessian diagonal. ``fixed`` {feature index:
    (n_i,) values}: features whose values are known exactly (public), held there (e.g. the total).
    """
    sizes = feats.sizes
    n = sizes[0]
    obs_mats = _observation_matrices(observations, n)
    offsets = np.r_[0, np.cumsum(sizes + [m.shape[0] for m in obs_mats])]
    w, target = _qp_weights_and_targets(sizes, noisy, observations, obs_mats)
    hold = None
    if fixed:
        hold = np.zeros(target.size, dtype=bool)
        for i, values in fixed.items():
            target[offsets[i] : offsets[i + 1]] = values
            hold[offsets[i] : offsets[i + 1]] = True
    raw, seconds = _solve_weighted_qp(w, target, _consistency_matrix(feats, obs_mats, offsets), hold)
    y = np.maximum(raw[:n], 0.0)
    x = feats.aggregate(y)
    resid = max(
        (float(np.max(np.abs(x[i] - raw[offsets[i] : offsets[i + 1]]), initial=0.0)) for i in range(1, len(sizes))),
        default=0.0,
    )
    return QpResult(x, Status.OPTIMAL, seconds, resid, float(min(raw.min(), 0.0)))


# ------------------------------------------------------------------------------------- rounding
def refinement_chain(feats: Features) -> list[int]:
    """A longest chain of features ordered from the whole universe down to the singletons.

    Each feature in the chain refines the previous one, so the chain's blocks form a tree.
    """
    k = len(feats.labels)
    sizes = feats.sizes
    finer = {(a, b) for a, b in feats.order if sizes[a] > sizes[b]}  # strict: drop duplicate partitions
    by_size = sorted(range(k), key=lambda i: (sizes[i], i))
    best: dict[int, list[int]] = {}
    for i in by_size:  # longest chain ending (at the fine end) in i, built from coarser features
        cands = [best[j] for j in best if (i, j) in finer]
        base = max(cands, key=len) if cands else []
        best[i] = base + [i]
    roots = [i for i in range(k) if sizes[i] == 1]
    chain = best[0]
    if chain[0] not in roots:  # the singletons always refine the whole universe
        chain = [roots[0]] + chain
    return chain


def round_consistent(feats: Features, x: list[np.ndarray]) -> list[np.ndarray]:
    """Integer counts that keep every consistency constraint and non-negativity.

    Method (controlled rounding down a tree): take a longest refinement chain from the whole
    universe to the singletons (:func:`refinement_chain`); round the total to the nearest integer;
    then, level by level, give every child block floor(x) and hand the parent's remaining units
    (parent integer - sum of children floors) to the children with the largest fractional parts
    (ties: lower block index). Because every parent integer is floor or ceil of its real value and
    x is consistent, the remainder lies in 0..#children, so every block on the chain ends at floor
    or ceil of its real value (error < 1) and the children sum exactly to the parent. The integer
    singletons then define every feature by summation: all O2 constraints hold exactly and all
    counts are >= 0 (floors of non-negative numbers). Features off the chain are sums of rounded
    singletons (error at most their block size, usually far less). Deterministic.
    """
    chain = refinement_chain(feats)
    sizes = feats.sizes
    parent_int = np.array([int(np.rint(max(float(x[chain[0]][0]), 0.0)))], dtype=np.int64)
    for level, f in enumerate(chain[1:], start=1):
        prev = chain[level - 1]
        # parent block of each child block of f
        par = np.empty(sizes[f], dtype=np.int64)
        par[feats.labels[f]] = feats.labels[prev]
        val = np.maximum(np.asarray(x[f], dtype=np.float64), 0.0)
        fl = np.floor(val)
        frac = val - fl
        rem = parent_int - np.bincount(par, weights=fl, minlength=sizes[prev]).astype(np.int64)
        n_child = np.bincount(par, minlength=sizes[prev])
        rem = np.clip(rem, 0, n_child)
        order = np.lexsort((np.arange(sizes[f]), -frac, par))
        first = np.r_[0, np.cumsum(n_child)][par[order]]
        rank = np.arange(sizes[f]) - first
        add = np.zeros(sizes[f], dtype=np.int64)
        add[order] = (rank < rem[par[order]]).astype(np.int64)
        parent_int = fl.astype(np.int64) + add
    return feats.aggregate(parent_int)


# ---------------------------------------------------------------------------------- mechanisms
@dataclass
class CountRelease:
    """Per-feature estimates of one mechanism run (lists aligned with ``Features.labels``)."""

    method: str
    estimate: list[np.ndarray]  # real or integer counts per feature
    eps: float
    noisy: list[np.ndarray] = field(default_factory=list)  # the Laplace observations used
    extra: dict = field(default_factory=dict)


def laplace_noise(true: list[np.ndarray], eps_each: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Laplace(1 / eps_each) noise added to each count vector (sensitivity 1 per partition)."""
    return [t + rng.laplace(0.0, 1.0 / eps_each, size=t.shape) for t in true]


def cbdp(
    counts: np.ndarray,
    features: Sequence[FeatureSpec] | Features,
    eps: float,
    seed: int,
    observations: Sequence[Observation] = (),
) -> CountRelease:
    """The CBDP mechanism: Laplace(k / eps) on every feature query, Figure 3 QP, consistent rounding.

    ``observations``: optional already-public linear observations added to the QP (e.g.
    :func:`mdp_histogram_observation`); they cost no budget (post-processing).

    Args:
        counts: (|U|,) true non-negative integer counts of the universe elements.
        features: k partitions of U (feature 0 the singletons, one the whole universe).
        eps: total budget (eps / k per feature query).
    Returns:
        ``estimate`` = the QP solution (real, consistent, >= 0); ``extra["integer"]`` = the rounded
        integer counts (consistent, >= 0); ``noisy`` = the Laplace observations.
    """
    c = _check_counts(counts)
    feats = features if isinstance(features, Features) else make_features(features, c.size)
    eps = _check_eps(eps)
    k = len(feats.labels)
    rng = np.random.default_rng(seed)
    noisy = laplace_noise([t.astype(np.float64) for t in feats.aggregate(c)], eps / k, rng)
    qp = consistent_qp(feats, noisy, observations)
    integer = round_consistent(feats, qp.x)
    return CountRelease(
        "cbdp",
        qp.x,
        eps,
        noisy,
        {
            "integer": integer,
            "eps_per_query": eps / k,
            "qp_seconds": qp.seconds,
            "qp_max_residual": qp.max_residual,
            "qp_min_raw": qp.min_raw,
        },
    )


def laplace_rounded(
    counts: np.ndarray, features: Sequence[FeatureSpec] | Features, eps: float, seed: int
) -> CountRelease:
    """Baseline M_Lap: Laplace(1 / eps) on the singleton counts, rounded to the nearest integer >= 0.

    Feature counts are the sums of the rounded singletons (consistent, but biased upwards on
    sparse data: every empty cell rounds to max(0, noise)).
    """
    c = _check_counts(counts)
    feats = features if isinstance(features, Features) else make_features(features, c.size)
    eps = _check_eps(eps)
    rng = np.random.default_rng(seed)
    noisy = c + rng.laplace(0.0, 1.0 / eps, size=c.size)
    y = np.maximum(np.rint(noisy), 0).astype(np.int64)
    return CountRelease("laplace", feats.aggregate(y), eps, [noisy])


def tree_levels(feats: Features) -> list[np.ndarray]:
    """Levels of the hierarchical tree: the whole universe, then successive common refinements.

    Features are taken from coarsest to finest (by block count); level t+1 is the intersection of
    level t with the next feature (so it refines level t); levels that add no split are skipped.
    The last level is the singletons. Returns (|U|,) label arrays, one per level.
    """
    sizes = feats.sizes
    cur = np.zeros(sizes[0], dtype=np.int64)
    levels = [cur]
    for i in sorted(range(len(sizes)), key=lambda i: (sizes[i], i)):
        pair = cur * (int(feats.labels[i].max()) + 1) + feats.labels[i]
        nxt = np.unique(pair, return_inverse=True)[1].astype(np.int64)
        if nxt.max() > cur.max():
            levels.append(nxt)
            cur = nxt
    return levels


def level_budgets(h: int, eps: float, scheme: str) -> np.ndarray:
    """Per-level budgets (root first) summing to eps: "uniform" or Cormode et al.'s "geometric"
    (eps_l proportional to 2^(l/3), the leaves getting the most)."""
    if scheme == "uniform":
        w = np.ones(h)
    elif scheme == "geometric":
        w = 2.0 ** (np.arange(h) / 3.0)
    else:
        raise InputError(f"budget scheme must be 'uniform' or 'geometric', got {scheme!r}")
    return eps * w / w.sum()


def tree_least_squares(levels: list[np.ndarray], noisy: list[np.ndarray], var: np.ndarray) -> list[np.ndarray]:
    """Weighted least-squares consistent estimate on a tree (generalised Hay et al. two passes).

    minimise sum_l sum_v (x_v - noisy_v)^2 / var_l subject to every node = sum of its children.
    Bottom-up: z_v = (noisy_v / var_v + s_v / S_v) / (1 / var_v + 1 / S_v) with s_v, S_v the sum of
    the children's z and variances V (V_v = 1 / (1 / var_v + 1 / S_v); leaves z = noisy).
    Top-down: x_root = z_root, x_c = z_c + (x_parent - s_parent) V_c / S_parent.
    Args: levels (|U|,) labels per level (root first); noisy per level (n_l,); var (h,) noise
    variances. Returns the consistent x per level. No non-negativity.
    """
    h = len(levels)
    parents = []
    for t in range(1, h):
        par = np.empty(int(levels[t].max()) + 1, dtype=np.int64)
        par[levels[t]] = levels[t - 1]
        parents.append(par)
    # every slot read below is filled first; the empty arrays are only placeholders
    z: list[np.ndarray] = [np.empty(0)] * h
    big_v: list[np.ndarray] = [np.empty(0)] * h
    s_sum: list[np.ndarray] = [np.empty(0)] * h
    v_sum: list[np.ndarray] = [np.empty(0)] * h
    z[h - 1] = np.asarray(noisy[h - 1], dtype=np.float64)
    big_v[h - 1] = np.full(z[h - 1].shape, var[h - 1])
    for t in range(h - 2, -1, -1):
        n_t = int(levels[t].max()) + 1
        s = np.bincount(parents[t], weights=z[t + 1], minlength=n_t)
        sv = np.bincount(parents[t], weights=big_v[t + 1], minlength=n_t)
        prec = 1.0 / var[t] + 1.0 / sv
        z[t] = (np.asarray(noisy[t], dtype=np.float64) / var[t] + s / sv) / prec
        big_v[t] = 1.0 / prec
        s_sum[t], v_sum[t] = s, sv
    x: list[np.ndarray] = [np.empty(0)] * h
    x[0] = z[0]
    for t in range(1, h):
        par = parents[t - 1]
        x[t] = z[t] + (x[t - 1] - s_sum[t - 1])[par] * big_v[t] / v_sum[t - 1][par]
    return x


def hierarchical(
    counts: np.ndarray, features: Sequence[FeatureSpec] | Features, eps: float, seed: int, budget: str = "uniform"
) -> CountRelease:
    """Baseline M_H (Hay et al. 2010, as used by Fioretto et al.): a tree of the same features.

    The tree levels are :func:`tree_levels`; each level is a partition, so its count query has
    sensitivity 1 and gets Laplace(1 / eps_l) noise with the budget split over the h levels
    (``budget`` "uniform" or "geometric"; sequential composition gives eps in total). The estimate
    is the weighted least-squares consistent tree (:func:`tree_least_squares`) without
    non-negativity; feature counts are sums of the (real, possibly negative) leaves. The pruning
    heuristic of Hay et al. is not applied.
    """
    c = _check_counts(counts)
    feats = features if isinstance(features, Features) else make_features(features, c.size)
    eps = _check_eps(eps)
    levels = tree_levels(feats)
    eps_l = level_budgets(len(levels), eps, budget)
    rng = np.random.default_rng(seed)
    true = [np.bincount(lab, weights=c, minlength=int(lab.max()) + 1) for lab in levels]
    noisy = [t + rng.laplace(0.0, 1.0 / e, size=t.shape) for t, e in zip(true, eps_l, strict=True)]
    x = tree_least_squares(levels, noisy, 2.0 / eps_l**2)
    leaves = x[-1][levels[-1]]  # element i takes the value of its finest-level block
    return CountRelease(
        "hierarchical",
        feats.aggregate(leaves),
        eps,
        noisy,
        {"levels": len(levels), "level_eps": eps_l.tolist(), "budget": budget},
    )


# ------------------------------------------------------------------------------------- errors
def feature_errors(feats: Features, estimate: list[np.ndarray], true: list[np.ndarray]) -> dict[str, float]:
    """Accuracy of one release: mean absolute error on the singletons, the mean over features of
    each feature's mean absolute error, and the weighted L2 distance
    ||x - c||_{2,w} = sqrt(sum_i (1/n_i) sum_j (x_ij - c_ij)^2) of Theorem 8.3."""
    mae = [float(np.mean(np.abs(np.asarray(e, float) - t))) for e, t in zip(estimate, true, strict=True)]
    wl2 = float(
        np.sqrt(sum(np.sum((np.asarray(e, float) - t) ** 2) / t.size for e, t in zip(estimate, true, strict=True)))
    )
    return {"mae_singletons": mae[0], "mae_features": float(np.mean(mae)), "weighted_l2": wl2}


def weighted_l2(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """||a - b||_{2,w} with weights 1/n_i (Fioretto et al. Theorem 8.3)."""
    sq = (np.sum((np.asarray(x, float) - np.asarray(y, float)) ** 2) / np.size(x) for x, y in zip(a, b, strict=True))
    return float(np.sqrt(sum(sq)))


CURVE_COLUMNS = list(tables.COUNT_ERROR.column_names)  # cbdp_error.parquet's, declared in mdp_core.declarations.tables


def error_curve(
    counts: np.ndarray,
    features: Sequence[FeatureSpec],
    eps_values: Sequence[float],
    n_seeds: int = 20,
    seed: int = 0,
    names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """CBDP error vs eps_counts, with the two baselines, averaged over ``n_seeds`` seeded runs.

    Returns one row per (eps_counts, method) with columns eps_counts, method ("cbdp",
    "cbdp_int", "laplace", "hierarchical"), mae_singletons, mae_features, weighted_l2 (means over
    seeds, in counts) and n_repeats (= ``n_seeds``). Run r uses seed ``seed + r`` for every method.
    """
    c = _check_counts(counts)
    feats = make_features(features, c.size, names)
    true = [t.astype(np.float64) for t in feats.aggregate(c)]
    if n_seeds < 1:
        raise InputError(f"n_seeds must be >= 1, got {n_seeds}")
    rows = []
    for eps in eps_values:
        acc: dict[str, list[dict[str, float]]] = {m: [] for m in ("cbdp", "cbdp_int", "laplace", "hierarchical")}
        for r in range(n_seeds):
            s = seed + r
            cb = cbdp(c, feats, eps, s)
            acc["cbdp"].append(feature_errors(feats, cb.estimate, true))
            acc["cbdp_int"].append(feature_errors(feats, cb.extra["integer"], true))
            acc["laplace"].append(feature_errors(feats, laplace_rounded(c, feats, eps, s).estimate, true))
            acc["hierarchical"].append(feature_errors(feats, hierarchical(c, feats, eps, s).estimate, true))
        for m, runs in acc.items():
            rows.append(
                {
                    "eps_counts": float(eps),
                    "method": m,
                    **{key: float(np.mean([r[key] for r in runs])) for key in runs[0]},
                    "n_repeats": n_seeds,
                }
            )
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


# ------------------------------------------------------------------------------ flow aggregate
AGGREGATE_COLUMNS = list(tables.AGGREGATES.column_names)  # aggregates.parquet's (mdp_core.declarations.tables)
Measure = Callable[[np.ndarray, int, float], Measurement]  # (true counts, L1 sensitivity, eps) -> noisy


def _count_features(zone_of_output: np.ndarray | None, k: int) -> tuple[Features, np.ndarray | None]:
    """Features "output", "zone" (only with more than one zone) and "total" over the K outputs, and
    the sorted distinct zone labels (None without ``zone_of_output``, (K,) labels)."""
    feats_in: list[np.ndarray] = [np.arange(k)]
    names = ["output"]
    zone_names = None
    if zone_of_output is not None:
        z = np.asarray(zone_of_output)
        if z.shape != (k,):
            raise InputError(f"zone_of_output must have shape ({k},), got {z.shape}")
        zone_names = np.unique(z)
        if zone_names.size > 1:
            feats_in.append(z)
            names.append("zone")
    feats_in.append(np.zeros(k, dtype=np.int64))
    names.append("total")
    return make_features(feats_in, k, names), zone_names


def _level_labels(level: str, k: int, zone_names: np.ndarray | None) -> np.ndarray:
    """The ``label`` column of one level: output ids 0..K-1, the zone labels, or "all" (as str)."""
    if level == "output":
        return np.arange(k).astype(str)
    if level == "zone":
        assert zone_names is not None  # the zone level exists only when zone_of_output was given
        return zone_names.astype(str)
    return np.array(["all"])


def _interval_columns(
    noisy: list[np.ndarray], integer: list[np.ndarray], scale: float, n: int, ci_level: float
) -> list[dict[str, np.ndarray]]:
    """Per level (the total last: exact, [n, n]) the ci_low, ci_high (each count at ``ci_level``) and sim_low,
    sim_high (all the noisy levels' counts together at ``ci_level``, Bonferroni) of
    :func:`mdp_core.release.intervals.count_intervals`, from the measurement ``noisy`` and the released ``integer``."""
    family = sum(v.size for v in noisy)
    out = []
    for y, p in zip(noisy, integer, strict=False):  # integer also has the total, last
        lo, hi = count_intervals(y, p.astype(np.int64), scale, n, ci_level)
        s_lo, s_hi = count_intervals(y, p.astype(np.int64), scale, n, ci_level, family)
        out.append({"ci_low": lo, "ci_high": hi, "sim_low": s_lo, "sim_high": s_hi})
    exact = np.array([n], dtype=np.int64)
    return out + [{"ci_low": exact, "ci_high": exact, "sim_low": exact, "sim_high": exact}]


def release_counts(
    cell_counts: np.ndarray,
    zone_of_output: np.ndarray | None,
    eps_counts: float,
    measure: Measure,
    ci_level: float = 0.95,
) -> tuple[pd.DataFrame, Measurement]:
    """The published count table of the TRUE data: consistent non-negative integers (CBDP).

    Universe: the K output cells; ``cell_counts`` (K,) int64 = how many individuals' true records
    fall in each cell (:func:`mdp_core.problem.microdata.cell_of_record`). Features: per output, per zone
    (``zone_of_output``, (K,) labels; omitted with a single zone) and the total. The total is the
    number of individuals n, public (the released microdata has n rows): it is released exactly and
    fixed in the QP. The output and zone counts are measured together once by ``measure`` (exact
    discrete Laplace, :func:`mdp_core.release.noise.discrete_laplace`) with L1 sensitivity 2 per level (one
    individual moves) and budget ``eps_counts``; the Figure 3 QP and :func:`round_consistent`
    (post-processing, no budget) make them consistent, non-negative integers summing to n.

    Returns (table with :data:`AGGREGATE_COLUMNS`, the measurement -- kept in the private store; the
    intervals are functions of it and reveal it in most cells). Columns: level ("total" | "zone" | "output"), block (id within the level), label, n_members
    (outputs in the block), count (int64 >= 0, the released figure), eps_counts, noise
    ("discrete_laplace", "none" for the total), noise_scale (the scale b of that level's noise, 0 for
    the total; b * eps_counts = the measurement's L1 sensitivity), ci_level (``ci_level``), ci_low, ci_high
    (each count's interval at ci_level) and sim_low, sim_high (all the table's counts together at ci_level):
    :func:`mdp_core.release.intervals.count_intervals`, around the measurement and widened to hold the
    released count; the total's are [n, n]. They are post-processing of the measurement: no budget.
    """
    counts = _check_counts(cell_counts)
    k = counts.size
    eps = _check_eps(eps_counts)
    check_level(ci_level)  # before anything is measured
    feats, zone_names = _count_features(zone_of_output, k)
    true = feats.aggregate(counts)
    noisy_levels = list(range(len(feats.names) - 1))  # every level but the total
    vector = np.concatenate([true[i] for i in noisy_levels]).astype(np.int64)
    meas = measure(vector, MOVE_SENSITIVITY * len(noisy_levels), eps)
    if meas.values.shape != vector.shape:
        raise InputError(f"measurement has shape {meas.values.shape}, expected {vector.shape}")
    split = np.cumsum([feats.sizes[i] for i in noisy_levels])[:-1]
    noisy = [v.astype(np.float64) for v in np.split(meas.values, split)]
    n = float(counts.sum())
    qp = consistent_qp(feats, noisy + [np.array([n])], fixed={len(feats.names) - 1: np.array([n])})
    integer = round_consistent(feats, qp.x)
    intervals = _interval_columns(np.split(meas.values, split), integer, float(meas.scale), int(n), ci_level)
    frames = []
    for i in reversed(range(len(feats.names))):  # total, zone, output
        n_i, total = feats.sizes[i], i == len(feats.names) - 1
        frames.append(
            pd.DataFrame(
                {
                    "level": feats.names[i],
                    "block": np.arange(n_i, dtype=np.int64),
                    "label": _level_labels(feats.names[i], k, zone_names),
                    "n_members": np.bincount(feats.labels[i], minlength=n_i).astype(np.int64),
                    "count": integer[i].astype(np.int64),
                    "eps_counts": eps,
                    "noise": "none" if total else "discrete_laplace",
                    "noise_scale": 0.0 if total else float(meas.scale),
                    "ci_level": float(ci_level),
                    **intervals[i],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[AGGREGATE_COLUMNS], meas
