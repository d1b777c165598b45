"""Where a HiGHS solve cannot be interrupted: the time of HiGHS's first interrupt check, per phase.

    python bench/highs_phases.py                      # N = 300, K = 100 dense synthetic, dual simplex, 60 s
    python bench/highs_phases.py --n 150 --k 40 --solver ipm --time-limit 20

Builds the full PMO LP of a dense synthetic instance (3-D N(0, 1), eta 2, eps 10: the papers' setting),
runs HiGHS with its log captured through the logging callback (timestamps; nothing printed) and its
simplex / interior-point interrupt callbacks counted, and prints one JSON line: rows, nonzeros, the
seconds into ``run()`` at which presolve started and ended and the algorithm started (from HiGHS's own
log lines), ``first_check`` (the first interrupt callback: until then a stop request cannot reach
HiGHS), ``largest_gap`` between two checks after that, and the number of checks. Measured here (2
shared cores, HiGHS 1.15.1, dual simplex): 0.37 M rows first check at 1.1 s; 1.70 M at 11.9 s; 4.05 M at
33.1 s on a busy machine (presolve 5.6-22.0 s, removing nothing) and 15.6 s on a quieter one (largest
gap between checks afterwards 1.7 s); interior point at 4.05 M: 11.2 s. That is why :mod:`mdp_core.runtime.isolate` exists.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--solver", choices=("simplex", "ipm"), default="simplex")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args()

    from mdp_core.declarations.solver_options import SolverOptions
    from mdp_core.problem.datasets import synthetic
    from mdp_core.solvers.highs import model_status, new_highs, pass_model, scale_costs, set_option
    from mdp_core.solvers.lp import build_pmo

    inst = synthetic(n_records=args.n, n_outputs=args.k, epsilon=10.0, seed=0)
    w, _ = scale_costs(inst.prior[:, None] * inst.costs)
    model = build_pmo(w, inst.edges, inst.distances, inst.epsilon)
    h = new_highs(SolverOptions(solver=args.solver, time_limit=args.time_limit))
    pass_model(h, model)
    set_option(h, "output_flag", True)  # into the logging callback only
    set_option(h, "log_to_console", False)
    logs: list[tuple[float, str]] = []
    checks: list[float] = []
    t0 = [0.0]
    h.cbLogging.subscribe(lambda e: logs.append((time.perf_counter() - t0[0], e.message.strip())))
    for cb in (h.cbSimplexInterrupt, h.cbIpmInterrupt):
        cb.subscribe(lambda e: checks.append(time.perf_counter() - t0[0]))
    t0[0] = time.perf_counter()
    h.run()
    total = time.perf_counter() - t0[0]

    def when(text: str) -> float | None:
        return next((round(t, 2) for t, m in logs if text in m), None)

    gaps = np.diff(checks) if len(checks) > 1 else np.zeros(0)
    print(
        json.dumps(
            {
                "n": args.n,
                "k": args.k,
                "solver": args.solver,
                "rows": int(model.a.shape[0]),
                "nonzeros": int(model.a.nnz),
                "presolve_start": when("Presolving model"),
                "presolve_end": when("Presolve reductions") or when("Presolve :"),
                "algorithm_start": when("Using dual simplex") or when("Interior point solve"),
                "first_check": round(checks[0], 2) if checks else None,
                "largest_gap": round(float(gaps.max()), 3) if gaps.size else None,
                "checks": len(checks),
                "run_seconds": round(total, 2),
                "status": model_status(h)[1],
            }
        )
    )


if __name__ == "__main__":
    main()
