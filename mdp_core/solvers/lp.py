"""The exact PMO linear program (Qiu 2024, Eqs. 4-7), solved with HiGHS through :mod:`mdp_core.solvers.highs`.

Privacy contract
    input:      the mDP graph (neighbour pairs d_ij <= eta, both directions), eps per distance unit.
    guarantee:  eps-mDP per distance unit on every neighbour pair and output (with ``SolverOptions.all_pairs``:
                on every two records of one component at their metric distance).
    holds by:   the certify gate: HiGHS meets the privacy rows only to its tolerance (~1e-7), so
                :func:`mdp_core.solvers.verify.certify` repairs the raw answer exactly and re-checks it
                before release. "optimal" is claimed only when the dual (Lagrangian) bound
                (:func:`mdp_core.solvers.privacy_rows.lagrangian_bound`) is within the requested gap.
    reference:  Qiu 2024, Eqs. 4-7 (the PMO linear program), Property 3.1 (components).

Variables: z = vec(Z) row-major, index(i, k) = i * K + k, 0 <= z.
Rows (built in one vectorised pass, no Python loop over edges or outputs):
  * privacy, for every edge (i, j) in both directions and every k:  z_ik - exp(eps d_ij) z_jk <= 0
    (2 * E * K rows, 2 non-zeros each), capped at eps d = ``verify.MAX_LOG_RATIO`` and balanced by
    1 / sqrt(g) (:mod:`mdp_core.solvers.privacy_rows`: why, and the capped-row rule of the bound);
  * unit measure, for every record i: sum_k z_ik = 1 (N rows, K non-zeros each).
Objective: sum_ik p_i c_ik z_ik, divided by max |p_i c_ik| before it reaches HiGHS so that the
default tolerances are relative to O(1) costs; reported objectives are always recomputed in the
original unit from the returned Z.

With ``SolverOptions.all_pairs`` the privacy rows are those of every two records of a component at their
metric distance (:func:`_pairs_of`; s (s - 1) K rows for a component of s records: small instances only).

The mDP graph's connected components are independent problems (Property 3.1) and are solved one
after the other; isolated records take their cheapest output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from mdp_core.declarations.methods import LpOptions
from mdp_core.declarations.solver_options import SOLVERS, SolverOptions
from mdp_core.errors import SolverError
from mdp_core.problem.graph import Block, component_blocks
from mdp_core.problem.instance import Instance
from mdp_core.runtime import control
from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.highs import LpModel, LpSolution, new_highs, pass_model, run, scale_costs, solve_model
from mdp_core.solvers.metric_pairs import MetricPairs
from mdp_core.solvers.result import RawSolution, Status, gap_closed

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
    "method",
    "new_highs",
    "pass_model",
    "run",
    "solve_lp",
    "solve_model",
]


def build_pmo(weighted_costs: np.ndarray, edges: np.ndarray, distances: np.ndarray, epsilon: float) -> LpModel:
    """The full PMO LP for n records: balanced privacy rows (:func:`mdp_core.solvers.privacy_rows.all_rows`,
    2 E K rows numbered (direction, edge, k) in C order), then the n unit rows.

    Args:
        weighted_costs: (n, K) p_i * c_ik (already scaled as wished).
        edges: (E, 2) local record indices 0..n-1; distances: (E,).
    """
    n, k = weighted_costs.shape
    priv, _ = pr.all_rows(pr.pairs(edges, distances, epsilon), n, k)
    unit = sp.csr_matrix((np.ones(n * k), np.arange(n * k), np.arange(n + 1) * k), shape=(n, n * k))
    n_priv = priv.shape[0]
    return LpModel(
        c=weighted_costs.ravel().copy(),
        a=sp.vstack([priv, unit]).tocsc(),
        row_lower=np.r_[np.full(n_priv, -np.inf), np.ones(n)],
        row_upper=np.r_[np.zeros(n_priv), np.ones(n)],
        col_lower=np.zeros(n * k),
        col_upper=np.full(n * k, np.inf),
    )


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
    lower_bound: float = float("nan")  # proven bound on the optimum (privacy_rows.lagrangian_bound), original unit
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
    local, dist = _pairs_of(instance, block, options.all_pairs)
    model = build_pmo(w, local, dist, instance.epsilon)
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
    if not sol.row_dual.size:
        res.lower_bound = -np.inf
        return
    capped = np.repeat(pr.pairs(local, dist, instance.epsilon).capped, k)
    terms = pr.dual_terms(model.a[: capped.size], capped, sol.row_dual)
    res.lower_bound += scale * pr.lagrangian_bound(w, terms)


def _pairs_of(instance: Instance, block: Block, all_pairs: bool) -> tuple[np.ndarray, np.ndarray]:
    """The component's privacy pairs: (local pairs (P, 2) i < j, their distances (P,)): its edges, or with
    ``all_pairs`` every two of its records at their metric distance (s (s - 1) / 2 pairs: the exact LP of
    :mod:`mdp_core.solvers.metric_pairs`, for small components; row generation finds the same rows lazily)."""
    if not all_pairs:
        return block.local_edges, instance.distances[block.edge_ids]
    a, b = np.triu_indices(block.members.shape[0], 1)
    d = MetricPairs.of(instance).distance(block.members[a], block.members[b])
    return np.column_stack([a, b]).astype(np.int64), d


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: LpOptions
) -> RawSolution:
    """The "lp" entry of :data:`mdp_core.solvers.solve.METHODS`.

    A proven lower bound from the duals (:func:`mdp_core.solvers.privacy_rows.lagrangian_bound`), valid whatever HiGHS's
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
