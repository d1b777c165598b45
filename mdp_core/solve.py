"""One entry point: solve an instance with a method, then certify (verify / repair / refuse).

``solve(instance, "lp")`` returns a :class:`Solution` whose ``z`` passed :func:`verify.verify`;
``solve_info()`` is what goes into solve.json.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import highspy
import numpy as np
import pandas as pd

from mdp_core import lp, mechanisms
from mdp_core.errors import InputError, SolverError
from mdp_core.instance import Instance
from mdp_core.verify import Certificate, RepairReport, certify, objective

Progress = Callable[[str], None]


@dataclass
class RawSolution:
    """What a method returns before certification."""

    z: np.ndarray
    status: str = "optimal"
    lower_bound: float | None = None  # a proven lower bound on the LP optimum, if the method has one
    iterations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    trace: pd.DataFrame | None = None  # per-iteration table for iterative methods (-> trace.parquet)


@dataclass
class Solution:
    method: str
    z: np.ndarray  # certified (N, K)
    status: str
    objective: float  # expected utility loss of the certified z
    lower_bound: float | None
    iterations: int
    seconds: float
    certificate: Certificate
    repair: RepairReport
    options: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    trace: pd.DataFrame | None = None

    @property
    def gap(self) -> float | None:
        if self.lower_bound is None:
            return None
        return max(self.objective - self.lower_bound, 0.0)

    def solve_info(self) -> dict[str, Any]:
        """The solve.json content (minus the certificate, which write_mechanism adds)."""
        gap = self.gap
        rel = None if gap is None else gap / max(abs(self.objective), 1e-300)
        return {
            "method": self.method,
            "status": self.status,
            "objective": self.objective,
            "lower_bound": self.lower_bound,
            "upper_bound": self.objective,
            "gap": gap,
            "relative_gap": rel,
            "iterations": self.iterations,
            "seconds": round(self.seconds, 3),
            "solver": {"name": "HiGHS", "version": highspy.Highs().version()},
            "options": self.options,
            "repair": self.repair.as_dict(),
            "extra": self.extra,
        }


def _lp(instance: Instance, options: lp.SolverOptions, progress: Progress | None, **_: Any) -> RawSolution:
    res = lp.solve_lp(instance, options, progress)
    # A proven lower bound from the duals (lp.lagrangian_bound), valid whatever HiGHS's tolerances:
    # HiGHS's "optimal" objective itself can sit slightly above the true optimum.
    lower = float(res.lower_bound) if np.isfinite(res.lower_bound) else None
    return RawSolution(
        res.z,
        res.status,
        lower,
        res.iterations,
        {"n_components": res.n_components, "largest_component": res.largest_component, "fallbacks": res.fallbacks},
    )


def _exp(instance: Instance, options: lp.SolverOptions, progress: Progress | None, **_: Any) -> RawSolution:
    return RawSolution(mechanisms.exponential(instance), status="closed_form")


# name -> callable or "module:function" (imported on first use, so that optional methods cost nothing).
# A method is called as f(instance, options, progress, **method_args) and returns a RawSolution.
METHODS: dict[str, Callable[..., RawSolution] | str] = {
    "lp": _lp,
    "exp": _exp,
    "benders": "mdp_core.benders:method",
    "colgen": "mdp_core.colgen:method",
    "laplace": "mdp_core.mechanisms:planar_laplace_method",
    "constopt": "mdp_core.constopt:method",
}


def _resolve(method: str) -> Callable[..., RawSolution]:
    f = METHODS[method]
    if isinstance(f, str):
        module, name = f.split(":")
        f = getattr(importlib.import_module(module), name)
        METHODS[method] = f
    return f


def solve(
    instance: Instance,
    method: str = "lp",
    options: lp.SolverOptions | None = None,
    progress: Progress | None = None,
    max_mix: float = 1e-2,
    **method_args: Any,
) -> Solution:
    """Solve with ``method`` and certify the result (raises PrivacyError if it cannot be made exact)."""
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    options = options or lp.SolverOptions()
    t0 = time.perf_counter()
    raw = _resolve(method)(instance, options, progress, **method_args)
    if raw.status not in ("optimal", "closed_form", "estimate", "time_limit", "iteration_limit", "feasible"):
        raise SolverError(f"{method}: solver status {raw.status}")
    z, cert, rep = certify(instance, raw.z, max_mix=max_mix)
    return Solution(
        method=method,
        z=z,
        status=raw.status,
        objective=objective(instance, z),
        lower_bound=raw.lower_bound,
        iterations=raw.iterations,
        seconds=time.perf_counter() - t0,
        certificate=cert,
        repair=rep,
        options=options.as_dict() | {"max_mix": max_mix} | {k: v for k, v in method_args.items() if _plain(v)},
        extra=raw.extra,
        trace=raw.trace,
    )


def _plain(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool, type(None)))
