"""The one HiGHS adapter: every LP / QP this library solves goes through here.

The shape follows cvxpy's solver adapters: callers *build* arrays (:class:`LpModel`), the adapter
*solves* (:func:`new_highs`, :func:`pass_model`, :func:`run`, :func:`solve_model`) and *inverts*
HiGHS's answer into library terms (:class:`LpSolution`, statuses of :class:`mdp_core.solvers.result.Status`
through :data:`STATUS_MAP`). ``highspy`` is imported nowhere else in ``mdp_core``.

Every HiGHS call returns a ``HighsStatus``, and every one is checked here, as cvxpy's HiGHS interface
does: an option is set only by :func:`set_option` (a non-OK status, e.g. an option renamed in a later
HiGHS, raises :class:`~mdp_core.errors.SolverError` naming it instead of silently keeping the default);
a model edit (``passModel``, ``addRows``, ...) that returns ``kError`` raises, ``kWarning`` is logged
(:func:`_checked`); the model status is read with ``getModelStatus()`` and compared with
``highspy.HighsModelStatus`` members (:data:`STATUS_MAP`), never parsed from a repr.

HiGHS traps handled here:

* one global thread pool per process: changing ``threads`` after a solve needs
  ``resetGlobalScheduler`` or ``run()`` fails quietly (:func:`new_highs`);
* ``time_limit`` is compared with a Highs object's *cumulative* run time (``getRunTime``, summed over
  every ``run()``), so a long-lived model needs the offset (:func:`set_time_limit`);
* HiGHS's tolerances are absolute: costs are divided by their largest magnitude (:func:`scale_costs`);
* the raw many-argument ``passModel`` needs an integrality array; a ``HighsLp`` with a column-wise
  CSC matrix loads in one call (:func:`pass_model`);
* numerical breakdowns ("Not Set", "Unknown", an impossible "unbounded") are retried by one policy,
  :func:`run_robust`, whose ladders (:data:`SWITCH_ALGORITHM`, :data:`COLD_NO_PRESOLVE`,
  :func:`strategy_ladder`) are data;
* stopping: every Highs object made here has HiGHS's simplex and interior-point interrupt callbacks
  on (:func:`quiet_highs`); they stop the run when the thread's :class:`mdp_core.runtime.control.StopToken`
  is stopped (SIGTERM, UI Cancel, a stage timeout), and :func:`run` then raises
  :class:`~mdp_core.errors.Interrupted`. An exception raised inside the callback (Prefect's injected
  timeout, KeyboardInterrupt) would be swallowed by HiGHS as a "Solve error": it is caught, the run
  interrupted, and the exception re-raised after ``run()`` returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import highspy  # imported in 0.2 s; only this module touches it
import numpy as np
import scipy.sparse as sp

# the HiGHS settings and their names live in mdp_core.declarations.solver_options (no highspy, no numpy: the config and
# the command line read them); re-exported here, where every solver module has always found them
from mdp_core.declarations.solver_options import INF, SOLVERS, SolverOptions  # noqa: F401
from mdp_core.errors import SolverError
from mdp_core.runtime import control
from mdp_core.solvers.result import LIMITS, Status

log = logging.getLogger(__name__)

DUAL_SIMPLEX, PRIMAL_SIMPLEX = 1, 4  # HiGHS simplex_strategy values
_M = highspy.HighsModelStatus
# HiGHS model status -> library status; every other one (kNotset, kLoadError, kModelError, kPresolveError,
# kSolveError, kPostsolveError, kModelEmpty, kUnknown, kSolutionLimit, kMemoryLimit) is Status.ERROR.
STATUS_MAP: dict[highspy.HighsModelStatus, Status] = {
    _M.kOptimal: Status.OPTIMAL,
    _M.kInfeasible: Status.INFEASIBLE,
    _M.kUnbounded: Status.UNBOUNDED,
    _M.kUnboundedOrInfeasible: Status.INFEASIBLE,
    _M.kTimeLimit: Status.TIME_LIMIT,
    _M.kIterationLimit: Status.ITERATION_LIMIT,
    _M.kObjectiveBound: Status.OBJECTIVE_BOUND,
    _M.kObjectiveTarget: Status.OBJECTIVE_TARGET,
    _M.kInterrupt: Status.INTERRUPTED,
    getattr(_M, "kHighsInterrupt", _M.kInterrupt): Status.INTERRUPTED,  # not in every highspy (nor its stubs)
}
_WITH_SOLUTION = frozenset({Status.OPTIMAL}) | LIMITS  # statuses whose primal point is read back


def version() -> str:
    return str(highspy.Highs().version())


def model_status(h: highspy.Highs) -> tuple[Status, str]:
    """(library status, HiGHS's own text) of ``h``'s model status after a run."""
    st = h.getModelStatus()
    return STATUS_MAP.get(st, Status.ERROR), str(h.modelStatusToString(st))


def _checked(status: highspy.HighsStatus, call: str) -> None:
    """Check the ``HighsStatus`` a HiGHS call returned: ``kError`` raises :class:`SolverError` naming
    ``call``, ``kWarning`` is logged at debug level: it is routine (colgen's columns carry entries below
    ``small_matrix_value``, which HiGHS drops with a warning)."""
    if status == highspy.HighsStatus.kOk:
        return
    if status == highspy.HighsStatus.kWarning:
        log.debug("HiGHS %s returned a warning", call)
        return
    raise SolverError(f"HiGHS {call} failed (returned {status})")


def set_option(h: highspy.Highs, name: str, value: Any) -> None:
    """Set the HiGHS option ``name`` to ``value``. Any status but ``kOk`` raises :class:`SolverError`
    naming the option: an unknown name (an option renamed in a later HiGHS), a value of the wrong type
    or out of its range would otherwise leave HiGHS on its default without a word."""
    status = h.setOptionValue(name, value)
    if status != highspy.HighsStatus.kOk:
        raise SolverError(f"HiGHS refused option {name}={value!r} (setOptionValue returned {status})")


@dataclass
class LpModel:
    """min c^T x (+ 1/2 x^T diag(hessian_diag) x)  s.t.  row_lower <= A x <= row_upper,
    col_lower <= x <= col_upper."""

    c: np.ndarray
    a: sp.spmatrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    hessian_diag: np.ndarray | None = None  # a convex diagonal QP when set


@dataclass
class LpSolution:
    status: Status
    x: np.ndarray
    objective: float  # in the model's own (scaled) unit
    iterations: int
    seconds: float
    row_dual: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fallback: str | None = None  # set when a retry (run_robust) produced this solution
    detail: str = ""  # HiGHS's own model status text

    @property
    def failed(self) -> bool:
        return self.status == Status.ERROR

    def describe(self) -> str:
        """The status for messages: "error: Not Set" for a failure, else the status value."""
        return f"{self.status.value}: {self.detail}" if self.failed else self.status.value


def scale_costs(weighted: np.ndarray) -> tuple[np.ndarray, float]:
    """(weighted / s, s) with s = max |weighted| (1 if all zero): HiGHS's tolerances are absolute, so
    costs reach it as O(1); objectives are reported in the original unit (times s)."""
    s = float(np.max(np.abs(weighted), initial=0.0)) or 1.0
    return weighted / s, s


# ------------------------------------------------------------------------------- objects, models
_last_threads: list[int] = []


class _Watch:
    """What the interrupt callback of one Highs object sees: the stop token of the run in progress, and
    an exception raised inside the callback (re-raised by :func:`run`)."""

    __slots__ = ("token", "error", "what", "count", "t0")

    def __init__(self) -> None:
        self.token: control.StopToken = control.PROCESS
        self.error: BaseException | None = None
        self.what, self.count, self.t0 = "", -1, 0.0

    def __call__(self, e: Any) -> None:
        try:
            if self.token.reason() is not None:
                e.interrupt()
                return
            # HiGHS keeps the interrupt of an earlier run of this object (checked on highspy 1.15.1):
            # without this, every later run of an object stopped once would stop at its first check
            e.data_in.user_interrupt = False
            out = e.data_out
            ipm = e.callback_type == highspy.cb.HighsCallbackType.kCallbackIpmInterrupt
            n = int(out.ipm_iteration_count if ipm else out.simplex_iteration_count)
            if n > self.count:  # what the solver does now, for the heartbeat
                self.count = n
                kind = "interior point" if ipm else "simplex"
                took = time.perf_counter() - self.t0
                self.token.set_activity(f"{self.what}HiGHS {kind} iteration {n} ({took:.0f} s into this LP)")
        except BaseException as exc:  # noqa: BLE001 -- HiGHS would swallow it; run() re-raises it
            if self.error is None:
                self.error = exc
            e.interrupt()


def quiet_highs() -> highspy.Highs:
    """A silent Highs object with HiGHS's default options that obeys the thread's stop token."""
    h = highspy.Highs()
    set_option(h, "output_flag", False)
    watch = _Watch()
    h.cbSimplexInterrupt.subscribe(watch)
    h.cbIpmInterrupt.subscribe(watch)
    h._mdp_watch = watch  # type: ignore[attr-defined]  # read by run()
    return h


def new_highs(options: SolverOptions, time_limit: float | None = None) -> highspy.Highs:
    """A silent Highs object configured from ``options`` (``time_limit`` overrides the options')."""
    if _last_threads and _last_threads[0] != options.threads:
        highspy.Highs.resetGlobalScheduler(True)
    _last_threads[:] = [options.threads]
    h = quiet_highs()
    _set_algorithm(h, options.solver)
    if options.threads:
        set_option(h, "threads", int(options.threads))
    set_option(h, "primal_feasibility_tolerance", float(options.primal_tolerance))
    set_option(h, "dual_feasibility_tolerance", float(options.dual_tolerance))
    set_option(h, "presolve", "on" if options.presolve else "off")
    limit = options.time_limit if time_limit is None else time_limit
    if np.isfinite(limit):
        set_option(h, "time_limit", float(max(limit, 1e-3)))
    return h


def _set_algorithm(h: highspy.Highs, solver: str) -> None:
    set_option(h, "solver", "simplex" if solver == "simplex" else "ipm")
    if solver == "simplex":
        set_option(h, "simplex_strategy", DUAL_SIMPLEX)
    else:
        set_option(h, "run_crossover", "on")


def set_options(h: highspy.Highs, **values: Any) -> None:
    """Set HiGHS options by name (e.g. ``simplex_strategy=4``, ``presolve="off"``); see :func:`set_option`."""
    for name, v in values.items():
        set_option(h, name, v)


def set_time_limit(h: highspy.Highs, remaining: float) -> None:
    """Allow ``remaining`` more seconds for the next runs of ``h``. HiGHS compares ``time_limit`` with
    the object's cumulative run time (``getRunTime``, summed over every ``run()`` since it was
    created; checked on highspy 1.15), so a long-lived model needs that offset."""
    limit = h.getRunTime() + max(remaining, 1e-3) if np.isfinite(remaining) else INF
    set_option(h, "time_limit", float(limit))


def pass_model(h: highspy.Highs, model: LpModel) -> None:
    """Load ``model`` into ``h`` in one call (column-wise CSC; plus the diagonal Hessian of a QP)."""
    lp = highspy.HighsLp()
    lp.num_col_ = int(model.a.shape[1])
    lp.num_row_ = int(model.a.shape[0])
    lp.col_cost_ = np.asarray(model.c, dtype=np.float64)
    lp.col_lower_ = model.col_lower
    lp.col_upper_ = model.col_upper
    lp.row_lower_ = model.row_lower
    lp.row_upper_ = model.row_upper
    a = sp.csc_matrix(model.a)
    a.sort_indices()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = lp.num_col_
    lp.a_matrix_.num_row_ = lp.num_row_
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(np.float64)
    _checked(h.passModel(lp), f"passModel ({lp.num_row_} rows, {lp.num_col_} columns)")
    if model.hessian_diag is not None:
        n = lp.num_col_
        hess = highspy.HighsHessian()
        hess.dim_ = n
        hess.format_ = highspy.HessianFormat.kTriangular
        hess.start_ = np.arange(n + 1, dtype=np.int32)
        hess.index_ = np.arange(n, dtype=np.int32)
        hess.value_ = np.asarray(model.hessian_diag, dtype=np.float64)
        _checked(h.passHessian(hess), "passHessian")


def add_rows(h: highspy.Highs, a: sp.csr_matrix, lower: np.ndarray, upper: np.ndarray) -> None:
    """Append rows lower <= a x <= upper (CSR); the next run warm-starts from the current basis."""
    if a.shape[0] == 0:
        return
    status = h.addRows(
        int(a.shape[0]),
        np.asarray(lower, np.float64),
        np.asarray(upper, np.float64),
        int(a.nnz),
        a.indptr[:-1].astype(np.int32),
        a.indices.astype(np.int32),
        a.data.astype(np.float64),
    )
    _checked(status, f"addRows ({a.shape[0]} rows)")


def add_cols(h: highspy.Highs, cost: np.ndarray, cols: sp.csc_matrix) -> None:
    """Append columns x >= 0 with ``cost`` and matrix entries ``cols`` (CSC, one column each)."""
    m = cols.shape[1]
    status = h.addCols(
        m,
        np.asarray(cost, np.float64),
        np.zeros(m),
        np.full(m, INF),
        cols.nnz,
        cols.indptr.astype(np.int32),
        cols.indices.astype(np.int32),
        cols.data.astype(np.float64),
    )
    _checked(status, f"addCols ({m} columns)")


def delete_cols(h: highspy.Highs, cols: np.ndarray) -> None:
    """Delete columns ``cols`` (indices); later columns move down, keeping their order."""
    cols = np.asarray(cols, dtype=np.int32)
    if cols.size:
        _checked(h.deleteCols(cols.size, cols), f"deleteCols ({cols.size} columns)")


def change_costs(h: highspy.Highs, cols: np.ndarray, cost: np.ndarray | float) -> None:
    cols = np.asarray(cols, dtype=np.int32)
    values = np.broadcast_to(np.asarray(cost, np.float64), cols.shape).copy()
    _checked(h.changeColsCost(cols.size, cols, values), "changeColsCost")


def change_row_bounds(h: highspy.Highs, rows: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
    rows = np.asarray(rows, dtype=np.int32)
    status = h.changeRowsBounds(rows.size, rows, np.asarray(lower, np.float64), np.asarray(upper, np.float64))  # type: ignore[attr-defined]
    _checked(status, "changeRowsBounds")


def costs(h: highspy.Highs) -> np.ndarray:
    """The model's current cost vector."""
    return np.asarray(h.getLp().col_cost_, dtype=np.float64)


def row_duals(h: highspy.Highs) -> np.ndarray:
    return np.asarray(h.getSolution().row_dual, dtype=np.float64)


def basic_masks(h: highspy.Highs, n_cols: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """((n_cols,) bool basic columns, (n_rows,) bool basic rows) of ``h``'s current basis."""
    basic = highspy.HighsBasisStatus.kBasic
    bs = h.getBasis()
    cb = np.fromiter((st == basic for st in bs.col_status), bool, count=n_cols)
    rb = np.fromiter((st == basic for st in bs.row_status), bool, count=n_rows)
    return cb, rb


def _option(h: highspy.Highs, name: str) -> Any:
    got = h.getOptionValue(name)
    if isinstance(got, tuple):  # (HighsStatus, value) in some highspy versions
        _checked(got[0], f"getOptionValue({name!r})")
        return got[1]
    return got


def clear_solver(h: highspy.Highs) -> None:
    """Forget the basis and solution: the next run starts cold."""
    _checked(h.clearSolver(), "clearSolver")


# ------------------------------------------------------------------------------- running
def run(h: highspy.Highs, want_duals: bool = False, what: str = "") -> LpSolution:
    """Run HiGHS and map its model status to a :class:`Status` (unknown ones are ``Status.ERROR``).

    Obeys the thread's stop token (:mod:`mdp_core.runtime.control`): raises
    :class:`~mdp_core.errors.Interrupted` when it is stopped before or during the run. ``what`` names
    the solve for the heartbeat and the error ("rowgen round 4 LP")."""
    token = control.current()
    token.check(what or "a HiGHS solve")
    watch = getattr(h, "_mdp_watch", None)
    if watch is not None:
        watch.token, watch.error, watch.count = token, None, -1
        watch.what, watch.t0 = f"{what}: " if what else "", time.perf_counter()
    t0 = time.perf_counter()
    try:
        run_status = h.run()
    finally:
        if watch is not None:
            watch.token = control.PROCESS
    seconds = time.perf_counter() - t0
    if watch is not None and watch.error is not None:
        raise watch.error
    token.check(what or "a HiGHS solve")
    status, detail = model_status(h)
    if run_status == highspy.HighsStatus.kError:
        # a failed run: never an answer, whatever model status it left. An error *status*, not an
        # exception: the retry ladders of run_robust exist for exactly these breakdowns.
        status, detail = Status.ERROR, f"{detail} (run returned kError)"
    elif run_status == highspy.HighsStatus.kWarning:  # a limit, an interrupt, a non-optimal end: expected
        log.debug("HiGHS run %s ended with a warning: %s", what or "", detail)
    info = h.getInfo()
    iterations = int(info.simplex_iteration_count) + max(int(info.ipm_iteration_count), 0)
    x = np.zeros(0)
    duals = np.zeros(0)
    objective = float("nan")
    if status == Status.OPTIMAL and info.primal_solution_status != 2:
        # seen on colgen's warm-started master after columns were deleted: "Optimal" with a primal
        # point HiGHS itself calls infeasible. No caller can use it: a breakdown, for the retry ladder.
        status, detail = Status.ERROR, f"{detail} without a feasible primal solution"
    if status in _WITH_SOLUTION and info.primal_solution_status == 2:
        sol = h.getSolution()
        x = np.asarray(sol.col_value, dtype=np.float64)
        if want_duals:
            duals = np.asarray(sol.row_dual, dtype=np.float64)
        objective = float(info.objective_function_value)
    return LpSolution(status, x, objective, iterations, seconds, duals, detail=detail)


@dataclass(frozen=True)
class Attempt:
    """One retry of :func:`run_robust`: HiGHS option values for it (restored afterwards), whether it
    starts cold (``clearSolver``), and ``algorithm`` ("other": switch simplex <-> ipm)."""

    options: tuple[tuple[str, Any], ...] = ()
    cold: bool = False
    algorithm: str | None = None


# Dual simplex can lose numerical control on mDP LPs whose ratio chains span many orders of magnitude
# (the 20 x 25 grid at eps = 2 / km: exp(eps * diameter) ~ e^40): primal infeasibilities blow up to
# 1e12 and HiGHS stops with "Not Set"; interior point with crossover solves those (and vice versa).
SWITCH_ALGORITHM = (Attempt(cold=True, algorithm="other"),)
# HiGHS sometimes reports a status impossible for the model ("unbounded" from presolve on an elastic
# subproblem with e^20 coefficients, "unknown" after a warm start): presolve off, cold, solved every such case.
COLD_NO_PRESOLVE = (Attempt((("presolve", "off"),), cold=True),)


def strategy_ladder(strategy: int) -> tuple[Attempt, ...]:
    """Simplex ``strategy`` stopped with an error from a warm basis (seen on the 20 x 25 grids, colgen's
    pricing and master): the other strategy warm, then both cold."""
    other = PRIMAL_SIMPLEX if strategy == DUAL_SIMPLEX else DUAL_SIMPLEX
    return (
        Attempt((("simplex_strategy", other),)),
        Attempt((("simplex_strategy", strategy),), cold=True),
        Attempt((("simplex_strategy", other),), cold=True),
    )


def run_robust(
    h: highspy.Highs,
    attempts: Sequence[Attempt],
    want_duals: bool = False,
    accept: frozenset[Status] | None = None,
    solver: str = "simplex",
    deadline: float = INF,
    what: str = "",
) -> LpSolution:
    """The one retry policy: run; while the status is not acceptable (default: anything but
    ``Status.ERROR``; ``accept`` names the acceptable ones instead), try the next :class:`Attempt`,
    unless the ``deadline`` (``time.perf_counter()`` value) has passed. Options an attempt changes
    are restored afterwards. ``fallback`` of the returned solution says which attempt answered;
    seconds and iterations add up over the attempts. ``what``: see :func:`run`."""
    sol = run(h, want_duals, what)
    first, seconds, iterations = sol, 0.0, 0
    saved: dict[str, Any] = {}
    current = solver
    try:
        for att in attempts:
            if (sol.status in accept) if accept is not None else not sol.failed:
                break
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            seconds, iterations = seconds + sol.seconds, iterations + sol.iterations
            for name, v in att.options:
                saved.setdefault(name, _option(h, name))
                set_option(h, name, v)
            if att.algorithm == "other":
                for name in ("solver", "simplex_strategy", "run_crossover"):
                    saved.setdefault(name, _option(h, name))
                current = "ipm" if current == "simplex" else "simplex"
                _set_algorithm(h, current)
            if att.cold:
                clear_solver(h)
            if np.isfinite(deadline):
                set_time_limit(h, remaining)
            sol = run(h, want_duals, what)
            sol.fallback = _describe(att, current, solver, first)
    finally:
        for name, v in saved.items():
            set_option(h, name, v)
    sol.seconds += seconds
    sol.iterations += iterations
    return sol


def _describe(att: Attempt, current: str, solver: str, first: LpSolution) -> str:
    if att.algorithm == "other":
        return f"{current} after {solver} failed ({first.describe()})"
    opts = ", ".join(f"{k}={v}" for k, v in att.options)
    return f"retry{' cold' if att.cold else ''}{' with ' + opts if opts else ''} after {first.describe()}"


def solve_model(
    model: LpModel,
    options: SolverOptions,
    time_limit: float | None = None,
    want_duals: bool = False,
    accept: frozenset[Status] | None = None,
    what: str = "",
) -> LpSolution:
    """Solve ``model`` in a fresh Highs object; on a breakdown retry with the other algorithm
    (:data:`SWITCH_ALGORITHM`) within the same time limit. ``accept``: the statuses that are an answer
    (default: anything but an error); with it, a second retry cold without presolve. ``what``: see
    :func:`run`."""
    limit = options.time_limit if time_limit is None else time_limit
    h = new_highs(options, limit)
    pass_model(h, model)
    attempts = SWITCH_ALGORITHM if accept is None else SWITCH_ALGORITHM + COLD_NO_PRESOLVE
    return run_robust(
        h, attempts, want_duals, accept, solver=options.solver, deadline=time.perf_counter() + limit, what=what
    )


def with_options(options: SolverOptions, **changes: Any) -> SolverOptions:
    """A copy of ``options`` with ``changes`` (validated again)."""
    return replace(options, **changes)


def start_workers(ex: Any, worker: Any, specs: Sequence[Any], options: SolverOptions, weights: Sequence[float]) -> None:
    """Start one ``worker(spec, options=...)`` per spec on the executor ``ex``
    (:mod:`mdp_core.runtime.executor`). Out-of-process workers run single-threaded HiGHS with no time limit
    of their own: each request carries its deadline."""
    from functools import partial

    if not getattr(ex, "in_process", False):
        options = with_options(options, threads=1, time_limit=INF)
    ex.start(partial(worker, options=options), list(specs), weights)
