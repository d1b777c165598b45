"""Column generation (Dantzig-Wolfe by output) for the PMO LP, with bounds.

Privacy contract
    input:      the mDP graph (neighbour pairs d_ij <= eta, both directions), eps per distance unit.
    guarantee:  eps-mDP per distance unit on every neighbour pair and output.
    holds by:   the certify gate: every generated column is exactly in the privacy cone
                (:func:`close`), so the assembled mechanism is feasible up to the master's row
                tolerance; :func:`mdp_core.verify.certify` repairs and re-checks it before release.
                "optimal" is claimed only with the valid Lagrangian bound below.
    reference:  Qiu 2024 (the PMO LP, Eqs. 4-7); Dantzig-Wolfe decomposition by output column.

The PMO LP (see :mod:`mdp_core.lp`) is, with z_k the k-th column of Z (shape (N,)) and
c_k = (p_i c_ik)_i,

    min sum_k c_k . z_k   s.t.  z_k in C for every k,   sum_k z_k = 1 (N rows),

where C = {x >= 0 : x_a <= g_ab x_b for every edge (a, b), both directions} is one cone shared by
all outputs, g_ab = exp(min(eps d_ab, MAX_LOG_RATIO)) (the same cap as :mod:`lp`).

Restricted master (one HiGHS model per connected component, kept alive, columns appended with
``addCols``, primal simplex warm start, or interior point with ``master_solver="ipm"``, faster on
smooth small-eps columns, see bench/README.md): variables lambda_kj >= 0 for generated columns v_kj in C,
each tied to one output k,

    min sum_kj (c_k . v_kj) lambda_kj   s.t.  sum_kj lambda_kj v_kj = 1  (n rows).

Its solution gives z_k = sum_j lambda_kj v_kj; a sum of cone members is in C, so the assembled Z
is feasible up to the master's row tolerance (every v_kj is exactly in C, see :func:`close`).

Pricing for output k with master duals u (n,): m_k = min (c_k - u) . x  s.t.  x in C, 1 . x = 1
(n variables, 2E' + 1 rows). One HiGHS model per output, kept alive; only its cost vector changes
between iterations, so each re-solve warm-starts from its previous basis (dual simplex: its duals
are far more accurate for the bound below than primal simplex's). Rows of edges implied by a path
through another record (:func:`implied_edges`, e.g. the 2 km edges of the grid) are left out: the
cone is unchanged, and leaving a row out could only relax pricing. The column x* is made exactly
conic by :func:`close` and enters when its reduced cost per unit mass is below -``tol``.

Bounds. UB = cost of the assembled Z. Two lower bounds, both per component:

* the pricing bound (the brief's; trace column ``pricing_bound``): for any feasible Z write
  s_k = 1 . z_k >= 0, so sum_k s_k = n and z_k / s_k is feasible for pricing k when s_k > 0:

      sum_k c_k . z_k = 1 . u + sum_k (c_k - u) . z_k >= 1 . u + sum_k min(m_k, 0) s_k
                      >= 1 . u + n * min_k min(m_k, 0),

  valid for any u. But m_k is HiGHS's pricing optimum, and HiGHS applies its tolerances to the
  scaled model: a warm-started pricing LP was reported optimal at -2e-17 where a cold solve found
  -8e-7, so this bound overshot the LP optimum by 1e-6 (relative). It is reported, not trusted.
* the proven (Lagrangian) bound (``lower_bound``; drives the stopping rule), a tighter valid
  variant: for multipliers lam_k >= 0 of the privacy rows (A x <= 0) of pricing k, every
  feasible Z has c_k . z_k >= (c_k + A^T lam_k) . z_k, hence, rows of Z being distributions,

      sum_k c_k . z_k >= sum_i min_k (c_ik + (A^T lam_k)_i).

  With exact pricing duals, c_k + A^T lam_k >= u + mu_k 1 (pricing dual feasibility, mu_k the
  sum-row dual = m_k), so this is >= 1 . u + n min_k mu_k: never weaker than the pricing bound.
  lam_k = max(-y_k, 0) from pricing k's row duals y_k, 0 on capped rows (so the bound holds for
  the uncapped LP too, as :func:`mdp_core.lp.lagrangian_bound`). When the pricing bound says the
  gap is closed but this one does not, and at the end, y_k is recomputed in float64 from each
  pricer's basis (:func:`basis_duals`): HiGHS's duals are off by ~1e-14 on rows with e^20
  coefficients, which moves this bound by ~1e-5.

Stopping: a component stops when UB - LB <= gap_abs or <= gap_rel |UB| ("optimal"), or when no
column prices out even after re-solving every pricing LP from scratch (twice at most; status
"feasible": a feasible mechanism with a proven gap above the target), or at ``max_iterations`` /
the time limit. Dual smoothing (Wentges, ``smoothing``): pricing at
alpha * centre + (1 - alpha) * u with the centre the duals of the best pricing bound so far.

Seeds (the first master must be feasible and well-informed): for every output k the all-ones
column (1 in C; lambda = 1/K on each is the uniform mechanism, so the master is always feasible)
and, for every record s, v_s = exp(-eps D'(s, .)) for the ``seeds_per_record`` outputs that are
cheapest for s (D' = shortest-path distance with edge lengths capped at MAX_LOG_RATIO / eps; v_s
is in C by the triangle inequality D'(s, b) <= D'(s, a) + d'_ab). With only the all-ones columns
the method stalls (degenerate master; ../shared/notes/stack.md).

Tiny entries: every column is floored at ``FLOOR`` = 1e-13 times its maximum (max(x, f) keeps
log x eps-Lipschitz, so the column stays in C and no zero sits opposite a non-zero). HiGHS's
``small_matrix_value`` is lowered from 1e-9 to 1e-12, so the master drops only entries below
1e-12 (columns have maximum 1); Z is assembled in numpy from the full columns, so its row sums
differ from the master's by at most (number of positive lambdas) * 1e-12 * max lambda.

Costs are divided by max |p_i c_ik| per component before they reach HiGHS; bounds and objectives
are reported in the instance's cost unit. Connected components are independent (Property 3.1)
and iterate in lockstep, so every trace row bounds the whole instance; isolated records take
their cheapest output. Memory: an (n, n) path-distance matrix per component and one pricing
model per output.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mdp_core import highs
from mdp_core.errors import InputError, SolverError
from mdp_core.graph import Block, component_blocks, path_distances
from mdp_core.highs import DUAL_SIMPLEX, PRIMAL_SIMPLEX, SOLVERS, LpModel, LpSolution, SolverOptions
from mdp_core.instance import Instance
from mdp_core.lp import privacy_rows
from mdp_core.result import LIMITS, GapOptions, RawSolution, Status, gap_closed
from mdp_core.verify import MAX_LOG_RATIO

SOLVED = frozenset({Status.OPTIMAL, *LIMITS})
FLOOR = 1e-13  # smallest column entry relative to the column's maximum (see module docstring)
MASTER_STRATEGY = PRIMAL_SIMPLEX
PRICING_STRATEGY = DUAL_SIMPLEX
SMALL_MATRIX_VALUE = 1e-12  # HiGHS drops |a_ij| below this (default 1e-9 would drop real entries)


# --------------------------------------------------------------------------- cone helpers
def cone_rows(n: int, edges: np.ndarray, distances: np.ndarray, epsilon: float) -> tuple[sp.csr_matrix, np.ndarray]:
    """Privacy rows x_a - g_ab x_b <= 0 of the cone C for both edge directions, each divided by
    sqrt(g_ab) (coefficients e^{-+eps d / 2}: HiGHS's pricing LPs broke down, "unbounded", on raw rows
    at eps d >= 20; a positive multiple of a row defines the same cone and any multipliers of it
    still give a valid Lagrangian bound).

    Args:
        n: number of records (columns); edges (E, 2) local indices; distances (E,) in the instance unit.
    Returns:
        A (2E, n) CSR matrix, and a (2E,) bool mask of the rows whose ratio was capped at e^MAX_LOG_RATIO.
    """
    ids = np.arange(n, dtype=np.int64)
    r, c, v = privacy_rows(edges, distances, epsilon, 1, ids, ids)
    root = np.sqrt(np.exp(np.minimum(np.r_[distances, distances] * epsilon, MAX_LOG_RATIO)))
    a = sp.csr_matrix((v / root[r], (r, c)), shape=(2 * edges.shape[0], n))
    capped = np.r_[distances, distances] * epsilon > MAX_LOG_RATIO
    return a, capped


def capped_path_distances(n: int, edges: np.ndarray, distances: np.ndarray, epsilon: float) -> np.ndarray:
    """(n, n) shortest-path distances D' with edge lengths capped at MAX_LOG_RATIO / eps (one component)."""
    d = path_distances(n, edges, np.minimum(distances, MAX_LOG_RATIO / epsilon))
    if not np.all(np.isfinite(d)):
        raise InputError("capped_path_distances needs a connected graph (one component)")
    return d


def implied_edges(edges: np.ndarray, distances: np.ndarray, paths: np.ndarray, epsilon: float) -> np.ndarray:
    """(E,) bool: edge (a, b) whose rows are implied by a path through another record m.

    With d' = min(d_ab, MAX_LOG_RATIO / eps), the edge is implied when D'(a, m) + D'(m, b) <= d'_ab
    for some m not in {a, b} (then x_a <= e^{eps D'(a,m)} x_m <= e^{eps d'_ab} x_b already). Leaving
    such rows out of the pricing LP leaves its feasible set unchanged up to the 1e-9 relative slack
    used here; any slack only enlarges the set, i.e. relaxes pricing, so its bounds stay valid.
    """
    out = np.zeros(edges.shape[0], dtype=bool)
    dcap = np.minimum(distances, MAX_LOG_RATIO / epsilon)
    step = max(1, (1 << 22) // max(paths.shape[0], 1))
    for s in range(0, edges.shape[0], step):
        a, b = edges[s : s + step, 0], edges[s : s + step, 1]
        via = paths[a] + paths[b]  # (chunk, n): D'(a, m) + D'(m, b)
        rows = np.arange(a.shape[0])
        via[rows, a] = np.inf
        via[rows, b] = np.inf
        out[s : s + step] = via.min(axis=1) <= dcap[s : s + step] * (1 + 1e-9)
    return out


def close(x: np.ndarray, decay: np.ndarray) -> np.ndarray:
    """The smallest member of C above ``x`` (n,), floored, scaled to max 1.

    x'_i = max_j x_j exp(-eps D'(j, i)) is in C: x'_a = max_j x_j e^{-eps D'(j,a)}
    <= max_j x_j e^{-eps D'(j,b)} e^{eps d'_ab} = g_ab x'_b (triangle inequality), and x' >= x.
    Requires max(x) > 0.
    """
    x = np.maximum(x, 0.0)
    xc = (x[:, None] * decay).max(axis=0)
    xc /= xc.max()
    return np.maximum(xc, FLOOR)


def seed_columns(costs: np.ndarray, decay: np.ndarray, seeds_per_record: int) -> tuple[np.ndarray, np.ndarray]:
    """Initial master columns.

    Args:
        costs: (n, K) scaled costs p_i c_ik; decay: (n, n) exp(-eps D') (:func:`capped_path_distances`).
        seeds_per_record: v_s is given to this many of record s's cheapest outputs (0 = only all-ones).
    Returns:
        columns (n, m), owner (m,) output index of each column: the all-ones column for every k first.
    """
    n, k = costs.shape
    m = min(max(seeds_per_record, 0), k)
    cols = [np.ones((n, k))]
    owner = [np.arange(k)]
    if m:
        best = np.argsort(costs, axis=1, kind="stable")[:, :m]  # (n, m) outputs per seed record
        v = np.maximum(decay, FLOOR)  # row s = v_s, max 1 at s
        cols.append(np.repeat(v, m, axis=0).T)
        owner.append(best.ravel())
    return np.concatenate(cols, axis=1), np.concatenate(owner)


def lagrangian_terms(a: sp.csr_matrix, capped: np.ndarray, row_dual: np.ndarray) -> np.ndarray:
    """(n,) A^T lam with lam = max(-y, 0) on the privacy rows (0 on capped rows), y the row duals.

    For any lam >= 0 and x in C, lam . A x <= 0, so c . x >= (c + A^T lam) . x: the terms of the
    Lagrangian bound (module docstring).
    """
    lam = np.maximum(-np.asarray(row_dual[: a.shape[0]], dtype=np.float64), 0.0)
    lam[capped] = 0.0
    return np.asarray(a.T @ lam).ravel()


def basis_duals(h: Any, p: sp.csr_matrix, r: np.ndarray) -> np.ndarray | None:
    """Row duals y recomputed in float64 from HiGHS's final basis: P_N^T y_N = r_B, y_B = 0.

    ``p`` is the pricing LP's full row matrix ((m, n) CSR, the sum row last), ``r`` its costs (n,).
    HiGHS's own duals come from its scaled model and are off by ~1e-14 on rows with e^20
    coefficients, which costs 1e-5 in the bound; these are accurate to float64 round-off for the
    same basis. Returns None when the basis system is not square or singular.
    """
    cb, rb = highs.basic_masks(h, p.shape[1], p.shape[0])
    rn = ~rb
    if cb.sum() != rn.sum() or cb.sum() == 0:
        return None
    m = p[rn].T.tocsr()[cb].tocsc()
    try:
        yn = spla.spsolve(m, r[cb])
    except RuntimeError:
        return None
    if not np.all(np.isfinite(yn)):
        return None
    y = np.zeros(p.shape[0])
    y[rn] = yn
    return y


# --------------------------------------------------------------------------- one component
@dataclass
class _Component:
    """Column-generation state of one connected component (all arrays in local indices)."""

    members: np.ndarray  # (n,) global record ids
    c: np.ndarray  # (n, K) scaled costs
    scale: float  # max |p_i c_ik| of the component (original cost unit)
    weighted: np.ndarray  # (n, K) p_i c_ik in the original unit
    a: sp.csr_matrix  # (2E', n) cone rows kept in pricing
    capped: np.ndarray  # (2E',)
    p: sp.csr_matrix  # (2E' + 1, n) pricing rows: a, then the sum row
    decay: np.ndarray  # (n, n)
    master: Any  # highspy.Highs
    pricers: list[Any]
    cols: np.ndarray  # (n, m)
    owner: np.ndarray  # (m,)
    lam: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lower: float = -np.inf  # best proven (Lagrangian) bound (original unit): drives the stopping rule
    pricing_lb: float = -np.inf  # best pricing bound 1.u + n min_k min(m_k, 0) (original unit)
    upper: float = np.inf  # cost of the current assembled z (original unit)
    done: bool = False
    center: np.ndarray | None = None  # stability centre: the duals with the best pricing bound (scaled)
    center_lb: float = -np.inf  # its pricing bound (scaled)
    smooth: bool = True  # price at the smoothed point this iteration (off after a mis-pricing)
    cold_next: bool = False  # solve every pricing LP from scratch this iteration (see colgen)
    cold_checks: int = 0

    def z(self) -> np.ndarray:
        """(n, K) assembled mechanism rows sum_j lambda_kj v_kj."""
        k, m = self.c.shape[1], self.owner.shape[0]
        lam = np.r_[self.lam, np.zeros(m - self.lam.shape[0])]  # columns added after the last master solve
        s = sp.csr_matrix((lam, (np.arange(m), self.owner)), shape=(m, k))
        return np.asarray((s.T @ self.cols.T).T)

    def lagrangian(self, terms: np.ndarray) -> float:
        """sum_i min_k (c_ik + terms_ik) in the original unit (a valid bound for any lam >= 0)."""
        return self.scale * float(np.sum(np.min(self.c + terms, axis=1)))

    def polished_bound(self) -> float:
        """The Lagrangian bound from duals recomputed on every pricer's current basis (see basis_duals)."""
        n, k = self.c.shape
        terms = np.empty((n, k))
        for kk, h in enumerate(self.pricers):
            y = basis_duals(h, self.p, highs.costs(h))
            if y is None:
                y = highs.row_duals(h)
            terms[:, kk] = lagrangian_terms(self.a, self.capped, y)
        return self.lagrangian(terms)


def _configure(h: Any, strategy: int) -> None:
    highs.set_options(
        h, simplex_strategy=strategy, small_matrix_value=SMALL_MATRIX_VALUE, presolve="off"
    )  # presolve off: keep the basis between solves


def _new_component(
    instance: Instance, block: Block, weighted: np.ndarray, options: SolverOptions, params: ColgenOptions
) -> _Component:
    members, edges = block.members, block.local_edges
    n, k = members.shape[0], weighted.shape[1]
    dist = instance.distances[block.edge_ids]
    w = weighted[members]
    c, scale = highs.scale_costs(w)
    paths = capped_path_distances(n, edges, dist, instance.epsilon)
    decay = np.exp(-instance.epsilon * paths)  # row s = seed column v_s (before the floor)
    keep = ~implied_edges(edges, dist, paths, instance.epsilon)
    a, capped = cone_rows(n, edges[keep], dist[keep], instance.epsilon)
    cols, owner = seed_columns(c, decay, params.seeds_per_record)
    simplex = dataclasses.replace(options, solver="simplex")
    master = highs.new_highs(simplex)
    _configure(master, MASTER_STRATEGY)
    if params.master_solver == "ipm":  # no warm start, but far faster on smooth (small-eps) columns
        highs.set_options(master, solver="ipm", run_crossover="on")
    highs.pass_model(
        master,
        LpModel(
            c=(c[:, owner] * cols).sum(0),
            a=sp.csc_matrix(cols),
            row_lower=np.ones(n),
            row_upper=np.ones(n),
            col_lower=np.zeros(cols.shape[1]),
            col_upper=np.full(cols.shape[1], np.inf),
        ),
    )
    n_priv = a.shape[0]
    p = sp.vstack([a, sp.csr_matrix(np.ones((1, n)))]).tocsr()
    model = LpModel(
        c=np.zeros(n),
        a=p.tocsc(),
        row_lower=np.r_[np.full(n_priv, -np.inf), 1.0],
        row_upper=np.r_[np.zeros(n_priv), 1.0],
        col_lower=np.zeros(n),
        col_upper=np.full(n, np.inf),
    )
    pricers = []
    for _ in range(k):
        h = highs.new_highs(simplex)
        _configure(h, PRICING_STRATEGY)
        highs.pass_model(h, model)
        pricers.append(h)
    return _Component(members, c, scale, w, a, capped, p, decay, master, pricers, cols, owner)


def _run_robust(h: Any, strategy: int) -> LpSolution:
    """Solve with simplex ``strategy`` from the current basis; on a HiGHS error the other strategy,
    then both from scratch (:func:`mdp_core.highs.strategy_ladder`)."""
    # master and pricing LPs are feasible and bounded: any other status is a breakdown to retry
    return highs.run_robust(h, highs.strategy_ladder(strategy) + highs.COLD_NO_PRESOLVE, want_duals=True, accept=SOLVED)


@dataclass
class _Step:
    """What one iteration of one component did."""

    added: int = 0
    master_s: float = 0.0
    pricing_s: float = 0.0
    status: Status = Status.OPTIMAL  # OPTIMAL = the iteration completed (a limit otherwise)
    mispriced: bool = False  # a smoothed pricing round found no improving column


def _iterate(comp: _Component, deadline: float, tol: float, alpha: float, gap_rel: float) -> _Step:
    """One master solve + K pricing solves; updates the bounds and adds the improving columns.

    A column enters when its reduced cost per unit mass is below -max(tol, gap_rel |master| / (100 n))
    (scaled costs): a column worth less could not move the bound n min_k m_k by 1 % of the target
    gap. Without this, grid 20 x 25 (eps 10) added 100 columns of reduced cost ~-1e-12 per iteration
    for 190 iterations without moving either bound.
    """
    t0 = time.perf_counter()
    if deadline - t0 <= 0:
        return _Step(status=Status.TIME_LIMIT)
    highs.set_time_limit(comp.master, deadline - t0)
    sol = _run_robust(comp.master, MASTER_STRATEGY)
    step = _Step(master_s=time.perf_counter() - t0)
    if sol.x.shape[0]:
        comp.lam = np.maximum(sol.x, 0.0)
        comp.upper = float(np.sum(comp.weighted * comp.z()))
    if sol.status != Status.OPTIMAL or sol.x.shape[0] == 0:
        if sol.status in LIMITS:
            step.status = sol.status
            return step
        raise SolverError(f"colgen master: HiGHS status {sol.describe()}")
    u_master = np.asarray(sol.row_dual, dtype=np.float64)
    center = comp.center
    smoothed = comp.smooth and not comp.cold_next and center is not None and alpha > 0
    u = alpha * center + (1 - alpha) * u_master if smoothed and center is not None else u_master
    threshold = max(tol, gap_rel * abs(sol.objective) / (100 * comp.c.shape[0]))
    t1 = time.perf_counter()
    new_cols, new_owner = _price(comp, u, u_master, threshold, deadline, step)
    step.pricing_s = time.perf_counter() - t1
    comp.cold_next = False
    # a smoothed point that yields no improving column is a mis-pricing: price at the master's duals next
    step.mispriced = smoothed and not new_cols and step.status == Status.OPTIMAL
    comp.smooth = not step.mispriced
    if step.mispriced:
        return step
    if new_cols:
        v = np.column_stack(new_cols)
        highs.add_cols(comp.master, (comp.c[:, new_owner] * v).sum(0), sp.csc_matrix(v))
        comp.cols = np.concatenate([comp.cols, v], axis=1)
        comp.owner = np.r_[comp.owner, np.asarray(new_owner, dtype=np.int64)]
    step.added = len(new_cols)
    return step


def _price(
    comp: _Component, u: np.ndarray, u_master: np.ndarray, threshold: float, deadline: float, step: _Step
) -> tuple[list[np.ndarray], list[int]]:
    """Solve the K pricing LPs at duals ``u``; update the component's bounds when all K finished.
    Returns the improving columns (closed, :func:`close`) and their outputs; a limit goes to ``step``."""
    n, k = comp.c.shape
    new_cols: list[np.ndarray] = []
    new_owner: list[int] = []
    m_k: list[float] = []
    terms = np.zeros((n, k))
    idx = np.arange(n)
    for kk, h in enumerate(comp.pricers):
        highs.change_costs(h, idx, comp.c[:, kk] - u)
        if comp.cold_next:
            highs.clear_solver(h)
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            step.status = Status.TIME_LIMIT
            break
        highs.set_time_limit(h, remaining)
        ps = _run_robust(h, PRICING_STRATEGY)
        if ps.status != Status.OPTIMAL:
            if ps.status in LIMITS:
                step.status = ps.status
                break
            raise SolverError(f"colgen pricing (output {kk}): HiGHS status {ps.describe()}")
        m_k.append(ps.objective)
        if ps.row_dual.size:  # else lam = 0, still valid
            terms[:, kk] = lagrangian_terms(comp.a, comp.capped, ps.row_dual)
        if ps.x.size and ps.x.max() > 0:
            x = close(ps.x, comp.decay)
            if (comp.c[:, kk] - u_master) @ x / x.sum() < -threshold:  # improves the master
                new_cols.append(x)
                new_owner.append(kk)
    if len(m_k) == k:
        lb = float(u.sum() + n * min(min(m_k), 0.0))  # valid for any u, smoothed or not
        if lb > comp.center_lb:
            comp.center, comp.center_lb = u.copy(), lb
        comp.pricing_lb = max(comp.pricing_lb, comp.scale * lb)
        comp.lower = max(comp.lower, comp.lagrangian(terms))
    return new_cols, new_owner


# --------------------------------------------------------------------------- the method
TRACE_COLUMNS = [
    "iteration",
    "lower_bound",
    "pricing_bound",
    "upper_bound",
    "gap",
    "columns_added",
    "master_seconds",
    "pricing_seconds",
]


@dataclass(frozen=True)
class ColgenOptions(GapOptions):
    """Options of the "colgen" method (module docstring); a component stops when its gap is closed.
    Constraints are declared in the metadata (:func:`mdp_core.options.validate`)."""

    max_iterations: int = field(
        default=200, metadata={"help": "master solves at most (per component)", "integer": True, "ge": 1}
    )
    seeds_per_record: int = field(
        default=3,
        metadata={"help": "cheapest outputs of each record given its seed column", "integer": True, "ge": 0},
    )
    tol: float = field(
        default=1e-12,
        metadata={
            "help": "a column enters when its reduced cost per unit mass is below -max(tol, gap_rel |master| / (100 n))",
            "ge": 0,
        },
    )
    smoothing: float = field(
        default=0.5,
        metadata={
            "help": "Wentges dual smoothing weight in [0, 1): price at alpha * centre + (1 - alpha) * u (0 = off)",
            "ge": 0,
            "lt": 1,
        },
    )
    master_solver: str = field(
        default="simplex",
        metadata={
            "help": "master LP: primal simplex, warm-started (default), or ipm + crossover, cold",
            "choices": SOLVERS,
        },
    )


@dataclass
class ColgenResult:
    """Output of :func:`colgen` (bounds and objectives in the instance's cost unit)."""

    z: np.ndarray  # (N, K) raw assembled mechanism (feasible up to the master's row tolerance)
    status: Status  # optimal (proven gap closed), feasible (no improving column, gap open),
    #                 iteration_limit or time_limit (z is still a feasible mechanism)
    lower_bound: float  # proven (Lagrangian) bound, valid whatever the solver tolerances (module docstring)
    pricing_bound: float  # 1.u + n min_k min(m_k, 0) per component, m_k = HiGHS's pricing optima
    upper_bound: float  # cost of z
    iterations: int
    seconds: float
    trace: pd.DataFrame  # TRACE_COLUMNS, one row per iteration
    extra: dict[str, Any]


@dataclass
class _Run:
    """Column generation over all components: the isolated records' fixed part and the live components."""

    z: np.ndarray  # (N, K)
    fixed: float = 0.0  # exact cost of isolated records
    comps: list[_Component] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the trace

    def bounds(self) -> tuple[float, float, float]:
        """(proven lower bound, pricing bound, upper bound) of the whole instance."""
        return (
            self.fixed + sum(c.lower for c in self.comps),
            self.fixed + sum(c.pricing_lb for c in self.comps),
            self.fixed + sum(c.upper for c in self.comps),
        )


def colgen(
    instance: Instance,
    options: SolverOptions | None = None,
    progress: Callable[[str], None] | None = None,
    params: ColgenOptions | None = None,
    **kwargs: Any,
) -> ColgenResult:
    """Solve the PMO by column generation (module docstring), components in lockstep.

    Args:
        options: HiGHS settings; ``time_limit`` bounds the whole run (``solver`` is ignored: the
            master and pricing LPs are always solved by simplex, to warm-start).
        progress: called once per iteration with a one-line summary.
        params: :class:`ColgenOptions`, or its fields as keyword arguments (``gap_rel=1e-4``).
    """
    params = params or ColgenOptions(**kwargs)
    options = options or SolverOptions()
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit
    weighted = instance.prior[:, None] * instance.costs
    count, sizes, blocks = component_blocks(instance.n_records, instance.edges)
    run = _Run(np.zeros((instance.n_records, instance.n_outputs)))
    for block in blocks:
        if block.members.shape[0] == 1:
            i = block.members[0]
            run.z[i, np.argmin(instance.costs[i])] = 1.0
            run.fixed += float(np.min(weighted[i]))
        else:
            run.comps.append(_new_component(instance, block, weighted, options, params))
    setup_s = time.perf_counter() - t0
    status, it = Status.OPTIMAL, 0
    while any(not c.done for c in run.comps):
        if it >= params.max_iterations:
            status = Status.ITERATION_LIMIT
            break
        it += 1
        status = _round(run, it, deadline, params, progress)
        if status != Status.OPTIMAL:
            break
    polish_s = time.perf_counter()
    for comp in run.comps:
        run.z[comp.members] = comp.z()
        if np.isfinite(comp.pricing_lb):  # every pricer has a basis: recompute its duals exactly once
            comp.lower = max(comp.lower, comp.polished_bound())
    polish_s = time.perf_counter() - polish_s
    lower, pricing, _ = run.bounds()
    upper = float(np.sum(weighted * run.z))
    if status == Status.OPTIMAL and not all(
        gap_closed(c.upper, c.lower, params.gap_abs, params.gap_rel) for c in run.comps
    ):
        status = Status.FEASIBLE
    extra = {
        "n_components": int(count),
        "largest_component": int(sizes.max()),
        "columns": int(sum(c.cols.shape[1] for c in run.comps)),
        "pricing_rows": int(sum(c.a.shape[0] for c in run.comps)),
        "seeds_per_record": params.seeds_per_record,
        "setup_seconds": round(setup_s, 3),
        "polish_seconds": round(polish_s, 3),
        "lower_bound": lower,
        "lower_bound_pricing": pricing,
        "upper_bound": upper,
    }
    trace = pd.DataFrame(run.rows, columns=TRACE_COLUMNS)
    return ColgenResult(run.z, status, lower, pricing, upper, it, time.perf_counter() - t0, trace, extra)


def _round(
    run: _Run, it: int, deadline: float, params: ColgenOptions, progress: Callable[[str], None] | None
) -> Status:
    """Iteration ``it`` for every unfinished component; appends a trace row. Returns OPTIMAL to go on."""
    gap_abs, gap_rel = params.gap_abs, params.gap_rel
    status, added, ms, ps = Status.OPTIMAL, 0, 0.0, 0.0
    for comp in (c for c in run.comps if not c.done):
        step = _iterate(comp, deadline, params.tol, params.smoothing, gap_rel)
        added, ms, ps = added + step.added, ms + step.master_s, ps + step.pricing_s
        if step.status != Status.OPTIMAL:
            status = step.status
        complete = step.status == Status.OPTIMAL and not step.mispriced
        closed = gap_closed(comp.upper, comp.lower, gap_abs, gap_rel)
        pricing_closed = gap_closed(comp.upper, comp.pricing_lb, gap_abs, gap_rel)
        if not closed and complete and step.added == 0 and pricing_closed:
            comp.lower = max(comp.lower, comp.polished_bound())  # exact duals of the current bases
            closed = gap_closed(comp.upper, comp.lower, gap_abs, gap_rel)
        if closed:
            comp.done = True
        elif step.added == 0 and complete:
            # No column prices out. A warm-started HiGHS solve can call a basis optimal that is
            # 1e-6 off (its tolerances are applied to the scaled model), so before giving up
            # re-solve every pricing LP from scratch (at most twice per component).
            if comp.cold_checks < 2:
                comp.cold_next, comp.cold_checks = True, comp.cold_checks + 1
            else:
                comp.done = True
    lower, pricing, upper = run.bounds()
    run.rows.append(
        {
            "iteration": it,
            "lower_bound": lower,
            "pricing_bound": pricing,
            "upper_bound": upper,
            "gap": upper - lower,
            "columns_added": added,
            "master_seconds": ms,
            "pricing_seconds": ps,
        }
    )
    if progress:
        progress(f"colgen iteration {it}: LB {lower:.10g} UB {upper:.10g} gap {upper - lower:.3g}, +{added} columns")
    return status


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: ColgenOptions
) -> RawSolution:
    """The "colgen" entry of :data:`mdp_core.solve.METHODS`.

    ``lower_bound`` is the proven (Lagrangian) bound that also drives the stopping rule; the
    pricing bound is in ``extra["lower_bound_pricing"]`` and the trace.
    """
    res = colgen(instance, options, progress, params)
    lower = res.lower_bound if np.isfinite(res.lower_bound) else None
    extra = res.extra | {"seconds": round(res.seconds, 3)}
    return RawSolution(res.z, res.status, lower, res.iterations, extra, res.trace)
