"""The exact PMO linear program (Qiu 2024, Eqs. 4-7), solved with HiGHS through :mod:`mdp_core.highs`.

Privacy contract
    input:      the mDP graph (neighbour pairs d_ij <= eta, both directions), eps per distance unit.
    guarantee:  eps-mDP per distance unit on every neighbour pair and output.
    holds by:   the certify gate: HiGHS meets the privacy rows only to its tolerance (~1e-7), so
                :func:`mdp_core.verify.certify` repairs the raw answer exactly and re-checks it
                before release. "optimal" is claimed only when the dual (Lagrangian) bound
                (:func:`lagrangian_bound`) is within the requested gap.
    reference:  Qiu 2024, Eqs. 4-7 (the PMO linear program), Property 3.1 (components).

Variables: z = vec(Z) row-major, index(i, k) = i * K + k, 0 <= z.
Rows (built in one vectorised pass, no Python loop over edges or outputs):
  * privacy, for every edge (i, j) in both directions and every k:  z_ik - exp(eps d_ij) z_jk <= 0
    (2 * E * K rows, 2 non-zeros each), with eps d_ij capped at ``verify.MAX_LOG_RATIO`` = 30 (a
    tighter row, so still private; HiGHS rejects coefficients above 1e15), each divided by
    exp(eps d_ij / 2) so that its two coefficients are e^{-+eps d / 2} (HiGHS broke down on the raw
    rows at eps d >= 20: "unbounded", "Not Set", or "optimal" far above the optimum);
  * unit measure, for every record i: sum_k z_ik = 1 (N rows, K non-zeros each).
Objective: sum_ik p_i c_ik z_ik, divided by max |p_i c_ik| before it reaches HiGHS so that the
default tolerances are relative to O(1) costs; reported objectives are always recomputed in the
original unit from the returned Z.

The mDP graph's connected components are independent problems (Property 3.1) and are solved one
after the other; isolated records take their cheapest output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from mdp_core import control
from mdp_core.errors import SolverError
from mdp_core.graph import Block, component_blocks
from mdp_core.highs import (  # re-exported: other modules import these names from lp
    SOLVERS,
    LpModel,
    LpSolution,
    SolverOptions,
    new_highs,
    pass_model,
    run,
    scale_costs,
    solve_model,
)
from mdp_core.instance import Instance
from mdp_core.methods import LpOptions
from mdp_core.result import RawSolution, Status, gap_closed
from mdp_core.verify import MAX_LOG_RATIO

# The PMO LP is feasible (the uniform mechanism) and bounded (rows are distributions): any other status
# is a numerical breakdown, retried (other algorithm, then cold without presolve) within the time limit.
SOLVED = frozenset({Status.OPTIMAL, Status.TIME_LIMIT, Status.ITERATION_LIMIT})

__all__ = [
    "SOLVERS",
    "LpModel",
    "LpOptions",
    "LpResult",
    "LpSolution",
    "SolverOptions",
    "build_pmo",
    "gap_closed",
    "lagrangian_bound",
    "method",
    "new_highs",
    "pass_model",
    "privacy_rows",
    "run",
    "solve_lp",
    "solve_model",
]


def privacy_rows(
    edges: np.ndarray, distances: np.ndarray, epsilon: float, n_out: int, left: np.ndarray, right: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """COO triplets of the privacy rows z_ak - exp(eps d) z_bk <= 0 for both edge directions.

    ``left`` / ``right`` map each record to the first column index of its K-block (or -1 when the
    record is not a variable of this model, in which case its term is dropped -- the caller moves it
    into the right-hand side). Returns (row, col, value) with 2 * E * K rows numbered
    (direction, edge, k) in C order.
    """
    a = np.r_[edges[:, 0], edges[:, 1]]
    b = np.r_[edges[:, 1], edges[:, 0]]
    w = np.exp(np.minimum(epsilon * np.r_[distances, distances], MAX_LOG_RATIO))  # capped: tighter, still private
    ks = np.arange(n_out)
    n_rows = a.shape[0] * n_out
    rows = np.arange(n_rows)
    ca = (left[a][:, None] + ks[None, :]).ravel()
    cb = (right[b][:, None] + ks[None, :]).ravel()
    va = np.ones(n_rows)
    vb = -np.repeat(w, n_out)
    ma, mb = left[a].repeat(n_out) >= 0, right[b].repeat(n_out) >= 0
    return (
        np.r_[rows[ma], rows[mb]],
        np.r_[ca[ma], cb[mb]],
        np.r_[va[ma], vb[mb]],
    )


def build_pmo(weighted_costs: np.ndarray, edges: np.ndarray, distances: np.ndarray, epsilon: float) -> LpModel:
    """The full PMO LP for n records.

    Args:
        weighted_costs: (n, K) p_i * c_ik (already scaled as wished).
        edges: (E, 2) local record indices 0..n-1; distances: (E,).
    """
    n, k = weighted_costs.shape
    start = np.arange(n, dtype=np.int64) * k
    r1, c1, v1 = privacy_rows(edges, distances, epsilon, k, start, start)
    n_priv = 2 * edges.shape[0] * k
    r2 = n_priv + np.repeat(np.arange(n), k)
    c2 = np.arange(n * k)
    # balance each privacy row: divide z_a - g z_b <= 0 by sqrt(g) (coefficients e^{+-15} instead of 1 and
    # e^30 at the cap); dual simplex and IPM broke down ("unbounded", "Not Set") on raw rows at eps d >= 20
    r1 = np.asarray(r1)
    g = np.ones(n_priv)
    np.maximum.at(g, r1, -np.asarray(v1))
    v1 = np.asarray(v1) / np.sqrt(g[r1])
    a = sp.csc_matrix((np.r_[v1, np.ones(n * k)], (np.r_[r1, r2], np.r_[c1, c2])), shape=(n_priv + n, n * k))
    return LpModel(
        c=weighted_costs.ravel().copy(),
        a=a,
        row_lower=np.r_[np.full(n_priv, -np.inf), np.ones(n)],
        row_upper=np.r_[np.zeros(n_priv), np.ones(n)],
        col_lower=np.zeros(n * k),
        col_upper=np.full(n * k, np.inf),
    )


def lagrangian_bound(model: LpModel, n_priv: int, row_dual: np.ndarray) -> float:
    """A proven lower bound on a PMO model's optimum from any privacy-row duals (model's own unit).

    With lambda = max(-y, 0) >= 0 (HiGHS's duals y of the "<= 0" rows are <= 0), every feasible z has
    c^T z >= c^T z + lambda^T A_priv z = r^T z >= sum_i min_k r_ik, r = c + A_priv^T lambda, because
    A_priv z <= 0 and each z_i is a distribution. Valid whatever the solver's tolerances were; tight
    when y is the optimal dual. Rows whose ratio was capped at exp(MAX_LOG_RATIO) are tighter than
    the exact rows, so they get lambda = 0: the bound then holds for the exact (uncapped) LP. Any
    positive multiple of a privacy row is a privacy row, so balanced rows (:func:`build_pmo`) work alike.
    """
    n_unit = model.a.shape[0] - n_priv
    priv = model.a[:n_priv].tocsr()
    lam = np.maximum(-np.asarray(row_dual[:n_priv], dtype=np.float64), 0.0)
    ratio = -priv.min(axis=1).toarray().ravel() / np.maximum(priv.max(axis=1).toarray().ravel(), 1e-300)
    capped = ratio >= np.exp(MAX_LOG_RATIO) * (1 - 1e-12)  # the row's g (its rows may be balanced by 1/sqrt(g))
    lam[capped] = 0.0
    r = model.c + priv.T @ lam
    return float(r.reshape(n_unit, -1).min(axis=1).sum())


@dataclass
class LpResult:
    """Output of :func:`solve_lp`: the raw (unrepaired) solver matrix and what HiGHS reported."""

    z: np.ndarray  # (N, K) as returned by HiGHS (may violate constraints by ~tolerance)
    status: Status  # optimal, or the first non-optimal component status
    objective: float  # sum p_i c_ik z_ik of the raw z, original cost unit
    iterations: int
    seconds: float
    n_components: int
    largest_component: int
    lower_bound: float = float("nan")  # proven bound on the optimum (lagrangian_bound), original unit
    fallbacks: list[str] = field(default_factory=list)  # components solved by the fallback algorithm


def solve_lp(
    instance: Instance,
    options: SolverOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> LpResult:
    """Solve the PMO exactly with HiGHS, one connected component at a time.

    Raises :class:`SolverError` when a component is infeasible/unbounded or HiGHS fails; a time limit
    hit returns status "time_limit" only if every component still has a primal solution.
    """
    options = options or SolverOptions()
    t0 = time.perf_counter()
    n, k = instance.n_records, instance.n_outputs
    weighted = instance.prior[:, None] * instance.costs
    count, sizes, blocks = component_blocks(n, instance.edges)
    z = np.zeros((n, k))
    res = LpResult(z, Status.OPTIMAL, 0.0, 0, 0.0, count, int(sizes.max()), 0.0)
    for block in blocks:
        if block.members.shape[0] == 1:
            i = block.members[0]
            z[i, np.argmin(instance.costs[i])] = 1.0
            res.lower_bound += float(np.min(weighted[i]))
            continue
        _solve_component(instance, block, weighted, options, t0, res, progress)
    res.objective = float(np.sum(weighted * z))
    res.seconds = time.perf_counter() - t0
    return res


def _solve_component(
    instance: Instance,
    block: Block,
    weighted: np.ndarray,
    options: SolverOptions,
    t0: float,
    res: LpResult,
    progress: Callable[[str], None] | None,
) -> None:
    """Solve one component's PMO into ``res.z`` and add its Lagrangian bound to ``res.lower_bound``
    (``t0``: the solve's ``time.perf_counter()`` start; the time limit counts from there)."""
    deadline = t0 + options.time_limit
    members, k, count = block.members, weighted.shape[1], res.n_components
    w, scale = scale_costs(weighted[members])
    eidx = block.edge_ids
    model = build_pmo(w, block.local_edges, instance.distances[eidx], instance.epsilon)
    where = f"component {block.index + 1}/{count}"
    remaining = deadline - time.perf_counter()
    if remaining <= 0:
        raise SolverError(f"time limit of {options.time_limit:g} s reached before {where}")
    sol = solve_model(model, options, remaining, want_duals=True, accept=SOLVED, what=f"lp {where}")
    res.iterations += sol.iterations
    line = control.Progress(
        "lp",
        where,
        elapsed=time.perf_counter() - t0,
        time_limit=options.time_limit,
        fraction=(block.index + 1) / count,
        detail=f"{members.shape[0]} records, {model.a.shape[0]} rows, {sol.describe()} in {sol.seconds:.2f}s"
        + (f" (solver fallback: {sol.fallback})" if sol.fallback else ""),
    )
    control.report(progress, line)
    if sol.fallback:
        res.fallbacks.append(f"component {block.index + 1}: {sol.fallback}")
    if sol.x.shape[0] == 0:
        raise SolverError(f"HiGHS returned no solution for {where} (status {sol.describe()})")
    if sol.status != Status.OPTIMAL:
        res.status = sol.status
    res.z[members] = sol.x.reshape(members.shape[0], k)
    n_priv = 2 * eidx.shape[0] * k
    res.lower_bound += scale * lagrangian_bound(model, n_priv, sol.row_dual) if sol.row_dual.size else -np.inf


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: LpOptions
) -> RawSolution:
    """The "lp" entry of :data:`mdp_core.solve.METHODS`.

    A proven lower bound from the duals (:func:`lagrangian_bound`), valid whatever HiGHS's
    tolerances: HiGHS's "optimal" objective itself can sit slightly above the true optimum.
    """
    res = solve_lp(instance, options, progress)
    lower = float(res.lower_bound) if np.isfinite(res.lower_bound) else None
    return RawSolution(
        res.z,
        res.status,
        lower,
        res.iterations,
        {"n_components": res.n_components, "largest_component": res.largest_component, "fallbacks": res.fallbacks},
    )
