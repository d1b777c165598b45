"""Column generation (Dantzig-Wolfe by output) for the PMO LP, with bounds.

Privacy contract
    input:      the mDP graph (neighbour pairs d_ij <= eta, both directions), eps per distance unit.
    guarantee:  eps-mDP per distance unit on every neighbour pair and output.
    holds by:   the certify gate: every generated column is exactly in the privacy cone
                (:func:`close`), so the assembled mechanism is feasible up to the master's row
                tolerance; :func:`mdp_core.solvers.verify.certify` repairs and re-checks it before release.
                "optimal" is claimed only with the valid Lagrangian bound below.
    reference:  Qiu 2024 (the PMO LP, Eqs. 4-7); Dantzig-Wolfe decomposition by output column.

The PMO LP (see :mod:`mdp_core.solvers.lp`) is, with z_k the k-th column of Z (shape (N,)) and
c_k = (p_i c_ik)_i,

    min sum_k c_k . z_k   s.t.  z_k in C for every k,   sum_k z_k = 1 (N rows),

where C = {x >= 0 : x_a <= g_ab x_b for every edge (a, b), both directions} is one cone shared by
all outputs, g_ab = exp(min(eps d_ab, MAX_LOG_RATIO)) (the same cap as :mod:`lp`).

Restricted master (one HiGHS model per connected component, kept alive, columns appended with
``addCols``, primal simplex warm start, or interior point with ``master_solver="ipm"``, faster on
smooth small-eps columns, see bench/HISTORY.md): variables lambda_kj >= 0 for generated columns v_kj in C,
each tied to one output k,

    min sum_kj (c_k . v_kj) lambda_kj   s.t.  sum_kj lambda_kj v_kj = 1  (n rows).

Its solution gives z_k = sum_j lambda_kj v_kj; a sum of cone members is in C, so the assembled Z
is feasible up to the master's row tolerance (every v_kj is exactly in C, see :func:`close`).
Columns are dense (a member of C is positive on its whole component), so the master's size is
n x (columns): a generated column nonbasic at lambda = 0 in :data:`PURGE_AFTER` master solves in a row
is deleted (:meth:`_Component.purge`; the all-ones columns stay, so the master stays feasible; basic
columns stay, so a degenerate master keeps its duals).

Pricing for output k with master duals u (n,): m_k = min (c_k - u) . x  s.t.  x in C, 1 . x = 1
(n variables, up to 2E' + 1 rows). Rows of edges implied by a path through another record
(:func:`implied_edges`, e.g. the 2 km edges of the grid) are left out: the cone is unchanged, and
leaving a row out could only relax pricing. Of the rest each pricing model holds only rows its
solutions violated (lazily generated, at most n of the most violated per re-solve,
:class:`PricingWorker`; bench/HISTORY.md). The column x* is made exactly conic by :func:`close` and
enters when its reduced cost per unit mass is below -``tol``.

The K pricing LPs of every component run through :mod:`mdp_core.runtime.executor`, one stateful
:class:`PricingWorker` per (component, output), built from a :class:`PricingSpec` (the component's
cone pairs and rows and decay matrix, shared by its K specs, and the output's cost column). Each
worker keeps its HiGHS model alive; only its cost vector and held rows change, so each re-solve
warm-starts from its previous basis (dual simplex: its duals are far more accurate for the bound below
than primal simplex's). Each round solves every unfinished component's master, then sends all their
pricing requests in one ``solve`` call (duals u, master duals, entry threshold, wall-clock deadline,
cold flag); a worker answers with m_k, its Lagrangian terms A^T lam_k and its closed column when it
improves the master (:class:`PriceResult`), and to :data:`POLISH` with the terms from exact basis
duals. Results are assembled in output order and every worker is deterministic, so z, the bounds and
the trace's objective columns are bit-identical on every backend and process count.
``executor="auto"`` keeps everything in this process (serial, one output after another) unless the
pricing work, K x the nonzeros of the pricing rows summed over components, reaches
``PROCESS_MIN_WORK`` (and there are 2 CPUs and 2 workers): below it, worker processes cost their start-up and
speed nothing up (bench/HISTORY.md).
``executor="process"`` (persistent worker processes, single-threaded HiGHS) or ``"dask"``
(``scheduler``: a cluster address) choose explicitly.

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
  lam_k = max(-y_k, 0) from pricing k's row duals y_k; capped rows and the left-out implied rows
  are handled by :func:`mdp_core.solvers.privacy_rows.lagrangian_bound` (its docstring proves the rule), so
  the bound holds for the uncapped LP too. When the pricing bound says the
  gap is closed but this one does not, and at the end, y_k is recomputed in float64 from each
  pricing worker's basis (:func:`basis_duals`, request :data:`POLISH`): HiGHS's duals are off by
  ~1e-14 on rows with e^20 coefficients, which moves this bound by ~1e-5.

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
the method stalls (a degenerate master).

Tiny entries: every column is floored at ``FLOOR`` = 1e-13 times its maximum (max(x, f) keeps
log x eps-Lipschitz, so the column stays in C and no zero sits opposite a non-zero). HiGHS's
``small_matrix_value`` is lowered from 1e-9 to 1e-12, so the master drops only entries below
1e-12 (columns have maximum 1); Z is assembled in numpy from the full columns, so its row sums
differ from the master's by at most (number of positive lambdas) * 1e-12 * max lambda.

Costs are divided by max |p_i c_ik| per component before they reach HiGHS; bounds and objectives
are reported in the instance's cost unit. Connected components are independent (Property 3.1)
and iterate in lockstep, so every trace row bounds the whole instance; isolated records take
their cheapest output. Memory: an (n, n) path-distance (decay) matrix per component, its cone pairs
(25 bytes per directed pair), and one pricing model per output holding only its generated rows; with
worker processes (or Dask workers) every process holding an output of a component also holds a copy of
that component's decay matrix and pairs. The master, in the
calling process, is n x (columns) and dense: on dense instances it is what limits the size (bench/HISTORY.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mdp_core.declarations import tables
from mdp_core.declarations.methods import ColgenOptions
from mdp_core.declarations.solver_options import Executor, SolverOptions
from mdp_core.errors import InputError, SolverError
from mdp_core.problem.graph import Block, component_blocks, path_distances
from mdp_core.problem.instance import Instance
from mdp_core.runtime import control
from mdp_core.runtime import executor as executor_mod
from mdp_core.solvers import highs
from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.highs import DUAL_SIMPLEX, PRIMAL_SIMPLEX, LpModel, LpSolution
from mdp_core.solvers.result import LIMITS, RawSolution, Status, gap_closed
from mdp_core.solvers.verify import MAX_LOG_RATIO

SOLVED = frozenset({Status.OPTIMAL, *LIMITS})
FLOOR = 1e-13  # smallest column entry relative to the column's maximum (see module docstring)
MASTER_STRATEGY = PRIMAL_SIMPLEX
PRICING_STRATEGY = DUAL_SIMPLEX
SMALL_MATRIX_VALUE = 1e-12  # HiGHS drops |a_ij| below this (default 1e-9 would drop real entries)
PURGE_AFTER = 5  # master solves at lambda = 0 before a generated column is deleted
ROWS_PER_SOLVE = 1.0  # rows added per pricing re-solve, at most, times n (the most violated first)
VIOLATION = 1e-9  # a pricing solution violates a pair's row when x_a / g - x_b > this times max(x)
PROCESS_MIN_WORK = 5_000_000  # K x pricing rows' nonzeros (all components) before "auto" uses processes


# --------------------------------------------------------------------------- cone helpers
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


# --------------------------------------------------------------------------- pricing workers
@dataclass
class Cone:
    """The pricing rows of one component, shared by its K :class:`PricingSpec` (pickle keeps one copy
    of an object that several specs of a worker group reference)."""

    pairs: pr.Pairs  # (2E',) directed pairs kept in pricing (implied edges left out), local record ids
    decay: np.ndarray  # (n, n) exp(-eps D') (:func:`close`)

    @property
    def n(self) -> int:
        return int(self.decay.shape[0])

    def rows(self, which: np.ndarray) -> sp.csr_matrix:
        """(len(which), n) balanced cone rows of the pairs ``which``."""
        return pr.rows(self.pairs, which, np.zeros_like(which), np.arange(self.n, dtype=np.int64), self.n)


@dataclass
class PricingSpec:
    """What the pricing worker of output ``output`` of one component needs (picklable, scaled costs)."""

    cone: Cone
    cost: np.ndarray  # (n,) c_k
    output: int


@dataclass
class PriceRequest:
    """One pricing solve: duals ``u`` to price at (smoothed or not), the master's duals ``u_master``
    (a column enters when its reduced cost per unit mass there is below -``threshold``), an absolute
    wall-clock ``deadline`` (``time.time()``), and ``cold``: forget the basis first."""

    u: np.ndarray
    u_master: np.ndarray
    threshold: float
    deadline: float
    cold: bool = False


POLISH = "polish"  # request: the Lagrangian terms from exact duals of the worker's current basis


@dataclass
class PriceResult:
    """One pricing solve (scaled costs). ``objective`` = m_k (nan at a limit); ``terms`` = A^T lam_k
    (None when HiGHS gave no duals: lam = 0, still valid); ``column``: the closed x* when it improves
    the master, else None."""

    status: Status  # OPTIMAL or a limit
    objective: float
    terms: pr.Terms | None
    column: np.ndarray | None
    seconds: float


class PricingWorker:
    """The executor's worker (:mod:`mdp_core.runtime.executor`) for one output of one component: a live HiGHS
    pricing model over lazily generated cone rows, warm-started between requests (only its cost vector
    changes, and rows are appended). Requests: a :class:`PriceRequest` -> :class:`PriceResult`;
    :data:`POLISH` -> (n,) Lagrangian terms (:class:`~mdp_core.solvers.privacy_rows.Terms`) from
    :func:`basis_duals`; None -> None (its component is not priced this round). Picklable through
    its arguments; deterministic, so results do not depend on the backend.

    Rows: the model starts with the sum row alone (row 0); after each solve the pairs the solution
    violates (:meth:`_violated`) are appended, and it is solved again from its basis, until none is
    violated. Rows stay for later requests. A relaxation can only lower the pricing optimum, so both
    bounds stay valid at any point (module docstring); the column is closed into C whatever rows were
    held."""

    def __init__(self, spec: PricingSpec, options: SolverOptions) -> None:
        self.spec = spec
        n = spec.cone.n
        self.idx = np.arange(n)
        self.held = np.zeros(spec.cone.pairs.size, dtype=bool)
        self.order = np.zeros(0, dtype=np.int64)  # pair of each model row after the sum row
        self.rows = sp.csr_matrix((0, n))  # their balanced rows
        self.h = highs.new_highs(options)
        _configure(self.h, PRICING_STRATEGY)
        highs.pass_model(
            self.h,
            LpModel(
                c=np.zeros(n),
                a=sp.csc_matrix(np.ones((1, n))),
                row_lower=np.ones(1),
                row_upper=np.ones(1),
                col_lower=np.zeros(n),
                col_upper=np.full(n, np.inf),
            ),
        )

    def __call__(self, req: PriceRequest | str | None) -> PriceResult | pr.Terms | None:
        if req is None:
            return None
        if isinstance(req, str):
            if req != POLISH:
                raise InputError(f"pricing worker: unknown request {req!r}")
            return self.polish()
        return self.price(req)

    def _violated(self, x: np.ndarray) -> np.ndarray:
        """Pairs not held whose row ``x`` violates (x_a / g_ab - x_b > VIOLATION max x): the
        ROWS_PER_SOLVE n with the largest deficit, ascending pair order."""
        p = self.spec.cone.pairs
        deficit = x[p.a] / p.g - x[p.b]
        deficit[self.held] = 0.0
        new = np.flatnonzero(deficit > VIOLATION * x.max())
        limit = max(1, int(ROWS_PER_SOLVE * self.idx.shape[0]))
        if new.size > limit:
            new = np.sort(new[np.argpartition(-deficit[new], limit - 1)[:limit]])
        return new

    def _terms(self, row_dual: np.ndarray) -> pr.Terms:
        """A^T lam over the held rows from the model's row duals (sum row first)."""
        return pr.dual_terms(self.rows, self.spec.cone.pairs.capped[self.order], row_dual[1:])

    def price(self, req: PriceRequest) -> PriceResult:
        """m_k = min (c_k - u) . x over the cone's simplex, from the previous basis unless ``cold``."""
        spec, h = self.spec, self.h
        highs.change_costs(h, self.idx, spec.cost - req.u)
        if req.cold:
            highs.clear_solver(h)
        seconds = 0.0
        while True:
            remaining = req.deadline - time.time()
            if remaining <= 0:
                return PriceResult(Status.TIME_LIMIT, np.nan, None, None, seconds)
            highs.set_time_limit(h, remaining)
            ps = _run_robust(h, PRICING_STRATEGY)
            seconds += ps.seconds
            if ps.status != Status.OPTIMAL:
                if ps.status in LIMITS:
                    return PriceResult(ps.status, np.nan, None, None, seconds)
                raise SolverError(f"colgen pricing (output {spec.output}): HiGHS status {ps.describe()}")
            new = self._violated(ps.x) if ps.x.size and ps.x.max() > 0 else np.zeros(0, dtype=np.int64)
            if new.size == 0:
                break
            rows = spec.cone.rows(new)
            self.held[new] = True
            self.order = np.r_[self.order, new]
            self.rows = sp.vstack([self.rows, rows]).tocsr()
            highs.add_rows(h, rows, np.full(new.size, -np.inf), np.zeros(new.size))
        terms = self._terms(ps.row_dual) if ps.row_dual.size else None
        column = None
        if ps.x.size and ps.x.max() > 0:
            x = close(ps.x, spec.cone.decay)
            if (spec.cost - req.u_master) @ x / x.sum() < -req.threshold:  # improves the master
                column = x
        return PriceResult(Status.OPTIMAL, ps.objective, terms, column, seconds)

    def polish(self) -> pr.Terms:
        """(n,) A^T lam from the row duals recomputed exactly on the current basis (:func:`basis_duals`;
        HiGHS's own duals when the basis system is singular)."""
        n = self.idx.shape[0]
        p = sp.vstack([sp.csr_matrix(np.ones((1, n))), self.rows]).tocsr()
        y = basis_duals(self.h, p, highs.costs(self.h))
        if y is None:
            y = highs.row_duals(self.h)
        return self._terms(y)


def make_executor(executor: str | Executor, work: int, n_workers: int, scheduler: str | None = None) -> Executor:
    """ "serial", "process", "dask", "auto" or an :class:`~mdp_core.declarations.solver_options.Executor`. "auto" uses
    processes only from ``PROCESS_MIN_WORK`` pricing nonzeros (K x the pricing rows' nonzeros, summed
    over components) and 2 workers (module docstring)."""
    return executor_mod.make_executor(executor, work >= PROCESS_MIN_WORK and n_workers >= 2, scheduler)


# --------------------------------------------------------------------------- one component
@dataclass
class _Component:
    """Column-generation state of one connected component (all arrays in local indices)."""

    members: np.ndarray  # (n,) global record ids
    c: np.ndarray  # (n, K) scaled costs
    scale: float  # max |p_i c_ik| of the component (original cost unit)
    weighted: np.ndarray  # (n, K) p_i c_ik in the original unit
    cone: Cone
    master: Any  # highspy.Highs
    cols: np.ndarray  # (n, m)
    owner: np.ndarray  # (m,)
    first: int = 0  # executor index of the worker of output 0 (outputs first .. first + K - 1)
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
    master_ipm: bool = False  # the master is solved by interior point (``master_solver="ipm"``)
    idle: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (m,) master solves at lambda 0

    def purge(self) -> None:
        """Delete the columns (not the K all-ones ones) nonbasic at lambda = 0 in the last
        :data:`PURGE_AFTER` master solves. The current solution keeps every positive lambda, so the
        master's optimum cannot rise; a column that is needed again prices out again.

        Basic columns stay even at lambda = 0: in a primal-degenerate master (e.g. an optimum that
        sends every record to one output: one positive lambda, n - 1 degenerate basics) they are
        what pins the master's duals u. Deleting them reopens the dual face, the next duals undo
        the previous pricing cuts, the same columns price out again, and the proven bound
        stalls (random line n = 7, K = 5, eps 0.5, seed 9: 200 iterations at gap 4.6e-5 against
        6 iterations to optimal with them kept). At most n columns are basic. Which columns the
        master holds changes only the duals priced at: both bounds hold for any u and any lam >= 0
        (module docstring), so purging cannot make them invalid."""
        m, k = self.cols.shape[1], self.c.shape[1]
        idle = np.r_[self.idle, np.zeros(m - self.idle.shape[0], dtype=np.int64)]
        used = self.lam > 0
        basis = self.master.getBasis()
        if basis.valid:
            used |= highs.basic_masks(self.master, self.lam.shape[0], 0)[0]
        idle[: self.lam.shape[0]] = np.where(used, 0, idle[: self.lam.shape[0]] + 1)
        drop = np.flatnonzero(idle >= PURGE_AFTER)
        drop = drop[drop >= k]
        keep = np.ones(m, dtype=bool)
        keep[drop] = False
        highs.delete_cols(self.master, drop)
        self.cols, self.owner, self.idle = self.cols[:, keep], self.owner[keep], idle[keep]
        self.lam = self.lam[keep[: self.lam.shape[0]]]

    def z(self) -> np.ndarray:
        """(n, K) assembled mechanism rows sum_j lambda_kj v_kj."""
        k, m = self.c.shape[1], self.owner.shape[0]
        lam = np.r_[self.lam, np.zeros(m - self.lam.shape[0])]  # columns added after the last master solve
        s = sp.csr_matrix((lam, (np.arange(m), self.owner)), shape=(m, k))
        return np.asarray((s.T @ self.cols.T).T)

    def lagrangian(self, terms: pr.Terms) -> float:
        """:func:`mdp_core.solvers.privacy_rows.lagrangian_bound` of (n, K) terms, in the original unit."""
        return self.scale * pr.lagrangian_bound(self.c, terms)

    def specs(self) -> list[PricingSpec]:
        """One pricing spec per output, in output order."""
        return [PricingSpec(self.cone, self.c[:, k].copy(), k) for k in range(self.c.shape[1])]


def _configure(h: Any, strategy: int) -> None:
    highs.set_options(
        h, simplex_strategy=strategy, small_matrix_value=SMALL_MATRIX_VALUE, presolve="off"
    )  # presolve off: keep the basis between solves


def _new_component(
    instance: Instance, block: Block, weighted: np.ndarray, options: SolverOptions, params: ColgenOptions
) -> _Component:
    members, edges = block.members, block.local_edges
    n = members.shape[0]
    dist = instance.distances[block.edge_ids]
    w = weighted[members]
    c, scale = highs.scale_costs(w)
    paths = capped_path_distances(n, edges, dist, instance.epsilon)
    decay = np.exp(-instance.epsilon * paths)  # row s = seed column v_s (before the floor)
    keep = ~implied_edges(edges, dist, paths, instance.epsilon)
    pairs = pr.pairs(edges[keep], dist[keep], instance.epsilon)
    cols, owner = seed_columns(c, decay, params.seeds_per_record)
    master = highs.new_highs(options)
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
    return _Component(
        members, c, scale, w, Cone(pairs, decay), master, cols, owner, master_ipm=params.master_solver == "ipm"
    )


def _run_robust(h: Any, strategy: int, ipm: bool = False) -> LpSolution:
    """Solve with simplex ``strategy`` from the current basis; on a HiGHS error the other strategy,
    then both from scratch (:func:`mdp_core.solvers.highs.strategy_ladder`). ``ipm``: the model is set to
    interior point; on an error simplex cold first (seen once on syn500's master, "unknown")."""
    # master and pricing LPs are feasible and bounded: any other status is a breakdown to retry
    ladder = highs.strategy_ladder(strategy) + highs.COLD_NO_PRESOLVE
    if ipm:
        return highs.run_robust(h, highs.SWITCH_ALGORITHM + ladder, want_duals=True, accept=SOLVED, solver="ipm")
    return highs.run_robust(h, ladder, want_duals=True, accept=SOLVED)


@dataclass
class _Step:
    """What one iteration of one component did, and the point its pricing LPs are solved at."""

    added: int = 0
    master_s: float = 0.0
    status: Status = Status.OPTIMAL  # OPTIMAL = the iteration completed (a limit otherwise)
    mispriced: bool = False  # a smoothed pricing round found no improving column
    u: np.ndarray | None = None  # pricing duals (None: the master did not solve, nothing to price)
    u_master: np.ndarray | None = None
    threshold: float = 0.0
    smoothed: bool = False


def _master(comp: _Component, deadline: float, tol: float, alpha: float, gap_rel: float) -> _Step:
    """Solve the restricted master; set the upper bound and the pricing point (``step.u``).

    A column enters when its reduced cost per unit mass is below -max(tol, gap_rel |master| / (100 n))
    (scaled costs): a column worth less could not move the bound n min_k m_k by 1 % of the target
    gap. Without this, grid 20 x 25 (eps 10) added 100 columns of reduced cost ~-1e-12 per iteration
    for 190 iterations without moving either bound.
    """
    t0 = time.perf_counter()
    if deadline - t0 <= 0:
        return _Step(status=Status.TIME_LIMIT)
    highs.set_time_limit(comp.master, deadline - t0)
    sol = _run_robust(comp.master, MASTER_STRATEGY, comp.master_ipm)
    step = _Step(master_s=time.perf_counter() - t0)
    if sol.x.shape[0]:
        comp.lam = np.maximum(sol.x, 0.0)
        comp.upper = float(np.sum(comp.weighted * comp.z()))
        if sol.status == Status.OPTIMAL:
            comp.purge()
    if sol.status != Status.OPTIMAL or sol.x.shape[0] == 0:
        if sol.status in LIMITS:
            step.status = sol.status
            return step
        raise SolverError(f"colgen master: HiGHS status {sol.describe()}")
    u_master = np.asarray(sol.row_dual, dtype=np.float64)
    center = comp.center
    step.smoothed = comp.smooth and not comp.cold_next and center is not None and alpha > 0
    step.u = alpha * center + (1 - alpha) * u_master if step.smoothed and center is not None else u_master
    step.u_master = u_master
    step.threshold = max(tol, gap_rel * abs(sol.objective) / (100 * comp.c.shape[0]))
    return step


def _price(run: _Run, comps: list[_Component], steps: list[_Step], deadline: float) -> None:
    """The K pricing LPs of every component whose master solved, in one executor call; then each
    component's bounds and new columns (:func:`_absorb`)."""
    todo = [(comp, step) for comp, step in zip(comps, steps, strict=True) if step.u is not None]
    if not todo:
        return
    k = run.z.shape[1]
    wall = time.time() + (deadline - time.perf_counter())  # the executor's deadlines are wall-clock
    reqs: list[Any] = [None] * run.n_workers
    for comp, step in todo:
        assert step.u is not None and step.u_master is not None
        reqs[comp.first : comp.first + k] = [
            PriceRequest(step.u, step.u_master, step.threshold, wall, comp.cold_next)
        ] * k
    results = run.ex.solve(reqs)
    for comp, step in todo:
        _absorb(comp, step, results[comp.first : comp.first + k])


def _absorb(comp: _Component, step: _Step, results: Sequence[PriceResult]) -> None:
    """Update the component's bounds from its K pricing results (when all K finished; output order)
    and append the improving columns to its master; a limit goes to ``step``."""
    assert step.u is not None
    n, k = comp.c.shape
    new_cols: list[np.ndarray] = []
    new_owner: list[int] = []
    m_k: list[float] = []
    terms: list[pr.Terms] = []
    for kk, r in enumerate(results):
        if r.status != Status.OPTIMAL:
            step.status = r.status
            break
        m_k.append(r.objective)
        terms.append(r.terms or pr.Terms(np.zeros(n)))  # no duals: lam = 0, still valid
        if r.column is not None:
            new_cols.append(r.column)
            new_owner.append(kk)
    if len(m_k) == k:
        u = step.u
        lb = float(u.sum() + n * min(min(m_k), 0.0))  # valid for any u, smoothed or not
        if lb > comp.center_lb:
            comp.center, comp.center_lb = u.copy(), lb
        comp.pricing_lb = max(comp.pricing_lb, comp.scale * lb)
        comp.lower = max(comp.lower, comp.lagrangian(pr.stack(terms)))
    comp.cold_next = False
    # a smoothed point that yields no improving column is a mis-pricing: price at the master's duals next
    step.mispriced = step.smoothed and not new_cols and step.status == Status.OPTIMAL
    comp.smooth = not step.mispriced
    if step.mispriced:
        return
    if new_cols:
        v = np.column_stack(new_cols)
        highs.add_cols(comp.master, (comp.c[:, new_owner] * v).sum(0), sp.csc_matrix(v))
        comp.cols = np.concatenate([comp.cols, v], axis=1)
        comp.owner = np.r_[comp.owner, np.asarray(new_owner, dtype=np.int64)]
    step.added = len(new_cols)


def _polish(run: _Run, comps: list[_Component]) -> None:
    """Raise each component's proven bound with the duals recomputed exactly on every pricing
    worker's current basis (:data:`POLISH`), in one executor call."""
    if not comps:
        return
    k = run.z.shape[1]
    reqs: list[Any] = [None] * run.n_workers
    for comp in comps:
        reqs[comp.first : comp.first + k] = [POLISH] * k
    results = run.ex.solve(reqs)
    for comp in comps:
        comp.lower = max(comp.lower, comp.lagrangian(pr.stack(results[comp.first : comp.first + k])))


# --------------------------------------------------------------------------- the method
TRACE_COLUMNS = list(tables.TRACE_COLUMNS["colgen"])  # trace.parquet's, declared in mdp_core.declarations.tables


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
    """Column generation over all components: the isolated records' fixed part, the live components
    and the executor running their pricing workers (component j's outputs at ``comps[j].first ...``)."""

    z: np.ndarray  # (N, K)
    fixed: float = 0.0  # exact cost of isolated records
    comps: list[_Component] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the trace
    ex: Any = None  # Executor
    n_workers: int = 0
    t0: float = 0.0  # time.perf_counter() at the start (progress lines)
    time_limit: float = float("inf")  # seconds (progress lines)

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
    options = dataclasses.replace(options or SolverOptions(), solver="simplex")
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit
    weighted = instance.prior[:, None] * instance.costs
    count, sizes, blocks = component_blocks(instance.n_records, instance.edges)
    run = _Run(np.zeros((instance.n_records, instance.n_outputs)), t0=t0, time_limit=options.time_limit)
    for block in blocks:
        if block.members.shape[0] == 1:
            i = block.members[0]
            run.z[i, np.argmin(instance.costs[i])] = 1.0
            run.fixed += float(np.min(weighted[i]))
        else:
            run.comps.append(_new_component(instance, block, weighted, options, params))
    specs: list[PricingSpec] = []
    for comp in run.comps:
        comp.first = len(specs)
        specs += comp.specs()
    run.n_workers = len(specs)
    work = instance.n_outputs * sum(2 * c.cone.pairs.size for c in run.comps)
    run.ex = make_executor(params.executor, work, len(specs), params.scheduler)
    try:
        if specs:
            highs.start_workers(run.ex, PricingWorker, specs, options, [2 * s.cone.pairs.size for s in specs])
        setup_s = time.perf_counter() - t0
        status, it = Status.OPTIMAL, 0
        while any(not c.done for c in run.comps):
            if it >= params.max_iterations:
                status = Status.ITERATION_LIMIT
                break
            it += 1
            control.check(f"colgen before iteration {it}")
            status = _round(run, it, deadline, params, progress)
            if status != Status.OPTIMAL:
                break
        polish_s = time.perf_counter()
        for comp in run.comps:
            run.z[comp.members] = comp.z()
        # every pricing worker of a component with a finite pricing bound has a basis: exact duals once
        _polish(run, [c for c in run.comps if np.isfinite(c.pricing_lb)])
        polish_s = time.perf_counter() - polish_s
    finally:
        run.ex.close()
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
        "pricing_rows": int(sum(c.cone.pairs.size for c in run.comps)),
        "seeds_per_record": params.seeds_per_record,
        "executor": getattr(run.ex, "name", type(run.ex).__name__),
        "pricing_workers": run.n_workers,
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
    """Iteration ``it`` for every unfinished component: each master, then all their pricing LPs in
    one executor call; appends a trace row. Returns OPTIMAL to go on."""
    gap_abs, gap_rel = params.gap_abs, params.gap_rel
    live = [c for c in run.comps if not c.done]
    steps = [_master(comp, deadline, params.tol, params.smoothing, gap_rel) for comp in live]
    t1 = time.perf_counter()
    _price(run, live, steps, deadline)
    ps = time.perf_counter() - t1
    status = next((s.status for s in reversed(steps) if s.status != Status.OPTIMAL), Status.OPTIMAL)
    complete = [s.status == Status.OPTIMAL and not s.mispriced for s in steps]
    # The pricing bound closes the gap but the proven bound does not: exact duals of the current bases.
    _polish(
        run,
        [
            comp
            for comp, step, ok in zip(live, steps, complete, strict=True)
            if ok
            and step.added == 0
            and not gap_closed(comp.upper, comp.lower, gap_abs, gap_rel)
            and gap_closed(comp.upper, comp.pricing_lb, gap_abs, gap_rel)
        ],
    )
    for comp, step, ok in zip(live, steps, complete, strict=True):
        if gap_closed(comp.upper, comp.lower, gap_abs, gap_rel):
            comp.done = True
        elif step.added == 0 and ok:
            # No column prices out. A warm-started HiGHS solve can call a basis optimal that is
            # 1e-6 off (its tolerances are applied to the scaled model), so before giving up
            # re-solve every pricing LP from scratch (at most twice per component).
            if comp.cold_checks < 2:
                comp.cold_next, comp.cold_checks = True, comp.cold_checks + 1
            else:
                comp.done = True
    lower, pricing, upper = run.bounds()
    added = sum(s.added for s in steps)
    run.rows.append(
        {
            "iteration": it,
            "lower_bound": lower,
            "pricing_bound": pricing,
            "upper_bound": upper,
            "gap": upper - lower,
            "columns_added": added,
            "master_seconds": sum(s.master_s for s in steps),
            "pricing_seconds": ps,
        }
    )
    line = control.Progress(
        "colgen",
        f"iteration {it}",
        lower=lower,
        upper=upper,
        gap_abs=gap_abs,
        gap_rel=gap_rel,
        elapsed=time.perf_counter() - run.t0,
        time_limit=run.time_limit,
        detail=f"+{added} columns",
    )
    control.report(progress, line)
    return status


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: ColgenOptions
) -> RawSolution:
    """The "colgen" entry of :data:`mdp_core.solvers.solve.METHODS`.

    ``lower_bound`` is the proven (Lagrangian) bound that also drives the stopping rule; the
    pricing bound is in ``extra["lower_bound_pricing"]`` and the trace.
    """
    res = colgen(instance, options, progress, params)
    lower = res.lower_bound if np.isfinite(res.lower_bound) else None
    extra = res.extra | {"seconds": round(res.seconds, 3)}
    return RawSolution(res.z, res.status, lower, res.iterations, extra, res.trace)
