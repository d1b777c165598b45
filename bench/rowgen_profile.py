"""Where rowgen's time goes, round by round: wall and CPU seconds of each phase, one JSON line per run.

    python bench/rowgen_profile.py --instance rome500 --gap-rel 1e-3
    python bench/rowgen_profile.py --instance syn1000 --gap-rel 1e-3 --ipm-tol 1e-8   # the pre-2026-11-24 LPs

Runs ``rowgen.method`` once (threads = 1) on a ``bench/suite.py`` instance and times its phases by
wrapping the module's functions: each round's LP (``run_robust``), the closure (``smooth_to_mdp``),
the violation scan, the Lagrangian bound, the model building, and with ``lagrangian_steps`` the row-sum
Lagrangian's steps (``ascend``; its subproblem solves are ``lagrangian_run_robust``, not the LP's). CPU seconds are printed beside wall
seconds because on the shared machine wall time swings +-30 % with the other jobs' load while one
single-threaded solve's CPU time hardly moves: compare variants by CPU seconds. A phase's CPU is its own
thread's (``time.thread_time``: the closure runs in a second thread beside the next round's LP, so the
phases' wall seconds overlap); the total is the process's (``time.process_time``).
``--ipm-tol`` overrides the interior point's relative gap tolerance (:func:`mdp_core.solvers.rowgen.ipm_tolerance`)
before every round. Progress lines go to stderr; the mechanism is verified at the end.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="rome500", help="a bench/suite.py instance name")
    ap.add_argument("--gap-rel", type=float, default=1e-3)
    ap.add_argument("--time-limit", type=float, default=1800.0)
    ap.add_argument("--ipm-tol", type=float, default=None, help="interior point relative gap tolerance (override)")
    ap.add_argument("--rome", default=None, help="directory of the Rome node/edge tables (default: suite's)")
    ap.add_argument("--threads", type=int, default=1, help="HiGHS threads (HiPO, with highspy-extras, uses them)")
    ap.add_argument("--seed", type=int, default=None, help="the instance's exporter seed (default: its own, 0)")
    ap.add_argument("--options", default="{}", help="further RowgenOptions as JSON, e.g. '{\"neighbours\": 3}'")
    return ap


def _instrument(a: argparse.Namespace, timers: dict[str, float]) -> None:
    """Wrap rowgen's phases and HiGHS's runs so that their wall and CPU seconds add up in ``timers``."""
    from mdp_core.solvers import highs, rowgen

    def timed(mod: Any, name: str) -> None:
        orig = getattr(mod, name)

        def wrapper(*args: Any, **kw: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            # the Lagrangian's subproblem solves (serial executor) run in the closure's thread
            key = "lagrangian_run_robust" if threading.current_thread().name == "rowgen-closure" else name
            try:
                return orig(*args, **kw)
            finally:
                timers[key] = timers.get(key, 0.0) + time.perf_counter() - t
                timers[key + "_cpu"] = timers.get(key + "_cpu", 0.0) + time.thread_time() - c

        setattr(mod, name, wrapper)

    for name in ("smooth_to_mdp", "violated", "lower_bound", "new_model"):
        timed(rowgen, name)
    timed(rowgen.lagrangian, "ascend")  # the Lagrangian steps (--options '{"lagrangian_steps": 30}')
    if a.ipm_tol is not None:
        run_robust = highs.run_robust

        def with_tolerance(h: Any, *args: Any, **kw: Any) -> Any:
            highs.set_options(h, ipm_optimality_tolerance=a.ipm_tol, optimality_tolerance=max(a.ipm_tol, 1e-7))
            return run_robust(h, *args, **kw)

        highs.run_robust = with_tolerance
    timed(highs, "run_robust")


def main(argv: list[str] | None = None) -> None:
    a = _parser().parse_args(argv)

    sys.path.insert(0, str(ROOT / "bench"))
    import suite  # bench/ is not a package

    from mdp_core.declarations.solver_options import SolverOptions
    from mdp_core.solvers import rowgen
    from mdp_core.solvers.verify import objective, verify

    inst = suite.load(a.instance, a.rome, a.seed)
    timers: dict[str, float] = {}

    _instrument(a, timers)
    lp_cpu: list[float] = []
    t0 = time.perf_counter()

    def progress(line: Any) -> None:
        if " Lagrangian: " not in str(line):  # a round's own line, not the ascent's progress
            lp_cpu.append(round(timers.get("run_robust_cpu", 0.0) - sum(lp_cpu), 1))
        phases = json.dumps({k: round(v, 1) for k, v in timers.items()})
        print(f"[{a.instance} {time.perf_counter() - t0:7.1f}s] {line}  {phases}", file=sys.stderr, flush=True)

    params = rowgen.RowgenOptions(gap_rel=a.gap_rel, **json.loads(a.options))
    c0 = time.process_time()
    raw = rowgen.method(inst, SolverOptions(time_limit=a.time_limit, threads=a.threads), progress, params)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    obj, tr = objective(inst, raw.z), raw.trace
    lb = raw.lower_bound if raw.lower_bound is not None else float("-inf")
    out = {
        "instance": a.instance,
        "seed": a.seed,
        "N": inst.n_records,
        "K": inst.n_outputs,
        "edges": int(inst.n_edges),
        "ipm_tol": a.ipm_tol if a.ipm_tol is not None else rowgen.ipm_tolerance(a.gap_rel),
        "options": json.loads(a.options),
        "threads": a.threads,
        "status": str(raw.status),
        "rounds": len(tr),
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "lp_seconds": [round(float(x), 1) for x in tr.lp_seconds],
        "lower_bound_after_round": [float(x) for x in tr.lower_bound],
        "upper_bound_after_round": [float(x) for x in tr.upper_bound],
        "lagrangian": raw.extra.get("lagrangian"),
        "lp_cpu_seconds": lp_cpu,
        "rows": [int(x) for x in tr.rows],
        "columns": raw.extra.get("columns"),  # the model's variables at the end (N K without support_tau)
        "gap_after_round": [float(g) for g in tr.gap / tr.upper_bound],
        "objective": obj,
        "lower_bound": lb,
        "relative_gap": (obj - lb) / abs(obj),
        "verified": bool(verify(inst, raw.z).passed),
        "phases": {k: round(v, 1) for k, v in timers.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
