"""Full LP vs Benders decomposition, side by side in one process; prints one JSON line per run.

Instances: grid N in {200, 500, 1000}, K = 100, eta = 2 km, eps in {10, 2} per km, and
3-D standard-normal synthetic points, eta = 2, eps = 10, N in {100, 200, 500}, K = 100.

    python bench/bench_solvers.py --instances grid200 --eps 10 --methods lp,benders \
        --partition kmdv --subsets 4 --time-limit 600
    python bench/bench_solvers.py --instances grid200 --eps 10 --methods lp,colgen

Every run goes through ``mdp_core.solvers.solve.solve`` (so the Benders mechanism is certified exactly like
the LP's). ``peak_rss_mb`` is the process's resident high-water mark after the run (monotone over
the process: run one method per process with --methods for a per-method peak).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from mdp_core.problem.datasets import grid, synthetic
from mdp_core.solvers import lp
from mdp_core.solvers.solve import solve

GRIDS = {"grid200": (10, 20), "grid500": (20, 25), "grid1000": (40, 25)}
SYNTH = {"syn100": 100, "syn200": 200, "syn500": 500}


def build(name: str, eps: float, k: int, seed: int):
    if name in GRIDS:
        r, c = GRIDS[name]
        return grid(r, c, k, eps, 2.0, seed=seed)
    if name in SYNTH:
        return synthetic(SYNTH[name], k, 3, 1.0, eps, 2.0, seed)
    raise SystemExit(f"unknown instance {name!r}; choose from {sorted(GRIDS) + sorted(SYNTH)}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default="grid200,grid500,grid1000,syn100,syn200,syn500")
    ap.add_argument("--eps", default="10,2", help="grid eps values per km (synthetic always uses 10)")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--methods", default="lp,benders")
    ap.add_argument("--partition", default="kmdv")
    ap.add_argument("--subsets", type=int, default=25)
    ap.add_argument("--executor", default="auto")
    ap.add_argument("--initial-cuts", action="store_true")
    ap.add_argument("--no-heuristic", action="store_true", help="Benders without its closure primal heuristic")
    ap.add_argument("--gap-abs", type=float, default=0.0, help="Benders absolute gap (the paper's xi = 0.01)")
    ap.add_argument("--max-iterations", type=int, default=1000)
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace-dir", default=None, help="write each Benders trace as <dir>/<instance>_eps<eps>.parquet")
    return ap


def main(argv: list[str] | None = None) -> None:
    a = _parser().parse_args(argv)
    for name in a.instances.split(","):
        eps_values = [float(e) for e in a.eps.split(",")] if name in GRIDS else [10.0]
        for eps in eps_values:
            inst = build(name, eps, a.k, a.seed)
            for m in a.methods.split(","):
                print(json.dumps(_run(inst, name, eps, m, a)), flush=True)


def _method_args(m: str, a: argparse.Namespace) -> dict:
    """The keyword arguments of ``solve`` for method ``m`` from the command line."""
    if m == "benders":
        return dict(
            partition=a.partition,
            n_subsets=a.subsets,
            seed=a.seed,
            executor=a.executor,
            initial_cuts=a.initial_cuts,
            max_iterations=a.max_iterations,
            heuristic=not a.no_heuristic,
            gap_abs=a.gap_abs,
        )
    if m == "colgen":
        return dict(max_iterations=a.max_iterations)
    return {}


def _run(inst, name: str, eps: float, m: str, a: argparse.Namespace) -> dict:
    """One benchmark row: solve ``inst`` by method ``m``; an error is a row too."""
    opts = lp.SolverOptions(time_limit=a.time_limit)
    args = _method_args(m, a)
    row = {
        "instance": name,
        "N": inst.n_records,
        "K": inst.n_outputs,
        "eps": eps,
        "edges": inst.n_edges,
        "method": m,
        "partitioner": a.partition if m == "benders" else None,
        "subsets": a.subsets if m == "benders" else None,
    }
    t0 = time.perf_counter()
    try:
        sol = solve(inst, m, opts, **args)
        row |= {
            "status": sol.status,
            "seconds": round(time.perf_counter() - t0, 2),
            "iterations": sol.iterations,
            "objective": sol.objective,
            "lower_bound": sol.lower_bound,
            "gap": sol.gap,
            "repair_mix": sol.repair.max_mix,
        }
        if m == "benders":
            row |= _benders_fields(sol, name, eps, a)
        if m == "colgen":
            row |= _colgen_fields(sol, name, eps, a)
    except Exception as e:  # report and go on: a benchmark row per attempt
        row |= {"status": f"error: {type(e).__name__}: {e}", "seconds": round(time.perf_counter() - t0, 2)}
    row["peak_rss_mb"] = round(_peak_kb() / 1024, 1)
    return row


def _benders_fields(sol, name: str, eps: float, a: argparse.Namespace) -> dict:
    """Benders' own columns of a row (and its trace written to --trace-dir)."""
    ex = sol.extra
    row = {
        k: ex[k]
        for k in (
            "optimality_cuts",
            "master_rows",
            "subproblems",
            "executor",
            "rho_final",
            "initial_cuts",
        )
    }
    row["boundary_fraction"] = ex["partition"]["boundary_fraction"]
    tr = sol.trace
    row["master_seconds"] = round(float(tr.master_seconds.sum()), 2)
    row["sub_seconds"] = round(float(tr.sub_total_seconds.sum()), 2)
    row["stop_reason"] = ex["stop_reason"]
    row["heuristic"] = not a.no_heuristic
    row["iteration1_seconds"] = round(float(tr.elapsed_seconds.iloc[0]), 2) if len(tr) else None
    row["iteration1_upper_bound"] = float(tr.upper_bound.iloc[0]) if len(tr) else None
    if a.trace_dir:
        Path(a.trace_dir).mkdir(parents=True, exist_ok=True)
        tr.to_parquet(Path(a.trace_dir) / f"{name}_eps{eps:g}_{a.partition}_m{a.subsets}.parquet")
    return row


def _colgen_fields(sol, name: str, eps: float, a: argparse.Namespace) -> dict:
    """Column generation's own columns of a row (and its trace written to --trace-dir)."""
    ex, tr = sol.extra, sol.trace
    row = {k: ex[k] for k in ("lower_bound_pricing", "columns", "pricing_rows", "n_components")}
    row["master_seconds"] = round(float(tr.master_seconds.sum()), 2)
    row["pricing_seconds"] = round(float(tr.pricing_seconds.sum()), 2)
    if a.trace_dir:
        Path(a.trace_dir).mkdir(parents=True, exist_ok=True)
        tr.to_parquet(Path(a.trace_dir) / f"{name}_eps{eps:g}_colgen.parquet")
    return row


def _peak_kb() -> int:
    """Peak RSS (KB) of this process and of its finished children: solve() runs large solves in a child
    process (mdp_core.runtime.isolate), whose memory RUSAGE_SELF does not see."""
    return max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


if __name__ == "__main__":
    main(sys.argv[1:])
