"""The exact PMO linear program (Qiu 2024, Eqs. 4-7) and a thin, checked HiGHS wrapper.

Variables: z = vec(Z) row-major, index(i, k) = i * K + k, 0 <= z.
Rows (built in one vectorised pass, no Python loop over edges or outputs):
  * privacy, for every edge (i, j) in both directions and every k:  z_ik - exp(eps d_ij) z_jk <= 0
    (2 * E * K rows, 2 non-zeros each), with eps d_ij capped at ``verify.MAX_LOG_RATIO`` = 30 (a
    tighter row, so still private; HiGHS rejects coefficients above 1e15);
  * unit measure, for every record i: sum_k z_ik = 1 (N rows, K non-zeros each).
Objective: sum_ik p_i c_ik z_ik, divided by max |p_i c_ik| before it reaches HiGHS so that the
default tolerances are relative to O(1) costs; reported objectives are always recomputed in the
original unit from the returned Z.

The mDP graph's connected components are independent problems (Property 3.1) and are solved one
after the other; isolated records take their cheapest output.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import highspy
import numpy as np
import scipy.sparse as sp

from mdp_core.errors import InputError, SolverError
from mdp_core.graph import components
from mdp_core.instance import Instance
from mdp_core.verify import MAX_LOG_RATIO

SOLVERS = ("simplex", "ipm")
_STATUS = {
    "kOptimal": "optimal",
    "kInfeasible": "infeasible",
    "kUnbounded": "unbounded",
    "kUnboundedOrInfeasible": "infeasible",
    "kTimeLimit": "time_limit",
    "kIterationLimit": "iteration_limit",
    "kObjectiveBound": "objective_bound",
    "kObjectiveTarget": "objective_target",
    "kInterrupt": "interrupted",
}


@dataclass(frozen=True)
class SolverOptions:
    """HiGHS settings used for every LP this library solves.

    ``solver``: "simplex" (dual simplex, default) or "ipm" (interior point with crossover).
    ``time_limit``: seconds for the whole solve (all components / all Benders iterations).
    ``threads``: HiGHS threads (0 = HiGHS default).
    Tolerances are HiGHS's primal / dual feasibility tolerances (costs are scaled to max 1). The dual
    default is 1e-10: at 1e-9 dual simplex stopped 2.0e-7 above the optimum on grid(10, 10, K=20)
    (dual bound 6.6e-7 below it); 1e-10 closed the gap to 2e-13 at no measurable cost (grid 15x20,
    K=60: 17.6 s vs 18.1 s).
    """

    solver: str = "simplex"
    threads: int = 0
    time_limit: float = float("inf")
    primal_tolerance: float = 1e-9
    dual_tolerance: float = 1e-10
    presolve: bool = True

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise InputError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.threads < 0:
            raise InputError(f"threads must be >= 0, got {self.threads}")
        if not self.time_limit > 0:
            raise InputError(f"time_limit must be > 0 seconds, got {self.time_limit}")
        for name in ("primal_tolerance", "dual_tolerance"):
            v = getattr(self, name)
            if not (0 < v < 1e-3):
                raise InputError(f"{name} must be in (0, 1e-3), got {v}")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["time_limit"] = None if np.isinf(self.time_limit) else self.time_limit
        return d


@dataclass
class LpModel:
    """min c^T x  s.t.  row_lower <= A x <= row_upper,  col_lower <= x <= col_upper."""

    c: np.ndarray
    a: sp.csc_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray


@dataclass
class LpSolution:
    status: str
    x: np.ndarray
    objective: float  # in the model's own (scaled) unit
    iterations: int
    seconds: float
    row_dual: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fallback: str | None = None  # set when a second algorithm produced this solution


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
    a = sp.csc_matrix(
        (np.r_[v1, np.ones(n * k)], (np.r_[r1, r2], np.r_[c1, c2])), shape=(n_priv + n, n * k)
    )
    return LpModel(
        c=weighted_costs.ravel().copy(),
        a=a,
        row_lower=np.r_[np.full(n_priv, -np.inf), np.ones(n)],
        row_upper=np.r_[np.zeros(n_priv), np.ones(n)],
        col_lower=np.zeros(n * k),
        col_upper=np.full(n * k, np.inf),
    )


_last_threads: list[int] = []


def new_highs(options: SolverOptions, time_limit: float | None = None) -> highspy.Highs:
    """A silent Highs object configured from ``options``.

    HiGHS keeps one global thread pool per process: changing ``threads`` after the first solve needs
    ``resetGlobalScheduler``; without it ``run()`` fails quietly (see ../shared/notes/stack.md).
    """
    if _last_threads and _last_threads[0] != options.threads:
        highspy.Highs.resetGlobalScheduler(True)
    _last_threads[:] = [options.threads]
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", "simplex" if options.solver == "simplex" else "ipm")
    if options.solver == "simplex":
        h.setOptionValue("simplex_strategy", 1)  # dual simplex
    else:
        h.setOptionValue("run_crossover", "on")
    if options.threads:
        h.setOptionValue("threads", int(options.threads))
    h.setOptionValue("primal_feasibility_tolerance", options.primal_tolerance)
    h.setOptionValue("dual_feasibility_tolerance", options.dual_tolerance)
    h.setOptionValue("presolve", "on" if options.presolve else "off")
    limit = options.time_limit if time_limit is None else time_limit
    if np.isfinite(limit):
        h.setOptionValue("time_limit", float(max(limit, 1e-3)))
    return h


def pass_model(h: highspy.Highs, model: LpModel) -> None:
    """Load ``model`` into ``h`` in one call (column-wise CSC)."""
    lp = highspy.HighsLp()
    lp.num_col_ = int(model.a.shape[1])
    lp.num_row_ = int(model.a.shape[0])
    lp.col_cost_ = np.asarray(model.c, dtype=np.float64)
    lp.col_lower_ = model.col_lower
    lp.col_upper_ = model.col_upper
    lp.row_lower_ = model.row_lower
    lp.row_upper_ = model.row_upper
    a = model.a.tocsc()
    a.sort_indices()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = lp.num_col_
    lp.a_matrix_.num_row_ = lp.num_row_
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(np.float64)
    status = h.passModel(lp)
    if status == highspy.HighsStatus.kError:
        raise SolverError("HiGHS rejected the model (passModel returned kError)")


def run(h: highspy.Highs, want_duals: bool = False) -> LpSolution:
    """Run HiGHS and map its model status to a library status ("optimal", "infeasible", ...)."""
    t0 = time.perf_counter()
    run_status = h.run()
    seconds = time.perf_counter() - t0
    model_status = h.getModelStatus()
    name = h.modelStatusToString(model_status)
    key = str(model_status).split(".")[-1]
    status = _STATUS.get(key, "error")
    if run_status == highspy.HighsStatus.kError and status == "optimal":
        status = "error"
    info = h.getInfo()
    iterations = int(info.simplex_iteration_count) + max(int(info.ipm_iteration_count), 0)
    x = np.zeros(0)
    duals = np.zeros(0)
    objective = float("nan")
    if status in ("optimal", "time_limit", "iteration_limit") and info.primal_solution_status == 2:
        sol = h.getSolution()
        x = np.asarray(sol.col_value, dtype=np.float64)
        if want_duals:
            duals = np.asarray(sol.row_dual, dtype=np.float64)
        objective = float(info.objective_function_value)
    if status == "error":
        status = f"error: {name}"
    return LpSolution(status, x, objective, iterations, seconds, duals)


def solve_model(
    model: LpModel, options: SolverOptions, time_limit: float | None = None, want_duals: bool = False
) -> LpSolution:
    """Solve ``model``; if the chosen algorithm breaks down numerically, retry once with the other one.

    Dual simplex can lose numerical control on mDP LPs whose ratio chains span many orders of magnitude
    (e.g. the 20 x 25 grid at eps = 2 / km: exp(eps * diameter) ~ e^40): primal infeasibilities blow up
    to 1e12 and HiGHS stops with model status "Not Set". Interior point (with crossover) solves those.
    A breakdown of IPM is retried with dual simplex. ``LpSolution.status`` is then the retry's status
    and ``fallback`` names the algorithm that produced the answer.
    """
    t0 = time.perf_counter()
    h = new_highs(options, time_limit)
    pass_model(h, model)
    sol = run(h, want_duals)
    if not sol.status.startswith("error"):
        return sol
    other = SolverOptions(**(options.as_dict() | {"solver": "ipm" if options.solver == "simplex" else "simplex",
                                                  "time_limit": options.time_limit}))
    limit = options.time_limit if time_limit is None else time_limit
    remaining = limit - (time.perf_counter() - t0)
    if remaining <= 0:
        return sol
    h = new_highs(other, remaining)
    pass_model(h, model)
    retry = run(h, want_duals)
    retry.seconds += sol.seconds
    retry.iterations += sol.iterations
    retry.fallback = f"{other.solver} after {options.solver} failed ({sol.status})"
    return retry


def gap_closed(upper: float, lower: float, gap_abs: float, gap_rel: float) -> bool:
    """The stopping rule shared by the decomposition methods: a finite UB with UB - LB <= gap_abs or
    <= gap_rel * |UB| (bounds in one cost unit)."""
    gap = upper - lower
    return bool(np.isfinite(upper) and (gap <= gap_abs or gap <= gap_rel * abs(upper)))


def lagrangian_bound(model: LpModel, n_priv: int, row_dual: np.ndarray) -> float:
    """A proven lower bound on a PMO model's optimum from any privacy-row duals (model's own unit).

    With lambda = max(-y, 0) >= 0 (HiGHS's duals y of the "<= 0" rows are <= 0), every feasible z has
    c^T z >= c^T z + lambda^T A_priv z = r^T z >= sum_i min_k r_ik, r = c + A_priv^T lambda, because
    A_priv z <= 0 and each z_i is a distribution. Valid whatever the solver's tolerances were; tight
    when y is the optimal dual. Rows whose ratio was capped at exp(MAX_LOG_RATIO) are tighter than
    the exact rows, so they get lambda = 0: the bound then holds for the exact (uncapped) LP.
    """
    n_unit = model.a.shape[0] - n_priv
    priv = model.a[:n_priv].tocsr()
    lam = np.maximum(-np.asarray(row_dual[:n_priv], dtype=np.float64), 0.0)
    capped = priv.min(axis=1).toarray().ravel() <= -np.exp(MAX_LOG_RATIO) * (1 - 1e-12)
    lam[capped] = 0.0
    r = model.c + priv.T @ lam
    return float(r.reshape(n_unit, -1).min(axis=1).sum())


@dataclass
class LpResult:
    """Output of :func:`solve_lp`: the raw (unrepaired) solver matrix and what HiGHS reported."""

    z: np.ndarray  # (N, K) as returned by HiGHS (may violate constraints by ~tolerance)
    status: str  # "optimal" or the first non-optimal component status
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
    count, labels = components(n, instance.edges)
    z = np.zeros((n, k))
    status, iterations, lower = "optimal", 0, 0.0
    fallbacks: list[str] = []
    sizes = np.bincount(labels, minlength=count)
    edge_comp = labels[instance.edges[:, 0]] if instance.n_edges else np.zeros(0, np.int64)
    order = np.argsort(labels, kind="stable")
    bounds = np.r_[0, np.cumsum(sizes)]
    e_order = np.argsort(edge_comp, kind="stable")
    e_bounds = np.r_[0, np.cumsum(np.bincount(edge_comp, minlength=count))]
    local = np.empty(n, dtype=np.int64)
    for c in range(count):
        members = order[bounds[c] : bounds[c + 1]]
        if members.shape[0] == 1:
            z[members[0], np.argmin(instance.costs[members[0]])] = 1.0
            lower += float(np.min(weighted[members[0]]))
            continue
        local[members] = np.arange(members.shape[0])
        eidx = e_order[e_bounds[c] : e_bounds[c + 1]]
        w = weighted[members]
        scale = float(np.max(np.abs(w))) or 1.0
        model = build_pmo(w / scale, local[instance.edges[eidx]], instance.distances[eidx], instance.epsilon)
        remaining = options.time_limit - (time.perf_counter() - t0)
        if remaining <= 0:
            raise SolverError(f"time limit of {options.time_limit:g} s reached before component {c + 1}/{count}")
        sol = solve_model(model, options, remaining, want_duals=True)
        iterations += sol.iterations
        if progress:
            progress(
                f"component {c + 1}/{count}: {members.shape[0]} records, {model.a.shape[0]} rows, "
                f"{sol.status} in {sol.seconds:.2f}s"
            )
        if sol.fallback:
            fallbacks.append(f"component {c + 1}: {sol.fallback}")
        if sol.x.shape[0] == 0:
            raise SolverError(f"HiGHS returned no solution for component {c + 1}/{count} (status {sol.status})")
        if sol.status != "optimal":
            status = sol.status
        z[members] = sol.x.reshape(members.shape[0], k)
        n_priv = 2 * eidx.shape[0] * k
        lower += scale * lagrangian_bound(model, n_priv, sol.row_dual) if sol.row_dual.size else -np.inf
    objective = float(np.sum(weighted * z))
    return LpResult(
        z, status, objective, iterations, time.perf_counter() - t0, count, int(sizes.max()), float(lower), fallbacks
    )
