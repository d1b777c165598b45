"""Baseline mechanisms (closed form). Each returns an (N, K) row-stochastic matrix.

Privacy contract
    input:      an instance with record/output coordinates and a metric d (the mDP graph d <= eta is
                only used to check); eps per distance unit.
    guarantee:  eps-mDP per distance unit, z_ik <= exp(eps d_ij) z_jk for every pair (i, j), not only neighbours.
    holds by:   construction (exponential: triangle inequality; planar Laplace: the continuous Laplace
                density, remapping is post-processing; closure: :func:`column_majorant`), then the
                certify gate (:func:`mdp_core.solvers.verify.certify`) for the Monte Carlo estimate's noise.
    reference:  Qiu 2024 app. D.1 (exponential); Andres et al. 2013 (planar Laplace).

Every mechanism still goes through :func:`mdp_core.solvers.verify.certify` before release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from scipy.spatial import cKDTree

from mdp_core.declarations.methods import ExpOptions, LaplaceOptions
from mdp_core.errors import InputError
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, pairwise
from mdp_core.solvers.metric_pairs import MetricPairs
from mdp_core.solvers.result import RawSolution, Status

if TYPE_CHECKING:
    from mdp_core.declarations.solver_options import SolverOptions


def record_output_distances(instance: Instance) -> np.ndarray:
    """(N, K) metric distances d(r_i, o_k) from the instance's coordinates, in ``distance_unit``."""
    return pairwise(instance.metric, instance.record_points(), instance.output_points())


def exponential(instance: Instance, distances: np.ndarray | None = None) -> np.ndarray:
    """Exponential mechanism z_ik proportional to exp(-eps * d(r_i, o_k) / 2) (Qiu 2024, app. D.1).

    For any records i, j and output k, |d(r_i, o_k) - d(r_j, o_k)| <= d(r_i, r_j) (triangle
    inequality), so the numerators differ by at most exp(eps d_ij / 2) and the normalisers by the
    same factor: z_ik / z_jk <= exp(eps d_ij). Computed in log space (row-wise max shift).

    Args:
        distances: optional (N, K) record-to-output distances; computed from coordinates if None.
    """
    if distances is None:
        d = record_output_distances(instance)
    else:
        d = np.asarray(distances, dtype=np.float64)
        if d.shape != (instance.n_records, instance.n_outputs) or not np.all(np.isfinite(d)) or np.any(d < 0):
            raise InputError(
                f"distances must be a finite, non-negative ({instance.n_records}, {instance.n_outputs}) array, "
                f"got shape {d.shape}"
            )
    s = -0.5 * instance.epsilon * d
    s -= s.max(axis=1, keepdims=True)
    z = np.exp(s)
    return z / z.sum(axis=1, keepdims=True)


def _plane_points(instance: Instance) -> tuple[np.ndarray, np.ndarray, str]:
    """Record and output coordinates in a Euclidean space of ``distance_unit``.

    Euclidean instances use their ``x0..`` columns as they are. Haversine instances are projected
    to a local equirectangular plane in km around the records' mean latitude (x = R cos(lat0) lon,
    y = R lat, radians); distances there differ from haversine ones by well under 1 % over a city.
    """
    rec, out = instance.record_points(), instance.output_points()
    if instance.metric == "euclidean":
        return rec, out, "euclidean coordinates"
    if instance.metric == "haversine":
        lat0 = np.radians(rec[:, 0].mean())

        def proj(p: np.ndarray) -> np.ndarray:
            r = np.radians(p)
            return EARTH_RADIUS_KM * np.column_stack([np.cos(lat0) * r[:, 1], r[:, 0]])

        return proj(rec), proj(out), f"equirectangular km projection at latitude {np.degrees(lat0):.4f}"
    raise InputError(f"the Laplace mechanism needs coordinates; metric {instance.metric!r} has none")


def laplace_noise(dim: int, epsilon: float, n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_samples, dim) draws of the dim-dimensional Laplace noise with density ~ exp(-eps ||x||).

    The radius of that density is Gamma(shape=dim, scale=1/eps) (for dim = 2 the polar Laplace of
    Andres et al.: radius Gamma(2, 1/eps), angle uniform) and the direction is uniform on the sphere.
    """
    radius = rng.gamma(shape=dim, scale=1.0 / epsilon, size=n_samples)
    direction = rng.normal(size=(n_samples, dim))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return radius[:, None] * direction


def planar_laplace(
    instance: Instance,
    n_samples: int = LaplaceOptions.n_samples,
    seed: int = LaplaceOptions.seed,
    chunk: int = 1 << 21,
) -> tuple[np.ndarray, dict]:
    """Planar (geo-indistinguishable) Laplace mechanism remapped to the nearest output.

    Mechanism: report r_i + noise (continuous Laplace, density ~ exp(-eps ||x||), in the coordinate
    space of :func:`_plane_points`: the plane for geo data, R^D for D-dimensional points), then the
    output nearest to that point. For any records i, j the noisy
    point's densities differ by at most exp(eps ||r_i - r_j||) (triangle inequality), and the remap
    is post-processing, so the exact matrix is eps-mDP for every pair, neighbours or not.

    Its matrix is estimated by seeded Monte Carlo: ``n_samples`` noise vectors drawn once and
    shared by every record (common random numbers: neighbouring rows see the same noise, which keeps
    their ratio errors small); z_ik = share of the samples whose remapped output is k. The estimate
    has sampling error ~ sqrt(z (1 - z) / n_samples) and zeros in the far tail, so it must go through
    :func:`mdp_core.solvers.verify.certify` (the repair's mixing weight is reported by the caller).

    Returns:
        (Z (N, K), info) with info = {"n_samples", "seed", "space", "noise_dim"}.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise InputError(f"n_samples must be a positive integer, got {n_samples!r}")
    rec, out, space = _plane_points(instance)
    rng = np.random.default_rng(seed)
    noise = laplace_noise(rec.shape[1], instance.epsilon, int(n_samples), rng)
    tree = cKDTree(out)
    n, k = rec.shape[0], out.shape[0]
    counts = np.zeros((n, k))
    step = max(1, chunk // n_samples)
    for s in range(0, n, step):
        block = rec[s : s + step]
        _, idx = tree.query((block[:, None, :] + noise[None, :, :]).reshape(-1, rec.shape[1]))
        rows = np.repeat(np.arange(block.shape[0]), n_samples)
        counts[s : s + step] = np.bincount(rows * k + idx, minlength=block.shape[0] * k).reshape(-1, k)
    info = {
        "n_samples": int(n_samples),
        "seed": int(seed),
        "space": space,
        "noise_dim": int(rec.shape[1]),
        "estimator": "Monte Carlo, common random numbers, nearest-output remap",
    }
    return counts / n_samples, info


def column_majorant(instance: Instance, z: np.ndarray, max_sweeps: int = 10_000, chunk: int = 1 << 22) -> np.ndarray:
    """Smallest Z' >= Z whose every column satisfies z'_ik <= exp(eps d_ij) z'_jk on every edge.

    In log space this is l'_ik = max_j (l_jk - eps D_ij) with D the mDP-graph path distance,
    computed by Bellman-Ford sweeps over the directed edges (l_a = max(l_a, l_b - eps d_ab)) until
    nothing changes (at most N - 1 sweeps; a few in practice). After the first sweep only edges whose
    tail changed in the previous sweep are examined: the others cannot raise their head again.
    Rows no longer sum to 1.

    Memory: a sweep works through the examined edges in blocks of whole heads of about ``chunk``
    (edge, output) entries, updating the heads of a block before the next block is read, so its
    temporaries are O(chunk) rather than two (2E, K) float64 arrays (2.7 GB at E K = 172 M). The
    result does not depend on ``chunk``: every value is the best path's l_j - eps d - ... - eps d,
    evaluated along the path, and rounding is monotone, so the best prefix always stays best.
    """
    return _majorant(instance, z, max_sweeps, chunk)[0]


def _majorant(
    instance: Instance, z: np.ndarray, max_sweeps: int = 10_000, chunk: int = 1 << 22, roots: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`column_majorant` (same values, same bytes) and, with ``roots``, an (N, K) int64 array:
    the record whose entry each entry was raised from (the start of its best path, an entry that was
    not raised; the entry's own record if it was not raised; a deterministic choice among ties)."""
    z = np.maximum(np.asarray(z, dtype=np.float64), 0.0)
    src = np.broadcast_to(np.arange(z.shape[0])[:, None], z.shape).copy() if roots else None
    if instance.n_edges == 0:
        return z, src
    e, d = instance.edges, instance.distances
    a, b = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]]
    order = np.argsort(a, kind="stable")  # group the directed edges by their head a
    a, b = a[order], b[order]
    step = (instance.epsilon * np.r_[d, d])[order][:, None]
    with np.errstate(divide="ignore"):
        logz = np.log(z)
    start = logz.copy()
    live = np.ones(instance.n_records, dtype=bool)  # records whose row changed in the last sweep
    per_block = max(1, chunk // max(z.shape[1], 1))  # examined edges per block (whole heads)
    for _ in range(min(max_sweeps, max(instance.n_records - 1, 1))):
        sel = np.flatnonzero(live[b])  # only edges from a changed tail can raise their head
        if sel.size == 0:
            break
        changed = np.zeros(instance.n_records, dtype=bool)
        a_sel = a[sel]  # sorted
        lo = 0
        while lo < sel.size:
            hi = min(lo + per_block, sel.size)
            if hi < sel.size:  # end the block at a head boundary (one head's edges stay together)
                hi = int(np.searchsorted(a_sel, a_sel[hi - 1], side="right"))
            blk = sel[lo:hi]
            heads, starts = np.unique(a_sel[lo:hi], return_index=True)
            vals = logz[b[blk]] - step[blk]  # (edges, K)
            best = np.maximum.reduceat(vals, starts, axis=0)  # (heads, K)
            up = best > logz[heads]
            if src is not None and up.any():
                head_of = np.repeat(np.arange(heads.size), np.diff(np.r_[starts, blk.size]))
                cand = np.maximum.reduceat(np.where(vals == best[head_of], src[b[blk]], -1), starts, axis=0)
                src[heads] = np.where(up, cand, src[heads])
            changed[heads[up.any(axis=1)]] = True
            logz[heads] = np.where(up, best, logz[heads])
            lo = hi
        live = changed
    return np.where(logz > start, np.exp(logz), z), src  # untouched entries keep their exact value


NEWTON_ROUNDS = 20  # smooth_to_mdp's default rounds with Newton steps at most


def smooth_to_mdp(
    instance: Instance,
    z: np.ndarray,
    max_rounds: int = 50,
    newton_rounds: int = NEWTON_ROUNDS,
    metric: MetricPairs | None = None,
) -> tuple[np.ndarray, int]:
    """Pull a noisy estimate of an mDP mechanism onto the constraint set, keeping it close.

    The target is a fixed point Z = majorant(Z) with rows summing to 1: every column in the privacy
    cone (:func:`column_majorant`) and Z row-stochastic. Each round takes the majorant M of the
    current point and returns M with its rows normalised (row i divided by its sum s_i) as soon as
    that passes :func:`mdp_core.solvers.verify.passes` (the test of :func:`mdp_core.solvers.verify.verify` without
    the evidence); otherwise it moves to a new point by one of two steps.

    Newton step. Every entry of M is either its own (not raised) or pinned to a root entry (r, k)
    it was raised from: m_ik = m_rk exp(-eps D_ir) along a chain of tight edges. ``root`` keeps the
    pinnings across rounds (an entry pinned earlier and not raised now keeps its root, or its root's
    root if that root was raised in turn). Scaling every entry by its root's factor c_r leaves every
    chain exactly as tight as it was, and the rows of M o c[root] sum to (A c)_i, where
    A_ir = sum of row i's entries rooted at r (N x N, sparse, own entries on the diagonal). So the
    next point is M o c[root] with A c = 1 (sparse LU): its rows sum to 1, and if no edge between
    entries of different roots breaks under the new factors it is the fixed point itself (the next
    majorant changes nothing). Where one breaks, the next majorant pins it and the next step solves
    the new structure: Newton's method on the piecewise-linear equation "rows of the majorant sum
    to 1". On row generation's LP points it needs 4-5 rounds where the plain alternation needs
    29-33, and its cost is lower (bench/README.md): pinned entries stay at their root's scale
    instead of being scaled down with their own row and raised again.

    Plain step: M with its rows normalised and the pinnings forgotten (s_i >= 1; it breaks an edge
    only by the factor s_j / s_i, which the next majorant absorbs). Taken instead of a Newton step
    when the largest row-sum error max |s_i - 1| did not fall below the previous round's, when A is
    singular (a record with no own entry that is no entry's root) or when c is not positive.

    Fallback. After two rounds in a row without a lower row-sum error, or after ``newton_rounds``
    rounds, it starts again from the input with plain steps only (``newton_rounds=0``: that alternation
    alone), so it passes whenever the alternation passes within ``max_rounds - newton_rounds`` rounds.
    ``metric`` (all pairs): majorant and ``passes`` over every two records of a component in the metric
    (:meth:`MetricPairs.majorant`). Z is returned when ``passes`` accepts it, or unverified after
    ``max_rounds`` rounds; it still goes through ``certify``. Deterministic (single-threaded sparse LU,
    ties broken by index). Returns (Z, rounds).
    """
    from scipy.sparse import csc_matrix
    from scipy.sparse.linalg import splu

    from mdp_core.solvers.verify import passes  # verify imports nothing from here, but keep imports light

    z = cur = np.asarray(z, dtype=np.float64)
    n, k = cur.shape
    own = np.arange(n)[:, None]
    cols = np.arange(k)[None, :]
    root = np.broadcast_to(own, cur.shape)  # root[i, k]: the record whose entry (i, k) is pinned to
    newton, last, stalls, out = newton_rounds > 0, np.inf, 0, cur
    for r in range(1, max_rounds + 1):
        m, src = _majorant(instance, cur, roots=newton) if metric is None else metric.majorant(cur, roots=newton)
        s = m.sum(axis=1)
        out = m / s[:, None]
        if passes(instance, out, all_pairs=metric is not None):
            return out, r
        err = float(np.max(np.abs(s - 1.0)))
        stalls, last = (stalls + 1 if err >= last else 0), err
        if newton and (stalls >= 2 or r >= newton_rounds):  # stuck: start again from the input, plain steps only
            newton, cur = False, z
            continue
        c: np.ndarray | None = None
        if newton and stalls == 0 and src is not None:
            root = np.where(src != own, src, src[root, cols])
            a = csc_matrix((m.ravel(), (np.repeat(np.arange(n), k), root.ravel())), shape=(n, n))
            try:
                c = splu(a).solve(np.ones(n))
            except RuntimeError:  # exactly singular
                c = None
            if c is not None and not (np.all(np.isfinite(c)) and np.all(c > 0)):
                c = None
        if c is None:
            cur, root = out, np.broadcast_to(own, cur.shape)
        else:
            cur = m * c[root]
    return out, max_rounds


def exponential_method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: ExpOptions
) -> RawSolution:
    """The "exp" entry of :data:`mdp_core.solvers.solve.METHODS`: :func:`exponential`. Status "feasible" with no
    lower bound: computed exactly, but nothing bounds its distance from the PMO optimum."""
    extra = {"computation": "closed form", "optimality": "not proven: a baseline without a lower bound"}
    return RawSolution(exponential(instance), status=Status.FEASIBLE, lower_bound=None, extra=extra)


def planar_laplace_method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: LaplaceOptions
) -> RawSolution:
    """``solve(instance, "laplace", n_samples=..., seed=..., smooth=...)``: planar Laplace (Monte Carlo).

    The Monte Carlo matrix (:func:`planar_laplace`) violates a few constraints by sampling noise
    (and has zeros in its far tail). With ``smooth`` (default) it is pulled onto the constraint set
    by :func:`smooth_to_mdp` before certification; ``extra`` states the sample count, the raw
    estimate's violations, the smoothing rounds, the mean total-variation distance between raw and
    smoothed rows, and the uniform-mixing share the exact repair would need for what is returned.
    Status "feasible" with no lower bound (a baseline: nothing bounds its distance from the optimum).
    """
    from mdp_core.solvers.verify import repair, verify

    n_samples, every = params.n_samples, options.all_pairs
    z, info = planar_laplace(instance, n_samples=n_samples, seed=params.seed)
    cert = verify(instance, z, all_pairs=every)
    info["raw_passes_verify"] = bool(cert.passed)
    info["raw_violations"] = int(cert.n_violations)
    info["raw_repair_mix"] = 0.0 if cert.passed else float(repair(instance, z, every)[1].max(initial=0.0))
    out = z
    if params.smooth and not cert.passed:
        out, rounds = smooth_to_mdp(instance, z, metric=MetricPairs.of(instance) if every else None)
        info["smoothing_rounds"] = rounds
        info["smoothing_mean_tv"] = float(0.5 * np.abs(out - z).sum(axis=1).mean())
    c2 = verify(instance, out, all_pairs=every)
    info["predicted_repair_mix"] = 0.0 if c2.passed else float(repair(instance, out, every)[1].max(initial=0.0))
    if progress:
        progress(f"planar Laplace: {n_samples} samples/record, raw {cert.summary()}; returned {c2.summary()}")
    info["computation"] = "Monte Carlo estimate" + (" smoothed onto the constraints" if out is not z else "")
    info["optimality"] = "not proven: a baseline without a lower bound"
    return RawSolution(out, status=Status.FEASIBLE, lower_bound=None, extra=info)
