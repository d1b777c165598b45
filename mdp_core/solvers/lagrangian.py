"""The row-sum Lagrangian bound of the PMO LP: K independent N-variable LPs, one per output.

Privacy contract
    input:      an instance (records, outputs, costs, the mDP graph) and any multipliers lam (N,)
                of the row sums, in the instance's cost unit.
    guarantee:  none about a mechanism: this module only proves *lower bounds* on the exact PMO
                optimum (the LP with ratios e^{eps d}); every mechanism still passes the certify gate.
    holds by:   the argument below, evaluated in float64 from the held rows' own arrays and the
                subproblems' duals (no HiGHS objective is trusted).
    reference:  Qiu et al. 2024, Eqs. 4-7 (the PMO LP); Lagrangian relaxation of the unit rows
                (Geoffrion 1974); the float64 rule for privacy rows of :mod:`mdp_core.solvers.privacy_rows`.

Structure. The privacy rows z_ak <= g_ab z_bk (g_ab = e^{eps d_ab}) do not depend on the output k:
the constraint matrix is one block B (the directed neighbour pairs over N columns) repeated K times,
coupled only by the N row sums sum_k z_ik = 1. Let P = {z in R^N : 0 <= z <= 1, z_a <= g_ab z_b for
every directed pair}. Every column z_k of a feasible Z lies in P (z <= 1 follows from the row sums
and z >= 0), so for ANY lam in R^N and every feasible Z, with c_k = (p_i c_ik)_i,

    c . Z = sum_i lam_i + sum_k (c_k - lam) . z_k >= sum_i lam_i + sum_k min_{x in P} (c_k - lam) . x = L(lam).

Lazy rows (each subproblem over a subset of P's rows: a larger set, a smaller minimum) and solver
tolerances can only be made safe by not trusting the subproblems' objectives. So the bound reported
is the float64 evaluation (:func:`mdp_core.solvers.privacy_rows.lagrangian_bound`) of the subproblems'
row duals: for multipliers mu_k >= 0 of subproblem k's held rows A_k x <= 0 (mu_k = max(-y_k, 0)
from HiGHS's duals y_k), every feasible Z has c . Z >= sum_k (c_k + A_k^T mu_k) . z_k >=
sum_i min_k (c_ik + (A_k^T mu_k)_i), rows of Z being distributions. Whatever HiGHS's tolerances
and whichever rows were held, this is valid (capped rows handled by the rule of
:mod:`mdp_core.solvers.privacy_rows`, so it bounds the exact, uncapped LP). It is never below the dual form
sum_i lam_i + sum_k sum_i min(0, c_ik - lam_i + (A_k^T mu_k)_i) (the maximum over lam_i of that
concave function is min_k (c + A^T mu)_ik), which is L(lam) over the held rows when mu_k is the
subproblem's optimal dual. Hence the evaluated bound is >= L over the held rows up to the duals'
accuracy, and at rowgen's optimal row-sum duals lam* with rowgen's rows held it is >= rowgen's own
bound (min over the held rows of P >= min over rowgen's rows R; by LP duality L_R(lam*) = LP_R's
optimum), typically well above it, because P's other rows are enforced here too.

Subproblems (:class:`SubWorker`, one per output, on :mod:`mdp_core.runtime.executor` like colgen's pricing
workers): a live HiGHS model of N columns in [0, 1], cost (c_k - lam) / s (s = max p_i c_ik), rows
added lazily: after each solve the pairs the point violates (x_a / g - x_b > :data:`VIOLATION`), at
most N of the largest deficit, are appended and the model is re-solved warm by dual simplex, until none
is violated or :data:`MAX_SOLVES` solves. Rows stay for the next request, so a later lam re-solves
from the previous basis; a model holding more than :data:`PURGE_ROWS` N rows is rebuilt with only the
rows that had a nonzero dual at its last solve (memory: HiGHS needs about 1-2 KB per held row here).
A request can also carry pair ids to hold first. Every worker is deterministic and results are assembled in output order, so the
bound is bit-identical for any executor and worker count.

Memory per worker process: the shared pairs (25 bytes per directed pair) plus, per output held there, a (2E,)
bool mask and its HiGHS model (about 2-4 KB per held row, 1-3 N rows held per model; the measured peaks:
bench/HISTORY.md, "Row-sum Lagrangian bound").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from mdp_core.declarations.solver_options import Executor, SolverOptions
from mdp_core.errors import InputError, SolverError
from mdp_core.problem.instance import Instance
from mdp_core.runtime import control
from mdp_core.runtime import executor as executor_mod
from mdp_core.solvers import highs
from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.highs import DUAL_SIMPLEX, LpModel
from mdp_core.solvers.result import LIMITS, Status

VIOLATION = 1e-9  # a held point violates a pair's row when x_a / g - x_b exceeds this (x in [0, 1])
ROWS_PER_SOLVE = 1.0  # rows appended per re-solve, at most, times N (largest deficit first)
MAX_SOLVES = 60  # re-solves per request at most; the bound is valid at any stopping point
PURGE_ROWS = 4.0  # a model holding more than this times N rows is rebuilt with its binding rows only
SMALL_MATRIX_VALUE = 1e-12  # balanced rows have entries down to e^-15: keep them (HiGHS default 1e-9)
SOLVED = frozenset({Status.OPTIMAL, *LIMITS})


@dataclass
class SubSpec:
    """What the subproblem worker of output ``output`` needs (picklable; ``pairs`` shared by all K)."""

    pairs: pr.Pairs  # (2E,) directed pairs over global record ids
    cost: np.ndarray  # (N,) scaled p_i c_ik / s
    output: int
    initial: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # pair ids held from the start


@dataclass
class SubRequest:
    """One evaluation: ``lam`` (N,) scaled row-sum multipliers, an absolute wall-clock ``deadline``
    (``time.time()``), pair ids ``rows`` to hold before solving (None: none), re-solves at most."""

    lam: np.ndarray
    deadline: float
    rows: np.ndarray | None = None
    max_solves: int = MAX_SOLVES


@dataclass
class SubResult:
    """One subproblem's answer (scaled unit). ``terms``: A_k^T mu_k over the held rows (None: no duals,
    mu = 0, still valid); ``x`` (N,) its point (zeros at a limit); ``complete``: no held-out row violated."""

    status: Status
    terms: pr.Terms | None
    x: np.ndarray
    held: int
    solves: int
    complete: bool
    seconds: float
    binding: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # pairs with a nonzero dual


class SubWorker:
    """The executor's worker for one output: min (c_k - lam) . x over 0 <= x <= 1 and lazily held
    privacy rows (module docstring). Requests: :class:`SubRequest` -> :class:`SubResult`."""

    def __init__(self, spec: SubSpec, options: SolverOptions) -> None:
        self.spec, self.options = spec, options
        n = spec.cost.shape[0]
        self.idx = np.arange(n)
        self.cols = np.arange(n, dtype=np.int64)
        self.binding = np.zeros(0, dtype=np.int64)  # pairs whose rows had a nonzero dual at the last solve
        self.purges = 0
        self._build(np.asarray(spec.initial, dtype=np.int64))

    def _build(self, rows: np.ndarray) -> None:
        """A fresh model holding the rows of the pairs ``rows`` (no basis)."""
        spec, n = self.spec, self.idx.shape[0]
        self.held = np.zeros(spec.pairs.size, dtype=bool)
        self.order = np.zeros(0, dtype=np.int64)  # the pair of each model row
        self.blocks: list[sp.csr_matrix] = []  # the held rows, in model order
        self.h = highs.new_highs(self.options)
        highs.set_options(self.h, simplex_strategy=DUAL_SIMPLEX, small_matrix_value=SMALL_MATRIX_VALUE, presolve="off")
        highs.pass_model(
            self.h,
            LpModel(
                c=np.asarray(spec.cost, dtype=np.float64),
                a=sp.csc_matrix((0, n)),
                row_lower=np.zeros(0),
                row_upper=np.zeros(0),
                col_lower=np.zeros(n),
                col_upper=np.ones(n),
            ),
        )
        self._hold(rows)

    def _hold(self, which: np.ndarray) -> int:
        """Append the rows of the pairs ``which`` not yet held (ascending pair order); their count."""
        which = np.unique(which)
        which = which[~self.held[which]]
        if which.size == 0:
            return 0
        rows = pr.rows(self.spec.pairs, which, np.zeros_like(which), self.cols, self.idx.shape[0])
        highs.add_rows(self.h, rows, np.full(which.size, -highs.INF), np.zeros(which.size))
        self.held[which] = True
        self.order = np.r_[self.order, which]
        self.blocks.append(rows)
        return int(which.size)

    def _violated(self, x: np.ndarray) -> np.ndarray:
        """Pairs not held whose row ``x`` violates by more than :data:`VIOLATION`: at most
        ROWS_PER_SOLVE N of the largest deficit, ascending pair order."""
        p = self.spec.pairs
        deficit = x[p.a] / p.g - x[p.b]
        deficit[self.held] = 0.0
        new = np.flatnonzero(deficit > VIOLATION)
        limit = max(1, int(ROWS_PER_SOLVE * self.idx.shape[0]))
        if new.size > limit:
            new = np.sort(new[np.argpartition(-deficit[new], limit - 1)[:limit]])
        return new

    def __call__(self, req: SubRequest) -> SubResult:
        if not isinstance(req, SubRequest):
            raise InputError(f"Lagrangian subproblem worker: unknown request {type(req).__name__}")
        if self.order.size > PURGE_ROWS * self.idx.shape[0]:  # memory: keep the binding rows, warm start lost
            self._build(self.binding)
            self.purges += 1
        spec, h = self.spec, self.h
        if req.rows is not None:
            self._hold(np.asarray(req.rows, dtype=np.int64))
        highs.change_costs(h, self.idx, spec.cost - req.lam)
        seconds, solves, complete = 0.0, 0, False
        n = self.idx.shape[0]
        while True:
            remaining = req.deadline - time.time()
            if remaining <= 0:
                return SubResult(Status.TIME_LIMIT, None, np.zeros(n), int(self.order.size), solves, False, seconds)
            highs.set_time_limit(h, remaining)
            ladder = highs.strategy_ladder(DUAL_SIMPLEX) + highs.COLD_NO_PRESOLVE
            sol = highs.run_robust(h, ladder, want_duals=True, accept=SOLVED)
            seconds += sol.seconds
            solves += 1
            if sol.status != Status.OPTIMAL:
                if sol.status in LIMITS:
                    return SubResult(sol.status, None, np.zeros(n), int(self.order.size), solves, False, seconds)
                raise SolverError(f"Lagrangian subproblem (output {spec.output}): HiGHS status {sol.describe()}")
            new = self._violated(np.clip(sol.x, 0.0, 1.0))
            if new.size == 0:
                complete = True
                break
            if solves >= req.max_solves:
                break
            self._hold(new)
        terms = None
        if sol.row_dual.size and self.order.size:
            a = sp.vstack(self.blocks).tocsr() if len(self.blocks) > 1 else self.blocks[0]
            self.blocks = [a]
            terms = pr.dual_terms(a, spec.pairs.capped[self.order], sol.row_dual)
            self.binding = self.order[np.asarray(sol.row_dual[: self.order.size]) != 0.0]
        x = np.clip(sol.x, 0.0, 1.0)
        return SubResult(Status.OPTIMAL, terms, x, int(self.order.size), solves, complete, seconds, self.binding)


@dataclass
class Evaluation:
    """One evaluation of the bound (instance's cost unit). ``bound``: the proven float64 bound
    (module docstring); ``dual_form``: sum lam + sum_k sum_i min(0, .) at the given lam (<= bound);
    ``z`` (N, K): the subproblems' points (column k from subproblem k; not a mechanism)."""

    bound: float
    dual_form: float
    z: np.ndarray
    status: Status  # OPTIMAL: every subproblem solved (complete or not); a limit otherwise
    complete: bool  # every subproblem held every row its point violated
    held_rows: int  # rows held, all subproblems
    solves: int  # HiGHS solves, all subproblems
    solve_seconds: float  # HiGHS seconds summed over subproblems (CPU-like; wall is ``seconds``)
    seconds: float
    binding: list[np.ndarray] = field(default_factory=list)  # per output: pair ids whose rows bind there

    def stats(self) -> dict[str, Any]:
        return {
            "bound": self.bound,
            "dual_form": self.dual_form,
            "status": self.status.value,
            "complete": self.complete,
            "held_rows": self.held_rows,
            "solves": self.solves,
            "solve_seconds": round(self.solve_seconds, 3),
            "seconds": round(self.seconds, 3),
        }


class Lagrangian:
    """K live subproblems of an instance on an executor; :meth:`evaluate` L at any lam, warm.

    Args:
        instance: the PMO instance; ``options``: HiGHS settings for the subproblems (out-of-process
            workers run single-threaded, see :func:`mdp_core.solvers.highs.start_workers`).
        executor: "serial" (default), "process", "dask", "auto" or an :class:`Executor` (``scheduler``
            with dask); ``initial``: pair ids every subproblem holds from the start.
    Call :meth:`close` (or use it as a context manager) to stop the workers."""

    def __init__(
        self,
        instance: Instance,
        options: SolverOptions | None = None,
        executor: str | Executor = "serial",
        scheduler: str | None = None,
        initial: np.ndarray | None = None,
        pairs: pr.Pairs | None = None,
    ) -> None:
        n, k = instance.n_records, instance.n_outputs
        self.weighted = instance.prior[:, None] * instance.costs
        self.c, self.scale = highs.scale_costs(self.weighted)
        self.pairs = pairs if pairs is not None else pr.pairs(instance.edges, instance.distances, instance.epsilon)
        first = np.zeros(0, np.int64) if initial is None else np.asarray(initial, dtype=np.int64)
        specs = [SubSpec(self.pairs, self.c[:, kk].copy(), kk, first) for kk in range(k)]
        self.n, self.k = n, k
        self.ex = executor_mod.make_executor(executor, False, scheduler)
        opts = options or SolverOptions()
        highs.start_workers(self.ex, SubWorker, specs, opts, [1.0] * k)

    def __enter__(self) -> Lagrangian:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.ex.close()

    def evaluate(
        self,
        lam: np.ndarray,
        deadline: float = float("inf"),
        rows: list[np.ndarray] | None = None,
        max_solves: int = MAX_SOLVES,
    ) -> Evaluation:
        """The proven bound at ``lam`` ((N,), instance's cost unit); ``deadline`` wall-clock
        (``time.time()``); ``rows[k]``: pair ids subproblem k holds first (added once, kept)."""
        t0 = time.perf_counter()
        lam = np.asarray(lam, dtype=np.float64)
        if lam.shape != (self.n,) or not np.all(np.isfinite(lam)):
            raise InputError(f"Lagrangian multipliers must be {self.n} finite numbers, got shape {lam.shape}")
        lam_s = lam / self.scale
        reqs = [SubRequest(lam_s, deadline, None if rows is None else rows[kk], max_solves) for kk in range(self.k)]
        control.check("Lagrangian bound")
        results: list[SubResult] = self.ex.solve(reqs)
        z = np.column_stack([r.x for r in results])
        status = next((r.status for r in results if r.status != Status.OPTIMAL), Status.OPTIMAL)
        held = sum(r.held for r in results)
        solves = sum(r.solves for r in results)
        secs = sum(r.seconds for r in results)
        if status != Status.OPTIMAL:
            return Evaluation(-np.inf, -np.inf, z, status, False, held, solves, secs, time.perf_counter() - t0)
        terms = [r.terms or pr.Terms(np.zeros(self.n)) for r in results]
        both = pr.stack(terms)
        bound = self.scale * pr.lagrangian_bound(self.c, both)
        reduced = self.c - lam_s[:, None] + both.exact  # rule (i): exact rows only
        dual_form = self.scale * float(lam_s.sum() + np.minimum(reduced, 0.0).sum())
        done = all(r.complete for r in results)
        binding = [r.binding for r in results]
        return Evaluation(bound, dual_form, z, status, done, held, solves, secs, time.perf_counter() - t0, binding)


def lagrangian_bound(
    instance: Instance,
    lam: np.ndarray,
    executor: str | Executor | None = None,
    warm: Lagrangian | None = None,
    options: SolverOptions | None = None,
) -> tuple[float, np.ndarray, dict[str, Any]]:
    """(proven lower bound on the exact PMO optimum, (N, K) subproblem points, stats) at row-sum
    multipliers ``lam`` ((N,), instance's cost unit; module docstring).

    ``warm``: a live :class:`Lagrangian` of the same instance (its subproblems keep their rows and
    bases between calls); None builds one on ``executor`` (default serial) and closes it after."""
    own = warm is None
    lag = warm if warm is not None else Lagrangian(instance, options, executor or "serial")
    try:
        ev = lag.evaluate(lam)
    finally:
        if own:
            lag.close()
    return ev.bound, ev.z, ev.stats()


STALL_WINDOW, STALL_SHARE = 5, 0.02  # stop when 5 evaluations raised the best bound by < 2 % of (target - best)
STEP_FACTOR = 0.5  # Polyak step: this times (target - L) / |g|^2 (rome500, 25 steps from round 2's
#                    duals: 0.5 closed 37 % of the gap, 1.0 22 %, deflected directions less; bench/HISTORY.md)


@dataclass
class Ascent:
    """What :func:`ascend` did (instance's cost unit): the best proven bound, evaluations, seconds."""

    bound: float
    first: float  # the bound at the starting multipliers
    evaluations: int
    seconds: float
    solve_seconds: float
    lam: np.ndarray  # (N,) the multipliers of the best bound
    held_rows: int = 0  # rows the subproblems hold at the end, all outputs
    binding: list[np.ndarray] = field(default_factory=list)  # per output: pair ids binding at ``lam``

    def stats(self) -> dict[str, Any]:
        return {
            "bound": self.bound,
            "first": self.first,
            "evaluations": self.evaluations,
            "seconds": round(self.seconds, 3),
            "solve_seconds": round(self.solve_seconds, 3),
            "held_rows": self.held_rows,
        }


def ascend(
    lag: Lagrangian,
    lam: np.ndarray,
    steps: int,
    target: float,
    enough: Any = None,
    deadline: float = float("inf"),
    rows: list[np.ndarray] | None = None,
    factor: float = STEP_FACTOR,
    on_bound: Callable[[float, int], None] | None = None,
) -> Ascent:
    """Evaluate the bound at ``lam`` ((N,), instance's cost unit), then up to ``steps`` Polyak subgradient
    steps lam += factor (target - L(lam)) / |g|^2 g, g = 1 - sum_k x_k (a subgradient of the concave L
    at lam; ``target`` >= the optimum, e.g. the best upper bound). Stops early when ``enough(bound)``
    is true, when the last :data:`STALL_WINDOW` steps raised the best bound by less than
    :data:`STALL_SHARE` of ``target`` - best, or at ``deadline`` (wall clock, ``time.time()``). Every bound is proven whatever the steps
    (:meth:`Lagrangian.evaluate`); the best is returned. ``rows`` go to the first evaluation.
    ``on_bound(bound, evaluations)`` hears every new best bound as it is found (progress)."""
    t0 = time.perf_counter()
    lam = np.asarray(lam, dtype=np.float64)
    ev = lag.evaluate(lam, deadline, rows)
    best, best_lam, first, evals, secs = ev.bound, lam, ev.bound, 1, ev.solve_seconds
    binding = ev.binding
    history = [best]
    if on_bound is not None and np.isfinite(best):
        on_bound(best, evals)
    for _ in range(steps):
        if ev.status != Status.OPTIMAL or (enough is not None and enough(best)) or time.time() >= deadline:
            break
        if len(history) > STALL_WINDOW and best - history[-1 - STALL_WINDOW] < STALL_SHARE * (target - best):
            break  # stalled: the subgradient tail (bench/HISTORY.md)
        g = 1.0 - ev.z.sum(axis=1)
        gg = float(g @ g)
        if gg <= 1e-18 or not np.isfinite(ev.dual_form) or ev.dual_form >= target:
            break
        lam = lam + factor * (target - ev.dual_form) / gg * g
        ev = lag.evaluate(lam, deadline)
        evals += 1
        secs += ev.solve_seconds
        if ev.bound > best:
            best, best_lam, binding = ev.bound, lam, ev.binding
            if on_bound is not None:
                on_bound(best, evals)
        history.append(best)
    return Ascent(best, first, evals, time.perf_counter() - t0, secs, best_lam, ev.held_rows, binding)
