"""The HiGHS settings (:class:`SolverOptions`) and the algorithms' names: declarations only, importing
neither highspy nor numpy, so the release config and the command line can read their defaults and help
texts cheaply. :mod:`mdp_core.highs` (the adapter that applies them) re-exports every name here.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

from mdp_core.errors import InputError

INF = float("inf")  # HiGHS's kHighsInf is IEEE infinity
SOLVERS = ("simplex", "ipm")


@dataclass(frozen=True)
class SolverOptions:
    """HiGHS settings used for every LP this library solves.

    ``solver``: "simplex" (dual simplex, default) or "ipm" (interior point with crossover).
    ``time_limit``: seconds for the whole solve (all components / all Benders iterations).
    ``threads``: HiGHS threads (0 = HiGHS default).
    Tolerances are HiGHS's primal / dual feasibility tolerances (costs are scaled to max 1). The dual
    default is 1e-10: at 1e-9 dual simplex stopped 2.0e-7 above the optimum on grid(10, 10, K=20)
    (dual bound 6.6e-7 below it); 1e-10 closed the gap to 2e-13 at no measurable cost (grid 15x20,
    K=60: 17.6 s vs 18.1 s).
    """

    solver: str = field(
        default="simplex", metadata={"help": "dual simplex (default) or interior point", "choices": SOLVERS}
    )
    threads: int = field(default=0, metadata={"help": "HiGHS threads (0 = HiGHS default)"})
    time_limit: float = field(default=INF, metadata={"help": "seconds for the whole solve", "metavar": "SECONDS"})
    primal_tolerance: float = 1e-9
    dual_tolerance: float = 1e-10
    presolve: bool = True

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise InputError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if isinstance(self.threads, bool) or int(self.threads) != self.threads or self.threads < 0:
            raise InputError(f"threads must be an integer >= 0, got {self.threads!r}")
        cores = os.cpu_count() or 1
        if self.threads > cores:  # HiGHS aborts the process (SIGABRT, no message) on absurd thread counts
            raise InputError(f"threads={self.threads} exceeds this machine's {cores} cores (0 = HiGHS default)")
        if not self.time_limit > 0:
            raise InputError(f"time_limit must be > 0 seconds, got {self.time_limit}")
        for name in ("primal_tolerance", "dual_tolerance"):
            v = getattr(self, name)
            if not (0 < v < 1e-3):
                raise InputError(f"{name} must be in (0, 1e-3), got {v}")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["time_limit"] = None if math.isinf(self.time_limit) else self.time_limit
        return d
