"""The row-sum Lagrangian bound (mdp_core.solvers.lagrangian): valid for any multipliers, at least rowgen's own
bound at its duals, valid when the lazy rows stop early, and identical on any number of workers."""

from __future__ import annotations

import numpy as np
import pytest

from mdp_core.declarations.methods import RowgenOptions
from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid, synthetic
from mdp_core.problem.datasets.common import from_points
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import euclidean
from mdp_core.runtime.executor import ProcessExecutor
from mdp_core.solvers import highs, lagrangian, rowgen
from mdp_core.solvers.solve import solve


def path(n: int = 30, k: int = 8, eps: float = 3.0) -> Instance:
    """Records on a line 1 apart, eta 1.2: each record's neighbours are the next and previous one."""
    rng = np.random.default_rng(5)
    pts = np.c_[np.arange(n, dtype=float), np.zeros(n)]
    outs = np.sort(rng.choice(n, size=k, replace=False))
    return from_points(pts, "euclidean", 1.2, eps, euclidean(pts, pts[outs]), output_record_ids=outs)


INSTANCES = {
    "grid": lambda: grid(5, 6, n_outputs=10, epsilon=10.0),
    "components": lambda: synthetic(n_records=40, n_outputs=8, dim=4, sigma=4.0, epsilon=10.0, seed=2),
    "dense": lambda: synthetic(n_records=50, n_outputs=12, epsilon=10.0, seed=0),
    "path": path,
}


def slack(x: float) -> float:
    return 1e-9 * max(1.0, abs(x))


def per_output(rows: rowgen._Rows, first: int, k: int) -> list[np.ndarray]:
    """The directed edge ids of the rows in ``rows``' blocks from ``first`` on, one array per output."""
    if first >= len(rows.edge):
        return [np.zeros(0, np.int64)] * k
    ei, ki = np.concatenate(rows.edge[first:]), np.concatenate(rows.out[first:])
    order = np.lexsort((ei, ki))
    return np.split(ei[order], np.searchsorted(ki[order], np.arange(1, k)))


def round_one(inst: Instance) -> tuple[float, np.ndarray, list[np.ndarray], float]:
    """rowgen's first restricted LP, solved by simplex: (its proven bound, its row-sum duals in the
    instance's unit, its rows per output, its optimum)."""
    n, k = inst.n_records, inst.n_outputs
    h, rows, c, scale = rowgen.new_model(inst, SolverOptions(), RowgenOptions(lp_solver="simplex"))
    sol = highs.run(h, want_duals=True)
    lb = scale * rowgen.lower_bound(c, rows, sol.row_dual[n:], k)
    lam = scale * np.asarray(sol.row_dual[:n])
    return lb, lam, per_output(rows, 0, k), scale * sol.objective


@pytest.fixture(scope="module", params=sorted(INSTANCES))
def case(request):
    inst = INSTANCES[request.param]()
    return inst, solve(inst, "lp").objective


def test_bound_is_valid_for_any_multipliers(case):
    inst, opt = case
    rng = np.random.default_rng(0)
    lb, lam, held, _ = round_one(inst)
    scale = float(np.max(inst.prior[:, None] * inst.costs))
    with lagrangian.Lagrangian(inst) as lag:
        for trial in range(6):
            x = lam + rng.normal(0.0, scale * (0.1 if trial < 3 else 2.0), inst.n_records)
            ev = lag.evaluate(x)
            assert ev.complete
            assert ev.dual_form <= ev.bound + slack(ev.bound)  # the evaluated form maximises over lam
            assert ev.bound <= opt + slack(opt)
        ev = lag.evaluate(np.zeros(inst.n_records))  # lam = 0: min over P of c_k . z is 0 at z = 0
        assert ev.bound <= opt + slack(opt)


def test_bound_at_rowgen_duals_is_at_least_its_bound(case):
    inst, opt = case
    lb, lam, held, lp_r = round_one(inst)
    with lagrangian.Lagrangian(inst) as lag:
        ev = lag.evaluate(lam, rows=held)
    assert ev.complete
    assert ev.bound <= opt + slack(opt)
    assert ev.bound >= lb - 1e-8 * max(1.0, abs(lb))
    assert ev.bound >= lp_r - 1e-7 * max(1.0, abs(lp_r))


def test_subgradient_ascent_stays_valid_and_rises(case):
    inst, opt = case
    lb, lam, held, _ = round_one(inst)
    ub = 1.01 * opt + 1e-9
    with lagrangian.Lagrangian(inst) as lag:
        asc = lagrangian.ascend(lag, lam, 15, ub, rows=held)
    assert asc.first <= asc.bound <= opt + slack(opt)
    assert asc.evaluations >= 1


def test_binding_rows_are_tight_at_the_subproblem_points(case):
    inst, _ = case
    _, lam, _, _ = round_one(inst)
    p = rowgen._Rows.of(inst).pairs
    with lagrangian.Lagrangian(inst, pairs=p) as lag:
        asc = lagrangian.ascend(lag, lam, 5, 1.01 * case[1] + 1e-9)
        ev = lag.evaluate(asc.lam)
    assert len(asc.binding) == len(ev.binding) == inst.n_outputs
    for k, pick in enumerate(ev.binding):
        x = ev.z[:, k]
        assert np.unique(pick).size == pick.size
        # a row with a nonzero dual is tight (complementary slackness): x_a / g_ab = x_b, in probability mass
        assert np.allclose(x[p.a[pick]] / p.g[pick], x[p.b[pick]], rtol=0.0, atol=1e-7)


def test_dense_subproblems_have_binding_rows():
    inst = INSTANCES["dense"]()
    _, lam, _, _ = round_one(inst)
    with lagrangian.Lagrangian(inst) as lag:
        ev = lag.evaluate(lam)
    assert sum(b.size for b in ev.binding) > inst.n_outputs  # measured: hundreds


def test_lazy_rows_stopped_early_still_bound():
    inst = INSTANCES["dense"]()
    opt = solve(inst, "lp").objective
    _, lam, _, _ = round_one(inst)
    with lagrangian.Lagrangian(inst) as lag:
        early = lag.evaluate(lam, max_solves=1)  # no held row yet: the box alone
    assert not early.complete and early.held_rows == 0
    assert early.bound <= opt + slack(opt)
    with lagrangian.Lagrangian(inst) as lag:
        steps = [lag.evaluate(lam, max_solves=2) for _ in range(3)]  # rows accumulate between calls
    held = [s.held_rows for s in steps]
    assert held == sorted(held) and held[0] > 0
    assert all(s.bound <= opt + slack(opt) for s in steps)


def test_identical_on_one_and_two_worker_processes():
    inst = INSTANCES["dense"]()
    _, lam, held, _ = round_one(inst)
    out = []
    for procs in (1, 2):
        with lagrangian.Lagrangian(inst, executor=ProcessExecutor(procs)) as lag:
            asc = lagrangian.ascend(lag, lam, 4, 1.01 * solve(inst, "lp").objective, rows=held)
            ev = lag.evaluate(asc.lam)
        out.append((asc.bound, asc.lam, ev.bound, ev.z))
    with lagrangian.Lagrangian(inst) as lag:  # serial, in this process
        asc = lagrangian.ascend(lag, lam, 4, 1.01 * solve(inst, "lp").objective, rows=held)
    assert out[0][0] == out[1][0] == asc.bound
    assert np.array_equal(out[0][1], out[1][1]) and np.array_equal(out[0][3], out[1][3])
    assert out[0][2] == out[1][2]


def test_function_form_and_bad_input():
    inst = INSTANCES["path"]()
    opt = solve(inst, "lp").objective
    bound, z, stats = lagrangian.lagrangian_bound(inst, np.zeros(inst.n_records))
    assert z.shape == (inst.n_records, inst.n_outputs) and stats["status"] == "optimal"
    assert bound <= opt + slack(opt)
    with pytest.raises(InputError, match="30 finite numbers"):
        lagrangian.lagrangian_bound(inst, np.zeros(3))


def test_purged_models_still_bound(monkeypatch):
    inst = INSTANCES["dense"]()
    opt = solve(inst, "lp").objective
    _, lam, _, _ = round_one(inst)
    with lagrangian.Lagrangian(inst) as lag:
        full = lagrangian.ascend(lag, lam, 6, 1.01 * opt)
    monkeypatch.setattr(lagrangian, "PURGE_ROWS", 0.5)  # rebuild a model beyond N / 2 held rows
    with lagrangian.Lagrangian(inst) as lag:
        purged = lagrangian.ascend(lag, lam, 6, 1.01 * opt)
        assert sum(w.purges for w in lag.ex.workers) > 0
    assert purged.bound <= opt + slack(opt)
    assert purged.first == pytest.approx(full.first, rel=1e-9)  # no purge before the first evaluation
    assert purged.bound >= purged.first
