"""The options every method shares: the HiGHS settings (:class:`SolverOptions`) and the repair limit
(:class:`RepairOptions`). Declarations only (:mod:`mdp_core.declarations.options`), importing neither highspy nor numpy,
so the release config and the command line read them cheaply. :mod:`mdp_core.solvers.highs` (the adapter that
applies the HiGHS settings) re-exports every name here.

No ``from __future__ import annotations``: the fields' types are read as objects (mdp_core.declarations.options).
"""

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from mdp_core.declarations.options import Options, option
from mdp_core.errors import InputError

INF = float("inf")  # HiGHS's kHighsInf is IEEE infinity
SOLVERS = ("simplex", "ipm")


@dataclass(frozen=True)
class SolverOptions(Options):
    """HiGHS settings used for every LP this library solves.

    ``solver``: "simplex" (dual simplex, default) or "ipm" (interior point with crossover).
    ``time_limit``: seconds for the whole solve (all components / all Benders iterations).
    ``threads``: HiGHS threads (0 = HiGHS default).
    Tolerances are HiGHS's primal / dual feasibility tolerances (costs are scaled to max 1). The dual
    default is 1e-10: at 1e-9 dual simplex stopped 2.0e-7 above the optimum on grid(10, 10, K=20)
    (dual bound 6.6e-7 below it); 1e-10 closed the gap to 2e-13 at no measurable cost (grid 15x20,
    K=60: 17.6 s vs 18.1 s).

    ``all_pairs`` (issue 51): certify eps against the metric distance of every two records of one component of
    the mDP graph, not only its edges (pairs within eta): the guarantee then reads one rate, eps per unit for
    any two records (stretch 1). Needs record coordinates of the metric; taken by the methods that declare it
    (:attr:`mdp_core.declarations.methods.Method.all_pairs`: lp over every pair, rowgen lazily, and the
    baselines that are private for every pair by construction). Not a HiGHS setting, but every method and the
    certify gate read it, so it lives with them here. Off here (the papers' instances, the library and the command
    line solve the mDP graph's LP); a release's ``[solve] all_pairs`` is on unless set or the method cannot
    (:func:`flows.config.release_all_pairs`).
    """

    solver: str = option("simplex", "LP algorithm: dual simplex or interior point", choices=SOLVERS)
    threads: int = option(0, "HiGHS threads (0 = HiGHS default)", ge=0)
    time_limit: float = option(INF, "seconds for the whole solve", gt=0, metavar="SECONDS")
    primal_tolerance: float = option(1e-9, "HiGHS primal feasibility tolerance", gt=0, lt=1e-3, exposed=False)
    dual_tolerance: float = option(1e-10, "HiGHS dual feasibility tolerance", gt=0, lt=1e-3, exposed=False)
    presolve: bool = option(True, "HiGHS presolve", exposed=False)
    all_pairs: bool = option(
        False,
        "certify eps against the metric distance of every two records of a component, not only the mDP graph's "
        "edges within eta: the release then states and is charged at one rate, eps x d(r, r') for any two records "
        "of a component (stretch 1, no graph stretch: Chatzikokolakis et al. 2013 with the metric itself; "
        "docs/privacy.md). Needs record coordinates; off in the library, on in a release (rowgen's rows beyond the "
        "edges by their worth, far_rows_per_round = 0: rowgen.far_count, 1 a round on roads, where the far pairs are "
        "worth under a tenth of the gap; at the release size, 500 x 500 records and outputs on Rome's roads: the "
        "graph's CPU seconds, +0.04 percent error; bench/HISTORY.md)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        cores = os.cpu_count() or 1
        if self.threads > cores:  # HiGHS aborts the process (SIGABRT, no message) on absurd thread counts
            raise InputError(f"threads={self.threads} exceeds this machine's {cores} cores (0 = HiGHS default)")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["time_limit"] = None if math.isinf(self.time_limit) else self.time_limit
        return d


@dataclass(frozen=True)
class RepairOptions(Options):
    """How far :func:`mdp_core.solvers.verify.certify` may repair a method's mechanism before refusing it."""

    max_mix: float = option(
        1e-2, "largest share of uniform noise the exact repair may mix in before refusing", ge=0, le=1
    )


MAX_MIX: float = RepairOptions.max_mix  # the declared default (mdp_core.solvers.solve.solve's)


# The executor interface (implementations: mdp_core.runtime.executor), declared here so that the
# option declarations name the choices without importing a process pool.
Worker = Callable[[Any], Any]  # request -> result, stateful
Factory = Callable[[Any], Worker]  # spec -> worker; must be picklable (a module-level function or class)
EXECUTORS = ("auto", "serial", "process", "dask")


class Executor(Protocol):
    """Runs requests on stateful workers, one worker per spec; results in request order."""

    name: str

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None: ...

    def solve(self, requests: Sequence[Any]) -> list[Any]: ...

    def close(self) -> None: ...
