"""What every method returns, the statuses it may report, and the rule that makes a status honest.

This module imports nothing from the solvers, so every method (lp, colgen, benders, mechanisms,
constopt, ...) and :mod:`mdp_core.solvers.solve` can depend on it without an import cycle.

* :class:`Status`: the only place a status string is spelled. Values are the strings written to
  solve.json (a ``StrEnum``: ``Status.OPTIMAL == "optimal"`` and it serialises as ``"optimal"``).
* :class:`RawSolution`: a method's answer before certification.
* :func:`gap_closed`: the stopping rule of the decomposition methods.
* :func:`honest_status`: applied by :func:`mdp_core.solvers.solve.solve` after certification. "optimal" is
  kept only when the method's own valid lower bound is within the requested gap of the *certified*
  objective; otherwise it becomes "feasible" (and the reason goes into ``extra``). A lower bound
  above the certified objective cannot be valid (every certified mechanism is feasible for the LP),
  so it is a solver bug: :class:`~mdp_core.errors.SolverError`, nothing is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from mdp_core.errors import SolverError

if TYPE_CHECKING:  # annotations only: the config and the command line import this module, numpy-free
    import numpy as np
    import pandas as pd

# A lower bound may exceed the certified objective by this much (relative, times max(1, |objective|))
# before it counts as a bug: round-off of the bound's own sums and of the objective's.
BOUND_TOLERANCE = 1e-9


class Status(StrEnum):
    """A method's or a solver's status (the value is what solve.json says)."""

    OPTIMAL = "optimal"  # a valid lower bound is within the requested gap
    FEASIBLE = "feasible"  # a feasible mechanism, gap open (stalled, no bound, or a downgraded "optimal")
    TIME_LIMIT = "time_limit"
    ITERATION_LIMIT = "iteration_limit"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    OBJECTIVE_BOUND = "objective_bound"
    OBJECTIVE_TARGET = "objective_target"
    INTERRUPTED = "interrupted"
    ERROR = "error"  # the solver failed (the HiGHS status text goes with it)


# Statuses whose mechanism may go on to certification (and be released if it passes).
RELEASABLE = frozenset({Status.OPTIMAL, Status.TIME_LIMIT, Status.ITERATION_LIMIT, Status.FEASIBLE})
# Statuses a limit produces: the solution is usable, the run just stopped early.
LIMITS = frozenset({Status.TIME_LIMIT, Status.ITERATION_LIMIT})


@dataclass
class RawSolution:
    """What a method returns before certification."""

    z: np.ndarray
    status: Status = Status.OPTIMAL
    lower_bound: float | None = None  # a proven lower bound on the LP optimum, if the method has one
    iterations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    trace: pd.DataFrame | None = None  # per-iteration table for iterative methods (-> trace.parquet)


def gap_closed(upper: float, lower: float, gap_abs: float, gap_rel: float) -> bool:
    """The stopping rule shared by the decomposition methods and :func:`honest_status`: a finite UB
    with UB - LB <= gap_abs or <= gap_rel * |UB| (bounds in one cost unit)."""
    gap = upper - lower
    return bool(math.isfinite(upper) and (gap <= gap_abs or gap <= gap_rel * abs(upper)))


def honest_status(
    method: str, status: Status, objective: float, lower_bound: float | None, gap_abs: float, gap_rel: float
) -> tuple[Status, str | None]:
    """(status to report, reason for a downgrade or None) for a certified mechanism of ``objective``.

    Raises SolverError when ``lower_bound`` exceeds ``objective`` by more than
    ``BOUND_TOLERANCE * max(1, |objective|)``: no valid bound can (the certified mechanism is feasible).
    """
    status = Status(status)
    if lower_bound is not None and lower_bound > objective + BOUND_TOLERANCE * max(1.0, abs(objective)):
        raise SolverError(
            f"{method}: lower bound {lower_bound:.12g} exceeds the certified objective {objective:.12g} "
            "(an invalid bound: solver bug, nothing written)"
        )
    if status != Status.OPTIMAL:
        return status, None
    if lower_bound is None:
        return Status.FEASIBLE, f"{method} has no lower bound: optimality is not proven"
    if not gap_closed(objective, lower_bound, gap_abs, gap_rel):
        return Status.FEASIBLE, (
            f"solver reported optimal, but the lower bound {lower_bound:.12g} is not within the requested gap "
            f"(gap_abs {gap_abs:g}, gap_rel {gap_rel:g}) of the certified objective {objective:.12g}"
        )
    return status, None
