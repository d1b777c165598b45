"""One entry point: solve an instance with a method, then certify (verify / repair / refuse).

``solve(instance, "lp")`` returns a :class:`Solution` whose ``z`` passed :func:`mdp_core.solvers.verify.verify`;
``solve_info()`` is what goes into solve.json.

Methods are declared in :mod:`mdp_core.declarations.methods` (:data:`METHODS`, their function imported on first use).
A method is a function ``f(instance, options: SolverOptions, progress, params: XOptions) -> RawSolution``:
:func:`solve` builds its declared ``XOptions`` from the keyword arguments it is given (which validates
them) and rejects unknown keys with an :class:`InputError` naming them and listing the known ones (the
way scikit-learn validates parameters), so a typo in a config or a command line is never ignored.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from mdp_core.declarations.methods import BASELINES, REGISTRY, GapOptions, Method
from mdp_core.declarations.options import Options, specs
from mdp_core.declarations.solver_options import MAX_MIX, SolverOptions
from mdp_core.errors import InputError, SolverError
from mdp_core.problem.instance import Instance
from mdp_core.runtime import isolate as isolate_mod
from mdp_core.solvers import highs
from mdp_core.solvers.result import RELEASABLE, RawSolution, Status, honest_status
from mdp_core.solvers.verify import Certificate, RepairReport, certify, objective

__all__ = ["METHODS", "BASELINES", "RawSolution", "Solution", "method_options", "options_class", "solve"]

Progress = Callable[[str], None]


@dataclass
class Solution:
    method: str
    z: np.ndarray  # certified (N, K)
    status: Status
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
            "status": Status(self.status).value,
            "objective": self.objective,
            "lower_bound": self.lower_bound,
            "upper_bound": self.objective,
            "gap": gap,
            "relative_gap": rel,
            "iterations": self.iterations,
            "seconds": round(self.seconds, 3),
            "solver": {"name": "HiGHS", "version": highs.version()},
            "options": self.options,
            "repair": self.repair.as_dict(),
            "extra": self.extra,
        }


# name -> declaration (mdp_core.declarations.methods.REGISTRY); its function is imported on first use
METHODS: dict[str, Method] = dict(REGISTRY)
DEFAULT_GAP = (GapOptions.gap_abs, GapOptions.gap_rel)  # the declared gap, for methods whose options have none
# From this many full-LP privacy rows (2 E K) a solve runs in a killable child process. HiGHS's preamble
# before its first interrupt check (dual simplex, dense synthetic instances, mdp_core.runtime.isolate): 1.1 s at
# 0.37 M rows, 11.9 s at 1.70 M, 16-33 s at 4.05 M; the child costs about 2 s (start-up and imports).
ISOLATE_MIN_ROWS = 300_000


def _declared(method: str) -> Method:
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    return METHODS[method]


def _function(method: str) -> Callable[..., RawSolution]:
    entry = _declared(method)
    if isinstance(entry.function, str):
        module, name = entry.function.split(":")
        entry = dataclasses.replace(entry, function=getattr(importlib.import_module(module), name))
        METHODS[method] = entry
    return cast(Callable[..., RawSolution], entry.function)


def options_class(method: str) -> type[Options]:
    """The options dataclass of ``method`` (its declaration in mdp_core.declarations.methods; no solver is imported)."""
    return _declared(method).options


def method_options(method: str, args: dict[str, Any]) -> Options:
    """``method``'s options dataclass built from ``args`` (which it validates); InputError on an unknown key."""
    cls = options_class(method)
    known = sorted(s.name for s in specs(cls))
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise InputError(f"method {method!r}: unknown option(s) {unknown}; known options: {known}")
    return cls(**args)


def solve(
    instance: Instance,
    method: str = "lp",
    options: SolverOptions | None = None,
    progress: Progress | None = None,
    max_mix: float = MAX_MIX,
    isolate: bool | None = None,
    **method_args: Any,
) -> Solution:
    """Solve with ``method`` and certify the result (raises PrivacyError if it cannot be made exact).

    ``method_args`` are the method's options (e.g. ``n_subsets=2`` for Benders, see
    :func:`options_class`); an unknown one is an InputError. Then :func:`honest_status`: "optimal"
    only when the method's own lower bound is within its requested gap of the certified objective.

    ``isolate``: solve in a child process that a stop (SIGTERM, UI Cancel, a stage timeout) kills within
    seconds, even inside HiGHS's presolve (:mod:`mdp_core.runtime.isolate`); None: when the full LP has at least
    :data:`ISOLATE_MIN_ROWS` privacy rows and this process may have children.
    """
    params = method_options(method, method_args)
    if options is not None and options.all_pairs and not _declared(method).all_pairs:
        takes = sorted(name for name, m in METHODS.items() if m.all_pairs)
        raise InputError(
            f"method {method!r} cannot certify every pair in the metric (all_pairs); methods that can: {takes}"
        )
    if isolate is None:
        isolate = 2 * instance.n_edges * instance.n_outputs >= ISOLATE_MIN_ROWS
    if isolate and isolate_mod.available() and all(_picklable(v) for v in method_args.values()):
        return isolate_mod.run_killable(
            solve,
            instance,
            method,
            options,
            progress=progress,
            what=f"{method} solve",
            max_mix=max_mix,
            isolate=False,
            **method_args,
        )
    f = _function(method)
    options = options or SolverOptions()
    t0 = time.perf_counter()
    raw = f(instance, options, progress, params)
    if raw.status not in RELEASABLE:
        raise SolverError(f"{method}: solver status {raw.status}")
    z, cert, rep = certify(instance, raw.z, max_mix=max_mix, all_pairs=options.all_pairs)
    obj = objective(instance, z)
    status, extra = Status(raw.status), dict(raw.extra)
    lower = raw.lower_bound if raw.lower_bound is not None and np.isfinite(raw.lower_bound) else None  # -inf: none
    if method not in BASELINES:
        gap_abs = getattr(params, "gap_abs", DEFAULT_GAP[0])
        gap_rel = getattr(params, "gap_rel", DEFAULT_GAP[1])
        status, reason = honest_status(method, status, obj, lower, gap_abs, gap_rel)
        if reason:
            extra["status_downgraded"] = {"reported": Status(raw.status).value, "reason": reason}
    return Solution(
        method=method,
        z=z,
        status=status,
        objective=obj,
        lower_bound=lower,
        iterations=raw.iterations,
        seconds=time.perf_counter() - t0,
        certificate=cert,
        repair=rep,
        options=options.as_dict() | {"max_mix": max_mix} | {k: v for k, v in method_args.items() if _plain(v)},
        extra=extra,
        trace=raw.trace,
    )


def _picklable(v: Any) -> bool:
    """A method argument that can travel to a child process (not an executor object, say)."""
    return _plain(v) or isinstance(v, (np.ndarray, list, tuple, dict))


def _plain(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool, type(None)))
