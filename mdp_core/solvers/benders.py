"""Benders decomposition of the PMO LP over a record partition (Qiu 2024, section 3.2), with
correct bounds.

Privacy contract
    input:      the mDP graph (neighbour pairs d_ij <= eta, both directions), eps per distance unit.
    guarantee:  eps-mDP per distance unit on every neighbour pair and output.
    holds by:   the certify gate: the assembled mechanism is made exactly feasible (:func:`closure`,
                :func:`mdp_core.solvers.verify.repair`), then :func:`mdp_core.solvers.verify.certify` re-checks it
                before anything is released. Optimality ("optimal") is claimed only with the valid
                lower bound below (:func:`mdp_core.solvers.result.honest_status`).
    reference:  Qiu 2024, section 3.2 (decomposition); the bounds here are corrected (see below).

Partition the records into subsets R_l = X_l (internal) + Y_l (boundary), see :mod:`partition`.
Internal records only have neighbours in their own subset, so with z_Y (all boundary rows) fixed
the LP separates into one subproblem per subset over z_{X_l}.

Master (one HiGHS model, kept alive; cuts are appended as rows):

    min  c_Y z_Y + sum_l w_l
    s.t. privacy rows between two boundary records (balanced, :mod:`mdp_core.solvers.privacy_rows`);
         unit measure of every boundary row;
         w_l >= wlb_l = sum_{x in X_l} min_k c_xk      (valid: rows of z_X are distributions)
         optimality cuts  w_l >= alpha + beta . z_Y  (no feasibility cuts: see below);
         optional Property 3.2 rows (``initial_cuts``).

w_l is exactly the internal cost c_{X_l} z_{X_l} (Eq. 13): c_Y z_Y appears once, in the master
objective only (the paper's Eq. 9 + 15 count it twice). Costs are p_i c_ik divided by
max |p_i c_ik| inside HiGHS and reported in the instance's unit.

Subproblem l (one HiGHS model per subset, kept alive; only right-hand sides change), in an
always-feasible *elastic* form: every privacy row whose right-hand side depends on z_Y gets a
slack s >= 0 with cost rho,

    phi_rho,l(z_Y) = min c_X z_X + rho 1.s  s.t.  A z_X - s <= U(z_Y) = T z_Y  (privacy rows
                     touching X_l),  sum_k z_xk = 1,  z_X >= 0,   and  phi_rho,l <= phi_l.

Why elastic instead of Farkas feasibility cuts: with eps * eta = 20 whether a subproblem is
feasible depends on master values at the 1e-10 level (z_xk <= e^20 z_yk) and HiGHS's answer
depended on presolve. The elastic form never fails, and it is exact: if rho exceeds the largest
privacy dual, every optimum of the penalised problem has s = 0. If Benders converges with s > 0,
rho is multiplied by 10 (old cuts stay valid because phi_rho only grows with rho).

Why the lower bound is valid. Cuts are *Lagrangian* cuts, valid for any multipliers y of the
privacy rows with -rho <= y <= 0 on the slack rows and y <= 0 elsewhere (unit-measure rows are
kept as simplices): for every z_Y,

    phi_l(z_Y) >= phi_rho,l(z_Y) >= sum_{x in X_l} min_k (c_X - A^T y)_xk + y . T z_Y,

because for feasible (z_X, s), y.(A z_X - s - T z_Y) >= 0 and rho s + y.s >= 0. With y = HiGHS's
row duals clipped into that box this is the usual optimality cut, but its validity does not
depend on the solver's dual accuracy. The master (a relaxation of the LP with every w_l
under-estimating phi_l) is then bounded the same way, from its own duals, not from HiGHS's
objective (which was "unbounded" or 60 % above the optimum with e^20-e^30 rows): for multipliers
lam >= 0 of its "<= 0" rows and nu >= 0 of its cuts (scaled so that s_l, the sum over l's cuts of nu
times their w_l coefficient, is at most 1), every master-feasible (z_Y, w), among them the LP
optimum's z_Y with w_l = phi_l(z_Y), satisfies

    c_Y z_Y + sum_l w_l >= nu . lo + sum_l (1 - s_l) wlb_l + sum_y min_k (c_Y + A^T lam - C^T nu)_yk,

the Lagrangian bound of :mod:`mdp_core.solvers.privacy_rows` with the cuts as extra rows
(:func:`master_bound`; with exact duals it equals the master optimum). Subproblem rows keep their
multipliers on capped rows (eps d > 30), so cuts and LB bound the capped LP; the master's bound is
turned into one on the exact LP by :func:`mdp_core.solvers.privacy_rows.uncap` (rule (ii) there; it moves
LB by about K e^-30 relative). Subproblem rows are *not* balanced: the elastic slack, rho and the
heuristic's slack prices are in units of z_xk - g z_yk. Right-hand sides are capped at 1
(z_xk <= g z_yk with g z_yk > 1 is implied by the unit measure), which keeps e^20 bounds out of
HiGHS; with y <= 0 the cut above stays valid. Cut terms below 1e-11 of the largest are dropped
by replacing them with their minimum over [0, 1] (:func:`_relax_small`), which keeps the cut valid.

Stabilisation (in-out separation): the subproblems are first solved at the point
0.5 * core + 0.5 * z_Y, core starting at the uniform rows (strictly feasible) and updated as
core <- (core + z_Y) / 2; only if that yields no cut violated at the master's (z_Y, w) are they
solved at z_Y itself (the degenerate master otherwise wanders).

Primal heuristics (the upper bound). The master's vertex solutions put z_yk = 0 on most outputs k
of a boundary record y; with z_xk <= e^{eps d} z_yk an internal neighbour x then cannot use output
k at all, while the optimal mechanism carries tiny masses (~e^{-eps d} z_xk) there. Two heuristics:

* the *seed* (before iteration 1): every record's cheapest output, one-hot, closed under the cone
  by :func:`closure`. When the master's bound meets it, the run stops without solving subproblems.
* the *priced* heuristic: at the master's point z_Y it solves a copy of each subproblem whose
  slack on a row z_xk <= g z_yk costs what raising z_yk by s / g would cost the boundary row
  (:func:`lift_prices`, floored at ``PRICE_FLOOR``), assembles (z_Y, z_X) and makes it exactly
  eps-mDP with :func:`closure`. Its Lagrangian cuts are valid (slack costs <= rho) and are added
  too. It runs at iteration 2, after every iteration where it improved UB, every
  ``HEURISTIC_EVERY`` iterations, and at iteration 1 when the seed is more than
  ``PRICED_AT_ONCE_GAP`` (relative) above the first master bound.

``heuristic=False`` turns both off (extra ``seed_upper_bound`` is then None).

Bounds: LB = the master's Lagrangian bound (best so far). UB = cost of the best full solution: the heuristic's, or the one
assembled from the separation point's master and subproblem rows, made exactly feasible by
:func:`mdp_core.solvers.verify.repair` when a subproblem used slack. Stopping: UB - LB <= ``gap_abs`` or
<= ``gap_rel`` * |UB| (optimal), ``max_iterations`` (iteration_limit), the options' time limit for
the whole run (time_limit), or, once the relative gap is below ``STALL_GAP``, no bound moving by
more than gap_rel in ``stall_iterations`` iterations (feasible). Every iteration is a row of
``RawSolution.trace``.

Subproblems run through :mod:`mdp_core.runtime.executor` (one :class:`SubWorker` per subset: serial, or
persistent worker processes that receive only the boundary values z_{Y_l} each iteration).
``executor="auto"`` uses processes only from 2 CPUs, 2 subproblems and ``PROCESS_MIN_VARS``
subproblem variables: below that, process start-up costs more than it saves.

Measurements behind these choices (iteration counts, timings, the executor threshold): bench/README.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from mdp_core.declarations import tables
from mdp_core.declarations.methods import BendersOptions
from mdp_core.declarations.solver_options import Executor, SolverOptions
from mdp_core.errors import SolverError
from mdp_core.problem.graph import path_distances
from mdp_core.problem.instance import Instance
from mdp_core.problem.partition import Partition, balance_stats, from_labels, partition
from mdp_core.runtime import control
from mdp_core.runtime import executor as executor_mod
from mdp_core.solvers import highs
from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.highs import LpModel, LpSolution
from mdp_core.solvers.mechanisms import smooth_to_mdp
from mdp_core.solvers.result import RawSolution, Status, gap_closed
from mdp_core.solvers.verify import MAX_LOG_RATIO, repair

SLACK_TOL = 1e-9  # total slack (probability units) below which an assembled solution counts as feasible
STALL_GAP = 1e-4  # stall detection only applies once the relative gap is this small
CUT_TOL = 1e-9  # relative violation of w_l below which no optimality cut is added
PRICE_FLOOR = 1e-10  # smallest slack cost in the heuristic's priced subproblems (scaled)
PRICED_AT_ONCE_GAP = 1e-3  # seed vs first master bound (relative) above which the priced heuristic runs at once
HEURISTIC_EVERY = 10  # iterations between primal-heuristic runs once it stops improving the UB
PROCESS_MIN_VARS = 20_000  # total subproblem variables (internal records x K) before a process pool pays off
INF = highs.INF
_TRACE_COLUMNS = list(tables.TRACE_COLUMNS["benders"])  # trace.parquet's, declared in mdp_core.declarations.tables


# ============================================================================ subproblems
@dataclass
class SubSpec:
    """Everything a worker needs to build subproblem ``index`` (picklable, scaled costs).

    c: (nX*K,) scaled costs of the internal rows; a_priv: (P, nX*K) CSR privacy rows;
    t: (P, nY_l*K) CSR with U = t @ z_{Y_l}; dep: rows of ``a_priv`` whose bound depends on z_Y;
    n_x, k: internal records and outputs.
    """

    index: int
    c: np.ndarray
    a_priv: sp.csr_matrix
    t: sp.csr_matrix
    dep: np.ndarray
    n_x: int
    k: int


@dataclass
class SubResult:
    """One subproblem solve (scaled cost units). ``cut_coef`` is over the subset's z_{Y_l} columns.

    ``value`` = phi_rho,l(z_Y) = c x + rho * sum(slack); ``slack`` = sum of the slacks (0 when z_Y
    admits a feasible z_X); ``x``: (nX*K,) rows; the cut is w_l >= cut_const + cut_coef . z_{Y_l}.
    """

    index: int
    status: Status  # OPTIMAL or TIME_LIMIT
    value: float
    slack: float
    x: np.ndarray | None
    cut_const: float
    cut_coef: np.ndarray
    seconds: float
    iterations: int


class SubSolver:
    """A live HiGHS model of one (elastic) subproblem; :meth:`solve` only changes right-hand sides
    (and the slack cost when rho changes).

    Columns: z_X (nX*K) then one slack per z_Y-dependent privacy row (cost rho). Rows: privacy rows
    A z_X - s <= U(z_Y) and the unit-measure rows of X_l.
    """

    def __init__(self, spec: SubSpec, options: SolverOptions) -> None:
        self.spec = spec
        p, nx = spec.a_priv.shape[0], spec.n_x * spec.k
        self.dep32 = spec.dep.astype(np.int32)
        nd = self.dep32.shape[0]
        slack = sp.csr_matrix((-np.ones(nd), (self.dep32, np.arange(nd))), shape=(p, nd))
        unit = sp.csr_matrix((np.ones(nx), np.arange(nx), np.arange(spec.n_x + 1) * spec.k), shape=(spec.n_x, nx))
        a = sp.vstack([sp.hstack([spec.a_priv, slack]), sp.hstack([unit, sp.csr_matrix((spec.n_x, nd))])])
        model = LpModel(
            c=np.r_[spec.c, np.zeros(nd)],
            a=a.tocsc(),
            row_lower=np.r_[np.full(p, -INF), np.ones(spec.n_x)],
            row_upper=np.r_[np.zeros(p), np.ones(spec.n_x)],
            col_lower=np.zeros(nx + nd),
            col_upper=np.full(nx + nd, INF),
        )
        self.options = options
        self.h = highs.new_highs(options)
        highs.pass_model(self.h, model)
        self.a_t = spec.a_priv.T.tocsr()
        self.lower = np.full(nd, -INF)
        self.slack_cols = (nx + np.arange(nd)).astype(np.int32)
        t = spec.t.tocsr()  # each z_Y-dependent row reads exactly one boundary entry: U_r = g_r z_{y,k}
        first = t.indptr[self.dep32]
        self.dep_col, self.dep_g = t.indices[first], t.data[first]
        self.rho = 0.0

    def _set_rho(self, rho: float) -> None:
        if rho != self.rho and self.slack_cols.size:
            highs.change_costs(self.h, self.slack_cols, rho)
        self.rho = rho

    def solve(self, zy: np.ndarray, time_limit: float, rho: float, price: np.ndarray | None = None) -> SubResult:
        """Solve at boundary values ``zy`` ((nY_l*K,) rows of the subset's boundary records).

        With ``price`` ((nY_l*K,) scaled cost of raising each boundary entry z_yk, see
        :func:`lift_prices`) the slack of a row z_xk <= g z_yk costs price_yk / g (floored at
        ``PRICE_FLOOR``, capped at ``rho``) instead of ``rho``: the primal heuristic's model.
        """
        spec = self.spec
        if price is None:
            self._set_rho(rho)
            floor = rho
        else:
            floor = np.clip(price[self.dep_col] / self.dep_g, PRICE_FLOOR, rho)
            highs.change_costs(self.h, self.slack_cols, floor)
            self.rho = np.nan  # slack costs no longer uniform
        # U = T z_Y, capped at 1: a row with a positive right-hand side reads z_xk <= g z_yk and
        # z_xk <= 1 holds anyway (unit measure), so the cap leaves the feasible set unchanged while
        # keeping bounds like e^20 out of HiGHS. Cuts stay valid: with y <= 0, y.T z_Y <= y.U.
        u = np.minimum(np.asarray(spec.t @ zy).ravel(), 1.0)
        highs.change_row_bounds(self.h, self.dep32, self.lower, u[self.dep32])
        highs.set_time_limit(self.h, time_limit)
        sol = _run(self.h, want_duals=True)  # anything but optimal / time limit is numerical trouble:
        if sol.status == Status.TIME_LIMIT:  # this LP is always feasible and bounded
            return SubResult(
                spec.index, Status.TIME_LIMIT, np.nan, np.nan, None, 0.0, np.zeros(0), sol.seconds, sol.iterations
            )
        if sol.status != Status.OPTIMAL:
            raise SolverError(f"subproblem {spec.index}: HiGHS status {sol.describe()}")
        p, nx = spec.a_priv.shape[0], spec.n_x * spec.k
        lam = np.maximum(-np.asarray(sol.row_dual[:p], dtype=np.float64), 0.0)  # multipliers of A z_X - s <= U
        lam[self.dep32] = np.minimum(lam[self.dep32], floor)  # dual feasibility of the slack columns
        const = pr.min_sum(spec.c.reshape(spec.n_x, spec.k), self.a_t @ lam)
        coef = -np.asarray(spec.t.T @ lam).ravel()
        x = sol.x[:nx]
        s = np.maximum(sol.x[nx:], 0.0)
        slack = float(s.sum())
        value = float(spec.c @ x) + float(np.sum(floor * s))
        return SubResult(spec.index, Status.OPTIMAL, value, slack, x, const, coef, sol.seconds, sol.iterations)


_ACCEPT = frozenset({Status.OPTIMAL, Status.TIME_LIMIT})


def _run(h: Any, want_duals: bool = False) -> LpSolution:
    """Run; a status impossible for the model (seen: "unbounded" from presolve on an elastic
    subproblem with e^20 coefficients, "unknown" after a warm start) is retried cold without presolve
    (:data:`mdp_core.solvers.highs.COLD_NO_PRESOLVE`), which gave "optimal" in every such case we met."""
    return highs.run_robust(h, highs.COLD_NO_PRESOLVE, want_duals, accept=_ACCEPT)


@dataclass
class SubRequest:
    """One subproblem solve: boundary values ``zy`` (the subset's z_{Y_l}), an absolute wall-clock
    ``deadline`` (``time.time()``), the slack penalty ``rho``, and for the heuristic's priced model
    the ``price`` of each boundary entry (:meth:`SubSolver.solve`)."""

    zy: np.ndarray
    deadline: float
    rho: float
    price: np.ndarray | None = None


class SubWorker:
    """The executor's worker for one subset (:mod:`mdp_core.runtime.executor`): its elastic subproblem model,
    and the heuristic's priced copy built on first use. Picklable through its arguments."""

    def __init__(self, spec: SubSpec, options: SolverOptions) -> None:
        self.spec, self.options = spec, options
        self.model = SubSolver(spec, options)
        self.priced: SubSolver | None = None

    def __call__(self, req: SubRequest) -> SubResult:
        model = self.model
        if req.price is not None:
            if self.priced is None:
                self.priced = SubSolver(self.spec, self.options)
            model = self.priced
        return model.solve(req.zy, req.deadline - time.time(), req.rho, req.price)


def make_executor(executor: str | Executor, total_vars: int, n_subs: int, scheduler: str | None = None) -> Executor:
    """ "serial", "process", "auto" or an :class:`~mdp_core.declarations.solver_options.Executor`. "auto" uses processes
    only from ``PROCESS_MIN_VARS`` subproblem variables and 2 subproblems (module docstring)."""
    return executor_mod.make_executor(executor, total_vars >= PROCESS_MIN_VARS and n_subs >= 2, scheduler)


# ============================================================================ decomposition
@dataclass
class Decomposition:
    """Index maps of one partition. ``ys``: boundary record ids; ``ypos[i]``: position in ``ys``
    or -1; ``subs[i]`` = (subset id, internal record ids, boundary ids read by the subproblem)."""

    part: Partition
    ys: np.ndarray
    ypos: np.ndarray
    subs: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)


def decompose(instance: Instance, part: Partition) -> Decomposition:
    n = instance.n_records
    ys = np.flatnonzero(part.boundary)
    ypos = np.full(n, -1, dtype=np.int64)
    ypos[ys] = np.arange(ys.size)
    dec = Decomposition(part, ys, ypos)
    internal = ~part.boundary
    order = np.argsort(part.labels, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(part.labels, minlength=part.n_subsets))]
    for sub in range(part.n_subsets):
        members = order[bounds[sub] : bounds[sub + 1]]
        xs = members[internal[members]]
        if xs.size:
            dec.subs.append((sub, xs, members[part.boundary[members]]))
    return dec


def sub_specs(instance: Instance, dec: Decomposition, c: np.ndarray) -> list[tuple[SubSpec, np.ndarray]]:
    """One (SubSpec, master column ids of its z_{Y_l}) per subset with internal records."""
    n, k = instance.n_records, instance.n_outputs
    e, d = instance.edges, instance.distances
    internal = ~dec.part.boundary
    lab = dec.part.labels
    touches = internal[e[:, 0]] | internal[e[:, 1]]  # such an edge lies inside one subset
    e_lab = lab[e[:, 0]]
    out = []
    for idx, (sub, xs, _) in enumerate(dec.subs):
        sel = np.flatnonzero(touches & (e_lab == sub))
        el, dl = e[sel], d[sel]
        ends = np.unique(el)
        yl = ends[dec.part.boundary[ends]]
        xmap = np.full(n, -1, dtype=np.int64)
        xmap[xs] = np.arange(xs.size) * k
        ymap = np.full(n, -1, dtype=np.int64)
        ymap[yl] = np.arange(yl.size) * k
        # raw rows (not balanced): the elastic slack, rho and the heuristic's slack prices are in the
        # units of z_xk - g z_yk (module docstring); rows numbered (direction, edge, k) in C order
        pl = pr.pairs(el, dl, instance.epsilon)
        ei, ki = np.repeat(np.arange(pl.size), k), np.tile(np.arange(k), pl.size)
        a_priv = pr.rows(pl, ei, ki, xmap, xs.size * k, balanced=False)
        t = -pr.rows(pl, ei, ki, ymap, yl.size * k, balanced=False)
        dep = np.flatnonzero(np.diff(t.indptr) > 0)
        spec = SubSpec(idx, c[xs].ravel().copy(), a_priv, t, dep, int(xs.size), k)
        ycols = (dec.ypos[yl][:, None] * k + np.arange(k)[None, :]).ravel()
        out.append((spec, ycols))
    return out


def property32_rows(instance: Instance, dec: Decomposition, cap: float, n_cols: int) -> sp.csr_matrix:
    """The Property 3.2 rows z_yk - e^{eps D} z_y'k <= 0 for non-adjacent boundary records y, y' of
    one subset, D = shortest path inside that subset, eps * D <= min(``cap``, MAX_LOG_RATIO), balanced
    (:func:`mdp_core.solvers.privacy_rows.rows`; HiGHS failed on raw e^27 coefficients); pairs beyond the cap
    are left out (weak and badly scaled; and a capped path row would not be implied). Returns an
    (m, ``n_cols``) CSR matrix in master column numbering (z_Y first).
    """
    k, n = instance.n_outputs, instance.n_records
    e, d = instance.edges, instance.distances
    lab = dec.part.labels
    bb = dec.part.boundary[e[:, 0]] & dec.part.boundary[e[:, 1]]
    adjacent = e[bb, 0] * n + e[bb, 1]  # boundary-boundary neighbour pairs (already master rows)
    pa, pb, pw = [], [], []
    same = lab[e[:, 0]] == lab[e[:, 1]]
    for sub, xs, yb in dec.subs:
        if yb.size < 2:
            continue
        members = np.r_[xs, yb]
        loc = np.full(n, -1, dtype=np.int64)
        loc[members] = np.arange(members.size)
        sel = same & (lab[e[:, 0]] == sub)
        dist = path_distances(members.size, loc[e[sel]], d[sel], loc[yb])[:, loc[yb]]
        i, j = np.nonzero(np.isfinite(dist) & (dist > 0) & (instance.epsilon * dist <= min(cap, MAX_LOG_RATIO)))
        a, b = yb[i], yb[j]
        key = np.minimum(a, b) * n + np.maximum(a, b)
        keep = ~np.isin(key, adjacent)
        pa.append(a[keep])
        pb.append(b[keep])
        pw.append(dist[i, j][keep])
    if not pa or sum(x.size for x in pa) == 0:
        return sp.csr_matrix((0, n_cols))
    pairs = pr.pairs(np.c_[np.concatenate(pa), np.concatenate(pb)], np.concatenate(pw), instance.epsilon, both=False)
    ei, ki = np.repeat(np.arange(pairs.size), k), np.tile(np.arange(k), pairs.size)
    return pr.rows(pairs, ei, ki, np.where(dec.ypos >= 0, dec.ypos * k, -1), n_cols)


def lift_prices(cy: np.ndarray, zy: np.ndarray) -> np.ndarray:
    """(nY, K) first-order cost (scaled) of raising boundary entry z_yk by one unit and renormalising
    row y: c_yk - c_y . z_y, clipped at 0. ``cy``: (nY, K) scaled costs; ``zy``: (nY, K) master rows."""
    return np.maximum(cy - (cy * zy).sum(axis=1, keepdims=True), 0.0)


def _assemble(
    ys: np.ndarray,
    zy: np.ndarray,
    subs: list[tuple[int, np.ndarray, np.ndarray]],
    results: Sequence[SubResult],
    shape: tuple[int, int],
) -> np.ndarray:
    """``shape`` (N, K) full matrix from the boundary rows ``zy`` ((nY*K,)) and the subproblems' internal rows."""
    z = np.zeros(shape)
    k = shape[1]
    z[ys] = zy.reshape(ys.size, k)
    for (_, xs, _), r in zip(subs, results, strict=True):
        assert r.x is not None  # an optimal subproblem always has its rows
        z[xs] = r.x.reshape(xs.size, k)
    return z


def closure(instance: Instance, z: np.ndarray) -> np.ndarray:
    """Make an assembled (N, K) matrix exactly eps-mDP with the least added mass we know how to add:
    :func:`mdp_core.solvers.mechanisms.smooth_to_mdp` (every column raised to its smallest conic majorant
    z'_ik = max_j z_jk exp(-eps D_ij), rows renormalised, repeated) and then
    :func:`mdp_core.solvers.verify.repair` for whatever tolerance-level violation is left."""
    z, _ = smooth_to_mdp(instance, np.maximum(z, 0.0))
    return repair(instance, z)[0]


def _relax_small(const: float, coef: np.ndarray) -> tuple[float, np.ndarray]:
    """Drop |coef| < 1e-11 max|coef| from a lower-bounding cut const + coef . z_Y, keeping it valid
    for z_Y in [0, 1]: a dropped negative term a z is replaced by its minimum a (positive terms by 0)."""
    big = float(np.abs(coef).max(initial=0.0))
    small = (np.abs(coef) < 1e-11 * big) & (coef != 0)
    if not small.any():
        return const, coef
    const += float(np.minimum(coef[small], 0.0).sum())
    coef = coef.copy()
    coef[small] = 0.0
    return const, coef


def _cut_matrix(rows: list[tuple[np.ndarray, np.ndarray]], n_cols: int) -> sp.csr_matrix:
    """CSR matrix from (column ids, values) per row."""
    indptr = np.r_[0, np.cumsum([len(c) for c, _ in rows])]
    return sp.csr_matrix(
        (np.concatenate([v for _, v in rows]), np.concatenate([c for c, _ in rows]), indptr), shape=(len(rows), n_cols)
    )


# ============================================================================ the method
@dataclass
class _Problem:
    """What stays fixed during a run: the decomposition, the scaled costs, the master model, the workers."""

    instance: Instance
    params: BendersOptions
    options: SolverOptions
    t0: float
    weighted: np.ndarray  # (N, K) p_i c_ik, instance unit
    scale: float
    c: np.ndarray  # (N, K) weighted / scale
    dec: Decomposition
    subs: list[tuple[SubSpec, np.ndarray]]  # (spec, master columns of its z_{Y_l})
    ex: Executor
    master: Any = None  # the live HiGHS master model
    n_cols: int = 0
    n_initial: int = 0  # Property 3.2 rows
    master_rows: int = 0  # rows of the master as built (before any cut)
    wlb: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (M',) lower bounds of the w_l
    leq: Any = None  # CSR: the master's "<= 0" rows (privacy, Property 3.2) over its columns
    leq_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their row numbers
    cuts: list[sp.csr_matrix] = field(default_factory=list)  # optimality cuts, one block per round (rows
    #                                                            master_rows, ... in the order added)
    cut_lo: np.ndarray = field(default_factory=lambda: np.zeros(0))  # their lower bounds
    cut_sub: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their subset (w column)
    cut_w: np.ndarray = field(default_factory=lambda: np.zeros(0))  # their w coefficient (1 / norm)

    @property
    def nyk(self) -> int:
        return self.dec.ys.size * self.instance.n_outputs

    def remaining(self) -> float:
        return self.options.time_limit - (time.perf_counter() - self.t0)

    def deadline(self) -> float:
        """The run's end as a wall-clock time (what subproblem requests carry)."""
        return time.time() + self.remaining()


@dataclass
class _State:
    """What changes: bounds, incumbent, penalty, stabilisation centre, counters, trace."""

    rho: float
    core: np.ndarray  # stabilisation centre (nY*K,), starts at the uniform rows (strictly feasible)
    master_rows: int
    lb: float = -np.inf
    ub: float = np.inf
    best_z: np.ndarray | None = None
    seed_ub: float | None = None  # JSON-friendly when the seed is off
    status: Status = Status.ITERATION_LIMIT
    stop_reason: str | None = None
    it: int = 0
    n_opt: int = 0
    n_rho: int = 0
    heur_improved: bool = False
    last_report: float = -np.inf
    trace: list[dict[str, Any]] = field(default_factory=list)

    def offer(self, cost: float, z: np.ndarray) -> None:
        """A feasible mechanism of ``cost``: keep it if it is the best so far."""
        if cost < self.ub:
            self.ub, self.best_z = cost, z


@dataclass
class _Round:
    """One iteration's work: the master point, the cuts found, the subproblem times."""

    zy: np.ndarray
    w: np.ndarray
    master_seconds: float
    cuts: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    cut_lo: list[float] = field(default_factory=list)
    sub_secs: list[float] = field(default_factory=list)
    slack: float = 0.0
    penalised: int = 0
    heur_ub: float = np.nan
    n_regular: int = 0  # violated cuts from the separation points (0: none, or not separated)


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: BendersOptions
) -> RawSolution:
    """Solve the PMO by Benders decomposition (module docstring); the "benders" entry of
    :data:`mdp_core.solvers.solve.METHODS`.

    Returns a RawSolution with z (N, K) the best feasible assembled solution, lower_bound (instance
    unit), status optimal / time_limit / iteration_limit / feasible (stalled), trace (one row per
    iteration).
    """
    p, t_part, stats = _setup(instance, options, params)
    try:
        s = _start(p)
        while s.it < params.max_iterations and _iteration(p, s, progress):
            control.check(f"benders after iteration {s.it}")
    finally:
        p.ex.close()
    if s.best_z is None:
        raise SolverError(f"Benders stopped ({s.status}) before its first complete iteration; no solution to return")
    extra = {
        "partition": stats,
        "partition_seconds": round(t_part, 3),
        "lower_bound": float(s.lb) if np.isfinite(s.lb) else None,  # solve.json is strict JSON
        "upper_bound": float(s.ub),
        "seed_upper_bound": s.seed_ub,
        "gap": float(s.ub - s.lb) if np.isfinite(s.lb) else None,
        "optimality_cuts": s.n_opt,
        "rho_final": s.rho,
        "rho_increases": s.n_rho,
        "initial_cuts": p.n_initial,
        "master_rows": s.master_rows,
        "subproblems": len(p.subs),
        "executor": getattr(p.ex, "name", type(p.ex).__name__),
        "stop_reason": s.stop_reason or s.status.value,
    }
    return RawSolution(s.best_z, s.status, float(s.lb), s.it, extra, pd.DataFrame(s.trace, columns=_TRACE_COLUMNS))


def _setup(instance: Instance, options: SolverOptions, params: BendersOptions) -> tuple[_Problem, float, dict]:
    """Partition, decompose, start the workers (non-blocking: they build while the master is built)."""
    t0 = time.perf_counter()
    part = (
        from_labels(instance, params.labels)
        if params.labels is not None
        else partition(instance, params.partition, params.n_subsets, params.seed)
    )
    t_part = time.perf_counter() - t0
    stats = balance_stats(instance, part)
    weighted = instance.prior[:, None] * instance.costs
    c, scale = highs.scale_costs(weighted)
    dec = decompose(instance, part)
    subs = sub_specs(instance, dec, c)
    ex = make_executor(params.executor, sum(sp_.c.shape[0] for sp_, _ in subs), len(subs), params.scheduler)
    if subs:
        specs = [sp_ for sp_, _ in subs]
        highs.start_workers(ex, SubWorker, specs, options, [s.c.shape[0] + s.a_priv.nnz for s in specs])
    return _Problem(instance, params, options, t0, weighted, scale, c, dec, subs, ex), t_part, stats


def _start(p: _Problem) -> _State:
    """Build the master model and the initial state (with the seed incumbent, if the heuristic is on)."""
    _build_master(p)
    k = p.instance.n_outputs
    s = _State(rho=float(p.params.rho0), core=np.full(p.nyk, 1.0 / k), master_rows=p.master_rows)
    if p.params.heuristic:  # seed incumbent: every record's cheapest output, closed under the cone
        z0 = np.zeros_like(p.weighted)
        z0[np.arange(z0.shape[0]), p.weighted.argmin(axis=1)] = 1.0
        z0 = closure(p.instance, z0)
        s.seed_ub = float(np.sum(p.weighted * z0))
        s.ub, s.best_z = s.seed_ub, z0
    return s


def _build_master(p: _Problem) -> None:
    """The master LP over (z_Y, w) (module docstring), optional Property 3.2 rows."""
    inst, dec, k = p.instance, p.dec, p.instance.n_outputs
    ny, n_w = dec.ys.size, len(p.subs)
    e, d = inst.edges, inst.distances
    bb = dec.part.boundary[e[:, 0]] & dec.part.boundary[e[:, 1]]
    p.n_cols = ny * k + n_w
    pairs = pr.pairs(e[bb], d[bb], inst.epsilon)
    ei, ki = np.repeat(np.arange(pairs.size), k), np.tile(np.arange(k), pairs.size)
    priv = pr.rows(pairs, ei, ki, np.where(dec.ypos >= 0, dec.ypos * k, -1), p.n_cols)  # balanced
    n_priv = priv.shape[0]
    unit = sp.csr_matrix((np.ones(ny * k), np.arange(ny * k), np.arange(ny + 1) * k), shape=(ny, p.n_cols))
    a = sp.vstack([priv, unit]).tocsc()
    wlb = np.array([p.c[xs].min(axis=1).sum() for _, xs, _ in dec.subs])
    p.wlb = wlb
    model = LpModel(
        c=np.r_[p.c[dec.ys].ravel(), np.ones(n_w)],
        a=a,
        row_lower=np.r_[np.full(n_priv, -INF), np.ones(ny)],
        row_upper=np.r_[np.zeros(n_priv), np.ones(ny)],
        col_lower=np.r_[np.zeros(ny * k), wlb],
        col_upper=np.full(p.n_cols, INF),
    )
    p.master = highs.new_highs(p.options)
    # Devex pricing: the default dual steepest-edge weights are recomputed for every row after each
    # addRows, which made master re-solves ~10x slower (measured: 14 s vs 1.5 s on an 80-record grid).
    highs.set_options(p.master, simplex_dual_edge_weight_strategy=1)
    highs.pass_model(p.master, model)
    p32 = sp.csr_matrix((0, p.n_cols))
    if p.params.initial_cuts and ny:
        p32 = property32_rows(inst, dec, p.params.initial_cut_cap, p.n_cols)
        p.n_initial = m = p32.shape[0]
        highs.add_rows(p.master, p32, np.full(m, -INF), np.zeros(m))
    p.master_rows = n_priv + ny + p.n_initial
    # the master's "<= 0" rows (privacy, then Property 3.2) and their row numbers, for its bound
    p.leq = sp.vstack([priv, p32]).tocsr()
    p.leq_rows = np.r_[np.arange(n_priv), n_priv + ny + np.arange(p.n_initial)]


def _iteration(p: _Problem, s: _State, progress: Callable[[str], None] | None) -> bool:
    """One Benders iteration: master, heuristic, separation, cuts, stopping test. False = stop."""
    rnd = _solve_master(p, s)
    if rnd is None:
        return False
    prm = p.params
    closed = gap_closed(s.ub, s.lb, prm.gap_abs, prm.gap_rel)  # the incumbent already meets the bound
    if prm.heuristic and p.subs and not closed and _heuristic_due(p, s) and not _heuristic(p, s, rnd):
        s.status = Status.TIME_LIMIT
        return False
    if not closed and not _separate(p, s, rnd):
        s.status = Status.TIME_LIMIT
        return False
    _add_cuts(p, s, rnd)
    _record(p, s, rnd, progress)
    return not _stop(p, s, rnd)


def _solve_master(p: _Problem, s: _State) -> _Round | None:
    """Solve the master; update LB. None (status set) when out of time or the master fails."""
    remaining = p.remaining()
    if remaining <= 0:
        s.status = Status.TIME_LIMIT
        return None
    highs.set_time_limit(p.master, remaining)
    ms = _run(p.master, want_duals=True)  # the master is feasible and bounded: other statuses are numerical trouble
    if ms.status != Status.OPTIMAL:
        if ms.status == Status.TIME_LIMIT:
            s.status = Status.TIME_LIMIT
            return None
        if s.best_z is None:
            raise SolverError(f"Benders master: HiGHS status {ms.describe()} at iteration {s.it + 1}")
        s.status, s.stop_reason = Status.FEASIBLE, f"master {ms.describe()} at iteration {s.it + 1}"
        return None
    s.it += 1
    if ms.row_dual.size:  # HiGHS's objective is not trusted (it was off with e^30 rows): its duals' bound
        s.lb = max(s.lb, master_bound(p, ms.row_dual))
    return _Round(np.maximum(ms.x[: p.nyk], 0.0), ms.x[p.nyk :], ms.seconds)


def master_bound(p: _Problem, row_dual: np.ndarray) -> float:
    """The master's Lagrangian bound on the PMO optimum (instance unit) from its row duals (module
    docstring): lam = max(-y, 0) on the "<= 0" rows, nu = max(y, 0) on the cuts, scaled per subset l
    so that s_l = sum of nu over l's cuts (times their w_l coefficient) is at most 1; then

        LB = nu . lo + sum_l (1 - s_l) wlb_l + sum_y min_k (c_Y + A^T lam - C_Y^T nu)_yk

    (:func:`mdp_core.solvers.privacy_rows.min_sum`), undone for capped rows by
    :func:`mdp_core.solvers.privacy_rows.uncap` when the instance has any."""
    y = np.asarray(row_dual, dtype=np.float64)
    terms = np.asarray(p.leq.T @ np.maximum(-y[p.leq_rows], 0.0)).ravel()
    bound, s_l = 0.0, np.zeros(p.wlb.size)
    if p.cut_lo.size:
        nu = np.maximum(y[p.master_rows : p.master_rows + p.cut_lo.size], 0.0)
        nu /= np.maximum(np.bincount(p.cut_sub, nu * p.cut_w, p.wlb.size), 1.0)[p.cut_sub]
        s_l = np.bincount(p.cut_sub, nu * p.cut_w, p.wlb.size).astype(np.float64)
        start = 0
        for block in p.cuts:  # no copy of the (growing) cut matrix
            terms -= np.asarray(block.T @ nu[start : start + block.shape[0]]).ravel()
            start += block.shape[0]
        bound += float(nu @ p.cut_lo)
    bound += float(np.maximum(1.0 - s_l, 0.0) @ p.wlb)
    bound += pr.min_sum(p.c[p.dec.ys], terms[: p.nyk])
    if np.any(p.instance.epsilon * p.instance.distances > MAX_LOG_RATIO):
        bound = pr.uncap(bound, p.c)
    return bound * p.scale


def _heuristic_due(p: _Problem, s: _State) -> bool:
    """Iteration 2, iteration 1 when the seed is far above the bound (eps = 2 grids), after every
    iteration where it improved UB, and every HEURISTIC_EVERY iterations."""
    far = s.ub - s.lb > PRICED_AT_ONCE_GAP * abs(s.ub)
    return s.it == 2 or (far and s.it == 1) or s.heur_improved or s.it % HEURISTIC_EVERY == 0


def _solve_subs(p: _Problem, s: _State, point: np.ndarray, prices: np.ndarray | None = None) -> list[SubResult] | None:
    """Every subproblem at boundary point ``point`` (nY*K,); None if one ran out of time."""
    deadline = p.deadline()
    reqs = [SubRequest(point[cols], deadline, s.rho, None if prices is None else prices[cols]) for _, cols in p.subs]
    results = p.ex.solve(reqs) if p.subs else []
    return None if any(r.status == Status.TIME_LIMIT for r in results) else results


def _heuristic(p: _Problem, s: _State, rnd: _Round) -> bool:
    """The priced closure heuristic at the master's point (module docstring). False = out of time."""
    ny, k = p.dec.ys.size, p.instance.n_outputs
    prices = lift_prices(p.c[p.dec.ys], rnd.zy.reshape(ny, k)).ravel()
    results = _solve_subs(p, s, rnd.zy, prices)
    if results is None:
        return False
    rnd.sub_secs += [r.seconds for r in results]
    _collect_cuts(p, rnd, results)  # Lagrangian cuts of the priced model are valid too (its slack costs <= rho)
    z = closure(p.instance, _assemble(p.dec.ys, rnd.zy, p.dec.subs, results, p.weighted.shape))
    rnd.heur_ub = float(np.sum(p.weighted * z))
    s.heur_improved = rnd.heur_ub < s.ub - max(p.params.gap_abs, p.params.gap_rel * abs(rnd.heur_ub))
    s.offer(rnd.heur_ub, z)
    return True


def _separate(p: _Problem, s: _State, rnd: _Round) -> bool:
    """Subproblems at the stabilised point, then (if that gives no violated cut) at zy itself; each
    assembled solution is an upper-bound candidate. False = out of time."""
    a = p.params.stabilise
    points = [a * s.core + (1.0 - a) * rnd.zy, rnd.zy] if a > 0 else [rnd.zy]
    for point in points:
        results = _solve_subs(p, s, point)
        if results is None:
            return False
        rnd.sub_secs += [r.seconds for r in results]
        rnd.n_regular = _collect_cuts(p, rnd, results)
        z = _assemble(p.dec.ys, point, p.dec.subs, results, p.weighted.shape)
        rnd.slack = float(sum(r.slack for r in results))
        rnd.penalised = int(sum(r.slack > SLACK_TOL for r in results))
        if rnd.slack > SLACK_TOL:  # a subproblem used slack: repair the assembled solution
            z, _ = repair(p.instance, z)
        s.offer(float(np.sum(p.weighted * z)), z)
        if rnd.n_regular:
            break
    return True


def _collect_cuts(p: _Problem, rnd: _Round, results: Sequence[SubResult]) -> int:
    """Append the cuts violated at the master's (zy, w) to ``rnd``; returns how many."""
    before = len(rnd.cuts)
    nyk = p.nyk
    for (spec, cols), r in zip(p.subs, results, strict=True):
        if r.cut_const + r.cut_coef @ rnd.zy[cols] > rnd.w[spec.index] + CUT_TOL * max(1.0, abs(r.value)):
            const, coef = _relax_small(r.cut_const, r.cut_coef)
            nz = np.flatnonzero(coef)
            norm = max(1.0, float(np.abs(coef).max(initial=0.0)))
            rnd.cuts.append((np.r_[cols[nz], nyk + spec.index], np.r_[-coef[nz], 1.0] / norm))
            rnd.cut_lo.append(const / norm)
    return len(rnd.cuts) - before


def _add_cuts(p: _Problem, s: _State, rnd: _Round) -> None:
    """Move the stabilisation centre and append the round's cuts to the master."""
    s.core = 0.5 * s.core + 0.5 * rnd.zy
    s.n_opt += len(rnd.cuts)
    if rnd.cuts:
        cuts, lo = _cut_matrix(rnd.cuts, p.n_cols), np.array(rnd.cut_lo)
        highs.add_rows(p.master, cuts, lo, np.full(lo.size, INF))
        wpart = cuts[:, p.nyk :].tocsr()  # one w entry per cut: its subset, coefficient 1 / norm
        p.cuts.append(cuts)
        p.cut_lo, p.cut_sub = np.r_[p.cut_lo, lo], np.r_[p.cut_sub, wpart.indices[wpart.indptr[:-1]]]
        p.cut_w = np.r_[p.cut_w, wpart.data[wpart.indptr[:-1]]]
        s.master_rows += len(rnd.cuts)


def _record(p: _Problem, s: _State, rnd: _Round, progress: Callable[[str], None] | None) -> None:
    gap = s.ub - s.lb
    s.trace.append(
        {
            "iteration": s.it,
            "lower_bound": s.lb,
            "upper_bound": s.ub,
            "gap": gap,
            "optimality_cuts": len(rnd.cuts),
            "penalised_subproblems": rnd.penalised,
            "slack": rnd.slack,
            "heuristic_upper_bound": rnd.heur_ub,
            "rho": s.rho,
            "master_seconds": rnd.master_seconds,
            "sub_max_seconds": max(rnd.sub_secs, default=0.0),
            "sub_total_seconds": float(sum(rnd.sub_secs)),
            "master_rows": s.master_rows,
            "elapsed_seconds": time.perf_counter() - p.t0,
        }
    )
    now = time.perf_counter()
    line = control.Progress(
        "benders",
        f"iteration {s.it}",
        lower=s.lb,
        upper=s.ub,
        gap_abs=p.params.gap_abs,
        gap_rel=p.params.gap_rel,
        elapsed=now - p.t0,
        time_limit=p.options.time_limit,
        detail=f"+{len(rnd.cuts)} cuts, slack {rnd.slack:.2g}, rho {s.rho:g}",
    )
    control.current().note(line)  # every iteration: the heartbeat and a stop message show the latest
    if progress and now - s.last_report >= 2.0:
        progress(line)
        s.last_report = now


def _stop(p: _Problem, s: _State, rnd: _Round) -> bool:
    """The stopping tests (module docstring); raises rho when the penalised optimum still uses slack."""
    prm = p.params
    if gap_closed(s.ub, s.lb, prm.gap_abs, prm.gap_rel):
        s.status = Status.OPTIMAL
        return True
    gap, n_stall = s.ub - s.lb, prm.stall_iterations
    if n_stall and len(s.trace) > n_stall and gap <= STALL_GAP * max(abs(s.ub), 1e-300):
        old = s.trace[-1 - n_stall]
        tol = prm.gap_rel * max(abs(s.ub), 1e-300)
        if old["upper_bound"] - s.ub <= tol and s.lb - old["lower_bound"] <= tol:
            s.status, s.stop_reason = Status.FEASIBLE, "stalled"  # numerical floor of the cuts
            return True
    if not rnd.n_regular:  # the penalised problem is solved at zy
        if rnd.slack <= SLACK_TOL:
            s.status = Status.OPTIMAL  # what is left of the gap is solver tolerance
            return True
        s.rho *= 10.0  # its solution still uses slack: raise the penalty (old cuts stay valid)
        s.n_rho += 1
    return False
