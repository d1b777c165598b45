"""The HiGHS adapter (mdp_core.solvers.highs) on small real models, and the component iteration helper."""

from __future__ import annotations

import highspy
import numpy as np
import pytest
import scipy.sparse as sp

from mdp_core.errors import InputError, SolverError
from mdp_core.problem.graph import component_blocks
from mdp_core.solvers import highs
from mdp_core.solvers.result import Status


def tiny(upper: float = 1.0) -> highs.LpModel:
    """min -x - 2y  s.t.  x + y <= upper, x, y >= 0: optimum -2 upper at (0, upper)."""
    return highs.LpModel(
        c=np.array([-1.0, -2.0]),
        a=sp.csc_matrix(np.array([[1.0, 1.0]])),
        row_lower=np.array([-np.inf]),
        row_upper=np.array([upper]),
        col_lower=np.zeros(2),
        col_upper=np.full(2, np.inf),
    )


def test_solve_model_maps_status_and_reads_the_answer() -> None:
    sol = highs.solve_model(tiny(3.0), highs.SolverOptions(), want_duals=True)
    assert sol.status is Status.OPTIMAL and sol.fallback is None
    np.testing.assert_allclose(sol.x, [0.0, 3.0], atol=1e-12)
    assert sol.objective == pytest.approx(-6.0) and sol.row_dual.shape == (1,)


def test_infeasible_status_and_the_retry_policy() -> None:
    model = tiny(-1.0)  # x + y <= -1 with x, y >= 0
    h = highs.new_highs(highs.SolverOptions())
    highs.pass_model(h, model)
    sol = highs.run_robust(h, highs.COLD_NO_PRESOLVE, accept=frozenset({Status.OPTIMAL}))
    assert sol.status == Status.INFEASIBLE and sol.x.size == 0
    assert sol.fallback is not None and "presolve=off" in sol.fallback  # the retry ran and says so
    assert highs._option(h, "presolve") == "on"  # options the attempt changed are restored
    again = highs.run_robust(h, highs.strategy_ladder(highs.DUAL_SIMPLEX))  # not an error: no retry
    assert again.status == Status.INFEASIBLE and again.fallback is None


def test_an_object_stopped_during_a_run_solves_again_under_a_new_token() -> None:
    """HiGHS keeps an earlier run's interrupt: rowgen stops a round's LP and solves the same object
    again (a round restarted at another tolerance); that run must not stop at its first check."""
    from mdp_core.errors import Interrupted
    from mdp_core.runtime import control

    rng = np.random.default_rng(0)
    n, m = 200, 100
    a = sp.random(m, n, density=0.05, random_state=1, format="csc") + sp.eye(m, n, format="csc")
    model = highs.LpModel(rng.random(n), a.tocsc(), np.ones(m), np.full(m, np.inf), np.zeros(n), np.full(n, 10.0))
    h = highs.new_highs(highs.SolverOptions(solver="ipm"))
    highs.pass_model(h, model)
    first = control.StopToken()
    h.cbIpmInterrupt.subscribe(lambda e: first.request("stopped by the test"))  # after the watch: it stops next
    with pytest.raises(Interrupted, match="stopped by the test"):
        control.Background(lambda: highs.run(h), token=first).result()
    h.cbIpmInterrupt.clear()
    h.cbIpmInterrupt.subscribe(h._mdp_watch)
    highs.clear_solver(h)
    again = control.Background(lambda: highs.run(h), token=control.StopToken()).result()
    assert again.status is Status.OPTIMAL and again.x.size == n


def test_time_limit_is_relative_to_the_cumulative_run_time() -> None:
    h = highs.new_highs(highs.SolverOptions())
    highs.pass_model(h, tiny())
    highs.run(h)
    highs.set_time_limit(h, 5.0)
    assert highs._option(h, "time_limit") == pytest.approx(h.getRunTime() + 5.0)
    highs.set_time_limit(h, np.inf)
    assert highs._option(h, "time_limit") == np.inf


def test_diagonal_qp() -> None:
    """min (x - 1)^2 + (y - 2)^2 s.t. x + y = 1 -> (0, 1)."""
    model = highs.LpModel(
        c=np.array([-2.0, -4.0]),
        a=sp.csc_matrix(np.array([[1.0, 1.0]])),
        row_lower=np.array([1.0]),
        row_upper=np.array([1.0]),
        col_lower=np.zeros(2),
        col_upper=np.full(2, np.inf),
        hessian_diag=np.array([2.0, 2.0]),
    )
    h = highs.quiet_highs()
    highs.pass_model(h, model)
    sol = highs.run(h)
    assert sol.status == Status.OPTIMAL
    np.testing.assert_allclose(sol.x, [0.0, 1.0], atol=1e-6)


def test_options_are_validated_and_scale_costs() -> None:
    with pytest.raises(InputError, match="solver"):
        highs.SolverOptions(solver="pdlp")
    with pytest.raises(InputError, match="threads"):
        highs.with_options(highs.SolverOptions(), threads=-1)
    c, s = highs.scale_costs(np.array([[2.0, -4.0]]))
    assert s == 4.0 and np.abs(c).max() == 1.0
    assert highs.scale_costs(np.zeros((2, 2)))[1] == 1.0


def test_an_unknown_or_invalid_option_raises_naming_it() -> None:
    """setOptionValue's kError used to be ignored: HiGHS then silently kept its default."""
    h = highs.quiet_highs()
    with pytest.raises(SolverError, match="no_such_option"):
        highs.set_option(h, "no_such_option", 1)
    with pytest.raises(SolverError, match="presolve"):
        highs.set_options(h, presolve="sometimes")
    with pytest.raises(SolverError, match="time_limit"):
        highs.set_option(h, "time_limit", -1.0)
    highs.set_option(h, "presolve", "off")
    assert highs._option(h, "presolve") == "off"


def test_a_rejected_model_edit_raises() -> None:
    h = highs.quiet_highs()
    highs.pass_model(h, tiny())
    with pytest.raises(SolverError, match="changeColsCost"):
        highs.change_costs(h, np.array([5]), 1.0)  # no column 5
    with pytest.raises(SolverError, match="addRows"):
        highs.add_rows(h, sp.csr_matrix(np.array([[1.0, 0.0, 1.0]])), np.zeros(1), np.ones(1))  # column 2


def _run(model: highs.LpModel, **options: object) -> highs.LpSolution:
    h = highs.quiet_highs()
    highs.set_options(h, **options)
    highs.pass_model(h, model)
    return highs.run(h)


def test_each_kind_of_model_status_maps() -> None:
    """Real HiGHS runs ending in each kind of model status, read from getModelStatus()."""
    assert _run(tiny()).status is Status.OPTIMAL
    infeasible = _run(tiny(-1.0), presolve="off")
    assert infeasible.status is Status.INFEASIBLE and infeasible.x.size == 0
    unbounded = highs.LpModel(  # min -x, x >= 0, no rows binding it
        c=np.array([-1.0]),
        a=sp.csc_matrix(np.array([[1.0]])),
        row_lower=np.array([0.0]),
        row_upper=np.array([np.inf]),
        col_lower=np.zeros(1),
        col_upper=np.full(1, np.inf),
    )
    assert _run(unbounded, presolve="off").status is Status.UNBOUNDED
    either = _run(unbounded, allow_unbounded_or_infeasible=True)  # presolve stops: kUnboundedOrInfeasible
    assert either.status is Status.INFEASIBLE and either.detail == "Primal infeasible or unbounded"
    limited = _run(tiny(), presolve="off", simplex_iteration_limit=0)
    assert limited.status is Status.ITERATION_LIMIT and limited.detail == "Iteration limit reached"
    empty = highs.quiet_highs()  # no model at all: kModelEmpty, not an answer
    sol = highs.run(empty)
    assert sol.status is Status.ERROR and sol.failed and sol.detail == "Empty"
    assert highs.STATUS_MAP[highspy.HighsModelStatus.kTimeLimit] is Status.TIME_LIMIT
    assert set(highs.STATUS_MAP) <= set(highspy.HighsModelStatus.__members__.values())


def test_component_blocks() -> None:
    edges = np.array([[0, 2], [2, 4], [1, 3]])
    count, sizes, blocks = component_blocks(6, edges)
    got = list(blocks)
    assert count == 3 and sizes.tolist() == [3, 2, 1]
    assert [b.members.tolist() for b in got] == [[0, 2, 4], [1, 3], [5]]
    assert got[0].edge_ids.tolist() == [0, 1] and got[0].local_edges.tolist() == [[0, 1], [1, 2]]
    assert got[1].local_edges.tolist() == [[0, 1]] and got[2].edge_ids.size == 0
