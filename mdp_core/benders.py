"""Benders decomposition of the PMO LP over a record partition (Qiu 2024, section 3.2), with
correct bounds.

Partition the records into subsets R_l = X_l (internal) + Y_l (boundary), see :mod:`partition`.
Internal records only have neighbours in their own subset, so with z_Y (all boundary rows) fixed
the LP separates into one subproblem per subset over z_{X_l}.

Master (one HiGHS model, kept alive; cuts are appended with ``addRows``):

    min  c_Y z_Y + sum_l w_l
    s.t. privacy rows between two boundary records; unit measure of every boundary row;
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

Why elastic instead of Farkas feasibility cuts: with eps * eta = 20 (the paper's grid) whether a
subproblem is feasible depends on master values at the 1e-10 level (z_xk <= e^20 z_yk), HiGHS
answered "infeasible", "unknown" and "optimal" for the same subproblem depending on presolve, and
with Farkas cuts an 80-record grid made no progress in 60 iterations (LB flat, no UB). The
elastic form never fails, and it is exact: if rho exceeds the largest privacy dual (measured
<= 0.06 in scaled units on the grids; rho starts at ``rho0`` = 4), every optimum of the penalised
problem has s = 0. If Benders converges with s > 0, rho is multiplied by 10 (old cuts stay valid
because phi_rho only grows with rho).

Cuts are *Lagrangian* cuts, valid for any multipliers y of the privacy rows with -rho <= y <= 0
on the slack rows and y <= 0 elsewhere (unit-measure rows are kept as simplices): for every z_Y,

    phi_l(z_Y) >= phi_rho,l(z_Y) >= sum_{x in X_l} min_k (c_X - A^T y)_xk + y . T z_Y,

because for feasible (z_X, s), y.(A z_X - s - T z_Y) >= 0 and rho s + y.s >= 0. With y = HiGHS's
row duals clipped into that box this is the usual optimality cut, but its validity does not
depend on the solver's dual accuracy, so the master optimum is a true lower bound. (Using
HiGHS's reduced costs instead gave a "lower bound" 3.7e-7 above the optimum; the safe version
loses about 2e-6 of tightness on e^20-conditioned instances, which is where the gap stalls.)
Right-hand sides are capped at 1 (z_xk <= g z_yk with g z_yk > 1 is implied by the unit measure),
which keeps e^20 bounds out of HiGHS; with y <= 0 the cut above stays valid.

Stabilisation (in-out separation): the subproblems are first solved at the point
0.5 * core + 0.5 * z_Y, core starting at the uniform rows (strictly feasible) and updated as
core <- (core + z_Y) / 2; only if that yields no cut violated at the master's (z_Y, w) are they
solved at z_Y itself. Without it the degenerate master wandered (UB stuck at +16 % after 76
iterations on the 80-record grid); with it the same run reaches LB = LP optimum in ~20 iterations.

Primal heuristic (the upper bound). Plain Benders found good lower bounds fast but its upper bound
stalled (grid 10x20, eps = 10/km, M = 2: LB at the optimum by iteration 2, UB still 2 % above it
after 150 iterations; grid 40x25: 5e-4 above after 300 s). The reason: the master's vertex
solutions put z_yk = 0 on most outputs k of a boundary record y; with z_xk <= e^{eps d} z_yk an
internal neighbour x then cannot use output k at all, so the subproblem either pays slack or moves
x's mass to worse outputs (assembled cost 0.46 against an optimum of 0.287), and each cut only
fixes a few of the N_Y * K entries. The optimal mechanism instead carries tiny masses
(~e^{-eps d} z_xk) in those entries, which cost almost nothing. Two heuristics use this:

* the *seed* (before iteration 1): every record's cheapest output, one-hot, closed under the cone
  by :func:`closure`. On the eps = 10/km grids 10x20, 20x25 and 40x25 this is the LP optimum to
  3e-9, 7e-10 and 3e-10 (relative) in 0.05-0.6 s; at eps = 2/km it is 2.8 % above (grid 10x20).
  When the master's bound meets it, the run stops without solving subproblems in that iteration.
* the *priced* heuristic (from iteration 2): at the master's point z_Y it solves a copy of each
  subproblem whose slack on a row z_xk <= g z_yk costs what raising z_yk by s / g would cost the
  boundary row (:func:`lift_prices`: c_yk - c_y . z_y, divided by g, floored at ``PRICE_FLOOR``),
  assembles (z_Y, z_X) and makes it exactly eps-mDP with :func:`closure` (each column raised to
  its conic majorant max_j z_jk exp(-eps D_ij), rows renormalised, then
  :func:`mdp_core.verify.repair`). Measured at iteration 1 (before the seed existed): the LP
  optimum to 1e-9 on the eps = 10/km grids 10x20 and 20x25; 0.7 % above it at eps = 2/km (grid
  10x20), where the seed is 2.8 % above. The priced models are separate HiGHS models (kept
  warm); their Lagrangian cuts are valid (slack costs <= rho) and are added too. It runs at
  iteration 2, after every iteration where it improved UB, and every ``HEURISTIC_EVERY``
  iterations (trace column ``heuristic_upper_bound``); at iteration 1, whose cold subproblem
  solves it doubles, only when the seed is more than ``PRICED_AT_ONCE_GAP`` (relative) above the
  first master bound (eps = 10 grids: 2e-4 and less; eps = 2 grid 10x20: 40 %).

``heuristic=False`` turns both off (extra ``seed_upper_bound`` is then None).

Bounds: LB = master optimum (a relaxation). UB = cost of the best full solution: the heuristic's,
or the one assembled from the separation point's master and subproblem rows, made exactly
feasible by :func:`mdp_core.verify.repair` when a subproblem used slack. Stopping: UB - LB <=
``gap_abs`` or <= ``gap_rel`` * |UB| ("optimal"), ``max_iterations`` ("iteration_limit"), the
options' time limit for the whole run ("time_limit"),
or, once the relative gap is below 1e-4, no bound moving by more than gap_rel in
``stall_iterations`` iterations ("feasible").
Every iteration is a row of ``RawSolution.trace``.

Subproblems of an iteration run through an executor: :class:`SerialExecutor`, or
:class:`ProcessExecutor` (persistent worker processes, each owning a fixed group of subproblem
models; only the boundary values z_{Y_l} a subproblem reads are sent each iteration, and the cut and
the subproblem rows come back). ``executor="auto"`` uses processes only when there are at least 2
CPUs, at least 2 subproblems and at least ``PROCESS_MIN_VARS`` subproblem variables in total:
below that, start-up (measured: ~3.5 s for two spawned workers importing numpy/scipy/pandas/
highspy and building their models) costs more than it saves. At 42,000 variables (grid 20x25,
M = 2: two subproblems of ~210 records x K = 100) a cold subproblem solve takes ~4 s and the pool
cut the whole run from 19.4 s (serial) to 15.0 s.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import highspy
import numpy as np
import pandas as pd
import scipy.sparse as sp

from mdp_core import lp
from mdp_core.errors import InputError, SolverError
from mdp_core.graph import path_distances
from mdp_core.instance import Instance
from mdp_core.mechanisms import smooth_to_mdp
from mdp_core.partition import Partition, balance_stats, from_labels, partition
from mdp_core.verify import repair

SLACK_TOL = 1e-9  # total slack (probability units) below which an assembled solution counts as feasible
RHO0 = 4.0  # initial slack penalty (scaled costs: max p_i c_ik = 1)
STALL_GAP = 1e-4  # stall detection only applies once the relative gap is this small
CUT_TOL = 1e-9  # relative violation of w_l below which no optimality cut is added
PRICE_FLOOR = 1e-10  # smallest slack cost in the heuristic's priced subproblems (scaled)
PRICED_AT_ONCE_GAP = 1e-3  # seed vs first master bound (relative) above which the priced heuristic runs at once
HEURISTIC_EVERY = 10  # iterations between primal-heuristic runs once it stops improving the UB
PROCESS_MIN_VARS = 20_000  # total subproblem variables (internal records x K) before a process pool pays off
INF = highspy.kHighsInf
_TRACE_COLUMNS = [
    "iteration", "lower_bound", "upper_bound", "gap", "optimality_cuts", "penalised_subproblems",
    "slack", "heuristic_upper_bound", "rho", "master_seconds", "sub_max_seconds", "sub_total_seconds",
    "master_rows", "elapsed_seconds",
]


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
    status: str  # "optimal" | "time_limit"
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

    def __init__(self, spec: SubSpec, options: lp.SolverOptions) -> None:
        self.spec = spec
        p, nx = spec.a_priv.shape[0], spec.n_x * spec.k
        self.dep32 = spec.dep.astype(np.int32)
        nd = self.dep32.shape[0]
        slack = sp.csr_matrix((-np.ones(nd), (self.dep32, np.arange(nd))), shape=(p, nd))
        unit = sp.csr_matrix((np.ones(nx), np.arange(nx), np.arange(spec.n_x + 1) * spec.k), shape=(spec.n_x, nx))
        a = sp.vstack([sp.hstack([spec.a_priv, slack]), sp.hstack([unit, sp.csr_matrix((spec.n_x, nd))])])
        model = lp.LpModel(
            c=np.r_[spec.c, np.zeros(nd)],
            a=a.tocsc(),
            row_lower=np.r_[np.full(p, -INF), np.ones(spec.n_x)],
            row_upper=np.r_[np.zeros(p), np.ones(spec.n_x)],
            col_lower=np.zeros(nx + nd),
            col_upper=np.full(nx + nd, INF),
        )
        self.options = options
        self.h = lp.new_highs(options)
        lp.pass_model(self.h, model)
        self.a_t = spec.a_priv.T.tocsr()
        self.lower = np.full(nd, -INF)
        self.slack_cols = (nx + np.arange(nd)).astype(np.int32)
        t = spec.t.tocsr()  # each z_Y-dependent row reads exactly one boundary entry: U_r = g_r z_{y,k}
        first = t.indptr[self.dep32]
        self.dep_col, self.dep_g = t.indices[first], t.data[first]
        self.rho = 0.0

    def _set_rho(self, rho: float) -> None:
        if rho != self.rho and self.slack_cols.size:
            self.h.changeColsCost(self.slack_cols.size, self.slack_cols, np.full(self.slack_cols.size, rho))
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
            self.h.changeColsCost(self.slack_cols.size, self.slack_cols, floor)
            self.rho = np.nan  # slack costs no longer uniform
        # U = T z_Y, capped at 1: a row with a positive right-hand side reads z_xk <= g z_yk and
        # z_xk <= 1 holds anyway (unit measure), so the cap leaves the feasible set unchanged while
        # keeping bounds like e^20 out of HiGHS. Cuts stay valid: with y <= 0, y.T z_Y <= y.U.
        u = np.minimum(np.asarray(spec.t @ zy).ravel(), 1.0)
        self.h.changeRowsBounds(self.dep32.shape[0], self.dep32, self.lower, u[self.dep32])
        _time_limit(self.h, time_limit)
        sol = lp.run(self.h, want_duals=True)
        if sol.status not in ("optimal", "time_limit"):  # impossible for this always-feasible,
            sol = _retry_cold(self.h, self.options, want_duals=True)  # bounded LP: numerical trouble
        if sol.status == "time_limit":
            return SubResult(spec.index, "time_limit", np.nan, np.nan, None, 0.0, np.zeros(0), sol.seconds, sol.iterations)
        if sol.status != "optimal":
            raise SolverError(f"subproblem {spec.index}: HiGHS status {sol.status}")
        p, nx = spec.a_priv.shape[0], spec.n_x * spec.k
        y = np.minimum(sol.row_dual[:p], 0.0)
        y[self.dep32] = np.maximum(y[self.dep32], -floor)  # dual feasibility of the slack columns
        r = (spec.c - self.a_t @ y).reshape(spec.n_x, spec.k)
        const, coef = float(r.min(axis=1).sum()), np.asarray(spec.t.T @ y).ravel()
        x = sol.x[:nx]
        s = np.maximum(sol.x[nx:], 0.0)
        slack = float(s.sum())
        value = float(spec.c @ x) + float(np.sum(floor * s))
        return SubResult(spec.index, "optimal", value, slack, x, const, coef, sol.seconds, sol.iterations)


def _time_limit(h: highspy.Highs, seconds: float) -> None:
    """Allow ``seconds`` more for the next run. HiGHS compares ``time_limit`` with the object's
    cumulative run time (``getRunTime``), not the time of the current run."""
    limit = h.getRunTime() + max(seconds, 1e-3) if np.isfinite(seconds) else INF
    h.setOptionValue("time_limit", float(limit))


def _retry_cold(h: highspy.Highs, options: lp.SolverOptions, want_duals: bool = False) -> lp.LpSolution:
    """Re-solve from scratch without presolve. Used when HiGHS reports a status that is impossible
    for the model (seen: "unbounded" from presolve on an elastic subproblem with e^20 coefficients,
    "unknown" after a warm start); presolve off gave "optimal" in every such case we met."""
    h.clearSolver()
    h.setOptionValue("presolve", "off")
    try:
        return lp.run(h, want_duals=want_duals)
    finally:
        h.setOptionValue("presolve", "on" if options.presolve else "off")


class Executor(Protocol):
    """Runs the subproblems of one iteration. ``zs[i]`` is the z_{Y_l} vector of ``specs[i]``."""

    def start(self, specs: Sequence[SubSpec], options: lp.SolverOptions) -> None: ...

    def solve(
        self, zs: Sequence[np.ndarray], time_limit: float, rho: float, prices: Sequence[np.ndarray] | None = None
    ) -> list[SubResult]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """All subproblem models in this process, solved one after the other."""

    name = "serial"

    def start(self, specs: Sequence[SubSpec], options: lp.SolverOptions) -> None:
        self.specs, self.options = list(specs), options
        self.solvers = [SubSolver(s, options) for s in specs]
        self.pricers: list[SubSolver] = []  # the heuristic's models, built on first use

    def solve(
        self, zs: Sequence[np.ndarray], time_limit: float, rho: float, prices: Sequence[np.ndarray] | None = None
    ) -> list[SubResult]:
        if prices is not None and not self.pricers:
            self.pricers = [SubSolver(s, self.options) for s in self.specs]
        models = self.solvers if prices is None else self.pricers
        t0, out = time.perf_counter(), []
        for i, (s, z) in enumerate(zip(models, zs)):
            out.append(s.solve(z, time_limit - (time.perf_counter() - t0), rho, None if prices is None else prices[i]))
        return out

    def close(self) -> None:
        self.solvers, self.pricers = [], []


def _worker(conn: Any, specs: list[SubSpec], options: lp.SolverOptions) -> None:
    """Worker loop: build the models once, then answer (zs, time_limit, rho, prices) messages until None."""
    try:
        ex = SerialExecutor()
        ex.start(specs, options)
        conn.send(("ready", None))
        while True:
            msg = conn.recv()
            if msg is None:
                break
            try:
                conn.send(("ok", ex.solve(*msg)))
            except Exception as e:  # report, keep the worker alive for a clean shutdown
                conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


class ProcessExecutor:
    """Persistent worker processes (spawn), each owning a fixed, size-balanced group of subproblems.

    Per iteration only the z_{Y_l} vectors travel to the workers; each worker returns its cuts and
    rows. Workers use single-threaded HiGHS.
    """

    name = "process"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, (os.cpu_count() or 1))

    def start(self, specs: Sequence[SubSpec], options: lp.SolverOptions) -> None:
        ctx = mp.get_context("spawn")
        w = max(1, min(self.workers, len(specs)))
        sizes = np.array([s.c.shape[0] + s.a_priv.nnz for s in specs], dtype=float)
        groups: list[list[int]] = [[] for _ in range(w)]
        load = np.zeros(w)
        for i in np.argsort(-sizes, kind="stable"):  # longest-processing-time-first
            g = int(np.argmin(load))
            groups[g].append(int(i))
            load[g] += sizes[i]
        opts = lp.SolverOptions(**{**options.as_dict(), "threads": 1, "time_limit": float("inf")})
        self.groups, self.procs, self.conns = [g for g in groups if g], [], []
        for g in self.groups:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, [specs[i] for i in g], opts), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
        self.ready = False  # awaited at the first solve: start-up overlaps the caller's work

    def _await_ready(self) -> None:
        if not self.ready:
            for c in self.conns:
                tag, payload = c.recv()
                if tag != "ready":
                    raise SolverError(f"subproblem worker failed to start: {payload}")
            self.ready = True

    def solve(
        self, zs: Sequence[np.ndarray], time_limit: float, rho: float, prices: Sequence[np.ndarray] | None = None
    ) -> list[SubResult]:
        self._await_ready()
        for g, c in zip(self.groups, self.conns):
            c.send(([zs[i] for i in g], time_limit, rho, None if prices is None else [prices[i] for i in g]))
        out: list[SubResult | None] = [None] * len(zs)
        errors = []
        for g, c in zip(self.groups, self.conns):
            tag, payload = c.recv()
            if tag != "ok":
                errors.append(payload)
                continue
            for i, r in zip(g, payload):
                out[i] = r
        if errors:
            raise SolverError(f"subproblem worker error: {errors[0]}")
        return out  # type: ignore[return-value]

    def close(self) -> None:
        try:  # let workers finish starting before they are told to stop (no broken pipe on their side)
            if getattr(self, "conns", []):
                self._await_ready()
        except (SolverError, OSError, EOFError):
            pass
        for c in getattr(self, "conns", []):
            try:
                c.send(None)
                c.close()
            except (OSError, BrokenPipeError):
                pass
        for p in getattr(self, "procs", []):
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.procs, self.conns = [], []


def make_executor(executor: str | Executor, total_vars: int, n_subs: int) -> Executor:
    """"serial", "process", "auto" (see module docstring) or an object implementing :class:`Executor`."""
    if not isinstance(executor, str):
        return executor
    if executor == "auto":
        big = total_vars >= PROCESS_MIN_VARS and n_subs >= 2 and (os.cpu_count() or 1) >= 2
        executor = "process" if big else "serial"
    if executor == "serial":
        return SerialExecutor()
    if executor == "process":
        return ProcessExecutor()
    raise InputError(f"executor must be 'serial', 'process', 'auto' or an Executor object, got {executor!r}")


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
    for l in range(part.n_subsets):
        members = order[bounds[l] : bounds[l + 1]]
        xs = members[internal[members]]
        if xs.size:
            dec.subs.append((l, xs, members[part.boundary[members]]))
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
    for idx, (l, xs, _) in enumerate(dec.subs):
        sel = np.flatnonzero(touches & (e_lab == l))
        el, dl = e[sel], d[sel]
        ends = np.unique(el)
        yl = ends[dec.part.boundary[ends]]
        xmap = np.full(n, -1, dtype=np.int64)
        xmap[xs] = np.arange(xs.size) * k
        ymap = np.full(n, -1, dtype=np.int64)
        ymap[yl] = np.arange(yl.size) * k
        p = 2 * el.shape[0] * k
        ra, ca, va = lp.privacy_rows(el, dl, instance.epsilon, k, xmap, xmap)
        rt, ct, vt = lp.privacy_rows(el, dl, instance.epsilon, k, ymap, ymap)
        a_priv = sp.csr_matrix((va, (ra, ca)), shape=(p, xs.size * k))
        t = sp.csr_matrix((-vt, (rt, ct)), shape=(p, yl.size * k))
        spec = SubSpec(idx, c[xs].ravel().copy(), a_priv, t, np.unique(rt), int(xs.size), k)
        ycols = (dec.ypos[yl][:, None] * k + np.arange(k)[None, :]).ravel()
        out.append((spec, ycols))
    return out


def property32_rows(
    instance: Instance, dec: Decomposition, cap: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """COO (row, col, value) of the Property 3.2 rows e^{-eps D} z_yk - z_y'k <= 0 for non-adjacent
    boundary records y, y' of one subset, D = shortest path inside that subset, eps * D <= ``cap``.

    Rows are divided by e^{eps D} so coefficients lie in [e^{-cap}, 1] (HiGHS failed on raw e^27
    coefficients); pairs with eps * D > cap are left out (they are weak and badly scaled).
    Returns (rows, cols, values, n_rows) in master z_Y column numbering.
    """
    k, n = instance.n_outputs, instance.n_records
    e, d = instance.edges, instance.distances
    lab = dec.part.labels
    bb = dec.part.boundary[e[:, 0]] & dec.part.boundary[e[:, 1]]
    adjacent = e[bb, 0] * n + e[bb, 1]  # boundary-boundary neighbour pairs (already master rows)
    pa, pb, pw = [], [], []
    same = lab[e[:, 0]] == lab[e[:, 1]]
    for l, xs, yb in dec.subs:
        if yb.size < 2:
            continue
        members = np.r_[xs, yb]
        loc = np.full(n, -1, dtype=np.int64)
        loc[members] = np.arange(members.size)
        sel = same & (lab[e[:, 0]] == l)
        dist = path_distances(members.size, loc[e[sel]], d[sel], loc[yb])[:, loc[yb]]
        i, j = np.nonzero(np.isfinite(dist) & (dist > 0) & (instance.epsilon * dist <= cap))
        a, b = yb[i], yb[j]
        key = np.minimum(a, b) * n + np.maximum(a, b)
        keep = ~np.isin(key, adjacent)
        pa.append(a[keep])
        pb.append(b[keep])
        pw.append(dist[i, j][keep])
    if not pa or sum(x.size for x in pa) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 0
    a, b, w = np.concatenate(pa), np.concatenate(pb), np.concatenate(pw)
    ks = np.arange(k)
    m = a.size * k
    rows = np.arange(m)
    ca = (dec.ypos[a][:, None] * k + ks).ravel()
    cb = (dec.ypos[b][:, None] * k + ks).ravel()
    va = np.repeat(np.exp(-instance.epsilon * w), k)
    return np.r_[rows, rows], np.r_[ca, cb], np.r_[va, -np.ones(m)], m


def lift_prices(cy: np.ndarray, zy: np.ndarray) -> np.ndarray:
    """(nY, K) first-order cost (scaled) of raising boundary entry z_yk by one unit and renormalising
    row y: c_yk - c_y . z_y, clipped at 0. ``cy``: (nY, K) scaled costs; ``zy``: (nY, K) master rows."""
    return np.maximum(cy - (cy * zy).sum(axis=1, keepdims=True), 0.0)


def _assemble(
    n: int, k: int, ys: np.ndarray, zy: np.ndarray, subs: list[tuple[int, np.ndarray, np.ndarray]],
    results: Sequence[SubResult],
) -> np.ndarray:
    """(N, K) full matrix from the boundary rows ``zy`` ((nY*K,)) and the subproblems' internal rows."""
    z = np.zeros((n, k))
    z[ys] = zy.reshape(ys.size, k)
    for (_, xs, _), r in zip(subs, results):
        z[xs] = r.x.reshape(xs.size, k)
    return z


def closure(instance: Instance, z: np.ndarray) -> np.ndarray:
    """Make an assembled (N, K) matrix exactly eps-mDP with the least added mass we know how to add:
    :func:`mdp_core.mechanisms.smooth_to_mdp` (every column raised to its smallest conic majorant
    z'_ik = max_j z_jk exp(-eps D_ij), rows renormalised, repeated) and then
    :func:`mdp_core.verify.repair` for whatever tolerance-level violation is left."""
    z, _ = smooth_to_mdp(instance, np.maximum(z, 0.0))
    return repair(instance, z)[0]


def _csr_rows(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_rows: int, n_cols: int) -> sp.csr_matrix:
    m = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, n_cols))
    m.sum_duplicates()
    m.sort_indices()
    return m


def _add_rows(h: highspy.Highs, a: sp.csr_matrix, lower: np.ndarray, upper: np.ndarray) -> None:
    if a.shape[0] == 0:
        return
    h.addRows(
        int(a.shape[0]), lower.astype(np.float64), upper.astype(np.float64), int(a.nnz),
        a.indptr[:-1].astype(np.int32), a.indices.astype(np.int32), a.data.astype(np.float64),
    )


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
def method(
    instance: Instance,
    options: lp.SolverOptions | None = None,
    progress: Callable[[str], None] | None = None,
    partition: str = "kmdv",
    n_subsets: int = 25,
    seed: int = 0,
    labels: np.ndarray | None = None,
    gap_abs: float = 0.0,
    gap_rel: float = 1e-6,
    max_iterations: int = 1000,
    initial_cuts: bool = False,
    initial_cut_cap: float = 12.0,
    executor: str | Executor = "auto",
    rho0: float = RHO0,
    stabilise: float = 0.5,
    stall_iterations: int = 15,
    heuristic: bool = True,
    **_: Any,
) -> "RawSolution":
    """Solve the PMO by Benders decomposition; see the module docstring.

    Args:
        partition, n_subsets, seed: partitioner (``mdp_core.partition.PARTITIONERS``), M, seed;
            ignored when ``labels`` ((N,) int subset ids) is given.
        gap_abs: stop when UB - LB <= gap_abs (instance cost unit; the paper uses 0.01; 0 = off).
        gap_rel: stop when UB - LB <= gap_rel * |UB|.
        max_iterations: master solves.
        initial_cuts: add Property 3.2 rows between non-adjacent boundary records of a subset,
            only where eps * D <= ``initial_cut_cap`` (row coefficients >= e^-cap).
        executor: "auto", "serial", "process" or an :class:`Executor` object.
        rho0: initial slack penalty (scaled costs, max p_i c_ik = 1).
        stabilise: weight of the stabilisation centre in the separation point (0 = plain Benders).
        stall_iterations: stop ("feasible") when the relative gap is below ``STALL_GAP`` and neither
            bound moved by gap_rel in this many iterations (0 = never).
        heuristic: the seed incumbent and the priced closure heuristic (module docstring).
    Returns:
        RawSolution with z (N, K) the best feasible assembled solution, lower_bound (instance
        unit), status "optimal" / "time_limit" / "iteration_limit" / "feasible" (stalled), trace
        (one row per iteration).
    """
    from mdp_core.solve import RawSolution  # solve imports methods lazily; avoid a cycle

    options = options or lp.SolverOptions()
    if not gap_abs >= 0 or not gap_rel >= 0:
        raise InputError(f"gap_abs and gap_rel must be >= 0, got {gap_abs}, {gap_rel}")
    if int(max_iterations) != max_iterations or max_iterations < 1:
        raise InputError(f"max_iterations must be an integer >= 1, got {max_iterations}")
    t0 = time.perf_counter()
    n, k = instance.n_records, instance.n_outputs
    part = (
        from_labels(instance, labels) if labels is not None
        else _partition(instance, partition, n_subsets, seed)
    )
    t_part = time.perf_counter() - t0
    stats = balance_stats(instance, part)
    weighted = instance.prior[:, None] * instance.costs
    scale = float(np.max(np.abs(weighted))) or 1.0
    c = weighted / scale
    dec = decompose(instance, part)
    ny, ys = dec.ys.size, dec.ys
    subs = sub_specs(instance, dec, c)
    n_w = len(subs)

    # worker processes start now (non-blocking) and import / build while the master is built and solved
    total_vars = sum(s.c.shape[0] for s, _ in subs)
    ex = make_executor(executor, total_vars, n_w)
    ex_name = getattr(ex, "name", type(ex).__name__)
    if n_w:
        ex.start([s for s, _ in subs], options)

    try:
        # ---------------------------------------------------------------- master
        e, d = instance.edges, instance.distances
        bb = part.boundary[e[:, 0]] & part.boundary[e[:, 1]]
        ystart = np.where(dec.ypos >= 0, dec.ypos * k, -1)
        r1, c1, v1 = lp.privacy_rows(e[bb], d[bb], instance.epsilon, k, ystart, ystart)
        n_priv = 2 * int(bb.sum()) * k
        n_cols = ny * k + n_w
        r2 = n_priv + np.repeat(np.arange(ny), k)
        a = sp.csc_matrix((np.r_[v1, np.ones(ny * k)], (np.r_[r1, r2], np.r_[c1, np.arange(ny * k)])),
                          shape=(n_priv + ny, n_cols))
        wlb = np.array([c[xs].min(axis=1).sum() for _, xs, _ in dec.subs])
        master = lp.LpModel(
            c=np.r_[c[ys].ravel(), np.ones(n_w)],
            a=a,
            row_lower=np.r_[np.full(n_priv, -INF), np.ones(ny)],
            row_upper=np.r_[np.zeros(n_priv), np.ones(ny)],
            col_lower=np.r_[np.zeros(ny * k), wlb],
            col_upper=np.full(n_cols, INF),
        )
        h = lp.new_highs(options)
        # Devex pricing: the default dual steepest-edge weights are recomputed for every row after each
        # addRows, which made master re-solves ~10x slower (measured: 14 s vs 1.5 s on an 80-record grid).
        h.setOptionValue("simplex_dual_edge_weight_strategy", 1)
        lp.pass_model(h, master)
        n_initial = 0
        if initial_cuts and ny:
            rr, cc, vv, m = property32_rows(instance, dec, initial_cut_cap)
            if m:
                _add_rows(h, _csr_rows(rr, cc, vv, m, n_cols), np.full(m, -INF), np.zeros(m))
                n_initial = m
        master_rows = n_priv + ny + n_initial

        lb, ub, best_z, stop_reason = -np.inf, np.inf, None, None
        n_opt = n_rho = 0
        rho = float(rho0)
        core = np.full(ny * k, 1.0 / k)  # stabilisation centre: the uniform rows (strictly feasible)
        trace: list[dict[str, Any]] = []
        status, it, last_report = "iteration_limit", 0, -np.inf
        heur_improved = False
        seed_ub = None  # JSON-friendly when the seed is off
        if heuristic:  # seed incumbent: every record's cheapest output, closed under the cone
            z0 = np.zeros((n, k))
            z0[np.arange(n), weighted.argmin(axis=1)] = 1.0
            z0 = closure(instance, z0)
            seed_ub = float(np.sum(weighted * z0))
            ub, best_z = seed_ub, z0
        while it < max_iterations:
            it += 1
            remaining = options.time_limit - (time.perf_counter() - t0)
            if remaining <= 0:
                status = "time_limit"
                it -= 1
                break
            _time_limit(h, remaining)
            ms = lp.run(h)
            if ms.status not in ("optimal", "time_limit"):  # the master is feasible and bounded
                ms = _retry_cold(h, options)
            if ms.status != "optimal":
                it -= 1
                if ms.status == "time_limit":
                    status = "time_limit"
                    break
                if best_z is None:
                    raise SolverError(f"Benders master: HiGHS status {ms.status} at iteration {it + 1}")
                status, stop_reason = "feasible", f"master {ms.status} at iteration {it + 1}"
                break
            lb = max(lb, ms.objective * scale)
            zy, w = np.maximum(ms.x[: ny * k], 0.0), ms.x[ny * k :]
            # the incumbent (seed or heuristic) already meets this bound: no subproblem to solve
            closed = lp.gap_closed(ub, lb, gap_abs, gap_rel)
            # -------------------------------------------- subproblems: stabilised point, then zy
            points = [stabilise * core + (1.0 - stabilise) * zy, zy] if stabilise > 0 else [zy]
            if closed:
                points = []
            cut_rows, cut_lo, sub_secs = [], [], []
            slack, penalised, heur_ub = 0.0, 0, np.nan

            def add_cuts(results: list[SubResult]) -> int:
                before = len(cut_rows)
                for (spec, cols), r in zip(subs, results):
                    if r.cut_const + r.cut_coef @ zy[cols] > w[spec.index] + CUT_TOL * max(1.0, abs(r.value)):
                        const, coef = _relax_small(r.cut_const, r.cut_coef)
                        nz = np.flatnonzero(coef)
                        norm = max(1.0, float(np.abs(coef).max(initial=0.0)))
                        cut_rows.append((np.r_[cols[nz], ny * k + spec.index], np.r_[-coef[nz], 1.0] / norm))
                        cut_lo.append(const / norm)
                return len(cut_rows) - before

            # -------------------------------------------- primal heuristic at the master's point
            far = ub - lb > PRICED_AT_ONCE_GAP * abs(ub)  # the seed is clearly not optimal (eps = 2 grids)
            if heuristic and n_w and not closed and (it == 2 or far and it == 1 or heur_improved
                                                     or it % HEURISTIC_EVERY == 0):
                remaining = options.time_limit - (time.perf_counter() - t0)
                prices = lift_prices(c[ys], zy.reshape(ny, k)).ravel()
                results = ex.solve([zy[cols] for _, cols in subs], remaining, rho, [prices[cols] for _, cols in subs])
                if any(r.status == "time_limit" for r in results):
                    status = "time_limit"
                    break
                sub_secs += [r.seconds for r in results]
                add_cuts(results)  # Lagrangian cuts of the priced model are valid too (its slack costs <= rho)
                z = closure(instance, _assemble(n, k, ys, zy, dec.subs, results))
                heur_ub = float(np.sum(weighted * z))
                heur_improved = heur_ub < ub - max(gap_abs, gap_rel * abs(heur_ub))
                if heur_ub < ub:
                    ub, best_z = heur_ub, z
            n_regular = 0
            for point in points:
                remaining = options.time_limit - (time.perf_counter() - t0)
                results = ex.solve([point[cols] for _, cols in subs], remaining, rho) if n_w else []
                if any(r.status == "time_limit" for r in results):
                    status = "time_limit"
                    break
                sub_secs += [r.seconds for r in results]
                n_regular = add_cuts(results)
                # upper bound: the assembled full solution (repaired if a subproblem used slack)
                z = _assemble(n, k, ys, point, dec.subs, results)
                slack = float(sum(r.slack for r in results))
                penalised = int(sum(r.slack > SLACK_TOL for r in results))
                if slack > SLACK_TOL:
                    z, _ = repair(instance, z)
                cand = float(np.sum(weighted * z))
                if cand < ub:
                    ub, best_z = cand, z
                if n_regular:
                    break
            if status == "time_limit":
                break
            core = 0.5 * core + 0.5 * zy
            n_opt += len(cut_rows)
            if cut_rows:
                _add_rows(h, _cut_matrix(cut_rows, n_cols), np.array(cut_lo), np.full(len(cut_lo), INF))
                master_rows += len(cut_rows)
            gap = ub - lb
            trace.append({
                "iteration": it, "lower_bound": lb, "upper_bound": ub, "gap": gap,
                "optimality_cuts": len(cut_rows), "penalised_subproblems": penalised, "slack": slack,
                "heuristic_upper_bound": heur_ub,
                "rho": rho, "master_seconds": ms.seconds, "sub_max_seconds": max(sub_secs, default=0.0),
                "sub_total_seconds": float(sum(sub_secs)), "master_rows": master_rows,
                "elapsed_seconds": time.perf_counter() - t0,
            })
            now = time.perf_counter()
            if progress and now - last_report >= 2.0:
                progress(f"benders iteration {it}: LB={lb:.9g} UB={ub:.9g} gap={gap:.3g} "
                         f"(+{len(cut_rows)} cuts, slack {slack:.2g}, rho {rho:g})")
                last_report = now
            if lp.gap_closed(ub, lb, gap_abs, gap_rel):
                status = "optimal"
                break
            if stall_iterations and len(trace) > stall_iterations and gap <= STALL_GAP * max(abs(ub), 1e-300):
                old = trace[-1 - stall_iterations]
                tol = gap_rel * max(abs(ub), 1e-300)
                if old["upper_bound"] - ub <= tol and lb - old["lower_bound"] <= tol:
                    status, stop_reason = "feasible", "stalled"  # numerical floor of the cuts
                    break
            if not n_regular:  # the penalised problem is solved at zy
                if slack <= SLACK_TOL:
                    status = "optimal"  # what is left of the gap is solver tolerance
                    break
                rho *= 10.0  # its solution still uses slack: raise the penalty (old cuts stay valid)
                n_rho += 1
    finally:
        ex.close()
    if best_z is None:
        raise SolverError(
f"Benders stopped ({status}) before its first complete iteration; no solution to return"
        )
    return RawSolution(
        z=best_z,
        status=status,
        lower_bound=float(lb),
        iterations=it,
        extra={
            "partition": stats,
            "partition_seconds": round(t_part, 3),
            "lower_bound": float(lb),
            "upper_bound": float(ub),
            "seed_upper_bound": seed_ub,
            "gap": float(ub - lb),
            "optimality_cuts": n_opt,
            "rho_final": rho,
            "rho_increases": n_rho,
            "initial_cuts": n_initial,
            "master_rows": master_rows,
            "subproblems": n_w,
            "executor": ex_name,
            "stop_reason": stop_reason or status,
        },
        trace=pd.DataFrame(trace, columns=_TRACE_COLUMNS),
    )


def _partition(instance: Instance, name: str, m: int, seed: int) -> Partition:
    return partition(instance, name, m, seed)
