"""Row generation and auto: the exact LP's optimum, valid lower bounds, honest statuses.

Every lower bound is checked against certified mechanisms only (a valid bound is <= the cost of
*every* feasible mechanism), so the checks hold even where the reference LP itself is inexact
(large eps * d).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, registry, synthetic
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import euclidean
from mdp_core.solvers import auto, rowgen
from mdp_core.solvers.mechanisms import smooth_to_mdp
from mdp_core.solvers.result import Status
from mdp_core.solvers.solve import solve
from mdp_core.solvers.verify import objective, verify


def slack(x: float) -> float:
    return 1e-9 * max(1.0, abs(x))


def check_against_lp(inst: Instance, **args) -> None:
    ref = solve(inst, "lp")
    sol = solve(inst, "rowgen", **args)
    assert verify(inst, sol.z).passed
    assert sol.lower_bound is not None
    # valid bounds: below every certified mechanism, including the LP's
    assert sol.lower_bound <= ref.objective + slack(ref.objective)
    assert ref.lower_bound <= sol.objective + slack(sol.objective)
    assert sol.objective >= sol.lower_bound - slack(sol.objective)
    gap_rel = args.get("gap_rel", 1e-6)
    assert sol.status == Status.OPTIMAL, sol.extra
    assert sol.objective - sol.lower_bound <= gap_rel * abs(sol.objective) + slack(sol.objective)
    assert sol.objective == pytest.approx(ref.objective, rel=2 * gap_rel, abs=1e-9)
    tr = sol.trace
    assert len(tr) == sol.iterations >= 1
    assert np.all(np.diff(tr.lower_bound) >= 0) and np.all(np.diff(tr.upper_bound) <= 0)


@pytest.mark.parametrize(("rows", "cols", "k", "eps"), [(4, 5, 6, 10.0), (5, 6, 8, 2.0), (6, 8, 20, 10.0)])
def test_grid_matches_lp(rows, cols, k, eps):
    check_against_lp(grid(rows, cols, n_outputs=k, epsilon=eps))


def test_dense_synthetic_matches_lp():
    check_against_lp(synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0))


def test_disconnected_with_isolated_records():
    check_against_lp(synthetic(n_records=40, n_outputs=8, dim=4, sigma=4.0, epsilon=10.0, seed=2))


def test_simplex_rounds_and_small_batches_reach_the_same_optimum():
    inst = synthetic(n_records=40, n_outputs=10, epsilon=10.0, seed=4)
    check_against_lp(inst, lp_solver="simplex", rows_per_round=50, neighbours=1)


def test_no_edges_every_record_takes_its_cheapest_output():
    rng = np.random.default_rng(0)
    inst = Instance(np.full(5, 0.2), rng.random((5, 3)), np.zeros((0, 2), np.int64), np.zeros(0), 1.0, 1.0)
    sol = solve(inst, "rowgen")
    assert sol.status == Status.OPTIMAL
    assert sol.objective == pytest.approx(float(np.sum(0.2 * inst.costs.min(axis=1))))


def test_unknown_option_is_rejected_by_name():
    with pytest.raises(InputError, match="neighbors"):
        solve(grid(3, 3, n_outputs=3), "rowgen", neighbors=3)
    with pytest.raises(InputError, match="lp_solver"):
        rowgen.RowgenOptions(lp_solver="pdlp")


def test_time_limit_returns_a_certified_mechanism_and_an_honest_status():
    inst = synthetic(n_records=80, n_outputs=20, epsilon=10.0, seed=5)
    sol = solve(inst, "rowgen", max_rounds=1, rows_per_round=1)
    assert verify(inst, sol.z).passed
    if sol.status != Status.OPTIMAL:
        assert sol.status == Status.ITERATION_LIMIT
    assert sol.lower_bound <= sol.objective + slack(sol.objective)


def test_a_round_cut_by_the_time_limit_gives_its_lower_bound_only():
    """Past the time limit a round's closure and violation scan are skipped once an upper bound exists (at
    dense N = 10,000 they take about 1,000 s); round 1's closure never is: it is the only mechanism."""
    import time

    from mdp_core.solvers.highs import LpSolution

    def lp(status: Status) -> LpSolution:
        return LpSolution(status, np.ones(3), 0.0, 1, 1.0)

    later, earlier = time.perf_counter() + 3600, time.perf_counter() - 1
    assert rowgen._cut_by_limit(lp(Status.TIME_LIMIT), later, 0.5)  # HiGHS stopped it at the limit
    assert rowgen._cut_by_limit(lp(Status.OPTIMAL), earlier, 0.5)  # it ended after the limit
    assert not rowgen._cut_by_limit(lp(Status.OPTIMAL), later, 0.5)
    assert not rowgen._cut_by_limit(lp(Status.TIME_LIMIT), earlier, np.inf)  # no mechanism yet: its closure runs


@st.composite
def hard_instances(draw) -> Instance:
    """Random small point sets with near-duplicates and eps * d up to 30."""
    n = draw(st.integers(2, 10))
    k = draw(st.integers(1, min(5, n)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pts = rng.random((n, 2))
    if draw(st.booleans()) and n >= 3:  # a near-duplicate pair
        pts[1] = pts[0] + draw(st.sampled_from([1e-6, 1e-4, 1e-2]))
    eta = draw(st.floats(0.3, 1.5))
    eps = draw(st.floats(0.5, 30.0)) / eta
    outs = np.sort(rng.choice(n, size=k, replace=False))
    costs = euclidean(pts, pts[outs]) if draw(st.booleans()) else rng.random((n, k)) * 10
    return from_points(pts, "euclidean", eta, eps, costs, prior=rng.dirichlet(np.ones(n)), output_record_ids=outs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hard_instances())
def test_property_every_lower_bound_is_below_every_certified_mechanism(inst):
    """lp, rowgen and colgen: each lower bound <= each certified objective (hence <= the optimum)."""
    sols = {m: solve(inst, m) for m in ("lp", "rowgen", "colgen")}
    for m, s in sols.items():
        assert verify(inst, s.z).passed, m
    lows = {m: s.lower_bound for m, s in sols.items() if s.lower_bound is not None}
    assert "rowgen" in lows
    best = min(s.objective for s in sols.values())
    for m, lb in lows.items():
        assert lb <= best + slack(best), (m, lb, best)


def test_auto_picks_lp_for_small_and_rowgen_for_dense_and_records_why():
    small = grid(4, 5, n_outputs=6)
    name, reason, feats = auto.choose(small, auto.AutoOptions())
    assert name == "lp" and feats["largest_component_rows"] == 2 * small.n_edges * 6
    dense = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)
    assert auto.choose(dense, auto.AutoOptions(lp_max_rows=1000))[0] == "rowgen"
    sol = solve(dense, "auto", lp_max_rows=1000)
    assert sol.extra["auto"]["method"] == "rowgen"
    assert sol.extra["auto"]["features"]["n_records"] == 60
    assert sol.status == Status.OPTIMAL
    again = solve(dense, "auto", lp_max_rows=1000)
    assert np.array_equal(again.z, sol.z)  # deterministic


@pytest.mark.parametrize("eps", [20.0, 30.0, 50.0])
def test_large_eps_d_is_solved_not_broken(eps):
    """eps * d from 20 to 100 (ratios capped at e^30): HiGHS's IPM broke down on the raw rows; the
    sqrt(g)-balanced rows solve, and the answer agrees with column generation's."""
    inst = grid(5, 6, n_outputs=None, epsilon=eps)
    sol, ref = solve(inst, "rowgen"), solve(inst, "colgen")
    assert verify(inst, sol.z).passed
    assert sol.lower_bound is not None
    assert sol.lower_bound <= ref.objective + slack(ref.objective)
    assert abs(sol.objective - ref.objective) <= 1e-8


def test_interior_point_stops_at_a_tenth_of_the_requested_gap_and_the_bound_stays_valid():
    """gap_rel 1e-3: interior point at 1e-4 (HiGHS's default 1e-8 for tight targets); the looser LPs
    still give a bound below the exact optimum and a certified mechanism within the target."""
    assert rowgen.ipm_tolerance(1e-3) == pytest.approx(1e-4)
    assert rowgen.ipm_tolerance(1e-12) == 1e-8 and rowgen.ipm_tolerance(0.5) == 1e-3
    inst = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=1)
    h, *_ = rowgen.new_model(inst, SolverOptions(), rowgen.RowgenOptions(gap_rel=1e-3))
    got = h.getOptionValue("ipm_optimality_tolerance")
    assert (got[1] if isinstance(got, tuple) else got) == pytest.approx(1e-4)
    check_against_lp(inst, gap_rel=1e-3)


def test_round_tolerance_loosens_only_rounds_that_cannot_close():
    """Loose (1e-2) only when the gap, less the round's own tolerance, is beyond LOOSE_GAP and GAP_RATIO x
    the target, the batch was full and an upper bound is known; tight otherwise, for simplex and with
    loose_tolerance 0."""
    params = rowgen.RowgenOptions(gap_rel=1e-3)
    tight = rowgen.ipm_tolerance(1e-3)
    reach = max(rowgen.LOOSE_GAP, rowgen.GAP_RATIO * 1e-3)
    assert rowgen.round_tolerance(params, 1.0, 1.0 - 2 * reach, tight) == params.loose_tolerance == 1e-2
    assert rowgen.round_tolerance(params, 1.0, 1.0 - reach / 2, tight) == tight
    # a loose round's bound is looser by up to its tolerance: that much of its gap does not count
    assert rowgen.round_tolerance(params, 1.0, 1.0 - reach - 5e-3, 1e-2) == tight
    assert rowgen.round_tolerance(params, np.inf, 0.5, tight) == tight  # no upper bound yet
    assert rowgen.round_tolerance(params, 1.0, -np.inf, tight) == tight
    assert rowgen.round_tolerance(params, 1.0, 0.0, tight, full=False) == tight  # every violated row added
    assert rowgen.round_tolerance(rowgen.RowgenOptions(gap_rel=1e-3, loose_tolerance=0), 1.0, 0.0, tight) == tight
    assert rowgen.round_tolerance(rowgen.RowgenOptions(gap_rel=1e-3, lp_solver="simplex"), 1.0, 0.0, tight) == tight
    # a fine target never makes a large gap "within reach"; a coarse one does
    assert rowgen.round_tolerance(rowgen.RowgenOptions(gap_rel=1e-8), 1.0, 0.8, tight) == 1e-2
    assert rowgen.round_tolerance(rowgen.RowgenOptions(gap_rel=0.01), 1.0, 0.5, tight) == rowgen.ipm_tolerance(0.01)
    absolute = rowgen.RowgenOptions(gap_rel=0, gap_abs=0.1)
    assert rowgen.round_tolerance(absolute, 1.0, 0.5, tight) == rowgen.ipm_tolerance(0)


def test_loose_rounds_end_tight_match_the_lp_and_repeat_exactly():
    """Gaps of 12-23 % after the first rounds: those rounds are solved loose (trace column lp_tolerance;
    round 2 started tight beside round 1's closure and was solved again, loose), the closing ones
    tight; bounds and mechanism as the exact LP's, and a second run gives the same rounds."""
    inst = grid(6, 8, n_outputs=20, epsilon=2.0)
    args = {"neighbours": 1, "rows_per_round": 100, "gap_rel": 1e-3}
    check_against_lp(inst, **args)
    sol, again = solve(inst, "rowgen", **args), solve(inst, "rowgen", **args)
    tr, tight = sol.trace, rowgen.ipm_tolerance(1e-3)
    assert tr.lp_tolerance.iloc[0] == tight and tr.lp_tolerance.iloc[-1] == tight
    assert tr.lp_tolerance.iloc[1] == 1e-2, tr[["gap", "upper_bound", "lp_tolerance"]]
    cols = ["lower_bound", "upper_bound", "rows", "rows_added", "lp_tolerance"]
    assert tr[cols].equals(again.trace[cols]) and np.array_equal(sol.z, again.z)
    never = solve(inst, "rowgen", loose_tolerance=0.0, **args).trace
    assert (never.lp_tolerance == tight).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hard_instances())
def test_property_loose_interior_point_bound_is_below_every_certified_mechanism(inst):
    """gap_rel 1e-3 (interior point at 1e-4) on eps * d up to 30: the bound stays valid."""
    sol = solve(inst, "rowgen", gap_rel=1e-3)
    ref = solve(inst, "lp")
    assert verify(inst, sol.z).passed
    assert sol.lower_bound is not None
    best = min(sol.objective, ref.objective)
    assert sol.lower_bound <= best + slack(best)


def test_overlapped_rounds_report_the_rows_of_the_rounds_they_solved():
    """Round r's closure runs beside round r + 1's LP; a round that closes the gap discards that LP: the
    trace and ``extra["rows"]`` count only the rows of LPs whose answers were used."""
    inst = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)
    sol = solve(inst, "rowgen", neighbours=1, rows_per_round=300, gap_rel=1e-6)
    tr = sol.trace
    assert sol.status == Status.OPTIMAL and len(tr) >= 3
    assert list(np.diff(tr.rows)) == list(tr.rows_added[:-1])  # each round holds the last one's rows plus its own
    assert tr.rows_added.iloc[-1] == 0 and sol.extra["rows"] == tr.rows.iloc[-1]
    # a run stopped after two rounds saw the same two rounds: the LP started beside round 2's closure
    # and dropped changes nothing
    two = solve(inst, "rowgen", neighbours=1, rows_per_round=300, gap_rel=1e-6, max_rounds=2)
    assert two.status == Status.ITERATION_LIMIT and two.extra["rows"] == tr.rows.iloc[1]
    cols = ["lower_bound", "upper_bound", "rows", "rows_added"]
    assert two.trace[cols].equals(tr[cols].iloc[:2])


def test_a_stop_during_overlapped_rounds_ends_the_solve_within_seconds():
    import threading

    from mdp_core.errors import Interrupted
    from mdp_core.runtime import control

    inst = synthetic(n_records=150, n_outputs=40, epsilon=10.0, seed=0)
    timer = threading.Timer(3.0, control.request_stop, args=("operator pressed stop",))
    timer.start()
    try:
        with control.scope(label="solve"), pytest.raises(Interrupted, match="operator pressed stop"):
            solve(inst, "rowgen", neighbours=1, rows_per_round=500, gap_rel=1e-9)
    finally:
        timer.cancel()
        control.clear_stop()


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_lagrangian_steps_keep_the_bound_valid_and_save_rounds(executor):
    inst = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)
    check_against_lp(inst, lagrangian_steps=30, lagrangian_executor=executor)
    plain = solve(inst, "rowgen", gap_rel=1e-6)
    lag = solve(inst, "rowgen", gap_rel=1e-6, lagrangian_steps=30, lagrangian_executor=executor)
    assert lag.iterations < plain.iterations  # measured: 1 round against 2
    (first,) = lag.extra["lagrangian"]
    assert first["round"] == 1 and first["bound"] == lag.lower_bound > first["first"]
    assert lag.trace.lower_bound.iloc[0] == lag.lower_bound


def test_lagrangian_bounds_are_reported_as_they_improve():
    inst = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)
    lines: list = []
    res = solve(inst, "rowgen", gap_rel=1e-6, lagrangian_steps=30, progress=lines.append)
    lag = [ln for ln in lines if "Lagrangian" in ln and "round 1 Lagrangian" in ln]
    assert len(lag) >= 2  # the first evaluation and at least one better bound, before the round's own line
    lows = [ln.lb for ln in lag]
    assert lows == sorted(lows) and lows[-1] == res.extra["lagrangian"][0]["bound"]
    assert all(ln.lb <= res.objective + 1e-9 for ln in lag)


def test_lagrangian_steps_grid_and_components():
    check_against_lp(grid(5, 6, n_outputs=8, epsilon=10.0), lagrangian_steps=10)
    check_against_lp(synthetic(n_records=40, n_outputs=8, dim=4, sigma=4.0, epsilon=10.0, seed=2), lagrangian_steps=10)


def test_lagrangian_rows_match_the_lp_and_repeat_exactly():
    inst = grid(6, 8, n_outputs=12, epsilon=2.0)
    args = dict(lagrangian_steps=10, neighbours=1, rows_per_round=100)
    check_against_lp(inst, lagrangian_rows=True, **args)
    plain = solve(inst, "rowgen", gap_rel=1e-6, **args)
    with_rows = solve(inst, "rowgen", gap_rel=1e-6, lagrangian_rows=True, **args)
    again = solve(inst, "rowgen", gap_rel=1e-6, lagrangian_rows=True, **args)
    cols = ["iteration", "lower_bound", "upper_bound", "rows", "rows_added"]
    assert with_rows.trace[cols].equals(again.trace[cols]) and np.array_equal(with_rows.z, again.z)
    # the subproblems' binding rows join the violated ones (beyond the batch of 100) in the tight rounds
    added = with_rows.trace.rows_added
    assert added.max() > 100 and plain.trace.rows_added.max() == 100
    assert (with_rows.trace.lp_tolerance.shift(-1)[added > 100] == 1e-7).all()
    assert with_rows.iterations < plain.iterations  # measured: 5 rounds against 9


def test_with_binding_adds_rows_not_held_once_in_edge_output_order():
    inst = grid(3, 3, n_outputs=3)
    rows = rowgen._Rows.of(inst)
    rows.hold(np.array([0]), np.array([1]))
    ei, ki = np.array([2, 5]), np.array([0, 2])
    binding = [np.array([2, 3]), np.array([0, 4]), np.array([5])]
    e, k = rowgen._with_binding(rows, ei, ki, binding)
    assert list(zip(e.tolist(), k.tolist(), strict=True)) == [(2, 0), (3, 0), (4, 1), (5, 2)]


def test_share_count_takes_the_largest_deficits_up_to_the_share_of_their_sum():
    d = np.array([1.0, 5.0, 1.0, 3.0])
    assert rowgen.share_count(d, 0.8) == 2  # 5 + 3 = 8 of 10
    assert rowgen.share_count(d, 0.81) == 3
    assert rowgen.share_count(d, 1.0) == 4
    assert rowgen.share_count(d, 0.0) == 0
    assert rowgen.share_count(np.zeros(0), 0.99) == 0


def test_deficit_share_adds_the_largest_deficits_beyond_the_limit():
    inst = synthetic(n_records=60, n_outputs=10, epsilon=10.0, seed=3)
    rows = rowgen._Rows.of(inst)
    z = np.random.default_rng(0).dirichlet(np.ones(10), size=60)
    every = rowgen.violated(z, rows, 1e-12, 10**9)
    few = rowgen.violated(z, rows, 1e-12, 5)
    more = rowgen.violated(z, rows, 1e-12, 5, share=0.99)
    p = rows.pairs

    def deficit(sel):
        return z[p.a[sel[0]], sel[1]] / p.g[sel[0]] - z[p.b[sel[0]], sel[1]]

    assert few[0].size == 5 and every[0].size > more[0].size > 5
    assert more[0].size == rowgen.share_count(deficit(every), 0.99)
    assert np.sum(deficit(more)) >= 0.99 * np.sum(deficit(every)) - 1e-12
    assert set(zip(*few, strict=True)) <= set(zip(*more, strict=True))  # the largest deficits, the limit's included
    assert deficit(more).min() >= np.sort(deficit(every))[::-1][more[0].size - 1]
    assert rowgen.violated(z, rows, 1e-12, 10**9, share=0.5)[0].size == every[0].size  # a limit above stays


@pytest.mark.parametrize(
    ("inst", "start"),
    [
        (synthetic(n_records=80, n_outputs=12, epsilon=10.0, seed=5), 1),
        (synthetic(n_records=120, n_outputs=10, epsilon=10.0, seed=6), 2),
        (grid(8, 10, n_outputs=15, epsilon=2.0), 1),
    ],
    ids=["synthetic80", "synthetic120-from-round-2", "grid80"],
)
def test_deficit_share_rounds_reach_the_lp_optimum(inst, start):
    check_against_lp(inst, deficit_share=0.99, share_from_round=start, rows_per_round=50, neighbours=1, gap_rel=1e-4)


# ---------------------------------------------------------------- support: variables only on S (issue 43)
@pytest.mark.parametrize("tau", [1e-2, 1e-5])
@pytest.mark.parametrize(
    "inst",
    [
        grid(5, 6, n_outputs=8, epsilon=2.0),
        synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0),
        synthetic(n_records=40, n_outputs=8, dim=4, sigma=4.0, epsilon=10.0, seed=2),  # components, isolated
    ],
    ids=["grid", "dense", "components"],
)
def test_support_matches_the_lp_with_bounds_over_every_pair(inst, tau):
    check_against_lp(inst, support_tau=tau)


def test_support_holds_fewer_columns_and_grows_only_where_needed():
    inst = synthetic(n_records=120, n_outputs=30, epsilon=10.0, seed=1)
    sol = solve(inst, "rowgen", support_tau=1e-5, gap_rel=1e-6)
    start = rowgen.support_estimate(inst, 1e-5)
    assert sol.status == Status.OPTIMAL and verify(inst, sol.z).passed
    assert start.sum() <= sol.extra["columns"] < inst.n_records * inst.n_outputs
    full = solve(inst, "rowgen", gap_rel=1e-6)
    assert full.extra["columns"] == inst.n_records * inst.n_outputs
    assert sol.objective == pytest.approx(full.objective, rel=2e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hard_instances(), st.sampled_from([0.5, 1e-2, 1e-6]))
def test_property_support_bound_is_below_every_certified_mechanism(inst, tau):
    """The bound over every pair stays valid whatever S held (rowgen's docstring, "Support")."""
    ref = solve(inst, "lp")
    sol = solve(inst, "rowgen", support_tau=tau)
    assert verify(inst, sol.z).passed
    assert sol.lower_bound <= min(ref.objective, sol.objective) + slack(ref.objective)
    assert ref.lower_bound <= sol.objective + slack(sol.objective)


def test_support_estimate_is_the_nearest_output_closure_cut_at_tau():
    """(i, k) kept iff the graph distance from i to the records whose cheapest output is k is within
    ln(1/tau)/eps: checked against all-pairs shortest paths; smaller tau keeps a superset."""
    from scipy.sparse import csgraph, csr_matrix

    inst = synthetic(n_records=80, n_outputs=12, epsilon=10.0, seed=3)
    n = inst.n_records
    e = np.asarray(inst.edges)
    d = np.asarray(inst.distances)
    dist = csgraph.shortest_path(
        csr_matrix((np.r_[d, d], (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n))
    )
    best = np.argmin(inst.costs, axis=1)
    for tau in (1e-1, 1e-3, 1e-6):
        mask = rowgen.support_estimate(inst, tau)
        cut = np.log(1 / tau) / inst.epsilon
        want = np.zeros_like(mask)
        for k in np.unique(best):
            want[:, k] = dist[:, best == k].min(axis=1) <= cut + 1e-12
        assert np.array_equal(mask, want), tau
        assert mask[np.arange(n), best].all()
    assert (rowgen.support_estimate(inst, 1e-6) >= rowgen.support_estimate(inst, 1e-3)).all()


def test_price_takes_the_pairs_outside_s_with_negative_reduced_cost_only():
    s = rowgen.Support.of(np.array([[True, False, False], [False, True, True]]))
    c = np.array([0.5, 0.1, 0.9, 0.2, 0.3, 0.4])
    got = rowgen.price(s, c, np.array([0.5, 0.3]), bound=1.0, gap_rel=0.0)
    assert got.tolist() == [1, 3]  # (0, 1): 0.1 < 0.5; (1, 0): 0.2 < 0.3; (0, 2) costs more than y_0
    assert s.join(np.r_[got, got, 0]).tolist() == [1, 3]  # new columns once each; (0, 0) held already
    assert s.col.tolist() == [[0, 3, -1], [4, 1, 2]]
    assert s.scatter(np.arange(1.0, 6.0)).tolist() == [[1.0, 4.0, 0.0], [5.0, 2.0, 3.0]]


def test_auto_holds_only_the_support_when_the_loss_is_the_metric():
    """The distance loss (synthetic: c_ik = d(r_i, o_k)) gets support_tau; any other loss does not."""
    dense = synthetic(n_records=60, n_outputs=20, epsilon=10.0, seed=0)
    name, reason, feats = auto.choose(dense, auto.AutoOptions(lp_max_rows=1000))
    assert name == "rowgen" and feats["loss_is_metric"] and "support_tau 1e-05" in reason
    assert auto.delegated(name, auto.AutoOptions(lp_max_rows=1000), feats) == {"support_tau": auto.SUPPORT_TAU}
    sol = solve(dense, "auto", gap_rel=1e-6, lp_max_rows=1000)
    assert sol.extra["columns"] < dense.n_records * dense.n_outputs and sol.status == Status.OPTIMAL
    other = dense.replace(costs=dense.costs**2)  # squared distance: not the metric
    name, reason, feats = auto.choose(other, auto.AutoOptions(lp_max_rows=1000))
    assert name == "rowgen" and not feats["loss_is_metric"] and "support" not in reason
    assert auto.delegated(name, auto.AutoOptions(lp_max_rows=1000), feats) == {}
    assert solve(other, "auto", lp_max_rows=1000).extra["columns"] == other.n_records * other.n_outputs


def test_held_rows_are_keys_not_a_mask_and_violated_skips_them():
    """The held rows are kept as sorted keys e K + k (memory O(|R|), no (2E, K) mask): membership and
    the violation scan agree with a dense mask of the same rows."""
    inst = synthetic(n_records=40, n_outputs=6, epsilon=10.0, seed=5)
    rows = rowgen._Rows.of(inst)
    rng = np.random.default_rng(1)
    z = rng.dirichlet(np.ones(6), size=40)
    every_e, every_k = rowgen.violated(z, rows, 1e-12, 10**9)
    pick = rng.random(every_e.size) < 0.5
    rows.hold(every_e[pick], every_k[pick])
    rows.hold(every_e[pick][:3], every_k[pick][:3])  # held twice: once
    mask = np.zeros((rows.pairs.size, 6), dtype=bool)
    mask[every_e[pick], every_k[pick]] = True
    assert rows.held.size == mask.sum() and np.all(np.diff(rows.held) > 0)
    e_all, k_all = np.divmod(np.arange(mask.size), 6)
    assert np.array_equal(rows.is_held(e_all, k_all), mask.ravel())
    left = set(zip(*rowgen.violated(z, rows, 1e-12, 10**9), strict=True))
    assert left == set(zip(every_e[~pick].tolist(), every_k[~pick].tolist(), strict=True))
    assert rows.full_count == mask.size


def test_violated_keeps_the_best_rows_whatever_the_chunks_in_bounded_memory():
    """Cutting the candidates to the batch's best as the scan streams (memory O(chunk + limit)) keeps exactly the
    rows one cut at the end keeps: the largest deficits, ties by edge then output, in (edge, output) order."""
    inst = synthetic(n_records=60, n_outputs=10, epsilon=10.0, seed=3)
    rows = rowgen._Rows.of(inst)
    z = np.random.default_rng(0).dirichlet(np.ones(10), size=60)
    z[5:9] = z[4]  # equal rows: tied deficits
    every_e, every_k = rowgen.violated(z, rows, 1e-12, 10**9)
    p = rows.pairs
    deficit = z[p.a[every_e], every_k] / p.g[every_e] - z[p.b[every_e], every_k]
    for limit in (1, 7, 50, every_e.size):
        want = np.lexsort((every_k, every_e, -deficit))[:limit]
        want = want[np.lexsort((every_k[want], every_e[want]))]
        for chunk in (10, 100, 1 << 22):  # 1 to 10,000 edges a chunk: many cuts, or none
            e, k = rowgen.violated(z, rows, 1e-12, limit, chunk=chunk)
            assert np.array_equal(e, every_e[want]) and np.array_equal(k, every_k[want]), (limit, chunk)


# ---------------------------------------------------------------- a non-uniform prior (issue 51)
def skewed(inst: Instance, seed: int = 0) -> Instance:
    """``inst`` with a DP-histogram-like prior: a few heavy records (a cluster), the rest 1 + noise, 30-90x apart."""
    rng = np.random.default_rng(seed)
    counts = np.maximum(np.round(rng.laplace(0, 4.0, inst.n_records)), 0) + 1
    heavy = np.argsort(np.linalg.norm(inst.record_points() - inst.record_points()[0], axis=1))[: inst.n_records // 6]
    counts[heavy] += rng.integers(20, 60, heavy.size)
    return inst.replace(prior=counts / counts.sum())


@pytest.mark.parametrize(
    "inst",
    [
        grid(6, 8, n_outputs=12, epsilon=2.0),
        synthetic(n_records=80, n_outputs=20, epsilon=10.0, seed=3),
    ],
    ids=["grid", "dense"],
)
@pytest.mark.parametrize("gap", [1e-3, 1e-6])
def test_a_skewed_prior_converges_on_the_support_to_the_lp_optimum(inst, gap):
    inst = skewed(inst)
    assert inst.prior.max() / inst.prior.min() > 20
    check_against_lp(inst, support_tau=1e-5, gap_rel=gap)


ROME = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "rome_center"


@pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data absent")
def test_a_clustered_prior_on_the_release_class_reaches_the_exact_lp():
    """Rome road nodes, the release's distance loss, eta 1 km, eps 10 / km, a DP-histogram-like prior."""
    params = dict(nodes=str(ROME / "nodes.csv"), edges=str(ROME / "edges.csv"), n_records=60, n_outputs=30)
    inst = skewed(registry.load("road", params | dict(eta=1.0, epsilon=10.0, loss="distance")))
    assert inst.prior.max() / inst.prior.min() > 20
    check_against_lp(inst, support_tau=1e-5, gap_rel=1e-3)


def test_row_caps_are_the_largest_entries_that_break_no_row():
    inst = grid(4, 5, n_outputs=6, epsilon=2.0)
    z = np.random.default_rng(1).dirichlet(np.ones(6), size=inst.n_records)
    want = np.full(z.shape, np.inf)
    for (a, b), d in zip(inst.edges, inst.distances, strict=True):  # brute force, both directions
        want[a] = np.minimum(want[a], np.exp(inst.epsilon * d) * z[b])
        want[b] = np.minimum(want[b], np.exp(inst.epsilon * d) * z[a])
    for chunk in (6, 60, 1 << 22):  # one head a block, several, all
        assert np.allclose(rowgen.row_caps(inst, z, chunk=chunk), want, rtol=1e-12)


def test_a_light_records_spike_is_cut_not_spread_and_the_closure_stays_verified():
    """The closure of an LP point raises every neighbour up to a spike; at a light record lowering the spike
    is cheaper (issue 51). The round's upper bound is then the cheaper closure, verified."""
    inst = skewed(grid(6, 8, n_outputs=12, epsilon=2.0))
    z = solve(inst, "lp").z.copy()
    light = int(np.argmin(inst.prior))
    far = int(np.argmax(inst.costs[light]))
    z[light] *= 0.7
    z[light, far] += 0.3  # mass where no neighbour has any: every row from it to them breaks
    low = rowgen.lowered(inst, z)
    assert np.all(low <= z) and np.all(low.sum(axis=1) > 0)
    assert low[light, far] < z[light, far]
    plain, _ = smooth_to_mdp(inst, z)
    cz, ub = rowgen._closure(inst, z)
    assert verify(inst, cz).passed and ub == pytest.approx(objective(inst, cz))
    assert ub < objective(inst, plain) - 1e-6
    uniform = inst.replace(prior=np.full(inst.n_records, 1.0 / inst.n_records))
    cu, ubu = rowgen._closure(uniform, z)  # no cut with a uniform prior: the plain or the softened closure
    assert verify(uniform, cu).passed and ubu <= objective(uniform, smooth_to_mdp(uniform, z)[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_softened_closure_is_verified_and_never_costs_more_than_the_plain_one(seed):
    """A spike of an LP point (HiGHS's optimum, a record's mass moved where no neighbour has any, as rowgen's
    points have in rows they do not hold, issue 51): the round's upper bound is a verified mechanism, no dearer
    than the plain closure, and here strictly cheaper: the softened point spreads less than the spike."""
    inst = synthetic(n_records=60, n_outputs=12, epsilon=4.0, seed=seed)
    z = solve(inst, "lp").z.copy()
    rng = np.random.default_rng(seed)
    for i in rng.choice(inst.n_records, 3, replace=False):
        far = int(np.argmax(inst.costs[i]))
        z[i] *= 0.6
        z[i, far] += 0.4
    plain = objective(inst, smooth_to_mdp(inst, z)[0])
    soft, _ = smooth_to_mdp(inst, rowgen.softened(inst, z))
    assert verify(inst, soft).passed
    cz, ub = rowgen._closure(inst, z)
    assert verify(inst, cz).passed and ub == pytest.approx(objective(inst, cz))
    assert ub <= plain and ub <= objective(inst, soft) + slack(ub)
    assert ub < plain - 1e-6
    far = rowgen._closure(inst, z, lower=0.5 * plain)[0]  # a round far from closing: the plain closure only
    assert np.array_equal(far, smooth_to_mdp(inst, z)[0])


def test_a_closure_that_fails_verification_gives_no_upper_bound():
    """A rough point (sparse rows far from summing to 1, small eps) whose closure does not pass verify within
    smooth_to_mdp's rounds, nor does its softened point's: the round's upper bound is inf, not the cost of an
    unverified mechanism (a gap or OPTIMAL from an infeasible point); the point is still returned for certify."""
    inst = grid(8, 8, n_outputs=10, epsilon=0.1)
    rng = np.random.default_rng(0)
    z = rng.dirichlet(np.full(10, 0.01), size=inst.n_records) * rng.uniform(0.01, 100, (inst.n_records, 1))
    cz, ub = rowgen._closure(inst, z)
    assert not verify(inst, cz).passed
    assert ub == np.inf


def test_the_softening_sweeps_stop_at_the_deadline():
    inst = synthetic(n_records=60, n_outputs=12, epsilon=4.0, seed=0)
    z = solve(inst, "lp").z.copy()
    z[0] *= 0.6
    z[0, int(np.argmax(inst.costs[0]))] += 0.4
    assert not np.array_equal(rowgen.softened(inst, z), z)
    assert np.array_equal(rowgen.softened(inst, z, deadline=0.0), z)  # past it: the point as it came


def test_a_softened_row_is_the_exact_optimum_of_its_piecewise_linear_problem():
    """:func:`rowgen._soft_row` against HiGHS on the same LP: min w_i . x + sum_jk W_jk u_jk, u_jk >= x_k / g_j - z_jk,
    u >= 0, x_k >= max_j z_jk / g_j, sum x = 1."""
    from scipy.optimize import linprog

    rng = np.random.default_rng(5)
    for _ in range(20):
        j, k = int(rng.integers(1, 6)), int(rng.integers(2, 7))
        z = rng.dirichlet(np.full(k, 0.5), size=j + 1) * (rng.random((j + 1, k)) > 0.3)
        weighted = rng.random((j + 1, k))
        g = np.exp(rng.uniform(0.05, 3.0, j))
        nb = np.arange(1, j + 1)
        x = rowgen._soft_row(z, weighted, 0, nb, g)
        lo = np.max(z[nb] / g[:, None], axis=0)
        if x is None:
            assert lo.sum() >= 1.0
            continue
        cost = np.r_[weighted[0], weighted[nb].ravel()]
        a_ub = np.hstack([_raise_rows(g, k), -np.eye(j * k)])  # x_k / g_j - u_jk <= z_jk, (j, k) row-major
        b_ub = z[nb].ravel()
        bounds = [(lo_k, None) for lo_k in lo] + [(0, None)] * (j * k)
        a_eq = np.r_[np.ones(k), np.zeros(j * k)][None, :]
        ref = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
        assert ref.status == 0
        u = np.maximum(x[None, :] / g[:, None] - z[nb], 0.0)
        got = float(weighted[0] @ x + np.sum(weighted[nb] * u))
        assert np.all(x >= lo - 1e-12) and x.sum() == pytest.approx(1.0)
        assert got == pytest.approx(ref.fun, rel=1e-9, abs=1e-12)


def _raise_rows(g: np.ndarray, k: int) -> np.ndarray:
    """(J K, K): row j K + k is x_k / g_j."""
    return np.kron(1.0 / g[:, None], np.eye(k))


def test_a_support_whose_held_rows_are_infeasible_grows_to_every_pair():
    """Found by the support's property test: at tau 0.5 record 2's two pairs must hold 0.68 + 0.33 of its mass
    for the rows of its neighbours' only pairs (records 3 and 5), so the LP on S is infeasible."""
    pts = [[0.853742, 0.05707], [0.251081, 0.654027], [0.577727, 0.562606]]
    pts += [[0.54325, 0.373169], [0.979433, 0.644686], [0.032683, 0.471864]]
    prior = np.array([0.58887246, 0.02930619, 0.17061519, 0.0685363, 0.0796522, 0.06301766])
    costs = np.array([[5.59950691, 3.6048364], [5.17995622, 0.82704132], [1.20576891, 8.74304618]])
    costs = np.r_[costs, [[1.38608938, 1.69925253], [4.13243217, 2.179987], [8.93822338, 6.06937555]]]
    outs = np.array([2, 3])
    inst = from_points(np.array(pts), "euclidean", 1.5, 2.0, costs, prior=prior / prior.sum(), output_record_ids=outs)
    assert not rowgen.support_estimate(inst, 0.5).all()
    check_against_lp(inst, support_tau=0.5)
