"""Statuses, the gap rule and honest status (issue 11): "optimal" only with a bound within the gap."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from mdp_core.declarations.methods import Method
from mdp_core.errors import InputError, SolverError
from mdp_core.problem.datasets import grid
from mdp_core.solvers import lp, mechanisms
from mdp_core.solvers import solve as solve_mod
from mdp_core.solvers.result import RawSolution, Status, gap_closed, honest_status
from mdp_core.solvers.solve import solve


@contextlib.contextmanager
def registered(name: str, method):
    """``method`` (taking ``params: lp.LpOptions``) in the solve registry as ``name`` for the duration of the block."""
    solve_mod.METHODS[name] = Method(method, lp.LpOptions, "a test method")
    try:
        yield
    finally:
        del solve_mod.METHODS[name]


def test_status_values_are_the_solve_json_strings() -> None:
    assert Status.OPTIMAL == "optimal" and json.dumps(Status.TIME_LIMIT) == '"time_limit"'
    assert f"{Status.ITERATION_LIMIT}" == "iteration_limit" and Status("feasible") is Status.FEASIBLE


def test_gap_closed() -> None:
    assert gap_closed(1.0, 1.0 - 1e-7, 0.0, 1e-6)
    assert not gap_closed(1.0, 0.9, 0.0, 1e-6)
    assert gap_closed(1.0, 0.9, 0.2, 0.0)
    assert not gap_closed(np.inf, 0.0, 1.0, 1.0)


def test_honest_status_rule() -> None:
    assert honest_status("m", Status.OPTIMAL, 1.0, 1.0 - 1e-8, 0.0, 1e-6) == (Status.OPTIMAL, None)
    status, why = honest_status("m", Status.OPTIMAL, 1.0, 0.5, 0.0, 1e-6)
    assert status == Status.FEASIBLE and why is not None and "0.5" in why
    assert honest_status("m", Status.OPTIMAL, 1.0, None, 0.0, 1e-6)[0] == Status.FEASIBLE
    assert honest_status("m", Status.TIME_LIMIT, 1.0, 0.5, 0.0, 1e-6) == (Status.TIME_LIMIT, None)
    assert honest_status("m", Status.OPTIMAL, 1.0, 1.0 + 5e-10, 0.0, 1e-6)[0] == Status.OPTIMAL  # round-off
    with pytest.raises(SolverError, match="exceeds the certified objective"):
        honest_status("m", Status.OPTIMAL, 1.0, 1.0 + 1e-6, 0.0, 1e-6)


def test_optimal_far_above_its_own_bound_is_downgraded() -> None:
    """A method that calls a point far above its own lower bound "optimal" (as the raw LP did at
    eps * d = 60 before its rows were balanced: 2.2x the optimum) is reported feasible, with why."""
    inst = grid(5, 6, n_outputs=10, epsilon=30.0, eta=2.0, seed=0)

    def overclaiming(instance, options, progress, params: lp.LpOptions) -> RawSolution:
        raw = lp.method(instance, options, progress, params)
        raw.z = mechanisms.exponential(instance)  # a private but suboptimal mechanism, still "optimal"
        return raw

    with registered("overclaiming", overclaiming):
        sol = solve(inst, "overclaiming")
    ref = solve(inst, "colgen")
    assert ref.status == Status.OPTIMAL
    assert sol.objective > ref.objective * (1 + 1e-3) and sol.lower_bound == pytest.approx(ref.objective, rel=1e-6)
    assert sol.status == Status.FEASIBLE
    assert sol.extra["status_downgraded"]["reported"] == "optimal"
    info = sol.solve_info()
    assert info["status"] == "feasible"
    json.dumps(info, allow_nan=False)


def test_lower_bound_above_the_certified_objective_is_a_solver_error() -> None:
    """A method whose bound is invalid (here: the exact LP's bound raised by 1 %) is refused."""
    inst = grid(3, 4, n_outputs=5, epsilon=10.0, eta=2.0, seed=0)

    def broken(instance, options, progress, params: lp.LpOptions) -> RawSolution:
        raw = lp.method(instance, options, progress, params)
        raw.lower_bound = 1.01 * raw.lower_bound
        return raw

    with registered("broken-bound", broken), pytest.raises(SolverError, match="broken-bound: lower bound"):
        solve(inst, "broken-bound")


def test_unknown_method_option_is_named() -> None:
    inst = grid(3, 4, n_outputs=5, epsilon=10.0, eta=2.0, seed=0)
    with pytest.raises(InputError, match=r"unknown option\(s\) \['n_subset'\]; known options: .*'n_subsets'"):
        solve(inst, "benders", n_subset=2)
    with pytest.raises(InputError, match="unknown option"):
        solve(inst, "lp", max_iterations=3)
    with pytest.raises(InputError, match="unknown option"):
        solve(inst, "exp", seed=1)


def test_infinite_lower_bound_is_no_bound() -> None:
    """A method that found no bound (-inf) reports none: solve.json stays strict JSON."""
    inst = grid(3, 4, n_outputs=5, epsilon=10.0, eta=2.0, seed=0)

    def unbounded(instance, options, progress, params: lp.LpOptions) -> RawSolution:
        raw = lp.method(instance, options, progress, params)
        raw.lower_bound = -np.inf
        return raw

    with registered("no-bound", unbounded):
        sol = solve(inst, "no-bound")
    assert sol.lower_bound is None and sol.status == Status.FEASIBLE
    json.dumps(sol.solve_info(), allow_nan=False)


def test_cli_method_options_come_from_the_dataclasses(tmp_path, capsys) -> None:
    """`solve --help` options are generated from the option dataclasses; a flag the chosen method does
    not take is one error line naming it (exit 2), one it takes reaches the method."""
    from flows.cli import main
    from mdp_core.problem.io import write_instance

    write_instance(grid(3, 4, n_outputs=5, epsilon=10.0, eta=2.0, seed=0), tmp_path / "inst")
    code = main(["solve", str(tmp_path / "inst"), "--method", "lp", "--rho0", "3", "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "mdp-release: error: --method lp does not take --rho0 (solve --help lists its options)"
    ]
    assert not (tmp_path / "a").exists()
    code = main(
        [
            "solve",
            str(tmp_path / "inst"),
            "--method",
            "colgen",
            "--seeds-per-record",
            "1",
            "--no-heuristic",
            "--out",
            str(tmp_path / "b"),
        ]
    )
    assert code == 2 and "does not take --heuristic" in capsys.readouterr().err
    assert (
        main(
            [
                "solve",
                str(tmp_path / "inst"),
                "--method",
                "colgen",
                "--seeds-per-record",
                "1",
                "--out",
                str(tmp_path / "c"),
            ]
        )
        == 0
    )
    info = json.loads((tmp_path / "c" / "solve.json").read_text())
    assert info["options"]["seeds_per_record"] == 1 and info["extra"]["seeds_per_record"] == 1


def test_option_constraints_are_declared_once() -> None:
    """Options validate against their fields' declared constraints (mdp_core.declarations.options.validate)."""
    from mdp_core.declarations.methods import BendersOptions, ColgenOptions

    with pytest.raises(InputError, match=r"max_iterations must be an integer, got 2.5"):
        BendersOptions(max_iterations=2.5)
    with pytest.raises(InputError, match=r"smoothing must be >= 0 and < 1, got 1.0"):
        ColgenOptions(smoothing=1.0)
    with pytest.raises(InputError, match=r"gap_rel must be >= 0, got nan"):
        lp.LpOptions(gap_rel=float("nan"))
    with pytest.raises(InputError, match=r"master_solver must be one of \('simplex', 'ipm'\)"):
        ColgenOptions(master_solver="pdlp")
