"""The standing solver benchmark: every method on the issue-10 instances, side by side in one run.

    python bench/suite.py                                   # the default set (see SETS), 2 methods each
    python bench/suite.py --instances syn500,rome500 --methods rowgen,colgen,lp --time-limit 900
    python bench/suite.py --list                            # instance names and what they are

Prints one JSON line per (instance, method): instance, N, K, edges, rows (full-LP privacy rows),
method, executor, workers, status, seconds, objective, lower_bound, gap, relative_gap, peak_rss_mb,
and auto's choice when the method is auto. Each run is a fresh process (so peak RSS is that run's
own high-water mark, and one run's crash or memory cannot touch another); runs of one instance are
consecutive, so compare ratios within one invocation: the machines are noisy.

Instances come from the project's own exporters (``mdp_core.datasets``); the road ones read
``../shared/data/rome_center`` and are skipped (with a JSON line saying so) when it is absent.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROME = ROOT.parent / "shared" / "data" / "rome_center"

# name -> (description, dataset kind, loader parameters)
INSTANCES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "grid500": ("paper grid 20x25, eps 10/km, eta 2 km", "grid", dict(rows=20, cols=25, n_outputs=100)),
    "grid500e2": ("paper grid 20x25, eps 2/km, eta 2 km", "grid", dict(rows=20, cols=25, n_outputs=100, epsilon=2.0)),
    "grid1000": ("grid 40x25, eps 10/km, eta 2 km", "grid", dict(rows=40, cols=25, n_outputs=100)),
    "grid2000": ("grid 50x40, eps 10/km, eta 2 km", "grid", dict(rows=50, cols=40, n_outputs=100)),
    "grid5000": ("grid 50x100, eps 10/km, eta 2 km", "grid", dict(rows=50, cols=100, n_outputs=100)),
    "grid10000": ("grid 100x100, eps 10/km, eta 2 km", "grid", dict(rows=100, cols=100, n_outputs=100)),
    "gridKN300": ("grid 15x20, K = N = 300, eps 10/km", "grid", dict(rows=15, cols=20, n_outputs=300)),
    "syn500": ("synthetic 3-D N(0,1), eta 2, eps 10 (paper)", "synthetic", dict(n_records=500, n_outputs=100)),
    "syn1000": ("synthetic 3-D N(0,1), eta 2, eps 10, N = 1000", "synthetic", dict(n_records=1000, n_outputs=100)),
    "disc210": (
        "disconnected 4-D N(0, 4^2), eta 2, eps 10",
        "synthetic",
        dict(n_records=210, n_outputs=45, dim=4, sigma=4.0),
    ),
    "rome500": (
        "Rome roads (rome_center), eta 2 km, eps 10/km (paper)",
        "road",
        dict(n_records=500, n_outputs=100, eta=2.0, epsilon=10.0),
    ),
    "rome1000": (
        "Rome roads (rome_center), eta 2 km, eps 10/km, N = 1000",
        "road",
        dict(n_records=1000, n_outputs=100, eta=2.0, epsilon=10.0),
    ),
    "romeB300": (
        "Rome roads, binding: eps 6/km, eta 0.4 km",
        "road",
        dict(n_records=300, n_outputs=60, eta=0.4, epsilon=6.0),
    ),
    "text500": ("GloVe 50-d words, eps * eta = 20", "text", dict(vectors="glove-6b-50d", n_records=500, n_outputs=100)),
}
DEFAULT = "grid500,syn500,rome500,text500,romeB300,gridKN300,disc210"


def load(name: str, rome: str | Path | None = None):
    """The instance ``name``; road instances read the Rome tables from ``rome`` (default: :data:`ROME`)."""
    from mdp_core.datasets import registry

    _, kind, params = INSTANCES[name]
    params = dict(params)
    if kind == "road":
        where = Path(rome) if rome else ROME
        if not where.is_dir():
            raise FileNotFoundError(f"{where} is absent")
        params |= {"nodes": str(where / "nodes.csv"), "edges": str(where / "edges.csv")}
    return registry.load(kind, params)


def _progress(name: str, method: str):
    """Progress lines of a run on stderr (stdout stays JSON lines)."""
    t0 = time.perf_counter()
    return lambda line: print(f"[{name} {method} {time.perf_counter() - t0:7.1f}s] {line}", file=sys.stderr, flush=True)


def _run(name: str, method: str, args: dict[str, Any], time_limit: float, out: Any) -> None:
    """Child process: solve once, send one result dict."""
    from mdp_core.highs import SolverOptions
    from mdp_core.solve import solve

    try:
        inst = load(name)
        t0 = time.perf_counter()
        sol = solve(inst, method, SolverOptions(time_limit=time_limit), progress=_progress(name, method), **args)
        row: dict[str, Any] = {
            "status": str(sol.status),
            "seconds": round(time.perf_counter() - t0, 2),
            "objective": sol.objective,
            "lower_bound": sol.lower_bound,
            "gap": sol.gap,
            "relative_gap": None if sol.gap is None else sol.gap / abs(sol.objective),
            "iterations": sol.iterations,
            "repair_mix": sol.repair.max_mix,
            "executor": sol.extra.get("executor"),
        }
        if "auto" in sol.extra:
            row["auto"] = sol.extra["auto"]["method"]
    except Exception as e:  # a failed run is a result too
        row = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    row["peak_rss_mb"] = round(_peak_kb() / 1024, 1)
    out.send(row)


def describe(name: str) -> dict[str, Any]:
    inst = load(name)
    from mdp_core.auto import features

    f = features(inst)
    return {
        "N": f["n_records"],
        "K": f["n_outputs"],
        "edges": f["n_edges"],
        "rows": 2 * f["n_edges"] * f["n_outputs"],
        "mean_degree": f["mean_degree"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default=DEFAULT)
    ap.add_argument("--methods", default="auto,lp")
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--gap-rel", type=float, default=1e-6)
    ap.add_argument("--subsets", type=int, default=2, help="Benders subsets M")
    ap.add_argument("--executor", default="auto", help="Benders executor: auto, serial, process, dask")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for name, (text, kind, params) in INSTANCES.items():
            print(f"{name:10s} {kind:9s} {text}  {params}")
        return
    ctx = mp.get_context("spawn")
    for name in a.instances.split(","):
        if name not in INSTANCES:
            raise SystemExit(f"unknown instance {name!r}; --list shows them")
        try:
            base = {"instance": name, **describe(name)}
        except FileNotFoundError as e:
            print(json.dumps({"instance": name, "status": "skipped", "reason": str(e)}), flush=True)
            continue
        for method in a.methods.split(","):
            args: dict[str, Any] = {"gap_rel": a.gap_rel} if method not in ("exp", "laplace", "constopt") else {}
            if method == "benders":
                args |= {"n_subsets": a.subsets, "executor": a.executor}
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_run, args=(name, method, args, a.time_limit, child))
            p.start()
            child.close()
            try:
                row = parent.recv()
            except EOFError:
                row = {"status": "crashed", "exitcode": None}
            p.join()
            if p.exitcode:
                row |= {"exitcode": p.exitcode}
            print(json.dumps(base | {"method": method, "workers": os.cpu_count()} | row), flush=True)


def _peak_kb() -> int:
    """Peak RSS (KB) of this process and of its finished children: solve() runs large solves in a child
    process (mdp_core.isolate), whose memory RUSAGE_SELF does not see."""
    return max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
