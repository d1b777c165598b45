"""Row generation ("rowgen"): the exact PMO LP with its privacy rows generated lazily.

Privacy contract
    input:      an instance: records, outputs, costs and the mDP graph (edges with d_ij <= eta).
    guarantee:  eps-mDP per distance unit: z_ik <= exp(eps d_ij) z_jk on every edge, both ways.
    holds by:   the certify gate (:func:`mdp_core.verify.certify`); the mechanism returned here is
                the conic closure of an LP point and normally passes unchanged.
    reference:  Qiu et al. 2024, Eqs. 4-7 (the PMO LP); Lagrangian bound as in :mod:`mdp_core.lp`.

Why. On the papers' dense settings (eps * eta = 20: N(0, 1) points with eta = 2, Rome roads with
eta = 2 km) every record has hundreds of neighbours and the full LP has 2 E K privacy rows (10.9 M
for synthetic N = 500, K = 100), far beyond what HiGHS solves here. Yet at a vertex optimum at most
N K of them bind, almost all on short edges: a pair at distance d allows a ratio e^{eps d}, which
is e^20 at d = eta. So the LP is solved over a growing subset R of its rows.

Algorithm (one HiGHS model, every record and output; connected components need no special case):

1. R = for every record a its ``neighbours`` shortest edges (a, b), for every output k.
2. Solve LP_R: min c.z s.t. the rows in R, sum_k z_ik = 1, z >= 0 (interior point without
   crossover by default, cold each round: faster here than warm dual simplex after many new rows;
   it stops at a relative duality gap of a tenth of the requested gap, :func:`ipm_tolerance`).
3. Lower bound (valid for the full LP, see below) from LP_R's duals.
4. Upper bound: the cost of the *closure* of LP_R's point z: every column raised to its smallest
   majorant in the privacy cone (z'_ik = max_j z_jk e^{-eps D_ij}, D = graph path distance), rows
   renormalised, repeated until the mechanism passes :func:`mdp_core.verify.verify`
   (:func:`mdp_core.mechanisms.smooth_to_mdp`; 3-6 rounds here). The best closure is returned.
5. Stop when UB - LB is within the requested gap. Otherwise add the violated rows
   z_ak - g_ab z_bk > 0 (g_ab = exp(eps d_ab)) with the largest *deficit* (z_ak / g_ab - z_bk: the
   mass the closure must add to z_bk; rows with e^20 ratios and tiny z_ak cost nothing to repair
   and are not worth a row), at most ``rows_per_round`` of them, and go to 2.

Why the lower bound is valid. Let A z <= 0 be *all* privacy rows of the full LP and lambda >= 0 any
multipliers, zero outside R. For every z feasible for the full LP, c.z >= c.z + lambda.(A z) =
(c + A^T lambda).z >= sum_i min_k (c + A^T lambda)_ik, because A z <= 0 and each row z_i is a
probability distribution. With lambda = max(-y, 0) from LP_R's row duals y (HiGHS's duals of
"<= 0" rows are <= 0) the bound is valid whatever HiGHS's tolerances were and tight when y is
optimal for LP_R and LP_R's optimum is the full LP's. Rows whose ratio is capped at
exp(MAX_LOG_RATIO) (tighter than the exact row) get lambda = 0, so the bound holds for the exact
LP. The bound is computed in float64 from the model's own arrays (no HiGHS objective is trusted).

Memory: the model holds N K columns and |R| rows (|R| ~ 0.2-0.5 M at N = 500 dense); violation
checks stream over the 2 E K (edge, output) pairs in chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from mdp_core import control, highs
from mdp_core.errors import InputError
from mdp_core.highs import SolverOptions
from mdp_core.instance import Instance
from mdp_core.mechanisms import smooth_to_mdp
from mdp_core.result import GapOptions, RawSolution, Status, gap_closed
from mdp_core.verify import MAX_LOG_RATIO, objective

TRACE_COLUMNS = ["iteration", "lower_bound", "upper_bound", "gap", "rows", "rows_added", "lp_seconds", "seconds"]
CHUNK = 1 << 22  # (directed edge, output) pairs examined at once
# min c.z over z >= 0 with c >= 0 is bounded and feasible (the uniform mechanism satisfies every row):
# any status but optimal or a limit is a numerical breakdown, retried with the other algorithm, cold.
ACCEPT = frozenset({Status.OPTIMAL, Status.TIME_LIMIT, Status.ITERATION_LIMIT})
RETRIES = highs.SWITCH_ALGORITHM + highs.COLD_NO_PRESOLVE


@dataclass(frozen=True)
class RowgenOptions(GapOptions):
    """Options of the "rowgen" method (module docstring)."""

    neighbours: int = field(default=4, metadata={"help": "initial rows: each record's this many shortest edges"})
    rows_per_round: int = field(
        default=0, metadata={"help": "violated rows added per round, largest deficit first (0 = max(20000, N K / 2))"}
    )
    min_deficit: float = field(
        default=1e-12,
        metadata={"help": "a violated row enters only when z_ak / g_ab - z_bk exceeds this (probability mass)"},
    )
    max_rounds: int = field(default=100, metadata={"help": "LP solves at most"})
    lp_solver: str = field(
        default="ipm",
        metadata={
            "help": "each round's LP: interior point without crossover, cold (default), or dual simplex, warm",
            "choices": highs.SOLVERS,
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.neighbours < 0:
            raise InputError(f"neighbours must be >= 0, got {self.neighbours}")
        if self.rows_per_round < 0:
            raise InputError(f"rows_per_round must be >= 0, got {self.rows_per_round}")
        if not self.min_deficit >= 0:
            raise InputError(f"min_deficit must be >= 0, got {self.min_deficit}")
        if self.max_rounds < 1:
            raise InputError(f"max_rounds must be >= 1, got {self.max_rounds}")
        if self.lp_solver not in highs.SOLVERS:
            raise InputError(f"lp_solver must be one of {highs.SOLVERS}, got {self.lp_solver!r}")


@dataclass
class _Rows:
    """The directed edges of the mDP graph and which (edge, output) rows the model holds."""

    a: np.ndarray  # (2E,) head record of each directed edge
    b: np.ndarray  # (2E,) tail record
    g: np.ndarray  # (2E,) ratio exp(min(eps d, MAX_LOG_RATIO))
    exact: np.ndarray  # (2E,) bool: the ratio is not capped (lambda may be > 0)
    active: np.ndarray  # (2E, K) bool: row in the model
    edge: list[np.ndarray] = field(default_factory=list)  # per block of added rows: directed edge ids
    out: list[np.ndarray] = field(default_factory=list)  # ... and their outputs

    @classmethod
    def of(cls, instance: Instance) -> _Rows:
        e, d = instance.edges, instance.distances
        a, b = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]]
        logr = instance.epsilon * np.r_[d, d]
        return cls(
            a,
            b,
            np.exp(np.minimum(logr, MAX_LOG_RATIO)),
            logr < MAX_LOG_RATIO,
            np.zeros((a.size, instance.n_outputs), dtype=bool),
        )

    @property
    def count(self) -> int:
        return int(sum(x.size for x in self.edge))


def initial_rows(rows: _Rows, distances: np.ndarray, neighbours: int) -> np.ndarray:
    """Directed edge ids: for every head record its ``neighbours`` shortest edges."""
    dd = np.r_[distances, distances]
    order = np.lexsort((dd, rows.a))
    _, starts, counts = np.unique(rows.a[order], return_index=True, return_counts=True)
    rank = np.arange(order.size) - np.repeat(starts, counts)
    return np.sort(order[rank < neighbours])


def _add(h: Any, rows: _Rows, ei: np.ndarray, ki: np.ndarray, n: int, k: int) -> None:
    """Append rows (z_{a,k} - g z_{b,k}) / sqrt(g) <= 0 for the (directed edge, output) pairs (ei, ki).

    Dividing by sqrt(g) balances the two coefficients (e^{+-15} instead of 1 and e^30 at the cap),
    which interior point needs on eps * d >= 20 rows; :func:`lower_bound` converts the duals back."""
    m = ei.size
    if m == 0:
        return
    cols = np.c_[rows.a[ei] * k + ki, rows.b[ei] * k + ki].ravel()
    root = np.sqrt(rows.g[ei])  # the row divided by sqrt(g): coefficients 1/sqrt(g) and sqrt(g)
    vals = np.c_[1.0 / root, -root].ravel()
    mat = sp.csr_matrix((vals, cols, np.arange(0, 2 * m + 1, 2)), shape=(m, n * k))
    highs.add_rows(h, mat, np.full(m, -highs.INF), np.zeros(m))
    rows.active[ei, ki] = True
    rows.edge.append(ei)
    rows.out.append(ki)


def lower_bound(c: np.ndarray, rows: _Rows, priv_dual: np.ndarray, k: int) -> float:
    """sum_i min_k (c + A_R^T lambda)_ik with lambda = max(-y, 0) / sqrt(g) (the model's rows are the
    privacy rows divided by sqrt(g)), 0 on capped rows (module docstring).

    Args:
        c: (N K,) scaled weighted costs p_i c_ik / s; priv_dual: duals of the privacy rows in the
            order they were added. Returns the bound in the scaled unit.
    """
    ei = np.concatenate(rows.edge) if rows.edge else np.zeros(0, np.int64)
    ki = np.concatenate(rows.out) if rows.out else np.zeros(0, np.int64)
    lam = np.maximum(-priv_dual, 0.0) / np.sqrt(rows.g[ei]) * rows.exact[ei]  # rows were divided by sqrt(g)
    n = c.size
    r = c + np.bincount(rows.a[ei] * k + ki, lam, n) - np.bincount(rows.b[ei] * k + ki, lam * rows.g[ei], n)
    return float(r.reshape(-1, k).min(axis=1).sum())


def violated(z: np.ndarray, rows: _Rows, min_deficit: float, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """(edge ids, outputs) of at most ``limit`` rows outside the model with deficit
    z_ak / g - z_bk > ``min_deficit``, largest deficit first (streamed in chunks of edges)."""
    k = z.shape[1]
    step = max(1, CHUNK // max(k, 1))
    empty = np.zeros(0, np.int64)
    found_e, found_k, found_s = [empty], [empty], [np.zeros(0)]
    for s in range(0, rows.a.size, step):
        control.check("rowgen's search for violated rows")  # a long scan at N = 2,000 (2 E K pairs)
        sl = slice(s, s + step)
        deficit = z[rows.a[sl]] / rows.g[sl, None] - z[rows.b[sl]]
        deficit[rows.active[sl]] = 0.0
        e, kk = np.nonzero(deficit > min_deficit)
        found_e.append(e + s)
        found_k.append(kk)
        found_s.append(deficit[e, kk])
    ei, ki, score = np.concatenate(found_e), np.concatenate(found_k), np.concatenate(found_s)
    if ei.size > limit:
        keep = np.argpartition(-score, limit - 1)[:limit]
        keep = keep[np.lexsort((ki[keep], ei[keep]))]  # deterministic order
        ei, ki = ei[keep], ki[keep]
    return ei, ki


def ipm_tolerance(gap_rel: float) -> float:
    """Relative duality gap at which each round's interior point stops: a tenth of the requested
    relative gap, within [1e-8 (HiGHS's default), 1e-3].

    The Lagrangian bound is valid for any duals (module docstring); a looser interior point only
    makes it less tight, by about the tolerance (rome500 round 1 at 1e-4: 1.2e-5 relative), so a
    tenth of the target spends at most about a tenth of the gap. ``optimality_tolerance`` (HiGHS's
    own check of the returned primal-dual gap) must follow it, or HiGHS reports "unknown"."""
    return min(1e-3, max(1e-8, 0.1 * gap_rel))


def new_model(
    instance: Instance, options: SolverOptions, params: RowgenOptions
) -> tuple[Any, _Rows, np.ndarray, float]:
    """The restricted LP of round 1: every z_ik >= 0 with scaled costs, the N unit rows, the initial
    privacy rows (:func:`initial_rows`). Returns (Highs object, rows, (N K,) scaled costs, scale)."""
    n, k = instance.n_records, instance.n_outputs
    c, scale = highs.scale_costs(instance.prior[:, None] * instance.costs)
    c = c.ravel()
    rows = _Rows.of(instance)
    h = highs.new_highs(highs.with_options(options, solver=params.lp_solver, presolve=False))
    if params.lp_solver == "ipm":
        tol = ipm_tolerance(params.gap_rel)
        highs.set_options(h, run_crossover="off", ipm_optimality_tolerance=tol, optimality_tolerance=tol)
    h.addVars(n * k, np.zeros(n * k), np.full(n * k, highs.INF))
    highs.change_costs(h, np.arange(n * k), c)
    unit = sp.csr_matrix((np.ones(n * k), np.arange(n * k), np.arange(0, n * k + 1, k)), shape=(n, n * k))
    highs.add_rows(h, unit, np.ones(n), np.ones(n))
    first = initial_rows(rows, instance.distances, params.neighbours)
    _add(h, rows, np.repeat(first, k), np.tile(np.arange(k), first.size), n, k)
    return h, rows, c, scale


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: RowgenOptions
) -> RawSolution:
    """The "rowgen" entry of :data:`mdp_core.solve.METHODS` (module docstring)."""
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit
    n, k = instance.n_records, instance.n_outputs
    h, rows, c, scale = new_model(instance, options, params)
    limit = params.rows_per_round or max(20_000, n * k // 2)
    best_z, best_ub, lb = np.full((n, k), 1.0 / k), np.inf, -np.inf
    trace: list[dict] = []
    status = Status.ITERATION_LIMIT
    for it in range(1, params.max_rounds + 1):
        if deadline - time.perf_counter() <= 0:
            status = Status.TIME_LIMIT
            break
        highs.set_time_limit(h, deadline - time.perf_counter())
        if params.lp_solver == "ipm":
            highs.clear_solver(h)
        sol = highs.run_robust(
            h,
            RETRIES,
            want_duals=True,
            accept=ACCEPT,
            solver=params.lp_solver,
            deadline=deadline,
            what=f"rowgen round {it} LP ({rows.count} rows)",
        )
        if sol.x.size == 0:
            status = Status.TIME_LIMIT if sol.status in (Status.TIME_LIMIT, Status.INTERRUPTED) else sol.status
            break
        z = sol.x.reshape(n, k)
        lb = max(lb, scale * lower_bound(c, rows, sol.row_dual[n:], k))
        cz, _ = smooth_to_mdp(instance, np.maximum(z, 0.0))
        if (ub := objective(instance, cz)) < best_ub:
            best_z, best_ub = cz, ub
        closed = gap_closed(best_ub, lb, params.gap_abs, params.gap_rel)
        ei, ki = (np.zeros(0, np.int64),) * 2 if closed else violated(z, rows, params.min_deficit, limit)
        trace.append(
            dict(
                zip(
                    TRACE_COLUMNS,
                    (
                        it,
                        lb,
                        best_ub,
                        best_ub - lb,
                        rows.count,
                        int(ei.size),
                        round(sol.seconds, 3),
                        round(time.perf_counter() - t0, 3),
                    ),
                    strict=True,
                )
            )
        )
        line = control.Progress(
            "rowgen",
            f"round {it}",
            lower=lb,
            upper=best_ub,
            gap_abs=params.gap_abs,
            gap_rel=params.gap_rel,
            elapsed=time.perf_counter() - t0,
            time_limit=options.time_limit,
            detail=f"{rows.count} rows (+{ei.size}), LP {sol.seconds:.1f}s{' ' + sol.fallback if sol.fallback else ''}",
        )
        control.report(progress, line)
        if closed or ei.size == 0:  # no row left worth adding: the bound cannot improve by adding rows
            status = Status.OPTIMAL if closed else Status.FEASIBLE
            break
        _add(h, rows, ei, ki, n, k)
    extra = {
        "rows": rows.count,
        "full_rows": int(rows.active.size),
        "lower_bound": lb,
        "upper_bound": best_ub,
        "lp_solver": params.lp_solver,
    }
    return RawSolution(
        best_z, status, lb if np.isfinite(lb) else None, len(trace), extra, pd.DataFrame(trace, columns=TRACE_COLUMNS)
    )
